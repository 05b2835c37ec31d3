"""Long literals of numbers are parsed blank: findings, fixes and bytes stay where they are."""

from __future__ import annotations

import ast

from torchdevlint.data_literals import MIN_BLANKED_CHARACTERS, blank_number_literals
from torchdevlint.engine import lint_source
from torchdevlint.registry import all_rules

NUMBERS = ", ".join(f"{i * 0.37:.4f}" for i in range(8_000))


def test_a_dataset_literal_is_blanked_at_the_same_offsets() -> None:
    source = f"import torch\nDATA = [{NUMBERS}]; PAIRS = [[{NUMBERS.replace(', ', '], [')}]]\nx = 1\n"
    blanked = blank_number_literals(source)
    assert len(blanked.spans) == 2
    assert len(blanked.text) == len(source)
    assert blanked.text.splitlines()[0] == "import torch" and blanked.text.endswith("\nx = 1\n")
    assert "; PAIRS = [" in blanked.text  # the code between the literals is as it was
    assert isinstance(ast.parse(blanked.text).body[1], ast.Assign)
    for start, end in blanked.spans:
        assert end - start >= MIN_BLANKED_CHARACTERS
        assert set(blanked.text[start:end]) <= {"0", ",", " "}


def test_what_is_not_all_numbers_is_parsed_as_written() -> None:
    for inside in (NUMBERS + ", x", NUMBERS.replace(", ", " "), NUMBERS + ", 'a'", NUMBERS.replace(", ", ",,"),
                   "1, 2, 3"):
        source = f"import torch\nDATA = [{inside}]\n"
        assert blank_number_literals(source).spans == (), inside[-20:]


def test_findings_around_a_blanked_literal_keep_their_places_and_fixes() -> None:
    source = (f"import torch\nx = torch.zeros(2)\nDATA = [{NUMBERS}]; x.cuda()\n"
              f"y = torch.tensor([{NUMBERS}]); y.cuda()\n")
    diagnostics = lint_source(source, "data.py", list(all_rules()))
    moves = sorted((d.start.line, d.start.column) for d in diagnostics if d.code == "TDL001")
    column = len(f"DATA = [{NUMBERS}]; ") + 1
    assert moves == [(3, column), (4, len(f"y = torch.tensor([{NUMBERS}]); ") + 1)]
    for diagnostic in diagnostics:
        assert diagnostic.fix is not None
        for edit in diagnostic.fix.edits:
            assert source[edit.start:edit.end] in ("x.cuda()", "y.cuda()", "")


def test_a_fix_that_would_edit_a_blanked_literal_is_withheld() -> None:
    # TDL024's fix rewrites the whole expression, literal included: from the blanked tree it
    # would write zeros, so it is not offered.
    source = f"import torch\nw = torch.tensor([{NUMBERS}], requires_grad=True).cuda()\n"
    (leaf,) = [d for d in lint_source(source, "data.py", list(all_rules())) if d.code == "TDL024"]
    assert leaf.fix is None
    assert leaf.fix_withheld == "it would edit a long literal of numbers, which is not analysed"
