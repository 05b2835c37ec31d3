"""Reading source files as text and writing them back without losing a byte.

Bytes are decoded with the file's own encoding (PEP 263 cookie or BOM) and without newline
translation, so CRLF, a BOM and the encoding all survive a fix.
"""

from __future__ import annotations

import bisect
import io
import json
import os
import re
import stat
import tempfile
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# The line breaks Python's tokenizer knows (`str.splitlines` also splits at form feeds and more).
LINE_BREAK = re.compile(r"\r\n|\r|\n")
# Files that never mention this cannot hold a finding; they are not even parsed.
RELEVANCE_MARKER = "torch"
NOTEBOOK_SUFFIX = ".ipynb"


def is_notebook(path: str) -> bool:
    return path.lower().endswith(NOTEBOOK_SUFFIX)


def source_lines(text: str) -> list[str]:
    """The physical lines of Python source, as the tokenizer counts them, without their breaks."""
    lines = LINE_BREAK.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


class LineIndex:
    """Offsets into a text <-> (1-based line, 0-based column), columns in code points."""

    def __init__(self, text: str) -> None:
        self.starts = [0, *(match.end() for match in LINE_BREAK.finditer(text))]

    def offset(self, line: int, column: int) -> int:
        return self.starts[line - 1] + column

    def location(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.starts, offset)
        return line, offset - self.starts[line - 1]


class SourceError(Exception):
    """The file cannot be read as Python source; the message says why, in one line."""


@dataclass(frozen=True)
class SourceText:
    text: str
    encoding: str

    def encode(self, text: str) -> bytes:
        return text.encode(self.encoding)


def decode_source(data: bytes) -> SourceText:
    if b"\x00" in data:
        raise SourceError("file contains null bytes (binary file?)")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as error:
        raise SourceError(f"cannot determine encoding: {error.msg if hasattr(error, 'msg') else error}") from None
    try:
        text = data.decode(encoding)
    except (UnicodeDecodeError, LookupError) as error:
        raise SourceError(f"cannot decode as {encoding}: {error.reason if hasattr(error, 'reason') else error}") from None
    return SourceText(text, encoding)


def read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise SourceError(f"cannot read: {error.strerror or error}") from None


def read_source(path: Path) -> SourceText:
    return decode_source(read_bytes(path))


class NotRewritten(Exception):
    """A fixed file left as it was, and why: it is read-only, or it changed since it was read."""


# Folders a walk skips unless `exclude` replaces this list (`extend-exclude` adds to it):
# version control, virtual environments, caches, build output. Matched by name at any depth,
# like ruff's defaults; `env` is not among them, since reinforcement-learning code keeps its
# environments in packages of that name.
DEFAULT_EXCLUDES: tuple[str, ...] = (
    ".bzr", ".direnv", ".eggs", ".env", ".git", ".git-rewrite", ".hg", ".mypy_cache", ".nox",
    ".pants.d", ".pyenv", ".pytest_cache", ".pytype", ".ruff_cache", ".svn", ".tox", ".venv",
    ".vscode", ".torchdevlint_cache", "__pycache__", "__pypackages__", "_build", "buck-out",
    "build", "dist", "node_modules", "site-packages", "venv", "*.egg-info",
    # Jupyter's autosaved copies of the notebooks beside them.
    ".ipynb_checkpoints",
)


def store_json(path: Path, value: object) -> None:
    """Write `value` as JSON through a temporary file and a rename, so concurrent runs never
    read half of it. A read-only checkout or a full disk costs speed, never a result: the
    caller's stores (the findings cache) are only ever a shortcut."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(descriptor, "w") as handle:
            json.dump(value, handle)
        os.replace(temporary, path)
    except OSError:
        pass


def write_atomically(path: Path, data: bytes, *, replacing: bytes | None = None) -> None:
    """Write through a temporary file in the same folder, then rename: never a half file.

    A symbolic link is written through: its target is replaced, the link stays a link. The file
    keeps its mode, owner and group (the last two where this user may set them). A file with
    other hard links is written in place, as ruff writes, so every name sees the fix: the new
    bytes are in the temporary file first (synced), and it is removed only once the file holds
    them, so an interruption leaves them beside it. A file without its owner's write
    permission is not rewritten (rename would bypass it), nor one whose bytes are no longer
    `replacing` (an edit saved, or another run's fixes, since it was read): NotRewritten says
    which.
    """
    path = Path(os.path.realpath(path))
    status = path.stat()
    mode = status.st_mode
    if not mode & stat.S_IWUSR:
        raise NotRewritten("the file is read-only")
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tdl-tmp", dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode & 0o7777)
        _keep_owner(temporary, status)
        if replacing is not None and path.read_bytes() != replacing:
            raise NotRewritten("the file changed since it was read")
        if status.st_nlink > 1:
            with open(path, "r+b") as original:
                original.write(data)
                original.truncate()
                original.flush()
                os.fsync(original.fileno())
            os.unlink(temporary)
        else:
            os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise


def _keep_owner(temporary: str, original: os.stat_result) -> None:
    """The new file's owner and group as the original's (root's `--fix` must not take a
    user's file); as much of it as this user may set."""
    for uid in (original.st_uid, -1):
        try:
            os.chown(temporary, uid, original.st_gid)
            return
        except (PermissionError, AttributeError):  # not permitted, or no chown (Windows)
            continue


@dataclass(frozen=True)
class CellLines:
    """Where one notebook cell lies in the program made of the notebook's code cells."""

    # The cell's number in the notebook (1-based, every cell counted, as Jupyter and ruff count).
    number: int
    # The program line of the cell's first line, and how many lines the cell has.
    first_line: int
    line_count: int
    # For each line of the cell, its line in the .ipynb file (where its JSON string is).
    document_lines: tuple[int, ...] = ()

    def document_line(self, line: int) -> int | None:
        if 1 <= line <= len(self.document_lines):
            return self.document_lines[line - 1]
        return self.document_lines[-1] if self.document_lines else None


def cell_holding(cells: Sequence[CellLines], line: int) -> CellLines | None:
    """The cell (of `cells`, in program order) one of whose lines is program line `line`."""
    index = bisect.bisect_right([cell.first_line for cell in cells], line) - 1
    if index < 0:
        return None
    cell = cells[index]
    return cell if line < cell.first_line + cell.line_count else None


def line_name(cells: Sequence[CellLines], line: int) -> str:
    """A program line as the user finds it: `line 7`, or in a notebook `cell 3, line 2`."""
    cell = cell_holding(cells, line)
    return f"line {line}" if cell is None else f"cell {cell.number}, line {line - cell.first_line + 1}"


@dataclass(frozen=True)
class ProgramView:
    """The text a file's findings were made on, as reporters need it to show them.

    For a notebook `text` is the program made of its code cells, and findings count lines
    within their cell; `cells` says where each cell lies in the program.
    """

    text: str
    cells: tuple[CellLines, ...] = ()

    def cell(self, number: int | None) -> CellLines | None:
        if number is None:
            return None
        return next((cell for cell in self.cells if cell.number == number), None)

    def lines(self, cell_number: int | None = None) -> list[str]:
        """The lines a finding's line numbers index: the file's, or its cell's."""
        lines = source_lines(self.text)
        cell = self.cell(cell_number)
        if cell is None:
            return lines
        return lines[cell.first_line - 1 : cell.first_line - 1 + cell.line_count]
