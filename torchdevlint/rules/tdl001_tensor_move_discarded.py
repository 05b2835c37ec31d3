"""TDL001 tensor-move-discarded."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import libcst as cst

from torchdevlint.analysis.brains import torch_api
from torchdevlint.analysis.flow.results import FixAgreement
from torchdevlint.analysis.tree import ends_notebook_cell
from torchdevlint.analysis.value_uses import assigned_values
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
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
    place (Hugging Face `BatchEncoding`, torchmetrics metrics) or values of unknown kind. A
    value of unknown kind (a parameter, a loader's batch) that the same function calls a
    Tensor-only method on (`batch.view(...)`, `batch.size(0)`, `batch.numel()`), or hands a
    model as a positional input (`model(src, src_mask)`; not `save_model(net, path)`), is a
    Tensor.
    Nor `.float()` of a tensor every assignment of which in its scope is a float32 factory
    without `dtype=` (`torch.zeros(n, k)`, also through in-place methods: `y.scatter_(...)
    .float()`), in a file that does not change the default dtype: it gives the tensor itself
    back, so throwing it away changes nothing.
    In a notebook, `.cpu()` ending its cell (`y_preds.cpu()`) is not reported: Jupyter shows
    the tensor, which is the point; a move to the device there is.

    ## Fix safety
    The fix assigns the result back (`x = x.to(device)`, also for `self.h` and
    `batch["x"]`). It is safe when the device-flow model shows that the moved tensor then
    meets data on that same device (a model moved there, other inputs moved there), so the
    program agrees on devices afterwards. Otherwise it is unsafe: nothing shows where the
    tensor goes next, or it goes somewhere the model cannot place. When the moved tensor
    would then meet data left on the CPU (a model that is never moved), no fix is offered:
    the statement is dead today, and assigning it would make the program fail on a GPU.
    Each judgement interprets the function again, so a function reinterpreted 8,000
    statements' worth (160 judgements of a 50-line function, 4 of one holding a thousand
    discarded moves) has its later fixes unjudged: they are unsafe.

    A positional item (`batch[0] = batch[0].to(device)`) is always unsafe: a custom
    `collate_fn` may return a tuple, which does not take item assignment. For a
    comprehension over a tuple of names, the names are rebound by unpacking; over a single
    name the name is rebound to a list (always unsafe: a tuple becomes a list). A move
    whose receiver cannot be assigned to (`torch.zeros(3).cuda()` as a statement) is
    reported without a fix, and so is a move of a module-level or enclosing variable
    inside a function that never assigns it: the assignment would make the name local to
    the whole function, and its first read would raise UnboundLocalError. Assign the moved
    tensor to a new name there instead.

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

            def to_onehot(y, num_classes):
                y_onehot = torch.zeros(y.size(0), num_classes)
                y_onehot.scatter_(1, y.view(-1, 1).long(), 1).float()
                return y_onehot
            """,
            name="float-of-a-float32-tensor-is-the-tensor-itself",
        ),
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
            from model import *  # the project's model module, which imports torch itself
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            net = gwnet(device, num_nodes=207)
            net.to(device)
            """,
            name="a-model-class-brought-by-a-star-import",
        ),
        Valid(
            """
            import torch
            from .utils.resnet_utils import myResnet
            class Loader:
                def __init__(self, backbone):
                    self.my_resnet = myResnet(backbone)
                    self.my_resnet.cuda()
                    self.my_resnet.eval()
            """,
            name="a-model-maker-another-module-gives",
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
        Valid(
            """
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            def predict(model, encoded):
                encoded.to(device)
                return model(**encoded)
            """,
            name="batch-of-unknown-kind-never-used-as-a-tensor",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            def evaluate(model, loader):
                for batch in loader:
                    batch.to(device).float()
                    scores = model(batch.view(batch.size(0), -1))
            """,
            fixed="""
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            def evaluate(model, loader):
                for batch in loader:
                    batch = batch.to(device).float()
                    scores = model(batch.view(batch.size(0), -1))
            """,
            applicability=Applicability.UNSAFE,
            name="batch-of-unknown-kind-used-as-a-tensor",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = Net().to(device)
            for inputs, targets in DataLoader(train_set, batch_size=64):
                inputs.to(device)
                loss = criterion(model(inputs), targets.to(device))
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = Net().to(device)
            for inputs, targets in DataLoader(train_set, batch_size=64):
                inputs = inputs.to(device)
                loss = criterion(model(inputs), targets.to(device))
            """,
            applicability=Applicability.SAFE,
            name="documented-batch-input-moved-and-discarded",
            in_docs=True,
        ),
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
            applicability=Applicability.UNSAFE,
            name="model-of-unknown-placement-makes-the-fix-unsafe",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            model = nn.Linear(3, 1)
            x = torch.randn(4, 3)
            x.cuda()
            y = model(x)
            """,
            name="model-left-on-cpu-gets-no-fix",
        ),
        Invalid(
            """
            import torch
            x = torch.randn(4, 3)
            w = torch.randn(3, 2, device="cuda")
            x.to("cuda")
            y = x @ w
            """,
            fixed="""
            import torch
            x = torch.randn(4, 3)
            w = torch.randn(3, 2, device="cuda")
            x = x.to("cuda")
            y = x @ w
            """,
            applicability=Applicability.SAFE,
            name="factory-result-moved-then-meets-device-data",
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
            applicability=Applicability.UNSAFE,
            name="unused-afterwards-is-unsafe",
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
            applicability=Applicability.UNSAFE,
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
            applicability=Applicability.UNSAFE,
            name="self-attribute",
        ),
        Invalid(
            """
            import torch
            def step(model: torch.nn.Module, x: torch.Tensor, device):
                model.to(device)
                x.to(device)
                return model(x)
            """,
            fixed="""
            import torch
            def step(model: torch.nn.Module, x: torch.Tensor, device):
                model.to(device)
                x = x.to(device)
                return model(x)
            """,
            applicability=Applicability.SAFE,
            name="annotated-parameters",
        ),
        Invalid(
            """
            import numpy as np
            import torch

            def make_mask(n: int) -> torch.Tensor:
                return torch.ones(n, n).tril()

            def prepare(counts, device):
                weights = counts.sum() / (2 * counts)
                weights.to(device)
                features = torch.from_numpy(np.ones(3)).float()
                features.cuda()
                mask = make_mask(4)
                mask.to(device)
                return weights, features, mask

            prepare(torch.tensor([3.0, 5.0]), torch.device("cuda"))
            """,
            fixed="""
            import numpy as np
            import torch

            def make_mask(n: int) -> torch.Tensor:
                return torch.ones(n, n).tril()

            def prepare(counts, device):
                weights = counts.sum() / (2 * counts)
                weights = weights.to(device)
                features = torch.from_numpy(np.ones(3)).float()
                features = features.cuda()
                mask = make_mask(4)
                mask = mask.to(device)
                return weights, features, mask

            prepare(torch.tensor([3.0, 5.0]), torch.device("cuda"))
            """,
            applicability=Applicability.UNSAFE,
            count=3,
            name="arithmetic-conversion-and-a-helpers-return",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader
            model = torch.nn.Linear(4, 2).cuda()
            for batch in DataLoader([]):
                batch["image"].to("cuda")
                out = model(batch["image"])
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader
            model = torch.nn.Linear(4, 2).cuda()
            for batch in DataLoader([]):
                batch["image"] = batch["image"].to("cuda")
                out = model(batch["image"])
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
            model = torch.nn.Linear(2, 1).to("cuda")
            inputs, targets = torch.randn(8, 2), torch.randn(8, 1)
            [t.to("cuda") for t in (inputs, targets)]
            loss = (model(inputs) - targets).pow(2).mean()
            """,
            fixed="""
            import torch
            model = torch.nn.Linear(2, 1).to("cuda")
            inputs, targets = torch.randn(8, 2), torch.randn(8, 1)
            inputs, targets = [t.to("cuda") for t in (inputs, targets)]
            loss = (model(inputs) - targets).pow(2).mean()
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
        Invalid(
            """
            from model import *  # brings torch and F with the model classes
            def heatmap(net):
                adjacency = F.softmax(F.relu(torch.mm(net.nodevec1, net.nodevec2)), dim=1)
                adjacency.to(torch.device("cpu"))
                return adjacency.cpu().detach().numpy()
            """,
            fixed="""
            from model import *  # brings torch and F with the model classes
            def heatmap(net):
                adjacency = F.softmax(F.relu(torch.mm(net.nodevec1, net.nodevec2)), dim=1)
                adjacency = adjacency.to(torch.device("cpu"))
                return adjacency.cpu().detach().numpy()
            """,
            applicability=Applicability.UNSAFE,
            name="functional-brought-by-a-star-import",
        ),
        Invalid(
            """
            import torch
            from masks import make_masks
            def train_epoch(model, batches, optimizer, device):
                for batch in batches:
                    src = batch.src.to(device)
                    src_mask, trg_mask = make_masks(src)
                    src_mask.to(device)
                    trg_mask.to(device)
                    loss = model(src, src_mask, trg_mask).mean()
                    loss.backward()
                    optimizer.step()
            """,
            fixed="""
            import torch
            from masks import make_masks
            def train_epoch(model, batches, optimizer, device):
                for batch in batches:
                    src = batch.src.to(device)
                    src_mask, trg_mask = make_masks(src)
                    src_mask = src_mask.to(device)
                    trg_mask = trg_mask.to(device)
                    loss = model(src, src_mask, trg_mask).mean()
                    loss.backward()
                    optimizer.step()
            """,
            applicability=Applicability.UNSAFE,
            count=2,
            name="model-inputs-of-unknown-kind-are-tensors",
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
        line = self.context.parent(node)
        if value.func.attr.value == "cpu" and self.context.path.endswith(".ipynb") \
                and isinstance(line, cst.SimpleStatementLine) and ends_notebook_cell(self.context.module, line):
            # A cell's last expression, brought to the host: Jupyter shows it, which is its
            # point (`y_preds.cpu()`). A move to the device there is still the in-place mistake.
            return
        base, _ = _move_chain_base(value)
        # The receiver of the first move must be a Tensor, so the whole chain is one.
        if not self.context.flow.value_of(base).is_tensor_like:
            return
        if self._float_of_a_float32_tensor(value, base):
            return
        fix = None
        if self._can_assign_back(base):
            # `batch[0] = ...` fails when a custom collate_fn returns a tuple; a string key
            # means a dict (or a mapping), which takes item assignment.
            positional_item = isinstance(base, cst.Subscript) and not _has_string_key(base)
            fix = self._assignment_fix(node, value, [base], always_unsafe=positional_item)
        self.report(node, fix=fix)

    def _float_of_a_float32_tensor(self, value: cst.BaseExpression, base: cst.BaseExpression) -> bool:
        """`y_onehot.scatter_(1, index, 1).float()` where every assignment of `y_onehot` in its
        scope is a float32 factory without `dtype=` (`torch.zeros(n, k)`): `.float()` gives
        the tensor itself back, so throwing it away changes nothing."""
        methods: set[str] = set()
        current = value
        while current is not base and isinstance(current, cst.Call) and isinstance(current.func, cst.Attribute):
            methods.add(current.func.attr.value)
            current = current.func.value
        if methods != {"float"}:
            return False
        # In-place methods (`scatter_`, `zero_`) give their receiver back.
        while isinstance(base, cst.Call) and isinstance(base.func, cst.Attribute) and base.func.attr.value.endswith("_") \
                and not base.func.attr.value.startswith("_"):
            base = base.func.value
        if not isinstance(base, cst.Name) or any(setter in self.context.source
                                                 for setter in torch_api.DEFAULT_DTYPE_SETTERS):
            return False
        scope = self.context.binding_scope(base.value)
        if scope is None:
            return False
        made = assigned_values(scope, base.value)
        names = self.context.names
        return bool(made) and all(
            isinstance(value, cst.Call)
            and names.qualified_name(value.func, among=torch_api.DEFAULT_FLOAT_FACTORIES) is not None
            and not any(arg.keyword is not None and arg.keyword.value == "dtype" for arg in value.args)
            for value in made)

    def _assignment_fix(self, statement: cst.Expr, value: cst.BaseExpression,
                        target_nodes: Sequence[cst.BaseExpression], *, always_unsafe: bool) -> PendingFix | None:
        """`targets = value`: safe when the model shows the moved tensors then agree with
        what they meet; withheld when they would then meet data left on the host."""
        names = [self.context.code_for_node(target) for target in target_nodes]
        targets = ", ".join(names)
        # Built, not parsed from text: a thousand findings in one body would parse a thousand times.
        # `_can_assign_back` has checked that each target is a name, attribute or subscript.
        clones = [cast(cst.BaseAssignTargetExpression, target.deep_clone()) for target in target_nodes]
        target = clones[0] if len(clones) == 1 else cst.Tuple([cst.Element(clone) for clone in clones])
        assignment = cst.Assign(targets=[cst.AssignTarget(target)], value=value.deep_clone())
        agreement = self.context.flow.fix_agreement(statement, assignment, names)
        if agreement is FixAgreement.BREAKS:
            return None
        safe = agreement is FixAgreement.AGREES and not always_unsafe
        return self.make_fix(NodeEdit.insert_before(value, f"{targets} = "),
                             applicability=Applicability.SAFE if safe else Applicability.UNSAFE)

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
        if not self.context.flow.value_of(base).is_tensor_like:
            return
        iterable = loop.iter
        fix = None
        if isinstance(iterable, (cst.Tuple, cst.List)) and iterable.elements:
            elements = iterable.elements
            if any(isinstance(e, cst.StarredElement) or not self.context.flow.value_of(e.value).is_tensor_like
                   for e in elements):
                return
            names = [e.value for e in elements]
            if all(self._can_assign_back(name) for name in names):
                fix = self._assignment_fix(statement, comprehension, names, always_unsafe=False)
        elif isinstance(iterable, cst.Name):
            if self._can_assign_back(iterable):
                # Unsafe whatever the devices: a tuple batch becomes a list.
                fix = self._assignment_fix(statement, comprehension, [iterable], always_unsafe=True)
        else:
            return
        self.report(statement, fix=fix)
