"""The machine a verify child pretends to be, set up around the program's run.

Imported only inside a verify child process: it imports torch.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.serialization import STORAGE

from torchdevlint.verify.protocol import RunHost

_GPU_CHECKPOINT_PRIORITY = 1  # ahead of the CPU's own tag (10)


@contextmanager
def gpu_trained_checkpoints() -> Iterator[None]:
    """A checkpoint file this run did not write loads as one a GPU box wrote: its storages
    tagged `cuda:0`, its data kept. One the run wrote itself loads as written: the machine
    that saved it is the one loading it, and no machine fails there.

    On the CPU-only host (`torch.cuda.is_available()` is False) loading such a checkpoint
    without `map_location` raises PyTorch's own "Attempting to deserialize object on a CUDA
    device"; on a GPU host it loads onto the GPU, as there. The file is read once as it is,
    written again with the GPU's tags into memory, and that copy goes to `torch.load` with the
    program's own arguments.
    """
    original_save, original_load = torch.save, torch.load
    written: set[str] = set()

    def save(obj: object, f: Any, *args: Any, **kwargs: Any) -> None:
        if isinstance(f, (str, os.PathLike)):
            written.add(os.path.realpath(f))
        original_save(obj, f, *args, **kwargs)

    def load(f: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(f, (str, os.PathLike)) and os.path.realpath(f) not in written and os.path.isfile(f):
            f = _as_saved_on_a_gpu(f, original_save, original_load, kwargs.get("weights_only"))
        return original_load(f, *args, **kwargs)

    torch.save, torch.load = save, load
    try:
        yield
    finally:
        torch.save, torch.load = original_save, original_load


def _as_saved_on_a_gpu(path: str | os.PathLike[str], save: Callable[..., None], load: Callable[..., Any],
                       weights_only: bool | None) -> io.BytesIO:
    """The checkpoint at `path`, saved again as a GPU box saves it."""
    contents = load(path, map_location="cpu", weights_only=weights_only)

    def tag(storage: STORAGE) -> str | None:
        return "cuda:0" if storage.device.type == "cpu" else None

    def restore(storage: STORAGE, location: str) -> STORAGE | None:
        return None  # loading is left to PyTorch's own deserializers

    entry = (_GPU_CHECKPOINT_PRIORITY, tag, restore)
    torch.serialization.register_package(_GPU_CHECKPOINT_PRIORITY, tag, restore)
    buffer = io.BytesIO()
    try:
        save(contents, buffer)
    finally:
        torch.serialization._package_registry.remove(entry)
    buffer.seek(0)
    return buffer


@contextmanager
def cpu_only_build() -> Iterator[None]:
    """`torch.accelerator.current_accelerator()` answers as a CPU-only build does: None.

    A CUDA build whose GPUs are hidden still names `cuda` there (the build's accelerator,
    whether or not a device is present), so without this the CPU host would be a machine with
    a CUDA build and no GPU, not the CPU-only build that TDL015 is about.
    """
    with _cuda_not_compiled():
        accelerator = getattr(torch, "accelerator", None)
        original = getattr(accelerator, "current_accelerator", None)
        if accelerator is None or original is None:
            yield
            return
        with _no_current_accelerator(accelerator, original):
            yield


@contextmanager
def _cuda_not_compiled() -> Iterator[None]:
    """Using CUDA fails as on a CPU-only build: "AssertionError: Torch not compiled with CUDA enabled".

    A CUDA build with its GPUs hidden raises RuntimeError ("No CUDA GPUs are available")
    instead, which `except RuntimeError` fallbacks catch (TDL025). PyTorch's C++ side starts
    CUDA through `torch.cuda._lazy_init`, so replacing it covers `.to("cuda")` and factories too.
    """
    cuda = torch.cuda
    original = getattr(cuda, "_lazy_init", None)
    if torch.version.cuda is None or original is None or cuda.is_initialized():  # type: ignore[no-untyped-call]
        yield  # a CPU-only build already answers so
        return

    def _lazy_init() -> None:
        raise AssertionError("Torch not compiled with CUDA enabled")

    cuda._lazy_init = _lazy_init
    try:
        yield
    finally:
        cuda._lazy_init = original


@contextmanager
def _no_current_accelerator(accelerator: Any, original: Callable[..., Any]) -> Iterator[None]:
    available = accelerator.is_available()  # asked once: it calls current_accelerator itself

    def current_accelerator(check_available: bool = False) -> torch.device | None:
        return original(check_available) if available else None

    accelerator.current_accelerator = current_accelerator
    try:
        yield
    finally:
        accelerator.current_accelerator = original


@contextmanager
def _rendezvous_on_the_run_port() -> Iterator[None]:
    """A process group meets its ranks on the run's own port (`verify.distributed`)."""
    if not torch.distributed.is_available():
        yield
        return
    from torchdevlint.verify.distributed import patch_rendezvous
    from torchdevlint.verify.race import Patches

    patches = Patches()
    patch_rendezvous(patches)
    try:
        yield
    finally:
        patches.undo()


@contextmanager
def host(kind: RunHost, gpus: int) -> Iterator[None]:
    if kind not in (RunHost.EMULATED, RunHost.EMULATED_LOADS_GPU_CHECKPOINT):
        # The emulated GPU's own process groups meet there too.
        with _rendezvous_on_the_run_port(), _host(kind, gpus):
            yield
        return
    with _host(kind, gpus):
        yield


@contextmanager
def _host(kind: RunHost, gpus: int) -> Iterator[None]:
    if kind in (RunHost.EMULATED, RunHost.EMULATED_LOADS_GPU_CHECKPOINT):
        # Deferred: the emulation is built only where it is used.
        from torchdevlint.verify.emulation import emulated_gpu

        with emulated_gpu(gpus):
            if kind is RunHost.EMULATED:
                yield
                return
            with gpu_trained_checkpoints():
                yield
    elif kind is RunHost.EMULATED_MPS:
        from torchdevlint.verify.mps import emulated_mps

        with emulated_mps():
            yield
    elif kind is RunHost.CPU_LOADS_GPU_CHECKPOINT:
        with gpu_trained_checkpoints():
            yield
    elif kind in (RunHost.CUDA, RunHost.CUDA_LOADS_GPU_CHECKPOINT):
        # The machine as it is, plus the emulation's read-before-sync check: on a real GPU a
        # non_blocking copy to the CPU read too early returns stale values only now and then,
        # never an error, so TDL013 would be proven by luck. The check makes it deterministic.
        from torchdevlint.verify.race import host_copy_race_check

        with host_copy_race_check("CUDA"):
            if kind is RunHost.CUDA:
                yield
                return
            with gpu_trained_checkpoints():
                yield
    else:
        # The CPU is the machine as it is (the parent hides GPUs from a CPU run), with a
        # CPU-only build's answers.
        with cpu_only_build():
            yield
