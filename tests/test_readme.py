"""The console examples of the README and of the pages under docs/ are what the tool prints today."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from conftest import ROOT, run_cli

_BLOCK = re.compile(r"```console\n\$ (torchdevlint [^\n]*)\n(.*?)```", re.DOTALL)
# The README and every hand-written page of docs/ (docs/rules/ is generated from the rules).
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_console_examples_are_current(document: Path) -> None:
    examples = _BLOCK.findall(document.read_text())
    if document.name == "README.md":
        assert examples, "no console examples found"
    for command, expected in examples:
        args = shlex.split(command)[1:]
        result = run_cli(*args, "--no-cache", cwd=ROOT)
        assert result.stdout == expected, f"{document.relative_to(ROOT)} example is stale: {command}"
