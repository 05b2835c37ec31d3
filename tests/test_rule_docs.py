"""docs/rules/ and the README's rule table are generated from the rules and must be current."""

from __future__ import annotations

import pytest
from conftest import ROOT, run_cli

from torchdevlint.registry import all_rules
from torchdevlint.rule import Rule
from torchdevlint.ruledocs import doc_sections, page_path, rule_page, stale_files


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
    for example in rule.VALID:
        assert f"```python\n{example.source.rstrip()}\n```" in page


def test_rule_command_prints_the_page() -> None:
    rule = all_rules()[0]
    assert run_cli("rule", rule.code).stdout == rule_page(rule)


def test_check_mode_exits_1_when_stale(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import shutil

    from torchdevlint.ruledocs import write_docs

    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    # No pages yet: every one is stale (and the copied README's table too, if it is behind).
    assert {p.name for p in stale_files(tmp_path)} - {"README.md"} == {f"{rule.code}.md" for rule in all_rules()}
    (tmp_path / "docs" / "rules").mkdir(parents=True)
    (tmp_path / "docs" / "rules" / "TDL998.md").write_text("a page for a rule that is gone\n")
    write_docs(tmp_path)
    assert stale_files(tmp_path) == []
    assert not (tmp_path / "docs" / "rules" / "TDL998.md").exists()
