"""`[tool.torchdevlint]` from the nearest pyproject.toml.

    [tool.torchdevlint]
    select = ["TDL0"]          # codes or prefixes; default: every rule on by default
    extend-select = ["TDL103"] # add rules, including ones off by default
    ignore = ["TDL004"]
    exclude = ["legacy/", "*_pb2.py"]
    extend-include = ["*.pyw"]  # files walked besides *.py and *.ipynb (`include` replaces those)

    [tool.torchdevlint.load-without-map-location]   # per-rule options, by slug or code
    map-location = "cpu"
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from torchdevlint.registry import (
    UnknownSelector,
    rule_by_code,
    validate_selector,
)


class ConfigError(ValueError):
    """A broken or unknown setting; the message names the file and the key."""


_LIST_KEYS = ("select", "extend-select", "ignore", "exclude", "extend-exclude", "include", "extend-include")
_PATTERN_KEYS = ("exclude", "extend-exclude", "include", "extend-include")

# The files a folder walk lints, as ruff's default: Python files and Jupyter notebooks.
DEFAULT_INCLUDE: tuple[str, ...] = ("*.py", "*.ipynb")

DEFAULT_EXCLUDES: tuple[str, ...] = (
    ".git", ".hg", ".svn", ".venv", "venv", "env", ".env", "__pycache__", "build", "dist",
    ".tox", ".nox", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".torchdevlint_cache",
    "node_modules", "site-packages", ".eggs", "*.egg-info",
    # Jupyter's autosaved copies of the notebooks beside them.
    ".ipynb_checkpoints",
)


@dataclass(frozen=True)
class Config:
    select: tuple[str, ...] | None = None
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    include: tuple[str, ...] = DEFAULT_INCLUDE
    # Rule code -> that rule's Options instance.
    rule_options: dict[str, object] = field(default_factory=dict)
    source: Path | None = None

    def is_excluded(self, path: Path, root: Path) -> bool:
        """Whether a path met while walking a folder is excluded (explicit paths never are)."""
        patterns = (*DEFAULT_EXCLUDES, *self.exclude)
        name = path.name
        relative = _relative(path, root)
        for pattern in patterns:
            bare = pattern.rstrip("/")
            if fnmatch.fnmatch(name, bare) or fnmatch.fnmatch(relative, bare):
                return True
            if relative.startswith(bare + "/") or relative == bare:
                return True
        return False

    def includes(self, path: Path, root: Path) -> bool:
        """Whether a file met while walking a folder is one to lint (by name or path pattern)."""
        name = path.name
        relative = _relative(path, root)
        return any(fnmatch.fnmatch(name, pattern) or fnmatch.fnmatch(relative, pattern) for pattern in self.include)

    def excludes_file(self, path: Path, root: Path) -> bool:
        """Whether a file named explicitly (by flake8, pre-commit, `--force-exclude`) is excluded.

        Walking prunes excluded folders; a named file must check its folders itself.
        """
        relative_text = _relative(path, root)
        if relative_text.startswith("../") or os.path.isabs(relative_text):
            return self.is_excluded(path, root)
        current = Path(os.path.abspath(root))
        for part in Path(relative_text).parts:
            current = current / part
            if self.is_excluded(current, root):
                return True
        return False

def _relative(path: Path, root: Path) -> str:
    """The path relative to the root, lexically: symlinks (even looping ones) are not followed."""
    try:
        return Path(os.path.relpath(os.path.abspath(path), os.path.abspath(root))).as_posix()
    except ValueError:  # another drive on Windows
        return path.as_posix()


def find_pyproject(start: Path) -> Path | None:
    start = start.resolve()
    for folder in (start, *start.parents) if start.is_dir() else (start.parent, *start.parent.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def _selectors(path: Path, key: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{path}: [tool.torchdevlint] {key} must be a list of strings")
    if key in _PATTERN_KEYS:
        return tuple(value)
    try:
        return tuple(validate_selector(item) for item in value)
    except UnknownSelector as error:
        raise ConfigError(f"{path}: [tool.torchdevlint] {key}: {error}") from None


def _rule_options(path: Path, key: str, table: object) -> tuple[str, object]:
    rule = rule_by_code(key)
    if rule is None:
        raise ConfigError(f"{path}: [tool.torchdevlint] unknown key {key!r} (not a setting, rule code or slug)")
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.torchdevlint.{key}] must be a table")
    known = {f.name.replace("_", "-"): f.name for f in dataclasses.fields(rule.Options)}
    values: dict[str, object] = {}
    for option, value in table.items():
        if option not in known:
            raise ConfigError(
                f"{path}: [tool.torchdevlint.{key}] unknown option {option!r}"
                + (f" (known: {', '.join(sorted(known))})" if known else f" ({rule.code} takes no options)")
            )
        values[known[option]] = value
    try:
        return rule.code, rule.Options(**values)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{path}: [tool.torchdevlint.{key}] {error}") from None


def load_config(pyproject: Path | None) -> Config:
    if pyproject is None:
        return Config()
    try:
        with pyproject.open("rb") as handle:
            data = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"{pyproject}: cannot read: {error}") from None
    table = data.get("tool", {}).get("torchdevlint")
    if table is None:
        return Config(source=pyproject)
    if not isinstance(table, dict):
        raise ConfigError(f"{pyproject}: [tool.torchdevlint] must be a table")
    lists: dict[str, tuple[str, ...]] = {}
    rule_options: dict[str, object] = {}
    for key, value in table.items():
        if key in _LIST_KEYS:
            lists[key] = _selectors(pyproject, key, value)
        else:
            code, options = _rule_options(pyproject, key, value)
            rule_options[code] = options
    return Config(
        select=lists.get("select"),
        extend_select=lists.get("extend-select", ()),
        ignore=lists.get("ignore", ()),
        exclude=(*lists.get("exclude", ()), *lists.get("extend-exclude", ())),
        include=(*lists.get("include", DEFAULT_INCLUDE), *lists.get("extend-include", ())),
        rule_options=rule_options,
        source=pyproject,
    )


