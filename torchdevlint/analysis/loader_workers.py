"""Code that DataLoader worker processes run, and the CUDA it touches.

With `num_workers > 0` a DataLoader forks worker processes (the default start method on
Linux), and each worker runs the dataset's `__getitem__` (or `__iter__`) and the loader's
`collate_fn`. CUDA cannot be used in a process forked after the parent initialised it:
"Cannot re-initialize CUDA in forked subprocess". A shared analysis
(`context.shared(LoaderWorkers)`), fed by the engine's walk; read `worker_moves()` at
leave_Module.

Which dataset a loader gets and which collate function is the flow model's answer: a
same-file class instance (`Value.instance_of`) and a same-file function (`Reference.definition`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

import libcst as cst

from torchdevlint.analysis.brains.torch_api import DATALOADERS
from torchdevlint.analysis.command_line import CommandLine
from torchdevlint.analysis.devices import integer_value, string_value
from torchdevlint.analysis.flow.results import FlowQueries
from torchdevlint.analysis.names import ImportTable, dotted_name
from torchdevlint.analysis.tree import keyword_argument

# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, ...)
_NUM_WORKERS_POSITION = 5
_COLLATE_POSITION = 6
# The methods a worker calls on the dataset.
_WORKER_METHODS = frozenset({"__getitem__", "__getitems__", "__iter__", "__next__"})
# Start methods under which a worker starts a fresh interpreter, where CUDA can initialise.
_FRESH_START = frozenset({"spawn", "forkserver"})
_CPU_COUNTS = frozenset({"os.cpu_count", "multiprocessing.cpu_count", "os.sched_getaffinity", "psutil.cpu_count"})
_START_METHOD = re.compile(r"(^|\.)(set_start_method|get_context)$")


class WorkerWalkContext(Protocol):
    @property
    def flow(self) -> FlowQueries: ...

    @property
    def imports(self) -> ImportTable: ...

    def enclosing_function(self) -> cst.FunctionDef | None: ...

    def shared(self, analysis: type[CommandLine]) -> CommandLine: ...


@dataclass(frozen=True)
class WorkerLoader:
    """A DataLoader that runs code in forked workers."""

    call: cst.Call
    # The `num_workers=` argument (its value may be greater than 0).
    num_workers: cst.Arg


@dataclass(frozen=True)
class WorkerMove:
    """A move to CUDA (or a tensor made there) in code a loader's workers run."""

    node: cst.Call
    function: cst.FunctionDef
    loaders: tuple[WorkerLoader, ...]


class LoaderWorkers:
    def __init__(self, context: WorkerWalkContext) -> None:
        self._context = context
        self._options = context.shared(CommandLine)
        # Candidate calls (syntactically a move or a call with `device=`), by enclosing function.
        self._candidates: dict[int, list[cst.Call]] = {}
        self._functions: dict[int, cst.FunctionDef] = {}
        # Dataset classes by id, with their worker methods.
        self._worker_methods: dict[int, list[cst.FunctionDef]] = {}
        # Loaders with workers, with their dataset and collate_fn arguments.
        self._loaders: list[tuple[WorkerLoader, cst.Arg | None, cst.Arg | None]] = []
        self._fresh_start = False
        # Module-level `NAME = <int>` bindings (None: bound more than once or to something else).
        self._module_integers: dict[str, int | None] = {}

    # ---- the walk --------------------------------------------------------------------------

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        methods = [
            statement for statement in node.body.body
            if isinstance(statement, cst.FunctionDef) and statement.name.value in _WORKER_METHODS
        ]
        if methods:
            self._worker_methods[id(node)] = methods

    def leave_Assign(self, node: cst.Assign) -> None:
        if self._context.enclosing_function() is not None:
            return
        for target in node.targets:
            if isinstance(target.target, cst.Name):
                name = target.target.value
                number = integer_value(node.value)
                if number is None and self._counts_cpus(node.value):
                    number = 1  # `NUM_WORKERS = os.cpu_count()`: at least one
                self._module_integers[name] = number if name not in self._module_integers else None

    def leave_Call(self, node: cst.Call) -> None:
        func = node.func
        name = dotted_name(func) or ""
        if _START_METHOD.search(name) and node.args and string_value(node.args[0].value) in _FRESH_START:
            self._fresh_start = True
            return
        # The import table, not the flow model: asking the model about every call would
        # interpret every function of the file.
        if self._context.imports.qualified_name(func) in DATALOADERS:
            self._loader(node)
            return
        function = self._context.enclosing_function()
        if function is None:
            return
        is_move = isinstance(func, cst.Attribute) and func.attr.value in ("to", "cuda")
        if is_move or keyword_argument(node, "device") is not None or ".cuda." in f".{name}.":
            self._candidates.setdefault(id(function), []).append(node)
            self._functions[id(function)] = function

    def _loader(self, call: cst.Call) -> None:
        if any(arg.star for arg in call.args):
            return  # settings this file cannot see
        positional = [arg for arg in call.args if arg.keyword is None]
        workers = keyword_argument(call, "num_workers") or (
            positional[_NUM_WORKERS_POSITION] if len(positional) > _NUM_WORKERS_POSITION else None)
        if workers is None or not self._may_be_positive(workers.value):
            return
        context = keyword_argument(call, "multiprocessing_context")
        if context is not None:
            method = string_value(context.value)
            if method is None or method in _FRESH_START:
                return  # a fresh interpreter, or a context this file does not name
        dataset = keyword_argument(call, "dataset") or (positional[0] if positional else None)
        collate = keyword_argument(call, "collate_fn") or (
            positional[_COLLATE_POSITION] if len(positional) > _COLLATE_POSITION else None)
        self._loaders.append((WorkerLoader(call, workers), dataset, collate))

    def _counts_cpus(self, node: cst.BaseExpression) -> bool:
        return isinstance(node, cst.Call) and (
            self._context.imports.qualified_name(node.func) or dotted_name(node.func)) in _CPU_COUNTS

    def _may_be_positive(self, node: cst.BaseExpression) -> bool:
        """Whether a `num_workers` value is known to be, or defaults to, more than 0."""
        number = integer_value(node)
        if number is not None:
            return number > 0
        if isinstance(node, cst.Name):
            bound = self._module_integers.get(node.value)
            return bound is not None and bound > 0
        if isinstance(node, cst.Attribute):
            default = self._options.integer_default(node)
            return default is not None and default > 0
        if isinstance(node, cst.Call):
            name = self._context.imports.qualified_name(node.func) or dotted_name(node.func)
            if name in _CPU_COUNTS:
                return True
            if name in ("min", "max"):
                return all(self._may_be_positive(arg.value) for arg in node.args) if name == "min" \
                    else any(self._may_be_positive(arg.value) for arg in node.args)
        return False

    # ---- results ---------------------------------------------------------------------------

    def loaders(self) -> list[WorkerLoader]:
        """The file's DataLoaders that start worker processes (`num_workers` known to be, or
        to default to, more than 0; no fresh-interpreter `multiprocessing_context`), in file
        order."""
        return [loader for loader, _, _ in self._loaders]

    def worker_moves(self) -> list[WorkerMove]:
        """Moves to CUDA in code that a loader with workers runs in them, in file order; none
        where the program starts its processes fresh (`set_start_method("spawn")`)."""
        if self._fresh_start:
            return []
        found: dict[int, WorkerMove] = {}
        for owner, loaders in self._run_in_workers().items():
            functions = self._worker_methods.get(owner)
            if functions is None:
                function = self._functions.get(owner)
                functions = [function] if function is not None else []
            for function in functions:
                for call in self._candidates.get(id(function), []):
                    if id(call) in found:
                        earlier = found[id(call)]
                        found[id(call)] = WorkerMove(call, function, (*earlier.loaders, *loaders))
                    elif self._makes_cuda_data(call):
                        found[id(call)] = WorkerMove(call, function, tuple(loaders))
        return list(found.values())

    def _run_in_workers(self) -> dict[int, list[WorkerLoader]]:
        """id of a same-file ClassDef or FunctionDef a loader's workers run -> those loaders.

        The flow model is asked only where a dataset method or a function that could be a
        collate function moves data: asking it interprets the file.
        """
        classes = {owner for owner, methods in self._worker_methods.items()
                   if any(id(method) in self._candidates for method in methods)}
        function_names = {function.name.value for function in self._functions.values()}
        flow = self._context.flow
        run: dict[int, list[WorkerLoader]] = {}
        for loader, dataset, collate in self._loaders:
            if dataset is not None and classes:
                held = flow.value_of(dataset.value)
                if held.instance_of in classes and not held.is_module_like:
                    run.setdefault(held.instance_of, []).append(loader)
            named = (dotted_name(collate.value) or "").rsplit(".", 1)[-1] if collate is not None else ""
            if collate is not None and named in function_names:
                reference = flow.value_of(collate.value).reference
                if reference is not None and reference.definition is not None:
                    run.setdefault(reference.definition, []).append(loader)
        return run

    def _makes_cuda_data(self, call: cst.Call) -> bool:
        flow = self._context.flow
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value in ("to", "cuda"):
            destination = flow.move_destination(call)
            return destination is not None and destination.may_be_accelerator \
                and not flow.value_of(func.value).is_module_like
        value = flow.value_of(call)
        return value.is_tensor_like and bool(value.places) and all(
            place.may_be_accelerator for place in value.places or ())
