"""Progress on a terminal: shown only for a run that takes a while, and only where a person
reads standard error; gone before the report."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from torchdevlint import cli, progress
from torchdevlint.progress import Progress

BUGGY = "import torch\nx = torch.zeros(3)\nx.cuda()\ny = x + torch.ones(3, device='cuda')\n"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("enabled", "elapsed"), [(True, 0.5), (False, 5.0)], ids=["short-run", "disabled"])
def test_a_short_run_or_a_disabled_progress_writes_nothing(enabled: bool, elapsed: float) -> None:
    clock, out = _Clock(), _Terminal()
    shown = Progress(3, out, enabled=enabled, clock=clock)
    clock.now = elapsed
    shown.advance("a.py")
    shown.clear()
    assert out.getvalue() == ""


def test_a_long_run_shows_done_of_total_and_clears_the_line() -> None:
    clock, out = _Clock(), _Terminal()
    shown = Progress(3, out, enabled=True, clock=clock)
    clock.now = 1.5
    shown.advance("a.py")
    clock.now = 1.55  # redrawn at most every tenth of a second, except for the last file
    shown.advance("b.py")
    shown.advance("c.py")
    shown.clear()
    assert out.getvalue() == "\r[1/3] a.py\x1b[K\r[3/3] c.py\x1b[K\r\x1b[K"


@pytest.mark.parametrize(("args", "shows"), [((), True), (("--format", "json"), False),
                                             (("--quiet",), False), (("--format", "sarif"), False)])
def test_check_shows_progress_on_a_terminal_in_the_text_formats_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], shows: bool) -> None:
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text(BUGGY)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(progress, "SHOW_AFTER_SECONDS", 0.0)
    err, out = _Terminal(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(sys, "stdout", out)
    assert cli.main(["check", "--no-cache", "--jobs", "1", *args, "a.py", "b.py"]) == 1
    assert ("[2/2] b.py" in err.getvalue()) is shows
    assert err.getvalue().endswith("\r\x1b[K") is shows  # cleared before the report
    assert "\x1b" not in out.getvalue()
