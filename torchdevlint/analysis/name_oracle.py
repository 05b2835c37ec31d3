"""What a name in the file refers to: the one question rules ask about names (`context.names`).

Two resolvers stand behind it, and rules see neither:

- the import table the walk fills (`ImportTable`): a dictionary lookup, but it knows only the
  imports above the node being visited and does not see a parameter or local that shadows one;
- the flow model: the name as Python resolves it at that program point, shadowing and imports
  written below a function included, at the cost of interpreting the scope on first question.

The oracle asks the cheap one first and the flow model only where the answer could matter, so
that a rule gets the exact answer for what a dictionary lookup costs on nearly every node.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from typing import Protocol

import libcst as cst

from torchdevlint.analysis.names import ImportTable, NameFilter, matches, module_import_table


class ResolvesImports(Protocol):
    """The flow model's side of name resolution (`FlowModel.imported_name`)."""

    def imported_name(self, node: cst.BaseExpression) -> tuple[bool, str | None]: ...


class NameOracle:
    """The imported name an expression stands for where it is written, and the file's imports."""

    def __init__(self, module: cst.Module, imports: ImportTable, flow: Callable[[], ResolvesImports]) -> None:
        self._module = module
        self._imports = imports
        self._flow = flow
        # Every import the module's own body makes (not in functions or classes), read on demand:
        # a function may use an import written below it.
        self._module_imports: frozenset[str] | None = None
        # id(filter) -> (the filter, kept so that its id stays its own; the last names it holds).
        self._last_names: dict[int, tuple[object, frozenset[str]]] = {}

    def qualified_name(self, node: cst.BaseExpression, *, among: NameFilter | None = None) -> str | None:
        """`torch.load` for `load` after `from torch import load`, or for `T.load` after `import
        torch as T` (also where the import is written below the function, and, when the rule
        says what it looks for, after `T = torch`); None where the expression names no import
        here, as where a parameter, a local or a `def` of the same name shadows it.

        Without `among` the flow model is asked every time (it interprets the scope once). With
        `among` (the names the rule looks for, or a test of one), the answer is None unless it is
        one of them, and the flow model is asked only where the spelling could be one: the
        import table names one, a module-level import binds the first name, or the last name is
        one's last name. Rules that look for given names should say so.
        """
        spelt = self._imports.qualified_name(node)
        if spelt is not None:
            if among is not None and not matches(spelt, among):
                return None
        elif not self._may_name_an_import(node, among):
            return None
        evaluated, resolved = self._flow().imported_name(node)
        if not evaluated:
            # Where the model does not evaluate (a decorator), the import table's answer stands.
            resolved = spelt
        if resolved is not None and among is not None and not matches(resolved, among):
            return None
        return resolved

    def release(self) -> None:
        """Drop the way to the flow model: it leads back to the file's context, and the cycle
        would wait for the garbage collector (see `FileContext.release`)."""
        self._flow = _released
        self._last_names.clear()

    def is_imported(self, local_name: str) -> bool:
        """Whether an import above the node being visited binds the name."""
        return self._imports.is_imported(local_name)

    def local_name_for(self, module: str) -> str | None:
        """The name the file binds to a module so far (`T` for `import torch as T`), for fixes."""
        return self._imports.local_name_for(module)

    def imports_from(self, package: str) -> bool:
        """Whether the file imports the package or anything from it, above the node visited."""
        return self._imports.imports_from(package)

    def _may_name_an_import(self, node: cst.BaseExpression, among: NameFilter | None) -> bool:
        """The import table has no answer; the flow model may: a module-level import written
        below the function, or a name bound to an import (`T = torch`) spelt as one the rule
        looks for."""
        if among is None:
            return True  # the exact answer, whatever it costs
        # Exact type tests: isinstance on LibCST's ABCs is slow, and nearly every call asks this.
        if not callable(among):
            last = node.value if type(node) is cst.Name else node.attr.value if type(node) is cst.Attribute else None
            if last is not None and last in self._last_names_of(among):
                return True
        root = node
        while type(root) is cst.Attribute:
            root = root.value
        return type(root) is cst.Name and root.value in self._names_imported_by_module()

    def _names_imported_by_module(self) -> frozenset[str]:
        if self._module_imports is None:
            self._module_imports = module_import_table(self._module).local_names()
        return self._module_imports

    def _last_names_of(self, among: Container[str]) -> frozenset[str]:
        if isinstance(among, (tuple, list)):
            return frozenset(name.rpartition(".")[2] for name in among)  # a few names: no cache
        if not isinstance(among, (frozenset, set, dict)):
            return frozenset()
        # Sets and dicts are the rules' module-level constants: one entry each, kept alive.
        cached = self._last_names.get(id(among))
        if cached is not None and cached[0] is among:
            return cached[1]
        names = frozenset(name.rpartition(".")[2] for name in among)
        self._last_names[id(among)] = (among, names)
        return names


def _released() -> ResolvesImports:
    raise RuntimeError("the file's analysis was released")
