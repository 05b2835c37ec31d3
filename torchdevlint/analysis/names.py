"""Qualified names from the file's own imports, resolved in the same pass.

LibCST's QualifiedNameProvider would do this through full scope analysis, which costs
several times the parse; imports are all torch names ever need.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Container, Iterator, Mapping
from typing import Protocol

import libcst as cst

from torchdevlint.analysis.tree import child_nodes

_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


def identifier_words(name: str) -> list[str]:
    """The lower-case words of a name or option (`--useGPU` -> use, gpu; `no_cuda` -> no, cuda)."""
    return [word.lower() for word in _WORD.findall(name)]

# Calls after which nothing in the block runs: builtins, and functions by qualified name.
EXIT_BUILTINS: frozenset[str] = frozenset({"exit", "quit"})
EXIT_FUNCTIONS: frozenset[str] = frozenset({"sys.exit", "os._exit", "pytest.skip", "pytest.exit", "unittest.SkipTest"})


def dotted_name(node: cst.BaseExpression) -> str | None:
    """`a.b.c` for a Name/Attribute chain, else None."""
    # Exact type tests: isinstance on LibCST's ABCs is slow, and every call asks this.
    parts: list[str] = []
    while type(node) is cst.Attribute:
        parts.append(node.attr.value)
        node = node.value
    if type(node) is not cst.Name:
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


def _module_dotted(node: cst.BaseExpression | None) -> str:
    if node is None:
        return ""
    return dotted_name(node) or ""


# What `qualified_name(..., among=...)` accepts: the names the caller looks for, or a test of one.
NameFilter = Container[str] | Callable[[str], bool]


def matches(name: str, among: NameFilter) -> bool:
    return among(name) if callable(among) else name in among


class NameResolver(Protocol):
    """What the shared helpers ask about names: the import table the walk fills (syntax, as
    far as the walk has read), or the rules' `context.names` (`NameOracle`, which also knows
    what shadows an import)."""

    def qualified_name(self, node: cst.BaseExpression, *, among: NameFilter | None = None) -> str | None:
        """The imported name the expression stands for; with `among`, only if it is one of those."""
        ...


class ImportTable:
    """Maps names bound by imports to the qualified names they stand for."""

    def __init__(self) -> None:
        self._aliases: dict[str, str] = {}
        # Modules imported under their own top name (`import torch.distributed` binds `torch`):
        # imported all the same, for `imports_from`.
        self._submodules: set[str] = set()
        # Bumped by every change, so answers cached from the table know when they are stale.
        self.generation = 0

    def record_import(self, node: cst.Import) -> None:
        self.generation += 1
        for alias in node.names:
            full = _module_dotted(alias.name)
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self._aliases[alias.asname.name.value] = full
            else:
                # `import torch.nn` binds `torch`.
                top = full.split(".", 1)[0]
                self._aliases[top] = top
                if full != top:
                    self._submodules.add(full)

    def record_import_from(self, node: cst.ImportFrom) -> None:
        if node.relative or isinstance(node.names, cst.ImportStar):
            return
        self.generation += 1
        module = _module_dotted(node.module)
        for alias in node.names:
            name = _module_dotted(alias.name)
            local = name
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            self._aliases[local] = f"{module}.{name}"

    def record_star_import(self, conventional: Mapping[str, str]) -> None:
        """`from utils import *`: the names it conventionally brings (local -> module), where
        no other import binds them."""
        self.generation += 1
        for local, module in conventional.items():
            self._aliases.setdefault(local, module)

    def forget(self, local_name: str) -> None:
        """A later plain assignment rebinds the name: it no longer means the import."""
        self.generation += 1
        self._aliases.pop(local_name, None)

    def is_imported(self, local_name: str) -> bool:
        return local_name in self._aliases

    def local_names(self) -> frozenset[str]:
        """Every name an import recorded so far binds."""
        return frozenset(self._aliases)

    def local_name_for(self, module: str) -> str | None:
        """The name this file binds to a module (`T` for `import torch as T`), if any."""
        for local, qualified in self._aliases.items():
            if qualified == module:
                return local
        return None

    def imports_from(self, package: str) -> bool:
        """Whether the file imports the package or anything from it (`unittest.TestCase`)."""
        prefix = package + "."
        return any(qualified == package or qualified.startswith(prefix)
                   for qualified in (*self._aliases.values(), *self._submodules))

    def qualified_name(self, node: cst.BaseExpression, *, among: NameFilter | None = None) -> str | None:
        """`T.nn.Linear` -> `torch.nn.Linear` when `import torch as T`; None if not imported
        (or, with `among`, not one of those names)."""
        dotted = dotted_name(node)
        if dotted is None:
            return None
        head, dot, rest = dotted.partition(".")
        target = self._aliases.get(head)
        if target is None:
            return None
        qualified = f"{target}{dot}{rest}"
        return qualified if among is None or matches(qualified, among) else None


def module_import_table(module: cst.Module) -> ImportTable:
    """The imports the module runs itself (in its `if`, `try` and `with` blocks too, not in
    functions or classes), read at once rather than as a walk reaches them."""
    table = ImportTable()
    for statement in _module_level_statements(module.body):
        if type(statement) is cst.Import:
            table.record_import(statement)
        elif type(statement) is cst.ImportFrom:
            table.record_import_from(statement)
    return table


def _module_level_statements(body: object) -> Iterator[cst.BaseSmallStatement]:
    """The small statements the module's body runs itself: in its `if`, `try`, `with` and loop
    blocks, not in functions or classes."""
    if not isinstance(body, (list, tuple)):
        return
    for statement in body:
        if type(statement) is cst.SimpleStatementLine:
            yield from statement.body
        elif isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            continue
        elif isinstance(statement, cst.BaseCompoundStatement):
            yield from _compound_statements(statement)


def _compound_statements(statement: cst.CSTNode) -> Iterator[cst.BaseSmallStatement]:
    for child in statement.children:
        if isinstance(child, cst.BaseSuite):
            if isinstance(child, cst.IndentedBlock):
                yield from _module_level_statements(child.body)
            elif isinstance(child, cst.SimpleStatementSuite):
                yield from child.body
        elif isinstance(child, (cst.Else, cst.ExceptHandler, cst.Finally, cst.If, cst.ExceptStarHandler)):
            yield from _compound_statements(child)


def module_bound_names(module: cst.Module) -> set[str]:
    """Names the module body binds by assignment, definition or import (in its `if`, `for`,
    `try` and `with` blocks too), which its functions may read as globals.

    Statements only: the walk never enters an expression, so a module holding a
    megabyte-long data literal costs what its statements cost.
    """
    names: set[str] = set()
    stack: list[cst.CSTNode] = list(module.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            names.add(node.name.value)
        elif isinstance(node, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            stack.extend(node.body)
        elif isinstance(node, cst.Assign):
            names.update(target.target.value for target in node.targets if isinstance(target.target, cst.Name))
        elif isinstance(node, (cst.AnnAssign, cst.AugAssign, cst.For)):
            if isinstance(node.target, cst.Name):
                names.add(node.target.value)
            if isinstance(node, cst.For):
                stack.extend(_nested_statements(node))
        elif isinstance(node, (cst.Import, cst.ImportFrom)):
            for alias in node.names if isinstance(node.names, (list, tuple)) else ():
                # `import torch.utils.data` binds `torch`.
                names.add(cst.ensure_type(alias.asname.name, cst.Name).value if alias.asname else
                          (dotted_name(alias.name) or "").split(".")[0])
        elif isinstance(node, (cst.BaseCompoundStatement, cst.Else, cst.Finally, cst.ExceptHandler,
                               cst.ExceptStarHandler, cst.MatchCase)):
            stack.extend(_nested_statements(node))
    return names


def _nested_statements(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The statements and clauses directly inside a compound statement (`if`, `for`, `try` …)."""
    nested: list[cst.CSTNode] = []
    for child in child_nodes(node):
        if isinstance(child, (cst.IndentedBlock, cst.SimpleStatementSuite)):
            nested.extend(child.body)
        elif isinstance(child, (cst.Else, cst.Finally, cst.ExceptHandler, cst.ExceptStarHandler, cst.If, cst.MatchCase)):
            nested.append(child)
    return nested
