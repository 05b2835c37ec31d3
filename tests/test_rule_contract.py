"""Tier 3: the contract every rule keeps, checked over all of them."""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import libcst as cst
import pytest
from conftest import ROOT

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
def test_what_a_rule_leaves_alone_is_said_in_its_own_section(rule: type[Rule]) -> None:
    """Every page says what its rule does not report in the same place: `## Not reported`,
    after "Why is this bad?" and before "Fix safety"."""
    sections = doc_sections(rule)
    for title, body in sections.items():
        if title == "Not reported":
            continue
        paragraphs = [paragraph.strip() for paragraph in re.split(r"\n\s*\n", body)]
        stray = [p[:40] for p in paragraphs if re.match(r"(Not reported|Nor |Also not reported)", p)]
        assert not stray, f"{stray} under '## {title}': move it to '## Not reported'"
    titles = list(sections)
    if "Not reported" in titles:
        assert titles.index("Why is this bad?") < titles.index("Not reported") < titles.index("Fix safety")


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


# -- what CONTRIBUTING.md's recipe for a new rule lists, checked rule by rule ----------------------

_FIXTURE_EXPECT = re.compile(r"#\s*expect:\s*(?P<codes>TDL\d{3}(?:\s*,\s*TDL\d{3})*)")


def _fixtures_marking(code: str) -> list[Path]:
    fixtures = ROOT / "fixtures"
    return [path for path in sorted([*fixtures.glob("*.py"), *fixtures.glob("*.ipynb")])
            if any(code in re.split(r"\s*,\s*", match.group("codes"))
                   for match in _FIXTURE_EXPECT.finditer(path.read_text(encoding="utf-8")))]


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.code)
def test_rule_has_a_fixture_with_its_fixed_snapshot(rule: type[Rule]) -> None:
    marking = _fixtures_marking(rule.code)
    stem = f"{rule.code.lower()}_<what_it_shows>"
    assert marking, (
        f"{rule.code} has no fixture. Write fixtures/{stem}.py: a realistic program (a training script, "
        "a model module, a notebook as .ipynb) opening with `# Demonstrates:`, `# Rule(s):` and `# verify:` "
        f"comment lines, with `# expect: {rule.code}` at the end of each line the rule reports; then "
        f"fixtures/{stem}.py.fixed, the program as `torchdevlint check --fix --unsafe-fixes` leaves it "
        "(see CONTRIBUTING.md, \"Adding a rule\").")
    for path in marking:
        snapshot = path.with_name(path.name + ".fixed")
        assert snapshot.is_file(), (
            f"{path.name} has no fixed snapshot: write {snapshot.name}, the fixture as "
            "`torchdevlint check --fix --unsafe-fixes` leaves it")


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.code)
def test_rule_declares_how_verify_proves_it(rule: type[Rule]) -> None:
    from torchdevlint.runtime_proof import RuntimeProof

    proof = rule.proof
    assert isinstance(proof, RuntimeProof), f"{rule.code}.proof must be a RuntimeProof (torchdevlint.runtime_proof)"
    assert proof.host in ("gpu", "cpu", "mps", "cpu-loads-gpu-checkpoint")
    assert proof.gpus >= 1


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.code)
def test_rule_has_its_generated_docs_page(rule: type[Rule]) -> None:
    page = ROOT / "docs" / "rules" / f"{rule.code}.md"
    assert page.is_file(), f"docs/rules/{rule.code}.md is missing: run `python -m torchdevlint.ruledocs`"
