"""The emulated Apple GPU (`host=mps`): `mps` tensors computed on the CPU, with MPS's dtype rule.

Imported only inside a verify child process: it imports torch.

`torch.backends.mps.is_available()` says True, so a program takes its `mps` path; every `mps`
device it names (`"mps"`, `torch.device("mps")`, `.to("mps")`) becomes the CPU, and the
tensors made or moved there are remembered. What MPS rejects that the CPU accepts is raised
as MPS raises it: a float64 tensor there ("Cannot convert a MPS Tensor to float64 dtype as
the MPS framework doesn't support float64"). Devices are not compared: a CPU tensor meeting
an emulated `mps` one passes here (the CUDA emulation is the one that checks devices).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils.weak import WeakIdKeyDictionary

from torchdevlint.verify.race import tensors_in as _tensors

MPS_FLOAT64 = (
    "Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support float64. "
    "Please use float32 instead."
)
_HOST = torch.device("cpu")


def _names_mps(value: Any, depth: int = 0) -> bool:
    if isinstance(value, str):
        return value.split(":")[0] == "mps"
    if isinstance(value, torch.device):
        return value.type == "mps"
    if depth < 1 and isinstance(value, (list, tuple)):
        return any(_names_mps(item, depth + 1) for item in value)
    return False


def _on_host(value: Any) -> Any:
    if isinstance(value, str) and value.split(":")[0] == "mps":
        return "cpu"
    if isinstance(value, torch.device) and value.type == "mps":
        return _HOST
    return value


def _names_cpu(value: Any) -> bool:
    return isinstance(value, str) and value.split(":")[0] == "cpu" or isinstance(value, torch.device) and value.type == "cpu"


class EmulatedMpsMode(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.on_mps: WeakIdKeyDictionary = WeakIdKeyDictionary()

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.device:
            return func(*args, **kwargs)  # an `mps` device object is fine; tensors go to the CPU
        to_mps = _names_mps(args) or any(_names_mps(value) for value in kwargs.values())
        from_mps = any(tensor in self.on_mps for tensor in _tensors(args)) or any(
            tensor in self.on_mps for tensor in _tensors(kwargs))
        to_host = func is torch.Tensor.cpu or func is torch.Tensor.to and (
            any(_names_cpu(arg) for arg in args) or _names_cpu(kwargs.get("device")))
        result = func(*(_on_host(arg) for arg in args), **{key: _on_host(value) for key, value in kwargs.items()})
        if to_host and isinstance(result, torch.Tensor) and result in self.on_mps:
            # A copy back to the host is a new tensor (here the CPU would return the same one).
            return result.clone()
        if (to_mps or from_mps) and not to_host:
            for tensor in _tensors(result):
                if tensor.dtype == torch.float64:
                    raise TypeError(MPS_FLOAT64)
                self.on_mps[tensor] = True
        return result


@contextmanager
def emulated_mps() -> Iterator[EmulatedMpsMode]:
    backends: Any = torch.backends.mps  # its functions are replaced for the run
    saved = (backends.is_available, backends.is_built)
    backends.is_available = lambda: True
    backends.is_built = lambda: True
    try:
        with EmulatedMpsMode() as mode:
            yield mode
    finally:
        backends.is_available, backends.is_built = saved
