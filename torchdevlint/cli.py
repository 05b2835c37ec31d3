"""Command line: `torchdevlint check PATH...`, `torchdevlint rule CODE` (and `torchdevlint
verify PATH...`, in torchdevlint.verify.command, with its own exit codes).

Exit codes: 0 nothing found, 1 findings remain, 2 a file could not be read or parsed, or
the command line or configuration is wrong.
"""

from __future__ import annotations

import argparse
import io
import os
import signal
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn, TextIO

from torchdevlint import __version__, project_scan
from torchdevlint.budget import DEFAULT_FILE_SECONDS
from torchdevlint.cache import CACHE_DIR_NAME
from torchdevlint.config import ConfigError
from torchdevlint.diagnostics import Diagnostic, FileError, FileResult
from torchdevlint.files import iter_python_files
from torchdevlint.progress import Progress
from torchdevlint.registry import UnknownSelector, all_rules, rule_by_code, validate_selector
from torchdevlint.reporting import (
    CheckReport,
    OutputFormat,
    SourceViews,
    check_report_path,
    format_error_line,
    write_report,
    write_report_file,
)
from torchdevlint.runner import RunSettings, default_jobs, process_bytes, run
from torchdevlint.settings import (
    CommandLineSelection,
    Settings,
    SettingsFinder,
    command_line_patterns,
    describe_settings,
    file_rule_codes,
    unfixable_codes,
)
from torchdevlint.sourcefile import SourceError, is_notebook
from torchdevlint.terminal import ColorChoice, wants_color
from torchdevlint.verify.command import add_verify_parser, run_verify, split_program_args

EXIT_CLEAN = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2

SUBCOMMANDS = ("check", "rule", "verify", "debug", "server")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        sys.stderr.write(f"torchdevlint: error: {message}\n")
        raise SystemExit(EXIT_ERROR)


def _csv(value: str) -> list[str]:
    return [part for part in (p.strip() for p in value.split(",")) if part]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="torchdevlint", description="Find, fix and prove PyTorch device bugs.")
    parser.add_argument("--version", action="version", version=f"torchdevlint {__version__}")
    commands = parser.add_subparsers(dest="command", parser_class=_Parser)

    check = commands.add_parser(
        "check", help="lint files and folders (the default command)",
        description="Lint files and folders. Reading only: the code is parsed, never imported or run.",
    )
    check.add_argument("paths", nargs="*", default=[], help="files or folders (default: .); - reads standard input")
    check.add_argument("--fix", action="store_true", help="apply safe fixes in place")
    check.add_argument("--fix-only", action="store_true",
                       help="apply fixes, and report nor fail on the findings left (implies --fix)")
    check.add_argument("--unsafe-fixes", action="store_true", help="also apply (or offer) unsafe fixes")
    check.add_argument("--diff", action="store_true",
                       help="print the diff of the fixes instead of writing (to standard output, "
                            "also with --output-file)")
    check.add_argument("--select", type=_csv, action="extend", default=None, help="codes or prefixes to run")
    check.add_argument("--extend-select", type=_csv, action="extend", default=[], help="add codes or prefixes")
    check.add_argument("--ignore", type=_csv, action="extend", default=[], help="codes or prefixes to skip")
    check.add_argument("--unfixable", type=_csv, action="extend", default=None,
                       help="codes or prefixes whose fixes are neither applied nor offered "
                            "(replaces the configured `unfixable`)")
    check.add_argument("--exclude", type=_csv, action="extend", default=None, metavar="PATTERNS",
                       help="glob patterns of files and folders a walk skips (replaces `exclude`, "
                            "the defaults included)")
    check.add_argument("--extend-exclude", type=_csv, action="extend", default=[], metavar="PATTERNS",
                       help="glob patterns a walk skips besides `exclude`")
    check.add_argument(
        "--format", "--output-format", dest="format", choices=[f.value for f in OutputFormat],
        default=OutputFormat.TEXT.value,
        help="text (default: full on a terminal, concise when piped), full, concise, json, "
             "github (workflow annotations) or sarif (code scanning)",
    )
    check.add_argument(
        "--color", choices=[choice.value for choice in ColorChoice], default=ColorChoice.AUTO.value,
        help="colour the text formats: auto (the default) on a terminal unless NO_COLOR is set, "
             "or where FORCE_COLOR is; always; never",
    )
    check.add_argument(
        "--output-file", "-o", type=Path, default=None, metavar="PATH",
        help="write the report to PATH (created or replaced whole) instead of standard output; "
             "the diff of --diff and the fixed code of `--fix -` still go to standard output",
    )
    check.add_argument("--statistics", action="store_true", help="print the number of findings per rule")
    check.add_argument("--show-fixes", action="store_true",
                       help="list what --fix would change (with --fix: what it changed)")
    check.add_argument("--force-exclude", action="store_true",
                       help="apply `exclude` to files named on the command line too (for pre-commit)")
    check.add_argument("-q", "--quiet", action="store_true",
                       help="print the findings only, without the summary (as ruff's --quiet)")
    check.add_argument("--silent", action="store_true",
                       help="print nothing; the exit code says whether findings remain")
    check.add_argument("--exit-zero", "-e", action="store_true",
                       help="exit 0 even when findings remain or a file could not be analysed")
    check.add_argument("--file-timeout", type=float, default=None, metavar="SECONDS",
                       help=f"report a file as not analysed after this long (default: {DEFAULT_FILE_SECONDS:g})")
    check.add_argument("--jobs", "-j", type=int, default=None, help="worker processes (default: all cores)")
    check.add_argument("--config", type=Path, default=None,
                       help="configuration file for every path (pyproject.toml, torchdevlint.toml; "
                            "default: the closest one above each file)")
    check.add_argument("--isolated", action="store_true",
                       help="read no configuration file: the defaults and the command line decide")
    check.add_argument("--stdin-filename", default=None, metavar="PATH",
                       help="the name of the file standard input holds (`-`): its configuration and excludes "
                            "apply, and a name ending in .ipynb means a notebook; with --fix the fixed code "
                            "goes to standard output and the findings to standard error")
    check.add_argument("--add-noqa", action="store_true",
                       help="suppress every finding with a `# noqa: CODE` on its line (merged into an "
                            "existing one), instead of reporting it")
    check.add_argument("--no-respect-gitignore", action="store_true",
                       help="walk into what .gitignore, .ignore and .git/info/exclude ignore too")
    check.add_argument("--exit-non-zero-on-fix", action="store_true",
                       help="exit 1 when --fix fixed something, even if no finding remains")
    check.add_argument("--show-files", action="store_true", help="list the files a run would lint, and stop")
    check.add_argument("--show-settings", action="store_true",
                       help="print the settings the first file would be linted with, and stop")
    check.add_argument("--no-cache", action="store_true", help="neither read nor write the findings cache")
    check.add_argument("--cache-dir", type=Path, default=None,
                       help=f"findings cache folder (default: {CACHE_DIR_NAME} beside pyproject.toml)")

    rule = commands.add_parser("rule", help="print a rule's documentation")
    rule.add_argument("code", nargs="?", help="rule code or slug, e.g. TDL001")
    rule.add_argument("--all", action="store_true", help="list every rule")

    add_verify_parser(commands)

    debug = commands.add_parser("debug", help="show what the analysis concluded about a file")
    views = debug.add_subparsers(dest="view", parser_class=_Parser, required=True)
    flow = views.add_parser(
        "flow", help="each binding's kind and placement, line by line",
        description="Print, per line, each name bound there with its kind and where it lives "
                    "(host, a device, the module's device), and where host data meets accelerator data.",
    )
    flow.add_argument("target", metavar="FILE[:LINE]",
                      help="a Python file, optionally one line of it (NOTEBOOK[:CELL:LINE] for a notebook)")

    commands.add_parser(
        "server", help="run the language server (LSP) over standard input and output, for editors",
        description="Run a Language Server Protocol server on standard input and output: findings as "
                    "diagnostics while you type, quick fixes and `# noqa` as code actions. "
                    "Needs the `server` extra: pip install 'torchdevlint[server]'.",
    )
    return parser


def _normalize_argv(argv: Sequence[str]) -> list[str]:
    """`torchdevlint PATH...` and `torchdevlint --fix PATH` mean `torchdevlint check …`."""
    argv = list(argv)
    if not argv or argv[0] in ("-h", "--help", "--version"):
        return argv if argv else ["check"]
    if argv[0] not in SUBCOMMANDS:
        return ["check", *argv]
    return argv


class _UsageError(Exception):
    """A command line or configuration `check` cannot run with; the message says why (exit 2)."""


@dataclass
class _CheckPlan:
    """What `check` will do, decided from the command line and configuration before any file is read."""

    files: list[tuple[str, Settings]]
    # Standard input's name (`-`, or --stdin-filename) when it is what is linted, else None.
    stdin_name: str | None
    # The settings of standard input, or the fallback of the current folder.
    settings: Settings
    run_settings_of: _RunSettingsOf
    output_format: OutputFormat
    # The fixed code (or the diff) of standard input owns standard output; the report then goes to standard error.
    report_stream: TextIO
    # Paths that could not be walked, reported with the rest.
    errors: list[FileError]


@dataclass
class _CheckOutcome:
    """What the files' results add up to."""

    diagnostics: list[Diagnostic] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)
    fixed: int = 0
    fixed_codes: dict[str, list[str]] = field(default_factory=dict)
    sources: SourceViews = field(default_factory=SourceViews)
    diffs: int = 0


def _run_check(args: argparse.Namespace) -> int:
    """`check`: plan the run from the command line, lint the files, report, choose the exit code."""
    # A run reads the projects' files as they are now, not as an earlier run in this process saw them.
    project_scan.forget()
    try:
        plan = _plan_check(args)
    except _UsageError as error:
        sys.stderr.write(f"torchdevlint: error: {error}\n")
        return EXIT_ERROR
    if args.show_files or args.show_settings:
        first = plan.settings if plan.stdin_name is not None or not plan.files else plan.files[0][1]
        return _show(args, plan.files, first, plan.stdin_name, plan.errors)
    if plan.stdin_name is not None:
        results: Iterable[FileResult] = [_check_stdin(
            plan.stdin_name, plan.settings, plan.run_settings_of(Path(plan.stdin_name), plan.settings))]
    else:
        results = run([(path, plan.run_settings_of(path, settings)) for path, settings in plan.files],
                      args.jobs or default_jobs())
    if args.add_noqa:
        return _report_added_noqa(results)
    outcome = _collect(args, plan, results)
    report = CheckReport([] if args.fix_only else outcome.diagnostics, outcome.errors, outcome.fixed,
                         outcome.fixed_codes, unsafe_fixes=args.unsafe_fixes, fixing=args.fix or args.diff,
                         dry_run=args.diff, fix_only=args.fix_only)
    if not _deliver_report(args, report, plan.output_format, outcome.sources, plan.report_stream):
        return EXIT_ERROR
    return _check_exit_code(args, outcome)


def _plan_check(args: argparse.Namespace) -> _CheckPlan:
    """The files and settings of a run; raises _UsageError for what cannot run."""
    if args.fix_only:
        args.fix = True
    stdin_name = _stdin_name(args)
    try:
        finder = SettingsFinder(Path.cwd(), args.config, _command_line_settings(args))
        # Standard input is configured as the file it stands for would be.
        settings = finder.for_file(Path(args.stdin_filename)) if args.stdin_filename else finder.fallback
    except ConfigError as error:
        raise _UsageError(str(error)) from None
    report_stream = sys.stderr if stdin_name is not None and (args.fix or args.diff) else sys.stdout
    output_format = OutputFormat(args.format).resolve(args.output_file is None and report_stream.isatty())
    problem = _flag_problem(args, output_format)
    if problem is not None:
        raise _UsageError(problem)
    if args.output_file is not None:
        # Said before the run, not after all of it.
        try:
            check_report_path(args.output_file)
        except OSError as error:
            raise _UsageError(f"cannot write the report to {args.output_file}: {error.strerror or error}") from None
    errors: list[FileError] = []
    run_settings_of = _RunSettingsOf(args)
    try:
        files = [] if stdin_name is not None else list(iter_python_files(
            args.paths or ["."], finder, errors, force_exclude=args.force_exclude,
            respect_gitignore=False if args.no_respect_gitignore else None))
        if not (args.show_files or args.show_settings):
            for path, file_settings in files:
                run_settings_of(path, file_settings)  # a per-file configuration error is said now
    except ConfigError as error:
        raise _UsageError(str(error)) from None
    return _CheckPlan(files, stdin_name, settings, run_settings_of, output_format, report_stream, errors)


def _command_line_settings(args: argparse.Namespace) -> CommandLineSelection:
    if args.isolated and args.config is not None:
        raise _UsageError("--config cannot be combined with --isolated")
    try:
        return CommandLineSelection(
            select=tuple(args.select) if args.select is not None else None,
            extend_select=tuple(args.extend_select),
            ignore=tuple(args.ignore),
            unfixable=(tuple(validate_selector(code) for code in args.unfixable)
                       if args.unfixable is not None else None),
            exclude=command_line_patterns(args.exclude, Path.cwd()) if args.exclude is not None else None,
            extend_exclude=command_line_patterns(args.extend_exclude, Path.cwd()),
            isolated=args.isolated,
        )
    except (ConfigError, UnknownSelector) as error:
        raise _UsageError(str(error)) from None


def _stdin_name(args: argparse.Namespace) -> str | None:
    """The name standard input is linted under, or None when the paths are linted."""
    reads_stdin = "-" in args.paths
    if reads_stdin and len(args.paths) > 1:
        raise _UsageError("`-` (standard input) cannot be combined with other paths")
    if args.stdin_filename is not None and not reads_stdin:
        if args.paths:
            raise _UsageError("--stdin-filename names what `-` reads; paths were given")
        reads_stdin = True
    return (args.stdin_filename or "-") if reads_stdin else None


def _flag_problem(args: argparse.Namespace, output_format: OutputFormat) -> str | None:
    """Why these flags cannot go together, or None."""
    if args.jobs is not None and args.jobs < 1:
        return "--jobs must be at least 1"
    if args.statistics and not (output_format.is_text or output_format is OutputFormat.JSON):
        return "--statistics works with the text and json formats"
    if args.diff and not output_format.is_text:
        return "--diff prints a unified diff; it works with the text formats"
    if args.add_noqa and (args.fix or args.diff):
        return "--add-noqa cannot be combined with --fix or --diff"
    if args.show_fixes and not output_format.is_text:
        return "--show-fixes works with the text formats"
    if args.file_timeout is not None and not args.file_timeout > 0:
        return "--file-timeout must be a positive number of seconds"
    return None


def _collect(args: argparse.Namespace, plan: _CheckPlan, results: Iterable[FileResult]) -> _CheckOutcome:
    """Add the files' results up as they come, printing what cannot wait: diffs, notes, warnings."""
    outcome = _CheckOutcome(errors=plan.errors)
    progress = Progress(len(plan.files), sys.stderr, enabled=plan.stdin_name is None and plan.output_format.is_text
                        and not (args.quiet or args.silent) and sys.stderr.isatty())
    for result in results:
        progress.advance(_shown_path(result.path))
        if result.diff or (not args.silent and (result.notices or result.warnings)):
            progress.clear()
        outcome.diagnostics.extend(result.diagnostics)
        outcome.fixed += result.fixed_count
        outcome.fixed_codes[result.path] = result.fixed_codes
        outcome.sources.add(result.path, result.view)
        outcome.errors.extend(result.errors)
        if not args.silent:
            for notice in result.notices:
                sys.stderr.write(f"torchdevlint: note: {notice}\n")
            for warning in result.warnings:
                sys.stderr.write(f"torchdevlint: warning: {warning}\n")
        if result.diff:
            outcome.diffs += 1
            sys.stdout.write(result.diff)
    progress.clear()
    return outcome


def _check_exit_code(args: argparse.Namespace, outcome: _CheckOutcome) -> int:
    if args.exit_zero:
        return EXIT_CLEAN
    if outcome.errors:
        return EXIT_ERROR
    if args.exit_non_zero_on_fix and any(outcome.fixed_codes.values()) and not args.diff:
        return EXIT_FINDINGS
    if args.diff:
        # As ruff's --diff (with --fix or not, nothing is written): 1 when a diff was printed, else 0.
        return EXIT_FINDINGS if outcome.diffs else EXIT_CLEAN
    if outcome.diagnostics and not args.fix_only:
        return EXIT_FINDINGS
    return EXIT_CLEAN


def _report_added_noqa(results: Iterable[FileResult]) -> int:
    """`--add-noqa`: the files are rewritten; what was added, and where it could not be, is said."""
    added = 0
    failed = False
    for result in results:
        added += result.noqa_added
        for error in result.errors:
            failed = True
            sys.stderr.write(f"torchdevlint: {format_error_line(error)}\n")
    sys.stderr.write(f"Added {added} `# noqa` directive{'' if added == 1 else 's'}.\n")
    return EXIT_ERROR if failed else EXIT_CLEAN


class _RunSettingsOf:
    """What a worker needs for each file: its settings' rules less those `per-file-ignores`
    turns off there, and the command line's choices (one value per combination, reused)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._args = args
        self._made: dict[tuple[int, tuple[str, ...]], RunSettings] = {}

    def __call__(self, path: Path | str, settings: Settings) -> RunSettings:
        codes = file_rule_codes(settings, Path(path))
        key = (id(settings), codes)
        made = self._made.get(key)
        if made is None:
            args = self._args
            made = self._made[key] = RunSettings(
                rule_codes=codes,
                rule_options=tuple(sorted(settings.rule_options.items(), key=lambda item: item[0])),
                fix=args.fix,
                unsafe_fixes=args.unsafe_fixes,
                diff=args.diff,
                add_noqa=args.add_noqa,
                cache_dir=None if args.no_cache else str(args.cache_dir or settings.root / CACHE_DIR_NAME),
                file_seconds=args.file_timeout or DEFAULT_FILE_SECONDS,
                unfixable=unfixable_codes(settings, codes),
            )
        return made


def _shown_path(path: str) -> str:
    """A path one per line: quoted, with escapes, where it holds a line break, another control
    character, or bytes that are not UTF-8, so each name stays one line a script can split."""
    if path.isprintable():
        return path
    return repr(path) if not any("\udc80" <= char <= "\udcff" for char in path) else repr(os.fsencode(path))[1:]


def _show(args: argparse.Namespace, files: list[tuple[str, Settings]], first: Settings,
          stdin_name: str | None, errors: list[FileError]) -> int:
    """--show-files: the files a run would lint; --show-settings: how the first is configured."""
    if args.show_files:
        sys.stdout.write("".join(f"{_shown_path(path)}\n" for path, _ in files))
    if args.show_settings:
        named = stdin_name if stdin_name is not None else (files[0][0] if files else None)
        sys.stdout.write(describe_settings(first, Path(named) if named is not None else None))
    for error in errors:
        sys.stderr.write(f"torchdevlint: {format_error_line(error)}\n")
    return EXIT_ERROR if errors else EXIT_CLEAN


def _deliver_report(args: argparse.Namespace, report: CheckReport, output_format: OutputFormat,
                    sources: SourceViews, stream: TextIO) -> bool:
    """Write the report to --output-file, else to `stream`; False, said why, where the file fails."""
    choice = ColorChoice(args.color)
    to_terminal = args.output_file is None and stream.isatty()
    # A report file is coloured only on request: FORCE_COLOR speaks for terminals, not files.
    color = wants_color(choice, to_terminal, os.environ) and (args.output_file is None or choice is ColorChoice.ALWAYS)
    if args.silent:
        return True
    out = stream if args.output_file is None else io.StringIO()
    write_report(out, report, output_format, sources=sources, statistics=args.statistics,
                 show_fixes=args.show_fixes, color=color, summary=not args.quiet)
    # Decided by the flag, not the stream's type: standard output may be a StringIO itself.
    if args.output_file is not None and isinstance(out, io.StringIO):
        try:
            write_report_file(args.output_file, out.getvalue())
        except OSError as error:
            _cannot_write_report(args.output_file, error)
            return False
    return True


def _cannot_write_report(path: Path, error: OSError) -> int:
    sys.stderr.write(f"torchdevlint: error: cannot write the report to {path}: {error.strerror or error}\n")
    return EXIT_ERROR


def _check_stdin(name: str, settings: Settings, run_settings: RunSettings) -> FileResult:
    """Lint (and with --fix or --add-noqa, write to standard output) what standard input holds, as file `name`."""
    data = sys.stdin.buffer.read()
    if name != "-" and settings.config.excludes_file(Path(name), settings.root):
        result = FileResult(name)
        result.output = data if run_settings.fix or run_settings.add_noqa else None
    else:
        result = process_bytes(name, data, run_settings, in_place=False)
    if (run_settings.fix or run_settings.add_noqa) and not run_settings.diff:
        # Unfixable input (a syntax error) comes back as it went in: an editor keeps its buffer.
        sys.stdout.buffer.write(result.output if result.output is not None else data)
        sys.stdout.flush()
    return result


def _run_debug(args: argparse.Namespace) -> int:
    # The analysis is imported where it is asked for: `check` answered from the cache needs none of it.
    from torchdevlint.debug import flow_lines
    from torchdevlint.engine import InvalidSource, check_syntax
    from torchdevlint.programs import read_program

    target: str = args.target
    path, line, cell = target, None, None
    parts = target.rsplit(":", 2)
    if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit() and is_notebook(parts[0]):
        path, cell, line = parts[0], int(parts[1]), int(parts[2])
    elif len(parts) >= 2 and parts[-1].isdigit():
        path, line = target.rpartition(":")[0], int(parts[-1])
    try:
        program = read_program(path)
        # A notebook's cells that do not parse are set aside, and said so; the rest is shown.
        program.lint(())
        for error in program.errors:
            sys.stderr.write(f"torchdevlint: {format_error_line(error)}\n")
        source = program.text
        check_syntax(source, path)
        lines = flow_lines(source, path, line, place=program.place, only_cell=cell)
    except SourceError as error:
        sys.stderr.write(f"torchdevlint: error: {path}: {error}\n")
        return EXIT_ERROR
    except InvalidSource as error:
        where = program.error(error.message, error.line, error.column)
        sys.stderr.write(f"torchdevlint: error: {format_error_line(where)}\n")
        return EXIT_ERROR
    sys.stdout.write("".join(f"{text}\n" for text in lines))
    return EXIT_CLEAN


def _run_server() -> int:
    # Imported here: pygls is an optional extra, and `check` must not pay for it.
    try:
        from torchdevlint.server import serve
    except ImportError as error:
        if error.name not in ("pygls", "lsprotocol") and not str(error.name).startswith(("pygls.", "lsprotocol.")):
            raise
        sys.stderr.write("torchdevlint: error: the server needs pygls: pip install 'torchdevlint[server]'\n")
        return EXIT_ERROR
    serve()
    return EXIT_CLEAN


def _run_rule(args: argparse.Namespace) -> int:
    from torchdevlint.ruledocs import rule_page

    if args.all or args.code is None:
        for rule in all_rules():
            state = "on" if rule.default_enabled else "off by default"
            fixable = "fixable" if rule.is_fixable() else "no fix"
            sys.stdout.write(f"{rule.code}  {rule.slug:<36} {state:<15} {fixable}\n")
        return EXIT_CLEAN
    chosen = rule_by_code(args.code)
    if chosen is None:
        sys.stderr.write(f"torchdevlint: error: unknown rule {args.code!r}\n")
        return EXIT_ERROR
    sys.stdout.write(rule_page(chosen))
    return EXIT_CLEAN


def _terminate_as_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _parse(own: list[str]) -> argparse.Namespace:
    """The command line; a flag the subcommand does not know is refused with that subcommand's
    usage, not the top level's (argparse hands unknown arguments up to the top parser)."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(own)
    if unknown:
        chosen: argparse.ArgumentParser = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction) and args.command in action.choices:
                chosen = action.choices[args.command]
        chosen.error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    own, program_args = split_program_args(_normalize_argv(sys.argv[1:] if argv is None else argv))
    args = _parse(own)
    if program_args is not None:
        args.program_args = program_args
    # SIGTERM (a CI job cancelled, a hook killed) stops like Ctrl-C: between files, never
    # halfway through writing one.
    signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    try:
        if args.command == "rule":
            return _run_rule(args)
        if args.command == "verify":
            return run_verify(args)
        if args.command == "debug":
            return _run_debug(args)
        if args.command == "server":
            return _run_server()
        return _run_check(args)
    except KeyboardInterrupt:
        sys.stderr.write("torchdevlint: interrupted\n")
        return 130
    except BrokenPipeError:
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
