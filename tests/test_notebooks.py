"""Jupyter notebooks: linted as one program in cell order, reported by cell, fixed in place
without touching a byte outside the cells' code, verified by running their code cells.

Every notebook here is written by `nbformat`, the ecosystem's own library, and every notebook
torchdevlint writes must pass `nbformat.validate`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import ROOT, run_cli, write_checkpoint_writer

from torchdevlint.diagnostics import Applicability, Edit, Fix
from torchdevlint.notebook.document import NotebookDocument, NotebookError
from torchdevlint.notebook.ipython import mask
from torchdevlint.notebook.program import SPANS_CELLS, NotebookProgram
from torchdevlint.programs import load_program
from torchdevlint.registry import select_rules

nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (pip install -e '.[test]')")
v4 = nbformat.v4

SETUP = "%matplotlib inline\nimport torch\n\ntorch.manual_seed(0)"
# A discarded move whose fix is safe: the tensor is later used with one on the GPU.
MOVE = "x = torch.zeros(3)\nx.cuda()"
USE = "\nprint(x + torch.ones(3, device='cuda'))"


def notebook(*cells: object, metadata: dict[str, object] | None = None) -> str:
    """A valid nbformat-4 notebook, as `nbformat.write` lays it out."""
    book = v4.new_notebook()
    book.metadata = metadata if metadata is not None else {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python", "version": "3.11.7"},
    }
    book.cells = [v4.new_code_cell(cell) if isinstance(cell, str) else cell for cell in cells]
    nbformat.validate(book)
    return nbformat.writes(book) + "\n"


def write_notebook(folder: Path, *cells: object, name: str = "analysis.ipynb") -> Path:
    path = folder / name
    path.write_text(notebook(*cells))
    return path


def assert_valid(path: Path) -> None:
    nbformat.validate(nbformat.read(str(path), as_version=nbformat.NO_CONVERT))


def findings(stdout: str) -> list[str]:
    """`path:cell N:line:col: CODE` of each finding line."""
    return [match.group(0) for match in re.finditer(r"^\S.*?: TDL\d{3}", stdout, re.MULTILINE)]


# -- linting: one program in cell order ----------------------------------------------------------

def test_a_later_cell_sees_the_earlier_cells_bindings(tmp_path: Path) -> None:
    write_notebook(tmp_path, v4.new_markdown_cell("# Training"), SETUP, "x = torch.zeros(3)",
                   "y = x * 2\nx.cuda()\nprint(y)")
    result = run_cli("check", "--no-cache", "analysis.ipynb", cwd=tmp_path)
    assert result.returncode == 1
    # The kind of `x` (a tensor) is known only from cell 3; the finding is in cell 4, line 2.
    assert findings(result.stdout) == ["analysis.ipynb:cell 4:2:1: TDL001"]


def test_a_loader_with_workers_iterated_in_a_cell_is_not_code_run_on_import(tmp_path: Path) -> None:
    loader = "from torch.utils.data import DataLoader, TensorDataset\n" \
             "loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2, num_workers=2)"
    write_notebook(tmp_path, SETUP, loader, "for (x,) in loader:\n    print(x)")
    (tmp_path / "train.py").write_text("import torch\n" + loader + "\nfor (x,) in loader:\n    print(x)\n")
    result = run_cli("check", "--no-cache", "--select", "TDL208", ".", cwd=tmp_path)
    # A notebook's cells are never imported again by a spawned worker; the same code in a script is.
    assert findings(result.stdout) == ["train.py:3:10: TDL208"]


def test_a_host_copy_that_ends_a_cell_is_shown_not_thrown_away(tmp_path: Path) -> None:
    write_notebook(tmp_path, SETUP, "x = torch.zeros(3)", "x.cpu()", "x.cpu()\ny = x * 2", "x.cuda()")
    result = run_cli("check", "--no-cache", "--select", "TDL001", "analysis.ipynb", cwd=tmp_path)
    # Jupyter shows a cell's last expression: `x.cpu()` there is for looking at; the one in the
    # middle of cell 4 is lost, and so is the move to the GPU that ends cell 5.
    assert findings(result.stdout) == ["analysis.ipynb:cell 4:1:1: TDL001", "analysis.ipynb:cell 5:1:1: TDL001"]


def test_a_later_cell_reloads_what_an_earlier_cell_saved(tmp_path: Path) -> None:
    write_checkpoint_writer(tmp_path)
    write_notebook(tmp_path, SETUP, "import torch.nn as nn\nPATH = './net.pth'\nnet = nn.Linear(4, 2)",
                   "old = torch.load('pretrained.pth')",
                   "for epoch in range(2):\n    torch.save(net.state_dict(), PATH)",
                   v4.new_markdown_cell("Reload the weights we just saved."),
                   "net.load_state_dict(torch.load(PATH))")
    result = run_cli("check", "--no-cache", "--select", "TDL003", "analysis.ipynb", cwd=tmp_path)
    # The file of cell 3 was written elsewhere; the one of cell 6 by cell 4 of this session.
    assert findings(result.stdout) == ["analysis.ipynb:cell 3:1:7: TDL003"]


def test_markdown_and_raw_cells_are_not_code(tmp_path: Path) -> None:
    write_notebook(tmp_path, SETUP, v4.new_markdown_cell("x = torch.zeros(3)\nx.cuda()"),
                   v4.new_raw_cell("x = torch.zeros(3)\nx.cuda()"))
    result = run_cli("check", "--no-cache", "analysis.ipynb", cwd=tmp_path)
    assert result.returncode == 0, result.stdout
    assert "All checks passed!" in result.stdout


def test_magics_and_shell_lines_keep_every_line_in_place(tmp_path: Path) -> None:
    cells = (
        SETUP,
        "!pip install -q torchvision\n%load_ext autoreload\nfiles = !ls data/\ntorch.zeros?\n"
        "x = torch.ones(2)\nx.cuda()",
        "%%time\nfor step in range(3):\n    !echo step\n    h = torch.zeros(4)\n    h.cuda()",
    )
    write_notebook(tmp_path, *cells)
    result = run_cli("check", "--no-cache", "analysis.ipynb", cwd=tmp_path)
    assert findings(result.stdout) == ["analysis.ipynb:cell 2:6:1: TDL001", "analysis.ipynb:cell 3:5:5: TDL001"]
    assert ": error:" not in result.stdout


def test_a_cell_with_a_syntax_error_is_reported_and_the_others_are_linted(tmp_path: Path) -> None:
    write_notebook(tmp_path, SETUP, "def broken(:\n    pass", "x = torch.zeros(3)\nx.cuda()")
    result = run_cli("check", "--no-cache", "analysis.ipynb", cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stdout.splitlines()
    assert "analysis.ipynb:cell 2:1:12: error: syntax error: invalid syntax" in lines
    assert findings(result.stdout) == ["analysis.ipynb:cell 3:2:1: TDL001"]


def test_a_cell_indented_as_a_whole_is_linted_as_ipython_runs_it(tmp_path: Path) -> None:
    path = write_notebook(tmp_path, SETUP, "  x = torch.zeros(3)\n  x.cuda()\n  print(x + torch.ones(3, device='cuda'))")
    result = run_cli("check", "--no-cache", "--fix", "analysis.ipynb", cwd=tmp_path)
    assert result.returncode == 0 and "1 fixed" in result.stdout, result.stdout
    assert nbformat.read(str(path), as_version=4).cells[1].source.splitlines()[1] == "  x = x.cuda()"


def test_top_level_await_and_cell_magics_that_run_python(tmp_path: Path) -> None:
    path = write_notebook(tmp_path, SETUP + "\nimport asyncio", "await asyncio.sleep(0)\n" + MOVE + USE,
                          "%%capture\ny = torch.ones(2)\ny.cuda()\nprint(y + torch.ones(2, device='cuda'))")
    result = run_cli("check", "--no-cache", "--fix", "analysis.ipynb", cwd=tmp_path)
    # Top-level await is valid in a notebook: the fix is not withheld for it.
    assert "Found 2 errors (2 fixed, 0 remaining)." in result.stdout, result.stdout
    cells = nbformat.read(str(path), as_version=4).cells
    assert "x = x.cuda()" in cells[1].source and "y = y.cuda()" in cells[2].source


def test_cells_in_another_language_are_skipped(tmp_path: Path) -> None:
    write_notebook(tmp_path, SETUP, "%%bash\nfor f in *.pt; do echo $f; done",
                   "%%writefile train.py\nimport torch\nx = torch.zeros(3)\nx.cuda()",
                   "%%html\n<b>x.cuda()</b>")
    result = run_cli("check", "--no-cache", "analysis.ipynb", cwd=tmp_path)
    assert result.returncode == 0, result.stdout


def test_a_notebook_in_another_language_has_no_python(tmp_path: Path) -> None:
    book = v4.new_notebook(metadata={"kernelspec": {"name": "ir", "language": "R", "display_name": "R"}})
    book.cells = [v4.new_code_cell("library(torch)\nx <- torch_zeros(3)")]
    (tmp_path / "analysis.ipynb").write_text(nbformat.writes(book))
    assert run_cli("check", "--no-cache", "analysis.ipynb", cwd=tmp_path).returncode == 0


def test_ipython_lines_inside_strings_and_brackets_are_python() -> None:
    source = 'report = """\n%d batches\n!important\n""" % 3\ntotal = (1\n  % 2)\n!ls'
    masked = mask(source)
    assert masked.originals == ("!ls",)
    assert masked.text.splitlines()[:6] == source.splitlines()[:6]
    assert masked.restore(masked.text) == source


@pytest.mark.parametrize("content, why", [
    ("{not json", "not a Jupyter notebook: invalid JSON"),
    ("[1, 2]", "the file holds JSON but not a notebook"),
    ('{"cells": [], "metadata": {}, "nbformat": 3, "nbformat_minor": 0}', "nbformat 3 notebooks are not supported"),
    ('{"metadata": {}, "nbformat": 4, "nbformat_minor": 5}', "no 'cells' list"),
    ('{"cells": [{"cell_type": "code", "source": 7}], "nbformat": 4}', "cell 1: 'source' is neither"),
    ("", "invalid JSON"),
])
def test_a_broken_notebook_is_a_clear_file_error(tmp_path: Path, content: str, why: str) -> None:
    (tmp_path / "broken.ipynb").write_text(content)
    result = run_cli("check", "--no-cache", "broken.ipynb", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout.startswith("broken.ipynb: error: ") and why in result.stdout, result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_a_notebook_that_is_not_utf8_is_a_clear_file_error(tmp_path: Path) -> None:
    (tmp_path / "broken.ipynb").write_bytes(b'{"cells": ["\xff"]}')
    with pytest.raises(NotebookError, match="not UTF-8"):
        NotebookDocument.parse((tmp_path / "broken.ipynb").read_bytes())


def test_folders_include_notebooks_and_include_patterns_choose(tmp_path: Path) -> None:
    (tmp_path / "notebooks").mkdir()
    write_notebook(tmp_path / "notebooks", SETUP, "x = torch.zeros(3)\nx.cuda()")
    (tmp_path / "train.py").write_text("import torch\nx = torch.zeros(3)\nx.cuda()\n")
    assert len(findings(run_cli("check", "--no-cache", ".", cwd=tmp_path).stdout)) == 2
    (tmp_path / "pyproject.toml").write_text('[tool.torchdevlint]\ninclude = ["*.py"]\n')
    assert findings(run_cli("check", "--no-cache", ".", cwd=tmp_path).stdout) == ["train.py:3:1: TDL001"]
    (tmp_path / "pyproject.toml").write_text('[tool.torchdevlint]\nextend-exclude = ["notebooks/"]\n')
    assert findings(run_cli("check", "--no-cache", ".", cwd=tmp_path).stdout) == ["train.py:3:1: TDL001"]


def test_jupyter_checkpoints_are_not_walked(tmp_path: Path) -> None:
    (tmp_path / ".ipynb_checkpoints").mkdir()
    write_notebook(tmp_path, SETUP, "x = torch.zeros(3)\nx.cuda()")
    write_notebook(tmp_path / ".ipynb_checkpoints", SETUP, "x = torch.zeros(3)\nx.cuda()",
                   name="analysis-checkpoint.ipynb")
    assert findings(run_cli("check", "--no-cache", ".", cwd=tmp_path).stdout) == ["analysis.ipynb:cell 2:2:1: TDL001"]


def test_cached_results_keep_their_cells(tmp_path: Path) -> None:
    write_notebook(tmp_path, SETUP, "x = torch.zeros(3)\nx.cuda()")
    first = run_cli("check", "analysis.ipynb", cwd=tmp_path)
    second = run_cli("check", "analysis.ipynb", cwd=tmp_path)
    assert (tmp_path / ".torchdevlint_cache").is_dir()
    assert first.stdout == second.stdout and "analysis.ipynb:cell 2:2:1: TDL001" in second.stdout


# -- reporting -----------------------------------------------------------------------------------

def test_full_format_shows_the_lines_of_the_cell(tmp_path: Path) -> None:
    write_notebook(tmp_path, SETUP, "x = torch.zeros(3)\n\nx.cuda()")
    result = run_cli("check", "--no-cache", "--format", "full", "analysis.ipynb", cwd=tmp_path)
    assert "analysis.ipynb:cell 2:3:1: TDL001" in result.stdout
    assert "3 | x.cuda()\n  | ^^^^^^^^ TDL001" in result.stdout


def test_json_gives_the_cell(tmp_path: Path) -> None:
    write_notebook(tmp_path, SETUP, "def broken(:\n    pass", "x = torch.zeros(3)\nx.cuda()")
    (tmp_path / "train.py").write_text("import torch\nx = torch.zeros(3)\nx.cuda()\n")
    items = json.loads(run_cli("check", "--no-cache", "--format", "json", ".", cwd=tmp_path).stdout)
    located = [(item["path"], item["code"], item["cell"], item["line"], item["column"]) for item in items]
    assert located == [
        ("analysis.ipynb", None, 2, 1, 12),
        ("analysis.ipynb", "TDL001", 3, 2, 1),
        ("train.py", "TDL001", None, 3, 1),
    ]


def _line_of(path: Path, text: str) -> int:
    return next(number for number, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_sarif_and_github_point_at_the_notebook_line_and_name_the_cell(tmp_path: Path) -> None:
    from test_output_formats import _validate

    path = write_notebook(tmp_path, SETUP, "x = torch.zeros(3)\nx.cuda()")
    document_line = _line_of(path, '"x.cuda()"')
    log = json.loads(run_cli("check", "--no-cache", "--format", "sarif", "analysis.ipynb", cwd=tmp_path).stdout)
    _validate(log)
    [result] = log["runs"][0]["results"]
    assert result["message"]["text"].startswith("cell 2, line 2: Tensor move result is discarded")
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "analysis.ipynb"
    assert location["region"] == {"startLine": document_line, "endLine": document_line}
    assert result["properties"] == {"cell": 2, "cellLine": 2, "cellColumn": 1}
    # A fix to a notebook is a change inside a JSON string: not offered as a SARIF replacement.
    assert "fixes" not in result

    github = run_cli("check", "--no-cache", "--format", "github", "analysis.ipynb", cwd=tmp_path).stdout
    assert github.splitlines() == [
        f"::error file=analysis.ipynb,line={document_line},endLine={document_line},title=TDL001::"
        "cell 2, line 2: Tensor move result is discarded; tensor moves are not in place"
    ]


# -- fixing --------------------------------------------------------------------------------------

def _layout_notebook(tmp_path: Path) -> Path:
    """Outputs, execution counts, metadata, a non-ASCII line and a source kept as one string."""
    first = v4.new_code_cell(SETUP + "\n# Gewichte laden: données", execution_count=1, metadata={"tags": ["setup"]},
                             outputs=[v4.new_output("stream", name="stdout", text="ready\n")])
    second = v4.new_code_cell(MOVE + "  # move it" + USE, execution_count=2, outputs=[
        v4.new_output("execute_result", data={"text/plain": "tensor([0., 0., 0.])", "image/png": "iVBORw0KGgo="},
                      execution_count=2)])
    third = v4.new_code_cell("!nvidia-smi\ny = torch.ones(2)\ny.cuda()\nz = y @ torch.ones(2, device='cuda')\n",
                             execution_count=3, outputs=[])
    book = v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                    "language": "python"}, "custom": {"ratio": 1.50}})
    book.cells = [v4.new_markdown_cell("# Run"), first, second, third]
    text = nbformat.writes(book)
    # One cell's source written as a single string, as some tools write it.
    text = text.replace(json.dumps(third.source.splitlines(keepends=True), indent=1).replace("\n", "\n   "),
                        json.dumps(third.source), 1)
    path = tmp_path / "analysis.ipynb"
    path.write_bytes(text.encode())
    assert_valid(path)
    return path


def test_fix_changes_only_the_source_of_the_cells_it_fixes(tmp_path: Path) -> None:
    path = _layout_notebook(tmp_path)
    before = path.read_bytes()
    assert b'"source": "!nvidia-smi\\ny = torch.ones(2)\\ny.cuda()\\nz = ' in before
    result = run_cli("check", "--no-cache", "--fix", "analysis.ipynb", cwd=tmp_path)
    assert result.returncode == 0, result.stdout
    assert "Found 2 errors (2 fixed, 0 remaining)." in result.stdout
    after = path.read_bytes()
    assert_valid(path)
    assert after == before.replace(b'"x.cuda()  # move it\\n"', b'"x = x.cuda()  # move it\\n"').replace(
        b'\\ny.cuda()\\n', b'\\ny = y.cuda()\\n')
    # Fixing again changes nothing.
    again = run_cli("check", "--no-cache", "--fix", "analysis.ipynb", cwd=tmp_path)
    assert again.returncode == 0 and path.read_bytes() == after


def test_fix_keeps_the_layout_of_an_ascii_escaped_notebook_with_crlf_and_a_bom(tmp_path: Path) -> None:
    text = notebook(SETUP + "\n# é", MOVE + USE)
    data = json.dumps(json.loads(text), indent=2, ensure_ascii=True).replace("\n", "\r\n").encode()
    path = tmp_path / "analysis.ipynb"
    path.write_bytes(b"\xef\xbb\xbf" + data)
    assert run_cli("check", "--no-cache", "--fix", "analysis.ipynb", cwd=tmp_path).returncode == 0
    assert path.read_bytes() == b"\xef\xbb\xbf" + data.replace(b'"x.cuda()\\n"', b'"x = x.cuda()\\n"')
    nbformat.validate(json.loads(path.read_bytes()[3:]))


def test_a_fix_that_adds_a_line_keeps_the_list_layout(tmp_path: Path) -> None:
    path = write_notebook(tmp_path, "import torch", "x = torch.zeros(3)\nx.cuda()")
    result = run_cli("check", "--no-cache", "--fix", "--select", "TDL203", "--unsafe-fixes", "analysis.ipynb",
                     cwd=tmp_path)
    assert result.returncode in (0, 1), result.stdout
    assert_valid(path)
    book = nbformat.read(str(path), as_version=4)
    assert book.cells[0].source.startswith("import torch\n")
    assert "device" in book.cells[0].source and "cuda()" not in book.cells[1].source
    # Every new line of the list sits on its own line of the file, indented like the others.
    lines = [line for line in path.read_text().splitlines() if line.startswith('    "')]
    assert any("device" in line for line in lines)


def test_diff_shows_each_changed_cell_and_writes_nothing(tmp_path: Path) -> None:
    path = write_notebook(tmp_path, SETUP, MOVE + USE, "print(x)")
    before = path.read_bytes()
    result = run_cli("check", "--no-cache", "--diff", "analysis.ipynb", cwd=tmp_path)
    assert path.read_bytes() == before
    assert result.stdout.startswith(
        "--- a/analysis.ipynb:cell 2\n+++ b/analysis.ipynb:cell 2\n@@ -1,3 +1,3 @@\n"
        " x = torch.zeros(3)\n-x.cuda()\n+x = x.cuda()\n"
    )
    assert "cell 3" not in result.stdout


def test_ipython_lines_survive_a_fix_in_their_cell(tmp_path: Path) -> None:
    source = "%%time\n!nvidia-smi\nfiles = !ls\n" + MOVE + "\n%env CUDA_LAUNCH_BLOCKING=1" + USE
    path = write_notebook(tmp_path, SETUP, source)
    assert run_cli("check", "--no-cache", "--fix", "analysis.ipynb", cwd=tmp_path).returncode == 0
    assert nbformat.read(str(path), as_version=4).cells[1].source == source.replace("x.cuda()", "x = x.cuda()")


def test_a_fix_across_cells_or_into_ipython_syntax_is_withheld() -> None:
    text = notebook(SETUP, "!ls\nx = torch.zeros(3)")
    program = NotebookProgram(NotebookDocument.parse(text.encode()))
    boundary = program.text.index("# %% torchdevlint cell 2")
    shell = program.text.index("pass  # torchdevlint-ipython")
    across = Fix("t", Applicability.SAFE, (Edit(boundary - 3, boundary + 5, ""),))
    into_shell = Fix("t", Applicability.SAFE, (Edit(shell + 2, shell + 2, "x"),))
    within = Fix("t", Applicability.SAFE, (Edit(boundary - 2, boundary - 1, "x"),))
    at_line_start = Fix("t", Applicability.SAFE, (Edit(boundary, boundary, "import os\n"),))
    assert program.withholds(program.text, across) == SPANS_CELLS
    assert program.withholds(program.text, into_shell) == SPANS_CELLS
    assert program.withholds(program.text, within) is None
    assert program.withholds(program.text, at_line_start) is None


def test_a_withheld_fix_is_reported_with_its_reason(tmp_path: Path) -> None:
    from torchdevlint.fixer import fix_source

    source = "import torch\nx = torch.zeros(3)\nx.cuda()\n"
    outcome = fix_source(source, "t.py", select_rules(["TDL001"]), unsafe=True,
                         gate=lambda text, fix: "it spans cells")
    assert outcome.text == source
    assert [d.fix_withheld for d in outcome.remaining] == ["it spans cells"]


# -- standard input ------------------------------------------------------------------------------

BUGGY_PY = "import torch\n" + MOVE + USE + "\n"


def test_stdin_with_a_python_name(tmp_path: Path) -> None:
    result = run_cli("check", "--no-cache", "--stdin-filename", "src/train.py", "-", cwd=tmp_path, stdin=BUGGY_PY)
    assert result.returncode == 1
    assert result.stdout.startswith("src/train.py:3:1: TDL001")
    fixed = run_cli("check", "--fix", "--stdin-filename", "src/train.py", "-", cwd=tmp_path, stdin=BUGGY_PY)
    assert fixed.stdout == BUGGY_PY.replace("x.cuda()", "x = x.cuda()")
    assert "Found 1 error (1 fixed, 0 remaining)." in fixed.stderr
    assert fixed.returncode == 0
    assert not (tmp_path / "src").exists()


def test_stdin_without_a_name_and_unfixable_input_comes_back_unchanged(tmp_path: Path) -> None:
    assert run_cli("check", "-", cwd=tmp_path, stdin=BUGGY_PY).stdout.startswith("-:3:1: TDL001")
    broken = "import torch\ndef f(:\n"
    result = run_cli("check", "--fix", "-", cwd=tmp_path, stdin=broken)
    assert result.returncode == 2 and result.stdout == broken
    assert "-:2:7: error: syntax error" in result.stderr


def test_stdin_with_a_notebook_name(tmp_path: Path) -> None:
    text = notebook(SETUP, MOVE + USE)
    result = run_cli("check", "--stdin-filename", "analysis.ipynb", "-", cwd=tmp_path, stdin=text)
    assert findings(result.stdout) == ["analysis.ipynb:cell 2:2:1: TDL001"]
    fixed = run_cli("check", "--fix", "--stdin-filename", "analysis.ipynb", "-", cwd=tmp_path, stdin=text)
    assert fixed.stdout == text.replace('"x.cuda()\\n"', '"x = x.cuda()\\n"')
    nbformat.validate(nbformat.reads(fixed.stdout, as_version=4))


def test_stdin_applies_the_configuration_and_excludes_of_its_name(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "legacy").mkdir(parents=True)
    (project / "pyproject.toml").write_text('[tool.torchdevlint]\nexclude = ["legacy/"]\nignore = ["TDL003"]\n')
    source = BUGGY_PY + "state = torch.load('m.pt')\n"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    name = str(project / "train.py")
    result = run_cli("check", "--stdin-filename", name, "-", cwd=elsewhere, stdin=source)
    assert "TDL001" in result.stdout and "TDL003" not in result.stdout
    excluded = run_cli("check", "--fix", "--stdin-filename", str(project / "legacy" / "old.py"), "-",
                       cwd=elsewhere, stdin=source)
    assert excluded.returncode == 0 and excluded.stdout == source


def test_stdin_cannot_be_mixed_with_paths(tmp_path: Path) -> None:
    result = run_cli("check", "-", "train.py", cwd=tmp_path, stdin=BUGGY_PY)
    assert result.returncode == 2 and "cannot be combined" in result.stderr


# -- debug ---------------------------------------------------------------------------------------

def test_debug_flow_shows_a_notebooks_facts_by_cell(tmp_path: Path) -> None:
    write_notebook(tmp_path, SETUP, "def broken(:\n    pass", "x = torch.zeros(3)\nx.cuda()")
    result = run_cli("debug", "flow", "analysis.ipynb:3:1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "analysis.ipynb:cell 3:1: x: tensor, on host\n"
    assert "analysis.ipynb:cell 2:1:12: error: syntax error" in result.stderr


# -- verify --------------------------------------------------------------------------------------

@pytest.mark.slow
def test_verify_runs_a_notebooks_code_cells_before_and_after_the_fix(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    result = run_cli("verify", "--device", "emulated", "fixtures/tdl002_gru_classifier_notebook.ipynb", cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "fixtures/tdl002_gru_classifier_notebook.ipynb: fix verified" in result.stdout
    assert "TDL002 at line 9 of cell 6; TDL001 at line 3 of cell 8" in result.stdout
    assert re.search(r"original: +failed at cell 6, line 10: RuntimeError: Input and hidden tensors", result.stdout)


def test_load_program_splits_cells_back_after_an_import_is_added_on_top() -> None:
    text = notebook("x = 1", "y = 2")
    program = load_program("a.ipynb", text.encode())
    assert isinstance(program, type(program))
    fixed = "import torch\n" + program.text
    assert program.encode(fixed) == text.replace('"source": [\n    "x = 1"', '"source": [\n    "import torch\\n",\n    "x = 1"').encode()
