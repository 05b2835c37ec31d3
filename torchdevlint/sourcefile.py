"""Reading source files as text and writing them back without losing a byte.

Bytes are decoded with the file's own encoding (PEP 263 cookie or BOM) and without newline
translation, so CRLF, a BOM and the encoding all survive a fix.
"""

from __future__ import annotations

import bisect
import io
import os
import tempfile
import tokenize
from dataclasses import dataclass
from pathlib import Path


class LineIndex:
    """Offsets into a text <-> (1-based line, 0-based column), columns in code points."""

    def __init__(self, text: str) -> None:
        starts = [0]
        position = text.find("\n")
        while position != -1:
            starts.append(position + 1)
            position = text.find("\n", position + 1)
        self.starts = starts

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


def write_atomically(path: Path, data: bytes) -> None:
    """Write through a temporary file in the same folder, then rename: never a half file.

    A symbolic link is written through: its target is replaced, the link stays a link.
    """
    path = Path(os.path.realpath(path))
    mode = path.stat().st_mode
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tdl-tmp", dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode & 0o7777)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise


class SourceTexts:
    """The text each reported file had when it was linted, for reporters that show it.

    Workers hand back the text with their findings; a result without it (from the cache) is
    read again from disk. None for a file that can no longer be read.
    """

    def __init__(self) -> None:
        self._texts: dict[str, str | None] = {}

    def add(self, path: str, text: str | None) -> None:
        if text is not None:
            self._texts[path] = text

    def __call__(self, path: str) -> str | None:
        if path not in self._texts:
            try:
                self._texts[path] = read_source(Path(path)).text
            except SourceError:
                self._texts[path] = None
        return self._texts[path]
