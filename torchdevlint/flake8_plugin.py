"""flake8 front end: `flake8 --select TDL` reports what `torchdevlint check` reports.

A thin adapter over the engine. Three conventions of flake8 decide its shape:

- flake8 treats the column an AST plugin yields as a 0-based offset and adds 1 when it
  reports it; our columns are 1-based, so the plugin yields `column - 1` (torchfix yields
  the 1-based column and its findings land one place to the right).
- flake8 applies `# noqa` itself (and honours `--disable-noqa`), so the engine is asked to
  keep findings on `# noqa` lines.
- flake8 filters findings by its own `--select`/`--ignore`; which rules run at all comes from
  `[tool.torchdevlint]`, as for the CLI. A rule that is off by default runs only when the
  config selects it (by code or prefix) or flake8's `--select`/`--extend-select` names its full
  code (flake8's usual `--select TDL` is not meant to turn on every rule). Each file is
  configured by the closest configuration above it, as by the CLI, `per-file-ignores` included.

The plugin never fixes and never imports torch.
"""

from __future__ import annotations

import argparse
import ast
import logging
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import ClassVar

import libcst as cst

from torchdevlint import __version__
from torchdevlint.budget import DEFAULT_FILE_SECONDS, AnalysisTimeout, Deadline
from torchdevlint.config import ConfigError
from torchdevlint.engine import InvalidSource, lint_source
from torchdevlint.rule_index import RULE_INDEX
from torchdevlint.settings import CommandLineSelection, Settings, SettingsFinder, file_rule_codes

LOG = logging.getLogger("torchdevlint")

# flake8 passes file names as given; these mean standard input.
_STDIN_NAMES = ("-", "stdin")


def _codes(values: Iterable[str] | str | None) -> list[str]:
    if values is None:
        return []
    if isinstance(values, str):
        values = values.split(",")
    return [value.strip().upper() for value in values if value.strip()]


def plugin_settings_finder(cwd: Path, flake8_selected: Iterable[str] = ()) -> SettingsFinder:
    """Rules and options of each file as `torchdevlint check` would choose them from `cwd`.

    Raises ConfigError for a broken configuration.
    """
    # flake8 knows nothing of rules that are off by default: only a full code turns one on.
    off_by_default = {entry.code for entry in RULE_INDEX if not entry.default_enabled}
    named = tuple(code for code in flake8_selected if code in off_by_default)
    return SettingsFinder(cwd, selection=CommandLineSelection(extend_select=named))


def plugin_settings(cwd: Path, flake8_selected: Iterable[str] = ()) -> Settings:
    """The settings of files in `cwd` (and of standard input)."""
    return plugin_settings_finder(cwd, flake8_selected).fallback


class TorchDevLintChecker:
    """flake8 AST plugin; flake8 requires the `tree` argument, the engine parses `lines` itself."""

    name = "torchdevlint"
    version = __version__

    finder: ClassVar[SettingsFinder | None] = None

    def __init__(self, tree: ast.AST, filename: str, lines: Sequence[str]) -> None:
        self.filename = filename
        self.lines = lines

    @classmethod
    def parse_options(cls, options: argparse.Namespace) -> None:
        from flake8.exceptions import ExecutionError

        selected = [
            *_codes(getattr(options, "select", None)),
            *_codes(getattr(options, "extend_select", None)),
        ]
        try:
            cls.finder = plugin_settings_finder(Path.cwd(), selected)
        except ConfigError as error:
            raise ExecutionError(f"torchdevlint: {error}") from None

    @classmethod
    def _finder(cls) -> SettingsFinder:
        if cls.finder is None:
            cls.finder = plugin_settings_finder(Path.cwd())
        return cls.finder

    def run(self) -> Iterator[tuple[int, int, str, type]]:
        finder = self._finder()
        if self.filename in _STDIN_NAMES:
            settings = finder.fallback
            rules = settings.rules
        else:
            try:
                settings = finder.for_file(Path(self.filename))
            except ConfigError as error:
                LOG.warning("torchdevlint: %s", error)
                return
            if settings.config.excludes_file(Path(self.filename), settings.root):
                return
            codes = file_rule_codes(settings, Path(self.filename))
            rules = tuple(rule for rule in settings.rules if rule.code in codes)
        source = "".join(self.lines)
        try:
            diagnostics = lint_source(source, self.filename, rules, settings.rule_options,
                                      honor_noqa=False, deadline=Deadline(DEFAULT_FILE_SECONDS))
        except cst.ParserSyntaxError as error:
            # Python parsed it (flake8 gave us a tree), LibCST did not: say so, report nothing.
            LOG.warning("torchdevlint: %s:%s: LibCST cannot parse this file", self.filename, error.raw_line)
            return
        except InvalidSource as error:
            # flake8 reports syntax errors itself (E999); nothing to add.
            LOG.warning("torchdevlint: %s:%s: %s", self.filename, error.line, error.message)
            return
        except RecursionError:
            LOG.warning("torchdevlint: %s: too deeply nested to analyse", self.filename)
            return
        except AnalysisTimeout as error:
            LOG.warning("torchdevlint: %s: %s", self.filename, error)
            return
        for diagnostic in diagnostics:
            yield (
                diagnostic.start.line,
                diagnostic.start.column - 1,
                f"{diagnostic.code} {diagnostic.message}",
                type(self),
            )
