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

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

import libcst as cst

from torchdevlint.analysis.brains import naming
from torchdevlint.analysis.flow.results import FlowQueries
from torchdevlint.analysis.flow.values import Kind, Value
from torchdevlint.analysis.names import NameResolver
from torchdevlint.analysis.tree import child_nodes, descendants

TIMERS = frozenset({"time.time", "time.perf_counter", "time.monotonic", "time.process_time", "timeit.default_timer",
                    "time.clock",  # Python 2 and up to 3.7
                    "time.time_ns", "time.perf_counter_ns", "time.monotonic_ns"})
# Calls after which the queued work is done.
_WAITING_METHODS = frozenset({"synchronize", "item", "tolist", "numpy", "cpu", "elapsed_time", "wait"})
_WAITING_MODULES = ("torch.cuda.synchronize", "torch.accelerator.synchronize", "torch.xpu.synchronize",
                    "torch.mps.synchronize", "torch.cuda.Event", "torch.distributed.barrier")
# Methods after which the host knows a result's size, so the work behind it is done.
_SIZE_READING_METHODS = frozenset({"nonzero", "unique", "unique_consecutive", "masked_select", "nms", "batched_nms"})
# Device moves: from host data, and not asked to be asynchronous, they wait for the queued work
# (PyTorch copies pageable memory to the device and synchronises the stream).
_MOVES = frozenset({"to", "cuda"})
_FACTORIES_FROM_DATA = ("torch.tensor", "torch.as_tensor")
# Tensor methods that read or change only the tensor's metadata: they queue no work.
_NO_KERNEL_METHODS = frozenset({"size", "dim", "numel", "stride", "view", "view_as", "unsqueeze", "squeeze", "t",
                                "transpose", "permute", "expand", "expand_as", "narrow", "select", "detach",
                                "requires_grad_", "is_contiguous", "get_device", "element_size", "data_ptr",
                                "storage_offset", "unbind", "split", "chunk"})
# How deep a wait is looked for in what a measured call runs (`model(x)` -> `forward` -> helpers).
_CALLEE_DEPTH = 2
_NESTED_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)
_STATEMENT_PARTS = (cst.BaseCompoundStatement, cst.BaseSuite, cst.SimpleStatementLine, cst.Else, cst.ExceptHandler,
                    cst.ExceptStarHandler, cst.Finally, cst.MatchCase)
# How deep loops run their body twice (see `_Walk._loop`).
_LOOPS_RUN_TWICE = 3


def _calls(unit: cst.CSTNode) -> Iterator[cst.Call]:
    """The calls a node evaluates, in the order Python makes them: a call after the calls of
    its callee and arguments (`model(x.cuda())`: the copy, then the model)."""
    stack: list[tuple[cst.CSTNode, bool]] = [(unit, False)]
    while stack:
        node, entered = stack.pop()
        if entered:
            yield node  # type: ignore[misc]  # only calls are pushed entered
            continue
        if isinstance(node, _NESTED_SCOPES):
            continue
        if isinstance(node, cst.Call):
            stack.append((node, True))
        stack.extend((child, False) for child in reversed(child_nodes(node)))


def unsynchronised_readings(body: Sequence[cst.BaseStatement], flow: FlowQueries, names: NameResolver,
                            definitions: Callable[[], Mapping[int, cst.FunctionDef | cst.ClassDef]] | None = None,
                            ) -> list[Reading]:
    """Each measurement in a scope's body (a module's, a function's) whose span holds
    accelerator work that no wait inside a measured span covers.

    A span starts where a reading is bound to a name (`t0 = time.time()`) and ends where a
    reading is subtracted from it (`time.time() - t0`, or `t1 = time.time()` with `t1 - t0`
    later); not where it is compared with a limit (`if time.time() - t0 > limit:`). Work
    queued in a span and not waited for by its end is left over. Where the span starts
    again before anything waits (`batch_time.update(time.time() - end)`, then `end =
    time.time()`, in a loop), the next span waits for it and the measurements' sum comes out
    right. Where something waits for it first (`loss.item()` after the reading), or the
    span never starts again, the measurement missed that work.

    The walk follows the scope's paths into `if`, `with`, `try` and loops; nested functions
    and classes are scopes of their own. A loop's body runs twice, so that a step meets what
    the previous one left. A training loop (see `_trains`) adds no work to a span around
    it: CUDA queues only so far ahead, so what is unfinished at its end is a step's worth of
    a long span. One that never waits is left whole: once the queue is full, each step takes
    as long to queue as the GPU takes to run one, so per-step readings come out right.

    A wait is also what the host must have before it goes on: a result read (`.item()`,
    printing a tensor), a size only the device knows (`nonzero`, `nms`), and a blocking copy
    of host data to the device (`.to(device)` of a NumPy array's tensor, `torch.tensor(...,
    device=...)`), which PyTorch makes after the work queued before it. One inside what a
    measured call runs, the `forward` of a model of this file or a function of this file
    (`definitions`, by node id), waits too: for the work queued before it there."""
    walk = _Walk(flow, names, definitions)
    if walk.readings_in(body) < 2:
        # A measurement needs a reading before it.
        return []
    end = walk.block(_units(body), _Spans(), ())
    walk.missed(end)
    return list(walk.found.values())


@dataclass(frozen=True)
class Reading:
    call: cst.Call
    # The statement line that starts with the reading's statement, where a line can go
    # before it; None for a reading in a compound statement's header or after a `;`.
    line: cst.SimpleStatementLine | None


@dataclass(frozen=True)
class _LeftOver:
    """A measurement whose span ended with work queued in it."""

    reading: Reading
    span: str
    # The loops it is in, innermost first: a span started again in one of them is the same
    # measurement's next step.
    loops: tuple[int, ...]
    # Its span has started again since, with the work still queued: the next step's span
    # holds it, and a wait there covers it.
    carried: bool = False


@dataclass(frozen=True)
class _Spans:
    # Each open span (its name as written) and whether work queued in it is still unwaited.
    open: tuple[tuple[str, bool], ...] = ()
    left_over: frozenset[_LeftOver] = frozenset()

    def join(self, other: _Spans, *, unwaited_on_every_path: bool = False) -> _Spans:
        merged = dict(self.open)
        for name, pending in other.open:
            if name in merged:
                merged[name] = merged[name] and pending if unwaited_on_every_path else merged[name] or pending
            else:
                merged[name] = pending
        return _Spans(tuple(sorted(merged.items())), self.left_over | other.left_over)

    def pending(self, name: str) -> bool:
        return dict(self.open).get(name, False)

    def with_work(self) -> _Spans:
        return replace(self, open=tuple((name, True) for name, _ in self.open))

    def waited(self) -> _Spans:
        return _Spans(tuple((name, False) for name, _ in self.open), frozenset())

    def cpu_mode(self) -> _Spans:
        """The path the CPU mode takes: no accelerator work is queued on it."""
        return self.waited()

    def started(self, name: str, pending: bool = False) -> _Spans:
        return replace(self, open=tuple(sorted({**dict(self.open), name: pending}.items())))


class _Walk:
    def __init__(self, flow: FlowQueries, names: NameResolver,
                 definitions: Callable[[], Mapping[int, cst.FunctionDef | cst.ClassDef]] | None = None) -> None:
        self.flow = flow
        self.names = names
        self._definitions = definitions
        self.found: dict[int, Reading] = {}
        # Measurements whose left-over work the next step's span waits for.
        self.averaged: set[int] = set()
        self.loops: tuple[int, ...] = ()
        # Loops run twice and branches are searched for waits at every level: what a node
        # holds is found once (keyed by id; the tree outlives the walk).
        self._calls_in: dict[int, list[cst.Call]] = {}
        self._answers: dict[tuple[str, int], bool] = {}
        self._subtractions: dict[tuple[int, str], str | None] = {}
        self._step_calls_of: dict[int, list[cst.Call]] = {}

    def calls(self, unit: cst.CSTNode) -> list[cst.Call]:
        """The calls a node evaluates itself (not those of nested functions and classes)."""
        found = self._calls_in.get(id(unit))
        if found is None:
            if isinstance(unit, _NESTED_SCOPES):
                found = []
            elif isinstance(unit, _STATEMENT_PARTS):
                # From its parts' lists, each found once: a statement is searched at every
                # level of the blocks around it. (Blocks nest only as deep as Python allows.)
                found = [call for child in child_nodes(unit) for call in self.calls(child)]
            else:
                found = list(_calls(unit))
            self._calls_in[id(unit)] = found
        return found

    def readings_in(self, body: Sequence[cst.BaseStatement]) -> int:
        return sum(self._is_reading(call) for statement in body for call in self.calls(statement))

    def _is_reading(self, call: cst.Call) -> bool:
        return self._answer("reading", call, lambda: is_reading(call, self.names))

    def _answer(self, question: str, call: cst.Call, compute: Callable[[], bool]) -> bool:
        key = (question, id(call))
        known = self._answers.get(key)
        if known is None:
            known = self._answers[key] = compute()
        return known

    def missed(self, spans: _Spans) -> None:
        """Nothing in the scope waits for the left-over work inside a measured span: those
        measurements missed it."""
        for left in spans.left_over:
            if id(left.reading.call) not in self.averaged:
                self.found.setdefault(id(left.reading.call), left.reading)

    def _waited(self, spans: _Spans) -> _Spans:
        """A wait: left-over work the next step's span holds is covered there; left-over
        work outside any span was missed by its measurement."""
        self.averaged.update(id(left.reading.call) for left in spans.left_over if left.carried)
        self.missed(replace(spans, left_over=frozenset(left for left in spans.left_over if not left.carried)))
        return spans.waited()

    def block(self, units: Sequence[_Unit], spans: _Spans, later: tuple[cst.CSTNode, ...]) -> _Spans:
        for index, (unit, line) in enumerate(units):
            following = (*(candidate for candidate, _ in units[index + 1:]), *later)
            spans = self._unit(unit, line, spans, following)
        return spans

    def _unit(self, unit: cst.CSTNode, line: cst.SimpleStatementLine | None, spans: _Spans,
              later: tuple[cst.CSTNode, ...]) -> _Spans:
        if isinstance(unit, _NESTED_SCOPES):
            return spans
        if isinstance(unit, cst.If):
            spans = self._calls(self.calls(unit.test), unit, None, spans, later)
            taken = self.block(_units(unit.body), spans, later)
            other = unit.orelse
            if isinstance(other, cst.If):
                skipped = self._unit(other, None, spans, later)
            else:
                skipped = self.block(_units(other.body), spans, later) if other is not None else spans
            # The branch the CPU mode takes (`if torch.cuda.is_available(): sync()` skipped)
            # runs where there is no accelerator work to wait for.
            in_cpu_mode = self.flow.cpu_mode_truth(unit.test)
            if in_cpu_mode is True:
                taken = taken.cpu_mode()
            elif in_cpu_mode is False:
                skipped = skipped.cpu_mode()
            # A branch that may wait (`if verbose: print(loss.item())`, an export step that
            # reads its results) is taken to: work stays unwaited only where every path
            # leaves it so. Work in a branch adds to the span on the path that does it.
            branches_wait = any(self._waits(call) for branch in (unit.body, other) if branch is not None
                                for call in self.calls(branch))
            return taken.join(skipped, unwaited_on_every_path=branches_wait)
        if isinstance(unit, cst.With):
            header = [call for item in unit.items for call in self.calls(item)]
            return self.block(_units(unit.body), self._calls(header, unit, None, spans, later), later)
        if isinstance(unit, cst.Try):
            done = self.block(_units(unit.body), spans, later)
            for handler in unit.handlers:
                done = done.join(self.block(_units(handler.body), spans.join(done), later))
            if unit.orelse is not None:
                done = done.join(self.block(_units(unit.orelse.body), done, later))
            if unit.finalbody is not None:
                done = self.block(_units(unit.finalbody.body), done, later)
            return done
        if isinstance(unit, (cst.For, cst.While)):
            return self._loop(unit, spans, later)
        spans = self._calls(self.calls(unit), unit, line, spans, later)
        return self._rebound(unit, spans)

    def _loop(self, loop: cst.For | cst.While, spans: _Spans, later: tuple[cst.CSTNode, ...]) -> _Spans:
        calls = self.calls(loop)
        # Its own step, not a loop inside it, trains (a loop over devices or models, each
        # trained a few steps, is no training loop: its step is the inner loop and what follows).
        trains = _trains(loop, self._step_calls(loop), self.flow)
        # Each step's copy of its batch to the device waits for the step before: but what one
        # step leaves is nothing next to a training loop's span, so only a read of results
        # makes its body worth walking.
        if trains and not any(self._reads(call) for call in calls):
            # Timed as a whole, and adds no work (see `unsynchronised_readings`); but a span it
            # starts and leaves open (`start = time.time()` each step, read once the loop is
            # done) holds the last step's queued work.
            return self._started_in_training_loop(loop, calls, spans, later)
        header = self.calls(loop.iter) if isinstance(loop, cst.For) else self.calls(loop.test)
        if isinstance(loop, cst.For):
            spans = self._calls(header, loop, None, spans, later)
        body = _units(loop.body)
        wrapped = (*(unit for unit, _ in body), *later)
        outer, self.loops = self.loops, (id(loop), *self.loops)
        after = step = spans
        # Twice at each level would be exponential in the nesting: deep inside, once.
        for _ in range(2 if len(outer) < _LOOPS_RUN_TWICE else 1):
            if isinstance(loop, cst.While):
                step = self._calls(header, loop, None, step, later)
            step = self.block(body, step, wrapped)
            after = after.join(step)
        self.loops = outer
        if trains:
            # Its work adds nothing to the spans around it; what it left over stays.
            entry = dict(spans.open)
            after = replace(after, open=tuple((name, entry.get(name, False) and pending) for name, pending in after.open))
        if loop.orelse is not None:
            after = self.block(_units(loop.orelse.body), after, later)
        return after

    def _step_calls(self, loop: cst.For | cst.While) -> list[cst.Call]:
        """The calls of a loop outside the loops nested in it (found once: loops run twice)."""
        found = self._step_calls_of.get(id(loop))
        if found is None:
            nested = {id(call) for node in _nested_loops(loop.body) for call in self.calls(node)}
            found = self._step_calls_of[id(loop)] = [call for call in self.calls(loop) if id(call) not in nested]
        return found

    def _started_in_training_loop(self, loop: cst.For | cst.While, calls: list[cst.Call], spans: _Spans,
                                  later: tuple[cst.CSTNode, ...]) -> _Spans:
        """The spans around a training loop, with those its body starts as one step leaves
        them. Its own per-step measurements are not judged (they come out right on average):
        a walk of its own finds the spans, and what it found is dropped."""
        if not any(self._is_reading(call) for call in calls):
            return spans
        probe = _Walk(self.flow, self.names, self._definitions)
        probe.loops = (id(loop), *self.loops)
        body = _units(loop.body)
        step = probe.block(body, replace(spans, left_over=frozenset()), (*(unit for unit, _ in body), *later))
        entry = dict(spans.open)
        started = {name: pending for name, pending in step.open if name not in entry}
        return replace(spans, open=tuple(sorted({**entry, **started}.items())))

    def _calls(self, calls: list[cst.Call], unit: cst.CSTNode, line: cst.SimpleStatementLine | None,
               spans: _Spans, later: tuple[cst.CSTNode, ...]) -> _Spans:
        # In the order the calls are made: work queued after the statement's last wait stays.
        for call in calls:
            if self._waits(call):
                spans = self._waited(spans)
            elif self._works(call):
                spans = spans.with_work()
        for reading in (call for call in calls if self._is_reading(call)):
            ended = self._span_ended(reading, unit, later)
            if ended is not None and spans.pending(ended):
                # Its own work from the step before, still queued, is missed here again.
                again = {left for left in spans.left_over if left.reading.call is reading}
                left = _LeftOver(Reading(reading, line), ended, self.loops)
                spans = replace(spans, left_over=(spans.left_over - again) | {left})
            started = _span_started(reading, unit)
            if started is not None:
                spans = self._restarted(spans, started, pending=False)
        return spans

    def _rebound(self, unit: cst.CSTNode, spans: _Spans) -> _Spans:
        """`t0 = t1`: span `t0` starts again where `t1` did."""
        if isinstance(unit, cst.Assign) and len(unit.targets) == 1 and not isinstance(unit.value, cst.Call):
            target, source = _span_name(unit.targets[0].target), _span_name(unit.value)
            if target is not None and source is not None and source in dict(spans.open):
                return self._restarted(spans, target, pending=spans.pending(source))
        return spans

    def _restarted(self, spans: _Spans, name: str, *, pending: bool) -> _Spans:
        # The same measurement's next step: its span holds what the last one left.
        repeated = {left for left in spans.left_over
                    if left.span == name and not left.carried and set(left.loops) & set(self.loops)}
        carried = {replace(left, carried=True) for left in repeated}
        return replace(spans.started(name, pending), left_over=(spans.left_over - repeated) | carried)

    def _waits(self, call: cst.Call, depth: int = 0) -> bool:
        # Answered per depth: one found deep in a callee, where its own callees are not looked
        # into, is no answer for the same call met higher up.
        return self._answer(f"waits{depth}", call, lambda: self._reads(call) or _blocking_copy(call, self.flow, self.names)
                            or (depth < _CALLEE_DEPTH and self._callee_waits(call, depth)))

    def _reads(self, call: cst.Call) -> bool:
        return self._answer("reads", call, lambda: _waits(call, self.flow, self.names, self._returns_nothing))

    def _returns_nothing(self, call: cst.Call) -> bool:
        """A function of this file whose body returns no value (`def step(x): ...
        loss.backward()`): its call's None is no number read on the host."""
        if self._definitions is None:
            return False
        callee = self.flow.value_of(call.func).reference
        found = self._definitions().get(callee.definition) if callee is not None and callee.definition is not None else None
        if not isinstance(found, cst.FunctionDef):
            return False
        return not any(type(node) is cst.Return and node.value is not None
                       and not (type(node.value) is cst.Name and node.value.value == "None")
                       for node in descendants(found.body, into_definitions=False))

    def _callee_waits(self, call: cst.Call, depth: int) -> bool:
        """What the call runs, a function of this file or the `forward` of a model of this file,
        waits somewhere in its own body."""
        body = self._callee_body(call)
        return body is not None and any(self._waits(inner, depth + 1) for inner in self.calls(body))

    def _callee_body(self, call: cst.Call) -> cst.BaseSuite | None:
        if self._definitions is None:
            return None
        callee = self.flow.value_of(call.func)
        definitions = self._definitions()
        if callee.reference is not None and callee.reference.definition is not None:
            found = definitions.get(callee.reference.definition)
            return found.body if isinstance(found, cst.FunctionDef) else None
        if callee.instance_of is not None and callee.is_module_like:
            model = definitions.get(callee.instance_of)
            if isinstance(model, cst.ClassDef):
                forward = next((statement for statement in model.body.body if isinstance(statement, cst.FunctionDef)
                                and statement.name.value == "forward"), None)
                return forward.body if forward is not None else None
        return None

    def _works(self, call: cst.Call) -> bool:
        return self._answer("works", call, lambda: _accelerator_work(call, self.flow))

    def _span_ended(self, reading: cst.Call, unit: cst.CSTNode, later: Sequence[cst.CSTNode]) -> str | None:
        """The span a reading ends: `time.time() - t0`, or `t1 = time.time()` with `t1 - t0`
        later, not one compared with a limit; a stopwatch's `timer.toc()`."""
        stopwatch = _stopwatch(reading)
        if stopwatch is not None:
            return stopwatch[0] if stopwatch[1] == "toc" else None
        ended = _subtracted_in(reading, unit)
        if ended is not _NOT_SUBTRACTED:
            return ended
        bound = _span_started(reading, unit)
        if bound is None:
            return None
        for statement in later:
            key = (id(statement), bound)
            if key not in self._subtractions:
                self._subtractions[key] = _subtracted_from(statement, bound)
            start = self._subtractions[key]
            if start is not None:
                return start
        return None


# A small statement or compound statement, and the line a statement can be put before it on.
_Unit = tuple[cst.CSTNode, cst.SimpleStatementLine | None]


def _nested_loops(node: cst.CSTNode) -> Iterator[cst.For | cst.While]:
    """The outermost loops inside a node (not inside nested functions and classes)."""
    stack: list[cst.CSTNode] = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, _NESTED_SCOPES):
            continue
        if isinstance(current, (cst.For, cst.While)):
            yield current
            continue
        stack.extend(child_nodes(current))


def _units(body: Sequence[cst.BaseStatement] | cst.BaseSuite) -> list[_Unit]:
    if isinstance(body, cst.SimpleStatementSuite):
        return [(small, None) for small in body.body]
    statements: Sequence[cst.BaseStatement] = body.body if isinstance(body, cst.IndentedBlock) else \
        body if isinstance(body, Sequence) else ()
    units: list[_Unit] = []
    for statement in statements:
        if isinstance(statement, cst.SimpleStatementLine):
            units.extend((small, statement if index == 0 else None) for index, small in enumerate(statement.body))
        else:
            units.append((statement, None))
    return units


def _span_name(node: cst.BaseExpression) -> str | None:
    """`t0`, `self.start`, `_t["detect"]`: a name a span can be kept under."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        owner = _span_name(node.value)
        return None if owner is None else f"{owner}.{node.attr.value}"
    if isinstance(node, cst.Subscript) and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
        owner, key = _span_name(node.value), node.slice[0].slice.value
        if owner is not None and isinstance(key, (cst.SimpleString, cst.Integer)):
            return f"{owner}[{key.value}]"
    return None


# A stopwatch object's methods (`_t["forward"].tic()` ... `.toc()`): the `Timer` class that
# detection code bases copy from one another, which reads `time.time()` in both.
_STOPWATCH_METHODS = frozenset({"tic", "toc"})


def is_reading(call: cst.Call, names: NameResolver) -> bool:
    """A reading of the wall clock: `time.time()` and the like, or a stopwatch's `tic()`/`toc()`."""
    return names.qualified_name(call.func, among=TIMERS) is not None or _stopwatch(call) is not None


def _stopwatch(call: cst.Call) -> tuple[str, str] | None:
    """`timer.tic()`, `_t["detect"].toc(average=False)`: the stopwatch's name and the method."""
    func = call.func
    if type(func) is not cst.Attribute or func.attr.value not in _STOPWATCH_METHODS \
            or any(arg.keyword is None for arg in call.args):
        return None
    name = _span_name(func.value)
    return None if name is None else (name, func.attr.value)


def _span_started(reading: cst.Call, unit: cst.CSTNode) -> str | None:
    """`t0 = time.time()`, `timer.tic()`: the span the reading starts."""
    stopwatch = _stopwatch(reading)
    if stopwatch is not None:
        return stopwatch[0] if stopwatch[1] == "tic" else None
    if isinstance(unit, (cst.Assign, cst.AnnAssign)) and unit.value is reading:
        targets = [target.target for target in unit.targets] if isinstance(unit, cst.Assign) else [unit.target]
        if len(targets) == 1:
            return _span_name(targets[0])
    if isinstance(unit, cst.Assign) and len(unit.targets) == 1 and isinstance(unit.value, cst.Tuple):
        # `n, start = 0, time.time()`
        names, values = unit.targets[0].target, unit.value
        if isinstance(names, cst.Tuple) and len(names.elements) == len(values.elements):
            for name, value in zip(names.elements, values.elements, strict=True):
                if value.value is reading:
                    return _span_name(name.value)
    return None


_NOT_SUBTRACTED = "<not subtracted>"


def _subtracted_in(reading: cst.Call, unit: cst.CSTNode) -> str | None:
    """In the reading's own statement, `time.time() - t0`: `t0`; None where the difference is
    compared with a limit (or is not a span's name); `_NOT_SUBTRACTED` where it is not there."""
    stack: list[tuple[cst.CSTNode, bool]] = [(unit, False)]
    while stack:
        node, compared = stack.pop()
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Subtract) and node.left is reading:
            return None if compared else _span_name(node.right)
        inner = compared or isinstance(node, cst.Comparison)
        stack.extend((child, inner) for child in child_nodes(node))
    return _NOT_SUBTRACTED


def _subtracted_from(node: cst.CSTNode, name: str) -> str | None:
    """In `t1 - t0`, given `t1`: `t0`."""
    stack: list[tuple[cst.CSTNode, bool]] = [(node, False)]
    while stack:
        current, compared = stack.pop()
        if isinstance(current, cst.BinaryOperation) and isinstance(current.operator, cst.Subtract) \
                and not compared and _span_name(current.left) == name:
            return _span_name(current.right)
        inner = compared or isinstance(current, cst.Comparison)
        stack.extend((child, inner) for child in child_nodes(current))
    return None


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


def _waits_for_the_device(qualified: str) -> bool:
    return qualified.startswith(_WAITING_MODULES)


def _waits(call: cst.Call, flow: FlowQueries, names: NameResolver,
           returns_nothing: Callable[[cst.Call], bool] | None = None) -> bool:
    if names.qualified_name(call.func, among=_waits_for_the_device) is not None:
        return True
    func = call.func
    callee = flow.value_of(func).reference
    if callee is not None and callee.definition is not None and _host_numbers(flow.value_of(call)) \
            and not (returns_nothing is not None and returns_nothing(call)):
        # A helper of this file that hands back Python numbers (`loss, acc = test(...)`):
        # it read its results on the host, which waited for the work.
        return True
    if isinstance(func, cst.Attribute) and func.attr.value in _WAITING_METHODS:
        return True
    # `x.nonzero()`, `torchvision.ops.nms(...)`: the host needs the result's size.
    if _reads_a_size(func, flow, names):
        return True
    # `print(f"accuracy {acc:.2f}")`, `"%.3f" % loss`, `"{}".format(loss)`: formatting a tensor
    # reads it on the host.
    if any(_formats_device_data(arg.value, flow) for arg in call.args):
        return True
    if isinstance(func, cst.Attribute) and func.attr.value == "format" and any(
            _device_data(flow.value_of(arg.value)) for arg in call.args):
        return True
    # `print(loss)`, `float(loss)`: the value is read on the host.
    return isinstance(func, cst.Name) and func.value in ("print", "float", "int") and any(
        _device_data(flow.value_of(arg.value)) for arg in call.args)


def _reads_a_size(func: cst.BaseExpression, flow: FlowQueries, names: NameResolver) -> bool:
    last = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    if last not in _SIZE_READING_METHODS:
        return False
    if names.qualified_name(func, among=lambda name: name.startswith(("torch.", "torchvision."))) is not None:
        return True
    if not isinstance(func, cst.Attribute):
        return False
    # A method of a tensor (or of what the model cannot tell: a parameter of a helper).
    receiver = flow.value_of(func.value)
    return receiver.reference is None and not receiver.is_module_like


def _blocking_copy(call: cst.Call, flow: FlowQueries, names: NameResolver) -> bool:
    """A copy of host data to an accelerator that the host waits for: `.to(device)` or
    `.cuda()` of a host tensor without `non_blocking`, `torch.tensor(data, device=...)`."""
    func = call.func
    if any(arg.keyword is not None and arg.keyword.value == "non_blocking" for arg in call.args):
        return False
    if isinstance(func, cst.Attribute) and func.attr.value in _MOVES:
        source = flow.value_of(func.value)
        if not (source.is_tensor_like and source.places is not None and not source.may_be_on_accelerator):
            return False
        destination = flow.move_destination(call)
        return destination is not None and destination.may_be_accelerator
    if names.qualified_name(func, among=lambda name: name in _FACTORIES_FROM_DATA) is not None:
        return _device_data(flow.value_of(call))
    return False


def _device_data(value: Value) -> bool:
    return value.is_tensor_like and value.may_be_on_accelerator


def _formats_device_data(node: cst.BaseExpression, flow: FlowQueries) -> bool:
    """An f-string, a `%` format or a concatenation of them that puts a tensor on the device
    into text."""
    if isinstance(node, cst.FormattedString):
        return any(isinstance(part, cst.FormattedStringExpression) and _device_data(flow.value_of(part.expression))
                   for part in node.parts)
    if isinstance(node, cst.ConcatenatedString):
        return _formats_device_data(node.left, flow) or _formats_device_data(node.right, flow)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo) \
            and isinstance(node.left, (cst.SimpleString, cst.ConcatenatedString)):
        formatted = node.right.elements if isinstance(node.right, cst.Tuple) else None
        values = [element.value for element in formatted] if formatted is not None else [node.right]
        return any(_device_data(flow.value_of(value)) for value in values)
    return False


def _host_numbers(value: Value) -> bool:
    if value.kinds == {Kind.SCALAR}:
        return True
    # `return loss.item(), acc.item()`: numbers, where the model can tell, and no tensors.
    items = [item for _, item in value.items or ()]
    return value.kinds == {Kind.CONTAINER} and any(item.kinds == {Kind.SCALAR} for item in items) \
        and not any(item.is_tensor_like or item.is_module_like for item in items)


def _accelerator_work(call: cst.Call, flow: FlowQueries) -> bool:
    """A call the flow model shows computing on an accelerator: its result is device data,
    or it is a method of device data (`loss.backward()`).

    Where only the GPU side of a device test puts the data there (`if use_cuda: x = x.cuda()`),
    as on a machine with a GPU (`value_on_a_gpu_machine`), only a model or function of this
    file, whose waits were looked for first. Not a model of another file called on such
    data: the detectors that are timed that way most often wait inside it (a blocking copy of
    a grid in `forward`, a `nonzero` in their NMS), which this file does not show. Nor the
    tensor methods around them: a video loop's frame-rate reading sees the next frame's copy
    wait for them."""
    value = flow.value_of(call)
    if value.is_tensor_like and value.on_accelerator:
        return True
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value not in _NO_KERNEL_METHODS:
        receiver = flow.value_of(func.value)
        if receiver.is_tensor_like and receiver.on_accelerator:
            return True
    callee = flow.value_of(func)
    shown = callee.reference is not None and callee.reference.definition is not None \
        or callee.instance_of is not None and callee.is_module_like
    if not shown:
        return False
    on_a_gpu_machine = flow.value_on_a_gpu_machine(call)
    return on_a_gpu_machine.is_tensor_like and on_a_gpu_machine.on_accelerator
