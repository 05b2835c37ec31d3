"""TDL204 deprecated-pin-memory-device."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.brains import torch_api
from torchdevlint.analysis.flow.values import Kind
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Mark, Rule, Valid

# Tensor methods whose device argument is deprecated (PyTorch 2.5+, pytorch/pytorch#146821).
_TENSOR_METHODS = frozenset({"pin_memory", "is_pinned"})
_LOADER_KEYWORD = "pin_memory_device"
# What a receiver the model shows may be that has no such method taking a device.
_NOT_TENSORS = frozenset({Kind.MODULE, Kind.WRAPPED_MODULE, Kind.DATALOADER, Kind.DATASET, Kind.SCALAR, Kind.DEVICE})


class DeprecatedPinMemoryDevice(Rule):
    """
    ## What it does
    Finds a device named for pinned memory: `tensor.pin_memory("cuda")`,
    `tensor.is_pinned(device)` and `DataLoader(..., pin_memory_device="cuda")`.

    ## Why is this bad?
    Pinned (page-locked) host memory is for the accelerator the process uses; since PyTorch
    2.5 the device argument is deprecated and ignored in favour of the current accelerator
    (`torch.accelerator`). The DataLoader warns "pin_memory_device is deprecated, the current
    accelerator will be used as the device", `pin_memory(device)` warns the argument is
    deprecated, and code that names `"cuda"` there does not carry over to `xpu` or `mps`
    unchanged. It is a portability rule: it is off by default.

    ## Fix safety
    Safe: the fix deletes the argument. PyTorch already pins for the current accelerator
    whatever the argument says, so the program does the same as before without the warning.

    ## Options
    None.
    """

    code = "TDL204"
    slug = "deprecated-pin-memory-device"
    message = "the device argument of pinned memory is deprecated and ignored: PyTorch pins for the current accelerator"
    fix_title = "Remove the device argument"
    default_enabled = False
    marks = frozenset({Mark.DEPRECATED})
    requires_any_text = ("pin_memory", "is_pinned")

    VALID = [
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader

            batch = torch.zeros(8, 3).pin_memory()
            assert batch.is_pinned()
            loader = DataLoader(dataset, batch_size=32, pin_memory=True)

            class Batch:
                def pin_memory(self, device=None):
                    return self
            Batch().pin_memory(None)
            """,
            name="no-device-named",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(dataset, batch_size=32, pin_memory=True, pin_memory_device="cuda")
            images = torch.zeros(8, 3, 32, 32).pin_memory("cuda")
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(dataset, batch_size=32, pin_memory=True)
            images = torch.zeros(8, 3, 32, 32).pin_memory()
            """,
            applicability=Applicability.SAFE,
            count=2,
            name="documented-loader-and-tensor",
            in_docs=True,
        ),
        Invalid(
            """
            import torch

            def to_device(batch, device):
                if not batch.is_pinned(device=device):
                    batch = batch.pin_memory(device=device)
                return batch.to(device, non_blocking=True)

            loader = torch.utils.data.DataLoader(
                dataset,
                pin_memory=True,
                pin_memory_device=f"cuda:{rank}",
            )
            """,
            fixed="""
            import torch

            def to_device(batch, device):
                if not batch.is_pinned():
                    batch = batch.pin_memory()
                return batch.to(device, non_blocking=True)

            loader = torch.utils.data.DataLoader(
                dataset,
                pin_memory=True,
            )
            """,
            applicability=Applicability.SAFE,
            count=3,
            name="keywords-and-a-trailing-comma",
        ),
    ]

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in _TENSOR_METHODS:
            device = self._tensor_device_argument(node)
            if device is not None and not (self.context.flow.value_of(func.value).kinds & _NOT_TENSORS):
                self.report(device, fix=self._without(node, device))
            return
        passed = [arg for arg in node.args if arg.keyword is not None and arg.keyword.value == _LOADER_KEYWORD]
        # Whose call it is, asked only of calls passing the keyword: names cost more than keywords.
        if passed and self.context.names.qualified_name(func, among=torch_api.DATALOADERS) is not None:
            for arg in passed:
                self.report(arg, fix=self._without(node, arg))

    @staticmethod
    def _tensor_device_argument(call: cst.Call) -> cst.Arg | None:
        """The device given to `pin_memory`/`is_pinned`: its only argument (None is no device)."""
        if len(call.args) != 1 or call.args[0].star:
            return None
        arg = call.args[0]
        if arg.keyword is not None and arg.keyword.value != "device":
            return None
        if isinstance(arg.value, cst.Name) and arg.value.value == "None":
            return None
        return arg

    def _without(self, call: cst.Call, removed: cst.Arg) -> PendingFix:
        """Delete one argument in the text, leaving the others and their layout as they are."""
        args = list(call.args)
        index = args.index(removed)
        edits: tuple[NodeEdit, ...]
        if index > 0:
            comma = args[index - 1].comma
            assert isinstance(comma, cst.Comma)
            if isinstance(removed.comma, cst.Comma):
                # `a,\n    b=1,  # note\n)`: from the comma before it up to its own comma.
                edits = (NodeEdit.replace_until(comma, removed.comma, ""),)
            else:
                edits = (NodeEdit.replace_until(comma, removed, ""), NodeEdit(removed, ""))
        elif len(args) > 1:
            edits = (NodeEdit.replace_until(removed, args[1], ""),)
        else:
            edits = (NodeEdit(removed, ""),)
        return self.make_fix(*edits, applicability=Applicability.SAFE)
