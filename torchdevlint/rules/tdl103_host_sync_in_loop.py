"""TDL103 host-sync-in-loop."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.brains import naming
from torchdevlint.analysis.flow.values import HOST_PLACE
from torchdevlint.analysis.names import dotted_name
from torchdevlint.analysis.training_loops import Loop, TrainingLoops
from torchdevlint.analysis.tree import descendants
from torchdevlint.rule import Invalid, Rule, Valid

# Tensor methods that copy to the host and so wait for every queued kernel.
_SYNC_METHODS = frozenset({"item", "tolist", "cpu"})
# Builtins that read a one-element tensor's value on the host.
_NUMBER_BUILTINS = frozenset({"float", "int", "bool"})


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
    branch that raises, breaks or exits run once; neither is reported. Nor is a copy that
    an environment's `step` is handed (`envs.step(actions.cpu().numpy())`, directly or
    through a name bound in the loop): the simulator needs the actions on the host every step.

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
            model = model.to(device)
            for step, (x, y) in enumerate(train_loader):
                loss = criterion(model(x.to(device)), y.to(device))
                loss.backward()
                optimizer.step()
                if step % eval_every == 0:
                    held_out = []
                    for vx, vy in val_loader:
                        held_out.append(criterion(model(vx.to(device)), vy.to(device)).item())
                    print(sum(held_out) / len(held_out))
            """,
            name="periodic-validation-pass",
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
        Valid(
            """
            import gymnasium as gym
            import torch

            envs = gym.vector.SyncVectorEnv([make_env(i) for i in range(4)])
            obs, _ = envs.reset(seed=1)
            for global_step in range(total_timesteps):
                with torch.no_grad():
                    q_values = q_network(torch.as_tensor(obs, device=device))
                actions = torch.argmax(q_values, dim=1).cpu().numpy()
                next_obs, rewards, terminations, truncations, infos = envs.step(actions)
                loss = td_loss(q_network, target_network, replay.sample(batch_size))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                obs = next_obs
            """,
            name="actions-an-environment-steps-with",
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
        self._loops = self.context.shared(TrainingLoops)
        # Synchronising calls and formatting per loop (by id), kept until we know whether the
        # loop trains.
        self._syncs: dict[int, list[cst.CSTNode]] = {}
        # Each loop's `env.step(...)` calls, found once (by the loop's id).
        self._environment_steps: dict[int, list[cst.Call]] = {}

    def _leave(self, node: cst.For | cst.While) -> None:
        syncs = self._syncs.pop(id(node), [])
        if not syncs:
            return
        if self._loops.trains(node):
            for call in syncs:
                self.report(call)
            return
        outer = self._loops.outer(node)
        if outer is not None and self._loops.every_step(node, outer):
            # An inner loop (over metrics, say) runs on every step of the loop around it,
            # unless it is periodic itself (a validation pass under `if step % N == 0:`).
            self._syncs.setdefault(id(outer), []).extend(syncs)

    leave_For = leave_While = _leave

    def _every_step(self, node: cst.CSTNode) -> Loop | None:
        """The loop that runs `node` on every step, if any."""
        loop = self._loops.innermost(node)
        return loop if loop is not None and self._loops.every_step(node, loop) else None

    def _add(self, node: cst.CSTNode, loop: Loop) -> None:
        self._syncs.setdefault(id(loop), []).append(node)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "backward":
            return
        loop = self._loops.innermost(node)
        if loop is None:
            return
        if isinstance(func, cst.Name) and func.value == "print" and self.context.binding_scope("print") is None:
            reads = any(self._on_device(arg.value) for arg in node.args)
        elif isinstance(func, cst.Name) and func.value in _NUMBER_BUILTINS \
                and self.context.binding_scope(func.value) is None:
            reads = len(node.args) == 1 and self._on_device(node.args[0].value)
        elif isinstance(func, cst.Attribute) and func.attr.value == "format" and isinstance(func.value, cst.SimpleString):
            # `"{:.3f}".format(loss)` reads the value, as `loss.item()` does.
            reads = any(self._on_device(arg.value) for arg in node.args)
        else:
            reads = self._is_sync_call(node) and not self._feeds_an_environment_step(node, loop)
        if reads and self._loops.every_step(node, loop):
            self._add(node, loop)

    def visit_FormattedStringExpression(self, node: cst.FormattedStringExpression) -> None:
        """`f"{loss:.4f}"`: formatting a device tensor reads its value on the host."""
        loop = self._loops.innermost(node)
        if loop is not None and self._on_device(node.expression) and self._loops.every_step(node, loop):
            self._add(node.expression, loop)

    def visit_Subscript(self, node: cst.Subscript) -> None:
        """`total += loss.data[0]`: before PyTorch 0.4, how a loss was read as a number."""
        value = node.value
        if not (isinstance(value, cst.Attribute) and value.attr.value == "data" and len(node.slice) == 1):
            return
        index = node.slice[0].slice
        if not (isinstance(index, cst.Index) and isinstance(index.value, cst.Integer) and index.value.value == "0"):
            return
        loop = self._loops.innermost(node)
        if loop is None or not self._on_device(value.value) or not self._read_as_number(node):
            return
        if self._loops.every_step(node, loop):
            self._add(node, loop)

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

    def _feeds_an_environment_step(self, sync: cst.Call, loop: Loop) -> bool:
        """`envs.step(actions.cpu().numpy())`, or `actions = q.argmax(1).cpu().numpy()` and
        then `envs.step(actions)` in the same loop: an environment takes host data, so the copy
        is the step's own, not a read that could wait."""
        statement = next((node for node in reversed(self.context.ancestors(sync))
                          if isinstance(node, cst.BaseSmallStatement)), None)
        if statement is None:
            return False
        steps = self._environment_steps.get(id(loop))
        if steps is None:
            steps = self._environment_steps[id(loop)] = [
                call for call in descendants(loop.body, into_definitions=False)
                if type(call) is cst.Call and _is_environment_step(call)]
        if any(_holds(arg.value, sync) for call in steps for arg in call.args):
            return True
        if not isinstance(statement, cst.Assign) or not _holds(statement.value, sync):
            return False
        bound = {name.value for target in statement.targets for name in _names_in(target.target)}
        return any(name.value in bound for call in steps for arg in call.args for name in _names_in(arg.value))

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


def _is_environment_step(call: cst.Call) -> bool:
    func = call.func
    if not (isinstance(func, cst.Attribute) and func.attr.value == "step" and call.args):
        return False
    receiver = dotted_name(func.value)
    return receiver is not None and bool(set(naming.words(receiver.rpartition(".")[2])) & naming.ENVIRONMENT_WORDS)


def _holds(expression: cst.CSTNode, node: cst.CSTNode) -> bool:
    return any(current is node for current in descendants(expression))


def _names_in(expression: cst.CSTNode) -> list[cst.Name]:
    return [node for node in descendants(expression) if isinstance(node, cst.Name)]
