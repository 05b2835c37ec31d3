"""Lint (and fix) files from disk, one process or several; workers return results, never print."""

from __future__ import annotations

import ast
import functools
import gc
import os
import signal
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from torchdevlint.budget import DEFAULT_FILE_SECONDS, AnalysisTimeout, Deadline
from torchdevlint.cache import FindingsCache, content_digest, settings_digest
from torchdevlint.diagnostics import Diagnostic, FileError, FileResult, is_applicable
from torchdevlint.registry import rules_for_codes
from torchdevlint.sourcefile import (
    RELEVANCE_MARKER,
    NotRewritten,
    SourceError,
    is_notebook,
    read_bytes,
    write_atomically,
)

if TYPE_CHECKING:
    # What linting imports (LibCST, the analysis, the rules) is imported when a file is
    # linted: a run answered from the cache never needs it.
    import libcst as cst

    from torchdevlint.analysis.flow.memory import FlowMemory
    from torchdevlint.engine import ModuleParser, SyntaxCheck
    from torchdevlint.programs import Program
    from torchdevlint.rule import Rule


@dataclass(frozen=True)
class RunSettings:
    """Everything a worker needs; plain data so it crosses process boundaries."""

    rule_codes: tuple[str, ...]
    rule_options: tuple[tuple[str, object], ...] = ()
    fix: bool = False
    unsafe_fixes: bool = False
    diff: bool = False
    # Suppress each finding with a noqa comment on its line instead of reporting it (`--add-noqa`).
    add_noqa: bool = False
    # Folder of the findings cache; None disables it.
    cache_dir: str | None = None
    # Seconds each file may take before it is reported as not analysed.
    file_seconds: float = DEFAULT_FILE_SECONDS
    # Codes whose fixes are neither applied nor offered (`unfixable`, `--unfixable`).
    unfixable: tuple[str, ...] = ()

    def rules(self) -> list[type[Rule]]:
        return rules_for_codes(self.rule_codes)

    @property
    def rewrites(self) -> bool:
        return self.fix or self.diff

    def cache(self) -> FindingsCache | None:
        if self.cache_dir is None:
            return None
        return FindingsCache(Path(self.cache_dir), settings_digest(self.rule_codes, self.rule_options))

    def project_facts(self, path: str) -> str:
        """What the project's other files say about `path`: part of its findings' cache key,
        whatever rules are selected. Rules marked `reads_the_project` ask for those facts
        themselves, and the flow model that most rules query reads them too (another file's
        Module classes, its helpers that move what they are handed or save checkpoints, a
        default device set elsewhere)."""
        from torchdevlint.project_scan import project_facts

        cache = self.cache()
        return project_facts(path, None if cache is None else cache.project_store)


def _syntax_error(path: str, source: str, error: cst.ParserSyntaxError) -> FileError:
    """Python's own compiler names the problem and its place better than LibCST's parser."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
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
    """Lint one file, fixing it in place if asked. Every failure becomes a FileError, never a raise."""
    try:
        data = read_bytes(Path(path))
    except SourceError as error:
        result = FileResult(path)
        result.errors.append(FileError(path, str(error)))
        return result
    return process_bytes(path, data, settings, in_place=True)


def process_bytes(path: str, data: bytes, settings: RunSettings, *, in_place: bool) -> FileResult:
    """Lint the contents of file `path` (read from it, or from standard input). With fixes
    asked for, `in_place` writes them to the file; otherwise the fixed bytes become the
    result's `output` (the input's own bytes when nothing changed)."""
    return _process(path, data, settings, in_place=in_place, parse=None)[0]


def process_buffer(path: str, data: bytes, settings: RunSettings, parse: ModuleParser | None = None,
                   flow_memory: FlowMemory | None = None, syntax_check: SyntaxCheck | None = None
                   ) -> tuple[FileResult, Program | None]:
    """`process_bytes` for an editor's buffer of file `path`, never written: also the program
    it read (None where it read none), whose findings' fixes a caller may apply one by one.
    `parse`, `flow_memory` and `syntax_check` are what the editor keeps of the buffer between
    versions."""
    return _process(path, data, settings, in_place=False, parse=parse, flow_memory=flow_memory,
                    syntax_check=syntax_check)


def _answered_without_linting(path: str, data: bytes, settings: RunSettings, project_facts: Callable[[], str], *,
                              in_place: bool) -> FileResult | None:
    """The result of a file that needs no linting (it never mentions torch, or the findings
    cache holds its findings), or None. Imports nothing of the linter."""
    # A notebook is read even so: that it is one is checked.
    if not mentions_torch_bytes(data) and not is_notebook(path):
        result = FileResult(path)
        if (settings.fix or settings.add_noqa) and not in_place:
            result.output = data
        return result
    cache = settings.cache() if in_place and not settings.add_noqa else None
    if cache is None:
        return None
    cached = cache.load(content_digest(data, path, project_facts()), path)
    # With --fix, a cached result is good enough when nothing in it would be applied.
    if cached is None or (
        settings.rewrites and any(is_applicable(d.fix, settings.unsafe_fixes) and d.code not in settings.unfixable
                                  for d in cached)
    ):
        return None
    return FileResult(path, diagnostics=_without_unfixable(cached, settings.unfixable))


def _process(path: str, data: bytes, settings: RunSettings, *, in_place: bool,
             parse: ModuleParser | None, flow_memory: FlowMemory | None = None,
             syntax_check: SyntaxCheck | None = None) -> tuple[FileResult, Program | None]:
    # Asked once per file: the cache key of what was looked up is the key of what is stored.
    project_facts = functools.cache(lambda: settings.project_facts(path))
    answered = _answered_without_linting(path, data, settings, project_facts, in_place=in_place)
    if answered is not None:
        return answered, None
    result = FileResult(path)
    deadline = Deadline(settings.file_seconds)
    cache = settings.cache() if in_place and not settings.add_noqa else None
    import libcst as cst

    from torchdevlint.engine import InvalidSource
    from torchdevlint.programs import FixNotWritable, load_program

    try:
        program = load_program(path, data, parse or cst.parse_module, flow_memory, syntax_check)
    except SourceError as error:
        result.errors.append(FileError(path, str(error)))
        return result, None
    rules = settings.rules()
    options = dict(settings.rule_options)
    result.notices.extend(program.notices)
    result.warnings.extend(program.malformed_noqa_warnings())
    if result.notices or result.warnings:
        cache = None  # a cached result would come back without them
    try:
        if settings.add_noqa:
            _add_noqa(program, path, data, rules, options, deadline, result, in_place=in_place)
        elif settings.rewrites:
            outcome = program.fix(rules, options, unsafe=settings.unsafe_fixes, deadline=deadline,
                                  unfixable=frozenset(settings.unfixable))
            result.diagnostics = outcome.remaining
            result.fixed_count = outcome.fixed_count
            result.fixed_codes = outcome.fixed_codes
            new_data = program.encode(outcome.text) if outcome.changed(program.text) else data
            if outcome.remaining:
                result.view = program.view(outcome.text)
            if settings.diff:
                result.diff = program.diff(outcome.text) if new_data != data else None
            elif not in_place:
                result.output = new_data
            elif new_data != data:
                try:
                    write_atomically(Path(path), new_data, replacing=data)
                except (OSError, NotRewritten) as error:
                    # Nothing was fixed: the findings are the file's as it is.
                    reason = str(error) if isinstance(error, NotRewritten) else f"cannot write: {error.strerror or error}"
                    result.errors.append(program.error(f"not fixed: {reason}", None, None))
                    result.fixed_count, result.fixed_codes = 0, []
                    result.diagnostics = program.lint(rules, options, deadline=deadline)
                    result.view = program.view(program.text) if result.diagnostics else None
                    cache = None
            if cache is not None and not settings.diff and not program.errors and not any(
                d.fix_withheld for d in outcome.remaining
            ):
                cache.store(content_digest(new_data, path, project_facts()), outcome.remaining)
        else:
            result.diagnostics = program.lint(rules, options, deadline=deadline)
            if result.diagnostics:
                result.view = program.view(program.text)
            if cache is not None and not program.errors:
                cache.store(content_digest(data, path, project_facts()), result.diagnostics)
    except InvalidSource as error:
        result.errors.append(program.error(error.message, error.line, error.column))
    except AnalysisTimeout as error:
        result.errors.append(program.error(str(error), None, None))
    except cst.ParserSyntaxError as error:
        # LibCST rejected what Python accepted: rare, but never a traceback.
        found = _syntax_error(path, program.text, error)
        result.errors.append(program.error(found.message, found.line, found.column))
    except FixNotWritable as error:
        result.errors.append(program.error(f"fixes not written: {error}", None, None))
    except RecursionError:
        result.errors.append(program.error("too deeply nested to analyse", None, None))
    except OSError as error:
        result.errors.append(program.error(f"cannot write: {error.strerror or error}", None, None))
    except Exception as error:  # noqa: BLE001 - a linter bug must not hide the other files' results
        result.errors.append(program.error(
            f"internal error ({type(error).__name__}: {error}); please report it", None, None))
    result.errors[:0] = program.errors
    # Cached as found; reported without the fixes the settings turn off.
    result.diagnostics = _without_unfixable(result.diagnostics, settings.unfixable)
    return result, program


def _without_unfixable(diagnostics: list[Diagnostic], unfixable: tuple[str, ...]) -> list[Diagnostic]:
    if not unfixable:
        return diagnostics
    return [replace(d, fix=None) if d.fix is not None and d.code in unfixable else d
            for d in diagnostics]


def _add_noqa(program: Program, path: str, data: bytes, rules: list[type[Rule]], options: dict[str, object],
              deadline: Deadline, result: FileResult, *, in_place: bool) -> None:
    """Suppress each finding with a `# noqa` on its line, as `--add-noqa` asks."""
    outcome = program.with_noqa(rules, options, deadline=deadline)
    result.errors.extend(outcome.refused)
    new_data = program.encode(outcome.text) if outcome.text != program.text else data
    if not in_place:
        result.output = new_data
        result.noqa_added = outcome.added
        return
    if new_data == data:
        return
    try:
        write_atomically(Path(path), new_data, replacing=data)
    except (OSError, NotRewritten) as error:
        reason = str(error) if isinstance(error, NotRewritten) else f"cannot write: {error.strerror or error}"
        result.errors.append(program.error(f"no `# noqa` added: {reason}", None, None))
        return
    result.noqa_added = outcome.added


def mentions_torch_bytes(data: bytes) -> bool:
    """Files that never mention torch cannot hold a finding: not decoded, hashed or parsed.

    Checked on the raw bytes; an exotic encoding (UTF-16) would hide the word, so bytes that
    are not ASCII-compatible are always read in full.
    """
    return RELEVANCE_MARKER.encode() in data or data[:2] in (b"\xff\xfe", b"\xfe\xff")


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return max(1, os.cpu_count() or 1)


# Worker processes per core, at most: linting is CPU-bound, and each worker holds a parse.
_WORKERS_PER_CORE = 2


def worker_count(jobs: int, files: int) -> int:
    """The processes a run starts for `--jobs jobs`: never more than files, nor than twice the cores."""
    return max(1, min(jobs, files, _WORKERS_PER_CORE * default_jobs()))


def _start_worker(parent: int) -> None:
    # The parent decides what an interrupt means; a worker finishes the file it is on, and
    # every write is atomic, so each file ends up untouched or completely fixed.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with(parent)
    collect_garbage_rarely()


_PR_SET_PDEATHSIG = 1


def _die_with(parent: int) -> None:
    """A worker whose run was killed (`kill -9`, a closed terminal) must not live on, orphaned:
    on Linux the kernel ends it with its parent. Elsewhere the pool's own checks end it."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request was made
        os._exit(1)


# Allocations between two young-generation passes of the garbage collector (CPython: 700).
_COLLECTOR_THRESHOLDS = (100_000, 50, 100)


def collect_garbage_rarely() -> None:
    """Parsing allocates millions of objects, and each pass of the cyclic garbage collector
    walks the tree being built: by default they cost a seventh of a run. Everything a file's
    analysis builds is freed by reference counting (`FileContext.release` breaks its cycles),
    so fewer passes cost no memory. What the imports built is set aside for good."""
    gc.freeze()
    gc.set_threshold(*_COLLECTOR_THRESHOLDS)


def run(files: Iterable[tuple[str, RunSettings]], jobs: int) -> Iterator[FileResult]:
    """Each file linted with its own settings; results in the order given, streamed as they
    complete in order.

    On KeyboardInterrupt (the CLI turns SIGTERM into one too) no new file is started, the
    files being processed are finished, and the interrupt propagates.
    """
    files = list(files)
    if worker_count(jobs, len(files)) <= 1:
        collect_garbage_rarely()
        for path, settings in files:
            yield process_file(path, settings)
        return
    # Files the cache answers (or that never mention torch) are answered here: a re-run over
    # unchanged files starts no worker, and the workers get only what must be linted.
    answered = [_answered_here(path, settings) for path, settings in files]
    to_lint = [(index, path, settings) for index, ((path, settings), done) in enumerate(zip(files, answered, strict=True))
               if done is None]
    jobs = worker_count(jobs, len(to_lint))
    if jobs <= 1:
        collect_garbage_rarely()
        for (path, settings), done in zip(files, answered, strict=True):
            yield done if done is not None else process_file(path, settings)
        return
    from concurrent.futures import (
        ProcessPoolExecutor,  # only parallel runs pay for the import
    )

    pool = ProcessPoolExecutor(max_workers=jobs, initializer=_start_worker, initargs=(os.getpid(),))
    try:
        futures = {index: pool.submit(process_file, path, settings) for index, path, settings in to_lint}
        for index, done in enumerate(answered):
            yield done if done is not None else futures[index].result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _answered_here(path: str, settings: RunSettings) -> FileResult | None:
    try:
        data = read_bytes(Path(path))
    except SourceError:
        return None  # the worker says so, as for any file it reads
    return _answered_without_linting(path, data, settings, lambda: settings.project_facts(path), in_place=True)
