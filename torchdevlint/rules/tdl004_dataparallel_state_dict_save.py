"""TDL004 dataparallel-state-dict-save."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis import torch_api
from torchdevlint.analysis.names import dotted_name
from torchdevlint.analysis.value_kinds import Wrapping
from torchdevlint.diagnostics import Applicability
from torchdevlint.rule import Invalid, NodeEdit, PendingFix, Rule, Valid

# Nodes a state dict may pass through on its way into a saved object.
_CONTAINERS = (cst.Dict, cst.DictElement, cst.List, cst.Tuple, cst.Element, cst.Arg)

_Found = tuple[cst.Call, "PendingFix | None"]


def _helper_name(call: cst.Call) -> str | None:
    """`save_checkpoint(...)` or `self.save_checkpoint(...)`: a candidate saver helper."""
    func = call.func
    if isinstance(func, cst.Name):
        return func.value
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
        return func.attr.value
    return None


class DataParallelStateDictSave(Rule):
    """
    ## What it does
    Finds `model.state_dict()` reaching `torch.save` (directly, inside a dict or list, or
    through a variable such as a checkpoint dict) when `model` is, or may be, wrapped in
    `nn.DataParallel` or `DistributedDataParallel`, for instance under
    `if torch.cuda.device_count() > 1:`. Reported at the `.state_dict()` call.

    ## Why is this bad?
    A wrapper's state dict prefixes every key with `module.`. Loading the file into the bare
    model (for inference, on one GPU, on a CPU) then fails with "Missing key(s) in
    state_dict: "weight" … Unexpected key(s) in state_dict: "module.weight"", and with
    `strict=False` it silently loads nothing.

    Not reported: `model.module.state_dict()`, or an unwrap helper such as
    `getattr(model, "module", model)` or `model.module if hasattr(model, "module") else model`.

    ## Example
    ```python
    model = nn.DataParallel(model)
    torch.save(model.state_dict(), "model.pt")
    ```

    ## Use instead
    ```python
    model = nn.DataParallel(model)
    torch.save(model.module.state_dict(), "model.pt")
    ```

    ## Fix safety
    Safe. A surely wrapped model gets `.module`; a maybe wrapped one gets
    `getattr(model, "module", model)`, which is the bare model in both cases. The saved keys
    lose the `module.` prefix, which is what any loader of a bare model expects.

    ## Options
    None.
    """

    code = "TDL004"
    slug = "dataparallel-state-dict-save"
    message = "state_dict() of a DataParallel/DDP-wrapped model is saved with 'module.'-prefixed keys"
    fix_title = "Save the unwrapped model's state_dict()"

    VALID = [
        Valid(
            """
            import torch
            import torch.nn as nn
            model = nn.DataParallel(nn.Linear(2, 2))
            torch.save(model.module.state_dict(), "a.pt")
            bare = model.module if hasattr(model, "module") else model
            torch.save(bare.state_dict(), "b.pt")
            torch.save(getattr(model, "module", model).state_dict(), "c.pt")
            raw_model = model.module if distributed else model
            torch.save(raw_model.state_dict(), "d.pt")
            """,
            name="unwrapped-before-saving",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            model = nn.Linear(2, 2)
            torch.save(model.state_dict(), "a.pt")
            """,
            name="never-wrapped",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            model = nn.DataParallel(nn.Linear(2, 2))
            snapshot = model.state_dict()
            print(len(snapshot))
            """,
            name="state-dict-not-saved",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch.nn as nn
            model = nn.DataParallel(nn.Linear(2, 2))
            torch.save(model.state_dict(), "model.pt")
            """,
            fixed="""
            import torch
            import torch.nn as nn
            model = nn.DataParallel(nn.Linear(2, 2))
            torch.save(model.module.state_dict(), "model.pt")
            """,
            applicability=Applicability.SAFE,
            name="surely-wrapped",
        ),
        Invalid(
            """
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP
            net = torch.nn.Linear(2, 2)
            if torch.cuda.device_count() > 1:
                net = DDP(net)
            checkpoint = {"model": net.state_dict(), "epoch": 3}
            torch.save(checkpoint, "ckpt.pt")
            """,
            fixed="""
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP
            net = torch.nn.Linear(2, 2)
            if torch.cuda.device_count() > 1:
                net = DDP(net)
            checkpoint = {"model": getattr(net, "module", net).state_dict(), "epoch": 3}
            torch.save(checkpoint, "ckpt.pt")
            """,
            applicability=Applicability.SAFE,
            name="maybe-wrapped-through-checkpoint-dict",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            class Trainer:
                def __init__(self):
                    self.model = nn.DataParallel(nn.Linear(2, 2))
                def save(self, path):
                    state = {}
                    state["model"] = self.model.state_dict()
                    torch.save(state, path)
            """,
            fixed="""
            import torch
            import torch.nn as nn
            class Trainer:
                def __init__(self):
                    self.model = nn.DataParallel(nn.Linear(2, 2))
                def save(self, path):
                    state = {}
                    state["model"] = self.model.module.state_dict()
                    torch.save(state, path)
            """,
            applicability=Applicability.SAFE,
            name="attribute-model-item-assignment",
        ),
        Invalid(
            """
            import shutil
            import torch
            import torchvision.models as models
            def main(args):
                model = models.__dict__[args.arch]()
                if args.distributed:
                    model = torch.nn.parallel.DistributedDataParallel(model)
                elif args.gpu is None:
                    model = torch.nn.DataParallel(model).cuda()
                save_checkpoint({"epoch": 1, "state_dict": model.state_dict()}, True)
            def save_checkpoint(state, is_best, filename="checkpoint.pth.tar"):
                torch.save(state, filename)
                if is_best:
                    shutil.copyfile(filename, "model_best.pth.tar")
            """,
            fixed="""
            import shutil
            import torch
            import torchvision.models as models
            def main(args):
                model = models.__dict__[args.arch]()
                if args.distributed:
                    model = torch.nn.parallel.DistributedDataParallel(model)
                elif args.gpu is None:
                    model = torch.nn.DataParallel(model).cuda()
                save_checkpoint({"epoch": 1, "state_dict": getattr(model, "module", model).state_dict()}, True)
            def save_checkpoint(state, is_best, filename="checkpoint.pth.tar"):
                torch.save(state, filename)
                if is_best:
                    shutil.copyfile(filename, "model_best.pth.tar")
            """,
            applicability=Applicability.SAFE,
            name="saved-through-a-helper-defined-later",
        ),
    ]

    def __init__(self, context, options=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(context, options)
        # (scope node id, variable name) -> state_dict() calls stored in that variable.
        self._pending: dict[tuple[int, str], list[_Found]] = {}
        # (helper name, argument index) -> state_dict() calls passed to that helper.
        self._passed_to_helper: dict[tuple[str, int], list[_Found]] = {}
        # Helpers defined in this file that hand one parameter straight to torch.save.
        self._savers: set[tuple[str, int]] = set()

    def visit_Call(self, node: cst.Call) -> None:
        if self.context.imports.qualified_name(node.func) in torch_api.TORCH_SAVE:
            self._check_save(node)
            return
        self._check_helper_call(node)
        if not (isinstance(node.func, cst.Attribute) and node.func.attr.value == "state_dict" and not node.args):
            return
        receiver = node.func.value
        wrapping = self.context.kinds.kind_of(receiver).wrapping
        if wrapping is Wrapping.NO:
            return
        found = (node, self._fix(receiver, wrapping))
        destination = self._destination(node)
        if isinstance(destination, cst.Call):
            self.report(node, fix=found[1])
        elif isinstance(destination, str):
            self._pending.setdefault(self._key(destination), []).append(found)
        elif isinstance(destination, tuple):
            self._passed_to_helper.setdefault(destination, []).append(found)

    def _destination(self, node: cst.Call) -> cst.Call | str | tuple[str, int] | None:
        """Where the value goes: the torch.save call saving it, the variable it is stored in,
        or (helper name, argument index) for a call of a function defined in this file."""
        child: cst.CSTNode = node
        for ancestor in self.context.ancestors(node):
            if isinstance(ancestor, _CONTAINERS):
                child = ancestor
                continue
            if isinstance(ancestor, cst.Call):
                if self.context.imports.qualified_name(ancestor.func) in torch_api.TORCH_SAVE:
                    return ancestor if ancestor.args and child is ancestor.args[0] else None
                helper = _helper_name(ancestor)
                if helper is not None and isinstance(child, cst.Arg) and child.keyword is None and child in ancestor.args:
                    return helper, ancestor.args.index(child)
                return None
            if isinstance(ancestor, cst.Assign) and len(ancestor.targets) == 1:
                target = ancestor.targets[0].target
                if isinstance(target, cst.Subscript):
                    target = target.value
                return target.value if isinstance(target, cst.Name) else None
            return None
        return None

    def _key(self, name: str) -> tuple[int, str]:
        return id(self.context.kinds.current.node), name

    def _check_save(self, node: cst.Call) -> None:
        if not node.args or not isinstance(node.args[0].value, cst.Name):
            return
        name = node.args[0].value.value
        for found in self._pending.pop(self._key(name), []):
            self.report(found[0], fix=found[1])
        self._record_saver(name)

    def _record_saver(self, name: str) -> None:
        """`def save_checkpoint(state, path): torch.save(state, path)` makes a saver helper."""
        function = self.context.enclosing_function()
        if function is None or self.context.kinds.current.node is not function:
            return
        params = [*function.params.posonly_params, *function.params.params]
        method = self.context.enclosing_method_class()
        offset = 1 if method is not None and method[0] is function else 0
        for index, param in enumerate(params[offset:]):
            if param.name.value == name:
                self._savers.add((function.name.value, index))

    def _check_helper_call(self, node: cst.Call) -> None:
        helper = _helper_name(node)
        if helper is None:
            return
        for index, arg in enumerate(node.args):
            if arg.keyword is None and not arg.star and isinstance(arg.value, cst.Name):
                for found in self._pending.get(self._key(arg.value.value), []):
                    self._passed_to_helper.setdefault((helper, index), []).append(found)

    def leave_Module(self, node: cst.Module) -> None:
        # Helpers may be defined after their callers: decide once the whole file is read.
        for helper, found_list in self._passed_to_helper.items():
            if helper in self._savers:
                for call, fix in found_list:
                    self.report(call, fix=fix)

    def leave_Assign(self, node: cst.Assign) -> None:
        # A plain rebinding forgets what the variable held (unless it holds a state dict again).
        for target in node.targets:
            if isinstance(target.target, cst.Name) and not self._holds_state_dict(node.value):
                self._pending.pop(self._key(target.target.value), None)

    @staticmethod
    def _holds_state_dict(value: cst.BaseExpression) -> bool:
        return "state_dict" in cst.Module([]).code_for_node(value)

    def _fix(self, receiver: cst.BaseExpression, wrapping: Wrapping) -> PendingFix | None:
        code = self.context.code_for_node(receiver)
        if wrapping is Wrapping.YES:
            return self.make_fix(NodeEdit.insert_after(receiver, ".module"))
        if dotted_name(receiver) is None:
            return None
        return self.make_fix(NodeEdit(receiver, f'getattr({code}, "module", {code})'))
