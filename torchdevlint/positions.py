"""Positions of reported nodes, without generating code for the whole module.

LibCST computes positions by generating code for the entire module, which costs about as
much as parsing it; a file with one finding would pay that in full. Instead we render only
the innermost statement that holds the node, with LibCST's own position-tracking codegen
state primed with the statement's indentation, and place it with the line number Python's
own parser (already run for the syntax check) gives that statement. The rendered text is
compared with the source at the computed place; on any mismatch, or for a node outside any
statement, the whole-module provider answers instead.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, Mapping

import libcst as cst
from libcst._position import CodeRange
from libcst.metadata import MetadataWrapper, PositionProvider
from libcst.metadata.position_provider import PositionProvidingCodegenState

from torchdevlint.sourcefile import LineIndex

# For each compound statement: its LibCST body slots and the ast lists they correspond to.
_COMPOUND_BODIES = (cst.If, cst.For, cst.While, cst.Try, cst.TryStar, cst.With, cst.FunctionDef,
                    cst.ClassDef, cst.Match)


class _Collector(PositionProvider):
    """The provider the codegen state writes into, used on its own, outside any wrapper."""


class StatementPositions:
    def __init__(self, module: cst.Module, source: str, parents: dict[int, cst.CSTNode],
                 python_ast: ast.Module | None) -> None:
        self._module = module
        self._source = source
        self._parents = parents
        self._python_ast = python_ast
        self._lines: LineIndex | None = None
        self._cache: dict[cst.CSTNode, CodeRange] = {}
        self._rendered: set[int] = set()
        self._whole_module: Mapping[cst.CSTNode, CodeRange] | None = None
        # Memos that keep many findings in one long body linear: each body's statement
        # positions (keyed by its first statement) and each ast statement list.
        self._positions: dict[int, dict[int, int]] = {}
        self._ast_lists: dict[tuple[int, str], list[ast.stmt]] = {}

    def __getitem__(self, node: cst.CSTNode) -> CodeRange:
        found = self._cache.get(node)
        if found is not None:
            return found
        statement = self._innermost_statement(node)
        if statement is not None and id(statement) not in self._rendered and self._python_ast is not None:
            self._rendered.add(id(statement))
            self._render(statement)
            found = self._cache.get(node)
            if found is not None:
                return found
        return self._fallback()[node]

    @property
    def used_whole_module(self) -> bool:
        """Whether some node needed LibCST's whole-module positions (the slow path)."""
        return self._whole_module is not None

    def _fallback(self) -> Mapping[cst.CSTNode, CodeRange]:
        if self._whole_module is None:
            self._whole_module = MetadataWrapper(self._module, unsafe_skip_copy=True).resolve(PositionProvider)
        return self._whole_module

    def _innermost_statement(self, node: cst.CSTNode) -> cst.BaseStatement | None:
        current: cst.CSTNode | None = node
        while current is not None:
            if isinstance(current, cst.BaseStatement):
                return current
            current = self._parents.get(id(current))
        return None

    def _path(self, statement: cst.BaseStatement) -> list[cst.CSTNode]:
        """Module ... statement, every node on the way."""
        path: list[cst.CSTNode] = [statement]
        current = self._parents.get(id(statement))
        while current is not None:
            path.append(current)
            current = self._parents.get(id(current))
        path.reverse()
        return path

    def _render(self, statement: cst.BaseStatement) -> None:
        path = self._path(statement)
        if not path or path[0] is not self._module:
            return
        python_node = self._python_counterpart(path)
        if python_node is None:
            return
        indents = [
            block.indent if block.indent is not None else self._module.default_indent
            for block in path[:-1]
            if isinstance(block, cst.IndentedBlock)
        ]
        collector = _Collector()
        state = PositionProvidingCodegenState(
            default_indent=self._module.default_indent,
            default_newline=self._module.default_newline,
            provider=collector,
        )
        state.indent_tokens = indents
        statement._codegen(state)
        # The codegen state stores plain CodeRanges (LibCST types the slot for lazy values too).
        computed = {node: found for node, found in collector._computed.items() if isinstance(found, CodeRange)}
        own = computed.get(statement)
        if own is None:
            return
        python_line = _first_line(python_node)
        delta = python_line - own.start.line
        rendered = "".join(state.tokens)
        start = self._offset(1 + delta, 0)
        if start is None or self._source[start : start + len(rendered)] != rendered:
            return  # the mapping is off somehow: let the whole-module provider answer
        for node, code_range in computed.items():
            self._cache[node] = CodeRange(
                (code_range.start.line + delta, code_range.start.column),
                (code_range.end.line + delta, code_range.end.column),
            )

    def _offset(self, line: int, column: int) -> int | None:
        if self._lines is None:
            self._lines = LineIndex(self._source)
        if not 1 <= line <= len(self._lines.starts):
            return None
        return self._lines.offset(line, column)

    def _python_counterpart(self, path: list[cst.CSTNode]) -> ast.AST | None:
        """Follow the same bodies down Python's ast as the path goes down LibCST's tree."""
        if self._python_ast is None:
            return None
        python: ast.AST = self._python_ast
        statements: list[ast.stmt] = self._python_ast.body
        cst_body: tuple[cst.CSTNode, ...] = tuple(self._module.body)
        index = 1
        while index < len(path):
            node = path[index]
            if isinstance(node, cst.BaseStatement):
                position = self._statement_index(cst_body, node)
                if position is None or position >= len(statements):
                    return None
                python = statements[position]
                if node is path[-1]:
                    return python if _same_kind(node, python) else None
                if not _same_kind(node, python):
                    return None
                found = self._descend(node, python, path[index + 1 :])
                if found is None:
                    return None
                cst_body, statements, consumed, python_override = found
                if python_override is not None:
                    python = python_override
                index += 1 + consumed
                continue
            index += 1
        return None

    def _statement_index(self, body: tuple[cst.CSTNode, ...], statement: cst.CSTNode) -> int | None:
        """Index in the ast body list: a LibCST line of `a; b` is two ast statements."""
        if not body:
            return None
        positions = self._positions.get(id(body[0]))
        if positions is None:
            positions = self._positions[id(body[0])] = {}
            position = 0
            for item in body:
                positions[id(item)] = position
                position += len(item.body) if isinstance(item, cst.SimpleStatementLine) else 1
        return positions.get(id(statement))

    def _statements(self, python: ast.AST, field: str) -> list[ast.stmt]:
        key = (id(python), field)
        found = self._ast_lists.get(key)
        if found is None:
            found = self._ast_lists[key] = _statements(python, field)
        return found

    def _descend(
        self, node: cst.CSTNode, python: ast.AST, rest: list[cst.CSTNode]
    ) -> tuple[tuple[cst.CSTNode, ...], list[ast.stmt], int, ast.AST | None] | None:
        """The LibCST body and ast body the path continues in, and how many path nodes that took."""
        if not rest:
            return None
        child = rest[0]
        for cst_slot, ast_slot in _slots(node, python, self._statements):
            if cst_slot is child:
                block = cst_slot
                if isinstance(block, (cst.Else, cst.Finally, cst.ExceptHandler, cst.ExceptStarHandler, cst.MatchCase)):
                    inner = block.body
                    if len(rest) < 2 or rest[1] is not inner or not isinstance(inner, cst.IndentedBlock):
                        return None
                    return tuple(inner.body), ast_slot, 2, None
                if isinstance(block, cst.IndentedBlock):
                    return tuple(block.body), ast_slot, 1, None
                if isinstance(block, cst.If):  # elif: the path goes on at that If statement
                    return (block,), ast_slot, 0, None
                return None
        return None


def _statements(python: ast.AST, field: str) -> list[ast.stmt]:
    """An ast node's statement list (`body`, `orelse`, `finalbody`); empty if it has none."""
    value = getattr(python, field, None)
    return [item for item in value if isinstance(item, ast.stmt)] if isinstance(value, list) else []


def _children(python: ast.AST, field: str) -> list[ast.AST]:
    """An ast node's list of sub-nodes (`handlers`, `cases`)."""
    value = getattr(python, field, None)
    return [item for item in value if isinstance(item, ast.AST)] if isinstance(value, list) else []


def _slots(node: cst.CSTNode, python: ast.AST,
           statements: Callable[[ast.AST, str], list[ast.stmt]]) -> Iterator[tuple[cst.CSTNode, list[ast.stmt]]]:
    # `_same_kind` has matched `python` to `node`, so the fields read here exist on it; a
    # count that differs anyway ends the pairing and the whole-module positions answer.
    if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.With)):
        yield node.body, statements(python, "body")
    elif isinstance(node, (cst.If, cst.For, cst.While)):
        yield node.body, statements(python, "body")
        if node.orelse is not None:
            yield node.orelse, statements(python, "orelse")
    elif isinstance(node, (cst.Try, cst.TryStar)):
        yield node.body, statements(python, "body")
        for handler, python_handler in zip(node.handlers, _children(python, "handlers"), strict=False):
            yield handler, statements(python_handler, "body")
        if node.orelse is not None:
            yield node.orelse, statements(python, "orelse")
        if node.finalbody is not None:
            yield node.finalbody, statements(python, "finalbody")
    elif isinstance(node, cst.Match):
        for case, python_case in zip(node.cases, _children(python, "cases"), strict=False):
            yield case, statements(python_case, "body")


_KINDS: dict[type, tuple[type, ...]] = {
    cst.FunctionDef: (ast.FunctionDef, ast.AsyncFunctionDef),
    cst.ClassDef: (ast.ClassDef,),
    cst.If: (ast.If,),
    cst.For: (ast.For, ast.AsyncFor),
    cst.While: (ast.While,),
    cst.With: (ast.With, ast.AsyncWith),
    cst.Try: (ast.Try,),
    cst.Match: (ast.Match,),
}
if hasattr(ast, "TryStar"):
    _KINDS[cst.TryStar] = (ast.TryStar,)


def _same_kind(node: cst.CSTNode, python: ast.AST) -> bool:
    if isinstance(node, cst.SimpleStatementLine):
        return isinstance(python, ast.stmt)
    expected = _KINDS.get(type(node))
    return expected is not None and isinstance(python, expected)


def _first_line(python: ast.AST) -> int:
    """The line LibCST's position of the statement starts on (decorators excluded, as there)."""
    line = getattr(python, "lineno", None)
    return line if isinstance(line, int) else 1
