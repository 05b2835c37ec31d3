"""Which DataLoaders feed an accelerator: loaders built in the file, loops over them, batch moves.

A DataLoader feeds the device when a loop in the same file iterates it (by the name or
attribute it is bound to, through `enumerate`/`tqdm`/`iter`, or through a helper defined in
the file that returns it) and moves an item of each batch with `.to(device)` / `.cuda()`.
Names link across functions: `train_loader` built in `main` and iterated by
`train(model, train_loader)` is one loader; a name also bound to anything else (a wrapper
such as `accelerator.prepare(loader)`) links nothing.

Shared by the rules about pinned memory and loader workers: one instance per file
(`context.shared(LoaderFlow)`), fed by the engine's walk; they read the results at
`leave_Module`, once helpers defined late are known.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import libcst as cst

from torchdevlint.analysis import torch_api
from torchdevlint.analysis.devices import is_device_string
from torchdevlint.analysis.names import dotted_name
from torchdevlint.analysis.tree import child_nodes, keyword_argument
from torchdevlint.context import FileContext

# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, pin_memory, ...)
_NUM_WORKERS_POSITION = 5
_PIN_MEMORY_POSITION = 7
_ITERATOR_WRAPPERS = frozenset({"enumerate", "iter", "tqdm", "tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm"})
_NESTED_SCOPES = (cst.FunctionDef, cst.Lambda, cst.ClassDef)
_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)
# Names a device variable is given; `.to(rank)` and `.cuda(args.gpu)` in DDP scripts.
_DEVICE_WORDS = ("device", "gpu", "cuda", "rank")
# `self.device`, `args.device`: a configured device, unlike `tensor.device`.
_SETTINGS_OBJECTS = frozenset({"self", "args", "opt", "opts", "config", "cfg", "hparams", "params", "settings", "flags", "FLAGS"})
# Dataset factories whose items are CPU tensors (decoded files, in-memory arrays).
_HOST_DATASET_PREFIXES = ("torchvision.datasets.", "torchaudio.datasets.", "torchtext.datasets.")
_TENSOR_DATASETS = frozenset({"torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset"})


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


class Target(Enum):
    """Where a `.to(...)` / `.cuda(...)` call sends its receiver."""

    ACCELERATOR = "accelerator"
    CPU = "cpu"
    OTHER = "other"


def names_in(node: cst.CSTNode) -> set[str]:
    """Every plain name read inside an expression."""
    found: set[str] = set()
    stack: list[cst.CSTNode] = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Name):
            found.add(current.value)
        elif isinstance(current, cst.Attribute):
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


def _identifier(node: cst.BaseExpression) -> str | None:
    """`train_loader` for `train_loader`, `self.train_loader`, `args.train_loader`."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute) and dotted_name(node) is not None:
        return node.attr.value
    return None


def _mentions(node: cst.CSTNode, words: tuple[str, ...]) -> bool:
    stack: list[cst.CSTNode] = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Name) and any(word in current.value.lower() for word in words):
            return True
        if isinstance(current, cst.SimpleString) and any(word in current.value.lower() for word in words):
            return True
        stack.extend(child_nodes(current))
    return False


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


@dataclass(frozen=True)
class Parameter:
    """A loop over a function's parameter: the loader is whatever its callers pass."""

    function: str
    # Position among the arguments a caller writes (after `self` for a method).
    index: int | None
    name: str


@dataclass
class BatchLoop:
    node: cst.For
    # The identifier iterated, the DataLoader call iterated directly, or a parameter.
    source: str | cst.Call | Parameter
    # Loop targets, and names later computed from them inside the loop.
    batch_names: set[str]
    moves: list[DeviceMove] = field(default_factory=list)


@dataclass
class _Binding:
    loader: LoaderCall | None = None
    # Name of a function in this file whose result was bound (a loader factory, maybe).
    helper: str | None = None


class LoaderFlow:
    """A shared analysis (`context.shared(LoaderFlow)`), fed by the walk; read `feeds()` at
    leave_Module."""

    def __init__(self, context: FileContext) -> None:
        self.context = context
        self._loaders: dict[int, LoaderCall] = {}
        # identifier -> every value bound to it in the file.
        self._bindings: dict[str, list[_Binding]] = {}
        # (scope node id, name) -> loaders bound to a local name, for `return loader`.
        self._local: dict[tuple[int, str], list[LoaderCall]] = {}
        # (scope node id, name) -> the last expression assigned, to resolve datasets.
        self._values: dict[tuple[int, str], cst.BaseExpression] = {}
        self._factories: dict[str, list[LoaderCall]] = {}
        # Function name -> (positional, keyword) arguments of each call of it in the file;
        # None for a call with `*args`/`**kwargs`.
        self._call_sites: dict[str, list[tuple[list[object], dict[str, object]] | None]] = {}
        # Helper function name -> what the dataset it returns is known to be.
        self._returned_datasets: dict[str, DatasetSource] = {}
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

    def loader_call(self, node: cst.Call) -> LoaderCall | None:
        if self.context.imports.qualified_name(node.func) not in torch_api.DATALOADERS:
            return None
        found = self._loaders.get(id(node))
        if found is None:
            found = self._loaders[id(node)] = self._describe(node)
        return found

    def _describe(self, node: cst.Call) -> LoaderCall:
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
        source = DatasetSource.UNKNOWN if dataset is None else self._dataset_source(dataset, depth=2)
        return LoaderCall(node, pin, workers, splat, source)

    def _lookup_value(self, name: str) -> cst.BaseExpression | None:
        for scope in reversed(self.context.scopes()):
            value = self._values.get((id(scope), name))
            if value is not None:
                return value
        return None

    def _dataset_source(self, node: cst.BaseExpression, depth: int) -> DatasetSource:
        if isinstance(node, cst.Name) and depth > 0:
            bound = self._lookup_value(node.value)
            return DatasetSource.UNKNOWN if bound is None else self._dataset_source(bound, depth - 1)
        if not isinstance(node, cst.Call):
            return DatasetSource.UNKNOWN
        qualified = self.context.imports.qualified_name(node.func) or ""
        if qualified.startswith(_HOST_DATASET_PREFIXES):
            return DatasetSource.FILES
        if qualified in _TENSOR_DATASETS:
            # CPU tensors when each is made in sight and nothing there puts it on a device.
            for arg in node.args:
                value: cst.BaseExpression | None = arg.value
                if isinstance(value, cst.Name):
                    value = self._lookup_value(value.value) if depth > 0 else None
                if arg.star or value is None or _mentions(value, ("cuda", "device")) or _moves(value):
                    return DatasetSource.UNKNOWN
            return DatasetSource.HOST_TENSORS
        if not qualified and isinstance(node.func, cst.Name):
            # `make_dataset()`: a helper in this file returning a known dataset.
            return self._returned_datasets.get(node.func.value, DatasetSource.UNKNOWN)
        return DatasetSource.UNKNOWN

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        identifier = _identifier(target)
        if identifier is None:
            for name in names_in(target) if isinstance(target, (cst.Tuple, cst.List)) else ():
                self._bindings.setdefault(name, []).append(_Binding())
            return
        binding = _Binding()
        if isinstance(value, cst.Call):
            loader = self.loader_call(value)
            if loader is not None:
                binding.loader = loader
            elif isinstance(value.func, (cst.Name, cst.Attribute)) and self.context.imports.qualified_name(value.func) is None:
                binding.helper = _identifier(value.func)
        self._bindings.setdefault(identifier, []).append(binding)
        if isinstance(target, cst.Name):
            key = (id(self.context.current_scope), target.value)
            self._values[key] = value
            if binding.loader is not None:
                self._local[key] = [binding.loader]
            else:
                self._local.pop(key, None)

    def leave_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._bind(target.target, node.value)
        self._propagate(node, [t.target for t in node.targets], node.value)

    def leave_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._bind(node.target, node.value)
            self._propagate(node, [node.target], node.value)

    def visit_Return(self, node: cst.Return) -> None:
        function = self.context.enclosing_function()
        if function is None or node.value is None:
            return
        loaders: list[LoaderCall] = []
        if isinstance(node.value, (cst.Call, cst.Name)):
            source = self._dataset_source(node.value, depth=2)
            name = function.name.value
            if self._returned_datasets.get(name, source) is not source:
                source = DatasetSource.UNKNOWN  # returns different kinds of dataset
            self._returned_datasets[name] = source
        if isinstance(node.value, cst.Call):
            loader = self.loader_call(node.value)
            if loader is not None:
                loaders.append(loader)
        elif isinstance(node.value, cst.Name):
            for scope in reversed(self.context.scopes()):
                found = self._local.get((id(scope), node.value.value))
                if found is not None:
                    loaders.extend(found)
                    break
        if loaders:
            self._factories.setdefault(function.name.value, []).extend(loaders)

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
        source: str | cst.Call | Parameter | None
        if isinstance(iterable, cst.Call) and self.loader_call(iterable) is not None:
            source = iterable
        elif isinstance(iterable, cst.Name):
            source = self._parameter(iterable.value) or iterable.value
        else:
            source = _identifier(iterable)
        if source is None:
            return
        batch_names = names_in(target)
        if not batch_names:
            return
        loop = BatchLoop(node, source, batch_names)
        self._open_loops.append(loop)
        self.loops.append(loop)

    def _parameter(self, name: str) -> Parameter | None:
        """The parameter `name` of the enclosing function, unless the function rebinds it."""
        function = self.context.enclosing_function()
        if function is None or (id(function), name) in self._values:
            return None
        params = function.params
        positional = [*params.posonly_params, *params.params]
        method = self.context.enclosing_method()
        if method is not None and method.function is function and positional:
            positional = positional[1:]
        for index, param in enumerate(positional):
            if param.name.value == name:
                return Parameter(function.name.value, index, name)
        if any(param.name.value == name for param in params.kwonly_params):
            return Parameter(function.name.value, None, name)
        return None

    def leave_For(self, node: cst.For) -> None:
        if self._open_loops and self._open_loops[-1].node is node:
            self._open_loops.pop()

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

    def _record_call_site(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Name):
            name = func.value
        elif isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
            name = func.attr.value
        else:
            return
        if self.context.imports.is_imported(name) and isinstance(func, cst.Name):
            return
        if any(arg.star for arg in node.args):
            self._call_sites.setdefault(name, []).append(None)
            return
        positional: list[object] = []
        keywords: dict[str, object] = {}
        for arg in node.args:
            passed = self._passed(arg.value)
            if arg.keyword is None:
                positional.append(passed)
            else:
                keywords[arg.keyword.value] = passed
        self._call_sites.setdefault(name, []).append((positional, keywords))

    def _passed(self, value: cst.BaseExpression) -> object:
        if isinstance(value, cst.Call):
            return self.loader_call(value)
        if isinstance(value, cst.Name):
            return self._parameter(value.value) or value.value
        return _identifier(value)

    def visit_Call(self, node: cst.Call) -> None:
        self._record_call_site(node)
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
        if method not in ("to", "cuda") or move_target(self.context, node) is not Target.ACCELERATOR:
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
        """The DataLoaders a loop iterates; empty when any way in is something else."""
        return self._resolve(loop.source, depth=3)

    def _resolve(self, source: object, depth: int) -> list[LoaderCall]:
        if isinstance(source, LoaderCall):
            return [source]
        if isinstance(source, cst.Call):
            loader = self._loaders.get(id(source))
            return [loader] if loader is not None else []
        if isinstance(source, Parameter):
            return self._resolve_parameter(source, depth)
        if not isinstance(source, str):
            return []
        loaders: list[LoaderCall] = []
        for binding in self._bindings.get(source, []):
            if binding.loader is not None:
                loaders.append(binding.loader)
            elif binding.helper is not None and binding.helper in self._factories:
                loaders.extend(self._factories[binding.helper])
            else:
                return []
        return loaders

    def _resolve_parameter(self, parameter: Parameter, depth: int) -> list[LoaderCall]:
        """Every call of the function in this file must pass a known loader for the parameter."""
        sites = self._call_sites.get(parameter.function, [])
        if not sites or depth == 0:
            return []
        loaders: list[LoaderCall] = []
        for site in sites:
            if site is None:
                return []
            positional, keywords = site
            if parameter.name in keywords:
                passed = keywords[parameter.name]
            elif parameter.index is not None and parameter.index < len(positional):
                passed = positional[parameter.index]
            else:
                return []  # the default value, or an argument this analysis cannot place
            found = self._resolve(passed, depth - 1)
            if not found:
                return []
            loaders.extend(found)
        return loaders

    def feeding_loops(self) -> list[tuple[BatchLoop, list[LoaderCall]]]:
        """Loops that move batches to the accelerator, with the loaders they iterate."""
        found = []
        for loop in self.loops:
            if loop.moves:
                loaders = self.loaders_of(loop)
                if loaders:
                    found.append((loop, loaders))
        return found


def _moves(node: cst.CSTNode) -> bool:
    stack: list[cst.CSTNode] = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Call) and isinstance(current.func, cst.Attribute) and current.func.attr.value in ("to", "cuda"):
            return True
        stack.extend(child_nodes(current))
    return False


def move_target(context: FileContext, call: cst.Call) -> Target:
    """Where `x.to(...)` / `x.cuda(...)` sends `x`: an accelerator, the CPU, or somewhere unclear."""
    func = call.func
    if not isinstance(func, cst.Attribute):
        return Target.OTHER
    if func.attr.value == "cuda":
        return Target.ACCELERATOR
    if func.attr.value != "to":
        return Target.OTHER
    keyword = keyword_argument(call, "device")
    positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
    if keyword is not None:
        value = keyword.value
    elif positional:
        value = positional[0].value
    else:
        return Target.OTHER
    return device_expression_target(context, value)


def device_expression_target(context: FileContext, value: cst.BaseExpression) -> Target:
    if isinstance(value, cst.SimpleString):
        if not is_device_string(value):
            return Target.OTHER
        text = value.evaluated_value
        return Target.CPU if isinstance(text, str) and text.split(":", 1)[0] == "cpu" else Target.ACCELERATOR
    if isinstance(value, cst.Integer):
        return Target.ACCELERATOR
    if isinstance(value, cst.Call):
        if context.imports.qualified_name(value.func) == torch_api.TORCH_DEVICE and value.args:
            return device_expression_target(context, value.args[0].value)
        return Target.OTHER
    if isinstance(value, (cst.Name, cst.Attribute)):
        if context.imports.qualified_name(value) is not None:
            return Target.OTHER  # torch.float32, torch.device: not a device value
        info = context.flow.value_of(value)
        if info.is_tensor_like or info.is_module_like:
            return Target.OTHER
        if isinstance(value, cst.Attribute) and value.attr.value == "device" and not (
            isinstance(value.value, cst.Name) and value.value.value in _SETTINGS_OBJECTS
        ):
            # `labels.to(outputs.device)`: wherever another value lives, maybe the CPU.
            return Target.OTHER
        identifier = (_identifier(value) or "").lower()
        if "cpu" in identifier:
            return Target.CPU
        if info.is_device or any(word in identifier for word in _DEVICE_WORDS):
            return Target.ACCELERATOR
    return Target.OTHER
