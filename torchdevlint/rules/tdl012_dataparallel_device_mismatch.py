"""TDL012 dataparallel-device-mismatch."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.brains import naming, torch_api
from torchdevlint.analysis.command_line import CommandLine
from torchdevlint.analysis.flow.values import Wrapping
from torchdevlint.analysis.tree import keyword_argument
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import DEVICE_MISMATCH, RuntimeProof


class DataParallelDeviceMismatch(Rule):
    """
    ## What it does
    Finds a model moved to one GPU and wrapped in `nn.DataParallel` whose `device_ids` start
    at another: typically `model.to("cuda:1")` (or `.cuda(1)`, or `torch.device("cuda", 1)`)
    followed by `nn.DataParallel(model)` without `device_ids`, which then uses every GPU from
    `cuda:0`. Also a wrapper moved afterwards (`nn.DataParallel(model).to("cuda:1")`).
    Reported at the `DataParallel(...)` call, or at the later move. Devices count where the
    flow model knows which GPU they are: a literal (`"cuda:1"`, `torch.device("cuda", 1)`),
    a variable or a same-file helper holding one, `.cuda()` after `torch.cuda.set_device(1)`.
    `device_ids` count when written as a list, `range(...)` or None.

    Also `device_ids` read from a command-line option (`device_ids=args.gpus`) around a
    model moved to the current GPU with `.cuda()` or `.to("cuda")`, before wrapping or after
    (`model = nn.DataParallel(net, device_ids=args.gpus)`, then `model.cuda()`), in a project
    none of whose files chooses the current GPU (`torch.cuda.set_device(args.gpus[0])`, `with
    torch.cuda.device(...)`) or the GPUs the process sees (`CUDA_VISIBLE_DEVICES`): the model
    is on GPU 0 whatever the option says. The project is read as for TDL003.

    ## Why is this bad?
    `DataParallel` keeps the master copy of the module on `device_ids[0]` and checks it on
    every forward pass: the first batch fails with "RuntimeError: module must have its
    parameters and buffers on device cuda:0 (device_ids[0]) but found one of them on device:
    cuda:1". On a single-GPU or CPU-only machine nothing happens, so the bug shows only on the
    multi-GPU box.

    ## Fix safety
    Where `device_ids` is not given and the model is on `cuda:N` (N > 0), the fix passes
    `device_ids=list(range(N, torch.cuda.device_count()))`: the GPUs from the model's onwards,
    leaving the ones before it alone, as moving the model there suggests. Unsafe: it changes
    which GPUs the program uses, and with a single GPU past N it no longer splits batches.
    Explicit `device_ids` that disagree with the model, and a wrapper moved after wrapping,
    get no fix: which side is wrong is a choice. `device_ids` from an option around a wrapper
    moved after wrapping get `torch.cuda.set_device(<option>[0])` before the wrapping: the
    model, and everything the program later moves with `.cuda()`, go to the option's first
    GPU. Unsafe: it changes the current GPU of the whole process.

    ## Options
    None.
    """

    code = "TDL012"
    slug = "dataparallel-device-mismatch"
    message = "Model is on a different GPU than DataParallel's device_ids[0]; the first forward fails"
    fix_title = "Pass device_ids starting at the model's GPU"
    # A module on one GPU, DataParallel's device_ids from another: room for both and the rest.
    proof = RuntimeProof(DEVICE_MISMATCH, gpus=4)
    requires_any_text = ("DataParallel",)

    VALID = [
        Valid(
            """
            import torch.nn as nn
            model = nn.Linear(2, 2).to("cuda:1")
            model = nn.DataParallel(model, device_ids=[1, 2])
            other = nn.DataParallel(nn.Linear(2, 2).cuda(), device_ids=[0, 1])
            plain = nn.DataParallel(nn.Linear(2, 2).to("cuda"))
            """,
            name="device-ids-start-at-the-model-device",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            def wrap(model, device, gpus):
                model = model.to(device)
                return nn.DataParallel(model, device_ids=gpus)
            model = nn.Linear(2, 2).to("cuda:1")
            model = nn.parallel.DistributedDataParallel(model, device_ids=[1])
            torch.cuda.set_device(rank)
            replicas = nn.DataParallel(nn.Linear(2, 2).cuda(), device_ids=[1, 2])
            """,
            name="unknown-devices-and-ddp",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            with torch.cuda.device(1):
                model = nn.Linear(2, 2).cuda()
            model = nn.DataParallel(model, device_ids=[1, 2])
            if local:
                torch.cuda.set_device(2)
            other = nn.DataParallel(nn.Linear(2, 2).cuda())
            """,
            name="current-device-set-for-a-block-or-on-one-path",
        ),
        Valid(
            """
            import argparse
            import torch
            import torch.nn as nn

            def train(args):
                torch.cuda.set_device(args.gpus[0])
                model = nn.DataParallel(nn.Linear(4, 4), device_ids=args.gpus)
                model.cuda()
                ranked = nn.DataParallel(nn.Linear(4, 4).cuda(), device_ids=args.ranks)

            parser = argparse.ArgumentParser()
            parser.add_argument("--gpus", type=int, nargs="+", default=[0, 1])
            train(parser.parse_args())
            """,
            name="option-device-ids-with-the-current-gpu-set-from-them",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            from torch import nn

            model = Net().to("cuda:1")
            model = nn.DataParallel(model)
            """,
            fixed="""
            import torch
            from torch import nn

            model = Net().to("cuda:1")
            model = nn.DataParallel(model, device_ids=list(range(1, torch.cuda.device_count())))
            """,
            applicability=Applicability.UNSAFE,
            name="documented-model-on-cuda-1-wrapped",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            device = torch.device("cuda:1")
            model = nn.Sequential(nn.Linear(8, 8)).to(device)
            if torch.cuda.device_count() > 1:
                model = nn.DataParallel(model)
            """,
            fixed="""
            import torch
            import torch.nn as nn
            device = torch.device("cuda:1")
            model = nn.Sequential(nn.Linear(8, 8)).to(device)
            if torch.cuda.device_count() > 1:
                model = nn.DataParallel(model, device_ids=list(range(1, torch.cuda.device_count())))
            """,
            applicability=Applicability.UNSAFE,
            name="moved-to-cuda-1-then-wrapped",
        ),
        Invalid(
            """
            import torch
            from torch.nn import DataParallel, Linear
            net = DataParallel(Linear(4, 4).cuda(2), device_ids=[0, 1, 2])
            wrapped = DataParallel(Linear(4, 4), device_ids=[1, 2]).cuda()
            """,
            count=2,
            name="device-ids-elsewhere-and-wrapper-moved",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            def build():
                net = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
                return net.to(torch.device("cuda", 2))

            def main():
                torch.cuda.set_device(1)
                encoder = nn.Linear(8, 8).cuda()
                encoder = nn.DataParallel(encoder, device_ids=[0, 1])
                head = build()
                head = nn.DataParallel(head, device_ids=[0, 1])
            """,
            count=2,
            name="current-device-set-and-a-helper-that-places-the-model",
        ),
        Invalid(
            """
            from torch import nn
            net = nn.DataParallel(nn.Linear(4, 4).to("cuda:1"))
            """,
            fixed="""
            from torch import nn
            import torch

            net = nn.DataParallel(nn.Linear(4, 4).to("cuda:1"), device_ids=list(range(1, torch.cuda.device_count())))
            """,
            applicability=Applicability.UNSAFE,
            name="fix-adds-the-torch-import",
        ),
        Invalid(
            """
            import argparse
            import torch
            import torch.nn as nn

            def train(args):
                model = nn.DataParallel(nn.Linear(4, 4), device_ids=args.gpus)
                model.cuda()
                encoder = nn.Linear(4, 4).cuda()
                encoder = nn.DataParallel(encoder, device_ids=args.gpu_ids)

            parser = argparse.ArgumentParser()
            parser.add_argument("--gpus", type=int, nargs="+", default=[0, 1])
            parser.add_argument("--gpu_ids", type=int, nargs="+", default=[0])
            train(parser.parse_args())
            """,
            fixed="""
            import argparse
            import torch
            import torch.nn as nn

            def train(args):
                torch.cuda.set_device(args.gpus[0])
                model = nn.DataParallel(nn.Linear(4, 4), device_ids=args.gpus)
                model.cuda()
                encoder = nn.Linear(4, 4).cuda()
                encoder = nn.DataParallel(encoder, device_ids=args.gpu_ids)

            parser = argparse.ArgumentParser()
            parser.add_argument("--gpus", type=int, nargs="+", default=[0, 1])
            parser.add_argument("--gpu_ids", type=int, nargs="+", default=[0])
            train(parser.parse_args())
            """,
            applicability=Applicability.UNSAFE,
            count=2,
            name="device-ids-from-an-option-around-a-model-on-gpu-0",
        ),
    ]

    def setup(self) -> None:
        # Wrappers whose device_ids come from an option, by the name bound to them: (the
        # wrapping call, the option read).
        self._wrapped_with_option_ids: dict[str, tuple[cst.Call, cst.BaseExpression]] = {}

    def leave_Call(self, node: cst.Call) -> None:
        flow = self.context.flow
        if self.context.names.qualified_name(node.func, among=torch_api.DATA_PARALLEL) is not None:
            module = keyword_argument(node, "module")
            positional = [arg.value for arg in node.args if arg.keyword is None]
            target = module.value if module is not None else (positional[0] if positional else None)
            ids = keyword_argument(node, "device_ids")
            ids_value = ids.value if ids is not None else (positional[1] if len(positional) > 1 else None)
            placed = flow.value_of(target).cuda_index if target is not None else None
            if ids_value is not None and self._read_from_an_option(ids_value):
                if placed == 0 and not self.context.project_selects_a_gpu():
                    self._report_option_ids(node, ids_value, None)
                elif placed is None:
                    bound = self._bound_name(node)
                    if bound is not None:
                        self._wrapped_with_option_ids[bound] = (node, ids_value)
                return
            wrapper = flow.value_of(node)
            first = wrapper.device.index if wrapper.device is not None else None
            if first is not None and placed is not None and first != placed:
                self.report(node, fix=self._fix(node, placed))
            return
        # `DataParallel(...).to(...)` and `wrapper.cuda(n)`: the wrapper moved after wrapping.
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in ("to", "cuda"):
            receiver = node.func.value
            option_wrapped = self._wrapped_with_option_ids.get(receiver.value) if isinstance(receiver, cst.Name) else None
            if option_wrapped is not None and flow.value_of(node).cuda_index == 0 \
                    and not self.context.project_selects_a_gpu():
                wrapping, ids_value = option_wrapped
                self._report_option_ids(wrapping, ids_value, node)
                return
            wrapper = flow.value_of(node.func.value)
            if wrapper.wrapping is not Wrapping.YES or wrapper.device is None:
                return
            first = wrapper.device.index
            placed = flow.value_of(node).cuda_index
            if first is not None and placed is not None and first != placed:
                self.report(node)

    def _read_from_an_option(self, ids: cst.BaseExpression) -> bool:
        """`args.gpus`, `opt.gpu_ids`: device ids the command line gives."""
        if not isinstance(ids, cst.Attribute) or not isinstance(ids.value, cst.Name):
            return False
        if not self.context.shared(CommandLine).is_namespace(ids.value.value):
            return False
        return bool(set(naming.words(ids.attr.value)) & (naming.GPU_WORDS | {"device", "devices", "ids"}))

    def _bound_name(self, call: cst.Call) -> str | None:
        assign = self.context.parents.get(id(call))
        if isinstance(assign, cst.Assign) and assign.value is call and len(assign.targets) == 1 \
                and isinstance(assign.targets[0].target, cst.Name):
            return assign.targets[0].target.value
        return None

    def _report_option_ids(self, wrapping: cst.Call, ids: cst.BaseExpression, move: cst.Call | None) -> None:
        written = self.context.code_for_node(ids)
        if move is None:
            message = (f"device_ids comes from {written}, but the model is on GPU 0: unless {written} starts at "
                       f"GPU 0, the model is not on device_ids[0] and the first forward fails")
        else:
            message = (f"This moves the model to GPU 0, but its DataParallel's device_ids come from {written}: unless "
                       f"{written} starts at GPU 0, the model is not on device_ids[0] and the first forward fails")
        self.report(wrapping if move is None else move, message=message,
                    fix=self._select_fix(wrapping, ids) if move is not None else None)

    def _select_fix(self, wrapping: cst.Call, ids: cst.BaseExpression) -> PendingFix | None:
        """`torch.cuda.set_device(args.gpus[0])` before the line that wraps the model."""
        statement = self.context.parents.get(id(self.context.parents.get(id(wrapping))))
        if not isinstance(statement, cst.SimpleStatementLine):
            return None
        torch_name = self.context.names.local_name_for("torch")
        if torch_name is None:
            return None
        return self.make_fix(
            NodeEdit.insert_line_before(statement, f"{torch_name}.cuda.set_device({self.context.code_for_node(ids)}[0])"),
            applicability=Applicability.UNSAFE)

    def _fix(self, call: cst.Call, placed: int) -> PendingFix | None:
        """No device_ids: use the GPUs from the model's onwards (the ones not left to others)."""
        if placed == 0 or len([a for a in call.args if a.keyword is None]) > 1 or keyword_argument(call, "device_ids"):
            return None
        if any(arg.star for arg in call.args):
            return None
        torch_name = self.context.names.local_name_for("torch")
        imports: tuple[tuple[str, str | None], ...] = ()
        if torch_name is None:
            torch_name, imports = "torch", (("torch", None),)
        ids = f"list(range({placed}, {torch_name}.cuda.device_count()))"
        return self.make_fix(
            NodeEdit.insert_after(call.args[-1].value, f", device_ids={ids}"),
            applicability=Applicability.UNSAFE,
            required_imports=imports,
        )
