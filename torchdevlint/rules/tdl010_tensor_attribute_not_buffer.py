"""TDL010 tensor-attribute-not-buffer."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.module_attributes import ModuleAttributes
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid


class TensorAttributeNotBuffer(Rule):
    """
    ## What it does
    Finds a plain tensor assigned to `self.<name>` in the `__init__` of an `nn.Module` and
    read in its `forward`.

    ## Why is this bad?
    `model.to(device)` and `model.cuda()` move parameters and buffers, not plain tensor
    attributes. After the move, `forward` combines GPU inputs with this CPU tensor and fails
    with "Expected all tensors to be on the same device". A buffer follows the module.

    ## Not reported
    Not reported: `nn.Parameter`s (also with a method called on them:
    `nn.Parameter(torch.ones(d)).float()` is still the Parameter), names registered with `register_buffer`, tensors created
    with an explicit `device=` or moved to a device there (`.to(device)`: placed where the
    constructor was told, and a `.cpu()` is still reported) or with `requires_grad=` (a
    would-be parameter is another problem),
    tensors that `forward` never reads, or reads only in device-safe ways
    (`self.mean.to(x.device)`, `.item()`, `float(self.low)`, `self.alpha is not None`), and placeholders that a method
    rebuilds where the module's data is (`self.grid = self._make_grid(nx, ny).to(x.device)`,
    `self.means = self.means.type_as(boxes)`, also of its `.data`): the module keeps them on the right device itself.
    Nor classes of a notebook that names no device, move or GPU anywhere (a network written
    from scratch, its weights updated by hand): nothing there moves the model. (A module
    file names none either, but the script importing it may move the model.)
    Nor attributes the module's own override of `to`, `cuda` or `_apply` moves with it
    (`def to(self, device): self.action_scale = self.action_scale.to(device); return
    super().to(device)`).

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

            class ScaledAttention(nn.Module):
                def __init__(self, dim, device):
                    super().__init__()
                    self.proj = nn.Linear(dim, dim)
                    self.scale = torch.sqrt(torch.tensor([float(dim)])).to(device)

                def forward(self, x):
                    return self.proj(x) / self.scale

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            attention = ScaledAttention(16, device).to(device)
            """,
            name="moved-in-init-to-the-device-the-constructor-was-given",
        ),
        Valid(
            """
            import torch.nn as nn
            class Siamese(nn.Module):
                def __init__(self, base_encoder, dim=128):
                    super().__init__()
                    # A class (or factory) passed in, called to build a part: not a model's output.
                    self.encoder = base_encoder(num_classes=dim)
                def forward(self, x):
                    return self.encoder(x)
            """,
            name="a-part-built-from-a-class-passed-to-init",
        ),
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
            class DeterministicPolicy(nn.Module):
                def __init__(self, inputs, actions, low, high):
                    super().__init__()
                    self.mean = nn.Linear(inputs, actions)
                    self.action_scale = torch.FloatTensor((high - low) / 2.0)
                    self.action_bias = torch.FloatTensor((high + low) / 2.0)
                def forward(self, state):
                    return torch.tanh(self.mean(state)) * self.action_scale + self.action_bias
                def to(self, device):
                    self.action_scale = self.action_scale.to(device)
                    self.action_bias = self.action_bias.to(device)
                    return super().to(device)
            """,
            name="moved-by-the-modules-own-to",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            class BackprojectDepth(nn.Module):
                def __init__(self, batch, height, width):
                    super().__init__()
                    self.ones = nn.Parameter(torch.ones(batch, 1, height * width), requires_grad=False)
                    self.pix = torch.stack([torch.arange(width * height * 1.0), torch.arange(width * height * 1.0)], 0)
                    self.pix = nn.Parameter(torch.cat([self.pix.unsqueeze(0).repeat(batch, 1, 1), self.ones], 1),
                                            requires_grad=False)
                def forward(self, depth):
                    return depth.view(depth.size(0), 1, -1) * self.pix
            """,
            name="a-step-on-the-way-to-a-parameter",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn


            class Decoder(nn.Module):
                def __init__(self, size):
                    super().__init__()
                    self.proj = nn.Linear(size, size)
                    self.masks = self.make_mask(size)

                @staticmethod
                def make_mask(size):
                    return 1 - torch.triu(torch.ones(1, size, size), diagonal=1)

                def forward(self, x):
                    self.masks = self.masks.type_as(x).bool()
                    return self.proj(x).masked_fill(~self.masks, 0.0)
            """,
            name="a-mask-cast-to-the-inputs-type-before-each-use",
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
        Valid(
            """
            import torch
            import torch.nn as nn
            import torch.nn.functional as F

            class WeightedNLL(nn.Module):
                def __init__(self, weights=None):
                    super().__init__()
                    self.weights = weights
                    if isinstance(weights, (list, tuple)):
                        self.weights = torch.Tensor(weights)
                def forward(self, scores, labels):
                    picked = F.log_softmax(scores, dim=1).gather(1, labels.view(-1, 1)).view(-1)
                    if self.weights is not None:
                        if self.weights.type() != scores.data.type():
                            self.weights = self.weights.type_as(scores.data)
                        picked = picked * self.weights.gather(0, labels.view(-1))
                    return -picked.mean()
            """,
            name="class-weights-recast-to-the-inputs-type",
        ),
        Valid(
            """
            import torch.nn as nn

            def small_mlp():
                return nn.Sequential(nn.Linear(4, 16), nn.ReLU())

            BACKBONES = {"small": [small_mlp, 16]}

            class Probe(nn.Module):
                def __init__(self, name="small", classes=3):
                    super().__init__()
                    model_fun, width = BACKBONES[name]
                    self.encoder = model_fun()
                    self.head = nn.Linear(width, classes)
                def forward(self, x):
                    return self.head(self.encoder(x))
            """,
            name="a-backbone-made-by-a-function-from-a-table",
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
        self._attributes = self.context.shared(ModuleAttributes)

    def leave_ClassDef(self, node: cst.ClassDef) -> None:
        current = self._attributes.of(node)
        if current is None:
            return
        if self.context.path.endswith(".ipynb") and self.context.flow.names_no_accelerator():
            return  # a notebook whose model never leaves the CPU (no device, move or GPU named)
        for name, assignment in current.tensor_attributes.items():
            if name in current.used_in_forward and name not in current.registered \
                    and name not in current.rebuilt_on_module_device:
                fix = None
                if name not in current.before_init:
                    unsafe = name in current.assigned_elsewhere
                    fix = self._fix(name, assignment, Applicability.UNSAFE if unsafe else Applicability.SAFE)
                self.report(assignment, fix=fix)

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
