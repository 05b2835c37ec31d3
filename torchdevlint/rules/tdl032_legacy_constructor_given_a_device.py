"""TDL032 legacy-constructor-given-a-device."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.brains.torch_api import LEGACY_HOST_TENSOR_TYPES
from torchdevlint.analysis.devices import LEGACY_TENSOR_DTYPES
from torchdevlint.analysis.flow.values import HOST_PLACE
from torchdevlint.analysis.names import dotted_name
from torchdevlint.analysis.tree import keyword_argument
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import LEGACY_CONSTRUCTOR_OFF_THE_CPU, RuntimeProof
from torchdevlint.shared_fixes import legacy_constructor_factory


class LegacyConstructorGivenADevice(Rule):
    """
    ## What it does
    Finds a legacy tensor constructor (`torch.Tensor(...)`, `torch.FloatTensor(...)`,
    `torch.LongTensor(...)`, …) handed a `device=` that may be a GPU: `torch.Tensor([0],
    device=ctx)` where `ctx = try_gpu()`, or a device the function was handed. A device the
    flow model knows to be the CPU on every path (`device="cpu"`) is not reported.

    ## Why is this bad?
    The legacy constructors make CPU tensors only. With any other device they raise
    "RuntimeError: legacy constructor expects device type: cpu but device type: cuda was
    passed", on a CUDA machine as on any other: the code runs on a laptop and fails on the GPU
    it was written to reach. PyTorch's factories take a `dtype` and a `device` instead.

    ## Fix safety
    Safe: the call becomes the factory it stands for, on the same device: sizes
    (`torch.FloatTensor(2, 3, device=d)`, `torch.Tensor(size=shape, device=d)`) become
    `torch.empty(..., dtype=..., device=d)`, and a list or tuple of values becomes
    `torch.tensor(..., dtype=..., device=d)`. The dtype is the constructor's own
    (`torch.float32` for `FloatTensor`, `torch.get_default_dtype()` for `torch.Tensor`), so
    the values do not change. No fix where one argument may be data or a size (`torch.Tensor(x,
    device=d)`), or where the constructor is reached through another name.

    ## Options
    None.
    """

    code = "TDL032"
    slug = "legacy-constructor-given-a-device"
    message = "A legacy tensor constructor makes CPU tensors only: given a GPU device, it raises"
    fix_title = "Use the factory with dtype= and device="
    proof = RuntimeProof(LEGACY_CONSTRUCTOR_OFF_THE_CPU)
    requires_any_text = ("Tensor(",)

    VALID = [
        Valid(
            """
            import torch

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            weights = torch.Tensor([0.2, 0.8])
            on_the_host = torch.FloatTensor(3, 4, device="cpu")
            scale = torch.tensor([0.2, 0.8], device=device)
            """,
            name="no-device-the-cpu-or-a-factory",
        ),
    ]

    INVALID = [
        Invalid(
            """
            import torch

            def try_gpu():
                return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")

            ctx = try_gpu()
            W_xh = torch.Tensor(size=(28, 256), device=ctx).normal_(0, 0.01)
            b_h = torch.Tensor([0.5, 0.5], device=ctx)
            steps = torch.LongTensor(4, device=ctx)
            """,
            fixed="""
            import torch

            def try_gpu():
                return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")

            ctx = try_gpu()
            W_xh = torch.empty((28, 256), dtype=torch.get_default_dtype(), device=ctx).normal_(0, 0.01)
            b_h = torch.tensor([0.5, 0.5], dtype=torch.get_default_dtype(), device=ctx)
            steps = torch.empty(4, dtype=torch.int64, device=ctx)
            """,
            applicability=Applicability.SAFE,
            count=3,
            name="parameters-made-on-the-chosen-device",
            in_docs=True,
        ),
        Invalid(
            """
            import torch

            def clip_gradients(params, theta, device):
                norm = torch.Tensor([0], device=device)
                for param in params:
                    norm += (param.grad ** 2).sum()
                return norm.sqrt().item() > theta

            def grid(xs, device):
                return torch.Tensor(xs, device=device)
            """,
            fixed="""
            import torch

            def clip_gradients(params, theta, device):
                norm = torch.tensor([0], dtype=torch.get_default_dtype(), device=device)
                for param in params:
                    norm += (param.grad ** 2).sum()
                return norm.sqrt().item() > theta

            def grid(xs, device):
                return torch.Tensor(xs, device=device)
            """,
            applicability=Applicability.SAFE,
            count=2,
            name="a-device-the-function-is-handed",
        ),
    ]

    def visit_Call(self, node: cst.Call) -> None:
        device = keyword_argument(node, "device")
        if device is None:
            return
        qualified = self.context.names.qualified_name(node.func, among=LEGACY_HOST_TENSOR_TYPES)
        if qualified is None:
            return
        value = self.context.flow.value_of(device.value)
        if value.device == HOST_PLACE or value.places == frozenset({HOST_PLACE}) and value.is_device:
            return  # the CPU on every path
        self.report(node, message=(
            f"{qualified}(...) is a legacy constructor that makes CPU tensors only: with "
            f"device={self.context.code_for_node(device.value)} a GPU, it raises \"legacy constructor expects "
            f"device type: cpu\""), fix=self._fix(node, qualified))

    def _fix(self, call: cst.Call, qualified: str) -> PendingFix | None:
        written = dotted_name(call.func)
        type_name = qualified.rsplit(".", 1)[-1]
        if written is None or not written.endswith("." + type_name):
            return None  # `from torch import FloatTensor`: rewrite by hand
        torch_name = written[: -len("." + type_name)]
        positional = [arg for arg in call.args if arg.keyword is None]
        keywords = {arg.keyword.value: arg for arg in call.args if arg.keyword is not None}
        if any(arg.star for arg in call.args) or set(keywords) - {"device", "size"} or positional and "size" in keywords:
            return None
        factory: str | None
        if "size" in keywords:
            factory, arguments = "empty", self.context.code_for_node(keywords["size"].value)
        else:
            factory = legacy_constructor_factory(positional) if positional else "empty"
            arguments = ", ".join(self.context.code_for_node(arg.value) for arg in positional) or "0"
        if factory is None:
            return None
        dtype_name = type_name.removesuffix("Tensor")
        dtype = f"{torch_name}.{LEGACY_TENSOR_DTYPES[dtype_name]}" if dtype_name else f"{torch_name}.get_default_dtype()"
        device = self.context.code_for_node(keywords["device"].value)
        return self.make_fix(NodeEdit(call, f"{torch_name}.{factory}({arguments}, dtype={dtype}, device={device})"),
                             applicability=Applicability.SAFE)
