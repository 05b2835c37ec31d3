"""The fixes several rules share, beside `edits.py` since rules never import each other:
`pin_memory=True` given to the DataLoaders TDL101 and TDL102 report, and a CUDA use sent
through a device variable (TDL007, TDL203)."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from torchdevlint.analysis.cuda_uses import CudaUse, UseKind
from torchdevlint.analysis.loader_flow import LoaderCall
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Rule


def pin_memory_fix(rule: Rule, *loaders: LoaderCall) -> PendingFix | None:
    """`pin_memory=True` added to each loader; safe when every dataset yields CPU tensors."""
    edits = [NodeEdit.insert_after(loader.call.args[-1], ", pin_memory=True") for loader in loaders if loader.call.args]
    if not edits:
        return None
    safe = all(loader.host_dataset for loader in loaders)
    return rule.make_fix(
        *edits,
        applicability=Applicability.SAFE if safe else Applicability.UNSAFE,
        title="Pass pin_memory=True",
    )


def route_through(use: CudaUse, device: str, code_for_node: Callable[[cst.CSTNode], str]) -> tuple[NodeEdit, ...]:
    """The edits that send a use through a device variable: `.cuda()` -> `.to(device)`,
    `"cuda"` -> `device`, `torch.cuda.FloatTensor(...)` -> `torch.FloatTensor(...).to(device)`.
    None for a GPU named by number (`.cuda(1)`, `"cuda:1"`), code over several lines, or a use
    no variable can stand in for (a `torch.cuda` call, a constructor through another name)."""
    if use.kind is UseKind.DEVICE_ARGUMENT:
        if use.index is None and "\n" not in code_for_node(use.node):
            return (NodeEdit(use.node, device),)
        return ()
    if use.kind is UseKind.MOVE:
        call = cst.ensure_type(use.node, cst.Call)
        func = cst.ensure_type(call.func, cst.Attribute)
        if any(arg.keyword is None for arg in call.args):
            return ()
        if call.args:
            return NodeEdit(func.attr, "to"), NodeEdit.insert_before(call.args[0], f"{device}, ")
        receiver = code_for_node(func.value)
        return () if "\n" in receiver else (NodeEdit(call, f"{receiver}.to({device})"),)
    if use.kind is UseKind.LEGACY_CONSTRUCTOR:
        call = cst.ensure_type(use.node, cst.Call)
        named = call.func
        if isinstance(named, cst.Attribute) and isinstance(named.value, cst.Attribute):
            return NodeEdit(named.value, code_for_node(named.value.value)), NodeEdit.insert_after(call, f".to({device})")
    return ()
