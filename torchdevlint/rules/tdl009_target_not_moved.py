"""TDL009 target-not-moved."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from torchdevlint.analysis import torch_api
from torchdevlint.analysis.loader_flow import names_in
from torchdevlint.analysis.tree import child_nodes
from torchdevlint.analysis.value_kinds import ValueInfo
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid

_DEVICE_MOVES = frozenset({"to", "cuda"})


def _device_move(expression: cst.BaseExpression) -> tuple[cst.BaseExpression, cst.Call] | None:
    """`x.to(device)` / `x.cuda()`, possibly chained with dtype moves: (receiver root, move call)."""
    move: cst.Call | None = None
    while isinstance(expression, cst.Call) and isinstance(expression.func, cst.Attribute):
        method = expression.func.attr.value
        if method not in torch_api.MOVE_METHODS:
            return None
        if method in _DEVICE_MOVES and expression.args or method == "cuda":
            move = expression
        expression = expression.func.value
    return (expression, move) if move is not None else None


def _back_on_host(expression: cst.BaseExpression) -> bool:
    """`model(x).argmax(1).cpu()`, `out.to("cpu")`, `loss.item()`: the value is host data."""
    while isinstance(expression, cst.Call) and isinstance(expression.func, cst.Attribute):
        method = expression.func.attr.value
        if method in torch_api.HOST_READ_METHODS:
            return True
        if method == "to" and expression.args and isinstance(expression.args[0].value, cst.SimpleString):
            if expression.args[0].value.evaluated_value == "cpu":
                return True
        expression = expression.func.value
    return False


@dataclass
class _BatchLoop:
    """One `for inputs, targets in loader:` loop being read."""

    node: cst.For
    batch_names: tuple[str, ...]
    moved: set[str] = field(default_factory=set)
    # Names holding data computed from moved tensors.
    on_device: set[str] = field(default_factory=set)
    # The statement that moved the first input, and its move call (for the fix).
    first_move: tuple[cst.SimpleStatementLine, cst.Call] | None = None
    # Batch names seen with a discarded `.to()` (TDL001's business) or rebound otherwise.
    untracked: set[str] = field(default_factory=set)
    reported: set[str] = field(default_factory=set)

    def unmoved(self) -> set[str]:
        return set(self.batch_names) - self.moved - self.untracked - self.reported



def _is_tensor(info: ValueInfo | None) -> bool:
    return info is not None and info.is_tensor

class TargetNotMoved(Rule):
    """
    ## What it does
    Finds training and evaluation loops over a `DataLoader` that move the inputs of each
    batch to the device (`inputs = inputs.to(device)`) but pass a target from the same batch,
    still on the CPU, to a loss, a comparison or a metric together with device data.
    Reported at the first place in the loop body where the unmoved target meets device data.

    ## Why is this bad?
    The model's output is on the GPU and the target is not: the loss fails with "Expected all
    tensors to be on the same device, but found at least two devices, cuda:0 and cpu!". On a
    CPU-only machine the code runs, so the bug ships.

    A target whose `.to()` result is thrown away is reported by TDL001 instead.

    ## Fix safety
    The fix moves the target right after the inputs, with the same arguments. It is unsafe:
    the target may be meant to stay on the CPU (a list of labels for logging, say), and the
    move costs a host-to-device copy.

    ## Options
    None.
    """

    code = "TDL009"
    slug = "target-not-moved"
    message = "Batch target is used with device data but was never moved to the device"
    fix_title = "Move the target with the inputs"
    requires_any_text = (".to", ".cuda")

    VALID = [
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            loader = DataLoader([])
            for inputs, targets in loader:
                inputs, targets = inputs.to("cuda"), targets.to("cuda")
                loss = criterion(model(inputs), targets)
            for inputs, targets in loader:
                inputs = inputs.to("cuda")
                loss = criterion(model(inputs), targets.to("cuda"))
            """,
            name="both-moved",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            for inputs, targets in DataLoader([]):
                loss = criterion(model(inputs), targets)
            """,
            name="nothing-moved-cpu-loop",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            for images, labels in DataLoader([]):
                images = images.to("cuda")
                print(labels)
                history.append(labels.tolist())
            """,
            name="target-used-on-host-only",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            for images, labels in DataLoader([]):
                images = images.to("cuda")
                preds = model(images).argmax(1).cpu()
                correct = (preds == labels).sum().item()
                hits = (model(images).to("cpu") == labels).sum()
            """,
            name="predictions-brought-back-to-the-cpu",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(train_set, batch_size=64)
            for inputs, targets in loader:
                inputs = inputs.to(device)
                loss = criterion(model(inputs), targets)
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(train_set, batch_size=64)
            for inputs, targets in loader:
                inputs = inputs.to(device)
                targets = targets.to(device)
                loss = criterion(model(inputs), targets)
            """,
            applicability=Applicability.UNSAFE,
            name="documented-target-left-on-the-cpu",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader
            loader = DataLoader([])
            device = torch.device("cuda")
            for inputs, targets in loader:
                inputs = inputs.to(device, non_blocking=True)  # to the GPU
                loss = criterion(model(inputs), targets)
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader
            loader = DataLoader([])
            device = torch.device("cuda")
            for inputs, targets in loader:
                inputs = inputs.to(device, non_blocking=True)  # to the GPU
                targets = targets.to(device, non_blocking=True)
                loss = criterion(model(inputs), targets)
            """,
            applicability=Applicability.UNSAFE,
            name="regression-loss",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader
            for step, (images, labels) in enumerate(DataLoader([])):
                images = images.cuda()
                logits = model(images)
                correct = (logits.argmax(1) == labels).sum()
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader
            for step, (images, labels) in enumerate(DataLoader([])):
                images = images.cuda()
                labels = labels.cuda()
                logits = model(images)
                correct = (logits.argmax(1) == labels).sum()
            """,
            applicability=Applicability.UNSAFE,
            name="accuracy-comparison",
        ),
    ]

    def setup(self) -> None:
        self._loops: list[_BatchLoop] = []

    def visit_For(self, node: cst.For) -> None:
        names = self._batch_names(node)
        if names:
            self._loops.append(_BatchLoop(node, names))

    def leave_For(self, node: cst.For) -> None:
        if self._loops and self._loops[-1].node is node:
            self._loops.pop()

    def _batch_names(self, node: cst.For) -> tuple[str, ...]:
        # The analysis has already bound the loop targets: batch items are Tensors.
        target = node.target
        if isinstance(target, cst.Tuple) and len(target.elements) == 2 and isinstance(
            target.elements[1].value, cst.Tuple
        ):
            target = target.elements[1].value  # enumerate(loader)
        if not isinstance(target, cst.Tuple):
            return ()
        names = tuple(e.value.value for e in target.elements if isinstance(e.value, cst.Name))
        kinds = self.context.kinds
        if len(names) < 2 or not all(_is_tensor(kinds.lookup(name)) for name in names):
            return ()
        return names

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        if not self._loops:
            return
        loop = self._loops[-1]
        for statement in node.body:
            self._read_statement(loop, node, statement)

    def _read_statement(self, loop: _BatchLoop, line: cst.SimpleStatementLine, statement: cst.BaseSmallStatement) -> None:
        if isinstance(statement, cst.Expr):
            moved = _device_move(statement.value)
            if moved is not None and isinstance(moved[0], cst.Name) and moved[0].value in loop.batch_names:
                loop.untracked.add(moved[0].value)  # a discarded move: TDL001 reports it
                return
            self._check_meeting(loop, statement.value, line)
            return
        if isinstance(statement, cst.Assign):
            self._check_meeting(loop, statement.value, line)
            self._record_assignment(loop, line, statement)
        elif isinstance(statement, (cst.AugAssign, cst.AnnAssign, cst.Return)) and statement.value is not None:
            self._check_meeting(loop, statement.value, line)

    def _record_assignment(self, loop: _BatchLoop, line: cst.SimpleStatementLine, node: cst.Assign) -> None:
        pairs: list[tuple[cst.BaseExpression, cst.BaseExpression]] = []
        for target in node.targets:
            whole = target.target
            if isinstance(whole, cst.Tuple) and isinstance(node.value, cst.Tuple) and len(whole.elements) == len(node.value.elements):
                pairs.extend((mine.value, theirs.value)
                             for mine, theirs in zip(whole.elements, node.value.elements, strict=True))
            else:
                pairs.append((whole, node.value))
        for left, right in pairs:
            if not isinstance(left, cst.Name):
                continue
            name = left.value
            moved = _device_move(right)
            if moved is not None and isinstance(moved[0], cst.Name) and moved[0].value in loop.batch_names:
                loop.moved.add(name)
                if loop.first_move is None:
                    loop.first_move = (line, moved[1])
                continue
            if name in loop.batch_names:
                loop.untracked.add(name)
            if not _back_on_host(right) and names_in(right) & (loop.moved | loop.on_device):
                loop.on_device.add(name)
            else:
                loop.on_device.discard(name)

    def _meets_device(self, loop: _BatchLoop, node: cst.BaseExpression) -> bool:
        if _back_on_host(node):
            return False
        return bool(names_in(node) & (loop.moved | loop.on_device))

    def _check_meeting(self, loop: _BatchLoop, expression: cst.BaseExpression, line: cst.SimpleStatementLine) -> None:
        if not loop.moved:
            return
        unmoved = loop.unmoved()
        if not unmoved:
            return
        stack: list[cst.CSTNode] = [expression]
        while stack:
            node = stack.pop()
            operands: list[cst.BaseExpression] = []
            if isinstance(node, cst.Call) and not isinstance(node.func, cst.Attribute):
                operands = [arg.value for arg in node.args]
            elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value not in torch_api.MOVE_METHODS:
                operands = [node.func.value, *(arg.value for arg in node.args)]
            elif isinstance(node, cst.Comparison):
                operands = [node.left, *(c.comparator for c in node.comparisons)]
            elif isinstance(node, cst.BinaryOperation):
                operands = [node.left, node.right]
            for operand in operands:
                if isinstance(operand, cst.Name) and operand.value in unmoved:
                    others = [o for o in operands if o is not operand]
                    if any(self._meets_device(loop, other) for other in others):
                        loop.reported.add(operand.value)
                        self.report(node, fix=self._fix(loop, operand.value, line))
                        return
            stack.extend(child_nodes(node))

    def _fix(self, loop: _BatchLoop, name: str, meeting_line: cst.SimpleStatementLine) -> PendingFix | None:
        if loop.first_move is None:
            return None
        line, move = loop.first_move
        if line is meeting_line:
            return None  # `x = x.to(d); loss = f(model(x), y)`: no line between to move y in
        assert isinstance(move.func, cst.Attribute)
        call = move.with_changes(func=move.func.with_changes(value=cst.Name(name)))
        return self.make_fix(
            NodeEdit.insert_line_after(line, f"{name} = {self.context.code_for_node(call)}"),
            applicability=Applicability.UNSAFE,
        )
