"""TDL017 availability-check-not-called."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.cuda_uses import CPU_FALLBACK_CHECKS
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import NO_GPU, RuntimeProof

# Where Python asks for an object's truth: a function is always true there.
_TESTS = (cst.If, cst.IfExp, cst.While, cst.Assert)


class AvailabilityCheckNotCalled(Rule):
    """
    ## What it does
    Finds `torch.cuda.is_available`, `torch.backends.mps.is_available` or
    `torch.accelerator.is_available` named without being called where Python asks for a
    truth value: the test of an `if`, `while`, `assert` or conditional expression
    (`"cuda" if torch.cuda.is_available else "cpu"`), an operand of `and`/`or`, or `not`.
    The names are resolved through the file's imports (`from torch.cuda import
    is_available`).

    ## Why is this bad?
    A function object is always true. The check never runs: every machine takes the GPU
    branch, and one without a GPU fails later, far from the typo, with "Torch not compiled
    with CUDA enabled" or "Found no NVIDIA driver on your system". On a GPU machine the
    program works, so the bug ships.

    ## Not reported
    Not reported: the check called (`torch.cuda.is_available()`), and the function passed
    or stored as a value (`checks = [torch.cuda.is_available]`, `skip_unless(torch.cuda.is_available)`),
    which may well be called later.

    ## Fix safety
    Safe: the fix adds the missing `()`. The program then asks the question it was written
    to ask; on a machine with the device nothing changes, and one without takes the branch
    written for it.

    ## Options
    None.
    """

    code = "TDL017"
    slug = "availability-check-not-called"
    message = "An availability check named without a call is always true: the GPU branch runs everywhere"
    fix_title = "Call it"
    # The always-true check fails wherever CUDA is then used.
    proof = RuntimeProof(NO_GPU, host="cpu", surfaces_away=True)
    requires_any_text = ("is_available",)

    VALID = [
        Valid(
            """
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            use_mps = torch.backends.mps.is_available() and not torch.cuda.is_available()
            """,
            name="called",
        ),
        Valid(
            """
            import torch
            import pytest
            CHECKS = {"cuda": torch.cuda.is_available, "mps": torch.backends.mps.is_available}
            available = [name for name, check in CHECKS.items() if check()]
            requires_gpu = pytest.mark.skipif(not available, reason="needs a GPU")
            """,
            name="passed-and-stored-as-values",
        ),
        Valid(
            """
            def is_available():
                return False
            if is_available:
                print("a function of this file, not torch's")
            """,
            name="a-local-function-of-the-same-name",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            device = torch.device("cuda" if torch.cuda.is_available else "cpu")
            model = torch.nn.Linear(4, 2).to(device)
            """,
            fixed="""
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(4, 2).to(device)
            """,
            applicability=Applicability.SAFE,
            name="documented-device-choice",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            from torch.backends.mps import is_available as mps_ready
            if torch.cuda.is_available:
                model = torch.nn.Linear(2, 2).cuda()
            use_cuda = not args.no_cuda and torch.cuda.is_available
            on_mac = not torch.accelerator.is_available or mps_ready
            """,
            fixed="""
            import torch
            from torch.backends.mps import is_available as mps_ready
            if torch.cuda.is_available():
                model = torch.nn.Linear(2, 2).cuda()
            use_cuda = not args.no_cuda and torch.cuda.is_available()
            on_mac = not torch.accelerator.is_available() or mps_ready()
            """,
            applicability=Applicability.SAFE,
            count=4,
            name="tests-operands-and-an-imported-alias",
        ),
    ]

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value == "is_available":
            self._check(node)

    def visit_Name(self, node: cst.Name) -> None:
        if self.context.names.is_imported(node.value):
            self._check(node)

    def _check(self, node: cst.Attribute | cst.Name) -> None:
        if not self._asked_for_its_truth(node):
            return
        if self.context.names.qualified_name(node, among=CPU_FALLBACK_CHECKS) is not None:
            self.report(
                node,
                message=f"{self.context.code_for_node(node)} is not called; a function is always true",
                fix=self.make_fix(NodeEdit.insert_after(node, "()"), applicability=Applicability.SAFE),
            )

    def _asked_for_its_truth(self, node: cst.CSTNode) -> bool:
        parent = self.context.parent(node)
        if isinstance(parent, _TESTS):
            return parent.test is node
        if isinstance(parent, cst.BooleanOperation):
            return True
        return isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator, cst.Not)
