"""TDL039 device-index-of-a-host-tensor."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.brains import torch_api
from torchdevlint.analysis.cuda_uses import kept_for_the_gpu
from torchdevlint.analysis.devices import TORCH_DEVICE
from torchdevlint.analysis.flow.values import PlaceKind, Value
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import NEGATIVE_DEVICE_INDEX, RuntimeProof


class DeviceIndexOfAHostTensor(Rule):
    """
    ## What it does
    Finds `x.get_device()` given as a device: `.to(x.get_device())`, `.cuda(x.get_device())`,
    `device=x.get_device()` and `torch.device(x.get_device())`, where `x` may be a tensor
    on the CPU.

    ## Why is this bad?
    `get_device()` is the index of the GPU a tensor is on, and -1 for a tensor on the CPU.
    No device is -1: on the CPU the call raises "Device index must not be negative". The
    program runs on every GPU machine and fails in the CPU mode its device choice offers
    (the noise of a VAE's reparameterisation, `torch.randn(...).to(z_mu.get_device())`,
    sampled on a laptop). `x.device` names the device the tensor is on, the CPU included.

    ## Not reported
    Not reported: under a test about the device (`if x.is_cuda:`, `x.get_device() if
    x.is_cuda else "cpu"`), for a tensor that is on a GPU on every path, and for
    `get_device()` read as a number (compared, printed, used as a key).

    ## Fix safety
    Safe: the fix reads `x.device` instead (and moves with `.to` where the code called
    `.cuda`, which refuses the CPU): on a GPU the same device, on the CPU the CPU.
    `get_device()` is a method of tensors only (no module, array, list or dict has one), so
    `x` is a tensor wherever the call works.

    ## Options
    None.
    """

    code = "TDL039"
    slug = "device-index-of-a-host-tensor"
    message = "`get_device()` is -1 for a tensor on the CPU, which no device accepts: use `.device`"
    fix_title = "Use the tensor's .device"
    # The CPU mode keeps the tensor on the host, where its index is -1.
    proof = RuntimeProof(NEGATIVE_DEVICE_INDEX, host="cpu")
    requires_any_text = ("get_device()",)

    VALID = [
        Valid(
            """
            import torch

            def gaussian_window(img, window):
                if img.is_cuda:
                    window = window.cuda(img.get_device())
                return window.type_as(img)

            def anchors_like(output):
                device = output.get_device() if output.is_cuda else "cpu"
                return torch.zeros(4, device=device)
            """,
            name="under-a-test-of-where-the-tensor-is",
        ),
        Valid(
            """
            import torch

            def same_gpu(a, b):
                assert a.get_device() == b.get_device(), "inputs must be on one GPU"
                print("on GPU", a.get_device())
            """,
            name="read-as-a-number",
        ),
        Valid(
            """
            import torch

            features = torch.randn(8, 4).cuda()
            noise = torch.randn(8, 4).to(features.get_device())
            """,
            name="a-tensor-on-a-gpu-on-every-path",
        ),
        Valid(
            """
            import torch

            def reparameterize(mu, log_var):
                eps = torch.randn(mu.size(0), mu.size(1)).to(mu.device)
                return mu + eps * torch.exp(log_var / 2.0)
            """,
            name="the-tensor-s-device",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch.nn as nn

            class VAE(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.encode = nn.Linear(16, 4)
                    self.decode = nn.Linear(2, 16)

                def reparameterize(self, z_mu, z_log_var):
                    eps = torch.randn(z_mu.size(0), z_mu.size(1)).to(z_mu.get_device())
                    return z_mu + eps * torch.exp(z_log_var / 2.0)

                def forward(self, x):
                    z_mu, z_log_var = self.encode(x).chunk(2, dim=1)
                    return self.decode(self.reparameterize(z_mu, z_log_var))
            """,
            fixed="""
            import torch
            import torch.nn as nn

            class VAE(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.encode = nn.Linear(16, 4)
                    self.decode = nn.Linear(2, 16)

                def reparameterize(self, z_mu, z_log_var):
                    eps = torch.randn(z_mu.size(0), z_mu.size(1)).to(z_mu.device)
                    return z_mu + eps * torch.exp(z_log_var / 2.0)

                def forward(self, x):
                    z_mu, z_log_var = self.encode(x).chunk(2, dim=1)
                    return self.decode(self.reparameterize(z_mu, z_log_var))
            """,
            applicability=Applicability.SAFE,
            name="vae-noise-on-the-index-of-its-mean",
            in_docs=True,
        ),
        Invalid(
            """
            import torch

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            images = torch.rand(4, 3, 8, 8).to(device)
            mask = torch.ones(8, 8, device=images.get_device())
            grid = torch.zeros(8, 8).cuda(images.get_device())
            where = torch.device(images.get_device())
            """,
            fixed="""
            import torch

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            images = torch.rand(4, 3, 8, 8).to(device)
            mask = torch.ones(8, 8, device=images.device)
            grid = torch.zeros(8, 8).to(images.device)
            where = torch.device(images.device)
            """,
            applicability=Applicability.SAFE,
            count=3,
            name="a-factory-a-cuda-move-and-a-device",
        ),
        Invalid(
            """
            import torch

            def move_like(batch, reference):
                return batch.to(reference.get_device())
            """,
            fixed="""
            import torch

            def move_like(batch, reference):
                return batch.to(reference.device)
            """,
            applicability=Applicability.SAFE,
            name="a-parameter-of-unknown-kind",
        ),
    ]

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not (type(func) is cst.Attribute and func.attr.value == "get_device" and not node.args):
            return
        holder = self._device_holder(node)
        if holder is None:
            return
        receiver = func.value
        flow = self.context.flow
        value = flow.value_of(receiver)
        if "get_device" not in torch_api.TENSOR_ONLY_METHODS or value.is_known and not value.is_tensor_like \
                or _on_a_gpu_everywhere(value):
            return  # another object's get_device(), or a tensor on a GPU wherever it runs
        ancestors = self.context.ancestors(node)
        if not flow.reached_in_cpu_mode(node, ancestors) or kept_for_the_gpu(node, ancestors, self.context.names, flow):
            return  # only where the program has a GPU (`if x.is_cuda:`)
        edits = [NodeEdit(node, self.context.code_for_node(receiver) + ".device")]
        if type(holder.func) is cst.Attribute and holder.func.attr.value == "cuda":
            edits.append(NodeEdit(holder.func.attr, "to"))
        self.report(node, fix=self.make_fix(*edits))

    def _device_holder(self, node: cst.Call) -> cst.Call | None:
        """The call that takes `node` as its device: `.to(...)`/`.cuda(...)` as the first
        argument or `device=`, any call's `device=`, `torch.device(...)`'s first argument."""
        argument = self.context.parent(node)
        if type(argument) is not cst.Arg or argument.star:
            return None
        holder = self.context.parent(argument)
        if type(holder) is not cst.Call:
            return None
        if argument.keyword is not None:
            return holder if argument.keyword.value == "device" else None
        if holder.args[0] is not argument:
            return None
        if type(holder.func) is cst.Attribute and holder.func.attr.value in ("to", "cuda"):
            return holder
        if self.context.names.qualified_name(holder.func, among=TORCH_DEVICE) is not None:
            return holder
        return None


def _on_a_gpu_everywhere(value: Value) -> bool:
    """On a device that is a GPU on every path and every machine (`.cuda()`, `"cuda:1"`): not
    one with a CPU fallback, nor wherever a module is."""
    return bool(value.places) and all(
        place.kind is PlaceKind.DEVICE and place.types is not None and "cpu" not in place.types
        for place in value.places or ())
