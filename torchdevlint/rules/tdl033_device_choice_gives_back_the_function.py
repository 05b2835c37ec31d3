"""TDL033 device-choice-gives-back-the-function."""

from __future__ import annotations

import re
from collections.abc import Callable

import libcst as cst

from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import RuntimeProof

# What a torch function handed on as if it were a tensor raises where it is first used.
_FUNCTION_USED_AS_A_TENSOR = re.compile(
    r"'(?:builtin_function_or_method|function|type)' object|got (?:builtin_function_or_method|function)\b"
    r"|'(?:builtin_function_or_method|function)'"
)
# Methods that move a tensor, and the keyword that places a new one.
_MOVES = frozenset({"cuda", "to", "cpu", "mps", "xpu"})


class DeviceChoiceGivesBackTheFunction(Rule):
    """
    ## What it does
    Finds a conditional expression that chooses where a new tensor goes, with the call on one
    side only: `torch.randn(*shape).cuda() if CUDA else torch.randn`. One side makes a tensor
    with a torch function and moves it (`.cuda()`, `.to(device)`) or places it (`device=`);
    the other side names the same function without calling it.

    ## Why is this bad?
    A conditional expression binds more loosely than a call: the arguments belong to the
    first side only, and the other side gives back the function itself. The GPU path works,
    so the bug ships; on a machine without a GPU (the path the condition was written for)
    the program hands a function where a tensor belongs, and fails where it is first used:
    "'builtin_function_or_method' object has no attribute 'dim'", "expected Tensor as element
    0 in argument 0, but got builtin_function_or_method", or a parameter made of it.

    ## Not reported
    Both sides uncalled (`torch.cuda.FloatTensor if CUDA else torch.FloatTensor`, a choice of
    constructor the program calls later), both sides called, and a side that names a
    different function from the one the other side calls.

    ## Fix safety
    Safe: the uncalled side gets the other side's arguments (`torch.randn(*shape).cuda() if
    CUDA else torch.randn(*shape)`). Only one side runs, so nothing is evaluated twice, and
    the GPU path is unchanged; the CPU path then makes the tensor it was written to make.

    ## Options
    None.
    """

    code = "TDL033"
    slug = "device-choice-gives-back-the-function"
    message = "Only one side of this device choice calls the function: the other gives back the function itself"
    fix_title = "Call it with the same arguments"
    proof = RuntimeProof(_FUNCTION_USED_AS_A_TENSOR, host="cpu", surfaces_away=True)
    requires_any_text = (" else ",)

    VALID = [
        Valid(
            """
            import torch

            CUDA = torch.cuda.is_available()
            Tensor = torch.cuda.FloatTensor if CUDA else torch.FloatTensor
            randn = lambda *shape: torch.randn(*shape).cuda() if CUDA else torch.randn(*shape)
            zeros = (lambda *shape: torch.zeros(*shape).cuda()) if CUDA else torch.zeros
            noise = torch.randn(4, 8).cuda() if CUDA else torch.rand
            """,
            name="both-sides-called-or-neither",
        ),
    ]

    INVALID = [
        Invalid(
            """
            import torch

            CUDA = torch.cuda.is_available()
            randn = lambda *x: torch.randn(*x).cuda() if CUDA else torch.randn
            zeros = lambda *x: torch.zeros(*x).cuda() if CUDA else torch.zeros
            """,
            fixed="""
            import torch

            CUDA = torch.cuda.is_available()
            randn = lambda *x: torch.randn(*x).cuda() if CUDA else torch.randn(*x)
            zeros = lambda *x: torch.zeros(*x).cuda() if CUDA else torch.zeros(*x)
            """,
            applicability=Applicability.SAFE,
            count=2,
            name="helpers-that-make-tensors-on-the-chosen-device",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            from torch import arange

            def positions(length, device):
                return torch.arange(length, device=device) if device is not None else torch.arange

            def steps(n, use_gpu):
                return arange(n).to("cuda") if use_gpu else arange
            """,
            fixed="""
            import torch
            from torch import arange

            def positions(length, device):
                return torch.arange(length, device=device) if device is not None else torch.arange(length, device=device)

            def steps(n, use_gpu):
                return arange(n).to("cuda") if use_gpu else arange(n)
            """,
            applicability=Applicability.SAFE,
            count=2,
            name="a-placed-factory-and-an-imported-one",
        ),
    ]

    def visit_IfExp(self, node: cst.IfExp) -> None:
        for made, named in ((node.body, node.orelse), (node.orelse, node.body)):
            if not isinstance(named, (cst.Name, cst.Attribute)):
                continue
            function = self.context.names.qualified_name(named, among=_in_torch)
            if function is None:
                continue
            call = _placed_call_of(made, function,
                                   lambda node: self.context.names.qualified_name(node, among=_in_torch))
            if call is None:
                continue
            written = self.context.code_for_node(named)
            self.report(named, message=(
                f"{written} is the function itself: the call applies to the other side only, so this "
                f"side gives back {written}, not a tensor"), fix=self._fix(named, call))
            return

    def _fix(self, named: cst.BaseExpression, call: cst.Call) -> PendingFix:
        arguments = ", ".join(self.context.code_for_node(arg.with_changes(comma=cst.MaybeSentinel.DEFAULT))
                              for arg in call.args)
        return self.make_fix(NodeEdit(named, f"{self.context.code_for_node(named)}({arguments})"),
                             applicability=Applicability.SAFE)


def _in_torch(qualified: str) -> bool:
    return qualified.startswith("torch.")


def _placed_call_of(made: cst.BaseExpression, function: str,
                    qualified_name: Callable[[cst.BaseExpression], str | None]) -> cst.Call | None:
    """The call of `function` that `made` is, moved (`torch.randn(*x).cuda()`) or placed
    (`torch.arange(n, device=d)`); None otherwise."""
    moved = False
    current = made
    while isinstance(current, cst.Call) and isinstance(current.func, cst.Attribute) \
            and qualified_name(current.func) != function:
        moved = moved or current.func.attr.value in _MOVES
        current = current.func.value
    if not isinstance(current, cst.Call) or qualified_name(current.func) != function:
        return None
    placed = any(arg.keyword is not None and arg.keyword.value == "device" for arg in current.args)
    return current if moved or placed else None

