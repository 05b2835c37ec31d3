"""A notebook's Python code cells as one program, in cell order, and back.

Each cell follows a separator comment naming it, so a later cell sees the earlier cells'
bindings, a finding's line maps to its cell, and a fixed program splits back into cells. The
separators and the placeholders of IPython lines are fenced off from fixes: a fix that would
touch one spans cells (or rewrites IPython syntax) and is withheld.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from torchdevlint.analysis.tree import NOTEBOOK_CELL_MARKER
from torchdevlint.diagnostics import Fix
from torchdevlint.notebook.document import Cell, NotebookDocument
from torchdevlint.notebook.ipython import MaskedCell, is_python_cell, mask, placeholder_lines
from torchdevlint.sourcefile import CellLines, LineIndex

_SEPARATOR_TEXT = NOTEBOOK_CELL_MARKER + "{number}\n"
# IPython runs a cell indented as a whole (pasted code) without its indentation; as the body
# of `if True:` it parses with every line and column in place.
_INDENTED_SEPARATOR_TEXT = "if True:  # %% torchdevlint cell {number}\n"
_SEPARATOR = re.compile(r"^(?:if True:  )?# %% torchdevlint cell (\d+)\n", re.MULTILINE)
SPANS_CELLS = "it would change more than one cell, or IPython syntax"


@dataclass(frozen=True)
class ProgramCell:
    cell: Cell
    masked: MaskedCell
    # Where the cell's text (after its separator) lies in the program.
    first_line: int
    line_count: int


def layout_of(text: str) -> tuple[CellLines, ...]:
    """Where each cell lies in a program text (this program fixed, say), read from its separators."""
    lines = LineIndex(text)
    total = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    found = [(int(m.group(1)), lines.location(m.start())[0] + 1) for m in _SEPARATOR.finditer(text)]
    cells = []
    for index, (number, first_line) in enumerate(found):
        next_first = found[index + 1][1] - 1 if index + 1 < len(found) else total + 1
        cells.append(CellLines(number, first_line, next_first - first_line))
    return tuple(cells)


class NotebookProgram:
    """The code cells of `document` that are Python, less those in `excluded` (by number)."""

    def __init__(self, document: NotebookDocument, excluded: frozenset[int] = frozenset()) -> None:
        self.document = document
        self.excluded = excluded
        parts: list[str] = []
        cells: list[ProgramCell] = []
        line = 1
        for cell in self.python_cells():
            if cell.number in excluded:
                continue
            masked = mask(cell.source)
            text = masked.text
            if text and not text.endswith("\n"):
                text += "\n"
            separator = _INDENTED_SEPARATOR_TEXT if _is_indented(text) else _SEPARATOR_TEXT
            parts.append(separator.format(number=cell.number))
            parts.append(text)
            line_count = text.count("\n")
            cells.append(ProgramCell(cell, masked, line + 1, line_count))
            line += 1 + line_count
        self.text = "".join(parts)
        self.cells = tuple(cells)
        # Where the cells lie, without the .ipynb lines (`cell_lines` reads those).
        self._layout = tuple(CellLines(c.cell.number, c.first_line, c.line_count) for c in cells)
        # The fenced spans of the last program text a fix was checked against.
        self._fenced: tuple[str, list[tuple[int, int]]] | None = None

    def python_cells(self) -> list[Cell]:
        """Code cells in Python: not those of a notebook in another language, nor `%%bash` cells."""
        if not self.document.is_python:
            return []
        return [cell for cell in self.document.cells if cell.is_code and is_python_cell(cell.source)]

    def layout(self, text: str) -> tuple[CellLines, ...]:
        """Where the cells lie in `text`: this program, or this program fixed."""
        return self._layout if text == self.text else layout_of(text)

    def cell_lines(self) -> tuple[CellLines, ...]:
        lines = self.document.line_index()
        return tuple(
            CellLines(cell.cell.number, cell.first_line, cell.line_count, _document_lines(cell.cell, lines))
            for cell in self.cells
        )

    def withholds(self, text: str, fix: Fix) -> str | None:
        """Why a fix of the program `text` cannot be applied to the notebook, or None."""
        if self._fenced is None or self._fenced[0] is not text:
            # Whole lines, their line break included; inserting at a line's start is fine.
            spans = [(m.start(), m.end()) for m in _SEPARATOR.finditer(text)]
            spans += [(start, end + 1) for start, end in placeholder_lines(text)]
            self._fenced = (text, spans)
        fenced = self._fenced[1]
        for edit in fix.edits:
            for start, end in fenced:
                if (edit.start < end and start < edit.end) or start < edit.start < end:
                    return SPANS_CELLS
        return None

    def changed_sources(self, text: str) -> dict[int, str] | None:
        """The new `source` of each cell the fixed program `text` changes, by cell number;
        None if the program no longer splits into the same cells (never, for fixes that passed
        `withholds`)."""
        separators = list(_SEPARATOR.finditer(text))
        if [int(m.group(1)) for m in separators] != [cell.cell.number for cell in self.cells]:
            return None
        changed: dict[int, str] = {}
        for index, (cell, separator) in enumerate(zip(self.cells, separators, strict=True)):
            end = separators[index + 1].start() if index + 1 < len(separators) else len(text)
            body = text[separator.end() : end]
            if index == 0:
                # An import a fix added above everything belongs to the first cell.
                body = text[: separator.start()] + body
            restored = cell.masked.restore(body)
            if restored is None:
                return None
            original = cell.cell.source
            if original and not original.endswith("\n") and restored.endswith("\n"):
                restored = restored[:-1]
            if restored != original:
                changed[cell.cell.number] = restored
        return changed


def _is_indented(text: str) -> bool:
    first = next((line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")), "")
    return first[:1] in (" ", "\t")


def _document_lines(cell: Cell, lines: LineIndex) -> tuple[int, ...]:
    """The .ipynb line of each of the cell's lines: where the JSON string holding it starts."""
    line_starts = [0] + [i + 1 for i, char in enumerate(cell.source) if char == "\n"]
    if cell.source.endswith("\n"):
        line_starts.pop()
    if cell.items is None:
        return tuple(lines.location(cell.source_start)[0] for _ in line_starts)
    item_starts: list[int] = []
    offset = 0
    for item in cell.items:
        item_starts.append(offset)
        offset += len(item.value)
    result = []
    for start in line_starts:
        if cell.items:
            item_start = cell.items[max(0, bisect.bisect_right(item_starts, start) - 1)].start
        else:
            item_start = cell.source_start
        result.append(lines.location(item_start)[0])
    return tuple(result)
