"""Tier 3: the contract every rule keeps, checked over all of them."""

from __future__ import annotations

import dataclasses
import re
import sys

import libcst as cst
import pytest

from torchdevlint.engine import lint_source
from torchdevlint.fixer import fix_source
from torchdevlint.registry import CODE_PATTERN, all_rules
from torchdevlint.rule import Rule

RULES = all_rules()
REQUIRED_SECTIONS = ("## What it does", "## Why is this bad?", "## Example", "## Use instead", "## Fix safety", "## Options")


def test_codes_and_slugs_are_unique() -> None:
    assert len({rule.code for rule in RULES}) == len(RULES)
    assert len({rule.slug for rule in RULES}) == len(RULES)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_code_slug_and_module_name_are_well_formed(rule: type[Rule]) -> None:
    assert CODE_PATTERN.match(rule.code)
    assert re.fullmatch(r"[a-z]+(-[a-z0-9]+)+", rule.slug)
    module_name = rule.__module__.rsplit(".", 1)[1]
    assert module_name == f"{rule.code.lower()}_{rule.slug.replace('-', '_')}"
    assert rule.message and "\n" not in rule.message and not rule.message.endswith(".")


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_docs_have_every_section(rule: type[Rule]) -> None:
    docs = rule.documentation()
    positions = [docs.find(section) for section in REQUIRED_SECTIONS]
    assert all(p >= 0 for p in positions), f"missing: {[s for s, p in zip(REQUIRED_SECTIONS, positions) if p < 0]}"
    assert positions == sorted(positions), "sections out of order"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_rule_has_examples_both_ways(rule: type[Rule]) -> None:
    assert rule.VALID and rule.INVALID


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_options_are_a_frozen_dataclass(rule: type[Rule]) -> None:
    assert dataclasses.is_dataclass(rule.Options)
    assert rule.Options.__dataclass_params__.frozen  # type: ignore[attr-defined]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_fixes_parse_compile_converge_and_relint_clean(rule: type[Rule]) -> None:
    for example in rule.INVALID:
        once = fix_source(example.source, "example.py", [rule], unsafe=True).text
        cst.parse_module(once)
        compile(once, "example.py", "exec")
        twice = fix_source(once, "example.py", [rule], unsafe=True).text
        assert twice == once, "fixing is not idempotent"
        assert all(d.fix is None for d in lint_source(once, "example.py", [rule]))


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_declared_fixability_matches_behaviour(rule: type[Rule]) -> None:
    offers_fix = any(
        d.fix is not None for example in rule.INVALID for d in lint_source(example.source, "example.py", [rule])
    )
    assert offers_fix == rule.is_fixable()
    if rule.is_fixable():
        assert rule.fix_title


def test_linting_never_imports_torch() -> None:
    import subprocess

    code = (
        "import sys\n"
        "from torchdevlint.registry import select_rules\n"
        "from torchdevlint.engine import lint_source\n"
        "lint_source('import torch\\nx = torch.zeros(3)\\nx.cuda()\\n', 'a.py', select_rules())\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_readme_rule_table_is_current() -> None:
    from pathlib import Path

    from torchdevlint.ruledocs import render_readme

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    assert render_readme(readme) == readme, "run `python -m torchdevlint.ruledocs`"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_required_text_prefilter_never_hides_an_example(rule: type[Rule]) -> None:
    for example in rule.INVALID:
        assert not rule.requires_any_text or any(text in example.source for text in rule.requires_any_text)
