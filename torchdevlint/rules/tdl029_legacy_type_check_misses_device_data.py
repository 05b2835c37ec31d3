"""TDL029 legacy-type-check-misses-device-data."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.devices import LEGACY_TENSOR_DTYPES, string_value
from torchdevlint.analysis.names import dotted_name
from torchdevlint.analysis.tree import child_nodes
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import DTYPE_MISMATCH, RuntimeProof

# `torch.LongTensor` -> `int64`: the host types that name a dtype (`torch.Tensor` names none).
_HOST_TYPE_DTYPES = {f"torch.{name}Tensor": dtype for name, dtype in LEGACY_TENSOR_DTYPES.items()}
# Code that also tells CUDA data apart knows what the host type leaves out.
_HANDLES_CUDA_DATA = ("torch.cuda.", ".is_cuda", "'cuda'", '"cuda"')


class LegacyTypeCheckMissesDeviceData(Rule):
    """
    ## What it does
    Finds a test of a tensor's type against a legacy CPU tensor type, `isinstance(x,
    torch.LongTensor)` or `x.type() == "torch.FloatTensor"`, where `x` may be on a GPU: the
    flow model shows it there on some path (a tensor moved there, a model's output, a
    module's inputs in `forward`), or the same function moves it back with `x.cpu()`.

    ## Why is this bad?
    A legacy tensor type names a device as well as a dtype: `torch.LongTensor` is an int64
    tensor *on the CPU*. For the same tensor on a GPU (`torch.cuda.LongTensor`) the test is
    False, so GPU runs silently take the other branch: indices are treated as features, a
    squeeze is skipped, a conversion never happens. The program works on the CPU and fails,
    or computes something else, on the GPU.

    ## Not reported
    Not reported: data the flow model shows on the host (a dataset's items, tensors made on
    the CPU), data whose place it cannot show and that the function never moves back, and
    code that also tests for CUDA data (`torch.cuda.LongTensor`, `.is_cuda`). `isinstance(x,
    torch.Tensor)` holds on every device.

    ## Fix safety
    The fix tests the dtype instead, which holds on every device: `isinstance(x,
    torch.Tensor) and x.dtype == torch.int64`, or `x.dtype == torch.float32` for `x.type()
    == "torch.FloatTensor"`. On the CPU the answer is the same; on a GPU it changes from
    False to True, which is the point, but the branch it now takes runs on GPU data for the
    first time, so the fix is unsafe. It is offered where the tested value is a name or an
    attribute (read twice by the fix).

    ## Options
    None.
    """

    code = "TDL029"
    slug = "legacy-type-check-misses-device-data"
    message = "A legacy CPU tensor type in a type test: it is False for the same tensor on a GPU"
    fix_title = "Test the dtype, which holds on every device"
    proof = RuntimeProof(DTYPE_MISMATCH)
    requires_any_text = ("Tensor",)

    VALID = [
        Valid(
            """
            import torch
            from torch.utils.data import Dataset
            class Pairs(Dataset):
                def __getitem__(self, i):
                    label = torch.tensor([i % 2])
                    if isinstance(label, torch.LongTensor):
                        label = label.float()
                    return torch.randn(4), label
            """,
            name="host-data",
        ),
        Valid(
            """
            import torch
            def to_ids(x):
                if isinstance(x, torch.LongTensor) or isinstance(x, torch.cuda.LongTensor):
                    return x
                return x.argmax(-1)
            def describe(batch):
                return batch.type() == "torch.FloatTensor"
            """,
            name="code-that-tests-for-cuda-and-data-of-unknown-place",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch.nn as nn
            class Scorer(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.embed = nn.Embedding(100, 16)
                    self.head = nn.Linear(16, 1)
                def forward(self, tokens_or_vectors):
                    if isinstance(tokens_or_vectors, torch.LongTensor):
                        tokens_or_vectors = self.embed(tokens_or_vectors)
                    return self.head(tokens_or_vectors)
            """,
            fixed="""
            import torch
            import torch.nn as nn
            class Scorer(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.embed = nn.Embedding(100, 16)
                    self.head = nn.Linear(16, 1)
                def forward(self, tokens_or_vectors):
                    if isinstance(tokens_or_vectors, torch.Tensor) and tokens_or_vectors.dtype == torch.int64:
                        tokens_or_vectors = self.embed(tokens_or_vectors)
                    return self.head(tokens_or_vectors)
            """,
            applicability=Applicability.UNSAFE,
            name="ids-or-vectors-in-forward",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            class EnvWrapper:
                def step(self, actions):
                    if not isinstance(actions, (torch.LongTensor, torch.IntTensor)):
                        actions = actions.round()
                    return self.env.step(actions.cpu().numpy())
            def evaluate(model, obs, device):
                scores = model(obs.to(device))
                if scores.type() == "torch.FloatTensor":
                    scores = scores.softmax(-1)
                return scores
            """,
            fixed="""
            import torch
            class EnvWrapper:
                def step(self, actions):
                    if not (isinstance(actions, torch.Tensor) and actions.dtype in (torch.int64, torch.int32)):
                        actions = actions.round()
                    return self.env.step(actions.cpu().numpy())
            def evaluate(model, obs, device):
                scores = model(obs.to(device))
                if scores.dtype == torch.float32:
                    scores = scores.softmax(-1)
                return scores
            """,
            applicability=Applicability.UNSAFE,
            count=2,
            name="moved-back-after-the-test-and-a-models-output",
        ),
    ]

    def visit_Call(self, node: cst.Call) -> None:
        if type(node.func) is not cst.Name or node.func.value != "isinstance" or len(node.args) != 2 \
                or any(arg.star or arg.keyword is not None for arg in node.args):
            return
        tested, kinds = node.args[0].value, node.args[1].value
        written = [element.value for element in kinds.elements] if type(kinds) is cst.Tuple else [kinds]
        dtypes = [_HOST_TYPE_DTYPES.get(self.context.names.qualified_name(kind) or "") for kind in written]
        if not dtypes or None in dtypes or not self._may_be_device_data(tested):
            return
        fix = None
        torch_name = self.context.names.local_name_for("torch")
        if dotted_name(tested) is not None and torch_name is not None:
            text = self.context.code_for_node(tested)
            test = f"isinstance({text}, {torch_name}.Tensor) and {text}.dtype {_dtype_test(dtypes, torch_name)}"
            if not isinstance(self.context.parent(node), (cst.If, cst.While, cst.Assert, cst.IfExp)):
                test = f"({test})"
            fix = self.make_fix(NodeEdit(node, test), applicability=Applicability.UNSAFE)
        self.report(node, fix=fix)

    def visit_Comparison(self, node: cst.Comparison) -> None:
        # `x.type() == "torch.FloatTensor"`, `x.type() in ("torch.FloatTensor", ...)`.
        left = node.left
        if len(node.comparisons) != 1 or type(left) is not cst.Call or type(left.func) is not cst.Attribute \
                or left.func.attr.value != "type" or left.args:
            return
        target = node.comparisons[0]
        compared = target.comparator
        collection = isinstance(compared, (cst.Tuple, cst.List, cst.Set))
        written = [element.value for element in compared.elements] \
            if isinstance(compared, (cst.Tuple, cst.List, cst.Set)) else [compared]
        dtypes = [_HOST_TYPE_DTYPES.get(string_value(name) or "") for name in written]
        tested = left.func.value
        if not dtypes or None in dtypes or not self._may_be_device_data(tested):
            return
        operator = {cst.Equal: "==", cst.NotEqual: "!=", cst.In: "in", cst.NotIn: "not in"}.get(type(target.operator))
        torch_name = self.context.names.local_name_for("torch")
        fix = None
        if operator is not None and torch_name is not None and (operator in ("in", "not in")) == collection:
            dtype_text = _dtype_tuple(dtypes, torch_name) if collection else f"{torch_name}.{dtypes[0]}"
            fix = self.make_fix(NodeEdit(node, f"{self.context.code_for_node(tested)}.dtype {operator} {dtype_text}"),
                                applicability=Applicability.UNSAFE)
        self.report(node, fix=fix)

    def _may_be_device_data(self, tested: cst.BaseExpression) -> bool:
        value = self.context.flow.value_of(tested)
        if value.places is not None:
            return any(place.may_be_accelerator for place in value.places)
        if not value.is_tensor_like and value.is_known:
            return False
        scope = self.context.enclosing_function()
        if scope is None:
            return False
        text = self.context.code_for_node(scope)
        if any(marker in text for marker in _HANDLES_CUDA_DATA):
            return False
        # Brought back to the host in the same function: the author expects device data here.
        name = dotted_name(tested)
        return name is not None and _moved_back(scope, name)


def _moved_back(scope: cst.CSTNode, name: str) -> bool:
    stack: list[cst.CSTNode] = [scope]
    while stack:
        node = stack.pop()
        if type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value == "cpu" \
                and dotted_name(node.func.value) == name:
            return True
        stack.extend(child_nodes(node))
    return False


def _dtype_test(dtypes: list[str | None], torch_name: str) -> str:
    if len(dtypes) == 1:
        return f"== {torch_name}.{dtypes[0]}"
    return f"in {_dtype_tuple(dtypes, torch_name)}"


def _dtype_tuple(dtypes: list[str | None], torch_name: str) -> str:
    inner = ", ".join(f"{torch_name}.{dtype}" for dtype in dtypes)
    return f"({inner},)" if len(dtypes) == 1 else f"({inner})"

