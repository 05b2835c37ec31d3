"""Long literals of numbers and long generated expressions are parsed blank: findings, fixes and
bytes stay where they are."""

from __future__ import annotations

import ast

from torchdevlint.data_literals import (
    MIN_BLANKED_CHARACTERS,
    MIN_BLANKED_EXPRESSION,
    blank_long_expressions,
    blank_number_literals,
)
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
    assert leaf.fix_withheld == "it would edit a long literal or expression, which is not analysed"


# A generated expression: calls, strings holding brackets and quotes, a comment, over lines.
CALLS = ",\n    ".join(f"x.sum() * {i}  # ')' [\n    + len('[(\"')" for i in range(4_000))


def test_a_generated_expression_is_blanked_with_its_lines_kept() -> None:
    source = f"import torch\nx = torch.zeros(3)\nvalues = [\n    {CALLS}\n]\nprint(values)\n"
    blanked = blank_long_expressions(source)
    (span,) = blanked.spans
    assert span[1] - span[0] >= MIN_BLANKED_EXPRESSION
    assert len(blanked.text) == len(source)
    assert blanked.text.count("\n") == source.count("\n")
    assert blanked.text[:span[0]] == source[:span[0]] and blanked.text[span[1]:] == source[span[1]:]
    assert set(blanked.text[span[0]:span[1]]) <= {"0", ",", " ", "\n"}
    assert isinstance(ast.parse(blanked.text).body[2], ast.Assign)


def test_short_or_unpaired_expressions_and_signatures_are_parsed_as_written() -> None:
    long_parameters = ", ".join(f"p{i}=0" for i in range(20_000))
    for source in (f"import torch\nvalues = [{CALLS[:5_000]}]\n",  # short
                   f"import torch\nvalues = [\n    {CALLS}\n\n",  # never closed
                   f"import torch\nvalues = [\n    {CALLS}\n] + ']\n",  # a string never closed
                   f"import torch\ndef build({long_parameters}):\n    pass\n"):
        assert blank_long_expressions(source).spans == ()


def test_findings_after_a_generated_expression_keep_their_lines() -> None:
    source = (f"import torch\nx = torch.zeros(3)\nvalues = [\n    {CALLS}\n]\n"
              "x.cuda()\nweights = torch.load('w.pt')\n")
    diagnostics = lint_source(source, "generated.py", list(all_rules()))
    lines = source.count("\n")
    assert sorted((d.code, d.start.line) for d in diagnostics if d.code in ("TDL001", "TDL003")) == \
        [("TDL001", lines - 1)]
    # The move's fix edits its own line, as written.
    (move,) = [d for d in diagnostics if d.code == "TDL001"]
    assert move.fix is not None and all(source[edit.start:edit.end] in ("x.cuda()", "") for edit in move.fix.edits)
