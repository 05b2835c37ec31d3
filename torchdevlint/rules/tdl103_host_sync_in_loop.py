"""TDL103 host-sync-in-loop."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from torchdevlint.analysis.flow.values import HOST_PLACE
from torchdevlint.analysis.names import dotted_name
from torchdevlint.analysis.tree import child_nodes
from torchdevlint.rule import Invalid, Rule, Valid

# Tensor methods that copy to the host and so wait for every queued kernel.
_SYNC_METHODS = frozenset({"item", "tolist", "cpu"})
# Builtins that read a one-element tensor's value on the host.
_NUMBER_BUILTINS = frozenset({"float", "int", "bool"})
_NESTED_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)


@dataclass
class _Loop:
    node: cst.For | cst.While
    # A `.backward()` call sits in this loop's own body (not in a nested loop).
    trains: bool = False
    # Synchronising calls and formatting, kept until we know whether the loop trains.
    syncs: list[cst.CSTNode] = field(default_factory=list)


def _is_periodic(test: cst.BaseExpression) -> bool:
    """`if step % log_every == 0:`: logging every N steps, the recommended way."""
    stack: list[cst.CSTNode] = [test]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo):
            return True
        stack.extend(child_nodes(node))
    return False


def _leaves_loop(block: cst.BaseSuite) -> bool:
    """A branch that raises, breaks, returns or exits: taken once, not every step."""
    statements = block.body if isinstance(block, cst.IndentedBlock) else [block]
    for statement in statements:
        small = statement.body if isinstance(statement, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) else []
        for item in small:
            if isinstance(item, (cst.Raise, cst.Break, cst.Return)):
                return True
            if isinstance(item, cst.Expr) and isinstance(item.value, cst.Call):
                name = dotted_name(item.value.func)
                if name in ("exit", "quit", "sys.exit", "os._exit"):
                    return True
    return False


class HostSyncInLoop(Rule):
    """
    ## What it does
    Finds `.item()`, `.tolist()`, `.cpu()`, `.to("cpu")`, `print(tensor)`, `float(tensor)`
    (and `int`, `bool`), formatting (`f"{loss:.4f}"`, `"{:.4f}".format(loss)`) and the
    pre-0.4 `total += loss.data[0]` on device data inside a training loop: a loop whose own
    body calls `.backward()`. Device data is what
    the flow model shows on a device on every path: moved there (`.to(device)`, `.cuda()`),
    made there, and what is computed from it (the model's output, the loss, predictions),
    also by a same-file helper handed device data (`accuracy(logits, y).item()`).
    A chain is reported at its first copy (`x.cpu().tolist()`). Calls under an
    `if` that tests a modulo (`if step % 100 == 0:`) are periodic logging, and calls in a
    branch that raises, breaks or exits run once; neither is reported.

    Off by default: a per-step `loss.item()` is everywhere, and on small models the cost is
    hidden by other overheads. Enable it with `extend-select = ["TDL103"]` when profiling.

    ## Why is this bad?
    CUDA kernels run asynchronously: the Python loop normally queues the next step's work
    while the GPU still computes this one. Reading a device value on the host (`.item()`,
    copying to the CPU, printing) blocks until every queued kernel has finished, so the GPU
    sits idle while Python prepares the next step. Done on every step, it can cost a large
    share of the throughput.

    ## Fix safety
    No fix: accumulating on the device changes the type of the accumulator (a tensor, not a
    float), which the code after the loop may not expect.

    ## Options
    None.
    """

    code = "TDL103"
    slug = "host-sync-in-loop"
    message = "Host-device sync in the training loop makes the GPU wait every step"
    default_enabled = False
    requires_any_text = ("backward",)

    VALID = [
        Valid(
            """
            import torch

            running_loss = torch.zeros((), device=device)
            for step, (images, labels) in enumerate(loader):
                images, labels = images.to(device), labels.to(device)
                loss = criterion(model(images), labels)
                loss.backward()
                optimizer.step()
                running_loss += loss.detach()
                if step % log_every == 0:
                    print(running_loss.item() / (step + 1))
            """,
            name="documented-accumulated-on-the-device",
            in_docs=True,
        ),
        Valid(
            """
            import torch
            for step, (x, y) in enumerate(loader):
                x, y = x.to(device), y.to(device)
                loss = criterion(model(x), y)
                loss.backward()
                if step % 100 == 0:
                    print(f"step {step}: {loss.item():.4f}")
                if not torch.isfinite(loss):
                    print(loss)
                    raise RuntimeError("loss diverged")
                total += y.size(0)
            print(loss.item())
            """,
            name="periodic-logging-and-after-the-loop",
        ),
        Valid(
            """
            import torch
            with torch.no_grad():
                for x, y in loader:
                    x = x.to(device)
                    correct += (model(x).argmax(1) == y.to(device)).sum().item()
            """,
            name="evaluation-loop-without-backward",
        ),
        Valid(
            """
            import torch
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                losses.append(loss.item())
            """,
            name="nothing-moved-to-a-device",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            def accuracy(logits, labels):
                return (logits.argmax(dim=1) == labels).float().mean()

            def train(model, loader, criterion, optimizer, device, log):
                for images, labels in loader:
                    images, labels = images.to(device), labels.to(device)
                    logits = model(images)
                    loss = criterion(logits, labels)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    acc = accuracy(logits, labels).item()
                    log.write(f"loss {loss:.4f} acc {acc:.2%}")
                    log.write("{:.4f}".format(loss))
                    total = float(loss)
            """,
            count=4,
            name="helper-result-formatting-and-float",
        ),
        Invalid(
            """
            import torch
            from torch.autograd import Variable

            for images, labels in loader:
                images, labels = Variable(images.cuda()), Variable(labels.cuda())
                loss = criterion(model(images), labels)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                running_loss += loss.data[0]
            """,
            name="pre-0.4-loss-data-index",
        ),
        Invalid(
            """
            import torch
            import torch.nn.functional as F

            def to_device(batch, device):
                images, labels = batch
                return images.to(device), labels.to(device)

            def loss_fn(logits, labels):
                return F.cross_entropy(logits, labels)

            def train(model, loader, optimizer, device, history):
                for batch in loader:
                    images, labels = to_device(batch, device)
                    loss = args.weight * loss_fn(model(images), labels)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    history.append(loss.item())
            """,
            name="batch-moved-by-a-helper-and-a-loss-function",
        ),
        Invalid(
            """
            import torch

            for images, labels in loader:
                images, labels = images.to(device), labels.to(device)
                loss = criterion(model(images), labels)
                loss.backward()
                optimizer.step()
                running_loss += loss.item()
            """,
            name="documented-loss-item-every-step",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            for images, labels in loader:
                images, labels = images.to(device), labels.to(device)
                outputs = model(images)
                loss = criterion(outputs, labels)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                running_loss += loss.item()
                correct += (outputs.argmax(1) == labels).sum().item()
            """,
            count=2,
            name="running-loss-and-accuracy",
        ),
        Invalid(
            """
            import torch
            for epoch in range(epochs):
                for batch in tqdm(loader):
                    batch = {k: v.cuda() for k, v in batch.items()}
                    loss = model(**batch).loss
                    scaler.scale(loss).backward()
                    preds.extend(model.logits.argmax(-1).tolist())
                    print(loss)
            """,
            count=1,
            name="print-of-a-device-tensor",
        ),
    ]

    def setup(self) -> None:
        self._loops: list[_Loop] = []

    def _enter(self, node: cst.For | cst.While) -> None:
        self._loops.append(_Loop(node))

    def _leave(self, node: cst.For | cst.While) -> None:
        if not self._loops or self._loops[-1].node is not node:
            return
        loop = self._loops.pop()
        if loop.trains:
            for call in loop.syncs:
                self.report(call)
        elif self._loops:
            # An inner loop (over metrics, say) runs on every step of the loop around it.
            self._loops[-1].syncs.extend(loop.syncs)

    visit_For = visit_While = _enter
    leave_For = leave_While = _leave

    def _current(self, node: cst.CSTNode) -> _Loop | None:
        """The innermost loop whose body holds `node` directly (not through a nested def)."""
        if not self._loops:
            return None
        innermost = self._loops[-1].node
        for ancestor in self.context.ancestors(node):
            if ancestor is innermost:
                return self._loops[-1]
            if isinstance(ancestor, _NESTED_SCOPES):
                return None
        return None

    def visit_Call(self, node: cst.Call) -> None:
        loop = self._current(node)
        if loop is None:
            return
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "backward":
            loop.trains = True
            return
        if isinstance(func, cst.Name) and func.value == "print" and self.context.binding_scope("print") is None:
            if any(self._on_device(arg.value) for arg in node.args) and not self._under_periodic_if(node, loop):
                loop.syncs.append(node)
            return
        if isinstance(func, cst.Name) and func.value in _NUMBER_BUILTINS and self.context.binding_scope(func.value) is None:
            if len(node.args) == 1 and self._on_device(node.args[0].value) and not self._under_periodic_if(node, loop):
                loop.syncs.append(node)
            return
        if isinstance(func, cst.Attribute) and func.attr.value == "format" and isinstance(func.value, cst.SimpleString):
            # `"{:.3f}".format(loss)` reads the value, as `loss.item()` does.
            if any(self._on_device(arg.value) for arg in node.args) and not self._under_periodic_if(node, loop):
                loop.syncs.append(node)
            return
        if self._is_sync_call(node) and not self._under_periodic_if(node, loop):
            loop.syncs.append(node)

    def visit_FormattedStringExpression(self, node: cst.FormattedStringExpression) -> None:
        """`f"{loss:.4f}"`: formatting a device tensor reads its value on the host."""
        loop = self._current(node)
        if loop is not None and self._on_device(node.expression) and not self._under_periodic_if(node, loop):
            loop.syncs.append(node.expression)

    def visit_Subscript(self, node: cst.Subscript) -> None:
        """`total += loss.data[0]`: before PyTorch 0.4, how a loss was read as a number."""
        value = node.value
        if not (isinstance(value, cst.Attribute) and value.attr.value == "data" and len(node.slice) == 1):
            return
        index = node.slice[0].slice
        if not (isinstance(index, cst.Index) and isinstance(index.value, cst.Integer) and index.value.value == "0"):
            return
        loop = self._current(node)
        if loop is None or not self._on_device(value.value) or not self._read_as_number(node):
            return
        if not self._under_periodic_if(node, loop):
            loop.syncs.append(node)

    def _read_as_number(self, node: cst.Subscript) -> bool:
        """Used where a Python number is: added onto an accumulator, appended to a list of
        numbers, printed or formatted."""
        parent = self.context.parent(node)
        if isinstance(parent, cst.AugAssign):
            return parent.value is node
        if isinstance(parent, cst.FormattedStringExpression):
            return True
        if isinstance(parent, cst.Arg):
            call = self.context.parent(parent)
            if isinstance(call, cst.Call):
                name = dotted_name(call.func)
                return name in {"print", "float"} or isinstance(call.func, cst.Attribute) \
                    and call.func.attr.value in {"append", "format"}
        return False

    def _on_device(self, node: cst.BaseExpression) -> bool:
        """Data the model shows on an accelerator on every path (not a module)."""
        value = self.context.flow.value_of(node)
        return value.on_accelerator and not value.is_module_like

    def _is_sync_call(self, node: cst.Call) -> bool:
        """A copy of device data to the host: `.item()`, `.tolist()`, `.cpu()`, `.to("cpu")`."""
        if not isinstance(node.func, cst.Attribute) or not self._on_device(node.func.value):
            return False
        method = node.func.attr.value
        return method in _SYNC_METHODS or method == "to" and self.context.flow.move_destination(node) == HOST_PLACE

    def _under_periodic_if(self, node: cst.CSTNode, loop: _Loop) -> bool:
        """Under `if step % N == 0:`, or in a branch that leaves the loop (`sys.exit(1)`)."""
        child: cst.CSTNode = node
        for ancestor in self.context.ancestors(node):
            if ancestor is loop.node:
                return False
            if isinstance(ancestor, (cst.If, cst.IfExp)) and _is_periodic(ancestor.test):
                return True
            if isinstance(ancestor, cst.If) and child is ancestor.body and _leaves_loop(ancestor.body):
                return True
            child = ancestor
        return False
