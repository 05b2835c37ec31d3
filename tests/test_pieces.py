"""Files too big to analyse at once are linted in pieces of whole top-level statements
(`torchdevlint.pieces`): the findings, their fixes and syntax errors land where whole-file
linting puts them, and memory stays a small multiple of the file."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import ROOT

from torchdevlint import pieces
from torchdevlint.engine import InvalidSource, lint_source
from torchdevlint.fixer import fix_source
from torchdevlint.pieces import cut_into_pieces, needs_pieces
from torchdevlint.registry import all_rules

DEFAULT_RULES = [rule for rule in all_rules() if rule.default_enabled]

# Each function is a piece of its own once pieces hold two statements: its bug needs only the
# imports in front of it.
PROGRAM = textwrap.dedent('''\
    """A module of helpers, each with its own device bug."""
    import torch
    from torch import nn

    CHANNELS = 3


    def first():
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        x = torch.zeros(3)
        x.to(device)
        return x


    @torch.no_grad()
    def second(batch):
        checkpoint = torch.load("weights.pt")
        return checkpoint


    class Model(nn.Module):
        def forward(self, x):
            mask = torch.ones(x.shape[0])
            return x * mask


    if torch.cuda.is_available():
        pass
    else:
        y = torch.ones(2)
        y.cuda()
''')


@pytest.fixture
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any file is cut, two top-level statements to a piece."""
    monkeypatch.setattr(pieces, "PIECEWISE_ABOVE", 10)
    monkeypatch.setattr(pieces, "PIECE_STATEMENTS", 2)


def _seen(diagnostics: list) -> list[tuple[object, ...]]:
    return [(d.code, d.start.line, d.start.column, d.end.line, d.end.column,
             None if d.fix is None else d.fix.edits) for d in diagnostics]


def test_pieces_are_whole_top_level_statements_with_the_imports_before_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pieces, "PIECE_STATEMENTS", 1)
    cut = cut_into_pieces(PROGRAM)
    assert cut is not None
    starts = [PROGRAM[piece.start:piece.end].splitlines()[0] for piece in cut]
    # Each definition goes with its decorator, and `else:` never starts a piece.
    assert starts == ['"""A module of helpers, each with its own device bug."""', "import torch",
                      "from torch import nn", "CHANNELS = 3", "def first():", "@torch.no_grad()",
                      "class Model(nn.Module):", "if torch.cuda.is_available():"]
    assert "".join(PROGRAM[piece.start:piece.end] for piece in cut) == PROGRAM
    assert [piece.header for piece in cut[:4]] == ["", "", "import torch\n", "import torch\nfrom torch import nn\n"]
    assert cut[-1].header == "import torch\nfrom torch import nn\n"
    assert [piece.line for piece in cut] == [1, 2, 3, 5, 8, 15, 21, 27]


def test_a_string_over_several_lines_is_not_cut_and_a_lone_carriage_return_is_not_cut_at_all(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pieces, "PIECE_STATEMENTS", 1)
    source = 'import torch\nx = """\ndef not_a_statement():\n"""\ny = 1\n'
    cut = cut_into_pieces(source)
    assert cut is not None and [piece.line for piece in cut] == [1, 2, 5]
    assert cut_into_pieces("import torch\rx = 1\n") is None


def test_findings_in_pieces_match_whole_file_linting(monkeypatch: pytest.MonkeyPatch) -> None:
    whole = lint_source(PROGRAM, "helpers.py", DEFAULT_RULES)
    monkeypatch.setattr(pieces, "PIECEWISE_ABOVE", 10)
    monkeypatch.setattr(pieces, "PIECE_STATEMENTS", 2)
    in_pieces = lint_source(PROGRAM, "helpers.py", DEFAULT_RULES)
    assert len(cut_into_pieces(PROGRAM) or []) == 4
    assert _seen(in_pieces) == _seen(whole)
    assert [(d.code, d.start.line) for d in whole] == [("TDL001", 11), ("TDL003", 17), ("TDL002", 23),
                                                       ("TDL001", 31), ("TDL007", 31)]


@pytest.mark.usefixtures("small_pieces")
def test_fixes_in_pieces_edit_the_file_where_they_belong() -> None:
    fixed = fix_source(PROGRAM, "helpers.py", DEFAULT_RULES, unsafe=True).text
    assert "    x = x.to(device)\n" in fixed
    assert "    y = y.cuda()\n" in fixed
    assert "mask = torch.ones(x.shape[0], device=x.device)" in fixed


@pytest.mark.usefixtures("small_pieces")
def test_a_syntax_error_in_a_later_piece_is_reported_at_its_line() -> None:
    broken = PROGRAM.replace("        return x * mask\n", "        return x * mask)\n")
    with pytest.raises(InvalidSource) as error:
        lint_source(broken, "helpers.py", DEFAULT_RULES)
    assert error.value.line == 24


def test_a_file_of_many_top_level_statements_is_cut_and_a_long_module_of_few_is_not() -> None:
    table = "import torch\n" + "".join(f"y{index} = {index}\n" for index in range(3_000))
    assert needs_pieces(table) is not None  # 40 KB, but 3,001 statements
    functions = "import torch\n" + "".join(f"def f{index}():\n    a = 1\n    return a\n" for index in range(1_000))
    assert needs_pieces(functions) is None  # 3,001 lines, 1,001 statements
    assert needs_pieces("x = 1\n" * 100) is None


@pytest.mark.slow
def test_a_generated_file_of_many_statements_costs_a_small_multiple_of_its_size(tmp_path: Path) -> None:
    statements = [f"y{index} = x.sum() + {index}" for index in range(60_000)]
    program = tmp_path / "table.py"
    program.write_text("import torch\nx = torch.zeros(3)\n" + "\n".join(statements) + "\nz = torch.ones(2)\nz.cuda()\n")
    size = program.stat().st_size
    assert size > 1_400_000
    measure = ("import resource, subprocess, sys\n"
               "done = subprocess.run([sys.executable, '-m', 'torchdevlint', 'check', '--no-cache', "
               "'--file-timeout', '600', sys.argv[1]], capture_output=True, text=True)\n"
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
               "print(done.stdout)\n")
    done = subprocess.run([sys.executable, "-c", measure, str(program)], capture_output=True, text=True, cwd=ROOT,
                          check=True)
    peak_kb, output = done.stdout.split("\n", 1)
    # The last piece's own bug, with the imports in front of it (what one piece binds is unknown
    # in the next: a tensor made there is one).
    assert f"table.py:{len(statements) + 4}:1: TDL001" in output
    # The whole module at once took over 3 GB (the flow's bindings before each statement).
    assert int(peak_kb) * 1024 < 60 * size, peak_kb
