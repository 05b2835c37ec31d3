"""`torchdevlint server` in a real editor: Emacs with Eglot, in batch mode.

Skipped where `emacs` with Eglot is not installed, CI included; the server's behaviour is
tested over stdio in test_server.py, and this checks that a real client agrees with it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import run_editor_session

pytest.importorskip("pygls")

EMACS = shutil.which("emacs")
SESSION = Path(__file__).parent / "editors" / "eglot_session.el"


def _has_eglot() -> bool:
    if EMACS is None:
        return False
    probe = ('(progn (dolist (dir (file-expand-wildcards "/usr/share/emacs/site-lisp/elpa/*"))'
             ' (add-to-list (quote load-path) dir)) (require (quote eglot)))')
    return subprocess.run([EMACS, "--batch", "-Q", "--eval", probe], capture_output=True, timeout=60).returncode == 0


pytestmark = pytest.mark.skipif(not _has_eglot(), reason="needs Emacs with Eglot")


def test_eglot_shows_findings_and_applies_a_quick_fix(tmp_path: Path) -> None:
    assert EMACS is not None
    seen = run_editor_session([EMACS, "--batch", "-Q", "-l", str(SESSION)], tmp_path)

    assert "error" not in seen, seen.get("error")
    assert seen["published"] is True
    # Emacs counts columns in characters: `ψ` is one, and the call starts at column 4.
    assert [(line, column, text.split(":")[0]) for line, column, text in seen["diagnostics"]] == [
        (4, 0, "torchdevlint [TDL001]"), (6, 4, "torchdevlint [TDL003]")]
    assert seen["actions"] == ["Assign the moved tensor back", "Disable TDL001 for this line",
                               "Fix all safely fixable torchdevlint findings"]
    assert seen["fixed_line"] == 'x = x.to("cuda")'
    assert seen["fix_cleared"] is True
