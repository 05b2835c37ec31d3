"""TDL023 ddp-without-local-device."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.brains.torch_api import DISTRIBUTED_DATA_PARALLEL, PER_PROCESS_DEVICE_CALLS
from torchdevlint.analysis.flow.values import PlaceKind
from torchdevlint.analysis.tree import keyword_argument
from torchdevlint.rule import Invalid, Rule, Valid

_PROCESS_GROUP = frozenset({"torch.distributed.init_process_group", "torch.distributed.distributed_c10d.init_process_group"})


class DdpWithoutLocalDevice(Rule):
    """
    ## What it does
    Finds `DistributedDataParallel(model)` where the model is on one fixed GPU (`.cuda()`,
    `.to("cuda")`, `torch.device("cuda")`, `"cuda:0"`) and nothing in the file gives each
    process a GPU of its own: no `torch.cuda.set_device(...)` (nor `torch.cuda.device(...)`
    or `torch.accelerator.set_device_index(...)`), no `device_ids=[local_rank]`, no
    `init_process_group(..., device_id=...)`, and no `CUDA_VISIBLE_DEVICES` set by the
    program. `device_ids` written as numbers (`device_ids=[0]`) names the same GPU for every
    process, so it counts as absent.

    ## Why is this bad?
    `torchrun` and `mp.spawn` start one process per GPU, and each process starts on GPU 0.
    A model moved with `.cuda()` or `.to("cuda")` therefore lands on GPU 0 in every
    process: all ranks share one GPU's memory and run out of it, while the other GPUs idle,
    or NCCL stops with "Duplicate GPU detected". With one process the program works, so the
    bug waits for the first multi-GPU run.

    Not reported: models moved to a device built from the rank (`.cuda(local_rank)`,
    `.to(f"cuda:{rank}")`, `torch.device("cuda", args.gpu)`), models on the CPU or on a device
    the file cannot tell, and programs that set the current device or the visible GPUs.

    ## Fix safety
    No fix: which variable holds the local rank (`LOCAL_RANK`, `args.local_rank`, the first
    argument `mp.spawn` passes) is the program's to say.

    ## Options
    None.
    """

    code = "TDL023"
    slug = "ddp-without-local-device"
    message = "DistributedDataParallel over a model on one fixed GPU: every process uses that GPU"
    requires_any_text = ("DistributedDataParallel",)

    VALID = [
        Valid(
            """
            import os
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP
            dist.init_process_group("nccl")
            local_rank = int(os.environ["LOCAL_RANK"])
            torch.cuda.set_device(local_rank)
            model = DDP(torch.nn.Linear(8, 2).cuda(), device_ids=[local_rank])
            """,
            name="current-device-set-per-process",
            in_docs=True,
        ),
        Valid(
            """
            import torch
            import torch.multiprocessing as mp
            from torch.nn.parallel import DistributedDataParallel
            def worker(rank, world_size):
                torch.distributed.init_process_group("nccl", rank=rank, world_size=world_size)
                model = torch.nn.Linear(8, 2).to(f"cuda:{rank}")
                ddp = DistributedDataParallel(model)
                cpu = DistributedDataParallel(torch.nn.Linear(8, 2))
            if __name__ == "__main__":
                mp.spawn(worker, args=(2,), nprocs=2)
            """,
            name="a-device-from-the-rank-and-the-cpu",
        ),
        Valid(
            """
            import os
            import torch
            from torch.nn.parallel import DistributedDataParallel
            os.environ["CUDA_VISIBLE_DEVICES"] = os.environ["LOCAL_RANK"]
            torch.distributed.init_process_group("nccl")
            model = DistributedDataParallel(torch.nn.Linear(8, 2).cuda())
            """,
            name="each-process-sees-one-gpu",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import os
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP
            dist.init_process_group("nccl")
            model = DDP(torch.nn.Linear(8, 2).cuda())
            """,
            name="moved-to-the-current-gpu",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel
            device = torch.device("cuda")
            def main(rank, world_size):
                dist.init_process_group("nccl", rank=rank, world_size=world_size)
                model = torch.nn.Linear(8, 2).to(device)
                model = DistributedDataParallel(model, device_ids=[0])
            """,
            name="a-device-variable-and-numbered-device-ids",
        ),
    ]

    def setup(self) -> None:
        self._wrapped: list[cst.Call] = []
        self._per_process = False

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if "CUDA_VISIBLE_DEVICES" in node.value:
            self._per_process = True

    def visit_Call(self, node: cst.Call) -> None:
        flow = self.context.flow
        qualified = flow.qualified_name(node.func)
        if qualified in PER_PROCESS_DEVICE_CALLS or qualified in _PROCESS_GROUP and keyword_argument(node, "device_id") is not None:
            self._per_process = True
        elif qualified in DISTRIBUTED_DATA_PARALLEL and self._on_one_fixed_gpu(node):
            self._wrapped.append(node)

    def _on_one_fixed_gpu(self, call: cst.Call) -> bool:
        positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
        if not positional or any(arg.star for arg in call.args):
            return False
        device_ids = keyword_argument(call, "device_ids") or (positional[1] if len(positional) > 1 else None)
        if device_ids is not None and not (
                isinstance(device_ids.value, (cst.List, cst.Tuple)) and device_ids.value.elements
                and all(isinstance(element.value, cst.Integer) for element in device_ids.value.elements)):
            return False
        places = self.context.flow.value_of(positional[0].value).places
        return bool(places) and all(
            place.kind is PlaceKind.DEVICE and place.types == frozenset({"cuda"}) and place.index is not None
            for place in places or ())

    def leave_Module(self, node: cst.Module) -> None:
        if self._per_process:
            return
        for call in self._wrapped:
            self.report(call)
