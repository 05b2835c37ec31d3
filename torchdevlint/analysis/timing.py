"""Wall-clock readings around accelerator work, and whether anything waits for the work first.

CUDA kernels run asynchronously: `t0 = time.time(); y = model(x); print(time.time() - t0)`
measures how long it took to queue the kernels. A reading measures the work only where
something between the work and the reading waits for it: `torch.cuda.synchronize()`, an
event's `synchronize()`/`elapsed_time()`, or a transfer to the host (`.item()`, `.cpu()`,
printing a tensor). The question the rule about it (TDL105) asks: in one block, which
timer readings follow accelerator work that nothing has waited for since the block's first
reading.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import libcst as cst

from torchdevlint.analysis.brains import naming
from torchdevlint.analysis.flow.results import FlowQueries
from torchdevlint.analysis.flow.values import Kind, Value
from torchdevlint.analysis.names import ImportTable
from torchdevlint.analysis.tree import child_nodes, small_statements

TIMERS = frozenset({"time.time", "time.perf_counter", "time.monotonic", "time.process_time", "timeit.default_timer",
                    "time.time_ns", "time.perf_counter_ns", "time.monotonic_ns"})
# Calls after which the queued work is done.
_WAITING_METHODS = frozenset({"synchronize", "item", "tolist", "numpy", "cpu", "elapsed_time", "wait"})
_WAITING_MODULES = ("torch.cuda.synchronize", "torch.accelerator.synchronize", "torch.xpu.synchronize",
                    "torch.mps.synchronize", "torch.cuda.Event", "torch.distributed.barrier")
_NESTED_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)


def _calls(unit: cst.CSTNode) -> Iterator[cst.Call]:
    stack: list[cst.CSTNode] = [unit]
    while stack:
        node = stack.pop()
        if isinstance(node, _NESTED_SCOPES):
            continue
        if isinstance(node, cst.Call):
            yield node
        stack.extend(child_nodes(node))


def unsynchronised_readings(body: Sequence[cst.BaseStatement], flow: FlowQueries, imports: ImportTable,
                            *, loop_body: bool = False) -> list[tuple[cst.Call, cst.CSTNode]]:
    """(timer reading, the small statement or compound statement holding it) for each
    measurement in the block that follows accelerator work nothing has waited for since an
    earlier reading. A measurement is a reading subtracted from (`time.time() - t0`), or
    bound to a name a later statement subtracts from (`toc = time.time()`, `toc - tic`), but
    not one compared with a limit (`if time.time() - t0 > limit:`). In a loop's body that
    waits for its work somewhere (`loss.item()` each step), the per-step readings come out
    right on average, and none is reported."""
    units = list(small_statements(body))
    per_unit = [list(_calls(unit)) for unit in units]
    # A measurement needs a reading before it: blocks with fewer than two ask nothing more.
    if sum(imports.qualified_name(call.func) in TIMERS for calls in per_unit for call in calls) < 2:
        return []
    if loop_body and any(_waits(call, flow, imports) for calls in per_unit for call in calls):
        return []
    found: list[tuple[cst.Call, cst.CSTNode]] = []
    started = False
    pending_work = False
    for index, (unit, calls) in enumerate(zip(units, per_unit, strict=True)):
        readings = [call for call in calls if imports.qualified_name(call.func) in TIMERS]
        waits = any(_waits(call, flow, imports) for call in calls)
        # A training loop is timed as a whole: CUDA queues only so far ahead, so the work
        # left unfinished at its end is a step's worth of a long span.
        works = not _trains(unit, calls, flow) and any(_accelerator_work(call, flow) for call in calls)
        if readings and started and pending_work and not waits:
            found.extend((reading, unit) for reading in readings if _measures(reading, unit, units[index + 1:]))
        if readings:
            # A reading starts the next span: work before it is not in that span.
            started = True
            pending_work = False
        elif waits:
            pending_work = False
        elif works:
            pending_work = True
    return found


def _measures(reading: cst.Call, unit: cst.CSTNode, later: Sequence[cst.CSTNode]) -> bool:
    """Whether the reading is the end of a measured span (see `unsynchronised_readings`)."""
    stack: list[tuple[cst.CSTNode, bool]] = [(unit, False)]
    while stack:
        node, compared = stack.pop()
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Subtract) and node.left is reading:
            return not compared
        if isinstance(node, cst.Assign) and node.value is reading and len(node.targets) == 1 \
                and isinstance(node.targets[0].target, cst.Name):
            name = node.targets[0].target.value
            return any(_subtracts_from(statement, name) for statement in later)
        inner = compared or isinstance(node, cst.Comparison)
        stack.extend((child, inner) for child in child_nodes(node))
    return False


def _subtracts_from(node: cst.CSTNode, name: str) -> bool:
    stack: list[tuple[cst.CSTNode, bool]] = [(node, False)]
    while stack:
        current, compared = stack.pop()
        if isinstance(current, cst.BinaryOperation) and isinstance(current.operator, cst.Subtract) \
                and isinstance(current.left, cst.Name) and current.left.value == name and not compared:
            return True
        inner = compared or isinstance(current, cst.Comparison)
        stack.extend((child, inner) for child in child_nodes(current))
    return False


def _trains(unit: cst.CSTNode, calls: Sequence[cst.Call], flow: FlowQueries) -> bool:
    if not isinstance(unit, (cst.For, cst.While)):
        return False
    if isinstance(unit, cst.For) and Kind.DATALOADER in flow.value_of(unit.iter).kinds:
        return True
    for call in calls:
        func = call.func
        name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
        if name == "backward" or any(word in name.lower() for word in naming.TRAINING_CALL_WORDS):
            return True
    return False


def _waits(call: cst.Call, flow: FlowQueries, imports: ImportTable) -> bool:
    qualified = imports.qualified_name(call.func) or ""
    if qualified.startswith(_WAITING_MODULES):
        return True
    func = call.func
    callee = flow.value_of(func).reference
    if callee is not None and callee.definition is not None and _host_numbers(flow.value_of(call)):
        # A helper of this file that hands back Python numbers (`loss, acc = test(...)`):
        # it read its results on the host, which waited for the work.
        return True
    if isinstance(func, cst.Attribute) and func.attr.value in _WAITING_METHODS:
        return True
    # `print(loss)`, `float(loss)`: the value is read on the host.
    return isinstance(func, cst.Name) and func.value in ("print", "float", "int") and any(
        flow.value_of(arg.value).is_tensor_like and flow.value_of(arg.value).may_be_on_accelerator for arg in call.args)


def _host_numbers(value: Value) -> bool:
    if value.kinds == {Kind.SCALAR}:
        return True
    # `return loss.item(), acc.item()`: numbers, where the model can tell, and no tensors.
    items = [item for _, item in value.items or ()]
    return value.kinds == {Kind.CONTAINER} and any(item.kinds == {Kind.SCALAR} for item in items) \
        and not any(item.is_tensor_like or item.is_module_like for item in items)


def _accelerator_work(call: cst.Call, flow: FlowQueries) -> bool:
    """A call the flow model shows computing on an accelerator: its result is device data,
    or it is a method of device data (`loss.backward()`)."""
    value = flow.value_of(call)
    if value.is_tensor_like and value.on_accelerator:
        return True
    func = call.func
    if isinstance(func, cst.Attribute):
        receiver = flow.value_of(func.value)
        return receiver.is_tensor_like and receiver.on_accelerator
    return False
