"""The emulated GPU: `meta` tensors stand in for CUDA tensors on a machine without a GPU.

Imported only inside a verify child process: it imports torch.

A `TorchFunctionMode` sees every torch call and its arguments. It rewrites every CUDA device
(`"cuda"`, `"cuda:1"`, `torch.device("cuda")`, `device=0`, `.cuda()`, `Module.to`/`.cuda`) to
`meta`, and `torch.cuda.is_available()` says True, so a program takes its GPU path and mixed
devices fail inside PyTorch's own checks ("Tensor on device meta is not on the expected device
cpu!", "Input and hidden tensors are not at the same device").

`meta` is more lenient than CUDA in places: its kernels for embedding, index_select, gather,
scatter, matmul, convolution, in-place arithmetic and others never compare devices. After
such a call succeeds, the mode checks the operands itself and raises CUDA's error wherever a
CUDA kernel would. It is at least as strict as a GPU; the allow-list names the operations that
legitimately take CPU tensors next to CUDA ones.

Every emulated GPU is the same `meta` device. With more than one GPU the mode also records
which GPU each tensor is on, so `cuda:0` and `cuda:1` operands fail as they do on CUDA, and
DataParallel (one replica does the work) keeps its check that the module sits on
`device_ids[0]`.

`meta` tensors carry no data. Where a program reads values back to the host (`.item()`,
`.cpu()`, `if tensor:`), ones stand in (True for booleans: a length, a count or a divisor of
1 keeps most code running where 0 would not) and the read is recorded, so the report can say
why a result that depends on values was not compared.

A copy to the CPU made with `non_blocking=True` is asynchronous on CUDA and reading it before a
synchronisation races with it; `meta` copies nothing. `HostCopyRaceMode` models the race
deterministically (such a copy is pending until something synchronises, and reading a pending
copy raises), inside the emulated GPU and, installed alone by `host_copy_race_check`, on a real
GPU, where the race shows only now and then.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode, resolve_name
from torch.serialization import STORAGE
from torch.utils.weak import WeakIdKeyDictionary

EMULATED_DEVICE = torch.device("meta")
EMULATED_GPU_NAME = "meta (torchdevlint emulated GPU)"
_CUDA_STRING = re.compile(r"cuda(?::(\d+))?")
_EMULATION_NOTE = "raised by torchdevlint's emulation: CUDA checks this, `meta` does not"
_SERIALIZATION_PRIORITY = 0  # ahead of every built-in location tag (cpu is 10, cuda 20)

Tensor = torch.Tensor
# A handler gets the intercepted function, its positional and its keyword arguments.
_Handler = Callable[[Callable[..., Any], tuple[Any, ...], dict[str, Any]], Any]

# Operations that CUDA runs with CPU tensors next to CUDA ones: device moves and copies, ops
# that read only another tensor's metadata, RNN and packing helpers whose lengths or batch
# sizes live on the CPU, CTC's CPU targets. Indexing has its own rule (`_check_indexing`).
_CROSS_DEVICE_OK = frozenset(
    {
        "to", "cuda", "cpu", "copy_", "type_as", "expand_as", "view_as", "reshape_as",
        "new_tensor", "new_empty", "new_zeros", "new_ones", "new_full", "as_tensor", "tensor",
        "set_", "_has_compatible_shallow_copy_type", "__get__", "__set__", "__delete__",
        "result_type", "broadcast_tensors", "is_same_size", "is_set_to", "__deepcopy__",
        "__reduce_ex__", "__setstate__", "_make_subclass", "sparse_coo_tensor",
        "lstm", "gru", "rnn_tanh", "rnn_relu", "lstm_cell", "gru_cell",
        "_pack_padded_sequence", "_pad_packed_sequence", "pack_padded_sequence",
        "pad_packed_sequence", "pack_sequence", "pad_sequence", "ctc_loss",
        "__getitem__", "__setitem__", "index_put_", "index_put", "_index_put_impl_",
    }
)
# Index-consuming operations: CUDA rejects a CPU index even when it is 0-dimensional.
_INDEX_OPS = frozenset(
    {
        "embedding", "embedding_bag", "index_select", "gather", "scatter", "scatter_",
        "scatter_add", "scatter_add_", "scatter_reduce", "scatter_reduce_", "take",
        "take_along_dim", "put", "put_", "index_add", "index_add_", "index_copy", "index_copy_",
        "index_fill", "index_fill_", "index_reduce", "index_reduce_",
    }
)
_INDEXING = frozenset({"__getitem__", "__setitem__", "index_put_", "index_put", "_index_put_impl_"})


def _name(func: Callable[..., Any]) -> str:
    return getattr(func, "__name__", "") or ""


def _tensors(value: Any, depth: int = 0) -> Iterator[Tensor]:
    if isinstance(value, Tensor):
        yield value
    elif depth < 2 and isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item, depth + 1)
    elif depth < 1 and isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item, depth + 1)


def _placeholder_scalar(dtype: torch.dtype) -> bool | int | float | complex:
    if dtype is torch.bool:
        return True
    if dtype.is_complex:
        return 1 + 0j
    if dtype.is_floating_point:
        return 1.0
    return 1


class EmulatedGpuMode(TorchFunctionMode):
    """Rewrites CUDA devices to `meta` and makes `meta` as strict about devices as CUDA."""

    def __init__(self, device_count: int) -> None:
        super().__init__()
        self.device_count = device_count
        self.current_index = 0
        # With one GPU there is nothing to tell apart (any other index is an invalid ordinal).
        self.multi_gpu = device_count > 1
        self._gpu: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self.placeholder_reads: list[str] = []
        self._handlers: dict[Callable[..., Any], _Handler] = {
            Tensor.to: self._to,
            torch._C._nn._parse_to: self._parse_to,
            Tensor.cuda: self._cuda,
            Tensor.cpu: self._cpu,
            Tensor.item: self._scalar_read,
            Tensor.__bool__: self._scalar_read,
            Tensor.__int__: self._scalar_read,
            Tensor.__float__: self._scalar_read,
            Tensor.__index__: self._scalar_read,
            Tensor.__complex__: self._scalar_read,
            Tensor.__format__: self._format,
            Tensor.tolist: self._tolist,
            Tensor.copy_: self._copy,
            torch.equal: self._all_equal,
            Tensor.equal: self._all_equal,
            torch.allclose: self._all_equal,
            Tensor.allclose: self._all_equal,
            torch.nonzero: self._nonzero,
            Tensor.nonzero: self._nonzero,
            torch.argwhere: self._nonzero,
            Tensor.argwhere: self._nonzero,
            torch.masked_select: self._masked_select,
            Tensor.masked_select: self._masked_select,
            # `torch.device("cuda", 0)` stays a CUDA device; it becomes `meta` where it is used.
            torch.device: lambda func, args, kwargs: func(*args, **kwargs),
        }

    # -- devices ---------------------------------------------------------------------------

    def _cuda_ordinal(self, index: int) -> None:
        if not 0 <= index < self.device_count:
            # What CUDA itself raises for a device the machine does not have.
            raise RuntimeError("CUDA error: invalid device ordinal")

    def cuda_index(self, value: Any, *, int_is_device: bool = False) -> int | None:
        """The CUDA device `value` names (plain "cuda": the current one), or None."""
        index: int | None = None
        if isinstance(value, torch.device):
            if value.type == "cuda":
                index = self.current_index if value.index is None else value.index
        elif isinstance(value, str):
            match = _CUDA_STRING.fullmatch(value)
            if match:
                index = self.current_index if match.group(1) is None else int(match.group(1))
        elif int_is_device and isinstance(value, int) and not isinstance(value, bool):
            index = value
        if index is not None:
            self._cuda_ordinal(index)
        return index

    def as_emulated(self, value: Any, *, int_is_device: bool = False) -> Any:
        """`value` with a CUDA device replaced by `meta`; anything else unchanged."""
        return value if self.cuda_index(value, int_is_device=int_is_device) is None else EMULATED_DEVICE

    def _rewrite(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any], int | None]:
        """Arguments with CUDA devices made `meta`, and the GPU they named."""
        indices = [self.cuda_index(arg) for arg in args]
        named = [index for index in indices if index is not None]
        args = tuple(arg if index is None else EMULATED_DEVICE for arg, index in zip(args, indices, strict=True))
        if "device" in kwargs:
            index = self.cuda_index(kwargs["device"], int_is_device=True)
            if index is not None:
                named.append(index)
                kwargs = {**kwargs, "device": EMULATED_DEVICE}
        return args, kwargs, (named[0] if named else None)

    # -- which emulated GPU ----------------------------------------------------------------
    # Every emulated GPU is `meta`, which has no device index. With more than one GPU the
    # mode remembers which GPU each tensor is on and propagates it, so cuda:0 and cuda:1
    # operands fail as on CUDA. Tensors made inside PyTorch (gradients) carry no index and
    # match any GPU.

    def gpu_of(self, tensor: Tensor) -> int | None:
        if not (self.multi_gpu and tensor.is_meta and tensor in self._gpu):
            return None
        index: int = self._gpu[tensor]
        return index

    def place(self, result: Any, index: int | None) -> Any:
        if self.multi_gpu and index is not None:
            for tensor in _tensors(result):
                if tensor.is_meta:
                    self._gpu[tensor] = index
        return result

    def _common_gpu(self, tensors: list[Tensor]) -> int | None:
        found = {index for index in (self.gpu_of(t) for t in tensors) if index is not None}
        if len(found) > 1:
            first, second = sorted(found)[:2]
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two devices, "
                f"cuda:{first} and cuda:{second}! ({_EMULATION_NOTE})"
            )
        return found.pop() if found else None

    def _to_args(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Arguments of `Tensor.to`/`Module.to` after the tensor: a leading int is a device index."""
        rest = list(args)
        if rest:
            rest[0] = self.as_emulated(rest[0], int_is_device=True)
        rest[1:] = [self.as_emulated(arg) for arg in rest[1:]]
        kwargs = dict(kwargs)
        if "device" in kwargs:
            kwargs["device"] = self.as_emulated(kwargs["device"], int_is_device=True)
        return tuple(rest), kwargs

    # -- host reads ------------------------------------------------------------------------

    def _record(self, what: str) -> None:
        if what not in self.placeholder_reads:
            self.placeholder_reads.append(what)

    def host_copy(self, tensor: Tensor, what: str, dtype: torch.dtype | None = None) -> Tensor:
        """A CPU tensor of ones standing in for the values of a `meta` tensor."""
        self._record(what)
        copy = torch.ones(tensor.shape, dtype=dtype or tensor.dtype)
        if tensor.requires_grad and copy.is_floating_point():
            copy.requires_grad_(True)
        return copy

    # -- handlers --------------------------------------------------------------------------

    def _to(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self_, rest = args[0], args[1:]
        named = [self.cuda_index(arg, int_is_device=i == 0) for i, arg in enumerate(rest)]
        named.append(self.cuda_index(kwargs.get("device"), int_is_device=True))
        rest, kwargs = self._to_args(rest, kwargs)
        parse_kwargs = {k: v for k, v in kwargs.items() if k != "copy"}
        device, dtype, _, _ = torch._C._nn._parse_to(*rest, **parse_kwargs)
        if self_.is_meta and device is not None and device.type == "cpu":
            return self.host_copy(self_, "Tensor.to('cpu')", dtype)
        index = next((i for i in named if i is not None), None)
        if index is None and device is not None and device.type == "meta":
            # `to(other)`, or to a device that is already `meta`: the other tensor's GPU, or its own.
            others = [arg for arg in rest if isinstance(arg, Tensor)] or [self_]
            index = self.gpu_of(others[0])
        elif index is None:
            index = self.gpu_of(self_)
        return self.place(func(self_, *rest, **kwargs), index)

    def _parse_to(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """`Module.to`'s parser: CUDA devices stay (each tensor's `.to` maps them, knowing which GPU)."""
        positional, kwargs = list(args), dict(kwargs)
        # A bare index means a CUDA device, which a CPU-only build cannot parse.
        first = positional[0] if positional else None
        if isinstance(first, int) and self.cuda_index(first, int_is_device=True) is not None:
            positional[0] = torch.device("cuda", first)
        device = kwargs.get("device")
        if self.cuda_index(device, int_is_device=True) is not None and isinstance(device, int):
            kwargs["device"] = torch.device("cuda", device)
        return func(*positional, **kwargs)

    def _cuda(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self_ = args[0]
        device = args[1] if len(args) > 1 else kwargs.get("device")
        index = self.current_index if device is None else self.cuda_index(device, int_is_device=True)
        options = {k: v for k, v in kwargs.items() if k in ("non_blocking", "memory_format")}
        return self.place(self_.to(EMULATED_DEVICE, **options), index)

    def _cpu(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if args[0].is_meta:
            return self.host_copy(args[0], "Tensor.cpu()")
        return func(*args, **kwargs)

    def _scalar_read(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        tensor = args[0]
        if not tensor.is_meta or tensor.numel() != 1:
            return func(*args, **kwargs)  # PyTorch's own error for more than one element
        if _name(func) == "__index__" and (tensor.dtype.is_floating_point or tensor.dtype.is_complex):
            return func(*args, **kwargs)
        value = _placeholder_scalar(tensor.dtype)
        self._record(f"Tensor.{_name(func)}()")
        converters: dict[str, Callable[[Any], Any]] = {
            "__bool__": bool, "__int__": int, "__float__": float, "__index__": int, "__complex__": complex,
        }
        return converters.get(_name(func), lambda v: v)(value)

    def _format(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        tensor, spec = args[0], args[1] if len(args) > 1 else ""
        if tensor.is_meta and tensor.dim() == 0:
            self._record("Tensor.__format__")
            return format(_placeholder_scalar(tensor.dtype), spec)
        return func(*args, **kwargs)

    def _tolist(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if args[0].is_meta:
            return self.host_copy(args[0], "Tensor.tolist()").tolist()
        return func(*args, **kwargs)

    def _copy(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        dst, src = args[0], args[1]
        if isinstance(src, Tensor) and src.is_meta and not dst.is_meta:
            return func(dst, self.host_copy(src, "Tensor.copy_ to the CPU"), *args[2:], **kwargs)
        return func(*args, **kwargs)

    def _all_equal(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        tensors = list(_tensors(args))
        if tensors and all(t.is_meta for t in tensors):
            self._record(f"torch.{_name(func)}")
            return True
        return self._default(func, args, kwargs)

    def _nonzero(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        tensor = args[0]
        if not tensor.is_meta:
            return func(*args, **kwargs)
        # The output's size depends on the values: take every element as nonzero.
        self._record(f"torch.{_name(func)}")
        result = func(torch.ones(tensor.shape, dtype=torch.bool), *args[1:], **kwargs)
        if isinstance(result, tuple):
            return tuple(part.to(EMULATED_DEVICE) for part in result)
        return result.to(EMULATED_DEVICE)

    def _masked_select(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        tensor = args[0]
        mask = args[1] if len(args) > 1 else kwargs["mask"]
        self._check_devices(func, args, kwargs)
        if not (tensor.is_meta or mask.is_meta):
            return func(*args, **kwargs)
        self._record("torch.masked_select")
        selected, _ = torch.broadcast_tensors(tensor, mask)  # type: ignore[no-untyped-call]  # unannotated in torch
        return selected.reshape(-1)

    def _data_dependent_index(self, index: Any) -> Any:
        """Boolean `meta` masks select elements by value: select every element instead."""
        if isinstance(index, Tensor) and index.is_meta and index.dtype in (torch.bool, torch.uint8):
            self._record("boolean-mask indexing")
            return torch.ones(index.shape, dtype=torch.bool)
        if isinstance(index, tuple):
            return tuple(self._data_dependent_index(part) for part in index)
        if isinstance(index, list) and any(isinstance(part, Tensor) for part in index):
            return [self._data_dependent_index(part) for part in index]
        return index

    def _indexing(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self_ = args[0]
        self._check_indexing(self_, args[1] if len(args) > 1 else kwargs.get("indices"))
        operands = list(args)
        if len(operands) > 1:
            operands[1] = self._data_dependent_index(operands[1])
        value = operands[2] if _name(func) == "__setitem__" and len(operands) > 2 else None
        if isinstance(value, Tensor) and value.is_meta and not self_.is_meta:
            operands[2] = self.host_copy(value, "assignment into a CPU tensor")
        return func(*operands, **kwargs)

    # -- strictness ------------------------------------------------------------------------

    def _check_indexing(self, self_: Any, index: Any) -> None:
        """CUDA takes CPU indices for a CUDA tensor, not CUDA indices for a CPU tensor."""
        if isinstance(self_, Tensor) and self_.device.type == "cpu" and any(t.is_meta for t in _tensors(index)):
            raise RuntimeError(
                "indices should be either on cpu or on the same device as the indexed tensor (cpu) "
                f"({_EMULATION_NOTE})"
            )

    def _check_devices(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
        """Raise CUDA's error where CUDA would; return the emulated GPU the operands share."""
        name = _name(func)
        tensors = [*_tensors(args), *_tensors(kwargs)]
        if name in _CROSS_DEVICE_OK:
            return self.gpu_of(tensors[0]) if self.multi_gpu and tensors else None
        if not any(t.is_meta for t in tensors):
            return None
        # CUDA kernels accept 0-dim CPU tensors as scalars, except where they index.
        strict = name in _INDEX_OPS
        if any(t.device.type == "cpu" and (strict or t.dim() > 0) for t in tensors):
            where = resolve_name(func) or name or repr(func)
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two devices, "
                f"meta and cpu! (in {where}; {_EMULATION_NOTE})"
            )
        return self._common_gpu(tensors) if self.multi_gpu else None

    def _default(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        args, kwargs, named = self._rewrite(args, kwargs)
        if _name(func) in _INDEXING:
            return self.place(self._indexing(func, args, kwargs), self.gpu_of(args[0]))
        # PyTorch's own checks run first; the mode's check covers what `meta` lets pass.
        result = func(*args, **kwargs)
        gpu = self._check_devices(func, args, kwargs)
        if self.multi_gpu:
            if _name(func) == "__set__" and len(args) > 1 and isinstance(args[1], Tensor):
                self.place(args[0], self.gpu_of(args[1]))  # `param.data = tensor`
            self.place(result, named if named is not None else gpu)
        return result

    def __torch_function__(
        self, func: Callable[..., Any], types: Any, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        handler = self._handlers.get(func)
        if handler is not None:
            return handler(func, tuple(args), dict(kwargs))
        return self._default(func, tuple(args), dict(kwargs))


def _move_to_emulated(value: Any) -> Any:
    if isinstance(value, Tensor):
        return value.to(EMULATED_DEVICE)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_move_to_emulated(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_move_to_emulated(v) for v in value)
    if isinstance(value, dict):
        return type(value)((k, _move_to_emulated(v)) for k, v in value.items())
    return value


class _Patches:
    """Attribute replacements, undone in reverse order."""

    def __init__(self) -> None:
        self._undo: list[tuple[object, str, object]] = []

    def set(self, owner: object, name: str, value: object) -> None:
        self._undo.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    def undo(self) -> None:
        while self._undo:
            owner, name, value = self._undo.pop()
            setattr(owner, name, value)


class _EmulatedStream:
    """The one stream of an emulated GPU: never capturing a graph, always idle."""

    def is_capturing(self) -> bool:
        return False

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def wait_stream(self, stream: object) -> None:
        return None


_EMULATED_MEMORY = 80 * 1024**3


class _EmulatedProperties:
    """What `torch.cuda.get_device_properties` describes, for an emulated GPU."""

    name = EMULATED_GPU_NAME
    major, minor = 8, 0
    total_memory = _EMULATED_MEMORY
    multi_processor_count = 108
    is_integrated = False
    is_multi_gpu_board = False


class _EmulatedEvent:
    """`torch.cuda.Event`: timing on the emulated GPU measures nothing and says so by 0.0."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def record(self, stream: object = None) -> None:
        return None

    def synchronize(self) -> None:
        return None

    def wait(self, stream: object = None) -> None:
        return None

    def query(self) -> bool:
        return True

    def elapsed_time(self, end_event: object) -> float:
        return 0.0


def _patch_cuda_api(patches: _Patches, mode: EmulatedGpuMode) -> None:
    count = mode.device_count

    def no_op(*_args: object, **_kwargs: object) -> None:
        return None

    def set_device(device: object) -> None:
        index = mode.cuda_index(device, int_is_device=True)
        if index is not None:
            mode.current_index = index

    cuda = torch.cuda
    for name, value in {
        "is_available": lambda: True,
        "device_count": lambda: count,
        "current_device": lambda: mode.current_index,
        "set_device": set_device,
        "get_device_name": lambda device=None: EMULATED_GPU_NAME,
        "get_device_capability": lambda device=None: (8, 0),
        "synchronize": no_op,
        "empty_cache": no_op,
        "reset_peak_memory_stats": no_op,
        "memory_allocated": lambda device=None: 0,
        "max_memory_allocated": lambda device=None: 0,
        "memory_reserved": lambda device=None: 0,
        "max_memory_reserved": lambda device=None: 0,
        # Common on a GPU path: autocast asks about bf16, programs ask about memory.
        "is_bf16_supported": lambda including_emulation=True: True,
        "mem_get_info": lambda device=None: (_EMULATED_MEMORY // 2, _EMULATED_MEMORY),
        "get_device_properties": lambda device=None: _EmulatedProperties(),
    }.items():
        patches.set(cuda, name, value)
    patches.set(cuda, "Event", _EmulatedEvent)
    patches.set(cuda, "current_stream", lambda device=None: _EmulatedStream())
    patches.set(cuda, "is_current_stream_capturing", lambda: False)
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None:
        for name, value in {
            "is_available": lambda: True,
            "current_accelerator": lambda check_available=False: torch.device("cuda"),
            "device_count": lambda: count,
            "current_device_index": lambda: mode.current_index,
            "set_device_index": set_device,
            "current_stream": lambda device=None: _EmulatedStream(),
            "synchronize": no_op,
        }.items():
            if hasattr(accelerator, name):
                patches.set(accelerator, name, value)

    # Pinned host memory needs a real accelerator; pinning changes no value, so it is skipped.
    # Patched on the class: DataLoader pins in a thread the mode does not see.
    def pin_memory(self: Tensor, device: object = None) -> Tensor:
        if self.device.type != "cpu":
            raise RuntimeError(f"cannot pin '{self.type()}' only dense CPU tensors can be pinned")
        return self

    patches.set(Tensor, "pin_memory", pin_memory)

    # `Module.to` wraps each moved tensor in a new Parameter out of the mode's sight: the new
    # Parameter stays on the moved tensor's emulated GPU.
    parameter = torch.nn.Parameter
    original_new = parameter.__new__

    def new_parameter(cls: type, data: Tensor | None = None, requires_grad: bool = True) -> Tensor:
        created: Tensor = original_new(cls, data, requires_grad)
        if isinstance(data, Tensor):
            mode.place(created, mode.gpu_of(data))
        return created

    patches.set(parameter, "__new__", staticmethod(new_parameter))


def _patch_data_parallel(patches: _Patches, mode: EmulatedGpuMode) -> None:
    """DataParallel over emulated GPUs: its own device check stays; one replica does the work.

    On CUDA, `scatter` copies the inputs (even CPU ones) to the GPUs; here they go to `meta`.
    The wrapper keeps its `module.` prefix, so state_dict bugs surface exactly as on CUDA.
    """
    data_parallel = sys.modules["torch.nn.parallel.data_parallel"]
    cls = torch.nn.DataParallel
    original_init = cls.__init__

    original_forward = cls.forward

    def __init__(self: torch.nn.DataParallel[Any], *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        if self.device_ids:
            self.src_device_obj = EMULATED_DEVICE

    def forward(self: Any, *inputs: Any, **kwargs: Any) -> Any:
        if self.device_ids and mode.multi_gpu:
            # DataParallel's own check, which `meta` cannot make: every emulated GPU is `meta`.
            first = self.device_ids[0]
            for tensor in (*self.module.parameters(), *self.module.buffers()):
                index = mode.gpu_of(tensor)
                if tensor.is_meta and (index or 0) != first:
                    raise RuntimeError(
                        f"module must have its parameters and buffers on device cuda:{first} (device_ids[0]) "
                        f"but found one of them on device: cuda:{index or 0} ({_EMULATION_NOTE})"
                    )
        return original_forward(self, *inputs, **kwargs)

    def scatter(self: Any, inputs: tuple[Any, ...], kwargs: dict[str, Any] | None, device_ids: Any) -> Any:
        moved_inputs = mode.place(_move_to_emulated(tuple(inputs)), device_ids[0])
        moved_kwargs = mode.place(_move_to_emulated(dict(kwargs or {})), device_ids[0])
        return (moved_inputs,), (moved_kwargs,)

    def gather(self: Any, outputs: list[Any], output_device: int) -> Any:
        return mode.place(outputs[0], output_device)

    def parallel_apply(self: Any, replicas: list[Any], inputs: Any, kwargs: Any) -> list[Any]:
        return [replicas[0](*inputs[0], **kwargs[0])]

    # Device properties and memory balance are CUDA queries; emulated GPUs are all alike.
    patches.set(data_parallel, "_check_balance", lambda device_ids: None)
    patches.set(cls, "__init__", __init__)
    patches.set(cls, "forward", forward)
    patches.set(cls, "scatter", scatter)
    patches.set(cls, "replicate", lambda self, module, device_ids: [module])
    patches.set(cls, "parallel_apply", parallel_apply)
    patches.set(cls, "gather", gather)


# -- copies to the host that have not arrived -------------------------------------------------
# On CUDA, `gpu_tensor.to("cpu", non_blocking=True)` queues the copy on the stream and returns a
# CPU tensor (in pinned memory) at once; its values are there only once the stream has caught
# up. Reading it earlier sees whatever the buffer held: no error, wrong numbers now and then.
# `meta` copies nothing, and even on CUDA the race is a matter of timing, so both hosts run a
# deterministic model of it: such a copy is "pending" until something synchronises, and a
# pending tensor whose values are read raises. What synchronises is what TDL013 counts as one,
# so the rule and the run agree.

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

    def is_pending(self, tensor: Tensor) -> bool:
        return tensor in self._pending

    def arrived(self) -> None:
        """Something waited for the stream: every copy queued so far is complete."""
        self._pending.clear()

    def _check_read(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if any(tensor in self._pending for tensor in (*_tensors(args), *_tensors(kwargs))):
            where = resolve_name(func) or _name(func) or repr(func)
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
                non_blocking = bool(torch._C._nn._parse_to(*args[1:], **parse_kwargs)[2])
        if _on_accelerator(source) and _on_host(destination):
            if non_blocking:
                self._pending[destination] = True
            else:
                self.arrived()  # a blocking copy waits for the stream, earlier copies included
        elif _on_host(source) and _on_accelerator(destination) and not non_blocking:
            self.arrived()  # from pageable memory too: the copy is queued, then the host waits

    def __torch_function__(
        self, func: Callable[..., Any], types: Any, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        if self._pending and func not in _METADATA:
            self._check_read(func, tuple(args), kwargs)
        result = func(*args, **kwargs)
        if func is Tensor.to or func is Tensor.cuda or func is Tensor.copy_:
            self._transfer(func, tuple(args), kwargs, result)
        elif func in _SYNCHRONISING_READS and any(_on_accelerator(t) for t in _tensors(args)):
            self.arrived()
        return result


def _patch_synchronisations(patches: _Patches, race: HostCopyRaceMode, classes: tuple[type, ...]) -> None:
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


@contextmanager
def host_copy_race_check(on_cuda: bool = True) -> Iterator[HostCopyRaceMode]:
    """The read-before-sync check on a real GPU (`on_cuda`), or inside `emulated_gpu`."""
    if on_cuda:
        race = HostCopyRaceMode("CUDA", _CUDA_RACE_NOTE)
        classes: tuple[type, ...] = (torch.cuda.Stream, torch.cuda.Event)
    else:
        race = HostCopyRaceMode("emulated GPU", _EMULATED_RACE_NOTE)
        classes = (_EmulatedStream, _EmulatedEvent)
    patches = _Patches()
    with ExitStack() as stack:
        stack.callback(patches.undo)
        _patch_synchronisations(patches, race, classes)
        stack.enter_context(race)
        yield race


@contextmanager
def _serialization(mode: EmulatedGpuMode) -> Iterator[None]:
    """Checkpoints on the emulated GPU: CUDA locations load onto `meta`; `meta` loads onto the CPU as zeros."""

    def tag(storage: STORAGE) -> str | None:
        return None  # `meta` storages keep their own tag; the loader below treats it as the GPU

    def restore(storage: STORAGE, location: str) -> STORAGE | None:
        match = _CUDA_STRING.fullmatch(location)
        if match:
            mode._cuda_ordinal(int(match.group(1) or 0))
            on_gpu: STORAGE = torch.UntypedStorage(storage.nbytes(), device=EMULATED_DEVICE)  # type: ignore[no-untyped-call]  # unannotated in torch
            return on_gpu
        if location == "cpu" and storage.device.type == "meta":
            mode._record("torch.load of GPU tensors onto the CPU")
            zeros: STORAGE = torch.UntypedStorage(storage.nbytes())  # type: ignore[no-untyped-call]  # unannotated
            zeros.fill_(0)  # type: ignore[union-attr]  # every storage type has fill_; the stubs omit it
            return zeros
        return None

    entry = (_SERIALIZATION_PRIORITY, tag, restore)
    torch.serialization.register_package(_SERIALIZATION_PRIORITY, tag, restore)
    try:
        yield
    finally:
        torch.serialization._package_registry.remove(entry)


@contextmanager
def emulated_gpu(device_count: int = 1) -> Iterator[EmulatedGpuMode]:
    """Run the body as if on `device_count` CUDA GPUs, all of them `meta`."""
    mode = EmulatedGpuMode(device_count)
    patches = _Patches()
    with ExitStack() as stack:
        stack.callback(patches.undo)
        _patch_cuda_api(patches, mode)
        _patch_data_parallel(patches, mode)
        stack.enter_context(_serialization(mode))
        stack.enter_context(mode)
        # Entered last, so it sees each call before the emulation rewrites CUDA to `meta`.
        stack.enter_context(host_copy_race_check(on_cuda=False))
        yield mode
