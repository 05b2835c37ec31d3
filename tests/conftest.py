from __future__ import annotations

import gc
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


# Colour settings of the shell running the tests (CI often sets FORCE_COLOR) must not reach the
# command under test: tests that compare its text expect none, and tests of colour set them.
COLOR_VARIABLES = ("NO_COLOR", "FORCE_COLOR")


def cli_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    environment = {name: value for name, value in os.environ.items() if name not in COLOR_VARIABLES}
    return {**environment, **(extra or {})}


def _verify_isolation_missing() -> bool:
    from torchdevlint.verify.isolation import landlock_abi

    return landlock_abi() == 0


# Commands a test runs inside its own process (see `run_cli`); `verify` and `server` run
# programs and speak over pipes, so they always get a real process.
IN_PROCESS_COMMANDS = ("check", "rule", "debug")


def run_cli(*args: str, cwd: Path | None = None, stdin: str | None = None,
            env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the command line as a user or CI would (`env`: variables to add) and return what a
    subprocess would: exit status, standard output and standard error as text.

    `check`, `rule` and `debug` run `main()` in this process, with its own working folder,
    environment, standard streams and signal handler, and pipes' answers to `isatty`: a new
    interpreter costs more than most runs (LibCST's import alone takes a third of a second).
    `verify` and `server` start `python -m torchdevlint`; tests of what only a process shows
    (signals, workers that outlive it) start it themselves.

    On a machine without Landlock, `verify` runs only with `--allow-writes`: the tests of what
    it proves still run there (the test of the isolation itself skips)."""
    if args and args[0] == "verify" and "--allow-writes" not in args and _verify_isolation_missing():
        args = ("verify", "--allow-writes", *args[1:])
    command = next((arg for arg in args if not arg.startswith("-")), "check")
    if command in IN_PROCESS_COMMANDS:
        return _run_cli_in_this_process(list(args), cwd=cwd, stdin=stdin, env=cli_environment(env))
    return subprocess.run(
        [sys.executable, "-m", "torchdevlint", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        input=stdin,
        timeout=300,
        # The programs `verify` runs import torch, whose bytecode lies beside its sources.
        env=cli_environment(env) if command == "verify" else child_environment(env),
    )


# Children compile torchdevlint's modules once per test session, not once per run, even where
# the shell sets PYTHONDONTWRITEBYTECODE; the bytecode goes to a folder of its own.
_BYTECODE_FOLDER = tempfile.mkdtemp(prefix="torchdevlint-tests-bytecode-")


def child_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """`cli_environment` for a child Python process that imports torchdevlint, not torch."""
    environment = cli_environment(extra)
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    environment.setdefault("PYTHONPYCACHEPREFIX", _BYTECODE_FOLDER)
    return environment


def _pipe() -> io.TextIOWrapper:
    # What a child's standard stream is when it is a pipe: UTF-8 text over bytes, no terminal.
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict", newline="\n", write_through=True)


def _read_back(stream: io.TextIOWrapper) -> str:
    # As subprocess.run(text=True) decodes a pipe: UTF-8, universal newlines.
    stream.flush()
    raw = stream.buffer.getvalue()  # type: ignore[attr-defined]
    return raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")


def _run_cli_in_this_process(args: list[str], *, cwd: Path | None, stdin: str | None,
                             env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    from torchdevlint.cli import main

    saved_environment = dict(os.environ)
    saved_folder = os.getcwd()
    saved_streams = (sys.stdin, sys.stdout, sys.stderr)
    saved_handler = signal.getsignal(signal.SIGTERM)
    saved_thresholds = gc.get_threshold()
    stdout, stderr = _pipe(), _pipe()
    stderr.reconfigure(errors="backslashreplace")
    standard_input = io.TextIOWrapper(io.BytesIO((stdin or "").encode("utf-8")), encoding="utf-8")
    os.environ.clear()
    os.environ.update(env)
    try:
        if cwd is not None:
            os.chdir(cwd)
        sys.stdin, sys.stdout, sys.stderr = standard_input, stdout, stderr
        try:
            status: object = main(args)
        except SystemExit as exit_:
            status = exit_.code
        except Exception:  # noqa: BLE001 - what the interpreter does with an exception nobody caught
            traceback.print_exc()
            status = 1
        if status is None:
            status = 0
        elif not isinstance(status, int):
            print(status, file=sys.stderr)
            status = 1
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        os.chdir(saved_folder)
        os.environ.clear()
        os.environ.update(saved_environment)
        signal.signal(signal.SIGTERM, saved_handler)
        # A run sets the collector aside for its own allocations; this process goes on.
        gc.unfreeze()
        gc.set_threshold(*saved_thresholds)
    return subprocess.CompletedProcess(["torchdevlint", *args], status, _read_back(stdout), _read_back(stderr))


@pytest.fixture
def cli():
    return run_cli


# What the real-editor tests open as train.py: line 5 throws away a move that line 6 needs
# (a safe fix); line 7 loads a checkpoint after a non-ASCII name.
EDITOR_PROGRAM = ('import torch\n\n# café\nx = torch.randn(3)\nx.to("cuda")\n'
                  'y = x + torch.ones(3, device="cuda")\nψ = torch.load("w.pt")\n')


def run_editor_session(command: list[str], folder: Path) -> dict[str, Any]:
    """Run a real editor's scripted session (tests/editors/) on EDITOR_PROGRAM in `folder`:
    the script starts `torchdevlint server` from $TORCHDEVLINT_SERVER and writes what it saw
    as JSON to $TORCHDEVLINT_RESULT, which is returned."""
    (folder / "train.py").write_text(EDITOR_PROGRAM, encoding="utf-8")
    result = folder / "seen.json"
    environment = {**os.environ,
                   "TORCHDEVLINT_SERVER": json.dumps([sys.executable, "-m", "torchdevlint", "server"]),
                   "TORCHDEVLINT_RESULT": str(result)}
    subprocess.run(command, cwd=folder, env=environment, timeout=90, check=True, capture_output=True)
    seen: dict[str, Any] = json.loads(result.read_text(encoding="utf-8"))
    return seen


def cuda_available() -> bool:
    """A real CUDA GPU here? Asked of torch in a child, and only where GPU device nodes exist."""
    from torchdevlint.verify.runner import (
        VerifyError,
        gpu_device_nodes_present,
        probe_cuda,
        torch_installed,
    )

    if not torch_installed() or not gpu_device_nodes_present():
        return False
    try:
        return bool(probe_cuda().get("cuda_available"))
    except VerifyError:
        return False


def computed_once(tmp_path_factory: pytest.TempPathFactory, name: str, compute: Callable[[], Any]) -> Any:
    """`compute()`, once per test session, shared with every xdist worker as JSON.

    With `-n auto` each worker sets up a module-scoped fixture of its own: the one `verify` run
    over every fixture would run once per worker. The first worker to ask computes it and
    writes the answer beside the workers' folders (the session's own); the others wait for it.
    Without xdist it is simply computed."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return compute()
    shared = tmp_path_factory.getbasetemp().parent
    answer, failed = shared / f"{name}.json", shared / f"{name}.failed"
    try:
        os.close(os.open(shared / f"{name}.lock", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:  # another worker computes it
        deadline = time.monotonic() + 900
        while not answer.exists():
            if failed.exists():
                pytest.fail(f"computing {name} failed in another worker: {failed.read_text()}")
            assert time.monotonic() < deadline, f"no worker finished computing {name}"
            time.sleep(0.2)
        return json.loads(answer.read_text(encoding="utf-8"))
    try:
        value = compute()
    except BaseException as error:
        failed.write_text(repr(error), encoding="utf-8")
        raise
    partial = shared / f"{name}.json.partial"
    partial.write_text(json.dumps(value), encoding="utf-8")
    partial.replace(answer)
    return value


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `cuda` need a real GPU: skipped, with the reason, where there is none."""
    needing_cuda = [item for item in items if item.get_closest_marker("cuda") is not None]
    if needing_cuda and not cuda_available():
        skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
        for item in needing_cuda:
            item.add_marker(skip)


# A project file that saves a model from the GPU. TDL003 reports a load only in a project that
# writes checkpoints that may hold GPU tensors (`torchdevlint/project_scan.py`): tests
# of a lone file that loads one give it this neighbour. No default rule reports it.
GPU_CHECKPOINT_WRITER = 'import torch\n\n\ndef save_checkpoint(model, path):\n    torch.save(model.to("cuda").state_dict(), path)\n'


def write_checkpoint_writer(folder: Path) -> None:
    (folder / "checkpoints.py").write_text(GPU_CHECKPOINT_WRITER)
