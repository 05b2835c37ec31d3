"""Non-blocking copies to the host, and whether the program reads them before they land.

`x.to("cpu", non_blocking=True)` returns at once, with a tensor the copy fills later: reading
its values before a synchronisation (or a blocking transfer, which waits for the same
stream) may read zeros or stale data. These are the questions the rule about such reads
(TDL013) asks: which calls are such copies, and which are read at once or by a later
statement of the same block before anything synchronises.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

import libcst as cst

from torchdevlint.analysis.brains import torch_api
from torchdevlint.analysis.flow.results import FlowQueries
from torchdevlint.analysis.flow.values import HOST_PLACE
from torchdevlint.analysis.loader_flow import is_non_blocking
from torchdevlint.analysis.names import NameResolver
from torchdevlint.analysis.tree import child_nodes, small_statements

# Reading these says nothing about the values, so it does not race with the copy.
_METADATA = frozenset({"shape", "dtype", "device", "size", "dim", "ndim", "numel", "is_pinned", "layout", "names"})
# Calls that read the values of a CPU tensor passed to them.
_READING_BUILTINS = torch_api.HOST_READING_BUILTINS | {"list", "tuple", "format", "sum", "max", "min"}
_READING_MODULES = ("numpy.", "torch.", "np.")
# Calls after which the copy has completed: an explicit synchronisation, or a blocking
# device-to-host transfer, which waits for the stream the copy was queued on.
_SYNCHRONISING_METHODS = frozenset({"synchronize", "item", "tolist", "numpy", "cpu", "wait", "query", "barrier"})
_SYNCHRONISING_MODULES = ("torch.cuda.", "torch.accelerator.", "torch.distributed.", "torch.xpu.", "torch.mps.")
_NESTED_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)


class _Verdict(Enum):
    """What a statement after the copy does to it."""

    # Reads the copy's values, with nothing in the statement synchronising.
    READ = "read"
    # Synchronises, rebinds the name, or hands the bare copy to a caller: stop looking.
    STOP = "stop"
    # Neither: look at the next statement.
    NEUTRAL = "neutral"


def is_cpu_copy(flow: FlowQueries, node: cst.CSTNode) -> bool:
    """`x.to("cpu", non_blocking=True)`: a copy to the host that returns before it lands."""
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == "to"
        and is_non_blocking(node)
        and flow.move_destination(node) == HOST_PLACE
    )


def _hands_over(value: cst.BaseExpression | cst.From | None, name: str) -> bool:
    """`return copy`, `yield copy, other`: the bare tensor goes to the caller unread."""
    if isinstance(value, cst.Name):
        return value.value == name
    if isinstance(value, (cst.Tuple, cst.List)):
        return any(isinstance(e.value, cst.Name) and e.value.value == name for e in value.elements)
    return False


def _mentions(node: cst.CSTNode, name: str) -> bool:
    stack: list[cst.CSTNode] = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Name) and current.value == name:
            return True
        stack.extend(child_nodes(current))
    return False


def read_at_once(parent: cst.CSTNode | None, grandparent: cst.CSTNode | None, names: NameResolver) -> bool:
    """Whether the expression whose parent and grandparent these are reads the copy's values
    where it is made: `x.to("cpu", non_blocking=True).numpy()`, `[0]`, `print(x.to(...))`."""
    if isinstance(parent, cst.Subscript):
        return True
    if isinstance(parent, cst.Attribute) and parent.attr.value not in _METADATA:
        return isinstance(grandparent, cst.Call) and grandparent.func is parent
    if isinstance(parent, cst.Arg):
        return isinstance(grandparent, cst.Call) and _reads_arguments(grandparent, names)
    return False


def copies_read_early(body: Sequence[cst.BaseStatement], flow: FlowQueries, names: NameResolver) -> list[cst.Call]:
    """The copies a block binds to a name (`y = x.to("cpu", non_blocking=True)`) whose
    values a later statement of the block reads before anything synchronises."""
    found: list[cst.Call] = []
    units = list(small_statements(body))
    for index, unit in enumerate(units):
        if not (isinstance(unit, cst.Assign) and len(unit.targets) == 1):
            continue
        if not isinstance(unit.targets[0].target, cst.Name):
            continue
        copy = unit.value
        if not (isinstance(copy, cst.Call) and is_cpu_copy(flow, copy)):
            continue
        name = unit.targets[0].target.value
        for later in units[index + 1:]:
            verdict = _unit_verdict(later, name, names)
            if verdict is _Verdict.READ:
                found.append(copy)
            if verdict is not _Verdict.NEUTRAL:
                break
    return found


def _reads_on_the_host(qualified: str) -> bool:
    return qualified.startswith(_READING_MODULES) and not qualified.startswith(_SYNCHRONISING_MODULES)


def _synchronising(qualified: str) -> bool:
    return qualified.startswith(_SYNCHRONISING_MODULES)


def _reads_arguments(call: cst.Call, names: NameResolver) -> bool:
    func = call.func
    if isinstance(func, cst.Name) and func.value in _READING_BUILTINS:
        return True
    return names.qualified_name(func, among=_reads_on_the_host) is not None


def _unit_verdict(unit: cst.CSTNode, name: str, names: NameResolver) -> _Verdict:
    reads = False
    synchronises = False
    stack: list[tuple[cst.CSTNode, cst.CSTNode | None, cst.CSTNode | None]] = [(unit, None, None)]
    while stack:
        node, parent, grandparent = stack.pop()
        if isinstance(node, _NESTED_SCOPES):
            continue
        if isinstance(node, (cst.Return, cst.Yield)) and _hands_over(node.value, name):
            return _Verdict.STOP  # the caller may synchronise before reading
        if isinstance(node, cst.AssignTarget) and isinstance(node.target, cst.Name) and node.target.value == name:
            return _Verdict.STOP
        if isinstance(node, cst.Name):
            if node.value == name:
                reads = reads or _is_read(parent, grandparent, names)
            continue
        if isinstance(node, cst.Call) and _synchronises(node, name, names):
            synchronises = True
        stack.extend((child, node, parent) for child in child_nodes(node))
    if synchronises:
        return _Verdict.STOP
    return _Verdict.READ if reads else _Verdict.NEUTRAL


def _is_read(parent: cst.CSTNode | None, grandparent: cst.CSTNode | None, names: NameResolver) -> bool:
    if isinstance(parent, cst.Attribute):
        return parent.attr.value not in _METADATA
    if isinstance(parent, (cst.Subscript, cst.Index, cst.BinaryOperation, cst.UnaryOperation, cst.Comparison,
                           cst.ComparisonTarget, cst.BooleanOperation, cst.FormattedStringExpression, cst.If,
                           cst.While, cst.For, cst.CompFor, cst.AugAssign)):
        return True
    if isinstance(parent, cst.Arg):
        return isinstance(grandparent, cst.Call) and _reads_arguments(grandparent, names)
    return False


def _synchronises(call: cst.Call, name: str, names: NameResolver) -> bool:
    func = call.func
    if isinstance(func, cst.Attribute):
        if _mentions(func.value, name):
            return False  # a method of the copy itself reads it, it does not wait for it
        method = func.attr.value
        if method in _SYNCHRONISING_METHODS:
            return True
        if method in ("to", "cuda") and not is_non_blocking(call):
            return True
    return names.qualified_name(func, among=_synchronising) is not None
