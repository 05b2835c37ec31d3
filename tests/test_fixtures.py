"""Tier 2: realistic programs under fixtures/, with `# expect: CODE` markers and fixed snapshots."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import FIXTURES

from torchdevlint.engine import lint_source
from torchdevlint.fixer import fix_source
from torchdevlint.notebook.document import NotebookDocument
from torchdevlint.programs import load_program, read_program
from torchdevlint.registry import all_rules, select_rules

_EXPECT = re.compile(r"#\s*expect:\s*(?P<codes>TDL\d{3}(?:\s*,\s*TDL\d{3})*)")
FIXTURE_FILES = sorted(FIXTURES.glob("*.py"))
NOTEBOOK_FIXTURES = sorted(FIXTURES.glob("*.ipynb"))
IMPLEMENTED = {rule.code for rule in all_rules()}


DEFAULT_CODES = {rule.code for rule in select_rules()}


def expected_findings(source: str, *, default_rules_only: bool = True) -> set[tuple[int, str]]:
    """(line, code) pairs marked `# expect: CODE`; rules off by default count only on request."""
    found = set()
    for number, line in enumerate(source.splitlines(), start=1):
        match = _EXPECT.search(line)
        if match:
            for code in re.split(r"\s*,\s*", match.group("codes")):
                if code in IMPLEMENTED and (code in DEFAULT_CODES or not default_rules_only):
                    found.add((number, code))
    return found


def fixture_rules(source: str) -> list:  # type: ignore[type-arg]
    """The default rules, plus any rule that is off by default but marked in this fixture:
    a fixture for such a rule is linted as a user who turned it on would lint it."""
    marked = {code for _, code in expected_findings(source, default_rules_only=False)}
    return select_rules(extend_select=sorted(marked - DEFAULT_CODES))


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.stem)
def test_fixture_findings_match_expect_comments(path: Path) -> None:
    source = path.read_text()
    diagnostics = lint_source(source, str(path), fixture_rules(source))
    assert {(d.start.line, d.code) for d in diagnostics} == expected_findings(source, default_rules_only=False)


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.stem)
def test_fixture_fixed_output_matches_snapshot(path: Path) -> None:
    snapshot = path.with_name(path.name + ".fixed")
    assert snapshot.exists(), f"missing snapshot {snapshot.name}"
    source = path.read_text()
    rules = fixture_rules(source)
    fixed = fix_source(source, str(path), rules, unsafe=True).text
    assert fixed.encode() == snapshot.read_bytes()
    # The fixed program is clean of every finding that has a fix.
    remaining = lint_source(fixed, str(path), rules)
    assert all(d.fix is None for d in remaining)


# -- notebooks: markers in code cells, findings counted within their cell ------------------------

def expected_notebook_findings(path: Path) -> set[tuple[int, int, str]]:
    """(cell, line, code) for each `# expect: CODE` marker in a code cell."""
    document = NotebookDocument.parse(path.read_bytes())
    return {
        (cell.number, line, code)
        for cell in document.cells if cell.is_code
        for line, code in expected_findings(cell.source, default_rules_only=False)
    }


def notebook_rules(path: Path) -> list:  # type: ignore[type-arg]
    marked = {code for _, _, code in expected_notebook_findings(path)}
    return select_rules(extend_select=sorted(marked - DEFAULT_CODES))


@pytest.mark.parametrize("path", NOTEBOOK_FIXTURES, ids=lambda p: p.stem)
def test_notebook_fixture_findings_match_expect_comments_in_their_cells(path: Path) -> None:
    diagnostics = read_program(str(path)).lint(notebook_rules(path))
    assert {(d.cell, d.start.line, d.code) for d in diagnostics} == expected_notebook_findings(path)


@pytest.mark.parametrize("path", NOTEBOOK_FIXTURES, ids=lambda p: p.stem)
def test_notebook_fixture_fixed_output_matches_snapshot_and_is_a_valid_notebook(path: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    snapshot = path.with_name(path.name + ".fixed")
    assert snapshot.exists(), f"missing snapshot {snapshot.name}"
    program = read_program(str(path))
    rules = notebook_rules(path)
    fixed = program.encode(program.fix(rules, unsafe=True).text)
    assert fixed == snapshot.read_bytes()
    nbformat.validate(nbformat.reads(fixed.decode(), as_version=nbformat.NO_CONVERT))
    # The fixed notebook is clean of every finding that has a fix.
    remaining = load_program(str(path), fixed).lint(rules)
    assert all(d.fix is None for d in remaining)
