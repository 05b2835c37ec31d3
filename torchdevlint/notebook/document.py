"""A Jupyter notebook read as JSON with the place of every cell's source, so that a fix can
rewrite one cell's `source` and leave every other byte of the file as it was.

`json.loads` would lose the layout (indentation, key order, escapes, number spellings); a
small structural walk records where each `source` value lies and hands every other value to
the standard decoder, which also validates it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from torchdevlint.sourcefile import LineIndex, SourceError

UTF8_BOM = b"\xef\xbb\xbf"
_WHITESPACE = re.compile(r"[ \t\n\r]*")
# A `\u` escape of a character outside ASCII: the file was written with `ensure_ascii`.
_NON_ASCII_ESCAPE = re.compile(r"\\u(?:00[89a-fA-F][0-9a-fA-F]|0[1-9a-fA-F][0-9a-fA-F]{2}|[1-9a-fA-F][0-9a-fA-F]{3})")
_DECODER = json.JSONDecoder()
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
SUPPORTED_NBFORMAT = 4


class NotebookError(SourceError):
    """The file is not a notebook this tool can read; the message says why, in one line."""


@dataclass(frozen=True)
class SourceItem:
    """One string of a cell's `source` list: its offsets in the file text and its value."""

    start: int
    end: int
    value: str


@dataclass(frozen=True)
class Cell:
    # 1-based position among all the notebook's cells, as Jupyter shows them (and ruff counts).
    number: int
    cell_type: str
    source: str
    # Offsets of the `source` value (a string or a list of strings) in the file text.
    source_start: int
    source_end: int
    # The list's strings; None where `source` is one string.
    items: tuple[SourceItem, ...] | None
    # Indentation of the line where the `source` value starts, for a list written from nothing.
    key_indent: str

    @property
    def is_code(self) -> bool:
        return self.cell_type == "code"


@dataclass(frozen=True)
class NotebookDocument:
    text: str
    has_bom: bool
    cells: tuple[Cell, ...]
    # The kernel's language where the metadata names one ("python", "R", ...).
    language: str | None

    @staticmethod
    def parse(data: bytes) -> NotebookDocument:
        has_bom = data.startswith(UTF8_BOM)
        try:
            text = data[len(UTF8_BOM):].decode("utf-8") if has_bom else data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise NotebookError(f"not a Jupyter notebook: not UTF-8 ({error.reason} at byte {error.start})") from None
        return _NotebookReader(text, has_bom).read()

    @property
    def is_python(self) -> bool:
        return self.language is None or self.language.lower() in ("python", "python3", "ipython", "ipython3")

    def line_index(self) -> LineIndex:
        """Offsets in the file text -> lines of the file (for pointing at a cell's line in it)."""
        return LineIndex(self.text)

    def with_sources(self, sources: dict[int, str]) -> bytes:
        """The file's bytes with the given cells' (by number) `source` replaced, nothing else."""
        text = self.text
        ensure_ascii = self._writes_ascii_only()
        by_number = {cell.number: cell for cell in self.cells}
        for number in sorted(sources, key=lambda n: by_number[n].source_start, reverse=True):
            cell = by_number[number]
            value = _render_source(self.text, cell, sources[number], ensure_ascii, self._indent_unit())
            text = text[: cell.source_start] + value + text[cell.source_end :]
        data = text.encode("utf-8")
        return UTF8_BOM + data if self.has_bom else data

    def _writes_ascii_only(self) -> bool:
        """Whether the writer escaped non-ASCII characters (nbformat does not; some tools do)."""
        if not self.text.isascii():
            return False
        return _NON_ASCII_ESCAPE.search(self.text) is not None

    def _indent_unit(self) -> str:
        """The indentation of the top-level keys: one step of the writer's indentation."""
        after_brace = self.text[self.text.find("{") + 1 :]
        match = re.match(r"[ \t\r]*\n([ \t]*)\"", after_brace)
        return match.group(1) if match else ""


def _render_source(text: str, cell: Cell, source: str, ensure_ascii: bool, indent_unit: str) -> str:
    """A new `source` value written the way the old one was: a string stays a string; a list
    keeps its layout, and lines it already had keep their exact spelling."""
    if cell.items is None:
        return json.dumps(source, ensure_ascii=ensure_ascii)
    lines = source.splitlines(keepends=True)
    spelled = {item.value: text[item.start : item.end] for item in cell.items}
    items = [spelled.get(line) or json.dumps(line, ensure_ascii=ensure_ascii) for line in lines]
    if not items:
        return "[]"
    old = cell.items
    if old:
        opening = text[cell.source_start + 1 : old[0].start]
        closing = text[old[-1].end : cell.source_end - 1]
        separator = text[old[0].end : old[1].start] if len(old) > 1 else "," + opening
    elif indent_unit:
        opening = "\n" + cell.key_indent + indent_unit
        closing = "\n" + cell.key_indent
        separator = "," + opening
    else:
        opening, closing, separator = "", "", ","
    return "[" + opening + separator.join(items) + closing + "]"


class _NotebookReader:
    """Walks the JSON text; every value it does not need to locate goes to the C decoder."""

    def __init__(self, text: str, has_bom: bool) -> None:
        self.text = text
        self.has_bom = has_bom
        self.position = 0

    def fail(self, why: str) -> NotebookError:
        return NotebookError(f"not a Jupyter notebook: {why}")

    def too_deep(self, position: int) -> NotebookError:
        # Python's JSON decoder recurses once per level: past its limit the value is unreadable.
        return self.fail(f"JSON nested too deeply to read (the value from byte {position})")

    def invalid_json(self, message: str, position: int) -> NotebookError:
        line, column = LineIndex(self.text).location(position)
        return self.fail(f"invalid JSON ({message} at line {line} column {column + 1})")

    def skip_whitespace(self) -> None:
        match = _WHITESPACE.match(self.text, self.position)
        if match is not None:
            self.position = match.end()

    def expect(self, character: str) -> None:
        self.skip_whitespace()
        if not self.text.startswith(character, self.position):
            found = repr(self.text[self.position]) if self.position < len(self.text) else "end of file"
            raise self.invalid_json(f"expected {character!r}, found {found}", self.position)
        self.position += 1

    def peek(self) -> str:
        self.skip_whitespace()
        return self.text[self.position] if self.position < len(self.text) else ""

    def string(self) -> str:
        if self.peek() != '"':
            raise self.invalid_json("expected a string", self.position)
        value = self.value()
        assert isinstance(value, str)
        return value

    def value(self) -> object:
        self.skip_whitespace()
        start = self.position
        try:
            value, self.position = _DECODER.raw_decode(self.text, self.position)
        except json.JSONDecodeError as error:
            raise self.invalid_json(error.msg, error.pos) from None
        except RecursionError:
            raise self.too_deep(start) from None
        return value

    def each_member(self, read_value: dict[str, object]) -> None:
        """Read an object: for each key, `read_value[key]()` reads the value, else the decoder skips it."""
        self.expect("{")
        if self.peek() == "}":
            self.position += 1
            return
        while True:
            key = self.string()
            self.expect(":")
            reader = read_value.get(key)
            if callable(reader):
                reader()
            else:
                self.value()
            if self.peek() == ",":
                self.position += 1
                continue
            self.expect("}")
            return

    def read(self) -> NotebookDocument:
        if self.peek() != "{":
            # Not even an object: let the decoder say what it is (or what is wrong).
            try:
                json.loads(self.text)
            except json.JSONDecodeError as error:
                raise self.invalid_json(error.msg, error.pos) from None
            except RecursionError:
                raise self.too_deep(self.position) from None
            raise self.fail("the file holds JSON but not a notebook (no top-level object)")
        top: dict[str, object] = {}
        cells: list[Cell] = []

        def remember(key: str) -> None:
            top[key] = self.value()

        def read_cells() -> None:
            top["cells"] = True
            if self.peek() != "[":
                raise self.fail("'cells' is not a list")
            self.position += 1
            if self.peek() == "]":
                self.position += 1
                return
            while True:
                cells.append(self.cell(len(cells) + 1))
                if self.peek() == ",":
                    self.position += 1
                    continue
                self.expect("]")
                return

        self.each_member({
            "cells": read_cells,
            "nbformat": lambda: remember("nbformat"),
            "metadata": lambda: remember("metadata"),
            "worksheets": lambda: remember("worksheets"),
        })
        self.skip_whitespace()
        if self.position != len(self.text):
            raise self.invalid_json("extra data after the notebook", self.position)
        nbformat = top.get("nbformat")
        if nbformat != SUPPORTED_NBFORMAT:
            if isinstance(nbformat, int) and not isinstance(nbformat, bool):
                raise NotebookError(
                    f"nbformat {nbformat} notebooks are not supported (nbformat 4 is); convert it with "
                    "`jupyter nbconvert --to notebook --nbformat 4`"
                )
            raise self.fail("no 'nbformat' version number")
        if "cells" not in top:
            raise self.fail("no 'cells' list")
        return NotebookDocument(self.text, self.has_bom, tuple(cells), _language(top.get("metadata")))

    def cell(self, number: int) -> Cell:
        if self.peek() != "{":
            raise self.fail(f"cell {number} is not an object")
        cell_types: list[object] = []
        # (text, start, end, items, indentation) of the `source` value.
        sources: list[tuple[str, int, int, tuple[SourceItem, ...] | None, str]] = []

        def read_source() -> None:
            start = self.skip_and_mark()
            line_start = self.text.rfind("\n", 0, start) + 1
            before = self.text[line_start:start]
            indent = before[: len(before) - len(before.lstrip(" \t"))]
            if self.text[start] == "[":
                values = self.value()
                if not isinstance(values, list) or not all(isinstance(value, str) for value in values):
                    raise self.fail(f"cell {number}: 'source' holds something other than strings")
                # Only strings between the brackets: each match is one item, in order.
                spans = [m.span() for m in _JSON_STRING.finditer(self.text, start, self.position)]
                items = tuple(SourceItem(a, b, value) for (a, b), value in zip(spans, values, strict=True))
                sources.append(("".join(values), start, self.position, items, indent))
            elif self.text[start] == '"':
                sources.append((self.string(), start, self.position, None, indent))
            else:
                raise self.fail(f"cell {number}: 'source' is neither a string nor a list of strings")

        self.each_member({"cell_type": lambda: cell_types.append(self.value()), "source": read_source})
        cell_type = cell_types[-1] if cell_types else None
        if not isinstance(cell_type, str):
            raise self.fail(f"cell {number} has no 'cell_type'")
        if not sources:
            raise self.fail(f"cell {number} has no 'source'")
        text, start, end, items, indent = sources[-1]
        return Cell(number, cell_type, text, start, end, items, indent)

    def skip_and_mark(self) -> int:
        self.skip_whitespace()
        if self.position >= len(self.text):
            raise self.invalid_json("unexpected end of file", self.position)
        return self.position


def _language(metadata: object) -> str | None:
    if not isinstance(metadata, dict):
        return None
    for table, key in (("kernelspec", "language"), ("language_info", "name")):
        value = metadata.get(table)
        if isinstance(value, dict) and isinstance(value.get(key), str):
            return str(value[key])
    return None
