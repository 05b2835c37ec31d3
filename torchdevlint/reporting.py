"""Output formats: text and JSON (more formats come with the CI-output work)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

from torchdevlint.diagnostics import Diagnostic, FileError


@dataclass
class Summary:
    findings: int = 0
    fixed: int = 0
    safe_fixable: int = 0
    unsafe_fixable: int = 0
    errors: int = 0


def summarize(diagnostics: Sequence[Diagnostic], errors: Sequence[FileError], fixed: int) -> Summary:
    summary = Summary(findings=len(diagnostics), fixed=fixed, errors=len(errors))
    for diagnostic in diagnostics:
        if diagnostic.fix is not None and not diagnostic.fix_withheld:
            if diagnostic.fix.is_safe:
                summary.safe_fixable += 1
            else:
                summary.unsafe_fixable += 1
    return summary


def format_text_line(diagnostic: Diagnostic, unsafe_fixes: bool = False) -> str:
    marker = ""
    if diagnostic.fix is not None and not diagnostic.fix_withheld:
        if diagnostic.fix.is_safe or unsafe_fixes:
            marker = " [*]"
    note = " (fix withheld: its output did not parse)" if diagnostic.fix_withheld else ""
    return (
        f"{diagnostic.path}:{diagnostic.start.line}:{diagnostic.start.column}: "
        f"{diagnostic.code} {diagnostic.message}{marker}{note}"
    )


def format_error_line(error: FileError) -> str:
    where = error.path
    if error.line is not None:
        where += f":{error.line}"
        if error.column is not None:
            where += f":{error.column}"
    return f"{where}: error: {error.message}"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def write_text(out: TextIO, diagnostics: Sequence[Diagnostic], errors: Sequence[FileError],
               fixed: int, *, unsafe_fixes: bool, fixing: bool, dry_run: bool = False) -> None:
    for error in errors:
        out.write(format_error_line(error) + "\n")
    for diagnostic in diagnostics:
        out.write(format_text_line(diagnostic, unsafe_fixes) + "\n")
    summary = summarize(diagnostics, errors, fixed)
    if summary.findings == 0 and summary.fixed == 0:
        if summary.errors == 0:
            out.write("All checks passed!\n")
        return
    if summary.fixed and dry_run:
        out.write(
            f"Would fix {_plural(summary.fixed, 'error')} ({summary.findings} would remain).\n"
        )
    elif summary.fixed:
        out.write(
            f"Found {_plural(summary.findings + summary.fixed, 'error')} "
            f"({summary.fixed} fixed, {summary.findings} remaining).\n"
        )
    else:
        out.write(f"Found {_plural(summary.findings, 'error')}.\n")
    if not fixing:
        fixable = summary.safe_fixable + (summary.unsafe_fixable if unsafe_fixes else 0)
        hidden = 0 if unsafe_fixes else summary.unsafe_fixable
        if fixable:
            line = f"[*] {fixable} fixable with the `--fix` option"
            if hidden:
                line += f" ({hidden} hidden {'fix' if hidden == 1 else 'fixes'} can be enabled with the `--unsafe-fixes` option)"
            out.write(line + ".\n")
        elif hidden:
            out.write(f"No fixes available ({hidden} hidden {'fix' if hidden == 1 else 'fixes'} can be enabled with the `--unsafe-fixes` option).\n")
    elif not unsafe_fixes and summary.unsafe_fixable:
        out.write(
            f"{_plural(summary.unsafe_fixable, 'unsafe fix')} not applied; add `--unsafe-fixes` to apply them.\n"
        )


def write_json(out: TextIO, diagnostics: Sequence[Diagnostic], errors: Sequence[FileError]) -> None:
    items: list[dict[str, object]] = []
    for error in errors:
        items.append(
            {
                "code": None,
                "slug": "file-error",
                "path": error.path,
                "line": error.line,
                "column": error.column,
                "end_line": error.line,
                "end_column": error.column,
                "message": error.message,
                "fix": None,
            }
        )
    items.extend(diagnostic.to_json() for diagnostic in diagnostics)
    json.dump(items, out, indent=2)
    out.write("\n")
