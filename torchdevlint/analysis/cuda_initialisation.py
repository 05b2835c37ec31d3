"""Where the program has initialised CUDA, as the walk has read it so far, and which scopes
start other processes.

Settings that CUDA reads once, when it initialises (`CUDA_VISIBLE_DEVICES`), do nothing in a
process that has already initialised it. A shared analysis
(`context.shared(CudaInitialisation)`), fed by the engine's walk: a scope (function, lambda,
class or module) has initialised CUDA when a call that does so has been left in it, and
code in a top-level function or class runs after the module-level code before it.
"""

from __future__ import annotations

from typing import Protocol

import libcst as cst

from torchdevlint.analysis.brains import torch_api
from torchdevlint.analysis.devices import CUDA_INITIALISING_FUNCTIONS, device_literal
from torchdevlint.analysis.names import ImportTable
from torchdevlint.analysis.tree import keyword_argument

# Calls that start another process, which inherits os.environ: a late setting may be for it.
_SPAWNERS = (
    "subprocess.", "os.system", "os.exec", "os.spawn", "os.popen", "os.fork", "multiprocessing.",
    "torch.multiprocessing.", "torch.distributed.launch", "torch.distributed.run", "torch.distributed.elastic",
)
_OWNERS = (cst.FunctionDef, cst.Lambda, cst.ClassDef, cst.Module)


class InitialisationWalkContext(Protocol):
    @property
    def imports(self) -> ImportTable: ...

    @property
    def module(self) -> cst.Module: ...

    def scopes(self) -> list[cst.CSTNode]: ...

    def load_restores_gpu_tensors(self, load: cst.Call) -> bool: ...


class CudaInitialisation:
    def __init__(self, context: InitialisationWalkContext) -> None:
        self._context = context
        # Scopes (by id of their node) where CUDA was initialised so far.
        self._initialised_in: set[int] = set()
        # Whether module-level code initialised CUDA before the current top-level def/class.
        self._module_initialised_before = False
        self._depth = 0
        self._spawning: set[int] = set()

    # ---- questions -----------------------------------------------------------------------

    def owner(self) -> cst.CSTNode:
        """The function, lambda, class or module whose code the point being visited is."""
        for scope in reversed(self._context.scopes()):
            if isinstance(scope, _OWNERS):
                return scope
        return self._context.module

    def initialised_here(self) -> bool:
        """Whether CUDA is initialised, in this process, when the point being visited runs."""
        return id(self.owner()) in self._initialised_in or self._depth > 0 and self._module_initialised_before

    def starts_processes(self, scope: cst.CSTNode) -> bool:
        """Whether the scope (walked to its end) starts another process, which inherits the
        environment."""
        return id(scope) in self._spawning

    # ---- the walk --------------------------------------------------------------------------

    def _entered_definition(self) -> None:
        if self._depth == 0:
            self._module_initialised_before = id(self._context.module) in self._initialised_in
        self._depth += 1

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._entered_definition()

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._entered_definition()

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._depth -= 1

    def leave_ClassDef(self, node: cst.ClassDef) -> None:
        self._depth -= 1

    def leave_Call(self, node: cst.Call) -> None:
        # Recorded as the call is left: its own arguments ran first.
        owner = id(self.owner())
        if self._initialises_cuda(node):
            self._initialised_in.add(owner)
        qualified = self._context.imports.qualified_name(node.func)
        if qualified is not None and qualified.startswith(_SPAWNERS):
            self._spawning.add(owner)

    def _initialises_cuda(self, call: cst.Call) -> bool:
        imports = self._context.imports
        qualified = imports.qualified_name(call.func)
        if qualified in CUDA_INITIALISING_FUNCTIONS:
            return True
        if qualified in torch_api.TORCH_LOAD:
            # Unpickling a tensor saved on a GPU makes it there again, starting CUDA: a
            # resumed checkpoint read only for its config still restores its weights.
            return len(call.args) < 2 and keyword_argument(call, "map_location") is None \
                and self._context.load_restores_gpu_tensors(call)
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value == "cuda":
            receiver = func.value
            return not (isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Name)
                        and receiver.func.value == "super")
        device = keyword_argument(call, "device")
        candidates = [device.value] if device is not None else []
        if isinstance(func, cst.Attribute) and func.attr.value == "to" and call.args and call.args[0].keyword is None:
            candidates.append(call.args[0].value)
        for candidate in candidates:
            literal = device_literal(candidate, imports)
            if literal is not None and literal.type == "cuda":
                return True
        return False
