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
`torch.cuda` answers as a machine with N GPUs (`verify.cuda_api`). Checkpoints saved from the
emulated GPU record a CUDA location, as a GPU box writes them, and load back onto the emulated
GPU or, with `map_location`, onto the CPU. DataParallel runs a replica per emulated GPU.

Where PyTorch's own C++ checks reject mixed devices (an RNN's input and hidden state), their
message names `meta`; it is rewritten to the CUDA device the emulated tensor stands for.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from enum import Enum
from typing import Any

import torch
import torch._dynamo  # imported before torch.cuda is patched: it indexes torch's functions
from torch._utils import ExceptionWrapper
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.parameter import UninitializedTensorMixin  # type: ignore[attr-defined]  # not in the stubs' __all__
from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack
from torch.utils._device import DeviceContext
from torch.utils._python_dispatch import TorchDispatchMode

from torchdevlint.analysis.brains import torch_ops
from torchdevlint.verify.cuda_api import (
    CUDA_STRING,
    LEGACY_TYPES,
    EmulatedEvent,
    EmulatedMachine,
    EmulatedStream,
    Placement,
    check_generator,
    current_machine,
    machine_in_use,
    patch_cuda_api,
)
from torchdevlint.verify.race import HostCopyRaceMode, Patches, function_name, host_copy_race_check, tensors_in

# What PyTorch's C++ core sees: a device without storage, which autograd runs like the CPU.
_WRAPPER_DEVICE = torch.device("meta")
_CPU = torch.device("cpu")
_EMULATION_NOTE = "raised by torchdevlint's emulated GPU, as CUDA raises it"
_SERIALIZATION_PRIORITY = 0  # ahead of every built-in location tag (cpu is 10, cuda 20)

Tensor = torch.Tensor
aten = torch.ops.aten


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
    def device(self) -> torch.device:  # type: ignore[override]  # torch's attribute, a property here
        return torch.device("cuda", self._gpu)

    @property
    def is_cuda(self) -> bool:  # type: ignore[override]  # torch's attribute, a property here
        return True

    @property
    def is_meta(self) -> bool:  # type: ignore[override]  # torch's attribute, a property here
        return False

    @property
    def is_cpu(self) -> bool:  # type: ignore[override]  # torch's attribute, a property here
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

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]  # torch's attribute, a property here
        text: str = torch._tensor_str._str(self, tensor_contents=tensor_contents)  # type: ignore[no-untyped-call]  # torch leaves this untyped
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
        return values.__reduce_ex__(protocol)  # type: ignore[no-untyped-call]  # torch leaves this untyped


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
# Operations whose mask must be where self is, 0-dim or not.
_MASK_FOLLOWS_SELF = {"masked_fill", "masked_fill_"}
# Operations that make their result on self's device before iterating.
_RESULT_ON_SELFS_DEVICE = {"logical_and", "logical_or", "logical_xor"}
# Overloads that take tensor bounds and check them exactly (`clamp(x, min=t)`: "min is on cpu").
_EXACT_OVERLOADS = {("clamp", "Tensor"), ("clamp_", "Tensor"), ("clip", "Tensor"), ("clip_", "Tensor"),
                    ("clamp_min", "Tensor"), ("clamp_min_", "Tensor"), ("clamp_max", "Tensor"), ("clamp_max_", "Tensor")}
_INDEX_PUT_OPS = {"index_put", "index_put_", "_index_put_impl_", "_unsafe_index_put"}
_INDEX_OPS = {"index", "_unsafe_index"}
# Arguments CUDA wants on the host, by position: a packed sequence's lengths ("'lengths'
# argument should be a 1D CPU int64 tensor"), which the CPU takes from anywhere.
_HOST_ARGUMENTS = {"_pack_padded_sequence": 1}
# ATen's names of the dtypes, as its messages print them.
_SCALAR_TYPE_NAMES = {torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char",
                      torch.uint8: "Byte", torch.bool: "Bool", torch.float32: "Float", torch.float64: "Double",
                      torch.float16: "Half", torch.bfloat16: "BFloat16"}
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
        elif (name, func._overloadname) in _EXACT_OVERLOADS:
            rule = _DeviceRule.SAME_DEVICE
        elif name in _CPU_SCALAR_OPS or name.startswith("_foreach_"):
            rule = _DeviceRule.CPU_SCALARS
        else:
            # What native_functions.yaml says (the brain generated from it): TensorIterator
            # takes 0-dim CPU tensors as scalars; a checked operator wants one device; one the
            # dispatcher does not check, its kernel checks, as pointwise ones iterate.
            check = torch_ops.OPERATORS.get(name)
            if check == "I" or check != "X" and _is_pointwise(func, name):
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
    name = func.__name__.split(".")[0]
    if name in _MASK_FOLLOWS_SELF and len(args) > 1 and isinstance(args[0], Tensor) and isinstance(args[1], Tensor) \
            and (type(args[0]) is EmulatedTensor) is not (type(args[1]) is EmulatedTensor):
        # Even a 0-dim mask (measured on an H200).
        mask, self_ = ("cpu", here) if type(args[0]) is EmulatedTensor else (here, "cpu")
        raise RuntimeError(f"expected self and mask to be on the same device, but got mask on {mask} and self on "
                           f"{self_} ({_EMULATION_NOTE})")
    if name in _RESULT_ON_SELFS_DEVICE and args and isinstance(args[0], Tensor) and type(args[0]) is not EmulatedTensor:
        # `cpu_scalar.logical_and(gpu_tensor)`: the result is made where self is, and the GPU
        # operand does not go there.
        raise _mixed(here, "cpu", func)
    if rule is _DeviceRule.CPU_SCALARS and name not in _CPU_SCALAR_OPS \
            and sum(1 for operand in cpu_operands if operand.dim() == 0) > 1:
        # TensorIterator hands one 0-dim CPU tensor to a GPU kernel as a scalar, not two
        # (`torch.addcmul(cpu0, cpu0, gpu)`, `torch.lerp(cpu0, cpu0, gpu)` on an H200).
        raise RuntimeError(f"Trying to pass too many CPU scalars to non-CPU kernel! ({_EMULATION_NOTE})")
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
                machine = current_machine()
                gpu = machine.target_index if machine.target_index is not None else (
                    gpu if gpu != -1 else machine.current_index)
            elif device.type == "cuda":
                # A CUDA allocation inside a torch function no mode saw (`F.embedding_bag`'s offsets):
                # a CUDA build of torch has kernels for it, so the CUDA key's fallback never runs.
                allocates_here = True
                kwargs["device"] = _CPU
                machine = current_machine()
                gpu = machine.current_index if device.index is None else device.index
                machine.check_ordinal(gpu)
            elif device.type == "cpu":
                return func(*unwrapped, **kwargs)  # a copy to the host
    if gpu == -1:
        return func(*unwrapped, **kwargs)
    name = func.__name__.split(".")[0]
    host_argument = _HOST_ARGUMENTS.get(name)
    if host_argument is not None and len(args) > host_argument and type(args[host_argument]) is EmulatedTensor:
        lengths = args[host_argument]
        raise RuntimeError(f"'lengths' argument should be a 1D CPU int64 tensor, but got {lengths.dim()}D "
                           f"cuda:{lengths._gpu} {_SCALAR_TYPE_NAMES.get(lengths.dtype, lengths.dtype)} tensor "
                           f"({_EMULATION_NOTE})")
    if cpu_operands and not allocates_here:
        _check_devices(func, gpu, cpu_operands, args)
    result = func(*unwrapped, **kwargs)
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
    machine = current_machine()
    index = machine.current_index if not isinstance(device, torch.device) or device.index is None else device.index
    machine.check_ordinal(index)
    result = func(*args, **{**kwargs, "device": _CPU})
    return _wrap(result, index, {})


class _Allocations(TorchDispatchMode):  # type: ignore[no-untyped-call]  # unannotated in torch
    """Operations inside PyTorch: emulated operands, and `meta` allocations made for them."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch.compile runs programs as written on the emulated GPU (`cuda_api`): Dynamo never
        # traces under this mode, and hiding each dispatch from it cost a fifth of a small step.
        return False

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
    outputs = _OnHost.apply(func, args, input_._gpu, *operands)  # type: ignore[no-untyped-call]  # torch leaves this untyped
    return tuple(outputs)


# -- device arguments: where the program names CUDA -------------------------------------------


def _as_cuda_message(error: BaseException, gpu: int) -> None:
    """PyTorch's own device checks name the wrapper's `meta`: name the GPU it stands for."""
    if error.args and isinstance(error.args[0], str) and "meta" in error.args[0]:
        message = re.sub(r"\bmeta(:0)?\b", f"cuda:{gpu}", error.args[0])
        message = message.replace("torch.cuda:0", "torch.cuda")  # type names such as MetaFloatType stay
        error.args = (message, *error.args[1:])


_DATA = torch._C.TensorBase.__dict__["data"]


class _BetweenGpus(torch.autograd.Function):
    """A move from one emulated GPU to another, whose gradient moves back.

    To autograd both sides are `meta`, so its own backward of `.to` would keep the gradient
    where it is, on the wrong GPU.
    """

    @staticmethod
    def forward(ctx: Any, tensor: EmulatedTensor, index: int, options: dict[str, Any], mover: Any) -> Any:
        ctx.source, ctx.dtype, ctx.mover = tensor._gpu, tensor.dtype, mover
        return mover.copy_to(tensor, index, options)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Any:
        return ctx.mover.copy_to(grad, ctx.source, {"dtype": ctx.dtype}), None, None, None


def _default_device_type() -> str:
    """The device type of `torch.set_default_device`, read without allocating on it.

    (`torch.get_default_device` allocates a tensor to learn the index, which a CUDA default
    cannot do from inside the emulation's own mode.)
    """
    for mode in reversed(_get_current_function_mode_stack()):  # type: ignore[no-untyped-call]  # unannotated
        if isinstance(mode, DeviceContext):
            return torch.device(mode.device).type
    context = getattr(getattr(torch, "_GLOBAL_DEVICE_CONTEXT", None), "device_context", None)
    return "cpu" if context is None else torch.device(context.device).type


def _forget_cuda_default_device() -> None:
    if _default_device_type() == "cuda":
        torch.set_default_device(None)


class _DeviceArguments(TorchFunctionMode):
    """Torch calls that name a CUDA device: made on the CPU values and wrapped as emulated."""

    def __init__(self, machine: EmulatedMachine) -> None:
        super().__init__()
        self.machine = machine
        # The read-before-sync check, handed each call first, as the program made it.
        self.race: HostCopyRaceMode | None = None
        self._handlers: dict[Callable[..., Any], Callable[..., Any]] = {
            torch.device: lambda func, args, kwargs: func(*args, **kwargs),
            Tensor.to: self._to,
            Tensor.cuda: self._cuda,
            Tensor.cpu: self._cpu,
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
        if type(tensor) is EmulatedTensor and tensor.requires_grad and torch.is_grad_enabled():
            moved: Tensor = _BetweenGpus.apply(tensor, index, options, self)  # type: ignore[no-untyped-call]  # torch leaves this untyped
            return moved
        return self.copy_to(tensor, index, options)

    def copy_to(self, tensor: Tensor, index: int, options: dict[str, Any]) -> Tensor:
        self.machine.target_index = index
        try:
            moved: Tensor = Tensor.to(tensor, _WRAPPER_DEVICE, **{**options, "copy": True})
        finally:
            self.machine.target_index = None
        return moved

    def gradient_returns(self, moved: Any, source: Tensor) -> None:
        """The gradient of a move from an emulated GPU to the CPU goes back to that GPU.

        Autograd sees `meta` as the source of such a move, so the copy its backward makes would
        otherwise land on the current GPU: the node is told its source while it runs.
        """
        node = getattr(moved, "grad_fn", None)
        if node is None or type(source) is not EmulatedTensor:
            return
        machine, gpu = self.machine, source._gpu

        def before(grad_outputs: Any) -> None:
            machine.target_index = gpu

        def after(grad_inputs: Any, grad_outputs: Any) -> None:
            machine.target_index = None

        node.register_prehook(before)
        node.register_hook(after)

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
                moved = func(tensor, other.device, *rest, **kwargs)
                self.gradient_returns(moved, tensor)
                return moved
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
            moved = func(tensor, *rest, **kwargs)
            self.gradient_returns(moved, tensor)
            return moved
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

    def _cpu(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        moved = func(*args, **kwargs)
        self.gradient_returns(moved, args[0])
        return moved

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
        if isinstance(wanted, torch.dtype):
            return func(*args, **kwargs)  # a cast that stays where the tensor is
        name = wanted if isinstance(wanted, str) else getattr(wanted, "__module__", "") + "." + wanted.__name__
        if name.startswith("torch.cuda."):
            dtype = LEGACY_TYPES.get(name.rsplit(".", 1)[-1])
            if dtype is not None:
                return self.move(tensor, self.machine.current_index, dtype=dtype)
        return func(*args, **kwargs)

    def _set_data(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """`param.data = tensor`: the tensor takes the new values, and with them their device.

        CUDA lets `.data =` move a tensor between the CPU and a GPU (a parameter set from a CPU
        array stays on the CPU, and the model's next call fails). An emulated tensor and a CPU
        one are different kinds to PyTorch's C++ core, so there the two are swapped instead,
        as `Module.to` swaps them; the program's references, an optimizer's included, follow.
        """
        target, value = args[0], args[1]
        if isinstance(value, Tensor) and (type(target) is EmulatedTensor) != (type(value) is EmulatedTensor):
            requires_grad = target.requires_grad
            replacement = value.detach()
            if isinstance(target, torch.nn.Parameter):
                replacement = torch.nn.Parameter(replacement, requires_grad)
            elif requires_grad:
                replacement.requires_grad_(True)
            replacement.__dict__ = {**target.__dict__, **replacement.__dict__}
            torch.utils.swap_tensors(target, replacement)  # type: ignore[no-untyped-call]  # unannotated
            return None
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

    def _drawn_on(self, args: tuple[Any, ...], kwargs: dict[str, Any], index: int | None) -> str:
        """The device type a random call draws on: its tensor's, its `device=`, or the default."""
        if args and isinstance(args[0], Tensor):
            return "cuda" if type(args[0]) is EmulatedTensor else args[0].device.type
        if index is not None:
            return "cuda"
        if "device" in kwargs:
            return torch.device(kwargs["device"]).type
        return _default_device_type()

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
        race = self.race
        if race is not None and race.watches(func):
            return race.observed(func, tuple(args), kwargs or {}, self._on_the_gpu)
        return self._on_the_gpu(func, tuple(args), kwargs or {})

    def _on_the_gpu(self, func: Callable[..., Any], arguments: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        handler = self._handlers.get(func)
        if handler is None and getattr(func, "__self__", None) is _DATA and func.__name__ == "__set__":
            handler = self._set_data
        try:
            if torch.is_autocast_enabled("cuda"):
                cast_to = _autocast_dtype(func)
                if cast_to is not None:
                    arguments, kwargs = _autocast_arguments(arguments, kwargs, cast_to)
            if handler is not None:
                return handler(func, arguments, kwargs)
            index = self.machine.cuda_index(kwargs["device"], int_is_device=True) if "device" in kwargs else None
            if kwargs.get("generator") is not None:
                check_generator(kwargs["generator"], self._drawn_on(arguments, kwargs, index))
            if index is not None:
                return self._made_on(func, arguments, kwargs, index)
            return func(*arguments, **kwargs)
        except RuntimeError as error:
            _as_cuda_message(error, self.machine.current_index)
            raise


# Autocast on the emulated GPU, as CUDA's autocast casts: the calls it runs in the lower
# precision (matrix products, linear layers, convolutions, attention), and those it runs in
# float32 (reductions and losses that need the range). CUDA decides per ATen operator, below
# the Python functions named here; these are the ways models reach those operators.
_F = torch.nn.functional
_AUTOCAST_LOWER = frozenset({
    torch.matmul, Tensor.matmul, Tensor.__matmul__, Tensor.__rmatmul__, torch.mm, Tensor.mm, torch.bmm, Tensor.bmm,
    torch.addmm, Tensor.addmm, torch.baddbmm, Tensor.baddbmm, torch.addbmm, torch.mv, Tensor.mv, torch.addmv,
    torch.addr, torch.chain_matmul, torch.prelu, _F.linear, _F.bilinear, _F.conv1d, _F.conv2d, _F.conv3d,
    _F.conv_transpose1d, _F.conv_transpose2d, _F.conv_transpose3d, _F.prelu, _F.scaled_dot_product_attention,
    # The recurrent layers and cells (an LSTM's output is float16 on an H200).
    *(getattr(torch._VF, name) for name in ("lstm", "gru", "rnn_tanh", "rnn_relu", "lstm_cell", "gru_cell",
                                            "rnn_tanh_cell", "rnn_relu_cell") if hasattr(torch._VF, name)),
})
_AUTOCAST_FLOAT32 = frozenset({
    torch.softmax, Tensor.softmax, _F.softmax, torch.log_softmax, Tensor.log_softmax, _F.log_softmax,
    _F.cross_entropy, _F.nll_loss, _F.mse_loss, _F.l1_loss, _F.smooth_l1_loss, _F.huber_loss, _F.kl_div,
    _F.binary_cross_entropy_with_logits, _F.layer_norm, _F.group_norm, _F.cosine_similarity, _F.softplus,
    torch.exp, Tensor.exp, torch.log, Tensor.log, torch.pow, Tensor.pow, torch.cumsum, Tensor.cumsum,
    torch.logsumexp, Tensor.logsumexp, torch.norm, Tensor.norm, torch.cdist, torch.rsqrt, Tensor.rsqrt,
    # The rest of CUDA's float32 list (a float16 tensor's sum is float32 on an H200).
    torch.sum, Tensor.sum, torch.prod, Tensor.prod, torch.cumprod, Tensor.cumprod, torch.dist, Tensor.dist,
    torch.renorm, Tensor.renorm, torch.acos, Tensor.acos, torch.asin, Tensor.asin, torch.cosh, Tensor.cosh,
    torch.sinh, Tensor.sinh, torch.tan, Tensor.tan, torch.erfinv, Tensor.erfinv, torch.expm1, Tensor.expm1,
    torch.log10, Tensor.log10, torch.log2, Tensor.log2, torch.log1p, Tensor.log1p, torch.reciprocal,
    Tensor.reciprocal, Tensor.__pow__, Tensor.__rpow__, Tensor.__rtruediv__, _F.normalize, _F.softmin, torch.pdist,
    _F.pdist, _F.poisson_nll_loss, _F.cosine_embedding_loss, _F.hinge_embedding_loss, _F.margin_ranking_loss,
    _F.multilabel_margin_loss, _F.multi_margin_loss, _F.soft_margin_loss, _F.triplet_margin_loss,
})


def _autocast_dtype(func: Callable[..., Any]) -> torch.dtype | None:
    if func in _AUTOCAST_LOWER:
        return torch.get_autocast_dtype("cuda")
    if func in _AUTOCAST_FLOAT32:
        return torch.float32
    return None


def _autocast_arguments(arguments: tuple[Any, ...], kwargs: dict[str, Any],
                        dtype: torch.dtype) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The emulated floating tensors among the arguments, cast as autocast casts them (a cast
    autograd records, so gradients return in the parameters' own dtype)."""
    def cast(value: Any) -> Any:
        if type(value) is EmulatedTensor and value.is_floating_point() and value.dtype != dtype \
                and value.dtype != torch.float64:
            return value.to(dtype)
        if type(value) is list or type(value) is tuple:
            return type(value)(cast(item) for item in value)
        return value

    return tuple(cast(argument) for argument in arguments), {key: cast(value) for key, value in kwargs.items()}


def _patch_data_parallel(patches: Patches, machine: EmulatedMachine, arguments: _DeviceArguments) -> None:
    """DataParallel over emulated GPUs, as CUDA runs it: a replica per GPU, each on its slice.

    `scatter` splits each input tensor along the batch dimension and copies the slices (CPU
    ones too) to the GPUs; each replica runs with its GPU current, so `.cuda()` and
    `device="cuda"` inside `forward` land there; `gather` concatenates the outputs on the output
    device (0-dim ones become a vector). A replica computes with copies of the module's
    parameters and buffers on its GPU, made by `.to`, so gradients reach the module's own; a
    plain tensor attribute is not copied, as CUDA's `replicate` does not copy it, and stays on
    the first GPU. As on CUDA, every replica (the first GPU's too) holds its copies as plain
    attributes, not parameters: inside its `forward`, `self.parameters()` yields nothing, and
    `next(self.parameters())` raises StopIteration. One GPU in `device_ids` runs the module
    itself. The wrapper keeps its `module.` prefix, so state_dict bugs surface as on CUDA.
    """
    cls = torch.nn.DataParallel
    move = arguments.move
    # ids of the modules of the replicas running now, whose parameters replication turned
    # into plain attributes.
    replica_modules: set[int] = set()
    named_parameters = torch.nn.Module.named_parameters

    def replica_named_parameters(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        if id(self) in replica_modules:
            return iter(())
        return named_parameters(self, *args, **kwargs)

    def scatter_map(value: Any, devices: list[int], dim: int) -> list[Any]:
        """`value` as each GPU gets it: tensors split along `dim`, containers item by item."""
        if isinstance(value, Tensor):
            return [move(chunk, device) for chunk, device in zip(value.chunk(len(devices), dim), devices, strict=False)]
        if not isinstance(value, (tuple, list, dict)) or not value:
            return [value for _ in devices]
        parts = value.items() if isinstance(value, dict) else value
        # As many GPUs as the shortest split reaches, as CUDA's scatter does.
        per_gpu = list(zip(*(scatter_map(part, devices, dim) for part in parts), strict=False))
        if isinstance(value, dict):
            return [type(value)(items) for items in per_gpu]
        if hasattr(value, "_fields"):
            return [type(value)(*items) for items in per_gpu]
        if isinstance(value, list):
            return [list(items) for items in per_gpu]
        return per_gpu

    def scatter(self: Any, inputs: tuple[Any, ...], kwargs: dict[str, Any] | None, device_ids: Any) -> Any:
        devices = [int(index) for index in device_ids]
        positional = scatter_map(tuple(inputs), devices, self.dim) if inputs else []
        keywords = scatter_map(dict(kwargs), devices, self.dim) if kwargs else []
        positional += [() for _ in range(len(keywords) - len(positional))]
        keywords += [{} for _ in range(len(positional) - len(keywords))]
        return tuple(positional), tuple(keywords)

    def replicate(self: Any, module: torch.nn.Module, device_ids: Any) -> list[Any]:
        def replica_on(device: int) -> Callable[..., Any]:
            def run(*args: Any, **kwargs: Any) -> Any:
                named = [*module.named_parameters(remove_duplicate=False), *module.named_buffers(remove_duplicate=False)]
                copies = {name: move(tensor, device) for name, tensor in named}
                modules = {id(inner) for inner in module.modules()}

                def enter(_module: Any, _inputs: Any) -> None:
                    replica_modules.update(modules)  # from here on, the copies are in place

                entered = module.register_forward_pre_hook(enter, prepend=True)
                try:
                    return torch.func.functional_call(module, copies, args, kwargs)
                finally:
                    entered.remove()
                    replica_modules.difference_update(modules)

            return run

        return [replica_on(int(device)) for device in device_ids]

    def parallel_apply(self: Any, replicas: list[Any], inputs: Any, kwargs: Any) -> list[Any]:
        outputs = []
        previous = machine.current_index
        try:
            for index, (replica, device, args, keywords) in enumerate(
                    zip(replicas, self.device_ids, inputs, kwargs, strict=False)):
                machine.current_index = int(device)
                try:
                    outputs.append(replica(*args, **keywords))
                except Exception:  # noqa: BLE001  # every error, as CUDA's parallel_apply catches it
                    # Raised again in the caller's thread, in CUDA's words ("Caught
                    # StopIteration in replica 0 on device 0.", the replica's traceback after).
                    ExceptionWrapper(where=f"in replica {index} on device {int(device)}").reraise()  # type: ignore[no-untyped-call]  # torch._utils is untyped
        finally:
            machine.current_index = previous
        return outputs

    def gather_map(outputs: list[Any], target: int, dim: int) -> Any:
        first = outputs[0]
        if isinstance(first, Tensor):
            if all(output.dim() == 0 for output in outputs):
                warnings.warn(
                    "Was asked to gather along dimension 0, but all input tensors were scalars; "
                    "will instead unsqueeze and return a vector.", stacklevel=2)
                outputs, dim = [output.view(1) for output in outputs], 0
            placed = [output.cpu() if target == -1 else move(output, target) for output in outputs]
            return torch.cat(placed, dim)
        if first is None:
            return None
        if isinstance(first, dict):
            return type(first)((key, gather_map([output[key] for output in outputs], target, dim)) for key in first)
        if isinstance(first, tuple) and hasattr(first, "_fields"):
            named: Any = type(first)
            return named._make(gather_map(list(items), target, dim) for items in zip(*outputs, strict=False))
        return type(first)(gather_map(list(items), target, dim) for items in zip(*outputs, strict=False))

    def gather(self: Any, outputs: list[Any], output_device: int) -> Any:
        return gather_map(outputs, output_device, self.dim)

    patches.set(cls, "scatter", scatter)
    patches.set(cls, "replicate", replicate)
    patches.set(torch.nn.Module, "named_parameters", replica_named_parameters)
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
        match = CUDA_STRING.fullmatch(location)
        if match is None:
            return None
        index = machine.current_index if match.group(1) is None else int(match.group(1))
        machine.check_ordinal(index)
        _restored_locations[storage.data_ptr()] = index
        return storage

    original_rebuild = torch._utils._rebuild_tensor_v2

    def rebuild_tensor_v2(storage: Any, *args: Any, **kwargs: Any) -> Tensor:
        tensor: Tensor = original_rebuild(storage, *args, **kwargs)  # type: ignore[no-untyped-call]  # torch leaves this untyped
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


def _patch_lazy_modules(patches: Patches) -> None:
    """`nn.LazyLinear(4).cuda()`: on CUDA the parameters it has not made yet are made there
    once the first input shows their shape. Here a lazy module remembers the emulated GPU it
    was sent to, leaves what has no data where it is, and moves what it makes on its first
    input there."""

    def lazy_apply(self: Any, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> Any:
        if not self.has_uninitialized_params():
            return torch.nn.Module._apply(self, fn, recurse)  # type: ignore[no-untyped-call]  # torch leaves it untyped
        sent_to = gpu_of(fn(torch.empty(0)))
        self.__dict__["_emulated_gpu"] = sent_to
        held = {name: tensor for name, tensor in self._parameters.items() if isinstance(tensor, UninitializedTensorMixin)}
        held_buffers = {name: tensor for name, tensor in self._buffers.items()
                        if isinstance(tensor, UninitializedTensorMixin)}
        self._parameters.update(dict.fromkeys(held))
        self._buffers.update(dict.fromkeys(held_buffers))
        try:
            return torch.nn.Module._apply(self, fn, recurse)  # type: ignore[no-untyped-call]  # torch leaves it untyped
        finally:
            self._parameters.update(held)
            self._buffers.update(held_buffers)

    infer = LazyModuleMixin._infer_parameters

    def infer_then_move(self: Any, module: Any, args: Any, kwargs: Any = None) -> None:
        infer(self, module, args, kwargs)
        index = module.__dict__.pop("_emulated_gpu", None)
        if index is not None:  # made now (the module has become a `Linear`, say): moved there
            module._apply(lambda tensor: tensor.cuda(index))

    patches.set(LazyModuleMixin, "_apply", lazy_apply)
    patches.set(LazyModuleMixin, "_infer_parameters", infer_then_move)


@contextmanager
def emulated_gpu(device_count: int = 1) -> Iterator[EmulatedMachine]:
    """Run the body as if on a machine with `device_count` CUDA GPUs."""
    machine = EmulatedMachine(device_count)
    arguments = _DeviceArguments(machine)
    patches = Patches()
    with ExitStack() as stack:
        stack.callback(patches.undo)
        # A program's `set_default_device("cuda")` or CUDA default tensor type ends with the machine.
        stack.callback(torch.set_default_dtype, torch.get_default_dtype())
        stack.callback(_forget_cuda_default_device)
        stack.enter_context(machine_in_use(machine))
        patch_cuda_api(patches, machine, Placement(gpu_of, arguments.move))
        _patch_data_parallel(patches, machine, arguments)
        if torch.distributed.is_available():
            from torchdevlint.verify.distributed import patch_distributed

            patch_distributed(patches, machine, gpu_of, host_values)
        _patch_lazy_modules(patches)
        stack.enter_context(_serialization(patches, machine))
        stack.enter_context(warnings.catch_warnings())
        warnings.filterwarnings("ignore", message=".*compiled without cuDNN")
        # The CUDA dispatch key, which no real tensor here has: a safety net for allocations.
        allocations = torch.library.Library("_", "IMPL")  # type: ignore[no-untyped-call]  # torch leaves this untyped
        allocations.fallback(_cuda_allocation, dispatch_key="CUDA")  # type: ignore[no-untyped-call]  # torch leaves this untyped
        stack.callback(allocations._destroy)
        stack.enter_context(_Allocations())  # type: ignore[no-untyped-call]  # torch leaves this untyped
        stack.enter_context(arguments)
        # Handed each call before the emulation turns CUDA devices emulated.
        race = stack.enter_context(host_copy_race_check("emulated GPU", (EmulatedStream, EmulatedEvent), as_mode=False))
        race.parse_to = lambda *args, **kwargs: arguments._parse_to(torch._C._nn._parse_to, args, kwargs)
        arguments.race = race
        stack.callback(setattr, arguments, "race", None)
        yield machine


def host_values(tensor: Tensor) -> Tensor:
    """The CPU tensor that holds an emulated tensor's values (the same memory); any other tensor itself."""
    return tensor._data if type(tensor) is EmulatedTensor else tensor


def gpu_of(tensor: Tensor) -> int | None:
    """The emulated GPU `tensor` is on; None for any other tensor."""
    return tensor._gpu if type(tensor) is EmulatedTensor else None

