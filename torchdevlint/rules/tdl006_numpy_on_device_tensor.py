"""TDL006 numpy-on-device-tensor."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from torchdevlint.analysis import torch_api
from torchdevlint.analysis.devices import (
    device_literal,
    is_grad_disabling,
    mentions_any,
)
from torchdevlint.analysis.value_kinds import keyword_argument
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit
from torchdevlint.rule import Invalid, Rule, Valid

# Tensor methods whose result stays where the receiver is. `cpu`, `to` and `type` (which
# takes a CPU type name) move, and are handled apart.
_KEEPS_DEVICE = (torch_api.TENSOR_RETURNING_METHODS - {"cpu", "to", "type", "cuda"}) | {
    "max", "min", "topk", "sort", "median", "mode", "kthvalue", "chunk", "split", "unbind",
    "detach", "sign",
}
_DTYPES = frozenset(
    {"float", "float16", "float32", "float64", "half", "double", "bfloat16", "int", "int8", "int16",
     "int32", "int64", "long", "short", "uint8", "bool", "complex64", "complex128", "cfloat", "cdouble"}
)
# Results that never require grad, whatever the receiver.
_NO_GRAD_METHODS = frozenset(
    {"detach", "argmax", "argmin", "eq", "ne", "gt", "lt", "ge", "le", "logical_not", "any", "all",
     "long", "int", "short", "byte", "char", "bool", "sign", "round", "floor", "ceil"}
)
# `values, indices = t.max(1)`: index 1 of these is an integer tensor.
_VALUES_INDICES = frozenset({"max", "min", "topk", "sort", "median", "mode", "kthvalue"})
# `torch.Tensor.cpu(t)` and friends: results that are not on the device (or not tensors).
_LEAVES_DEVICE = frozenset({"cpu", "to", "numpy", "tolist", "item", "type", "save", "device"})
# Torch functions that build a new tensor from data (on the CPU unless told otherwise).
_FROM_DATA = torch_api.TENSOR_FACTORIES | {"torch.as_tensor", "torch.from_numpy", "torch.asarray"}
# Names in a conditional's test that say the code already asks where the tensor is.
_LOCATION_TESTS = ("is_cuda", "is_cpu", "device")
_GPU_WORDS = ("cuda", "gpu")


@dataclass(frozen=True)
class _OnDevice:
    """Evidence that a value lives on an accelerator; `grad`: it may require grad."""

    grad: bool


class NumpyOnDeviceTensor(Rule):
    """
    ## What it does
    Finds `.numpy()` called on a tensor that lives on a GPU: the output of a model that was
    moved to the device, or a tensor moved with `.to(<accelerator>)` or `.cuda()` (directly
    in the chain, or earlier and assigned), with no `.cpu()` in between.

    ## Why is this bad?
    NumPy arrays live in host memory. On a GPU, `tensor.numpy()` fails with "TypeError: can't
    convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host
    memory first." On a CPU-only machine the same line works, so the bug ships. A model's
    output also requires grad, and `.numpy()` then fails even on the CPU with "Can't call
    numpy() on Tensor that requires grad".

    Not reported: tensors that never left the CPU, tensors brought back with `.cpu()` or
    `.to("cpu")`, calls inside a conditional on `is_cuda` or `.device`, `.numpy(force=True)`,
    and `.numpy()` of anything not known to be a torch tensor on a device (a device held in
    a variable counts only when it is assigned a GPU device in the file).

    ## Fix safety
    Safe: the fix inserts `.cpu()` before `.numpy()`, and `.detach()` too when the value may
    require grad (a model output outside `torch.no_grad()`). On the CPU both return the tensor
    itself, so the array still shares its memory as before; on a GPU the line now works.

    ## Options
    None.
    """

    code = "TDL006"
    slug = "numpy-on-device-tensor"
    message = "numpy() on a tensor that is on a GPU; copy it to the host with .cpu() first"
    fix_title = "Insert .cpu() before .numpy()"
    requires_any_text = (".numpy()",)

    VALID = [
        Valid(
            """
            import torch
            x = torch.randn(3)
            a = x.numpy()
            y = x.to("cuda")
            b = y.cpu().numpy()
            z = y.to("cpu")
            c = z.numpy()
            """,
            name="never-left-cpu-or-brought-back",
        ),
        Valid(
            """
            import torch
            def to_array(t, device):
                t = t.to(device)
                return t.cpu().numpy() if t.is_cuda else t.numpy()
            x = torch.ones(2).cuda()
            if x.is_cuda:
                x = x.cpu()
            x.numpy()
            """,
            name="is-cuda-conditional-and-unknown-device",
        ),
        Valid(
            """
            import numpy as np
            import torch
            frame = np.zeros(3)
            table = load_table()
            table.numpy()
            """,
            name="not-a-torch-tensor",
        ),
        Valid(
            """
            import torch
            t = torch.ones(2, device="cuda")
            t.numpy(force=True)
            """,
            name="numpy-force",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            from torchvision.models import resnet18

            model = resnet18().to("cuda")
            logits = model(images)
            predictions = logits.argmax(dim=1).numpy()
            """,
            fixed="""
            import torch
            from torchvision.models import resnet18

            model = resnet18().to("cuda")
            logits = model(images)
            predictions = logits.argmax(dim=1).cpu().numpy()
            """,
            applicability=Applicability.SAFE,
            name="documented-predictions-of-a-gpu-model",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = nn.Linear(4, 2).to(device)
            with torch.no_grad():
                logits = model(torch.randn(8, 4).to(device))
            predictions = logits.argmax(dim=1).numpy()
            """,
            fixed="""
            import torch
            import torch.nn as nn
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = nn.Linear(4, 2).to(device)
            with torch.no_grad():
                logits = model(torch.randn(8, 4).to(device))
            predictions = logits.argmax(dim=1).cpu().numpy()
            """,
            applicability=Applicability.SAFE,
            name="model-output-under-no-grad",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            net = nn.Linear(4, 1)
            net.cuda()
            out = net(torch.randn(8, 4).cuda())
            curve = out.numpy()
            """,
            fixed="""
            import torch
            import torch.nn as nn
            net = nn.Linear(4, 1)
            net.cuda()
            out = net(torch.randn(8, 4).cuda())
            curve = out.detach().cpu().numpy()
            """,
            applicability=Applicability.SAFE,
            name="model-output-requires-grad",
        ),
        Invalid(
            """
            import torch
            x = torch.randn(3)
            y = x.cuda().mul(2).numpy()
            z = torch.sigmoid(x.to("cuda:0")).data.numpy()
            """,
            fixed="""
            import torch
            x = torch.randn(3)
            y = x.cuda().mul(2).cpu().numpy()
            z = torch.sigmoid(x.to("cuda:0")).data.cpu().numpy()
            """,
            applicability=Applicability.SAFE,
            count=2,
            name="moved-in-the-chain",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader
            for images, labels in DataLoader([]):
                images = images.to("cuda", non_blocking=True)
                batch_mean = images.mean(0).numpy()
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader
            for images, labels in DataLoader([]):
                images = images.to("cuda", non_blocking=True)
                batch_mean = images.mean(0).cpu().numpy()
            """,
            applicability=Applicability.SAFE,
            name="batch-moved-earlier",
        ),
    ]

    def setup(self) -> None:
        # Per scope (by id of its node): names holding device tensors, lists of them, modules
        # moved to a device, and devices that are accelerators.
        self._tensors: dict[int, dict[str, _OnDevice]] = {}
        self._modules: dict[int, set[str]] = {}
        self._devices: dict[int, set[str]] = {}

    # ---- scopes ------------------------------------------------------------------------

    def _binding_scope(self, name: str) -> int | None:
        """The scope the analysis says binds `name` here, as the key of the rule's own tables."""
        scope = self.context.kinds.binding_scope(name)
        return None if scope is None else id(scope.node)

    def _current(self) -> int:
        return id(self.context.kinds.current.node)

    def _lookup_tensor(self, name: str) -> _OnDevice | None:
        scope = self._binding_scope(name)
        return None if scope is None else self._tensors.get(scope, {}).get(name)

    def _is_device_module(self, name: str) -> bool:
        scope = self._binding_scope(name)
        return scope is not None and name in self._modules.get(scope, set())

    # ---- what lives on a device ----------------------------------------------------------

    def _is_accelerator(self, node: cst.BaseExpression) -> bool:
        if isinstance(node, cst.IfExp):
            return self._is_accelerator(node.body) or self._is_accelerator(node.orelse)
        if isinstance(node, cst.Name):
            scope = self._binding_scope(node.value)
            return scope is not None and node.value in self._devices.get(scope, set())
        if isinstance(node, cst.Call) and self.context.imports.qualified_name(node.func) == "torch.device" and node.args:
            first = node.args[0].value
            if isinstance(first, cst.IfExp):
                return self._is_accelerator(first)
        if isinstance(node, cst.Call) and self.context.imports.qualified_name(node.func) == "torch.accelerator.current_accelerator":
            return True
        literal = device_literal(node, self.context.imports)
        return literal is not None and literal.is_accelerator

    def _is_host(self, node: cst.BaseExpression) -> bool:
        literal = device_literal(node, self.context.imports)
        return literal is not None and literal.is_host

    def _grad_enabled(self, node: cst.CSTNode) -> bool:
        imports = self.context.imports
        for ancestor in self.context.ancestors(node):
            if isinstance(ancestor, cst.With) and any(is_grad_disabling(item.item, imports) for item in ancestor.items):
                return False
            if isinstance(ancestor, cst.FunctionDef) and any(
                is_grad_disabling(d.decorator, imports) for d in ancestor.decorators
            ):
                return False
        return True

    def _move_target(self, call: cst.Call) -> cst.BaseExpression | None:
        """The device argument of `.to(...)`, if there is one."""
        device = keyword_argument(call, "device")
        if device is not None:
            return device.value
        positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
        return positional[0].value if positional else None

    def _on_device(self, node: cst.BaseExpression, site: cst.CSTNode) -> _OnDevice | None:
        if isinstance(node, cst.Name):
            return self._lookup_tensor(node.value)
        if isinstance(node, cst.Attribute):
            if node.attr.value in ("data", "T", "mT", "H", "mH", "real", "imag"):
                inner = self._on_device(node.value, site)
                if inner is not None and node.attr.value == "data":
                    return _OnDevice(grad=False)
                return inner
            return None
        if isinstance(node, cst.Subscript):
            inner = self._on_device(node.value, site)
            if inner is None:
                return None
            index = node.slice[0].slice if len(node.slice) == 1 else None
            if (
                self._returns_values_indices(node.value)
                and isinstance(index, cst.Index)
                and isinstance(index.value, cst.Integer)
                and index.value.value == "1"
            ):
                return _OnDevice(grad=False)  # the indices of `t.max(1)` are integers
            return inner
        if isinstance(node, (cst.BinaryOperation,)):
            left, right = self._on_device(node.left, site), self._on_device(node.right, site)
            if left is None and right is None:
                return None
            return _OnDevice(grad=bool(left and left.grad) or bool(right and right.grad))
        if isinstance(node, cst.UnaryOperation):
            return self._on_device(node.expression, site)
        if isinstance(node, cst.Call):
            return self._call_on_device(node, site)
        return None

    @staticmethod
    def _method_name(call: cst.Call) -> str | None:
        return call.func.attr.value if isinstance(call.func, cst.Attribute) else None

    def _returns_values_indices(self, node: cst.BaseExpression) -> bool:
        """`t.max(1)`, `torch.topk(t, 3)`: a (values, indices) pair."""
        if not isinstance(node, cst.Call):
            return False
        qualified = self.context.imports.qualified_name(node.func)
        name = qualified.rpartition(".")[2] if qualified is not None else self._method_name(node)
        return name in _VALUES_INDICES

    def _call_on_device(self, call: cst.Call, site: cst.CSTNode) -> _OnDevice | None:
        imports = self.context.imports
        qualified = imports.qualified_name(call.func)
        if qualified is not None and qualified.startswith("torch."):
            if qualified.rpartition(".")[2] in _LEAVES_DEVICE:
                return None
            if qualified in _FROM_DATA:
                device = keyword_argument(call, "device")
                return _OnDevice(grad=False) if device is not None and self._is_accelerator(device.value) else None
            found = [self._on_device(arg.value, site) for arg in call.args if arg.keyword is None and not arg.star]
            evidence = [f for f in found if f is not None]
            if not evidence:
                return None
            last = qualified.rpartition(".")[2]
            return _OnDevice(grad=last not in _NO_GRAD_METHODS and any(f.grad for f in evidence))
        method = self._method_name(call)
        if method is None:
            # `model(x)` for a model moved to a device.
            if isinstance(call.func, cst.Name) and self._is_device_module(call.func.value):
                return _OnDevice(grad=self._grad_enabled(site))
            return None
        assert isinstance(call.func, cst.Attribute)
        receiver = call.func.value
        if method == "cuda":
            inner = self._on_device(receiver, site)
            return _OnDevice(grad=bool(inner and inner.grad))
        if method == "to":
            return self._to_on_device(call, receiver, site)
        if method in _KEEPS_DEVICE:
            inner = self._on_device(receiver, site)
            if inner is None:
                return None
            return _OnDevice(grad=inner.grad and method not in _NO_GRAD_METHODS)
        return None

    def _to_on_device(self, call: cst.Call, receiver: cst.BaseExpression, site: cst.CSTNode) -> _OnDevice | None:
        """`.to(device)`, `.to(other_tensor)`, `.to(torch.float16)`, `.to(dtype=...)`."""
        inner = self._on_device(receiver, site)
        target = self._move_target(call)
        if target is None:
            return inner  # only dtype= / memory_format= / copy=
        if self._is_accelerator(target) or isinstance(target, cst.Integer):
            return _OnDevice(grad=bool(inner and inner.grad))
        if keyword_argument(call, "device") is not None:
            return None
        qualified = self.context.imports.qualified_name(target)
        if qualified is not None and qualified.rpartition(".")[0] == "torch" and qualified.rpartition(".")[2] in _DTYPES:
            return inner
        if self._on_device(target, site) is not None:
            return _OnDevice(grad=bool(inner and inner.grad))  # `.to(other)` follows `other`
        return None

    # ---- bindings ------------------------------------------------------------------------

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression, site: cst.CSTNode) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            if isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == len(target.elements):
                for left, right in zip(target.elements, value.elements, strict=True):
                    self._bind(left.value, right.value, site)
                return
            evidence = self._on_device(value, site)
            for element in target.elements:
                self._set(element.value, evidence, is_module=False, is_device=False)
            return
        kinds = self.context.kinds
        is_module = kinds.kind_of(value).is_module_like and self._moves_to_accelerator(value)
        self._set(target, self._on_device(value, site), is_module=is_module, is_device=self._is_accelerator(value))

    def _moves_to_accelerator(self, value: cst.BaseExpression) -> bool:
        """`Net().to(device)`, `nn.DataParallel(net).cuda()`, `model.cuda(0)`."""
        while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
            method = value.func.attr.value
            if method == "cuda":
                return True
            if method == "to":
                target = self._move_target(value)
                if target is not None and self._is_accelerator(target):
                    return True
            value = value.func.value
        return isinstance(value, cst.Name) and self._is_device_module(value.value)

    def _set(self, target: cst.BaseExpression, evidence: _OnDevice | None, *, is_module: bool, is_device: bool) -> None:
        if isinstance(target, cst.StarredElement):
            target = target.value
        if not isinstance(target, cst.Name):
            return
        scope = self._current()
        name = target.value
        tensors = self._tensors.setdefault(scope, {})
        if evidence is not None:
            tensors[name] = evidence
        else:
            tensors.pop(name, None)
        for table, present in ((self._modules, is_module), (self._devices, is_device)):
            names = table.setdefault(scope, set())
            if present:
                names.add(name)
            else:
                names.discard(name)

    def _forget(self, target: cst.BaseExpression) -> None:
        self._set(target, None, is_module=False, is_device=False)
        if isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._forget(element.value)

    def leave_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._bind(target.target, node.value, node)

    def leave_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._bind(node.target, node.value, node)

    def visit_For(self, node: cst.For) -> None:
        self._forget(node.target)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._forget(node.asname.name)

    def visit_Expr(self, node: cst.Expr) -> None:
        value = node.value
        if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)):
            return
        receiver = value.func.value
        method = value.func.attr.value
        if not isinstance(receiver, cst.Name):
            return
        scope = self._binding_scope(receiver.value)
        if scope is None:
            return
        # `model.to(device)` / `model.cuda()` move a Module in place.
        if method in ("to", "cuda") and self.context.kinds.kind_of(receiver).is_module_like:
            if self._moves_to_accelerator(value):
                self._modules.setdefault(scope, set()).add(receiver.value)
            elif method == "to":
                target = self._move_target(value)
                if target is not None and self._is_host(target):
                    self._modules.setdefault(scope, set()).discard(receiver.value)
        # `outputs.append(t)`: a list of device tensors (for torch.cat / torch.stack).
        elif method in ("append", "extend") and len(value.args) == 1:
            evidence = self._on_device(value.args[0].value, node)
            if evidence is not None:
                self._tensors.setdefault(scope, {})[receiver.value] = evidence

    # ---- the finding ---------------------------------------------------------------------

    def _asks_where(self, node: cst.CSTNode) -> bool:
        """Inside a test of where the tensor is (`if t.is_cuda`), or the CPU branch of a GPU test."""
        child: cst.CSTNode = node
        for ancestor in self.context.ancestors(node):
            if isinstance(ancestor, (cst.If, cst.IfExp, cst.While)):
                test = ancestor.test
                if child is not test:
                    if mentions_any(test, _LOCATION_TESTS):
                        return True
                    negated = isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)
                    in_else = child is ancestor.orelse
                    if mentions_any(test, _GPU_WORDS) and (in_else != negated):
                        return True
            if isinstance(ancestor, (cst.FunctionDef, cst.Lambda)):
                return False
            child = ancestor
        return False

    def visit_Call(self, node: cst.Call) -> None:
        if not (isinstance(node.func, cst.Attribute) and node.func.attr.value == "numpy") or node.args:
            return
        receiver = node.func.value
        evidence = self._on_device(receiver, node)
        if evidence is None or self._asks_where(node):
            return
        insertion = ".detach().cpu()" if evidence.grad else ".cpu()"
        self.report(node, fix=self.make_fix(NodeEdit.insert_after(receiver, insertion)))

