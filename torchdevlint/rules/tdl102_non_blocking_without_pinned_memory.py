"""TDL102 non-blocking-without-pinned-memory."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import libcst as cst

from torchdevlint.analysis.loader_flow import (
    LoaderFlow,
    PinMemory,
    Target,
    is_non_blocking,
    move_target,
)
from torchdevlint.analysis.tree import child_nodes
from torchdevlint.context import FileContext
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.rules.tdl101_dataloader_starves_gpu import pin_memory_fix

_NO_EFFECT = "non_blocking=True has no effect: the batch comes from a DataLoader without pin_memory=True"
_RACE = "Non-blocking copy to the CPU is read before synchronising; it may not have arrived yet"

# Reading these says nothing about the values, so it does not race with the copy.
_METADATA = frozenset({"shape", "dtype", "device", "size", "dim", "ndim", "numel", "is_pinned", "layout", "names"})
# Calls that read the values of a CPU tensor passed to them.
_READING_BUILTINS = frozenset({"print", "float", "int", "bool", "str", "repr", "list", "tuple", "format", "sum", "max", "min"})
_READING_MODULES = ("numpy.", "torch.", "np.")
# Calls after which the copy has completed: an explicit synchronisation, or a blocking
# device-to-host transfer, which waits for the stream the copy was queued on.
_SYNCHRONISING_METHODS = frozenset({"synchronize", "item", "tolist", "numpy", "cpu", "wait", "query", "barrier"})
_SYNCHRONISING_MODULES = ("torch.cuda.", "torch.accelerator.", "torch.distributed.", "torch.xpu.", "torch.mps.")
_NESTED_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)


def _is_cpu_copy(context: FileContext, node: cst.CSTNode) -> bool:
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == "to"
        and is_non_blocking(node)
        and move_target(context, node) is Target.CPU
    )


def _units(body: Sequence[cst.BaseStatement]) -> Iterator[cst.CSTNode]:
    """The statements of a block in order, with `a; b` split into its small statements."""
    for statement in body:
        if isinstance(statement, cst.SimpleStatementLine):
            yield from statement.body
        else:
            yield statement


def _hands_over(value: cst.BaseExpression | None, name: str) -> bool:
    """`return copy`, `yield copy, other`: the bare tensor goes to the caller unread."""
    if isinstance(value, cst.Name):
        return value.value == name
    if isinstance(value, (cst.Tuple, cst.List)):
        return any(isinstance(e.value, cst.Name) and e.value.value == name for e in value.elements)
    return False


class NonBlockingWithoutPinnedMemory(Rule):
    """
    ## What it does
    Finds two misuses of `non_blocking=True`:

    - `.to(device, non_blocking=True)` or `.cuda(non_blocking=True)` on an item of a batch
      from a `DataLoader` that does not pin memory (`pin_memory` unset or `False`), in a
      file that pins nothing by hand (`.pin_memory()`). The loader is found as for TDL101:
      by the name or attribute it is bound to, in any function of the file.
    - a non-blocking copy to the CPU (`.to("cpu", non_blocking=True)`) that is read (printed,
      converted with `.numpy()`/`.tolist()`/`.item()`, indexed, computed with) in the same
      block before anything synchronises: `torch.cuda.synchronize()`, an event or stream
      `.synchronize()`, or a blocking transfer such as `.item()`, `.cpu()` or `.to(...)`.

    ## Why is this bad?
    A host-to-device copy is asynchronous only from pinned (page-locked) memory. From
    ordinary memory PyTorch stages the data and the host waits: "If `True` and the source is
    in pinned memory, the copy will be asynchronous with respect to the host. Otherwise, the
    argument has no effect." The loop pays for the copy and gets no overlap.

    The other direction is a silent race: a non-blocking device-to-host copy returns at
    once, before the data has arrived, and reading the CPU tensor then sees whatever was in
    its buffer (often zeros). Nothing fails; the numbers are wrong now and then.

    ## Example
    ```python
    loader = DataLoader(train_set, batch_size=64, num_workers=4)
    for images, labels in loader:
        images = images.to(device, non_blocking=True)

    probabilities = logits.softmax(-1).to("cpu", non_blocking=True)
    print(probabilities.numpy())
    ```

    ## Use instead
    ```python
    loader = DataLoader(train_set, batch_size=64, num_workers=4, pin_memory=True)
    for images, labels in loader:
        images = images.to(device, non_blocking=True)

    probabilities = logits.softmax(-1).to("cpu")
    print(probabilities.numpy())
    ```

    ## Fix safety
    For an unpinned loader the fix adds `pin_memory=True` to it; as for TDL101 it is safe
    when the dataset is known to yield CPU tensors (a `torchvision.datasets` dataset, a
    `TensorDataset` of CPU tensors) and unsafe otherwise (a dataset that returns GPU
    tensors cannot be pinned). A loader with `pin_memory=False` written out is reported
    without a fix. For a copy to the CPU the fix removes `non_blocking=True`, making the copy
    finish before the next line: safe, the values read are now the copied ones.

    ## Options
    None.
    """

    code = "TDL102"
    slug = "non-blocking-without-pinned-memory"
    message = "non_blocking=True has no effect from unpinned memory, and a CPU copy read before a sync races"
    fix_title = "Pin the loader's memory, or make the copy to the CPU blocking"
    requires_any_text = ("non_blocking",)

    VALID = [
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            loader = DataLoader(dataset, batch_size=64, num_workers=4, pin_memory=True)
            manual = DataLoader(dataset, batch_size=64)
            for x, y in loader:
                x = x.to("cuda", non_blocking=True)
            for x, y in manual:
                x = x.pin_memory().to("cuda", non_blocking=True)
            """,
            name="pinned-by-the-loader-or-by-hand",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            loader = DataLoader(dataset, batch_size=64, pin_memory=args.pin_mem)
            for x, y in loader:
                x = x.cuda(non_blocking=True)
            def evaluate(data_loader):
                for x, y in data_loader:
                    x = x.cuda(non_blocking=True)
            """,
            name="configured-or-unknown-loader",
        ),
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
    ]
    INVALID = [
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader, TensorDataset
            data = TensorDataset(torch.randn(256, 8), torch.randint(0, 2, (256,)))
            loader = DataLoader(data, batch_size=32, shuffle=True)
            device = torch.device("cuda")
            for x, y in loader:
                x = x.to(device, non_blocking=True)
                y = y.to(device, non_blocking=True)
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader, TensorDataset
            data = TensorDataset(torch.randn(256, 8), torch.randint(0, 2, (256,)))
            loader = DataLoader(data, batch_size=32, shuffle=True, pin_memory=True)
            device = torch.device("cuda")
            for x, y in loader:
                x = x.to(device, non_blocking=True)
                y = y.to(device, non_blocking=True)
            """,
            applicability=Applicability.SAFE,
            count=2,
            name="tensor-dataset-loader-not-pinned",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader
            class Trainer:
                def __init__(self, dataset):
                    self.train_loader = DataLoader(dataset, batch_size=32, num_workers=4)
                def epoch(self, gpu):
                    for step, (images, target) in enumerate(self.train_loader):
                        images = images.cuda(gpu, non_blocking=True)
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader
            class Trainer:
                def __init__(self, dataset):
                    self.train_loader = DataLoader(dataset, batch_size=32, num_workers=4, pin_memory=True)
                def epoch(self, gpu):
                    for step, (images, target) in enumerate(self.train_loader):
                        images = images.cuda(gpu, non_blocking=True)
            """,
            applicability=Applicability.UNSAFE,
            name="custom-dataset-loader-not-pinned",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader
            loader = DataLoader(dataset, pin_memory=False)
            for batch in loader:
                batch = [t.to("cuda:0", non_blocking=True) for t in batch]
            """,
            name="pinning-turned-off-has-no-fix",
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
    ]

    def setup(self) -> None:
        self._flow = self.context.shared(LoaderFlow)

    # ---- a batch from an unpinned loader -------------------------------------------

    def visit_Call(self, node: cst.Call) -> None:
        if _is_cpu_copy(self.context, node) and self._read_at_once(node):
            self.report(node, message=_RACE, fix=self._blocking_fix(node))

    def leave_Module(self, node: cst.Module) -> None:
        if self._flow.pins_anywhere:
            return  # pinned by hand somewhere (a collate_fn, say): the batches may be pinned
        for loop, loaders in self._flow.feeding_loops():
            if any(loader.splat or loader.pin_memory not in (PinMemory.ABSENT, PinMemory.OFF) for loader in loaders):
                continue
            fix = None
            if all(loader.pin_memory is PinMemory.ABSENT for loader in loaders):
                fix = pin_memory_fix(self, *loaders)
            for move in loop.moves:
                if move.non_blocking:
                    self.report(move.call, message=_NO_EFFECT, fix=fix)

    # ---- a copy to the CPU read too early ------------------------------------------

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

    def visit_Module(self, node: cst.Module) -> None:
        self._scan_block(node.body)

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._scan_block(node.body)

    def _scan_block(self, body: Sequence[cst.BaseStatement]) -> None:
        units = list(_units(body))
        for index, unit in enumerate(units):
            if not (isinstance(unit, cst.Assign) and len(unit.targets) == 1 and isinstance(unit.targets[0].target, cst.Name)):
                continue
            if not _is_cpu_copy(self.context, unit.value):
                continue
            name = unit.targets[0].target.value
            for later in units[index + 1:]:
                verdict = self._unit_verdict(later, name)
                if verdict == "read":
                    assert isinstance(unit.value, cst.Call)
                    self.report(unit.value, message=_RACE, fix=self._blocking_fix(unit.value))
                if verdict != "neutral":
                    break

    def _unit_verdict(self, unit: cst.CSTNode, name: str) -> str:
        """"read" (the copy's values, with nothing synchronising in the statement), "stop"
        (something synchronises, the name is rebound or handed to a caller), or "neutral"."""
        reads = False
        synchronises = False
        stack: list[tuple[cst.CSTNode, cst.CSTNode | None, cst.CSTNode | None]] = [(unit, None, None)]
        while stack:
            node, parent, grandparent = stack.pop()
            if isinstance(node, _NESTED_SCOPES):
                continue
            if isinstance(node, (cst.Return, cst.Yield)) and _hands_over(node.value, name):
                return "stop"  # the caller may synchronise before reading
            if isinstance(node, cst.AssignTarget) and isinstance(node.target, cst.Name) and node.target.value == name:
                return "stop"
            if isinstance(node, cst.Name):
                if node.value == name:
                    reads = reads or self._is_read(parent, grandparent)
                continue
            if isinstance(node, cst.Call) and self._synchronises(node, name):
                synchronises = True
            stack.extend((child, node, parent) for child in child_nodes(node))
        if synchronises:
            return "stop"
        return "read" if reads else "neutral"

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
            if self._mentions(func.value, name):
                return False  # a method of the copy itself reads it, it does not wait for it
            method = func.attr.value
            if method in _SYNCHRONISING_METHODS:
                return True
            if method in ("to", "cuda") and not is_non_blocking(call):
                return True
        qualified = self.context.imports.qualified_name(func) or ""
        return qualified.startswith(_SYNCHRONISING_MODULES)

    @staticmethod
    def _mentions(node: cst.CSTNode, name: str) -> bool:
        stack: list[cst.CSTNode] = [node]
        while stack:
            current = stack.pop()
            if isinstance(current, cst.Name) and current.value == name:
                return True
            stack.extend(child_nodes(current))
        return False

    def _blocking_fix(self, call: cst.Call) -> PendingFix:
        args = [arg for arg in call.args if not (arg.keyword is not None and arg.keyword.value == "non_blocking")]
        if args:
            args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        rendered = self.context.code_for_node(call.with_changes(args=args))
        return self.make_fix(NodeEdit(call, rendered), title="Make the copy blocking")
