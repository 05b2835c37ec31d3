"""Output formats: text (full on a terminal, concise when piped), JSON, GitHub, SARIF.

Every reporter takes the findings of a whole run; those that show source lines or fixes ask a
`SourceLookup` for the text a file had when its findings were made.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import stat
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, TextIO
from urllib.parse import quote

from torchdevlint import __version__
from torchdevlint.diagnostics import Diagnostic, FileError, Fix
from torchdevlint.registry import all_rules
from torchdevlint.sourcefile import (
    LineIndex,
    ProgramView,
    SourceError,
    decode_source,
    is_notebook,
    read_bytes,
    source_lines,
)
from torchdevlint.terminal import PLAIN, Palette, Style, underline

if TYPE_CHECKING:
    from torchdevlint.rule import Rule

# The text a file had when it was linted, or None where it is not available.
SourceLookup = Callable[[str], "ProgramView | None"]

SARIF_SCHEMA_URI = "https://raw.githubusercontent.com/oasis-tcs/sarif-spec/master/Schemata/sarif-schema-2.1.0.json"
# Lines of a multi-line finding shown under it, at most.
MAX_SNIPPET_LINES = 4


class OutputFormat(Enum):
    TEXT = "text"  # FULL on a terminal, CONCISE when piped
    FULL = "full"
    CONCISE = "concise"
    JSON = "json"
    GITHUB = "github"
    SARIF = "sarif"

    def resolve(self, is_terminal: bool) -> OutputFormat:
        if self is OutputFormat.TEXT:
            return OutputFormat.FULL if is_terminal else OutputFormat.CONCISE
        return self

    @property
    def is_text(self) -> bool:
        return self in (OutputFormat.TEXT, OutputFormat.FULL, OutputFormat.CONCISE)


@dataclass(frozen=True)
class CheckReport:
    """Everything a `check` run found and did, as the reporters need it."""

    diagnostics: Sequence[Diagnostic]
    errors: Sequence[FileError] = ()
    fixed: int = 0
    # Path -> codes of the fixes applied there (one entry per fix).
    fixed_codes: Mapping[str, Sequence[str]] = field(default_factory=dict)
    unsafe_fixes: bool = False
    # --fix or --diff: fixes were applied (or, with --diff, would be).
    fixing: bool = False
    dry_run: bool = False
    # --fix-only: the findings left are not reported; the summary says what was fixed.
    fix_only: bool = False


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


def _offers_fix(diagnostic: Diagnostic, unsafe_fixes: bool) -> bool:
    fix = diagnostic.fix
    return fix is not None and not diagnostic.fix_withheld and (fix.is_safe or unsafe_fixes)


def _plural(count: int, word: str) -> str:
    if count == 1:
        return f"{count} {word}"
    return f"{count} {word}es" if word.endswith(("x", "s")) else f"{count} {word}s"


# --- concise and full text ---------------------------------------------------------------

def location(path: str, cell: int | None, line: int, column: int | None = None) -> str:
    """`path:line:col`, or `path:cell N:line:col` in a notebook (as ruff writes it)."""
    where = f"{path}:cell {cell}:{line}" if cell is not None else f"{path}:{line}"
    return where if column is None else f"{where}:{column}"


def _in_cell(cell: int | None, line: int, message: str) -> str:
    """A message for a format that points at the notebook file: it names the cell and line."""
    return message if cell is None else f"cell {cell}, line {line}: {message}"


def format_text_line(diagnostic: Diagnostic, unsafe_fixes: bool = False, palette: Palette = PLAIN) -> str:
    """`path:line:col: CODE message [*]`: the concise format, and the head of the full one."""
    marker = f" {palette.paint('[*]', Style.CYAN)}" if _offers_fix(diagnostic, unsafe_fixes) else ""
    note = f" (fix withheld: {diagnostic.fix_withheld})" if diagnostic.fix_withheld else ""
    where = location(diagnostic.path, diagnostic.cell, diagnostic.start.line, diagnostic.start.column)
    return (
        f"{palette.paint(where, Style.BOLD)}: "
        f"{palette.paint(diagnostic.code, Style.BOLD_RED)} {diagnostic.message}{marker}{note}"
    )


def format_error_line(error: FileError, palette: Palette = PLAIN) -> str:
    where = error.path
    if error.cell is not None and error.line is not None:
        where = location(error.path, error.cell, error.line, error.column)
    elif error.line is not None:
        where += f":{error.line}"
        if error.column is not None:
            where += f":{error.column}"
    return f"{palette.paint(where, Style.BOLD)}: {palette.paint('error', Style.BOLD_RED)}: {error.message}"


def _first_code_column(line: str) -> int:
    return len(line) - len(line.lstrip()) + 1


def _last_shown_line(diagnostic: Diagnostic, line_count: int) -> int:
    return min(diagnostic.end.line, diagnostic.start.line + MAX_SNIPPET_LINES - 1, line_count)


def format_snippet(diagnostic: Diagnostic, lines: Sequence[str], palette: Palette = PLAIN) -> list[str]:
    """The offending lines (`lines`: its file's, or its cell's in a notebook) with `^^^` under the
    span, like ruff and rustc.

    A long line is cut to a window around the span, and the carets are placed by display
    width (see torchdevlint.terminal), so they stay under the span after CJK text or tabs.
    """
    first, last = diagnostic.start.line, diagnostic.end.line
    if first > len(lines):
        return []
    shown_last = _last_shown_line(diagnostic, len(lines))
    width = len(str(shown_last))
    gutter = palette.paint(" " * width + " |", Style.BOLD_BLUE)
    out = [gutter]
    for number in range(first, shown_last + 1):
        line = lines[number - 1]
        start = diagnostic.start.column if number == first else _first_code_column(line)
        end = diagnostic.end.column if number == last else len(line) + 1
        shown = underline(line, start - 1, end - 1)
        marker = "^" * shown.carets
        if number == shown_last:
            marker += f" {diagnostic.code}"
        number_gutter = palette.paint(f"{number:>{width}} |", Style.BOLD_BLUE)
        out.append(f"{number_gutter} {shown.text}".rstrip())
        out.append(f"{gutter} {shown.indent}{palette.paint(marker, Style.RED)}")
    if shown_last < last:
        out.append(f"{gutter} ...")
    out.append(gutter)
    return out


def _help_line(diagnostic: Diagnostic, unsafe_fixes: bool, width: int, palette: Palette = PLAIN) -> str | None:
    fix = diagnostic.fix
    if fix is None or diagnostic.fix_withheld or not fix.title:
        return None
    hint = "" if fix.is_safe or unsafe_fixes else " (unsafe fix: enable with `--unsafe-fixes`)"
    return f"{' ' * width} {palette.paint('= help:', Style.CYAN)} {fix.title}{hint}"


def write_findings(out: TextIO, diagnostics: Sequence[Diagnostic], *, unsafe_fixes: bool,
                   full: bool = False, sources: SourceLookup | None = None, palette: Palette = PLAIN) -> None:
    for diagnostic in diagnostics:
        out.write(format_text_line(diagnostic, unsafe_fixes, palette) + "\n")
        if not full:
            continue
        view = sources(diagnostic.path) if sources is not None else None
        lines = view.lines(diagnostic.cell) if view is not None else []
        snippet = format_snippet(diagnostic, lines, palette)
        # The help line's `=` goes under the gutter's `|`, as wide as the last line number shown.
        gutter_width = len(str(_last_shown_line(diagnostic, len(lines)))) if snippet else 0
        help_line = _help_line(diagnostic, unsafe_fixes, gutter_width, palette)
        for line in snippet:
            out.write(line + "\n")
        if help_line is not None:
            out.write(help_line + "\n")
        out.write("\n")


def write_summary(out: TextIO, report: CheckReport, palette: Palette = PLAIN) -> None:
    summary = summarize(report.diagnostics, report.errors, report.fixed)
    unsafe_fixes = report.unsafe_fixes
    if report.fix_only:
        # As ruff's --fix-only: what was fixed, nothing of what is left.
        if summary.fixed:
            out.write(f"{'Would fix' if report.dry_run else 'Fixed'} {_plural(summary.fixed, 'error')}.\n")
        return
    if summary.findings == 0 and summary.fixed == 0:
        if summary.errors == 0:
            out.write(palette.paint("All checks passed!", Style.BOLD_GREEN) + "\n")
        return
    if summary.fixed and report.dry_run:
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
    if not report.fixing:
        fixable = summary.safe_fixable + (summary.unsafe_fixable if unsafe_fixes else 0)
        hidden = 0 if unsafe_fixes else summary.unsafe_fixable
        if fixable:
            line = f"{palette.paint('[*]', Style.CYAN)} {fixable} fixable with the `--fix` option"
            if hidden:
                line += f" ({hidden} hidden {'fix' if hidden == 1 else 'fixes'} can be enabled with the `--unsafe-fixes` option)"
            out.write(line + ".\n")
        elif hidden:
            out.write(f"No fixes available ({hidden} hidden {'fix' if hidden == 1 else 'fixes'} can be enabled with the `--unsafe-fixes` option).\n")
    elif not unsafe_fixes and summary.unsafe_fixable:
        out.write(
            f"{_plural(summary.unsafe_fixable, 'unsafe fix')} not applied; add `--unsafe-fixes` to apply them.\n"
        )


def write_text(out: TextIO, diagnostics: Sequence[Diagnostic], errors: Sequence[FileError],
               fixed: int, *, unsafe_fixes: bool, fixing: bool, dry_run: bool = False) -> None:
    """The concise text report: errors, one line per finding, the summary."""
    report = CheckReport(diagnostics, errors, fixed, unsafe_fixes=unsafe_fixes, fixing=fixing, dry_run=dry_run)
    write_report(out, report, OutputFormat.CONCISE)


# --- statistics and fixes ----------------------------------------------------------------

@dataclass(frozen=True)
class RuleCount:
    code: str
    slug: str
    count: int
    fixable: int

    def to_json(self) -> dict[str, object]:
        return {"code": self.code, "name": self.slug, "count": self.count, "fixable": self.fixable}


def rule_counts(diagnostics: Sequence[Diagnostic], unsafe_fixes: bool) -> list[RuleCount]:
    """Findings per rule, most frequent first."""
    counts: Counter[tuple[str, str]] = Counter((d.code, d.slug) for d in diagnostics)
    fixable: Counter[str] = Counter(d.code for d in diagnostics if _offers_fix(d, unsafe_fixes))
    rows = [RuleCount(code, slug, count, fixable[code]) for (code, slug), count in counts.items()]
    return sorted(rows, key=lambda row: (-row.count, row.code))


def write_statistics(out: TextIO, diagnostics: Sequence[Diagnostic], unsafe_fixes: bool,
                     palette: Palette = PLAIN) -> None:
    rows = rule_counts(diagnostics, unsafe_fixes)
    width = max((len(str(row.count)) for row in rows), default=1)
    for row in rows:
        marker = palette.paint("[*]", Style.CYAN) if row.fixable else "   "
        out.write(f"{row.count:>{width}}\t{palette.paint(row.code, Style.BOLD_RED)}\t{marker} {row.slug}\n")


def write_statistics_json(out: TextIO, diagnostics: Sequence[Diagnostic], unsafe_fixes: bool) -> None:
    json.dump([row.to_json() for row in rule_counts(diagnostics, unsafe_fixes)], out, indent=2)
    out.write("\n")


def _changed_span(old: str, new: str) -> tuple[int, int, str]:
    """The one replacement (start, end in `old`, content) that turns `old` into `new`."""
    limit = min(len(old), len(new))
    prefix = 0
    while prefix < limit and old[prefix] == new[prefix]:
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and old[len(old) - 1 - suffix] == new[len(new) - 1 - suffix]:
        suffix += 1
    return prefix, len(old) - suffix, new[prefix : len(new) - suffix]


def fix_replacements(text: str, fix: Fix) -> list[tuple[int, int, str]]:
    """A fix as (start, end, content) replacements into `text`, imports it adds included."""
    if fix.required_imports:
        from torchdevlint.fixer import apply_fixes

        try:
            fixed, applied = apply_fixes(text, [fix])
        except Exception:  # noqa: BLE001 - a broken import edit only costs the import in the listing
            applied = []
        if applied:
            return [_changed_span(text, fixed)]
    return [(edit.start, edit.end, edit.content) for edit in fix.edits]


def _apply(text: str, replacements: Sequence[tuple[int, int, str]]) -> str:
    for start, end, content in sorted(replacements, reverse=True):
        text = text[:start] + content + text[end:]
    return text


def _changed_lines(old: str, new: str) -> tuple[list[str], list[str]]:
    old_lines, new_lines = source_lines(old), source_lines(new)
    prefix = 0
    while prefix < min(len(old_lines), len(new_lines)) and old_lines[prefix] == new_lines[prefix]:
        prefix += 1
    suffix = 0
    while (suffix < min(len(old_lines), len(new_lines)) - prefix
           and old_lines[-1 - suffix] == new_lines[-1 - suffix]):
        suffix += 1
    return old_lines[prefix : len(old_lines) - suffix], new_lines[prefix : len(new_lines) - suffix]


# A previewed line longer than this is shown around its change only (minified code, long
# literals): this many characters of context each side, and at most twice the limit in all.
_PREVIEW_LINE_LIMIT = 120
_PREVIEW_CONTEXT = 40


def _clipped_preview(removed: list[str], added: list[str]) -> tuple[list[str], list[str]]:
    """The changed lines as the preview shows them: long ones cut down to where they change."""
    if len(removed) == len(added):
        pairs = [_clip_pair(old, new) for old, new in zip(removed, added, strict=True)]
        return [old for old, _ in pairs], [new for _, new in pairs]
    return [_clip(line, 0, len(line)) for line in removed], [_clip(line, 0, len(line)) for line in added]


def _clip_pair(old: str, new: str) -> tuple[str, str]:
    if max(len(old), len(new)) <= _PREVIEW_LINE_LIMIT:
        return old, new
    prefix = 0
    while prefix < min(len(old), len(new)) and old[prefix] == new[prefix]:
        prefix += 1
    suffix = 0
    while suffix < min(len(old), len(new)) - prefix and old[-1 - suffix] == new[-1 - suffix]:
        suffix += 1
    start = max(0, prefix - _PREVIEW_CONTEXT)
    return _clip(old, start, len(old) - suffix + _PREVIEW_CONTEXT), _clip(new, start, len(new) - suffix + _PREVIEW_CONTEXT)


def _clip(line: str, start: int, end: int) -> str:
    """`line[start:end]`, no longer than twice the limit, with `…` where something was cut."""
    if len(line) <= _PREVIEW_LINE_LIMIT:
        return line
    end = min(len(line), end, start + 2 * _PREVIEW_LINE_LIMIT)
    return ("…" if start > 0 else "") + line[start:end] + ("…" if end < len(line) else "")


def write_fix_preview(out: TextIO, diagnostics: Sequence[Diagnostic], *, unsafe_fixes: bool,
                      sources: SourceLookup, palette: Palette = PLAIN) -> None:
    """What `--fix` (with `--unsafe-fixes` if given) would change, finding by finding."""
    applicable = [d for d in diagnostics if _offers_fix(d, unsafe_fixes)]
    hidden = sum(1 for d in diagnostics if _offers_fix(d, True) and not _offers_fix(d, unsafe_fixes))
    if not applicable:
        out.write("No fixes to apply with `--fix`.\n" if not hidden else "")
    else:
        option = "`--fix --unsafe-fixes`" if unsafe_fixes else "`--fix`"
        out.write(f"{option} would apply {_plural(len(applicable), 'fix')}:\n")
    for diagnostic in applicable:
        fix = diagnostic.fix
        assert fix is not None
        kind = "" if fix.is_safe else " (unsafe)"
        out.write(
            f"  {location(diagnostic.path, diagnostic.cell, diagnostic.start.line, diagnostic.start.column)}: "
            f"{diagnostic.code} {fix.title}{kind}\n"
        )
        view = sources(diagnostic.path)
        if view is None:
            continue
        text = view.text
        removed, added = _clipped_preview(*_changed_lines(text, _apply(text, fix_replacements(text, fix))))
        for line in removed:
            out.write("    " + palette.paint(f"- {line}".rstrip(), Style.RED) + "\n")
        for line in added:
            out.write("    " + palette.paint(f"+ {line}".rstrip(), Style.GREEN) + "\n")
    if hidden:
        out.write(
            f"{_plural(hidden, 'unsafe fix')} not listed; add `--unsafe-fixes` to list and apply "
            f"{'it' if hidden == 1 else 'them'}.\n"
        )


def write_fixed_listing(out: TextIO, fixed_codes: Mapping[str, Sequence[str]], *, dry_run: bool) -> None:
    """After `--fix` (or `--diff`): per file, how many findings of each rule were fixed."""
    total = sum(len(codes) for codes in fixed_codes.values())
    if not total:
        return
    slugs = {rule.code: rule.slug for rule in all_rules()}
    out.write(f"{'Would fix' if dry_run else 'Fixed'} {_plural(total, 'error')}:\n")
    for path, codes in fixed_codes.items():
        if not codes:
            continue
        out.write(f"- {path}:\n")
        for code, count in sorted(Counter(codes).items()):
            out.write(f"    {count} × {code} ({slugs.get(code, '?')})\n")


# --- machine formats -----------------------------------------------------------------------

def write_json(out: TextIO, diagnostics: Sequence[Diagnostic], errors: Sequence[FileError]) -> None:
    items: list[dict[str, object]] = []
    for error in errors:
        items.append(
            {
                "code": None,
                "slug": "file-error",
                "path": error.path,
                "cell": error.cell,
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


def _github_data(value: str) -> str:
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _github_property(value: str) -> str:
    return _github_data(value).replace(":", "%3A").replace(",", "%2C")


def write_github(out: TextIO, diagnostics: Sequence[Diagnostic], errors: Sequence[FileError],
                 sources: SourceLookup | None = None) -> None:
    """GitHub Actions workflow commands: each finding becomes an annotation on the pull request.

    A notebook finding points at the line of the .ipynb file that holds its code, and its
    message names the cell and the line within it.
    """
    for error in errors:
        where = f"file={_github_property(Path(error.path).as_posix())}"
        message = error.message
        if error.cell is not None and error.line is not None:
            line = _document_line(error.path, error.cell, error.line, sources)
            where += f",line={line}" if line is not None else ""
            message = _in_cell(error.cell, error.line, message)
        elif error.line is not None:
            where += f",line={error.line}"
            if error.column is not None:
                where += f",col={error.column}"
        out.write(f"::error {where},title=torchdevlint::{_github_data(message)}\n")
    for d in diagnostics:
        where = f"file={_github_property(Path(d.path).as_posix())}"
        if d.cell is not None:
            start = _document_line(d.path, d.cell, d.start.line, sources)
            end = _document_line(d.path, d.cell, d.end.line, sources)
            if start is not None:
                where += f",line={start},endLine={max(start, end or start)}"
        else:
            where += f",line={d.start.line},col={d.start.column},endLine={d.end.line}"
            if d.end.line == d.start.line:
                where += f",endColumn={d.end.column}"
        message = _in_cell(d.cell, d.start.line, d.message)
        out.write(f"::error {where},title={d.code}::{_github_data(message)}\n")


def _document_line(path: str, cell: int, line: int, sources: SourceLookup | None) -> int | None:
    """The line of the notebook file that holds a cell's line, where the file can be read."""
    view = sources(path) if sources is not None else None
    cell_lines = view.cell(cell) if view is not None else None
    return cell_lines.document_line(line) if cell_lines is not None else None


class _Positions:
    """Offsets into a text -> SARIF regions (1-based lines and columns, in code points)."""

    def __init__(self, text: str) -> None:
        self._lines = LineIndex(text)

    def region(self, start: int, end: int) -> dict[str, int]:
        start_line, start_column = self._lines.location(start)
        end_line, end_column = self._lines.location(end)
        return {"startLine": start_line, "startColumn": start_column + 1, "endLine": end_line,
                "endColumn": end_column + 1}


def _artifact_location(path: str, root: Path) -> dict[str, str]:
    """Relative to %SRCROOT% (the folder the run started in) where possible, as code scanning wants."""
    file = Path(path)
    if file.is_absolute():
        try:
            file = file.relative_to(root)
        except ValueError:
            return {"uri": file.as_uri()}
    # Quoted from the name's bytes, as `as_uri` does: a name that is not UTF-8 (held as
    # surrogates) becomes its percent-escaped bytes, not an encoding error.
    return {"uri": quote(os.fsencode(file.as_posix())), "uriBaseId": "%SRCROOT%"}


def _sarif_rule(rule: type[Rule]) -> dict[str, object]:
    from torchdevlint.ruledocs import doc_sections, rule_page  # the SARIF format alone needs the docs

    what = doc_sections(rule).get("What it does", rule.message)
    return {
        "id": rule.code,
        "name": rule.slug,
        "shortDescription": {"text": rule.message},
        "fullDescription": {"text": " ".join(what.split())},
        "help": {"text": rule.documentation(), "markdown": rule_page(rule)},
        "defaultConfiguration": {"enabled": rule.default_enabled, "level": "error"},
        "properties": {"fixable": rule.is_fixable()},
    }


def _sarif_fix(diagnostic: Diagnostic, text: str, root: Path) -> dict[str, object]:
    assert diagnostic.fix is not None
    positions = _Positions(text)
    replacements = [
        {"deletedRegion": positions.region(start, end), "insertedContent": {"text": content}}
        for start, end, content in fix_replacements(text, diagnostic.fix)
    ]
    return {
        "description": {"text": diagnostic.fix.title},
        "artifactChanges": [{"artifactLocation": _artifact_location(diagnostic.path, root), "replacements": replacements}],
        "properties": {"applicability": diagnostic.fix.applicability.value},
    }


def _sarif_region(diagnostic: Diagnostic, sources: SourceLookup | None) -> dict[str, int]:
    if diagnostic.cell is None:
        return {
            "startLine": diagnostic.start.line,
            "startColumn": diagnostic.start.column,
            "endLine": diagnostic.end.line,
            "endColumn": diagnostic.end.column,
        }
    # A notebook: the lines of the .ipynb file holding the code; columns there are JSON's.
    start = _document_line(diagnostic.path, diagnostic.cell, diagnostic.start.line, sources) or 1
    end = _document_line(diagnostic.path, diagnostic.cell, diagnostic.end.line, sources) or start
    return {"startLine": start, "endLine": max(start, end)}


def _sarif_result(diagnostic: Diagnostic, rule_index: Mapping[str, int], sources: SourceLookup | None,
                  root: Path) -> dict[str, object]:
    result: dict[str, object] = {
        "ruleId": diagnostic.code,
        "level": "error",
        "message": {"text": _in_cell(diagnostic.cell, diagnostic.start.line, diagnostic.message)},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": _artifact_location(diagnostic.path, root),
                    "region": _sarif_region(diagnostic, sources),
                }
            }
        ],
    }
    if diagnostic.cell is not None:
        result["properties"] = {"cell": diagnostic.cell, "cellLine": diagnostic.start.line,
                                "cellColumn": diagnostic.start.column}
    if diagnostic.code in rule_index:
        result["ruleIndex"] = rule_index[diagnostic.code]
    # A notebook's fixes change JSON strings; SARIF replacements would have to spell them.
    if diagnostic.fix is not None and not diagnostic.fix_withheld and diagnostic.cell is None:
        view = sources(diagnostic.path) if sources is not None else None
        if view is not None:
            result["fixes"] = [_sarif_fix(diagnostic, view.text, root)]
    return result


def _sarif_notification(error: FileError, root: Path, sources: SourceLookup | None) -> dict[str, object]:
    location: dict[str, object] = {"artifactLocation": _artifact_location(error.path, root)}
    message = error.message
    if error.cell is not None and error.line is not None:
        line = _document_line(error.path, error.cell, error.line, sources)
        if line is not None:
            location["region"] = {"startLine": line}
        message = _in_cell(error.cell, error.line, message)
    elif error.line is not None:
        region = {"startLine": error.line}
        if error.column is not None:
            region["startColumn"] = error.column
        location["region"] = region
    return {"level": "error", "message": {"text": message}, "locations": [{"physicalLocation": location}]}


def sarif_log(diagnostics: Sequence[Diagnostic], errors: Sequence[FileError],
              sources: SourceLookup | None = None, *, root: Path | None = None) -> dict[str, object]:
    """A SARIF 2.1.0 log: one run, every rule in the driver, fixes as replacements."""
    rules = all_rules()
    rule_index = {rule.code: index for index, rule in enumerate(rules)}
    root = (root or Path.cwd()).resolve()
    run: dict[str, object] = {
        "tool": {
            "driver": {
                "name": "torchdevlint",
                "version": __version__,
                "semanticVersion": __version__,
                "rules": [_sarif_rule(rule) for rule in rules],
            }
        },
        # Our columns count code points, not the UTF-16 units SARIF assumes otherwise.
        "columnKind": "unicodeCodePoints",
        "originalUriBaseIds": {"%SRCROOT%": {"uri": root.as_uri().rstrip("/") + "/"}},
        "invocations": [
            {
                "executionSuccessful": not errors,
                "toolExecutionNotifications": [_sarif_notification(error, root, sources) for error in errors],
            }
        ],
        "results": [_sarif_result(d, rule_index, sources, root) for d in diagnostics],
    }
    return {"$schema": SARIF_SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def write_sarif(out: TextIO, diagnostics: Sequence[Diagnostic], errors: Sequence[FileError],
                sources: SourceLookup | None = None) -> None:
    json.dump(sarif_log(diagnostics, errors, sources), out, indent=2, ensure_ascii=False)
    out.write("\n")


# --- one entry point for the command line --------------------------------------------------

def write_report(out: TextIO, report: CheckReport, output_format: OutputFormat, *,
                 sources: SourceLookup | None = None, statistics: bool = False,
                 show_fixes: bool = False, color: bool = False, summary: bool = True) -> None:
    """Write a run's report; `output_format` must already be resolved (not TEXT).

    `color` styles the text formats only: machine formats are read by programs. `summary`
    False (`--quiet`) leaves out the text formats' closing counts.
    """
    if output_format is OutputFormat.JSON:
        if statistics:
            write_statistics_json(out, report.diagnostics, report.unsafe_fixes)
            # The counts have no place for unreadable files; say so where JSON stays valid.
            for error in report.errors:
                sys.stderr.write(format_error_line(error) + "\n")
        else:
            write_json(out, report.diagnostics, report.errors)
        return
    if output_format is OutputFormat.GITHUB:
        write_github(out, report.diagnostics, report.errors, sources)
        return
    if output_format is OutputFormat.SARIF:
        write_sarif(out, report.diagnostics, report.errors, sources)
        return
    palette = Palette(enabled=color)
    for error in report.errors:
        out.write(format_error_line(error, palette) + "\n")
    if statistics:
        write_statistics(out, report.diagnostics, report.unsafe_fixes, palette)
    else:
        write_findings(out, report.diagnostics, unsafe_fixes=report.unsafe_fixes,
                       full=output_format is OutputFormat.FULL, sources=sources, palette=palette)
    if show_fixes:
        if report.fixing:
            write_fixed_listing(out, report.fixed_codes, dry_run=report.dry_run)
        elif sources is not None:
            write_fix_preview(out, report.diagnostics, unsafe_fixes=report.unsafe_fixes, sources=sources,
                              palette=palette)
    if summary:
        write_summary(out, report, palette)


# --- --output-file -----------------------------------------------------------------------------

def _report_target(path: Path) -> Path:
    # A symbolic link is written through: its target is replaced, the link stays a link.
    target = Path(os.path.realpath(path))
    if target.is_dir():
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    if target.exists() and not target.stat().st_mode & stat.S_IWUSR:
        # Renaming over it would bypass the permission, as write_atomically refuses to.
        raise PermissionError(errno.EACCES, "the file is read-only", str(path))
    return target


def _create_beside(target: Path) -> Path:
    """A new, empty file in `target`'s folder (made, with its parents, as ruff makes it)."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        # Some folder on the way is a file: say that, not "File exists".
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(target.parent)) from None
    temporary = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tdl-tmp")
    # 0o666 less the umask: the permissions an ordinary new file gets.
    os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    return temporary


def check_report_path(path: Path) -> None:
    """Raise OSError now, before a run, where a report could not be written to `path`."""
    os.unlink(_create_beside(_report_target(path)))


def write_report_file(path: Path, text: str) -> None:
    """Replace `path` with `text` (UTF-8) through a temporary file beside it: whoever reads the
    report (a CI step, an editor) never sees half of one, and a failed write keeps the old one."""
    target = _report_target(path)
    temporary = _create_beside(target)
    try:
        if target.exists():
            os.chmod(temporary, stat.S_IMODE(target.stat().st_mode))
        with open(temporary, "wb") as handle:
            handle.write(text.encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


class SourceViews:
    """The text each reported file had when it was linted, for reporters that show it.

    Workers hand back a view with their findings; a result without one (from the cache) is
    read again from disk. None for a file that can no longer be read.
    """

    def __init__(self) -> None:
        self._views: dict[str, ProgramView | None] = {}

    def add(self, path: str, view: ProgramView | None) -> None:
        if view is not None:
            self._views[path] = view

    def __call__(self, path: str) -> ProgramView | None:
        if path not in self._views:
            try:
                self._views[path] = self._read(path)
            except SourceError:
                self._views[path] = None
        return self._views[path]

    @staticmethod
    def _read(path: str) -> ProgramView:
        if not is_notebook(path):
            # A Python file's findings are placed in its text as written: decoding is all it takes.
            return ProgramView(decode_source(read_bytes(Path(path))).text)
        from torchdevlint.programs import read_program  # a notebook's cells are found by reading it

        program = read_program(path)
        return program.view(program.text)
