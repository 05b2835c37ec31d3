"""Copies to the host that have not arrived: the read-before-sync check behind TDL013.

Imported only inside a verify child process: it imports torch.

On CUDA, `gpu_tensor.to("cpu", non_blocking=True)` queues the copy on the stream and returns a
CPU tensor (in pinned memory) at once; its values are there only once the stream has caught
up. Reading it earlier sees whatever the buffer held: no error, wrong numbers now and then.
The race is a matter of timing on CUDA and does not exist on the emulated GPU (which copies at
once), so both run a deterministic model of it: such a copy is "pending" until something
synchronises, and a pending tensor whose values are read raises. What synchronises is what
TDL013 counts as one, so the rule and the run agree.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode, resolve_name
from torch.utils.weak import WeakIdKeyDictionary

Tensor = torch.Tensor


def tensors_in(value: Any, depth: int = 0) -> Iterator[Tensor]:
    """The tensors among a call's arguments: top level, in lists and tuples, and dict values."""
    if isinstance(value, Tensor):
        yield value
    elif depth < 2 and isinstance(value, (list, tuple)):
        for item in value:
            yield from tensors_in(item, depth + 1)
    elif depth < 1 and isinstance(value, dict):
        for item in value.values():
            yield from tensors_in(item, depth + 1)


def function_name(func: Callable[..., Any]) -> str:
    return resolve_name(func) or getattr(func, "__name__", "") or repr(func)


class Patches:
    """Attribute replacements, undone in reverse order."""

    def __init__(self) -> None:
        self._undo: list[tuple[object, str, object, bool]] = []

    def set(self, owner: object, name: str, value: object) -> None:
        had = name in vars(owner) if isinstance(owner, type) else hasattr(owner, name)
        self._undo.append((owner, name, getattr(owner, name, None), had))
        setattr(owner, name, value)

    def undo(self) -> None:
        while self._undo:
            owner, name, value, had = self._undo.pop()
            if had:
                setattr(owner, name, value)
            else:
                delattr(owner, name)


HOST_COPY_READ_EARLY = "a non_blocking copy to the CPU was read before synchronising; its data may not have arrived"
_EMULATED_RACE_NOTE = (
    "raised by torchdevlint's emulation: on CUDA this read races with the copy and may see stale values"
)
_CUDA_RACE_NOTE = (
    "raised by torchdevlint's read-before-sync check: CUDA itself raises nothing, the read races with the copy "
    "and may see stale values"
)
# Reading these says nothing about a tensor's values.
_METADATA_PROPERTIES = (
    "shape", "dtype", "device", "ndim", "layout", "names", "is_cuda", "is_cpu", "is_meta", "requires_grad",
    "is_leaf", "grad_fn", "itemsize", "nbytes", "is_sparse", "is_quantized", "is_nested", "is_mkldnn",
)
_METADATA_METHODS = (
    "size", "dim", "ndimension", "numel", "nelement", "element_size", "stride", "storage_offset", "is_pinned",
    "is_contiguous", "is_floating_point", "is_complex", "get_device", "data_ptr", "__len__", "__hash__",
)
# Calls that bring a GPU tensor's values to the host and wait for them: they wait for the whole
# stream, so every copy queued before them has arrived too.
_BLOCKING_HOST_READS = (
    "item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__", "__complex__",
    "__format__", "__repr__", "__array__", "nonzero", "argwhere", "masked_select", "equal", "allclose",
)


def _metadata_functions() -> frozenset[object]:
    """What a `TorchFunctionMode` receives for `t.shape`, `t.size()`, `len(t)`."""
    found: set[object] = set()
    for name in _METADATA_PROPERTIES:
        descriptor = getattr(Tensor, name, None)
        if descriptor is not None and hasattr(descriptor, "__get__"):
            found.add(descriptor.__get__)
    found.update(getattr(Tensor, name) for name in _METADATA_METHODS if hasattr(Tensor, name))
    return frozenset(found)


def _blocking_reads() -> frozenset[object]:
    found: set[object] = {getattr(Tensor, name) for name in _BLOCKING_HOST_READS if hasattr(Tensor, name)}
    found.update(getattr(torch, name) for name in _BLOCKING_HOST_READS if hasattr(torch, name))
    return frozenset(found)


_METADATA = _metadata_functions()
_SYNCHRONISING_READS = _blocking_reads()
# The calls the check acts on even while no copy is pending.
_TRANSFERS_AND_READS = frozenset({Tensor.to, Tensor.cuda, Tensor.copy_}) | _SYNCHRONISING_READS


def _on_accelerator(value: Any) -> bool:
    return isinstance(value, Tensor) and value.device.type != "cpu"


def _on_host(value: Any) -> bool:
    return isinstance(value, Tensor) and value.device.type == "cpu"


class HostCopyRaceMode(TorchFunctionMode):
    """Marks non-blocking device-to-host copies pending until a synchronisation; a read of one raises.

    Entered inside the emulated GPU's mode (it must see the program's calls before the emulation
    rewrites them), or alone on a real GPU.
    """

    def __init__(self, who: str, note: str) -> None:
        super().__init__()
        self._who = who
        self._note = note
        # Keyed by identity, held weakly: a copy that is dropped unread is no longer pending.
        self._pending: WeakIdKeyDictionary = WeakIdKeyDictionary()
        # Reads `.to`'s arguments; the emulated GPU's own where it hands calls over itself.
        self.parse_to: Callable[..., Any] = torch._C._nn._parse_to

    def is_pending(self, tensor: Tensor) -> bool:
        return tensor in self._pending

    def arrived(self) -> None:
        """Something waited for the stream: every copy queued so far is complete."""
        self._pending.clear()

    def _check_read(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if any(tensor in self._pending for tensor in (*tensors_in(args), *tensors_in(kwargs))):
            where = function_name(func)
            raise RuntimeError(f"{self._who}: {HOST_COPY_READ_EARLY} (in {where}; {self._note})")

    def _transfer(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> None:
        """`.to`, `.cuda` and `copy_` between host and device: queue a pending copy, or wait."""
        if func is Tensor.copy_:
            destination, source = args[0], args[1] if len(args) > 1 else kwargs.get("src")
            non_blocking = bool(args[2] if len(args) > 2 else kwargs.get("non_blocking", False))
        else:
            destination, source = result, args[0]
            if func is Tensor.cuda:
                non_blocking = bool(args[2] if len(args) > 2 else kwargs.get("non_blocking", False))
            else:
                parse_kwargs = {key: value for key, value in kwargs.items() if key != "copy"}
                non_blocking = bool(self.parse_to(*args[1:], **parse_kwargs)[2])
        if _on_accelerator(source) and _on_host(destination):
            if non_blocking:
                self._pending[destination] = True
            else:
                self.arrived()  # a blocking copy waits for the stream, earlier copies included
        elif _on_host(source) and _on_accelerator(destination) and not non_blocking:
            self.arrived()  # from pageable memory too: the copy is queued, then the host waits

    def watches(self, func: Callable[..., Any]) -> bool:
        """Whether `observed` would do anything about the call (most calls: no)."""
        return bool(self._pending.data) or func in _TRANSFERS_AND_READS

    def observed(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                 call: Callable[[Callable[..., Any], tuple[Any, ...], dict[str, Any]], Any]) -> Any:
        """`call(func, args, kwargs)`, the program's call as the device runs it, checked and noted."""
        if self._pending and func not in _METADATA:
            self._check_read(func, args, kwargs)
        result = call(func, args, kwargs)
        if func is Tensor.to or func is Tensor.cuda or func is Tensor.copy_:
            self._transfer(func, args, kwargs, result)
        elif func in _SYNCHRONISING_READS and any(_on_accelerator(t) for t in tensors_in(args)):
            self.arrived()
        return result

    def __torch_function__(
        self, func: Callable[..., Any], types: Any, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        return self.observed(func, tuple(args), kwargs or {}, _call)


def _patch_synchronisations(patches: Patches, race: HostCopyRaceMode, classes: tuple[type, ...]) -> None:
    """Explicit synchronisations mark every pending copy arrived.

    `torch.cuda.synchronize`, `torch.accelerator.synchronize`, and a stream's or event's
    `synchronize()`, `wait()` and a `query()` that answers True. (On CUDA `Event.wait()` only makes
    a stream wait; TDL013 counts it as a synchronisation, and so does the model: it errs toward
    silence.)
    """

    def arriving(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def synchronised(*args: Any, **kwargs: Any) -> Any:
            result = function(*args, **kwargs)
            race.arrived()
            return result

        return synchronised

    def arriving_when_done(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def queried(*args: Any, **kwargs: Any) -> Any:
            done = function(*args, **kwargs)
            if done:
                race.arrived()
            return done

        return queried

    patches.set(torch.cuda, "synchronize", arriving(torch.cuda.synchronize))
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and hasattr(accelerator, "synchronize"):
        patches.set(accelerator, "synchronize", arriving(accelerator.synchronize))
    for cls in classes:
        own = vars(cls)
        for name in ("synchronize", "wait"):
            if name in own:
                patches.set(cls, name, arriving(own[name]))
        if "query" in own:
            patches.set(cls, "query", arriving_when_done(own["query"]))


def _call(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return func(*args, **kwargs)


@contextmanager
def host_copy_race_check(who: str = "CUDA", emulated: tuple[type, ...] = (), *,
                         as_mode: bool = True) -> Iterator[HostCopyRaceMode]:
    """The read-before-sync check on a real GPU, or (given its stream and event classes) the emulated one.

    With `as_mode=False` it is not entered as a mode of its own: the caller's mode hands it each
    call (`observed`), which saves a second pass through Python for every operation."""
    if emulated:
        race = HostCopyRaceMode(who, _EMULATED_RACE_NOTE)
        classes = emulated
    else:
        race = HostCopyRaceMode(who, _CUDA_RACE_NOTE)
        classes = (torch.cuda.Stream, torch.cuda.Event)
    patches = Patches()
    with ExitStack() as stack:
        stack.callback(patches.undo)
        _patch_synchronisations(patches, race, classes)
        if as_mode:
            stack.enter_context(race)
        yield race
