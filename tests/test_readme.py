"""The README's console examples are what the tool prints today."""

from __future__ import annotations

import re
import shlex

from conftest import ROOT, run_cli

_BLOCK = re.compile(r"```console\n\$ (torchdevlint [^\n]*)\n(.*?)```", re.DOTALL)


def test_console_examples_are_current() -> None:
    readme = (ROOT / "README.md").read_text()
    examples = _BLOCK.findall(readme)
    assert examples, "no console examples found"
    for command, expected in examples:
        args = shlex.split(command)[1:]
        result = run_cli(*args, "--no-cache", cwd=ROOT)
        assert result.stdout == expected, f"README example is stale: {command}"
