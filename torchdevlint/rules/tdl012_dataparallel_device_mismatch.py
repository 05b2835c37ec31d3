"""TDL012 dataparallel-device-mismatch."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.brains import torch_api
from torchdevlint.analysis.flow.values import Wrapping
from torchdevlint.analysis.tree import keyword_argument
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import DEVICE_MISMATCH, RuntimeProof


class DataParallelDeviceMismatch(Rule):
    """
    ## What it does
    Finds a model moved to one GPU and wrapped in `nn.DataParallel` whose `device_ids` start
    at another: typically `model.to("cuda:1")` (or `.cuda(1)`, or `torch.device("cuda", 1)`)
    followed by `nn.DataParallel(model)` without `device_ids`, which then uses every GPU from
    `cuda:0`. Also a wrapper moved afterwards (`nn.DataParallel(model).to("cuda:1")`).
    Reported at the `DataParallel(...)` call, or at the later move. Devices count where the
    flow model knows which GPU they are: a literal (`"cuda:1"`, `torch.device("cuda", 1)`),
    a variable or a same-file helper holding one, `.cuda()` after `torch.cuda.set_device(1)`.
    `device_ids` count when written as a list, `range(...)` or None.

    ## Why is this bad?
    `DataParallel` keeps the master copy of the module on `device_ids[0]` and checks it on
    every forward pass: the first batch fails with "RuntimeError: module must have its
    parameters and buffers on device cuda:0 (device_ids[0]) but found one of them on device:
    cuda:1". On a single-GPU or CPU-only machine nothing happens, so the bug shows only on the
    multi-GPU box.

    ## Fix safety
    Where `device_ids` is not given and the model is on `cuda:N` (N > 0), the fix passes
    `device_ids=list(range(N, torch.cuda.device_count()))`: the GPUs from the model's onwards,
    leaving the ones before it alone, as moving the model there suggests. Unsafe: it changes
    which GPUs the program uses, and with a single GPU past N it no longer splits batches.
    Explicit `device_ids` that disagree with the model, and a wrapper moved after wrapping,
    get no fix: which side is wrong is a choice.

    ## Options
    None.
    """

    code = "TDL012"
    slug = "dataparallel-device-mismatch"
    message = "Model is on a different GPU than DataParallel's device_ids[0]; the first forward fails"
    fix_title = "Pass device_ids starting at the model's GPU"
    # A module on one GPU, DataParallel's device_ids from another: room for both and the rest.
    proof = RuntimeProof(DEVICE_MISMATCH, gpus=4)
    requires_any_text = ("DataParallel",)

    VALID = [
        Valid(
            """
            import torch.nn as nn
            model = nn.Linear(2, 2).to("cuda:1")
            model = nn.DataParallel(model, device_ids=[1, 2])
            other = nn.DataParallel(nn.Linear(2, 2).cuda(), device_ids=[0, 1])
            plain = nn.DataParallel(nn.Linear(2, 2).to("cuda"))
            """,
            name="device-ids-start-at-the-model-device",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            def wrap(model, device, gpus):
                model = model.to(device)
                return nn.DataParallel(model, device_ids=gpus)
            model = nn.Linear(2, 2).to("cuda:1")
            model = nn.parallel.DistributedDataParallel(model, device_ids=[1])
            torch.cuda.set_device(rank)
            replicas = nn.DataParallel(nn.Linear(2, 2).cuda(), device_ids=[1, 2])
            """,
            name="unknown-devices-and-ddp",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            with torch.cuda.device(1):
                model = nn.Linear(2, 2).cuda()
            model = nn.DataParallel(model, device_ids=[1, 2])
            if local:
                torch.cuda.set_device(2)
            other = nn.DataParallel(nn.Linear(2, 2).cuda())
            """,
            name="current-device-set-for-a-block-or-on-one-path",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            from torch import nn

            model = Net().to("cuda:1")
            model = nn.DataParallel(model)
            """,
            fixed="""
            import torch
            from torch import nn

            model = Net().to("cuda:1")
            model = nn.DataParallel(model, device_ids=list(range(1, torch.cuda.device_count())))
            """,
            applicability=Applicability.UNSAFE,
            name="documented-model-on-cuda-1-wrapped",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            device = torch.device("cuda:1")
            model = nn.Sequential(nn.Linear(8, 8)).to(device)
            if torch.cuda.device_count() > 1:
                model = nn.DataParallel(model)
            """,
            fixed="""
            import torch
            import torch.nn as nn
            device = torch.device("cuda:1")
            model = nn.Sequential(nn.Linear(8, 8)).to(device)
            if torch.cuda.device_count() > 1:
                model = nn.DataParallel(model, device_ids=list(range(1, torch.cuda.device_count())))
            """,
            applicability=Applicability.UNSAFE,
            name="moved-to-cuda-1-then-wrapped",
        ),
        Invalid(
            """
            import torch
            from torch.nn import DataParallel, Linear
            net = DataParallel(Linear(4, 4).cuda(2), device_ids=[0, 1, 2])
            wrapped = DataParallel(Linear(4, 4), device_ids=[1, 2]).cuda()
            """,
            count=2,
            name="device-ids-elsewhere-and-wrapper-moved",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            def build():
                net = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
                return net.to(torch.device("cuda", 2))

            def main():
                torch.cuda.set_device(1)
                encoder = nn.Linear(8, 8).cuda()
                encoder = nn.DataParallel(encoder, device_ids=[0, 1])
                head = build()
                head = nn.DataParallel(head, device_ids=[0, 1])
            """,
            count=2,
            name="current-device-set-and-a-helper-that-places-the-model",
        ),
        Invalid(
            """
            from torch import nn
            net = nn.DataParallel(nn.Linear(4, 4).to("cuda:1"))
            """,
            fixed="""
            from torch import nn
            import torch

            net = nn.DataParallel(nn.Linear(4, 4).to("cuda:1"), device_ids=list(range(1, torch.cuda.device_count())))
            """,
            applicability=Applicability.UNSAFE,
            name="fix-adds-the-torch-import",
        ),
    ]

    def leave_Call(self, node: cst.Call) -> None:
        flow = self.context.flow
        if self.context.names.qualified_name(node.func, among=torch_api.DATA_PARALLEL) is not None:
            module = keyword_argument(node, "module")
            positional = [arg.value for arg in node.args if arg.keyword is None]
            target = module.value if module is not None else (positional[0] if positional else None)
            wrapper = flow.value_of(node)
            first = wrapper.device.index if wrapper.device is not None else None
            placed = flow.value_of(target).cuda_index if target is not None else None
            if first is not None and placed is not None and first != placed:
                self.report(node, fix=self._fix(node, placed))
            return
        # `DataParallel(...).to(...)` and `wrapper.cuda(n)`: the wrapper moved after wrapping.
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in ("to", "cuda"):
            wrapper = flow.value_of(node.func.value)
            if wrapper.wrapping is not Wrapping.YES or wrapper.device is None:
                return
            first = wrapper.device.index
            placed = flow.value_of(node).cuda_index
            if first is not None and placed is not None and first != placed:
                self.report(node)

    def _fix(self, call: cst.Call, placed: int) -> PendingFix | None:
        """No device_ids: use the GPUs from the model's onwards (the ones not left to others)."""
        if placed == 0 or len([a for a in call.args if a.keyword is None]) > 1 or keyword_argument(call, "device_ids"):
            return None
        if any(arg.star for arg in call.args):
            return None
        torch_name = self.context.names.local_name_for("torch")
        imports: tuple[tuple[str, str | None], ...] = ()
        if torch_name is None:
            torch_name, imports = "torch", (("torch", None),)
        ids = f"list(range({placed}, {torch_name}.cuda.device_count()))"
        return self.make_fix(
            NodeEdit.insert_after(call.args[-1].value, f", device_ids={ids}"),
            applicability=Applicability.UNSAFE,
            required_imports=imports,
        )
