"""Configuration: `[tool.torchdevlint]` in a pyproject.toml, or the same keys at the top level
of a `torchdevlint.toml` or `.torchdevlint.toml`.

    [tool.torchdevlint]
    select = ["TDL0"]          # codes or prefixes; default: every rule on by default
    extend-select = ["TDL103"] # add rules, including ones off by default
    ignore = ["TDL004"]
    unfixable = ["TDL003"]     # codes or prefixes whose fixes are never applied nor offered
    extend-exclude = ["legacy/", "*_pb2.py"]  # added to the default excludes (`exclude` replaces them)
    extend-include = ["*.pyw"]  # files walked besides *.py and *.ipynb (`include` replaces those)
    respect-gitignore = true    # skip what .gitignore, .ignore and .git/info/exclude ignore

    [tool.torchdevlint.per-file-ignores]            # glob -> codes or prefixes not run there
    "tests/*" = ["TDL001"]

    [tool.torchdevlint.load-without-map-location]   # per-rule options, by slug or code
    map-location = "cpu"

Which file configures a path is found as ruff finds it (settings.py): the closest one above it.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import os
import re
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
from torchdevlint.sourcefile import DEFAULT_EXCLUDES


class ConfigError(ValueError):
    """A broken or unknown setting; the message names the file and the key."""


_LIST_KEYS = ("select", "extend-select", "ignore", "unfixable", "exclude", "extend-exclude", "include", "extend-include")
_PATTERN_KEYS = ("exclude", "extend-exclude", "include", "extend-include")
_PER_FILE_KEYS = ("per-file-ignores", "extend-per-file-ignores")
_BOOLEAN_KEYS = ("respect-gitignore",)

# Where configuration is looked for in each folder, first found first: a file of its own wins
# over pyproject.toml, and a pyproject.toml counts only with a [tool.torchdevlint] table.
CONFIG_FILE_NAMES = (".torchdevlint.toml", "torchdevlint.toml", "pyproject.toml")

# The files a folder walk lints, as ruff's default: Python files and Jupyter notebooks.
DEFAULT_INCLUDE: tuple[str, ...] = ("*.py", "*.ipynb")

@dataclass(frozen=True)
class Config:
    select: tuple[str, ...] | None = None
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    # Codes or prefixes whose findings are reported without their fixes.
    unfixable: tuple[str, ...] = ()
    exclude: tuple[str, ...] = DEFAULT_EXCLUDES
    extend_exclude: tuple[str, ...] = ()
    include: tuple[str, ...] = DEFAULT_INCLUDE
    respect_gitignore: bool = True
    # (glob, codes or prefixes) pairs: rules that do not run on the files the glob matches.
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # Rule code -> that rule's Options instance.
    rule_options: dict[str, object] = field(default_factory=dict)
    # Rule code -> the Options fields the file sets (the others keep their defaults, which
    # may come from the project: see `project.py`).
    options_set: dict[str, frozenset[str]] = field(default_factory=dict)
    source: Path | None = None

    @property
    def excluded_patterns(self) -> tuple[str, ...]:
        return (*self.exclude, *self.extend_exclude)

    def is_excluded(self, path: Path, root: Path) -> bool:
        """Whether a path met while walking a folder is excluded (explicit paths never are)."""
        matcher = _exclusion_matcher(self.excluded_patterns)
        relative = _relative(path, root)
        if matcher.by_name_or_path is not None and (
                matcher.by_name_or_path.match(os.path.normcase(path.name))
                or matcher.by_name_or_path.match(os.path.normcase(relative))):
            return True
        if relative in matcher.exact or relative.startswith(matcher.folders):
            return True
        if matcher.absolute is not None or matcher.absolute_folders:
            # Absolute patterns (a command line's, made absolute from its folder).
            absolute = Path(os.path.abspath(path)).as_posix()
            return bool(matcher.absolute is not None and matcher.absolute.match(absolute)
                        or absolute.startswith(matcher.absolute_folders))
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

    def ignored_codes(self, path: Path, root: Path) -> tuple[str, ...]:
        """The codes and prefixes `per-file-ignores` turns off for this file.

        A glob without a slash matches the file's name, one with a slash its path below the
        configuration's folder (`tests/**` and `tests/` alike cover the folder), as in ruff.
        """
        if not self.per_file_ignores:
            return ()
        name = path.name
        relative = _relative(path, root)
        ignored: list[str] = []
        for pattern, codes in self.per_file_ignores:
            bare = pattern.rstrip("/")
            if (fnmatch.fnmatch(name, pattern) or fnmatch.fnmatch(relative, pattern)
                    or relative.startswith(bare + "/")):
                ignored.extend(codes)
        return tuple(ignored)


def _relative(path: Path, root: Path) -> str:
    """The path relative to the root, lexically: symlinks (even looping ones) are not followed."""
    try:
        relative = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
    except ValueError:  # another drive on Windows
        return path.as_posix()
    return relative if os.sep == "/" else Path(relative).as_posix()


@dataclass(frozen=True)
class _ExclusionMatcher:
    """A list of exclude patterns as a walk asks it, thousands of times: one regular
    expression for the globs (by name or by relative path), prefixes for the folders."""

    by_name_or_path: re.Pattern[str] | None
    exact: frozenset[str]
    folders: tuple[str, ...]
    absolute: re.Pattern[str] | None
    absolute_folders: tuple[str, ...]


@functools.lru_cache(maxsize=64)
def _exclusion_matcher(patterns: tuple[str, ...]) -> _ExclusionMatcher:
    relative = [pattern.rstrip("/") for pattern in patterns if not pattern.rstrip("/").startswith("/")]
    absolute = [pattern.rstrip("/") for pattern in patterns if pattern.rstrip("/").startswith("/")]

    def one_of(globs: list[str]) -> re.Pattern[str] | None:
        # As fnmatch.fnmatch on this platform: its case rule, each glob matched whole.
        return re.compile("|".join(f"(?:{fnmatch.translate(os.path.normcase(glob))})" for glob in globs)) \
            if globs else None

    return _ExclusionMatcher(one_of(relative), frozenset(relative), tuple(f"{bare}/" for bare in relative),
                             one_of(absolute), tuple(f"{bare}/" for bare in absolute))


def read_table(path: Path) -> dict[str, object] | None:
    """The torchdevlint settings a configuration file holds: a pyproject.toml's
    [tool.torchdevlint] table (None when it has none), any other file's top level."""
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        # TOML is UTF-8; say where it is not, as a reader fixing the file needs.
        raise ConfigError(f"{path}: cannot read: not UTF-8 (byte 0x{raw[error.start]:02x} at offset {error.start})") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: cannot read: {error}") from None
    except RecursionError:
        raise ConfigError(f"{path}: cannot read: nested too deeply") from None
    if not _is_pyproject(path):
        return data
    tool = data.get("tool", {})
    table = tool.get("torchdevlint") if isinstance(tool, dict) else None
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.torchdevlint] must be a table")
    return table


def config_file_in(folder: Path) -> Path | None:
    """The file configuring `folder` when it has one of its own (CONFIG_FILE_NAMES)."""
    for name in CONFIG_FILE_NAMES:
        candidate = folder / name
        if candidate.is_file() and (not _is_pyproject(candidate) or read_table(candidate) is not None):
            return candidate
    return None


def _is_pyproject(path: Path) -> bool:
    return path.name == "pyproject.toml"


def _section(path: Path, key: str | None = None) -> str:
    """How an error names a key: `[tool.torchdevlint] select`, or plain `select` in a file of our own."""
    if _is_pyproject(path):
        return f"[tool.torchdevlint.{key}]" if key is not None else "[tool.torchdevlint]"
    return f"[{key}]" if key is not None else "top level:"


def _selectors(path: Path, key: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{path}: {_section(path)} {key} must be a list of strings")
    if key in _PATTERN_KEYS:
        for pattern in value:
            _check_glob(path, key, pattern)
        return tuple(value)
    try:
        return tuple(validate_selector(item) for item in value)
    except UnknownSelector as error:
        raise ConfigError(f"{path}: {_section(path)} {key}: {error}") from None


def glob_problem(pattern: str) -> str | None:
    """Why a glob pattern is malformed, as ruff's glob library refuses it; None if it is not.
    fnmatch would match such a pattern literally, and silently exclude nothing."""
    if not pattern:
        return "empty pattern"
    for component in pattern.split("/"):
        if "**" in component and component != "**":
            return "`**` must be a path component of its own"
    index = 0
    while index < len(pattern):
        if pattern[index] == "[":
            end = index + 1
            if end < len(pattern) and pattern[end] in "!^":
                end += 1
            if end < len(pattern) and pattern[end] == "]":
                end += 1  # a leading `]` is a member of the class
            close = pattern.find("]", end)
            if close == -1:
                return "unclosed character class `[`"
            members = pattern[index + 1:close].lstrip("!^")
            for low, high in re.findall(r"(.)-(.)", members):
                if low > high:
                    return f"invalid range `{low}-{high}`"
            index = close
        index += 1
    return None


def _check_glob(path: Path, key: str, pattern: str) -> None:
    problem = glob_problem(pattern)
    if problem is not None:
        raise ConfigError(f"{path}: {_section(path)} {key}: invalid glob {pattern!r}: {problem}")


def _per_file_ignores(path: Path, key: str, table: object) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: {_section(path, key)} must be a table of glob = [codes]")
    for pattern in table:
        _check_glob(path, key, pattern)
    return tuple((pattern, _selectors(path, f"{key} {pattern!r}", codes)) for pattern, codes in table.items())


def _rule_options(path: Path, key: str, table: object) -> tuple[str, object, frozenset[str]]:
    rule = rule_by_code(key)
    if rule is None:
        raise ConfigError(f"{path}: {_section(path)} unknown key {key!r} (not a setting, rule code or slug)")
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: {_section(path, key)} must be a table")
    known = {f.name.replace("_", "-"): f.name for f in dataclasses.fields(rule.Options)}
    values: dict[str, object] = {}
    for option, value in table.items():
        if option not in known:
            raise ConfigError(
                f"{path}: {_section(path, key)} unknown option {option!r}"
                + (f" (known: {', '.join(sorted(known))})" if known else f" ({rule.code} takes no options)")
            )
        values[known[option]] = value
    try:
        return rule.code, rule.Options(**values), frozenset(values)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{path}: {_section(path, key)} {error}") from None


def load_config(path: Path | None) -> Config:
    """The configuration a file holds (defaults for None, or a pyproject.toml without our table)."""
    if path is None:
        return Config()
    table = read_table(path)
    if table is None:
        return Config(source=path)
    lists: dict[str, tuple[str, ...]] = {}
    per_file: list[tuple[str, tuple[str, ...]]] = []
    flags: dict[str, bool] = {}
    rule_options: dict[str, object] = {}
    options_set: dict[str, frozenset[str]] = {}
    for key, value in table.items():
        if key in _LIST_KEYS:
            lists[key] = _selectors(path, key, value)
        elif key in _PER_FILE_KEYS:
            per_file.extend(_per_file_ignores(path, key, value))
        elif key in _BOOLEAN_KEYS:
            if not isinstance(value, bool):
                raise ConfigError(f"{path}: {_section(path)} {key} must be true or false")
            flags[key] = value
        else:
            code, options, names = _rule_options(path, key, value)
            rule_options[code] = options
            options_set[code] = names
    return Config(
        select=lists.get("select"),
        extend_select=lists.get("extend-select", ()),
        ignore=lists.get("ignore", ()),
        unfixable=lists.get("unfixable", ()),
        exclude=lists.get("exclude", DEFAULT_EXCLUDES),
        extend_exclude=lists.get("extend-exclude", ()),
        include=(*lists.get("include", DEFAULT_INCLUDE), *lists.get("extend-include", ())),
        respect_gitignore=flags.get("respect-gitignore", True),
        per_file_ignores=tuple(per_file),
        rule_options=rule_options,
        options_set=options_set,
        source=path,
    )
