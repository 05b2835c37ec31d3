"""TDL024 requires-grad-before-move."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.brains import torch_api
from torchdevlint.analysis.test_code import is_test_code
from torchdevlint.analysis.tree import descendants, keyword_argument
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import NON_LEAF_GRADIENT, RuntimeProof

# Where the moved tensor is only an operand, or chained on: what the program keeps is computed
# from it, and no `.grad` of the moved tensor can be read.
_COMPUTED_FROM = (cst.BinaryOperation, cst.UnaryOperation, cst.Comparison, cst.Attribute, cst.Subscript)


def _makes_a_tensor(qualified: str) -> bool:
    return torch_api.is_tensor_factory(qualified) or qualified in torch_api.SCALAR_TENSOR_FACTORIES


class RequiresGradBeforeMove(Rule):
    """
    ## What it does
    Finds a tensor made with `requires_grad=True` by a torch factory and moved in the same
    expression to a device that may be an accelerator: `torch.randn(1, requires_grad=True)
    .to(device)`, `torch.zeros(3, requires_grad=True).cuda()`. Where the move goes is the flow
    model's answer; a move to the CPU is not reported.

    ## Why is this bad?
    The factory makes a leaf on the CPU, and the move makes a copy on the GPU that autograd
    records: a tensor computed from the leaf, not a leaf. Gradients flow back to the CPU
    tensor, which nothing holds any more; the moved tensor's `.grad` stays None, so a
    hand-written update (`w -= lr * w.grad`) fails, and `torch.optim.SGD([w], ...)` refuses it
    with "can't optimize a non-leaf Tensor". On the CPU the move returns the tensor itself, a
    leaf, and the program works: it fails on the first GPU run.

    ## Not reported
    Not reported: in test code (a `test_*.py`, `*_test.py` or `conftest.py` file, or a module
    that imports pytest or unittest), a tensor bound to a name whose `.grad` the test
    never reads (a kernel's input on the GPU, compared with a reference implementation's
    output); a factory given `device=` (the tensor is made where it lives), a tensor
    moved first and then given `requires_grad_()`, `nn.Parameter`s, which a module moves
    in place, and a moved tensor that is only an operand of what the program keeps
    (`torch.tensor(image, requires_grad=True).cuda() / 127.5 - 1`), whose own `.grad` nothing
    can read.

    ## Fix safety
    Safe: the fix drops `requires_grad=True` from the factory and asks for the gradient after
    the move, `torch.randn(1).to(device).requires_grad_()`. The values are the same (made by
    the same generator, then copied), and the tensor the program keeps is now the leaf the
    gradients reach. On the CPU nothing changes.

    ## Options
    None.
    """

    code = "TDL024"
    slug = "requires-grad-before-move"
    message = "Tensor made with requires_grad=True and then moved is no leaf: its .grad stays None on a GPU"
    fix_title = "Move the tensor first, then ask for its gradient"
    proof = RuntimeProof(NON_LEAF_GRADIENT)
    requires_any_text = ("requires_grad",)

    VALID = [
        Valid(
            """
            import unittest

            import torch

            class TestFusedRoll(unittest.TestCase):
                def test_forward(self):
                    x = torch.randn(2, 8, requires_grad=True).cuda()
                    expected = torch.roll(x.detach().clone(), 2, 1)
                    self.assertTrue(torch.equal(expected, fused_roll(x, 2)))
            """,
            name="a-test-input-whose-gradient-the-test-never-reads",
        ),
        Valid(
            """
            import numpy as np
            import torch

            images = [np.zeros((3, 8, 8), dtype=np.float32) for _ in range(4)]
            samples = torch.stack([torch.tensor(image, requires_grad=True).cuda() / 127.5 - 1.0 for image in images])
            """,
            name="only-an-operand-of-what-is-kept",
        ),
        Valid(
            """
            import torch
            device = "cuda" if torch.cuda.is_available() else "cpu"
            w = torch.randn(3, requires_grad=True, device=device)
            b = torch.zeros(1, device=device).requires_grad_()
            v = torch.randn(3).to(device).requires_grad_()
            c = torch.ones(2, requires_grad=True).to("cpu")
            """,
            name="made-where-it-lives-or-moved-before-asking-for-gradients",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            device = "cuda" if torch.cuda.is_available() else "cpu"
            b = torch.randn(1, requires_grad=True, dtype=torch.float).to(device)
            w = torch.randn(1, dtype=torch.float, requires_grad=True).to(device)
            optimizer = torch.optim.SGD([b, w], lr=0.1)
            """,
            fixed="""
            import torch
            device = "cuda" if torch.cuda.is_available() else "cpu"
            b = torch.randn(1, dtype=torch.float).to(device).requires_grad_()
            w = torch.randn(1, dtype=torch.float).to(device).requires_grad_()
            optimizer = torch.optim.SGD([b, w], lr=0.1)
            """,
            applicability=Applicability.SAFE,
            name="parameters-of-a-model-written-by-hand",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            from torch import zeros
            def fit(x, y, steps=100, lr=0.01):
                weight = zeros(x.shape[1], 1, requires_grad=True).cuda()
                for _ in range(steps):
                    loss = ((x.cuda() @ weight - y.cuda()) ** 2).mean()
                    loss.backward()
                    with torch.no_grad():
                        weight -= lr * weight.grad
                return weight
            """,
            fixed="""
            import torch
            from torch import zeros
            def fit(x, y, steps=100, lr=0.01):
                weight = zeros(x.shape[1], 1).cuda().requires_grad_()
                for _ in range(steps):
                    loss = ((x.cuda() @ weight - y.cuda()) ** 2).mean()
                    loss.backward()
                    with torch.no_grad():
                        weight -= lr * weight.grad
                return weight
            """,
            applicability=Applicability.SAFE,
            name="a-gradient-step-written-by-hand-on-the-gpu",
        ),
    ]

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not (isinstance(func, cst.Attribute) and func.attr.value in torch_api.DEVICE_MOVES and isinstance(func.value, cst.Call)):
            return
        made = func.value
        asked = keyword_argument(made, "requires_grad")
        if asked is None or not (isinstance(asked.value, cst.Name) and asked.value.value == "True"):
            return
        if keyword_argument(made, "device") is not None:
            return
        flow = self.context.flow
        qualified = self.context.names.qualified_name(made.func, among=_makes_a_tensor)
        if qualified is None:
            return
        if isinstance(self.context.parent(node), _COMPUTED_FROM):
            return  # `x = torch.tensor(a, requires_grad=True).cuda() / 127.5`: no leaf was kept anyway
        destination = flow.move_destination(node)
        if destination is None or not destination.may_be_accelerator:
            return
        if is_test_code(self.context.path, self.context.module, self.context.names.imports_from) \
                and not self._gradient_read(node):
            return  # a test's input on the GPU (a kernel compared with its reference): no `.grad` read
        self.report(node, fix=self._fix(node, made, asked))

    def _gradient_read(self, move: cst.Call) -> bool:
        """Whether the body reads `.grad` of the name the moved tensor is bound to (`w =
        torch.randn(3, requires_grad=True).cuda()`, then `w.grad`)."""
        assignment = self.context.parent(move)
        if type(assignment) is not cst.Assign or len(assignment.targets) != 1 \
                or type(assignment.targets[0].target) is not cst.Name:
            return True  # kept elsewhere (an attribute, a list): where it is read cannot be told
        name = assignment.targets[0].target.value
        scope = self.context.enclosing_scope(move)
        return any(type(node) is cst.Attribute and node.attr.value == "grad" and type(node.value) is cst.Name
                   and node.value.value == name for node in descendants(scope, into_definitions=False))

    def _fix(self, move: cst.Call, made: cst.Call, asked: cst.Arg) -> PendingFix:
        kept = [arg for arg in made.args if arg is not asked]
        if kept and asked is made.args[-1]:
            # The argument before it now ends the call: no comma left dangling.
            kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return self.make_fix(
            NodeEdit(made, made.with_changes(args=kept)),
            NodeEdit.insert_after(move, ".requires_grad_()"),
            applicability=Applicability.SAFE,
        )
