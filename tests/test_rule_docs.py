"""docs/rules/ and the README's rule table are generated from the rules and must be current."""

from __future__ import annotations

import pytest
from conftest import ROOT, run_cli

from torchdevlint.diagnostics import Applicability
from torchdevlint.registry import all_rules
from torchdevlint.rule import Rule
from torchdevlint.ruledocs import doc_sections, page_path, rule_page, stale_files

# ruff's sections, in ruff's order, as every page shows them before the tests' examples.
RUFF_SECTIONS = ("What it does", "Why is this bad?", "Example", "Use instead", "Fix safety", "Options")


def test_generated_docs_are_current() -> None:
    stale = [path.relative_to(ROOT).as_posix() for path in stale_files(ROOT)]
    assert not stale, f"stale generated docs {stale}: run `python -m torchdevlint.ruledocs`"


def test_readme_table_links_every_rule_page() -> None:
    readme = (ROOT / "README.md").read_text()
    for rule in all_rules():
        assert f"| [{rule.code}]({page_path(rule).as_posix()}) | `{rule.slug}` |" in readme
        assert (ROOT / page_path(rule)).is_file()


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.code)
def test_page_holds_the_docstring_and_every_example(rule: type[Rule]) -> None:
    page = rule_page(rule)
    for title, body in doc_sections(rule).items():
        assert f"## {title}\n{body}" in page
    for example in rule.INVALID:
        assert f"Example:\n\n```python\n{example.source.rstrip()}\n```" in page
        if example.fixed_source is not None:
            assert example.applicability is not None
            assert (
                f"Use instead ({example.applicability.value} fix):\n\n```python\n{example.fixed_source.rstrip()}\n```"
                in page
            )
    for valid in rule.VALID:
        assert f"```python\n{valid.source.rstrip()}\n```" in page


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.code)
def test_page_renders_the_documented_example_in_ruff_order(rule: type[Rule]) -> None:
    page = rule_page(rule)
    own_part = page.split("\n## Examples from the tests\n", 1)[0]
    headings = [line[3:] for line in own_part.splitlines() if line.startswith("## ")]
    shown = [title for title in headings if title in RUFF_SECTIONS]
    assert shown == list(RUFF_SECTIONS), f"sections {shown}, want {list(RUFF_SECTIONS)}"

    [example] = [example for example in rule.INVALID if example.in_docs]
    assert f"## Example\n```python\n{example.source.rstrip()}\n```\n\n## Use instead\n" in own_part
    if example.fixed_source is not None:
        assert example.applicability is not None
        use_instead = f"## Use instead\n```python\n{example.fixed_source.rstrip()}\n```\n\n"
        assert use_instead in own_part
        fix_line = own_part.split(use_instead, 1)[1].splitlines()[0]
        assert example.applicability.value in fix_line
        if example.applicability is Applicability.SAFE:
            assert "unsafe" not in fix_line
    else:
        [valid] = [valid for valid in rule.VALID if valid.in_docs]
        assert f"## Use instead\n```python\n{valid.source.rstrip()}\n```\n\n## Fix safety\n" in own_part


def test_rule_command_prints_the_page() -> None:
    rule = all_rules()[0]
    assert run_cli("rule", rule.code).stdout == rule_page(rule)


def test_check_mode_exits_1_when_stale(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import shutil

    from torchdevlint.ruledocs import write_docs

    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    # No pages nor rule index yet: each is stale (and the copied README's table too, if it is behind).
    assert {p.name for p in stale_files(tmp_path)} - {"README.md"} == {
        *(f"{rule.code}.md" for rule in all_rules()), "rule_index.py"}
    (tmp_path / "docs" / "rules").mkdir(parents=True)
    (tmp_path / "docs" / "rules" / "TDL998.md").write_text("a page for a rule that is gone\n")
    write_docs(tmp_path)
    assert stale_files(tmp_path) == []
    assert not (tmp_path / "docs" / "rules" / "TDL998.md").exists()


def test_a_page_links_every_rule_its_text_names() -> None:
    """TDL003's page says TDL203 reports the programs it leaves alone: a reader follows a link."""
    page = rule_page(next(rule for rule in all_rules() if rule.code == "TDL003"))
    related = page.split("## Related rules", 1)[1].split("\n## ", 1)[0]
    assert "- [TDL203](TDL203.md) `hard-coded-cuda`:" in related
    assert "[TDL003]" not in related
    alone = next(rule for rule in all_rules() if "TDL" not in rule.documentation())
    assert "## Related rules" not in rule_page(alone)
