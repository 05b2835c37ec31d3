"""TDL030 local-rank-as-global-rank."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.brains.torch_api import DISTRIBUTED_SAMPLERS, INIT_PROCESS_GROUP
from torchdevlint.analysis.flow.results import Held
from torchdevlint.analysis.process_groups import ProcessGroups
from torchdevlint.analysis.tree import keyword_argument
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import RuntimeProof

_LOOKED_FOR = INIT_PROCESS_GROUP | DISTRIBUTED_SAMPLERS


class LocalRankAsGlobalRank(Rule):
    """
    ## What it does
    Finds the local rank of a distributed program (the launcher's `LOCAL_RANK`, also
    `SLURM_LOCALID`, `OMPI_COMM_WORLD_LOCAL_RANK`, `MPI_LOCALRANKID`, or `hvd.local_rank()`)
    passed where the rank among all processes belongs: `init_process_group(rank=...)` and
    `DistributedSampler(rank=...)`, on its way through names, `int(...)` and the file's own
    functions.

    ## Why is this bad?
    The local rank numbers the processes of one machine: every machine of the job has a
    process 0. As the rank of the process group, two processes claim the same rank and the
    group does not form (it hangs, or fails with a duplicate rank). As a sampler's rank, every
    machine reads the same shard of the data and the rest is never seen. On one machine local
    and global ranks are equal, so the program works until it first runs on several.

    ## Not reported
    Not reported: the global rank (`RANK`, `dist.get_rank()`), a local rank used as a GPU
    index (which is right: TDL028 is about the reverse), and programs whose process group
    takes its rank straight from the index `mp.spawn` gives (one machine by construction).

    ## Fix safety
    The fix passes the launcher's global rank, read from the variable beside the local one
    (`int(os.environ["RANK"])` for `LOCAL_RANK`, `hvd.rank()` for `hvd.local_rank()`). On one
    machine it is the same number. It is unsafe: a launcher that sets the local rank but not
    the global one would now fail where the program started.

    ## Options
    None.
    """

    code = "TDL030"
    slug = "local-rank-as-global-rank"
    message = "The local rank used as the rank among all processes: on several machines, ranks collide"
    fix_title = "Pass the global rank"
    proof = RuntimeProof(not_emulated="processes on several machines")
    requires_any_text = ("LOCAL", "local_rank", "LOCALID")

    VALID = [
        Valid(
            """
            import os
            import torch
            import torch.distributed as dist
            local_rank = int(os.environ["LOCAL_RANK"])
            dist.init_process_group("nccl", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
            torch.cuda.set_device(local_rank)
            """,
            name="global-rank-for-the-group-local-rank-for-the-gpu",
        ),
        Valid(
            """
            import os
            import torch.distributed as dist
            import torch.multiprocessing as mp
            def worker(local_rank, world_size):
                os.environ["LOCAL_RANK"] = str(local_rank)
                dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29500", rank=local_rank, world_size=world_size)
            if __name__ == "__main__":
                mp.spawn(worker, args=(4,), nprocs=4)
            """,
            name="one-machine-by-construction",
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
            import os
            import torch.distributed as dist
            from torch.utils.data import DistributedSampler
            local_rank = int(os.getenv("LOCAL_RANK", "0"))
            world_size = int(os.getenv("WORLD_SIZE", "1"))
            dist.init_process_group("nccl", rank=local_rank, world_size=world_size)
            sampler = DistributedSampler(range(100), num_replicas=world_size, rank=local_rank)
            """,
            fixed="""
            import os
            import torch.distributed as dist
            from torch.utils.data import DistributedSampler
            local_rank = int(os.getenv("LOCAL_RANK", "0"))
            world_size = int(os.getenv("WORLD_SIZE", "1"))
            dist.init_process_group("nccl", rank=int(os.environ["RANK"]), world_size=world_size)
            sampler = DistributedSampler(range(100), num_replicas=world_size, rank=int(os.environ["RANK"]))
            """,
            applicability=Applicability.UNSAFE,
            count=2,
            name="the-launchers-local-rank-for-the-group-and-the-sampler",
            in_docs=True,
        ),
        Invalid(
            """
            import horovod.torch as hvd
            from torch.utils.data.distributed import DistributedSampler
            hvd.init()
            sampler = DistributedSampler(range(100), num_replicas=hvd.size(), rank=hvd.local_rank())
            """,
            fixed="""
            import horovod.torch as hvd
            from torch.utils.data.distributed import DistributedSampler
            hvd.init()
            sampler = DistributedSampler(range(100), num_replicas=hvd.size(), rank=hvd.rank())
            """,
            applicability=Applicability.UNSAFE,
            name="horovods-local-rank-for-the-sampler",
        ),
    ]

    def setup(self) -> None:
        self._found: list[cst.BaseExpression] = []
        self._groups = self.context.shared(ProcessGroups)

    def visit_Call(self, node: cst.Call) -> None:
        qualified = self.context.names.qualified_name(node.func, among=_LOOKED_FOR)
        if qualified is None:
            return
        rank = keyword_argument(node, "rank")
        flow = self.context.flow
        if rank is not None and flow.holds(flow.value_of(rank.value), Held.LOCAL_RANK):
            self._found.append(rank.value)

    def leave_Module(self, node: cst.Module) -> None:
        if self._groups.one_machine_by_construction():
            return
        for expression in self._found:
            self.report(expression, fix=self._fix(expression))

    def _fix(self, expression: cst.BaseExpression) -> PendingFix | None:
        flow = self.context.flow
        read = flow.held_expressions(flow.value_of(expression), Held.LOCAL_RANK)
        if len(read) != 1:
            return None
        (source,) = read
        code = self.context.code_for_node(source)
        if type(source) is cst.Call and type(source.func) is cst.Attribute and source.func.attr.value == "local_rank":
            return self.make_fix(NodeEdit(expression, f"{self.context.code_for_node(source.func.value)}.rank()"),
                                 applicability=Applicability.UNSAFE)
        if "LOCAL_RANK" not in code:
            return None  # Slurm, Open MPI: their global rank has another name
        os_name = self.context.names.local_name_for("os")
        imports: tuple[tuple[str, str | None], ...] = ()
        if os_name is None:
            os_name, imports = "os", (("os", None),)
        return self.make_fix(NodeEdit(expression, f'int({os_name}.environ["RANK"])'),
                             applicability=Applicability.UNSAFE, required_imports=imports)
