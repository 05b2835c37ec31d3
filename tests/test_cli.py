"""The command line as users and CI run it: a real subprocess each time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, run_cli, write_checkpoint_writer

BUGGY = "import torch\nx = torch.zeros(3)\nx.cuda()\ny = x + torch.ones(3, device=\"cuda\")\n"
CLEAN = "import torch\nx = torch.zeros(3)\nx = x.cuda()\ny = x + torch.ones(3, device=\"cuda\")\n"
# BUGGY has no CPU mode: a load in it is reported only where several processes run it (TDL003).
SEVERAL_PROCESSES = "import torch.distributed as dist\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_findings_exit_1_with_location_code_and_summary(tmp_path: Path) -> None:
    write(tmp_path, "train.py", BUGGY)
    result = run_cli("check", "train.py", cwd=tmp_path)
    assert result.returncode == 1
    assert "train.py:3:1: TDL001 Tensor move result is discarded" in result.stdout
    assert "[*]" in result.stdout
    assert "Found 1 error." in result.stdout


def test_clean_file_exits_0(tmp_path: Path) -> None:
    write(tmp_path, "train.py", CLEAN)
    result = run_cli("train.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout
    assert "All checks passed!" in result.stdout


def test_exit_zero(tmp_path: Path) -> None:
    write(tmp_path, "train.py", BUGGY)
    assert run_cli("check", "--exit-zero", "train.py", cwd=tmp_path).returncode == 0


def test_json_output_fields(tmp_path: Path) -> None:
    write(tmp_path, "train.py", BUGGY)
    result = run_cli("check", "--format", "json", "train.py", cwd=tmp_path)
    items = json.loads(result.stdout)
    assert items == [
        {
            "code": "TDL001",
            "slug": "tensor-move-discarded",
            "path": "train.py",
            "cell": None,
            "line": 3,
            "column": 1,
            "end_line": 3,
            "end_column": 9,
            "message": "Tensor move result is discarded; tensor moves are not in place",
            "fix": {"applicability": "safe", "title": "Assign the moved tensor back"},
        }
    ]


def test_fix_rewrites_in_place_and_exits_0(tmp_path: Path) -> None:
    path = write(tmp_path, "train.py", BUGGY)
    result = run_cli("check", "--fix", "train.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout
    assert path.read_text() == CLEAN
    assert "1 fixed, 0 remaining" in result.stdout


def test_fix_applies_only_safe_fixes_unless_asked(tmp_path: Path) -> None:
    write_checkpoint_writer(tmp_path)
    source = "import torch\nstate = torch.load('a.pt')\n"
    path = write(tmp_path, "load.py", source)
    result = run_cli("--fix", "load.py", cwd=tmp_path)
    assert result.returncode == 1
    assert path.read_text() == source
    assert "--unsafe-fixes" in result.stdout
    result = run_cli("--fix", "--unsafe-fixes", "load.py", cwd=tmp_path)
    assert result.returncode == 0
    assert path.read_text() == "import torch\nstate = torch.load('a.pt', map_location=\"cpu\")\n"


def test_diff_prints_and_does_not_write(tmp_path: Path) -> None:
    path = write(tmp_path, "train.py", BUGGY)
    result = run_cli("check", "--diff", "train.py", cwd=tmp_path)
    assert "-x.cuda()" in result.stdout and "+x = x.cuda()" in result.stdout
    assert path.read_text() == BUGGY


def test_select_and_ignore(tmp_path: Path) -> None:
    write_checkpoint_writer(tmp_path)
    write(tmp_path, "train.py", BUGGY + "torch.load('a.pt')\n" + SEVERAL_PROCESSES)
    only_load = run_cli("check", "--select", "TDL003", "--format", "json", "train.py", cwd=tmp_path)
    assert {item["code"] for item in json.loads(only_load.stdout)} == {"TDL003"}
    no_move = run_cli("check", "--ignore", "TDL001", "--format", "json", "train.py", cwd=tmp_path)
    assert {item["code"] for item in json.loads(no_move.stdout)} == {"TDL003"}
    prefix = run_cli("check", "--select", "TDL00", "--ignore", "TDL003", "--format", "json", "train.py", cwd=tmp_path)
    assert {item["code"] for item in json.loads(prefix.stdout)} == {"TDL001"}


def test_unknown_selector_is_a_usage_error(tmp_path: Path) -> None:
    write(tmp_path, "train.py", BUGGY)
    result = run_cli("check", "--select", "TDL999", "train.py", cwd=tmp_path)
    assert result.returncode == 2
    assert "TDL999" in result.stderr and "Traceback" not in result.stderr


def test_noqa_suppresses(tmp_path: Path) -> None:
    source = (
        "import torch\nx = torch.zeros(3)\n"
        "x.cuda()  # noqa\n"
        "x.cpu()  # noqa: TDL001\n"
        "x.half()  # noqa: TDL003\n"
    )
    write(tmp_path, "train.py", source)
    items = json.loads(run_cli("check", "--format", "json", "train.py", cwd=tmp_path).stdout)
    assert [(item["line"], item["code"]) for item in items] == [(5, "TDL001")]


def test_syntax_error_is_reported_and_other_files_still_linted(tmp_path: Path) -> None:
    write(tmp_path, "pkg/broken.py", "import torch\ndef f(:\n    pass\n")
    write(tmp_path, "pkg/train.py", BUGGY)
    result = run_cli("check", "pkg", cwd=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stdout + result.stderr
    assert "pkg/broken.py:2:" in result.stdout and "syntax error" in result.stdout
    assert "pkg/train.py:3:1: TDL001" in result.stdout


def test_folders_are_walked_and_virtualenvs_skipped(tmp_path: Path) -> None:
    write(tmp_path, "src/model/train.py", BUGGY)
    write(tmp_path, ".venv/lib/site.py", BUGGY)
    write(tmp_path, "build/lib/train.py", BUGGY)
    write(tmp_path, ".git/hooks/x.py", BUGGY)
    items = json.loads(run_cli("check", "--format", "json", ".", cwd=tmp_path).stdout)
    assert [Path(item["path"]).as_posix() for item in items] == ["src/model/train.py"]


def test_config_select_ignore_exclude_and_rule_options(tmp_path: Path) -> None:
    write_checkpoint_writer(tmp_path)
    write(
        tmp_path,
        "pyproject.toml",
        '[tool.torchdevlint]\nignore = ["TDL001"]\nexclude = ["legacy/"]\n\n'
        '[tool.torchdevlint.load-without-map-location]\nmap-location = "meta"\n',
    )
    write(tmp_path, "legacy/old.py", "import torch\ntorch.load('a')\n")
    path = write(tmp_path, "train.py", BUGGY + "model = torch.load('a.pt')\nmodel.cuda()\n" + SEVERAL_PROCESSES)
    items = json.loads(run_cli("check", "--format", "json", ".", cwd=tmp_path).stdout)
    assert [(item["path"], item["code"]) for item in items] == [("train.py", "TDL003")]
    run_cli("check", "--fix", "--unsafe-fixes", "train.py", cwd=tmp_path)
    assert "map_location=\"meta\"" in path.read_text()


def test_rule_all_lists_every_rule() -> None:
    # `rule CODE` printing the page is tested with the docs (test_rule_docs.py).
    listing = run_cli("rule", "--all")
    from torchdevlint.registry import all_rules

    assert [line.split()[0] for line in listing.stdout.splitlines()] == [rule.code for rule in all_rules()]


def test_jobs_1_and_2_give_the_same_output() -> None:
    one = run_cli("check", "--jobs", "1", "--format", "json", str(FIXTURES))
    two = run_cli("check", "--jobs", "2", "--format", "json", str(FIXTURES))
    assert one.stdout == two.stdout
    assert json.loads(one.stdout)


def test_main_job_on_shipped_fixtures_finds_every_marked_bug() -> None:
    result = run_cli("check", "--format", "json", str(FIXTURES))
    assert result.returncode == 1
    found = {(Path(item["path"]).name, item["cell"], item["line"], item["code"]) for item in json.loads(result.stdout)}
    from test_fixtures import expected_findings, expected_notebook_findings

    marked = {
        (path.name, None, line, code)
        for path in FIXTURES.glob("*.py")
        for line, code in expected_findings(path.read_text())
    }
    marked |= {
        (path.name, cell, line, code)
        for path in FIXTURES.glob("*.ipynb")
        for cell, line, code in expected_notebook_findings(path)
    }
    assert any(cell is not None for _, cell, _, _ in marked)
    assert found == marked


def test_off_by_default_rules_run_once_a_code_prefix_or_all_selects_them(tmp_path: Path) -> None:
    from torchdevlint.registry import all_rules, select_rules

    off = {rule.code for rule in all_rules() if not rule.default_enabled}
    assert off, "expected some rules off by default"
    assert not off & {rule.code for rule in select_rules()}
    assert off <= {rule.code for rule in select_rules(["TDL"])}
    assert off <= {rule.code for rule in select_rules(["ALL"])}
    code = sorted(off)[0]
    assert code in {rule.code for rule in select_rules(extend_select=[code])}


def test_command_line_select_replaces_the_configured_selection(tmp_path: Path) -> None:
    write(tmp_path, "pyproject.toml", '[tool.torchdevlint]\nselect = ["TDL0"]\nignore = ["TDL001"]\n')
    write(tmp_path, "train.py", BUGGY)
    assert json.loads(run_cli("check", "--format", "json", "train.py", cwd=tmp_path).stdout) == []
    chosen = json.loads(run_cli("check", "--select", "TDL001", "--format", "json", "train.py", cwd=tmp_path).stdout)
    assert [item["code"] for item in chosen] == ["TDL001"]


def test_loads_in_test_files_are_skipped_unless_tests_are_included(tmp_path: Path) -> None:
    write_checkpoint_writer(tmp_path)
    load = "import torch\n\ndef test_round_trip(path):\n    assert torch.load(path)\n"
    write(tmp_path, "tests/test_io.py", load)
    write(tmp_path, "tests/io_test.py", load)
    write(tmp_path, "tests/conftest.py", load)
    write(tmp_path, "eval.py", load)  # an evaluation script whose entry point is named test_*
    result = run_cli("check", "--no-cache", ".", cwd=tmp_path)
    assert result.returncode == 1
    reported = sorted(line.split(":", 1)[0] for line in result.stdout.splitlines() if "TDL003" in line)
    assert reported == ["eval.py"]
    (tmp_path / "pyproject.toml").write_text("[tool.torchdevlint.TDL003]\ninclude-tests = true\n")
    result = run_cli("check", "--no-cache", ".", cwd=tmp_path)
    reported = sorted(line.split(":", 1)[0] for line in result.stdout.splitlines() if "TDL003" in line)
    assert reported == ["eval.py", "tests/conftest.py", "tests/io_test.py", "tests/test_io.py"]


def test_gpu_indices_in_tests_are_skipped_unless_tests_are_included(tmp_path: Path) -> None:
    write(tmp_path, "tests/test_devices.py",
          "import torch\n\ndef test_index():\n    assert torch.device(\"cuda\", 1).index == 1\n")
    write(tmp_path, "train.py", "import torch\nmodel = torch.nn.Linear(2, 2).cuda(1)\n")
    reported = [line.split(":", 1)[0] for line in run_cli("check", "--no-cache", ".", cwd=tmp_path).stdout.splitlines()
                if "TDL207" in line]
    assert reported == ["train.py"]
    (tmp_path / "pyproject.toml").write_text("[tool.torchdevlint.fixed-gpu-index]\ninclude-tests = true\n")
    reported = [line.split(":", 1)[0] for line in run_cli("check", "--no-cache", ".", cwd=tmp_path).stdout.splitlines()
                if "TDL207" in line]
    assert sorted(reported) == ["tests/test_devices.py", "train.py"]


def test_a_script_named_like_a_test_file_without_tests_is_checked(tmp_path: Path) -> None:
    write_checkpoint_writer(tmp_path)
    write(tmp_path, "test_on_image.py", "import torch\nstate = torch.load(opt.checkpoint)\n")
    result = run_cli("check", "--no-cache", "test_on_image.py", cwd=tmp_path)
    assert result.returncode == 1
    assert "TDL003" in result.stdout


def test_hard_coded_cuda_is_fixed_through_one_device_variable_for_the_configured_torch(tmp_path: Path) -> None:
    # TDL203 is off by default; a project that must run on CPU CI turns it on.
    source = ("import torch\n\nmodel = torch.nn.Linear(4, 2).cuda()\nx = torch.zeros(2, 4, device=\"cuda\")\n"
              "torch.cuda.synchronize()\n")
    path = write(tmp_path, "bench.py", source)
    assert run_cli("check", "bench.py", cwd=tmp_path).returncode == 0
    result = run_cli("check", "--select", "TDL203", "bench.py", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout.count("TDL203") == 3
    write(tmp_path, "pyproject.toml", '[tool.torchdevlint.hard-coded-cuda]\ntorch-version = "2.4"\n')
    run_cli("check", "--select", "TDL203", "--fix", "--unsafe-fixes", "bench.py", cwd=tmp_path)
    assert path.read_text() == (
        'import torch\ndevice = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n\n'
        "model = torch.nn.Linear(4, 2).to(device)\nx = torch.zeros(2, 4, device=device)\ntorch.cuda.synchronize()\n"
    )
    # Fixed, the program has a CPU mode: what is left is TDL007's, a correctness finding.
    result = run_cli("check", "--select", "TDL007,TDL203", "bench.py", cwd=tmp_path)
    assert "bench.py:6:1: TDL007" in result.stdout and "TDL203" not in result.stdout


def test_diff_exits_one_when_it_prints_a_diff_and_zero_when_nothing_would_change(tmp_path: Path) -> None:
    write(tmp_path, "train.py", BUGGY)
    write(tmp_path, "clean.py", CLEAN + "torch.load('a.pt')\n")  # a finding with no safe fix
    with_diff = run_cli("check", "--no-cache", "--diff", "train.py", cwd=tmp_path)
    assert with_diff.returncode == 1 and "+x = x.cuda()" in with_diff.stdout
    assert "Would fix 1 error" in with_diff.stdout and "fixed" not in with_diff.stdout
    nothing = run_cli("check", "--no-cache", "--diff", "clean.py", cwd=tmp_path)
    assert nothing.returncode == 0 and "+++" not in nothing.stdout
    both = run_cli("check", "--no-cache", "--fix", "--diff", "train.py", cwd=tmp_path)
    assert both.returncode == 1 and "(1 fixed" not in both.stdout and "Would fix 1 error" in both.stdout
    assert (tmp_path / "train.py").read_text() == BUGGY


def test_diff_with_a_machine_format_is_a_usage_error(tmp_path: Path) -> None:
    write(tmp_path, "train.py", BUGGY)
    result = run_cli("check", "--no-cache", "--diff", "--format", "json", "train.py", cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert "--diff" in result.stderr and "text formats" in result.stderr


def test_a_selection_that_runs_no_rule_is_an_error_not_a_pass(tmp_path: Path) -> None:
    write(tmp_path, "train.py", BUGGY)
    for args in (("--select", ""), ("--select", "TDL001", "--ignore", "TDL001")):
        result = run_cli("check", "--no-cache", *args, "train.py", cwd=tmp_path)
        assert result.returncode == 2 and "All checks passed" not in result.stdout
        assert "runs no rule" in result.stderr
    write(tmp_path, "pyproject.toml", "[tool.torchdevlint]\nselect = []\n")
    configured = run_cli("check", "--no-cache", "train.py", cwd=tmp_path)
    assert configured.returncode == 2 and "runs no rule" in configured.stderr


def test_a_prefix_selects_every_rule_it_matches_in_select_and_extend_select_alike(tmp_path: Path) -> None:
    write(tmp_path, "train.py", (FIXTURES / "tdl001_discarded_move_train_loop.py").read_text())

    def codes(*args: str) -> set[str]:
        result = run_cli("check", "--no-cache", "--format", "json", *args, "train.py", cwd=tmp_path)
        return {item["code"] for item in json.loads(result.stdout)}

    # TDL101 is off by default; the prefix TDL1 names it either way.
    assert "TDL101" not in codes()
    assert codes("--select", "TDL1") == {"TDL101"}
    assert codes("--extend-select", "TDL1") == {"TDL101"} | codes()


def test_fix_leaves_a_read_only_file_as_it_is_and_counts_nothing_fixed(tmp_path: Path) -> None:
    path = write(tmp_path, "train.py", BUGGY)
    path.chmod(0o444)
    result = run_cli("check", "--no-cache", "--fix", "train.py", cwd=tmp_path)
    assert path.read_text() == BUGGY
    assert "train.py: error: not fixed: the file is read-only" in result.stdout
    assert "train.py:3:1: TDL001" in result.stdout and "fixed" not in result.stdout.replace("not fixed", "")
    assert result.returncode == 2


def test_a_file_changed_since_it_was_read_is_not_overwritten(tmp_path: Path) -> None:
    import pytest

    from torchdevlint.sourcefile import NotRewritten, write_atomically

    path = write(tmp_path, "train.py", BUGGY)
    edited = BUGGY + "print('saved by the editor while the linter ran')\n"
    path.write_text(edited)
    with pytest.raises(NotRewritten, match="changed since it was read"):
        write_atomically(path, CLEAN.encode(), replacing=BUGGY.encode())
    assert path.read_text() == edited
    assert [p.name for p in tmp_path.iterdir()] == ["train.py"]  # no temporary file left behind
    write_atomically(path, CLEAN.encode(), replacing=edited.encode())
    assert path.read_text() == CLEAN


def test_jobs_are_capped_at_the_files_and_twice_the_cores() -> None:
    from torchdevlint.runner import default_jobs, worker_count

    cores = default_jobs()
    assert worker_count(1000, 5000) == 2 * cores
    assert worker_count(1000, 3) == min(3, 2 * cores)
    assert worker_count(1, 5000) == 1 and worker_count(4, 0) == 1


def test_output_file_gets_the_report_standard_output_would_have_had(tmp_path: Path) -> None:
    write(tmp_path, "train.py", BUGGY)
    reports = tmp_path / "reports"  # made, as ruff makes it
    for output_format in ("concise", "full", "json", "sarif"):
        printed = run_cli("check", "--no-cache", "--format", output_format, "train.py", cwd=tmp_path)
        report = reports / f"torchdevlint.{output_format}"
        # FORCE_COLOR speaks for terminals: a report file is coloured only with --color always.
        written = run_cli("check", "--no-cache", "--format", output_format, "--output-file", str(report),
                          "train.py", cwd=tmp_path, env={"FORCE_COLOR": "1"})
        assert written.returncode == printed.returncode == 1
        assert written.stdout == "" and written.stderr == ""
        assert report.read_text(encoding="utf-8") == printed.stdout
    # An existing report is replaced whole, and no temporary file is left beside it.
    write(tmp_path, "train.py", CLEAN)
    again = run_cli("check", "--no-cache", "-o", "reports/torchdevlint.concise", "train.py", cwd=tmp_path)
    assert again.returncode == 0
    assert (reports / "torchdevlint.concise").read_text() == "All checks passed!\n"
    assert sorted(path.name for path in reports.iterdir()) == [
        "torchdevlint.concise", "torchdevlint.full", "torchdevlint.json", "torchdevlint.sarif"]


def test_output_file_leaves_the_diff_and_fixed_standard_input_on_standard_output(tmp_path: Path) -> None:
    path = write(tmp_path, "train.py", BUGGY)
    diffed = run_cli("check", "--no-cache", "--diff", "--output-file", "report.txt", "train.py", cwd=tmp_path)
    assert diffed.returncode == 1
    assert "-x.cuda()" in diffed.stdout and "+x = x.cuda()" in diffed.stdout
    assert "Would fix 1 error" in (tmp_path / "report.txt").read_text()
    assert path.read_text() == BUGGY

    fixed = run_cli("check", "--no-cache", "--fix", "--output-file", "report.txt", "-", cwd=tmp_path, stdin=BUGGY)
    assert fixed.returncode == 0
    assert fixed.stdout == CLEAN
    assert fixed.stderr == ""
    assert "1 fixed, 0 remaining" in (tmp_path / "report.txt").read_text()


def test_an_output_file_that_cannot_be_written_is_an_error_before_the_run(tmp_path: Path) -> None:
    path = write(tmp_path, "train.py", BUGGY)
    # A folder on the way that is a file; a folder. (Permissions would not stop a root user.)
    for target in ("train.py/report.txt", "."):
        result = run_cli("check", "--no-cache", "--fix", "--output-file", target, "train.py", cwd=tmp_path)
        assert result.returncode == 2
        assert result.stdout == ""
        assert result.stderr.startswith(f"torchdevlint: error: cannot write the report to {target}: ")
        assert "Traceback" not in result.stderr
        assert path.read_text() == BUGGY  # nothing was fixed: the run never started


COLAB_EXPORT = (
    '"""Exported from Colab."""\n'
    "!pip install -q torchvision\n"
    "%matplotlib inline\n"
    "import torch\n"
    "x = torch.zeros(3)\n"
    "x.cuda()\n"
    "y = x + torch.ones(3, device='cuda')\n"
)


def test_a_notebook_exported_as_python_is_linted_around_its_ipython_lines(tmp_path: Path) -> None:
    (tmp_path / "export.py").write_text(COLAB_EXPORT)
    result = run_cli("check", "--no-cache", "export.py", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "export.py:6:1: TDL001" in result.stdout
    assert "syntax error" not in result.stdout
    assert "export.py: 2 IPython lines (`!pip install -q torchvision`) set aside" in result.stderr

    fixed = run_cli("check", "--no-cache", "--fix", "export.py", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    # The fix is written, and every IPython line is kept as it was.
    assert (tmp_path / "export.py").read_text() == COLAB_EXPORT.replace("x.cuda()", "x = x.cuda()")


def test_a_python_file_with_a_real_syntax_error_is_still_one(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("!pip install torch\nimport torch\ndef f(:\n    pass\n")
    result = run_cli("check", "--no-cache", "broken.py", cwd=tmp_path)
    assert result.returncode == 2
    assert "syntax error" in result.stdout
    assert "set aside" not in result.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_die_with_a_run_killed_by_sigkill(tmp_path: Path) -> None:
    import signal
    import time

    program = "import torch\nx = torch.zeros(3)\nx.cuda()\n" + "y = torch.ones(2) + 1\n" * 400
    for index in range(200):
        (tmp_path / f"m{index}.py").write_text(program)
    run = subprocess.Popen([sys.executable, "-m", "torchdevlint", "check", "--no-cache", "--jobs", "2", "."],
                           cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def children() -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and (entry / "stat").read_text().rsplit(")", 1)[1].split()[1] == str(run.pid):
                    found.append(int(entry.name))
            except OSError:
                continue
        return found

    deadline = time.monotonic() + 30
    while len(children()) < 2 and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.05)
    workers = children()
    assert workers, "the run ended before it started its workers"
    run.send_signal(signal.SIGKILL)
    run.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() for pid in workers):
        time.sleep(0.05)
    alive = [pid for pid in workers if Path(f"/proc/{pid}/stat").exists()
             and Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"]
    assert not alive, f"workers {alive} outlived their run"


def test_ruffs_spellings_of_shared_flags_mean_the_same(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import torch\nx = torch.zeros(3)\nx.cuda()\n")
    concise = run_cli("check", "--no-cache", "--format", "concise", "train.py", cwd=tmp_path)
    assert run_cli("check", "--no-cache", "--output-format", "concise", "train.py", cwd=tmp_path).stdout == concise.stdout
    quiet = run_cli("check", "--no-cache", "-q", "train.py", cwd=tmp_path)
    assert quiet.returncode == 1 and quiet.stdout.splitlines() == [concise.stdout.splitlines()[0]]
    assert run_cli("check", "--no-cache", "--quiet", "train.py", cwd=tmp_path).stdout == quiet.stdout
    silent = run_cli("check", "--no-cache", "--silent", "train.py", cwd=tmp_path)
    assert (silent.returncode, silent.stdout, silent.stderr) == (1, "", "")
    assert run_cli("check", "--no-cache", "-e", "--silent", "train.py", cwd=tmp_path).returncode == 0


def test_fixed_and_remaining_add_up_to_the_findings_check_reports(tmp_path: Path) -> None:
    import re
    import shutil

    shutil.copytree(FIXTURES, tmp_path / "fixtures", ignore=shutil.ignore_patterns("*.fixed"))
    checked = run_cli("check", "--no-cache", "--select", "ALL", "fixtures", cwd=tmp_path)
    found = int(re.search(r"Found (\d+) error", checked.stdout).group(1))  # type: ignore[union-attr]
    fixing = run_cli("check", "--no-cache", "--select", "ALL", "--fix", "--unsafe-fixes", "fixtures", cwd=tmp_path)
    summary = re.search(r"Found (\d+) errors? \((\d+) fixed, (\d+) remaining\)", fixing.stdout)
    assert summary is not None, fixing.stdout[-500:]
    total, fixed, remaining = (int(group) for group in summary.groups())
    assert total == fixed + remaining == found
    after = run_cli("check", "--no-cache", "--select", "ALL", "fixtures", cwd=tmp_path)
    assert f"Found {remaining} error" in after.stdout


# A whole model loaded and then moved: `map_location="cpu"` is its unsafe fix.
BUGGY_AND_LOAD = BUGGY + "model = torch.load('model.pt')\nmodel.cuda()\n" + SEVERAL_PROCESSES


def test_unfixable_codes_are_reported_without_a_fix_and_never_fixed(tmp_path: Path) -> None:
    write_checkpoint_writer(tmp_path)
    write(tmp_path, "train.py", BUGGY_AND_LOAD)
    shown = run_cli("check", "--no-cache", "--format", "json", "--unfixable", "TDL0", "train.py", cwd=tmp_path)
    assert [(item["code"], item["fix"]) for item in json.loads(shown.stdout)] == [("TDL001", None), ("TDL003", None)]
    fixing = run_cli("check", "--no-cache", "--fix", "--unsafe-fixes", "--unfixable", "TDL001", "train.py",
                     cwd=tmp_path)
    assert fixing.returncode == 1
    text = (tmp_path / "train.py").read_text()
    assert "\nx.cuda()\n" in text and "map_location" in text
    # The configuration says the same; the command line replaces it.
    write(tmp_path, "train.py", BUGGY_AND_LOAD)
    write(tmp_path, "pyproject.toml", '[tool.torchdevlint]\nunfixable = ["TDL001"]\n')
    configured = run_cli("check", "--no-cache", "--diff", "--unsafe-fixes", "train.py", cwd=tmp_path).stdout
    assert "map_location=" in configured and "+x = x.cuda()" not in configured
    replaced = run_cli("check", "--no-cache", "--diff", "--unsafe-fixes", "--unfixable", "TDL003", "train.py",
                       cwd=tmp_path).stdout
    assert "+x = x.cuda()" in replaced and "map_location=" not in replaced
    assert run_cli("check", "--unfixable", "TDL9999", "train.py", cwd=tmp_path).returncode == 2


def test_fix_only_fixes_and_neither_reports_nor_fails_on_what_is_left(tmp_path: Path) -> None:
    write(tmp_path, "train.py", BUGGY_AND_LOAD)
    result = run_cli("check", "--no-cache", "--fix-only", "train.py", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, "Fixed 1 error.\n")
    assert "x = x.cuda()" in (tmp_path / "train.py").read_text()
    again = run_cli("check", "--no-cache", "--fix-only", "--format", "json", "train.py", cwd=tmp_path)
    assert (again.returncode, json.loads(again.stdout)) == (0, [])
    write(tmp_path, "other.py", BUGGY)
    assert run_cli("check", "--no-cache", "--fix-only", "--exit-non-zero-on-fix", "other.py",
                   cwd=tmp_path).returncode == 1


def test_exclude_replaces_and_extend_exclude_adds_to_the_excluded_patterns(tmp_path: Path) -> None:
    for name in ("train.py", "legacy/old.py", "build/gen.py"):
        write(tmp_path, name, BUGGY)

    def linted(*args: str) -> set[str]:
        return set(run_cli("check", "--show-files", *args, cwd=tmp_path).stdout.split())

    assert linted() == {"train.py", "legacy/old.py"}  # build/ is a default exclude
    assert linted("--extend-exclude", "legacy") == {"train.py"}
    assert linted("--exclude", "legacy/") == {"train.py", "build/gen.py"}
    # A pattern with a slash counts from the current folder, as in ruff.
    assert linted("--extend-exclude", "legacy/old.py") == {"train.py"}
    assert linted("--exclude", "*.py") == set()
    bad = run_cli("check", "--exclude", "legacy/[z-a]", cwd=tmp_path)
    assert bad.returncode == 2 and "invalid glob" in bad.stderr


def test_isolated_reads_no_configuration_file(tmp_path: Path) -> None:
    write(tmp_path, "train.py", BUGGY)
    write(tmp_path, "pyproject.toml", '[tool.torchdevlint]\nignore = ["TDL001"]\n')
    assert run_cli("check", "--no-cache", "train.py", cwd=tmp_path).returncode == 0
    assert run_cli("check", "--no-cache", "--isolated", "train.py", cwd=tmp_path).returncode == 1
    both = run_cli("check", "--isolated", "--config", "pyproject.toml", "train.py", cwd=tmp_path)
    assert both.returncode == 2 and "--isolated" in both.stderr


@pytest.mark.parametrize(("command", "usage"), [("check", "usage: torchdevlint check"),
                                                ("rule", "usage: torchdevlint rule")])
def test_an_unknown_flag_shows_the_subcommands_usage(tmp_path: Path, command: str, usage: str) -> None:
    result = run_cli(command, "--no-such-flag", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith(usage) and "unrecognized arguments: --no-such-flag" in result.stderr
