"""A file as the Python program the rules read: a `.py` file's text, or a notebook's code cells.

Front ends (`check`, stdin, `verify`) lint and fix a `Program` and never ask which kind it is:
a notebook's findings come back counted within their cell, its fixes are written into the
cells they change and nowhere else, and a cell that does not parse is reported for that cell
while the others are still linted.
"""

from __future__ import annotations

import difflib
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

import libcst as cst

from torchdevlint.analysis.flow.memory import FlowMemory
from torchdevlint.budget import Deadline
from torchdevlint.diagnostics import Diagnostic, FileError, Fix, Location
from torchdevlint.engine import InvalidSource, ModuleParser, SyntaxCheck, check_syntax, lint_source
from torchdevlint.fixer import FixOutcome, apply_one_fix, fix_source
from torchdevlint.notebook.document import NotebookDocument
from torchdevlint.notebook.ipython import MaskedCell, mask
from torchdevlint.notebook.program import NotebookProgram as NotebookCells
from torchdevlint.registry import rule_by_code
from torchdevlint.rule import Rule
from torchdevlint.sourcefile import (
    CellLines,
    ProgramView,
    SourceError,
    SourceText,
    cell_holding,
    decode_source,
    is_notebook,
    read_bytes,
)
from torchdevlint.suppression import add_noqa, malformed_noqa_lines

T = TypeVar("T")


@dataclass(frozen=True)
class NoqaOutcome:
    text: str
    # Directives added, or extended with more codes.
    added: int
    # Findings whose line cannot take a comment.
    refused: list[FileError]


class FixNotWritable(Exception):
    """Fixed code that cannot be put back into the file (never expected; reported, not raised)."""


class Program(ABC):
    """The Python in one file, ready to lint and fix."""

    def __init__(self, path: str, parse: ModuleParser = cst.parse_module,
                 flow_memory: FlowMemory | None = None, syntax_check: SyntaxCheck | None = None) -> None:
        self.path = path
        # An editor's buffer is parsed, and its flows interpreted, reusing the last version's.
        self.parse = parse
        self.flow_memory = flow_memory
        self.syntax_check = syntax_check
        # Parts of the file that could not be analysed while the rest was (a notebook's cells
        # with syntax errors); filled in by `lint` and `fix`.
        self.errors: list[FileError] = []
        # What the user should know of how the file was read, though nothing failed.
        self.notices: list[str] = []

    @property
    @abstractmethod
    def text(self) -> str:
        """The Python source the rules read."""

    @abstractmethod
    def lint(self, rules: Sequence[type[Rule]], options: Mapping[str, object] | None = None, *,
             deadline: Deadline | None = None) -> list[Diagnostic]:
        """Findings, placed where the user sees them. Raises InvalidSource, AnalysisTimeout."""

    @abstractmethod
    def fix(self, rules: Sequence[type[Rule]], options: Mapping[str, object] | None = None, *,
            unsafe: bool = False, deadline: Deadline | None = None,
            unfixable: frozenset[str] = frozenset()) -> FixOutcome:
        """Fix `text` to a fixpoint, never applying the fixes of `unfixable` codes; the
        outcome's findings are placed as `lint` places them."""

    @abstractmethod
    def view(self, text: str) -> ProgramView:
        """What reporters need to show findings made on `text` (this program, fixed or not)."""

    @abstractmethod
    def encode(self, text: str) -> bytes:
        """The file's new bytes for a fixed program `text`. Raises FixNotWritable."""

    @abstractmethod
    def diff(self, text: str) -> str:
        """A unified diff of the file against the fixed program `text`."""

    def with_noqa(self, rules: Sequence[type[Rule]], options: Mapping[str, object] | None = None, *,
                  deadline: Deadline | None = None) -> NoqaOutcome:
        """`text` with a `# noqa: CODE` on the first line of each finding (`--add-noqa`).

        Findings of rules about `# noqa` comments themselves get none."""
        by_line: dict[int, list[str]] = {}
        for diagnostic in self._findings_in_text(rules, options, deadline):
            rule = rule_by_code(diagnostic.code)
            if rule is None or not rule.reviews_suppressions:
                by_line.setdefault(diagnostic.start.line, []).append(diagnostic.code)
        text, added, refused = add_noqa(self.text, by_line)
        return NoqaOutcome(text, added, [self.error("cannot add `# noqa` here (Python's tokenizer cannot read "
                                                    "the file)", line, None) for line in refused])

    def _findings_in_text(self, rules: Sequence[type[Rule]], options: Mapping[str, object] | None,
                          deadline: Deadline | None) -> list[Diagnostic]:
        """Findings with their lines counted in `text` (not yet placed in cells)."""
        return lint_source(self.text, self.path, rules, options, deadline=deadline, parse=self.parse,
                           flow_memory=self.flow_memory, syntax_check=self.syntax_check)

    def error(self, message: str, line: int | None, column: int | None) -> FileError:
        """A file error at a place in `text`, placed where the user sees it."""
        return FileError(self.path, message, line, column)

    def malformed_noqa_warnings(self) -> list[str]:
        """One warning per malformed noqa directive, which suppresses nothing (as ruff warns)."""
        warnings = []
        for line in malformed_noqa_lines(self.text):
            cell, cell_line = self.place(line)
            where = f"{self.path}:{cell_line}" if cell is None else f"{self.path}:cell {cell}:{cell_line}"
            warnings.append(f"invalid `# noqa` directive at {where}: expected `# noqa` alone or followed "
                            "by a colon and codes (e.g. `# noqa: TDL001, TDL003`); it suppresses nothing")
        return warnings

    def place(self, line: int) -> tuple[int | None, int]:
        """A line of `text` as the user finds it: (notebook cell or None, line there)."""
        return None, line


class PythonProgram(Program):
    def __init__(self, path: str, source: SourceText, parse: ModuleParser = cst.parse_module,
                 flow_memory: FlowMemory | None = None, syntax_check: SyntaxCheck | None = None) -> None:
        super().__init__(path, parse, flow_memory, syntax_check)
        self.source = source
        # A notebook exported as a `.py` file (Colab's "Download .py") keeps its `!pip install`
        # and `%matplotlib` lines: set aside as in a notebook, and said so.
        self._ipython = ipython_lines_set_aside(source.text, path)
        if self._ipython is not None:
            count = len(self._ipython.originals)
            self.notices.append(f"{path}: {count} IPython line{'' if count == 1 else 's'} "
                                f"(`{self._ipython.originals[0].strip()}`) set aside, as in a notebook; "
                                "the rest is linted")

    @property
    def text(self) -> str:
        return self._ipython.text if self._ipython is not None else self.source.text

    def _as_written(self, text: str) -> str:
        """`text` (this program, fixed or not) with the IPython lines put back."""
        if self._ipython is None:
            return text
        restored = self._ipython.restore(text)
        if restored is None:
            raise FixNotWritable("a fix changed a line holding IPython syntax")
        return restored

    def lint(self, rules: Sequence[type[Rule]], options: Mapping[str, object] | None = None, *,
             deadline: Deadline | None = None) -> list[Diagnostic]:
        return lint_source(self.text, self.path, rules, options, deadline=deadline, parse=self.parse,
                           flow_memory=self.flow_memory, syntax_check=self.syntax_check)

    def fix(self, rules: Sequence[type[Rule]], options: Mapping[str, object] | None = None, *,
            unsafe: bool = False, deadline: Deadline | None = None,
            unfixable: frozenset[str] = frozenset()) -> FixOutcome:
        return fix_source(self.text, self.path, rules, options, unsafe=unsafe, deadline=deadline, parse=self.parse,
                          unfixable=unfixable)

    def view(self, text: str) -> ProgramView:
        try:
            return ProgramView(self._as_written(text))
        except FixNotWritable:
            return ProgramView(text)

    def encode(self, text: str) -> bytes:
        return self.source.encode(self._as_written(text))

    def diff(self, text: str) -> str:
        return "".join(difflib.unified_diff(
            self.source.text.splitlines(keepends=True), self._as_written(text).splitlines(keepends=True),
            fromfile=f"a/{self.path}", tofile=f"b/{self.path}",
        ))


# A line a Python file could hold only as IPython: a shell escape or a magic.
_IPYTHON_LINE = re.compile(r"^[ \t]*(?:!|%)\S", re.MULTILINE)


def ipython_lines_set_aside(text: str, path: str) -> MaskedCell | None:
    """A `.py` file that Python rejects only for its IPython lines, with those masked; None
    for any other file (nearly all: the cheap test comes first)."""
    if _IPYTHON_LINE.search(text) is None:
        return None
    try:
        check_syntax(text, path)
        return None
    except InvalidSource:
        pass
    masked = mask(text)
    if not masked.originals:
        return None
    try:
        check_syntax(masked.text, path)
    except InvalidSource:
        return None
    return masked


class NotebookProgram(Program):
    """The notebook's Python code cells, in order, analysed as one program."""

    def __init__(self, path: str, document: NotebookDocument, parse: ModuleParser = cst.parse_module,
                 flow_memory: FlowMemory | None = None, syntax_check: SyntaxCheck | None = None) -> None:
        super().__init__(path, parse, flow_memory, syntax_check)
        self.document = document
        self.cells = NotebookCells(document)

    @property
    def text(self) -> str:
        return self.cells.text

    def lint(self, rules: Sequence[type[Rule]], options: Mapping[str, object] | None = None, *,
             deadline: Deadline | None = None) -> list[Diagnostic]:
        found = self._without_broken_cells(
            lambda: lint_source(self.text, self.path, rules, options, deadline=deadline, parse=self.parse,
                                flow_memory=self.flow_memory, syntax_check=self.syntax_check))
        return self._placed(found)

    def fix(self, rules: Sequence[type[Rule]], options: Mapping[str, object] | None = None, *,
            unsafe: bool = False, deadline: Deadline | None = None,
            unfixable: frozenset[str] = frozenset()) -> FixOutcome:
        outcome = self._without_broken_cells(
            lambda: fix_source(self.text, self.path, rules, options, unsafe=unsafe, deadline=deadline,
                               gate=self.cells.withholds, parse=self.parse, unfixable=unfixable))
        outcome.remaining = self._placed(outcome.remaining, outcome.text)
        return outcome

    def _findings_in_text(self, rules: Sequence[type[Rule]], options: Mapping[str, object] | None,
                          deadline: Deadline | None) -> list[Diagnostic]:
        return self._without_broken_cells(
            lambda: lint_source(self.text, self.path, rules, options, deadline=deadline, parse=self.parse,
                                flow_memory=self.flow_memory, syntax_check=self.syntax_check))

    def _without_broken_cells(self, action: Callable[[], T]) -> T:
        """Run `action` on the program; if a cell does not parse, report it and run it again
        on the program without the cells that do not parse."""
        try:
            return action()
        except (InvalidSource, cst.ParserSyntaxError):
            broken = self._broken_cells()
            if not broken:
                raise
            self.errors.extend(broken)
            self.cells = NotebookCells(self.document, frozenset(error.cell for error in broken if error.cell))
            return action()

    def _broken_cells(self) -> list[FileError]:
        broken = []
        for cell in self.cells.cells:
            try:
                # Not the notebook's path: CPython would read its error's line from that file.
                check_syntax(cell.masked.text, f"<cell {cell.cell.number}>")
                cst.parse_module(cell.masked.text)
            except InvalidSource as error:
                broken.append(FileError(self.path, error.message, error.line, error.column, cell.cell.number))
            except cst.ParserSyntaxError as error:
                message = str(error.message).strip().splitlines()
                broken.append(FileError(self.path, f"syntax error: {message[0] if message else 'invalid syntax'}",
                                        error.raw_line, error.raw_column + 1, cell.cell.number))
        return broken

    def _placed(self, diagnostics: list[Diagnostic], text: str | None = None) -> list[Diagnostic]:
        """Findings on the program `text` (default: this one) with lines counted within cells."""
        layout = self.cells.layout(self.text if text is None else text)
        placed = []
        for diagnostic in diagnostics:
            line = diagnostic.start.line
            cell = cell_holding(layout, line)
            if cell is None and layout and line < layout[0].first_line:
                # Above the first cell (an import a fix put first): the first cell's first line.
                cell = CellLines(layout[0].number, line, 1)
            if cell is None:
                continue
            end_line = min(diagnostic.end.line, cell.first_line + cell.line_count - 1)
            end_column = diagnostic.end.column if end_line == diagnostic.end.line else 1
            placed.append(replace(
                diagnostic,
                start=Location(line - cell.first_line + 1, diagnostic.start.column),
                end=Location(end_line - cell.first_line + 1, end_column),
                cell=cell.number,
            ))
        return placed

    def view(self, text: str) -> ProgramView:
        if text == self.text:
            return ProgramView(text, self.cells.cell_lines())
        try:
            # Fixed code: the lines of the notebook as it is written now.
            fixed = NotebookCells(NotebookDocument.parse(self.encode(text)), self.cells.excluded)
        except (SourceError, FixNotWritable):
            return ProgramView(text, self.cells.layout(text))
        return ProgramView(text, fixed.cell_lines())

    def encode(self, text: str) -> bytes:
        changed = self.cells.changed_sources(text)
        if changed is None:
            raise FixNotWritable("the fixed code no longer splits into the notebook's cells")
        return self.document.with_sources(changed)

    def sources_fixed_by(self, fix: Fix) -> dict[int, str] | None:
        """The new source of each cell one fix (of a finding `lint` made) changes, by cell
        number; None where the fix cannot be written into the cells."""
        if self.cells.withholds(self.text, fix) is not None:
            return None
        fixed = apply_one_fix(self.text, fix)
        return self.cells.changed_sources(fixed) if fixed is not None else None

    def diff(self, text: str) -> str:
        changed = self.cells.changed_sources(text) or {}
        parts: list[str] = []
        for cell in self.document.cells:
            if cell.number in changed:
                where = f"{self.path}:cell {cell.number}"
                parts.extend(difflib.unified_diff(
                    _diff_lines(cell.source), _diff_lines(changed[cell.number]),
                    fromfile=f"a/{where}", tofile=f"b/{where}",
                ))
        return "".join(parts)

    def place(self, line: int) -> tuple[int | None, int]:
        cell = cell_holding(self.cells.layout(self.text), line)
        return (cell.number, line - cell.first_line + 1) if cell is not None else (None, line)

    def error(self, message: str, line: int | None, column: int | None) -> FileError:
        if line is None:
            return FileError(self.path, message, line, column)
        cell, cell_line = self.place(line)
        return FileError(self.path, message, cell_line, column, cell)


def _diff_lines(source: str) -> list[str]:
    lines = source.splitlines(keepends=True)
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += "\n"
    return lines


def load_program(path: str, data: bytes, parse: ModuleParser = cst.parse_module,
                 flow_memory: FlowMemory | None = None, syntax_check: SyntaxCheck | None = None) -> Program:
    """The program in a file's bytes; raises SourceError (a NotebookError for a broken notebook)."""
    if is_notebook(path):
        return NotebookProgram(path, NotebookDocument.parse(data), parse, flow_memory, syntax_check)
    return PythonProgram(path, decode_source(data), parse, flow_memory, syntax_check)


def read_program(path: str) -> Program:
    return load_program(path, read_bytes(Path(path)))
