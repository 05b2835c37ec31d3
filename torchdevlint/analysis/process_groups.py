"""The process groups a distributed program sets up, and the functions `mp.spawn` starts: enough
to tell a program that runs on one machine by construction, where a process's local and global
ranks are the same number (TDL028, TDL030)."""

from __future__ import annotations

from typing import Protocol

import libcst as cst

from torchdevlint.analysis.brains.torch_api import INIT_PROCESS_GROUP, SPAWN
from torchdevlint.analysis.flow.results import FlowQueries
from torchdevlint.analysis.names import NameResolver
from torchdevlint.analysis.tree import keyword_argument

_LOOKED_FOR = INIT_PROCESS_GROUP | SPAWN


class ProcessGroupContext(Protocol):
    """What `ProcessGroups` reads of the walk that feeds it (a rule's `FileContext`)."""

    @property
    def names(self) -> NameResolver: ...

    @property
    def flow(self) -> FlowQueries: ...

    def enclosing_function(self) -> cst.FunctionDef | None: ...


class ProcessGroups:
    """Fed by the walk (a shared analysis); whole-file answers at `leave_Module`."""

    def __init__(self, context: ProcessGroupContext) -> None:
        self._context = context
        # ids of the functions `mp.spawn` starts, and each process group given a rank, with the
        # function that sets it up.
        self._spawned: set[int] = set()
        self._ranked: list[tuple[cst.FunctionDef | None, cst.BaseExpression]] = []

    def visit_Call(self, node: cst.Call) -> None:
        qualified = self._context.names.qualified_name(node.func, among=_LOOKED_FOR)
        if qualified in INIT_PROCESS_GROUP:
            rank = keyword_argument(node, "rank")
            if rank is not None:
                self._ranked.append((self._context.enclosing_function(), rank.value))
        elif qualified in SPAWN and node.args and node.args[0].keyword is None:
            reference = self._context.flow.value_of(node.args[0].value).reference
            if reference is not None and reference.definition is not None:
                self._spawned.add(reference.definition)

    def one_machine_by_construction(self) -> bool:
        """A process group whose rank is the index `mp.spawn` gives its function: every process
        of the job is one of this machine's, and its global rank is its local one."""
        for function, rank in self._ranked:
            if function is not None and id(function) in self._spawned and function.params.params \
                    and type(rank) is cst.Name and rank.value == function.params.params[0].name.value:
                return True
        return False
