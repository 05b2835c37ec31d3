"""Where each finding sits in the program that runs: its statement, and the lines using its value.

Two things hang on it. A run that fails is the finding's bug only when the error is one the
finding's rule predicts *and* the traceback passes through the finding's statement or a use of
its value (`shown_by`); a device error elsewhere is another bug. And a run may stop once every
finding's statement and a use of its value have run (`verify.proof`).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import libcst as cst

from torchdevlint.analysis.value_uses import uses_of_lines
from torchdevlint.diagnostics import Diagnostic
from torchdevlint.sourcefile import CellLines
from torchdevlint.verify.expected_errors import predicted_by, surfaces_away
from torchdevlint.verify.proof import Watch
from torchdevlint.verify.protocol import ErrorInfo


@dataclass(frozen=True)
class FindingSite:
    code: str
    # The finding's line in the program that runs (a notebook's cells run as one program).
    line: int
    statement: frozenset[int]
    uses: frozenset[int]

    @property
    def lines(self) -> frozenset[int]:
        return self.statement | self.uses

    def watch(self) -> Watch:
        return Watch(self.statement, self.uses)

    def moved(self, to: Callable[[int], int | None]) -> FindingSite:
        """The same site in an edited program (lines the edit removed drop out)."""

        def each(lines: frozenset[int]) -> frozenset[int]:
            return frozenset(line for line in map(to, lines) if line is not None)

        return FindingSite(self.code, to(self.line) or self.line, each(self.statement), each(self.uses))


def program_line(finding: Diagnostic, cells: Sequence[CellLines]) -> int:
    """A finding's line in the program that runs; a notebook finding's line counts within its cell."""
    if finding.cell is None:
        return finding.start.line
    for cell in cells:
        if cell.number == finding.cell:
            return cell.first_line + finding.start.line - 1
    return finding.start.line


def finding_sites(text: str, findings: Sequence[Diagnostic], cells: Sequence[CellLines]) -> tuple[FindingSite, ...]:
    lines = {finding: program_line(finding, cells) for finding in findings}
    try:
        uses = uses_of_lines(cst.parse_module(text), set(lines.values()))
    except (cst.ParserSyntaxError, RecursionError):
        uses = {}
    sites = []
    for finding, line in lines.items():
        found = uses.get(line)
        span = frozenset(range(line, line + finding.end.line - finding.start.line + 1))
        sites.append(FindingSite(finding.code, line, (found.statement if found else frozenset()) | span,
                                 found.uses if found else frozenset()))
    return tuple(sites)


def line_map(before: str, after: str) -> Callable[[int], int | None]:
    """Where each line of `before` is in `after`: unchanged lines move, an edited line maps to its edit."""
    old, new = before.splitlines(), after.splitlines()
    where: dict[int, int] = {}
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, first_old, last_old, first_new, last_new in matcher.get_opcodes():
        for offset in range(last_old - first_old):
            if tag == "equal" or tag == "replace":
                where[first_old + offset + 1] = min(first_new + offset, max(last_new - 1, first_new)) + 1
    return where.get


def shown_by(sites: Sequence[FindingSite], error: ErrorInfo | None) -> FindingSite | None:
    """The finding whose bug this error is: predicted by its rule, raised through its lines."""
    if error is None:
        return None
    trace = set(error.trace)
    for site in sites:
        if predicted_by([site.code], error) and (surfaces_away(site.code) or trace & site.lines):
            return site
    return None


def predicted_elsewhere(sites: Sequence[FindingSite], error: ErrorInfo | None) -> bool:
    """A predicted kind of error, raised away from every finding: most likely another bug."""
    return error is not None and predicted_by([site.code for site in sites], error) and shown_by(sites, error) is None
