"""Tier 4: runtime verification. Each program runs before and after its fixes, in child processes.

The command-line tests run `torchdevlint verify` in a subprocess on the emulated GPU, as CI
does; `cuda`-marked tests run on a real GPU and are skipped without one. The emulation's own
tests run in this process and import torch.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
import textwrap
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from conftest import FIXTURES, ROOT, computed_once, cuda_available, run_cli

from torchdevlint.diagnostics import Diagnostic, Location
from torchdevlint.verify.directive import (
    DirectiveError,
    ProgramHost,
    VerifySpec,
    read_directive,
    scenario_for,
    scenarios_for,
    with_host,
)
from torchdevlint.verify.expected_errors import not_emulated
from torchdevlint.verify.protocol import ChildReport, ErrorInfo, RunHost, RunStatus, last_result
from torchdevlint.verify.runner import (
    Comparison,
    ComparisonStatus,
    RunOutcome,
    Verdict,
    compare_results,
    judge,
    results_agree,
)
from torchdevlint.verify.sites import FindingSite, finding_sites, line_map

# A program a user might write: a GRU tagger over packed sequences, with the TDL002 bug (the
# position mask built in forward() on the CPU), logging `loss.item()`, pinned host memory,
# CPU lengths for packing, and boolean-mask indexing: what the emulation must let through.
FRESH_TAGGER = '''\
"""Tag tokens of synthetic sentences with a small GRU tagger."""
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from torch.utils.data import DataLoader, TensorDataset


class Tagger(nn.Module):
    def __init__(self, vocab_size, dim, num_tags):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.rnn = nn.GRU(dim, dim, batch_first=True)
        self.out = nn.Linear(dim, num_tags)

    def forward(self, tokens, lengths):
        packed = pack_padded_sequence(self.embed(tokens), lengths.cpu(), batch_first=True, enforce_sorted=False)
        hidden, _ = self.rnn(packed)
        hidden, _ = pad_packed_sequence(hidden, batch_first=True, total_length=tokens.size(1))
        positions = torch.arange(tokens.size(1))
        mask = positions[None, :] < lengths[:, None]
        return self.out(hidden), mask


def make_data(n, max_len, vocab_size, num_tags):
    lengths = torch.randint(2, max_len + 1, (n,))
    tokens = torch.randint(1, vocab_size, (n, max_len))
    for i, length in enumerate(lengths.tolist()):
        tokens[i, length:] = 0
    return tokens, lengths, tokens % num_tags


def main():
    torch.manual_seed(1)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokens, lengths, tags = make_data(64, 9, 30, 4)
    loader = DataLoader(TensorDataset(tokens, lengths, tags), batch_size=16, shuffle=True,
                        pin_memory=torch.cuda.is_available())
    model = Tagger(30, 16, 4).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    batches = 0
    for epoch in range(2):
        total = 0.0
        for batch_tokens, batch_lengths, batch_tags in loader:
            batch_tokens = batch_tokens.to(device, non_blocking=True)
            batch_lengths = batch_lengths.to(device)
            batch_tags = batch_tags.to(device)
            logits, mask = model(batch_tokens, batch_lengths)
            loss = nn.functional.cross_entropy(logits[mask], batch_tags[mask])
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            total += loss.item()
            batches += 1
        print(f"epoch {epoch}: loss {total / batches:.3f}")
    with torch.no_grad():
        logits, mask = model(tokens[:8].to(device), lengths[:8].to(device))
    print(f"RESULT batches={batches} logits_shape={tuple(logits.shape)}")


if __name__ == "__main__":
    main()
'''

# A discarded `x.to(device)` (TDL001) whose tensor meets a GPU operand in an op that checks
# devices in its kernel, not in PyTorch's C++ front: the emulated GPU must fail as CUDA does.
# (setup, the tensor left on the CPU, its use)
HOLE_PROGRAM = '''\
import torch
import torch.nn as nn
import torch.nn.functional as F


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    {setup}
    x = {make}
    x.to(device)
    out = {use}
    print(f"RESULT shape={{tuple(out.shape)}}")


if __name__ == "__main__":
    main()
'''
HOLE_PROGRAMS = {
    "embedding_module": ("emb = nn.Embedding(10, 4).to(device)", "torch.randint(0, 10, (2, 3))", "emb(x)"),
    "conv2d_images": ("conv = nn.Conv2d(1, 2, 3).to(device)", "torch.randn(1, 1, 8, 8)", "conv(x)"),
    "matmul": ("w = torch.randn(4, 2, device=device)", "torch.randn(3, 4)", "x @ w"),
    "gpu_indices_into_cpu_tensor": ("index = torch.tensor([1, 2], device=device)", "torch.randn(10, 4)", "x[index]"),
    "where": ("ones = torch.ones(3, device=device)", "torch.randn(3)", "torch.where(x > 0, ones, -ones)"),
}


class Corpus(NamedTuple):
    result: subprocess.CompletedProcess[str]
    # Reports by file name.
    reports: dict[str, dict[str, Any]]
    # When the run began: a fixture written since (by a concurrent edit) was not part of it.
    started: float


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    """One `verify` run over the fixtures, the hole programs and the fresh program (one per
    test session, whatever the number of xdist workers)."""
    run = computed_once(tmp_path_factory, "verify-corpus", lambda: _verify_the_corpus(tmp_path_factory))
    result = subprocess.CompletedProcess(run["args"], run["returncode"], run["stdout"], run["stderr"])
    assert result.stdout.strip(), result.stderr
    reports = {Path(item["path"]).name: item for item in json.loads(result.stdout)}
    return Corpus(result, reports, run["started"])


def _verify_the_corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("programs")
    holes = folder / "holes"
    holes.mkdir()
    for name, (setup, make, use) in HOLE_PROGRAMS.items():
        (holes / f"{name}.py").write_text(HOLE_PROGRAM.format(setup=setup, make=make, use=use))
    (folder / "tagger.py").write_text(FRESH_TAGGER)
    # Fixtures whose bug needs another machine, without the directive that names it.
    derived = folder / "derived"
    derived.mkdir()
    for name in DERIVED_HOSTS:
        text = (FIXTURES / name).read_text(encoding="utf-8")
        (derived / f"derived_{name}").write_text(re.sub(r"(?m)^# verify: host=.*\n", "", text), encoding="utf-8")
        shipped = (FIXTURES / name).with_suffix(".pt")  # the checkpoint a GPU box left beside it
        if shipped.exists():
            shutil.copyfile(shipped, (derived / f"derived_{name}").with_suffix(".pt"))
    started = time.time()
    result = run_cli("verify", "--device", "emulated", "--format", "json", "--jobs", "2",
                     "fixtures/", str(holes), str(folder / "tagger.py"), str(derived), cwd=ROOT)
    return {"args": result.args, "returncode": result.returncode, "stdout": result.stdout, "stderr": result.stderr,
            "started": started}


# -- the fixtures --------------------------------------------------------------------------------

CUDA_CHECKPOINT_ERROR = "Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False"
MIXED_DEVICES = "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"
# Fixture -> the error CUDA raises for its bug, in CUDA's words.
FIXTURE_ERRORS = {
    "tdl001_chained_move_in_eval.py": MIXED_DEVICES,
    "tdl001_discarded_move_train_loop.py": MIXED_DEVICES,
    "tdl002_positional_arange_mask.py": MIXED_DEVICES,
    "tdl002_rnn_hidden_state.py": "Input and hidden tensors are not at the same device, found input tensor at cuda:0",
    "tdl003_gpu_checkpoint_on_cpu_host.py": CUDA_CHECKPOINT_ERROR,
    "tdl003_resume_training_checkpoint.py": CUDA_CHECKPOINT_ERROR,
    "tdl004_dataparallel_save_load.py": 'Unexpected key(s) in state_dict: "module.features.0.weight"',
    "tdl004_maybe_wrapped_checkpoint_dict.py": 'Unexpected key(s) in state_dict: "module.encoder.0.weight"',
}


def proven_findings_in(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["code"].startswith("TDL0") and not_emulated(f["code"]) is None]


@pytest.mark.slow
def test_every_fixture_with_findings_is_fix_verified_and_the_exit_code_is_0(corpus: Corpus) -> None:
    result, reports = corpus.result, corpus.reports
    fixtures = [report for report in reports.values() if report["path"].startswith("fixtures/")]
    shipped = {path.name for path in FIXTURES.glob("*.py") if path.stat().st_mtime < corpus.started}
    assert shipped <= {Path(report["path"]).name for report in fixtures}
    unrunnable = 0
    for report in fixtures:
        assert report["device"] == "emulated"
        # Only correctness findings fail at run time; slow or dated code is not run, and a bug
        # that needs a machine verify does not emulate is said to be not runnable, with what it needs.
        expected = "fix verified" if proven_findings_in(report) else "no finding"
        if expected == "no finding" and any(not_emulated(f["code"]) is not None for f in report["findings"]):
            expected = "not runnable here"
            unrunnable += 1
            assert "which verify does not emulate" in report["note"], report
        assert report["verdict"] == expected, report
    # Exit 0 when every program is verified or has nothing to verify.
    assert result.returncode == (1 if unrunnable else 0), result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FIXTURE_ERRORS))
def test_fixture_original_fails_with_cudas_error(corpus: Corpus, name: str) -> None:
    report = corpus.reports[name]
    assert report["verdict"] == "fix verified"
    assert report["original"]["status"] == "error"
    assert report["original"]["error"]["type"] == "RuntimeError"
    assert FIXTURE_ERRORS[name] in report["original"]["error"]["message"]
    assert report["fixed"]["status"] == "ok" and report["fixed"]["error"] is None


@pytest.mark.slow
def test_non_blocking_copy_read_early_fails_on_the_emulated_gpu_and_its_fix_runs(corpus: Corpus) -> None:
    report = corpus.reports["tdl013_anomaly_scores_read_before_sync.py"]
    assert [(f["code"], f["line"]) for f in proven_findings_in(report)] == [("TDL013", 55), ("TDL013", 68)]
    assert report["verdict"] == "fix verified", report
    # CUDA raises nothing for this race: the emulation's model of it does, and says so.
    error = report["original"]["error"]
    assert (error["type"], error["line"]) == ("RuntimeError", 56)  # `float(epoch_loss)`, the first early read
    assert error["message"].startswith(
        "emulated GPU: a non_blocking copy to the CPU was read before synchronising; its data may not have arrived"
    )
    assert "torchdevlint's emulation" in error["message"]
    # The copies the rule leaves alone (stashed, counted with len(), read after
    # torch.cuda.synchronize()) run in the fixed program without tripping the check.
    assert report["fixed"]["status"] == "ok"
    assert report["comparison"]["status"] == "match"
    assert report["fixed"]["result"] == report["reference"]["result"] == "epochs=3 scored=512 codes_shape=(512, 4)"


@pytest.mark.slow
def test_future_rule_fixture_is_no_finding_until_its_rule_exists(corpus: Corpus) -> None:
    from torchdevlint.registry import rule_by_code

    report = corpus.reports["tdl009_regression_targets_not_moved.py"]
    if rule_by_code("TDL009") is None:
        assert report["verdict"] == "no finding" and report["original"] is None
    else:
        assert report["verdict"] == "fix verified"


@pytest.mark.slow
def test_results_are_compared_with_the_original_on_the_cpu(corpus: Corpus) -> None:
    reports = corpus.reports
    rnn = reports["tdl002_rnn_hidden_state.py"]
    assert rnn["comparison"]["status"] == "match"
    assert rnn["fixed"]["result"] == rnn["reference"]["result"] == "steps=16 logits_shape=(5, 3)"
    # The DataParallel program fails on the CPU too: nothing to compare with, and the report says so.
    dataparallel = reports["tdl004_dataparallel_save_load.py"]
    assert dataparallel["comparison"]["status"] == "skipped"
    assert "fails on the CPU too" in dataparallel["comparison"]["reason"]


# Fixture -> (host, gpus) its findings call for.
DERIVED_HOSTS = {
    "tdl003_gpu_checkpoint_on_cpu_host.py": ("cpu-loads-gpu-checkpoint", 1),
    "tdl007_cpu_fallback_with_stray_cuda.py": ("cpu", 1),
    "tdl012_dataparallel_on_second_gpu.py": ("gpu", 4),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(DERIVED_HOSTS))
def test_without_a_directive_the_host_comes_from_the_findings(corpus: Corpus, name: str) -> None:
    report = corpus.reports[f"derived_{name}"]
    assert (report["host"], report["gpus"], report["host_from"]) == (*DERIVED_HOSTS[name], "findings")
    assert report["verdict"] == "fix verified", report
    assert "host chosen from the findings" in report["note"]


@pytest.mark.slow
def test_directives_choose_the_host(corpus: Corpus) -> None:
    reports = corpus.reports
    checkpoint = reports["tdl003_gpu_checkpoint_on_cpu_host.py"]
    assert checkpoint["host"] == "cpu-loads-gpu-checkpoint"
    assert checkpoint["original"]["host"] == "cpu-loads-gpu-checkpoint"
    # Two emulated GPUs take the program's DataParallel branch, which one GPU would not.
    wrapped = reports["tdl004_maybe_wrapped_checkpoint_dict.py"]
    assert (wrapped["host"], wrapped["gpus"]) == ("gpu", 2)
    assert wrapped["verdict"] == "fix verified"


@pytest.mark.slow
def test_json_report_shape(corpus: Corpus) -> None:
    report = corpus.reports["tdl001_discarded_move_train_loop.py"]
    assert set(report) >= {"path", "device", "findings", "original", "fixed", "verdict"}
    assert report["path"] == "fixtures/tdl001_discarded_move_train_loop.py"
    assert {("TDL001", 35), ("TDL001", 64)} <= {(f["code"], f["line"]) for f in report["findings"]}
    assert set(report["findings"][0]) >= {"code", "slug", "path", "line", "column", "message", "fix"}
    for run in ("original", "fixed"):
        assert report[run]["status"] in {"ok", "error", "timeout"}
    assert set(report["original"]["error"]) >= {"type", "message"}
    assert report["verdict"] in {v.value for v in Verdict}


# -- a program nobody wrote for the fixtures ---------------------------------------------------


@pytest.mark.slow
def test_fresh_program_with_a_device_bug_is_verified(corpus: Corpus, tmp_path: Path) -> None:
    report = corpus.reports["tagger.py"]
    assert [f["code"] for f in proven_findings_in(report)] == ["TDL002"]
    assert report["verdict"] == "fix verified", report
    assert MIXED_DEVICES in report["original"]["error"]["message"]
    assert report["original"]["error"]["line"] == 20
    assert report["comparison"]["status"] == "match"
    assert report["fixed"]["result"] == "batches=8 logits_shape=(8, 9, 4)"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(HOLE_PROGRAMS))
def test_discarded_move_into_an_op_that_checks_devices_in_its_kernel_fails(corpus: Corpus, name: str) -> None:
    report = corpus.reports[f"{name}.py"]
    assert report["verdict"] == "fix verified", report
    message = report["original"]["error"]["message"]
    assert "cuda:0" in message or "same device as the indexed tensor" in message, message


# -- verdicts, text output, and torch staying out of the parent --------------------------------

VERDICT_PROGRAMS = {
    # The discarded move never meets a GPU tensor: nothing fails, on any device.
    "not_reproduced.py": """\
        import torch

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        x = torch.zeros(3)
        x.to(device)
        print(f"RESULT shape={tuple(x.shape)}")
        """,
    # The fix is right, but a second device bug that no rule sees is left in the program.
    "fix_failed.py": """\
        import torch
        import torch.nn as nn


        def make_offset(size):
            return torch.ones(size)


        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model = nn.Linear(4, 3).to(device)
        inputs = torch.randn(2, 4)
        inputs.to(device)
        print(model(inputs) + make_offset(3))
        """,
    "clean.py": """\
        import torch

        x = torch.zeros(3)
        print(f"RESULT {x.shape}")
        """,
    "sleeps.py": """\
        import time

        import torch

        time.sleep(60)
        x = torch.zeros(3)
        x.cuda()
        """,
    "verified.py": HOLE_PROGRAM.format(setup=HOLE_PROGRAMS["embedding_module"][0],
                                       make=HOLE_PROGRAMS["embedding_module"][1], use="emb(x)"),
}


@pytest.mark.slow
def test_verdicts_text_output_and_no_torch_in_the_parent(tmp_path: Path) -> None:
    for name, text in VERDICT_PROGRAMS.items():
        (tmp_path / name).write_text(textwrap.dedent(text) if name != "verified.py" else text)
    before = {path.name: path.read_bytes() for path in tmp_path.iterdir()}
    # The real command line's entry point, in a child that checks torch never entered it.
    code = (
        "import sys\n"
        "from torchdevlint.cli import main\n"
        "status = main(['verify', '--device', 'emulated', '--timeout', '2', '--jobs', '2', '.'])\n"
        "sys.stdout.flush()\n"
        "assert 'torch' not in sys.modules, 'the verify parent imported torch'\n"
        "sys.exit(status)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    assert "Verifying on the emulated GPU (--device emulated)\n" in out
    assert "clean.py: no finding" in out
    assert "fix_failed.py: fix failed" in out
    assert "not_reproduced.py: bug not reproduced" in out
    assert "sleeps.py: bug not reproduced" in out and "timed out: Timeout: still running after 2 s" in out
    assert "verified.py: fix verified" in out
    assert "failed at line 11: RuntimeError: Expected all tensors to be on the same device" in out
    assert "1 fix verified, 2 bug not reproduced, 1 fix failed, 1 no finding (5 programs)" in out
    # verify never writes: not the fixes, not bytecode, not the programs' own files.
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == before


def test_check_never_imports_torch(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import torch\nx = torch.zeros(3)\nx.cuda()\ny = x + torch.ones(3, device=\"cuda\")\n")
    code = (
        "import sys\n"
        "from torchdevlint.cli import main\n"
        "status = main(['check', 'train.py'])\n"
        "assert 'torch' not in sys.modules, 'check imported torch'\n"
        "sys.exit(status)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr


@pytest.mark.slow
def test_verify_leaves_no_file_or_pipe_open() -> None:
    result = subprocess.run(
        # `--allow-writes` changes nothing where Landlock isolates the runs, and lets them run where it cannot.
        [sys.executable, "-X", "dev", "-W", "always::ResourceWarning", "-m", "torchdevlint", "verify", "--device",
         "emulated", "--allow-writes", str(FIXTURES / "tdl001_discarded_move_train_loop.py")],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ResourceWarning" not in result.stderr


@pytest.mark.slow
def test_each_program_is_linted_with_its_own_configuration(tmp_path: Path) -> None:
    bug = "import torch\nx = torch.zeros(3)\nx.cuda()\ny = x + torch.ones(3, device=\"cuda\")\n"
    (tmp_path / "quiet").mkdir()
    (tmp_path / "quiet" / "pyproject.toml").write_text('[tool.torchdevlint]\nignore = ["TDL001"]\n')
    (tmp_path / "quiet" / "train.py").write_text(bug)
    (tmp_path / "train.py").write_text(bug)
    result = run_cli("verify", "--device", "emulated", "quiet/train.py", "train.py", cwd=tmp_path)
    assert "quiet/train.py: no finding" in result.stdout
    assert "\ntrain.py: fix verified" in result.stdout
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_verify_with_no_path_verifies_the_current_folder_as_check_does(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "train.py").write_text(
        "import torch\nx = torch.zeros(3)\nx.cuda()\ny = x + torch.ones(3, device=\"cuda\")\n")
    (tmp_path / "clean.py").write_text("import torch\nx = torch.zeros(3)\n")
    result = run_cli("verify", "--device", "emulated", cwd=tmp_path)
    assert "scripts/train.py: fix verified" in result.stdout
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_a_value_used_on_a_continuation_line_is_attributed_to_its_finding(tmp_path: Path) -> None:
    # Black's style: the moved name sits on its own line, the traceback names the call's first.
    (tmp_path / "train.py").write_text(
        "import torch\n"
        "weights = torch.randn(3, 2, device=\"cuda\")\n"
        "inputs = torch.randn(4, 3)\n"
        "inputs.to(\"cuda\")\n"
        "scores = torch.matmul(\n"
        "    inputs,\n"
        "    weights,\n"
        ")\n"
        "print(\"RESULT\", tuple(scores.shape))\n")
    result = run_cli("verify", "--device", "emulated", "train.py", cwd=tmp_path)
    assert "train.py: fix verified" in result.stdout, result.stdout + result.stderr


_WRITES_EVERYWHERE = textwrap.dedent("""\
    import ctypes
    import os
    import subprocess
    import sys
    import tempfile

    import torch
    import torch.multiprocessing as mp

    HERE = os.path.dirname(os.path.abspath(__file__))


    def rank_appends(rank, path):
        with open(path, "a") as handle:
            handle.write("from a spawned rank")


    def attempt(action):
        try:
            action()
        except Exception as error:
            print("refused:", error)


    if __name__ == "__main__":  # spawned ranks import this file
        attempt(lambda: subprocess.run(["sh", "-c", "echo shell >> data.txt"], check=True))
        def c_appends(path):
            libc = ctypes.CDLL(None)
            libc.fopen.restype = ctypes.c_void_p
            handle = libc.fopen(path.encode(), b"a")
            if not handle:
                raise OSError("fopen failed")
            libc.fputs(b"from C", ctypes.c_void_p(handle))
            libc.fclose(ctypes.c_void_p(handle))


        attempt(lambda: c_appends(os.path.join(HERE, "data.txt")))
        attempt(lambda: os.remove(sys.argv[1]))
        attempt(lambda: mp.spawn(rank_appends, args=(os.path.join(HERE, "data.txt"),), nprocs=1))
        # Where a program may write: its own Python writes land in its mirror, temporary files in scratch.
        with open("log.txt", "w") as log:
            log.write("ok")
        subprocess.run(["sh", "-c", "echo tmp > " + os.path.join(tempfile.gettempdir(), "t.txt")], check=True)
        x = torch.zeros(3)
        x.cuda()
        y = x + torch.ones(3, device="cuda")
        print("RESULT", y.sum().item())
""")


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Landlock is Linux's")
def test_no_process_of_a_verified_program_changes_a_byte_outside_the_scratch(tmp_path: Path) -> None:
    from torchdevlint.verify.isolation import landlock_abi

    if landlock_abi() == 0:
        pytest.skip("this kernel has no Landlock")
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "train.py").write_text(_WRITES_EVERYWHERE)
    (project / "data.txt").write_text("the user's data\n")
    (elsewhere / "keep.txt").write_text("the user's other file\n")
    before = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
    # A subprocess, a C-level write and a spawned rank into the program's folder, and a
    # removal outside it: every run, the original's and the fixed program's.
    result = run_cli("verify", "--device", "emulated", "train.py", "--", str(elsewhere / "keep.txt"), cwd=project)
    assert "train.py: fix verified" in result.stdout, result.stdout + result.stderr
    after = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
    assert after == before


def test_without_isolation_verify_says_so_and_needs_allow_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from torchdevlint import cli
    from torchdevlint.verify import isolation

    (tmp_path / "train.py").write_text("import torch\nx = torch.zeros(3)\nx.cuda()\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(isolation, "landlock_abi", lambda: 0)
    assert cli.main(["verify", "--device", "emulated", "train.py"]) == 2
    assert "Landlock is not available. Pass --allow-writes" in capsys.readouterr().err


def test_bad_directive_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("# verify: host=tpu\nimport torch\nx = torch.zeros(3)\nx.cuda()\ny = x + torch.ones(3, device=\"cuda\")\n")
    result = run_cli("verify", "--device", "emulated", "train.py", cwd=tmp_path)
    assert result.returncode == 2
    assert "train.py: error: bad `# verify:` directive: line 1: unknown host 'tpu'" in result.stdout


@pytest.mark.skipif(cuda_available(), reason="this machine has a CUDA GPU")
def test_device_cuda_without_a_gpu_fails_clearly() -> None:
    result = run_cli("verify", "--device", "cuda", "fixtures/tdl001_discarded_move_train_loop.py", cwd=ROOT)
    assert result.returncode == 2
    assert "--device cuda: no CUDA GPU is available" in result.stderr
    assert result.stdout == ""


@pytest.mark.cuda
def test_fixtures_are_verified_on_a_real_gpu() -> None:
    result = run_cli("verify", "--device", "cuda", "--format", "json", "fixtures/", cwd=ROOT)
    reports = json.loads(result.stdout)
    unrunnable = 0
    for report in reports:
        if proven_findings_in(report):
            assert report["verdict"] == "fix verified", report
        elif any(not_emulated(f["code"]) is not None for f in report["findings"]):
            assert report["verdict"] == "not runnable here", report  # TDL030: several real machines
            unrunnable += 1
        # One GPU stands for a GPU host; the machines it cannot be are emulated beside it.
        if report["host"] == "gpu" and report["gpus"] == 1:
            assert report["device"] == "cuda", report
    assert result.returncode == (1 if unrunnable else 0), result.stdout + result.stderr


# -- the `# verify:` directive ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "spec"),
    [
        ("import torch\n", VerifySpec()),
        ("# verify: the original fails on the GPU\nimport torch\n", VerifySpec()),
        ("#!/usr/bin/env python\n# verify: host=gpu gpus=2\nimport torch\n", VerifySpec(ProgramHost.GPU, 2, 2, origin="directive")),
        ("# verify: host=cpu-loads-gpu-checkpoint\n", VerifySpec(ProgramHost.CPU_LOADS_GPU_CHECKPOINT, 1, 1, origin="directive")),
        ("# A program\n\n# verify: host=cpu\n", VerifySpec(ProgramHost.CPU, 1, 3, origin="directive")),
        # Only the leading comment block counts.
        ("import torch\n# verify: host=gpu gpus=2\n", VerifySpec()),
        ("# verify: host=mps\n", VerifySpec(ProgramHost.MPS, 1, 1, origin="directive")),
        ("# verify: host=cpu argv=--cuda=False,--epochs,2 fixed-argv=--no-cuda\n",
         VerifySpec(ProgramHost.CPU, 1, 1, ("--cuda=False", "--epochs", "2"), ("--no-cuda",), origin="directive")),
        # Ranks as torchrun starts them: 2 per machine, on 2 machines.
        ("# verify: host=gpu gpus=2 processes=2 nodes=2\n",
         VerifySpec(ProgramHost.GPU, 2, 1, processes=2, nodes=2, origin="directive")),
    ],
)
def test_read_directive(header: str, spec: VerifySpec) -> None:
    assert read_directive(header) == spec


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("# verify: host=tpu\n", "unknown host 'tpu'"),
        ("# verify: gpus=0\n", "gpus=0 is not a number from 1 to 16"),
        ("# verify: cores=2\n", "unknown setting `cores`"),
        ("# verify: host=cpu-loads-gpu-checkpoint gpus=2\n", "gpus= does not apply"),
        ("# verify: gpus=2\n# verify: gpus=2\n", "a second `# verify:` directive"),
        ("# verify: host=gpu  # two GPUs\n", "holds only key=value settings"),
        ("# verify: processes=0\n", "processes=0 is not a number from 1 to 16"),
        ("# verify: nodes=9\n", "nodes=9 is not a number from 1 to 4"),
    ],
)
def test_bad_directives(header: str, message: str) -> None:
    with pytest.raises(DirectiveError, match=re.escape(message)):
        read_directive(header)


@pytest.mark.parametrize(
    ("codes", "host", "gpus", "unproven"),
    [
        ([], ProgramHost.GPU, 1, ()),
        (["TDL001", "TDL002"], ProgramHost.GPU, 1, ()),
        (["TDL003"], ProgramHost.CPU_LOADS_GPU_CHECKPOINT, 1, ()),
        (["TDL007", "TDL014"], ProgramHost.CPU, 1, ()),
        (["TDL016"], ProgramHost.MPS, 1, ()),
        (["TDL001", "TDL004"], ProgramHost.GPU, 2, ()),
        (["TDL012", "TDL001"], ProgramHost.GPU, 4, ()),
        # The machine that proves the most findings; the first finding breaks a tie.
        (["TDL003", "TDL001", "TDL002"], ProgramHost.GPU, 1, ("TDL003",)),
        (["TDL003", "TDL001"], ProgramHost.CPU_LOADS_GPU_CHECKPOINT, 1, ("TDL001",)),
    ],
)
def test_the_host_follows_from_the_findings(
    codes: list[str], host: ProgramHost, gpus: int, unproven: tuple[str, ...]
) -> None:
    spec, left = scenario_for(VerifySpec(), codes)
    assert (spec.host, spec.gpus, left) == (host, gpus, unproven)
    assert spec.origin == ("findings" if codes else "default")


def test_distributed_findings_run_as_ranks_of_torchrun() -> None:
    spec, _ = scenario_for(VerifySpec(), ["TDL023", "TDL001"])
    assert (spec.gpus, spec.processes, spec.nodes) == (2, 2, 1)  # two GPUs, a rank on each
    spec, _ = scenario_for(VerifySpec(), ["TDL028"])
    assert (spec.gpus, spec.processes, spec.nodes) == (2, 2, 2)  # a second machine's ranks


def test_every_machine_the_findings_need_runs_the_most_proving_first() -> None:
    machines = [(spec.host, spec.gpus, codes) for spec, codes in
                scenarios_for(VerifySpec(), ["TDL003", "TDL001", "TDL007", "TDL002", "TDL004"])]
    assert machines == [
        (ProgramHost.GPU, 2, ("TDL001", "TDL002", "TDL004")),
        (ProgramHost.CPU_LOADS_GPU_CHECKPOINT, 1, ("TDL003",)),
        (ProgramHost.CPU, 1, ("TDL007",)),
    ]
    directive = read_directive("# verify: host=cpu\n")
    assert scenarios_for(directive, ["TDL001", "TDL007"]) == [(directive, ("TDL001", "TDL007"))]


def test_directive_and_command_line_override_the_findings() -> None:
    directive = read_directive("# verify: host=gpu gpus=2\n")
    assert scenario_for(directive, ["TDL003"]) == (directive, ())
    overridden = with_host(directive, ProgramHost.CPU, None)
    assert (overridden.host, overridden.gpus, overridden.origin) == (ProgramHost.CPU, 1, "command line")
    assert scenario_for(overridden, ["TDL001"])[0] is overridden
    assert with_host(VerifySpec(), None, 3).gpus == 3
    with pytest.raises(DirectiveError, match="--gpus does not apply to --host cpu"):
        with_host(VerifySpec(), ProgramHost.CPU, 2)


# -- results and verdicts -------------------------------------------------------------------------


def outcome(status: RunStatus = RunStatus.OK, result: str | None = None, error: str | None = None,
            host: RunHost = RunHost.EMULATED, line: int = 12, kind: str = "RuntimeError",
            stderr: str = "", unreached: tuple[int, ...] = ()) -> RunOutcome:
    """A run's outcome; an error is raised at `line`, from `main()` called on line 30."""
    info = ErrorInfo(kind, error, line, (30, line)) if error else None
    return RunOutcome(host, status, info, result, 0.1, "", stderr, unreached=unreached)


def sites(*codes: str) -> list[FindingSite]:
    """Findings on line 10, whose value line 12 uses."""
    return [FindingSite(code, 10, frozenset({10}), frozenset({12})) for code in codes]


DEVICE_ERROR = "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"


def test_a_runs_seconds_are_its_own_not_its_wait_for_the_fork_server() -> None:
    report = ChildReport(RunStatus.OK, None, None, (), 0.25)
    assert ChildReport.from_json(report.to_json()).seconds == 0.25
    # A report from an older child, without the field, falls back to the wall clock.
    assert ChildReport.from_json({"status": "ok"}).seconds is None
    # In a process of its own: a run takes over `__main__`, `sys.argv` and `sys.stdin`.
    measure = ("import sys, time\n"
               "from torchdevlint.verify.child import run_program\n"
               "from torchdevlint.verify.protocol import RunHost\n"
               "started = time.monotonic()\n"
               "report = run_program('import time\\ntime.sleep(0.2)\\n', sys.argv[1], RunHost.CPU, 1)\n"
               "print(report.seconds, time.monotonic() - started, file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", measure, str(ROOT / "slept.py")], capture_output=True, text=True,
                          check=True, cwd=ROOT)
    own, wall = (float(part) for part in done.stderr.split())
    assert 0.2 <= own <= wall


def test_result_line_is_the_last_one() -> None:
    assert last_result("RESULT 1\nnoise\r\nRESULT  a=2 b=(3, 4)  \r\n") == "a=2 b=(3, 4)"
    assert last_result("no result\n") is None


def test_results_agree_up_to_rounding() -> None:
    assert results_agree("loss=0.123456 steps=3", "loss=0.123457 steps=3")
    assert not results_agree("loss=0.12 steps=3", "loss=0.15 steps=3")
    assert not results_agree("steps=3", "steps=4 extra")


def test_fix_verified_and_results_differ() -> None:
    original = outcome(RunStatus.ERROR, error=DEVICE_ERROR)
    reference = outcome(result="steps=3", host=RunHost.CPU)
    same = compare_results(original, outcome(result="steps=3"), reference)
    assert same.status is ComparisonStatus.MATCH
    assert judge(sites("TDL001"), original, outcome(result="steps=3"), same)[0] is Verdict.FIX_VERIFIED
    other = compare_results(original, outcome(result="steps=4"), reference)
    assert other.status is ComparisonStatus.DIFFER
    assert judge(sites("TDL001"), original, outcome(result="steps=4"), other)[0] is Verdict.RESULTS_DIFFER


def test_values_from_the_emulated_gpu_are_compared() -> None:
    original = outcome(RunStatus.ERROR, error=DEVICE_ERROR)
    reference = outcome(result="loss=0.731", host=RunHost.CPU)
    comparison = compare_results(original, outcome(result="loss=0.7312"), reference)
    assert comparison.status is ComparisonStatus.MATCH
    wrong = compare_results(original, outcome(result="loss=1.000"), reference)
    assert wrong.status is ComparisonStatus.DIFFER


@pytest.mark.parametrize(
    ("original", "fixed", "verdict"),
    [
        (outcome(RunStatus.ERROR, error=DEVICE_ERROR), outcome(RunStatus.ERROR, error=DEVICE_ERROR),
         Verdict.FIX_FAILED),
        (outcome(result="1"), outcome(RunStatus.ERROR, error="boom"), Verdict.FIX_FAILED),
        (outcome(result="1"), outcome(result="1"), Verdict.BUG_NOT_REPRODUCED),
        # A failure the finding does not predict is not the bug.
        (outcome(RunStatus.ERROR, error="No such file or directory: 'data.csv'"), outcome(result="1"),
         Verdict.BUG_NOT_REPRODUCED),
        (outcome(RunStatus.TIMEOUT), outcome(RunStatus.TIMEOUT), Verdict.BUG_NOT_REPRODUCED),
    ],
)
def test_verdicts(original: RunOutcome, fixed: RunOutcome, verdict: Verdict) -> None:
    comparison: Comparison = compare_results(original, fixed, None)
    assert judge(sites("TDL001"), original, fixed, comparison)[0] is verdict


def test_each_rule_predicts_its_own_error() -> None:
    checkpoint = outcome(RunStatus.ERROR, error="Attempting to deserialize object on a CUDA device but ...")

    def verdict(codes: list[str], original: RunOutcome) -> Verdict:
        return judge(sites(*codes), original, outcome(), compare_results(original, outcome(), None))[0]

    assert verdict(["TDL003"], checkpoint) is Verdict.FIX_VERIFIED
    assert verdict(["TDL004"], checkpoint) is Verdict.BUG_NOT_REPRODUCED
    no_gpu = outcome(RunStatus.ERROR, error="Torch not compiled with CUDA enabled", host=RunHost.CPU)
    assert verdict(["TDL007"], no_gpu) is Verdict.FIX_VERIFIED
    read_early = outcome(RunStatus.ERROR, error=(
        "emulated GPU: a non_blocking copy to the CPU was read before synchronising; its data may not have arrived"))
    assert verdict(["TDL013"], read_early) is Verdict.FIX_VERIFIED
    assert verdict(["TDL001"], read_early) is Verdict.BUG_NOT_REPRODUCED


def test_a_predicted_error_counts_only_through_the_findings_lines() -> None:
    def verdict(original: RunOutcome, codes: tuple[str, ...] = ("TDL001",)) -> tuple[Verdict, str]:
        return judge(sites(*codes), original, outcome(), compare_results(original, outcome(), None))

    # Raised at the use of the flagged value (line 12), or at the flagged line itself.
    assert verdict(outcome(RunStatus.ERROR, error=DEVICE_ERROR, line=12))[0] is Verdict.FIX_VERIFIED
    assert verdict(outcome(RunStatus.ERROR, error=DEVICE_ERROR, line=10))[0] is Verdict.FIX_VERIFIED
    elsewhere, why = verdict(outcome(RunStatus.ERROR, error=DEVICE_ERROR, line=40))
    assert elsewhere is Verdict.BUG_NOT_REPRODUCED
    assert why.startswith("the original fails at line 40 with a device error, but not through a flagged line")
    # A DataParallel checkpoint's `module.` keys fail where it is loaded, wherever that is.
    prefixed = outcome(RunStatus.ERROR, kind="RuntimeError", line=40, error=(
        'Error(s) in loading state_dict for Net:\n\tUnexpected key(s) in state_dict: "module.fc.weight".'))
    assert verdict(prefixed, ("TDL004",))[0] is Verdict.FIX_VERIFIED


@pytest.mark.parametrize(
    ("kind", "message", "stderr", "reason"),
    [
        ("ModuleNotFoundError", "No module named 'torchvision.models'", "",
         "needs the package `torchvision`, which is not installed here"),
        ("FileNotFoundError", "[Errno 2] No such file or directory: 'data/train.csv'", "",
         "needs a file that is not there: 'data/train.csv'"),
        ("SystemExit", "2", "usage: train.py [-h] --data DATA\ntrain.py: error: the following arguments are "
         "required: --data\n", "needs command-line arguments (give them after --): train.py: error: the "
         "following arguments are required: --data"),
        ("ImportError", "attempted relative import with no known parent package", "",
         "it is a module of a package"),
        # Seen on a real GPU machine without network: torchvision wraps the failed download.
        ("RuntimeError", "Error downloading train-images-idx3-ubyte.gz:\nTried https://example.org/mnist/, got:\n"
         "<urlopen error [Errno -3] Temporary failure in name resolution>", "",
         "needs the network: RuntimeError: Error downloading train-images-idx3-ubyte.gz:"),
        ("RuntimeError", "Dataset not found. You can use download=True to download it", "",
         "needs its dataset, which is not there: RuntimeError: Dataset not found."),
        ("ValueError", "num_samples should be a positive integer value, but got num_samples=0", "",
         "needs its dataset, which is not there: ValueError: num_samples should be"),
        # verify's isolation refuses writes outside the program's own folder.
        ("PermissionError", "[Errno 13] Permission denied: '../../data'", "",
         "writes outside its folder, which verify does not allow: [Errno 13] Permission denied: '../../data'"),
    ],
)
def test_a_program_that_cannot_start_here_is_not_runnable_with_the_reason(kind: str, message: str, stderr: str,
                                                                           reason: str) -> None:
    original = outcome(RunStatus.ERROR, error=message, kind=kind, line=3, stderr=stderr)
    verdict, why = judge(sites("TDL001"), original, original, compare_results(original, original, None))
    assert verdict is Verdict.NOT_RUNNABLE
    assert why.startswith(reason)


def test_an_exit_before_any_flagged_line_runs_is_not_runnable_but_a_later_one_is_not_excused() -> None:
    early = outcome(RunStatus.ERROR, error="1", kind="SystemExit", stderr="ERROR: specify either train or eval\n",
                    unreached=(10, 12))
    verdict, why = judge(sites("TDL003"), early, early, compare_results(early, early, None))
    assert verdict is Verdict.NOT_RUNNABLE
    assert why == "exits with status 1 before any flagged line runs: ERROR: specify either train or eval " \
                  "(give its arguments after --)"
    late = outcome(RunStatus.ERROR, error="1", kind="SystemExit", stderr="done\n")
    assert judge(sites("TDL003"), late, late, compare_results(late, late, None))[0] is Verdict.BUG_NOT_REPRODUCED


def test_a_bug_shown_whose_finding_has_no_fix_is_reproduced_not_a_failed_fix() -> None:
    # Without a fix the "fixed" program is the original, and fails the same way.
    original = outcome(RunStatus.ERROR, error="Torch not compiled with CUDA enabled", host=RunHost.CPU, line=10)
    comparison = compare_results(original, original, None)
    verdict, why = judge(sites("TDL007"), original, original, comparison, fixed_lines=())
    assert verdict is Verdict.BUG_REPRODUCED
    assert why == "the original fails at line 10 with the error TDL007 (line 10) predicts; no fix is offered for it"
    assert judge(sites("TDL007"), original, original, comparison)[0] is Verdict.FIX_FAILED


def test_finding_sites_follow_the_flagged_value_and_move_with_the_fix() -> None:
    program = textwrap.dedent("""\
        import torch
        device = torch.device("cuda")
        x = torch.ones(3)
        x.to(device)
        y = x * 2
        print(y)
    """)
    finding = Diagnostic("TDL001", "tensor-move-discarded", "", "p.py", Location(4, 0), Location(4, 12))
    [site] = finding_sites(program, [finding], ())
    assert (site.line, site.statement, site.uses) == (4, {4}, {5, 6})
    fixed = program.replace("x.to(device)\n", "x = x.to(device)\n").replace("import torch\n", "import torch\n\n")
    moved = site.moved(line_map(program, fixed))
    assert (moved.line, moved.statement, moved.uses) == (5, {5}, {6, 7})


# -- the emulated GPU itself (torch in this process) ----------------------------------------------

torch = pytest.importorskip("torch")
F = torch.nn.functional

# Each op takes a CPU operand next to a GPU one, and CUDA rejects every one of them: in the
# kernel (matmul, convolution, embedding, losses), in TensorIterator (element-wise ops with a
# CPU tensor that is not 0-dim), or in PyTorch's C++ front (RNNs).
CUDA_REJECTS: dict[str, Callable[[Any], Any]] = {
    "packed sequence with GPU lengths": lambda gpu: torch.nn.utils.rnn.pack_padded_sequence(
        torch.randn(5, 2, 3, device=gpu), torch.tensor([5, 3], device=gpu)),
    "nn.Embedding with CPU indices": lambda gpu: torch.nn.Embedding(10, 4).to(gpu)(torch.tensor([[1, 2]])),
    # Pointwise, but checked exactly (native_functions.yaml gives it no `device_check: NoCheck`).
    "a 0-dim CPU operand of logaddexp": lambda gpu: torch.logaddexp(torch.ones(3, device=gpu), torch.tensor(0.0)),
    "F.embedding with CPU indices": lambda gpu: F.embedding(torch.tensor([1, 2]), torch.randn(10, 4, device=gpu)),
    "F.embedding with a 0-dim CPU index": lambda gpu: F.embedding(torch.tensor(1), torch.randn(10, 4, device=gpu)),
    "F.embedding_bag": lambda gpu: F.embedding_bag(torch.tensor([[1, 2]]), torch.randn(10, 4, device=gpu)),
    "index_select": lambda gpu: torch.randn(5, 3, device=gpu).index_select(0, torch.tensor([0, 2])),
    "gather": lambda gpu: torch.randn(3, 3, device=gpu).gather(1, torch.zeros(3, 1, dtype=torch.long)),
    "scatter": lambda gpu: torch.zeros(3, 3, device=gpu).scatter(1, torch.zeros(3, 1, dtype=torch.long), 1.0),
    "scatter_add with a CPU source": lambda gpu: torch.zeros(3, 3, device=gpu).scatter_add(
        1, torch.zeros(3, 1, dtype=torch.long, device=gpu), torch.ones(3, 1)),
    "take": lambda gpu: torch.randn(3, 3, device=gpu).take(torch.tensor([0, 4])),
    "put_": lambda gpu: torch.zeros(5, device=gpu).put_(torch.tensor([0, 2]), torch.ones(2, device=gpu)),
    "CPU tensor indexed by GPU indices": lambda gpu: torch.randn(5, 3)[torch.tensor([0, 2], device=gpu)],
    "CPU values assigned through GPU-side indices": lambda gpu: torch.zeros(5, device=gpu).__setitem__(
        torch.tensor([0, 2]), torch.ones(2)),
    "matmul": lambda gpu: torch.randn(2, 3, device=gpu) @ torch.randn(3, 2),
    "mm": lambda gpu: torch.mm(torch.randn(2, 3, device=gpu), torch.randn(3, 2)),
    "bmm": lambda gpu: torch.bmm(torch.randn(1, 2, 3, device=gpu), torch.randn(1, 3, 2)),
    "einsum": lambda gpu: torch.einsum("ij,jk->ik", torch.randn(2, 3, device=gpu), torch.randn(3, 2)),
    "F.linear without bias": lambda gpu: F.linear(torch.randn(2, 3), torch.randn(4, 3, device=gpu)),
    "conv2d with CPU images": lambda gpu: F.conv2d(torch.randn(1, 1, 4, 4), torch.randn(2, 1, 3, 3, device=gpu)),
    "conv1d": lambda gpu: F.conv1d(torch.randn(1, 1, 4), torch.randn(2, 1, 3, device=gpu)),
    "in-place mul_ by a CPU tensor": lambda gpu: torch.ones(3, device=gpu).mul_(torch.randn(3)),
    "attention with a CPU mask": lambda gpu: torch.nn.MultiheadAttention(4, 1).to(gpu)(
        *(torch.randn(2, 1, 4, device=gpu),) * 3, attn_mask=torch.zeros(2, 2)),
    "bucketize with CPU boundaries": lambda gpu: torch.bucketize(torch.rand(3, device=gpu), torch.tensor([0.5])),
    "cdist": lambda gpu: torch.cdist(torch.randn(2, 3, device=gpu), torch.randn(2, 3)),
    "torch.where with a CPU condition": lambda gpu: torch.where(
        torch.ones(3, dtype=torch.bool), torch.ones(3, device=gpu), torch.zeros(3, device=gpu)),
    "add": lambda gpu: torch.ones(3, device=gpu) + torch.ones(3),
    "cross_entropy with CPU targets": lambda gpu: F.cross_entropy(
        torch.randn(4, 3, device=gpu), torch.tensor([0, 1, 2, 0])),
    "nll_loss with a 0-dim CPU target": lambda gpu: F.nll_loss(
        torch.randn(3, device=gpu).log_softmax(0), torch.tensor(1)),
    "masked_fill with a CPU mask": lambda gpu: torch.randn(3, device=gpu).masked_fill(
        torch.ones(3, dtype=torch.bool), 0),
    "index_add with a CPU index": lambda gpu: torch.zeros(5, 3, device=gpu).index_add(
        0, torch.tensor([0, 1]), torch.ones(2, 3, device=gpu)),
    "cat": lambda gpu: torch.cat([torch.ones(2, device=gpu), torch.ones(2)]),
    "LSTM with a CPU hidden state": lambda gpu: torch.nn.LSTM(3, 4).to(gpu)(
        torch.randn(2, 1, 3, device=gpu), (torch.zeros(1, 1, 4), torch.zeros(1, 1, 4))),
    "GRU with CPU inputs": lambda gpu: torch.nn.GRU(3, 4).to(gpu)(torch.randn(2, 1, 3)),
    "CPU tensor updated in place by a GPU one": lambda gpu: torch.ones(3).add_(torch.ones(3, device=gpu)),
    "a parameter set from a CPU tensor through .data": lambda gpu: _set_weight_data(
        torch.nn.Linear(2, 2).to(gpu), torch.zeros(2, 2))(torch.randn(1, 2, device=gpu)),
    # Measured on an H200 (torch 2.11): what CUDA rejects beyond the operators' own tables.
    "two 0-dim CPU operands of addcmul": lambda gpu: torch.addcmul(
        torch.tensor(0.5), torch.tensor(0.5), torch.rand(3, device=gpu)),
    "two 0-dim CPU operands of lerp": lambda gpu: torch.lerp(
        torch.tensor(0.5), torch.tensor(0.5), torch.rand(3, device=gpu)),
    "clamp with a 0-dim CPU bound": lambda gpu: torch.clamp(torch.rand(3, device=gpu), min=torch.tensor(0.5)),
    "masked_fill with a 0-dim CPU mask": lambda gpu: torch.rand(3, device=gpu).masked_fill(torch.tensor(True), 1.0),
    "masked_fill of a 0-dim CPU tensor with a GPU mask": lambda gpu: torch.tensor(0.5).masked_fill(
        torch.rand(3, device=gpu) > 0.3, 1.0),
    "logical_and of a 0-dim CPU tensor and a GPU one": lambda gpu: torch.logical_and(
        torch.tensor(0.5), torch.rand(3, device=gpu)),
}
# Random draws whose generator is of another device type than the tensor drawn.
GENERATOR_REJECTS: dict[str, Callable[[Any], Any]] = {
    "a CPU generator drawing on the GPU": lambda gpu: torch.randn(3, device=gpu, generator=torch.Generator()),
    "a GPU generator drawing on the CPU": lambda gpu: torch.randperm(4, generator=torch.Generator(device=gpu)),
    "a GPU generator filling a CPU tensor": lambda gpu: torch.empty(3).normal_(generator=torch.Generator(device=gpu)),
    "a shuffling DataLoader under a GPU default device": lambda gpu: _with_default_device(gpu, lambda: list(
        torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(4, 2)), batch_size=2, shuffle=True))),
}


def _set_weight_data(model: Any, value: Any) -> Any:
    model.weight.data = value
    return model


def _with_default_device(device: Any, body: Callable[[], Any]) -> Any:
    torch.set_default_device(device)
    try:
        return body()
    finally:
        torch.set_default_device(None)


def _with_cuda_default_tensor_type(body: Callable[[], Any]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # deprecated, and still in old code
        torch.set_default_tensor_type(torch.cuda.FloatTensor)
        try:
            return body()
        finally:
            torch.set_default_tensor_type(torch.FloatTensor)
# Mixed devices that CUDA accepts: the emulation must accept them too.
CUDA_ACCEPTS: dict[str, Callable[[Any], Any]] = {
    "a GPU generator drawing on the GPU": lambda gpu: torch.randn(
        3, device=gpu, generator=torch.Generator(device=gpu).manual_seed(0)),
    "a GPU generator filling a GPU tensor": lambda gpu: torch.empty(3, device=gpu).uniform_(
        generator=torch.Generator(device=gpu)),
    "a parameter moved to the GPU through .data": lambda gpu: _set_weight_data(
        torch.nn.Linear(2, 2, bias=False), torch.zeros(2, 2).to(gpu))(torch.randn(1, 2, device=gpu)),
    "new tensors after set_default_tensor_type(torch.cuda.FloatTensor)": lambda gpu: _with_cuda_default_tensor_type(
        lambda: torch.randn(2) + torch.ones(2, device=gpu)),
    "a model built under set_default_device('cuda')": lambda gpu: _with_default_device(
        gpu, lambda: torch.nn.Linear(2, 2)(torch.randn(3, 2))),
    "GPU tensor indexed by CPU indices": lambda gpu: torch.randn(5, 3, device=gpu)[torch.tensor([0, 2])],
    "GPU tensor indexed by a CPU mask": lambda gpu: torch.randn(5, device=gpu)[
        torch.tensor([True, False, True, False, True])],
    "CPU values assigned into a GPU slice": lambda gpu: torch.zeros(5, device=gpu).__setitem__(
        slice(0, 2), torch.ones(2)),
    "a 0-dim CPU value assigned through indices": lambda gpu: torch.zeros(5, device=gpu).__setitem__(
        torch.tensor([0, 2]), torch.tensor(1.0)),
    "0-dim CPU tensor as a scalar": lambda gpu: torch.ones(3, device=gpu) * torch.tensor(2.0),
    # native_functions.yaml: `device_check: NoCheck  # TensorIterator`, though not tagged pointwise.
    "0-dim CPU divisor of floor_divide": lambda gpu: torch.floor_divide(torch.ones(3, device=gpu), torch.tensor(2.0)),
    "0-dim CPU tensor in torch.where": lambda gpu: torch.where(
        torch.ones(3, device=gpu) > 0, torch.ones(3, device=gpu), torch.tensor(0.0)),
    "masked_fill with a 0-dim CPU value": lambda gpu: torch.zeros(3, device=gpu).masked_fill(
        torch.ones(3, dtype=torch.bool, device=gpu), torch.tensor(2.0)),
    "copy_ from the CPU": lambda gpu: torch.zeros(3, device=gpu).copy_(torch.ones(3)),
    "type_as a GPU tensor": lambda gpu: torch.ones(3).type_as(torch.ones(3, device=gpu)),
    "packed sequence with CPU lengths": lambda gpu: torch.nn.GRU(3, 4).to(gpu)(
        torch.nn.utils.rnn.pack_padded_sequence(torch.randn(5, 2, 3, device=gpu), torch.tensor([5, 3]))),
    "load_state_dict from the CPU": lambda gpu: torch.nn.Linear(2, 2).to(gpu).load_state_dict(
        torch.nn.Linear(2, 2).state_dict()),
    "boolean mask from the GPU": lambda gpu: torch.randn(4, device=gpu)[torch.randn(4, device=gpu) > 0],
    # Measured on an H200: one 0-dim CPU operand per element-wise op is a scalar, wherever it is.
    "one 0-dim CPU operand of addcmul": lambda gpu: torch.addcmul(
        torch.rand(3, device=gpu), torch.rand(3, device=gpu), torch.tensor(0.5)),
    "a 0-dim CPU tensor first in a comparison": lambda gpu: torch.tensor(0.5) < torch.rand(3, device=gpu),
    "logical_and of a GPU tensor and a 0-dim CPU one": lambda gpu: torch.logical_and(
        torch.rand(3, device=gpu), torch.tensor(0.5)),
    # Its offsets are made inside torch on the ids' device: on a CUDA build of torch, a CUDA
    # kernel that the emulation must not reach (an H200 with torch 2.11 showed it).
    "an EmbeddingBag over a GPU batch of token ids": lambda gpu: torch.nn.EmbeddingBag(9, 4).to(gpu)(
        torch.randint(0, 9, (3, 5), device=gpu)),
}


def test_the_emulated_gpu_accepts_and_rejects_the_mixes_an_h200_did() -> None:
    """`benchmarks/device_rules_probe.py real` on an H200: 290 mixes of GPU and CPU operands."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("device_rules_probe", ROOT / "benchmarks" / "device_rules_probe.py")
    assert spec is not None and spec.loader is not None
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    from torchdevlint.verify.emulation import emulated_gpu

    recorded = json.loads(probe.RECORDED.read_text())
    with emulated_gpu(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # broadcasting warnings of the losses
        answers = probe.probe()
    assert probe.disagreements(answers, recorded) == []


@pytest.mark.parametrize("name", sorted(CUDA_REJECTS))
def test_mixed_devices_cuda_rejects_fail_on_the_emulated_gpu(name: str) -> None:
    from torchdevlint.verify.emulation import emulated_gpu

    with emulated_gpu(), pytest.raises(RuntimeError, match="cuda:0|same device as the indexed tensor|too many CPU scalars") \
            as raised:
        CUDA_REJECTS[name]("cuda")
    assert "meta" not in str(raised.value)


@pytest.mark.parametrize("name", sorted(GENERATOR_REJECTS))
def test_generators_of_another_device_type_fail_on_the_emulated_gpu(name: str) -> None:
    from torchdevlint.verify.emulation import emulated_gpu

    with emulated_gpu(), pytest.raises(RuntimeError, match=r"Expected a '(cuda|cpu)' device type for generator"):
        GENERATOR_REJECTS[name]("cuda")
    assert torch.get_default_device().type == "cpu"


@pytest.mark.parametrize("name", sorted(CUDA_ACCEPTS))
def test_what_cuda_accepts_runs_on_the_emulated_gpu(name: str) -> None:
    from torchdevlint.verify.emulation import emulated_gpu

    with emulated_gpu():
        CUDA_ACCEPTS[name]("cuda")


def test_emulated_tensors_look_like_cuda_tensors_and_torch_is_restored() -> None:
    from torchdevlint.verify.emulation import emulated_gpu

    available = torch.cuda.is_available()
    with emulated_gpu(device_count=2):
        assert torch.cuda.is_available() and torch.cuda.device_count() == 2
        on_second = torch.zeros(2, device="cuda:1")
        assert on_second.device == torch.device("cuda", 1) and on_second.is_cuda and on_second.get_device() == 1
        assert torch.zeros(2).cuda().is_cuda and torch.zeros(2).to(0).device.type == "cuda"
        assert repr(torch.arange(3, device="cuda")) == "tensor([0, 1, 2], device='cuda:0')"
        assert torch.ones(2, device="cuda").type() == "torch.cuda.FloatTensor"
        model = torch.nn.Linear(2, 2).cuda()
        assert all(p.is_cuda and isinstance(p, torch.nn.Parameter) for p in model.parameters())
        assert next(model.parameters()).is_cuda
        with pytest.raises(RuntimeError, match="invalid device ordinal"):
            torch.zeros(1, device="cuda:2")
        # DataParallel's own check that the module was moved to the GPU, in CUDA's words.
        with pytest.raises(RuntimeError, match="module must have its parameters and buffers on device cuda:0"):
            torch.nn.DataParallel(torch.nn.Linear(2, 2))(torch.randn(3, 2))
        wrapped = torch.nn.DataParallel(torch.nn.Linear(2, 2).cuda())
        assert wrapped(torch.randn(3, 2)).is_cuda
        assert list(wrapped.state_dict()) == ["module.weight", "module.bias"]
        with pytest.raises(TypeError, match="can't convert cuda:0 device type tensor to numpy"):
            torch.ones(2, device="cuda").numpy()
    assert torch.cuda.is_available() == available
    assert torch.nn.DataParallel.scatter.__module__ == "torch.nn.parallel.data_parallel"
    assert not hasattr(torch.Tensor, "_data")


def test_lazy_modules_make_their_parameters_where_cuda_makes_them() -> None:
    """`nn.LazyLinear(4).cuda()` has no parameters until its first input: then they are made
    on the GPU it was sent to, the optimizer's references stay the module's, and a mismatch of
    input and module fails as on CUDA."""
    from torchdevlint.verify.emulation import emulated_gpu

    with emulated_gpu():
        model = torch.nn.Sequential(torch.nn.LazyLinear(4), torch.nn.ReLU(), torch.nn.LazyLinear(2)).cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        output = model(torch.randn(2, 3).cuda())
        assert output.is_cuda and all(parameter.is_cuda for parameter in model.parameters())
        output.sum().backward()
        optimizer.step()
        assert optimizer.param_groups[0]["params"][0] is model[0].weight and model[0].weight.grad.is_cuda
        assert not torch.nn.LazyLinear(4)(torch.randn(2, 3)).is_cuda
        for sent, given in ((True, False), (False, True)):
            lazy = torch.nn.LazyLinear(4)
            with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
                (lazy.cuda() if sent else lazy)(torch.randn(2, 3).cuda() if given else torch.randn(2, 3))
    assert "_apply" not in vars(torch.nn.modules.lazy.LazyModuleMixin)


def test_autocast_on_the_emulated_gpu_casts_as_cuda_autocast_does() -> None:
    from torchdevlint.verify.emulation import emulated_gpu

    with emulated_gpu():
        layer = torch.nn.Linear(4, 4).cuda()
        x = torch.randn(2, 4, device="cuda", requires_grad=True)
        with torch.autocast("cuda"):
            hidden = layer(x)
            scores = hidden @ hidden.t()
            loss = torch.nn.functional.cross_entropy(hidden, torch.tensor([0, 1], device="cuda"))
            # Half precision where CUDA computes in it, float32 where it needs the range.
            assert (hidden.dtype, scores.dtype, loss.dtype) == (torch.float16, torch.float16, torch.float32)
            # The classic mask fill of an attention score, out of float16's range, as on CUDA.
            with pytest.raises(RuntimeError, match="cannot be converted to type .*Half without overflow"):
                scores.masked_fill(scores > 0, -1e9)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                assert layer(x).dtype == torch.bfloat16
        loss.backward()
        # The casts are recorded: gradients come back in the parameters' and inputs' dtype.
        assert layer.weight.grad is not None and layer.weight.grad.dtype == x.grad.dtype == torch.float32
        assert layer(x).dtype == torch.float32  # outside autocast, the program's own dtypes


def test_emulated_gpus_are_told_apart() -> None:
    from torchdevlint.verify.emulation import emulated_gpu, gpu_of

    with emulated_gpu(device_count=3):
        first, second = torch.ones(3, device="cuda:0"), torch.ones(3).to("cuda:1")
        with pytest.raises(RuntimeError, match="found at least two devices, cuda:0 and cuda:1"):
            first + second
        assert gpu_of(second * 2) == 1 and gpu_of(second.to(first)) == 0 and gpu_of(second.cuda(2)) == 2
        torch.cuda.set_device(2)
        assert gpu_of(torch.zeros(1).cuda()) == 2 and torch.cuda.current_device() == 2
        with torch.cuda.device(1):
            assert gpu_of(torch.zeros(1, device="cuda")) == 1
        # DataParallel's device check: the module on cuda:1, device_ids from cuda:0.
        model = torch.nn.Linear(3, 2).to("cuda:1")
        with pytest.raises(RuntimeError, match=r"cuda:0 \(device_ids\[0\]\) but found one of them on device: cuda:1"):
            torch.nn.DataParallel(model)(torch.randn(4, 3))
        output = torch.nn.DataParallel(model, device_ids=[1, 2])(torch.randn(4, 3))
        assert gpu_of(output) == 1


class _MovesItems(torch.utils.data.Dataset):  # type: ignore[type-arg]  # items are tensors
    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.full((2,), float(index)).to("cuda")


def test_cuda_in_a_worker_forked_after_cuda_started_fails_as_on_cuda() -> None:
    from torchdevlint.verify.emulation import emulated_gpu, gpu_of

    with emulated_gpu():
        # Before CUDA starts, the main process loads on the GPU; after it, a forked worker cannot.
        assert gpu_of(next(iter(torch.utils.data.DataLoader(_MovesItems(), batch_size=2)))) == 0
        workers = iter(torch.utils.data.DataLoader(_MovesItems(), batch_size=2, num_workers=1))
        try:
            with pytest.raises(RuntimeError, match="Cannot re-initialize CUDA in forked subprocess"):
                next(workers)
        finally:
            # Stopped here, not by the garbage collector when pytest's worker exits.
            workers._shutdown_workers()  # type: ignore[attr-defined]  # the iterator's own clean-up


class _NormalisedLinear(torch.nn.Module):
    """`shift` a plain tensor attribute (which DataParallel does not copy), or a buffer."""

    def __init__(self, shift_as_buffer: bool) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)
        if shift_as_buffer:
            self.register_buffer("shift", torch.full((3,), 0.5))
        else:
            self.shift = torch.full((3,), 0.5)

    def _apply(self, fn: Any, recurse: bool = True) -> Any:
        super()._apply(fn, recurse)
        if not isinstance(self.shift, torch.nn.Parameter) and "shift" not in self._buffers:
            self.shift = fn(self.shift)  # moved by hand with the model, as such code does
        return self

    def forward(self, x: Any) -> Any:
        return self.fc(x - self.shift)


def test_data_parallel_runs_a_replica_on_each_emulated_gpu() -> None:
    from torchdevlint.verify.emulation import emulated_gpu, gpu_of

    def train(model: Any, wrap: bool, device: str) -> list[float]:
        net = torch.nn.DataParallel(model) if wrap else model
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        torch.manual_seed(1)
        inputs, targets = torch.randn(8, 3), torch.randn(8, 2)
        losses = []
        for _ in range(3):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(net(inputs.to(device)), targets.to(device))
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return losses

    torch.manual_seed(0)
    on_cpu = train(_NormalisedLinear(True), False, "cpu")
    with emulated_gpu(device_count=2):
        torch.manual_seed(0)
        # Each GPU computes its half of the batch; gradients come back to the module's own parameters.
        assert train(_NormalisedLinear(True).cuda(), True, "cuda") == pytest.approx(on_cpu, rel=1e-5)
        # A plain tensor attribute stays on cuda:0, where the replica on cuda:1 cannot use it.
        with pytest.raises(RuntimeError, match="cuda:1 and cuda:0"):
            torch.nn.DataParallel(_NormalisedLinear(False).cuda())(torch.randn(4, 3))
        # Inside a replica the current GPU is the replica's: `.cuda()` lands there, "cuda:0" does not.
        follows = torch.nn.DataParallel(_Adds(lambda x: torch.ones(x.shape[0], 3).cuda()).cuda())
        assert gpu_of(follows(torch.randn(4, 3))) == 0
        pinned = torch.nn.DataParallel(_Adds(lambda x: torch.ones(x.shape[0], 3, device="cuda:0")).cuda())
        with pytest.raises(RuntimeError, match="cuda:1 and cuda:0"):
            pinned(torch.randn(4, 3))
        # A batch of one runs on one GPU; 0-dim outputs are gathered into a vector.
        assert pinned(torch.randn(1, 3)).shape == (1, 3)
        with pytest.warns(UserWarning, match="all input tensors were scalars"):
            assert torch.nn.DataParallel(_Adds(lambda x: 0, reduce=True).cuda())(torch.randn(4, 3)).shape == (2,)
        # A replica's parameters are plain attributes, as CUDA's `replicate` makes them: code
        # that asks the module for its device through them fails in every replica.
        asks = torch.nn.DataParallel(_Adds(lambda x: torch.ones(x.shape[0], 3)).cuda())
        asks.module.make = lambda x: torch.ones(x.shape[0], 3, device=next(asks.module.parameters()).device)
        with pytest.raises(StopIteration, match="Caught StopIteration in replica 0 on device 0"):
            asks(torch.randn(4, 3))
        with pytest.raises(StopIteration, match="in replica 0 on device 0"):
            asks(torch.randn(1, 3))  # one replica still is one
        assert len(list(asks.parameters())) == len(list(asks.module.parameters())) > 0
        alone = torch.nn.DataParallel(asks.module, device_ids=[0])  # one GPU runs the module itself
        assert gpu_of(alone(torch.randn(4, 3))) == 0
        # A gradient crosses back to the GPU its tensor came from.
        leaf = torch.ones(3, device="cuda:0", requires_grad=True)
        (leaf.to("cuda:1") * 2).cpu().sum().backward()
        assert gpu_of(leaf.grad) == 0


class _Adds(torch.nn.Module):
    def __init__(self, make: Callable[[Any], Any], reduce: bool = False) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(3))
        self.make, self.reduce = make, reduce

    def forward(self, x: Any) -> Any:
        out = x * self.scale + self.make(x)
        return out.sum() if self.reduce else out


def test_the_emulated_gpu_computes_real_values() -> None:
    from torchdevlint.verify.emulation import emulated_gpu

    torch.manual_seed(0)
    host = torch.randn(6, 3)
    with emulated_gpu():
        gpu = host.to("cuda")
        assert torch.equal(gpu.cpu(), host) and gpu.sum().item() == pytest.approx(host.sum().item())
        assert f"{gpu.sum():.4f}" == f"{host.sum():.4f}"
        loss = torch.nn.functional.mse_loss(gpu, torch.zeros_like(gpu))
        if torch.isnan(loss):  # a correct guard does not fire
            raise AssertionError("the guard fired")
        labels = torch.tensor([2, 0, 2, 1], device="cuda")
        assert torch.unique(labels).tolist() == [0, 1, 2]
        assert torch.bincount(labels).tolist() == [1, 1, 2]
        assert torch.nn.functional.one_hot(labels).shape == (4, 3)
        assert (gpu > 0).nonzero().shape == (host > 0).nonzero().shape
        assert gpu[gpu > 0].shape == host[host > 0].shape
        log_probs = torch.randn(5, 1, 4, device="cuda").log_softmax(2)
        ctc = torch.nn.functional.ctc_loss(log_probs, torch.tensor([[1, 2]]), torch.tensor([5]), torch.tensor([2]))
        assert ctc.is_cuda and torch.isfinite(ctc)
        numbers = gpu.cpu().numpy() if gpu.is_cuda else gpu.numpy()
        assert numbers.shape == (6, 3)


def test_training_on_the_emulated_gpu_matches_the_cpu() -> None:
    from torchdevlint.verify.emulation import emulated_gpu

    def train(device: str) -> list[float]:
        torch.manual_seed(3)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
        optimizer = torch.optim.Adam(model.parameters(), lr=0.05)  # made before the move, as often
        model.to(device)
        inputs, targets = torch.randn(32, 4).to(device), torch.randn(32, 1).to(device)
        losses = []
        for _ in range(5):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(inputs), targets)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            losses.append(loss.item())
        return losses

    on_cpu = train("cpu")
    with emulated_gpu():
        on_gpu = train("cuda")
    assert on_gpu == pytest.approx(on_cpu, rel=1e-5)
    assert on_cpu[-1] < on_cpu[0]


def test_checkpoints_saved_on_the_emulated_gpu_record_cuda_and_load_as_cuda_does(tmp_path: Path) -> None:
    from torchdevlint.verify.emulation import emulated_gpu

    path = tmp_path / "model.pt"
    with emulated_gpu():
        model = torch.nn.Linear(3, 2).cuda()
        torch.save({"model": model.state_dict(), "step": 7}, path)
        restored = torch.load(path)
        assert restored["model"]["weight"].is_cuda and restored["step"] == 7
        assert torch.equal(restored["model"]["weight"].cpu(), model.weight.detach().cpu())
        on_host = torch.load(path, map_location="cpu")["model"]["weight"]
        assert on_host.device.type == "cpu" and torch.equal(on_host, model.weight.detach().cpu())
        whole = tmp_path / "whole.pt"
        torch.save(model, whole)
        assert torch.load(whole, weights_only=False).weight.is_cuda
    # Outside the emulation the file is a CUDA checkpoint, as a GPU box writes it.
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="Attempting to deserialize object on a CUDA device"):
            torch.load(path)
    assert torch.load(path, map_location="cpu")["model"]["bias"].shape == (2,)


def test_torch_cuda_answers_as_a_gpu_machine() -> None:
    from torchdevlint.verify.emulation import emulated_gpu

    with emulated_gpu():
        assert not torch.cuda.is_initialized()
        torch.cuda.init()
        assert torch.cuda.is_initialized() and torch.cuda.current_device() == 0
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            torch.ones(2, device="cuda").record_stream(stream)
        stream.synchronize()
        state = torch.cuda.get_rng_state()
        torch.cuda.set_rng_state(state)
        torch.cuda.manual_seed_all(0)
        assert torch.cuda.get_device_properties(0).total_memory > 0 and torch.cuda.mem_get_info()[0] > 0
        assert torch.cuda.memory_allocated() == 0 and torch.cuda.get_device_name(0)
        legacy = torch.cuda.FloatTensor(2, 3)
        assert legacy.is_cuda and legacy.shape == (2, 3) and isinstance(legacy, torch.cuda.FloatTensor)
        assert torch.cuda.LongTensor([1, 2]).tolist() == [1, 2]
        assert torch.ones(2).type(torch.cuda.FloatTensor).is_cuda
        assert torch.compile(torch.nn.Linear(2, 2).cuda())(torch.ones(1, 2, device="cuda")).is_cuda


@pytest.mark.parametrize(
    ("visible", "count"),
    [("1", 1), ("0,1", 2), ("1,0,7", 2), ("", 0), ("7", 0), (None, 2)],
)
def test_cuda_visible_devices_set_before_cuda_starts_is_honoured(
    visible: str | None, count: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchdevlint.verify.emulation import emulated_gpu

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with emulated_gpu(device_count=2):
        if visible is not None:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
        assert torch.cuda.device_count() == count and torch.cuda.is_available() == (count > 0)
        if count:
            torch.ones(1, device="cuda")
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")  # too late: CUDA has started
            assert torch.cuda.device_count() == count
        else:
            with pytest.raises(RuntimeError, match="No CUDA GPUs are available"):
                torch.ones(1, device="cuda")


READ_EARLY = "emulated GPU: a non_blocking copy to the CPU was read before synchronising"
# Ways a program reads the values of a CPU tensor.
VALUE_READS: dict[str, Callable[[Any], Any]] = {
    "numpy()": lambda copy: copy.numpy(),
    "tolist()": lambda copy: copy.tolist(),
    "item()": lambda copy: copy[0].item(),
    "print": print,
    "format": lambda copy: f"{copy.sum():.3f}",
    "float()": lambda copy: float(copy.sum()),
    "argmax": lambda copy: copy.argmax(),
    "torch.cat": lambda copy: torch.cat([copy, copy]),
    "arithmetic": lambda copy: copy * 2,
    "iteration": list,
}
# What waits for the GPU's stream: after it, every copy queued before has arrived.
SYNCHRONISATIONS: dict[str, Callable[[Any], Any]] = {
    "torch.cuda.synchronize()": lambda gpu: torch.cuda.synchronize(),
    "torch.accelerator.synchronize()": lambda gpu: torch.accelerator.synchronize(),
    "current stream synchronize()": lambda gpu: torch.cuda.current_stream().synchronize(),
    "event synchronize()": lambda gpu: torch.cuda.Event().synchronize(),
    "event query() answering True": lambda gpu: torch.cuda.Event().query(),
    "item() of a GPU tensor": lambda gpu: gpu.sum().item(),
    "cpu() of a GPU tensor": lambda gpu: gpu.cpu(),
    "tolist() of a GPU tensor": lambda gpu: gpu.tolist(),
    "blocking to('cpu') of a GPU tensor": lambda gpu: gpu.to("cpu"),
    "blocking copy to the GPU": lambda gpu: torch.ones(2).to("cuda"),
}


@pytest.mark.parametrize("read", sorted(VALUE_READS))
def test_non_blocking_copy_to_the_cpu_read_before_a_sync_fails_on_the_emulated_gpu(read: str) -> None:
    from torchdevlint.verify.emulation import emulated_gpu

    with emulated_gpu():
        scores = torch.randn(4, device="cuda").softmax(0)
        copy = scores.to("cpu", non_blocking=True)
        with pytest.raises(RuntimeError, match=READ_EARLY):
            VALUE_READS[read](copy)


@pytest.mark.parametrize("synchronisation", sorted(SYNCHRONISATIONS))
def test_non_blocking_copy_read_after_a_sync_runs(synchronisation: str) -> None:
    from torchdevlint.verify.emulation import emulated_gpu

    with emulated_gpu():
        scores = torch.randn(4, device="cuda").softmax(0)
        copy = scores.to("cpu", non_blocking=True)
        SYNCHRONISATIONS[synchronisation](scores)
        assert copy.tolist() == scores.tolist()


def test_metadata_of_a_copy_in_flight_can_be_read() -> None:
    from torchdevlint.verify.emulation import emulated_gpu

    with emulated_gpu():
        copy = torch.randn(4, 3, device="cuda").to("cpu", non_blocking=True)
        assert copy.shape == (4, 3) and copy.size(0) == 4 and len(copy) == 4
        assert copy.dtype == torch.float32 and copy.device.type == "cpu"
        assert copy.dim() == copy.ndim == 2 and copy.numel() == 12
        results = [copy]  # stashed, not read
        torch.cuda.synchronize()
        assert torch.cat(results).shape == (4, 3)


def test_only_non_blocking_copies_from_the_gpu_are_in_flight() -> None:
    from torchdevlint.verify.emulation import emulated_gpu

    with emulated_gpu():
        gpu = torch.randn(3, device="cuda")
        assert gpu.to("cpu").sum().item() == pytest.approx(gpu.sum().item())  # blocking
        assert torch.ones(3).to("cpu", non_blocking=True).sum().item() == 3.0  # already on the CPU
        assert gpu.to("cuda", non_blocking=True).is_cuda  # to the GPU: nothing to read on the host
        buffer = torch.empty(3)
        buffer.copy_(gpu, non_blocking=True)
        with pytest.raises(RuntimeError, match=READ_EARLY):
            buffer.mean()
        synchronize = torch.cuda.synchronize
    assert torch.cuda.synchronize is not synchronize  # the emulation's wrappers are gone


def test_read_before_sync_check_for_real_gpus_ignores_host_copies_and_is_undone() -> None:
    from torchdevlint.verify.race import host_copy_race_check

    before = (torch.cuda.synchronize, torch.cuda.Event.synchronize, torch.cuda.Stream.synchronize)
    with host_copy_race_check("CUDA"):
        assert torch.cuda.synchronize is not before[0]
        assert torch.ones(2).to("cpu", non_blocking=True).sum().item() == 2.0  # host to host: no race
    assert (torch.cuda.synchronize, torch.cuda.Event.synchronize, torch.cuda.Stream.synchronize) == before


@pytest.mark.cuda
def test_read_before_sync_fails_on_a_real_gpu_and_a_sync_clears_it() -> None:
    from torchdevlint.verify.race import host_copy_race_check

    with host_copy_race_check("CUDA"):
        gpu = torch.randn(1024, device="cuda")
        copy = gpu.to("cpu", non_blocking=True)
        with pytest.raises(RuntimeError, match="CUDA: a non_blocking copy to the CPU was read before synchronising"):
            copy.sum()
        torch.cuda.synchronize()
        assert torch.equal(copy, gpu.cpu())


def test_a_checkpoint_the_run_did_not_write_loads_as_a_gpu_wrote_it(tmp_path: Path) -> None:
    from torchdevlint.verify.host import gpu_trained_checkpoints

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: such a checkpoint loads")
    weights = {"w": torch.arange(4.0)}
    torch.save(weights, tmp_path / "released.pt")
    with gpu_trained_checkpoints():
        with pytest.raises(RuntimeError, match="Attempting to deserialize object on a CUDA device"):
            torch.load(tmp_path / "released.pt")
        with pytest.raises(RuntimeError, match="Attempting to deserialize object on a CUDA device"):
            torch.load(str(tmp_path / "released.pt"), weights_only=True)
        assert torch.equal(torch.load(tmp_path / "released.pt", map_location="cpu")["w"], weights["w"])
        # What the run saved itself, the machine loading it saved: it loads as written.
        torch.save(weights, tmp_path / "own.pt")
        assert torch.equal(torch.load(tmp_path / "own.pt")["w"], weights["w"])
    # The file on disk is untouched, and outside the run it loads as ever.
    assert torch.equal(torch.load(tmp_path / "released.pt")["w"], weights["w"])


@pytest.mark.slow
def test_common_gpu_path_calls_work_on_the_emulated_gpu(tmp_path):  # type: ignore[no-untyped-def]
    import json

    from conftest import run_cli

    program = tmp_path / "amp_program.py"
    program.write_text(
        "import torch\n"
        "import torch.nn as nn\n"
        "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
        "model = nn.Linear(8, 3).to(device)\n"
        "x = torch.randn(4, 8)\n"
        "x.to(device)\n"
        "if torch.cuda.is_available():\n"
        "    free, total = torch.cuda.mem_get_info()\n"
        "    name = torch.cuda.get_device_properties(0).name\n"
        "    start = torch.cuda.Event(enable_timing=True)\n"
        "    start.record()\n"
        "with torch.autocast('cuda', dtype=torch.bfloat16, enabled=torch.cuda.is_bf16_supported()):\n"
        "    out = model(x)\n"
        "print('RESULT', tuple(out.shape))\n"
    )
    result = run_cli("verify", "--device", "emulated", "--format", "json", str(program))
    (report,) = json.loads(result.stdout)
    assert report["verdict"] == "fix verified", report


def test_the_emulated_apple_gpu_rejects_float64_there_as_mps_does() -> None:
    torch = pytest.importorskip("torch")
    from torchdevlint.verify.mps import MPS_FLOAT64, emulated_mps

    with emulated_mps():
        assert torch.backends.mps.is_available()
        device = torch.device("mps" if torch.backends.mps.is_available() else "cpu")
        points = torch.rand(4, 2).to(device)
        assert points.dtype == torch.float32
        with pytest.raises(TypeError, match="doesn't support float64"):
            torch.zeros(3, dtype=torch.float64).to(device)
        with pytest.raises(TypeError, match="doesn't support float64"):
            points.double()
        assert points.cpu().double().dtype == torch.float64  # back on the host, float64 is fine
    assert MPS_FLOAT64.startswith("Cannot convert a MPS Tensor to float64")


def test_a_dataloader_workers_error_is_reported_where_the_worker_raised_it() -> None:
    from torchdevlint.verify.child import _error_info

    original = (
        "Traceback (most recent call last):\n"
        '  File "/torch/utils/data/_utils/worker.py", line 349, in _worker_loop\n'
        "    data = fetcher.fetch(index)\n"
        '  File "/run/train.py", line 28, in __getitem__\n'
        "    window = self.series[index].to(device)\n"
        "RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, "
        "you must use the 'spawn' start method\n"
    )
    error = RuntimeError(f"Caught RuntimeError in DataLoader worker process 1.\nOriginal {original}")
    info = _error_info(error, "/run/train.py")
    assert (info.type, info.line, info.trace) == ("RuntimeError", 28, (28,))
    assert info.message.startswith("Cannot re-initialize CUDA in forked subprocess")
    assert info.message.endswith("(in DataLoader worker process 1)")


@pytest.mark.slow
def test_a_temporary_folder_inside_the_programs_folder_is_left_out_of_its_mirror(tmp_path: Path) -> None:
    """Issue 37: with `TMPDIR` inside the program's folder (`TMPDIR=./tmp`), each run's mirror of
    the folder held its own scratch folder, without end: "File name too long", a traceback,
    and the scratch folders left behind; and the run could not write its own report there.
    Now the runs go as they go elsewhere, and leave nothing behind, whatever the programs do."""
    programs = tmp_path / "programs"
    programs.mkdir()
    (programs / "fails.py").write_text("import torch\nx = torch.zeros(2)\nx.cuda()\nraise SystemExit(3)\n")
    (programs / "sleeps.py").write_text("import time\nimport torch\nx = torch.zeros(2)\nx.cuda()\ntime.sleep(60)\n")
    (programs / "moves.py").write_text("import torch\nx = torch.ones(2)\nx.cuda()\ny = x + torch.ones(2, device='cuda')\n")
    temporary = programs / "tmp"
    temporary.mkdir()
    result = run_cli("verify", "--timeout", "5", "--format", "json", str(programs), env={"TMPDIR": str(temporary)})
    assert "Traceback" not in result.stderr, result.stderr
    reports = {Path(report["path"]).name: report for report in json.loads(result.stdout)}
    assert reports["moves.py"]["verdict"] == "fix verified", reports["moves.py"]
    assert [path.name for path in temporary.iterdir() if path.name.startswith("torchdevlint-verify-")] == []


def test_a_failed_fix_says_how_the_fixed_program_failed() -> None:
    original = outcome(RunStatus.ERROR, error=DEVICE_ERROR, line=12)
    same = judge(sites("TDL001"), original, original, compare_results(original, original, None))
    assert same == (Verdict.FIX_FAILED, "the original fails at line 12 with the error TDL001 (line 10) predicts; "
                                        "so does the fixed program")
    other = outcome(RunStatus.ERROR, error="mat1 and mat2 must have the same dtype\n(more)", line=11)
    verdict, why = judge(sites("TDL001"), original, other, compare_results(original, other, None))
    assert verdict is Verdict.FIX_FAILED
    assert why.endswith("the fixed program fails at line 11 with another error, "
                        "RuntimeError: mat1 and mat2 must have the same dtype")
    slow = outcome(RunStatus.TIMEOUT)
    assert judge(sites("TDL001"), original, slow, compare_results(original, slow, None))[1].endswith(
        "the fixed program times out")


def test_random_numbers_drawn_on_a_gpu_are_not_held_against_the_cpu() -> None:
    # CUDA's generator draws other numbers than the CPU's: an H200 printed 2.106 for a fixed
    # program that prints 2.162 on the CPU, its fix sound.
    original = outcome(RunStatus.ERROR, error=DEVICE_ERROR, host=RunHost.CUDA)
    reference = outcome(result="loss=2.162", host=RunHost.CPU)
    drew = dataclasses.replace(outcome(result="loss=2.106", host=RunHost.CUDA), gpu_random=True)
    comparison = compare_results(original, drew, reference)
    assert comparison.status is ComparisonStatus.SKIPPED
    assert comparison.reason.startswith("the fixed program drew random numbers on the GPU")
    assert judge(sites("TDL001"), original, drew, comparison)[0] is Verdict.FIX_VERIFIED
    # Without draws on the GPU, or where the numbers agree, the comparison stands.
    plain = outcome(result="loss=2.106", host=RunHost.CUDA)
    assert compare_results(original, plain, reference).status is ComparisonStatus.DIFFER
    same = dataclasses.replace(outcome(result="loss=2.162", host=RunHost.CUDA), gpu_random=True)
    assert compare_results(original, same, reference).status is ComparisonStatus.MATCH
