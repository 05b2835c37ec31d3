"""Where the value a statement makes is used: the lines a device bug at that statement surfaces on.

A discarded `x.to(device)` fails where `x` is next used; a `torch.zeros(...)` bound to `h`
inside `forward` fails where `h` meets the input; a tensor an `init_hidden` method returns fails
where its callers use what they got. `uses_of_line` answers, for a statement's line, with the
lines that read what it binds (or, for a move whose result is thrown away, what it was meant to
move), through one level of a returning function. Runtime verification uses it to tell a bug's
own error from an unrelated one, and to know when a fixed program has used the fixed value.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import (
    Assignment,
    MetadataWrapper,
    PositionProvider,
    Scope,
    ScopeProvider,
)

from torchdevlint.analysis.local_names import target_names
from torchdevlint.analysis.tree import child_nodes, descendants

# How far a value is followed: into what is computed from it, and out through a `return`.
_DEPTH = 2


class _Statements(cst.CSTVisitor):
    """Every simple statement and compound header, with the line it starts on."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self) -> None:
        self.by_line: dict[int, list[cst.CSTNode]] = {}
        # (first line, last line, statement): a statement spans lines when its call does.
        self.spans: list[tuple[int, int, cst.CSTNode]] = []

    def _add(self, node: cst.CSTNode, header_only: bool = False) -> None:
        position = self.get_metadata(PositionProvider, node)
        self.by_line.setdefault(position.start.line, []).append(node)
        self.spans.append((position.start.line, position.start.line if header_only else position.end.line, node))

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        for statement in node.body:
            self._add(statement)

    def visit_For(self, node: cst.For) -> None:
        self._add(node, header_only=True)

    def visit_With(self, node: cst.With) -> None:
        self._add(node, header_only=True)

    def visit_If(self, node: cst.If) -> None:
        self._add(node, header_only=True)

    def visit_While(self, node: cst.While) -> None:
        self._add(node, header_only=True)

    def holding(self, line: int) -> list[cst.CSTNode]:
        """The innermost statements on `line` (those starting latest among those spanning it)."""
        spanning = [(first, node) for first, last, node in self.spans if first <= line <= last]
        if not spanning:
            return []
        latest = max(first for first, _ in spanning)
        return [node for first, node in spanning if first == latest]


def assigned_values(scope: cst.CSTNode, name: str) -> list[cst.BaseExpression | None]:
    """What each statement of the body (not its nested functions or classes) that binds
    `name` gives it: the value of a plain `name = value`, None for any other binding (an
    unpacking, an augmented assignment, a loop, a `with`)."""
    found: list[cst.BaseExpression | None] = []
    for node in descendants(scope, into_definitions=False):
        if type(node) not in _BINDING_STATEMENTS or not any(bound.value == name for bound in bound_names(node)):
            continue
        plain = isinstance(node, cst.Assign) and all(type(target.target) is cst.Name for target in node.targets)
        found.append(node.value if isinstance(node, cst.Assign) and plain else None)
    return found


_BINDING_STATEMENTS = frozenset({cst.Assign, cst.AnnAssign, cst.AugAssign, cst.For, cst.With})


def bound_names(statement: cst.CSTNode) -> list[cst.Name]:
    """The plain names a statement binds (`h` in `h = ...`, `out, h = ...`, `for h in ...`)."""
    targets: list[cst.BaseExpression] = []
    if isinstance(statement, cst.Assign):
        targets = [target.target for target in statement.targets]
    elif isinstance(statement, (cst.AnnAssign, cst.AugAssign, cst.For)):
        targets = [statement.target]
    elif isinstance(statement, cst.With):
        targets = [item.asname.name for item in statement.items if item.asname is not None]
    return [name for target in targets for name in target_names(target)]


def _bound_attributes(statement: cst.CSTNode) -> list[cst.Attribute]:
    """`self.mean` in `self.mean = ...`: an attribute the statement sets."""
    if isinstance(statement, cst.Assign):
        return [target.target for target in statement.targets if isinstance(target.target, cst.Attribute)]
    if isinstance(statement, cst.AnnAssign) and isinstance(statement.target, cst.Attribute):
        return [statement.target]
    return []


def _moved_receiver(statement: cst.CSTNode) -> cst.Name | None:
    """`x` in a bare `x.to(device)` / `x.cuda()` statement: the value the move was meant for."""
    if isinstance(statement, cst.Expr) and isinstance(statement.value, cst.Call):
        function = statement.value.func
        if isinstance(function, cst.Attribute) and isinstance(function.value, cst.Name):
            return function.value
    return None


def _names_in(expression: cst.BaseExpression) -> list[cst.Name]:
    found: list[cst.Name] = []
    stack: list[cst.CSTNode] = [expression]
    while stack:
        node = stack.pop()
        if type(node) is cst.Name:
            found.append(node)
        elif type(node) is cst.Attribute:
            stack.append(node.value)  # `x.y` reads `x`; `y` is no variable
        else:
            stack.extend(child_nodes(node))
    return found


def _parents(module: cst.Module) -> dict[cst.CSTNode, cst.CSTNode]:
    """Each node's parent, by a walk of the code-holding fields (a third of the cost of
    LibCST's ParentNodeProvider, which visits every whitespace and token node too)."""
    parents: dict[cst.CSTNode, cst.CSTNode] = {}
    stack: list[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        for child in child_nodes(node):
            parents[child] = node
            stack.append(child)
    return parents


class _Uses:
    def __init__(self, wrapper: MetadataWrapper) -> None:
        self.module = wrapper.module
        self.scopes = wrapper.resolve(ScopeProvider)
        self.positions = wrapper.resolve(PositionProvider)
        self.parents = _parents(self.module)
        statements = _Statements()
        wrapper.visit(statements)
        self.statements = statements.by_line
        self.holding = statements.holding

    def line(self, node: cst.CSTNode) -> int:
        return self.positions[node].start.line

    def after(self, assignments: Iterable[Assignment], line: int, depth: int) -> set[int]:
        """Lines reading these bindings, and, where one is returned, the callers using what they got."""
        lines: set[int] = set()
        for assignment in assignments:
            for access in assignment.references:
                used = self.line(access.node)
                if used == line:
                    continue
                lines |= self.statement_lines(access.node)
                lines |= self.derived(access.node, depth)
        return lines

    def statement_lines(self, node: cst.CSTNode) -> set[int]:
        """The lines a traceback may name for a use: every line of its statement (Python names
        a multi-line call's first line, the use may sit on a later one), or of a compound
        statement's header up to the use."""
        statement: cst.CSTNode | None = node
        while statement is not None and not isinstance(statement, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            statement = self.parents.get(statement)
        used = self.line(node)
        if statement is None:
            return {used}
        first = self.line(statement)
        last = self.positions[statement].end.line if isinstance(statement, cst.BaseSmallStatement) else used
        return set(range(first, last + 1))

    def derived(self, use: cst.CSTNode, depth: int) -> set[int]:
        """Where what a use computes goes on: the names its statement binds, or its function's callers."""
        statement: cst.CSTNode | None = use
        while statement is not None and not isinstance(
                statement, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            statement = self.parents.get(statement)
        if statement is None or depth <= 0:
            return set()
        if isinstance(statement, cst.Return):
            return self.callers_of(statement, depth - 1)
        return self.of_statement(statement, self.line(statement), depth - 1)

    def attribute_uses(self, target: cst.Attribute, line: int, depth: int) -> set[int]:
        """`self.mean = ...` in a method: the lines of the class reading `self.mean`."""
        if not isinstance(target.value, cst.Name):
            return set()
        receiver, attribute = target.value.value, target.attr.value
        node: cst.CSTNode | None = target
        while node is not None and not isinstance(node, cst.ClassDef):
            node = self.parents.get(node)
        if node is None:
            return set()
        lines: set[int] = set()

        class _Reads(cst.CSTVisitor):
            def visit_Attribute(self, read: cst.Attribute) -> None:
                if (read is not target and isinstance(read.value, cst.Name) and read.value.value == receiver
                        and read.attr.value == attribute):
                    reads.append(read)

        reads: list[cst.Attribute] = []
        node.visit(_Reads())
        for read in reads:
            lines.add(self.line(read))
            lines |= self.derived(read, depth)
        return {used for used in lines if used != line}

    def assignments_at(self, name: cst.Name) -> list[Assignment]:
        scope = self.scopes.get(name)
        if not isinstance(scope, Scope):
            return []
        return [found for found in scope.assignments[name.value]
                if isinstance(found, Assignment) and found.node is name]

    def assignments_read_by(self, name: cst.Name) -> list[Assignment]:
        scope = self.scopes.get(name)
        if not isinstance(scope, Scope):
            return []
        found: list[Assignment] = []
        for access in scope.accesses[name.value]:
            if access.node is name:
                found.extend(referent for referent in access.referents if isinstance(referent, Assignment))
        return found

    def of_statement(self, statement: cst.CSTNode, line: int, depth: int) -> set[int]:
        lines: set[int] = set()
        for name in bound_names(statement):
            lines |= self.after(self.assignments_at(name), line, depth)
        for target in _bound_attributes(statement):
            lines |= self.attribute_uses(target, line, depth)
        receiver = _moved_receiver(statement)
        if receiver is not None:
            lines |= {used for used in self.after(self.assignments_read_by(receiver), line, depth) if used > line}
        if isinstance(statement, (cst.If, cst.While)):
            # A test decides what happens to the variables it reads (`if isinstance(x, ...)`): a
            # wrong answer surfaces where they are used next.
            for name in _names_in(statement.test):
                read = [found for found in self.assignments_read_by(name)
                        if not isinstance(found.node, (cst.Import, cst.ImportFrom))]
                lines |= {used for used in self.after(read, line, depth) if used > line}
        if isinstance(statement, cst.Return) and depth > 0:
            lines |= self.callers_of(statement, depth - 1)
        return lines - {line}

    def callers_of(self, statement: cst.CSTNode, depth: int) -> set[int]:
        """The lines that call the function `statement` returns from, and use what it returned."""
        node: cst.CSTNode | None = statement
        while node is not None and not isinstance(node, cst.FunctionDef):
            node = self.parents.get(node)
        if node is None:
            return set()
        name = node.name.value
        lines: set[int] = set()
        for line, statements in self.statements.items():
            for candidate in statements:
                if _calls(candidate, name):
                    lines.add(line)
                    lines |= self.of_statement(candidate, line, depth)
        return lines


def _calls(statement: cst.CSTNode, name: str) -> bool:
    found = False

    class _Finder(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> bool:
            nonlocal found
            function = node.func
            if (isinstance(function, cst.Name) and function.value == name) or (
                    isinstance(function, cst.Attribute) and function.attr.value == name):
                found = True
            return not found

        # A nested statement (a compound header's body) is another statement.
        def visit_IndentedBlock(self, node: cst.IndentedBlock) -> bool:
            return False

    statement.visit(_Finder())
    return found


@dataclass(frozen=True)
class ValueUses:
    """A statement's own lines, and the other lines that use the value it makes."""

    statement: frozenset[int]
    uses: frozenset[int]


def uses_of_lines(module: cst.Module, lines: Iterable[int]) -> dict[int, ValueUses]:
    """For each line, its statement's lines and the lines using the value made there (empty when unknown)."""
    uses = _Uses(MetadataWrapper(module, unsafe_skip_copy=True))
    answer: dict[int, ValueUses] = {}
    for line in lines:
        statement_lines = {line}
        found: set[int] = set()
        for statement in uses.holding(line):
            first = uses.line(statement)
            last = first if isinstance(statement, (cst.For, cst.With, cst.If, cst.While)) else uses.positions[statement].end.line
            statement_lines |= set(range(first, last + 1))
            found |= uses.of_statement(statement, first, depth=_DEPTH)
        answer[line] = ValueUses(frozenset(statement_lines), frozenset(found - statement_lines))
    return answer
