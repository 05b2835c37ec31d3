"""Tier 4: `verify` on programs as users have them: in their folders, with arguments, long-running.

Each test drives the real command line in a subprocess on the emulated GPU, as CI does.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, run_cli, write_checkpoint_writer

pytest.importorskip("torch")

# A tagger trained for 500 epochs, with the TDL002 bug inside forward(): run to its end it
# takes many minutes; verify needs its first step.
LONG_TRAINING = '''\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class Tagger(nn.Module):
    def __init__(self, vocab=100, hidden=64, classes=5):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.lstm = nn.LSTM(hidden, hidden, batch_first=True)
        self.out = nn.Linear(hidden, classes)

    def forward(self, tokens):
        h0 = torch.zeros(1, tokens.size(0), self.lstm.hidden_size)
        c0 = torch.zeros(1, tokens.size(0), self.lstm.hidden_size)
        states, _ = self.lstm(self.embed(tokens), (h0, c0))
        return self.out(states[:, -1])


def main():
    torch.manual_seed(0)
    tokens = torch.randint(0, 100, (2048, 40))
    labels = torch.randint(0, 5, (2048,))
    loader = DataLoader(TensorDataset(tokens, labels), batch_size=32, shuffle=True)
    model = Tagger().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(500):
        total = 0.0
        for batch, target in loader:
            batch, target = batch.to(device), target.to(device)
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(batch), target)
            loss.backward()
            optimizer.step()
            total += loss.item()
        print(f"epoch {epoch}: loss {total / len(loader):.4f}")


if __name__ == "__main__":
    main()
'''

# Reads its data by a relative path, needs `--epochs`, and writes beside itself: over an
# existing log, appending to its data, and a checkpoint over an existing one (torch.save
# opens that file in C++).
IN_ITS_FOLDER = '''\
import argparse
import os
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, required=True)
args = parser.parse_args()
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
values = [float(v) for v in open("data/values.csv").read().split(",")]
scale = float(os.environ.get("SCALE", "1"))
x = torch.tensor(values) * scale
x.to(device)
w = torch.ones(3, device=device)
for _ in range(args.epochs):
    y = (x * w).sum()
with open("train.log", "w") as log:
    log.write("overwritten")
with open(os.path.join(os.path.dirname(__file__), "data", "values.csv"), "a") as data:
    data.write(",4")
torch.save(w, "model.pt")
print("RESULT", y.item())
'''


def verify_json(*args: str, cwd: Path = ROOT) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    result = run_cli("verify", "--device", "emulated", "--format", "json", *args, cwd=cwd)
    assert result.stdout.strip(), result.stderr
    return result, json.loads(result.stdout)


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {str(path.relative_to(folder)): (path.read_bytes(), path.stat().st_mtime_ns)
            for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.mark.slow
def test_a_long_training_script_is_proven_in_its_first_steps(tmp_path: Path) -> None:
    program = tmp_path / "train_tagger.py"
    program.write_text(LONG_TRAINING)
    started = time.monotonic()
    result, [report] = verify_json(str(program))
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stdout + result.stderr
    assert report["verdict"] == "fix verified"
    assert report["original"]["error"]["line"] == 18  # the LSTM call that meets h0
    assert "TDL002 (line 16)" in report["note"]
    for run in ("fixed", "reference"):
        assert report[run]["status"] == "ok"
        assert report[run]["stopped"].startswith("every finding's line")
    assert elapsed < 60, f"verify took {elapsed:.0f} s on a 500-epoch script"


@pytest.mark.slow
def test_steps_and_seconds_stop_runs_that_go_to_their_end(tmp_path: Path) -> None:
    program = tmp_path / "train_tagger.py"
    program.write_text(LONG_TRAINING)
    _, [report] = verify_json("--run-to-end", "--steps", "2", str(program))
    assert report["verdict"] == "fix verified"
    assert report["fixed"]["stopped"] == "stopped after 2 optimizer steps, as --steps asks"
    _, [report] = verify_json("--run-to-end", "--seconds", "1", str(program))
    assert report["fixed"]["stopped"] == "stopped after 1 s, as --seconds asks"
    assert report["fixed"]["seconds"] < 30


@pytest.mark.slow
def test_a_program_runs_in_its_folder_with_its_arguments_and_leaves_the_folder_as_it_was(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    (project / "data" / "values.csv").write_text("1,2,3")
    (project / "train.log").write_text("the user's log")
    (project / "model.pt").write_bytes(b"the user's checkpoint")
    (project / "train.py").write_text(IN_ITS_FOLDER)
    before = snapshot(project)
    result, [report] = verify_json("--env", "SCALE=2", str(project / "train.py"), "--", "--epochs", "2",
                                   cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert report["verdict"] == "fix verified"
    assert report["fixed"]["result"] == "12.0"  # (1 + 2 + 3) * SCALE
    assert report["original"]["error"]["line"] == 15  # x * w, where the unmoved x is used
    assert snapshot(project) == before


@pytest.mark.slow
def test_without_its_arguments_a_program_is_not_runnable_here_and_says_which(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "values.csv").write_text("1,2,3")
    (tmp_path / "train.py").write_text(IN_ITS_FOLDER)
    result, [report] = verify_json(str(tmp_path / "train.py"))
    assert result.returncode == 1
    assert report["verdict"] == "not runnable here"
    assert report["note"].startswith("needs command-line arguments (give them after --)")
    assert "--epochs" in report["note"]


PROGRAM_WITH_A_FINDING = '''\
import torch
{setup}
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
x = torch.ones(3)
x.to(device)
print((x * torch.ones(3, device=device)).sum())
'''


@pytest.mark.slow
def test_programs_that_cannot_run_here_get_one_line_saying_what_is_missing(tmp_path: Path) -> None:
    cases = {
        "missing_package.py": ("import tensorflow_datasets_not_here.core", "needs the package "
                               "`tensorflow_datasets_not_here`, which is not installed here"),
        "missing_file.py": ("rows = open('data/train.csv').read()", "needs a file that is not there: "
                            "'data/train.csv'"),
        "relative_import.py": ("from . import config", "it is a module of a package"),
        "broken_package.py": ("import vision_ops.nms", "importing `vision_ops` fails here: RuntimeError: "
                              "operator vision_ops::nms does not exist"),
    }
    for name, (setup, _) in cases.items():
        (tmp_path / name).write_text(PROGRAM_WITH_A_FINDING.format(setup=setup))
    # Installed, but built for another torch: it fails as it is imported.
    (tmp_path / "vision_ops").mkdir()
    (tmp_path / "vision_ops" / "__init__.py").write_text("")
    (tmp_path / "vision_ops" / "nms.py").write_text(
        "raise RuntimeError('operator vision_ops::nms does not exist')\n")
    result, reports = verify_json(str(tmp_path))
    assert result.returncode == 1
    by_name = {Path(report["path"]).name: report for report in reports}
    for name, (_, reason) in cases.items():
        assert by_name[name]["verdict"] == "not runnable here", by_name[name]
        assert by_name[name]["note"].startswith(reason), by_name[name]["note"]
    text = run_cli("verify", "--device", "emulated", str(tmp_path), cwd=ROOT).stdout
    assert "4 not runnable here, 2 no finding (6 programs)" in text


# The finding (a discarded move of `x`) is real, but `x` is only ever used on the CPU; the
# program fails instead on another mixed-device line that no finding points to.
DEVICE_ERROR_ELSEWHERE = '''\
import pickle
import torch

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
x = torch.ones(3)
x.to(device)
print(x.shape)
weights = torch.ones(3, device=device)
restored = pickle.loads(pickle.dumps(torch.ones(3)))
print(weights + restored)
'''


@pytest.mark.slow
def test_a_device_error_raised_away_from_the_findings_is_not_their_bug(tmp_path: Path) -> None:
    program = tmp_path / "elsewhere.py"
    program.write_text(DEVICE_ERROR_ELSEWHERE)
    _, [report] = verify_json(str(program))
    assert [finding["code"] for finding in report["findings"]] == ["TDL001"]
    assert report["original"]["error"]["line"] == 10
    assert report["verdict"] == "bug not reproduced"
    assert "not through a flagged line or a use of its value" in report["note"]


def test_progress_names_each_run_and_where_it_runs(tmp_path: Path) -> None:
    program = tmp_path / "elsewhere.py"
    program.write_text(DEVICE_ERROR_ELSEWHERE)
    code = textwrap.dedent("""
        import sys
        from torchdevlint.verify import report
        from torchdevlint.verify.protocol import RunHost, RunStatus
        from torchdevlint.verify.runner import RunEvent, RunOutcome, RunPhase
        write = report.progress_writer(sys.stdout, every_run=True)
        write(RunEvent("train.py", "original", RunHost.EMULATED, RunPhase.STARTED, 0.0))
        write(RunEvent("train.py", "fixed", RunHost.EMULATED, RunPhase.RUNNING, 30.2))
        done = RunOutcome(RunHost.EMULATED, RunStatus.OK, None, None, 4.0, "", "", "proven")
        write(RunEvent("train.py", "fixed", RunHost.EMULATED, RunPhase.FINISHED, 4.0, done))
        quiet = report.progress_writer(sys.stdout, every_run=False)
        quiet(RunEvent("train.py", "original", RunHost.CPU, RunPhase.STARTED, 0.0))
        quiet(RunEvent("train.py", "reference", RunHost.CPU, RunPhase.RUNNING, 45.0))
    """)
    lines = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           cwd=ROOT).stdout.splitlines()
    assert lines == [
        "verify: train.py: original run on the emulated GPU started",
        "verify: train.py: fixed run on the emulated GPU still running (30 s)",
        "verify: train.py: fixed run stopped early after 4.0 s",
        "verify: train.py: reference run on the CPU still running (45 s)",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("a.py", "b.py", "--", "--epochs", "1"), "arguments after `--` are one program's command line"),
        (("--env", "SCALE", "a.py"), "--env 'SCALE': expected NAME=VALUE"),
        (("--cwd", "no/such/folder", "a.py"), "--cwd no/such/folder: not a folder"),
        (("--steps", "0", "a.py"), "--steps must be at least 1"),
    ],
)
def test_run_options_that_cannot_be_honoured_are_usage_errors(tmp_path: Path, args: tuple[str, ...],
                                                               message: str) -> None:
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text(PROGRAM_WITH_A_FINDING.format(setup=""))
    result = run_cli("verify", "--device", "emulated", *args, cwd=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr


def test_writes_in_a_run_copy_the_file_first_and_never_reach_the_users_folder(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "big").mkdir(parents=True)
    (project / "big" / "inside.txt").write_text("the user's data")
    (project / "append.txt").write_text("old")
    (project / "model.pt").write_bytes(b"the user's checkpoint")
    (project / "top.txt").write_text("the user's text")
    before = snapshot(project)
    # Two entries mirrored one by one: `append.txt`, then `big/` is past the budget and linked whole.
    code = textwrap.dedent(f"""
        import os
        from pathlib import Path
        import torch
        from torchdevlint.verify.workspace import guard_originals, mirror
        work = mirror(Path({str(project)!r}), Path({str(tmp_path / "work")!r}), entries=2)
        guard_originals(str(work), [{str(project)!r}])
        os.chdir(work)
        Path("top.txt").write_text("new")
        with open("append.txt", "a") as log:
            log.write("+")
        torch.save(torch.ones(1), "model.pt")
        os.chmod("top.txt", 0o600)
        for change in (lambda: open("big/inside.txt", "w"), lambda: os.remove("big/inside.txt")):
            try:
                change()
            except PermissionError as refused:
                print("refused", Path(refused.filename).relative_to({str(project)!r}))
        print(Path("top.txt").read_text(), Path("append.txt").read_text(), torch.load("model.pt").tolist())
        print(sorted(path.name for path in work.iterdir() if not path.is_symlink()))
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "refused big/inside.txt",
        "refused big/inside.txt",
        "new old+ [1.0]",
        "['append.txt', 'model.pt', 'top.txt']",
    ]
    assert snapshot(project) == before


# A released checkpoint loaded without map_location (a CPU-only host proves it) and a
# discarded move (a GPU proves it): one program, two machines.
TWO_MACHINES = '''\
import torch
import torch.nn as nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Linear(4, 2)
model.load_state_dict(torch.load("weights.pt"))
model.to(device)
x = torch.randn(3, 4)
x.to(device)
print("RESULT", round(model(x).sum().item(), 4))
'''


@pytest.mark.slow
def test_findings_that_need_different_machines_are_each_proven_on_their_own(tmp_path: Path) -> None:
    write_checkpoint_writer(tmp_path)
    import torch

    torch.save(torch.nn.Linear(4, 2).state_dict(), tmp_path / "weights.pt")
    program = tmp_path / "two_machines.py"
    program.write_text(TWO_MACHINES)
    result, [report] = verify_json(str(program))
    assert result.returncode == 0, result.stdout + result.stderr
    assert report["verdict"] == "fix verified"
    assert (report["host"], report["original"]["error"]["line"]) == ("cpu-loads-gpu-checkpoint", 6)
    gpu, agreement = report["more_hosts"]
    assert (gpu["host"], gpu["gpus"], gpu["codes"], gpu["verdict"]) == ("gpu", 1, ["TDL001"], "fix verified")
    assert gpu["original"]["error"]["line"] == 10
    assert gpu["comparison"]["status"] == "match"
    # The map_location fix runs on a GPU too, where the checkpoint is one a GPU box wrote.
    assert (agreement["host"], agreement["codes"], agreement["agreement"]) == ("gpu", ["TDL003"], True)
    assert "; also on 1 GPU for TDL001: fix verified; on 1 GPU, where the fix of TDL003 changes" in report["note"]
    text = run_cli("verify", "--device", "emulated", str(program), cwd=ROOT).stdout
    assert "  on 1 GPU, for TDL001: fix verified\n" in text


# Released statistics loaded without map_location, then used with data on the GPU. The fix
# maps them to the CPU, which the CPU-only host accepts and a GPU run then trips over; the
# same load beside a `device` maps them there, which both machines accept.
STATISTICS_WITHOUT_A_DEVICE = '''\
import torch

stats = torch.load("stats.pt")
x = torch.randn(3).cuda() if torch.cuda.is_available() else torch.randn(3)
print("RESULT", round(((x - stats["mean"]) / stats["std"]).sum().item(), 3))
'''
STATISTICS_BESIDE_A_DEVICE = '''\
import torch

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
stats = torch.load("stats.pt")
x = torch.randn(3, device=device)
print("RESULT", round(((x - stats["mean"]) / stats["std"]).sum().item(), 3))
'''


@pytest.mark.slow
def test_a_fix_is_checked_on_the_machines_it_changes_the_program_on(tmp_path: Path) -> None:
    write_checkpoint_writer(tmp_path)
    import torch

    torch.save({"mean": torch.zeros(3), "std": torch.ones(3)}, tmp_path / "stats.pt")
    (tmp_path / "to_cpu.py").write_text(STATISTICS_WITHOUT_A_DEVICE)
    (tmp_path / "to_device.py").write_text(STATISTICS_BESIDE_A_DEVICE)
    _, reports = verify_json(str(tmp_path / "to_cpu.py"), str(tmp_path / "to_device.py"))
    to_cpu, to_device = reports
    for report in reports:
        assert report["host"] == "cpu-loads-gpu-checkpoint"
        assert report["original"]["error"]["line"] in (3, 4)
    # Mapped to the CPU, the statistics would meet the GPU's `x` on a GPU box: TDL003 offers no
    # such fix (nothing shows where the program uses what it loaded), so there is none to run.
    assert to_cpu["verdict"] == "bug reproduced"
    assert to_cpu["note"].endswith("no fix is offered for it")
    # Mapped to the program's own device, the fix runs on both machines and agrees.
    assert to_device["fixed"]["status"] == "ok"
    [gpu] = to_device["more_hosts"]
    assert (gpu["host"], gpu["codes"], gpu["agreement"]) == ("gpu", ["TDL003"], True)
    assert gpu["original"]["status"] == "ok"  # on a GPU box its own checkpoint loads
    assert to_device["verdict"] == "fix verified"
    assert to_device["note"].endswith("the fixed program runs and agrees")


# The program saves its checkpoint and reads it back under another spelling of its path:
# TDL003 does not pair the two, but the machine that saved the file is the one loading it.
OWN_CHECKPOINT = '''\
import torch
import torch.nn as nn

device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Linear(4, 2).to(device)
torch.save(model.state_dict(), "./weights.pt")
model.load_state_dict(torch.load("weights.pt"))
print("RESULT", sorted(model.state_dict()))
'''


@pytest.mark.slow
def test_a_checkpoint_the_program_wrote_itself_proves_nothing(tmp_path: Path) -> None:
    program = tmp_path / "own_checkpoint.py"
    program.write_text(OWN_CHECKPOINT)
    _, [report] = verify_json(str(program))
    assert [finding["code"] for finding in report["findings"]] == ["TDL003"]
    assert report["host"] == "cpu-loads-gpu-checkpoint"
    assert report["verdict"] == "bug not reproduced", report
    assert report["original"]["error"] is None


def test_a_folder_of_more_files_than_the_budget_is_linked_whole(tmp_path: Path) -> None:
    from torchdevlint.verify.workspace import mirror

    project = tmp_path / "project"
    (project / "images").mkdir(parents=True)
    for index in range(30):
        (project / "images" / f"{index}.png").write_bytes(b"")
    (project / "train.py").write_text("")
    work = mirror(project, tmp_path / "work", entries=10)
    assert (work / "images").is_symlink() and (work / "train.py").is_symlink()
    assert len(list((work / "images").iterdir())) == 30


# A module of helpers run as a script: its flagged function is defined, never called.
NEVER_CALLED = '''\
import torch


def restore(path):
    return torch.load(path)


print("helpers loaded")
'''


@pytest.mark.slow
def test_a_finding_in_code_the_program_never_runs_is_said_to_be_unreached(tmp_path: Path) -> None:
    write_checkpoint_writer(tmp_path)
    program = tmp_path / "helpers.py"
    program.write_text(NEVER_CALLED)
    _, [report] = verify_json(str(program))
    assert [finding["code"] for finding in report["findings"]] == ["TDL003"]
    assert report["verdict"] == "bug not reproduced"
    assert report["original"]["unreached"] == [5]
    assert "never runs the flagged line 5: nothing it runs calls the code it is in" in report["note"]
