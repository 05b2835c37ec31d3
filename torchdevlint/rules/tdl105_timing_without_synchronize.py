"""TDL105 timing-without-synchronize."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from torchdevlint.analysis.timing import TIMERS, unsynchronised_readings
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid


class TimingWithoutSynchronize(Rule):
    """
    ## What it does
    Finds a measurement with the wall clock (`time.time()`, `time.perf_counter()`,
    `time.monotonic()`, `timeit.default_timer()` subtracted from, or bound to a name a later
    statement subtracts from) that follows, on some path from an earlier reading, work the
    flow model shows on an accelerator (a model on the GPU called, device tensors computed,
    `loss.backward()`) with nothing in between that waits for it: no
    `torch.cuda.synchronize()` (or `torch.accelerator.synchronize()`), no CUDA event, no
    transfer to the host (`.item()`, `.cpu()`, printing a tensor). The paths go into `if`,
    `with`, `try` and loops; a loop's step meets the work its previous step left queued.

    ## Why is this bad?
    CUDA queues kernels and returns at once. The difference of the two readings is how long
    it took to queue the work, not to do it: a benchmark that reports 2 ms for a forward
    pass that takes 40 ms, and comparisons between models or settings that mean nothing. It
    is a measurement rule: it is off by default.

    ## Not reported
    Not reported: readings with a synchronisation or a host transfer between the work and the
    reading, readings around host-only work, readings that start a span (`end = time.time()`)
    or check a time limit (`if time.time() - t0 > limit:`), a synchronisation skipped only
    where there is no GPU (`if torch.cuda.is_available(): torch.cuda.synchronize()`), and
    timing through CUDA events. A training loop (it calls `.backward()` or a function named
    for training, such as `train_one_epoch`, or iterates a DataLoader) is timed as a whole:
    CUDA queues only so far ahead, so what is unfinished at its end is a step's worth of a
    long span. For the same reason per-step readings inside a training loop that never
    waits come out right on average. A loop that waits every step (`loss.item()`) empties
    the queue, so there a per-step reading is right only where the wait is inside its span.
    A helper of the file that returns Python numbers (`loss, acc = evaluate(...)`) has
    waited for its work.

    ## Fix safety
    Safe: the fix puts `if torch.cuda.is_available(): torch.cuda.synchronize()` on the line
    before the reading's statement, so the reading waits for the queued work; on a machine
    without a GPU the line does nothing. Readings inside a larger statement (a compound
    statement's header, after a `;`) get no fix.

    ## Options
    None.
    """

    code = "TDL105"
    slug = "timing-without-synchronize"
    message = "This reading times the queueing of GPU work, not the work: synchronise before reading the clock"
    fix_title = "Synchronise before reading the clock"
    default_enabled = False
    requires_any_text = ("time(", "perf_counter", "monotonic", "default_timer", "time_ns")

    VALID = [
        Valid(
            """
            import time
            import torch
            import torch.nn.functional as F
            from torch.utils.data import DataLoader, TensorDataset

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(4, 2).to(device)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.zeros(32, dtype=torch.long)), batch_size=8)


            def accuracy(model, loader):
                correct, seen = 0, 0
                for features, labels in loader:
                    features, labels = features.to(device), labels.to(device)
                    correct += (model(features).argmax(1) == labels).sum()
                    seen += labels.size(0)
                return correct.float() / seen * 100


            costs = []
            start = time.time()
            for epoch in range(3):
                for features, labels in loader:
                    features, labels = features.to(device), labels.to(device)
                    cost = F.cross_entropy(model(features), labels)
                    optimizer.zero_grad()
                    cost.backward()
                    optimizer.step()
                    costs.append(cost.item())
                with torch.no_grad():
                    train_acc = accuracy(model, loader)
                    print(f"epoch {epoch:03d} | "
                          f"accuracy {train_acc:.2f}")
                elapsed = (time.time() - start) / 60
                print(f"{elapsed:.2f} min")
            """,
            name="formatting-a-device-tensor-reads-it-on-the-host",
        ),
        Valid(
            """
            import time
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(64, 64).to(device)
            x = torch.randn(32, 64, device=device)
            start = time.perf_counter()
            y = model(x)
            torch.cuda.synchronize()
            elapsed = time.perf_counter() - start
            begin = time.time()
            loss = model(x).sum()
            print(loss.item())
            took = time.time() - begin
            """,
            name="synchronised-and-read-back",
        ),
        Valid(
            """
            import time
            import numpy as np
            start = time.time()
            values = np.random.rand(1000).sum()
            elapsed = time.time() - start
            """,
            name="host-work",
        ),
        Valid(
            """
            import time
            import torch
            def train_epoch(model, loader, optimiser, device):
                step_times = []
                last = time.time()
                for images, labels in loader:
                    images, labels = images.to(device), labels.to(device)
                    loss = torch.nn.functional.cross_entropy(model(images), labels)
                    optimiser.zero_grad()
                    loss.backward()
                    optimiser.step()
                    running = loss.item()
                    step_times.append(time.time() - last)
                    last = time.time()
                return step_times
            """,
            name="per-step-times-whose-span-holds-the-wait",
        ),
        Valid(
            """
            import time
            import torch
            def fit(model, loader, optimiser, device, log):
                tick = time.perf_counter()
                for inputs, targets in loader:
                    inputs, targets = inputs.to(device), targets.to(device)
                    loss = torch.nn.functional.mse_loss(model(inputs), targets)
                    log.append(loss.item())
                    optimiser.zero_grad()
                    loss.backward()
                    optimiser.step()
                    # The backward pass still queued here is waited for in the next step's span.
                    log.append(time.perf_counter() - tick)
                    tick = time.perf_counter()
            """,
            name="chained-per-step-times-the-next-step-waits-for",
        ),
        Valid(
            """
            import time
            import torch
            device = "cuda" if torch.cuda.is_available() else "cpu"
            model = torch.nn.Linear(16, 4).to(device)
            x = torch.randn(8, 16, device=device)
            begin = time.perf_counter()
            out = model(x)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            took = time.perf_counter() - begin
            """,
            name="synchronised-where-there-is-a-gpu",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import time
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(64, 64).to(device)
            x = torch.randn(32, 64, device=device)
            start = time.perf_counter()
            y = model(x)
            elapsed = time.perf_counter() - start
            """,
            fixed="""
            import time
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(64, 64).to(device)
            x = torch.randn(32, 64, device=device)
            start = time.perf_counter()
            y = model(x)
            if torch.cuda.is_available(): torch.cuda.synchronize()
            elapsed = time.perf_counter() - start
            """,
            applicability=Applicability.SAFE,
            name="documented-forward-timed-without-waiting",
            in_docs=True,
        ),
        Invalid(
            """
            from time import time
            import torch
            def predict(model, batches):
                model = model.cuda()
                predictions = []
                t0 = time()
                for x in batches:
                    predictions.append(model(x.cuda()).argmax(1))
                print(f"inference took {time() - t0:.2f}s")
                return predictions
            """,
            fixed="""
            from time import time
            import torch
            def predict(model, batches):
                model = model.cuda()
                predictions = []
                t0 = time()
                for x in batches:
                    predictions.append(model(x.cuda()).argmax(1))
                if torch.cuda.is_available(): torch.cuda.synchronize()
                print(f"inference took {time() - t0:.2f}s")
                return predictions
            """,
            applicability=Applicability.SAFE,
            name="an-inference-loop-timed-in-a-function",
        ),
        Invalid(
            """
            import time
            import torch
            def evaluate(model, batches, device, greedy):
                spent = 0.0
                hits = 0
                for images, answers in batches:
                    images = images.to(device)
                    tick = time.time()
                    if greedy:
                        scores = model(images)
                        spent += time.time() - tick
                    else:
                        scores = model(images).softmax(-1)
                        spent += time.time() - tick
                    hits += (scores.argmax(-1).cpu() == answers).sum().item()
                return spent, hits
            """,
            fixed="""
            import time
            import torch
            def evaluate(model, batches, device, greedy):
                spent = 0.0
                hits = 0
                for images, answers in batches:
                    images = images.to(device)
                    tick = time.time()
                    if greedy:
                        scores = model(images)
                        if torch.cuda.is_available(): torch.cuda.synchronize()
                        spent += time.time() - tick
                    else:
                        scores = model(images).softmax(-1)
                        if torch.cuda.is_available(): torch.cuda.synchronize()
                        spent += time.time() - tick
                    hits += (scores.argmax(-1).cpu() == answers).sum().item()
                return spent, hits
            """,
            applicability=Applicability.SAFE,
            count=2,
            name="per-step-readings-before-the-step-waits",
        ),
    ]

    def setup(self) -> None:
        # Clock readings seen in the module's body and in each function being walked: a scope
        # with fewer than two measures nothing, and its flow need not be walked (keystrokes).
        self._readings: list[int] = [0]

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._readings.append(0)

    def visit_Call(self, node: cst.Call) -> None:
        if self.context.names.qualified_name(node.func, among=TIMERS) is not None:
            self._readings[-1] += 1

    def leave_Module(self, node: cst.Module) -> None:
        if self._readings[-1] >= 2:
            self._check_scope(node.body)

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        if self._readings.pop() >= 2 and isinstance(node.body, cst.IndentedBlock):
            self._check_scope(node.body.body)

    def _check_scope(self, body: Sequence[cst.BaseStatement]) -> None:
        for reading in unsynchronised_readings(body, self.context.flow, self.context.names):
            self.report(reading.call, fix=self._fix(reading.line))

    def _fix(self, statement: cst.SimpleStatementLine | None) -> PendingFix | None:
        torch = self.context.names.local_name_for("torch")
        if statement is None or torch is None:
            return None
        return self.make_fix(
            NodeEdit.insert_line_before(statement, f"if {torch}.cuda.is_available(): {torch}.cuda.synchronize()"),
            applicability=Applicability.SAFE)
