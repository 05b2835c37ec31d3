"""Whether a file is test code, as pytest collects it.

Tests hold devices as data (`torch.device("cuda", 1)` in a parametrize list, a mocked
`set_device`) and load what they have just saved: rules about where a program runs read
them differently from programs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import PurePath

import libcst as cst

# Importing one of these makes a module test code.
TEST_FRAMEWORKS = ("pytest", "unittest")


def is_test_code(path: str, module: cst.Module, imports_from: Callable[[str], bool]) -> bool:
    """A `test_*.py`, `*_test.py` or `conftest.py` file, or a module that imports pytest or
    unittest. An evaluation script's `test()` entry point is not test code."""
    return looks_like_test_code(
        PurePath(path).name,
        imports_a_test_framework=any(imports_from(framework) for framework in TEST_FRAMEWORKS),
        functions=(s.name.value for s in module.body if isinstance(s, cst.FunctionDef)),
        classes=(s.name.value for s in module.body if isinstance(s, cst.ClassDef)))


def looks_like_test_code(file_name: str, *, imports_a_test_framework: bool, functions: Iterable[str],
                         classes: Iterable[str]) -> bool:
    """The decision of `is_test_code`, from a module's file name, whether it imports a test
    framework, and the names of its top-level functions and classes (read with any parser)."""
    if file_name == "conftest.py" or imports_a_test_framework:
        return True
    # A `test_*.py` file pytest finds no test in (`test_on_image.py`) is a script.
    return file_name.endswith(".py") and (file_name.startswith("test_") or file_name.endswith("_test.py")) and (
        any(name.startswith("test") for name in functions) or any(name.startswith("Test") for name in classes))
