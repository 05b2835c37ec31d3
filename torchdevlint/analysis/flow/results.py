"""What the flow model concludes, in the types rules read: a body's `FunctionFlow`, the
`Meeting`s of its tensors, the calls a value is traced to (`Held`), and the environment keys
of assignable places. The interpreter writes these; rules import them from here, never the
interpreter itself (`tests/test_layers.py`)."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

import libcst as cst

from torchdevlint.analysis.flow.values import ANYWHERE_PLACE, Kind, Place, Value, Wrapping

Env = dict[str, Value]
# A body the model interprets: a module's, or a function's.
Scope = cst.Module | cst.FunctionDef


class MeetingKind:
    ARITHMETIC = "arithmetic"
    CALL = "call"
    # An operator CUDA checks for one device, 0-dim CPU tensors included (`torch.cat`,
    # `index_select`, `F.embedding`): TensorIterator's leave for them does not apply.
    EXACT = "call checked for one device"
    MODULE_CALL = "module call"
    RETURN = "return from forward"


_ZERO_DIM_CHECKED = frozenset({MeetingKind.MODULE_CALL, MeetingKind.EXACT})


@dataclass(frozen=True)
class Operand:
    node: cst.CSTNode
    value: Value


@dataclass(frozen=True)
class Meeting:
    """An operation whose tensors must all be on one device."""

    node: cst.CSTNode
    kind: str
    operands: tuple[Operand, ...]

    def host_operands_meeting_device(self) -> list[tuple[Operand, Operand]]:
        """(an operand on the host on every path, an operand on an accelerator on every path).

        Host tensors without dimensions are exempt in arithmetic (PyTorch moves them).
        """
        pairs: list[tuple[Operand, Operand]] = []
        devices = [o for o in self.operands if o.value.on_accelerator and (o.value.is_tensor_like or o.value.is_module_like)]
        if not devices:
            return pairs
        for operand in self.operands:
            value = operand.value
            if not value.on_host:
                continue
            if value.is_tensor_like and not (value.zero_dim and self.kind not in _ZERO_DIM_CHECKED) or value.is_module_like:
                pairs.append((operand, devices[0]))
        return pairs

    def agrees(self) -> bool:
        """Every tensor and module here is in one place (the host, or one device the code
        names), on every path; and nothing here may be one of those unseen (data of unknown
        kind from a function of another file). A module alone, called on what the model cannot
        see (a module's arguments of unknown kind are no operands), shows no agreement."""
        places: set[Place] = set()
        placed = 0
        for operand in self.operands:
            value = operand.value
            if Kind.UNKNOWN in value.kinds:
                return False
            if not (value.is_tensor_like or value.is_module_like):
                continue
            if value.places is None:
                return False
            places |= value.places - {ANYWHERE_PLACE}
            placed += 1
        return len(places) == 1 and placed > 1


class Held(Enum):
    """The calls a value can be traced to (see `Value.holds`)."""

    # A wrapped model's `state_dict()`: keys prefixed `module.`.
    WRAPPED_STATE_DICT = "wrapped state_dict()"
    LOAD = "torch.load"
    DATALOADER = "DataLoader"
    # `torch.accelerator.current_accelerator()`: None on a CPU-only build.
    CURRENT_ACCELERATOR = "current_accelerator()"
    # The process's rank among all machines' processes (`dist.get_rank()`, `$RANK`): a GPU
    # index only on the first machine.
    GLOBAL_RANK = "global rank"
    # The process's rank on its own machine (`LOCAL_RANK`, `hvd.local_rank()`): no global rank.
    LOCAL_RANK = "local rank"


@dataclass
class FunctionFlow:
    """What the model concluded for one function body."""

    node: cst.CSTNode
    values: dict[int, Value] = field(default_factory=dict)
    # Environment before each statement (keyed by the statement's id).
    before: dict[int, Env] = field(default_factory=dict)
    # After each simple statement line that completes, and the statements themselves.
    after: dict[int, Env] = field(default_factory=dict)
    statements: dict[int, cst.CSTNode] = field(default_factory=dict)
    meetings: dict[int, Meeting] = field(default_factory=dict)
    # What each expression is on a GPU machine, where every test of the device choice takes
    # its GPU side together (see `Interpreter.gpu_world`); None where the body has no such test
    # whose sides leave data on the host and the device.
    gpu_world_values: dict[int, Value] | None = None
    returns: Value | None = None
    # `self.<attr> = value` in this method: attribute -> joined value.
    attribute_writes: dict[str, Value] = field(default_factory=dict)
    # Names bound by `def`/`class` statements in this body -> their nodes.
    definitions: dict[str, cst.CSTNode] = field(default_factory=dict)
    # Where host data in this body comes from: id -> a tensor factory call without `device=`,
    # or a `.cpu()`/`.to("cpu")` call (values brought back on purpose).
    origins: dict[int, cst.Call] = field(default_factory=dict)
    # Checkpoint calls made in this body (see `Value.holds`), and each `torch.save` with the
    # value it saves. A call, or the `os.environ[...]` read of a rank.
    held: dict[int, tuple[Held, cst.BaseExpression]] = field(default_factory=dict)
    # Losses made here that take some arguments on the host (`torch_api.HOST_ARGUMENT_LOSSES`):
    # the constructor call's id -> (position, keyword) of each.
    host_argument_losses: dict[int, tuple[tuple[int, str], ...]] = field(default_factory=dict)
    saves: list[tuple[cst.Call, Value]] = field(default_factory=list)
    # `.to(...)`, `.cuda()`, `.cpu()` calls (by id): where each sends its receiver, None where
    # the code does not say (or `.to` changes only the dtype).
    moves: dict[int, Place | None] = field(default_factory=dict)
    # Places whose tensor move was a statement of its own, its result thrown away.
    discarded_moves: set[str] = field(default_factory=set)
    # Tests of the device choice whose answer the CPU mode knows (by id), reached in that
    # mode: whether the CPU mode carries on past them (False for `if not
    # torch.cuda.is_available(): sys.exit()`). A distributed-only test is no such choice.
    cpu_mode_tests: dict[int, bool] = field(default_factory=dict)
    # The same for tests of a GPU setting alone (`if opt.use_gpu:`): a CPU mode, unless the
    # setting means something else (where to keep features in a multi-GPU program).
    gpu_setting_tests: dict[int, bool] = field(default_factory=dict)
    # Calls (by id) the CPU mode never reaches.
    calls_unreached_in_cpu_mode: set[int] = field(default_factory=set)
    final: Env | None = None
    # Whether the CPU mode reaches a `return` of the function, or its end (False for a
    # `set_model()` whose `else: raise NotImplementedError("needs a GPU")` is its only way on).
    returns_in_cpu_mode: bool = True


def names_bound_by(node: cst.BaseExpression) -> Iterator[cst.Name]:
    """The names an assignment target binds (`x`, `a, (b, *c)`)."""
    if isinstance(node, cst.Name):
        yield node
    elif isinstance(node, (cst.Tuple, cst.List)):
        for element in node.elements:
            yield from names_bound_by(element.value)
    elif isinstance(node, cst.StarredElement):
        yield from names_bound_by(node.value)


def place_key(node: cst.BaseExpression) -> str | None:
    """The environment key of an assignable place: `x`, `self.h`."""
    # Exact type tests: isinstance on LibCST's ABCs is slow, and this runs for every name.
    if type(node) is cst.Name:
        return node.value
    if type(node) is cst.Attribute and type(node.value) is cst.Name:
        return f"{node.value.value}.{node.attr.value}"
    return None


@dataclass(frozen=True)
class HostMeeting:
    """Host data (`host`) meets accelerator data (`device`) in `meeting`, inside `flow`."""

    meeting: Meeting
    host: Operand
    device: Operand
    flow: FunctionFlow


@dataclass(frozen=True)
class OriginSite:
    """Where host data was made: a tensor factory without `device=`, or a `.cpu()` call."""

    call: cst.Call
    scope: Scope
    is_factory: bool
    # The nn.Module class whose method made it, if any.
    module_class: cst.ClassDef | None
    in_method: bool
    # A legacy type constructor (`torch.LongTensor(...)`), which takes no `device=`.
    legacy_constructor: bool = False

    @property
    def function_name(self) -> str | None:
        return self.scope.name.value if isinstance(self.scope, cst.FunctionDef) else None


@dataclass(frozen=True)
class SavedStateDict:
    """A wrapped model's `state_dict()` call (`call`) whose keys reach `torch.save` (`save`)."""

    call: cst.Call
    save: cst.Call
    # Saved by the body that made it (not by a helper it was passed to): the save's own
    # arguments, its path say, are the caller's.
    saved_where_made: bool
    # The model did its work bare, and was then wrapped only for this: nothing after the
    # wrapping calls the wrapper or hands it on. The prefixed keys are the point (a released
    # checkpoint in the format the project's wrapped models load).
    wrapped_only_to_save: bool = False


@dataclass(frozen=True)
class SavedWrapper:
    """`torch.save(model, path)` of a wrapped model itself: the DataParallel/DDP object pickled
    whole (`saved`, the argument), wrapped on every path or on some (`wrapping`)."""

    save: cst.Call
    saved: cst.BaseExpression
    wrapping: Wrapping


class FixAgreement(Enum):
    """What rewriting one statement would do to the places where tensors must meet."""

    # Each meeting it changes then has all its tensors in one place (the host, or one device
    # the code names).
    AGREES = "agrees"
    # A value it places would then meet data in another place (host and accelerator).
    BREAKS = "breaks"
    # It changes no meeting, or one the model cannot place.
    NO_EVIDENCE = "no evidence"


class FlowQueries(Protocol):
    """What rules ask the flow model of a file (`context.flow`); the interpreter's side of the
    model (`Oracle`) is not theirs to call."""

    def value_of(self, node: cst.BaseExpression) -> Value: ...

    def value_on_a_gpu_machine(self, node: cst.BaseExpression) -> Value: ...

    def move_destination(self, call: cst.Call) -> Place | None: ...

    def env_before(self, statement: cst.CSTNode) -> Env | None: ...

    def offers_cpu_mode(self, *, by_gpu_settings: bool = False) -> bool: ...

    def unused_in_a_script(self, function: cst.FunctionDef) -> bool: ...

    def trains_only_on_the_host(self) -> bool: ...

    def instances_stay_on_the_host(self, class_node: cst.ClassDef) -> bool: ...

    def cpu_mode_truth(self, test: cst.BaseExpression) -> bool | None: ...

    def statement_reached_in_cpu_mode(self, statement: cst.CSTNode) -> bool | None: ...

    def reached_in_cpu_mode(self, node: cst.CSTNode, ancestors: Sequence[cst.CSTNode]) -> bool: ...

    def function_reached_in_cpu_mode(self, function: cst.FunctionDef) -> bool: ...

    def called_in_cpu_mode(self, function: cst.FunctionDef) -> bool: ...

    def host_meetings(self) -> list[HostMeeting]: ...

    def host_data_reaches_a_device(self, made: cst.Call) -> bool: ...

    def saved_state_dicts(self) -> list[SavedStateDict]: ...

    def saved_wrappers(self) -> list[SavedWrapper]: ...

    def constant_truth(self, test: cst.BaseExpression) -> bool | None: ...

    def written_earlier_in_run(self, load: cst.Call) -> bool: ...

    def saved_by_the_program(self, load: cst.Call) -> bool: ...

    def same_checkpoint_file(self, save: cst.Call, load: cst.Call) -> bool: ...

    def may_read_what_was_saved(self, save: cst.Call, load: cst.Call) -> bool: ...
    def loaded_into_state_dict(self, load: cst.Call) -> bool: ...

    def arguments_forward_needs_on_host(self, call: cst.Call) -> list[cst.Arg]: ...

    def held_calls(self, value: Value, kind: Held) -> list[cst.Call]: ...

    def names_no_accelerator(self) -> bool: ...

    def calls_cuda_without_a_device(self) -> bool: ...

    def holds(self, value: Value, kind: Held) -> bool: ...

    def held_expressions(self, value: Value, kind: Held) -> list[cst.BaseExpression]: ...

    def origin_site(self, origin_id: int) -> OriginSite | None: ...

    def class_of_method(self, function: cst.FunctionDef) -> cst.ClassDef | None: ...

    def runs_only_while_constructing(self, function: cst.FunctionDef) -> bool: ...

    def is_module_class(self, class_node: cst.ClassDef) -> bool: ...

    def module_owns_state(self, class_id: int) -> bool: ...

    def meetings_of_call(self, call: cst.Call) -> list[Meeting]: ...

    def attributes_handed_to_modules(self, method: cst.FunctionDef) -> frozenset[str]: ...

    def fix_agreement(self, statement: cst.BaseSmallStatement, replacement: cst.BaseSmallStatement,
                      moved: Collection[str]) -> FixAgreement: ...

    def flow_for(self, scope: Scope) -> FunctionFlow | None: ...
