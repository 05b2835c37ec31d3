"""A verify child: run one program (its source on stdin) on one host, report how it ended.

`python -m torchdevlint.verify.child --host emulated --gpus 1 --path PROGRAM --report FILE`
The program's own stdout and stderr pass through untouched; the outcome goes to FILE as JSON.
`python -m torchdevlint.verify.child --probe` prints what CUDA this machine has, as JSON.
`python -m torchdevlint.verify.child --serve` imports torch once and forks each run from there.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import select
import signal
import socket
import sys
import tempfile
import time
import traceback
import types
from collections.abc import Callable
from pathlib import Path

from torchdevlint.verify.isolation import restrict_writes
from torchdevlint.verify.proof import Budget, BudgetSpent, ProofBudget
from torchdevlint.verify.protocol import (
    LOCALHOST,
    NODE_VARIABLE,
    RUN_PORT_VARIABLE,
    ChildReport,
    ErrorInfo,
    RunHost,
    RunStatus,
    string_map,
)
from torchdevlint.verify.workspace import guard_originals


def probe() -> int:
    try:
        import torch
    except ImportError as error:
        print(json.dumps({"torch": None, "error": str(error)}))
        return 0
    available = bool(torch.cuda.is_available())
    print(json.dumps({
        "torch": torch.__version__,
        "cuda_available": available,
        "device_count": torch.cuda.device_count() if available else 0,
        "device_name": torch.cuda.get_device_name(0) if available else None,
    }))
    return 0


def _error_info(error: BaseException, path: str) -> ErrorInfo:
    trace = tuple(frame.lineno for frame in traceback.extract_tb(error.__traceback__)
                  if frame.filename == path and frame.lineno is not None)
    if isinstance(error, SyntaxError) and error.lineno is not None and error.filename in (path, os.path.basename(path)):
        # The program did not compile: no frame of it ran, and the error names its line.
        trace += (error.lineno,)
    kind, message = type(error).__name__, str(error)
    if isinstance(error, KeyError) and len(error.args) == 1:
        message = repr(error.args[0])
    rank = _SPAWNED_RANK_ERROR.search(message)
    worker = _WORKER_ERROR.match(message)
    if rank is not None:
        # A rank mp.spawn started: its frames of the program, then its error, whole.
        trace += tuple(int(line) for file, line in _TRACEBACK_FRAME.findall(rank.group(2)) if file == path)
        kind, text = _exception_ending(rank.group(2))
        message = f"{text} ({rank.group(1)})"
    elif worker is not None:
        # A DataLoader worker's error, raised again where the loop asks for a batch (or a
        # DataParallel replica's, where the wrapper gathers): the worker's own frames of the
        # program are deeper, and its last line is the error.
        where, original = worker.group(1), worker.group(2)
        trace += tuple(int(line) for file, line in _TRACEBACK_FRAME.findall(original) if file == path)
        last = original.rstrip().rsplit("\n", 1)[-1]
        kind, _, text = last.partition(": ")
        message = f"{text} ({where})" if text else f"({where})"
    # The innermost frame of the program itself is where the error shows.
    return ErrorInfo(kind, message, trace[-1] if trace else None, trace, _module_being_imported(error, path))


# Errors raised again away from where they happened, with the original traceback in the
# message: a DataLoader worker's, a DataParallel replica's.
_WORKER_ERROR = re.compile(r"Caught \w+ (in DataLoader worker process \d+|in replica \d+ on device \d+)\.\n"
                           r"Original Traceback \(most recent call last\):\n(.*)", re.DOTALL)
# A rank `mp.spawn` started, whose error the parent raises again.
_SPAWNED_RANK_ERROR = re.compile(r"-- (Process \d+) terminated with the following error:\n"
                                 r"Traceback \(most recent call last\):\n(.*)", re.DOTALL)
_TRACEBACK_FRAME = re.compile(r'^  File "(.*)", line (\d+), in ', re.MULTILINE)


def _exception_ending(text: str) -> tuple[str, str]:
    """The type's name and the message of the exception a printed traceback ends with: the
    lines after its last frame's (which are indented), a message of several lines whole."""
    lines = text.rstrip().split("\n")
    start = len(lines)
    while start > 0 and not lines[start - 1].startswith(" "):
        start -= 1
    kind, _, message = "\n".join(lines[start:]).partition(": ")
    return kind.rsplit(".", 1)[-1], message


def _module_being_imported(error: BaseException, path: str) -> str | None:
    """The module whose import, started by the program's innermost line, raised `error`."""
    frames = []
    tb = error.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    last_own = max((index for index, frame in enumerate(frames) if frame.f_code.co_filename == path), default=None)
    if last_own is None:
        return None
    # The import machinery drops its own frames from tracebacks: what follows the program's
    # line directly is the top level of the module it imports.
    following = frames[last_own + 1:last_own + 2]
    if following and following[0].f_code.co_name == "<module>":
        name = following[0].f_globals.get("__name__")
        return name if isinstance(name, str) else None
    return None


def run_program(source: str, path: str, kind: RunHost, gpus: int, argv: list[str] | None = None,
                guard: dict[str, object] | None = None, budget: Budget | None = None,
                processes: int = 1, nodes: int = 1) -> ChildReport:
    """Execute `source` as the `__main__` of `path`, the way `python path ARGV...` would.

    `guard` names the run's mirror and the user's folders it stands for: writes copy first.
    `budget` ends the run once its findings are exercised (or after `--seconds`/`--steps`).
    `processes` above 1 runs the program as `torchrun --nproc_per_node N` runs it, one process
    per rank, unless it starts its processes itself (`mp.spawn`); `nodes` as `--nnodes`, each
    rank on a machine of `gpus` GPUs of its own.
    The report says how long this took.
    """
    started = time.monotonic()
    os.environ.setdefault(RUN_PORT_VARIABLE, str(free_port()))

    def run_one() -> ChildReport:
        return _run_program(source, path, kind, gpus, argv, guard, budget)

    if processes * nodes > 1 and not _STARTS_ITS_OWN_PROCESSES.search(source):
        report = run_ranks(processes, nodes, run_one)
    else:
        report = run_one()
    return dataclasses.replace(report, seconds=time.monotonic() - started,
                               gpu_random=kind.real_gpu and _drew_on_a_gpu())


# `mp.spawn(...)`, `torch.multiprocessing.start_processes(...)`: a program that starts its ranks.
_STARTS_ITS_OWN_PROCESSES = re.compile(r"\b(?:spawn|start_processes)\s*\(")
# How long the other ranks may go on once one has failed or stopped: they may be waiting in a
# collective for it, as torchrun's workers would until it stops them.
_RANKS_GRACE_SECONDS = 5.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOCALHOST, 0))
        port: int = probe.getsockname()[1]
        return port


def run_ranks(per_node: int, nodes: int, run_one: Callable[[], ChildReport]) -> ChildReport:
    """Run `run_one` in `per_node` forked processes on each of `nodes` machines, with the
    environment torchrun gives its ranks; the report is the first failing rank's, else the first stopped one's,
    else rank 0's. Once a rank fails or stops, the others are stopped after a grace period."""
    _flush_streams()
    # In the run's own temporary folder (TMPDIR), where its processes may write.
    folder = tempfile.mkdtemp(prefix="ranks-", dir=os.environ.get("TMPDIR"))
    ranks: dict[int, int] = {}  # pid -> rank
    count = per_node * nodes
    for rank in range(count):
        pid = os.fork()
        if pid == 0:
            _become_rank(rank, per_node, count, os.path.join(folder, f"{rank}.json"), run_one)
        ranks[pid] = rank
    reports: dict[int, ChildReport] = {}
    ended: list[int] = []
    stopping_since: float | None = None
    while len(ended) < count:
        pid, wait_status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            if stopping_since is not None and time.monotonic() - stopping_since > _RANKS_GRACE_SECONDS:
                for other, rank in ranks.items():
                    if rank not in ended:
                        _kill(other)
            time.sleep(0.02)
            continue
        if pid not in ranks:
            continue
        rank = ranks[pid]
        ended.append(rank)
        reports[rank] = _rank_report(os.path.join(folder, f"{rank}.json"), wait_status)
        if stopping_since is None and (reports[rank].status is not RunStatus.OK or reports[rank].stopped):
            stopping_since = time.monotonic()
    failed = [reports[rank] for rank in ended if reports[rank].status is not RunStatus.OK]
    stopped = [reports[rank] for rank in ended if reports[rank].stopped]
    return (failed or stopped or [reports[0]])[0]


def _become_rank(rank: int, per_node: int, count: int, report_path: str, run_one: Callable[[], ChildReport]) -> None:
    status = 1
    try:
        port = os.environ[RUN_PORT_VARIABLE]
        node, local = divmod(rank, per_node)
        os.environ.update({
            "RANK": str(rank), "LOCAL_RANK": str(local), "WORLD_SIZE": str(count), "LOCAL_WORLD_SIZE": str(per_node),
            "GROUP_RANK": str(node), "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": str(count),
            "MASTER_ADDR": LOCALHOST, "MASTER_PORT": port, "TORCHELASTIC_RUN_ID": "torchdevlint-verify",
            NODE_VARIABLE: str(node),
        })
        # Whole lines, one write each: the ranks share the run's output, and a line must not
        # be cut by another rank's (a `RESULT` line least of all).
        sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
        sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
        report = run_one()
        _flush_streams()
        Path(report_path).write_text(json.dumps(report.to_json()))
        status = 0
    except BaseException:  # noqa: BLE001 - the parent reads a rank without a report as failed
        traceback.print_exc()
    finally:
        _flush_streams()
        os._exit(status)


def _rank_report(path: str, wait_status: int) -> ChildReport:
    try:
        return ChildReport.from_json(json.loads(Path(path).read_text()))
    except (OSError, ValueError):
        code = os.waitstatus_to_exitcode(wait_status)
        why = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
        return ChildReport(RunStatus.ERROR, ErrorInfo("ProcessExit", f"a rank {why}"))


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _drew_on_a_gpu() -> bool:
    """Whether the program drew random numbers with a CUDA generator since it last seeded it
    (a generator's offset moves with each draw; `manual_seed` sets it back to 0)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return False
    try:
        return any(generator.get_offset() > 0 for generator in torch.cuda.default_generators)
    except (AttributeError, RuntimeError):  # a torch without offsets: nothing to tell
        return False


def _run_program(source: str, path: str, kind: RunHost, gpus: int, argv: list[str] | None,
                 guard: dict[str, object] | None, budget: Budget | None) -> ChildReport:
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__dict__["__builtins__"] = __builtins__
    sys.argv = [path, *(argv or [])]
    sys.path[0] = os.path.dirname(path)
    sys.stdin = open(os.devnull)  # noqa: SIM115 - lives as long as the program
    proof: ProofBudget | None = None

    def unreached() -> tuple[int, ...]:
        return proof.unreached() if proof is not None else ()

    try:
        code = compile(source, path, "exec", dont_inherit=True)
        from torchdevlint.verify.host import host

        if guard is not None:
            protected = guard.get("protected")
            scratch = guard.get("scratch")
            guard_originals(str(guard["mirror"]), [str(p) for p in protected] if isinstance(protected, list) else [],
                            str(scratch) if scratch is not None else None)
            writable = guard.get("writable")
            if isinstance(writable, list):
                # Past here no process of the run writes outside its scratch folder.
                tempfile.tempdir = None  # read TMPDIR (the scratch's) again
                restrict_writes([str(path) for path in writable])
        with host(kind, gpus):
            sys.modules["__main__"] = main
            proof = ProofBudget(path, budget or Budget())
            proof.start()
            try:
                exec(code, main.__dict__)
            finally:
                proof.end()
    except BudgetSpent as spent:
        return ChildReport(RunStatus.OK, None, spent.reason, unreached())
    except SystemExit as exit_:
        if exit_.code in (None, 0):
            return ChildReport(RunStatus.OK, None, unreached=unreached())
        return ChildReport(RunStatus.ERROR, ErrorInfo("SystemExit", str(exit_.code)), unreached=unreached())
    except BaseException as error:  # noqa: BLE001 - the program's failure is the finding
        traceback.print_exc()
        return ChildReport(RunStatus.ERROR, _error_info(error, path), unreached=unreached())
    return ChildReport(RunStatus.OK, None, unreached=unreached())


def _run_forked(request: dict[str, object]) -> None:
    """In a process just forked from the server: become the run described by `request`."""
    status = 1
    try:
        os.setsid()  # its own process group, which a timeout kills as a whole
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(str(request["cwd"]))
        os.environ.update(string_map(request.get("env")))
        write = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        redirections = ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], write), (2, request["stderr"], write))
        for fd, name, flags in redirections:
            opened = os.open(str(name), flags, 0o600)
            os.dup2(opened, fd)
            os.close(opened)
        # Fresh stream objects: the server's may hold state (or a lock) from before the fork.
        sys.stdout = os.fdopen(1, "w", closefd=False)
        sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
        source = Path(str(request["source"])).read_text(encoding="utf-8")
        kind, gpus = RunHost(str(request["host"])), int(str(request["gpus"]))
        argv = request.get("argv")
        guard = request.get("guard")
        report = run_program(source, str(request["path"]), kind, gpus,
                             [str(item) for item in argv] if isinstance(argv, list) else None,
                             guard if isinstance(guard, dict) else None, Budget.from_json(request.get("budget")),
                             int(str(request.get("processes", 1))), int(str(request.get("nodes", 1))))
        _flush_streams()
        Path(str(request["report"])).write_text(json.dumps(report.to_json()))
        status = 0
    finally:
        _flush_streams()
        os._exit(status)


def serve() -> int:
    """Fork one run per request line; answer each with its exit status, one JSON line each.

    torch is imported once, here, before any fork: that is most of a run's start-up time.
    Never initialises CUDA itself, so a run forked from here may. Requests:
    {"id", "cwd", "source", "stdout", "stderr", "report", "path", "host", "gpus", "timeout", "env", "argv"};
    answers: {"id", "returncode", "timed_out"}. End of input: live runs are killed, then exit.
    """
    import torch
    import torch._dynamo  # noqa: F401 - the first optimizer step imports it: another ~2 s a run

    import torchdevlint.verify.emulation
    import torchdevlint.verify.host  # noqa: F401

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent ends the server by closing its input
    requests_fd = sys.stdin.fileno()
    answers = sys.stdout
    live: dict[int, tuple[object, float, bool]] = {}  # pid -> (id, deadline, killed)
    pending = b""
    open_input = True

    def answer(message: dict[str, object]) -> None:
        answers.write(json.dumps(message) + "\n")
        answers.flush()

    def kill(pid: int) -> None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    while open_input or live:
        readable: list[int] = []
        if open_input:
            readable, _, _ = select.select([requests_fd], [], [], 0.02 if live else None)
        else:
            time.sleep(0.02)
        if readable:
            chunk = os.read(requests_fd, 1 << 16)
            if not chunk:
                open_input = False
                for pid in live:
                    kill(pid)
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                answers.flush()
                pid = os.fork()
                if pid == 0:
                    _run_forked(request)
                live[pid] = (request["id"], time.monotonic() + float(request["timeout"]), False)
        now = time.monotonic()
        for pid, (request_id, deadline, killed) in list(live.items()):
            if not killed and now > deadline:
                kill(pid)
                live[pid] = (request_id, deadline, True)
        while live:
            try:
                pid, wait_status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid in live:
                request_id, _, killed = live.pop(pid)
                kill(pid)  # what the run left behind in its group (DataLoader workers)
                if open_input:
                    code = os.waitstatus_to_exitcode(wait_status)
                    answer({"id": request_id, "returncode": code, "timed_out": killed})
    return 0


def _flush_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torchdevlint.verify.child")
    parser.add_argument("--probe", action="store_true")
    parser.add_argument("--serve", action="store_true")
    parser.add_argument("--host", choices=[h.value for h in RunHost])
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--path")
    parser.add_argument("--report", type=Path)
    parser.add_argument("--argv", default="[]", help="the program's arguments, as a JSON list")
    parser.add_argument("--guard", default="null", help="the run's mirror and the folders it stands for, as JSON")
    parser.add_argument("--budget", default="null", help="when the run may stop early, as JSON")
    parser.add_argument("--processes", type=int, default=1, help="ranks, as torchrun --nproc_per_node starts them")
    parser.add_argument("--nodes", type=int, default=1, help="machines of ranks, as torchrun --nnodes starts them")
    args = parser.parse_args(argv)
    if args.probe:
        return probe()
    if args.serve:
        return serve()
    if args.host is None or args.path is None or args.report is None:
        parser.error("--host, --path and --report are required")
    source = sys.stdin.buffer.read().decode("utf-8")
    guard = json.loads(args.guard)
    report = run_program(source, args.path, RunHost(args.host), args.gpus, [str(a) for a in json.loads(args.argv)],
                         guard if isinstance(guard, dict) else None, Budget.from_json(json.loads(args.budget)),
                         args.processes, args.nodes)
    _flush_streams()
    args.report.write_text(json.dumps(report.to_json()))
    # Threads the program left behind (DataLoader workers, timers) must not keep it alive.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
