"""`torchdevlint server` in a real editor: Neovim's own LSP client, run headless.

Skipped where `nvim` (0.7 or later) is not installed, CI included; the server's behaviour is
tested over stdio in test_server.py, and this checks that a real client agrees with it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import run_editor_session

pytest.importorskip("pygls")

NEOVIM = shutil.which("nvim")
pytestmark = pytest.mark.skipif(NEOVIM is None, reason="needs Neovim (nvim) on the PATH")

SESSION = Path(__file__).parent / "editors" / "neovim_session.lua"


def test_neovim_shows_findings_applies_a_quick_fix_and_honours_noqa(tmp_path: Path) -> None:
    assert NEOVIM is not None
    seen = run_editor_session([NEOVIM, "--headless", "-u", "NONE", "-i", "NONE", "train.py",
                               "-c", f"luafile {SESSION}"], tmp_path)

    assert "error" not in seen, seen.get("error")
    assert seen["published"] is True
    # `ψ` is two bytes and one UTF-16 unit: Neovim puts the call at byte 5 only if the server
    # said character 4.
    assert sorted((d["line"], d["column"], d["code"]) for d in seen["diagnostics"]) == [
        (4, 0, "TDL001"), (6, 5, "TDL003")]
    assert [(a["kind"], a["deferred"]) for a in seen["fix_all"]] == [("source.fixAll.torchdevlint", True)]
    # The least edit that makes `x.to("cuda")` into `x = x.to("cuda")`.
    assert seen["fix_all"][0]["new_texts"] == [" = x"]
    assert seen["actions"] == [{"title": "Assign the moved tensor back", "preferred": True},
                               {"title": "Disable TDL001 for this line", "preferred": False},
                               {"title": "Fix all safely fixable torchdevlint findings", "preferred": False}]
    assert seen["fixed_line"] == 'x = x.to("cuda")'
    assert seen["fix_cleared"] is True
    assert seen["noqa_cleared"] is True
