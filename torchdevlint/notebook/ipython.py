"""IPython syntax in a code cell, masked so the cell parses as Python with every line in place.

`%matplotlib inline`, `!nvidia-smi`, `files = !ls`, `torch.zeros?` and `pip install x`
(automagic) each become a placeholder statement on the same line with the same indentation,
carrying its index so the original line can be put back after a fix. A cell opened by a cell
magic that runs Python (`%%time`) keeps its body; one in another language (`%%bash`,
`%%writefile`) is not Python at all.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass

# Cell magics whose body IPython runs as Python in the same namespace.
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug", "memit", "mprun", "pypy"})
_CELL_MAGIC = re.compile(r"\s*%%(\w+)")
_ASSIGNED_MAGIC = re.compile(r"(?P<targets>[A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*)\s*=\s*[%!]")
_AUTOMAGIC = re.compile(r"(?:pip|conda|mamba)\s+(?:install|uninstall|list|show|freeze|download)\b")
# The placeholder's tag; `restore` finds masked lines by it.
PLACEHOLDER_TAG = "torchdevlint-ipython"
_PLACEHOLDER = re.compile(rf"  # {PLACEHOLDER_TAG} (\d+)$")
_PLACEHOLDER_LINE = re.compile(rf"^[^\n]*  # {PLACEHOLDER_TAG} \d+$", re.MULTILINE)


@dataclass(frozen=True)
class MaskedCell:
    text: str
    # Placeholder index -> the original line, without its line ending.
    originals: tuple[str, ...]

    def restore(self, text: str) -> str | None:
        """`text` (this cell after fixes) with each placeholder back to its original line;
        None if a placeholder went missing or appears twice (a fix touched it)."""
        if not self.originals:
            return text
        seen: set[int] = set()
        lines = text.splitlines(keepends=True)
        for position, line in enumerate(lines):
            body = line.rstrip("\r\n")
            match = _PLACEHOLDER.search(body)
            if match is None:
                continue
            index = int(match.group(1))
            if index >= len(self.originals) or index in seen:
                return None
            seen.add(index)
            lines[position] = self.originals[index] + line[len(body):]
        return "".join(lines) if len(seen) == len(self.originals) else None


def cell_magic(source: str) -> str | None:
    """The cell magic a cell opens with (`time` for `%%time`), if any."""
    match = _CELL_MAGIC.match(source)
    return match.group(1) if match else None


def is_python_cell(source: str) -> bool:
    magic = cell_magic(source)
    return magic is None or magic in PYTHON_CELL_MAGICS


def placeholder_lines(text: str) -> list[tuple[int, int]]:
    """(start, end) offsets of every placeholder line in `text`, line ending excluded."""
    return [match.span() for match in _PLACEHOLDER_LINE.finditer(text)]


def _is_candidate(stripped: str) -> bool:
    if not stripped or stripped.startswith("#"):
        return False
    if stripped[0] in "%!?":
        return True
    if stripped.endswith("?") and "#" not in stripped:
        return True
    return _ASSIGNED_MAGIC.match(stripped) is not None or _AUTOMAGIC.match(stripped) is not None


def mask(source: str) -> MaskedCell:
    """The cell as Python: IPython lines replaced by placeholders, line for line."""
    lines = source.splitlines(keepends=True)
    first_code = next((i for i, line in enumerate(lines) if line.strip()), None)
    magic_line = first_code if first_code is not None and cell_magic(source) else None
    # Each IPython line with the lines a trailing backslash continues it onto.
    groups: list[list[int]] = []
    index = 0
    while index < len(lines):
        if index == magic_line or _is_candidate(lines[index].strip()):
            group = [index]
            while lines[index].rstrip("\r\n").endswith("\\") and index + 1 < len(lines):
                index += 1
                group.append(index)
            groups.append(group)
        index += 1
    if not groups:
        return MaskedCell(source, ())
    # A candidate inside a string or brackets (`"""...\n%d items"""`, `(a\n% b)`) is Python:
    # only one where the code before it ends a statement is IPython.
    masked = list(lines)
    originals: list[str] = []
    for group in groups:
        if group[0] == magic_line or _ends_a_statement("".join(masked[: group[0]])):
            _mask_group(masked, group, originals)
    return MaskedCell("".join(masked), tuple(originals))


def _mask_group(lines: list[str], group: list[int], originals: list[str]) -> None:
    """Replace one IPython line (and its continuations) in `lines` by numbered placeholders."""
    head = lines[group[0]].rstrip("\r\n")
    indent = head[: len(head) - len(head.lstrip())]
    assigned = _ASSIGNED_MAGIC.match(head.lstrip())
    statement = f"{assigned.group('targets')} = None" if assigned else "pass"
    for index in group:
        line = lines[index]
        body = line.rstrip("\r\n")
        lines[index] = f"{indent}{statement}  # {PLACEHOLDER_TAG} {len(originals)}{line[len(body):]}"
        originals.append(body)
        statement = "pass"


def _ends_a_statement(text: str) -> bool:
    """Whether Python code `text` ends outside any bracket, string or backslash continuation."""
    if not text.strip():
        return True
    try:
        for _ in tokenize.generate_tokens(io.StringIO(text).readline):
            pass
    except tokenize.TokenError:
        # "EOF in multi-line statement/string": the next line continues this code.
        return False
    except (IndentationError, SyntaxError):
        # Broken for another reason: the cell is reported as a syntax error either way.
        return True
    return True
