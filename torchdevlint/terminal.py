"""How text looks on a terminal: display widths, a window on a long line, ANSI colour.

A finding's columns count code points; a terminal draws some code points two columns wide
(CJK), some zero wide (combining marks), and tabs up to the next tab stop. The marker line
under a source line is built from the same characters' widths, so it lands under the finding
whatever precedes it.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

# Source text shown per line, at most, in display columns (the gutter comes on top).
MAX_LINE_COLUMNS = 120
ELLIPSIS = "…"
# The most a tab can take; it is shown as a tab, so this only bounds a window's width.
TAB_STOP = 8

# Control characters would move the cursor or restyle the terminal (a raw ESC in a string
# literal is valid Python): shown as their Unicode control pictures, one column wide.
_VISIBLE_CONTROLS = {code: 0x2400 + code for code in range(0x20) if code != ord("\t")}
_VISIBLE_CONTROLS[0x7F] = 0x2421
_VISIBLE_CONTROLS.update(dict.fromkeys(range(0x80, 0xA0), 0xFFFD))


def char_width(char: str) -> int:
    """Columns a terminal gives one code point (tabs: the most they can take)."""
    if char == "\t":
        return TAB_STOP
    category = unicodedata.category(char)
    # Combining marks sit on the character before; format characters (zero-width space,
    # joiners, direction marks) take no column. A soft hyphen is the one format character
    # terminals draw.
    if category in ("Mn", "Me") or (category == "Cf" and char != "\u00ad"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def visible(text: str) -> str:
    """`text` with control characters (other than tabs) replaced by symbols of the same width."""
    return text.translate(_VISIBLE_CONTROLS)


def _fits(text: str, columns: int) -> bool:
    used = 0
    for char in text:
        used += char_width(char)
        if used > columns:
            return False
    return True


def _span_columns(text: str, start: int, end: int, cap: int) -> int:
    """Display columns of text[start:end], counted no further than `cap`."""
    used = 0
    for index in range(start, end):
        used += char_width(text[index])
        if used >= cap:
            return cap
    return used


def _window(line: str, start: int, end: int, columns: int) -> tuple[int, int]:
    """Indexes [first, last) of `line` to show in `columns`, around the span [start, end).

    The span's start is always shown, with context on both sides; a span wider than the
    window keeps three quarters of it, and the window is filled from the left when the line
    ends inside it.
    """
    span = _span_columns(line, start, end, cap=columns)
    left_room = (columns - min(span, columns * 3 // 4)) // 2
    first, used = start, 0
    while first > 0 and used + char_width(line[first - 1]) <= left_room:
        first -= 1
        used += char_width(line[first])
    last, used = first, 0
    while last < len(line) and used + char_width(line[last]) <= columns:
        used += char_width(line[last])
        last += 1
    if last == len(line):
        while first > 0 and used + char_width(line[first - 1]) <= columns:
            first -= 1
            used += char_width(line[first])
    # Combining marks belong to the character before them: never split from it.
    while last < len(line) and char_width(line[last]) == 0:
        last += 1
    while first < start and char_width(line[first]) == 0:
        first += 1
    return first, last


@dataclass(frozen=True)
class UnderlinedLine:
    """A source line as shown under a finding, and what goes on the marker line below it."""

    text: str
    # What goes under `text` before the span: a tab under each tab (the terminal expands both
    # alike), otherwise spaces as wide as the characters above.
    indent: str
    # Display columns of the span's visible part, at least one (an empty span is still marked).
    carets: int


def underline(line: str, start: int, end: int, max_columns: int = MAX_LINE_COLUMNS) -> UnderlinedLine:
    """Show `line` (cut to a window with `…` where it is longer than `max_columns`) with the
    span between code-point indexes `start` and `end` marked."""
    start = min(max(start, 0), len(line))
    end = min(max(end, start), len(line))
    if _fits(line, max_columns):
        first, last = 0, len(line)
    else:
        # Two columns kept for the ellipses.
        first, last = _window(line, start, end, max_columns - 2)
    cut_before, cut_after = first > 0, last < len(line)
    text = (ELLIPSIS if cut_before else "") + visible(line[first:last]) + (ELLIPSIS if cut_after else "")
    indent = (" " if cut_before else "") + "".join(
        "\t" if char == "\t" else " " * char_width(char) for char in line[first:start]
    )
    # A tab inside the span gets one caret: how far it reaches depends on the terminal.
    carets = sum(1 if char == "\t" else char_width(char) for char in line[start:min(end, last)])
    return UnderlinedLine(text, indent, max(1, carets))


# --- colour ----------------------------------------------------------------------------------

class ColorChoice(Enum):
    AUTO = "auto"
    ALWAYS = "always"
    NEVER = "never"


def wants_color(choice: ColorChoice, to_terminal: bool, environ: Mapping[str, str]) -> bool:
    """Whether to colour a report, as ruff and CPython decide it.

    `auto` colours only a terminal, and never when NO_COLOR is set (https://no-color.org);
    FORCE_COLOR colours wherever NO_COLOR does not forbid it; TERM=dumb cannot show colour.
    """
    if choice is not ColorChoice.AUTO:
        return choice is ColorChoice.ALWAYS
    if environ.get("NO_COLOR"):
        return False
    if environ.get("FORCE_COLOR"):
        return True
    return to_terminal and environ.get("TERM") != "dumb"


class Style(Enum):
    """SGR parameters of the few styles the text reports use (as ruff uses them)."""

    BOLD = "1"  # locations
    BOLD_RED = "1;31"  # rule codes, `error`
    RED = "31"  # carets under a finding, removed lines
    GREEN = "32"  # added lines
    BOLD_GREEN = "1;32"  # "All checks passed!"
    CYAN = "36"  # `[*]`, `= help:`
    BOLD_BLUE = "1;34"  # the gutter: line numbers and `|`


@dataclass(frozen=True)
class Palette:
    """Paints text with ANSI styles, or leaves it as it is when colour is off."""

    enabled: bool = False

    def paint(self, text: str, style: Style) -> str:
        if not self.enabled or not text:
            return text
        return f"\x1b[{style.value}m{text}\x1b[0m"


PLAIN = Palette(enabled=False)
