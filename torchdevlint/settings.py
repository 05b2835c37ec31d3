"""The one way every front end (CLI, `verify`, flake8) turns configuration into rules to run.

Each file is configured as ruff configures it (hierarchically): by the closest configuration
file above it (`.torchdevlint.toml`, `torchdevlint.toml`, or a pyproject.toml with a
[tool.torchdevlint] table), and a file with none above it by the one found from the current
folder. Files are not merged: the closest one decides alone. `--config` names one file for
every path instead, and `--isolated` none. What the command line says is applied on top of
each, as ruff does: `--select` replaces the configured selection (select, extend-select and
ignore alike), `--extend-select` and `--ignore` add to it; `--exclude` and `--unfixable`
replace the configured lists, `--extend-exclude` adds to them.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from torchdevlint.config import Config, ConfigError, config_file_in, glob_problem, load_config
from torchdevlint.project import FACTS, PROJECT_FACT
from torchdevlint.registry import UnknownSelector, rules_for_codes, select_codes
from torchdevlint.rule_index import RULE_INDEX

if TYPE_CHECKING:
    from torchdevlint.rule import Rule


@dataclass(frozen=True)
class CommandLineSelection:
    """Settings given on a command line (empty: the configuration decides)."""

    select: tuple[str, ...] | None = None
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    unfixable: tuple[str, ...] | None = None
    # Glob patterns; those with a slash count from the current folder, as in ruff.
    exclude: tuple[str, ...] | None = None
    extend_exclude: tuple[str, ...] = ()
    # No configuration file is read (`--isolated`).
    isolated: bool = False

    def applied_to(self, config: Config) -> Config:
        """`config` with the command line's lists in place of, or added to, its own."""
        if self.unfixable is None and self.exclude is None and not self.extend_exclude:
            return config
        return dataclasses.replace(
            config,
            unfixable=self.unfixable if self.unfixable is not None else config.unfixable,
            exclude=self.exclude if self.exclude is not None else config.exclude,
            extend_exclude=(*config.extend_exclude, *self.extend_exclude),
        )


def command_line_patterns(patterns: Sequence[str], cwd: Path) -> tuple[str, ...]:
    """Exclude patterns as typed: checked as the configuration's are (ConfigError), and made
    absolute from `cwd` where they name a path rather than a name."""
    made: list[str] = []
    for pattern in patterns:
        problem = glob_problem(pattern)
        if problem is not None:
            raise ConfigError(f"invalid glob {pattern!r}: {problem}")
        made.append(Path(os.path.abspath(cwd / pattern)).as_posix() if "/" in pattern.rstrip("/") else pattern)
    return tuple(made)


@dataclass(frozen=True)
class Settings:
    config: Config
    # The folder relative paths (exclude patterns, the cache) are taken from.
    root: Path
    rule_codes: tuple[str, ...] = ()
    # Options the project's own files give where the configuration sets none (see `project.py`).
    project_options: dict[str, object] = field(default_factory=dict)

    @functools.cached_property
    def rules(self) -> tuple[type[Rule], ...]:
        """The rules as classes: importing them imports the analysis, so only linting asks."""
        return tuple(rules_for_codes(self.rule_codes))

    @property
    def rule_options(self) -> dict[str, object]:
        return {**self.config.rule_options, **self.project_options}


def _options_class(path: str) -> type:
    module, _, name = path.partition(":")
    found: type = getattr(importlib.import_module(module), name)
    return found


def options_from_project(config: Config, root: Path, codes: Sequence[str]) -> dict[str, object]:
    """Each rule's options with the fields that default to a project fact (the torch floor
    the project declares) filled in from `root`, where the configuration leaves them unset.
    Read from the rule index, so no rule is imported."""
    facts: dict[str, str | None] = {}
    filled: dict[str, object] = {}
    wanted = set(codes)
    for entry in RULE_INDEX:
        if entry.code not in wanted or entry.project_options is None:
            continue
        options_class = _options_class(entry.project_options)
        changes: dict[str, object] = {}
        for option in dataclasses.fields(options_class):
            fact = option.metadata.get(PROJECT_FACT)
            if fact is None or option.name in config.options_set.get(entry.code, frozenset()):
                continue
            if fact not in facts:
                facts[fact] = FACTS[fact](root)
            if facts[fact] is not None:
                changes[option.name] = facts[fact]
        if changes:
            current = config.rule_options.get(entry.code) or options_class()
            try:
                filled[entry.code] = dataclasses.replace(current, **changes)  # type: ignore[type-var]  # a dataclass, checked above
            except (TypeError, ValueError):
                continue  # a declaration the option cannot take: its default stays
    return filled


def resolve_codes(config: Config, selection: CommandLineSelection = CommandLineSelection()) -> tuple[str, ...]:
    """The codes of the rules to run; raises UnknownSelector for a selector that names no rule,
    and for a selection that runs none (`--select ''`, `select = []`), which would pass every file."""
    if selection.select is not None:
        codes = tuple(select_codes(selection.select, ignore=selection.ignore, extend_select=selection.extend_select))
    else:
        codes = tuple(select_codes(
            config.select,
            ignore=[*config.ignore, *selection.ignore],
            extend_select=[*config.extend_select, *selection.extend_select],
        ))
    if not codes:
        raise UnknownSelector("the selection runs no rule (an empty select, or everything ignored); "
                              "select a code or prefix, e.g. TDL0")
    return codes


def resolve_rules(config: Config, selection: CommandLineSelection = CommandLineSelection()) -> tuple[type[Rule], ...]:
    """`resolve_codes`, as rule classes."""
    return tuple(rules_for_codes(resolve_codes(config, selection)))


def _settings_from(config_file: Path | None, default_root: Path,
                   selection: CommandLineSelection) -> Settings:
    config = selection.applied_to(load_config(config_file))
    try:
        codes = resolve_codes(config, selection)
    except UnknownSelector as error:
        source = f"{config_file}: " if config_file is not None and selection.select is None else ""
        raise ConfigError(f"{source}{error}") from None
    root = config_file.parent if config_file is not None else default_root
    return Settings(config, root, codes, options_from_project(config, root, codes))


class SettingsFinder:
    """The settings of each path of a run, each configuration file read once.

    With `config_path` every path gets that file's settings; otherwise a path gets those of
    the closest configuration file above it, and a path with none above it those found from
    `cwd` (the defaults, rooted at `cwd`, when there are none either).
    """

    def __init__(self, cwd: Path, config_path: Path | None = None,
                 selection: CommandLineSelection = CommandLineSelection()) -> None:
        self._selection = selection
        self._explicit = config_path is not None or selection.isolated
        self._by_file: dict[Path | None, Settings] = {}
        # Folder (absolute) -> its closest configuration file, None when it has none above it.
        self._closest: dict[str, Path | None] = {}
        found = config_path if config_path is not None or selection.isolated else (
            self._closest_file(os.path.abspath(cwd)))
        self.fallback = self._for_file(found, cwd)

    def _for_file(self, config_file: Path | None, default_root: Path) -> Settings:
        known = self._by_file.get(config_file)
        if known is None:
            known = self._by_file[config_file] = _settings_from(config_file, default_root, self._selection)
        return known

    def _closest_file(self, folder: str) -> Path | None:
        if folder in self._closest:
            return self._closest[folder]
        found = config_file_in(Path(folder))
        if found is None:
            parent = os.path.dirname(folder)
            found = None if parent == folder else self._closest_file(parent)
        self._closest[folder] = found
        return found

    def for_folder(self, folder: Path) -> Settings:
        """The settings of the files directly inside `folder`."""
        if self._explicit:
            return self.fallback
        found = self._closest_file(os.path.abspath(folder))
        return self.fallback if found is None else self._for_file(found, found.parent)

    def for_file(self, path: Path) -> Settings:
        return self.for_folder(Path(os.path.abspath(path)).parent)

    @property
    def all_settings(self) -> tuple[Settings, ...]:
        """Every distinct settings met so far, the fallback first."""
        distinct = {id(settings): settings for settings in (self.fallback, *self._by_file.values())}
        return tuple(distinct.values())


def file_rule_codes(settings: Settings, path: Path) -> tuple[str, ...]:
    """The codes of the settings' rules that run on `path`: those `per-file-ignores` leaves."""
    ignored = settings.config.ignored_codes(path, settings.root)
    codes = settings.rule_codes
    if not ignored:
        return codes
    return tuple(code for code in codes if not any(prefix == "ALL" or code.startswith(prefix) for prefix in ignored))


def unfixable_codes(settings: Settings, codes: Sequence[str]) -> tuple[str, ...]:
    """Those of `codes` the settings' `unfixable` names (by code or prefix, ALL for every one)."""
    named = settings.config.unfixable
    if not named:
        return ()
    return tuple(code for code in codes if any(prefix == "ALL" or code.startswith(prefix) for prefix in named))


def _project_lines(settings: Settings, path: Path) -> list[str]:
    """What the rules that read the file's project found there: its GPU checkpoints (TDL003),
    and an option of another file that gives the file's program a CPU mode (TDL007, TDL203)."""
    if not any(entry.reads_the_project for entry in RULE_INDEX if entry.code in settings.rule_codes):
        return []
    from torchdevlint.project_scan import checkpoint_writing, cpu_mode_option

    writing = checkpoint_writing(str(path))
    if writing is None:
        return []
    option = cpu_mode_option(str(path))
    if option is None:
        cpu_mode = "no option of another file gives its program a CPU mode"
    else:
        runs = f"{option.program} runs it with" if option.program else "it takes"
        cpu_mode = f"{runs} the CPU mode of the option at {option.file}:{option.line} (TDL007 reads its CUDA uses)"
    if not writing.complete:
        found = "taken to write GPU checkpoints (too large to read)"
    elif writing.device_saves:
        found = "writes checkpoints that may hold GPU tensors, e.g. " + ", ".join(
            f"{name}:{line}" for name, line in writing.device_saves)
    else:
        found = "writes no checkpoint that may hold GPU tensors (TDL003 leaves its loads alone)"
    return [f"  project: {writing.root}", f"    {found}", f"    {cpu_mode}"]


def describe_settings(settings: Settings, path: Path | None) -> str:
    """What `--show-settings` prints: where the settings of `path` come from and what they are."""
    config = settings.config
    lines = [f"Settings for {path}" if path is not None else "Settings (no file found)",
             f"  configuration file: {config.source if config.source is not None else 'none (defaults)'}",
             f"  root: {settings.root}",
             f"  rules: {', '.join(settings.rule_codes)}"]
    if path is not None:
        skipped = [code for code in settings.rule_codes if code not in file_rule_codes(settings, path)]
        if skipped:
            lines.append(f"  not run on this file (per-file-ignores): {', '.join(skipped)}")
        lines += _project_lines(settings, path)
    if config.unfixable:
        lines.append(f"  unfixable: {', '.join(config.unfixable)}")
    lines += [f"  exclude: {', '.join(config.exclude) or '(none)'}",
              f"  extend-exclude: {', '.join(config.extend_exclude) or '(none)'}",
              f"  include: {', '.join(config.include)}",
              f"  respect-gitignore: {'true' if config.respect_gitignore else 'false'}"]
    for pattern, codes in config.per_file_ignores:
        lines.append(f"  per-file-ignores: {pattern!r} = {', '.join(codes)}")
    for code, options in sorted(config.rule_options.items()):
        lines.append(f"  {code} options: {options}")
    return "".join(f"{line}\n" for line in lines)
