"""The one way every front end (CLI, `verify`, flake8) turns configuration into rules to run.

Configuration comes from the nearest `pyproject.toml` (or one named explicitly); a selection
made on the command line is applied on top of it, as ruff does: `--select` replaces the
configured selection (select, extend-select and ignore alike), `--extend-select` and
`--ignore` add to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from torchdevlint.config import Config, ConfigError, find_pyproject, load_config
from torchdevlint.registry import UnknownSelector, select_rules
from torchdevlint.rule import Rule


@dataclass(frozen=True)
class CommandLineSelection:
    """Rule selectors given on a command line (empty: the configuration decides)."""

    select: tuple[str, ...] | None = None
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()


@dataclass(frozen=True)
class Settings:
    config: Config
    # The folder relative paths (exclude patterns, the cache) are taken from.
    root: Path
    rules: tuple[type[Rule], ...] = field(default_factory=tuple)

    @property
    def rule_options(self) -> dict[str, object]:
        return dict(self.config.rule_options)


def resolve_rules(config: Config, selection: CommandLineSelection = CommandLineSelection()) -> tuple[type[Rule], ...]:
    """The rules to run; raises UnknownSelector for a selector that names no rule, and for a
    selection that runs none (`--select ''`, `select = []`), which would pass every file."""
    if selection.select is not None:
        rules = tuple(select_rules(selection.select, ignore=selection.ignore, extend_select=selection.extend_select))
    else:
        rules = tuple(select_rules(
            config.select,
            ignore=[*config.ignore, *selection.ignore],
            extend_select=[*config.extend_select, *selection.extend_select],
        ))
    if not rules:
        raise UnknownSelector("the selection runs no rule (an empty select, or everything ignored); "
                              "select a code or prefix, e.g. TDL0")
    return rules


def load_settings(cwd: Path, config_path: Path | None = None,
                  selection: CommandLineSelection = CommandLineSelection()) -> Settings:
    """Configuration found from `cwd` (or read from `config_path`) with the selection applied.

    Raises ConfigError, naming the file and key, for a broken configuration or selector.
    """
    pyproject = config_path if config_path is not None else find_pyproject(cwd)
    config = load_config(pyproject)
    try:
        rules = resolve_rules(config, selection)
    except UnknownSelector as error:
        raise ConfigError(str(error)) from None
    root = pyproject.parent if pyproject is not None else cwd
    return Settings(config, root, rules)
