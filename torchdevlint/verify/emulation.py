"""The emulated GPU: tensors that compute on the CPU and say they are on CUDA.

Imported only inside a verify child process: it imports torch.

An emulated CUDA tensor (`EmulatedTensor`) holds a real CPU tensor with its values. To Python
it is a CUDA tensor: `.device` is `cuda:N`, `.is_cuda` is True, `print` shows
`device='cuda:0'`, `.numpy()` raises as it does on CUDA. To PyTorch's C++ core it is a `meta`
wrapper whose every operation comes back to Python (`__torch_dispatch__`): there the operands'
devices are checked against CUDA's rules (`_DeviceRule`, one table), the operation runs on the
CPU values, and the results are wrapped again. Values are real, so guards, metrics,
`unique`, `.item()`, checkpoints and printed results behave as on a GPU; autograd treats
`meta` like the CPU, so backward passes and optimizers run unchanged.

Two modes surround the program. `_DeviceArguments` (a `TorchFunctionMode`) sees each torch call
with its Python arguments: a CUDA device named there (`"cuda:1"`, `torch.device("cuda")`,
`.cuda()`, `.to(0)`, `Module.to`) becomes an emulated tensor, before PyTorch's CPU-only build
could refuse it. `_Allocations` (a `TorchDispatchMode`) sees what PyTorch allocates inside its
own C++ code "like" an emulated tensor (a `meta` allocation) and makes it emulated too.
`torch.cuda` answers as a machine with N GPUs: `CUDA_VISIBLE_DEVICES` is read when CUDA is
initialised, as CUDA reads it; streams, events, RNG state, memory queries and the legacy
`torch.cuda.FloatTensor` constructors work. Checkpoints saved from the emulated GPU record a
CUDA location, as a GPU box writes them, and load back onto the emulated GPU or, with
`map_location`, onto the CPU.

Where PyTorch's own C++ checks reject mixed devices (an RNN's input and hidden state), their
message names `meta`; it is rewritten to the CUDA device the emulated tensor stands for.
"""

from __future__ import annotations

import functools
import os
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from enum import Enum
from typing import Any

import torch
import torch._dynamo  # imported before torch.cuda is patched: it indexes torch's functions
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from torchdevlint.verify.race import Patches, function_name, host_copy_race_check, tensors_in

EMULATED_GPU_NAME = "torchdevlint emulated GPU"
# What PyTorch's C++ core sees: a device without storage, which autograd runs like the CPU.
_WRAPPER_DEVICE = torch.device("meta")
_CPU = torch.device("cpu")
_CUDA_STRING = re.compile(r"cuda(?::(\d+))?")
_EMULATION_NOTE = "raised by torchdevlint's emulated GPU, as CUDA raises it"
_SERIALIZATION_PRIORITY = 0  # ahead of every built-in location tag (cpu is 10, cuda 20)
_EMULATED_MEMORY = 80 * 1024**3
_NO_GPUS = "No CUDA GPUs are available"

Tensor = torch.Tensor
aten = torch.ops.aten


# -- the machine ------------------------------------------------------------------------------


class EmulatedMachine:
    """The GPUs the program sees: how many, which one is current, whether CUDA is initialised."""

    def __init__(self, physical_gpus: int) -> None:
        self.physical_gpus = physical_gpus
        self.current_index = 0
        self._visible: int | None = None  # fixed when CUDA initialises, as CUDA fixes it
        # The GPU a move under way targets (`.to("cuda:1")`), for the allocation it causes.
        self.target_index: int | None = None

    def _visible_now(self) -> int:
        """How many GPUs `CUDA_VISIBLE_DEVICES` lets through, read as CUDA reads it."""
        setting = os.environ.get("CUDA_VISIBLE_DEVICES")
        if setting is None:
            return self.physical_gpus
        seen: list[int] = []
        for item in setting.split(","):
            item = item.strip()
            # CUDA stops at the first entry that is not a GPU it has.
            if not item.isdigit() or int(item) >= self.physical_gpus or int(item) in seen:
                break
            seen.append(int(item))
        return len(seen)

    @property
    def initialized(self) -> bool:
        return self._visible is not None

    def initialize(self) -> None:
        if self._visible is None:
            self._visible = self._visible_now()
        if self._visible == 0:
            raise RuntimeError(_NO_GPUS)

    def device_count(self) -> int:
        return self._visible if self._visible is not None else self._visible_now()

    def check_ordinal(self, index: int) -> None:
        self.initialize()
        if not 0 <= index < self.device_count():
            raise RuntimeError("CUDA error: invalid device ordinal")

    def cuda_index(self, value: Any, *, int_is_device: bool = False) -> int | None:
        """The CUDA device `value` names (plain "cuda": the current one), or None."""
        index: int | None = None
        if isinstance(value, torch.device):
            if value.type == "cuda":
                index = self.current_index if value.index is None else value.index
        elif isinstance(value, str):
            match = _CUDA_STRING.fullmatch(value.strip())
            if match:
                index = self.current_index if match.group(1) is None else int(match.group(1))
        elif int_is_device and isinstance(value, int) and not isinstance(value, bool):
            index = value
        if index is not None:
            self.check_ordinal(index)
        return index


_machine: EmulatedMachine | None = None


def _current_machine() -> EmulatedMachine:
    if _machine is None:
        raise RuntimeError("an emulated CUDA tensor was used outside the emulated GPU")
    return _machine


# -- the tensors ------------------------------------------------------------------------------


def _numpy_refused(tensor: Tensor) -> TypeError:
    return TypeError(
        f"can't convert {tensor.device} device type tensor to numpy. "
        "Use Tensor.cpu() to copy the tensor to host memory first."
    )


class EmulatedTensor(Tensor):
    """A CUDA tensor of the emulated GPU: its values in `_data` (CPU), its GPU in `_gpu`."""

    _data: Tensor
    _gpu: int

    @staticmethod
    def __new__(cls, data: Tensor, gpu: int) -> EmulatedTensor:
        wrapper: EmulatedTensor = Tensor._make_wrapper_subclass(
            cls, data.shape, strides=data.stride(), storage_offset=data.storage_offset(), dtype=data.dtype,
            layout=data.layout, device=_WRAPPER_DEVICE, requires_grad=data.requires_grad,
        )
        wrapper._data = data.detach() if data.requires_grad else data
        wrapper._gpu = gpu
        return wrapper

    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]  # the modes see calls

    @classmethod
    def __torch_dispatch__(  # type: ignore[override]  # torch's stub is narrower
        cls, func: Any, types: Any, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        # Reached outside the modes (another thread): the same rules apply.
        return _dispatch(func, tuple(args), kwargs or {})

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device("cuda", self._gpu)

    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return True

    @property
    def is_meta(self) -> bool:  # type: ignore[override]
        return False

    @property
    def is_cpu(self) -> bool:  # type: ignore[override]
        return False

    def get_device(self) -> int:
        return self._gpu

    def data_ptr(self) -> int:
        return self._data.data_ptr()

    def untyped_storage(self) -> torch.UntypedStorage:
        return self._data.untyped_storage()

    def numpy(self, *args: Any, **kwargs: Any) -> Any:
        raise _numpy_refused(self)

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise _numpy_refused(self)

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        text: str = torch._tensor_str._str(self, tensor_contents=tensor_contents)  # type: ignore[no-untyped-call]
        # Printed as a CUDA tensor prints: `tensor(..., device='cuda:0')`.
        own, shown = f"{type(self).__name__}(", "tensor("
        if own in text:
            before, _, after = text.partition(own)
            text = before + shown + after.replace("\n" + " " * len(own), "\n" + " " * len(shown))
        return text

    def tolist(self) -> Any:
        return self.cpu().tolist()  # through `.cpu()`, which the modes see: a read that waits for the GPU

    def __format__(self, format_spec: str) -> str:
        if self.dim() == 0:
            return self.item().__format__(format_spec)
        return object.__format__(self, format_spec)

    def __reduce_ex__(self, protocol: Any) -> Any:
        # Saved as a CUDA tensor is saved: its storage tagged `cuda:N` (see `_serialization`).
        values = self._data.detach()
        _saved_locations[values.untyped_storage().data_ptr()] = self._gpu
        if getattr(self, "_is_param", False):
            return (torch._utils._rebuild_parameter, (values, self.requires_grad, {}))
        if self.requires_grad:
            values = values.requires_grad_(True)
        return values.__reduce_ex__(protocol)  # type: ignore[no-untyped-call]


def _emulated(data: Tensor, gpu: int) -> EmulatedTensor:
    return EmulatedTensor(data, gpu)


# Storages of emulated tensors being saved, by address: the GPU their location tag names.
_saved_locations: dict[int, int] = {}
# Storages a checkpoint restored onto an emulated GPU, by address, until their tensor is rebuilt.
_restored_locations: dict[int, int] = {}


# -- CUDA's device rules ----------------------------------------------------------------------


class _DeviceRule(Enum):
    """How an operation treats CPU tensors next to CUDA ones."""

    # Every operand on the one GPU (matmul, convolution, embedding, losses, cat, ...).
    SAME_DEVICE = "same device"
    # Element-wise (TensorIterator) operations: a 0-dim CPU tensor counts as a scalar.
    CPU_SCALARS = "0-dim CPU scalars"
    # Copies between devices, and operations whose CPU operands are sizes or lengths.
    ANY_DEVICE = "any device"
    # Indexing: CPU indices into a GPU tensor are fine, GPU indices into a CPU tensor are not.
    INDEX = "indexing"
    # Assignment through indices: as INDEX, and the values on the GPU unless a 0-dim scalar.
    INDEX_PUT = "indexed assignment"


_ANY_DEVICE_OPS = {
    "_to_copy", "copy_", "_copy_from", "_copy_from_and_resize", "lift_fresh", "lift_fresh_copy",
    "_has_compatible_shallow_copy_type", "_pack_padded_sequence", "_pad_packed_sequence",
    "_pack_padded_sequence_backward", "_ctc_loss", "_ctc_loss_backward", "ctc_loss", "set_",
    "_local_scalar_dense", "equal", "_amp_update_scale_", "record_stream",
}
_CPU_SCALAR_OPS = {"masked_fill", "masked_fill_", "fill_", "fill", "index_fill", "index_fill_", "where"}
_INDEX_PUT_OPS = {"index_put", "index_put_", "_index_put_impl_", "_unsafe_index_put"}
_INDEX_OPS = {"index", "_unsafe_index"}
# Outputs that CUDA leaves on the host, by position: a packed sequence's batch sizes, lengths.
_HOST_OUTPUTS = {"_pack_padded_sequence": 1, "_pad_packed_sequence": 1}
_rules: dict[Any, _DeviceRule] = {}


def _rule_of(func: Any) -> _DeviceRule:
    rule = _rules.get(func)
    if rule is None:
        name = func.__name__.split(".")[0]
        if name in _ANY_DEVICE_OPS:
            rule = _DeviceRule.ANY_DEVICE
        elif name in _INDEX_OPS:
            rule = _DeviceRule.INDEX
        elif name in _INDEX_PUT_OPS:
            rule = _DeviceRule.INDEX_PUT
        elif name in _CPU_SCALAR_OPS or name.startswith("_foreach_") or _is_pointwise(func, name):
            rule = _DeviceRule.CPU_SCALARS
        else:
            rule = _DeviceRule.SAME_DEVICE
        _rules[func] = rule
    return rule


def _is_pointwise(func: Any, name: str) -> bool:
    if torch.Tag.pointwise in func.tags:
        return True
    # An in-place variant (`add_`) takes its out-of-place twin's tags.
    twin = getattr(aten, name[:-1], None) if name.endswith("_") else None
    overload = getattr(twin, func._overloadname, None) if twin is not None else None
    return overload is not None and torch.Tag.pointwise in overload.tags


def _mixed(first: str, second: str, func: Any) -> RuntimeError:
    return RuntimeError(
        "Expected all tensors to be on the same device, but found at least two devices, "
        f"{first} and {second}! (when checking argument for {function_name(func)}; {_EMULATION_NOTE})"
    )


def _check_devices(func: Any, gpu: int, cpu_operands: list[Tensor], args: tuple[Any, ...]) -> None:
    """Raise what CUDA raises for `func` with these CPU operands next to `cuda:gpu` ones."""
    rule = _rule_of(func)
    if rule is _DeviceRule.ANY_DEVICE:
        return
    here = f"cuda:{gpu}"
    if rule is _DeviceRule.INDEX or rule is _DeviceRule.INDEX_PUT:
        indexed = args[0] if args else None
        if isinstance(indexed, Tensor) and type(indexed) is not EmulatedTensor:
            raise RuntimeError(
                "indices should be either on cpu or on the same device as the indexed tensor (cpu) "
                f"({_EMULATION_NOTE})"
            )
        if rule is _DeviceRule.INDEX_PUT and len(args) > 2:
            values = args[2]
            if isinstance(values, Tensor) and type(values) is not EmulatedTensor and values.dim() > 0:
                raise RuntimeError(f"expected device {here} but got device cpu for value tensor ({_EMULATION_NOTE})")
        return
    for operand in cpu_operands:
        if rule is _DeviceRule.SAME_DEVICE or operand.dim() > 0:
            raise _mixed(here, "cpu", func)


# -- dispatch: every operation on an emulated tensor ------------------------------------------


def _wrap(value: Any, gpu: int, originals: dict[int, Tensor]) -> Any:
    kind = type(value)
    if kind is Tensor or (isinstance(value, Tensor) and kind is not EmulatedTensor):
        original = originals.get(id(value))
        return original if original is not None else _emulated(value, gpu)
    if kind is tuple or kind is list:
        return kind(_wrap(item, gpu, originals) for item in value)
    return value


def _dispatch(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Check devices as CUDA does, compute on the CPU values, wrap the results."""
    gpu = -1
    cpu_operands: list[Tensor] = []
    originals: dict[int, Tensor] = {}
    unwrapped: list[Any] = []
    for arg in args:
        kind = type(arg)
        if kind is EmulatedTensor:
            if gpu not in (-1, arg._gpu) and _rule_of(func) is not _DeviceRule.ANY_DEVICE:
                raise _mixed(f"cuda:{gpu}", f"cuda:{arg._gpu}", func)
            gpu = arg._gpu
            originals[id(arg._data)] = arg
            unwrapped.append(arg._data)
        elif kind is list or kind is tuple:
            items = []
            for item in arg:
                if type(item) is EmulatedTensor:
                    if gpu not in (-1, item._gpu) and _rule_of(func) is not _DeviceRule.ANY_DEVICE:
                        raise _mixed(f"cuda:{gpu}", f"cuda:{item._gpu}", func)
                    gpu = item._gpu
                    items.append(item._data)
                else:
                    if isinstance(item, Tensor) and not item.is_meta:
                        cpu_operands.append(item)
                    items.append(item)
            unwrapped.append(items)
        else:
            if isinstance(arg, Tensor) and not arg.is_meta:
                cpu_operands.append(arg)
            unwrapped.append(arg)
    allocates_here = False
    if kwargs:
        kwargs = dict(kwargs)
        for key, value in kwargs.items():
            if type(value) is EmulatedTensor:
                gpu = value._gpu if gpu == -1 else gpu
                originals[id(value._data)] = value
                kwargs[key] = value._data
            elif isinstance(value, Tensor) and key != "out":
                cpu_operands.append(value)
        device = kwargs.get("device")
        if isinstance(device, torch.device):
            if device.type == "meta":
                # An allocation on the emulated GPU: PyTorch's own, or a move (`_to_copy`) there.
                allocates_here = True
                kwargs["device"] = _CPU
                machine = _current_machine()
                gpu = machine.target_index if machine.target_index is not None else (
                    gpu if gpu != -1 else machine.current_index)
            elif device.type == "cpu":
                return func(*unwrapped, **kwargs)  # a copy to the host
    if gpu == -1:
        return func(*unwrapped, **kwargs)
    if cpu_operands and not allocates_here:
        _check_devices(func, gpu, cpu_operands, args)
    result = func(*unwrapped, **kwargs)
    name = func.__name__.split(".")[0]
    if name in _RESHAPES_IN_PLACE and args and type(args[0]) is EmulatedTensor:
        _reshape_wrapper(func, args, kwargs)
    on_host = _HOST_OUTPUTS.get(name)
    if on_host is not None:
        return tuple(part if index == on_host else _wrap(part, gpu, originals) for index, part in enumerate(result))
    return _wrap(result, gpu, originals)


# In-place operations that change a tensor's shape or strides, not only its values.
_RESHAPES_IN_PLACE = {
    "transpose_", "t_", "squeeze_", "unsqueeze_", "swapdims_", "swapaxes_", "as_strided_", "resize_",
    "resize_as_", "_resize_output_",
}


def _reshape_wrapper(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """The wrapper takes the new shape its values took: the op again, on the wrapper's metadata alone."""
    others = [arg._data if type(arg) is EmulatedTensor else arg for arg in args[1:]]
    python = torch._C.DispatchKeySet(torch._C.DispatchKey.Python)
    with torch._C._ExcludeDispatchKeyGuard(python):
        func(args[0], *others, **kwargs)


def _cuda_allocation(func: Any, *args: Any, **kwargs: Any) -> Any:
    """A CUDA allocation no mode saw (made inside a torch function): made on the emulated GPU."""
    device = kwargs.get("device")
    machine = _current_machine()
    index = machine.current_index if not isinstance(device, torch.device) or device.index is None else device.index
    machine.check_ordinal(index)
    result = func(*args, **{**kwargs, "device": _CPU})
    return _wrap(result, index, {})


class _Allocations(TorchDispatchMode):  # type: ignore[no-untyped-call]  # unannotated in torch
    """Operations inside PyTorch: emulated operands, and `meta` allocations made for them."""

    def __torch_dispatch__(
        self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        return _dispatch(func, tuple(args), kwargs or {})


# -- recurrent layers: one host computation, not one dispatch per time step -------------------

_VARIABLE_FUNCTIONS = torch._C._VariableFunctions
_RECURRENT = (_VARIABLE_FUNCTIONS.lstm, _VARIABLE_FUNCTIONS.gru, _VARIABLE_FUNCTIONS.rnn_tanh,
              _VARIABLE_FUNCTIONS.rnn_relu)


def _flat_tensors(value: Any) -> list[Tensor]:
    return list(tensors_in(value))


def _replace_tensors(value: Any, replacements: dict[int, Tensor]) -> Any:
    if isinstance(value, Tensor):
        return replacements.get(id(value), value)
    if isinstance(value, (list, tuple)):
        return type(value)(_replace_tensors(item, replacements) for item in value)
    return value


class _OnHost(torch.autograd.Function):
    """One autograd step that runs a whole PyTorch function on the CPU values of its operands."""

    @staticmethod
    def forward(ctx: Any, func: Any, arguments: tuple[Any, ...], gpu: int, *operands: EmulatedTensor) -> Any:
        host = {id(operand): operand._data.detach().requires_grad_(operand.requires_grad) for operand in operands}
        from torch.utils._python_dispatch import _disable_current_modes

        with torch.enable_grad(), _disable_current_modes():
            outputs = _flat_tensors(func(*_replace_tensors(arguments, host)))
        ctx.host_inputs = [host[id(operand)] for operand in operands]
        ctx.host_outputs = outputs
        ctx.gpu = gpu
        return tuple(_emulated(output.detach(), gpu) for output in outputs)

    @staticmethod
    def backward(ctx: Any, *grads: Tensor) -> Any:
        from torch.utils._python_dispatch import _disable_current_modes

        pairs = [(output, grad) for output, grad in zip(ctx.host_outputs, grads, strict=True)
                 if output.requires_grad and grad is not None]
        wanted = [tensor for tensor in ctx.host_inputs if tensor.requires_grad]
        found: dict[int, Tensor | None] = {}
        if pairs and wanted:
            with _disable_current_modes():
                host_grads = torch.autograd.grad([output for output, _ in pairs],
                                                 wanted, [grad._data if type(grad) is EmulatedTensor else grad
                                                          for _, grad in pairs], allow_unused=True)
            found = {id(tensor): grad for tensor, grad in zip(wanted, host_grads, strict=True)}
        results = []
        for tensor in ctx.host_inputs:
            grad = found.get(id(tensor))
            results.append(None if grad is None else _emulated(grad, ctx.gpu))
        return (None, None, None, *results)


def _recurrent_on_host(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """An RNN, GRU or LSTM layer: PyTorch's own device checks, then the layer on the CPU values.

    Run as one host computation: dispatched step by step, a small layer would spend most of its
    time in the emulation's per-operation checks.
    """
    input_, hidden = args[0], args[1]
    if isinstance(hidden, Tensor) and hidden.dtype == torch.int64:  # packed: (data, batch_sizes, hx, params, ...)
        hidden, params = args[2], args[3]
    else:  # (input, hx, params, ...)
        params = args[2]
    if type(input_) is not EmulatedTensor:
        emulated = [t for t in _flat_tensors((hidden, params)) if type(t) is EmulatedTensor]
        if not emulated:
            return func(*args, **kwargs)
    where = input_.device
    for tensor in _flat_tensors(hidden):
        if tensor.device != where:
            raise RuntimeError(
                "Input and hidden tensors are not at the same device, "
                f"found input tensor at {where} and hidden tensor at {tensor.device}")
    for tensor in _flat_tensors(params):
        if tensor.device != where:
            raise RuntimeError(
                "Input and parameter tensors are not at the same device, "
                f"found input tensor at {where} and parameter tensor at {tensor.device}")
    if type(input_) is not EmulatedTensor:
        return func(*args, **kwargs)
    operands = [t for t in _flat_tensors(args) if type(t) is EmulatedTensor]
    outputs = _OnHost.apply(func, args, input_._gpu, *operands)  # type: ignore[no-untyped-call]
    return tuple(outputs)


# -- device arguments: where the program names CUDA -------------------------------------------


def _as_cuda_message(error: BaseException, gpu: int) -> None:
    """PyTorch's own device checks name the wrapper's `meta`: name the GPU it stands for."""
    if error.args and isinstance(error.args[0], str) and "meta" in error.args[0]:
        message = re.sub(r"\bmeta(:0)?\b", f"cuda:{gpu}", error.args[0])
        message = message.replace("torch.cuda:0", "torch.cuda")  # type names such as MetaFloatType stay
        error.args = (message, *error.args[1:])


_DATA = torch._C.TensorBase.__dict__["data"]
_LEGACY_TYPES = {
    "FloatTensor": torch.float32, "DoubleTensor": torch.float64, "HalfTensor": torch.float16,
    "BFloat16Tensor": torch.bfloat16, "LongTensor": torch.int64, "IntTensor": torch.int32,
    "ShortTensor": torch.int16, "CharTensor": torch.int8, "ByteTensor": torch.uint8, "BoolTensor": torch.bool,
}


class _DeviceArguments(TorchFunctionMode):
    """Torch calls that name a CUDA device: made on the CPU values and wrapped as emulated."""

    def __init__(self, machine: EmulatedMachine) -> None:
        super().__init__()
        self.machine = machine
        self._handlers: dict[Callable[..., Any], Callable[..., Any]] = {
            torch.device: lambda func, args, kwargs: func(*args, **kwargs),
            Tensor.to: self._to,
            Tensor.cuda: self._cuda,
            torch._C._nn._parse_to: self._parse_to,
            Tensor.type: self._type,
            torch.ctc_loss: self._ctc_loss,
            **dict.fromkeys(_RECURRENT, _recurrent_on_host),
            torch.nn.functional.ctc_loss: self._ctc_loss,
            Tensor.numpy: self._numpy,
        }

    # -- moves ------------------------------------------------------------------------------

    def move(self, tensor: Tensor, index: int, **options: Any) -> Tensor:
        """`tensor` on emulated `cuda:index`, a copy as `.to` makes it (autograd follows)."""
        if type(tensor) is EmulatedTensor and tensor._gpu == index and not options.get("copy"):
            dtype = options.get("dtype")
            return tensor if dtype is None or dtype == tensor.dtype else tensor.to(dtype=dtype)
        self.machine.target_index = index
        try:
            moved: Tensor = Tensor.to(tensor, _WRAPPER_DEVICE, **{**options, "copy": True})
        finally:
            self.machine.target_index = None
        return moved

    def _to(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        tensor, rest = args[0], list(args[1:])
        index: int | None = None
        positional: tuple[str, ...] = ("dtype", "non_blocking", "copy")
        if rest and isinstance(rest[0], Tensor):
            positional = ("non_blocking", "copy")
            other = rest.pop(0)  # `.to(other)`: other's device and dtype
            index = other._gpu if type(other) is EmulatedTensor else None
            kwargs = {"dtype": other.dtype, **kwargs}
            if index is None:
                return func(tensor, other.device, *rest, **kwargs)
        elif rest:
            index = self.machine.cuda_index(rest[0], int_is_device=True)
            if index is not None:
                rest.pop(0)
            elif isinstance(rest[0], (str, torch.device)) or rest[0] is None:
                kwargs = {"device": rest.pop(0), **kwargs}
        if "device" in kwargs:
            named = self.machine.cuda_index(kwargs["device"], int_is_device=True)
            if named is not None:
                index = named
                kwargs = {k: v for k, v in kwargs.items() if k != "device"}
        if index is None:
            return func(tensor, *rest, **kwargs)
        options = dict(zip(positional, rest, strict=False)) | kwargs
        options.pop("memory_format", None)
        return self.move(tensor, index, **{k: v for k, v in options.items() if v is not None})

    def _cuda(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        tensor = args[0]
        device = args[1] if len(args) > 1 else kwargs.get("device")
        index = self.machine.current_index if device is None else self.machine.cuda_index(device, int_is_device=True)
        if index is None:
            raise RuntimeError(f"Invalid device, must be cuda device (got {device!r})")
        self.machine.check_ordinal(index)
        return self.move(tensor, index, non_blocking=bool(kwargs.get("non_blocking", False)))

    def _parse_to(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """`Module.to`'s parser: a CUDA device stays (each tensor's `.to` makes it emulated)."""
        positional, kwargs = list(args), dict(kwargs)
        if positional and isinstance(positional[0], int) and not isinstance(positional[0], bool):
            positional[0] = torch.device("cuda", positional[0])
        if isinstance(kwargs.get("device"), int):
            kwargs["device"] = torch.device("cuda", kwargs["device"])
        for value in (positional[0] if positional else None, kwargs.get("device")):
            self.machine.cuda_index(value)  # an ordinal the machine lacks fails here, as on CUDA
        return func(*positional, **kwargs)

    def _type(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        tensor = args[0]
        wanted = args[1] if len(args) > 1 else kwargs.get("dtype")
        if wanted is None:
            if type(tensor) is EmulatedTensor:
                return f"torch.cuda.{func(tensor._data)[len('torch.'):]}"
            return func(*args, **kwargs)
        name = wanted if isinstance(wanted, str) else getattr(wanted, "__module__", "") + "." + wanted.__name__
        if name.startswith("torch.cuda."):
            dtype = _LEGACY_TYPES.get(name.rsplit(".", 1)[-1])
            if dtype is not None:
                return self.move(tensor, self.machine.current_index, dtype=dtype)
        return func(*args, **kwargs)

    def _set_data(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """`param.data = tensor`: the wrapper takes the new shape, and its values the new values."""
        target, value = args[0], args[1]
        func(*args, **kwargs)
        if type(target) is EmulatedTensor and type(value) is EmulatedTensor:
            target._data, target._gpu = value._data, value._gpu
        return None

    def _ctc_loss(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """CUDA's CTC loss takes its lengths on the CPU and divides by them on the GPU."""
        log_probs, arguments = args[0], list(args)
        if type(log_probs) is EmulatedTensor:
            for position in (2, 3):
                if position < len(arguments) and isinstance(arguments[position], Tensor):
                    arguments[position] = self.move(arguments[position], log_probs._gpu)
        return func(*arguments, **kwargs)

    def _numpy(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if type(args[0]) is EmulatedTensor:
            raise _numpy_refused(args[0])
        return func(*args, **kwargs)

    # -- everything else --------------------------------------------------------------------

    def _made_on(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], index: int) -> Any:
        """A call with `device=` a CUDA device: made on the CPU, then placed on the emulated GPU."""
        result = func(*args, **{**kwargs, "device": _CPU})
        if not isinstance(result, Tensor):
            return result
        if result.grad_fn is None:
            # A new leaf (a factory, `torch.tensor`): it stays a leaf.
            placed = _emulated(result.detach(), index)
            return placed.requires_grad_(True) if result.requires_grad else placed
        return self.move(result, index)

    def __torch_function__(
        self, func: Callable[..., Any], types: Any, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        arguments = tuple(args)
        handler = self._handlers.get(func)
        if handler is None and getattr(func, "__self__", None) is _DATA and func.__name__ == "__set__":
            handler = self._set_data
        try:
            if handler is not None:
                return handler(func, arguments, kwargs)
            if "device" in kwargs:
                index = self.machine.cuda_index(kwargs["device"], int_is_device=True)
                if index is not None:
                    return self._made_on(func, arguments, kwargs, index)
            return func(*arguments, **kwargs)
        except RuntimeError as error:
            _as_cuda_message(error, self.machine.current_index)
            raise


# -- torch.cuda on a machine with N GPUs ------------------------------------------------------


class _EmulatedStream:
    """A CUDA stream of the emulated GPU: work is done when it is queued, so always idle."""

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        self.device = torch.device("cuda", 0 if _machine is None else _machine.current_index)
        self.priority = priority
        self.cuda_stream = 0

    def is_capturing(self) -> bool:
        return False

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def wait_stream(self, stream: object) -> None:
        return None

    def wait_event(self, event: object) -> None:
        return None

    def record_event(self, event: Any = None) -> Any:
        return event if event is not None else _EmulatedEvent()

    def __enter__(self) -> _EmulatedStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None


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


class _EmulatedProperties:
    """What `torch.cuda.get_device_properties` describes, for an emulated GPU."""

    name = EMULATED_GPU_NAME
    major, minor = 8, 0
    total_memory = _EMULATED_MEMORY
    multi_processor_count = 108
    is_integrated = False
    is_multi_gpu_board = False
    warp_size = 32


class _LegacyType(type):
    """`torch.cuda.FloatTensor` and its kin: constructors of emulated tensors, and type checks."""

    dtype: torch.dtype
    machine: EmulatedMachine
    arguments: _DeviceArguments

    def __instancecheck__(cls, value: object) -> bool:
        return type(value) is EmulatedTensor and value.dtype == cls.dtype

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        host = getattr(torch, cls.__name__)(*args, **kwargs)
        return cls.arguments.move(host, cls.machine.current_index)


def _patch_cuda_api(patches: Patches, machine: EmulatedMachine, arguments: _DeviceArguments) -> None:
    def no_op(*_args: object, **_kwargs: object) -> None:
        return None

    def initialized(function: Callable[..., Any]) -> Callable[..., Any]:
        """A query that initialises CUDA first, as its CUDA counterpart does."""

        @functools.wraps(function)
        def after_init(*args: Any, **kwargs: Any) -> Any:
            machine.initialize()
            return function(*args, **kwargs)

        return after_init

    def set_device(device: object) -> None:
        index = machine.cuda_index(device, int_is_device=True)
        if index is not None:
            machine.current_index = index

    @contextmanager
    def on_device(device: object) -> Iterator[None]:
        previous = machine.current_index
        set_device(device)
        try:
            yield
        finally:
            machine.current_index = previous

    def rng_state(device: object = "cuda") -> Tensor:
        return torch.get_rng_state()

    cuda = torch.cuda
    for name, value in {
        "is_available": lambda: machine.device_count() > 0,
        "device_count": machine.device_count,
        "is_initialized": lambda: machine.initialized,
        "init": initialized(no_op),
        "_lazy_init": initialized(no_op),
        "current_device": initialized(lambda: machine.current_index),
        "set_device": set_device,
        "device": on_device,
        "get_device_name": initialized(lambda device=None: EMULATED_GPU_NAME),
        "get_device_capability": initialized(lambda device=None: (8, 0)),
        "get_device_properties": initialized(lambda device=None: _EmulatedProperties()),
        "get_arch_list": lambda: ["sm_80"],
        "is_bf16_supported": lambda including_emulation=True: True,
        "synchronize": initialized(no_op),
        "empty_cache": no_op,
        "ipc_collect": no_op,
        "reset_peak_memory_stats": no_op,
        "reset_max_memory_allocated": no_op,
        "reset_max_memory_cached": no_op,
        "memory_allocated": lambda device=None: 0,
        "max_memory_allocated": lambda device=None: 0,
        "memory_reserved": lambda device=None: 0,
        "max_memory_reserved": lambda device=None: 0,
        "memory_cached": lambda device=None: 0,
        "memory_stats": lambda device=None: {},
        "memory_summary": lambda device=None, abbreviated=False: "",
        "mem_get_info": initialized(lambda device=None: (_EMULATED_MEMORY, _EMULATED_MEMORY)),
        "utilization": lambda device=None: 0,
        "manual_seed": no_op,
        "manual_seed_all": no_op,
        "seed": no_op,
        "seed_all": no_op,
        "initial_seed": torch.initial_seed,
        "get_rng_state": rng_state,
        "set_rng_state": lambda new_state, device="cuda": None,
        "get_rng_state_all": lambda: [rng_state() for _ in range(machine.device_count())],
        "set_rng_state_all": lambda new_states: None,
        "Stream": _EmulatedStream,
        "Event": _EmulatedEvent,
        "current_stream": initialized(lambda device=None: _EmulatedStream()),
        "default_stream": initialized(lambda device=None: _EmulatedStream()),
        "stream": lambda stream=None: stream if stream is not None else _EmulatedStream(),
        "is_current_stream_capturing": lambda: False,
    }.items():
        patches.set(cuda, name, value)
    for name, dtype in _LEGACY_TYPES.items():
        namespace = {"dtype": dtype, "machine": machine, "arguments": arguments, "__module__": "torch.cuda"}
        patches.set(cuda, name, _LegacyType(name, (), namespace))
    for name in ("range_push", "range_pop", "mark", "range_start", "range_end"):
        if hasattr(cuda.nvtx, name):
            patches.set(cuda.nvtx, name, lambda *args, **kwargs: 0)
    patches.set(torch.version, "cuda", "12.8")
    # On CUDA, `Module.to` moves parameters in place (an optimizer made before still holds them);
    # a CPU tensor cannot become an emulated one in place, so the two are swapped instead.
    patches.set(torch.__future__, "_swap_module_params_on_conversion", True)
    # cuDNN's RNN path is chosen by `.is_cuda`; the values are on the CPU, where it does not exist.
    patches.set(torch.backends.cudnn, "is_acceptable", lambda tensor: False)
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None:
        for name, value in {
            "is_available": lambda: machine.device_count() > 0,
            "current_accelerator": lambda check_available=False: torch.device("cuda"),
            "device_count": machine.device_count,
            "current_device_index": initialized(lambda: machine.current_index),
            "set_device_index": set_device,
            "current_stream": lambda device=None: _EmulatedStream(),
            "synchronize": no_op,
        }.items():
            if hasattr(accelerator, name):
                patches.set(accelerator, name, value)
    # torch.compile changes how a program runs, never what it computes: run it as written.
    patches.set(torch, "compile", _compile_as_written)

    # Pinned host memory needs a real accelerator; pinning changes no value, so it is skipped.
    # Patched on the class: DataLoader pins in a thread the modes do not see.
    def pin_memory(self: Tensor, device: object = None) -> Tensor:
        if type(self) is EmulatedTensor:
            raise RuntimeError(f"cannot pin '{self.type()}' only dense CPU tensors can be pinned")
        return self

    patches.set(Tensor, "pin_memory", pin_memory)
    patches.set(Tensor, "is_pinned", lambda self, device=None: False)
    # Its stream argument is parsed before any mode sees the call; the emulated GPU has one stream.
    patches.set(Tensor, "record_stream", lambda self, stream: None)


def _compile_as_written(model: Any = None, **options: Any) -> Any:
    if model is None:
        return lambda function: function
    return model


def _patch_data_parallel(patches: Patches, arguments: _DeviceArguments) -> None:
    """DataParallel over emulated GPUs: its own device check stays; one replica does the work.

    On CUDA, `scatter` copies the inputs (even CPU ones) to the GPUs; here they go to the first.
    The wrapper keeps its `module.` prefix, so state_dict bugs surface exactly as on CUDA.
    """
    cls = torch.nn.DataParallel

    def to_gpu(value: Any, index: int) -> Any:
        if isinstance(value, Tensor):
            return arguments.move(value, index)
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            return type(value)(*(to_gpu(item, index) for item in value))
        if isinstance(value, (list, tuple)):
            return type(value)(to_gpu(item, index) for item in value)
        if isinstance(value, dict):
            return type(value)((key, to_gpu(item, index)) for key, item in value.items())
        return value

    def scatter(self: Any, inputs: tuple[Any, ...], kwargs: dict[str, Any] | None, device_ids: Any) -> Any:
        return (to_gpu(tuple(inputs), device_ids[0]),), (to_gpu(dict(kwargs or {}), device_ids[0]),)

    def gather(self: Any, outputs: list[Any], output_device: int) -> Any:
        if output_device == -1:
            return outputs[0]
        return to_gpu(outputs[0], output_device)

    def parallel_apply(self: Any, replicas: list[Any], inputs: Any, kwargs: Any) -> list[Any]:
        return [replicas[0](*inputs[0], **kwargs[0])]

    patches.set(cls, "scatter", scatter)
    patches.set(cls, "replicate", lambda self, module, device_ids: [module])
    patches.set(cls, "parallel_apply", parallel_apply)
    patches.set(cls, "gather", gather)


@contextmanager
def _serialization(patches: Patches, machine: EmulatedMachine) -> Iterator[None]:
    """Checkpoints as a GPU box writes them, loaded as a GPU box loads them.

    An emulated tensor saves its CPU values with the location `cuda:N`. Loading a `cuda:N`
    location (no `map_location`, or one naming CUDA) restores it onto emulated `cuda:N`; with
    `map_location="cpu"` PyTorch's own CPU loader takes it, and the tensor stays on the CPU.
    """

    def tag(storage: Any) -> str | None:
        gpu = _saved_locations.pop(storage.data_ptr(), None) if storage.device.type == "cpu" else None
        return None if gpu is None else f"cuda:{gpu}"

    def restore(storage: Any, location: str) -> Any:
        match = _CUDA_STRING.fullmatch(location)
        if match is None:
            return None
        index = machine.current_index if match.group(1) is None else int(match.group(1))
        machine.check_ordinal(index)
        _restored_locations[storage.data_ptr()] = index
        return storage

    original_rebuild = torch._utils._rebuild_tensor_v2

    def rebuild_tensor_v2(storage: Any, *args: Any, **kwargs: Any) -> Tensor:
        tensor: Tensor = original_rebuild(storage, *args, **kwargs)  # type: ignore[no-untyped-call]
        gpu = _restored_locations.get(tensor.untyped_storage().data_ptr())
        if gpu is None:
            return tensor
        placed = _emulated(tensor.detach(), gpu)
        return placed.requires_grad_(True) if tensor.requires_grad else placed

    # Pickled by name, as PyTorch's own: a checkpoint from the emulated GPU is a plain checkpoint.
    rebuild_tensor_v2.__module__ = "torch._utils"
    rebuild_tensor_v2.__name__ = rebuild_tensor_v2.__qualname__ = "_rebuild_tensor_v2"
    patches.set(torch._utils, "_rebuild_tensor_v2", rebuild_tensor_v2)
    # `weights_only` loading caches the functions it allows: forget them, before and after.
    allowed = torch._weights_only_unpickler._get_allowed_globals
    allowed.cache_clear()
    entry = (_SERIALIZATION_PRIORITY, tag, restore)
    torch.serialization.register_package(_SERIALIZATION_PRIORITY, tag, restore)
    try:
        yield
    finally:
        torch.serialization._package_registry.remove(entry)
        patches.undo()
        allowed.cache_clear()
        _saved_locations.clear()
        _restored_locations.clear()


@contextmanager
def emulated_gpu(device_count: int = 1) -> Iterator[EmulatedMachine]:
    """Run the body as if on a machine with `device_count` CUDA GPUs."""
    global _machine
    machine = EmulatedMachine(device_count)
    arguments = _DeviceArguments(machine)
    patches = Patches()
    previous, _machine = _machine, machine
    with ExitStack() as stack:
        stack.callback(patches.undo)
        stack.callback(lambda: globals().__setitem__("_machine", previous))
        _patch_cuda_api(patches, machine, arguments)
        _patch_data_parallel(patches, arguments)
        stack.enter_context(_serialization(patches, machine))
        stack.enter_context(warnings.catch_warnings())
        warnings.filterwarnings("ignore", message=".*compiled without cuDNN")
        # The CUDA dispatch key, which no real tensor here has: a safety net for allocations.
        allocations = torch.library.Library("_", "IMPL")  # type: ignore[no-untyped-call]
        allocations.fallback(_cuda_allocation, dispatch_key="CUDA")  # type: ignore[no-untyped-call]
        stack.callback(allocations._destroy)
        stack.enter_context(_Allocations())  # type: ignore[no-untyped-call]
        stack.enter_context(arguments)
        # Entered last, so it sees each call before the emulation turns CUDA devices emulated.
        stack.enter_context(host_copy_race_check("emulated GPU", (_EmulatedStream, _EmulatedEvent)))
        yield machine


def gpu_of(tensor: Tensor) -> int | None:
    """The emulated GPU `tensor` is on; None for any other tensor."""
    return tensor._gpu if type(tensor) is EmulatedTensor else None

