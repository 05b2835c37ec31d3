from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
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


def run_cli(*args: str, cwd: Path | None = None, stdin: str | None = None,
            env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real command line in a subprocess, as a user or CI would (`env`: variables to add).

    On a machine without Landlock, `verify` runs only with `--allow-writes`: the tests of what
    it proves still run there (the test of the isolation itself skips)."""
    if args and args[0] == "verify" and "--allow-writes" not in args and _verify_isolation_missing():
        args = ("verify", "--allow-writes", *args[1:])
    return subprocess.run(
        [sys.executable, "-m", "torchdevlint", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        input=stdin,
        timeout=300,
        env=cli_environment(env),
    )


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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `cuda` need a real GPU: skipped, with the reason, where there is none."""
    needing_cuda = [item for item in items if item.get_closest_marker("cuda") is not None]
    if needing_cuda and not cuda_available():
        skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
        for item in needing_cuda:
            item.add_marker(skip)
