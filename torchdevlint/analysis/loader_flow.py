"""Which DataLoaders feed an accelerator: loops over them and the batch moves in those loops.

A DataLoader feeds the device when a loop in the same file iterates it and moves an item of
each batch with `.to(device)` / `.cuda()`. Which loaders a loop iterates is the flow model's
answer (`Value.holds` of the iterated value): through names, attributes, helpers that return
a loader, and parameters the file's own calls fill; a value that is anything but a loader
on some path links nothing. What the dataset yields is the model's value of the dataset,
and where a move sends its receiver is the model's `move_destination`. Which names hold a
batch is followed here, in the loop's own body: the loop's targets and what is computed
from them.

Shared by the rules about pinned memory and loader workers: one instance per file
(`context.shared(LoaderFlow)`), fed by the engine's walk; they read the results at
`leave_Module`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

import libcst as cst

from torchdevlint.analysis.flow.results import FlowQueries, Held
from torchdevlint.analysis.flow.values import Kind
from torchdevlint.analysis.names import ImportTable
from torchdevlint.analysis.tree import child_nodes, keyword_argument


class WalkContext(Protocol):
    """What the loader analysis reads of the walk that feeds it (a rule's `FileContext`)."""

    @property
    def flow(self) -> FlowQueries: ...

    @property
    def imports(self) -> ImportTable: ...

    def ancestors(self, node: cst.CSTNode) -> list[cst.CSTNode]: ...

# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, pin_memory, ...)
_NUM_WORKERS_POSITION = 5
_PIN_MEMORY_POSITION = 7
_ITERATOR_WRAPPERS = frozenset({"enumerate", "iter", "tqdm", "tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm"})
_NESTED_SCOPES = (cst.FunctionDef, cst.Lambda, cst.ClassDef)
_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)


class PinMemory(Enum):
    ABSENT = "absent"
    ON = "on"
    # `pin_memory=False` written out: a choice, not an omission.
    OFF = "off"
    # A variable or expression: whatever the user configured.
    CONFIGURED = "configured"


class DatasetSource(Enum):
    """What the dataset handed to a DataLoader is known to be."""

    # torchvision/torchaudio/torchtext datasets: decoded from files on the host.
    FILES = "files"
    # A TensorDataset of CPU tensors: items are slices, cheap to take in the main process.
    HOST_TENSORS = "host tensors"
    UNKNOWN = "unknown"


def names_in(node: cst.CSTNode) -> set[str]:
    """Every plain name read inside an expression."""
    found: set[str] = set()
    stack: list[cst.CSTNode] = [node]
    while stack:
        current = stack.pop()
        # Exact type tests: isinstance on LibCST's ABCs is slow.
        if type(current) is cst.Name:
            found.add(current.value)
        elif type(current) is cst.Attribute:
            stack.append(current.value)
        else:
            stack.extend(child_nodes(current))
    return found


def _is_true(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "True"


def _is_false(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "False"


def is_non_blocking(call: cst.Call) -> bool:
    """`non_blocking=True`, or `.cuda(device, True)`."""
    keyword = keyword_argument(call, "non_blocking")
    if keyword is not None:
        return _is_true(keyword.value)
    positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
    return (
        isinstance(call.func, cst.Attribute)
        and call.func.attr.value == "cuda"
        and len(positional) >= 2
        and _is_true(positional[1].value)
    )


@dataclass(frozen=True)
class LoaderCall:
    """A `DataLoader(...)` call and what it says about workers and pinning."""

    call: cst.Call
    pin_memory: PinMemory
    num_workers_given: bool
    # `**kwargs` or `*args`: settings this file cannot see.
    splat: bool
    dataset: DatasetSource

    @property
    def host_dataset(self) -> bool:
        """The dataset is known to yield CPU tensors, which can be pinned."""
        return self.dataset is not DatasetSource.UNKNOWN


@dataclass(frozen=True)
class DeviceMove:
    call: cst.Call
    non_blocking: bool


@dataclass
class BatchLoop:
    node: cst.For
    # What the loop iterates, inside `enumerate(...)`/`tqdm(...)`/`iter(...)`.
    iterable: cst.BaseExpression
    # Loop targets, and names later computed from them inside the loop.
    batch_names: set[str]
    moves: list[DeviceMove] = field(default_factory=list)


class LoaderFlow:
    """A shared analysis (`context.shared(LoaderFlow)`), fed by the walk; read `feeding_loops()`
    at leave_Module."""

    def __init__(self, context: WalkContext) -> None:
        self.context = context
        self._loaders: dict[int, LoaderCall] = {}
        self._open_loops: list[BatchLoop] = []
        self.loops: list[BatchLoop] = []
        # The file uses CUDA (or torch.accelerator) somewhere, and trains (calls `.backward()`).
        self.mentions_cuda = False
        self.trains = False
        # Some code in the file pins tensors by hand (`.pin_memory()`, in a collate_fn say).
        self.pins_anywhere = False

    # ---- evidence about the file ---------------------------------------------------

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value in ("cuda", "accelerator"):
            self.mentions_cuda = True

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if not self.mentions_cuda and "cuda" in node.value.lower():
            self.mentions_cuda = True

    def visit_FormattedStringText(self, node: cst.FormattedStringText) -> None:
        if not self.mentions_cuda and "cuda" in node.value.lower():
            self.mentions_cuda = True

    # ---- loaders -------------------------------------------------------------------

    def _describe(self, node: cst.Call) -> LoaderCall:
        found = self._loaders.get(id(node))
        if found is not None:
            return found
        positional = [arg for arg in node.args if arg.keyword is None and not arg.star]
        splat = any(arg.star for arg in node.args)
        keyword = keyword_argument(node, "pin_memory")
        pin_value = keyword.value if keyword is not None else (
            positional[_PIN_MEMORY_POSITION].value if len(positional) > _PIN_MEMORY_POSITION else None
        )
        if pin_value is None:
            pin = PinMemory.ABSENT
        elif _is_true(pin_value):
            pin = PinMemory.ON
        elif _is_false(pin_value):
            pin = PinMemory.OFF
        else:
            pin = PinMemory.CONFIGURED
        workers = keyword_argument(node, "num_workers") is not None or len(positional) > _NUM_WORKERS_POSITION
        dataset_arg = keyword_argument(node, "dataset")
        dataset = dataset_arg.value if dataset_arg is not None else (positional[0].value if positional else None)
        source = DatasetSource.UNKNOWN if dataset is None else self._dataset_source(dataset)
        found = self._loaders[id(node)] = LoaderCall(node, pin, workers, splat, source)
        return found

    def _dataset_source(self, node: cst.BaseExpression) -> DatasetSource:
        """What the model knows the dataset's items to be."""
        dataset = self.context.flow.value_of(node)
        item = dataset.item("*") if dataset.kinds == {Kind.DATASET} else None
        if item is None or item.kinds != {Kind.CONTAINER}:
            return DatasetSource.UNKNOWN
        if item.items is None:
            # Decoded from files (torchvision and friends): CPU tensors of unknown shape.
            return DatasetSource.FILES if item.on_host else DatasetSource.UNKNOWN
        if item.items and all(part.is_tensor_like and part.on_host for _, part in item.items):
            return DatasetSource.HOST_TENSORS
        return DatasetSource.UNKNOWN

    # ---- loops ---------------------------------------------------------------------

    def visit_For(self, node: cst.For) -> None:
        iterable = node.iter
        target: cst.BaseExpression = node.target
        while isinstance(iterable, cst.Call) and iterable.args and not iterable.args[0].keyword:
            callee = iterable.func
            name = callee.value if isinstance(callee, cst.Name) else self.context.imports.qualified_name(callee)
            if name not in _ITERATOR_WRAPPERS:
                break
            if name == "enumerate" and isinstance(target, cst.Tuple) and len(target.elements) == 2:
                target = target.elements[1].value
            iterable = iterable.args[0].value
        batch_names = names_in(target)
        if not batch_names:
            return
        loop = BatchLoop(node, iterable, batch_names)
        self._open_loops.append(loop)
        self.loops.append(loop)

    def leave_For(self, node: cst.For) -> None:
        if self._open_loops and self._open_loops[-1].node is node:
            self._open_loops.pop()

    def leave_Assign(self, node: cst.Assign) -> None:
        self._propagate(node, [t.target for t in node.targets], node.value)

    def leave_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._propagate(node, [node.target], node.value)

    def _loops_around(self, node: cst.CSTNode) -> list[BatchLoop]:
        """The open batch loops whose body holds `node` directly (not through a nested def)."""
        if not self._open_loops:
            return []
        ancestors = self.context.ancestors(node)
        found: list[BatchLoop] = []
        for loop in self._open_loops:
            for ancestor in ancestors:
                if ancestor is loop.node:
                    found.append(loop)
                    break
                if isinstance(ancestor, _NESTED_SCOPES):
                    break
        return found

    def _propagate(self, statement: cst.CSTNode, targets: list[cst.BaseExpression], value: cst.BaseExpression) -> None:
        """`x, y = batch` inside the loop: x and y are batch data too."""
        # Only the statement is still on the traversal path when it is left.
        for loop in self._loops_around(statement):
            if names_in(value) & loop.batch_names:
                for target in targets:
                    if isinstance(target, (cst.Name, cst.Tuple, cst.List)):
                        loop.batch_names |= names_in(target)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not isinstance(func, cst.Attribute):
            return
        method = func.attr.value
        if method == "backward":
            self.trains = True
            return
        if method == "pin_memory":
            self.pins_anywhere = True
            return
        destination = self.context.flow.move_destination(node) if method in ("to", "cuda") else None
        if destination is None or not destination.may_be_accelerator:
            return
        if self.context.flow.value_of(func.value).is_module_like:
            return
        loops = self._loops_around(node)
        if not loops:
            return
        read = names_in(func.value) | self._comprehension_sources(node)
        for loop in loops:
            if read & loop.batch_names:
                loop.moves.append(DeviceMove(node, is_non_blocking(node)))

    def _comprehension_sources(self, node: cst.CSTNode) -> set[str]:
        """`[t.cuda() for t in batch]`: the names the comprehension iterates over."""
        found: set[str] = set()
        for ancestor in self.context.ancestors(node):
            if isinstance(ancestor, _COMPREHENSIONS):
                comp: cst.CompFor | None = ancestor.for_in
                while comp is not None:
                    found |= names_in(comp.iter)
                    comp = comp.inner_for_in
            elif isinstance(ancestor, cst.BaseStatement):
                break
        return found

    # ---- results -------------------------------------------------------------------

    def loaders_of(self, loop: BatchLoop) -> list[LoaderCall]:
        """The file's DataLoaders a loop iterates; empty unless it iterates one on every path."""
        flow = self.context.flow
        iterated = flow.value_of(loop.iterable)
        if iterated.kinds != {Kind.DATALOADER}:
            return []
        calls = flow.held_calls(iterated, Held.DATALOADER)
        if not calls or len(calls) != len(iterated.holds):
            return []  # a loader made where this file cannot see its settings
        return [self._describe(call) for call in calls]

    def feeding_loops(self) -> list[tuple[BatchLoop, list[LoaderCall]]]:
        """Loops that move batches to the accelerator, with the loaders they iterate."""
        found = []
        for loop in self.loops:
            if loop.moves:
                loaders = self.loaders_of(loop)
                if loaders:
                    found.append((loop, loaders))
        return found
