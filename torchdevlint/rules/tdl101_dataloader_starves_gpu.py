"""TDL101 dataloader-starves-gpu."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from torchdevlint.analysis.loader_flow import (
    DatasetSource,
    LoaderFlow,
    PinMemory,
)
from torchdevlint.diagnostics import Applicability
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.shared_fixes import pin_memory_fix

_BOTH = "DataLoader feeding the GPU loads batches in the main process (num_workers=0) into unpinned memory"
_PIN = "DataLoader feeding the GPU leaves pin_memory off; host-to-device copies cannot overlap compute"
_WORKERS = "DataLoader feeding the GPU loads batches in the main process (num_workers=0)"


@dataclass(frozen=True)
class StarvesOptions:
    # Also report loaders left at num_workers=0 (pin_memory is always checked).
    num_workers: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.num_workers, bool):
            raise ValueError("num-workers must be true or false")


class DataloaderStarvesGpu(Rule):
    """
    ## What it does
    Finds a `DataLoader` in a script that trains on a GPU (it calls `.backward()` and uses
    CUDA) whose batches a loop in the same file moves to the device with `.to(device)` or
    `.cuda()`, when the loader leaves `pin_memory` unset, or leaves `num_workers` unset (so
    at 0). The loop may be in another function than the loader: the flow model follows a
    loader through names, attributes (`self.train_loader`), helpers in the file that return
    it (alone or in a tuple), and parameters filled by the file's own calls
    (`train(model, train_loader)`, or `self.train_epoch(self.train_loader)` in a plain class).

    ## Why is this bad?
    With `num_workers=0` the training process itself reads, decodes and augments every
    batch while the GPU waits for it. Without pinned memory every host-to-device copy goes
    through a staging buffer and blocks the host, so `non_blocking=True` does nothing and
    the copy cannot overlap compute. The PyTorch performance tuning guide recommends
    `num_workers > 0` and `pin_memory=True` whenever a DataLoader feeds a GPU.

    Off by default: it is a performance hint, and most scripts it fires on (tutorials,
    small in-memory datasets) lose little. Enable it with `extend-select = ["TDL101"]`.

    ## Not reported
    Not reported: loaders given `**kwargs`, settings written out (`pin_memory=False`,
    `num_workers=0`, `num_workers=args.workers`: a choice, not an omission), files that pin
    tensors by hand (`.pin_memory()`, in the loop or a `collate_fn`; `pin_memory` is then not
    reported), and loaders whose batches are never seen moving to a device. A
    `TensorDataset` of CPU tensors is not reported for `num_workers` (slicing in-memory
    tensors is cheap in the main process), only for `pin_memory`.

    ## Fix safety
    The fix adds `pin_memory=True`; `num_workers` is left to you (workers need a picklable
    dataset, an `if __name__ == "__main__":` guard on spawn platforms, and memory). Pinning
    returns the same values, and on a machine without a GPU PyTorch only warns and skips
    it, so the fix is safe when the dataset is known to yield CPU tensors (a
    `torchvision.datasets` dataset, a `TensorDataset` of CPU tensors). It is unsafe for other
    datasets: one whose items are already on the GPU fails with "cannot pin
    'torch.cuda.FloatTensor'".

    ## Options
    - `num-workers` (default `true`): also report loaders left at `num_workers=0`; set it to
      `false` to check `pin_memory` only.
    """

    code = "TDL101"
    slug = "dataloader-starves-gpu"
    message = "DataLoader feeding the GPU loads batches in the main process or into unpinned memory"
    fix_title = "Pass pin_memory=True"
    # A performance hint, true of most tutorials and small in-memory datasets, where it
    # matters little: opt in with `extend-select = ["TDL101"]`.
    default_enabled = False
    requires_any_text = ("DataLoader",)
    Options = StarvesOptions
    options: StarvesOptions

    VALID = [
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            loader = DataLoader(dataset, batch_size=64, num_workers=4, pin_memory=True)
            for x, y in loader:
                x, y = x.cuda(), y.cuda()
                model(x).sum().backward()
            """,
            name="workers-and-pinned",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            kwargs = {"num_workers": 2, "pin_memory": True} if torch.cuda.is_available() else {}
            loader = DataLoader(dataset, batch_size=64, **kwargs)
            deliberate = DataLoader(dataset, num_workers=0, pin_memory=False)
            for x, y in loader:
                x = x.to("cuda")
                model(x).sum().backward()
            for x, y in deliberate:
                x = x.to("cuda")
                model(x).sum().backward()
            """,
            name="kwargs-or-written-out-settings",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            loader = DataLoader(dataset, batch_size=64)
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
            """,
            name="cpu-training-batches-never-moved",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            loader = DataLoader(dataset, batch_size=64)
            loader = accelerator.prepare(loader)
            for x, y in loader:
                x = x.to("cuda")
                accelerator.backward(model(x).sum())
            """,
            name="name-rebound-to-a-wrapper",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            def debug_loader(dataset):
                loader = DataLoader(dataset, batch_size=2)
                return next(iter(loader))
            def train(model, loader):
                for x, y in loader:
                    model(x.cuda()).sum().backward()
            """,
            name="parameter-with-no-caller-in-the-file",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            loader = DataLoader(train_set, batch_size=64, shuffle=True)
            for images, labels in loader:
                images, labels = images.to(device), labels.to(device)
                loss = criterion(model(images), labels)
                loss.backward()
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            loader = DataLoader(train_set, batch_size=64, shuffle=True, pin_memory=True)
            for images, labels in loader:
                images, labels = images.to(device), labels.to(device)
                loss = criterion(model(images), labels)
                loss.backward()
            """,
            applicability=Applicability.UNSAFE,
            name="documented-training-loop-loader",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            import torchvision
            from torch.utils.data import DataLoader
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            train_set = torchvision.datasets.MNIST("data", train=True, download=True)
            train_loader = DataLoader(train_set, batch_size=64, shuffle=True)

            def train(model, loader, optimizer):
                for images, labels in loader:
                    images, labels = images.to(device), labels.to(device)
                    loss = torch.nn.functional.cross_entropy(model(images), labels)
                    loss.backward()

            train(model, train_loader, optimizer)
            """,
            fixed="""
            import torch
            import torchvision
            from torch.utils.data import DataLoader
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            train_set = torchvision.datasets.MNIST("data", train=True, download=True)
            train_loader = DataLoader(train_set, batch_size=64, shuffle=True, pin_memory=True)

            def train(model, loader, optimizer):
                for images, labels in loader:
                    images, labels = images.to(device), labels.to(device)
                    loss = torch.nn.functional.cross_entropy(model(images), labels)
                    loss.backward()

            train(model, train_loader, optimizer)
            """,
            applicability=Applicability.SAFE,
            name="torchvision-dataset-passed-to-the-training-function",
        ),
        Invalid(
            """
            import torch
            import torch.utils.data as Data
            class Trainer:
                def __init__(self, dataset):
                    self.loader = Data.DataLoader(dataset, batch_size=32, num_workers=8)
                def fit(self, model):
                    for step, batch in enumerate(self.loader):
                        batch = {k: v.cuda() for k, v in batch.items()}
                        model(**batch).loss.backward()
            """,
            fixed="""
            import torch
            import torch.utils.data as Data
            class Trainer:
                def __init__(self, dataset):
                    self.loader = Data.DataLoader(dataset, batch_size=32, num_workers=8, pin_memory=True)
                def fit(self, model):
                    for step, batch in enumerate(self.loader):
                        batch = {k: v.cuda() for k, v in batch.items()}
                        model(**batch).loss.backward()
            """,
            applicability=Applicability.UNSAFE,
            name="custom-dataset-attribute-loader",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader
            def make_loader(dataset):
                return DataLoader(dataset, batch_size=32, pin_memory=True)
            loader = make_loader(dataset)
            for x, y in loader:
                x = x.to("cuda", non_blocking=True)
                model(x).sum().backward()
            """,
            name="workers-left-at-zero-has-no-fix",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader
            from torchvision import datasets, transforms

            def get_loaders(root):
                train_set = datasets.MNIST(root, train=True, transform=transforms.ToTensor())
                test_set = datasets.MNIST(root, train=False, transform=transforms.ToTensor())
                return DataLoader(train_set, batch_size=64, num_workers=4), DataLoader(test_set, num_workers=4)

            class Trainer:
                def __init__(self, model, root):
                    self.model = model.cuda()
                    self.train_loader, self.test_loader = get_loaders(root)
                    self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

                def train_epoch(self, loader):
                    for images, labels in loader:
                        images, labels = images.cuda(), labels.cuda()
                        torch.nn.functional.cross_entropy(self.model(images), labels).backward()
                        self.optimizer.step()

                def fit(self, epochs):
                    for _ in range(epochs):
                        self.train_epoch(self.train_loader)
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader
            from torchvision import datasets, transforms

            def get_loaders(root):
                train_set = datasets.MNIST(root, train=True, transform=transforms.ToTensor())
                test_set = datasets.MNIST(root, train=False, transform=transforms.ToTensor())
                return DataLoader(train_set, batch_size=64, num_workers=4, pin_memory=True), DataLoader(test_set, num_workers=4)

            class Trainer:
                def __init__(self, model, root):
                    self.model = model.cuda()
                    self.train_loader, self.test_loader = get_loaders(root)
                    self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

                def train_epoch(self, loader):
                    for images, labels in loader:
                        images, labels = images.cuda(), labels.cuda()
                        torch.nn.functional.cross_entropy(self.model(images), labels).backward()
                        self.optimizer.step()

                def fit(self, epochs):
                    for _ in range(epochs):
                        self.train_epoch(self.train_loader)
            """,
            applicability=Applicability.SAFE,
            name="loaders-returned-together-iterated-by-a-method-the-class-calls",
        ),
    ]

    def setup(self) -> None:
        self._flow = self.context.shared(LoaderFlow)

    def leave_Module(self, node: cst.Module) -> None:
        flow = self._flow
        if not (flow.mentions_cuda and flow.trains):
            return
        seen: set[int] = set()
        for _, loaders in flow.feeding_loops():
            for loader in loaders:
                if id(loader.call) in seen or loader.splat:
                    continue
                seen.add(id(loader.call))
                missing_pin = loader.pin_memory is PinMemory.ABSENT and not flow.pins_anywhere
                missing_workers = (
                    self.options.num_workers
                    and not loader.num_workers_given
                    and loader.dataset is not DatasetSource.HOST_TENSORS
                )
                if missing_pin and missing_workers:
                    self.report(loader.call, message=_BOTH, fix=pin_memory_fix(self, loader))
                elif missing_pin:
                    self.report(loader.call, message=_PIN, fix=pin_memory_fix(self, loader))
                elif missing_workers:
                    self.report(loader.call, message=_WORKERS)

