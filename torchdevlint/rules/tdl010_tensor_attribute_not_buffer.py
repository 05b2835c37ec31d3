"""TDL010 tensor-attribute-not-buffer."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from torchdevlint.analysis.brains import torch_api
from torchdevlint.analysis.devices import string_value
from torchdevlint.analysis.flow.values import MODULE_DEVICE_PLACE
from torchdevlint.analysis.tree import keyword_argument
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid

_REGISTERED_TENSORS = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.nn.Buffer"})
_ON_MODULE_DEVICE = frozenset({MODULE_DEVICE_PLACE})


@dataclass
class _ModuleClass:
    node: cst.ClassDef
    # attribute -> the `self.<attr> = tensor` statement in __init__
    tensor_attributes: dict[str, cst.Assign] = field(default_factory=dict)
    registered: set[str] = field(default_factory=set)
    used_in_forward: set[str] = field(default_factory=set)
    # Attributes assigned anywhere else in the class (a buffer only takes tensors or None).
    assigned_elsewhere: set[str] = field(default_factory=set)
    # Attributes a method rebuilds on the module's own device (`self.grid = grid.to(x.device)`):
    # a cache the module keeps on its data's device itself.
    rebuilt_on_module_device: set[str] = field(default_factory=set)
    # `super().__init__()` seen in __init__: before it, register_buffer raises.
    module_initialised: bool = False
    before_init: set[str] = field(default_factory=set)


# `self.mean.to(x.device)`, `self.scale.item()`: uses that never mix devices.
_DEVICE_SAFE_METHODS = frozenset({"to", "cuda", "type_as"}) | torch_api.HOST_READ_METHODS


def _device_safe_use(node: cst.Attribute, ancestors: list[cst.CSTNode]) -> bool:
    if not ancestors:
        return False
    parent = ancestors[0]
    if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value in _DEVICE_SAFE_METHODS:
        return True
    # float(self.lo), int(self.n): a Python number
    return (
        len(ancestors) >= 2
        and isinstance(parent, cst.Arg)
        and isinstance(ancestors[1], cst.Call)
        and isinstance(ancestors[1].func, cst.Name)
        and ancestors[1].func.value in ("float", "int", "bool")
    )


def _is_module_init_call(node: cst.Call) -> bool:
    """`super().__init__(...)`, `super(Net, self).__init__()`, `nn.Module.__init__(self)`."""
    func = node.func
    if not (isinstance(func, cst.Attribute) and func.attr.value == "__init__"):
        return False
    owner = func.value
    if isinstance(owner, cst.Call) and isinstance(owner.func, cst.Name) and owner.func.value == "super":
        return True
    return isinstance(owner, (cst.Name, cst.Attribute))


def _self_attribute(node: cst.BaseExpression, self_name: str | None) -> str | None:
    if (
        self_name is not None
        and type(node) is cst.Attribute
        and type(node.value) is cst.Name
        and node.value.value == self_name
    ):
        return node.attr.value
    return None


class TensorAttributeNotBuffer(Rule):
    """
    ## What it does
    Finds a plain tensor assigned to `self.<name>` in the `__init__` of an `nn.Module` and
    read in its `forward`.

    ## Why is this bad?
    `model.to(device)` and `model.cuda()` move parameters and buffers, not plain tensor
    attributes. After the move, `forward` combines GPU inputs with this CPU tensor and fails
    with "Expected all tensors to be on the same device". A buffer follows the module.

    Not reported: `nn.Parameter`s (also with a method called on them:
    `nn.Parameter(torch.ones(d)).float()` is still the Parameter), names registered with `register_buffer`, tensors created
    with an explicit `device=` or `requires_grad=` (a would-be parameter is another problem),
    tensors that `forward` never reads, or reads only in device-safe ways
    (`self.mean.to(x.device)`, `.item()`, `float(self.low)`), and placeholders that a method
    rebuilds where the module's data is (`self.grid = self._make_grid(nx, ny).to(x.device)`,
    `self.means = self.means.type_as(boxes)`): the module keeps them on the right device itself.

    ## Fix safety
    Safe: `register_buffer(..., persistent=False)` makes the tensor follow the module's moves
    and dtype casts without adding it to the state dict, so saved checkpoints and
    `load_state_dict` behave as before. Unsafe when the class assigns the attribute again
    elsewhere: a buffer accepts only tensors (or None). No fix before `super().__init__()`,
    where `register_buffer` cannot be called yet.

    ## Options
    None.
    """

    code = "TDL010"
    slug = "tensor-attribute-not-buffer"
    message = "Tensor attribute does not follow model.to(device); register it as a buffer"
    fix_title = "Register the tensor as a non-persistent buffer"
    requires_any_text = ("forward",)

    VALID = [
        Valid(
            """
            import torch
            import torch.nn as nn

            class LayerScale(nn.Module):
                def __init__(self, dim, init=1e-5):
                    super().__init__()
                    self.gamma = nn.Parameter(init * torch.ones(dim)).float()

                def forward(self, x):
                    return x * self.gamma
            """,
            name="parameter-with-a-cast-is-still-trained",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            class Net(nn.Module):
                def __init__(self, device):
                    super().__init__()
                    self.scale = nn.Parameter(torch.ones(3))
                    self.register_buffer("mean", torch.zeros(3))
                    self.mask = torch.ones(3, device=device)
                    self.history = torch.zeros(10)
                def forward(self, x):
                    return (x - self.mean) * self.scale * self.mask
            """,
            name="parameters-buffers-explicit-device-unused",
        ),
        Valid(
            """
            import torch
            class Plain:
                def __init__(self):
                    self.mean = torch.zeros(3)
                def forward(self, x):
                    return x - self.mean
            """,
            name="not-a-module",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            class Normalize(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.mean = torch.tensor([0.5, 0.5, 0.5]).view(3, 1, 1)
                    self.std = torch.tensor([0.2, 0.2, 0.2]).view(3, 1, 1)
                    self.low = torch.tensor(0.1)
                def forward(self, x):
                    return ((x - self.mean.to(x.device)) / self.std.to(x)).clamp(min=float(self.low))
            """,
            name="moved-where-used-or-read-as-a-number",
        ),
        Valid(
            """
            import torch.nn as nn
            class Stage(nn.Module):
                def __init__(self, block_type, planes):
                    super().__init__()
                    self.block_type = block_type
                    self.first = self.block_type(planes, stride=2)
                    self.rest = self._blocks(planes)
                def _blocks(self, planes):
                    return nn.Sequential(*[self.block_type(planes) for _ in range(3)])
                def forward(self, x):
                    return self.rest(self.first(x))
            """,
            name="blocks-built-by-a-class-passed-in",
        ),
        Valid(
            """
            import torch.nn as nn
            from .builders import build_clip_model, get_backbone

            class Teacher(nn.Module):
                def __init__(self, checkpoint, name):
                    super().__init__()
                    self.clip = build_clip_model(checkpoint)
                    self.backbone = get_backbone(name)
                def forward(self, x):
                    return self.clip(self.backbone(x))
            """,
            name="models-made-by-builder-functions",
        ),
        Valid(
            """
            from functools import partial

            import torch.nn as nn
            from .blocks import ResnetBlock

            class Unet(nn.Module):
                def __init__(self, dim, time_dim):
                    super().__init__()
                    resnet_block = partial(ResnetBlock, time_emb_dim=time_dim)
                    self.mid_block = resnet_block(dim, dim)
                def forward(self, x):
                    return self.mid_block(x)
            """,
            name="blocks-made-by-a-partial-of-their-class",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn

            class YOLOLayer(nn.Module):
                def __init__(self, anchors):
                    super().__init__()
                    self.grid = torch.zeros(1)
                def forward(self, x):
                    ny, nx = x.shape[2:4]
                    if self.grid.shape[2:4] != x.shape[2:4]:
                        self.grid = self._make_grid(nx, ny).to(x.device)
                    return x + self.grid
            """,
            name="a-placeholder-rebuilt-on-the-inputs-device",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn

            class ProposalTarget(nn.Module):
                def __init__(self, means):
                    super().__init__()
                    self.means = torch.FloatTensor(means)
                def forward(self, rois, gt_boxes):
                    self.means = self.means.type_as(gt_boxes)
                    return (rois - self.means) * 2
            """,
            name="a-constant-put-where-the-inputs-are-each-call",
        ),
        Valid(
            """
            import torch.nn as nn

            class Mlp(nn.Module):
                def __init__(self, features: int, act_layer: nn.Module = nn.GELU):
                    super().__init__()
                    self.fc = nn.Linear(features, features)
                    self.act = act_layer()
                def forward(self, x):
                    return self.act(self.fc(x))
            """,
            name="a-layer-class-annotated-as-a-module",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            from torch import nn


            class Normalize(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)

                def forward(self, x):
                    return x - self.mean
            """,
            fixed="""
            import torch
            from torch import nn


            class Normalize(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1), persistent=False)

                def forward(self, x):
                    return x - self.mean
            """,
            applicability=Applicability.SAFE,
            name="documented-normalisation-constant",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            class Tracker(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.cell = nn.GRUCell(8, 8)
                    self.hidden = torch.zeros(1, 8)
                def forward(self, x):
                    self.hidden = self.cell(x, self.hidden)
                    return self.hidden
            """,
            fixed="""
            import torch
            import torch.nn as nn

            class Tracker(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.cell = nn.GRUCell(8, 8)
                    self.register_buffer("hidden", torch.zeros(1, 8), persistent=False)
                def forward(self, x):
                    self.hidden = self.cell(x, self.hidden)
                    return self.hidden
            """,
            applicability=Applicability.UNSAFE,
            name="a-state-rebuilt-from-what-it-fed-the-model",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            class Gate(nn.Module):
                def __init__(self, width):
                    super().__init__()
                    self.half = torch.full((width,), 0.5)  # halves each channel
                def forward(self, x):
                    gated = x * self.half
                    return torch.relu(gated)
            """,
            fixed="""
            import torch
            import torch.nn as nn
            class Gate(nn.Module):
                def __init__(self, width):
                    super().__init__()
                    self.register_buffer("half", torch.full((width,), 0.5), persistent=False)  # halves each channel
                def forward(self, x):
                    gated = x * self.half
                    return torch.relu(gated)
            """,
            applicability=Applicability.SAFE,
            name="trailing-comment-survives-the-fix",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            class Running(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.mean = torch.zeros(3)
                def forward(self, x):
                    return x - self.mean
                def update(self, value):
                    self.mean = value.mean().item()
            """,
            fixed="""
            import torch
            import torch.nn as nn
            class Running(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.register_buffer("mean", torch.zeros(3), persistent=False)
                def forward(self, x):
                    return x - self.mean
                def update(self, value):
                    self.mean = value.mean().item()
            """,
            applicability=Applicability.UNSAFE,
            name="reassigned-elsewhere-makes-the-fix-unsafe",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            class Early(nn.Module):
                def __init__(self):
                    self.mean = torch.zeros(3)
                    super().__init__()
                def forward(self, x):
                    return x - self.mean
            """,
            name="before-module-init-has-no-fix",
        ),
    ]

    def setup(self) -> None:
        self._classes: list[_ModuleClass | None] = []

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._classes.append(_ModuleClass(node) if self.context.flow.is_module_class(node) else None)

    def leave_ClassDef(self, node: cst.ClassDef) -> None:
        current = self._classes.pop()
        if current is None:
            return
        for name, assignment in current.tensor_attributes.items():
            if name in current.used_in_forward and name not in current.registered \
                    and name not in current.rebuilt_on_module_device:
                fix = None
                if name not in current.before_init:
                    unsafe = name in current.assigned_elsewhere
                    fix = self._fix(name, assignment, Applicability.UNSAFE if unsafe else Applicability.SAFE)
                self.report(assignment, fix=fix)

    def _current_class(self) -> _ModuleClass:
        current = self._classes[-1]
        assert current is not None, "asked only where _method() found a module class"
        return current

    def _method(self) -> tuple[str, str | None] | None:
        if not self._classes or self._classes[-1] is None:
            return None
        method = self.context.enclosing_method()
        if method is None or method.owner is not self._classes[-1].node:
            return None
        return method.function.name.value, method.self_name

    def leave_Assign(self, node: cst.Assign) -> None:
        where = self._method()
        if where is None or len(node.targets) != 1:
            return
        current = self._classes[-1]
        assert current is not None
        name = _self_attribute(node.targets[0].target, where[1])
        if name is None:
            return
        if where[0] != "__init__" or name in current.tensor_attributes:
            current.assigned_elsewhere.add(name)
            if where[0] != "__init__" and self._placed_on_module_device(node.value):
                current.rebuilt_on_module_device.add(name)
            return
        if not current.module_initialised:
            current.before_init.add(name)
        value = node.value
        if self._made_as_parameter(value):
            return
        if isinstance(value, cst.Call) and (
            self.context.imports.qualified_name(value.func) in _REGISTERED_TENSORS
            or keyword_argument(value, "device") is not None
            or keyword_argument(value, "requires_grad") is not None
        ):
            return
        # The analysis has not bound this assignment yet: ask about the value itself.
        if self.context.flow.value_of(value).is_tensor_like:
            current.tensor_attributes.setdefault(name, node)

    def _made_as_parameter(self, value: cst.BaseExpression) -> bool:
        """`nn.Parameter(...)`, also with methods called on it (`nn.Parameter(w).float()`):
        `.float()` of a float32 Parameter is that Parameter, and whatever the others return,
        turning it into a buffer would stop it being trained and saved."""
        while isinstance(value, cst.Call):
            if self.context.imports.qualified_name(value.func) in _REGISTERED_TENSORS:
                return True
            if not isinstance(value.func, cst.Attribute):
                return False
            value = value.func.value
        return False

    def _placed_on_module_device(self, value: cst.BaseExpression) -> bool:
        """Moved or made, explicitly, where the module's data is (`.to(x.device)`,
        `.type_as(x)`, `torch.zeros(..., device=x.device)` in a method of the module)."""
        if not isinstance(value, cst.Call):
            return False
        flow = self.context.flow
        explicit = flow.move_destination(value) is not None or keyword_argument(value, "device") is not None \
            or isinstance(value.func, cst.Attribute) and value.func.attr.value == "type_as"
        return explicit and flow.value_of(value).places == _ON_MODULE_DEVICE

    def visit_Call(self, node: cst.Call) -> None:
        where = self._method()
        if where is None:
            return
        if where[0] == "__init__" and _is_module_init_call(node):
            self._current_class().module_initialised = True
            return
        if not (isinstance(node.func, cst.Attribute) and node.func.attr.value == "register_buffer"):
            return
        value = string_value(node.args[0].value) if node.args else None
        if value is not None:
            self._current_class().registered.add(value)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        where = self._method()
        if where is None or where[0] != "forward":
            return
        name = _self_attribute(node, where[1])
        if name is not None and not _device_safe_use(node, self.context.ancestors(node)):
            self._current_class().used_in_forward.add(name)

    def _fix(self, name: str, assignment: cst.Assign, applicability: Applicability) -> PendingFix:
        target = assignment.targets[0].target
        # Candidates are `self.name = ...` assignments, recorded by leave_Assign.
        assert isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name)
        self_name = target.value.value
        # Edit around the value rather than re-render it: a multi-line value keeps its layout.
        return self.make_fix(
            NodeEdit.replace_until(assignment, assignment.value, f'{self_name}.register_buffer("{name}", '),
            NodeEdit.insert_after(assignment.value, ", persistent=False)"),
            applicability=applicability,
        )
