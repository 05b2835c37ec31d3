"""Long literals and expressions, blanked before parsing.

Numbers (`blank_number_literals`): data, never device code.

A module that holds a dataset as a literal (`DATA = [0.12, 0.57, ...]` over megabytes) costs
LibCST a tree node per number: 30 s and 2.5 GB for 5 MB of floats on one line. No rule reads
numbers in a list, so such a literal's inside is replaced before parsing by text of the same
length, mostly spaces (a zero every kilobyte): the analysis sees a short list of zeros, and
every line, column and offset stays where it is in the real text. Fixes whose edits touch a blanked span are withheld (their text could
come from the blanked tree).

Any bracketed expression (`blank_long_expressions`) whose inside is over
MIN_BLANKED_EXPRESSION characters: a generated list of 700,000 calls on one line cost Python's
own parser and LibCST 1.9 GB and 10 s, some 300 bytes for each byte of text. Its inside is read
as `0` (a list of one zero, a call with one argument, a subscript by 0) at the same offsets,
line breaks kept, and is not analysed. Code written by hand never has one such expression
this long; generated code and embedded data do.
"""

from __future__ import annotations

import re
from collections.abc import Callable
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
    return _blanked(source, spans, lambda inside: _blank(len(inside)))


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


# Only expressions whose inside is at least this long are blanked: one costs the parsers some
# 30 MB where it is dense code, and nobody writes a device bug into one by hand.
MIN_BLANKED_EXPRESSION = 100_000
# One token of what the scan for brackets reads: a comment, a string (a backslash escapes any
# character; a one-line string ends at its line), a line continuation, a bracket, or a quote
# that opens no string that ends (unpaired text). Possessive repeats: no backtracking stack
# over a megabyte of string.
_SCANNED = re.compile(
    r"(?P<skip>#[^\n]*+"
    r"|'''(?:[^'\\]++|\\.|'(?!''))*+'''"
    r'|"""(?:[^"\\]++|\\.|"(?!""))*+"""'
    r"|'(?:[^'\\\n]++|\\.)*+'"
    r'|"(?:[^"\\\n]++|\\.)*+"'
    r"|\\.)"
    r"|(?P<bracket>[\[\](){}])"
    r"""|(?P<unpaired>['"])""",
    re.DOTALL,
)
_OPENING = {"[": "]", "(": ")", "{": "}"}
# Brackets whose inside `0` does not fit: a signature's parameters, names imported.
_NOT_AN_EXPRESSION_BEFORE = re.compile(r"(?:\bdef\s+\w+\s*|\bimport\s*)$")
_LINE_BREAK = re.compile(r"(\r\n|\r|\n)")


def blank_long_expressions(source: str) -> BlankedSource:
    """`source` with the inside of every bracketed expression longer than
    MIN_BLANKED_EXPRESSION blanked to `0` at the same offsets (see the module). Where the
    brackets or strings do not pair up, nothing is blanked: the parsers report that text."""
    if len(source) < MIN_BLANKED_EXPRESSION:
        return BlankedSource(source, ())
    spans = _long_brackets(source)
    if not spans:
        return BlankedSource(source, ())
    return _blanked(source, spans, _blank_keeping_lines)


def _blanked(source: str, spans: list[tuple[int, int]], blank: Callable[[str], str]) -> BlankedSource:
    """`source` with each span's text replaced by `blank` of it (text of the same length)."""
    parts: list[str] = []
    last = 0
    for start, end in spans:
        parts.append(source[last:start])
        parts.append(blank(source[start:end]))
        last = end
    parts.append(source[last:])
    return BlankedSource("".join(parts), tuple(spans))


def _long_brackets(source: str) -> list[tuple[int, int]]:
    """The insides (start, end) of the outermost long bracketed expressions; none where the
    text does not pair up."""
    found: list[tuple[int, int]] = []
    stack: list[tuple[str, int]] = []
    for match in _SCANNED.finditer(source):
        bracket = match.group("bracket")
        if bracket is None:
            if match.group("unpaired") is not None:
                return []
            continue
        index = match.start()
        if bracket in _OPENING:
            stack.append((_OPENING[bracket], index))
            continue
        if not stack or stack[-1][0] != bracket:
            return []
        _, opening = stack.pop()
        if index - opening - 1 >= MIN_BLANKED_EXPRESSION and not _NOT_AN_EXPRESSION_BEFORE.search(
                source, max(0, opening - 200), opening):
            # An outer one holds it whole: drop the inner ones found so far.
            while found and found[-1][0] > opening:
                found.pop()
            found.append((opening + 1, index))
    return found if not stack else []


def _blank_keeping_lines(inside: str) -> str:
    """`0` and spaces (`,0` every so often, as in `_blank`), with every line break kept."""
    pieces = _LINE_BREAK.split(inside)  # text, break, text, ...: the breaks kept as they are
    blank = bytearray("".join(piece if index % 2 else " " * len(piece) for index, piece in enumerate(pieces)), "ascii")
    first = blank.find(b" ")
    if first < 0:
        return inside
    blank[first:first + 1] = b"0"
    for index in range(first + _BLANK_CHUNK, len(blank) - 1, _BLANK_CHUNK):
        if blank[index:index + 2] == b"  ":
            blank[index:index + 2] = b",0"
    return blank.decode("ascii")


def blank_for_parsing(source: str) -> BlankedSource:
    """`source` with its long expressions, then its long literals of numbers, blanked."""
    expressions = blank_long_expressions(source)
    numbers = blank_number_literals(expressions.text)
    inside = [span for span in numbers.spans if not expressions.touches(*span)]
    return BlankedSource(numbers.text, tuple(sorted((*expressions.spans, *inside))))
