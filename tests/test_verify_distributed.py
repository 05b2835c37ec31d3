"""verify's distributed programs: ranks launched as torchrun launches them, `mp.spawn` ranks, and
NCCL, its process groups and DistributedDataParallel on the emulated GPU (`verify.distributed`).

Each program runs in a verify child of its own, as `verify` runs it: slow.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import ROOT, run_cli

pytest.importorskip("torch")
pytestmark = pytest.mark.slow


def run_child(tmp_path: Path, source: str, *, gpus: int = 2, processes: int = 1, nodes: int = 1,
              host: str = "emulated") -> tuple[dict[str, object], str]:
    """Run `source` as a verify child runs it; its report and its standard output."""
    program = tmp_path / "program.py"
    program.write_text(textwrap.dedent(source))
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "torchdevlint.verify.child", "--host", host, "--gpus", str(gpus),
         "--processes", str(processes), "--nodes", str(nodes), "--path", str(program), "--report", str(report)],
        input=program.read_text(), capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )
    return json.loads(report.read_text()), done.stdout


TRAINING_RANKS = """\
    import os
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(rank)  # each rank starts from other weights and sees other data
    model = DistributedDataParallel(nn.Linear(4, 1).cuda(), device_ids=[int(os.environ["LOCAL_RANK"])])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model(torch.randn(8, 4)).pow(2).mean().backward()
    optimizer.step()
    weights = model.module.weight.detach()
    gathered = [torch.zeros_like(weights) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, weights)
    print(f"RANK {rank} of {dist.get_world_size()} on {weights.device} backend {dist.get_backend()} "
          f"same={all(torch.equal(other, gathered[0]) for other in gathered)} "
          f"keys={list(model.state_dict())}")
    dist.destroy_process_group()
"""


def test_ranks_train_as_one_model_each_on_its_own_gpu(tmp_path: Path) -> None:
    report, stdout = run_child(tmp_path, TRAINING_RANKS, processes=2)
    assert report["status"] == "ok", report
    lines = sorted(line for line in stdout.splitlines() if line.startswith("RANK"))
    # DDP broadcast rank 0's weights, then averaged the gradients: the ranks agree.
    assert lines == [
        "RANK 0 of 2 on cuda:0 backend nccl same=True keys=['module.weight', 'module.bias']",
        "RANK 1 of 2 on cuda:1 backend nccl same=True keys=['module.weight', 'module.bias']",
    ]


def test_ranks_on_the_same_gpu_fail_as_nccl_fails(tmp_path: Path) -> None:
    report, _ = run_child(tmp_path, TRAINING_RANKS.replace(
        '    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))\n', ""
    ).replace('device_ids=[int(os.environ["LOCAL_RANK"])]', "device_ids=None"), processes=2)
    assert report["status"] == "error"
    error = report["error"]
    assert isinstance(error, dict)
    assert error["type"] == "DistBackendError"
    assert "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 0" in error["message"]
    assert error["line"] == 10  # DistributedDataParallel(...): its first collective


def test_a_second_machines_ranks_have_local_ranks_from_zero_and_gpus_of_their_own(tmp_path: Path) -> None:
    source = """\
        import os
        import torch
        import torch.distributed as dist
        dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        total = torch.ones(1, device="cuda")
        dist.all_reduce(total)
        print(f'RANK {os.environ["RANK"]} {os.environ["LOCAL_RANK"]} {os.environ["GROUP_RANK"]} {int(total.item())}')
        dist.barrier()
        if os.environ["RANK"] == "3":
            torch.cuda.set_device(int(os.environ["RANK"]))
    """
    report, stdout = run_child(tmp_path, source, processes=2, nodes=2)
    assert sorted(line for line in stdout.splitlines() if line.startswith("RANK")) == [
        "RANK 0 0 0 4", "RANK 1 1 0 4", "RANK 2 0 1 4", "RANK 3 1 1 4",
    ]
    # The global rank names a GPU the second machine does not have.
    assert report["status"] == "error"
    assert report["error"] == {"type": "RuntimeError", "message": "CUDA error: invalid device ordinal",
                               "line": 11, "trace": [11], "importing": None}


def test_an_nccl_group_has_no_backend_for_cpu_tensors(tmp_path: Path) -> None:
    source = """\
        import os
        import torch
        import torch.distributed as dist
        dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        names = [None] * 2
        dist.all_gather_object(names, f"rank{dist.get_rank()}")  # pickled for the group: allowed
        print(f"NAMES {names}")
        loss = torch.tensor(1.0)
        dist.all_reduce(loss)
    """
    report, stdout = run_child(tmp_path, source, processes=2)
    assert "NAMES ['rank0', 'rank1']" in stdout
    error = report["error"]
    assert isinstance(error, dict)
    assert error["message"].startswith("No backend type associated with device type cpu")
    assert error["line"] == 10


def test_distributed_data_parallel_checks_the_modules_device_against_device_ids(tmp_path: Path) -> None:
    source = """\
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel
        dist.init_process_group("nccl")
        torch.cuda.set_device(dist.get_rank())
        DistributedDataParallel(torch.nn.Linear(2, 2).cuda(), device_ids=[1])
    """
    report, _ = run_child(tmp_path, source, processes=2)
    error = report["error"]
    assert isinstance(error, dict)
    assert error["message"] == ("module must have its parameters and buffers on device cuda:1 (device_ids[0]) "
                                "but found one of them on device: cuda:0")


SPAWNED = """\
import os
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel


def worker(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12355"  # the same in the original's run and the fix's, side by side
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(8, 2).cuda())
    loss = model(torch.randn(16, 8).cuda()).pow(2).mean()
    loss.backward()
    if rank == 0:
        print(f"RESULT {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    torch.cuda.init()  # CUDA started before the spawn: each spawned rank starts it afresh
    mp.spawn(worker, args=(torch.cuda.device_count(),), nprocs=torch.cuda.device_count())
"""


def test_verify_proves_the_fix_of_ranks_that_mp_spawn_starts_on_one_gpu(tmp_path: Path) -> None:
    (tmp_path / "spawned.py").write_text(SPAWNED)
    result = run_cli("verify", "--device", "emulated", "--format", "json", str(tmp_path / "spawned.py"), cwd=ROOT)
    [report] = json.loads(result.stdout)
    assert report["verdict"] == "fix verified", report
    assert report["processes"] == 2 and report["gpus"] == 2
    assert [finding["code"] for finding in report["findings"]] == ["TDL023"]
    assert report["original"]["error"]["line"] == 13
    assert "Duplicate GPU detected : rank" in report["original"]["error"]["message"]
    assert report["fixed"]["result"] is not None
    assert result.returncode == 0
