"""The `# verify: host=... gpus=N` line in a program's header: which machine proves its bug.

A device bug shows only on the right machine: a discarded `.to(device)` needs a GPU, a
`torch.load` without `map_location` needs a checkpoint written on a GPU and a host without
one, a `DataParallel` taken only when `device_count() > 1` needs two GPUs. Programs say so in
their leading comment block; without a directive a program runs on one GPU.

    # verify: host=gpu gpus=2
    # verify: host=cpu-loads-gpu-checkpoint
    # verify: host=cpu
    # verify: host=mps
    # verify: host=cpu argv=--cuda=False fixed-argv=--no-cuda

`argv` is the command line the program runs with (arguments separated by commas), and
`fixed-argv` the one the fixed program runs with, where the fix changes the command line
(an option declared anew); it defaults to `argv`.

Only a line made entirely of `key=value` settings is a directive, so prose such as
`# verify: the original fails ...` is left alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

_DIRECTIVE = re.compile(r"^#\s*verify:\s*(?P<settings>[\w-]+=\S+(?:\s+[\w-]+=\S+)*)\s*$")
# A line that starts like a directive but holds more than settings (a trailing comment).
_LOOKS_LIKE_DIRECTIVE = re.compile(r"^#\s*verify:\s*[\w-]+=")
_MAX_GPUS = 16


class ProgramHost(Enum):
    # The program runs on a GPU (real or emulated).
    GPU = "gpu"
    # The program runs on a machine without a GPU, and the checkpoints it saves are tagged as
    # written on cuda:0: a model trained on a GPU box, served on a CPU-only one.
    CPU_LOADS_GPU_CHECKPOINT = "cpu-loads-gpu-checkpoint"
    # The program runs on a machine without a GPU (code that assumes one fails there).
    CPU = "cpu"
    # The program runs on an Apple GPU (emulated: see `verify.mps`).
    MPS = "mps"


class DirectiveError(ValueError):
    """A `# verify:` directive that cannot be honoured; the message names the setting."""


@dataclass(frozen=True)
class VerifySpec:
    host: ProgramHost = ProgramHost.GPU
    gpus: int = 1
    # 1-based line of the directive, None when the defaults apply.
    line: int | None = None
    # The program's command line, and the fixed program's where the fix changes it.
    argv: tuple[str, ...] = ()
    fixed_argv: tuple[str, ...] | None = None


def _header_lines(source: str) -> list[tuple[int, str]]:
    """The leading comment block (blank lines and a shebang included), numbered from 1."""
    lines = []
    for number, line in enumerate(source.lstrip("\ufeff").splitlines(), start=1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break
        lines.append((number, stripped))
    return lines


def read_directive(source: str) -> VerifySpec:
    spec: VerifySpec | None = None
    for number, line in _header_lines(source):
        match = _DIRECTIVE.match(line)
        if match is None:
            if _LOOKS_LIKE_DIRECTIVE.match(line):
                raise DirectiveError(f"line {number}: a `# verify:` directive holds only key=value settings")
            continue
        if spec is not None:
            raise DirectiveError(f"line {number}: a second `# verify:` directive (the first is on line {spec.line})")
        spec = _parse(match.group("settings"), number)
    return spec or VerifySpec()


def _parse(settings: str, number: int) -> VerifySpec:
    host = ProgramHost.GPU
    gpus = 1
    argv: tuple[str, ...] = ()
    fixed_argv: tuple[str, ...] | None = None
    seen: set[str] = set()
    for item in settings.split():
        key, _, value = item.partition("=")
        if key in seen:
            raise DirectiveError(f"line {number}: `{key}` given twice")
        seen.add(key)
        if key == "host":
            try:
                host = ProgramHost(value)
            except ValueError:
                choices = ", ".join(h.value for h in ProgramHost)
                raise DirectiveError(f"line {number}: unknown host {value!r} (expected one of: {choices})") from None
        elif key == "gpus":
            if not value.isdigit() or not 1 <= int(value) <= _MAX_GPUS:
                raise DirectiveError(f"line {number}: gpus={value} is not a number from 1 to {_MAX_GPUS}")
            gpus = int(value)
        elif key in ("argv", "fixed-argv"):
            arguments = tuple(value.split(","))
            if key == "argv":
                argv = arguments
            else:
                fixed_argv = arguments
        else:
            raise DirectiveError(
                f"line {number}: unknown setting `{key}` (expected host=, gpus=, argv= or fixed-argv=)")
    if host is not ProgramHost.GPU and "gpus" in seen:
        raise DirectiveError(f"line {number}: gpus= does not apply to host={host.value}, which has no GPU")
    return VerifySpec(host, gpus, number, argv, fixed_argv)
