"""Lint (and fix) files from disk, one process or several; workers return results, never print."""

from __future__ import annotations

import ast
import difflib
import os
import sys
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import libcst as cst

from torchdevlint.diagnostics import FileError, FileResult
from torchdevlint.engine import lint_source
from torchdevlint.fixer import fix_source
from torchdevlint.registry import rule_by_code
from torchdevlint.rule import Rule
from torchdevlint.sourcefile import SourceError, read_source, write_atomically


@dataclass(frozen=True)
class RunSettings:
    """Everything a worker needs; plain data so it crosses process boundaries."""

    rule_codes: tuple[str, ...]
    rule_options: tuple[tuple[str, object], ...] = ()
    fix: bool = False
    unsafe_fixes: bool = False
    diff: bool = False

    def rules(self) -> list[type[Rule]]:
        found = [rule_by_code(code) for code in self.rule_codes]
        return [rule for rule in found if rule is not None]

    @property
    def rewrites(self) -> bool:
        return self.fix or self.diff


def _syntax_error(path: str, source: str, error: cst.ParserSyntaxError) -> FileError:
    """Python's own compiler names the problem and its place better than LibCST's parser."""
    try:
        compile(source, path, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as python_error:
        column = (python_error.offset or 1)
        return FileError(path, f"syntax error: {python_error.msg}", python_error.lineno, column)
    except (ValueError, RecursionError, MemoryError):
        pass
    else:
        return FileError(
            path,
            f"LibCST cannot parse this file although Python {sys.version_info[0]}.{sys.version_info[1]} can "
            f"(newer syntax?): {str(error.message).strip().splitlines()[0] if str(error.message).strip() else 'parse error'}",
            error.raw_line,
            error.raw_column + 1,
        )
    first_line = str(error.message).strip().splitlines()[0] if str(error.message).strip() else "invalid syntax"
    return FileError(path, f"syntax error: {first_line}", error.raw_line, error.raw_column + 1)


def process_file(path: str, settings: RunSettings) -> FileResult:
    """Lint one file, fixing it if asked. Every failure becomes a FileError, never a raise."""
    result = FileResult(path)
    try:
        source = read_source(Path(path))
    except SourceError as error:
        result.error = FileError(path, str(error))
        return result
    rules = settings.rules()
    options = dict(settings.rule_options)
    try:
        if settings.rewrites:
            outcome = fix_source(source.text, path, rules, options, unsafe=settings.unsafe_fixes)
            result.diagnostics = outcome.remaining
            result.fixed_count = outcome.fixed_count
            if outcome.changed(source.text):
                if settings.diff:
                    result.diff = "".join(
                        difflib.unified_diff(
                            source.text.splitlines(keepends=True),
                            outcome.text.splitlines(keepends=True),
                            fromfile=f"a/{path}",
                            tofile=f"b/{path}",
                        )
                    )
                else:
                    write_atomically(Path(path), source.encode(outcome.text))
        else:
            result.diagnostics = lint_source(source.text, path, rules, options)
    except cst.ParserSyntaxError as error:
        result.error = _syntax_error(path, source.text, error)
    except RecursionError:
        result.error = FileError(path, "too deeply nested to analyse")
    except OSError as error:
        result.error = FileError(path, f"cannot write: {error.strerror or error}")
    except Exception as error:  # noqa: BLE001 - a linter bug must not hide the other files' results
        result.error = FileError(path, f"internal error ({type(error).__name__}: {error}); please report it")
    return result


def _process_star(args: tuple[str, RunSettings]) -> FileResult:
    return process_file(*args)


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return max(1, os.cpu_count() or 1)


def run(paths: Iterable[str], settings: RunSettings, jobs: int) -> Iterator[FileResult]:
    """Results in the order of `paths`, streamed as they complete in order."""
    paths = list(paths)
    if jobs <= 1 or len(paths) < 2:
        for path in paths:
            yield process_file(path, settings)
        return
    with ProcessPoolExecutor(max_workers=min(jobs, len(paths))) as pool:
        chunk = max(1, min(32, len(paths) // (jobs * 4) or 1))
        yield from pool.map(_process_star, ((path, settings) for path in paths), chunksize=chunk)
