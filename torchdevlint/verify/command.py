"""`torchdevlint verify PATH... [--device auto|cuda|emulated] [--host H] [--gpus N] [--format text|json]`.

Exit codes: 0 every program with findings is `fix verified` (programs without findings do not
count), 1 otherwise, 2 a usage or configuration error, an unreadable program, or no GPU for
`--device cuda`. Files on disk are never changed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TypeVar

DEFAULT_PATHS = ("fixtures/",)
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
    verify.add_argument("paths", nargs="*", default=[], help="programs or folders of them (default: fixtures/)")
    verify.add_argument("--device", choices=("auto", "cuda", "emulated"), default="auto",
                        help="cuda: a real GPU; emulated: CUDA tensors computed on the CPU; "
                             "auto (default): cuda when available")
    verify.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    verify.add_argument("--timeout", type=_positive_seconds, default=None, metavar="SECONDS",
                        help="seconds each run may take (default: 300)")
    verify.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                        help="runs at the same time (default: one per core, at most 4)")
    verify.add_argument("--host", choices=("gpu", "cpu", "cpu-loads-gpu-checkpoint", "mps"), default=None,
                        help="the machine every program runs on, over `# verify:` directives and the machine "
                             "its findings need (default: the directive, else from the findings)")
    verify.add_argument("--gpus", type=int, default=None, metavar="N",
                        help="GPUs of a GPU host (default: the directive's, else what the findings need)")
    verify.add_argument("--config", type=Path, default=None, help="pyproject.toml to read (default: nearest)")


def run_verify(args: argparse.Namespace) -> int:
    # Deferred: `check` never pays for the verify machinery (which still never imports torch).
    from torchdevlint.config import ConfigError
    from torchdevlint.diagnostics import FileError
    from torchdevlint.files import iter_python_files
    from torchdevlint.runner import default_jobs
    from torchdevlint.settings import load_settings
    from torchdevlint.verify import report
    from torchdevlint.verify.directive import DirectiveError, ProgramHost, VerifySpec, with_host
    from torchdevlint.verify.runner import (
        DEFAULT_TIMEOUT,
        DeviceChoice,
        ProgramReport,
        VerifyError,
        VerifySettings,
        choose_accelerator,
        verify_programs,
    )

    if args.jobs is not None and args.jobs < 1:
        sys.stderr.write("torchdevlint: error: --jobs must be at least 1\n")
        return EXIT_ERROR
    host = ProgramHost(args.host) if args.host else None
    try:
        with_host(VerifySpec(), host, args.gpus)
    except DirectiveError as error:
        sys.stderr.write(f"torchdevlint: error: {error}\n")
        return EXIT_ERROR
    try:
        loaded = load_settings(Path.cwd(), args.config)
    except ConfigError as error:
        sys.stderr.write(f"torchdevlint: error: {error}\n")
        return EXIT_ERROR
    errors: list[FileError] = []
    files = list(iter_python_files(args.paths or list(DEFAULT_PATHS), loaded.config, loaded.root, errors))
    try:
        accelerator = choose_accelerator(DeviceChoice(args.device))
    except VerifyError as error:
        sys.stderr.write(f"torchdevlint: error: {error}\n")
        return EXIT_ERROR
    settings = VerifySettings(
        rules=loaded.rules,
        rule_options=loaded.rule_options,
        accelerator=accelerator,
        timeout=args.timeout or DEFAULT_TIMEOUT,
        jobs=args.jobs or min(4, default_jobs()),
        host=host,
        gpus=args.gpus,
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
