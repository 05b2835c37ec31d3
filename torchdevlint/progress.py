"""Progress of a long `check` on a terminal: one line on standard error, rewritten in place,
that appears only once the run has taken a while and is gone before the report is written.
Never in a pipe, a file or a machine format, whose readers want the report alone."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from typing import TextIO

# A run shorter than this shows nothing: a progress line that flickers past helps no one.
SHOW_AFTER_SECONDS = 1.0
# The line is rewritten at most this often, so a fast walk over many files costs nothing.
REDRAW_SECONDS = 0.1


class Progress:
    """`[done/total] path` of the files checked so far."""

    def __init__(self, total: int, stream: TextIO, *, enabled: bool,
                 clock: Callable[[], float] = time.monotonic, show_after: float | None = None) -> None:
        self._total = total
        self._stream = stream
        self._enabled = enabled and total > 1
        self._clock = clock
        self._started = clock()
        self._show_after = SHOW_AFTER_SECONDS if show_after is None else show_after
        self._done = 0
        self._drawn_at: float | None = None

    def advance(self, path: str) -> None:
        """One more file is checked."""
        self._done += 1
        if not self._enabled:
            return
        now = self._clock()
        if now - self._started < self._show_after:
            return
        if self._drawn_at is not None and now - self._drawn_at < REDRAW_SECONDS and self._done < self._total:
            return
        width = max(20, shutil.get_terminal_size((80, 24)).columns - 1)
        line = f"[{self._done}/{self._total}] {path}"
        if len(line) > width:
            line = line[:width - 1] + "…"
        self._stream.write(f"\r{line}\x1b[K")
        self._stream.flush()
        self._drawn_at = now

    def clear(self) -> None:
        """Take the line away (before anything else is written, and at the end)."""
        if self._drawn_at is None:
            return
        self._stream.write("\r\x1b[K")
        self._stream.flush()
        self._drawn_at = None
