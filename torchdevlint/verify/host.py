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
def cpu_only_build() -> Iterator[None]:
    """`torch.accelerator.current_accelerator()` answers as a CPU-only build does: None.

    A CUDA build whose GPUs are hidden still names `cuda` there (the build's accelerator,
    whether or not a device is present), so without this the CPU host would be a machine with
    a CUDA build and no GPU, not the CPU-only build that TDL015 is about.
    """
    accelerator = getattr(torch, "accelerator", None)
    original = getattr(accelerator, "current_accelerator", None)
    if accelerator is None or original is None:
        yield
        return

    available = accelerator.is_available()  # asked once: it calls current_accelerator itself

    def current_accelerator(check_available: bool = False) -> torch.device | None:
        return original(check_available) if available else None

    accelerator.current_accelerator = current_accelerator
    try:
        yield
    finally:
        accelerator.current_accelerator = original


@contextmanager
def host(kind: RunHost, gpus: int) -> Iterator[None]:
    if kind is RunHost.EMULATED:
        # Deferred: the emulation is built only where it is used.
        from torchdevlint.verify.emulation import emulated_gpu

        with emulated_gpu(gpus):
            yield
    elif kind is RunHost.EMULATED_MPS:
        from torchdevlint.verify.mps import emulated_mps

        with emulated_mps():
            yield
    elif kind is RunHost.CPU_LOADS_GPU_CHECKPOINT:
        with gpu_trained_checkpoints():
            yield
    elif kind is RunHost.CUDA:
        # The machine as it is, plus the emulation's read-before-sync check: on a real GPU a
        # non_blocking copy to the CPU read too early returns stale values only now and then,
        # never an error, so TDL013 would be proven by luck. The check makes it deterministic.
        from torchdevlint.verify.race import host_copy_race_check

        with host_copy_race_check("CUDA"):
            yield
    else:
        # The CPU is the machine as it is (the parent hides GPUs from a CPU run), with a
        # CPU-only build's answers.
        with cpu_only_build():
            yield
