"""Long literals of numbers, blanked before parsing: data, never device code.

A module that holds a dataset as a literal (`DATA = [0.12, 0.57, ...]` over megabytes) costs
LibCST a tree node per number: 30 s and 2.5 GB for 5 MB of floats on one line. No rule reads
numbers in a list, so such a literal's inside is replaced before parsing by text of the same
length, mostly spaces (a zero every kilobyte): the analysis sees a short list of zeros, and
every line, column and offset stays where it is in the real text. Fixes whose edits touch a blanked span are withheld (their text could
come from the blanked tree).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Only literals at least this long are blanked: below it LibCST's cost is nothing to save.
MIN_BLANKED_CHARACTERS = 20_000

# A run of the characters such a literal is made of (no line break: lines stay as they are).
_RUN = re.compile(rf"[0-9 \t,.eE+\-_jJ\[\]()]{{{MIN_BLANKED_CHARACTERS},}}")
# What the inside may hold: numbers between commas, in nested brackets.
_NUMBER = re.compile(r"[-+]?(?:\d[\d_]*\.?[\d_]*|\.\d[\d_]*)(?:[eE][-+]?\d[\d_]*)?[jJ]?")
_BRACKETS_AND_SPACE = " \t[]()"
# The blank: a zero every so many characters, spaces between.
_BLANK_CHUNK = 1024
_BLANK = "0," + " " * (_BLANK_CHUNK - 2)
_CLOSING = {"[": "]", "(": ")"}
_BRACKET = re.compile(r"[\[\]()]")


@dataclass(frozen=True)
class BlankedSource:
    """The text to parse, and the spans (start, end offsets) that were blanked in it."""

    text: str
    spans: tuple[tuple[int, int], ...]

    def touches(self, start: int, end: int) -> bool:
        return any(start < span_end and span_start < end or start == end and span_start <= start < span_end
                   for span_start, span_end in self.spans)


def blank_number_literals(source: str) -> BlankedSource:
    """`source` with the inside of every long literal of numbers blanked (see the module)."""
    if len(source) < MIN_BLANKED_CHARACTERS:
        return BlankedSource(source, ())
    spans: list[tuple[int, int]] = []
    for run in _RUN.finditer(source):
        spans.extend(_literals_in(source, run.start(), run.end()))
    if not spans:
        return BlankedSource(source, ())
    parts: list[str] = []
    last = 0
    for start, end in spans:
        parts.append(source[last:start])
        parts.append(_blank(end - start))
        last = end
    parts.append(source[last:])
    return BlankedSource("".join(parts), tuple(spans))


def _blank(length: int) -> str:
    """`length` characters of `0,` and spaces: a short list of zeros. Not spaces alone: LibCST
    checks each whitespace token with a pattern whose stack grows with its length."""
    chunks, rest = divmod(length, _BLANK_CHUNK)
    return _BLANK * chunks + " " * rest


def _literals_in(source: str, start: int, end: int) -> list[tuple[int, int]]:
    """The insides of the long bracketed literals of numbers in `source[start:end]`."""
    found: list[tuple[int, int]] = []
    position = start
    while position < end:
        opening = min((index for index in (source.find("[", position, end), source.find("(", position, end))
                       if index >= 0), default=-1)
        if opening < 0:
            break
        closing = _matching(source, opening, end)
        if closing is None:
            position = opening + 1
            continue
        inside = source[opening + 1:closing]
        if len(inside) >= MIN_BLANKED_CHARACTERS and _numbers_only(inside):
            found.append((opening + 1, closing))
        position = closing + 1 if found and found[-1][1] == closing else opening + 1
    return found


def _matching(source: str, opening: int, end: int) -> int | None:
    """Where the bracket at `opening` closes, if it does before `end` with the same kind."""
    stack = [_CLOSING[source[opening]]]
    for bracket in _BRACKET.finditer(source, opening + 1, end):
        character = bracket.group()
        if character in _CLOSING:
            stack.append(_CLOSING[character])
        elif stack.pop() != character:
            return None
        elif not stack:
            return bracket.start()
    return None


def _numbers_only(inside: str) -> bool:
    """Numbers between commas: `0.1, -2e-3, [1, 2], (3, 4)` (brackets already balanced).

    Piece by piece, not one pattern over the whole: a repeated group over a megabyte keeps a
    backtracking stack of hundreds of megabytes.
    """
    pieces = inside.split(",")
    for index, piece in enumerate(pieces):
        number = piece.strip(_BRACKETS_AND_SPACE)
        if number:
            if _NUMBER.fullmatch(number) is None:
                return False
        elif index < len(pieces) - 1 and not any(bracket in piece for bracket in "])"):
            return False  # `1,,2`; a trailing comma, before a bracket or at the end, is fine
    return True
