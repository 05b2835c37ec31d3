"""TDL201 dataparallel-over-ddp."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.brains import torch_api
from torchdevlint.rule import Invalid, Rule, Valid

# The functional form replicates, scatters, applies and gathers in one call.
_DATA_PARALLEL = torch_api.DATA_PARALLEL | torch_api.DATA_PARALLEL_FUNCTIONS


class DataParallelOverDdp(Rule):
    """
    ## What it does
    Finds models wrapped in `nn.DataParallel` (under any alias, or the functional
    `torch.nn.parallel.data_parallel`), and classes derived from it.

    This is information, not a bug: the rule is off by default. Enable it with
    `extend-select = ["TDL201"]` when moving a code base to `DistributedDataParallel`.

    ## Why is this bad?
    PyTorch recommends `DistributedDataParallel` "instead of this class, to do multi-GPU
    training, even if there is only a single node". `DataParallel` runs one process with a
    thread per GPU: it copies the model to every GPU on every forward, gathers outputs and
    gradients on the first GPU (whose memory then limits the batch size), and contends for
    the GIL, so it scales poorly and is often slower than one GPU. DDP runs a process per
    GPU and overlaps the gradient all-reduce with the backward pass. `DataParallel` also
    prefixes state dict keys with `module.` (see TDL004) and does not work with most newer
    features (`torch.compile`, FSDP, mixed-device models).

    ## Fix safety
    No fix: DDP needs a launcher, a process group and a distributed sampler, which are
    changes to how the program is run, not to one line.

    ## Options
    None.
    """

    code = "TDL201"
    slug = "dataparallel-over-ddp"
    message = "nn.DataParallel is slower than DistributedDataParallel, which PyTorch recommends even on one machine"
    default_enabled = False
    requires_any_text = ("DataParallel", "data_parallel")

    VALID = [
        Valid(
            """
            import os

            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel

            # launched with `torchrun --nproc-per-node=NUM_GPUS train.py`
            dist.init_process_group("nccl")
            local_rank = int(os.environ["LOCAL_RANK"])
            torch.cuda.set_device(local_rank)
            model = DistributedDataParallel(model.cuda(local_rank), device_ids=[local_rank])
            # and a DistributedSampler for the DataLoader
            """,
            name="documented-distributed-data-parallel",
            in_docs=True,
        ),
        Valid(
            """
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(model.cuda(rank), device_ids=[rank])
            if isinstance(model, torch.nn.DataParallel):
                model = model.module
            """,
            name="ddp-and-isinstance-checks",
        ),
    ]
    INVALID = [
        Invalid(
            """
            from torch import nn

            model = nn.DataParallel(model).cuda()
            """,
            name="documented-dataparallel",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            if torch.cuda.device_count() > 1:
                model = nn.DataParallel(model)
            """,
            name="wrapped-when-several-gpus",
        ),
        Invalid(
            """
            from torch.nn.parallel import DataParallel as DP, data_parallel
            model = DP(model, device_ids=[0, 1]).cuda()
            out = data_parallel(net, inputs, device_ids=[0, 1])
            """,
            count=2,
            name="aliases-and-functional-form",
        ),
        Invalid(
            """
            import torch.nn as nn
            class Parallel(nn.DataParallel):
                def __getattr__(self, name):
                    try:
                        return super().__getattr__(name)
                    except AttributeError:
                        return getattr(self.module, name)
            """,
            name="subclass",
        ),
    ]

    def _is_data_parallel(self, node: cst.BaseExpression) -> bool:
        return self.context.names.qualified_name(node, among=_DATA_PARALLEL) is not None

    def visit_Call(self, node: cst.Call) -> None:
        if self._is_data_parallel(node.func):
            self.report(node)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        for base in node.bases:
            if base.keyword is None and self._is_data_parallel(base.value):
                self.report(base)
