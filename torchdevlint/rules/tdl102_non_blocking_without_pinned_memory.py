"""TDL102 non-blocking-without-pinned-memory."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.loader_flow import LoaderFlow, PinMemory
from torchdevlint.diagnostics import Applicability
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.shared_fixes import pin_memory_fix


class NonBlockingWithoutPinnedMemory(Rule):
    """
    ## What it does
    Finds `.to(device, non_blocking=True)` or `.cuda(non_blocking=True)` on an item of a
    batch from a `DataLoader` that does not pin memory (`pin_memory` unset or `False`), in a
    file that pins nothing by hand (`.pin_memory()`). The loader is found as for TDL101: by
    the name or attribute it is bound to, in any function of the file. The usual case is a
    training loop written with `non_blocking=True` on every batch move, fed by a loader
    built with `DataLoader(train_set, batch_size=64, num_workers=4)` and nothing more.

    The read-before-sync race this rule used to report as well (a non-blocking copy to the
    CPU read before anything synchronises) is a correctness bug and is now TDL013
    (`non-blocking-cpu-copy-read-early`).

    ## Why is this bad?
    A host-to-device copy is asynchronous only from pinned (page-locked) memory. From
    ordinary memory PyTorch stages the data and the host waits: "If `True` and the source is
    in pinned memory, the copy will be asynchronous with respect to the host. Otherwise, the
    argument has no effect." The loop pays for the copy and gets no overlap.

    ## Fix safety
    The fix adds `pin_memory=True` to the loader; as for TDL101 it is safe when the dataset
    is known to yield CPU tensors (a `torchvision.datasets` dataset, a `TensorDataset` of CPU
    tensors) and unsafe otherwise (a dataset that returns GPU tensors cannot be pinned). A
    loader with `pin_memory=False` written out is reported without a fix.

    ## Options
    None.
    """

    code = "TDL102"
    slug = "non-blocking-without-pinned-memory"
    message = "non_blocking=True has no effect: the batch comes from a DataLoader without pin_memory=True"
    fix_title = "Pass pin_memory=True"
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
            from torch.utils.data import DataLoader
            loader = DataLoader(dataset, batch_size=64, pin_memory=True)
            for x, y in loader:
                logits = model(x.to("cuda", non_blocking=True))
                preds = logits.argmax(-1).to("cpu", non_blocking=True)
                print(preds.tolist())
            """,
            name="copy-to-the-cpu-read-early-is-tdl013",
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
            in_docs=True,
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
    ]

    def setup(self) -> None:
        self._flow = self.context.shared(LoaderFlow)

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
                    self.report(move.call, fix=fix)
