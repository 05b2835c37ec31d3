"""TDL002 forward-tensor-without-device."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis import torch_api
from torchdevlint.analysis.tree import child_nodes
from torchdevlint.analysis.value_kinds import keyword_argument
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid

# A factory immediately followed by one of these is put on a device anyway.
_DEVICE_SETTING_METHODS = frozenset({"to", "cuda", "type_as"})
# Functions whose `lengths` argument must be a CPU tensor.
_CPU_LENGTH_FUNCTIONS = frozenset({"pack_padded_sequence"})
# Reading only these never meets device data.
_HOST_ONLY_ATTRIBUTES = frozenset(
    {"dtype", "shape", "size", "dim", "ndim", "numel", "tolist", "item", "numpy", "is_floating_point"}
)


def _binds_name(body: cst.CSTNode, name: str) -> bool:
    stack: list[cst.CSTNode] = [body]
    while stack:
        node = stack.pop()
        targets: list[cst.BaseExpression] = []
        if isinstance(node, cst.Assign):
            targets = [t.target for t in node.targets]
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign, cst.For, cst.CompFor, cst.NamedExpr, cst.Del)):
            targets = [node.target]
        elif isinstance(node, cst.AsName) and isinstance(node.name, cst.BaseExpression):
            targets = [node.name]
        for target in targets:
            pending: list[cst.CSTNode] = [target]
            while pending:
                part = pending.pop()
                if isinstance(part, cst.Name) and part.value == name:
                    return True
                if isinstance(part, (cst.Tuple, cst.List)):
                    pending.extend(e.value for e in part.elements)
                elif isinstance(part, (cst.StarredElement, cst.Element)):
                    pending.append(part.value)
        stack.extend(child_nodes(node))
    return False


def _is_sequence_lengths(node: cst.CSTNode, ancestors: list[cst.CSTNode]) -> bool:
    """`pack_padded_sequence(x, lengths)`: PyTorch requires the lengths on the CPU."""
    if len(ancestors) < 2 or not isinstance(ancestors[0], cst.Arg) or not isinstance(ancestors[1], cst.Call):
        return False
    arg, call = ancestors[0], ancestors[1]
    func = call.func
    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    if name not in _CPU_LENGTH_FUNCTIONS:
        return False
    return arg.keyword is not None and arg.keyword.value == "lengths" or (call.args.index(arg) == 1 if arg in call.args else False)


def _is_host_use(name: cst.Name, ancestors: list[cst.CSTNode]) -> bool:
    """`for i in n:` (Python ints for slicing), `n.tolist()`, `len(n)`: values read on the host."""
    if not ancestors:
        return False
    if _is_sequence_lengths(name, ancestors):
        return True
    parent = ancestors[0]
    if isinstance(parent, cst.For) and parent.iter is name:
        return True
    if isinstance(parent, cst.Attribute) and parent.attr.value in _HOST_ONLY_ATTRIBUTES:
        return True
    return (
        len(ancestors) >= 2
        and isinstance(parent, cst.Arg)
        and isinstance(ancestors[1], cst.Call)
        and isinstance(ancestors[1].func, cst.Name)
        and ancestors[1].func.value in ("len", "int", "float", "range")
    )


def _is_index_use(node: cst.BaseExpression, ancestors: list[cst.CSTNode]) -> bool:
    """`x[r]`, `x[:, r]`: CPU index tensors are accepted for tensors on any device."""
    return (
        len(ancestors) >= 3
        and isinstance(ancestors[0], cst.Index)
        and isinstance(ancestors[1], cst.SubscriptElement)
        and isinstance(ancestors[2], cst.Subscript)
    )


def _is_scalar_literal(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.UnaryOperation):
        node = node.expression
    if isinstance(node, cst.Name):
        return node.value in ("True", "False")
    return isinstance(node, (cst.Integer, cst.Float))


class ForwardTensorWithoutDevice(Rule):
    """
    ## What it does
    Finds tensor factories (`torch.zeros`, `ones`, `empty`, `full`, `rand`, `randn`,
    `randint`, `arange`, `linspace`, `logspace`, `eye`, `tensor`, …) called inside the
    `forward` method of an `nn.Module` subclass without a `device=` argument, including in
    nested functions, lambdas and comprehensions there.

    ## Why is this bad?
    Such a tensor is always created on the CPU. Once the model is moved to a GPU, its inputs
    are on the GPU and the new tensor is not: an RNN fails with "Input and hidden tensors are
    not at the same device", arithmetic with "Expected all tensors to be on the same device".
    The model works in a CPU-only test and fails on the first GPU run.

    Not reported: `*_like` factories and `Tensor.new_*` (they follow their source tensor), a
    factory immediately followed by `.to(...)`, `.cuda()` or `.type_as(...)`, a
    `torch.tensor` of a single number (0-dimensional CPU tensors mix with any device),
    tensors built in `__init__`, and `forward` of classes that are not Modules.

    ## Fix safety
    The fix adds `device=<input>.device`, using the first parameter of `forward` after
    `self`. It is safe when that parameter is annotated as a Tensor; otherwise it is unsafe,
    because the first input may be something without a `.device` (a list, a dict). No fix is
    offered when `forward` takes no parameter or the name is shadowed where the call is.

    ## Options
    None.
    """

    code = "TDL002"
    slug = "forward-tensor-without-device"
    message = "Tensor created in forward without device=; it stays on the CPU when the model moves"
    fix_title = "Create the tensor on the input's device"
    requires_any_text = ("forward",)

    VALID = [
        Valid(
            """
            import torch
            import torch.nn as nn
            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.register_buffer("scale", torch.ones(4))
                def forward(self, x):
                    h = torch.zeros(2, x.size(0), 8, device=x.device)
                    mask = torch.ones_like(x)
                    pad = x.new_zeros(3)
                    pos = torch.arange(x.size(1)).to(x.device)
                    eps = torch.tensor(1e-6)
                    return x * mask + h.sum() + pad.sum() + pos.sum() + eps
            """,
            name="device-given-like-new-and-moved",
        ),
        Valid(
            """
            import torch
            class Helper:
                def forward(self, x):
                    return torch.zeros(3)
            """,
            name="class-not-a-module",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            class Net(nn.Module):
                def forward(self, x, **kwargs):
                    return torch.zeros(3, **kwargs)
            """,
            name="keyword-splat-may-carry-device",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            class Shuffle(nn.Module):
                def forward(self, x):
                    order = torch.randperm(x.size(1))
                    assert torch.tensor([0.0]).dtype == torch.float32
                    return x[:, order] + x[:, torch.arange(x.size(1))]
            """,
            name="used-only-as-index-or-for-its-dtype",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            class MultiCrop(nn.Module):
                def forward(self, crops):
                    ends = torch.cumsum(torch.unique_consecutive(
                        torch.tensor([c.shape[-1] for c in crops]), return_counts=True,
                    )[1], 0)
                    start, outputs = 0, []
                    for end in ends:
                        outputs.append(self.backbone(torch.cat(crops[start:end])))
                        start = end
                    return torch.cat(outputs)
            """,
            name="host-bookkeeping-through-torch-ops",
        ),
        Valid(
            """
            import torch
            from torch import nn
            from torch.nn.utils.rnn import pack_padded_sequence
            class Encoder(nn.Module):
                def forward(self, x: torch.Tensor, lens):
                    lengths = torch.tensor(lens, dtype=torch.int64)
                    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
                    again = pack_padded_sequence(x, torch.tensor(lens), batch_first=True)
                    return self.rnn(packed), again
            """,
            name="sequence-lengths-must-stay-on-the-cpu",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            from torch import nn


            class Encoder(nn.Module):
                def forward(self, x):
                    h0 = torch.zeros(self.num_layers, x.size(0), self.hidden_size)
                    return self.rnn(x, h0)
            """,
            fixed="""
            import torch
            from torch import nn


            class Encoder(nn.Module):
                def forward(self, x):
                    h0 = torch.zeros(self.num_layers, x.size(0), self.hidden_size, device=x.device)
                    return self.rnn(x, h0)
            """,
            applicability=Applicability.UNSAFE,
            name="documented-rnn-hidden-state",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            class Encoder(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.rnn = nn.GRU(4, 8, batch_first=True)
                def forward(self, x: torch.Tensor):
                    h0 = torch.zeros(1, x.size(0), 8)
                    return self.rnn(x, h0)
            """,
            fixed="""
            import torch
            import torch.nn as nn
            class Encoder(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.rnn = nn.GRU(4, 8, batch_first=True)
                def forward(self, x: torch.Tensor):
                    h0 = torch.zeros(1, x.size(0), 8, device=x.device)
                    return self.rnn(x, h0)
            """,
            applicability=Applicability.SAFE,
            name="rnn-hidden-state-annotated-input",
        ),
        Invalid(
            """
            import torch as T
            from torch import nn, arange
            class Block(nn.Module):
                pass
            class Positional(Block):
                def forward(self, tokens):
                    positions = arange(tokens.size(1))
                    noise = [T.randn(
                        4,
                        4,
                    ) for _ in range(2)]
                    return tokens + positions
            """,
            fixed="""
            import torch as T
            from torch import nn, arange
            class Block(nn.Module):
                pass
            class Positional(Block):
                def forward(self, tokens):
                    positions = arange(tokens.size(1), device=tokens.device)
                    noise = [T.randn(
                        4,
                        4, device=tokens.device,
                    ) for _ in range(2)]
                    return tokens + positions
            """,
            applicability=Applicability.UNSAFE,
            count=2,
            name="aliases-local-base-and-comprehension",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            class Net(nn.Module):
                def forward(self):
                    return torch.ones(3)
            """,
            name="no-input-no-fix",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            class Net(nn.Module):
                def forward(self, x: torch.Tensor):
                    x = x.tolist()
                    return torch.tensor(x)
            """,
            name="input-rebound-in-forward-has-no-fix",
        ),
    ]

    def visit_Call(self, node: cst.Call) -> None:
        qualified = self.context.imports.qualified_name(node.func)
        if qualified not in torch_api.TENSOR_FACTORIES:
            return
        if keyword_argument(node, "device") is not None or keyword_argument(node, "out") is not None:
            return
        if any(arg.star == "**" for arg in node.args):
            return
        if qualified == "torch.tensor" and node.args and _is_scalar_literal(node.args[0].value):
            return
        method = self.context.enclosing_method_class()
        if method is None:
            return
        function, owner = method
        if function.name.value != "forward" or not owner.is_module:
            return
        ancestors = self.context.ancestors(node)
        parent = ancestors[0] if ancestors else None
        if isinstance(parent, cst.Attribute) and (
            parent.attr.value in _DEVICE_SETTING_METHODS or parent.attr.value in _HOST_ONLY_ATTRIBUTES
        ):
            return
        if _is_index_use(node, ancestors) or _is_sequence_lengths(node, ancestors):
            return
        fix = self._fix(node, function)
        name = self._assigned_name(ancestors)
        if name is not None:
            # Decide at the first use: a tensor used only for host bookkeeping (an index, a
            # loop over its values) is harmless.
            self._pending[name] = (node, fix)
            self._index_only.discard(name)
            return
        self.report(node, fix=fix)

    def _assigned_name(self, ancestors: list[cst.CSTNode]) -> str | None:
        """The name the tensor is stored in, directly or through torch ops applied to it:
        `n = torch.tensor(...)`, `n = torch.cumsum(torch.tensor(...), 0)[1]`."""
        for ancestor in ancestors:
            if isinstance(ancestor, (cst.Arg, cst.Index, cst.SubscriptElement, cst.Subscript)):
                continue
            if isinstance(ancestor, cst.Call):
                qualified = self.context.imports.qualified_name(ancestor.func)
                if qualified is not None and qualified.startswith("torch.") and not qualified.startswith("torch.nn."):
                    continue
                return None
            if (
                isinstance(ancestor, cst.Assign)
                and len(ancestor.targets) == 1
                and isinstance(ancestor.targets[0].target, cst.Name)
            ):
                return ancestor.targets[0].target.value
            return None
        return None

    def setup(self) -> None:
        self._pending: dict[str, tuple[cst.Call, PendingFix | None]] = {}
        self._index_only: set[str] = set()
        self._rebinding: dict[tuple[int, str], bool] = {}

    def visit_Name(self, node: cst.Name) -> None:
        if node.value not in self._pending:
            return
        ancestors = self.context.ancestors(node)
        if ancestors and isinstance(ancestors[0], cst.AssignTarget):
            return
        if _is_index_use(node, ancestors) or _is_host_use(node, ancestors):
            self._index_only.add(node.value)
            return
        call, fix = self._pending.pop(node.value)
        self.report(call, fix=fix)

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        if node.name.value != "forward":
            return
        # Created and never read as a value: still a CPU tensor in a device model; report.
        for name, (call, fix) in self._pending.items():
            if name not in self._index_only:
                self.report(call, fix=fix)
        self._pending.clear()
        self._index_only.clear()

    def _rebound_in(self, forward: cst.FunctionDef, name: str) -> bool:
        """Whether forward's body assigns, loops over, deletes or `with ... as` the name: then
        `name.device` may not be the input's device (or exist) where the tensor is made."""
        key = (id(forward), name)
        cached = self._rebinding.get(key)
        if cached is None:
            cached = self._rebinding[key] = _binds_name(forward.body, name)
        return cached

    def _fix(self, call: cst.Call, forward: cst.FunctionDef) -> PendingFix | None:
        params = [*forward.params.posonly_params, *forward.params.params][1:]
        if not params:
            return None
        first = params[0]
        name = first.name.value
        kinds = self.context.kinds
        # The name must still mean forward's parameter where the call is.
        for scope in reversed(kinds.scopes):
            if name in scope.bindings:
                if scope.node is not forward:
                    return None
                break
        if self._rebound_in(forward, name):
            return None
        safe = kinds.annotation_kind(first.annotation).is_tensor
        applicability = Applicability.SAFE if safe else Applicability.UNSAFE
        device = f"device={name}.device"
        if call.args:
            edit = NodeEdit.insert_after(call.args[-1].value, f", {device}")
        else:
            edit = NodeEdit(call, f"{self.context.code_for_node(call.func)}({device})")
        return self.make_fix(edit, applicability=applicability)
