"""Discovers rules (one module each under torchdevlint/rules/) and selects them by code.

Selecting and checking codes reads the generated rule index, so a run answered from the
cache never imports a rule (each imports the analysis and LibCST); the rules themselves are
imported when a file is linted.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import TYPE_CHECKING

from torchdevlint.rule_index import RULE_INDEX

if TYPE_CHECKING:
    from torchdevlint.rule import Rule

CODE_PATTERN = re.compile(r"^TDL\d{3}$")
SELECTOR_PATTERN = re.compile(r"^TDL\d{0,3}$|^ALL$")

# Codes are never reused. A retired code stays here so old `noqa` comments and configs
# get a helpful message instead of silence.
RETIRED_CODES: dict[str, str] = {}


class UnknownSelector(ValueError):
    """A --select/--ignore value or a config entry that names no rule."""


@lru_cache(maxsize=1)
def all_rules() -> tuple[type[Rule], ...]:
    from torchdevlint import rules as rules_package
    from torchdevlint.rule import Rule

    found: list[type[Rule]] = []
    for module_info in sorted(pkgutil.iter_modules(rules_package.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{rules_package.__name__}.{module_info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Rule) and value is not Rule and value.__module__ == module.__name__:
                found.append(value)
    return tuple(sorted(found, key=lambda rule: rule.code))


def rule_by_code(code: str) -> type[Rule] | None:
    code = code.upper()
    for rule in all_rules():
        if rule.code == code or rule.slug == code.lower():
            return rule
    return None


def validate_selector(selector: str) -> str:
    normalized = selector.strip().upper()
    if normalized in RETIRED_CODES:
        raise UnknownSelector(f"{normalized} is retired: {RETIRED_CODES[normalized]}")
    if not SELECTOR_PATTERN.match(normalized):
        raise UnknownSelector(f"{selector!r} is not a rule code or prefix (expected e.g. TDL001 or TDL0)")
    if normalized != "ALL" and not any(entry.code.startswith(normalized) for entry in RULE_INDEX):
        raise UnknownSelector(f"{selector!r} matches no rule")
    return normalized


def _matches(code: str, selectors: Iterable[str]) -> int:
    """Length of the longest selector matching `code` (0 if none); longer is more specific."""
    best = 0
    for selector in selectors:
        if selector == "ALL":
            best = max(best, 1)
        elif code.startswith(selector):
            best = max(best, len(selector))
    return best


def select_codes(
    select: Iterable[str] | None = None,
    ignore: Iterable[str] = (),
    extend_select: Iterable[str] = (),
) -> list[str]:
    """The codes of the rules on by default (or those `select` names), plus `extend_select`,
    minus `ignore`; read from the rule index, importing no rule.

    As in ruff, a code or prefix selects every rule it matches, whether on by default or not
    (the same in `select` and `extend_select`), and the more specific selector wins:
    `--select TDL --ignore TDL0 --select TDL001`.
    """
    select = [validate_selector(s) for s in select] if select is not None else None
    ignore = [validate_selector(s) for s in ignore]
    extend_select = [validate_selector(s) for s in extend_select]
    chosen: list[str] = []
    for entry in RULE_INDEX:
        if select is None:
            selected = entry.default_enabled
            select_strength = 0
        else:
            select_strength = _matches(entry.code, select)
            selected = select_strength > 0
        extend_strength = _matches(entry.code, extend_select)
        if extend_strength:
            selected = True
            select_strength = max(select_strength, extend_strength)
        ignore_strength = _matches(entry.code, ignore)
        if selected and ignore_strength and ignore_strength >= select_strength:
            selected = False
        if selected:
            chosen.append(entry.code)
    return chosen


def rules_for_codes(codes: Iterable[str]) -> list[type[Rule]]:
    """The rule classes of these codes (importing the rules)."""
    by_code = {rule.code: rule for rule in all_rules()}
    return [by_code[code] for code in codes if code in by_code]


def select_rules(
    select: Iterable[str] | None = None,
    ignore: Iterable[str] = (),
    extend_select: Iterable[str] = (),
) -> list[type[Rule]]:
    """The rules `select_codes` chooses, as classes."""
    return rules_for_codes(select_codes(select, ignore, extend_select))
