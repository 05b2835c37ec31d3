"""`torchdevlint verify PATH... [--device auto|cuda|emulated] [--host H] [--gpus N] [--cwd DIR] [-- ARGS]`.

Exit codes: 0 every program with findings is `fix verified` (programs without findings do not
count), 1 otherwise, 2 a usage or configuration error, an unreadable program, or no GPU for
`--device cuda`. Files on disk are never changed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from torchdevlint.settings import Settings
    from torchdevlint.verify.runner import ConfiguredRules

# As `check`: the current folder, walked with its excludes and .gitignore.
DEFAULT_PATHS = (".",)
EXIT_VERIFIED = 0
EXIT_NOT_VERIFIED = 1
EXIT_ERROR = 2


def _positive_seconds(value: str) -> float:
    seconds = float(value)
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number of seconds")
    return seconds


_ParserT = TypeVar("_ParserT", bound=argparse.ArgumentParser)


def add_verify_parser(commands: argparse._SubParsersAction[_ParserT]) -> None:
    verify = commands.add_parser(
        "verify", help="run each program before and after its fixes, on CUDA or an emulated GPU",
        description=(
            "Executes the programs it is given (and only those), each run in its own subprocess "
            "with a timeout, to prove each correctness finding and its fix: the original must fail "
            "with the predicted device error, the fixed version (built in memory) must run. Files "
            "on disk are never changed. Only run programs you trust."
        ),
    )
    verify.add_argument("paths", nargs="*", default=[], help="programs or folders of them (default: the current folder)")
    verify.add_argument("--device", choices=("auto", "cuda", "emulated"), default="auto",
                        help="cuda: a real GPU; emulated: CUDA tensors computed on the CPU; "
                             "auto (default): cuda when available")
    verify.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    verify.add_argument("--timeout", type=_positive_seconds, default=None, metavar="SECONDS",
                        help="seconds each run may take (default: 300)")
    verify.add_argument("--run-to-end", action="store_true",
                        help="let every run go to its end (default: a run stops a few seconds after each finding's "
                             "line and a use of its value have run, which is all the proof needs)")
    verify.add_argument("--seconds", type=_positive_seconds, default=None, metavar="SECONDS",
                        help="stop each run, as a success, after this long (unlike --timeout, a failure)")
    verify.add_argument("--steps", type=int, default=None, metavar="N",
                        help="stop each run, as a success, after N optimizer steps")
    verify.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                        help="runs at the same time (default: one per core, at most 4)")
    verify.add_argument("--host", choices=("gpu", "cpu", "cpu-loads-gpu-checkpoint", "mps"), default=None,
                        help="the machine every program runs on, over `# verify:` directives and the machine "
                             "its findings need (default: the directive, else from the findings)")
    verify.add_argument("--gpus", type=int, default=None, metavar="N",
                        help="GPUs of a GPU host (default: the directive's, else what the findings need)")
    verify.add_argument("--cwd", type=Path, default=None, metavar="DIR",
                        help="the folder each program runs in (default: the program's own); runs see a "
                             "copy-on-write view of it, so your files are never changed")
    verify.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="set an environment variable for the programs (repeatable); they also see yours")
    verify.add_argument("--allow-writes", action="store_true",
                        help="run where the machine cannot keep the programs' processes from writing outside "
                             "verify's scratch folder (no Landlock): only the programs' own Python writes are "
                             "then redirected, and subprocesses or C extensions may change your files")
    verify.add_argument("--config", type=Path, default=None, help="pyproject.toml to read (default: nearest)")
    verify.set_defaults(program_args=None)
    verify.epilog = ("Arguments after `--` are the program's own command line: "
                     "torchdevlint verify train.py -- --epochs 1 --data ./data")


def split_program_args(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """`verify ... -- ARGS`: torchdevlint's own arguments, and the program's (None without `--`)."""
    if not argv or argv[0] != "verify" or "--" not in argv:
        return argv, None
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1:]


def _environment(pairs: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals or not name:
            raise ValueError(f"--env {pair!r}: expected NAME=VALUE")
        env[name] = value
    return env


def _configured_rules(path: str, settings: Settings) -> ConfiguredRules:
    from torchdevlint.settings import file_rule_codes

    codes = set(file_rule_codes(settings, Path(path)))
    return tuple(rule for rule in settings.rules if rule.code in codes), settings.rule_options


def run_verify(args: argparse.Namespace) -> int:
    # Deferred: `check` never pays for the verify machinery (which still never imports torch).
    from torchdevlint.config import ConfigError
    from torchdevlint.diagnostics import FileError
    from torchdevlint.files import iter_python_files
    from torchdevlint.runner import default_jobs
    from torchdevlint.settings import SettingsFinder
    from torchdevlint.verify import report
    from torchdevlint.verify.directive import DirectiveError, ProgramHost, VerifySpec, with_host
    from torchdevlint.verify.isolation import landlock_abi
    from torchdevlint.verify.runner import (
        DEFAULT_TIMEOUT,
        DeviceChoice,
        ProgramReport,
        RunPlace,
        VerifyError,
        VerifySettings,
        choose_accelerator,
        verify_programs,
    )

    if args.jobs is not None and args.jobs < 1:
        sys.stderr.write("torchdevlint: error: --jobs must be at least 1\n")
        return EXIT_ERROR
    if args.steps is not None and args.steps < 1:
        sys.stderr.write("torchdevlint: error: --steps must be at least 1\n")
        return EXIT_ERROR
    host = ProgramHost(args.host) if args.host else None
    try:
        with_host(VerifySpec(), host, args.gpus)
        env = _environment(args.env)
    except (DirectiveError, ValueError) as error:
        sys.stderr.write(f"torchdevlint: error: {error}\n")
        return EXIT_ERROR
    if args.cwd is not None and not args.cwd.is_dir():
        sys.stderr.write(f"torchdevlint: error: --cwd {args.cwd}: not a folder\n")
        return EXIT_ERROR
    isolate = landlock_abi() > 0
    if not isolate and not args.allow_writes:
        sys.stderr.write(
            "torchdevlint: error: this machine cannot keep the verified programs (and the processes they "
            "start) from writing outside verify's scratch folder: Linux's Landlock is not available. "
            "Pass --allow-writes to run them anyway, with only their own Python writes redirected\n")
        return EXIT_ERROR
    try:
        finder = SettingsFinder(Path.cwd(), args.config)
        # The programs are walked, and configured, as `check` walks and configures them.
        errors: list[FileError] = []
        found = list(iter_python_files(args.paths or list(DEFAULT_PATHS), finder, errors))
        files = [path for path, _ in found]
        configured = {path: _configured_rules(path, file_settings) for path, file_settings in found}
    except ConfigError as error:
        sys.stderr.write(f"torchdevlint: error: {error}\n")
        return EXIT_ERROR
    if args.program_args is not None and len(files) != 1:
        sys.stderr.write(f"torchdevlint: error: arguments after `--` are one program's command line, "
                         f"but {len(files)} programs were given\n")
        return EXIT_ERROR
    try:
        accelerator = choose_accelerator(DeviceChoice(args.device))
    except VerifyError as error:
        sys.stderr.write(f"torchdevlint: error: {error}\n")
        return EXIT_ERROR
    settings = VerifySettings(
        rules_for=configured.__getitem__,
        accelerator=accelerator,
        timeout=args.timeout or DEFAULT_TIMEOUT,
        jobs=args.jobs or min(4, default_jobs()),
        host=host,
        gpus=args.gpus,
        place=RunPlace(args.cwd, env),
        argv=None if args.program_args is None else tuple(args.program_args),
        run_to_end=args.run_to_end,
        progress=report.progress_writer(sys.stderr, sys.stderr.isatty()),
        isolate=isolate,
        seconds=args.seconds,
        steps=args.steps,
    )
    text = args.format == "text"
    out = sys.stdout
    if text:
        out.write(report.header(accelerator))
        for file_error in errors:
            report.write_error(out, file_error)
        out.flush()
    programs: list[ProgramReport] = []
    for item in verify_programs(files, settings):
        if isinstance(item, FileError):
            errors.append(item)
            if text:
                report.write_error(out, item)
        else:
            programs.append(item)
            if text:
                report.write_program(out, item)
        out.flush()
    if text:
        out.write(report.summary(programs, errors))
    else:
        for file_error in errors:
            report.write_error(sys.stderr, file_error)
        report.write_json(out, programs)
    if errors:
        return EXIT_ERROR
    return EXIT_NOT_VERIFIED if any(program.failed for program in programs) else EXIT_VERIFIED
