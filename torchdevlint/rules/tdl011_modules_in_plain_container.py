"""TDL011 modules-in-plain-container."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.devices import string_value
from torchdevlint.analysis.module_attributes import attributes_read_after_construction
from torchdevlint.analysis.tree import descendants
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid


def _in_torch_nn(qualified: str) -> bool:
    return qualified.startswith("torch.nn.")

# Modules that never hold parameters or buffers.
_PARAMETER_FREE = frozenset(
    {"ReLU", "ReLU6", "GELU", "SiLU", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "Dropout",
     "Dropout2d", "Identity", "Flatten", "Unflatten", "LeakyReLU", "ELU", "Mish", "Hardswish",
     "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d",
     "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveMaxPool2d", "Upsample"}
)

# Names nn.ModuleDict refuses as keys: attributes every Module already has.
_MODULE_ATTRIBUTES = frozenset(
    {
        "training", "train", "eval", "forward", "to", "cuda", "cpu", "xpu", "mps", "type",
        "float", "double", "half", "bfloat16", "to_empty", "keys", "items", "values", "update",
        "pop", "clear", "apply", "modules", "children", "parameters", "buffers", "state_dict",
        "load_state_dict", "named_modules", "named_children", "named_parameters",
        "named_buffers", "add_module", "register_module", "register_buffer",
        "register_parameter", "requires_grad_", "zero_grad", "share_memory", "extra_repr",
        "get_submodule", "get_parameter", "get_buffer", "compile", "dump_patches",
    }
)


def _module_dict_keys_are_valid(value: cst.BaseExpression) -> bool:
    """nn.ModuleDict takes string keys without dots that are not Module attributes."""
    if not isinstance(value, cst.Dict):
        return False  # a comprehension's keys are unknown
    for element in value.elements:
        key = element.key if isinstance(element, cst.DictElement) else None
        text = string_value(key) if key is not None else None
        if text is None or not text or "." in text or text in _MODULE_ATTRIBUTES:
            return False
    return True


class ModulesInPlainContainer(Rule):
    """
    ## What it does
    Finds sub-modules created in an `nn.Module`'s `__init__` and kept in a plain `list` or
    `dict` attribute: a list or dict literal of module constructors, or a comprehension
    building them.

    ## Why is this bad?
    `nn.Module` registers sub-modules only when they are attributes themselves or live in an
    `nn.ModuleList`/`nn.ModuleDict`. Modules in a plain container are invisible:
    `model.to(device)` does not move them ("Expected all tensors to be on the same device"
    on the first GPU run), `model.parameters()` does not list them (the optimizer never
    trains them), and the state dict does not save them.

    Lists of modules that are registered elsewhere (`[self.conv1, self.conv2]`, or items of
    the list handed to a registered `nn.Sequential(self.noisy[0], nn.ReLU(), self.noisy[1])`,
    the list kept to reach them by index), or one by one
    in a loop over the container (`for i, m in enumerate(self.layers): self.add_module(f"l{i}",
    m)`, or their parameters handed to a method of the module, `self.register_parameter(...)`
    or a helper of its own), are fine, and
    so is a table of candidates that only `__init__` (and the helpers only it calls) reads to
    pick the one it registers (`self.backbone = self.backbones[name]`): the others are never
    used.

    ## Fix safety
    Offered for lists, and for dicts whose keys are string literals without dots that are not
    attributes every Module has (`train`, `eval`, `to`, ...), which `nn.ModuleDict` refuses.
    Unsafe: the modules become registered, so the state dict gains their keys (old
    checkpoints load only with `strict=False`) and the optimizer, if built from
    `model.parameters()`, now trains them, which changes results.

    ## Options
    None.
    """

    code = "TDL011"
    slug = "modules-in-plain-container"
    message = "Sub-modules in a plain list/dict are not registered: not moved, saved or trained"
    fix_title = "Use nn.ModuleList / nn.ModuleDict"
    requires_any_text = ("__init__",)

    VALID = [
        Valid(
            """
            import torch.nn as nn

            class NoisyDQN(nn.Module):
                def __init__(self, features, actions):
                    super().__init__()
                    self.noisy_layers = [nn.Linear(features, 512), nn.Linear(512, actions)]
                    self.head = nn.Sequential(self.noisy_layers[0], nn.ReLU(), self.noisy_layers[1])

                def forward(self, x):
                    return self.head(x)

                def reset_noise(self):
                    for layer in self.noisy_layers:
                        nn.init.normal_(layer.weight, std=0.01)
            """,
            name="items-handed-to-a-registered-sequential",
        ),
        Valid(
            """
            import torch.nn as nn
            import torchvision.models as models
            class Contrastive(nn.Module):
                def __init__(self, name, dim):
                    super().__init__()
                    self.backbones = {"resnet18": models.resnet18(num_classes=dim),
                                      "resnet50": models.resnet50(num_classes=dim)}
                    self.backbone = self._pick(name)
                def _pick(self, name):
                    return self.backbones[name]
                def forward(self, x):
                    return self.backbone(x)
            """,
            name="a-table-of-candidates-read-only-while-constructing",
        ),
        Valid(
            """
            import torch.nn as nn
            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.conv1 = nn.Conv2d(3, 8, 3)
                    self.conv2 = nn.Conv2d(8, 8, 3)
                    self.convs = [self.conv1, self.conv2]
                    self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
                    self.sizes = [64, 128]
            """,
            name="registered-elsewhere-or-not-modules",
        ),
        Valid(
            """
            import torch.nn as nn
            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.layers = [nn.Linear(3, 3) for _ in range(2)]
                    self.net = nn.Sequential(*self.layers)
            """,
            name="handed-to-sequential-right-away",
        ),
        Valid(
            """
            import torch.nn as nn
            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.losses = {"ce": nn.CrossEntropyLoss(), "mse": nn.MSELoss()}
                    self.acts = [nn.ReLU(), nn.GELU()]
            """,
            name="parameter-free-modules-have-nothing-to-move",
        ),
        Valid(
            """
            import torch.nn as nn

            class Highway(nn.Module):
                def __init__(self, size, layers):
                    super().__init__()
                    self.gates = [nn.Linear(size, size) for _ in range(layers)]
                    for i, gate in enumerate(self.gates):
                        self._register_all(gate.parameters(), f"gate_{i}")
                    self.blocks = [nn.Linear(size, size) for _ in range(layers)]
                    for i, block in enumerate(self.blocks):
                        self.add_module(f"block_{i}", block)

                def _register_all(self, parameters, prefix):
                    for j, parameter in enumerate(parameters):
                        self.register_parameter(f"{prefix}_{j}", parameter)

                def forward(self, x):
                    for gate, block in zip(self.gates, self.blocks):
                        x = gate(x).sigmoid() * block(x)
                    return x
            """,
            name="registered-one-by-one-in-a-loop",
        ),
    ]
    INVALID = [
        Invalid(
            """
            from torch import nn


            class Encoder(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.blocks = [nn.Linear(64, 64) for _ in range(4)]
            """,
            fixed="""
            from torch import nn


            class Encoder(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.blocks = nn.ModuleList([nn.Linear(64, 64) for _ in range(4)])
            """,
            applicability=Applicability.UNSAFE,
            name="documented-list-of-blocks",
            in_docs=True,
        ),
        Invalid(
            """
            import torch.nn as nn
            class Net(nn.Module):
                def __init__(self, depth):
                    super().__init__()
                    self.blocks = [nn.Linear(64, 64) for _ in range(depth)]
            """,
            fixed="""
            import torch.nn as nn
            class Net(nn.Module):
                def __init__(self, depth):
                    super().__init__()
                    self.blocks = nn.ModuleList([nn.Linear(64, 64) for _ in range(depth)])
            """,
            applicability=Applicability.UNSAFE,
            name="list-comprehension",
        ),
        Invalid(
            """
            import torch
            class Heads(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.heads = {
                        "age": torch.nn.Linear(8, 1),
                        "gender": torch.nn.Linear(8, 2),
                    }
            """,
            fixed="""
            import torch
            class Heads(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.heads = torch.nn.ModuleDict({
                        "age": torch.nn.Linear(8, 1),
                        "gender": torch.nn.Linear(8, 2),
                    })
            """,
            applicability=Applicability.UNSAFE,
            name="dict-of-heads",
        ),
        Invalid(
            """
            import torch.nn as nn
            class Heads(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.heads = {0: nn.Linear(8, 1), 1: nn.Linear(8, 2)}
            """,
            name="non-string-keys-have-no-fix",
        ),
        Invalid(
            """
            import torch.nn as nn
            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.heads = {"train": nn.Linear(4, 2), "eval": nn.Linear(4, 2)}
            """,
            name="keys-that-are-module-attributes-have-no-fix",
        ),
    ]

    def leave_Assign(self, node: cst.Assign) -> None:
        method = self.context.enclosing_method()
        if method is None or method.function.name.value != "__init__" or not self.context.flow.is_module_class(method.owner):
            return
        if len(node.targets) != 1:
            return
        target = node.targets[0].target
        if not (
            isinstance(target, cst.Attribute)
            and isinstance(target.value, cst.Name)
            and target.value.value == method.self_name
        ):
            return
        value = node.value
        container = self._container_of_new_modules(value)
        if container is None:
            return
        nn = self._nn_name()
        fix = None
        if nn is not None and (container == "ModuleList" or _module_dict_keys_are_valid(value)):
            # Wrap without re-rendering: a multi-line literal keeps its layout.
            fix = self.make_fix(
                NodeEdit.insert_before(value, f"{nn}.{container}("),
                NodeEdit.insert_after(value, ")"),
                applicability=Applicability.UNSAFE,
            )
        # Decided when __init__ ends: the list may yet be handed to nn.Sequential & co.
        self._candidates.append((target.attr.value, node, fix))

    def setup(self) -> None:
        # `self.<attr> = [modules]` assignments of the __init__ being walked, with their fixes.
        self._candidates: list[tuple[str, cst.Assign, PendingFix | None]] = []

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        if node.name.value != "__init__" or not self._candidates:
            return
        # `nn.Sequential(*self.layers)`, `nn.ModuleList(self.layers)`: registered after all.
        method = self.context.enclosing_method()
        registered = self.context.flow.attributes_handed_to_modules(node) \
            | (_registered_one_by_one(node, method.self_name) if method is not None and method.self_name else frozenset())
        used = attributes_read_after_construction(method.owner) if method is not None else None
        # (None: no method besides the constructor shows what the instance uses.)
        for name, assignment, fix in self._candidates:
            if name not in registered and (used is None or name in used):
                self.report(assignment, fix=fix)
        self._candidates.clear()

    def _is_new_module(self, node: cst.BaseExpression) -> bool:
        return isinstance(node, cst.Call) and self.context.flow.value_of(node).is_module_like

    def _may_hold_tensors(self, node: cst.BaseExpression) -> bool:
        """Activations and losses built without arguments hold no parameters or buffers:
        nothing to move, train or save, so a plain container of only those is harmless."""
        if not isinstance(node, cst.Call):
            return True
        qualified = self.context.names.qualified_name(node.func, among=_in_torch_nn) or ""
        last = qualified.rsplit(".", 1)[-1]
        if not qualified.startswith("torch.nn."):
            return True
        if last in _PARAMETER_FREE:
            return False
        if last.endswith("Loss"):
            # A loss holds a tensor only when given class weights (positionally or by name).
            return any(
                arg.keyword is None or arg.keyword.value in ("weight", "pos_weight") for arg in node.args
            )
        return True

    def _container_of_new_modules(self, value: cst.BaseExpression) -> str | None:
        container = self._container_kind(value)
        if container is None:
            return None
        elements: list[cst.BaseExpression]
        if isinstance(value, (cst.List, cst.Dict)):
            elements = [e.value for e in value.elements]
        elif isinstance(value, cst.DictComp):
            elements = [value.value]
        elif isinstance(value, cst.ListComp):
            elements = [value.elt]
        else:
            return None
        return container if any(self._may_hold_tensors(e) for e in elements) else None

    def _container_kind(self, value: cst.BaseExpression) -> str | None:
        if isinstance(value, cst.List) and value.elements:
            if all(not isinstance(e, cst.StarredElement) and self._is_new_module(e.value) for e in value.elements):
                return "ModuleList"
        elif isinstance(value, cst.ListComp) and self._is_new_module(value.elt):
            return "ModuleList"
        elif isinstance(value, cst.Dict) and value.elements:
            if all(isinstance(e, cst.DictElement) and self._is_new_module(e.value) for e in value.elements):
                return "ModuleDict"
        elif isinstance(value, cst.DictComp) and self._is_new_module(value.value):
            return "ModuleDict"
        return None

    def _nn_name(self) -> str | None:
        names = self.context.names
        nn = names.local_name_for("torch.nn")
        if nn is not None:
            return nn
        torch = names.local_name_for("torch")
        return f"{torch}.nn" if torch is not None else None


def _registered_one_by_one(init: cst.FunctionDef, self_name: str) -> frozenset[str]:
    """`for i, module in enumerate(self.layers): self._add_to_parameters(module.parameters(),
    ...)` (or `self.add_module(name, module)`): the attributes of `self` a loop of `__init__`
    walks, handing each element (or what it holds) to a method of `self`."""
    found: set[str] = set()
    for loop in descendants(init.body, into_definitions=False):
        if type(loop) is not cst.For:
            continue
        walked = [node.attr.value for node in descendants(loop.iter) if isinstance(node, cst.Attribute)
                  and isinstance(node.value, cst.Name) and node.value.value == self_name]
        elements = {node.value for node in descendants(loop.target) if isinstance(node, cst.Name)}
        if not walked or not elements:
            continue
        for call in descendants(loop.body, into_definitions=False):
            if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) \
                    and isinstance(call.func.value, cst.Name) and call.func.value.value == self_name \
                    and any(isinstance(name, cst.Name) and name.value in elements
                            for arg in call.args for name in descendants(arg.value)):
                found.update(walked)
    return frozenset(found)
