"""Fixing at scale and under interruption, and the linter never executing what it reads."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT, run_cli
from roundtrip import run as round_trip

BUGGY = "import torch\nx = torch.zeros(3)\nx.cuda()\ny = x + torch.ones(3, device=\"cuda\")\n"
FIXED = "import torch\nx = torch.zeros(3)\nx = x.cuda()\ny = x + torch.ones(3, device=\"cuda\")\n"


@pytest.mark.slow
def test_round_trip_over_the_shipped_code(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    for path in FIXTURES.glob("*.py"):
        (source / path.name).write_bytes(path.read_bytes())
    result = round_trip(source, tmp_path / "work")
    assert result.violations == []
    assert result.files_changed > 0 and result.findings_fixable > 0
    assert result.still_compile == result.compiled_before
    assert result.second_run_changes == 0


def _wait_until(condition: Callable[[], bool], process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120
    while not condition():
        assert process.poll() is None, "the run ended before it was interrupted"
        assert time.monotonic() < deadline, "the run never started fixing"
        time.sleep(0.01)


@pytest.mark.slow
def test_interrupted_fix_leaves_each_file_untouched_or_fully_fixed(tmp_path: Path) -> None:
    folder = tmp_path / "many"
    folder.mkdir()
    body = BUGGY + "".join(f"def f{i}(a):\n    return a + {i}\n" for i in range(400))
    fixed_body = FIXED + body[len(BUGGY):]
    for index in range(300):
        (folder / f"m{index:03d}.py").write_text(body)
    for sig in (signal.SIGINT, signal.SIGTERM):
        for path in folder.iterdir():
            path.write_text(body)
        # A test run started in the background of a shell without job control ignores SIGINT,
        # and a child inherits an ignored signal; a user's run does not ignore it. A handled
        # signal goes back to its default in the child.
        ignored = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "torchdevlint", "check", "--fix", "--no-cache", "--jobs", "2", str(folder)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )
        finally:
            signal.signal(signal.SIGINT, ignored)
        # Interrupt once the run is under way: the moment it has written its first fixed file.
        _wait_until(lambda: any(path.read_text() == fixed_body for path in folder.glob("*.py")), process)
        process.send_signal(sig)
        _, stderr = process.communicate(timeout=120)
        assert "Traceback" not in stderr
        assert process.returncode == 130 and "interrupted" in stderr
        states = {path.read_text() for path in folder.iterdir() if path.suffix == ".py"}
        assert states <= {body, fixed_body}
        leftovers = [p.name for p in folder.iterdir() if p.suffix != ".py"]
        assert leftovers == []


# A move of a variable the function only reads: `x = x.double()` would make `x` local to the
# whole function, and its first read would raise UnboundLocalError.
NOT_LOCAL_TO_THE_FUNCTION = {
    "module-level": (
        "import torch\n\nx = torch.zeros(3)\n\n\ndef shifted():\n    x.double()\n    return x + 1\n\n\n"
        "print(shifted())\n"
    ),
    "closure": (
        "import torch\n\n\ndef outer():\n    x = torch.zeros(3)\n\n    def inner():\n        x.double()\n"
        "        return x + 1\n\n    return inner()\n\n\nprint(outer())\n"
    ),
}


@pytest.mark.parametrize("source", NOT_LOCAL_TO_THE_FUNCTION.values(), ids=NOT_LOCAL_TO_THE_FUNCTION.keys())
def test_no_fix_assigns_to_a_name_the_function_does_not_own(tmp_path: Path, source: str) -> None:
    program = tmp_path / "program.py"
    program.write_text(source)
    report = run_cli("check", "--no-cache", "--format", "json", "program.py", cwd=tmp_path)
    (finding,) = json.loads(report.stdout)
    assert finding["code"] == "TDL001" and finding["fix"] is None
    run_cli("check", "--no-cache", "--fix", "--unsafe-fixes", "program.py", cwd=tmp_path)
    assert program.read_text() == source
    ran = subprocess.run([sys.executable, "program.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr


def test_a_global_declaration_keeps_the_fix_and_the_program_runs(tmp_path: Path) -> None:
    program = tmp_path / "program.py"
    program.write_text(
        "import torch\n\nx = torch.zeros(3)\n\n\ndef widen():\n    global x\n    x.double()\n\n\n"
        "widen()\nprint(x.dtype)\n"
    )
    # A dtype conversion changes no device: the model cannot show it safe.
    result = run_cli("check", "--no-cache", "--fix", "--unsafe-fixes", "program.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout
    assert "    x = x.double()\n" in program.read_text()
    ran = subprocess.run([sys.executable, "program.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert ran.stdout.strip() == "torch.float64"


def test_linting_never_executes_the_code_it_reads(tmp_path: Path) -> None:
    marker = tmp_path / "executed"
    (tmp_path / "evil.py").write_text(
        "import torch\n"
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "x = torch.zeros(3)\n"
        "x.cuda()\n"
        "state = torch.load('m.pt')\n"
    )
    (tmp_path / "evil_helper.py").write_text(f"open({str(marker)!r}, 'w').write('imported')\n")
    for args in (("check",), ("check", "--fix", "--unsafe-fixes"), ("check", "--format", "json")):
        run_cli(*args, "--no-cache", "evil.py", cwd=tmp_path)
    assert not marker.exists()


def test_the_linter_has_no_eval_exec_or_dynamic_user_imports() -> None:
    package = ROOT / "torchdevlint"
    for path in package.rglob("*.py"):
        if "verify" in path.parts:
            continue  # verify runs programs, each in its own subprocess, by design
        text = path.read_text()
        for forbidden in ("eval(", "exec(", "__import__(", "runpy", "importlib.util.spec_from_file_location"):
            # `model.eval()` in a rule's example is a method, not the builtin.
            pattern = r"(?<![.\w])" + re.escape(forbidden)
            assert not re.search(pattern, text), f"{path.relative_to(ROOT)} uses {forbidden}"


def test_a_fix_whose_output_would_not_parse_is_withheld(tmp_path: Path) -> None:
    import libcst as cst

    from torchdevlint.diagnostics import Applicability
    from torchdevlint.edits import NodeEdit
    from torchdevlint.fixer import fix_source
    from torchdevlint.rule import Rule

    class BreaksCode(Rule):
        """A deliberately broken fix: the fixer must refuse it."""

        code = "TDL998"
        slug = "broken-fix-probe"
        message = "probe"
        fix_title = "Break the code"

        def visit_Call(self, node: cst.Call) -> None:
            self.report(node, fix=self.make_fix(NodeEdit.insert_after(node, " )("), applicability=Applicability.SAFE))

    source = "import torch\nx = torch.zeros(3)\n"
    outcome = fix_source(source, "probe.py", [BreaksCode])
    assert outcome.text == source
    assert outcome.fixed_count == 0
    assert outcome.remaining and all(d.fix_withheld for d in outcome.remaining)


def test_a_quick_fix_whose_output_would_not_parse_is_not_offered() -> None:
    from torchdevlint.diagnostics import Applicability, Edit, Fix
    from torchdevlint.fixer import apply_one_fix

    source = "import torch\nx = torch.zeros(3)\n"
    end = source.index(")\n") + 1

    def fix(content: str) -> Fix:
        return Fix("probe", Applicability.SAFE, (Edit(end, end, content),))

    assert apply_one_fix(source, fix(" )(")) is None
    assert apply_one_fix(source, fix(".cuda()")) == "import torch\nx = torch.zeros(3).cuda()\n"
    # Code the running Python cannot judge (a syntax error already) is left to the user.
    broken = source + "def (\n"
    assert apply_one_fix(broken, fix(" )(")) == "import torch\nx = torch.zeros(3) )(\ndef (\n"


def test_unreadable_file_is_reported_not_raised(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # Root reads any file whatever its mode, so the permission error is simulated.
    from torchdevlint import runner

    path = tmp_path / "secret.py"
    path.write_text(BUGGY)
    original = Path.read_bytes

    def refuse(self: Path) -> bytes:
        if self.name == "secret.py":
            raise PermissionError(13, "Permission denied")
        return original(self)

    monkeypatch.setattr(Path, "read_bytes", refuse)
    result = runner.process_file(str(path), runner.RunSettings(rule_codes=("TDL001",)))
    assert [error.message for error in result.errors] == ["cannot read: Permission denied"]
    assert result.diagnostics == []


def test_a_fix_that_does_not_remove_its_finding_is_withheld_not_repeated() -> None:
    import libcst as cst

    from torchdevlint.edits import NodeEdit
    from torchdevlint.fixer import fix_source
    from torchdevlint.rule import Rule

    class NeverDone(Rule):
        """Its fix adds a line but leaves the finding: the fixer must not loop on it."""

        code = "TDL997"
        slug = "non-converging-probe"
        message = "probe"
        fix_title = "Add a line"

        def visit_Call(self, node: cst.Call) -> None:
            if isinstance(node.func, cst.Attribute) and node.func.attr.value == "zeros":
                self.report(node, fix=self.make_fix(NodeEdit.insert_before(node, "0 + ")))

    source = "import torch\nx = torch.zeros(3)\n"
    outcome = fix_source(source, "probe.py", [NeverDone])
    assert outcome.text == source
    assert outcome.fixed_count == 0
    assert all(d.fix_withheld for d in outcome.remaining)
