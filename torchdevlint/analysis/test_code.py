"""Whether a file is test code, as pytest collects it.

Tests hold devices as data (`torch.device("cuda", 1)` in a parametrize list, a mocked
`set_device`) and load what they have just saved: rules about where a program runs read
them differently from programs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import PurePath

import libcst as cst


def is_test_code(path: str, module: cst.Module, imports_from: Callable[[str], bool]) -> bool:
    """A `test_*.py`, `*_test.py` or `conftest.py` file, or a module that imports pytest or
    unittest. An evaluation script's `test()` entry point is not test code."""
    name = PurePath(path).name
    if name == "conftest.py":
        return True
    if imports_from("pytest") or imports_from("unittest"):
        return True
    # A `test_*.py` file pytest finds no test in (`test_on_image.py`) is a script.
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py")) and any(
        isinstance(statement, cst.FunctionDef) and statement.name.value.startswith("test")
        or isinstance(statement, cst.ClassDef) and statement.name.value.startswith("Test")
        for statement in module.body)
