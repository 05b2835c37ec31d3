"""TDL027 cuda-given-a-device-that-may-be-the-cpu."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.cuda_uses import device_that_may_be_the_cpu
from torchdevlint.analysis.flow.values import Kind
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import CUDA_GIVEN_THE_CPU, RuntimeProof


class CudaGivenADeviceThatMayBeTheCpu(Rule):
    """
    ## What it does
    Finds `.cuda(device)` on a tensor or a module where `device` may be the CPU: a device
    variable with a CPU fallback (`torch.device("cuda" if torch.cuda.is_available() else
    "cpu")`), another tensor's or the module's own `.device`, or a setting or parameter
    named as a device (`args.device`, `current_device`), which a CPU mode sets to `"cpu"`.

    ## Why is this bad?
    `.cuda()` only moves to a GPU. Given a CPU device it raises "Invalid device, must be cuda
    device" instead of leaving the data where the device says. The program works on every GPU
    machine and fails in the CPU mode its device choice was written for: a laptop, a CPU
    runner in CI, a model sampled on the host.

    ## Not reported
    Not reported: `.cuda()` with no device (TDL007 and TDL203 cover CUDA used without a
    GPU), with a GPU index or a name for one (`.cuda(args.gpu)`, `.cuda(local_rank)`,
    `.cuda(0)`), or with a device that is a GPU on every path (`"cuda:1"`,
    `torch.device("cuda", rank)`); a parameter or setting named as a device in a file with
    no CPU mode that calls `.cuda()` bare or makes a CUDA stream elsewhere (GPU-only code
    handed its GPU: a prefetcher copying batches on a side stream); calls
    under a test the CPU mode fails (`if device.type == "cuda":`); `super().cuda(device)` in
    a module that overrides `cuda`.

    ## Fix safety
    The fix calls `.to(device)` with the same arguments, which moves a tensor or a module to
    a GPU exactly as `.cuda(device)` does, and to the CPU where `.cuda` raised. It is safe
    where the argument is a device (a device variable or a `.device`), unsafe where only its
    name says so (a `None` there means the current GPU to `.cuda` and no move to `.to`).

    ## Options
    None.
    """

    code = "TDL027"
    slug = "cuda-given-a-device-that-may-be-the-cpu"
    message = "`.cuda(device)` raises where the device is the CPU; `.to(device)` moves to either"
    fix_title = "Move with .to(device)"
    # The CPU mode picks the CPU where there is no GPU, and `.cuda` refuses it there.
    proof = RuntimeProof(CUDA_GIVEN_THE_CPU, host="cpu")
    requires_any_text = (".cuda(",)

    VALID = [
        Valid(
            """
            import torch

            class Prefetcher:
                def __init__(self, loader, device):
                    self.loader, self.device = loader, device
                    self.stream = torch.cuda.Stream()

                def __iter__(self):
                    for images in self.loader:
                        with torch.cuda.stream(self.stream):
                            images = images.cuda(device=self.device, non_blocking=True)
                        torch.cuda.current_stream().wait_stream(self.stream)
                        yield images
            """,
            name="a-prefetcher-on-a-cuda-stream-is-handed-its-gpu",
        ),
        Valid(
            """
            import torch
            def place(batch, args, local_rank):
                images = batch.cuda(args.gpu, non_blocking=True)
                labels = batch.cuda(local_rank)
                return images.cuda(torch.device("cuda", local_rank)), labels.cuda("cuda:1"), labels.cuda()
            """,
            name="gpu-indices-and-gpu-devices",
        ),
        Valid(
            """
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            x = torch.randn(4, 3).to(device)
            """,
            name="moved-with-to",
        ),
        Valid(
            """
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(3, 1)
            if device.type == "cuda":
                model.cuda(device)
            """,
            name="under-a-test-the-cpu-mode-fails",
        ),
        Valid(
            """
            import torch.nn as nn
            class Pinned(nn.Module):
                def cuda(self, device=None):
                    print("moving")
                    return super().cuda(device)
            """,
            name="an-override-calling-the-original",
        ),
        Valid(
            """
            import torch

            class Shuffled:
                def __init__(self, loader, device):
                    self.loader = loader
                    self.device = device
                def __iter__(self):
                    for images, labels in self.loader:
                        order = torch.randperm(images.size(0)).cuda()
                        yield images.cuda(self.device)[order], labels.cuda(self.device)[order]
            """,
            name="gpu-only-code-handed-its-gpu",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(3, 1).cuda(device)
            x = torch.randn(4, 3).cuda(device, non_blocking=True)
            """,
            fixed="""
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(3, 1).to(device)
            x = torch.randn(4, 3).to(device, non_blocking=True)
            """,
            applicability=Applicability.SAFE,
            count=2,
            name="device-with-a-cpu-fallback",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            class Sampler(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.decode = nn.Linear(8, 3)
                def sample(self, count, current_device):
                    z = torch.randn(count, 8)
                    return self.decode(z.cuda(current_device))
            """,
            fixed="""
            import torch
            import torch.nn as nn
            class Sampler(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.decode = nn.Linear(8, 3)
                def sample(self, count, current_device):
                    z = torch.randn(count, 8)
                    return self.decode(z.to(current_device))
            """,
            applicability=Applicability.UNSAFE,
            name="a-parameter-named-as-a-device",
        ),
        Invalid(
            """
            import torch
            def noise_like(x: torch.Tensor):
                return torch.randn(x.shape).cuda(device=x.device)
            """,
            fixed="""
            import torch
            def noise_like(x: torch.Tensor):
                return torch.randn(x.shape).to(device=x.device)
            """,
            applicability=Applicability.SAFE,
            name="another-tensors-device",
        ),
    ]

    def visit_Call(self, node: cst.Call) -> None:
        device = device_that_may_be_the_cpu(node, self.context.flow, self.context.ancestors(node))
        if device is None:
            return
        value = self.context.flow.value_of(device)
        is_device = Kind.DEVICE in value.kinds or type(device) is cst.Attribute and device.attr.value == "device" \
            and self._has_a_device(device.value)
        func = cst.ensure_type(node.func, cst.Attribute)
        self.report(node, fix=self.make_fix(NodeEdit(func.attr, "to"),
                                            applicability=Applicability.SAFE if is_device else Applicability.UNSAFE))

    def _has_a_device(self, owner: cst.BaseExpression) -> bool:
        """A tensor's or a module's `.device` is a device; an `args.device` may be None."""
        value = self.context.flow.value_of(owner)
        return value.is_tensor_like or value.is_module_like
