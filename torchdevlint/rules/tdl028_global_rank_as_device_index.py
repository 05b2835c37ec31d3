"""TDL028 global-rank-as-device-index."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.brains.torch_api import (
    CUDA_DEVICE_CONTEXT,
    SET_CUDA_DEVICE,
    TORCH_DEVICE,
    WRAPPERS,
)
from torchdevlint.analysis.devices import string_value
from torchdevlint.analysis.flow.results import Held
from torchdevlint.analysis.process_groups import ProcessGroups
from torchdevlint.analysis.tree import first_argument, keyword_argument
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import INVALID_DEVICE_ORDINAL, RuntimeProof

_INDEX_TAKERS = SET_CUDA_DEVICE | {CUDA_DEVICE_CONTEXT}
_LOOKED_FOR = _INDEX_TAKERS | {TORCH_DEVICE} | WRAPPERS
_CUDA_PREFIX = "cuda:"


class GlobalRankAsDeviceIndex(Rule):
    """
    ## What it does
    Finds the global rank of a distributed program used as a GPU index:
    `torch.cuda.set_device(dist.get_rank())`, `.cuda(rank)`, `torch.device("cuda", rank)`,
    `f"cuda:{rank}"`, `device_ids=[rank]`, where `rank` is what `dist.get_rank()`,
    `hvd.rank()` or the launcher's `RANK` variable (also `SLURM_PROCID`,
    `OMPI_COMM_WORLD_RANK`, `PMI_RANK`) gave, on its way through names, `int(...)` and the
    file's own functions.

    ## Why is this bad?
    The global rank numbers the processes of every machine in the job: on the second of two
    8-GPU machines it runs from 8 to 15. Used as a GPU index there, it names a GPU the machine
    does not have, and CUDA stops with "invalid device ordinal". On one machine the global rank
    equals the local one, so the program works until it first runs on several.

    ## Not reported
    Not reported: the local rank (`LOCAL_RANK`, `hvd.local_rank()`, `args.local_rank`), the
    index `mp.spawn` gives each process, the rank taken modulo the GPU count (`rank %
    torch.cuda.device_count()`), ranks used for anything but a device (`if rank == 0:`,
    samplers, seeds), and programs whose process group takes its rank straight from the index
    `mp.spawn` gives (one machine by construction).

    ## Fix safety
    The fix takes the rank modulo the number of GPUs the machine has (`rank %
    torch.cuda.device_count()`), which is the local rank where every machine runs one process
    per GPU and the launcher numbers each machine's processes together, as `torchrun` does.
    On one machine it is the same index as before. It is unsafe: with fewer GPUs than
    processes on a machine it shares GPUs where the original failed, and another launcher may
    number the processes otherwise; `int(os.environ["LOCAL_RANK"])` is the launcher's own
    answer where it sets one.

    ## Options
    None.
    """

    code = "TDL028"
    slug = "global-rank-as-device-index"
    message = "The global rank used as a GPU index: on a second machine it names a GPU that is not there"
    fix_title = "Take the rank modulo the GPU count"
    # The second of two machines with two GPUs each: ranks 2 and 3 name GPUs it does not have.
    proof = RuntimeProof(error=INVALID_DEVICE_ORDINAL, gpus=2, processes=2, nodes=2)
    requires_any_text = ("rank", "RANK", "PROCID")

    VALID = [
        Valid(
            """
            import os
            import torch
            import torch.distributed as dist
            dist.init_process_group("nccl")
            local_rank = int(os.environ["LOCAL_RANK"])
            torch.cuda.set_device(local_rank)
            model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2).cuda(), device_ids=[local_rank])
            if dist.get_rank() == 0:
                torch.save(model.module.state_dict(), "model.pt")
            """,
            name="the-local-rank-and-a-rank-for-logging",
        ),
        Valid(
            """
            import torch
            import torch.distributed as dist
            def setup():
                dist.init_process_group("nccl")
                rank = dist.get_rank()
                device = rank % torch.cuda.device_count()
                torch.cuda.set_device(device)
                torch.manual_seed(1234 + rank)
                return device
            """,
            name="the-rank-modulo-the-gpu-count",
        ),
        Valid(
            """
            import torch
            import torch.distributed as dist
            import torch.multiprocessing as mp
            def worker(gpu, world_size):
                dist.init_process_group("nccl", init_method="tcp://127.0.0.1:23456", rank=gpu, world_size=world_size)
                rank = dist.get_rank()
                model = torch.nn.Linear(8, 2).cuda(rank)
            if __name__ == "__main__":
                mp.spawn(worker, args=(torch.cuda.device_count(),), nprocs=torch.cuda.device_count())
            """,
            name="one-machine-by-construction",
        ),
        Valid(
            """
            import argparse
            import os
            import torch
            import horovod.torch as hvd
            parser = argparse.ArgumentParser()
            parser.add_argument("--local_rank", type=int, default=0)
            args = parser.parse_args()
            torch.cuda.set_device(args.local_rank)
            hvd.init()
            device = torch.device(f"cuda:{hvd.local_rank()}")
            rank = int(os.environ["RANK"])
            sampler_seed = rank
            """,
            name="local-ranks-from-the-launcher",
        ),
        Valid(
            """
            import os
            import torch
            import torch.distributed as dist
            def init_distributed(settings):
                if "RANK" in os.environ:
                    settings["rank"] = int(os.environ["RANK"])
                    settings["gpu"] = int(os.environ["LOCAL_RANK"])
                elif "SLURM_PROCID" in os.environ:
                    settings["rank"] = int(os.environ["SLURM_PROCID"])
                    settings["gpu"] = settings["rank"] % torch.cuda.device_count()
                else:
                    return
                torch.cuda.set_device(settings["gpu"])
                dist.init_process_group("nccl", world_size=settings["world_size"], rank=settings["rank"])
            """,
            name="ranks-kept-in-a-dict-of-settings",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch.distributed as dist
            dist.init_process_group(backend="nccl")
            local_rank = dist.get_rank()
            torch.cuda.set_device(local_rank)
            model = torch.nn.Linear(8, 2).cuda()
            """,
            fixed="""
            import torch
            import torch.distributed as dist
            dist.init_process_group(backend="nccl")
            local_rank = dist.get_rank()
            torch.cuda.set_device(local_rank % torch.cuda.device_count())
            model = torch.nn.Linear(8, 2).cuda()
            """,
            applicability=Applicability.UNSAFE,
            name="set-device-to-the-global-rank",
            in_docs=True,
        ),
        Invalid(
            """
            import os
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel
            def rank_from_launcher():
                return int(os.environ["RANK"])
            def build(net):
                dist.init_process_group("nccl")
                rank = rank_from_launcher()
                net = net.to(f"cuda:{rank}")
                return DistributedDataParallel(net, device_ids=[rank])
            """,
            fixed="""
            import os
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel
            import torch

            def rank_from_launcher():
                return int(os.environ["RANK"])
            def build(net):
                dist.init_process_group("nccl")
                rank = rank_from_launcher()
                net = net.to(f"cuda:{rank % torch.cuda.device_count()}")
                return DistributedDataParallel(net, device_ids=[rank % torch.cuda.device_count()])
            """,
            applicability=Applicability.UNSAFE,
            count=2,
            name="the-launchers-rank-through-a-helper",
        ),
        Invalid(
            """
            import torch
            import torch.distributed as dist
            def to_my_gpu(batch):
                device = "cuda:" + str(dist.get_rank())
                return batch.to(device), "cuda:{}".format(dist.get_rank())
            """,
            fixed="""
            import torch
            import torch.distributed as dist
            def to_my_gpu(batch):
                device = "cuda:" + str(dist.get_rank() % torch.cuda.device_count())
                return batch.to(device), "cuda:{}".format(dist.get_rank() % torch.cuda.device_count())
            """,
            applicability=Applicability.UNSAFE,
            count=2,
            name="device-strings-built-from-the-rank",
        ),
        Invalid(
            """
            import torch
            import horovod.torch as hvd
            hvd.init()
            device = torch.device("cuda", hvd.rank())
            """,
            fixed="""
            import torch
            import horovod.torch as hvd
            hvd.init()
            device = torch.device("cuda", hvd.rank() % torch.cuda.device_count())
            """,
            applicability=Applicability.UNSAFE,
            name="horovods-global-rank",
        ),
    ]

    def setup(self) -> None:
        # Each global rank used as an index, and whether it is an operand (`"cuda:%d" % rank`).
        self._found: list[tuple[cst.BaseExpression, bool]] = []
        self._groups = self.context.shared(ProcessGroups)

    def visit_Call(self, node: cst.Call) -> None:
        qualified = self.context.names.qualified_name(node.func, among=_LOOKED_FOR)
        if qualified in _INDEX_TAKERS:
            self._check(first_argument(node, "device"))
        elif qualified == TORCH_DEVICE:
            positional = [arg for arg in node.args if arg.keyword is None and not arg.star]
            index = keyword_argument(node, "index")
            self._check(index.value if index is not None else positional[-1].value if positional else None)
        elif qualified in WRAPPERS:
            ids = keyword_argument(node, "device_ids")
            if ids is not None and isinstance(ids.value, (cst.List, cst.Tuple)):
                for element in ids.value.elements:
                    self._check(element.value)
            output = keyword_argument(node, "output_device")
            self._check(output.value if output is not None else None)
        elif type(node.func) is cst.Attribute and node.func.attr.value in ("cuda", "to"):
            self._check(first_argument(node, "device"))
        elif type(node.func) is cst.Attribute and node.func.attr.value == "format" \
                and (string_value(node.func.value) or "").startswith(_CUDA_PREFIX):
            for arg in node.args:
                self._check(arg.value)

    def visit_FormattedString(self, node: cst.FormattedString) -> None:
        # `f"cuda:{rank}"`: the part right after the prefix is the index.
        for before, part in zip(node.parts, node.parts[1:], strict=False):
            if type(before) is cst.FormattedStringText and before.value.endswith(_CUDA_PREFIX) \
                    and type(part) is cst.FormattedStringExpression:
                self._check(part.expression)

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        # `"cuda:%d" % rank` and `"cuda:" + str(rank)`.
        if (string_value(node.left) or "").startswith(_CUDA_PREFIX) and type(node.operator) in (cst.Modulo, cst.Add):
            right = node.right
            if type(right) is cst.Tuple:
                for element in right.elements:
                    self._check(element.value)
            else:
                self._check(right, operand=True)

    def _check(self, expression: cst.BaseExpression | None, *, operand: bool = False) -> None:
        if expression is None:
            return
        flow = self.context.flow
        if flow.holds(flow.value_of(expression), Held.GLOBAL_RANK):
            self._found.append((expression, operand))

    def leave_Module(self, node: cst.Module) -> None:
        if self._groups.one_machine_by_construction():
            return
        reported: set[int] = set()
        for expression, operand in self._found:
            if id(expression) not in reported:
                reported.add(id(expression))
                self.report(expression, fix=self._fix(expression, operand))

    def _fix(self, expression: cst.BaseExpression, operand: bool) -> PendingFix:
        # `"cuda:" + str(rank)`: the number inside `str(...)` is the one to take modulo.
        target = expression
        while type(target) is cst.Call and type(target.func) is cst.Name and target.func.value == "str" \
                and len(target.args) == 1:
            target = target.args[0].value
        imports: tuple[tuple[str, str | None], ...] = ()
        torch_name = self.context.names.local_name_for("torch")
        if torch_name is None:
            torch_name = "torch"
            imports = (("torch", None),)
        text = self.context.code_for_node(target)
        if not isinstance(target, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)):
            text = f"({text})"
        modulo = f"{text} % {torch_name}.cuda.device_count()"
        if operand and target is expression:
            modulo = f"({modulo})"  # `"cuda:%d" % rank` reads left to right
        return self.make_fix(NodeEdit(target, modulo),
                             applicability=Applicability.UNSAFE, required_imports=imports)

