"""The abstract values of the device-flow model: what a value is, and where it lives.

A `Value` is a join-semilattice element. Kinds say what the value may be (a tensor, a
module, a device …); places say where its data may be (the host, a device named in the
code, the device of the module whose method we are in). Anything the model cannot show is
unknown, and unknown absorbs every join: a rule only speaks on evidence.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import Enum

from torchdevlint.analysis.devices import ACCELERATOR_TYPES


class Kind(Enum):
    # Members are singletons: hashing them by identity (C code) rather than by name (Enum's
    # Python `__hash__`) is a tenth of an editor keystroke's analysis, which hashes kinds in
    # every set test.
    __hash__ = object.__hash__

    TENSOR = "tensor"
    # What calling a module returns: a tensor or a structure of tensors, where the module is.
    MODEL_OUTPUT = "model output"
    MODULE = "module"
    WRAPPED_MODULE = "wrapped module"
    DEVICE = "device"
    DATALOADER = "dataloader"
    DATASET = "dataset"
    # A tuple, list or dict (its elements may be known, see `Value.items`).
    CONTAINER = "container"
    # A Python number, string, None …: known, and never device data.
    SCALAR = "scalar"
    # An in-memory byte stream (`io.BytesIO`): bytes that never left this machine.
    MEMORY_BUFFER = "memory buffer"
    # A function, class or imported module (see `Value.reference`).
    REFERENCE = "reference"
    # Known, but nothing the rules care about.
    OTHER = "other"
    UNKNOWN = "unknown"


class PlaceKind(Enum):
    __hash__ = object.__hash__  # see Kind

    HOST = "host"
    # A device the code names: a literal, a device variable, `x.device`.
    DEVICE = "device"
    # Inside a Module's methods: wherever the module's parameters are (its inputs too).
    MODULE_DEVICE = "module device"
    # A module without parameters or buffers (a loss, an activation): it runs where its inputs are.
    ANYWHERE = "anywhere"


@dataclass(frozen=True)
class Place:
    kind: PlaceKind
    # How the code names the device (`device`, `"cuda"`, `self.device`); empty for the others.
    symbol: str = ""
    # Device types it may be (`{"cuda", "cpu"}` for a fallback); None when unknown.
    types: frozenset[str] | None = None
    # Which device of its type, where the code shows it: `"cuda:1"`, `.cuda(1)`, or `"cuda"`
    # where the current device is known (see `CURRENT_CUDA_DEVICE`); None otherwise.
    index: int | None = None

    @property
    def may_be_accelerator(self) -> bool:
        if self.kind is PlaceKind.MODULE_DEVICE:
            return True
        if self.kind is not PlaceKind.DEVICE:
            return False
        return self.types is None or bool(self.types & ACCELERATOR_TYPES)

    def describe(self) -> str:
        if self.kind is PlaceKind.DEVICE:
            types = "?" if self.types is None else "|".join(sorted(self.types))
            index = "" if self.index is None else f":{self.index}"
            return f"device {self.symbol} ({types}{index})"
        return str(self.kind.value)


HOST_PLACE = Place(PlaceKind.HOST)
MODULE_DEVICE_PLACE = Place(PlaceKind.MODULE_DEVICE)
ANYWHERE_PLACE = Place(PlaceKind.ANYWHERE)


class Off(Enum):
    """A GPU setting switched off, where the code does not say how: False, None, 0 or -1, no
    device ids. As a test it is false; `is None`, `< 0`, `== -1` hold; `>= 0` does not."""

    __hash__ = object.__hash__  # see Kind

    OFF = "off"


SWITCHED_OFF = Off.OFF
# What a value is when the program runs in its CPU mode (see `Value.in_cpu_mode`).
ModeConstant = bool | int | str | Off


class Wrapping(Enum):
    __hash__ = object.__hash__  # see Kind

    NO = "no"
    MAYBE = "maybe"
    YES = "yes"


@dataclass(frozen=True)
class WrappingTest:
    """The test under which a model was wrapped on one side and left bare on the other."""

    # Its text without spaces, outer `not`s taken off.
    text: str
    # Whether the text holding meant wrapped.
    holds: bool
    # Whether the program's CPU mode took the bare side (False: it took the wrapped side, or
    # the test is not about the device: `if torch.cuda.device_count() > 1:` decides on GPU
    # machines too).
    bare_in_cpu_mode: bool

    def describe(self) -> str:
        return f"{'' if self.holds else 'not '}{self.text}"


@dataclass(frozen=True)
class Reference:
    """What a name bound to a definition or an import stands for."""

    # `torch.nn.Linear` for imports and their attributes; `<file>.name` for same-file definitions.
    qualified: str
    # For same-file functions and classes: the id of the FunctionDef/ClassDef node.
    definition: int | None = None


_JUST_TENSOR = frozenset({Kind.TENSOR})
_TENSOR_LIKE = frozenset({Kind.TENSOR, Kind.MODEL_OUTPUT})
_JUST_UNKNOWN = frozenset({Kind.UNKNOWN})
_JUST_SCALAR = frozenset({Kind.SCALAR})
_SCALAR_OR_TENSOR = frozenset({Kind.SCALAR, Kind.TENSOR})
_MODULE_LIKE = frozenset({Kind.MODULE, Kind.WRAPPED_MODULE})
_JUST_DEVICE = frozenset({Kind.DEVICE})
_JUST_MODULE = frozenset({Kind.MODULE})
_JUST_HOST = frozenset({HOST_PLACE})


@dataclass(frozen=True)
class Value:
    kinds: frozenset[Kind]
    # None: placement unknown (or meaningless: a number has none).
    places: frozenset[Place] | None = None
    # Ids of the tensor factories whose host result this value holds (for reports and fixes).
    origins: frozenset[int] = frozenset()
    # A tensor known to have no dimensions (mixes with data on any device in arithmetic).
    zero_dim: bool = False
    # Known elements of a tuple/list, or keys of a dict: ((key, value), ...), keys as text.
    items: tuple[tuple[str, Value], ...] | None = None
    # For a device value: the place it names. For a DataParallel wrapper: the device of its
    # `device_ids[0]`, where its module must be. For a module: see `places`.
    device: Place | None = None
    reference: Reference | None = None
    # For an instance of a same-file class: the id of its ClassDef.
    instance_of: int | None = None
    # A tensor that may require grad (a model's output computed with autograd on).
    grad: bool = False
    # Ids of the calls whose result this value is or contains, where rules ask where a value
    # came from: a wrapped model's `state_dict()`, `torch.load(...)`, a `DataLoader(...)`.
    # Kept through containers, item reads and writes, and same-file calls.
    holds: frozenset[int] = frozenset()
    # What this value is when the program runs in its CPU mode: no GPU, and every setting that
    # chooses the device (`use_cuda`, `args.no_cuda`, `--device`) choosing the CPU. `False` for
    # `torch.cuda.is_available()`, `"cpu"` for a device with a CPU fallback; None when unknown.
    in_cpu_mode: ModeConstant | None = None
    # A float64 tensor (or NumPy array) on every path: `dtype=torch.float64`, `.double()`,
    # `np.random.rand(...)` and what `torch.from_numpy` makes of it.
    float64: bool = False
    # For a model wrapped on some paths only, the test that chose (`if args.cuda: model =
    # nn.DataParallel(model)`). A later test of the same text, in this function or another,
    # takes the same side.
    wrapped_when: WrappingTest | None = None

    # ---- construction -------------------------------------------------------------

    @staticmethod
    def of(*kinds: Kind, places: Iterable[Place] | None = None) -> Value:
        return Value(frozenset(kinds), None if places is None else frozenset(places))

    def with_places(self, places: Iterable[Place] | None) -> Value:
        return replace(self, places=None if places is None else frozenset(places), origins=frozenset())

    # ---- lattice --------------------------------------------------------------------

    def join(self, other: Value) -> Value:
        if self is other or self == other:
            return self
        # An empty list literal holds nothing to place: joined with a list of tensors (one
        # that a loop appended to), the elements are where those tensors are.
        if self.items == () and self.kinds == other.kinds == {Kind.CONTAINER} and other.items is None:
            return other
        if other.items == () and self.kinds == other.kinds == {Kind.CONTAINER} and self.items is None:
            return self
        kinds = self.kinds | other.kinds
        places = None if self.places is None or other.places is None else self.places | other.places
        if places is None and kinds == _SCALAR_OR_TENSOR:
            # A number has no place: `correct = 0` joined with the tensor a loop added to it
            # is that tensor's place wherever it is a tensor (see `number_or_tensor`).
            places = self.places if other.kinds == _JUST_SCALAR else other.places
        return Value(
            kinds,
            places,
            self.origins | other.origins,
            self.zero_dim and other.zero_dim,
            _join_items(self.items, other.items),
            self.device if self.device == other.device else None,
            self.reference if self.reference == other.reference else None,
            self.instance_of if self.instance_of == other.instance_of else None,
            self.grad or other.grad,
            self.holds | other.holds,
            self.in_cpu_mode if self.in_cpu_mode == other.in_cpu_mode else None,
            self.float64 and other.float64,
            _join_wrapping_tests(self, other),
        )

    # ---- questions ------------------------------------------------------------------

    @property
    def is_known(self) -> bool:
        return bool(self.kinds) and Kind.UNKNOWN not in self.kinds

    def only(self, *kinds: Kind) -> bool:
        return bool(self.kinds) and self.kinds <= set(kinds)

    # The sets below are module constants: these questions are asked at every step of an
    # interpretation, and building a set of enum members each time was a tenth of its cost.

    @property
    def is_tensor(self) -> bool:
        return self.kinds == _JUST_TENSOR

    @property
    def is_tensor_like(self) -> bool:
        """A tensor, or what a module call returned (tensors, where the module is)."""
        return bool(self.kinds) and self.kinds <= _TENSOR_LIKE

    @property
    def number_or_tensor(self) -> Value | None:
        """The tensor of a value that is a Python number on some paths and a tensor on the
        others (an accumulator started at 0), where that tensor is placed; else None."""
        if self.kinds != _SCALAR_OR_TENSOR or self.places is None:
            return None
        return Value(_JUST_TENSOR, self.places, grad=self.grad, float64=self.float64)

    @property
    def is_placed_data(self) -> bool:
        """Of unknown kind, but known to be on its places: data, then, not a Python number or
        list (a field of a torchtext batch, part of what `torch.load` put on a device)."""
        return self.kinds == _JUST_UNKNOWN and self.places is not None

    @property
    def is_module_like(self) -> bool:
        return bool(self.kinds) and self.kinds <= _MODULE_LIKE

    @property
    def is_device(self) -> bool:
        return self.kinds == _JUST_DEVICE

    @property
    def wrapping(self) -> Wrapping:
        if Kind.WRAPPED_MODULE not in self.kinds:
            return Wrapping.NO
        return Wrapping.YES if self.kinds == {Kind.WRAPPED_MODULE} else Wrapping.MAYBE

    @property
    def on_host(self) -> bool:
        """On the host on every path."""
        return self.places == _JUST_HOST

    @property
    def on_accelerator(self) -> bool:
        """On a device that may be an accelerator, on every path (never the host)."""
        return bool(self.places) and all(place.may_be_accelerator for place in self.places or ())

    @property
    def may_be_on_accelerator(self) -> bool:
        return self.places is None or any(place.may_be_accelerator for place in self.places)

    @property
    def cuda_index(self) -> int | None:
        """The index of the one CUDA device this value is on, on every path, where known."""
        if self.places is None or len(self.places) != 1:
            return None
        (place,) = self.places
        return place.index if place.kind is PlaceKind.DEVICE and place.types == CUDA_ONLY else None

    def item(self, key: str) -> Value | None:
        if self.items is None:
            return None
        for name, value in self.items:
            if name == key:
                return value
        return None

    def describe(self) -> str:
        kinds = "|".join(sorted(kind.value for kind in self.kinds))
        if self.reference is not None:
            kinds += f" {self.reference.qualified}"
        parts = [kinds]
        if self.device is not None:
            parts.append(f"names {self.device.describe()}")
        if self.places is not None and self.kinds & (_PLACED_KINDS | {Kind.UNKNOWN}):
            parts.append("on " + " or ".join(sorted(place.describe() for place in self.places)))
        if self.zero_dim:
            parts.append("0-dim")
        if self.float64:
            parts.append("float64")
        if self.grad:
            parts.append("may require grad")
        if self.holds:
            parts.append("traced to the call that made it")
        if self.in_cpu_mode is not None:
            answer = "off" if isinstance(self.in_cpu_mode, Off) else repr(self.in_cpu_mode)
            parts.append(f"{answer} in the CPU mode")
        if self.wrapped_when is not None and self.wrapping is Wrapping.MAYBE:
            parts.append(f"wrapped where `{self.wrapped_when.describe()}`")
        if self.items is not None:
            inner = ", ".join(f"{key}: {value.describe()}" for key, value in self.items)
            parts.append(f"[{inner}]")
        return ", ".join(parts)


_PLACED_KINDS = frozenset({Kind.TENSOR, Kind.MODEL_OUTPUT, Kind.MODULE, Kind.WRAPPED_MODULE, Kind.CONTAINER,
                           Kind.DATALOADER, Kind.DATASET})


def _join_wrapping_tests(left: Value, right: Value) -> WrappingTest | None:
    """A model wrapped under a test, joined with the bare model of a path that did not wrap
    (`if pretrained: if multi_gpu: model = nn.DataParallel(model)`), is still wrapped only
    under that test."""
    if left.wrapped_when == right.wrapped_when:
        return left.wrapped_when
    if right.wrapped_when is None and right.kinds == _JUST_MODULE:
        return left.wrapped_when
    if left.wrapped_when is None and left.kinds == _JUST_MODULE:
        return right.wrapped_when
    return None


def _join_items(
    left: tuple[tuple[str, Value], ...] | None, right: tuple[tuple[str, Value], ...] | None
) -> tuple[tuple[str, Value], ...] | None:
    if left is None or right is None:
        return None
    if [key for key, _ in left] != [key for key, _ in right]:
        # Records with an element for any key (a dataset's samples, `*`) keep what both know
        # (a dataset of the MNIST family also knows its split's attributes); tuples of another
        # shape join to nothing known.
        right_items = dict(right)
        shared = tuple((key, value.join(right_items[key])) for key, value in left if key in right_items)
        if shared and all(key.isidentifier() for key, _ in (*left, *right)):
            # Records filled field by field on two paths (`settings["gpu"] = ...` in each branch
            # of a launcher test): the fields both set keep their values.
            return shared
        if "*" not in right_items or not any(key == "*" for key, _ in left):
            return None
        return tuple((key, value.join(right_items[key])) for key, value in left if key in right_items)
    return tuple((key, a.join(b)) for (key, a), (_, b) in zip(left, right, strict=True))


UNKNOWN = Value.of(Kind.UNKNOWN)
OTHER = Value.of(Kind.OTHER)
SCALAR = Value.of(Kind.SCALAR)


def tensor(places: Iterable[Place] | None, *, origins: frozenset[int] = frozenset(), zero_dim: bool = False,
           grad: bool = False, float64: bool = False) -> Value:
    return Value(frozenset({Kind.TENSOR}), None if places is None else frozenset(places), origins, zero_dim, grad=grad,
                 float64=float64)


# The device types of a place that is a CUDA device.
CUDA_ONLY = frozenset({"cuda"})

# The environment key under which the model keeps the current CUDA device (what `"cuda"` and
# `.cuda()` mean): not a name a program can bind.
CURRENT_CUDA_DEVICE = "<current cuda device>"
# The environment key under which the model keeps the default device of tensor factories,
# where the program changes it (`torch.set_default_device(d)`, `with torch.device(d):`):
# absent, factories without `device=` make tensors on the host.
DEFAULT_DEVICE = "<default device>"
# An environment key present where the program's CPU mode cannot be (see `Value.in_cpu_mode`):
# a branch its tests never take, code after `assert torch.cuda.is_available()`.
CPU_MODE_UNREACHED = "<not reached in cpu mode>"
# An environment key holding the module a body imports all names from (`from model import *`),
# a reference to it, or OTHER where it imports from several: a name bound nowhere else is one
# of that module's.
STAR_IMPORTED = "<module imported with *>"


def cuda_place(symbol: str, index: int | None) -> Place:
    return Place(PlaceKind.DEVICE, symbol, CUDA_ONLY, index)


def device_value(place: Place) -> Value:
    return Value(frozenset({Kind.DEVICE}), device=place)


def reference(qualified: str, definition: int | None = None) -> Value:
    return Value(frozenset({Kind.REFERENCE}), reference=Reference(qualified, definition))


def join_all(values: Iterable[Value]) -> Value | None:
    result: Value | None = None
    for value in values:
        result = value if result is None else result.join(value)
    return result
