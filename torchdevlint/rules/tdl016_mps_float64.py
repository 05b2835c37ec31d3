"""TDL016 mps-float64."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.brains import torch_api
from torchdevlint.analysis.flow.values import Place, PlaceKind, Value
from torchdevlint.analysis.tree import keyword_argument
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import MPS_FLOAT64, RuntimeProof

_MOVES = frozenset({"to", "mps"})
_CONVERSIONS = _MOVES | {"double"}


def _may_be_mps(place: Place | None) -> bool:
    return place is not None and place.kind is PlaceKind.DEVICE and place.types is not None and "mps" in place.types


def _on_mps(value: Value) -> bool:
    return value.places is not None and any(_may_be_mps(place) for place in value.places)


class MpsFloat64(Rule):
    """
    ## What it does
    Finds float64 data sent to a device that may be Apple's `mps`: a float64 tensor moved
    there (`torch.from_numpy(points).to(device)`, where NumPy made `points` float64), a
    tensor made there with `dtype=torch.float64`, and a tensor there converted with
    `.double()` or `.to(torch.float64)`. The device may be `mps` when the code names it
    (`"mps"`, `torch.device("mps" if torch.backends.mps.is_available() else "cpu")`, a
    chain of such conditionals). The flow model follows the dtype through variables, moves
    and the file's helpers; NumPy's float constructors (`np.random.rand`, `np.zeros`,
    `np.linspace` ...) without a `dtype` make float64.

    ## Why is this bad?
    The MPS backend has no float64. On a Mac the move fails with "TypeError: Cannot convert a
    MPS Tensor to float64 dtype as the MPS framework doesn't support float64. Please use
    float32 instead." Code developed on CUDA or the CPU, where float64 works, breaks the
    first time it runs on Apple silicon.

    ## Fix safety
    Unsafe. A move gets `dtype=torch.float32`, and `dtype=torch.float64` at creation becomes
    `torch.float32`: the values lose precision on every device, not only on `mps`.
    Conversions with `.double()` get no fix.

    ## Options
    None.
    """

    code = "TDL016"
    slug = "mps-float64"
    message = "float64 data sent to a device that may be mps, which has no float64: this fails on a Mac"
    fix_title = "Send it as float32"
    proof = RuntimeProof(MPS_FLOAT64, host="mps")
    requires_any_text = ("mps",)
    requires_also_any_text = ("float64", "double", "numpy")

    VALID = [
        Valid(
            """
            import numpy as np
            import torch

            device = torch.device("mps" if torch.backends.mps.is_available() else "cpu")
            points = torch.from_numpy(np.random.rand(16, 2)).float().to(device)
            grid = torch.from_numpy(np.zeros((4, 4), dtype=np.float32)).to(device)
            labels = torch.zeros(16, dtype=torch.long, device=device)
            cuda_only = torch.zeros(4, dtype=torch.float64, device="cuda")
            """,
            name="float32-or-no-mps",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import numpy as np
            import torch

            device = torch.device("mps" if torch.backends.mps.is_available() else "cpu")
            coords = np.random.rand(16, 2) * 1024
            points = torch.from_numpy(coords).to(device)
            """,
            fixed="""
            import numpy as np
            import torch

            device = torch.device("mps" if torch.backends.mps.is_available() else "cpu")
            coords = np.random.rand(16, 2) * 1024
            points = torch.from_numpy(coords).to(device, dtype=torch.float32)
            """,
            applicability=Applicability.UNSAFE,
            name="documented-numpy-array-to-mps",
            in_docs=True,
        ),
        Invalid(
            """
            import torch

            device = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"

            def gaussian(n):
                return torch.linspace(-1, 1, n, dtype=torch.float64, device=device)

            weights = torch.ones(3).to(device)
            precise = weights.double()
            """,
            fixed="""
            import torch

            device = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"

            def gaussian(n):
                return torch.linspace(-1, 1, n, dtype=torch.float32, device=device)

            weights = torch.ones(3).to(device)
            precise = weights.double()
            """,
            applicability=Applicability.UNSAFE,
            count=2,
            name="created-there-and-converted-there",
        ),
    ]

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not (isinstance(func, cst.Attribute) and func.attr.value in _CONVERSIONS
                or any(arg.keyword is not None and arg.keyword.value == "dtype" for arg in node.args)
                or self.context.names.qualified_name(func, among=torch_api.FROM_NUMPY) is not None):
            return  # asked of the flow model only where float64 can reach a device
        flow = self.context.flow
        if isinstance(func, cst.Attribute) and func.attr.value in _MOVES:
            receiver = flow.value_of(func.value)
            result = flow.value_of(node)
            if not result.float64:
                return
            if receiver.float64 and _may_be_mps(flow.move_destination(node)) and not _on_mps(receiver):
                self.report(node, fix=self._move_fix(node))
            elif _on_mps(receiver) and not receiver.float64:
                self.report(node)  # `.to(torch.float64)` of a tensor there
            return
        if isinstance(func, cst.Attribute) and func.attr.value == "double" and not node.args:
            if _on_mps(flow.value_of(func.value)):
                self.report(node)
            return
        result = flow.value_of(node)
        if result.float64 and _on_mps(result) and result.is_tensor:
            self.report(node, fix=self._dtype_fix(node))

    def _move_fix(self, call: cst.Call) -> PendingFix | None:
        if keyword_argument(call, "dtype") is not None or not call.args or any(arg.star for arg in call.args):
            return None
        torch = self.context.names.local_name_for("torch")
        if torch is None:
            return None
        return self.make_fix(NodeEdit.insert_after(call.args[-1].value, f", dtype={torch}.float32"),
                             applicability=Applicability.UNSAFE)

    def _dtype_fix(self, call: cst.Call) -> PendingFix | None:
        dtype = keyword_argument(call, "dtype")
        if dtype is None or self.context.names.qualified_name(dtype.value, among=torch_api.FLOAT64_DTYPES) is None:
            return None
        torch = self.context.names.local_name_for("torch")
        if torch is None:
            return None
        return self.make_fix(NodeEdit(dtype.value, f"{torch}.float32"), applicability=Applicability.UNSAFE)
