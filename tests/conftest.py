from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


# Colour settings of the shell running the tests (CI often sets FORCE_COLOR) must not reach the
# command under test: tests that compare its text expect none, and tests of colour set them.
COLOR_VARIABLES = ("NO_COLOR", "FORCE_COLOR")


def cli_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    environment = {name: value for name, value in os.environ.items() if name not in COLOR_VARIABLES}
    return {**environment, **(extra or {})}


def run_cli(*args: str, cwd: Path | None = None, stdin: str | None = None,
            env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real command line in a subprocess, as a user or CI would (`env`: variables to add)."""
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
