"""The parent side of `torchdevlint verify`: lint, fix in memory, run each version in a child, judge.

Never imports torch: each run is a fresh `python -m torchdevlint.verify.child` process.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import torchdevlint
from torchdevlint.budget import DEFAULT_FILE_SECONDS, AnalysisTimeout, Deadline
from torchdevlint.diagnostics import Diagnostic, FileError
from torchdevlint.programs import read_program
from torchdevlint.rule import Rule
from torchdevlint.sourcefile import CellLines, SourceError, line_name
from torchdevlint.verify.directive import (
    DirectiveError,
    ProgramHost,
    VerifySpec,
    read_directive,
    scenarios_for,
    with_host,
)
from torchdevlint.verify.expected_errors import fix_agrees_on, not_emulated, predicted_by, proof_of
from torchdevlint.verify.proof import EXERCISED, Budget
from torchdevlint.verify.protocol import (
    CHILD_MODULE,
    ChildReport,
    ErrorInfo,
    RunHost,
    RunStatus,
    last_result,
    string_map,
)
from torchdevlint.verify.sites import (
    FindingSite,
    finding_sites,
    line_map,
    predicted_elsewhere,
    program_line,
    shown_by,
)
from torchdevlint.verify.workspace import SCRATCH_PREFIX, mirror, mirrored

DEFAULT_TIMEOUT = 300.0
# TDL0xx rules find bugs that fail at run time; TDL1xx (performance) and TDL2xx (portability)
# findings are fixed along with them but have no failure to reproduce.
CORRECTNESS_PREFIX = "TDL0"
_PACKAGE_ROOT = str(Path(torchdevlint.__file__).resolve().parent.parent)
# Results agree when their text matches with numbers equal to 0.1% (GPU and CPU round differently).
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
_REL_TOLERANCE = 1e-3
_ABS_TOLERANCE = 1e-6
_OUTPUT_TAIL = 4000


class DeviceChoice(Enum):
    AUTO = "auto"
    CUDA = "cuda"
    EMULATED = "emulated"


class Accelerator(Enum):
    CUDA = "cuda"
    EMULATED = "emulated"


class Verdict(Enum):
    FIX_VERIFIED = "fix verified"
    BUG_NOT_REPRODUCED = "bug not reproduced"
    # The program cannot run on this machine as given (a package, a file, its arguments).
    NOT_RUNNABLE = "not runnable here"
    FIX_FAILED = "fix failed"
    # The original fails as its finding predicts, and no fix is offered for that finding: the
    # bug is shown, and there is no fix to prove.
    BUG_REPRODUCED = "bug reproduced"
    RESULTS_DIFFER = "results differ"
    NO_FINDING = "no finding"


class ComparisonStatus(Enum):
    MATCH = "match"
    DIFFER = "differ"
    SKIPPED = "skipped"


class VerifyError(Exception):
    """Verification cannot start (no torch, no GPU for --device cuda); the message says why."""


@dataclass(frozen=True)
class AcceleratorInfo:
    kind: Accelerator
    device_count: int
    # Why this accelerator, in words for the report header.
    reason: str
    device_name: str | None = None


@dataclass(frozen=True)
class RunOutcome:
    host: RunHost
    status: RunStatus
    error: ErrorInfo | None
    result: str | None
    seconds: float
    stdout_tail: str
    stderr_tail: str
    # Why a run that went well ended before the program did (its findings exercised, --seconds, --steps).
    stopped: str | None = None
    # The first line of each finding whose statement never ran to completion.
    unreached: tuple[int, ...] = ()
    # On a real GPU: it drew random numbers with a CUDA generator (see `ChildReport`).
    gpu_random: bool = False

    def to_json(self) -> dict[str, object]:
        return {
            "host": self.host.value,
            "status": self.status.value,
            "error": self.error.to_json() if self.error else None,
            "result": self.result,
            "seconds": round(self.seconds, 2),
            "stopped": self.stopped,
            "unreached": list(self.unreached),
            "gpu_random": self.gpu_random,
        }


@dataclass(frozen=True)
class Comparison:
    status: ComparisonStatus
    reason: str
    expected: str | None = None
    actual: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"status": self.status.value, "reason": self.reason, "expected": self.expected, "actual": self.actual}


@dataclass(frozen=True)
class ProgramReport:
    path: str
    accelerator: Accelerator
    spec: VerifySpec
    findings: tuple[Diagnostic, ...]
    verdict: Verdict
    note: str
    original: RunOutcome | None = None
    fixed: RunOutcome | None = None
    # The original program on a CPU without any GPU: where the device bug cannot occur.
    reference: RunOutcome | None = None
    comparison: Comparison | None = None
    # For a notebook: where its cells lie in the program that was run (error lines map to cells).
    cells: tuple[CellLines, ...] = ()
    # Where findings need different machines: the runs on the others (this report's own runs
    # are the first machine's; its verdict is `fix verified` only if every machine's is).
    more: tuple[ScenarioReport, ...] = ()

    def program_line(self, line: int) -> str:
        """A line of the program that ran, as the user finds it: `line 7` or `cell 3, line 2`."""
        return line_name(self.cells, line)

    @property
    def failed(self) -> bool:
        return self.verdict is not Verdict.FIX_VERIFIED and self.verdict is not Verdict.NO_FINDING

    def to_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "device": self.accelerator.value,
            "host": self.spec.host.value,
            "gpus": self.spec.gpus,
            "processes": self.spec.processes,
            "nodes": self.spec.nodes,
            # Where host and gpus came from: "directive", "findings", "command line" or "default".
            "host_from": self.spec.origin,
            "findings": [d.to_json() for d in self.findings],
            "original": self.original.to_json() if self.original else None,
            "fixed": self.fixed.to_json() if self.fixed else None,
            "reference": self.reference.to_json() if self.reference else None,
            "comparison": self.comparison.to_json() if self.comparison else None,
            "verdict": self.verdict.value,
            "note": self.note,
            "more_hosts": [scenario.to_json() for scenario in self.more],
        }


@dataclass(frozen=True)
class ScenarioReport:
    """The runs on one more machine a program's findings need, and their verdict."""

    spec: VerifySpec
    codes: tuple[str, ...]
    verdict: Verdict
    note: str
    original: RunOutcome
    fixed: RunOutcome
    comparison: Comparison
    # Runs that prove nothing: the fixes of `codes` change the program here, so the fixed
    # program must run and agree with the original (see `RuntimeProof.fix_agrees_on`).
    agreement: bool = False

    @property
    def machine(self) -> str:
        return describe_spec(self.spec)

    @property
    def summary(self) -> str:
        """For the program's note: `also on 1 GPU for TDL001: fix verified`."""
        codes = ", ".join(sorted(set(self.codes)))
        if not self.agreement:
            return f"also on {self.machine} for {codes}: {self.verdict.value}"
        if self.verdict in (Verdict.FIX_FAILED, Verdict.RESULTS_DIFFER):
            return f"on {self.machine}, where the fix of {codes} changes the program: {self.verdict.value} ({self.note})"
        if self.original.status is not RunStatus.OK:
            return f"on {self.machine}, where the fix of {codes} changes the program, the original does not run: unchecked"
        return f"on {self.machine}, where the fix of {codes} changes the program, the fixed program runs and agrees"

    def to_json(self) -> dict[str, object]:
        return {
            "host": self.spec.host.value,
            "gpus": self.spec.gpus,
            "codes": list(self.codes),
            "original": self.original.to_json(),
            "fixed": self.fixed.to_json(),
            "comparison": self.comparison.to_json(),
            "verdict": self.verdict.value,
            "note": self.note,
            "agreement": self.agreement,
        }


# -- the accelerator -------------------------------------------------------------------------


def _child_command(*args: str) -> list[str]:
    return [sys.executable, "-m", CHILD_MODULE, *args]


def _child_env(host: RunHost, jobs: int, *, hide_gpus: bool = True) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
    env["PYTHONHASHSEED"] = "0"  # set and dict-of-str order alike in every run, for RESULT lines
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # verify never writes beside the user's files
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // max(1, jobs))))
    if hide_gpus and not host.real_gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""  # the emulated GPU and the CPU hosts never touch a real one
    return env


def torch_installed() -> bool:
    from importlib.util import find_spec

    return find_spec("torch") is not None


def gpu_device_nodes_present() -> bool:
    """Could this machine have a CUDA GPU at all? Checked without importing torch."""
    if not sys.platform.startswith("linux"):
        return sys.platform != "darwin"
    return any(Path(node).exists() for node in ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg"))


def seconds(value: object) -> float:
    """A run request's timeout (a JSON number)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise VerifyError(f"a run request's timeout must be a number, not {value!r}")


def probe_cuda(timeout: float = 120.0) -> dict[str, object]:
    """Ask torch, in a child process, what CUDA this machine has."""
    completed = subprocess.run(
        _child_command("--probe"), capture_output=True, text=True, timeout=timeout,
        env=_child_env(RunHost.CUDA, 1), check=False,
    )
    try:
        data: object = json.loads(completed.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise VerifyError(f"cannot ask torch about CUDA: {completed.stderr.strip()[-500:]}") from None
    if not isinstance(data, dict):
        raise VerifyError(f"cannot ask torch about CUDA: unexpected answer {data!r}")
    if data.get("torch") is None:
        raise VerifyError(f"torchdevlint verify needs PyTorch: {data.get('error')}")
    return data


def choose_accelerator(choice: DeviceChoice) -> AcceleratorInfo:
    if not torch_installed():
        raise VerifyError("torchdevlint verify needs PyTorch (pip install torch)")
    if choice is DeviceChoice.EMULATED:
        return AcceleratorInfo(Accelerator.EMULATED, 0, "--device emulated")
    if choice is DeviceChoice.AUTO and not gpu_device_nodes_present():
        return AcceleratorInfo(Accelerator.EMULATED, 0, "--device auto: this machine has no GPU device")
    data = probe_cuda()
    if data.get("cuda_available"):
        reported = data.get("device_count")
        count = reported if isinstance(reported, int) and reported > 0 else 1
        name = str(data.get("device_name") or "CUDA GPU")
        return AcceleratorInfo(Accelerator.CUDA, count, f"--device {choice.value}: {count} x {name}", name)
    if choice is DeviceChoice.CUDA:
        raise VerifyError(
            f"--device cuda: no CUDA GPU is available (torch {data.get('torch')}: "
            "torch.cuda.is_available() is False); use --device emulated"
        )
    return AcceleratorInfo(Accelerator.EMULATED, 0, "--device auto: torch.cuda.is_available() is False")


# -- one run ---------------------------------------------------------------------------------


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass(frozen=True)
class _Finished:
    returncode: int | None
    timed_out: bool


class _ForkServer:
    """One child that imports torch once and forks every run from there (POSIX only).

    A run is still a fresh process with nothing but torch imported; it just skips the ~1.5 s
    a new interpreter spends importing torch. The server ends, killing its runs, when its
    input closes: when this process ends or is interrupted.
    """

    def __init__(self, jobs: int) -> None:
        self._jobs = jobs
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._waiting: dict[int, tuple[threading.Event, list[_Finished]]] = {}
        self._next_id = 0
        self._failure: str | None = None
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the launcher, closed by close()

    def _start(self) -> subprocess.Popen[bytes]:
        if self._process is None:
            self._process = subprocess.Popen(
                _child_command("--serve"), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                env=_child_env(RunHost.CPU, self._jobs, hide_gpus=False), start_new_session=True,
            )
            self._reader = threading.Thread(target=self._read_answers, args=(self._process,), daemon=True)
            self._reader.start()
        return self._process

    def _read_answers(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            answer = json.loads(line)
            with self._lock:
                event, box = self._waiting.pop(answer["id"], (None, []))
            if event is not None:
                box.append(_Finished(answer["returncode"], bool(answer["timed_out"])))
                event.set()
        self._log.seek(0)
        log = self._log.read().decode("utf-8", errors="replace").strip()
        with self._lock:
            self._failure = "the verify server exited" + (f": {log.splitlines()[-1]}" if log else "")
            waiting, self._waiting = self._waiting, {}
        for event, _ in waiting.values():
            event.set()

    def run(self, request: dict[str, object]) -> _Finished:
        event: threading.Event = threading.Event()
        box: list[_Finished] = []
        with self._lock:
            if self._failure is not None:
                raise VerifyError(self._failure)
            process = self._start()
            self._next_id += 1
            request = {**request, "id": self._next_id}
            self._waiting[self._next_id] = (event, box)
            assert process.stdin is not None
            try:
                process.stdin.write(json.dumps(request).encode() + b"\n")
                process.stdin.flush()
            except BrokenPipeError:
                self._waiting.pop(self._next_id, None)
                raise VerifyError(self._failure or "the verify server exited") from None
        event.wait()
        if not box:
            raise VerifyError(self._failure or "the verify server exited")
        return box[0]

    def close(self) -> None:
        with self._lock:
            process, self._process = self._process, None
        if process is not None:
            assert process.stdin is not None
            try:
                process.stdin.close()
            except BrokenPipeError:
                pass
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                _kill_group(process.pid)
                process.wait()
            # The reader stops at the end of the server's output; then its pipe can be closed.
            if self._reader is not None:
                self._reader.join(timeout=30)
            if process.stdout is not None and (self._reader is None or not self._reader.is_alive()):
                process.stdout.close()
        self._log.close()


class _Spawner:
    """A new interpreter per run: where fork is unavailable or unwise (Windows, macOS)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: set[subprocess.Popen[bytes]] = set()

    def run(self, request: dict[str, object], jobs: int) -> _Finished:
        command = _child_command("--host", str(request["host"]), "--gpus", str(request["gpus"]),
                                 "--processes", str(request.get("processes", 1)),
                                 "--nodes", str(request.get("nodes", 1)),
                                 "--path", str(request["path"]), "--report", str(request["report"]),
                                 "--argv", json.dumps(request.get("argv", [])),
                                 "--guard", json.dumps(request.get("guard")),
                                 "--budget", json.dumps(request.get("budget")))
        env = {**_child_env(RunHost.CPU, jobs, hide_gpus=False), **string_map(request["env"])}
        with open(str(request["source"]), "rb") as source, open(str(request["stdout"]), "wb") as out, \
                open(str(request["stderr"]), "wb") as err:
            process = subprocess.Popen(command, cwd=str(request["cwd"]), env=env, stdin=source, stdout=out,
                                       stderr=err, start_new_session=True)
            with self._lock:
                self._live.add(process)
            try:
                process.wait(timeout=seconds(request["timeout"]))
                return _Finished(process.returncode, False)
            except subprocess.TimeoutExpired:
                _kill_group(process.pid)
                process.wait()
                return _Finished(process.returncode, True)
            finally:
                with self._lock:
                    self._live.discard(process)

    def close(self) -> None:
        with self._lock:
            for process in self._live:
                _kill_group(process.pid)


@dataclass(frozen=True)
class RunPlace:
    """Where and how a program runs: its working folder (default: its own) and extra environment."""

    cwd: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)


class Launcher:
    """Starts runs: forked from a torch-importing server on Linux, spawned elsewhere."""

    def __init__(self, jobs: int, fork: bool | None = None, isolate: bool = True) -> None:
        self.jobs = jobs
        # Each run restricts its whole process tree's writes to its scratch folder (`isolation`).
        self.isolate = isolate
        use_fork = sys.platform.startswith("linux") if fork is None else fork
        self._server = _ForkServer(jobs) if use_fork else None
        self._spawner = _Spawner()

    def run(self, source: str, path: str, host: RunHost, gpus: int, timeout: float,
            argv: tuple[str, ...] = (), place: RunPlace | None = None, budget: Budget | None = None,
            processes: int = 1, nodes: int = 1) -> RunOutcome:
        """Run `source` as the program at `path` on `host`, in a fresh process, in a mirror of its
        folder (as `processes` ranks on each of `nodes` machines, where more than one)."""
        place = place or RunPlace()
        started = time.monotonic()
        program = Path(path).resolve()
        folder = (place.cwd or program.parent).resolve()
        with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX) as scratch:
            files = {name: str(Path(scratch, name)) for name in ("source.py", "stdout", "stderr", "outcome.json")}
            work = mirror(folder, Path(scratch, "work"))
            Path(files["source.py"]).write_text(source, encoding="utf-8")
            env = {} if host.any_gpu else {"CUDA_VISIBLE_DEVICES": ""}
            # Temporary files (`tempfile`, torch.compile's caches) go to the run's scratch too.
            temporary = Path(scratch, "tmp")
            temporary.mkdir()
            env["TMPDIR"] = str(temporary)
            request: dict[str, object] = {
                "cwd": str(work), "source": files["source.py"], "stdout": files["stdout"],
                "stderr": files["stderr"], "report": files["outcome.json"],
                # The program's own path in the mirror: `__file__`, tracebacks and its folder on sys.path.
                "path": str(mirrored(program, folder, work)), "host": host.value, "gpus": gpus, "timeout": timeout,
                "processes": processes, "nodes": nodes,
                # The emulated GPU reads the program's own CUDA_VISIBLE_DEVICES; a CPU host has no GPU to see.
                "env": {**env, **place.env},
                "argv": list(argv),
                "guard": {"mirror": str(work), "protected": sorted({str(folder), str(program.parent)}),
                          "scratch": str(Path(scratch).resolve()),
                          "writable": [str(Path(scratch).resolve())] if self.isolate else None},
                "budget": (budget or Budget()).to_json(),
            }
            try:
                finished = self._server.run(request) if self._server else self._spawner.run(request, self.jobs)
            except VerifyError as error:
                return RunOutcome(host, RunStatus.ERROR, ErrorInfo("VerifyError", str(error)), None,
                                  time.monotonic() - started, "", "")
            seconds = time.monotonic() - started
            stdout = Path(files["stdout"]).read_bytes()
            stderr = Path(files["stderr"]).read_bytes()
            report = self._report(Path(files["outcome.json"]), finished, stderr, timeout)
        text = stdout.decode("utf-8", errors="replace")
        if report.seconds is not None:
            seconds = report.seconds  # the run's own time, not its wait for the fork server
        return RunOutcome(host, report.status, report.error, last_result(text), seconds, text[-_OUTPUT_TAIL:],
                          _tail(stderr), report.stopped, report.unreached, report.gpu_random)

    @staticmethod
    def _report(path: Path, finished: _Finished, stderr: bytes, timeout: float) -> ChildReport:
        if finished.timed_out:
            return ChildReport(RunStatus.TIMEOUT, ErrorInfo("Timeout", f"still running after {timeout:g} s"))
        try:
            return ChildReport.from_json(json.loads(path.read_text()))
        except (OSError, ValueError):
            pass
        # The process died without reporting (a crash, a signal, os._exit in the program).
        code = finished.returncode
        if code == 0:
            return ChildReport(RunStatus.OK)
        last = (stderr.decode("utf-8", errors="replace").strip().splitlines() or [""])[-1]
        why = f"killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
        return ChildReport(RunStatus.ERROR, ErrorInfo("ProcessExit", f"{why}: {last}" if last else why))

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self._spawner.close()


def _tail(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")[-_OUTPUT_TAIL:]


# -- judging ---------------------------------------------------------------------------------


def results_agree(expected: str, actual: str) -> bool:
    if expected == actual:
        return True
    expected_parts, actual_parts = _NUMBER.split(expected), _NUMBER.split(actual)
    expected_numbers, actual_numbers = _NUMBER.findall(expected), _NUMBER.findall(actual)
    if expected_parts != actual_parts or len(expected_numbers) != len(actual_numbers):
        return False
    return all(
        math.isclose(float(a), float(b), rel_tol=_REL_TOLERANCE, abs_tol=_ABS_TOLERANCE)
        for a, b in zip(expected_numbers, actual_numbers, strict=True)
    )


def compare_results(original: RunOutcome, fixed: RunOutcome, reference: RunOutcome | None) -> Comparison:
    """The fixed program's RESULT against the original's, on the same host or else on the CPU."""
    if fixed.status is not RunStatus.OK:
        return Comparison(ComparisonStatus.SKIPPED, "the fixed program did not finish")
    if fixed.result is None:
        if fixed.stopped is not None:
            return Comparison(ComparisonStatus.SKIPPED, f"the fixed program was stopped before a RESULT line: "
                                                        f"{fixed.stopped}")
        return Comparison(ComparisonStatus.SKIPPED, "the fixed program printed no RESULT line")
    if original.result is not None:
        expected, against = original.result, f"the original on the {original.host.label}"
    elif reference is not None and reference.status is RunStatus.OK and reference.result is not None:
        expected, against = reference.result, "the original on the CPU"
        if fixed.gpu_random and not results_agree(expected, fixed.result):
            return Comparison(ComparisonStatus.SKIPPED, (
                "the fixed program drew random numbers on the GPU, whose generator draws other "
                "numbers than the CPU's"), expected, fixed.result)
    else:
        fails_on_cpu = reference is not None and reference.status is not RunStatus.OK
        why = "the original printed no RESULT line" + (" (it fails on the CPU too)" if fails_on_cpu else "")
        return Comparison(ComparisonStatus.SKIPPED, why, None, fixed.result)
    if results_agree(expected, fixed.result):
        return Comparison(ComparisonStatus.MATCH, f"the fixed program's RESULT matches {against}",
                          expected, fixed.result)
    return Comparison(ComparisonStatus.DIFFER, f"the fixed program's RESULT differs from {against}",
                      expected, fixed.result)


def not_runnable(run: RunOutcome, sites: Sequence[FindingSite] = ()) -> str | None:
    """Why a run could not get going on this machine as given, in one line; None if it could."""
    error = run.error
    if run.status is not RunStatus.ERROR or error is None:
        return None
    message = error.message
    first_line = message.strip().splitlines()[0] if message.strip() else ""
    if (error.importing is not None and error.type != "ModuleNotFoundError"
            and not predicted_by([site.code for site in sites], error)):
        # An installed package that does not import here (built for another torch, say).
        package = error.importing.split(".")[0]
        return f"importing `{package}` fails here: {error.type}: {first_line}"
    if error.type == "ModuleNotFoundError":
        missing = re.search(r"No module named '([^']+)'", message)
        package = missing.group(1).split(".")[0] if missing else message
        return f"needs the package `{package}`, which is not installed here"
    if error.type == "ImportError" and "relative import" in message:
        return "it is a module of a package (it imports relatively), not a program to run on its own"
    if error.type in ("FileNotFoundError", "NotADirectoryError"):
        missing = re.search(r"No such file or directory: (.+)$", message)
        name = missing.group(1) if missing else message
        return f"needs a file that is not there: {name} (run it where its files are with --cwd, or name them after --)"
    if error.type == "SystemExit" and message == "2" and "usage:" in run.stderr_tail:
        complaint = [line for line in run.stderr_tail.strip().splitlines() if line.strip()]
        return f"needs command-line arguments (give them after --): {complaint[-1] if complaint else 'usage'}"
    if error.type in ("URLError", "ConnectionError", "gaierror", "HTTPError", "SSLError", "ReadTimeout") \
            or _NO_NETWORK.search(message):
        # torchvision's downloads wrap the failure in a RuntimeError ("Error downloading …").
        return f"needs the network: {error.type}: {first_line}"
    if _NO_DATASET.search(message):
        return f"needs its dataset, which is not there: {error.type}: {first_line}"
    if error.type == "PermissionError" and "Permission denied" in message:
        # Under verify's isolation a program may write only to its own copy of its folder:
        # `os.makedirs("../../data")`, a download into `~/.cache/torch`.
        return f"writes outside its folder, which verify does not allow: {first_line}"
    if error.type == "SystemExit" and message not in ("0", "None", "") and sites \
            and all(min(site.statement, default=site.line) in run.unreached for site in sites):
        # `sys.exit(1)` after printing what it wants, before any flagged line ran.
        said = [line for line in (run.stderr_tail.strip() or run.stdout_tail.strip()).splitlines() if line.strip()]
        return (f"exits with status {message} before any flagged line runs: "
                f"{said[-1].strip() if said else 'no message'} (give its arguments after --)")
    return None


# Failures that mean the machine has no network, whatever exception carries them.
_NO_NETWORK = re.compile(r"Temporary failure in name resolution|Name or service not known|nodename nor servname"
                         r"|Network is unreachable|Failed to establish a new connection|urlopen error")
# A dataset that is not on this machine: torchvision's "Dataset not found", or a loader over
# an empty folder ("num_samples should be a positive integer value, but got num_samples=0").
_NO_DATASET = re.compile(r"Dataset not found|but got num_samples=0")


def _lines_named(lines: Sequence[int], where: Callable[[int], str]) -> str:
    """`line 16`, or `line 16, line 20` (a notebook's as `where` names them)."""
    return ", ".join(where(line) for line in sorted(set(lines)))


def _fixed_failure(original: ErrorInfo, fixed: RunOutcome, where: Callable[[int], str]) -> str:
    """What became of the fixed program: the same failure, or another one, said as it is."""
    if fixed.status is RunStatus.TIMEOUT:
        return "the fixed program times out"
    failure = fixed.error
    if failure is None:
        return "the fixed program does not finish"
    if failure.type == original.type and failure.line == original.line and failure.message == original.message:
        return "so does the fixed program"
    at = f" at {where(failure.line)}" if failure.line else ""
    first_line = failure.message.strip().splitlines()[0] if failure.message.strip() else ""
    return f"the fixed program fails{at} with another error, {failure.type}: {first_line}"


def judge(sites: Sequence[FindingSite], original: RunOutcome, fixed: RunOutcome, comparison: Comparison,
          where: Callable[[int], str] = lambda line: f"line {line}",
          fixed_lines: Collection[int] | None = None) -> tuple[Verdict, str]:
    """The verdict, and why: the original's error counts only where it is its findings' bug.

    `fixed_lines`: the lines of the findings that have a fix (default: every finding's).
    """
    if fixed_lines is None:
        fixed_lines = {site.line for site in sites}
    error = original.error
    shown = shown_by(sites, error) if original.status is RunStatus.ERROR else None
    if shown is not None:
        assert error is not None
        raised = f" at {where(error.line)}" if error.line else ""
        predicted = f"the error {shown.code} ({where(shown.line)}) predicts"
        if fixed.status is not RunStatus.OK:
            if shown.line not in fixed_lines:
                return Verdict.BUG_REPRODUCED, f"the original fails{raised} with {predicted}; no fix is offered for it"
            return Verdict.FIX_FAILED, f"the original fails{raised} with {predicted}; {_fixed_failure(error, fixed, where)}"
        if comparison.status is ComparisonStatus.DIFFER:
            return Verdict.RESULTS_DIFFER, "the fixed program runs but computes something else"
        return Verdict.FIX_VERIFIED, f"the original fails{raised} with {predicted}; the fixed program runs"
    if original.status is RunStatus.OK:
        if fixed.status is not RunStatus.OK:
            return Verdict.FIX_FAILED, "the original runs, the fixed program does not"
        if comparison.status is ComparisonStatus.DIFFER:
            return Verdict.RESULTS_DIFFER, "both run, but the fix changes the result"
        if original.stopped == EXERCISED:
            return Verdict.BUG_NOT_REPRODUCED, (
                "the original ran every flagged line and a use of its value without error on this host")
        never = [site.line for site in sites if site.statement and min(site.statement) in original.unreached]
        if never and len(never) == len(sites):
            return Verdict.BUG_NOT_REPRODUCED, (
                f"the original runs without error on this host, but never runs the flagged "
                f"{_lines_named(never, where)}: nothing it runs calls the code "
                f"{'they are' if len(set(never)) > 1 else 'it is'} in")
        if never:
            return Verdict.BUG_NOT_REPRODUCED, (
                f"the original runs without error on this host; it never runs {_lines_named(never, where)}")
        return Verdict.BUG_NOT_REPRODUCED, "the original runs without error on this host"
    if original.status is RunStatus.TIMEOUT:
        return Verdict.BUG_NOT_REPRODUCED, "the original timed out before the bug could show"
    reason = not_runnable(original, sites)
    if reason is not None:
        return Verdict.NOT_RUNNABLE, reason
    assert error is not None
    at = f" at {where(error.line)}" if error.line else ""
    if predicted_elsewhere(sites, error):
        return Verdict.BUG_NOT_REPRODUCED, (
            f"the original fails{at} with a device error, but not through a flagged line or a use of its value: "
            "another bug, not the one found")
    return Verdict.BUG_NOT_REPRODUCED, f"the original fails{at}, but not with an error its findings predict"


# -- programs --------------------------------------------------------------------------------


def proven_findings(findings: Iterable[Diagnostic]) -> list[Diagnostic]:
    """The findings a run can prove: correctness bugs fail; slow or dated code still runs, and
    a bug that needs a machine verify does not emulate (the rule's `proof.not_emulated`) cannot show."""
    return [d for d in findings if d.code.startswith(CORRECTNESS_PREFIX) and not_emulated(d.code) is None]


# The rules a program is linted with, and their options.
ConfiguredRules = tuple[tuple[type[Rule], ...], Mapping[str, object]]


@dataclass(frozen=True)
class VerifySettings:
    # Each program's rules, as `check` configures its file (its nearest configuration,
    # `per-file-ignores` applied).
    rules_for: Callable[[str], ConfiguredRules]
    accelerator: AcceleratorInfo
    timeout: float = DEFAULT_TIMEOUT
    jobs: int = 2
    # `--host`/`--gpus`: the machine for every program, over directives and findings.
    host: ProgramHost | None = None
    gpus: int | None = None
    # `--cwd`/`--env`: where every program runs (default: its own folder) and extra environment.
    place: RunPlace = field(default_factory=RunPlace)
    # `verify PROGRAM -- ARGS`: the command line, over a directive's `argv=`.
    argv: tuple[str, ...] | None = None
    # The proof budget: runs stop once their findings are exercised, unless `--run-to-end`;
    # `--seconds`/`--steps` stop them sooner.
    run_to_end: bool = False
    seconds: float | None = None
    steps: int | None = None
    # Told when each run starts and ends, and about long runs every few seconds.
    progress: Callable[[RunEvent], None] | None = None
    # Whether each run's process tree may write only to its scratch folder (Landlock); off
    # only with `--allow-writes` where the machine cannot do it.
    isolate: bool = True


class RunPhase(Enum):
    STARTED = "started"
    RUNNING = "still running"
    FINISHED = "finished"


@dataclass(frozen=True)
class RunEvent:
    """Progress, for a user watching: which program, which run, where, how long so far."""

    path: str
    # "original", "fixed" or "reference".
    role: str
    host: RunHost
    phase: RunPhase
    seconds: float
    outcome: RunOutcome | None = None


class _Progress:
    """Tells `listener` when runs start and end, and every `every` seconds which are still going."""

    def __init__(self, listener: Callable[[RunEvent], None] | None, every: float = 15.0) -> None:
        self.listener = listener
        self.every = every
        self._lock = threading.Lock()
        self._live: dict[int, tuple[str, str, RunHost, float]] = {}
        self._next = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if listener is not None:
            self._thread = threading.Thread(target=self._beat, daemon=True, name="verify-progress")
            self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.every):
            now = time.monotonic()
            with self._lock:
                live = list(self._live.values())
            for path, role, host, started in live:
                if now - started >= self.every:
                    self._tell(RunEvent(path, role, host, RunPhase.RUNNING, now - started))

    def _tell(self, event: RunEvent) -> None:
        if self.listener is not None:
            try:
                self.listener(event)
            except Exception:  # noqa: BLE001 - progress is a courtesy; a closed stream must not end the runs
                self.listener = None

    def run(self, path: str, role: str, host: RunHost, start: Callable[[], RunOutcome]) -> RunOutcome:
        started = time.monotonic()
        with self._lock:
            self._next += 1
            key = self._next
            self._live[key] = (path, role, host, started)
        self._tell(RunEvent(path, role, host, RunPhase.STARTED, 0.0))
        try:
            outcome = start()
        finally:
            with self._lock:
                self._live.pop(key, None)
        self._tell(RunEvent(path, role, host, RunPhase.FINISHED, outcome.seconds, outcome))
        return outcome

    def close(self) -> None:
        self._stop.set()


@dataclass
class _Scenario:
    """One machine a program runs on, the findings it proves, and its two runs."""

    spec: VerifySpec
    host: RunHost
    codes: tuple[str, ...]
    # Where those findings are, in the original program.
    sites: tuple[FindingSite, ...]
    original: Future[RunOutcome]
    fixed: Future[RunOutcome]
    agreement: bool = False


@dataclass
class _Pending:
    path: str
    spec: VerifySpec
    findings: tuple[Diagnostic, ...]
    accelerator: Accelerator
    note: str = ""
    # The first is the machine that proves the most findings.
    scenarios: list[_Scenario] = field(default_factory=list)
    reference: Future[RunOutcome] | None = None
    cells: tuple[CellLines, ...] = ()


def describe_spec(spec: VerifySpec) -> str:
    if spec.host is ProgramHost.GPU:
        ranks = f", {spec.processes} processes" if spec.processes > 1 else ""
        gpus = f"{spec.gpus} GPU{'s' if spec.gpus != 1 else ''}{ranks}"
        return f"{spec.nodes} machines of {gpus}" if spec.nodes > 1 else gpus
    return {
        ProgramHost.CPU: "a machine without a GPU",
        ProgramHost.CPU_LOADS_GPU_CHECKPOINT: "a CPU-only machine loading checkpoints saved on a GPU",
        ProgramHost.MPS: "an Apple GPU",
    }[spec.host]


def _target_host(spec: VerifySpec, accelerator: AcceleratorInfo) -> tuple[RunHost, Accelerator, str]:
    if spec.host is ProgramHost.CPU_LOADS_GPU_CHECKPOINT:
        return RunHost.CPU_LOADS_GPU_CHECKPOINT, Accelerator.EMULATED, ""
    if spec.host is ProgramHost.CPU:
        return RunHost.CPU, Accelerator.EMULATED, ""
    if spec.host is ProgramHost.MPS:
        return RunHost.EMULATED_MPS, Accelerator.EMULATED, ""
    if accelerator.kind is Accelerator.CUDA:
        if accelerator.device_count >= spec.gpus:
            return RunHost.CUDA, Accelerator.CUDA, ""
        return RunHost.EMULATED, Accelerator.EMULATED, (
            f"needs {spec.gpus} GPUs, this machine has {accelerator.device_count}: ran on the emulated GPU; "
        )
    return RunHost.EMULATED, Accelerator.EMULATED, ""


def verify_programs(paths: Iterable[str], settings: VerifySettings) -> Iterator[ProgramReport | FileError]:
    """Reports in the order of `paths`; every program's runs are queued at once, `jobs` at a time."""
    launcher = Launcher(settings.jobs, isolate=settings.isolate)
    pool = ThreadPoolExecutor(max_workers=max(1, settings.jobs), thread_name_prefix="verify")
    progress = _Progress(settings.progress)
    pending: list[_Pending | FileError] = []
    try:
        for path in paths:
            pending.append(_start(path, settings, pool, launcher, progress))
        for item in pending:
            yield item if isinstance(item, FileError) else _finish(item)
    finally:
        for item in pending:
            if isinstance(item, _Pending):
                futures = [future for scenario in item.scenarios for future in (scenario.original, scenario.fixed)]
                for future in (*futures, item.reference):
                    if future is not None:
                        future.cancel()
        # Closing the launcher kills runs still under way (after an interrupt) and ends the server.
        progress.close()
        launcher.close()
        pool.shutdown(wait=True, cancel_futures=True)


def _start(path: str, settings: VerifySettings, pool: ThreadPoolExecutor, launcher: Launcher,
           progress: _Progress) -> _Pending | FileError:
    try:
        # A notebook runs as its code cells in order, IPython syntax removed.
        program = read_program(path)
        text = program.text
        spec = read_directive(text)
        deadline = Deadline(DEFAULT_FILE_SECONDS)
        rules, rule_options = settings.rules_for(path)
        findings = tuple(program.lint(rules, rule_options, deadline=deadline))
        if program.errors:
            first = program.errors[0]
            cell = f"cell {first.cell}, " if first.cell is not None else ""
            return FileError(path, f"cannot run: {cell}line {first.line}: {first.message}")
        fixed_text = text
        if proven_findings(findings):
            fixed_text = program.fix(rules, rule_options, unsafe=True, deadline=deadline).text
    except SourceError as error:
        return FileError(path, str(error))
    except DirectiveError as error:
        return FileError(path, f"bad `# verify:` directive: {error}")
    except AnalysisTimeout as error:
        return FileError(path, str(error))
    except Exception as error:  # noqa: BLE001 - a syntax error or a linter bug: report, go on
        message = str(getattr(error, "message", None) or error).strip()
        return FileError(path, f"cannot lint: {type(error).__name__}: {message.splitlines()[0] if message else ''}")
    scenarios = scenarios_for(with_host(spec, settings.host, settings.gpus),
                              [finding.code for finding in proven_findings(findings)])
    spec = scenarios[0][0]
    host, accelerator, note = _target_host(spec, settings.accelerator)
    if spec.origin == "command line":
        note += f"host from the command line: {describe_spec(spec)}; "
    elif spec.origin == "findings" and (spec.host is not ProgramHost.GPU or spec.gpus > 1):
        note += f"host chosen from the findings: {describe_spec(spec)}; "
    item = _Pending(path, spec, findings, accelerator, note, cells=program.view(text).cells)
    if not proven_findings(findings):
        return item
    to_fixed = line_map(text, fixed_text)

    def budget(sites: Sequence[FindingSite]) -> Budget:
        watches = () if settings.run_to_end else tuple(site.watch() for site in sites)
        return Budget(watches, settings.seconds, settings.steps)

    # However many machines it runs on, the program is launched the same way (its ranks).
    processes, nodes = spec.processes, spec.nodes

    def run(role: str, source: str, where: RunHost, gpus: int, argv: tuple[str, ...],
            sites: Sequence[FindingSite]) -> Future[RunOutcome]:
        def start() -> RunOutcome:
            return launcher.run(source, path, where, gpus, settings.timeout, argv, settings.place, budget(sites),
                                processes, nodes)

        return pool.submit(progress.run, path, role, where, start)

    argv = spec.argv if settings.argv is None else settings.argv
    fixed_argv = argv if settings.argv is not None or spec.fixed_argv is None else spec.fixed_argv
    all_sites = finding_sites(text, proven_findings(findings), item.cells)
    for number, (scenario_spec, codes) in enumerate(scenarios):
        where, _, _ = _target_host(scenario_spec, settings.accelerator)
        sites = tuple(site for site in all_sites if site.code in codes)
        suffix = "" if number == 0 else f" ({describe_spec(scenario_spec)})"
        item.scenarios.append(_Scenario(
            scenario_spec, where, codes, sites,
            run("original" + suffix, text, where, scenario_spec.gpus, argv, sites),
            run("fixed" + suffix, fixed_text, where, scenario_spec.gpus, fixed_argv,
                tuple(site.moved(to_fixed) for site in sites)),
        ))
    # Machines where a fix changes the program though no finding's bug shows there.
    proven = [d for d in proven_findings(findings) if d.fix is not None]
    used = {(scenario.host, scenario.spec.gpus) for scenario in item.scenarios}
    for host_name in dict.fromkeys(host for d in proven for host in fix_agrees_on(d.code)):
        agreement_spec = VerifySpec(ProgramHost(host_name), 1, origin="findings")
        codes = tuple(sorted({d.code for d in proven if host_name in fix_agrees_on(d.code)}))
        where, _, _ = _target_host(agreement_spec, settings.accelerator)
        if any(proof_of(code).host == "cpu-loads-gpu-checkpoint" for code in codes):
            # The same world as where the bug shows: checkpoints from elsewhere came from a GPU.
            where = where.loading_gpu_checkpoints()
        if (where, agreement_spec.gpus) in used:
            continue  # the fixed program runs there already, and must agree
        suffix = f" ({describe_spec(agreement_spec)}, agreement)"
        # Watched as where the bug shows: a run stops once the fixed lines and a use of
        # their values have run, which is where a fix the GPU trips over fails.
        sites = tuple(site for site in all_sites if site.code in codes)
        item.scenarios.append(_Scenario(
            agreement_spec, where, codes, sites,
            run("original" + suffix, text, where, 1, argv, sites),
            run("fixed" + suffix, fixed_text, where, 1, fixed_argv, tuple(site.moved(to_fixed) for site in sites)),
            agreement=True,
        ))
    on_cpu = [scenario for scenario in item.scenarios if scenario.host is RunHost.CPU]
    # A CPU host's own run of the original is the reference.
    item.reference = on_cpu[0].original if on_cpu else run(
        "reference", text, RunHost.CPU, 1, argv, item.scenarios[0].sites)
    return item


def _judged(scenario: _Scenario, reference: RunOutcome | None, cells: Sequence[CellLines],
            proven: Sequence[Diagnostic]) -> ScenarioReport:
    original, fixed = scenario.original.result(), scenario.fixed.result()
    comparison = compare_results(original, fixed, reference)
    unfixed = [d for d in proven if d.fix is None and d.code in scenario.codes]
    unfixed_lines = {program_line(d, cells) for d in unfixed}
    fixed_lines = {site.line for site in scenario.sites if site.line not in unfixed_lines}
    verdict, why = judge(scenario.sites, original, fixed, comparison, lambda line: line_name(cells, line), fixed_lines)
    if unfixed and verdict not in (Verdict.FIX_VERIFIED, Verdict.BUG_REPRODUCED):
        why += f" ({len(unfixed)} finding{'s have' if len(unfixed) != 1 else ' has'} no fix)"
    return ScenarioReport(scenario.spec, scenario.codes, verdict, why, original, fixed, comparison,
                          scenario.agreement)


def _finish(item: _Pending) -> ProgramReport:
    proven = proven_findings(item.findings)
    if not proven or not item.scenarios:
        why = "nothing to verify: not run"
        verdict = Verdict.NO_FINDING
        unseen = sorted({d.code for d in item.findings if not_emulated(d.code) is not None})
        if unseen:
            verdict = Verdict.NOT_RUNNABLE
            why = "; ".join(f"{code}'s bug needs {not_emulated(code)}, which verify does not emulate" for code in unseen)
            why += ": not run"
        elif item.findings:
            why = f"no correctness ({CORRECTNESS_PREFIX}xx) finding, nothing fails at run time: not run"
        return ProgramReport(item.path, item.accelerator, item.spec, item.findings, verdict, why, cells=item.cells)
    reference = item.reference.result() if item.reference is not None else None
    first, *more = (_judged(scenario, reference, item.cells, proven) for scenario in item.scenarios)
    verdict, why = first.verdict, first.note
    for extra in more:
        why += f"; {extra.summary}"
    failing = [extra.verdict for extra in more if extra.verdict is not Verdict.FIX_VERIFIED and (
        not extra.agreement or extra.verdict in (Verdict.FIX_FAILED, Verdict.RESULTS_DIFFER))]
    if verdict is Verdict.FIX_VERIFIED and failing:
        verdict = failing[0]
    return ProgramReport(item.path, item.accelerator, item.spec, item.findings, verdict, item.note + why,
                         first.original, first.fixed, reference, first.comparison, item.cells, tuple(more))
