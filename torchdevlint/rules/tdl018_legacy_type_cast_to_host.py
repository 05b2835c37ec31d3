"""TDL018 legacy-type-cast-to-host."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.brains import torch_api
from torchdevlint.analysis.devices import string_value
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid

# The dtype method each legacy host tensor type stands for (`torch.Tensor` names none).
_DTYPE_METHODS = {
    "torch.FloatTensor": "float", "torch.DoubleTensor": "double", "torch.HalfTensor": "half",
    "torch.BFloat16Tensor": "bfloat16", "torch.LongTensor": "long", "torch.IntTensor": "int",
    "torch.ShortTensor": "short", "torch.CharTensor": "char", "torch.ByteTensor": "byte",
    "torch.BoolTensor": "bool",
}


class LegacyTypeCastToHost(Rule):
    """
    ## What it does
    Finds `x.type(torch.FloatTensor)` (or another legacy CPU tensor type: `LongTensor`,
    `ByteTensor` …, also written as the string `"torch.FloatTensor"`) where the flow model
    shows `x` on an accelerator on every path (a tensor moved there, a model's output, the
    inputs and parameters of a module's `forward`), and the host copy then meets data that
    stayed there, or leaves its function as what it returns.

    ## Why is this bad?
    A legacy tensor type names a device as well as a dtype: `torch.FloatTensor` is a float32
    tensor *on the CPU*. The cast copies the data back to the host. The next operation with
    data that stayed on the GPU fails with "Expected all tensors to be on the same device".
    On a CPU-only machine the code runs, so the bug ships.

    ## Not reported
    Not reported: casts of host data (`images.type(torch.FloatTensor)` before the move),
    casts to a dtype (`x.type(torch.float32)`) or to a CUDA type, data whose place the
    model cannot show, and a copy only read on the host (`(pred == y).sum().type(
    torch.FloatTensor) / n` printed as an accuracy, or plotted), which costs a copy and
    breaks nothing; nor a 0-dimensional copy in arithmetic with device data, which PyTorch
    allows.

    ## Fix safety
    Unsafe. The fix keeps the dtype and the device: `x.type(torch.FloatTensor)` becomes
    `x.float()`. Code after the cast that relied on the host copy (`.numpy()`, a CPU-only
    library) would then get device data. `torch.Tensor` names no dtype and gets no fix.

    ## Options
    None.
    """

    code = "TDL018"
    slug = "legacy-type-cast-to-host"
    message = "A legacy CPU tensor type moves this device data back to the host"
    fix_title = "Cast the dtype on the device"
    requires_any_text = (".type(",)

    VALID = [
        Valid(
            """
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            images = torch.randint(0, 255, (8, 3, 32, 32)).type(torch.FloatTensor)
            images = images.to(device)
            halves = images.type(torch.float16)
            kept = images.type(torch.cuda.FloatTensor)
            """,
            name="host-data-dtypes-and-cuda-types",
        ),
        Valid(
            """
            import torch
            def score(batch):
                return batch.type(torch.FloatTensor).mean()
            """,
            name="data-of-unknown-place",
        ),
        Valid(
            """
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(4, 3).to(device)
            for inputs, labels in loader:
                inputs, labels = inputs.to(device), labels.to(device)
                predicted = model(inputs).argmax(1)
                accuracy = (predicted == labels).sum().type(torch.FloatTensor) / labels.size(0)
                print(f"accuracy {accuracy:.2f}")
            """,
            name="a-copy-only-read-on-the-host",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch.nn as nn

            class Classifier(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.embed = nn.Embedding(100, 16)
                    self.head = nn.Linear(16, 2)

                def forward(self, tokens, mask):
                    weights = mask.type(torch.FloatTensor).unsqueeze(-1)
                    pooled = (self.embed(tokens) * weights).sum(1)
                    return self.head(pooled)
            """,
            fixed="""
            import torch
            import torch.nn as nn

            class Classifier(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.embed = nn.Embedding(100, 16)
                    self.head = nn.Linear(16, 2)

                def forward(self, tokens, mask):
                    weights = mask.float().unsqueeze(-1)
                    pooled = (self.embed(tokens) * weights).sum(1)
                    return self.head(pooled)
            """,
            applicability=Applicability.UNSAFE,
            name="documented-mask-cast-in-forward",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            logits = torch.randn(8, 3).to(device)
            labels = torch.randint(0, 3, (8,)).to(device)
            weights = (logits.argmax(1) == labels).type("torch.FloatTensor")
            everything = labels.type(torch.Tensor)
            loss = (weights * logits[:, 0]).sum() + (everything * logits[:, 1]).sum()
            """,
            fixed="""
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            logits = torch.randn(8, 3).to(device)
            labels = torch.randint(0, 3, (8,)).to(device)
            weights = (logits.argmax(1) == labels).float()
            everything = labels.type(torch.Tensor)
            loss = (weights * logits[:, 0]).sum() + (everything * logits[:, 1]).sum()
            """,
            applicability=Applicability.UNSAFE,
            count=2,
            name="a-string-type-and-one-that-names-no-dtype",
        ),
    ]

    def setup(self) -> None:
        self._casts: list[tuple[cst.Call, PendingFix | None]] = []

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not (type(func) is cst.Attribute and func.attr.value == "type" and len(node.args) == 1
                and node.args[0].keyword is None and not node.args[0].star):
            return
        argument = node.args[0].value
        named = string_value(argument)
        if named is None:
            if type(argument) is not cst.Attribute or not argument.attr.value.endswith("Tensor"):
                return
            named = self.context.names.qualified_name(argument, among=torch_api.LEGACY_HOST_TENSOR_TYPES)
        if named not in torch_api.LEGACY_HOST_TENSOR_TYPES:
            return
        receiver = self.context.flow.value_of(func.value)
        if not (receiver.is_tensor_like and receiver.on_accelerator):
            return
        method = _DTYPE_METHODS.get(named)
        fix = None
        if method is not None:
            receiver_code = self.context.code_for_node(func.value)
            fix = self.make_fix(NodeEdit(node, f"{receiver_code}.{method}()"), applicability=Applicability.UNSAFE)
        self._casts.append((node, fix))

    def leave_Module(self, node: cst.Module) -> None:
        for cast, fix in self._casts:
            # A copy only read on the host (an accuracy printed, a value plotted) costs a copy
            # and breaks nothing: reported where it meets device data or leaves its function.
            if self.context.flow.host_data_reaches_a_device(cast):
                self.report(cast, fix=fix)
