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
from torchdevlint.ruledocs import doc_sections

RULES = all_rules()
# ruff's sections, less "Example" and "Use instead": the docs render those from the examples.
REQUIRED_SECTIONS = ("## What it does", "## Why is this bad?", "## Fix safety", "## Options")
GENERATED_SECTIONS = ("Example", "Use instead")


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
    assert all(p >= 0 for p in positions), f"missing: {[s for s, p in zip(REQUIRED_SECTIONS, positions, strict=True) if p < 0]}"
    assert positions == sorted(positions), "sections out of order"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_docstring_has_no_hand_written_examples(rule: type[Rule]) -> None:
    # Hand-written examples drift from what the rule reports; the docs render tested ones.
    written = [title for title in doc_sections(rule) if title in GENERATED_SECTIONS]
    assert not written, f"docstring sections {written}: mark an example `in_docs=True` instead"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_rule_has_examples_both_ways(rule: type[Rule]) -> None:
    assert rule.VALID and rule.INVALID


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_one_documented_example_with_a_use_instead(rule: type[Rule]) -> None:
    documented = [example for example in rule.INVALID if example.in_docs]
    assert len(documented) == 1, f"{len(documented)} `Invalid(..., in_docs=True)`; the docs' Example needs exactly one"
    alternatives = [example for example in rule.VALID if example.in_docs]
    if documented[0].fixed is None:
        assert len(alternatives) == 1, "the documented example has no fix: mark one `Valid(..., in_docs=True)`"
    else:
        assert not alternatives, "the documented example's `fixed` is the Use instead: no `Valid` is `in_docs`"


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
