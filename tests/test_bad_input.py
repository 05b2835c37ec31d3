"""Every kind of file a commit hook meets: a clear one-line message, the right exit code, never
a traceback, and the other files are still linted."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest
from conftest import run_cli, write_checkpoint_writer

BUGGY = "import torch\nx = torch.zeros(3)\nx.cuda()\ny = x + torch.ones(3, device=\"cuda\")\n"


def check(tmp_path: Path, *paths: str, extra: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    (tmp_path / "good.py").write_text(BUGGY)
    result = run_cli("check", "--no-cache", *extra, "good.py", *paths, cwd=tmp_path)
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output
    # The healthy file is always linted.
    assert "good.py:3:1: TDL001" in result.stdout, output
    return result


def error_lines(result, name: str) -> list[str]:  # type: ignore[no-untyped-def]
    return [line for line in result.stdout.splitlines() if line.startswith(name) and ": error:" in line]


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("syntax.py", b"import torch\ndef f(:\n", "syntax error"),
        ("nul.py", b"import torch\x00\n", "null bytes"),
        ("binary.py", bytes(range(256)) + b"torch", "null bytes"),
        ("latin1_no_cookie.py", "import torch\nname = 'caf\xe9'\n".encode("latin-1"), "cannot decode"),
        ("bad_cookie.py", b"# -*- coding: klingon -*-\nimport torch\n", "encoding"),
        ("python2.py", b"import torch\nprint 'hello'\n", "syntax error"),
        ("deep_metadata.ipynb", b'{"cells": [], "metadata": ' + b'{"a": ' * 1000 + b"1" + b"}" * 1000
         + b', "nbformat": 4, "nbformat_minor": 5}', "nested too deeply"),
        ("deep.ipynb", b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ],
    ids=lambda value: value if isinstance(value, str) and value.endswith((".py", ".ipynb")) else "",
)
def test_unreadable_or_unparsable_files(tmp_path: Path, name: str, data: bytes, message: str) -> None:
    (tmp_path / name).write_bytes(data)
    result = check(tmp_path, name)
    assert result.returncode == 2
    lines = error_lines(result, name)
    assert len(lines) == 1 and message in lines[0], result.stdout


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("empty.py", b""),
        ("bom.py", b"\xef\xbb\xbfimport torch\nx = torch.zeros(1)\nx = x.cuda()\n"),
        ("latin1_cookie.py", "# -*- coding: latin-1 -*-\nimport torch\ns = 'caf\xe9'\n".encode("latin-1")),
        ("crlf.py", b"import torch\r\nx = torch.zeros(1)\r\nx = x.cuda()\r\n"),
        ("mixed_endings.py", b"import torch\r\nx = torch.zeros(1)\nx = x.cuda()\r\n"),
        ("tabs.py", b"import torch\nif True:\n\tx = torch.zeros(1)\n\tx = x.cuda()\n"),
        ("long_line.py", b"import torch\nx = [" + b"1, " * 200_000 + b"]\n"),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_odd_but_valid_files_are_linted_cleanly(tmp_path: Path, name: str, data: bytes) -> None:
    (tmp_path / name).write_bytes(data)
    result = check(tmp_path, name)
    assert result.returncode == 1  # only good.py's finding
    assert not error_lines(result, name)


@pytest.mark.slow
def test_huge_file(tmp_path: Path) -> None:
    body = "".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(25_000))
    (tmp_path / "huge.py").write_text("import torch\n" + body + "y = torch.zeros(2)\ny.cuda()\n")
    result = check(tmp_path, "huge.py")
    assert f"huge.py:{2 + 50_000 + 1}:1: TDL001" in result.stdout


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "secret.py"
    path.write_text(BUGGY)
    path.chmod(0)
    result = check(tmp_path, "secret.py")
    assert result.returncode == 2
    assert "secret.py: error: cannot read" in result.stdout


def test_symlink_problems_in_walked_folder(tmp_path: Path) -> None:
    folder = tmp_path / "pkg"
    folder.mkdir()
    (folder / "real.py").write_text(BUGGY)
    (folder / "broken.py").symlink_to(tmp_path / "missing.py")
    (folder / "loop").symlink_to(folder)
    (folder / "self_a.py").symlink_to(folder / "self_b.py")
    (folder / "self_b.py").symlink_to(folder / "self_a.py")
    result = check(tmp_path, "pkg")
    assert "pkg/real.py:3:1: TDL001" in result.stdout


def test_path_that_does_not_exist(tmp_path: Path) -> None:
    result = check(tmp_path, "nowhere/model.py")
    assert result.returncode == 2
    assert error_lines(result, "nowhere/model.py") == ["nowhere/model.py: error: no such file or directory"]


def test_thousands_of_files(tmp_path: Path) -> None:
    folder = tmp_path / "many"
    folder.mkdir()
    for index in range(2000):
        (folder / f"m{index}.py").write_text("import os\n" if index % 2 else "import torch\nx = 1\n")
    (folder / "bug.py").write_text(BUGGY)
    result = check(tmp_path, "many")
    assert "many/bug.py:3:1: TDL001" in result.stdout
    assert result.returncode == 1


def test_code_of_a_newer_python_is_linted_whatever_python_runs_the_linter(tmp_path: Path) -> None:
    # PEP 695 generics: LibCST reads them, Python 3.11 does not; ruff lints them anywhere.
    (tmp_path / "new.py").write_bytes(
        b"import torch\ntype Shape = tuple[int, ...]\ndef f[T](x: T) -> T:\n    return x\nx = torch.ones(2)\nx.cuda()\n")
    result = check(tmp_path, "new.py")
    assert not error_lines(result, "new.py"), result.stdout
    assert "new.py:6:1: TDL001" in result.stdout and result.returncode == 1


@pytest.mark.parametrize(
    "line",
    ["type Shape = tuple[int, ...]", "def first[T](x: T) -> T: return x", 'print(f"{x["a"]}")', "print(f'{'-'.join(x)}')", 'print(f"{x:{"w"}}")', 'print(f"{x # note\n}")',
     'print(f"{(x,\n y)}")'],
)
def test_syntax_only_a_newer_python_reads_is_no_error_findings_or_not(tmp_path: Path, line: str) -> None:
    (tmp_path / "new.py").write_text(f"import torch\nx = torch.zeros(2).to(\"cpu\")\n{line}\n")
    (tmp_path / "bug.py").write_text(f"import torch\nx = torch.zeros(2)\n{line}\nx.cuda()\n")
    result = check(tmp_path, "new.py", "bug.py")
    assert not error_lines(result, "new.py") and not error_lines(result, "bug.py"), result.stdout
    assert f"bug.py:{4 + line.count(chr(10))}:1: TDL001" in result.stdout


def test_a_syntax_error_beside_newer_syntax_is_still_one(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("import torch\ntype Shape = tuple[int, ...]\nx = (\n")
    lines = error_lines(check(tmp_path, "broken.py"), "broken.py")
    assert len(lines) == 1 and "syntax error" in lines[0]


def test_past_cpythons_parser_limits_is_a_syntax_error_not_newer_syntax(tmp_path: Path) -> None:
    (tmp_path / "deep.py").write_text("import torch\nx = " + "(" * 500 + "1" + ")" * 500 + "\n")
    lines = error_lines(check(tmp_path, "deep.py"), "deep.py")
    assert len(lines) == 1 and "syntax error: too many nested parentheses" in lines[0], lines
    # Also where the rules that ran found nothing (LibCST itself reads it).
    (tmp_path / "moved.py").write_text("import torch\nx = torch.ones(2).to('cuda')\ny = " + "(" * 500 + "x"
                                       + ")" * 500 + "\nprint(x.sum().item(), y)\n")
    lines = error_lines(check(tmp_path, "moved.py"), "moved.py")
    assert len(lines) == 1 and "syntax error: too many nested parentheses" in lines[0], lines


def test_lines_ended_by_carriage_returns_alone_are_linted_and_fixed(tmp_path: Path) -> None:
    # Valid Python (old Mac line endings): three lines to the tokenizer.
    (tmp_path / "mac.py").write_bytes(b"import torch\rx = torch.ones(2)\rx.cuda()  # noqa: TDL003\r")
    result = check(tmp_path, "mac.py")
    assert "mac.py:3:1: TDL001" in result.stdout and "internal error" not in result.stdout + result.stderr
    fixed = run_cli("check", "--fix", "--unsafe-fixes", "mac.py", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert (tmp_path / "mac.py").read_bytes() == b"import torch\rx = torch.ones(2)\rx = x.cuda()  # noqa: TDL003\r"


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ('[tool.torchdevlint\nselect = ["TDL001"]\n', "pyproject.toml"),
        ('[tool.torchdevlint]\nselect = "TDL001"\n', "select"),
        ('[tool.torchdevlint]\nselect = ["TDL998"]\n', "TDL998"),
        ('[tool.torchdevlint]\nfrobnicate = true\n', "frobnicate"),
        # Malformed globs, which would silently exclude nothing, are refused as ruff refuses them.
        ('[tool.torchdevlint]\nextend-exclude = ["data/[raw"]\n', "unclosed character class"),
        ('[tool.torchdevlint]\nexclude = ["build**"]\n', "`**` must be a path component"),
        ('[tool.torchdevlint.per-file-ignores]\n"[z-a].py" = ["TDL001"]\n', "invalid range"),
        ('[tool.torchdevlint.load-without-map-location]\nmap_loc = "cpu"\n', "map_loc"),
        # Written into fixes as a literal: only a device name, never code.
        ('[tool.torchdevlint.load-without-map-location]\nmap-location = "cuda\\" if 1 else \\"cpu"\n', "map-location"),
    ],
)
def test_broken_configuration_names_the_key(tmp_path: Path, config: str, key: str) -> None:
    (tmp_path / "pyproject.toml").write_text(config)
    (tmp_path / "good.py").write_text(BUGGY)
    result = run_cli("check", "good.py", cwd=tmp_path)
    assert result.returncode == 2
    assert key in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ('[tool.torchdevlint]\n# caf\xe9\nselect = ["TDL001"]\n'.encode("latin-1"), "not UTF-8 (byte 0xe9 at offset 25)"),
        (b"[tool.other]\na = " + b"[" * 5000 + b"]" * 5000 + b"\n[tool.torchdevlint]\n", "nested too deeply"),
    ],
    ids=["latin-1-comment", "deep-array"],
)
def test_an_unreadable_configuration_is_one_line_naming_the_file(tmp_path: Path, config: bytes, says: str) -> None:
    (tmp_path / "pyproject.toml").write_bytes(config)
    (tmp_path / "good.py").write_text(BUGGY)
    result = run_cli("check", "good.py", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == f"torchdevlint: error: {tmp_path / 'pyproject.toml'}: cannot read: {says}"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("named", [False, True], ids=["walked", "named"])
def test_a_fifo_is_not_read_and_the_run_says_so(tmp_path: Path, named: bool) -> None:
    os.mkfifo(tmp_path / "pipe.py")
    # Reading it would wait for a writer forever: the run must end, the other files linted.
    result = check(tmp_path, *(["pipe.py"] if named else ["."]))
    assert result.returncode == 2
    lines = error_lines(result, "pipe.py")
    assert len(lines) == 1 and "not a regular file" in lines[0] and "(a FIFO): not read" in lines[0], result.stdout


def test_json_output_carries_file_errors(tmp_path: Path) -> None:
    (tmp_path / "syntax.py").write_bytes(b"import torch\ndef f(:\n")
    (tmp_path / "good.py").write_text(BUGGY)
    result = run_cli("check", "--no-cache", "--format", "json", "good.py", "syntax.py", cwd=tmp_path)
    assert result.returncode == 2
    items = json.loads(result.stdout)
    assert any(item["code"] == "TDL001" for item in items)
    assert any(item["path"] == "syntax.py" and item["code"] is None for item in items)


def test_python_syntax_warnings_about_user_code_are_not_printed(tmp_path: Path) -> None:
    (tmp_path / "warns.py").write_text("import torch\nx = torch.zeros(2)\nif x is 'a':\n    x.cuda()\n")
    result = run_cli("check", "--no-cache", "--fix", "warns.py", cwd=tmp_path)
    assert "SyntaxWarning" not in result.stderr
    assert result.stderr == ""


# Invalid escapes ("\d": a SyntaxWarning on Python 3.12+, a DeprecationWarning before) in strings
# the analysis reads (a path, a ModuleDict key, an nvidia-smi query), and `is` with a literal.
WARNING_PROGRAM = r"""import os
import re

import torch
import torch.nn as nn

CHECKPOINT = "C:\data\model.pt"
PATTERN = re.compile("\d+")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"head\d": nn.Linear(2, 2)})
        self.blocks = [nn.Linear(2, 2)]


def pick_gpu():
    used = os.popen("nvidia-smi --query-gpu=memory.used --format=csv,noheader\d").read().split()
    return min(range(len(used)), key=lambda i: int(used[i]))


state = torch.load(CHECKPOINT)
x = torch.zeros(2, device="cpu").to(torch.device("cuda:0"))
if state is 1:
    print(x.numpy())
state.cuda()
import torch.distributed as dist
"""
WARNING_PROGRAM_FINDINGS = ("train.py:15:9: TDL011", "train.py:19:12: TDL202", "train.py:23:9: TDL003")
# With --diff the fixed findings show as the diff; the fixes compile the fixed code too.
WARNING_PROGRAM_DIFF = ("+state = torch.load(CHECKPOINT, map_location=\"cpu\")", "train.py:19:12: TDL202")


@pytest.mark.parametrize(
    ("extra", "expected"),
    [((), WARNING_PROGRAM_FINDINGS), (("--diff", "--unsafe-fixes"), WARNING_PROGRAM_DIFF),
     (("--jobs", "2"), WARNING_PROGRAM_FINDINGS)],
    ids=["check", "diff", "jobs"],
)
def test_invalid_escape_sequences_in_user_code_print_no_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: tuple[str, ...], expected: tuple[str, ...]
) -> None:
    write_checkpoint_writer(tmp_path)
    # `default` shows every warning once per place: without it Python 3.10/3.11 would hide the
    # DeprecationWarning they raise for "\d", and the test would prove nothing there.
    monkeypatch.setenv("PYTHONWARNINGS", "default")
    (tmp_path / "train.py").write_text(WARNING_PROGRAM)
    (tmp_path / "other.py").write_text(WARNING_PROGRAM)  # two files: --jobs 2 runs two workers
    result = run_cli("check", "--no-cache", *extra, "train.py", "other.py", cwd=tmp_path)
    assert "SyntaxWarning" not in result.stderr
    assert "Warning" not in result.stderr
    assert result.stderr == ""
    assert result.returncode == 1, result.stdout
    for line in expected:
        assert line in result.stdout


def test_warnings_as_errors_do_not_break_linting_user_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_checkpoint_writer(tmp_path)
    # Python turns a warning it is told to raise into a SyntaxError of the code it compiles; a
    # literal LibCST evaluated for a rule then failed the whole file as an internal error.
    monkeypatch.setenv("PYTHONWARNINGS", "error::SyntaxWarning,error:invalid escape sequence")
    (tmp_path / "train.py").write_text(WARNING_PROGRAM)
    result = run_cli("check", "--no-cache", "train.py", cwd=tmp_path)
    assert "internal error" not in result.stdout + result.stderr
    assert result.stderr == ""
    assert result.returncode == 1, result.stdout
    for finding in WARNING_PROGRAM_FINDINGS:
        assert finding in result.stdout


def test_every_rule_reads_and_fixes_user_code_without_raising_a_warning() -> None:
    from torchdevlint.engine import lint_source
    from torchdevlint.fixer import fix_source
    from torchdevlint.registry import all_rules

    rules = list(all_rules())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert lint_source(WARNING_PROGRAM, "train.py", rules)
        fix_source(WARNING_PROGRAM, "train.py", rules, unsafe=True)
    assert [str(warning.message) for warning in caught] == []


def test_a_buffer_name_that_is_no_identifier_is_linted_not_an_internal_error(tmp_path: Path) -> None:
    # torch registers any string as a buffer name; only identifiers are attributes.
    (tmp_path / "model.py").write_text(
        "import torch\nfrom torch import nn\n\n\nclass Net(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.register_buffer('scale-1', torch.ones(1))\n"
        "        self.offset = torch.zeros(1)\n\n    def forward(self, x):\n        return x + self.offset\n"
    )
    result = run_cli("check", "--no-cache", "--format", "concise", "model.py", cwd=tmp_path)
    assert "internal error" not in result.stdout + result.stderr
    assert "TDL010" in result.stdout
