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
    # verify: host=gpu gpus=2 processes=2 nodes=2

`argv` is the command line the program runs with (arguments separated by commas), and
`fixed-argv` the one the fixed program runs with, where the fix changes the command line
(an option declared anew); it defaults to `argv`. `processes` runs the program as that many
ranks, as `torchrun --nproc_per_node N` starts them (a program that calls `mp.spawn` starts
its own and runs once), and `nodes` as that many machines of them (`torchrun --nnodes`).

Only a line made entirely of `key=value` settings is a directive, so prose such as
`# verify: the original fails ...` is left alone.

A program without a directive runs on the machine its findings need (`scenario_for`): a
TDL003 finding needs a CPU-only host loading a GPU-written checkpoint, an unguarded CUDA call a
host without a GPU, a DataParallel bug more than one GPU. `verify --host/--gpus` overrides both.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum

from torchdevlint.verify.expected_errors import proof_of

_DIRECTIVE = re.compile(r"^#\s*verify:\s*(?P<settings>[\w-]+=\S+(?:\s+[\w-]+=\S+)*)\s*$")
# A line that starts like a directive but holds more than settings (a trailing comment).
_LOOKS_LIKE_DIRECTIVE = re.compile(r"^#\s*verify:\s*[\w-]+=")
_MAX_GPUS = 16
_MAX_NODES = 4


class ProgramHost(Enum):
    # The program runs on a GPU (real or emulated).
    GPU = "gpu"
    # The program runs on a machine without a GPU, and the checkpoint files it did not write
    # itself load as written on cuda:0: a model trained on a GPU box, served on a CPU-only one.
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
    # Ranks on each machine, each its own process, and machines, as torchrun starts them.
    processes: int = 1
    nodes: int = 1
    # Where host and gpus came from: the directive, the findings, the command line, or neither.
    origin: str = "default"


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
    processes = nodes = 1
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
        elif key == "processes":
            if not value.isdigit() or not 1 <= int(value) <= _MAX_GPUS:
                raise DirectiveError(f"line {number}: processes={value} is not a number from 1 to {_MAX_GPUS}")
            processes = int(value)
        elif key == "nodes":
            if not value.isdigit() or not 1 <= int(value) <= _MAX_NODES:
                raise DirectiveError(f"line {number}: nodes={value} is not a number from 1 to {_MAX_NODES}")
            nodes = int(value)
        elif key in ("argv", "fixed-argv"):
            arguments = tuple(value.split(","))
            if key == "argv":
                argv = arguments
            else:
                fixed_argv = arguments
        else:
            raise DirectiveError(
                f"line {number}: unknown setting `{key}` (expected host=, gpus=, processes=, nodes=, argv= or fixed-argv=)")
    if host is not ProgramHost.GPU and "gpus" in seen:
        raise DirectiveError(f"line {number}: gpus= does not apply to host={host.value}, which has no GPU")
    return VerifySpec(host, gpus, number, argv, fixed_argv, processes, nodes, origin="directive")


def scenario_for(spec: VerifySpec, codes: Sequence[str]) -> tuple[VerifySpec, tuple[str, ...]]:
    """The machine that proves the most of these findings (the first finding's breaks a tie).

    Returns it with the codes it cannot prove (their bug needs another machine). A spec from a
    directive or the command line is kept as it is.
    """
    if spec.origin != "default" or not codes:
        return spec, ()
    proofs = [proof_of(code) for code in codes]
    hosts = [ProgramHost(proof.host) for proof in proofs]
    best = max(hosts, key=lambda host: (hosts.count(host), -hosts.index(host)))
    gpus = max(proof.gpus for host, proof in zip(hosts, proofs, strict=True) if host is best) \
        if best is ProgramHost.GPU else 1
    processes = max(proof.processes for host, proof in zip(hosts, proofs, strict=True) if host is best)
    nodes = max(proof.nodes for host, proof in zip(hosts, proofs, strict=True) if host is best)
    unproven = tuple(code for code, host in zip(codes, hosts, strict=True) if host is not best)
    return replace(spec, host=best, gpus=gpus, processes=processes, nodes=nodes, origin="findings"), unproven


def with_host(spec: VerifySpec, host: ProgramHost | None, gpus: int | None) -> VerifySpec:
    """`spec` with the command line's `--host`/`--gpus`, which override directive and findings."""
    if host is None and gpus is None:
        return spec
    chosen = host or (ProgramHost.GPU if gpus is not None else spec.host)
    if chosen is not ProgramHost.GPU and gpus is not None:
        raise DirectiveError(f"--gpus does not apply to --host {chosen.value}, which has no GPU")
    count = gpus if gpus is not None else (spec.gpus if chosen is ProgramHost.GPU else 1)
    if not 1 <= count <= _MAX_GPUS:
        raise DirectiveError(f"--gpus {count} is not a number from 1 to {_MAX_GPUS}")
    return replace(spec, host=chosen, gpus=count, origin="command line")


def scenarios_for(spec: VerifySpec, codes: Sequence[str]) -> list[tuple[VerifySpec, tuple[str, ...]]]:
    """Every machine these findings need, each with the codes it proves, the one proving most first.

    A spec from a directive or the command line is the one machine, for every code.
    """
    chosen, left = scenario_for(spec, codes)
    scenarios = [(chosen, tuple(code for code in codes if code not in left))]
    while left:
        chosen, still = scenario_for(VerifySpec(), left)
        scenarios.append((chosen, tuple(code for code in left if code not in still)))
        left = still
    return scenarios
