"""Suppression comments through the real command line: a file-level `# torchdevlint: noqa`,
`--add-noqa`, and TDL900 for `# noqa` directives that suppress nothing."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from conftest import run_cli, write_checkpoint_writer

from torchdevlint.suppression import _tokenize, _Tokens, _tokens, add_noqa, file_exemption

MOVE = "import torch\nx = torch.zeros(3)\nx.cuda()\ny = x + torch.ones(3, device='cuda')\n"
# With no CPU mode, a load is reported only where several processes run the program (TDL003).
MOVE_AND_LOAD = MOVE + "state = torch.load('model.pt')\nimport torch.distributed as dist\n"


def findings(result_stdout: str) -> list[tuple[int, str]]:
    return [(item["line"], item["code"]) for item in json.loads(result_stdout)]


def check_json(tmp_path: Path, *args: str) -> list[tuple[int, str]]:
    result = run_cli("check", "--no-cache", "--format", "json", *args, cwd=tmp_path)
    assert result.returncode in (0, 1), result.stderr
    return findings(result.stdout)


# ---- code the author says fails on purpose ------------------------------------------------


def test_a_line_a_comment_says_fails_on_purpose_is_not_reported(tmp_path: Path) -> None:
    # A teaching notebook shows the error: the finding is what the author demonstrates.
    (tmp_path / "lesson.py").write_text(
        "import torch\n"
        "x = torch.zeros(3)\n"
        "x.cuda()  # this will error? no: it is thrown away\n"
        "x.cuda()  # not in place\n"
        "# Note: this will error, the tensor is on the GPU\n"
        "# (NumPy only reads host memory)\n"
        "x.cuda().numpy()\n"
        "\n"
        "# will raise an error below\n"
        "\n"
        "x.cuda()\n"
        "s = '# this will fail'; x.cuda()\n"
        "\n"
        "# this will break: the lines below, down to a blank line\n"
        "y = torch.ones(3)\n"
        "y.cuda()\n"
    )
    assert check_json(tmp_path, "--select", "TDL001,TDL006", "lesson.py") == [(4, "TDL001"), (11, "TDL001"),
                                                                               (12, "TDL001")]


# ---- file-level exemptions ---------------------------------------------------------------

def test_a_file_level_noqa_turns_off_every_rule_or_the_named_ones(tmp_path: Path) -> None:
    write_checkpoint_writer(tmp_path)
    (tmp_path / "all.py").write_text("# torchdevlint: noqa\n" + MOVE_AND_LOAD)
    (tmp_path / "some.py").write_text(MOVE_AND_LOAD + "# torchdevlint: noqa: TDL001\n")
    (tmp_path / "flake8.py").write_text("# flake8: noqa\n" + MOVE_AND_LOAD)
    assert check_json(tmp_path, "all.py", "flake8.py") == []
    assert check_json(tmp_path, "some.py") == [(5, "TDL003")]


def test_a_file_level_noqa_must_be_a_comment_on_its_own_line(tmp_path: Path) -> None:
    in_string = 'doc = """\n# torchdevlint: noqa\n"""\n'
    (tmp_path / "a.py").write_text(in_string + MOVE)
    (tmp_path / "b.py").write_text(MOVE.replace("x.cuda()", "x.cuda()  # torchdevlint: noqa: TDL003"))
    assert [code for _, code in check_json(tmp_path, "a.py", "b.py")] == ["TDL001", "TDL001"]
    assert file_exemption(in_string).codes == () and not file_exemption(in_string).everything


# ---- --add-noqa ------------------------------------------------------------------------------

def test_add_noqa_suppresses_every_finding_and_a_second_run_adds_nothing(tmp_path: Path) -> None:
    write_checkpoint_writer(tmp_path)
    program = tmp_path / "train.py"
    program.write_text(MOVE_AND_LOAD.replace("torch.load('model.pt')", "torch.load('model.pt')  # noqa: E501"))
    result = run_cli("check", "--add-noqa", "--no-cache", "train.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Added 2 `# noqa` directives." in result.stderr
    text = program.read_text()
    assert "x.cuda()  # noqa: TDL001\n" in text
    assert "torch.load('model.pt')  # noqa: E501, TDL003\n" in text
    assert check_json(tmp_path, "train.py") == []
    again = run_cli("check", "--add-noqa", "--no-cache", "train.py", cwd=tmp_path)
    assert "Added 0 `# noqa` directives." in again.stderr and program.read_text() == text


def test_add_noqa_puts_the_comment_where_the_statement_or_string_ends_as_ruff_does(tmp_path: Path) -> None:
    write_checkpoint_writer(tmp_path)
    # No comment can end a line that a backslash continues or a string runs on from.
    source = ('import torch\nx = torch.zeros(3)\nx.cuda(); s = """\ntext\n"""\n'
              "state = torch.load( \\\n    'model.pt')\nimport torch.distributed as dist\n")
    (tmp_path / "a.py").write_text(source)
    result = run_cli("check", "--add-noqa", "--no-cache", "a.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Added 2 `# noqa` directives." in result.stderr
    assert (tmp_path / "a.py").read_text() == (
        'import torch\nx = torch.zeros(3)\nx.cuda(); s = """\ntext\n"""  # noqa: TDL001\n'
        "state = torch.load( \\\n    'model.pt')  # noqa: TDL003\nimport torch.distributed as dist\n")
    assert check_json(tmp_path, "a.py") == []


def test_a_noqa_at_the_end_of_a_backslash_continued_statement_suppresses_its_finding(tmp_path: Path) -> None:
    write_checkpoint_writer(tmp_path)
    (tmp_path / "a.py").write_text("import torch\nstate = torch.load( \\\n    'model.pt')  # noqa: TDL003\n")
    (tmp_path / "b.py").write_text("import torch\nstate = torch.load( \\\n    'model.pt')  # noqa: TDL001\n")
    assert check_json(tmp_path, "a.py") == []
    assert check_json(tmp_path, "b.py") == [(2, "TDL003")]
    # TDL900 sees the directive used where it stands.
    assert check_json(tmp_path, "--extend-select", "TDL900", "a.py") == []


@pytest.mark.parametrize("directive", ["# noqa:", "# noqa:  ", "# NOQA: because", "# noqa-ish"])
def test_a_noqa_colon_without_codes_suppresses_nothing_and_is_warned_about(tmp_path: Path, directive: str) -> None:
    (tmp_path / "a.py").write_text(MOVE.replace("x.cuda()", f"x.cuda()  {directive}"))
    result = run_cli("check", "--no-cache", "--format", "json", "a.py", cwd=tmp_path)
    assert findings(result.stdout) == [(3, "TDL001")]
    assert "torchdevlint: warning: invalid `# noqa` directive at a.py:3: expected `# noqa` alone" in result.stderr
    silent = run_cli("check", "--no-cache", "--silent", "a.py", cwd=tmp_path)
    assert silent.returncode == 1 and silent.stderr == ""


def test_a_file_level_noqa_colon_without_codes_turns_nothing_off_and_is_warned_about(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("# torchdevlint: noqa:\n" + MOVE)
    result = run_cli("check", "--no-cache", "--format", "json", "a.py", cwd=tmp_path)
    assert findings(result.stdout) == [(4, "TDL001")]
    assert "invalid `# noqa` directive at a.py:1" in result.stderr


def test_add_noqa_keeps_line_endings_and_merges_codes_once() -> None:
    source = "a = 1  # noqa: TDL001\r\nb = 2\r\n"
    new, added, _ = add_noqa(source, {1: ["TDL001", "TDL003"], 2: ["TDL004", "TDL004"]})
    assert new == "a = 1  # noqa: TDL001, TDL003\r\nb = 2  # noqa: TDL004\r\n" and added == 2


def test_add_noqa_writes_into_a_notebooks_cells(tmp_path: Path) -> None:
    notebook = {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": ["# Move to the GPU"]},
            {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
             "source": ["import torch\n", "x = torch.zeros(3)\n", "x.cuda()\n",
                        "y = x + torch.ones(3, device='cuda')"]},
        ],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5,
    }
    path = tmp_path / "gpu.ipynb"
    path.write_text(json.dumps(notebook, indent=1) + "\n")
    result = run_cli("check", "--add-noqa", "--no-cache", "gpu.ipynb", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    cell = json.loads(path.read_text())["cells"][1]["source"]
    assert cell[2] == "x.cuda()  # noqa: TDL001\n"
    assert check_json(tmp_path, "gpu.ipynb") == []


def test_add_noqa_cannot_be_combined_with_fix(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(MOVE)
    result = run_cli("check", "--add-noqa", "--fix", "a.py", cwd=tmp_path)
    assert result.returncode == 2 and "--add-noqa" in result.stderr
    assert (tmp_path / "a.py").read_text() == MOVE


# ---- TDL900 unused-noqa -----------------------------------------------------------------

def test_unused_non_enabled_and_unknown_codes_are_reported_once_selected(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(
        "import torch\n"
        "x = torch.zeros(3)  # noqa: TDL001\n"                 # 2: nothing to suppress there
        "x.cuda()  # noqa: TDL001\n"                            # 3: used
        "y = x + torch.ones(3, device='cuda')  # noqa: TDL203\n"  # 4: TDL203 is off by default
        "z = y  # noqa: TDL977, E501\n"                         # 5: no such code
    )
    assert check_json(tmp_path, "a.py") == []
    result = run_cli("check", "--no-cache", "--format", "concise", "--extend-select", "TDL900", "a.py", cwd=tmp_path)
    lines = result.stdout.splitlines()
    assert any(":2:" in line and "(unused: TDL001)" in line for line in lines)
    assert any(":4:" in line and "(non-enabled: TDL203)" in line for line in lines)
    assert any(":5:" in line and "(unknown: TDL977)" in line for line in lines)
    assert not any(":3:" in line for line in lines)


def test_fixing_unused_noqa_removes_only_what_suppresses_nothing(tmp_path: Path) -> None:
    program = tmp_path / "a.py"
    program.write_text("import torch\nx = torch.zeros(3)  # noqa: TDL001\nz = x  # noqa: TDL977, E501\n"
                       "w = z  # noqa: TDL203\n")
    result = run_cli("check", "--no-cache", "--fix", "--extend-select", "TDL900", "a.py", cwd=tmp_path)
    # The non-enabled TDL203 may serve another run: its removal is an unsafe fix, not applied.
    assert program.read_text() == "import torch\nx = torch.zeros(3)\nz = x  # noqa: E501\nw = z  # noqa: TDL203\n"
    assert result.returncode == 1 and "TDL900" in result.stdout


# ---- the tokenizer's answers, chunk by chunk -----------------------------------------------

_TOKENIZER_SHAPES = [
    'import torch  # noqa: F401\n"""\nUsage:\n  python train.py  # not a comment\n"""\nx = 1  # noqa\n',
    "x = [\n1,  # noqa: TDL001\n]\ny = 2 \\\n+ 3  # noqa\n",
    "def f():\n    if x:\n        y = 1\n# a comment at column 0\n    z = '''\nstill # text\n'''  # noqa\n",
    "def f():\n      a = 1\n    b = 2  # noqa\nc = 3  # noqa\n",
    "x = f'''{1}\n# in an f-string\n'''\ns = '''never closed\n# noqa\n",
    "class A:\n    pass\n# noqa\n\n\n@decorator\ndef g(\n    a,  # noqa: TDL002\n): ...\n",
]


@pytest.mark.parametrize("source", _TOKENIZER_SHAPES)
def test_tokenizing_by_chunks_answers_as_one_pass(source: str) -> None:
    assert _answers(_tokens(source)) == _answers(_tokenize(source))


def test_tokenizing_by_chunks_answers_as_one_pass_over_edits_of_the_fixtures() -> None:
    rng = random.Random(7)
    fixtures = sorted((Path(__file__).parent.parent / "fixtures").glob("*.py"))
    for path in fixtures:
        text = path.read_text()
        for _ in range(6):
            # Typing, deleting, or opening a string or a bracket somewhere (one version after another).
            at = rng.randrange(len(text))
            edit = rng.choice(['"""', "(", "#", "\\\n", "", "x", "'"])
            text = text[:at] + edit + text[at + rng.choice([0, 0, 1, 3]):]
            assert _answers(_tokens(text)) == _answers(_tokenize(text)), (path.name, at, edit)


def _answers(tokens: _Tokens) -> tuple[object, ...]:
    return tokens.comments, tokens.string_lines, tokens.refused
