"""Limits on the work spent on one file: a time budget, and room for deeply nested code.

Every analysis is meant to be linear in the size of the file; the budget is the guarantee
that a file where that fails (a bug of ours, or a pathological file) is reported as not
analysed instead of hanging a pre-commit hook or a CI job.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

# Seconds one file may take (parse, analysis, rules and every fixing round together).
DEFAULT_FILE_SECONDS = 20.0

# Python frames allowed while a file is analysed. LibCST trees nest one level per operand of
# a `+` chain and the analysis and LibCST's code generation recurse over them; CPython 3.11+
# runs Python-to-Python calls without growing the C stack, so a higher limit is safe.
RECURSION_ALLOWANCE = 20_000


class AnalysisTimeout(Exception):
    """The file took longer than its budget; nothing about it is reported."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"not analysed: took longer than {seconds:g} s")
        self.seconds = seconds


@dataclass
class Deadline:
    """A point in time after which `check()` raises AnalysisTimeout."""

    seconds: float
    expires_at: float = field(init=False)

    def __post_init__(self) -> None:
        self.expires_at = time.monotonic() + self.seconds

    def check(self) -> None:
        if time.monotonic() > self.expires_at:
            raise AnalysisTimeout(self.seconds)


@dataclass
class NoDeadline(Deadline):
    """For callers (tests, the docs generator) that want no limit."""

    seconds: float = float("inf")

    def check(self) -> None:
        return None


@contextmanager
def room_for_nesting(limit: int = RECURSION_ALLOWANCE) -> Iterator[None]:
    """Raise the recursion limit for the duration (never lower it)."""
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(max(previous, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(previous)
