"""TDL013 non-blocking-cpu-copy-read-early."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from enum import Enum

import libcst as cst

from torchdevlint.analysis.flow.values import HOST_PLACE
from torchdevlint.analysis.loader_flow import is_non_blocking
from torchdevlint.analysis.tree import child_nodes
from torchdevlint.context import FileContext
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid

# Reading these says nothing about the values, so it does not race with the copy.
_METADATA = frozenset({"shape", "dtype", "device", "size", "dim", "ndim", "numel", "is_pinned", "layout", "names"})
# Calls that read the values of a CPU tensor passed to them.
_READING_BUILTINS = frozenset(
    {"print", "float", "int", "bool", "str", "repr", "list", "tuple", "format", "sum", "max", "min"}
)
_READING_MODULES = ("numpy.", "torch.", "np.")
# Calls after which the copy has completed: an explicit synchronisation, or a blocking
# device-to-host transfer, which waits for the stream the copy was queued on.
_SYNCHRONISING_METHODS = frozenset({"synchronize", "item", "tolist", "numpy", "cpu", "wait", "query", "barrier"})
_SYNCHRONISING_MODULES = ("torch.cuda.", "torch.accelerator.", "torch.distributed.", "torch.xpu.", "torch.mps.")
_NESTED_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)


class _Verdict(Enum):
    """What a statement after the copy does to it."""

    # Reads the copy's values, with nothing in the statement synchronising.
    READ = "read"
    # Synchronises, rebinds the name, or hands the bare copy to a caller: stop looking.
    STOP = "stop"
    # Neither: look at the next statement.
    NEUTRAL = "neutral"


def _is_cpu_copy(context: FileContext, node: cst.CSTNode) -> bool:
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == "to"
        and is_non_blocking(node)
        and context.flow.move_destination(node) == HOST_PLACE
    )


def _units(body: Sequence[cst.BaseStatement]) -> Iterator[cst.CSTNode]:
    """The statements of a block in order, with `a; b` split into its small statements."""
    for statement in body:
        if isinstance(statement, cst.SimpleStatementLine):
            yield from statement.body
        else:
            yield statement


def _hands_over(value: cst.BaseExpression | cst.From | None, name: str) -> bool:
    """`return copy`, `yield copy, other`: the bare tensor goes to the caller unread."""
    if isinstance(value, cst.Name):
        return value.value == name
    if isinstance(value, (cst.Tuple, cst.List)):
        return any(isinstance(e.value, cst.Name) and e.value.value == name for e in value.elements)
    return False


def _mentions(node: cst.CSTNode, name: str) -> bool:
    stack: list[cst.CSTNode] = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Name) and current.value == name:
            return True
        stack.extend(child_nodes(current))
    return False


class NonBlockingCpuCopyReadEarly(Rule):
    """
    ## What it does
    Finds a copy to the CPU made with `non_blocking=True` (`.to("cpu", non_blocking=True)`,
    `.to(device=torch.device("cpu"), non_blocking=True)`) whose values are read before
    anything synchronises: in the same expression (`.to("cpu", non_blocking=True).numpy()`,
    `print(...)` of it), or later in the same block (printed, formatted, converted with
    `.numpy()`/`.tolist()`/`.item()`/`float()`, indexed, computed with) with no
    synchronisation in between. A synchronisation is `torch.cuda.synchronize()` (or any
    `torch.cuda`/`torch.accelerator` call), an event or stream `.synchronize()`/`.wait()`,
    or a blocking transfer of another tensor such as `.item()`, `.cpu()` or `.to(...)`.
    The usual case is a prediction or a logged metric copied back with the flag and turned
    into a list or array on the next line.

    Not reported: reads of metadata only (`.shape`, `.dtype`, `.size()`), a copy handed to a
    caller (`return copy`) or stored unread (`results.append(copy)`), and a name rebound
    before it is read. This race used to be the second half of TDL102, which now reports only
    `non_blocking=True` batches from unpinned loaders.

    ## Why is this bad?
    A device-to-host copy with `non_blocking=True` is queued on the GPU's stream and returns
    at once: PyTorch hands back a CPU tensor (in pinned memory) before the data has
    arrived. Reading it before the stream has caught up sees whatever the buffer held,
    often zeros. Nothing fails; the numbers are wrong now and then, depending on how busy
    the GPU is. PyTorch's guide to `non_blocking` and `pin_memory()` warns that such a copy
    must be synchronised before its values are used.

    ## Fix safety
    Safe: the fix removes `non_blocking=True`, so the copy completes before the next line
    runs and the values read are the copied ones. The copy no longer overlaps with other
    work; where that overlap matters, synchronise (an event's `.synchronize()`) before the
    first read instead.

    ## Options
    None.
    """

    code = "TDL013"
    slug = "non-blocking-cpu-copy-read-early"
    message = "Non-blocking copy to the CPU is read before synchronising; it may not have arrived yet"
    fix_title = "Make the copy blocking"
    requires_any_text = ("non_blocking",)

    VALID = [
        Valid(
            """
            import torch
            def predict(model, x):
                scores = model(x).to("cpu", non_blocking=True)
                torch.cuda.synchronize()
                return scores.numpy()
            def gather(outputs):
                cpu = outputs.to("cpu", non_blocking=True)
                total = outputs.sum().item()
                return cpu.tolist(), total
            def stash(outputs, results):
                results.append(outputs.to("cpu", non_blocking=True))
            """,
            name="copy-to-cpu-synchronised-or-not-read",
        ),
        Valid(
            """
            import torch
            def overlap(model, batches):
                copied = torch.cuda.Event()
                for batch in batches:
                    host = model(batch).to("cpu", non_blocking=True)
                    copied.record()
                    rows = host.shape[0]
                    copied.synchronize()
                    yield host.numpy()[:rows]
            """,
            name="event-synchronised-and-metadata-read",
        ),
        Valid(
            """
            import torch
            def to_device_then_back(batch, device):
                batch = batch.to(device, non_blocking=True)
                total = batch.sum()
                labels = batch.argmax(-1).to("cpu")
                return labels.tolist()
            """,
            name="copy-to-the-gpu-or-blocking-copy",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            def predict(model, images):
                logits = model(images.cuda())
                probs = logits.softmax(-1).to("cpu", non_blocking=True)
                return probs.argmax(-1).tolist()
            """,
            fixed="""
            import torch
            def predict(model, images):
                logits = model(images.cuda())
                probs = logits.softmax(-1).to("cpu")
                return probs.argmax(-1).tolist()
            """,
            applicability=Applicability.SAFE,
            name="prediction-read-on-the-next-line",
            in_docs=True,
        ),
        Invalid(
            """
            import numpy as np
            import torch
            def predict(model, x):
                logits = model(x)
                probs = logits.softmax(-1).to("cpu", non_blocking=True)
                return np.argmax(probs.numpy(), axis=-1)
            """,
            fixed="""
            import numpy as np
            import torch
            def predict(model, x):
                logits = model(x)
                probs = logits.softmax(-1).to("cpu")
                return np.argmax(probs.numpy(), axis=-1)
            """,
            applicability=Applicability.SAFE,
            name="copy-to-cpu-read-at-once",
        ),
        Invalid(
            """
            import torch
            def log_predictions(preds, writer):
                labels = preds.argmax(-1).to(device=torch.device("cpu"), non_blocking=True).tolist()
                writer.write(str(labels))
            """,
            fixed="""
            import torch
            def log_predictions(preds, writer):
                labels = preds.argmax(-1).to(device=torch.device("cpu")).tolist()
                writer.write(str(labels))
            """,
            applicability=Applicability.SAFE,
            name="copy-to-cpu-read-in-the-same-chain",
        ),
        Invalid(
            """
            import torch
            def train_step(model, optimizer, criterion, images, targets, history):
                loss = criterion(model(images), targets)
                loss.backward()
                optimizer.step()
                loss_cpu = loss.detach().to("cpu", non_blocking=True)
                history.append(float(loss_cpu))
                print(f"loss {loss_cpu:.4f}")
            """,
            fixed="""
            import torch
            def train_step(model, optimizer, criterion, images, targets, history):
                loss = criterion(model(images), targets)
                loss.backward()
                optimizer.step()
                loss_cpu = loss.detach().to("cpu")
                history.append(float(loss_cpu))
                print(f"loss {loss_cpu:.4f}")
            """,
            applicability=Applicability.SAFE,
            name="logged-loss-converted-with-float",
        ),
        Invalid(
            """
            import torch
            @torch.no_grad()
            def embed_all(encoder, loader, device):
                rows = []
                for batch in loader:
                    vectors = encoder(batch.to(device)).to("cpu", non_blocking=True)
                    rows.extend(vectors.tolist())
                return rows
            """,
            fixed="""
            import torch
            @torch.no_grad()
            def embed_all(encoder, loader, device):
                rows = []
                for batch in loader:
                    vectors = encoder(batch.to(device)).to("cpu")
                    rows.extend(vectors.tolist())
                return rows
            """,
            applicability=Applicability.SAFE,
            name="embeddings-collected-in-a-loop",
        ),
    ]

    # ---- read in the same expression -------------------------------------------------

    def visit_Call(self, node: cst.Call) -> None:
        if _is_cpu_copy(self.context, node) and self._read_at_once(node):
            self.report(node, fix=self._blocking_fix(node))

    def _read_at_once(self, node: cst.Call) -> bool:
        """`x.to("cpu", non_blocking=True).numpy()`, `[0]`, `print(x.to(...))`."""
        parent = self.context.parent(node)
        if isinstance(parent, cst.Subscript):
            return True
        if isinstance(parent, cst.Attribute) and parent.attr.value not in _METADATA:
            grandparent = self.context.parent(parent)
            return isinstance(grandparent, cst.Call) and grandparent.func is parent
        if isinstance(parent, cst.Arg):
            call = self.context.parent(parent)
            return isinstance(call, cst.Call) and self._reads_arguments(call)
        return False

    def _reads_arguments(self, call: cst.Call) -> bool:
        func = call.func
        if isinstance(func, cst.Name) and func.value in _READING_BUILTINS:
            return True
        qualified = self.context.imports.qualified_name(func) or ""
        return qualified.startswith(_READING_MODULES) and not qualified.startswith(_SYNCHRONISING_MODULES)

    # ---- read by a later statement of the block --------------------------------------

    def visit_Module(self, node: cst.Module) -> None:
        self._scan_block(node.body)

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._scan_block(node.body)

    def _scan_block(self, body: Sequence[cst.BaseStatement]) -> None:
        units = list(_units(body))
        for index, unit in enumerate(units):
            if not (isinstance(unit, cst.Assign) and len(unit.targets) == 1):
                continue
            if not isinstance(unit.targets[0].target, cst.Name):
                continue
            copy = unit.value
            if not (isinstance(copy, cst.Call) and _is_cpu_copy(self.context, copy)):
                continue
            name = unit.targets[0].target.value
            for later in units[index + 1:]:
                verdict = self._unit_verdict(later, name)
                if verdict is _Verdict.READ:
                    self.report(copy, fix=self._blocking_fix(copy))
                if verdict is not _Verdict.NEUTRAL:
                    break

    def _unit_verdict(self, unit: cst.CSTNode, name: str) -> _Verdict:
        reads = False
        synchronises = False
        stack: list[tuple[cst.CSTNode, cst.CSTNode | None, cst.CSTNode | None]] = [(unit, None, None)]
        while stack:
            node, parent, grandparent = stack.pop()
            if isinstance(node, _NESTED_SCOPES):
                continue
            if isinstance(node, (cst.Return, cst.Yield)) and _hands_over(node.value, name):
                return _Verdict.STOP  # the caller may synchronise before reading
            if isinstance(node, cst.AssignTarget) and isinstance(node.target, cst.Name) and node.target.value == name:
                return _Verdict.STOP
            if isinstance(node, cst.Name):
                if node.value == name:
                    reads = reads or self._is_read(parent, grandparent)
                continue
            if isinstance(node, cst.Call) and self._synchronises(node, name):
                synchronises = True
            stack.extend((child, node, parent) for child in child_nodes(node))
        if synchronises:
            return _Verdict.STOP
        return _Verdict.READ if reads else _Verdict.NEUTRAL

    def _is_read(self, parent: cst.CSTNode | None, grandparent: cst.CSTNode | None) -> bool:
        if isinstance(parent, cst.Attribute):
            return parent.attr.value not in _METADATA
        if isinstance(parent, (cst.Subscript, cst.Index, cst.BinaryOperation, cst.UnaryOperation, cst.Comparison,
                               cst.ComparisonTarget, cst.BooleanOperation, cst.FormattedStringExpression, cst.If,
                               cst.While, cst.For, cst.CompFor, cst.AugAssign)):
            return True
        if isinstance(parent, cst.Arg):
            return isinstance(grandparent, cst.Call) and self._reads_arguments(grandparent)
        return False

    def _synchronises(self, call: cst.Call, name: str) -> bool:
        func = call.func
        if isinstance(func, cst.Attribute):
            if _mentions(func.value, name):
                return False  # a method of the copy itself reads it, it does not wait for it
            method = func.attr.value
            if method in _SYNCHRONISING_METHODS:
                return True
            if method in ("to", "cuda") and not is_non_blocking(call):
                return True
        qualified = self.context.imports.qualified_name(func) or ""
        return qualified.startswith(_SYNCHRONISING_MODULES)

    def _blocking_fix(self, call: cst.Call) -> PendingFix:
        args = [arg for arg in call.args if not (arg.keyword is not None and arg.keyword.value == "non_blocking")]
        if args:
            args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        rendered = self.context.code_for_node(call.with_changes(args=args))
        return self.make_fix(NodeEdit(call, rendered))
