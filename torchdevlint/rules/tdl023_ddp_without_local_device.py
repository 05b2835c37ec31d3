"""TDL023 ddp-without-local-device."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from torchdevlint.analysis.brains.torch_api import DISTRIBUTED_DATA_PARALLEL, INIT_PROCESS_GROUP, SPAWN
from torchdevlint.analysis.devices import string_value
from torchdevlint.analysis.flow.values import PlaceKind
from torchdevlint.analysis.tree import keyword_argument
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import DUPLICATE_GPU, RuntimeProof

# Every call the rule looks at.
_LOOKED_FOR = INIT_PROCESS_GROUP | SPAWN | DISTRIBUTED_DATA_PARALLEL
# Text of a statement that may place a model before the process group is set up.
_PLACING = (".cuda(", ".to(", "device")


@dataclass(frozen=True)
class _ProcessGroup:
    call: cst.Call
    statement: cst.SimpleStatementLine
    function: cst.FunctionDef | None
    # Set up from the environment torchrun gives (no rank given, no other init method).
    from_environment: bool


class DdpWithoutLocalDevice(Rule):
    """
    ## What it does
    Finds `DistributedDataParallel(model)` where the model is on one fixed GPU (`.cuda()`,
    `.to("cuda")`, `torch.device("cuda")`, `"cuda:0"`) and nothing gives each process a GPU
    of its own: no `torch.cuda.set_device(...)` (nor `with torch.cuda.device(...)` or
    `torch.accelerator.set_device_index(...)`) on the way to the model's move, no
    `device_ids=[local_rank]`, and nowhere in the file `init_process_group(..., device_id=...)`
    or a `CUDA_VISIBLE_DEVICES` the program sets. `device_ids` written as numbers
    (`device_ids=[0]`) names the same GPU for every process, so it counts as absent. The
    current device is followed branch by branch: a `set_device` in the `if` does not cover
    a `.cuda()` in its `else` (the ImageNet example's `else: model.cuda()` before
    `DistributedDataParallel(model)`), and one in another function, which may run first,
    leaves `.cuda()` unknown and unreported.

    ## Why is this bad?
    `torchrun` and `mp.spawn` start one process per GPU, and each process starts on GPU 0.
    A model moved with `.cuda()` or `.to("cuda")` therefore lands on GPU 0 in every
    process: all ranks share one GPU's memory and run out of it, while the other GPUs idle,
    or NCCL stops with "Duplicate GPU detected". With one process the program works, so the
    bug waits for the first multi-GPU run.

    ## Not reported
    Not reported: models moved to a device built from the rank (`.cuda(local_rank)`,
    `.to(f"cuda:{rank}")`, `torch.device("cuda", args.gpu)`), models on the CPU or on a device
    the file cannot tell, and programs that set the current device or the visible GPUs.

    ## Fix safety
    Unsafe. Where the function that wraps the model sets up the process group first, and
    nothing before that places a model, the fix sets the current device right after
    `init_process_group(...)`: to `int(os.environ["LOCAL_RANK"])` for a group set up from
    the environment (as `torchrun` starts it), or to the first parameter of a function
    `mp.spawn` starts (its process index). `.cuda()` and `"cuda"` then mean each process's
    own GPU. That assumes one node, or a local rank `torchrun` sets; elsewhere the program
    must say which variable holds the local rank, and no fix is offered.

    ## Options
    None.
    """

    code = "TDL023"
    slug = "ddp-without-local-device"
    message = "DistributedDataParallel over a model on one fixed GPU: every process uses that GPU"
    fix_title = "Set each process's current device after `init_process_group`"
    # Two ranks on two GPUs, as torchrun starts them (or as the program's `mp.spawn` does).
    proof = RuntimeProof(error=DUPLICATE_GPU, gpus=2, processes=2)
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
        Valid(
            """
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel
            def setup(local_rank):
                dist.init_process_group("nccl")
                torch.cuda.set_device(local_rank)
            def train(local_rank):
                net = torch.nn.Linear(8, 2)
                setup(local_rank)
                if local_rank >= 0:
                    net.cuda()
                    net = DistributedDataParallel(net)
                return net
            """,
            name="current-device-set-by-a-helper",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import os
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP
            def main():
                dist.init_process_group("nccl")
                model = DDP(torch.nn.Linear(8, 2).cuda())
            """,
            fixed="""
            import os
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP
            def main():
                dist.init_process_group("nccl")
                torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
                model = DDP(torch.nn.Linear(8, 2).cuda())
            """,
            applicability=Applicability.UNSAFE,
            name="moved-to-the-current-gpu",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel
            import torch.multiprocessing as mp
            device = torch.device("cuda")
            def main(gpu, world_size):
                dist.init_process_group("nccl", rank=gpu, world_size=world_size)
                model = torch.nn.Linear(8, 2).to(device)
                model = DistributedDataParallel(model, device_ids=[0])
            def evaluate():
                model = DistributedDataParallel(torch.nn.Linear(8, 2).cuda())
            if __name__ == "__main__":
                mp.spawn(main, args=(2,), nprocs=2)
            """,
            fixed="""
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel
            import torch.multiprocessing as mp
            device = torch.device("cuda")
            def main(gpu, world_size):
                dist.init_process_group("nccl", rank=gpu, world_size=world_size)
                torch.cuda.set_device(gpu)
                model = torch.nn.Linear(8, 2).to(device)
                model = DistributedDataParallel(model, device_ids=[0])
            def evaluate():
                model = DistributedDataParallel(torch.nn.Linear(8, 2).cuda())
            if __name__ == "__main__":
                mp.spawn(main, args=(2,), nprocs=2)
            """,
            applicability=Applicability.UNSAFE,
            count=2,
            name="a-spawned-worker-numbered-device-ids-and-no-process-group",
        ),
        Invalid(
            """
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel
            def train_worker(gpu, settings):
                net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
                if settings.distributed:
                    dist.init_process_group("nccl", init_method=settings.url, rank=settings.rank,
                                            world_size=settings.world_size)
                    if gpu is not None:
                        torch.cuda.set_device(gpu)
                        net.cuda(gpu)
                        net = DistributedDataParallel(net, device_ids=[gpu])
                    else:
                        net.cuda()
                        net = DistributedDataParallel(net)
                return net
            """,
            name="set-device-in-one-branch-the-move-in-the-other",
        ),
    ]

    def setup(self) -> None:
        self._wrapped: list[tuple[cst.Call, cst.FunctionDef | None]] = []
        self._per_process = False
        self._groups: list[_ProcessGroup] = []
        # ids of the functions `mp.spawn` starts.
        self._spawned: set[int] = set()

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if "CUDA_VISIBLE_DEVICES" in node.value:
            self._per_process = True

    def visit_Call(self, node: cst.Call) -> None:
        qualified = self.context.names.qualified_name(node.func, among=_LOOKED_FOR)
        if qualified in INIT_PROCESS_GROUP:
            if keyword_argument(node, "device_id") is not None:
                self._per_process = True
            else:
                self._process_group(node)
        elif qualified in SPAWN and node.args and node.args[0].keyword is None:
            reference = self.context.flow.value_of(node.args[0].value).reference
            if reference is not None and reference.definition is not None:
                self._spawned.add(reference.definition)
        elif qualified in DISTRIBUTED_DATA_PARALLEL and self._on_one_fixed_gpu(node):
            self._wrapped.append((node, self.context.enclosing_function()))

    def _process_group(self, call: cst.Call) -> None:
        statement = next((a for a in self.context.ancestors(call) if isinstance(a, cst.SimpleStatementLine)), None)
        if statement is None:
            return
        positional = [arg for arg in call.args if arg.keyword is None]
        method = keyword_argument(call, "init_method")
        from_environment = len(positional) <= 1 and keyword_argument(call, "rank") is None and (
            method is None or string_value(method.value) == "env://")
        self._groups.append(_ProcessGroup(call, statement, self.context.enclosing_function(), from_environment))

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
        fixed: set[int] = set()
        for call, function in self._wrapped:
            group = next((g for g in self._groups if g.function is function and function is not None), None)
            fix = None
            if group is not None and id(group.call) not in fixed:
                fix = self._fix(group)
                fixed.add(id(group.call))
            self.report(call, fix=fix)

    def _fix(self, group: _ProcessGroup) -> PendingFix | None:
        function = group.function
        if function is None or not isinstance(function.body, cst.IndentedBlock):
            return None
        for statement in function.body.body:
            if statement is group.statement:
                break
            if any(text in self.context.code_for_node(statement) for text in _PLACING):
                return None  # a model may be placed before the process group is set up
        else:
            return None  # set up in a nested block: where the current device should be set is unclear
        imports: list[tuple[str, str | None]] = []
        torch_name = self.context.names.local_name_for("torch")
        if torch_name is None:
            torch_name = "torch"
            imports.append(("torch", None))
        if group.from_environment:
            os_name = self.context.names.local_name_for("os")
            if os_name is None:
                os_name = "os"
                imports.append(("os", None))
            local_rank = f'int({os_name}.environ["LOCAL_RANK"])'
        elif id(function) in self._spawned and function.params.params:
            local_rank = function.params.params[0].name.value
        else:
            return None
        return self.make_fix(NodeEdit.insert_line_after(group.statement, f"{torch_name}.cuda.set_device({local_rank})"),
                             applicability=Applicability.UNSAFE, required_imports=tuple(imports))
