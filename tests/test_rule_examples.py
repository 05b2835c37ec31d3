"""Tier 1: every rule's own VALID/INVALID examples, one case each, with readable ids."""

from __future__ import annotations

import pytest

from torchdevlint.engine import lint_source
from torchdevlint.fixer import fix_source
from torchdevlint.registry import all_rules
from torchdevlint.rule import Invalid, Rule, Valid


def _cases(kind: str) -> list[pytest.param]:
    cases = []
    for rule in all_rules():
        examples = rule.VALID if kind == "valid" else rule.INVALID
        for index, example in enumerate(examples):
            name = example.name or f"example-{index}"
            cases.append(pytest.param(rule, example, id=f"{rule.code}-{kind}-{name}"))
    return cases


@pytest.mark.parametrize(("rule", "example"), _cases("valid"))
def test_valid_example_is_not_reported(rule: type[Rule], example: Valid) -> None:
    assert lint_source(example.source, "example.py", [rule]) == []


@pytest.mark.parametrize(("rule", "example"), _cases("invalid"))
def test_invalid_example_is_reported_and_fixed(rule: type[Rule], example: Invalid) -> None:
    diagnostics = lint_source(example.source, "example.py", [rule])
    assert diagnostics, "the rule did not fire"
    assert {d.code for d in diagnostics} == {rule.code}
    if example.count is not None:
        assert len(diagnostics) == example.count
    fixed = fix_source(example.source, "example.py", [rule], unsafe=True).text
    if example.fixed_source is None:
        assert all(d.fix is None for d in diagnostics), "a fix exists but the example declares none"
        assert fixed == example.source
        return
    assert fixed == example.fixed_source
    declared = example.applicability
    assert declared is not None, "an example with `fixed=` must declare its applicability"
    assert {d.fix.applicability for d in diagnostics if d.fix is not None} == {declared}
    # Safe-only fixing applies exactly the safe fixes.
    safe_only = fix_source(example.source, "example.py", [rule], unsafe=False).text
    assert safe_only == (example.fixed_source if declared.value == "safe" else example.source)
