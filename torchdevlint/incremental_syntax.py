"""Python's own parse of an edited buffer, reusing the top-level statements the edit left alone.

Where a file has findings, the running Python parses it too: it judges what this Python accepts
and its line numbers place the findings (`engine.check_syntax`, `positions`). On a 1,000-line
buffer that parse is about 23 ms of each keystroke's lint. `IncrementalSyntaxCheck` keeps the
previous version's tree cut into *units*, one per top-level statement (from its first line, a
decorator's included, to the next one's), and parses again only the units the edit touches.

Why the splice equals a whole parse: the text before the region is the previous version's,
which started a top-level statement at the region's first line, so the tokenizer is clean there
(no open bracket or string, every block closed) and nothing before can be continued by it. The
region must parse alone, so it also ends clean: an unclosed bracket or string, a dangling
decorator or `if x:`, a trailing backslash all fail at its end. The text after it is the
previous version's from a line that started a top-level statement (never `else:`, `except` or an
indented line), at column 0. Where the region does not parse alone, or the text has the one
`__future__` import that changes the grammar, the whole text is parsed instead, so errors are always Python's own. The region is parsed after as many blank
lines as precede it, so its line numbers come out right without walking its tree; reused units
after it are moved by `ast.increment_lineno` when lines were added or removed.
"""

from __future__ import annotations

import ast
import warnings
from bisect import bisect_right
from dataclasses import dataclass

from torchdevlint.engine import check_syntax
from torchdevlint.sourcefile import LINE_BREAK

__all__ = ["IncrementalSyntaxCheck"]


@dataclass
class _Unit:
    first_line: int  # 1-based, the statement's first line (or line 1 for the first unit)
    last_line: int  # the line before the next unit's first
    statements: list[ast.stmt]


def _lines(text: str) -> list[str]:
    """The text's lines, each with its line end (the last may have none)."""
    lines: list[str] = []
    start = 0
    for end in LINE_BREAK.finditer(text):
        lines.append(text[start : end.end()])
        start = end.end()
    if start < len(text):
        lines.append(text[start:])
    return lines


def _first_line(statement: ast.stmt) -> int:
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and statement.decorator_list:
        return min(statement.lineno, *(decorator.lineno for decorator in statement.decorator_list))
    return statement.lineno


def _units(statements: list[ast.stmt], first_line: int, last_line: int) -> list[_Unit]:
    """The statements grouped by the line they start on (`a = 1; b = 2` is one unit), covering
    lines first_line..last_line."""
    units: list[_Unit] = []
    previous = 0  # the line the last unit's statements start on (the first unit may start above it)
    for statement in statements:
        line = _first_line(statement)
        if units and line <= previous:
            units[-1].statements.append(statement)
            continue
        if units:
            units[-1].last_line = line - 1
        units.append(_Unit(first_line if not units else line, last_line, [statement]))
        previous = line
    return units


class IncrementalSyntaxCheck:
    """`check_syntax` for successive versions of one buffer (an editor's)."""

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._units: list[_Unit] = []
        self._starts: list[int] = []
        self._tree: ast.Module | None = None

    def __call__(self, source: str, path: str, *, newer_syntax: bool | None = None) -> ast.Module | None:
        lines = _lines(source)
        tree = None
        # Whether the code may use newer syntax matters only where Python refuses it, and a
        # spliced tree is one Python accepted (many f-strings hold quotes: `may` is often set).
        if self._tree is not None and _splices_safely(source):
            tree = self._reuse(lines)
        if tree is None:
            # A syntax error raises here, keeping the last good version to splice into next.
            tree = check_syntax(source, path, newer_syntax=newer_syntax)
            if tree is None:
                return None
            self._keep(lines, tree, _units(tree.body, 1, len(lines)))
        return tree

    def _keep(self, lines: list[str], tree: ast.Module, units: list[_Unit]) -> None:
        self._lines, self._tree, self._units = lines, tree, units
        self._starts = [unit.first_line for unit in units]

    def _unit_at(self, line: int) -> int:
        return max(0, bisect_right(self._starts, line) - 1)

    def _reuse(self, lines: list[str]) -> ast.Module | None:
        old = self._lines
        assert self._tree is not None
        if lines == old:
            return self._tree
        if not self._units or not lines:
            return None
        shortest = min(len(old), len(lines))
        same_before = 0
        while same_before < shortest and old[same_before] == lines[same_before]:
            same_before += 1
        same_after = 0
        while same_after < shortest - same_before and old[-1 - same_after] == lines[-1 - same_after]:
            same_after += 1
        # The units holding the changed lines, and those holding the lines on either side of
        # them: an edit at a unit's edge may belong to its neighbour.
        first = self._unit_at(max(same_before, 1))
        last = self._unit_at(min(len(old) - same_after + 1, len(old)))
        added = len(lines) - len(old)
        start, end = self._units[first].first_line, self._units[last].last_line + added
        if end < start:
            return None
        region = "\n" * (start - 1) + "".join(lines[start - 1 : end])
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                parsed = ast.parse(region)
        except (SyntaxError, ValueError):
            return None
        if not parsed.body:
            return None
        after = self._units[last + 1 :]
        if added:
            for unit in after:
                unit.first_line += added
                unit.last_line += added
                for statement in unit.statements:
                    ast.increment_lineno(statement, added)
        units = [*self._units[:first], *_units(parsed.body, start, end), *after]
        tree = ast.Module(body=[statement for unit in units for statement in unit.statements], type_ignores=[])
        self._keep(lines, tree, units)
        return tree


def _splices_safely(source: str) -> bool:
    return "barry_as_FLUFL" not in source
