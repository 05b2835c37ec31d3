"""`torchdevlint verify` output: a block per program and a summary line, or one JSON array."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TextIO

from torchdevlint.diagnostics import FileError
from torchdevlint.verify.protocol import RunStatus
from torchdevlint.verify.runner import (
    Accelerator,
    AcceleratorInfo,
    Comparison,
    ComparisonStatus,
    ProgramReport,
    RunEvent,
    RunOutcome,
    RunPhase,
    Verdict,
)

_MESSAGE_WIDTH = 300
# Bold and colour codes some messages carry (torch.load's weights_only advice).
_TERMINAL_STYLE = re.compile(r"\x1b\[[0-9;]*m")


def header(accelerator: AcceleratorInfo) -> str:
    if accelerator.kind is Accelerator.CUDA:
        return f"Verifying on CUDA ({accelerator.reason})\n"
    return f"Verifying on the emulated GPU ({accelerator.reason})\n"


def _one_line(text: str) -> str:
    flat = " ".join(_TERMINAL_STYLE.sub("", text).split())
    return flat if len(flat) <= _MESSAGE_WIDTH else flat[: _MESSAGE_WIDTH - 1] + "…"


def _describe(run: RunOutcome, program: ProgramReport) -> str:
    where = f"[{run.host.label}]"
    if run.status is RunStatus.OK:
        shown = f"ran, RESULT {run.result}" if run.result is not None else "ran (no RESULT line)"
        if run.stopped is not None:
            shown = f"{shown}, stopped after {run.seconds:.1f} s: {run.stopped}"
        return f"{shown} {where}"
    assert run.error is not None
    at = f" at {program.program_line(run.error.line)}" if run.error.line else ""
    status = "timed out" if run.status is RunStatus.TIMEOUT else "failed"
    return f"{status}{at}: {run.error.type}: {_one_line(run.error.message)} {where}"


def _findings_line(program: ProgramReport) -> str:
    by_code: dict[str, list[str]] = {}
    for finding in program.findings:
        where = str(finding.start.line) if finding.cell is None else f"{finding.start.line} of cell {finding.cell}"
        by_code.setdefault(finding.code, []).append(where)
    return "; ".join(
        f"{code} at line{'s' if len(lines) > 1 else ''} {', '.join(lines)}" for code, lines in by_code.items()
    )


def _write_runs(out: TextIO, program: ProgramReport, original: RunOutcome | None, fixed: RunOutcome | None,
                comparison: Comparison | None, indent: str) -> None:
    if original is not None:
        out.write(f"{indent}original:  {_describe(original, program)}\n")
    if fixed is not None:
        out.write(f"{indent}fixed:     {_describe(fixed, program)}\n")
    if comparison is not None:
        label = {
            ComparisonStatus.MATCH: "same",
            ComparisonStatus.DIFFER: "DIFFERENT",
            ComparisonStatus.SKIPPED: "not compared",
        }
        line = f"{indent}result:    {label[comparison.status]}: {comparison.reason}"
        if comparison.status is ComparisonStatus.DIFFER:
            line += f" (expected RESULT {comparison.expected}, got RESULT {comparison.actual})"
        out.write(line + "\n")


def write_program(out: TextIO, program: ProgramReport) -> None:
    out.write(f"{program.path}: {program.verdict.value}\n")
    if not program.findings:
        out.write(f"  {program.note}\n")
        return
    out.write(f"  findings:  {_findings_line(program)}\n")
    _write_runs(out, program, program.original, program.fixed, program.comparison, "  ")
    for scenario in program.more:
        codes = ", ".join(sorted(set(scenario.codes)))
        if scenario.agreement:
            checked = "agrees" if scenario.verdict is Verdict.BUG_NOT_REPRODUCED and scenario.original.error is None \
                else scenario.verdict.value
            out.write(f"  on {scenario.machine}, where the fix of {codes} changes the program: {checked}\n")
        else:
            out.write(f"  on {scenario.machine}, for {codes}: {scenario.verdict.value}\n")
        _write_runs(out, program, scenario.original, scenario.fixed, scenario.comparison, "    ")
        out.write(f"    why:       {scenario.note}\n")
    out.write(f"  why:       {program.note}\n")


def summary(programs: Sequence[ProgramReport], errors: Sequence[FileError]) -> str:
    counts = Counter(program.verdict for program in programs)
    parts = [f"{counts[verdict]} {verdict.value}" for verdict in Verdict if counts[verdict]]
    if errors:
        parts.append(f"{len(errors)} could not be read")
    total = len(programs) + len(errors)
    return f"{', '.join(parts) or 'nothing to verify'} ({total} program{'s' if total != 1 else ''})\n"


def write_error(out: TextIO, error: FileError) -> None:
    out.write(f"{error.path}: error: {error.message}\n")


def write_json(out: TextIO, programs: Sequence[ProgramReport]) -> None:
    json.dump([program.to_json() for program in programs], out, indent=2)
    out.write("\n")


def progress_writer(out: TextIO, every_run: bool) -> Callable[[RunEvent], None]:
    """Progress lines for `out` (stderr): every start and end when someone watches (`every_run`),
    and always a line for each run still going after a while, so a log is never silent for minutes."""

    def write(event: RunEvent) -> None:
        if event.phase is not RunPhase.RUNNING and not every_run:
            return
        what = f"verify: {event.path}: {event.role} run"
        if event.phase is RunPhase.STARTED:
            line = f"{what} on the {event.host.label} started"
        elif event.phase is RunPhase.RUNNING:
            line = f"{what} on the {event.host.label} still running ({event.seconds:.0f} s)"
        else:
            outcome = event.outcome
            ended = "ended"
            if outcome is not None:
                ended = {RunStatus.OK: "ran", RunStatus.ERROR: "failed", RunStatus.TIMEOUT: "timed out"}[outcome.status]
                if outcome.stopped is not None:
                    ended = "stopped early"
            line = f"{what} {ended} after {event.seconds:.1f} s"
        out.write(line + "\n")
        out.flush()

    return write
