"""TDL001 tensor-move-discarded."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis import torch_api
from torchdevlint.analysis.value_kinds import ValueInfo
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit
from torchdevlint.rule import Invalid, Rule, Valid


def _move_chain_base(expression: cst.BaseExpression) -> tuple[cst.BaseExpression, bool]:
    """Strip trailing move calls (`x.to(d).float()` -> `x`); say whether there was one."""
    moved = False
    while (
        isinstance(expression, cst.Call)
        and isinstance(expression.func, cst.Attribute)
        and expression.func.attr.value in torch_api.MOVE_METHODS
    ):
        moved = True
        expression = expression.func.value
    return expression, moved


def _has_string_key(node: cst.Subscript) -> bool:
    return len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index) and isinstance(
        node.slice[0].slice.value, (cst.SimpleString, cst.ConcatenatedString)
    )


def _is_assignable(expression: cst.BaseExpression) -> bool:
    if isinstance(expression, cst.Name):
        return True
    if isinstance(expression, cst.Attribute):
        return isinstance(expression.value, (cst.Name, cst.Attribute))
    if isinstance(expression, cst.Subscript):
        return isinstance(expression.value, (cst.Name, cst.Attribute))
    return False


class TensorMoveDiscarded(Rule):
    """
    ## What it does
    Finds `.to(...)`, `.cuda()`, `.cpu()` and dtype conversions such as `.float()` or
    `.half()` called on a Tensor as a statement of their own, so that the result is thrown
    away. Also finds a list comprehension of such moves used as a statement.

    ## Why is this bad?
    Tensor moves are not in place: `x.to(device)` returns a new tensor on `device` and leaves
    `x` where it was. The next line still uses the CPU tensor, and the program fails later
    with "Expected all tensors to be on the same device". `nn.Module.to` *is* in place, so
    `model.to(device)` is fine and is never reported; nor are objects whose `.to` works in
    place (Hugging Face `BatchEncoding`, torchmetrics metrics) or values of unknown kind.

    ## Fix safety
    Assigning the result back (`x = x.to(device)`, also for `self.h` and `batch["x"]`) is
    safe: the statement had no effect, and now it has the intended one. For a positional item
    (`batch[0] = batch[0].to(device)`) it is unsafe: a custom `collate_fn` may return a tuple,
    which does not take item assignment. For a comprehension
    over a tuple of names, the names are rebound by unpacking (safe); over a single name the
    name is rebound to a list (unsafe: a tuple becomes a list). A move whose receiver cannot
    be assigned to (`torch.zeros(3).cuda()` as a statement) is reported without a fix, and so
    is a move of a module-level or enclosing variable inside a function that never assigns
    it: the assignment would make the name local to the whole function, and its first read
    would raise UnboundLocalError. Assign the moved tensor to a new name there instead.

    ## Options
    None.
    """

    code = "TDL001"
    slug = "tensor-move-discarded"
    message = "Tensor move result is discarded; tensor moves are not in place"
    fix_title = "Assign the moved tensor back"
    requires_any_text = tuple(f".{method}" for method in sorted(torch_api.MOVE_METHODS))

    VALID = [
        Valid(
            """
            import torch
            model = torch.nn.Linear(2, 2)
            model.to("cuda")
            model.cuda()
            """,
            name="module-moves-are-in-place",
        ),
        Valid(
            """
            import torch
            x = torch.zeros(3)
            x = x.to("cuda")
            y = x.cpu().float()
            """,
            name="result-assigned",
        ),
        Valid(
            """
            import torch.nn as nn
            net = nn.DataParallel(nn.Sequential(nn.Linear(2, 2)))
            net.to("cuda")
            loss_fn = nn.CrossEntropyLoss()
            loss_fn.cuda()
            """,
            name="wrapped-module-and-loss-module",
        ),
        Valid(
            """
            import torch
            from transformers import AutoModel, AutoTokenizer
            model = AutoModel.from_pretrained("bert-base-uncased")
            model.to("cuda")
            encoded = AutoTokenizer.from_pretrained("bert-base-uncased")("hi", return_tensors="pt")
            encoded.to("cuda")
            """,
            name="hugging-face-model-and-batch-encoding",
        ),
        Valid(
            """
            import torch
            def step(batch, device):
                batch.to(device)
            """,
            name="unknown-receiver",
        ),
        Valid(
            """
            import torch
            x = torch.zeros(3)
            x.add_(1)
            x.requires_grad_()
            """,
            name="in-place-methods",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(train_set, batch_size=64)
            for inputs, targets in loader:
                inputs.to(device)
                loss = criterion(model(inputs), targets)
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(train_set, batch_size=64)
            for inputs, targets in loader:
                inputs = inputs.to(device)
                loss = criterion(model(inputs), targets)
            """,
            applicability=Applicability.SAFE,
            name="documented-batch-input-moved-and-discarded",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            x = torch.randn(4, 3)
            x.to("cuda")
            """,
            fixed="""
            import torch
            x = torch.randn(4, 3)
            x = x.to("cuda")
            """,
            applicability=Applicability.SAFE,
            name="factory-result-moved",
        ),
        Invalid(
            """
            import torch as T
            from torch.utils.data import DataLoader
            loader = DataLoader([])
            for inputs, targets in loader:
                inputs.to("cuda").float()
                targets.cuda()  # move targets too
            """,
            fixed="""
            import torch as T
            from torch.utils.data import DataLoader
            loader = DataLoader([])
            for inputs, targets in loader:
                inputs = inputs.to("cuda").float()
                targets = targets.cuda()  # move targets too
            """,
            applicability=Applicability.SAFE,
            count=2,
            name="dataloader-batch-chain",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.h = torch.zeros(1, 8)
                def reset(self, device):
                    self.h.to(device)
            """,
            fixed="""
            import torch
            import torch.nn as nn
            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.h = torch.zeros(1, 8)
                def reset(self, device):
                    self.h = self.h.to(device)
            """,
            applicability=Applicability.SAFE,
            name="self-attribute",
        ),
        Invalid(
            """
            import torch
            def step(batch: dict, x: torch.Tensor, device):
                x.half()
            """,
            fixed="""
            import torch
            def step(batch: dict, x: torch.Tensor, device):
                x = x.half()
            """,
            applicability=Applicability.SAFE,
            name="annotated-parameter",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader
            for batch in DataLoader([]):
                batch["image"].to("cuda")
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader
            for batch in DataLoader([]):
                batch["image"] = batch["image"].to("cuda")
            """,
            applicability=Applicability.SAFE,
            name="batch-item",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader
            for batch in DataLoader([]):
                batch[0].to("cuda")
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader
            for batch in DataLoader([]):
                batch[0] = batch[0].to("cuda")
            """,
            applicability=Applicability.UNSAFE,
            name="positional-batch-item-may-be-a-tuple",
        ),
        Invalid(
            """
            import torch
            inputs, targets = torch.randn(8, 2), torch.randn(8)
            [t.to("cuda") for t in (inputs, targets)]
            """,
            fixed="""
            import torch
            inputs, targets = torch.randn(8, 2), torch.randn(8)
            inputs, targets = [t.to("cuda") for t in (inputs, targets)]
            """,
            applicability=Applicability.SAFE,
            name="comprehension-over-tuple",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader
            for batch in DataLoader([]):
                [t.cuda() for t in batch]
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader
            for batch in DataLoader([]):
                batch = [t.cuda() for t in batch]
            """,
            applicability=Applicability.UNSAFE,
            name="comprehension-over-batch-rebinds-to-list",
        ),
        Invalid(
            """
            import torch
            torch.zeros(3).cuda()
            """,
            name="unassignable-receiver-has-no-fix",
        ),
        Invalid(
            """
            import torch
            x = torch.zeros(3)
            def shifted():
                x.cuda()
                return x + 1
            """,
            name="global-read-in-function-has-no-fix",
        ),
    ]

    def visit_Expr(self, node: cst.Expr) -> None:
        value = node.value
        if isinstance(value, cst.ListComp):
            self._check_comprehension(node, value)
            return
        if not (
            isinstance(value, cst.Call)
            and isinstance(value.func, cst.Attribute)
            and value.func.attr.value in torch_api.MOVE_METHODS
        ):
            return
        base, _ = _move_chain_base(value)
        # The receiver of the first move must be a Tensor, so the whole chain is one.
        if not self.context.kinds.kind_of(base).is_tensor:
            return
        fix = None
        if self._can_assign_back(base):
            target = self.context.code_for_node(base)
            # `batch[0] = ...` fails when a custom collate_fn returns a tuple; a string key
            # means a dict (or a mapping), which takes item assignment.
            positional_item = isinstance(base, cst.Subscript) and not _has_string_key(base)
            applicability = Applicability.UNSAFE if positional_item else Applicability.SAFE
            fix = self.make_fix(NodeEdit.insert_before(value, f"{target} = "), applicability=applicability)
        self.report(node, fix=fix)

    def _can_assign_back(self, expression: cst.BaseExpression) -> bool:
        if not _is_assignable(expression):
            return False
        # `x = x.cuda()` in a function that only reads a global `x` makes `x` local to the
        # function: the read on the right then raises UnboundLocalError.
        return not isinstance(expression, cst.Name) or self.context.assignment_keeps_variable(expression.value)

    def _check_comprehension(self, statement: cst.Expr, comprehension: cst.ListComp) -> None:
        element = comprehension.elt
        loop = comprehension.for_in
        if loop.inner_for_in is not None or loop.ifs or not isinstance(loop.target, cst.Name):
            return
        base, moved = _move_chain_base(element)
        if not (moved and isinstance(base, cst.Name) and base.value == loop.target.value):
            return
        iterable = loop.iter
        kinds = self.context.kinds
        fix = None
        if isinstance(iterable, (cst.Tuple, cst.List)) and iterable.elements:
            infos = [kinds.kind_of(e.value) for e in iterable.elements if not isinstance(e, cst.StarredElement)]
            if len(infos) != len(iterable.elements) or not all(info.is_tensor for info in infos):
                return
            names = [e.value for e in iterable.elements]
            if all(self._can_assign_back(name) for name in names):
                targets = ", ".join(self.context.code_for_node(name) for name in names)
                fix = self.make_fix(NodeEdit.insert_before(comprehension, f"{targets} = "))
        elif isinstance(iterable, cst.Name):
            info: ValueInfo = kinds.kind_of(iterable)
            if not info.is_tensor_batch:
                return
            if self._can_assign_back(iterable):
                fix = self.make_fix(
                    NodeEdit.insert_before(comprehension, f"{iterable.value} = "),
                    applicability=Applicability.UNSAFE,
                )
        else:
            return
        self.report(statement, fix=fix)
