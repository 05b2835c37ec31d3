"""The machine a verify child pretends to be, set up around the program's run.

Imported only inside a verify child process: it imports torch.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch.serialization import STORAGE

from torchdevlint.verify.protocol import RunHost

_GPU_CHECKPOINT_PRIORITY = 1  # ahead of the CPU's own tag (10)


class HostState:
    """What the report needs to know about the host after the run."""

    def __init__(self) -> None:
        self._placeholder_reads: list[str] | None = None

    @property
    def placeholder_reads(self) -> tuple[str, ...]:
        return tuple(self._placeholder_reads or ())


@contextmanager
def gpu_trained_checkpoints() -> Iterator[None]:
    """Every storage `torch.save` writes from the CPU is tagged `cuda:0`, its data kept.

    That is a checkpoint as a GPU box writes it. A location tagger runs only inside
    `torch.save`, so registering it for the run affects nothing else; the machine still has no
    GPU (`torch.cuda.is_available()` is False), so loading such a checkpoint without
    `map_location` raises PyTorch's own "Attempting to deserialize object on a CUDA device".
    """

    def tag(storage: STORAGE) -> str | None:
        return "cuda:0" if storage.device.type == "cpu" else None

    def restore(storage: STORAGE, location: str) -> STORAGE | None:
        return None  # loading is left to PyTorch's own deserializers

    entry = (_GPU_CHECKPOINT_PRIORITY, tag, restore)
    torch.serialization.register_package(_GPU_CHECKPOINT_PRIORITY, tag, restore)
    try:
        yield
    finally:
        torch.serialization._package_registry.remove(entry)


@contextmanager
def host(kind: RunHost, gpus: int) -> Iterator[HostState]:
    state = HostState()
    if kind is RunHost.EMULATED:
        # Deferred: the emulation is built only where it is used.
        from torchdevlint.verify.emulation import emulated_gpu

        with emulated_gpu(gpus) as mode:
            state._placeholder_reads = mode.placeholder_reads
            yield state
    elif kind is RunHost.CPU_LOADS_GPU_CHECKPOINT:
        with gpu_trained_checkpoints():
            yield state
    elif kind is RunHost.CUDA:
        # The machine as it is, plus the emulation's read-before-sync check: on a real GPU a
        # non_blocking copy to the CPU read too early returns stale values only now and then,
        # never an error, so TDL013 would be proven by luck. The check makes it deterministic.
        from torchdevlint.verify.emulation import host_copy_race_check

        with host_copy_race_check(on_cuda=True):
            yield state
    else:
        # The CPU is the machine as it is (the parent hides GPUs from a CPU run).
        yield state
