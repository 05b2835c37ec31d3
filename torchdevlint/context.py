"""What a rule may ask about the file it is reading, while the single pass is under way."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar, cast

import libcst as cst

from torchdevlint.analysis.flow.memory import FlowMemory
from torchdevlint.analysis.flow.model import FlowModel
from torchdevlint.analysis.flow.results import FlowQueries, Scope
from torchdevlint.analysis.local_names import FunctionBindings, function_bindings, scope_bindings
from torchdevlint.analysis.name_oracle import NameOracle
from torchdevlint.analysis.names import ImportTable
from torchdevlint.budget import Deadline, NoDeadline
from torchdevlint.project_scan import (
    CheckpointWriting,
    CpuModeOption,
    checkpoint_writing,
    cpu_mode_option,
    cpu_mode_option_using,
    cuda_initialised_before_using,
    default_device_elsewhere,
    files_loading_wrapped_under,
    gpu_selection,
    module_classes,
    movers,
    numpy_parameters,
    path_target_of_code,
    project_root,
    saved_parameters,
    saves_the_file,
    stateful_module_classes,
    strips_the_prefix,
    wrapped_checkpoint_loads,
    wrapped_handoffs,
)

_SharedT = TypeVar("_SharedT")
# Nodes with names of their own: Python's scopes.
_SCOPE_TYPES = (cst.Module, cst.ClassDef, cst.FunctionDef, cst.Lambda,
                cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


@dataclass(frozen=True)
class Method:
    """A function defined directly in a class body, called on instances."""

    function: cst.FunctionDef
    owner: cst.ClassDef
    # The first parameter (`self`), if it has one.
    self_name: str | None


class FileContext:
    """The file, its imports as read so far, the path to the current node, and the flow model."""

    def __init__(self, module: cst.Module, path: str, deadline: Deadline | None = None,
                 source: str | None = None, flow_memory: FlowMemory | None = None) -> None:
        self.module = module
        self._flow_memory = flow_memory
        # Set once the walk over the whole module has ended (the flows asked for are complete).
        self.walked = False
        self.path = path
        self._source = source
        self._strips_prefix: bool | None = None
        self.deadline = deadline if deadline is not None else NoDeadline()
        # The imports the walk has read so far: the engine fills it, and shared analyses may
        # read it; rules ask `names`, which also knows what shadows an import.
        self.imports = ImportTable()
        self.names = NameOracle(module, self.imports, self._flow_model)
        # The node being visited and all its ancestors, outermost first.
        self.stack: list[cst.CSTNode] = []
        # id(node) -> parent, for every node walked (positions need the way up).
        self.parents: dict[int, cst.CSTNode] = {}
        # Analyses several rules share, one instance per file, fed by the walk itself.
        self._shared: dict[Callable[[FileContext], object], object] = {}
        self._function_bindings: dict[int, FunctionBindings] = {}
        self._scope_bindings: dict[int, frozenset[str]] = {}
        # id(node) -> the scope that evaluates it, for nodes whose way up is walked.
        self._enclosing_scopes: dict[int, Scope] = {}
        self._flow: FlowModel | None = None
        self._methods: dict[int, Method | None] = {}
        # Syntax seen that LibCST parses but the running Python may not (see engine.py).
        self.may_be_newer_syntax = False

    def release(self) -> None:
        """Drop what the pass built. The flow model and the shared analyses refer back to
        this context: left as cycles, they and the whole tree would wait for the garbage
        collector, whose passes over them cost more than a tenth of a run."""
        if self.walked and self._flow is not None:
            self._flow.keep_in_memory()
        self._flow = None
        self.names.release()
        self._shared.clear()
        self.parents.clear()
        self.stack.clear()
        self._function_bindings.clear()
        self._scope_bindings.clear()
        self._enclosing_scopes.clear()
        self._methods.clear()

    @property
    def source(self) -> str:
        """The file's text (printed from the tree once where the caller gave none)."""
        if self._source is None:
            self._source = self.module.code
        return self._source

    def project_checkpoints(self) -> CheckpointWriting | None:
        """What the file's project (its other files included) saves with `torch.save`; None
        where the file is not on disk (standard input, a rule's example)."""
        return checkpoint_writing(self.path)

    def loaded_file_may_hold_device_tensors(self, path: cst.BaseExpression) -> bool:
        """Whether the file a path expression names may have been written from accelerator
        tensors by the project's saves: False only where its name is known (from the path's
        text, or the path the project gives its name: `--weights` and its default) and every
        save of the project that writes a file so named saves host data."""
        writing = self.project_checkpoints()
        if writing is None:
            return True
        target = path_target_of_code(self.module.code_for_node(path))
        return writing.may_hold_device_tensors(writing.file_names(target))

    def load_restores_gpu_tensors(self, load: cst.Call) -> bool:
        """A `torch.load` (without `map_location`) of a file the project writes from accelerator
        tensors: the project is on disk, some of its saves hold device tensors, and the file
        loaded may be one of theirs."""
        writing = self.project_checkpoints()
        if writing is None or not writing.writes_device_checkpoints or not load.args:
            return False
        return self.loaded_file_may_hold_device_tensors(load.args[0].value)

    def project_numpy_parameters(self) -> dict[str, tuple[tuple[int, str], ...]]:
        """`stem.function` of the project's top-level functions that call `.numpy()` on a
        parameter as it is -> those parameters (position, name); empty where the file is not
        on disk."""
        return numpy_parameters(self.path)

    def project_saved_parameters(self) -> dict[str, tuple[tuple[int, str], ...]]:
        """`stem.function` of the project's top-level functions that hand a parameter (or an
        item of one) to `torch.save` as it is -> those parameters (position, name); empty
        where the file is not on disk."""
        return saved_parameters(self.path)

    def project_selects_a_gpu(self) -> bool:
        """Some file of a program this file is part of (this one included; read as the
        project's CPU-mode options are) chooses the current GPU, or which GPUs the process
        sees: `torch.cuda.set_device(...)`, `with torch.cuda.device(...)`,
        `CUDA_VISIBLE_DEVICES`. False where the file is not on disk."""
        return gpu_selection(self.path) is not None

    def project_wrapped_checkpoint_load(self) -> str | None:
        """Another file of the project that loads a state dict into a model it wrapped in
        DataParallel/DDP (`model = nn.DataParallel(model)`, then `model.load_state_dict(...)`),
        or strips the `module.` prefix before a load: the project's checkpoints are meant to
        carry the prefix. None where there is
        none, or the file is not on disk."""
        root = project_root(self.path)
        own = None if root is None else os.path.relpath(os.path.abspath(self.path), root)
        # The file's own loads are the flow model's to judge (wrapped on every path or not).
        return next((path for path in wrapped_checkpoint_loads(self.path) if path != own), None)

    def strips_the_wrapper_prefix(self) -> bool:
        """This file takes the wrapper's `module.` prefix off a state dict's keys before a load
        (`k[7:]` for keys starting `module.`, `remove_prefix(sd, "module.")`): the checkpoints
        it reads carry the prefix, and it expects them to."""
        if self._strips_prefix is None:
            self._strips_prefix = strips_the_prefix(self.source.encode("utf-8", "surrogatepass"))
        return self._strips_prefix

    def project_load_wrapped_under(self, test: str) -> str | None:
        """Another file of the project that loads a state dict into a model it wraps under a
        test of this text (`if params.multi_gpu:`, spaces and `not`s taken off); None where there
        is none, or the file is not on disk."""
        root = project_root(self.path)
        own = None if root is None else os.path.relpath(os.path.abspath(self.path), root)
        return min((path for path in files_loading_wrapped_under(self.path, test) if path != own), default=None)

    def project_wrapped_handoffs(self) -> dict[str, dict[str, str]]:
        """This file's functions that another file of the project hands a model it bound to a
        DataParallel/DDP wrapper: function name -> {position or keyword -> that file}. Empty
        where there is none, or the file is not on disk."""
        return wrapped_handoffs(self.path)

    def project_cpu_mode(self) -> CpuModeOption | None:
        """The command-line option of another file of the project that gives a program
        importing this file a CPU mode (`--gpu_ids -1` in an options module); None where there
        is none, or the file is not on disk."""
        return cpu_mode_option(self.path)

    def project_cuda_initialised_before_using(self, name: str) -> tuple[str, int, str] | None:
        """Where a program that imports this file and uses its top-level definition `name`
        initialised CUDA at module level before (file, line, program; see
        `project_scan.cuda_initialised_before_using`); None where none did."""
        return cuda_initialised_before_using(self.path, name)

    def project_cpu_mode_using(self, name: str) -> CpuModeOption | None:
        """The option of another file that gives a program a CPU mode, where that program
        imports this file and uses its top-level definition `name` (see
        `project_scan.cpu_mode_option_using`); None where none does."""
        return cpu_mode_option_using(self.path, name)

    @property
    def flow(self) -> FlowQueries:
        """The device-flow model of the file, interpreted lazily, function by function."""
        return self._flow_model()

    def _flow_model(self) -> FlowModel:
        if self._flow is None:
            self._flow = FlowModel(self.module, self.enclosing_scope, self.deadline, self._source, self._flow_memory,
                                   lambda: (stateful_module_classes(self.path), module_classes(self.path),
                                            movers(self.path)),
                                   lambda: default_device_elsewhere(self.path) is not None,
                                   lambda qualified, path_code, arguments: saves_the_file(self.path, qualified, path_code,
                                                                                          arguments))
        return self._flow

    def enclosing_scope(self, node: cst.CSTNode) -> Scope:
        """The function (or the module) whose body evaluates the node."""
        # Remembered for every node on the way up: rules ask for each node of a deep expression,
        # and walking the parents each time was quadratic in its depth.
        known = self._enclosing_scopes
        passed: list[int] = []
        current = node
        while True:
            scope = known.get(id(current))
            if scope is None:
                parent = self.parents.get(id(current))
                if parent is None:
                    break
                # Exact type tests: isinstance on LibCST's ABCs is slow.
                if type(parent) is cst.FunctionDef or type(parent) is cst.Module:
                    scope = parent
                else:
                    passed.append(id(current))
                    current = parent
                    continue
            for walked in passed:
                known[walked] = scope
            known[id(current)] = scope
            return scope
        if current is not self.module:
            # Not walked yet: a part of the node being visited.
            for ancestor in reversed(self.stack):
                if ancestor is not node and (type(ancestor) is cst.FunctionDef or type(ancestor) is cst.Module):
                    return ancestor
        return self.module

    def shared(self, analysis: Callable[[FileContext], _SharedT]) -> _SharedT:
        """The file's one instance of a shared analysis (built on first request).

        Ask for it in a rule's `setup`: the walk then calls its `visit_*`/`leave_*` methods,
        before the rules' own visits and before their leaves, so every rule reads the same
        state and the work is done once however many rules use it.
        """
        instance = self._shared.get(analysis)
        if instance is None:
            instance = self._shared[analysis] = analysis(self)
        # The dictionary maps each factory to what it built.
        return cast(_SharedT, instance)

    @property
    def shared_analyses(self) -> tuple[object, ...]:
        return tuple(self._shared.values())

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The parent of a node on the current path (the node being visited or an ancestor)."""
        for index in range(len(self.stack) - 1, 0, -1):
            if self.stack[index] is node:
                return self.stack[index - 1]
        return None

    def ancestors(self, node: cst.CSTNode) -> list[cst.CSTNode]:
        """Ancestors of a node on the current path, nearest first."""
        for index in range(len(self.stack) - 1, -1, -1):
            if self.stack[index] is node:
                return list(reversed(self.stack[:index]))
        return []

    def code_for_node(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    def enclosing_function(self) -> cst.FunctionDef | None:
        for node in reversed(self.stack):
            if type(node) is cst.FunctionDef:  # exact: isinstance on LibCST's ABCs is slow
                return node
        return None

    # ---- scopes, from the path ------------------------------------------------------

    def scopes(self) -> list[cst.CSTNode]:
        """The scopes around the node being visited (itself included), outermost first."""
        return [node for node in self.stack if type(node) in _SCOPE_TYPES]

    @property
    def current_scope(self) -> cst.CSTNode:
        """The innermost scope here (the node being visited, if it is one)."""
        for node in reversed(self.stack):
            if type(node) in _SCOPE_TYPES:
                return node
        return self.module

    def binding_scope(self, name: str) -> cst.CSTNode | None:
        """The scope whose variable `name` reads here, as Python resolves it: the innermost
        enclosing scope that binds it (class bodies only when they are innermost), if any.

        Rules that keep facts of their own about names key them by this scope, so that a
        local of the same name in another function never inherits them.
        """
        scopes = self.scopes()
        for index in range(len(scopes) - 1, -1, -1):
            scope = scopes[index]
            if isinstance(scope, cst.ClassDef) and index != len(scopes) - 1:
                continue
            bound: frozenset[str] | None
            if isinstance(scope, cst.FunctionDef):
                bound = self._bindings_of(scope).local
            else:
                bound = self._scope_bindings.get(id(scope))
                if bound is None:
                    bound = self._scope_bindings[id(scope)] = scope_bindings(scope)
            if name in bound:
                return scope
        return None

    def assignment_keeps_variable(self, name: str) -> bool:
        """Whether a statement `name = ...` added here would rebind the variable `name` reads.

        At module and class level it always does; in a function only if the function binds
        `name` itself or declares it global/nonlocal. Otherwise the new assignment would make
        `name` local to the whole function, and every earlier read of it would fail.
        """
        function = self.current_scope
        if not isinstance(function, cst.FunctionDef):
            return True
        return self._bindings_of(function).assignment_keeps_variable(name)

    def _bindings_of(self, function: cst.FunctionDef) -> FunctionBindings:
        bindings = self._function_bindings.get(id(function))
        if bindings is None:
            bindings = self._function_bindings[id(function)] = function_bindings(function)
        return bindings

    def enclosing_method(self) -> Method | None:
        """The method (outermost function directly in a class body, neither static nor a
        classmethod) we are in."""
        # A question of the innermost scope alone, asked at nearly every node of a class.
        scope = self.current_scope
        if id(scope) in self._methods:
            return self._methods[id(scope)]
        found: Method | None = None
        scopes = self.scopes()
        for outer, inner in zip(scopes, scopes[1:], strict=False):
            if type(outer) is cst.ClassDef and type(inner) is cst.FunctionDef:
                assert isinstance(inner, cst.FunctionDef) and isinstance(outer, cst.ClassDef)
                if not any(type(d.decorator) is cst.Name and d.decorator.value in ("staticmethod", "classmethod")
                           for d in inner.decorators):
                    params = inner.params.params
                    found = Method(inner, outer, params[0].name.value if params else None)
                break
        self._methods[id(scope)] = found
        return found
