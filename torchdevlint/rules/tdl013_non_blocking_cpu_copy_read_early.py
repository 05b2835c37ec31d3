"""TDL013 non-blocking-cpu-copy-read-early."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from torchdevlint.analysis.async_copies import copies_read_early, is_cpu_copy, read_at_once
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import HOST_COPY_READ_EARLY, RuntimeProof


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

    ## Why is this bad?
    A device-to-host copy with `non_blocking=True` is queued on the GPU's stream and returns
    at once: PyTorch hands back a CPU tensor (in pinned memory) before the data has
    arrived. Reading it before the stream has caught up sees whatever the buffer held,
    often zeros. Nothing fails; the numbers are wrong now and then, depending on how busy
    the GPU is. PyTorch's guide to `non_blocking` and `pin_memory()` warns that such a copy
    must be synchronised before its values are used.

    ## Not reported
    Not reported: reads of metadata only (`.shape`, `.dtype`, `.size()`), a copy handed to a
    caller (`return copy`) or stored unread (`results.append(copy)`), and a name rebound
    before it is read. This race used to be the second half of TDL102, which now reports only
    `non_blocking=True` batches from unpinned loaders.

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
    proof = RuntimeProof(HOST_COPY_READ_EARLY)
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
        if not is_cpu_copy(self.context.flow, node):
            return
        parent = self.context.parent(node)
        grandparent = self.context.parent(parent) if parent is not None else None
        if read_at_once(parent, grandparent, self.context.names):
            self.report(node, fix=self._blocking_fix(node))

    # ---- read by a later statement of the block --------------------------------------

    def visit_Module(self, node: cst.Module) -> None:
        self._scan_block(node.body)

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._scan_block(node.body)

    def _scan_block(self, body: Sequence[cst.BaseStatement]) -> None:
        for copy in copies_read_early(body, self.context.flow, self.context.names):
            self.report(copy, fix=self._blocking_fix(copy))

    def _blocking_fix(self, call: cst.Call) -> PendingFix:
        args = [arg for arg in call.args if not (arg.keyword is not None and arg.keyword.value == "non_blocking")]
        if args:
            args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        rendered = self.context.code_for_node(call.with_changes(args=args))
        return self.make_fix(NodeEdit(call, rendered))
