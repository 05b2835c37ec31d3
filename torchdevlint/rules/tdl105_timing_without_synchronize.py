"""TDL105 timing-without-synchronize."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from torchdevlint.analysis.timing import is_reading, unsynchronised_readings
from torchdevlint.analysis.tree import definitions_by_id
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid


class TimingWithoutSynchronize(Rule):
    """
    ## What it does
    Finds a measurement with the wall clock (`time.time()`, `time.perf_counter()`,
    `time.monotonic()`, `timeit.default_timer()` subtracted from, or bound to a name a later
    statement subtracts from; or a stopwatch's `timer.tic()` ... `timer.toc()`, the `Timer`
    class detection code bases share) that follows, on some path from an earlier reading, work the
    flow model shows on an accelerator (a model on the GPU called, device tensors computed,
    `loss.backward()`) with nothing in between that waits for it: no
    `torch.cuda.synchronize()` (or `torch.accelerator.synchronize()`), no CUDA event, no
    transfer to the host (`.item()`, `.cpu()`, printing a tensor, a blocking copy of host data
    to the device, a result whose size the host needs: `nonzero`, `nms`), here or in what the
    measured code calls (a model's `forward`, a function of the file). The paths go into `if`,
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
    long span; but a span started inside its step and read after it (`start = time.time()`
    each step, `time.time() - start` once the loop is done, as a loop over devices that
    trains each a few steps does) holds the last step's queued work, and is reported. A loop
    whose own step trains is a training loop; one holding a training loop is not.
    Per-step readings inside a training loop that never waits come out right on average,
    since each step queues as long as the GPU takes to run one. A loop that waits every step (`loss.item()`) empties
    the queue, so there a per-step reading is right only where the wait is inside its span.
    A helper of the file that returns Python numbers (`loss, acc = evaluate(...)`) has
    waited for its work; one that returns nothing (`remember(y)`) has not, unless its own
    body waits. A blocking copy of host data to the device (`.to(device)` or
    `.cuda()` without `non_blocking=True`, `torch.tensor(data, device=...)`) waits for the
    work queued before it, since PyTorch synchronises the stream after such a copy: so does
    one inside the `forward` of a model of the same file (a detector's grid), or in a
    function of the file the measured code calls, and so does a result whose size the host
    needs (`nonzero`, `unique`, `masked_select`, torchvision's `nms`). The copy of the input
    before the model runs waits for nothing the model does: the order of the calls counts.
    A model or helper of another file is not looked into. Work on data that only one side of
    a device test puts on the GPU (`if args.cuda: x = x.cuda()`) counts only where a model or
    function of this file does it; a model of another file called on such data does not,
    because the models timed that way (detectors, most of them) wait inside more often than
    not. Such a measurement is missed.

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
    requires_any_text = ("time(", "perf_counter", "monotonic", "default_timer", "time_ns", "clock(", "toc(")

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
        Valid(
            """
            import time
            import numpy as np
            import torch
            from torch import nn

            class GridHead(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.conv = nn.Conv2d(3, 8, 3)

                def forward(self, images):
                    features = self.conv(images)
                    offsets = torch.from_numpy(np.arange(8, dtype=np.float32)).to(images.device)
                    return features + offsets.view(1, 8, 1, 1)

            def keep_positive(scores):
                return scores.flatten().nonzero()

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            head = GridHead().to(device)
            batch = torch.randn(4, 3, 32, 32)
            start = time.perf_counter()
            scores = head(batch.to(device))
            print(f"forward {time.perf_counter() - start:.4f} s")
            start = time.perf_counter()
            scores = head(batch.to(device))
            kept = keep_positive(scores)
            print(f"with selection {time.perf_counter() - start:.4f} s")
            start = time.perf_counter()
            scores = head(batch.to(device))
            scale = torch.tensor([0.5, 2.0]).to(device)
            print(f"with a copy after {time.perf_counter() - start:.4f} s")
            """,
            name="the-model-copies-host-data-or-reads-a-size-after-its-work",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import time
            import torch
            from torch import nn

            class Sharpen(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.body = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 3, 3, padding=1))

                def forward(self, image):
                    return image + self.body(image)

            use_gpu = torch.cuda.is_available()
            sharpen = Sharpen()
            photo = torch.rand(1, 3, 128, 128)
            if use_gpu:
                sharpen = sharpen.cuda()
                photo = photo.cuda()
            began = time.perf_counter()
            result = sharpen(photo)
            print(f"sharpened in {time.perf_counter() - began:.4f} s")
            """,
            fixed="""
            import time
            import torch
            from torch import nn

            class Sharpen(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.body = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 3, 3, padding=1))

                def forward(self, image):
                    return image + self.body(image)

            use_gpu = torch.cuda.is_available()
            sharpen = Sharpen()
            photo = torch.rand(1, 3, 128, 128)
            if use_gpu:
                sharpen = sharpen.cuda()
                photo = photo.cuda()
            began = time.perf_counter()
            result = sharpen(photo)
            if torch.cuda.is_available(): torch.cuda.synchronize()
            print(f"sharpened in {time.perf_counter() - began:.4f} s")
            """,
            applicability=Applicability.SAFE,
            name="a-model-of-the-file-on-data-moved-under-a-gpu-test",
        ),
        Invalid(
            """
            import time
            import torch
            from torch import nn

            class Stopwatch:
                def __init__(self):
                    self.began = 0.0

                def tic(self):
                    self.began = time.perf_counter()

                def toc(self, average=False):
                    return time.perf_counter() - self.began

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            segmenter = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 4, 1)).to(device)
            clocks = {"net": Stopwatch(), "post": Stopwatch()}
            for frame in torch.rand(8, 1, 3, 96, 96):
                clocks["net"].tic()
                labels = segmenter(frame.to(device)).argmax(1)
                net_time = clocks["net"].toc(average=False)
                clocks["post"].tic()
                share = (labels == 0).float().mean().item()
                post_time = clocks["post"].toc(average=False)
            """,
            fixed="""
            import time
            import torch
            from torch import nn

            class Stopwatch:
                def __init__(self):
                    self.began = 0.0

                def tic(self):
                    self.began = time.perf_counter()

                def toc(self, average=False):
                    return time.perf_counter() - self.began

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            segmenter = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 4, 1)).to(device)
            clocks = {"net": Stopwatch(), "post": Stopwatch()}
            for frame in torch.rand(8, 1, 3, 96, 96):
                clocks["net"].tic()
                labels = segmenter(frame.to(device)).argmax(1)
                if torch.cuda.is_available(): torch.cuda.synchronize()
                net_time = clocks["net"].toc(average=False)
                clocks["post"].tic()
                share = (labels == 0).float().mean().item()
                post_time = clocks["post"].toc(average=False)
            """,
            applicability=Applicability.SAFE,
            name="a-stopwatch-around-the-forward-pass",
        ),
        Invalid(
            """
            import time
            import torch
            from models import Upscaler
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            net = Upscaler().to(device)
            low = torch.rand(1, 3, 64, 64).to(device)
            begin = time.clock()
            high = net(low)
            print("upscaled in", time.clock() - begin)
            """,
            fixed="""
            import time
            import torch
            from models import Upscaler
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            net = Upscaler().to(device)
            low = torch.rand(1, 3, 64, 64).to(device)
            begin = time.clock()
            high = net(low)
            if torch.cuda.is_available(): torch.cuda.synchronize()
            print("upscaled in", time.clock() - begin)
            """,
            applicability=Applicability.SAFE,
            name="python-2-clock",
        ),
        Invalid(
            """
            import time
            import torch
            from torch import nn

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            encoder = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64)).to(device)
            tokens = torch.randn(16, 64)
            start = time.perf_counter()
            codes = encoder(tokens.to(device))
            lengths = torch.tensor([16] * 16).to(device, non_blocking=True)
            print(f"encode {time.perf_counter() - start:.4f} s")
            """,
            fixed="""
            import time
            import torch
            from torch import nn

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            encoder = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64)).to(device)
            tokens = torch.randn(16, 64)
            start = time.perf_counter()
            codes = encoder(tokens.to(device))
            lengths = torch.tensor([16] * 16).to(device, non_blocking=True)
            if torch.cuda.is_available(): torch.cuda.synchronize()
            print(f"encode {time.perf_counter() - start:.4f} s")
            """,
            applicability=Applicability.SAFE,
            name="the-input-copied-before-the-work-and-an-asynchronous-copy-after",
        ),
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
        Invalid(
            """
            import time
            import torch
            from torch import nn
            model = nn.Linear(64, 10)
            loss_fn = nn.CrossEntropyLoss()
            for device in ["cpu", "cuda"]:
                model.to(device)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for step in range(4):
                    x = torch.randn(32, 64, device=device)
                    y = torch.randint(0, 10, (32,), device=device)
                    start = time.time()
                    loss = loss_fn(model(x), y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                print(device, (time.time() - start) / 4)
            """,
            fixed="""
            import time
            import torch
            from torch import nn
            model = nn.Linear(64, 10)
            loss_fn = nn.CrossEntropyLoss()
            for device in ["cpu", "cuda"]:
                model.to(device)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for step in range(4):
                    x = torch.randn(32, 64, device=device)
                    y = torch.randint(0, 10, (32,), device=device)
                    start = time.time()
                    loss = loss_fn(model(x), y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                if torch.cuda.is_available(): torch.cuda.synchronize()
                print(device, (time.time() - start) / 4)
            """,
            applicability=Applicability.SAFE,
            name="the-last-training-step-read-after-its-loop",
        ),
    ]

    def setup(self) -> None:
        # Clock readings seen in the module's body and in each function being walked: a scope
        # with fewer than two measures nothing, and its flow need not be walked (keystrokes).
        self._readings: list[int] = [0]
        self._definitions_by_id: dict[int, cst.FunctionDef | cst.ClassDef] | None = None

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._readings.append(0)

    def visit_Call(self, node: cst.Call) -> None:
        if is_reading(node, self.context.names):
            self._readings[-1] += 1

    def leave_Module(self, node: cst.Module) -> None:
        if self._readings[-1] >= 2:
            self._check_scope(node.body)

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        if self._readings.pop() >= 2 and isinstance(node.body, cst.IndentedBlock):
            self._check_scope(node.body.body)

    def _check_scope(self, body: Sequence[cst.BaseStatement]) -> None:
        for reading in unsynchronised_readings(body, self.context.flow, self.context.names, self._definitions):
            self.report(reading.call, fix=self._fix(reading.line))

    def _definitions(self) -> dict[int, cst.FunctionDef | cst.ClassDef]:
        """The module's functions and classes by node id (the flow names them so), read once."""
        if self._definitions_by_id is None:
            self._definitions_by_id = definitions_by_id(self.context.module)
        return self._definitions_by_id

    def _fix(self, statement: cst.SimpleStatementLine | None) -> PendingFix | None:
        torch = self.context.names.local_name_for("torch")
        if statement is None or torch is None:
            return None
        return self.make_fix(
            NodeEdit.insert_line_before(statement, f"if {torch}.cuda.is_available(): {torch}.cuda.synchronize()"),
            applicability=Applicability.SAFE)
