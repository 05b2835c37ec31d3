"""`torch.cuda` as a machine with N GPUs answers it: the emulated GPU's side of the CUDA API.

Imported only inside a verify child process: it imports torch.

`EmulatedMachine` is what the program can learn about the GPUs: how many (`CUDA_VISIBLE_DEVICES`
read when CUDA initialises, as CUDA reads it), which one is current, whether CUDA has started.
`patch_cuda_api` makes `torch.cuda`, `torch.accelerator` and the legacy `torch.cuda.FloatTensor`
types answer for it: streams and events (work is done when queued), RNG state and generators,
memory queries, device properties. It knows tensors only through the two functions the
emulation gives it (`Placement`): where a tensor is, and how to put one on an emulated GPU.
"""

from __future__ import annotations

import functools
import os
import re
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from torchdevlint.verify.race import Patches

Tensor = torch.Tensor
_CPU = torch.device("cpu")

EMULATED_GPU_NAME = "torchdevlint emulated GPU"
CUDA_STRING = re.compile(r"cuda(?::(\d+))?")
_EMULATED_MEMORY = 80 * 1024**3
_NO_GPUS = "No CUDA GPUs are available"
BAD_FORK = (
    "Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, "
    "you must use the 'spawn' start method"
)


@dataclass(frozen=True)
class Placement:
    """The emulation's two answers about tensors, which the CUDA API needs."""

    # The emulated GPU a tensor is on; None for a tensor on the CPU.
    gpu_of: Callable[[Tensor], int | None]
    # The tensor, moved to an emulated GPU (a copy, as `.to` makes it).
    place: Callable[[Tensor, int], Tensor]


def _mark_forked(machine: EmulatedMachine | None) -> None:
    if machine is not None:
        machine.forked()


# -- the machine ------------------------------------------------------------------------------


class EmulatedMachine:
    """The GPUs the program sees: how many, which one is current, whether CUDA is initialised."""

    def __init__(self, physical_gpus: int) -> None:
        self.physical_gpus = physical_gpus
        self.current_index = 0
        self._visible: int | None = None  # fixed when CUDA initialises, as CUDA fixes it
        # The GPU a move under way targets (`.to("cuda:1")`), for the allocation it causes.
        self.target_index: int | None = None
        # A process forked after CUDA started (a DataLoader worker, say) cannot start it again.
        self._forked_after_start = False
        # Weakly: a verify child makes one machine, but tests make many in one process.
        machine = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: _mark_forked(machine()))

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
        if self._forked_after_start:
            raise RuntimeError(BAD_FORK)
        if self._visible is None:
            self._visible = self._visible_now()
        if self._visible == 0:
            raise RuntimeError(_NO_GPUS)

    def started_afresh(self) -> None:
        """This process stands for a new interpreter (a rank `mp.spawn` started): CUDA not yet started."""
        self._visible = None
        self.current_index = 0
        self.target_index = None
        self._forked_after_start = False

    def forked(self) -> None:
        """This process was just forked from the one that ran the machine."""
        self._forked_after_start = self.initialized

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
            match = CUDA_STRING.fullmatch(value.strip())
            if match:
                index = self.current_index if match.group(1) is None else int(match.group(1))
        elif int_is_device and isinstance(value, int) and not isinstance(value, bool):
            index = value
        if index is not None:
            self.check_ordinal(index)
        return index


# The machines entered, innermost last.
_machines: list[EmulatedMachine] = []


def current_machine() -> EmulatedMachine:
    if not _machines:
        raise RuntimeError("an emulated CUDA tensor was used outside the emulated GPU")
    return _machines[-1]


@contextmanager
def machine_in_use(machine: EmulatedMachine) -> Iterator[None]:
    """`machine` is the one emulated tensors and CUDA objects made in the body belong to."""
    _machines.append(machine)
    try:
        yield
    finally:
        _machines.remove(machine)


LEGACY_TYPES = {
    "FloatTensor": torch.float32, "DoubleTensor": torch.float64, "HalfTensor": torch.float16,
    "BFloat16Tensor": torch.bfloat16, "LongTensor": torch.int64, "IntTensor": torch.int32,
    "ShortTensor": torch.int16, "CharTensor": torch.int8, "ByteTensor": torch.uint8, "BoolTensor": torch.bool,
}

# -- torch.cuda on a machine with N GPUs ------------------------------------------------------


class EmulatedStream:
    """A CUDA stream of the emulated GPU: work is done when it is queued, so always idle."""

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        self.device = torch.device("cuda", _machines[-1].current_index if _machines else 0)
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
        return event if event is not None else EmulatedEvent()

    def __enter__(self) -> EmulatedStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None


class EmulatedEvent:
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


_Generator = torch.Generator  # PyTorch's own, kept: the name in `torch` is patched


class EmulatedGenerator(_Generator):
    """A random number generator of an emulated GPU: a CPU generator that names `cuda:N`.

    The emulated GPU draws its random values on the CPU, so a CPU generator does the drawing;
    what CUDA checks is the device a generator names.
    """

    _gpu: int

    @property
    def device(self) -> torch.device:  # type: ignore[override]  # torch's attribute, a property here
        return torch.device("cuda", self._gpu)


class _GeneratorType(type):
    """`torch.Generator` on the emulated machine: `device="cuda"` makes an `EmulatedGenerator`."""

    machine: EmulatedMachine

    def __instancecheck__(cls, value: object) -> bool:
        return isinstance(value, _Generator)

    def __subclasscheck__(cls, subclass: type) -> bool:
        return issubclass(subclass, _Generator)

    def __call__(cls, device: Any = "cpu") -> _Generator:
        index = cls.machine.cuda_index(device, int_is_device=True)
        if index is None:
            return _Generator(device)
        generator = EmulatedGenerator()
        generator._gpu = index
        return generator


def check_generator(generator: object, made_on: str) -> None:
    """Raise what PyTorch raises for a generator of another device type than the tensor drawn."""
    named = "cuda" if isinstance(generator, EmulatedGenerator) else getattr(generator, "device", _CPU).type
    if named != made_on:
        raise RuntimeError(f"Expected a '{made_on}' device type for generator but found '{named}'")


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
    placement: Placement

    def __instancecheck__(cls, value: object) -> bool:
        return isinstance(value, Tensor) and cls.placement.gpu_of(value) is not None and value.dtype == cls.dtype

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        host = getattr(torch, cls.__name__)(*args, **kwargs)
        return cls.placement.place(host, cls.machine.current_index)


def patch_cuda_api(patches: Patches, machine: EmulatedMachine, placement: Placement) -> None:
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
        "Stream": EmulatedStream,
        "Event": EmulatedEvent,
        "current_stream": initialized(lambda device=None: EmulatedStream()),
        "default_stream": initialized(lambda device=None: EmulatedStream()),
        "stream": lambda stream=None: stream if stream is not None else EmulatedStream(),
        "is_current_stream_capturing": lambda: False,
    }.items():
        patches.set(cuda, name, value)
    for name, dtype in LEGACY_TYPES.items():
        namespace = {"dtype": dtype, "machine": machine, "placement": placement, "__module__": "torch.cuda"}
        patches.set(cuda, name, _LegacyType(name, (), namespace))
    patches.set(torch, "set_default_tensor_type", _default_tensor_type_setter(torch.set_default_tensor_type))
    patches.set(torch, "Generator", _GeneratorType("Generator", (), {"machine": machine, "__module__": "torch"}))
    for name in ("range_push", "range_pop", "mark", "range_start", "range_end"):
        if hasattr(cuda.nvtx, name):
            patches.set(cuda.nvtx, name, lambda *args, **kwargs: 0)
    if torch.version.cuda is None:
        # A CPU-only build answers as a CUDA build would. A CUDA build keeps its own version:
        # torchvision refuses to import where it differs from the one it was built for.
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
            "current_stream": lambda device=None: EmulatedStream(),
            "synchronize": no_op,
        }.items():
            if hasattr(accelerator, name):
                patches.set(accelerator, name, value)
    # torch.compile changes how a program runs, never what it computes: run it as written.
    patches.set(torch, "compile", _compile_as_written)

    # Pinned host memory needs a real accelerator; pinning changes no value, so it is skipped.
    # Patched on the class: DataLoader pins in a thread the modes do not see.
    def pin_memory(self: Tensor, device: object = None) -> Tensor:
        if placement.gpu_of(self) is not None:
            raise RuntimeError(f"cannot pin '{self.type()}' only dense CPU tensors can be pinned")
        return self

    patches.set(Tensor, "pin_memory", pin_memory)
    patches.set(Tensor, "is_pinned", lambda self, device=None: False)
    # Its stream argument is parsed before any mode sees the call; the emulated GPU has one stream.
    patches.set(Tensor, "record_stream", lambda self, stream: None)


def _default_tensor_type_setter(original: Callable[[Any], None]) -> Callable[[Any], None]:
    """`torch.set_default_tensor_type(torch.cuda.FloatTensor)`: new tensors on the GPU, as on CUDA.

    A CPU-only build refuses CUDA types there; on CUDA, factories then make GPU tensors of that
    dtype, which is PyTorch's default device and dtype together.
    """

    def set_default_tensor_type(kind: Any) -> None:
        name = kind if isinstance(kind, str) else f"{getattr(kind, '__module__', '')}.{getattr(kind, '__name__', '')}"
        if not name.startswith("torch.cuda."):
            torch.set_default_device(None)
            original(kind)
            return
        dtype = LEGACY_TYPES.get(name.rsplit(".", 1)[-1])
        if dtype is None or not dtype.is_floating_point:
            raise TypeError("invalid type object: only floating-point types are supported as the default type")
        torch.set_default_dtype(dtype)
        torch.set_default_device("cuda")

    return set_default_tensor_type


def _compile_as_written(model: Any = None, **options: Any) -> Any:
    if model is None:
        return lambda function: function
    return model


