"""TDL012 dataparallel-device-mismatch."""

from __future__ import annotations

from typing import TypeGuard

import libcst as cst

from torchdevlint.analysis.devices import device_literal, integer_value
from torchdevlint.analysis.tree import keyword_argument
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid

DATA_PARALLEL: frozenset[str] = frozenset(
    {"torch.nn.DataParallel", "torch.nn.parallel.DataParallel", "torch.nn.parallel.data_parallel.DataParallel"}
)
_SET_DEVICE = frozenset({"torch.cuda.set_device"})


class DataParallelDeviceMismatch(Rule):
    """
    ## What it does
    Finds a model moved to one GPU and wrapped in `nn.DataParallel` whose `device_ids` start
    at another: typically `model.to("cuda:1")` (or `.cuda(1)`, or `torch.device("cuda", 1)`)
    followed by `nn.DataParallel(model)` without `device_ids`, which then uses every GPU from
    `cuda:0`. Also a wrapper moved afterwards (`nn.DataParallel(model).to("cuda:1")`).
    Reported at the `DataParallel(...)` call, or at the later move. Devices and `device_ids`
    count only when they are written as literals.

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
    get no fix: which side is wrong is a choice.

    ## Options
    None.
    """

    code = "TDL012"
    slug = "dataparallel-device-mismatch"
    message = "Model is on a different GPU than DataParallel's device_ids[0]; the first forward fails"
    fix_title = "Pass device_ids starting at the model's GPU"
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
    ]

    def setup(self) -> None:
        # Per binding scope (id of its node): CUDA index of models and devices held in names;
        # for wrappers, the index of their device_ids[0].
        self._models: dict[int, dict[str, int]] = {}
        self._devices: dict[int, dict[str, int]] = {}
        self._wrappers: dict[int, dict[str, int]] = {}
        # Where `.cuda()` and `"cuda"` go: cuda:0 unless the file changes the current device
        # (`torch.cuda.set_device`, `with torch.cuda.device(n)`); then only a literal
        # `set_device(n)` earlier in the same scope says where.
        self._changes_current_device: bool | None = None
        self._set_device: dict[int, int] = {}

    # ---- names -------------------------------------------------------------------------

    def _binding_scope(self, name: str) -> int | None:
        scope = self.context.binding_scope(name)
        return None if scope is None else id(scope)

    def _lookup(self, table: dict[int, dict[str, int]], node: cst.BaseExpression) -> int | None:
        if not isinstance(node, cst.Name):
            return None
        scope = self._binding_scope(node.value)
        return None if scope is None else table.get(scope, {}).get(node.value)

    def _store(self, table: dict[int, dict[str, int]], name: str, index: int | None) -> None:
        names = table.setdefault(id(self.context.current_scope), {})
        if index is None:
            names.pop(name, None)
        else:
            names[name] = index

    # ---- devices -----------------------------------------------------------------------

    @property
    def _current_device(self) -> int | None:
        if self._changes_current_device is None:
            code = self.context.module.code
            self._changes_current_device = "set_device" in code or "cuda.device(" in code
        if not self._changes_current_device:
            return 0
        return self._set_device.get(id(self.context.current_scope))

    def _cuda_index(self, node: cst.BaseExpression) -> int | None:
        """The CUDA index a device expression names: `"cuda:1"`, `torch.device("cuda", 1)`, `1`."""
        number = integer_value(node)
        if number is not None:
            return number
        named = self._lookup(self._devices, node)
        if named is not None:
            return named
        literal = device_literal(node, self.context.imports)
        if literal is None or literal.type != "cuda":
            return None
        return self._current_device if literal.index is None else literal.index

    def _move_index(self, call: cst.Call) -> int | None:
        """Where `.to(...)` / `.cuda(...)` puts its receiver, when the call says so."""
        if not isinstance(call.func, cst.Attribute):
            return None
        method = call.func.attr.value
        positional = [arg.value for arg in call.args if arg.keyword is None and not arg.star]
        device = keyword_argument(call, "device")
        target = device.value if device is not None else (positional[0] if positional else None)
        if method == "cuda":
            return self._current_device if target is None else self._cuda_index(target)
        if method == "to" and target is not None:
            return self._cuda_index(target)
        return None

    def _model_index(self, node: cst.BaseExpression) -> int | None:
        """The GPU a model expression lives on: the outermost move of a chain, or a tracked name."""
        while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            if node.func.attr.value in ("to", "cuda"):
                return self._move_index(node)
            if node.func.attr.value not in ("train", "eval", "float", "half", "double", "bfloat16"):
                return None
            node = node.func.value
        return self._lookup(self._models, node)

    def _first_device_id(self, call: cst.Call) -> int | None:
        """`device_ids[0]` of a DataParallel call; absent or None means all GPUs, from 0."""
        positional = [arg.value for arg in call.args if arg.keyword is None]
        keyword = keyword_argument(call, "device_ids")
        ids = keyword.value if keyword is not None else (positional[1] if len(positional) > 1 else None)
        if ids is None or isinstance(ids, cst.Name) and ids.value == "None":
            return 0
        if isinstance(ids, (cst.List, cst.Tuple)) and ids.elements:
            first = ids.elements[0]
            return None if isinstance(first, cst.StarredElement) else self._cuda_index(first.value)
        if isinstance(ids, cst.Call) and isinstance(ids.func, cst.Name) and ids.func.value == "list" and ids.args:
            ids = ids.args[0].value
        if isinstance(ids, cst.Call) and isinstance(ids.func, cst.Name) and ids.func.value == "range" and ids.args:
            return 0 if len(ids.args) == 1 else integer_value(ids.args[0].value)
        return None

    def _is_data_parallel(self, node: cst.BaseExpression) -> TypeGuard[cst.Call]:
        return isinstance(node, cst.Call) and self.context.imports.qualified_name(node.func) in DATA_PARALLEL

    # ---- visiting ----------------------------------------------------------------------

    def leave_Call(self, node: cst.Call) -> None:
        qualified = self.context.imports.qualified_name(node.func)
        if qualified in _SET_DEVICE and node.args:
            index = self._cuda_index(node.args[0].value)
            scope = id(self.context.current_scope)
            if index is not None:
                self._set_device[scope] = index
            else:
                self._set_device.pop(scope, None)
            return
        if qualified in DATA_PARALLEL:
            module = keyword_argument(node, "module")
            positional = [arg.value for arg in node.args if arg.keyword is None]
            target = module.value if module is not None else (positional[0] if positional else None)
            first = self._first_device_id(node)
            placed = self._model_index(target) if target is not None else None
            if first is not None and placed is not None and first != placed:
                self.report(node, fix=self._fix(node, placed))
            return
        # `DataParallel(...).to(...)` and `wrapper.cuda(n)`: the wrapper moved after wrapping.
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in ("to", "cuda"):
            receiver = node.func.value
            first = self._first_device_id(receiver) if self._is_data_parallel(receiver) else self._lookup(self._wrappers, receiver)
            placed = self._move_index(node)
            if first is not None and placed is not None and first != placed:
                self.report(node)
            elif isinstance(receiver, cst.Name) and placed is not None and self._is_statement(node):
                binding_scope = self._binding_scope(receiver.value)
                if binding_scope is not None and self.context.flow.value_of(receiver).is_module_like:
                    self._models.setdefault(binding_scope, {})[receiver.value] = placed

    def _fix(self, call: cst.Call, placed: int) -> PendingFix | None:
        """No device_ids: use the GPUs from the model's onwards (the ones not left to others)."""
        if placed == 0 or len([a for a in call.args if a.keyword is None]) > 1 or keyword_argument(call, "device_ids"):
            return None
        if any(arg.star for arg in call.args):
            return None
        torch_name = self.context.imports.local_name_for("torch")
        imports: tuple[tuple[str, str | None], ...] = ()
        if torch_name is None:
            torch_name, imports = "torch", (("torch", None),)
        ids = f"list(range({placed}, {torch_name}.cuda.device_count()))"
        return self.make_fix(
            NodeEdit.insert_after(call.args[-1].value, f", device_ids={ids}"),
            applicability=Applicability.UNSAFE,
            required_imports=imports,
        )

    def _is_statement(self, call: cst.Call) -> bool:
        return isinstance(self.context.parent(call), cst.Expr)

    def leave_Assign(self, node: cst.Assign) -> None:
        value = node.value
        model_index = self._model_index(value)
        device_index = self._device_value(value)
        wrapper_first = self._first_device_id(value) if self._is_data_parallel(value) else None
        for target in node.targets:
            if not isinstance(target.target, cst.Name):
                continue
            name = target.target.value
            self._store(self._models, name, model_index)
            self._store(self._devices, name, device_index)
            self._store(self._wrappers, name, wrapper_first)

    def _device_value(self, value: cst.BaseExpression) -> int | None:
        literal = device_literal(value, self.context.imports)
        if literal is None or literal.type != "cuda":
            return None
        return self._current_device if literal.index is None else literal.index
