"""Output formats as CI and people read them: github, sarif, full/concise text, statistics, fixes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT, child_environment, run_cli

ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
SARIF_SCHEMA = ROOT / "tests" / "data" / "sarif-schema-2.1.0.json"
BUGGY = (
    "import torch\n"
    "x = torch.zeros(3)\n"
    "if x.sum() > 0:\n"
    "\tx.cuda()\n"
    "\tprint(x + torch.ones(3, device='cuda'))\n"
    "state = torch.load(\n"
    "    'a.pt',\n"
    ")\n"
    "state.cuda()\n"
    # With no CPU mode, a load is reported only where several processes run the program (TDL003).
    "import torch.distributed as dist\n"
    # The program writes the GPU checkpoints it loads (TDL003 reads where loaded files come from).
    "torch.save(x, 'a.pt')\n"
)


def write(tmp_path: Path, text: str = BUGGY, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_concise_is_one_line_per_finding(tmp_path: Path) -> None:
    write(tmp_path)
    for args in (("--format", "concise"), ()):  # piped, the default is concise too
        lines = run_cli("check", "--no-cache", *args, "train.py", cwd=tmp_path).stdout.splitlines()
        assert lines[:2] == [
            "train.py:4:2: TDL001 Tensor move result is discarded; tensor moves are not in place [*]",
            "train.py:6:9: TDL003 torch.load without map_location fails where the saving device is absent",
        ]
        assert lines[2] == "Found 2 errors."


def test_full_shows_the_line_and_marks_the_span(tmp_path: Path) -> None:
    write(tmp_path)
    out = run_cli("check", "--no-cache", "--format", "full", "train.py", cwd=tmp_path).stdout
    assert (
        "train.py:4:2: TDL001 Tensor move result is discarded; tensor moves are not in place [*]\n"
        "  |\n"
        "4 | \tx.cuda()\n"
        "  | \t^^^^^^^^ TDL001\n"
        "  |\n"
        "  = help: Assign the moved tensor back\n"
    ) in out
    # A span over several lines is marked on each; the code goes on the last.
    assert "6 | state = torch.load(\n  |         ^^^^^^^^^^^\n7 |     'a.pt',\n  |     ^^^^^^^\n8 | )\n  | ^ TDL003\n" in out
    assert "= help: Pass map_location (unsafe fix: enable with `--unsafe-fixes`)" in out
    assert out.rstrip().endswith("(1 hidden fix can be enabled with the `--unsafe-fixes` option).")


def on_a_terminal(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """What `torchdevlint check ARGS` prints to a (pseudo-)terminal."""
    import pty

    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "torchdevlint", "check", *args],
        cwd=tmp_path, stdout=follower, stderr=subprocess.PIPE, env=child_environment(env),
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO once the child closes the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    process.wait(timeout=60)
    os.close(leader)
    return b"".join(chunks).decode().replace("\r\n", "\n")


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal (POSIX)")
def test_default_text_on_a_terminal_is_full_and_coloured(tmp_path: Path) -> None:
    write(tmp_path)
    out = on_a_terminal(tmp_path, "--no-cache", "train.py")
    assert ANSI_ESCAPE.search(out)
    assert "4 | \tx.cuda()\n  | \t^^^^^^^^ TDL001\n" in ANSI_ESCAPE.sub("", out)
    # https://no-color.org: the user's NO_COLOR turns colour off, even on a terminal.
    plain = on_a_terminal(tmp_path, "--no-cache", "train.py", env={"NO_COLOR": "1"})
    assert "\x1b" not in plain
    assert "4 | \tx.cuda()\n  | \t^^^^^^^^ TDL001\n" in plain


def display_width(text: str) -> int:
    """Columns a terminal gives `text`: wide and full-width characters two, combining marks none."""
    return sum(
        0 if unicodedata.combining(char) else 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
        for char in text
    )


def source_and_marker(out: str, number: int) -> tuple[str, str]:
    """The shown source line `number` of a full report, and the marker line under it."""
    lines = out.splitlines()
    index = next(i for i, line in enumerate(lines) if line.startswith(f"{number} | "))
    return lines[index], lines[index + 1]


def test_full_shows_a_window_of_a_very_long_line_with_the_carets_under_the_finding(tmp_path: Path) -> None:
    # One 200,000-character line (minified data pasted into a script), the finding near its end.
    long_line = "table = '" + "a" * 199_500 + "'; x.cuda(); rest = '" + "b" * 400 + "'"
    write(tmp_path, f"import torch\nx = torch.zeros(3)\n{long_line}\n")
    result = run_cli("check", "--no-cache", "--format", "full", "train.py", cwd=tmp_path)
    assert result.returncode == 1
    assert f"train.py:3:{long_line.index('x.cuda()') + 1}: TDL001" in result.stdout
    assert len(result.stdout) < 2_000
    source, marker = source_and_marker(result.stdout, 3)
    shown = source.removeprefix("3 | ")
    assert shown.startswith("…aaa") and shown.endswith("bbb…")
    assert display_width(shown) <= 160
    call = source.index("x.cuda()")
    assert marker[call:] == "^^^^^^^^ TDL001"
    assert marker[:call].strip() == "|"


def test_carets_stay_under_the_finding_after_wide_characters(tmp_path: Path) -> None:
    # Chinese text (two columns a character on a terminal) and a combining accent before the call.
    line = "msg = '把张量移到显卡上，cafe\u0301'; x.cuda()  # 注释：移到显卡"
    write(tmp_path, f"import torch\nx = torch.zeros(3)\n{line}\n")
    out = run_cli("check", "--no-cache", "--format", "full", "train.py", cwd=tmp_path).stdout
    assert f"train.py:3:{line.index('x.cuda()') + 1}: TDL001" in out
    source, marker = source_and_marker(out, 3)
    assert source == f"3 | {line}"
    call_column = display_width(source[: source.index("x.cuda()")])
    assert display_width(marker[: marker.index("^")]) == call_column
    assert marker[marker.index("^"):] == "^^^^^^^^ TDL001"


def test_color_always_styles_the_text_formats_and_changes_nothing_else(tmp_path: Path) -> None:
    write(tmp_path)
    for text_format in ("full", "concise"):
        plain = run_cli("check", "--no-cache", "--format", text_format, "train.py", cwd=tmp_path).stdout
        coloured = run_cli("check", "--no-cache", "--format", text_format, "--color", "always", "train.py",
                           cwd=tmp_path).stdout
        assert "\x1b" not in plain
        assert "\x1b[1;31mTDL001\x1b[0m" in coloured
        assert ANSI_ESCAPE.sub("", coloured) == plain
    statistics = run_cli("check", "--no-cache", "--statistics", "--color", "always", "train.py", cwd=tmp_path).stdout
    assert "\x1b[36m[*]\x1b[0m" in statistics


def test_machine_formats_are_never_coloured(tmp_path: Path) -> None:
    write(tmp_path)
    for machine_format in ("json", "github", "sarif"):
        result = run_cli("check", "--no-cache", "--format", machine_format, "--color", "always", "train.py",
                         cwd=tmp_path, env={"FORCE_COLOR": "1"})
        assert result.returncode == 1
        assert "\x1b" not in result.stdout
    statistics = run_cli("check", "--no-cache", "--format", "json", "--statistics", "--color", "always",
                         "train.py", cwd=tmp_path).stdout
    assert json.loads(statistics)


def test_color_auto_follows_no_color_and_force_color(tmp_path: Path) -> None:
    write(tmp_path)

    def check(*args: str, **env: str) -> str:
        return run_cli("check", "--no-cache", *args, "train.py", cwd=tmp_path, env=env).stdout

    assert "\x1b" not in check()  # piped: no colour
    assert "\x1b" not in check("--color", "auto", NO_COLOR="1")
    assert "\x1b" not in check("--color", "auto", NO_COLOR="1", FORCE_COLOR="1")
    assert "\x1b[" in check(FORCE_COLOR="1")
    # An empty variable is as good as unset.
    assert "\x1b" not in check(NO_COLOR="", FORCE_COLOR="")
    assert "\x1b" not in check("--color", "never", FORCE_COLOR="1")
    assert "\x1b[" in check("--color", "always", NO_COLOR="1")


def test_github_workflow_commands(tmp_path: Path) -> None:
    write(tmp_path)
    result = run_cli("check", "--no-cache", "--format", "github", "train.py", "missing.py", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout.splitlines() == [
        "::error file=missing.py,title=torchdevlint::no such file or directory",
        "::error file=train.py,line=4,col=2,endLine=4,endColumn=10,title=TDL001::Tensor move result is discarded; tensor moves are not in place",
        "::error file=train.py,line=6,col=9,endLine=8,title=TDL003::torch.load without map_location fails where the saving device is absent",
    ]


def test_github_escapes_properties() -> None:
    import io

    from torchdevlint.diagnostics import Diagnostic, Location
    from torchdevlint.reporting import write_github

    out = io.StringIO()
    write_github(out, [Diagnostic("TDL001", "s", "50% done\nnext", "a,b:c.py", Location(1, 1), Location(1, 2))], [])
    assert out.getvalue() == "::error file=a%2Cb%3Ac.py,line=1,col=1,endLine=1,endColumn=2,title=TDL001::50%25 done%0Anext\n"


def _sarif(*args: str, cwd: Path) -> dict:
    result = run_cli("check", "--no-cache", "--format", "sarif", *args, cwd=cwd)
    return json.loads(result.stdout)


def _validate(log: dict) -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed (pip install -e '.[test]')")
    schema = json.loads(SARIF_SCHEMA.read_text())
    validator = jsonschema.Draft7Validator(schema, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)
    errors = sorted(validator.iter_errors(log), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:10])


def test_sarif_on_the_fixtures_is_valid_and_complete() -> None:
    from torchdevlint.registry import all_rules

    log = _sarif(str(FIXTURES), cwd=ROOT)
    _validate(log)
    assert log["version"] == "2.1.0" and len(log["runs"]) == 1
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert [rule["id"] for rule in rules] == [rule.code for rule in all_rules()]
    for rule in rules:
        assert rule["name"] and rule["shortDescription"]["text"] and rule["fullDescription"]["text"]
        assert "## Why is this bad?" in rule["help"]["text"]
    cli = json.loads(run_cli("check", "--no-cache", "--format", "json", str(FIXTURES), cwd=ROOT).stdout)
    assert len(run["results"]) == len(cli)
    assert all(rules[r["ruleIndex"]]["id"] == r["ruleId"] for r in run["results"])
    # Python files: the same places as the JSON report, and every fix as replacements.
    in_python = [(r, i) for r, i in zip(run["results"], cli, strict=True) if i["cell"] is None]
    found = [
        (
            result["ruleId"],
            result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
            result["locations"][0]["physicalLocation"]["region"]["startLine"],
            result["locations"][0]["physicalLocation"]["region"]["startColumn"],
        )
        for result, _ in in_python
    ]
    assert found == [(i["code"], Path(i["path"]).relative_to(ROOT).as_posix(), i["line"], i["column"])
                     for _, i in in_python]
    with_fix = [r for r, i in in_python if i["fix"] is not None]
    assert with_fix and all("fixes" in r for r in with_fix)
    # Notebooks: the finding's cell and line are named; the region is a line of the .ipynb file.
    in_notebooks = [(r, i) for r, i in zip(run["results"], cli, strict=True) if i["cell"] is not None]
    assert in_notebooks
    for result, item in in_notebooks:
        assert result["properties"] == {"cell": item["cell"], "cellLine": item["line"], "cellColumn": item["column"]}
        assert result["message"]["text"] == f"cell {item['cell']}, line {item['line']}: {item['message']}"


def _apply_sarif_fix(text: str, fix: dict) -> str:
    """Apply SARIF replacements (1-based line/column regions) to a text."""
    starts = [0] + [i + 1 for i, char in enumerate(text) if char == "\n"]
    replacements = []
    for change in fix["artifactChanges"]:
        for replacement in change["replacements"]:
            region = replacement["deletedRegion"]
            start = starts[region["startLine"] - 1] + region["startColumn"] - 1
            end = starts[region["endLine"] - 1] + region["endColumn"] - 1
            replacements.append((start, end, replacement["insertedContent"]["text"]))
    for start, end, content in sorted(replacements, reverse=True):
        text = text[:start] + content + text[end:]
    return text


def test_sarif_fixes_make_the_same_change_as_the_fixer(tmp_path: Path) -> None:
    from torchdevlint.engine import lint_source
    from torchdevlint.fixer import apply_fixes
    from torchdevlint.registry import select_rules

    text = BUGGY.replace("\n", "\r\n").replace("'a.pt'", "'café.pt'")
    (tmp_path / "train.py").write_bytes(text.encode())
    log = _sarif("train.py", cwd=tmp_path)
    _validate(log)
    results = log["runs"][0]["results"]
    diagnostics = lint_source(text, "train.py", select_rules())
    assert [r["ruleId"] for r in results] == [d.code for d in diagnostics]
    for result, diagnostic in zip(results, diagnostics, strict=True):
        assert diagnostic.fix is not None
        (fix,) = result["fixes"]
        assert fix["description"]["text"] == diagnostic.fix.title
        assert _apply_sarif_fix(text, fix) == apply_fixes(text, [diagnostic.fix])[0]


def test_sarif_reports_unreadable_files_as_notifications(tmp_path: Path) -> None:
    write(tmp_path, "import torch\ndef f(:\n", name="broken.py")
    log = _sarif("broken.py", cwd=tmp_path)
    _validate(log)
    invocation = log["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is False
    (note,) = invocation["toolExecutionNotifications"]
    assert "syntax error" in note["message"]["text"]
    assert note["locations"][0]["physicalLocation"]["region"]["startLine"] == 2


@pytest.mark.skipif(sys.platform != "linux", reason="file names of any bytes are Linux's")
def test_sarif_names_files_whose_names_are_not_utf8_by_their_bytes(tmp_path: Path) -> None:
    write(tmp_path, name=os.fsdecode(b"caf\xe9.py"))
    write(tmp_path, name="line\nbreak.py")
    log = _sarif(".", cwd=tmp_path)
    uris = {result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for result in log["runs"][0]["results"]}
    assert uris == {"caf%E9.py", "line%0Abreak.py"}


def test_statistics_count_per_rule(tmp_path: Path) -> None:
    write(tmp_path, BUGGY + "y = torch.ones(3)\ny.cuda()\nprint(y * x.cuda())\n")
    result = run_cli("check", "--no-cache", "--statistics", "train.py", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout.splitlines()[:3] == [
        "2\tTDL001\t[*] tensor-move-discarded",
        "1\tTDL003\t    load-without-map-location",
        "Found 3 errors.",
    ]
    as_json = json.loads(run_cli("check", "--no-cache", "--statistics", "--format", "json", "train.py", cwd=tmp_path).stdout)
    assert as_json == [
        {"code": "TDL001", "name": "tensor-move-discarded", "count": 2, "fixable": 2},
        {"code": "TDL003", "name": "load-without-map-location", "count": 1, "fixable": 0},
    ]
    refused = run_cli("check", "--statistics", "--format", "sarif", "train.py", cwd=tmp_path)
    assert refused.returncode == 2 and "--statistics" in refused.stderr


def test_show_fixes_lists_what_fix_would_change_without_writing(tmp_path: Path) -> None:
    path = write(tmp_path)
    result = run_cli("check", "--no-cache", "--show-fixes", "train.py", cwd=tmp_path)
    assert path.read_text() == BUGGY
    assert (
        "`--fix` would apply 1 fix:\n"
        "  train.py:4:2: TDL001 Assign the moved tensor back\n"
        "    - \tx.cuda()\n"
        "    + \tx = x.cuda()\n"
        "1 unsafe fix not listed; add `--unsafe-fixes` to list and apply it.\n"
    ) in result.stdout
    unsafe = run_cli("check", "--no-cache", "--show-fixes", "--unsafe-fixes", "train.py", cwd=tmp_path).stdout
    assert "  train.py:6:9: TDL003 Pass map_location (unsafe)\n    -     'a.pt',\n    +     'a.pt', map_location=\"cpu\",\n" in unsafe


def test_show_fixes_shows_a_long_line_around_its_change(tmp_path: Path) -> None:
    padding = ", ".join(f"w{index}" for index in range(60))
    (tmp_path / "train.py").write_text(
        "import torch\nx = torch.zeros(3)\n"
        f"weights = [{padding}]; x.cuda(); rest = [{padding}]\n"
        "y = x + torch.ones(3, device='cuda')\n")
    preview = run_cli("check", "--no-cache", "--show-fixes", "train.py", cwd=tmp_path).stdout
    [removed] = [line for line in preview.splitlines() if line.startswith("    - ")]
    [added] = [line for line in preview.splitlines() if line.startswith("    + ")]
    # Forty characters either side of what the fix changes.
    assert removed == "    - …2, w53, w54, w55, w56, w57, w58, w59]; x.cuda(); rest = [w0, w1, w2, w3, w4, w5,…"
    assert added == "    + …2, w53, w54, w55, w56, w57, w58, w59]; x = x.cuda(); rest = [w0, w1, w2, w3, w4, w5,…"


def test_show_fixes_with_fix_lists_what_changed(tmp_path: Path) -> None:
    write(tmp_path, BUGGY + "y = torch.ones(3)\ny.cuda()\nprint(y * x.cuda())\n")
    result = run_cli("check", "--no-cache", "--fix", "--show-fixes", "train.py", cwd=tmp_path)
    assert "Fixed 2 errors:\n- train.py:\n    2 × TDL001 (tensor-move-discarded)\n" in result.stdout
    assert "Found 3 errors (2 fixed, 1 remaining)." in result.stdout
