"""`torchdevlint server` in a real editor: Emacs with Eglot, in batch mode.

Skipped where `emacs` with Eglot is not installed, CI included; the server's behaviour is
tested over stdio in test_server.py, and this checks that a real client agrees with it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pygls")

EMACS = shutil.which("emacs")
SESSION = Path(__file__).parent / "editors" / "eglot_session.el"
# Line 5 throws away a move that line 6 needs (a safe fix); line 7 loads a checkpoint after
# a non-ASCII name.
PROGRAM = ('import torch\n\n# café\nx = torch.randn(3)\nx.to("cuda")\n'
           'y = x + torch.ones(3, device="cuda")\nψ = torch.load("w.pt")\n')


def _has_eglot() -> bool:
    if EMACS is None:
        return False
    probe = ('(progn (dolist (dir (file-expand-wildcards "/usr/share/emacs/site-lisp/elpa/*"))'
             ' (add-to-list (quote load-path) dir)) (require (quote eglot)))')
    return subprocess.run([EMACS, "--batch", "-Q", "--eval", probe], capture_output=True, timeout=60).returncode == 0


pytestmark = pytest.mark.skipif(not _has_eglot(), reason="needs Emacs with Eglot")


def test_eglot_shows_findings_and_applies_a_quick_fix(tmp_path: Path) -> None:
    assert EMACS is not None
    (tmp_path / "train.py").write_text(PROGRAM, encoding="utf-8")
    result = tmp_path / "seen.json"
    environment = {**os.environ,
                   "TORCHDEVLINT_SERVER": json.dumps([sys.executable, "-m", "torchdevlint", "server"]),
                   "TORCHDEVLINT_RESULT": str(result)}
    subprocess.run([EMACS, "--batch", "-Q", "-l", str(SESSION)], cwd=tmp_path, env=environment, timeout=90,
                   check=True, capture_output=True)
    seen = json.loads(result.read_text(encoding="utf-8"))

    assert "error" not in seen, seen.get("error")
    assert seen["published"] is True
    # Emacs counts columns in characters: `ψ` is one, and the call starts at column 4.
    assert [(line, column, text.split(":")[0]) for line, column, text in seen["diagnostics"]] == [
        (4, 0, "torchdevlint [TDL001]"), (6, 4, "torchdevlint [TDL003]")]
    assert seen["actions"] == ["Assign the moved tensor back", "Disable TDL001 for this line",
                               "Fix all safely fixable torchdevlint findings"]
    assert seen["fixed_line"] == 'x = x.to("cuda")'
    assert seen["fix_cleared"] is True
