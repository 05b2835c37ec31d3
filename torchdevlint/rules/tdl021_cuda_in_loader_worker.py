"""TDL021 cuda-in-loader-worker."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.loader_workers import LoaderWorkers, WorkerLoader
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import CUDA_IN_FORKED_WORKER, RuntimeProof


class CudaInLoaderWorker(Rule):
    """
    ## What it does
    Finds a dataset's `__getitem__` (or `__iter__`) or a loader's `collate_fn` that moves
    data to CUDA (`.cuda()`, `.to(device)`, `torch.tensor(..., device=device)`), where a
    `DataLoader` in the same file runs it in worker processes: `num_workers` is a number
    above 0, a name bound to one, an option whose default is one, or `os.cpu_count()`.
    Which dataset and which collate function a loader gets is followed through names.

    ## Why is this bad?
    With `num_workers > 0` the loader forks its workers, and by then the training process
    has usually initialised CUDA (the model is on the GPU). CUDA cannot start again in a
    forked process: the first batch fails with "Cannot re-initialize CUDA in forked
    subprocess. To use CUDA with multiprocessing, you must use the 'spawn' start method".
    With `num_workers=0`, on a CPU-only machine, or with CUDA not yet initialised, the same
    code runs, so the bug shows only on the training machine. Even under `spawn`, each
    worker then holds a CUDA context of its own and hands CUDA tensors between processes,
    which the DataLoader documentation advises against: move batches in the training loop.

    ## Not reported
    Not reported: loaders with `num_workers=0` or a setting this file cannot read,
    a `multiprocessing_context` other than `"fork"`, programs that set the `spawn` or
    `forkserver` start method, and moves to the CPU.

    ## Fix safety
    Unsafe. The fix sets the loader's `num_workers` to `0`, so the dataset runs in the
    training process, where CUDA works; loading is then no longer parallel. The better
    change, moving each batch to the device in the training loop and keeping the workers,
    is a rewrite of the dataset this fix does not attempt.

    ## Options
    None.
    """

    code = "TDL021"
    slug = "cuda-in-loader-worker"
    message = "CUDA in a DataLoader worker fails: the loader forks its workers after CUDA has started"
    fix_title = "Load in the main process (`num_workers=0`)"
    proof = RuntimeProof(CUDA_IN_FORKED_WORKER)
    requires_any_text = ("DataLoader",)
    requires_also_any_text = ("cuda", "device")

    VALID = [
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader, Dataset
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            class Windows(Dataset):
                def __init__(self, series):
                    self.series = series
                def __len__(self):
                    return len(self.series) - 8
                def __getitem__(self, i):
                    return torch.tensor(self.series[i:i + 8], dtype=torch.float32)
            loader = DataLoader(Windows(list(range(100))), batch_size=4, num_workers=4)
            for batch in loader:
                batch = batch.to(device)
            """,
            name="batches-moved-in-the-training-loop",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader, Dataset
            class OnDevice(Dataset):
                def __init__(self, data, device):
                    self.data, self.device = data, device
                def __len__(self):
                    return len(self.data)
                def __getitem__(self, i):
                    return self.data[i].to(self.device)
            data = torch.randn(64, 3)
            main_process = DataLoader(OnDevice(data, "cuda"), batch_size=8)
            fresh = DataLoader(OnDevice(data, "cuda"), batch_size=8, num_workers=2, multiprocessing_context="spawn")
            """,
            name="no-workers-and-a-spawned-context",
        ),
        Valid(
            """
            import torch
            import torch.multiprocessing as mp
            from torch.utils.data import DataLoader
            def to_gpu(batch):
                return torch.stack(batch).cuda()
            if __name__ == "__main__":
                mp.set_start_method("spawn")
                loader = DataLoader([torch.ones(2)] * 8, batch_size=4, num_workers=2, collate_fn=to_gpu)
            """,
            name="the-spawn-start-method",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader, Dataset
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            class Windows(Dataset):
                def __init__(self, series):
                    self.series = series
                def __len__(self):
                    return len(self.series) - 8
                def __getitem__(self, i):
                    return torch.tensor(self.series[i:i + 8], dtype=torch.float32).to(device)
            loader = DataLoader(Windows(list(range(100))), batch_size=4, num_workers=4)
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader, Dataset
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            class Windows(Dataset):
                def __init__(self, series):
                    self.series = series
                def __len__(self):
                    return len(self.series) - 8
                def __getitem__(self, i):
                    return torch.tensor(self.series[i:i + 8], dtype=torch.float32).to(device)
            loader = DataLoader(Windows(list(range(100))), batch_size=4, num_workers=0)
            """,
            applicability=Applicability.UNSAFE,
            name="dataset-moves-each-item",
            in_docs=True,
        ),
        Invalid(
            """
            import argparse
            import torch
            from torch.utils.data import DataLoader
            parser = argparse.ArgumentParser()
            parser.add_argument("--workers", type=int, default=8)
            args = parser.parse_args()
            def pad_to_gpu(batch):
                lengths = torch.tensor([len(x) for x in batch], device="cuda")
                padded = torch.nn.utils.rnn.pad_sequence(batch, batch_first=True)
                return padded.cuda(non_blocking=True), lengths
            sequences = [torch.ones(n) for n in range(1, 9)]
            loader = DataLoader(sequences, batch_size=4, collate_fn=pad_to_gpu, num_workers=args.workers)
            """,
            fixed="""
            import argparse
            import torch
            from torch.utils.data import DataLoader
            parser = argparse.ArgumentParser()
            parser.add_argument("--workers", type=int, default=8)
            args = parser.parse_args()
            def pad_to_gpu(batch):
                lengths = torch.tensor([len(x) for x in batch], device="cuda")
                padded = torch.nn.utils.rnn.pad_sequence(batch, batch_first=True)
                return padded.cuda(non_blocking=True), lengths
            sequences = [torch.ones(n) for n in range(1, 9)]
            loader = DataLoader(sequences, batch_size=4, collate_fn=pad_to_gpu, num_workers=0)
            """,
            applicability=Applicability.UNSAFE,
            count=2,
            name="collate-function-and-a-workers-option",
        ),
    ]

    def setup(self) -> None:
        self._workers = self.context.shared(LoaderWorkers)

    def leave_Module(self, node: cst.Module) -> None:
        fixed: set[int] = set()
        for move in self._workers.worker_moves():
            fix = None
            if not any(id(loader.call) in fixed for loader in move.loaders):
                fix = self._fix(move.loaders)
                fixed.update(id(loader.call) for loader in move.loaders)
            self.report(move.node, fix=fix)

    def _fix(self, loaders: tuple[WorkerLoader, ...]) -> PendingFix | None:
        if any(loader.num_workers.keyword is None for loader in loaders):
            return None  # a positional setting: rewrite by hand
        edits = [NodeEdit(loader.num_workers.value, "0") for loader in {id(loader.call): loader for loader in loaders}.values()]
        return self.make_fix(*edits, applicability=Applicability.UNSAFE)
