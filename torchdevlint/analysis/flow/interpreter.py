"""Abstract interpretation of one function (or the module body), statement by statement.

Each statement maps an environment (name or `name.attr` -> Value) to the next; branches are
interpreted separately and joined after `if`/`try`/`match`; loops are iterated until the
environment at their head stops changing (a few rounds, then whatever still changes is
unknown). Every expression evaluated gets its value recorded, so a rule can ask about any
node; every place where tensors must be on one device is recorded as a `Meeting`.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import libcst as cst

from torchdevlint.analysis.brains import naming, torch_api
from torchdevlint.analysis.brains.torch_api import DeviceCheck, Result, TorchOp
from torchdevlint.analysis.devices import (
    AVAILABILITY_CHECKS,
    LEGACY_CUDA_TENSOR_TYPES,
    disables_grad,
    integer_value,
    mentions_any,
    parse_device_string,
    string_value,
)
from torchdevlint.analysis.flow import cpu_mode
from torchdevlint.analysis.flow.results import (
    Env,
    FunctionFlow,
    Held,
    Meeting,
    MeetingKind,
    Operand,
    names_bound_by,
    place_key,
)
from torchdevlint.analysis.flow.values import (
    ANYWHERE_PLACE,
    CPU_MODE_UNREACHED,
    CUDA_ONLY,
    CURRENT_CUDA_DEVICE,
    DEFAULT_DEVICE,
    HOST_PLACE,
    MODULE_DEVICE_PLACE,
    OTHER,
    SCALAR,
    STAR_IMPORTED,
    SWITCHED_OFF,
    UNKNOWN,
    Kind,
    ModeConstant,
    Place,
    PlaceKind,
    Value,
    Wrapping,
    WrappingTest,
    cuda_place,
    device_value,
    join_all,
    reference,
    tensor,
)
from torchdevlint.analysis.names import EXIT_BUILTINS, EXIT_FUNCTIONS, dotted_name
from torchdevlint.analysis.tree import child_nodes
from torchdevlint.budget import Deadline

# Rounds of a loop body before the names still changing are given up as unknown.
_LOOP_ROUNDS = 3
# nn.Module's own methods: never a submodule called.
_MODULE_API = frozenset(
    {"register_buffer", "register_parameter", "add_module", "register_module", "apply", "parameters",
     "named_parameters", "buffers", "named_buffers", "children", "named_children", "modules", "named_modules",
     "state_dict", "load_state_dict", "train", "eval", "zero_grad", "requires_grad_", "to", "cuda", "cpu",
     "float", "half", "double", "type", "get_submodule", "get_parameter", "get_buffer", "register_forward_hook",
     "register_forward_pre_hook", "register_full_backward_hook", "extra_repr", "log", "log_dict", "save_hyperparameters"}
)
_ANYWHERE_ONLY = frozenset({ANYWHERE_PLACE})
_CHECKED = frozenset({DeviceCheck.SAME, DeviceCheck.ITERATOR})
_HOST_ONLY = frozenset({HOST_PLACE})
_UNKNOWN_ONLY = frozenset({Kind.UNKNOWN})
_MODULE_ONLY = frozenset({Kind.MODULE})
_SCALAR_ONLY = frozenset({Kind.SCALAR})
# The key of a container's items that stands for each of its elements.
_ANY_ITEM = "*"
_TENSOR_ONLY = frozenset({Kind.TENSOR})
_DATASET_ONLY = frozenset({Kind.DATASET})
_MODEL_OUTPUT_ONLY = frozenset({Kind.MODEL_OUTPUT})
# Inputs of unknown kind moved somewhere (`model(x.to(device))`), and batches of them
# (`model(**batch)` after moving each of the batch's tensors).
_PLACED_INPUT_KINDS = frozenset({Kind.UNKNOWN, Kind.CONTAINER})
# Reductions along a dimension that return (values, indices).
_VALUES_INDICES_METHODS = frozenset({"max", "min", "sort", "topk", "median", "mode", "kthvalue"})
_BUILTIN_SCALARS = frozenset({"len", "int", "float", "bool", "str", "round", "abs", "sum", "min", "max", "repr", "hash", "id", "ord"})
# Of those, the ones that give back a tensor when given tensors.
_TENSOR_KEEPING_BUILTINS = frozenset({"sum", "min", "max", "abs", "round"})
# Values a setting (`use_cuda`, `args.device`) may hold: never tensors, modules or loaders.
_SETTING_KINDS = frozenset({Kind.UNKNOWN, Kind.SCALAR, Kind.DEVICE})
_REFERENCE_ONLY = frozenset({Kind.REFERENCE})
_ARRAY_OPERAND_KINDS = frozenset({Kind.OTHER, Kind.SCALAR})
# Libraries whose attributes are their API, never the program's settings.
# What a name bound nowhere in the file may still be, whatever it imports with `*`.
_BUILTIN_NAMES = frozenset(dir(builtins))
_OTHER_ONLY = frozenset({Kind.OTHER})
_LIBRARY_PREFIXES = ("torch", "numpy", "os", "sys", "jax", "tensorflow", "transformers", "lightning",
                     "pytorch_lightning", "accelerate", "deepspeed", "apex")


@dataclass(frozen=True)
class _KnownCall:
    """A call of a known function, its arguments evaluated."""

    node: cst.Call
    qualified: str
    # One per argument of the call, in order; then the positional ones and the keywords.
    arguments: list[Value]
    positional: list[Value]
    keywords: dict[str, Value]
    # The body's bindings, which some calls change (`torch.cuda.set_device`).
    env: Env


class Oracle(Protocol):
    """What the interpreter asks the file-wide model."""

    def outer_value(self, scope: cst.CSTNode, name: str) -> Value | None: ...
    def host_arguments(self, made: int) -> tuple[tuple[int, str], ...]: ...
    def forward_host_arguments(self, class_id: int) -> tuple[tuple[int, str], ...]: ...
    def gpu_world_outer_value(self, scope: cst.CSTNode, name: str) -> Value | None: ...
    def call_result(self, definition: int, call: cst.Call | None, arguments: Sequence[Value],
                    receiver: Value | None) -> Value: ...
    def instance_value(self, class_id: int) -> Value: ...
    def attribute_value(self, class_id: int, attribute: str, instance: Value) -> Value | None: ...
    def method_of(self, class_id: int, name: str) -> int | None: ...
    def module_class_with_method(self, name: str) -> int | None: ...
    # What the body's text says, the same each time it is interpreted: kept by the model.
    def names_used_as_tensors(self, scope: cst.CSTNode) -> frozenset[str]: ...
    def register_definition(self, node: cst.CSTNode, enclosing: cst.CSTNode, owner: cst.ClassDef | None) -> None: ...
    def entry_cuda_device(self, scope: cst.CSTNode) -> Value: ...
    def reads_wrapped_modules(self) -> bool: ...
    def makes_wrappers(self) -> bool: ...
    def project_module_class(self, qualified: str) -> bool: ...

    def project_mover(self, qualified: str) -> bool: ...

    def class_moves_what_it_is_handed(self, definition: int) -> bool: ...
    def moved_parameters(self, definition: int) -> tuple[tuple[str, Value], ...]: ...
    def parameter_names(self, definition: int) -> tuple[str, ...]: ...
    def model_wrapper_class(self, class_id: int) -> bool: ...
    def returns_in_cpu_mode(self, definition: int) -> bool: ...
    @property
    def entry_default_device(self) -> Value | None: ...


def _on_default_device(value: Value, env: Env) -> Value:
    """A module just built, whose parameters were made on the host: on the default device the
    program set instead, where it set one (`with torch.device("cuda"): model = Net()`)."""
    default = env.get(DEFAULT_DEVICE)
    if default is None or not value.is_module_like or value.places != _HOST_ONLY:
        return value
    return replace(value, places=None if default.device is None else frozenset({default.device}))


def _places_of(values: Sequence[Value]) -> frozenset[Place] | None:
    """Everywhere the values are; None where one's place is unknown."""
    places: frozenset[Place] = frozenset()
    for value in values:
        if value.places is None:
            return None
        places |= value.places
    return places


def _container_module(positional: Sequence[Value], keywords: Mapping[str, Value], env: Env) -> Value:
    """A `Sequential`, `ModuleList` or `ModuleDict` of modules: where the modules with state
    are (new layers on the host, a model's own parts where the model is); anywhere if none has
    state; unknown where one is unknown."""
    parts: list[Value] = []
    for value in (*positional, *keywords.values()):
        if value.items is not None and value.kinds == {Kind.CONTAINER}:
            parts.extend(item for _, item in value.items)
        else:
            parts.append(value)
    if not all(part.is_module_like for part in parts):
        return Value(frozenset({Kind.MODULE}), None)
    places = _places_of(parts)
    if places is None:
        return Value(frozenset({Kind.MODULE}), None)
    stateful = places - {ANYWHERE_PLACE}
    if not stateful:
        return Value(frozenset({Kind.MODULE}), frozenset({ANYWHERE_PLACE}))
    return _on_default_device(Value(frozenset({Kind.MODULE}), stateful), env)


def _only_copies_settings(side: cst.CSTNode | None) -> bool:
    """A branch whose every statement assigns a name, an attribute or an item a name, an
    attribute, an item or a literal (`config.GPUS = args.gpus`), or prints or logs
    (`print("Use GPU: {}".format(args.gpu))`): it hands a setting on, or reports it."""
    if side is None or type(side) is cst.If or type(side) is cst.Else:
        return False
    statements = side.body if isinstance(side, (cst.IndentedBlock, cst.SimpleStatementSuite)) else ()
    if not statements:
        return False
    for statement in statements:
        if type(statement) is not cst.SimpleStatementLine and not isinstance(statement, cst.BaseSmallStatement):
            return False
        smalls = statement.body if type(statement) is cst.SimpleStatementLine else [statement]
        for small in smalls:
            if type(small) is cst.Expr and _reports(small.value):
                continue
            if type(small) is not cst.Assign or not isinstance(
                    small.value, (cst.Name, cst.Attribute, cst.Subscript, cst.SimpleString, cst.Integer)):
                return False
    return True


def _asks_for_a_gpu_index(test: cst.BaseExpression) -> bool:
    """`if args.gpu is not None:`: whether one GPU was named, the default one (or all of them,
    through DataParallel) being the other way, as in PyTorch's ImageNet example; not the CPU."""
    if type(test) is not cst.Comparison or len(test.comparisons) != 1:
        return False
    target = test.comparisons[0]
    return isinstance(target.operator, (cst.Is, cst.IsNot)) and type(target.comparator) is cst.Name \
        and target.comparator.value == "None"


def _reports(node: cst.BaseExpression) -> bool:
    """`print(...)`, `logger.info(...)`, `logging.warning(...)`: a call that only tells."""
    if type(node) is not cst.Call:
        return False
    name = (dotted_name(node.func) or "").rsplit(".", 1)[-1]
    return name in ("print", "info", "warning", "warn", "debug", "log")


def _moves_to_cuda_itself(side: cst.CSTNode | None) -> bool:
    """A branch that calls `.cuda()` in a statement of its own (not under a test of its own)."""
    if side is None or type(side) is cst.If:
        return False
    block = side.body if type(side) is cst.Else else side
    statements = block.body if isinstance(block, (cst.IndentedBlock, cst.SimpleStatementSuite)) else ()
    for statement in statements:
        if type(statement) is cst.SimpleStatementLine or isinstance(statement, cst.BaseSmallStatement):
            stack: list[cst.CSTNode] = [statement]
            while stack:
                node = stack.pop()
                if type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value == "cuda" \
                        and not node.args:
                    return True
                if not isinstance(node, (cst.Lambda, cst.FunctionDef, cst.ClassDef)):
                    stack.extend(child_nodes(node))
    return False


def _join_env(left: Env | None, right: Env | None) -> Env | None:
    if left is None:
        return None if right is None else dict(right)
    if right is None:
        return dict(left)
    # A name bound on one path only keeps that path's value: where it is read, that path was
    # taken (or it raises). Most names hold the same object on both paths.
    joined: Env = dict(left)
    for key, b in right.items():
        a = joined.get(key)
        if a is None:
            joined[key] = b
        elif a is not b:
            joined[key] = a.join(b)
    if (CPU_MODE_UNREACHED in left) != (CPU_MODE_UNREACHED in right):
        # Reached in the CPU mode along one of the two paths.
        del joined[CPU_MODE_UNREACHED]
    return joined


def _keep_the_side_left_on_the_host(joined: Env, before: Env, body: Env, other: Env, taken: ModeConstant | None,
                                    test: cst.BaseExpression) -> None:
    """`if prompt is None: x = torch.zeros(1, 4)` / `else: x = tokens.to(device)`: a name each
    side of a test that is not about the device binds anew, to a tensor moved to the device on
    one side and made on the host on the other. The author moved it where they thought of it;
    on a GPU machine the other side still runs, with the tensor on the host. What follows sees
    that side (the move is where it was meant to be). A test that is a constant (`if
    use_mingpt:` of a module's `use_mingpt = True`) runs one side only: that one must be it."""
    runs = cpu_mode.truth(taken)
    found: dict[str, Value] = {}
    for name, left in body.items():
        right = other.get(name)
        if right is None or left is right or left is before.get(name) or right is before.get(name):
            continue
        # (moved, kept): the side kept on the host must be one that runs.
        sides = ((left, right), (right, left)) if runs is None else ((right, left),) if runs else ((left, right),)
        for moved, kept in sides:
            if (moved.is_tensor or moved.kinds == _UNKNOWN_ONLY) and moved.on_accelerator and kept.is_tensor and kept.on_host:
                found[name] = kept
    # Asked last, of the few tests whose sides place a name differently.
    if found and not _mentions_the_device(test):
        joined.update(found)


def _mentions_the_device(test: cst.BaseExpression) -> bool:
    """A test that reads a device, a GPU setting or the CPU mode (`args.cuda`, `x.is_cuda`,
    `device.type == "cpu"`, `torch.cuda.is_available()`): its sides are meant to place data
    differently."""
    return mentions_any(test, naming.DEVICE_CONTEXT_WORDS, strings=True, whole_words=naming.WHOLE_DEVICE_WORDS)


def _moved_then_called(value: Value) -> Value | None:
    """A value of unknown kind moved to a device, now called: a Module there (`Net().cuda()`
    of a class from another file, `torch.load(path).to(device)`): only a Module both moves
    and calls. None for any other value."""
    if value.kinds == _UNKNOWN_ONLY and value.places is not None and value.on_accelerator:
        return replace(value, kinds=_MODULE_ONLY)
    return None


class Interpreter:
    """Interprets one body; `run` returns its FunctionFlow."""

    def __init__(self, oracle: Oracle, scope: cst.CSTNode, env: Env, *, owner: cst.ClassDef | None,
                 self_name: str | None, module_method: bool, deadline: Deadline,
                 replacements: Mapping[int, cst.BaseSmallStatement] | None = None, gpu_world: bool = False) -> None:
        self.oracle = oracle
        # Interpreting the body as a GPU machine runs it: every test of the device choice
        # (`torch.cuda.is_available()`, `args.use_gpu`) takes its GPU side, all together.
        self.gpu_world = gpu_world
        # Statements interpreted as if written otherwise (to see what a fix would change).
        self.replacements = replacements or {}
        self.flow = FunctionFlow(scope)
        self.env0 = env
        self.owner = owner
        self.self_name = self_name
        self.module_method = module_method
        self.deadline = deadline
        self.is_forward = isinstance(scope, cst.FunctionDef) and scope.name.value == "forward" and module_method
        self._returns: list[Value] = []
        self._returned_in_cpu_mode = False
        # Depth of `with torch.no_grad():` blocks (and grad-disabling decorators) around here.
        self._grad_off = 0
        # Inside branches that run only where an availability check found no GPU.
        self._no_gpu_depth = 0
        self._loop_exits: list[list[Env]] = []
        self._loop_continues: list[list[Env]] = []
        self._steps = 0
        # Names bound together by unpacking an unknown value, until each is bound again.
        self._unpacked_together: dict[str, tuple[str, ...]] = {}
        # Names whose host placement was inferred from a moved sibling, until bound again.
        self._inferred_on_host: set[str] = set()
        # Names bound to a lambda here, until bound again: calling one evaluates its body.
        self._lambdas: dict[str, cst.Lambda] = {}
        # See `_used_as_tensor`: computed on first need.
        self._tensor_uses: frozenset[str] | None = None

    # ---- driver --------------------------------------------------------------------

    def run(self, body: Sequence[cst.CSTNode]) -> FunctionFlow:
        if isinstance(self.flow.node, cst.FunctionDef) and any(
                self._disables_grad(d.decorator, self.env0) for d in self.flow.node.decorators):
            self._grad_off += 1
        env = dict(self.env0)
        env.setdefault(CURRENT_CUDA_DEVICE, self.oracle.entry_cuda_device(self.flow.node))
        default_device = self.oracle.entry_default_device
        if default_device is not None:
            env.setdefault(DEFAULT_DEVICE, default_device)
        final = self._block(body, env)
        self.flow.final = final
        if not self.gpu_world and (self.flow.cpu_mode_tests or self.flow.gpu_setting_tests) \
                and any(_joins_host_and_device(meeting) for meeting in self.flow.meetings.values()):
            self._meetings_of_the_gpu_world(body)
        if isinstance(self.flow.node, cst.FunctionDef):
            # Falling off the end returns None.
            if final is not None:
                self._returns.append(SCALAR)
            self.flow.returns = join_all(self._returns)
            self.flow.returns_in_cpu_mode = self._returned_in_cpu_mode or (
                final is not None and CPU_MODE_UNREACHED not in final)
        return self.flow

    def _tensor_by_use(self, move: cst.Call, env: Env) -> None:
        """`batch.to(device).float()` thrown away, where the body calls `batch.view(...)`: a
        value of unknown kind that a Tensor-only method is called on is a tensor, so this is a
        discarded tensor move (not a module's or a `BatchEncoding`'s, which move in place)."""
        base: cst.BaseExpression = move
        while type(base) is cst.Call and type(base.func) is cst.Attribute and base.func.attr.value in torch_api.MOVE_METHODS:
            base = base.func.value
        if type(base) is not cst.Name:
            return
        value = self.flow.values.get(id(base))
        if value is None or value.kinds != _UNKNOWN_ONLY or base.value not in self._used_as_tensor:
            return
        typed = _as_tensor_by_use(value)
        self.flow.values[id(base)] = typed
        if env.get(base.value) is value:
            env[base.value] = typed

    @property
    def _used_as_tensor(self) -> frozenset[str]:
        """Names this body calls a Tensor-only method on (`x.view(-1)`, `x.numel()`): whatever
        of unknown kind they are bound to here must be a tensor, or that call fails. Asked only
        where a value of unknown kind is bound: most bodies never need the walk it takes."""
        if self._tensor_uses is None:
            self._tensor_uses = self.oracle.names_used_as_tensors(self.flow.node)
        return self._tensor_uses

    def _meetings_of_the_gpu_world(self, body: Sequence[cst.CSTNode]) -> None:
        """Branches on the device choice are taken together on a GPU machine: the model moved
        under one `if torch.cuda.is_available():` meets the targets another one left behind.
        Joining each branch with its untaken side forgets that; the GPU world does not."""
        world = Interpreter(self.oracle, self.flow.node, self.env0, owner=self.owner, self_name=self.self_name,
                            module_method=self.module_method, deadline=self.deadline,
                            replacements=self.replacements, gpu_world=True)
        ran = world.run(body)
        self.flow.gpu_world_values = ran.values
        for key, meeting in ran.meetings.items():
            current = self.flow.meetings.get(key)
            if meeting.host_operands_meeting_device() and (current is None or not current.host_operands_meeting_device()):
                self.flow.meetings[key] = meeting

    def _block(self, statements: Sequence[cst.CSTNode], env: Env | None) -> Env | None:
        for statement in statements:
            if env is None:
                return None
            env = self._statement(statement, env)
        return env

    def _statement(self, node: cst.CSTNode, env: Env) -> Env | None:
        self._steps += 1
        if not self._steps % 512:
            self.deadline.check()
        # Exact type tests throughout: isinstance on LibCST's ABCs is slow.
        if not (type(node) is cst.FunctionDef or type(node) is cst.ClassDef):
            # Definitions need no snapshot (and a module of thousands of them would make
            # snapshots quadratic).
            self.flow.before[id(node)] = dict(env)
            self.flow.statements[id(node)] = node
        if type(node) is cst.SimpleStatementLine:
            current: Env | None = env
            for small in node.body:
                if current is None:
                    return None
                current = self._small(small, current)
            if current is not None:
                self.flow.after[id(node)] = dict(current)
            return current
        if type(node) is cst.If:
            taken = self._cpu_mode_truth(node.test, env)
            if self.gpu_world and taken is not None and (cpu_mode.names_the_cpu_mode(node.test)
                                                         or cpu_mode.names_a_gpu_setting(node.test)) \
                    and not self._placed_where_known(node.test, env):
                return self._gpu_side(node, env, taken)
            # The branch an availability check sends a machine without a GPU down: no data
            # there is on a GPU, so nothing there meets data on one.
            gpu_when_true = self._asks_for_a_gpu(node.test, env)
            self._no_gpu_depth += gpu_when_true is False
            unwrapped: dict[str, tuple[bool, Value]] = {}
            if self.oracle.reads_wrapped_modules():
                # What each side reads `.module` of, walked once for both questions.
                in_body, in_orelse = _modules_read(node.body), _modules_read(node.orelse) if node.orelse else {}
                unwrapped = self._unwrapped_on_one_side(node.body, node.orelse, in_body, in_orelse, env) | \
                    self._wrapped_by_the_same_test(node.test, in_body | in_orelse, env)
            try:
                body = self._block(node.body.body, self._as_unwrapped(
                    self._narrowed(node.test, self._branch(env, taken is False), True), unwrapped, True))
            finally:
                self._no_gpu_depth -= gpu_when_true is False
            orelse_node = node.orelse
            other_in = self._as_unwrapped(self._narrowed(node.test, self._branch(env, taken is True), False),
                                          unwrapped, False)
            self._no_gpu_depth += gpu_when_true is True
            try:
                if orelse_node is None:
                    other: Env | None = other_in
                elif type(orelse_node) is cst.If:
                    other = self._statement(orelse_node, other_in)
                else:
                    other = self._block(orelse_node.body.body, other_in)
            finally:
                self._no_gpu_depth -= gpu_when_true is True
            if taken is not None and CPU_MODE_UNREACHED not in env:
                self._record_cpu_mode_test(node.test, (body if taken else other) is not None,
                                           cpu_side=node.body if taken else node.orelse,
                                           gpu_side=node.orelse if taken else node.body)
            joined = _join_env(body, other)
            if joined is not None and body is not None and other is not None:
                if gpu_when_true is None:
                    _keep_the_side_left_on_the_host(joined, env, body, other, taken, node.test)
                if self.oracle.makes_wrappers() and not unwrapped and not _asks_about_the_wrapper(node.test):
                    _remember_the_wrapping_test(joined, body, other, node.test, taken)
            return joined
        if type(node) is cst.For or type(node) is cst.While:
            return self._loop(node, env)
        if type(node) is cst.Try or type(node) is cst.TryStar:
            return self._try(node, env)
        if type(node) is cst.With:
            grad_off = False
            outer_cuda_device = env.get(CURRENT_CUDA_DEVICE)
            outer_default_device = env.get(DEFAULT_DEVICE)
            for item in node.items:
                value = self._evaluate(item.item, env)
                grad_off = grad_off or self._disables_grad(item.item, env)
                if item.asname is not None:
                    entered = value if value.is_module_like or value.is_tensor_like else UNKNOWN
                    self._bind(item.asname.name, entered, env)
                if type(item.item) is cst.Call and self.qualified(item.item.func, env) == torch_api.CUDA_DEVICE_CONTEXT:
                    # `with torch.cuda.device(1):` changes the current device for the block.
                    index = self._device_index_argument(item.item, [self.flow.values.get(id(arg.value), UNKNOWN) for arg in item.item.args])
                    env[CURRENT_CUDA_DEVICE] = device_value(cuda_place("'cuda'", index))
                elif value.kinds == {Kind.DEVICE}:
                    # `with torch.device("cuda"):` makes factories in the block put tensors there.
                    env[DEFAULT_DEVICE] = value
            self._grad_off += grad_off
            try:
                after = self._block(node.body.body, env)
            finally:
                self._grad_off -= grad_off
            if after is not None and outer_cuda_device is not None:
                after[CURRENT_CUDA_DEVICE] = outer_cuda_device
            if after is not None:
                if outer_default_device is not None:
                    after[DEFAULT_DEVICE] = outer_default_device
                else:
                    after.pop(DEFAULT_DEVICE, None)
            return after
        if type(node) is cst.Match:
            self._evaluate(node.subject, env)
            result: Env | None = None
            for case in node.cases:
                branch = dict(env)
                for name in _pattern_names(case.pattern):
                    branch[name] = UNKNOWN
                result = _join_env(result, self._block(case.body.body, branch))
            return _join_env(result, env)
        if type(node) is cst.FunctionDef:
            for decorator in node.decorators:
                self._evaluate(decorator.decorator, env)
            self._evaluate_defaults(node, env)
            self.oracle.register_definition(node, self.flow.node, None)
            self.flow.definitions[node.name.value] = node
            env[node.name.value] = reference(node.name.value, id(node))
            return env
        if type(node) is cst.ClassDef:
            return self._class(node, env)
        if isinstance(node, cst.BaseSmallStatement):
            # The body of a one-line suite: `if use_cuda: x = x.cuda()`, `def f(x): return x`.
            return self._small(node, env)
        return env

    def _placed_where_known(self, test: cst.BaseExpression, env: Env) -> bool:
        """`trans.is_cuda` (or `not x.is_cuda`) of data whose place the flow knows: the test
        follows that place, not the machine (a GPU machine still runs a helper on host data,
        from a demo on the CPU)."""
        while type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
            test = test.expression
        if type(test) is not cst.Attribute or test.attr.value != "is_cuda":
            return False
        key = place_key(test.value)
        value = env.get(key) if key is not None else None
        return value is not None and (value.is_tensor_like or value.is_module_like) and value.places is not None \
            and (value.on_host or value.on_accelerator)

    def _gpu_side(self, node: cst.If, env: Env, taken_in_cpu_mode: bool) -> Env | None:
        """The branch a GPU machine takes: the one the CPU mode does not."""
        if not taken_in_cpu_mode:
            return self._block(node.body.body, env)
        orelse = node.orelse
        if orelse is None:
            return env
        if type(orelse) is cst.If:
            return self._statement(orelse, env)
        return self._block(orelse.body.body, env)

    # ---- the CPU mode ----------------------------------------------------------------

    def _cpu_mode_truth(self, test: cst.BaseExpression, env: Env) -> bool | None:
        """Evaluates a test; whether it holds in the program's CPU mode, where that is known."""
        return cpu_mode.truth(self._evaluate(test, env).in_cpu_mode)

    def _record_cpu_mode_test(self, test: cst.BaseExpression, carries_on: bool, *, falls_back: bool = False,
                              cpu_side: cst.CSTNode | None = None, gpu_side: cst.CSTNode | None = None) -> None:
        if falls_back or cpu_mode.names_the_cpu_mode(test):
            self.flow.cpu_mode_tests[id(test)] = carries_on
        elif cpu_mode.names_a_gpu_setting(test) and not _moves_to_cuda_itself(cpu_side) \
                and not (cpu_side is None and _only_copies_settings(gpu_side)) and not _asks_for_a_gpu_index(test):
            # (`if args.gpus: config.GPUS = args.gpus`, with nothing on the other side: a setting
            # handed on, no way chosen for the CPU.)
            # (`if n_gpu > 1 and gpu_train: net = DataParallel(net).cuda()` / `else: net =
            # net.cuda()`: both sides on the GPU, the test chooses how many, not the CPU.)
            self.flow.gpu_setting_tests[id(test)] = carries_on

    def _narrowed(self, test: cst.BaseExpression, env: Env, holds: bool) -> Env:
        """The branch's bindings where `test` asks whether a model is wrapped
        (`isinstance(model, nn.DataParallel)`, `hasattr(model, "module")`): the wrapper where
        it holds, the bare model where it does not."""
        if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
            return self._narrowed(test.expression, env, not holds)
        if type(test) is not cst.Call or type(test.func) is not cst.Name or len(test.args) != 2 \
                or test.func.value in env:
            return env
        subject, asked = test.args[0].value, test.args[1].value
        if test.func.value == "isinstance":
            classes = [element.value for element in asked.elements] if type(asked) is cst.Tuple else [asked]
            if not all(self.qualified(cls, env) in torch_api.WRAPPERS for cls in classes):
                return env
        elif test.func.value != "hasattr" or string_value(asked) != "module":
            return env
        key = place_key(subject)
        value = env.get(key) if key is not None else None
        if key is None or value is None or Kind.WRAPPED_MODULE not in value.kinds:
            return env
        narrowed = dict(env)
        narrowed[key] = _as_wrapped(value, holds)
        return narrowed

    def _unwrapped_on_one_side(self, body: cst.CSTNode, orelse: cst.CSTNode | None,
                               in_body: dict[str, cst.BaseExpression], in_orelse: dict[str, cst.BaseExpression],
                               env: Env) -> dict[str, tuple[bool, Value]]:
        """Models that may be wrapped and whose `.module` one side of a two-way test reads,
        the other not (`if args.distributed: g = generator.module` / `else: g = generator`;
        `if self.use_gpu: save(self.net.module)` / `else: save(self.net)`): the test means
        "wrapped" to whoever wrote it, whatever it asks. Key -> (whether the body is the side
        that unwraps, the model's value). `in_body`, `in_orelse`: what each side reads
        `.module` of (see `_modules_read`)."""
        if orelse is None or type(orelse) is cst.If:
            return {}
        found: dict[str, tuple[bool, Value]] = {}
        for key in in_body.keys() ^ in_orelse.keys():
            # A local, or an attribute of `self` that the class's methods set.
            value = env.get(key)
            if value is None:
                value = self._evaluate(in_body.get(key) or in_orelse[key], env)
            # The other side reads the model itself: one that only raises (`else: raise
            # RuntimeError("no checkpoint")`) says nothing of the wrapper.
            if value.wrapping is Wrapping.MAYBE and _mentions(orelse if key in in_body else body, key):
                found[key] = (key in in_body, value)
        return found

    def _wrapped_by_the_same_test(self, test: cst.BaseExpression, reads: dict[str, cst.BaseExpression],
                                  env: Env) -> dict[str, tuple[bool, Value]]:
        """Models whose `.module` a branch reads, wrapped earlier under a test of the same text
        (`if args.cuda: model = nn.DataParallel(model)`, then `if args.cuda: model =
        model.module` in `train`): the same test takes the same side. Key -> (whether the body
        sees the wrapper, the model's value). `reads`: what the branches read `.module` of."""
        if not reads:
            return {}
        text, holds = _test_text(test)
        found: dict[str, tuple[bool, Value]] = {}
        for key, expression in reads.items():
            value = env.get(key)
            if value is None:
                value = self._evaluate(expression, env)
            if value.wrapping is Wrapping.MAYBE and value.wrapped_when is not None and value.wrapped_when.text == text:
                found[key] = (value.wrapped_when.holds is holds, value)
        return found

    @staticmethod
    def _as_unwrapped(env: Env, unwrapped: dict[str, tuple[bool, Value]], body: bool) -> Env:
        if not unwrapped:
            return env
        narrowed = dict(env)
        for key, (body_unwraps, value) in unwrapped.items():
            narrowed[key] = _as_wrapped(value, body_unwraps is body)
        return narrowed

    @staticmethod
    def _branch(env: Env, unreached_in_cpu_mode: bool) -> Env:
        branch = dict(env)
        if unreached_in_cpu_mode:
            branch[CPU_MODE_UNREACHED] = SCALAR
        return branch

    def _exits(self, node: cst.BaseExpression, env: Env) -> bool:
        """`sys.exit(...)`, `exit()`, `pytest.skip(...)`: nothing after it runs."""
        if type(node) is not cst.Call:
            return False
        if type(node.func) is cst.Name and node.func.value in EXIT_BUILTINS:
            return node.func.value not in env and self.oracle.outer_value(self.flow.node, node.func.value) is None
        return self.qualified(node.func, env) in EXIT_FUNCTIONS

    def _with_setting(self, name: str, value: Value) -> Value:
        """A setting read by name (`use_cuda`, `opt.use_gpu`, `args.device`): what the CPU
        mode makes it, where its value does not already say. An argparse switch that cannot be
        switched off (`--cuda` with `type=bool` and a true default) still means to: TDL014
        reports the option, and the program's tests of it are its CPU mode."""
        if value.in_cpu_mode is not None or not value.kinds <= _SETTING_KINDS:
            return value
        setting = cpu_mode.setting_in_cpu_mode(name)
        return value if setting is None else replace(value, in_cpu_mode=setting)

    def _constant(self, node: cst.BaseExpression) -> ModeConstant | None:
        """What an evaluated expression is in the CPU mode: its value's answer, or the literal."""
        value = self.flow.values.get(id(node))
        if value is not None and value.in_cpu_mode is not None:
            return value.in_cpu_mode
        return cpu_mode.literal_constant(node)

    def _disables_grad(self, node: cst.BaseExpression, env: Env) -> bool:
        callee = node.func if isinstance(node, cst.Call) else node
        return disables_grad(self.qualified(callee, env), node)

    def _evaluate_defaults(self, function: cst.FunctionDef, env: Env) -> None:
        """Defaults are evaluated where the function is defined (see `FlowModel._default_values`)."""
        params = function.params
        for param in (*params.posonly_params, *params.params, *params.kwonly_params):
            if param.default is not None:
                self._evaluate(param.default, env)

    def _class(self, node: cst.ClassDef, env: Env) -> Env:
        for base in node.bases:
            self._evaluate(base.value, env)
        self.oracle.register_definition(node, self.flow.node, None)
        class_env = dict(env)
        for statement in node.body.body:
            if isinstance(statement, cst.FunctionDef):
                self.oracle.register_definition(statement, self.flow.node, node)
                for decorator in statement.decorators:
                    self._evaluate(decorator.decorator, class_env)
                self._evaluate_defaults(statement, class_env)
                continue
            result = self._statement(statement, class_env)
            if result is None:
                break
            class_env = result
        self.flow.definitions[node.name.value] = node
        env[node.name.value] = reference(node.name.value, id(node))
        return env

    def _loop(self, node: cst.For | cst.While, env: Env) -> Env | None:
        if isinstance(node, cst.For):
            iterable = self._evaluate(node.iter, env)
            element = self._element_of(node.iter, iterable)
        # `while torch.cuda.is_available() and ...:` the CPU mode never enters the body.
        skipped = isinstance(node, cst.While) and self._cpu_mode_truth(node.test, env) is False
        head: Env = dict(env)
        exits: list[Env] = []
        for round_number in range(_LOOP_ROUNDS + 1):
            body_env = self._branch(head, skipped)
            if isinstance(node, cst.For):
                self._bind(node.target, element, body_env)
            self._loop_exits.append([])
            self._loop_continues.append([])
            end = self._block(node.body.body, body_env)
            exits = self._loop_exits.pop()
            continues = self._loop_continues.pop()
            for extra in continues:
                end = _join_env(end, extra)
            if isinstance(node, cst.While) and end is not None:
                self._evaluate(node.test, end)
            new_head = _join_env(head, end)
            assert new_head is not None
            if new_head == head:
                break
            if round_number == _LOOP_ROUNDS - 1:
                # Still changing: what changes is unknown.
                new_head = {key: value if head.get(key) == value else UNKNOWN for key, value in new_head.items()}
            head = new_head
        after: Env | None = head
        if node.orelse is not None:
            after = self._block(node.orelse.body.body, dict(head))
        for extra in exits:
            after = _join_env(after, extra)
        return after

    def _try(self, node: cst.Try | cst.TryStar, env: Env) -> Env | None:
        # Any statement of the body may raise: a handler sees every state the body passes through.
        states: list[Env] = [dict(env)]
        current: Env | None = dict(env)
        for statement in node.body.body:
            if current is None:
                break
            current = self._statement(statement, current)
            if current is not None:
                states.append(dict(current))
        raised: Env | None = None
        for state in states:
            raised = _join_env(raised, state)
        result = current
        if node.orelse is not None and result is not None:
            result = self._block(node.orelse.body.body, result)
        for handler in node.handlers:
            handler_env = dict(raised) if raised is not None else {}
            if handler.type is not None:
                self._evaluate(handler.type, handler_env)
            if handler.name is not None:
                self._bind(handler.name.name, OTHER, handler_env)
            result = _join_env(result, self._block(handler.body.body, handler_env))
        if node.finalbody is not None:
            final_in = _join_env(result, raised) if result is not None else None
            if final_in is None:
                self._block(node.finalbody.body.body, dict(raised or {}))
                return None
            result = self._block(node.finalbody.body.body, final_in)
        return result

    def _small(self, node: cst.BaseSmallStatement, env: Env) -> Env | None:
        if self.replacements:
            node = self.replacements.get(id(node), node)
        if type(node) is cst.Expr:
            self._expression_statement(node.value, env)
            return None if self._exits(node.value, env) else env
        if type(node) is cst.Assign:
            value = self._evaluate(node.value, env)
            for target in node.targets:
                self._assign(target.target, node.value, value, env)
            return env
        if type(node) is cst.AnnAssign:
            if node.value is None:
                return env
            value = self._evaluate(node.value, env)
            self._assign(node.target, node.value, value, env)
            return env
        if type(node) is cst.AugAssign:
            current_value = self._evaluate(node.target, env)
            value = self._evaluate(node.value, env)
            result = self._arithmetic(node, current_value, node.target, value, node.value)
            self._assign(node.target, None, result, env)
            return env
        if type(node) is cst.Return:
            value = self._evaluate(node.value, env) if node.value is not None else SCALAR
            if self.is_forward and node.value is not None:
                returned = _tensor_operands(node.value, value)
                if len(returned) == 1 and value.is_tensor_like:
                    returned = [Operand(node.value, value)]
                self._record_meeting(node, MeetingKind.RETURN,
                                     [*returned, Operand(node, Value.of(Kind.TENSOR, places=[MODULE_DEVICE_PLACE]))])
            self._returns.append(value)
            self._returned_in_cpu_mode = self._returned_in_cpu_mode or CPU_MODE_UNREACHED not in env
            return None
        if type(node) is cst.Raise:
            if node.exc is not None:
                self._evaluate(node.exc, env)
            return None
        if type(node) is cst.Break:
            if self._loop_exits:
                self._loop_exits[-1].append(dict(env))
            return None
        if type(node) is cst.Continue:
            if self._loop_continues:
                self._loop_continues[-1].append(dict(env))
            return None
        if type(node) is cst.Del:
            for name in names_bound_by(node.target):
                self._forget(name.value, env)
            return env
        if type(node) is cst.Import:
            for alias in node.names:
                full = dotted_name(alias.name) or ""
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    self._set(alias.asname.name.value, reference(full), env)
                else:
                    top = full.split(".", 1)[0]
                    self._set(top, reference(top), env)
            return env
        if type(node) is cst.ImportFrom:
            module = dotted_name(node.module) if node.module is not None else None
            if isinstance(node.names, cst.ImportStar):
                for local, star_module in naming.STAR_IMPORTED_MODULES.items():
                    if local not in env and self.oracle.outer_value(self.flow.node, local) is None:
                        self._set(local, reference(star_module), env)
                # `from model import *`: the names bound nowhere else are that module's.
                imported_from = reference(module) if module is not None and not node.relative else OTHER
                earlier = env.get(STAR_IMPORTED)
                env[STAR_IMPORTED] = imported_from if earlier is None or earlier == imported_from else OTHER
                return env
            for alias in node.names:
                imported = dotted_name(alias.name) or ""
                local = imported
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    local = alias.asname.name.value
                known = reference(f"{module}.{imported}") if module is not None and not node.relative else OTHER
                self._set(local, known, env)
            return env
        if type(node) is cst.Global or type(node) is cst.Nonlocal:
            for item in node.names:
                env.pop(item.name.value, None)
            return env
        if type(node) is cst.Assert:
            if self._cpu_mode_truth(node.test, env) is False:
                # `assert torch.cuda.is_available()`: the CPU mode stops here.
                env[CPU_MODE_UNREACHED] = SCALAR
            return env
        return env

    # ---- binding -------------------------------------------------------------------

    def _set(self, key: str, value: Value, env: Env) -> None:
        self._unpacked_together.pop(key, None)
        self._lambdas.pop(key, None)
        self._inferred_on_host.discard(key)
        if value.is_device and value.device is not None and value.device.kind is PlaceKind.DEVICE and not value.device.symbol:
            value = replace(value, device=replace(value.device, symbol=key))
        self._forget(key, env)
        env[key] = value

    @staticmethod
    def _forget(key: str, env: Env) -> None:
        env.pop(key, None)
        if "." in key:
            return
        prefix = key + "."
        for other in [k for k in env if "." in k and k.startswith(prefix)]:
            del env[other]

    def _module_given_a_tensor(self, target: cst.Attribute, value: Value, env: Env) -> None:
        """`cell.weight_hh.data = gru.weight_hh_l0.data`: a module of this body whose parameter
        (or its data) is replaced by a tensor holds it, where it is; after the module was made
        on the host, it is where its new tensors are."""
        root: cst.BaseExpression = target.value
        depth = 1
        while type(root) is cst.Attribute:
            root, depth = root.value, depth + 1
        if type(root) is not cst.Name or root.value == self.self_name:
            return
        if not value.is_tensor_like and target.attr.value != "data" and depth < 2:
            return  # `net.mode = state`: no tensor of it replaced
        module = env.get(root.value)
        places = value.places if value.is_tensor_like else None
        if module is None or not module.is_module_like or module.places == places:
            return
        env[root.value] = replace(module, places=places)

    def _bind(self, target: cst.BaseExpression, value: Value, env: Env) -> None:
        if type(target) is cst.Attribute and (value.is_tensor_like or value.kinds == _UNKNOWN_ONLY):
            self._module_given_a_tensor(target, value, env)
        key = place_key(target)
        if key is not None:
            self._set(key, value, env)
            if type(target) is cst.Attribute and target.attr.value == "data" and value.is_tensor_like:
                # `x.data = x.data.cuda()` swaps the tensor's data, device included: `x` moves.
                owner_key = place_key(target.value)
                owner = env.get(owner_key) if owner_key is not None else None
                if owner_key is not None and owner is not None and owner.is_tensor_like:
                    self._set(owner_key, replace(owner, places=value.places, origins=value.origins), env)
            if type(target) is cst.Attribute and self.self_name is not None and type(target.value) is cst.Name \
                    and target.value.value == self.self_name:
                attribute = target.attr.value
                previous = self.flow.attribute_writes.get(attribute)
                self.flow.attribute_writes[attribute] = value if previous is None else previous.join(value)
            return
        if isinstance(target, (cst.Tuple, cst.List)):
            elements = target.elements
            starred = any(isinstance(e, cst.StarredElement) for e in elements)
            for index, element in enumerate(elements):
                if isinstance(element, cst.StarredElement):
                    self._bind(element.value, UNKNOWN, env)
                    continue
                self._bind(element.value, UNKNOWN if starred else self._unpacked(value, index), env)
            names = [element.value.value for element in elements if type(element.value) is cst.Name]
            if value.kinds == _UNKNOWN_ONLY and value.places is None and not starred and len(names) == len(elements) > 1:
                # `x, y = batch`: parts of one thing we cannot see (see `_batch_is_on_the_host`).
                batch = tuple(names)
                for name in names:
                    self._unpacked_together[name] = batch
            return
        if isinstance(target, cst.StarredElement):
            self._bind(target.value, UNKNOWN, env)
            return
        if isinstance(target, cst.Subscript):
            # `batch["x"] = batch["x"].to(device)`: the container's key now holds the new value.
            base_key = place_key(target.value)
            if base_key is not None:
                self._unpacked_together.pop(base_key, None)  # changed: no longer as unpacked
            if base_key is not None and base_key in env:
                constant = _constant_index(target)
                base = env[base_key]
                if constant is not None and base.items is not None and base.item(constant) is not None:
                    items = tuple((k, value if k == constant else v) for k, v in base.items)
                    env[base_key] = replace(base, items=items)
                elif constant is not None and base.items is None and base.kinds == {Kind.CONTAINER} \
                        and base.places is not None:
                    # A batch of host tensors, one of them replaced: the others stay where they were.
                    items = (("*", tensor(base.places, origins=base.origins)), (constant, value))
                    places = None if value.places is None else base.places | value.places
                    env[base_key] = replace(base, items=items, places=places)
                elif constant is not None and _names_a_field(constant) and not base.is_tensor_like \
                        and base.places is None and all(_names_a_field(key) for key, _ in base.items or ()):
                    # `settings["gpu"] = local_rank` on a dict of settings (a parameter, `{}`): each
                    # key keeps its own value, so `settings["rank"]` is not taken for the GPU index.
                    env[base_key] = replace(base, items=(*(base.items or ()), (constant, value)))
                elif base.items is not None:
                    env[base_key] = replace(base, items=None, places=None)
                elif constant is None and base.kinds == {Kind.CONTAINER} and base.places is not None:
                    # `batch[k] = to_var(v)` for each key of a loader's batch: any element may now
                    # be the new value, wherever that is.
                    places = None if value.places is None else base.places | value.places
                    env[base_key] = replace(base, places=places)
                if value.holds:
                    env[base_key] = replace(env[base_key], holds=env[base_key].holds | value.holds)

    def _unpacked(self, value: Value, index: int) -> Value:
        known = value.item(str(index))
        if known is not None:
            return known
        if Kind.MODEL_OUTPUT in value.kinds and value.is_tensor_like:
            return replace(value, items=None)
        if value.kinds == {Kind.CONTAINER} and value.places is not None and value.items is None:
            # A batch of unknown shape from a host loader: its parts are host tensors.
            return tensor(value.places)
        if value.is_tensor:
            return tensor(value.places)
        if value.kinds == _UNKNOWN_ONLY and value.places is not None:
            # Part of something wholly on one device (`encoder, decoder = torch.load(path,
            # map_location=device)`).
            return replace(value, items=None)
        return UNKNOWN

    def _assign(self, target: cst.BaseExpression, value_node: cst.BaseExpression | None, value: Value, env: Env) -> None:
        if (
            (type(target) is cst.Tuple or type(target) is cst.List)
            and (type(value_node) is cst.Tuple or type(value_node) is cst.List)
            and len(target.elements) == len(value_node.elements)
            and not any(isinstance(e, cst.StarredElement) for e in (*target.elements, *value_node.elements))
        ):
            values = [self.flow.values.get(id(e.value), UNKNOWN) for e in value_node.elements]
            for element, element_value in zip(target.elements, values, strict=True):
                self._bind(element.value, element_value, env)
            return
        if type(target) is cst.Tuple and type(value_node) is cst.Name and self._is_a_forward_input(value_node.value, value):
            # `sent, sent_len = sent_tuple` in `forward`: a part named as a number, or as a length
            # the body hands to NumPy, is no more taken for data where the module is than a
            # parameter so named.
            for index, element in enumerate(target.elements):
                part = element.value
                named = part.value if type(part) is cst.Name else ""
                number = any(word in named.lower() for word in naming.FORWARD_NUMBER_WORDS) \
                    or bool(set(naming.words(named)) & naming.LENGTH_WORDS) and self._handed_to_numpy(named, env)
                self._bind(part, UNKNOWN if number or type(element) is cst.StarredElement
                           else self._unpacked(value, index), env)
            return
        self._bind(target, value, env)
        if type(value_node) is cst.Lambda and type(target) is cst.Name:
            self._lambdas[target.value] = value_node

    def _handed_to_numpy(self, name: str, env: Env) -> bool:
        """Whether the body hands the name to NumPy as it is (`np.sort(sent_len)`): lengths of a
        NumPy array, then, not a tensor where the module is (torchtext's lengths are, and
        `pack_padded_sequence` wants them on the CPU: TDL026)."""
        stack: list[cst.CSTNode] = [self.flow.node]
        while stack:
            node = stack.pop()
            if type(node) is cst.Call and any(type(arg.value) is cst.Name and arg.value.value == name
                                              for arg in node.args):
                qualified = self.qualified(node.func, env) or ""
                if qualified.split(".", 1)[0] == "numpy":
                    return True
            stack.extend(child_nodes(node))
        return False

    def _is_a_forward_input(self, name: str, value: Value) -> bool:
        """A parameter of the `forward` being interpreted, still holding what the model takes
        its input for: data of unknown structure where the module is."""
        node = self.flow.node
        if type(node) is not cst.FunctionDef or node.name.value != "forward" or value.items is not None \
                or value.places is None or MODULE_DEVICE_PLACE not in value.places:
            return False
        return any(param.name.value == name for param in node.params.params)

    # ---- expression statements -----------------------------------------------------

    def _expression_statement(self, node: cst.BaseExpression, env: Env) -> None:
        self._evaluate(node, env)
        # `model.to(device)`, `model.cuda()`: a Module moves in place.
        if not (type(node) is cst.Call and type(node.func) is cst.Attribute):
            return
        if node.func.attr.value in torch_api.MOVE_METHODS:
            self._tensor_by_use(node, env)
        receiver_node = node.func.value
        key = place_key(receiver_node)
        if key is None:
            self._chained_module_move(node, env)
            return
        receiver = self.flow.values.get(id(receiver_node), UNKNOWN)
        method = node.func.attr.value
        if method in torch_api.MOVE_METHODS and receiver.is_tensor_like:
            self.flow.discarded_moves.add(key)
        if method in torch_api.MODULE_SELF_RETURNING_METHODS and receiver.is_module_like:
            env[key] = self.flow.values.get(id(node), receiver)
            if method in ("to", "cuda", "cpu"):
                self._moved_own_attribute(receiver_node, env[key])
        elif method in ("to", "cuda", "cpu") and not receiver.is_tensor_like and not receiver.kinds <= {Kind.CONTAINER, Kind.SCALAR}:
            moved = self.flow.values.get(id(node))
            if receiver.kinds == {Kind.UNKNOWN} and _named_like_a_model(receiver_node) and moved is not None \
                    and moved.places is not None:
                # `model.cuda()` on a model built where we cannot see (an imported class):
                # moving it in place says where it is (its kind stays as unknown as it was).
                env[key] = receiver.with_places(moved.places)
            else:
                # Something unknown moved in place (a module we cannot see): its place is unknown.
                env[key] = receiver.with_places(None)
            self._moved_own_attribute(receiver_node, env[key])
        elif self.self_name is not None and isinstance(receiver_node, cst.Name) and receiver_node.value == self.self_name:
            # A method of self may rebind any attribute.
            for other in [k for k in env if k.startswith(key + ".")]:
                del env[other]

    def _chained_module_move(self, node: cst.Call, env: Env) -> None:
        """`model.cuda().half()` as a statement: each call hands the same Module on, moved in
        place; the name ends where the chain put it."""
        current: cst.BaseExpression = node
        moves = False
        while type(current) is cst.Call and type(current.func) is cst.Attribute \
                and current.func.attr.value in torch_api.MODULE_SELF_RETURNING_METHODS:
            moves = moves or current.func.attr.value in ("to", "cuda", "cpu")
            current = current.func.value
        key = place_key(current) if current is not node else None
        base = self.flow.values.get(id(current), UNKNOWN) if key is not None else UNKNOWN
        result = self.flow.values.get(id(node))
        if key is None or not moves or not base.is_module_like or result is None or not result.is_module_like:
            return
        env[key] = result
        self._moved_own_attribute(current, result)

    def _moved_own_attribute(self, receiver: cst.BaseExpression, moved: Value) -> None:
        """`self.D.cuda()` in a method (`check_cuda()`): the instance's part is there once the
        method has run, as if the method had assigned it (also where the part's kind is not
        known while the class's attributes are being gathered)."""
        if type(receiver) is cst.Attribute and type(receiver.value) is cst.Name \
                and receiver.value.value == self.self_name:
            attribute = receiver.attr.value
            previous = self.flow.attribute_writes.get(attribute)
            self.flow.attribute_writes[attribute] = moved if previous is None else previous.join(moved)

    # ---- expressions ---------------------------------------------------------------

    def _evaluate(self, node: cst.BaseExpression, env: Env) -> Value:
        # In a loop's later rounds this overwrites the earlier answer: the environment only grows.
        value = self._compute(node, env)
        self.flow.values[id(node)] = value
        return value

    def _compute(self, node: cst.BaseExpression, env: Env) -> Value:
        # Dispatch on the exact type: LibCST's node classes are ABCs, and a chain of
        # isinstance tests on them would cost more than the interpretation itself.
        compute = _COMPUTE_BY_TYPE.get(type(node))
        return compute(self, node, env) if compute is not None else UNKNOWN

    def _compute_name(self, node: cst.Name, env: Env) -> Value:
        return self._with_setting(node.value, self._name(node.value, env))

    def _binary(self, node: cst.BinaryOperation, env: Env) -> Value:
        left = self._evaluate(node.left, env)
        right = self._evaluate(node.right, env)
        return self._arithmetic(node, left, node.left, right, node.right)

    def _unary(self, node: cst.UnaryOperation, env: Env) -> Value:
        inner = self._evaluate(node.expression, env)
        if isinstance(node.operator, cst.Not):
            negated = cpu_mode.negation(inner.in_cpu_mode)
            return SCALAR if negated is None else replace(SCALAR, in_cpu_mode=negated)
        return inner if inner.is_tensor_like or inner.kinds == {Kind.SCALAR} else UNKNOWN

    def _comparison(self, node: cst.Comparison, env: Env) -> Value:
        left = self._evaluate(node.left, env)
        result = SCALAR if left.kinds == {Kind.SCALAR} else UNKNOWN
        previous, previous_node = left, node.left
        for comparison in node.comparisons:
            right = self._evaluate(comparison.comparator, env)
            if isinstance(comparison.operator, (cst.Is, cst.IsNot, cst.In, cst.NotIn)):
                result = SCALAR
            else:
                result = self._arithmetic(node, previous, previous_node, right, comparison.comparator)
            previous, previous_node = right, comparison.comparator
        if len(node.comparisons) == 1 and result.kinds <= _SETTING_KINDS:
            comparison = node.comparisons[0]
            answer = cpu_mode.compare(comparison.operator, self._constant(node.left),
                                      self._constant(comparison.comparator))
            if answer is not None:
                return replace(SCALAR, in_cpu_mode=answer)
        return result

    def _boolean(self, node: cst.BooleanOperation, env: Env) -> Value:
        left = self._evaluate(node.left, env)
        conjunctive = isinstance(node.operator, cst.And)
        # `not torch.cuda.is_available() or has_tensor_cores()`: the CPU mode stops at the left.
        decided = cpu_mode.truth(self._constant(node.left)) is (not conjunctive)
        right = self._evaluate(node.right, self._branch(env, True) if decided else env)
        combine = cpu_mode.conjunction if conjunctive else cpu_mode.disjunction
        answer = combine(self._constant(node.left), self._constant(node.right))
        joined = left.join(right)
        return joined if answer is None else replace(joined, in_cpu_mode=answer)

    def _if_expression(self, node: cst.IfExp, env: Env) -> Value:
        taken = self._cpu_mode_truth(node.test, env)
        if self.gpu_world and taken is not None and (cpu_mode.names_the_cpu_mode(node.test)
                                                     or cpu_mode.names_a_gpu_setting(node.test)) \
                and not self._placed_where_known(node.test, env):
            # `x.cuda() if use_cuda else x`: the side a GPU machine takes, as `if` statements.
            return self._evaluate(node.orelse if taken else node.body, env)
        # `model.module if hasattr(model, "module") else model`: each side sees the model it asks for.
        unwrapped = self._unwrapped_on_one_side(node.body, node.orelse, _modules_read(node.body),
                                                _modules_read(node.orelse), env) \
            if self.oracle.reads_wrapped_modules() else {}
        body = self._evaluate(node.body, self._as_unwrapped(self._narrowed(
            node.test, self._branch(env, True) if taken is False else env, True), unwrapped, True))
        orelse = self._evaluate(node.orelse, self._as_unwrapped(self._narrowed(
            node.test, self._branch(env, True) if taken is True else env, False), unwrapped, False))
        result = self._conditional(node, body, orelse)
        if taken is None:
            return result
        chosen = self._constant(node.body if taken else node.orelse)
        if CPU_MODE_UNREACHED not in env:
            # `"cuda" if opt.use_gpu else "cpu"`: a device with a CPU fallback.
            self._record_cpu_mode_test(node.test, True, falls_back=chosen == "cpu")
        return replace(result, in_cpu_mode=chosen)

    def _number(self, node: cst.BaseNumber, env: Env) -> Value:
        return SCALAR

    def _string(self, node: cst.SimpleString | cst.ConcatenatedString, env: Env) -> Value:
        if type(node) is cst.ConcatenatedString:
            # `f"epoch {e}: " f"{acc:.2f}"`: its f-strings' expressions run too.
            self._evaluate(node.left, env)
            self._evaluate(node.right, env)
        text = string_value(node)
        place = _literal_place(text) if text is not None else None
        if place is None:
            return SCALAR
        if place.types == CUDA_ONLY and place.index is None:
            # `"cuda"`: the current device (asked only for such strings).
            place = replace(place, index=self._current_cuda_index(env))
        return replace(SCALAR, device=place)

    def _formatted_string(self, node: cst.FormattedString, env: Env) -> Value:
        for part in node.parts:
            if isinstance(part, cst.FormattedStringExpression):
                self._evaluate(part.expression, env)
        text = "".join(p.value for p in node.parts if isinstance(p, cst.FormattedStringText))
        if text.startswith(("cuda", "xpu", "npu", "mps")):
            return replace(SCALAR, device=Place(PlaceKind.DEVICE, "", frozenset({text.split(":")[0]})))
        return SCALAR

    def _sequence(self, node: cst.Tuple | cst.List, env: Env) -> Value:
        items: list[tuple[str, Value]] = []
        exact = True
        for index, element in enumerate(node.elements):
            value = self._evaluate(element.value, env)
            if isinstance(element, cst.StarredElement):
                exact = False
            items.append((str(index), value))
        return Value(frozenset({Kind.CONTAINER}), items=tuple(items) if exact else None,
                     holds=_held_by(value for _, value in items))

    def _dict(self, node: cst.Dict, env: Env) -> Value:
        entries: list[tuple[str, Value]] = []
        exact = True
        holds: frozenset[int] = frozenset()
        for entry in node.elements:
            if isinstance(entry, cst.DictElement):
                key = string_value(entry.key)
                self._evaluate(entry.key, env)
                value = self._evaluate(entry.value, env)
                holds |= value.holds
                if key is None:
                    exact = False
                else:
                    entries.append((key, value))
            else:
                holds |= self._evaluate(entry.value, env).holds
                exact = False
        return Value(frozenset({Kind.CONTAINER}), items=tuple(entries) if exact else None, holds=holds)

    def _set_display(self, node: cst.Set, env: Env) -> Value:
        for element in node.elements:
            self._evaluate(element.value, env)
        return OTHER

    def _named_expression(self, node: cst.NamedExpr, env: Env) -> Value:
        value = self._evaluate(node.value, env)
        self._bind(node.target, value, env)
        return value

    def _lambda(self, node: cst.Lambda, env: Env) -> Value:
        lambda_env = dict(env)
        for param in (*node.params.posonly_params, *node.params.params, *node.params.kwonly_params):
            lambda_env[param.name.value] = UNKNOWN
        self._evaluate(node.body, lambda_env)
        return OTHER

    def _lambda_call(self, function: cst.Lambda, node: cst.Call, arguments: list[Value], env: Env) -> Value:
        """`make = lambda n: torch.zeros(n, d)` ... `make(4)`: its body, with these arguments."""
        lambda_env = dict(env)
        parameters = [*function.params.posonly_params, *function.params.params, *function.params.kwonly_params]
        for parameter in parameters:
            lambda_env[parameter.name.value] = UNKNOWN
        positional = [value for arg, value in zip(node.args, arguments, strict=True) if arg.keyword is None and not arg.star]
        if len(positional) == len(node.args):
            for parameter, value in zip(parameters, positional, strict=False):
                lambda_env[parameter.name.value] = value
        for arg, value in zip(node.args, arguments, strict=True):
            if arg.keyword is not None:
                lambda_env[arg.keyword.value] = value
        return self._evaluate(function.body, lambda_env)

    def _await_or_yield(self, node: cst.Await | cst.Yield, env: Env) -> Value:
        inner_node = node.expression if isinstance(node, cst.Await) else node.value
        if isinstance(inner_node, cst.BaseExpression):
            self._evaluate(inner_node, env)
        return UNKNOWN

    def _starred(self, node: cst.StarredElement, env: Env) -> Value:
        self._evaluate(node.value, env)
        return UNKNOWN

    def _ellipsis(self, node: cst.Ellipsis, env: Env) -> Value:
        return OTHER

    def _comprehension(self, node: cst.ListComp | cst.SetComp | cst.GeneratorExp | cst.DictComp,
                       env: Env) -> Value:
        inner = dict(env)
        clause: cst.CompFor | None = node.for_in
        while clause is not None:
            iterable = self._evaluate(clause.iter, inner)
            self._bind(clause.target, self._element_of(clause.iter, iterable), inner)
            for condition in clause.ifs:
                self._evaluate(condition.test, inner)
            clause = clause.inner_for_in
        if isinstance(node, cst.DictComp):
            self._evaluate(node.key, inner)
            element = self._evaluate(node.value, inner)
            if element.places is not None and element.is_tensor_like:
                # `{k: self.enc(v) for k, v in batch.items()}`: tensors, all there.
                return Value(frozenset({Kind.CONTAINER}), element.places, items=((_ANY_ITEM, tensor(element.places)),))
            if element.places is not None and element.kinds == _UNKNOWN_ONLY:
                # `{k: v.to(device) for k, v in batch.items()}`: its values are all there.
                return Value(frozenset({Kind.CONTAINER}), element.places)
            return Value(frozenset({Kind.CONTAINER}))
        element = self._evaluate(node.elt, inner)
        # Walrus targets leak into the enclosing scope.
        for key, value in inner.items():
            if key in env and env[key] is not value and not _bound_by_comprehension(node, key):
                env[key] = value
        if element.is_tensor_like:
            # A list (set, generator) of tensors: where its elements are.
            return Value(frozenset({Kind.CONTAINER}), element.places, items=None, origins=element.origins,
                         grad=element.grad)
        return Value(frozenset({Kind.CONTAINER}))

    def _name(self, name: str, env: Env) -> Value:
        found = env.get(name)
        if found is not None:
            return found
        # A GPU machine takes the device choice's branches together in the bodies around this
        # one too (`if use_cuda: model.cuda()` at module level, the inputs moved in `train`).
        outer = self.oracle.gpu_world_outer_value(self.flow.node, name) if self.gpu_world \
            else self.oracle.outer_value(self.flow.node, name)
        if outer is not None:
            return outer
        if name in ("True", "False", "None"):
            return SCALAR
        if name not in _BUILTIN_NAMES and not name.startswith("__"):
            star = env.get(STAR_IMPORTED) or self.oracle.outer_value(self.flow.node, STAR_IMPORTED)
            if star is not None and star.reference is not None:
                return reference(f"{star.reference.qualified}.{name}")
            if star is not None:
                return OTHER
        return UNKNOWN

    def qualified(self, node: cst.BaseExpression, env: Env) -> str | None:
        """`T.nn.Linear` -> `torch.nn.Linear` when `T` is bound to `import torch as T` here."""
        dotted = dotted_name(node)
        if dotted is None:
            return None
        head, dot, rest = dotted.partition(".")
        value = self._name(head, env)
        if value.reference is None or value.reference.definition is not None:
            return None
        return f"{value.reference.qualified}{dot}{rest}"

    def _attribute(self, node: cst.Attribute, env: Env) -> Value:
        value = self._attribute_value(node, env)
        attr = node.attr.value
        base = self.flow.values.get(id(node.value), UNKNOWN)
        if value.kinds == _REFERENCE_ONLY and base.reference is not None and base.reference.definition is None \
                and not base.reference.qualified.startswith(_LIBRARY_PREFIXES):
            # `from config import opt` ... `opt.use_gpu`: a setting of the program's own config.
            setting = cpu_mode.setting_in_cpu_mode(attr)
            return value if setting is None else replace(value, in_cpu_mode=setting)
        if value.in_cpu_mode is not None or not value.kinds <= _SETTING_KINDS:
            return value
        if attr == "is_cuda":
            # Nothing is on a GPU in the CPU mode.
            return replace(value, in_cpu_mode=False)
        if attr == "device" and (base.is_tensor_like or base.is_module_like):
            return replace(value, in_cpu_mode="cpu")
        if attr == "type" and isinstance(base.in_cpu_mode, str):
            return replace(value, in_cpu_mode=cpu_mode.device_type(base.in_cpu_mode))
        if base.reference is not None or base.is_tensor_like:
            return value
        if base.is_module_like and not (base.instance_of is not None and self.oracle.model_wrapper_class(base.instance_of)):
            return value  # `if self.cuda:` of a layer built with `cuda=True`: where it is put, not a choice
        return self._with_setting(attr, value)

    def _attribute_value(self, node: cst.Attribute, env: Env) -> Value:
        key = place_key(node)
        if key is not None and key in env:
            self._evaluate(node.value, env)
            return env[key]
        base = self._evaluate(node.value, env)
        attr = node.attr.value
        if base.reference is not None and base.reference.definition is None:
            qualified = f"{base.reference.qualified}.{attr}"
            return SCALAR if qualified in torch_api.NUMBER_CONSTANTS else reference(qualified)
        if base.instance_of is not None:
            known = self.oracle.attribute_value(base.instance_of, attr, base)
            if known is not None:
                return known
            method = self.oracle.method_of(base.instance_of, attr)
            if method is not None:
                return replace(reference(attr, method), instance_of=base.instance_of, places=base.places)
        if base.kinds == _DATASET_ONLY:
            split = base.item(f".{attr}")
            if split is not None:
                return split
        if base.is_tensor_like:
            if attr == "device":
                places = base.places
                if places is not None and len(places) == 1:
                    return device_value(next(iter(places)))
                return Value.of(Kind.DEVICE)
            if attr in torch_api.TENSOR_ATTRIBUTES:
                return tensor(base.places, origins=base.origins, grad=base.grad and attr not in ("data", "grad"))
            if attr in ("shape", "dtype", "ndim", "is_cuda", "requires_grad"):
                return SCALAR
            if base.kinds == _MODEL_OUTPUT_ONLY:
                # `model(**batch).loss`, `.logits`: a field of the output, where the module is.
                return replace(base, items=None, zero_dim=False)
            return UNKNOWN
        if base.is_module_like:
            if attr == "module":
                if Kind.WRAPPED_MODULE in base.kinds and base.kinds == {Kind.WRAPPED_MODULE}:
                    return replace(base, kinds=frozenset({Kind.MODULE}), wrapped_when=None)
                return UNKNOWN
            if attr in ("weight", "bias"):
                return tensor(base.places)
            if attr == "device" and base.places is not None and len(base.places) == 1:
                return device_value(next(iter(base.places)))
        if base.is_device and attr == "type" and base.device is not None:
            # `x.to(t.device.type)`: a device string naming where `t` is (its GPU's type, which
            # is where the program's data is on a one-GPU run).
            return replace(SCALAR, device=base.device)
        if base.is_device and attr in ("type", "index"):
            return SCALAR
        if base.kinds == {Kind.CONTAINER} and base.places is not None:
            # A record wholly on one device (a torchtext batch): its fields are there too.
            field = base.item("*")
            if field is not None:
                return field
        return UNKNOWN

    def _subscript(self, node: cst.Subscript, env: Env) -> Value:
        base = self._evaluate(node.value, env)
        for element in node.slice:
            if isinstance(element.slice, cst.Index):
                index_value = self._evaluate(element.slice.value, env)
                if base.is_tensor_like and base.on_host and index_value.is_tensor_like and index_value.on_accelerator:
                    # Host data indexed by device indices fails ("indices should be either on cpu
                    # or on the same device as the indexed tensor"); the reverse is allowed.
                    self._record_meeting(node, MeetingKind.ARITHMETIC,
                                         [Operand(node.value, base), Operand(element.slice.value, index_value)])
            elif isinstance(element.slice, cst.Slice):
                for part in (element.slice.lower, element.slice.upper, element.slice.step):
                    if part is not None:
                        self._evaluate(part, env)
        index = _constant_index(node)
        if base.reference is not None and base.reference.qualified == torch_api.ENVIRONMENT_MAPPING \
                and index in torch_api.RANK_VARIABLES:
            return self._rank(node, torch_api.RANK_VARIABLES[index], None)
        if index is not None:
            known = base.item(index)
            if known is None and base.kinds == {Kind.CONTAINER}:
                known = base.item("*")
            if known is not None:
                return known
        taken = self._part_of(base)
        # `checkpoint["model"]`: part of a checkpoint holds what the checkpoint held.
        return replace(taken, holds=taken.holds | base.holds) if base.holds else taken

    @staticmethod
    def _part_of(base: Value) -> Value:
        if base.is_tensor_like:
            # Indexing keeps the device; a CPU index into device data is allowed.
            return replace(base, items=None, origins=base.origins, zero_dim=False)
        if base.kinds == {Kind.CONTAINER} and base.places is not None:
            if base.items is None:
                return tensor(base.places, origins=base.origins)
            return Value(frozenset({Kind.UNKNOWN}), base.places)
        if base.kinds == {Kind.UNKNOWN} and base.places is not None:
            # Part of something wholly on one device (a checkpoint loaded with map_location).
            return base
        return UNKNOWN

    def _conditional(self, node: cst.IfExp, body: Value, orelse: Value) -> Value:
        # `model.module if hasattr(model, "module") else model`: the bare model.
        if isinstance(node.body, cst.Attribute) and node.body.attr.value == "module" and \
                dotted_name(node.body.value) is not None and dotted_name(node.body.value) == dotted_name(node.orelse):
            base = self.flow.values.get(id(node.orelse), UNKNOWN)
            return replace(base, kinds=frozenset({Kind.MODULE})) if base.is_module_like else UNKNOWN
        joined = body.join(orelse)
        if joined.device is None and body.device is not None and orelse.device is not None and joined.kinds == {Kind.SCALAR}:
            # `"mps" if torch.backends.mps.is_available() else "cpu"`: a device string of either type.
            types = [_place_types(body.device), _place_types(orelse.device)]
            if types[0] is not None and types[1] is not None:
                return replace(joined, device=Place(PlaceKind.DEVICE, "", types[0] | types[1]))
        return joined

    # ---- arithmetic ----------------------------------------------------------------

    def _arithmetic(self, node: cst.CSTNode, left: Value, left_node: cst.CSTNode, right: Value,
                    right_node: cst.CSTNode) -> Value:
        for accumulated, other in ((left, right), (right, left)):
            either = accumulated.number_or_tensor
            if either is not None and (other.is_tensor_like or other.kinds == _SCALAR_ONLY):
                # `correct += (p == y).sum()` in a loop from `correct = 0`: a number on the
                # first round, a tensor after. No meeting is recorded: on some path it is no tensor.
                if other.kinds == _SCALAR_ONLY:
                    return accumulated
                places = None if other.places is None else (either.places or frozenset()) | other.places
                return tensor(places, grad=either.grad or other.grad)
        if left.is_tensor_like and right.is_tensor_like:
            self._record_meeting(node, MeetingKind.ARITHMETIC, [Operand(left_node, left), Operand(right_node, right)])
            return _combined_tensor([left, right])
        if left.is_tensor_like and right.kinds == {Kind.SCALAR}:
            return tensor(left.places, origins=left.origins, zero_dim=left.zero_dim, grad=left.grad)
        if right.is_tensor_like and left.kinds == {Kind.SCALAR}:
            return tensor(right.places, origins=right.origins, zero_dim=right.zero_dim, grad=right.grad)
        if left.kinds == {Kind.SCALAR} and right.kinds == {Kind.SCALAR}:
            return SCALAR
        if (left.float64 or right.float64) and left.kinds | right.kinds <= _ARRAY_OPERAND_KINDS:
            # `np.random.rand(16, 2) * 1024`: NumPy float64 stays float64.
            return Value(frozenset({Kind.OTHER}), float64=True)
        # `args.weight * loss`: whatever the other operand is, the result of an operation on
        # accelerator data is there (or the operation fails).
        for known, other in ((left, right), (right, left)):
            if known.is_tensor_like and known.on_accelerator and other.kinds == _UNKNOWN_ONLY:
                return tensor(known.places, grad=known.grad)
        return UNKNOWN

    def _asks_for_a_gpu(self, test: cst.BaseExpression, env: Env) -> bool | None:
        """True for `torch.cuda.is_available()` (and the other availability checks), False
        for its `not`: tests whose false side runs only where there is no GPU at all (unlike
        a setting such as `args.cuda`, which may be off on a machine with one)."""
        negated = False
        while type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
            test, negated = test.expression, not negated
        qualified = self.qualified(test.func, env) if type(test) is cst.Call else None
        if qualified in AVAILABILITY_CHECKS and qualified is not None and not qualified.endswith("device_count"):
            return not negated
        return None

    def _record_meeting(self, node: cst.CSTNode, kind: str, operands: list[Operand]) -> None:
        if self._no_gpu_depth:
            return
        meeting = Meeting(node, kind, tuple(operands))
        previous = self.flow.meetings.get(id(node))
        # A loop's first round is its real first iteration: a conflict seen there stays, though
        # later rounds (joins of every iteration) can no longer tell.
        if previous is not None and previous.host_operands_meeting_device() and not meeting.host_operands_meeting_device():
            return
        self.flow.meetings[id(node)] = meeting

    # ---- calls ---------------------------------------------------------------------

    def _arguments(self, node: cst.Call, env: Env) -> list[Value]:
        return [self._evaluate(arg.value, env) for arg in node.args]

    def _call(self, node: cst.Call, env: Env) -> Value:
        callee_node = node.func
        if CPU_MODE_UNREACHED in env:
            self.flow.calls_unreached_in_cpu_mode.add(id(node))
        qualified = self.qualified(callee_node, env)
        if type(callee_node) is cst.Attribute and qualified is None:
            receiver = self._evaluate(callee_node.value, env)
            arguments = self._arguments(node, env)
            self.flow.values.setdefault(id(callee_node), UNKNOWN)
            return self._method_call(node, callee_node.attr.value, receiver, arguments, env)
        callee = self._evaluate(callee_node, env)
        arguments = self._arguments(node, env)
        if qualified in torch_api.PASS_THROUGH_ITERATORS and arguments:
            # `tqdm(loader)`: the same elements, with a progress bar.
            return self._builtin_container("iter", node, arguments)
        if qualified is not None and not qualified.startswith("torch") and self.oracle.project_module_class(qualified):
            # `model = handpose_model()` of another file of the project, whose `__init__` makes
            # layers: a model on the host (or the default device) until moved.
            return _on_default_device(Value(frozenset({Kind.MODULE}), _HOST_ONLY), env)
        if qualified is not None:
            if not qualified.startswith("torch") and self.oracle.project_mover(qualified):
                self._modules_handed_may_move(node, arguments, env)
            return self._torch_call(node, qualified, arguments, env)
        if type(callee_node) is cst.Name and callee_node.value in self._lambdas:
            return self._lambda_call(self._lambdas[callee_node.value], node, arguments, env)
        if callee.reference is not None and callee.reference.definition is not None:
            result = _on_default_device(self._same_file_call(node, callee, arguments), env)
            if self.oracle.class_moves_what_it_is_handed(callee.reference.definition):
                self._modules_handed_may_move(node, arguments, env)
            if callee.instance_of is None:
                self._modules_moved_by(node, callee.reference.definition, env)
                if CPU_MODE_UNREACHED not in env and not self.oracle.returns_in_cpu_mode(callee.reference.definition):
                    # `model = set_model(opt)` that raises without a GPU: the CPU mode stops here.
                    env[CPU_MODE_UNREACHED] = SCALAR
            return result
        if callee.is_module_like:
            return self._module_call(node, callee, arguments)
        moved_module = _moved_then_called(callee)
        if moved_module is not None:
            return self._module_call(node, moved_module, arguments)
        if type(callee_node) is cst.Name:
            name = callee_node.value
            if name in _BUILTIN_SCALARS and callee.kinds == {Kind.UNKNOWN}:
                of_tensors = self._builtin_of_tensors(name, node, arguments)
                if of_tensors is not None:
                    return of_tensors
                number = self._builtin_scalar(name, node)
                if name in ("int", "str") and len(arguments) == 1 and arguments[0].holds \
                        and arguments[0].kinds == {Kind.SCALAR}:
                    # `int(os.environ["RANK"])` is still the rank it read.
                    return replace(number, holds=arguments[0].holds)
                return number
            if name == "next" and arguments and callee.kinds == {Kind.UNKNOWN}:
                return self._element_of(node.args[0].value, arguments[0])
            if name in ("enumerate", "zip", "iter", "list", "tuple", "sorted", "reversed") and callee.kinds == {Kind.UNKNOWN}:
                return self._builtin_container(name, node, arguments)
            if name == "getattr" and len(node.args) == 3 and string_value(node.args[1].value) == "module" \
                    and dotted_name(node.args[0].value) == dotted_name(node.args[2].value) and arguments[0].is_module_like:
                return replace(arguments[0], kinds=frozenset({Kind.MODULE}))
        return self._unknown_call(node, callee_node, callee, arguments)

    def _builtin_of_tensors(self, name: str, node: cst.Call, arguments: list[Value]) -> Value | None:
        """`sum(losses)`, `max(a, b)`, `abs(x)`, `round(x)` of tensors are tensors, where those
        are (Python adds them up from 0, compares them, or calls `__abs__`, `__round__`)."""
        if name not in _TENSOR_KEEPING_BUILTINS or not arguments or any(arg.star for arg in node.args):
            return None
        positional = [value for arg, value in zip(node.args, arguments, strict=True) if arg.keyword is None]
        if name in ("sum", "min", "max") and len(positional) == 1:
            elements = [self._element_of(node.args[0].value, positional[0])]
        else:
            elements = positional[:1] if name in ("abs", "round") else positional
        if not elements or not all(element.is_tensor_like for element in elements):
            return None
        joined = join_all(elements)
        return joined if joined is not None and joined.is_tensor_like else None

    def _builtin_scalar(self, name: str, node: cst.Call) -> Value:
        """`len(args.gpu_ids)`, `str(device)`, `bool(use_cuda)` in the CPU mode."""
        argument = self._constant(node.args[0].value) if len(node.args) == 1 and not node.args[0].star else None
        if argument is None:
            return SCALAR
        answer: ModeConstant | None = None
        if name == "len" and isinstance(argument, cpu_mode.Off):
            answer = 0
        elif name == "str" and isinstance(argument, str):
            answer = argument
        elif name == "bool":
            answer = cpu_mode.truth(argument)
        return SCALAR if answer is None else replace(SCALAR, in_cpu_mode=answer)

    def _builtin_container(self, name: str, node: cst.Call, arguments: list[Value]) -> Value:
        if name == "enumerate" and arguments:
            return replace(Value.of(Kind.OTHER), items=(("*", Value(frozenset({Kind.CONTAINER}), items=(
                ("0", SCALAR), ("1", self._element_of(node.args[0].value, arguments[0])))),),))
        if name == "zip" and arguments:
            parts = tuple((str(i), self._element_of(arg.value, value)) for i, (arg, value) in enumerate(zip(node.args, arguments, strict=True)))
            return replace(Value.of(Kind.OTHER), items=(("*", Value(frozenset({Kind.CONTAINER}), items=parts)),))
        if name in ("list", "tuple", "sorted") and arguments:
            element = self._element_of(node.args[0].value, arguments[0])
            # A list or tuple of the iterable's elements: indexed, each of them.
            return Value(frozenset({Kind.CONTAINER}), items=((_ANY_ITEM, element),))
        if name in ("iter", "reversed") and arguments:
            return replace(Value.of(Kind.OTHER), items=(("*", self._element_of(node.args[0].value, arguments[0])),))
        return UNKNOWN

    def _unknown_call(self, node: cst.Call, callee_node: cst.BaseExpression, callee: Value,
                      arguments: list[Value]) -> Value:
        name = (dotted_name(callee_node) or "").rsplit(".", 1)[-1].lower()
        if _named_like_a_model(callee_node) and not self._constructor_parameter(callee_node) \
                and callee.kinds != _OTHER_ONLY and not _settings_only(node, arguments):
            # `model(x)` with `model` made where we cannot see: a module, where it was moved
            # (`model = Net().to(device)`) or else wherever its inputs are. Not a name another
            # module gives (`resnet_face18(...)` from `import *`): a maker of models.
            return self._module_call(node, Value(frozenset({Kind.MODULE}), callee.places), arguments)
        if callee.kinds == _UNKNOWN_ONLY and callee.places is not None:
            # Moved to a device and then called (`vgg = Vgg16().to(device)`, `vgg(x)`): a module.
            return self._module_call(node, Value(frozenset({Kind.MODULE}), callee.places), arguments)
        operands = [Operand(arg.value, value) for arg, value in zip(node.args, arguments, strict=True)
                    if value.is_tensor_like]
        if len(operands) > 1 and any(word in name for word in naming.TENSORS_MEET_IN_CALLEE_WORDS):
            self._record_meeting(node, MeetingKind.CALL, operands)
        if name in ("tqdm", "trange"):
            return self._builtin_container("iter", node, arguments)
        if operands and any(word in name for word in naming.LOSS_WORDS):
            # `criterion(outputs, labels)` made where we cannot see: a loss, computed where its
            # inputs are (a reduced one, so it mixes with data anywhere).
            return replace(_combined_tensor([operand.value for operand in operands]), zero_dim=True)
        return UNKNOWN

    def _same_file_call(self, node: cst.Call, callee: Value, arguments: list[Value]) -> Value:
        assert callee.reference is not None and callee.reference.definition is not None
        receiver = callee if callee.instance_of is not None else None
        result = self.oracle.call_result(callee.reference.definition, node, arguments, receiver)
        return result

    def _modules_moved_by(self, node: cst.Call, definition: int, env: Env) -> None:
        """`train_model(model, loader)` where `train_model` calls `model.cuda()`: a Module moves
        in place, so the caller's `model` is where the function left it."""
        moved = dict(self.oracle.moved_parameters(definition))
        if not moved:
            return
        names = self.oracle.parameter_names(definition)
        for position, arg in enumerate(node.args):
            if arg.star:
                return
            name = arg.keyword.value if arg.keyword is not None else names[position] if position < len(names) else None
            key = place_key(arg.value)
            if name not in moved or key is None:
                continue
            current = env.get(key)
            if current is not None and current.is_module_like:
                env[key] = current.with_places(moved[name].places)

    def _modules_handed_may_move(self, node: cst.Call, arguments: list[Value], env: Env) -> None:
        """`StepByStep(model, loss, optimizer)` of another file, whose code moves what it is
        handed (`self.model.to(self.device)`): a Module moves in place, so the caller's model
        may be anywhere afterwards."""
        for arg, value in zip(node.args, arguments, strict=True):
            key = place_key(arg.value)
            if key is not None and value.is_module_like and not value.is_tensor_like:
                current = env.get(key)
                if current is not None and current.is_module_like:
                    env[key] = current.with_places(None)

    def _constructor_parameter(self, callee: cst.BaseExpression) -> bool:
        """A parameter of a module's `__init__` called there (`self.encoder =
        base_encoder(num_classes=dim)`): the class or factory of a part, not a model run on
        data, which `__init__` does not do."""
        scope = self.flow.node
        return self.module_method and isinstance(scope, cst.FunctionDef) and scope.name.value == "__init__" \
            and isinstance(callee, cst.Name) and any(
                param.name.value == callee.value for param in (*scope.params.params, *scope.params.kwonly_params))

    def _module_call(self, node: cst.Call, module: Value, arguments: list[Value],
                     model_node: cst.CSTNode | None = None) -> Value:
        operands = [Operand(model_node or node.func, module)]
        host_arguments: dict[int, str] = {}
        for made in module.holds:
            here = self.flow.host_argument_losses.get(made)
            host_arguments.update(here if here is not None else self.oracle.host_arguments(made))
        if module.instance_of is not None:
            # A model of this file whose `forward` hands the argument to `pack_padded_sequence`
            # as its lengths: it wants it on the host.
            host_arguments.update(self.oracle.forward_host_arguments(module.instance_of))
        for position, (arg, value) in enumerate(zip(node.args, arguments, strict=True)):
            if host_arguments and torch_api.host_argument(
                    host_arguments, position, None if arg.keyword is None else arg.keyword.value):
                continue
            if self._inferred_on_host and self._inferred_batch_item(arg.value) and module.places != _ANYWHERE_ONLY:
                continue  # a model may well take a batch's host list (`lengths`) on purpose
            if value.kinds == _UNKNOWN_ONLY and value.places is not None and value.on_accelerator:
                # `model(x.to(device), h)`: whatever `x` is, a model's input moved to the device
                # holds tensors there, which the model's other inputs meet.
                operands.append(Operand(arg.value, tensor(value.places)))
                continue
            operands.extend(_tensor_operands(arg.value, value))
        if Kind.WRAPPED_MODULE not in module.kinds:
            # DataParallel and DDP move their inputs to their device themselves.
            self._record_meeting(node, MeetingKind.MODULE_CALL, operands)
        places = module.places
        if places is None or ANYWHERE_PLACE in places:
            # Where the module is not known, it works where its inputs are, or not at all:
            # tensors, and inputs of unknown kind moved somewhere (`model(x.to(device))`).
            inputs = [value if value.is_tensor_like else tensor(value.places) for value in arguments
                      if value.is_tensor_like or (value.places is not None and value.kinds <= _PLACED_INPUT_KINDS)]
            combined = _combined_tensor(inputs) if inputs else None
            places = combined.places if combined is not None else None
        return Value(frozenset({Kind.MODEL_OUTPUT}), places, grad=not self._grad_off)

    def _method_call(self, node: cst.Call, method: str, receiver: Value, arguments: list[Value], env: Env) -> Value:
        if method in torch_api.PLACING_METHODS:
            # Where the call sends its receiver, whatever that is (a tensor, a batch, a model);
            # the branches below read it from here.
            self.flow.moves[id(node)] = self._move_target(node, method, arguments, env)
        if method in ("next", "__next__") and not node.args and receiver.kinds == {Kind.OTHER}:
            # `dataiter.next()` (older torch's loader iterators): what `next(dataiter)` gives.
            element = receiver.item("*")
            if element is not None:
                return element
        if method == "state_dict" and Kind.WRAPPED_MODULE in receiver.kinds and not node.args:
            # A wrapper's keys, prefixed `module.`, on some path: where they are saved is tracked.
            self.flow.held[id(node)] = (Held.WRAPPED_STATE_DICT, node)
            return Value(frozenset({Kind.CONTAINER}), receiver.places if receiver.is_module_like else None,
                         holds=frozenset({id(node)}))
        if method == "forward" and receiver.is_module_like and Kind.WRAPPED_MODULE not in receiver.kinds:
            # `model.forward(x)`: the model run on its inputs, as `model(x)` runs it.
            assert isinstance(node.func, cst.Attribute)
            return self._module_call(node, receiver, arguments, node.func.value)
        if receiver.instance_of is not None:
            definition = self.oracle.method_of(receiver.instance_of, method)
            if definition is not None:
                return self.oracle.call_result(definition, node, arguments, receiver)
            assert isinstance(node.func, cst.Attribute)
            key = place_key(node.func)
            attribute = env.get(key) if key is not None and key in env else \
                self.oracle.attribute_value(receiver.instance_of, method, receiver)
            if attribute is not None and not attribute.is_module_like:
                attribute = _moved_then_called(attribute) or attribute
            if attribute is not None and attribute.is_module_like:
                self.flow.values[id(node.func)] = attribute
                return self._module_call(node, attribute, arguments)
            if (attribute is None or not attribute.is_known) and self.module_method and self._is_self(node.func) \
                    and method not in _MODULE_API and any(argument.is_tensor_like for argument in arguments):
                # A Module's attribute called on tensors like a submodule: one (set up where we
                # cannot see). Called on anything else it may be a factory (`self.block_type(c)`).
                submodule = Value(frozenset({Kind.MODULE}), frozenset({MODULE_DEVICE_PLACE}))
                self.flow.values[id(node.func)] = submodule
                return self._module_call(node, submodule, arguments)
            if attribute is not None and attribute.reference is not None and attribute.reference.definition is not None:
                return self.oracle.call_result(attribute.reference.definition, node, arguments, None)
        if receiver.kinds == _UNKNOWN_ONLY and method not in _MODULE_API:
            assert isinstance(node.func, cst.Attribute)
            class_id = self.oracle.module_class_with_method(method) if _named_like_a_model(node.func.value) else None
            definition = self.oracle.method_of(class_id, method) if class_id is not None else None
            if class_id is not None and definition is not None:
                # `model.init_hidden(batch)` on a model passed in: the one model class of the
                # file with such a method, wherever the model was moved.
                instance = Value(frozenset({Kind.MODULE}), receiver.places, instance_of=class_id)
                return self.oracle.call_result(definition, node, arguments, instance)
        moved_module = _moved_then_called(receiver)
        if moved_module is not None and method not in _MODULE_API and torch_api.method_op(method) is None \
                and any(argument.is_tensor_like for argument in arguments):
            # `model.generate(prompt)` on a model moved to a device: no Tensor has the method,
            # so the receiver is a Module, and what it computes from its tensors is done there.
            # What it returns is its own affair (a list of tokens, a string, a tensor).
            self._module_call(node, moved_module, arguments)
            return UNKNOWN
        if receiver.is_tensor_like:
            return self._tensor_method(node, method, receiver, arguments)
        either = receiver.number_or_tensor
        if either is not None and torch_api.only_tensors_have(method):
            # `correct.float()` where `correct` started as 0: it is the tensor, or the call fails.
            return self._tensor_method(node, method, either, arguments)
        if receiver.is_module_like:
            if method in torch_api.MODULE_SELF_RETURNING_METHODS:
                if method in ("to", "cuda", "cpu", "xpu", "mps"):
                    moved = self.flow.moves[id(node)]
                    return receiver.with_places(None if moved is None else [moved])
                return receiver
            if method in ("register_buffer", "register_parameter") and node.args and self._is_self(node.func):
                name = string_value(node.args[0].value)
                # torch accepts any string ("b-1"); only an identifier is an attribute to bind.
                if name is not None and name.isidentifier():
                    registered = tensor([MODULE_DEVICE_PLACE])
                    self._bind(cst.Attribute(cst.Name(self.self_name or "self"), cst.Name(name)), registered, env)
                return SCALAR
            if method in ("parameters", "buffers"):
                return replace(Value.of(Kind.OTHER), items=(("*", tensor(receiver.places)),))
            if method == "state_dict":
                return Value(frozenset({Kind.CONTAINER}), receiver.places)
            if method == "forward":
                return self._module_call(node, receiver, arguments)
            return UNKNOWN
        if receiver.kinds == {Kind.UNKNOWN} and method in ("parameters", "buffers") and not node.args:
            # `next(model.parameters())` of a model we cannot see: a tensor, wherever the model is.
            return replace(Value.of(Kind.OTHER), items=(("*", tensor(None)),))
        if receiver.kinds == {Kind.UNKNOWN} and method in ("to", "cuda", "cpu", "xpu", "mps"):
            # `Net().to(device)`: a module or a tensor we cannot see, but placed on `device`.
            moved = self.flow.moves[id(node)]
            if moved is not None and moved != HOST_PLACE:
                assert isinstance(node.func, cst.Attribute)
                self._batch_is_on_the_host(node.func.value, env)
            return UNKNOWN if moved is None else UNKNOWN.with_places([moved])
        if method in ("append", "extend") and receiver.kinds == {Kind.CONTAINER} and len(arguments) == 1:
            self._grow_list(node, method, receiver, arguments[0], env)
            return SCALAR
        if method in ("items", "values") and receiver.kinds == {Kind.CONTAINER} and receiver.item(_ANY_ITEM) is not None:
            # A dict the program built of tensors (see `_comprehension`): its values, or (key, value) pairs.
            element = receiver.item(_ANY_ITEM)
            assert element is not None
            if method == "items":
                element = Value(frozenset({Kind.CONTAINER}), items=(("0", SCALAR), ("1", element)))
            return Value(frozenset({Kind.CONTAINER}), items=((_ANY_ITEM, element),))
        if method == "items" and receiver.kinds == {Kind.CONTAINER}:
            return UNKNOWN
        if method == "to" and receiver.kinds == {Kind.CONTAINER}:
            return UNKNOWN
        if method in ("get",) and receiver.kinds == {Kind.CONTAINER} and node.args:
            key = string_value(node.args[0].value)
            found = receiver.item(key) if key is not None else None
            return found if found is not None else UNKNOWN
        if receiver.is_device and method == "type":
            return SCALAR
        callee_name = method.lower()
        operands = [Operand(arg.value, value) for arg, value in zip(node.args, arguments, strict=True) if value.is_tensor_like]
        if len(operands) > 1 and any(word in callee_name for word in naming.TENSORS_MEET_IN_CALLEE_WORDS):
            self._record_meeting(node, MeetingKind.CALL, operands)
        return UNKNOWN

    def _inferred_batch_item(self, node: cst.BaseExpression) -> bool:
        """Is this a batch item that `_batch_is_on_the_host` took for a host tensor?"""
        while type(node) is cst.Subscript:
            node = node.value
        return type(node) is cst.Name and node.value in self._inferred_on_host

    def _batch_is_on_the_host(self, moved: cst.BaseExpression, env: Env) -> None:
        """An item of an unknown batch moved to a device on its own (`batch["x"].to(device)`,
        or `x.to(device)` after `x, y = batch`) shows where the batch is: on the host. Its
        other items are host tensors (a DataLoader collates them so), until moved too."""
        if type(moved) is cst.Subscript and _constant_index(moved) is not None:
            key = place_key(moved.value)
            if key is not None and key in env and env[key].kinds == {Kind.UNKNOWN} and env[key].places is None:
                env[key] = Value(frozenset({Kind.CONTAINER}), frozenset({HOST_PLACE}),
                                 items=(("*", tensor([HOST_PLACE])),))
                self._inferred_on_host.add(key)
        elif type(moved) is cst.Name:
            batch = self._unpacked_together.get(moved.value)
            for sibling in batch or ():
                if sibling != moved.value and self._unpacked_together.get(sibling) is batch and sibling in env \
                        and env[sibling].kinds == {Kind.UNKNOWN} and env[sibling].places is None:
                    env[sibling] = tensor([HOST_PLACE])
                    self._inferred_on_host.add(sibling)

    def _grow_list(self, node: cst.Call, method: str, receiver: Value, argument: Value, env: Env) -> None:
        """`outputs.append(t)`: a list of tensors, where they are (for `torch.cat(outputs)`)."""
        assert isinstance(node.func, cst.Attribute)
        key = place_key(node.func.value)
        if key is None:
            return
        element = argument if method == "append" else self._element_of(node.args[0].value, argument)
        either = element.number_or_tensor
        if either is not None:
            # `accuracies.append(correct / total)` after `correct += (p == y).sum()` from 0:
            # a tensor once the loop ran a batch.
            element = replace(either, grad=element.grad)
        if not element.is_tensor_like:
            env[key] = Value(frozenset({Kind.CONTAINER}))
            return
        grown = Value(frozenset({Kind.CONTAINER}), element.places, origins=element.origins, grad=element.grad)
        env[key] = grown if receiver.items == () else receiver.join(grown)

    def _is_self(self, func: cst.BaseExpression) -> bool:
        return (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name)
                and self.self_name is not None and func.value.value == self.self_name)

    def _tensor_method(self, node: cst.Call, method: str, receiver: Value, arguments: list[Value]) -> Value:
        if method == "item":
            return SCALAR
        if method == "tolist":
            return OTHER
        if method == "numpy":
            return OTHER
        if method in ("size", "dim", "numel", "nelement", "element_size", "is_floating_point", "get_device", "is_contiguous"):
            return SCALAR
        if method in ("to", "cuda", "cpu", "xpu", "mps"):
            moved = self.flow.moves[id(node)]
            if moved is None:
                if method == "to" and not self._changes_device(node, arguments):
                    return tensor(receiver.places, origins=receiver.origins, zero_dim=receiver.zero_dim,
                                  grad=receiver.grad, float64=self._converted_to_float64(node, arguments, receiver.float64))
                return tensor(None, zero_dim=receiver.zero_dim, grad=receiver.grad)
            float64 = self._converted_to_float64(node, arguments, receiver.float64)
            if moved == HOST_PLACE:
                self.flow.origins[id(node)] = node
                return tensor([moved], origins=frozenset({id(node)}), zero_dim=receiver.zero_dim, grad=receiver.grad,
                              float64=float64)
            return tensor([moved], zero_dim=receiver.zero_dim, grad=receiver.grad, float64=float64)
        if method == "double":
            return tensor(receiver.places, origins=receiver.origins, zero_dim=receiver.zero_dim, grad=receiver.grad,
                          float64=True)
        if method in ("new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"):
            return tensor(receiver.places)
        if method == "type_as" and arguments:
            return tensor(arguments[0].places) if arguments[0].is_tensor_like else tensor(None)
        if method == "type" and node.args:
            places = self._type_destination(node.args[0].value, arguments[0], receiver)
            if places == _HOST_ONLY and receiver.on_accelerator:
                # A legacy CPU type brings the data back, as `.cpu()` does (TDL018 reports it).
                self.flow.origins[id(node)] = node
                return tensor(places, origins=frozenset({id(node)}), zero_dim=receiver.zero_dim, grad=receiver.grad)
            return tensor(places, origins=receiver.origins, zero_dim=receiver.zero_dim, grad=receiver.grad)
        op = torch_api.method_op(method)
        checked = op is not None and op.device_check in _CHECKED
        if (checked or method in torch_api.HAND_CHECKED_METHODS) and method not in torch_api.SHAPE_ONLY_TENSOR_METHODS:
            tensors = [Operand(arg.value, value) for arg, value in zip(node.args, arguments, strict=True)
                       if value.is_tensor_like and arg.keyword is None]
            if tensors:
                kind = MeetingKind.EXACT if op is not None and op.device_check is DeviceCheck.SAME else MeetingKind.ARITHMETIC
                self._record_meeting(node, kind, [Operand(node.func, receiver), *tensors])
        grad = receiver.grad and method not in torch_api.GRADLESS_METHODS
        if _returns_values_and_indices(method, bool(node.args)) and not any(v.is_tensor_like for v in arguments):
            return _values_and_indices(receiver, grad)
        full_reduction = (op is not None and op.reduction or method in torch_api.HAND_REDUCTIONS) and not node.args
        if full_reduction:
            return tensor(receiver.places, origins=receiver.origins, zero_dim=True, grad=grad)
        if op is None or method in ("max", "min") and node.args:
            return UNKNOWN
        if op.result is Result.TENSOR or _one_tensor_given_arguments(op, method, len(node.args)):
            operands = [receiver, *(value for value in arguments if value.is_tensor_like)]
            zero_dim = receiver.zero_dim and (
                op.pointwise and all(value.zero_dim for value in operands) or method in torch_api.SHAPE_KEEPING_METHODS)
            return tensor(receiver.places, origins=receiver.origins, grad=grad, zero_dim=zero_dim)
        return self._other_result(op, receiver.places, receiver.origins, grad)

    def _type_destination(self, node: cst.BaseExpression, given: Value, receiver: Value) -> frozenset[Place] | None:
        """Where `x.type(t)` puts the tensor: a legacy tensor type (`torch.cuda.FloatTensor`,
        also as a string) says the device as well as the type, a dtype keeps it where it is,
        and a name that may hold either (`Tensor = torch.cuda.FloatTensor if cuda else ...`)
        leaves it unknown."""
        named = string_value(node)
        qualified = named if named is not None else given.reference.qualified if given.reference is not None else None
        if qualified is None:
            return None
        if qualified in LEGACY_CUDA_TENSOR_TYPES:
            return frozenset({Place(PlaceKind.DEVICE, "cuda", frozenset({"cuda"}))})
        if qualified in torch_api.LEGACY_HOST_TENSOR_TYPES:
            return frozenset({HOST_PLACE})
        if qualified.rpartition(".")[2] in torch_api.DTYPE_NAMES:
            return receiver.places
        return None

    @staticmethod
    def _other_result(op: TorchOp, places: frozenset[Place] | None, origins: frozenset[int], grad: bool) -> Value:
        """What a torch call returns besides one Tensor: Tensors where its inputs are, a number."""
        if op.result is Result.TENSORS:
            # `q, k, v = x.split(c, dim=2)`, `for part in x.chunk(4)`: each part where `x` is.
            return Value(frozenset({Kind.CONTAINER}), places, origins, grad=grad)
        if op.result in (Result.NUMBER, Result.NONE):
            return SCALAR
        return UNKNOWN

    @staticmethod
    def _converted_to_float64(node: cst.Call, arguments: list[Value], was_float64: bool) -> bool:
        """Whether `.to(...)` leaves a float64 tensor: a float64 dtype given, or none and it was."""
        for arg, value in zip(node.args, arguments, strict=True):
            if arg.keyword is not None and arg.keyword.value not in ("dtype",):
                continue
            qualified = value.reference.qualified if value.reference is not None else None
            if qualified is not None and qualified.rpartition(".")[2] in torch_api.DTYPE_NAMES:
                return qualified in torch_api.FLOAT64_DTYPES
        return was_float64

    def _changes_device(self, node: cst.Call, arguments: list[Value]) -> bool:
        """`x.to(torch.float32)`, `x.to(dtype=...)` change only the type."""
        for arg, value in zip(node.args, arguments, strict=True):
            if arg.keyword is not None and arg.keyword.value != "device":
                continue
            if value.reference is not None and value.reference.qualified.rpartition(".")[2] in torch_api.DTYPE_NAMES:
                continue
            return True
        return False

    def _current_cuda_index(self, env: Env) -> int | None:
        current = env.get(CURRENT_CUDA_DEVICE)
        return current.device.index if current is not None and current.device is not None else None

    def _move_target(self, node: cst.Call, method: str, arguments: list[Value], env: Env) -> Place | None:
        """Where `.to(...)`, `.cuda()`, `.cpu()` put the value; None when the code does not say."""
        if method == "cpu":
            return HOST_PLACE
        if method == "cuda":
            # The current device, as `"cuda"` names it, or the one given.
            given = self._device_index_argument(node, arguments)
            if given is None and any(arg.keyword is None or arg.keyword.value == "device" for arg in node.args):
                return cuda_place("'cuda'", None)
            return cuda_place("'cuda'", self._current_cuda_index(env) if given is None else given)
        if method in ("xpu", "mps"):
            return Place(PlaceKind.DEVICE, repr(method), frozenset({method}))
        for arg, value in zip(node.args, arguments, strict=True):
            if arg.keyword is not None and arg.keyword.value != "device":
                continue
            index = integer_value(arg.value)
            if index is not None:
                # `.to(1)`: a CUDA device by its number.
                return cuda_place(repr(f"cuda:{index}"), index)
            if value.is_device and value.device is not None:
                return value.device
            if value.device is not None:  # a device string
                return value.device
            if value.is_tensor_like:
                places = value.places
                return next(iter(places)) if places is not None and len(places) == 1 else None
            if value.reference is not None and value.reference.qualified.rpartition(".")[2] in torch_api.DTYPE_NAMES:
                continue
            text = dotted_name(arg.value)
            if text is not None and any(word in text.lower() for word in naming.DEVICE_VARIABLE_WORDS):
                return Place(PlaceKind.DEVICE, text, None)
            return None
        return None

    def _first_device_id(self, node: cst.Call) -> int | None:
        """`device_ids[0]` of a DataParallel call: where it wants the module. Without
        `device_ids` (or with None) it takes every GPU, from cuda:0."""
        written = [arg.value for arg in node.args if arg.keyword is None and not arg.star][1:2] or \
            [arg.value for arg in node.args if arg.keyword is not None and arg.keyword.value == "device_ids"]
        if any(arg.star for arg in node.args):
            return None
        if not written or type(written[0]) is cst.Name and written[0].value == "None":
            return 0
        ids = written[0]
        if isinstance(ids, (cst.List, cst.Tuple)) and ids.elements and not isinstance(ids.elements[0], cst.StarredElement):
            first = ids.elements[0].value
            return _cuda_index_of(first, self.flow.values.get(id(first), UNKNOWN))
        if type(ids) is cst.Call and dotted_name(ids.func) == "list" and ids.args:
            ids = ids.args[0].value
        if type(ids) is cst.Call and dotted_name(ids.func) == "range" and ids.args:
            return 0 if len(ids.args) == 1 else integer_value(ids.args[0].value)
        return None

    def _device_index_argument(self, node: cst.Call, arguments: list[Value]) -> int | None:
        """The CUDA device a call's first argument (or `device=`) names: `1`, `"cuda:1"`."""
        for arg, value in zip(node.args, arguments, strict=True):
            if arg.keyword is not None and arg.keyword.value != "device" or arg.star:
                continue
            return _cuda_index_of(arg.value, value)
        return None

    def _torch_call(self, node: cst.Call, qualified: str, arguments: list[Value], env: Env) -> Value:
        keywords = {arg.keyword.value: value for arg, value in zip(node.args, arguments, strict=True) if arg.keyword is not None}
        positional = [value for arg, value in zip(node.args, arguments, strict=True) if arg.keyword is None and not arg.star]
        has_splat = any(arg.star == "**" for arg in node.args)
        role = torch_api.call_role(qualified)
        if role is not None:
            result = self._call_with_role(role, _KnownCall(node, qualified, arguments, positional, keywords, env))
            if result is not None:
                return result
        op = torch_api.function_op(qualified)
        # `torch.linspace(0, 1, n)`, `torch.normal(0.0, 1.0, size=(n,))`: made from numbers.
        from_numbers = op is not None and op.like_factory and bool(positional) and positional[0].kinds == {Kind.SCALAR} \
            and not any(value.is_tensor_like for value in positional)
        if torch_api.is_tensor_factory(qualified) or from_numbers:
            made = self._factory(node, qualified, positional, keywords, has_splat, env.get(DEFAULT_DEVICE))
            dtype = keywords.get("dtype")
            if dtype is not None:
                float64 = dtype.reference is not None and dtype.reference.qualified in torch_api.FLOAT64_DTYPES
            else:
                float64 = qualified in torch_api.FROM_NUMPY and bool(positional) and positional[0].float64
            return replace(made, float64=float64) if float64 else made
        if torch_api.loads_pretrained_model(qualified):
            if "device_map" in keywords:
                # Placed by the library (`device_map="auto"`, `device_map=device`): somewhere it chose.
                return Value(frozenset({Kind.MODULE}), frozenset({ANYWHERE_PLACE}))
            return _on_default_device(Value(frozenset({Kind.MODULE}), frozenset({HOST_PLACE})), env)
        host_arguments = torch_api.HOST_ARGUMENT_LOSSES.get(qualified)
        if host_arguments is not None:
            # A loss that runs where its inputs are, and takes these arguments on the host.
            self.flow.host_argument_losses[id(node)] = tuple(host_arguments.items())
            return Value(frozenset({Kind.MODULE}), frozenset({ANYWHERE_PLACE}), holds=frozenset({id(node)}))
        if torch_api.is_module_constructor(qualified):
            if "device" in keywords:
                return Value(frozenset({Kind.MODULE}), self._device_argument(keywords["device"], node))
            # A loss given a tensor (its class `weight`, `pos_weight`), by keyword or position, keeps it.
            held = [value for value in (*positional, *(keywords[key] for key in keywords.keys() & torch_api.STATEFUL_LOSS_KEYWORDS))
                    if value.is_tensor_like]
            if torch_api.is_stateless_module(qualified):
                if not held:
                    return Value(frozenset({Kind.MODULE}), frozenset({ANYWHERE_PLACE}))
                # Where the tensors it keeps are (`pos_weight=torch.tensor([w], device=device)`).
                places = _places_of(held)
                return Value(frozenset({Kind.MODULE}), places) if places != _HOST_ONLY \
                    else _on_default_device(Value(frozenset({Kind.MODULE}), places), env)
            if qualified in torch_api.MODULE_CONTAINERS and (positional or keywords):
                # `nn.Sequential(self.fc, *self.blocks)`: where the modules it holds are.
                return _container_module(positional, keywords, env)
            return _on_default_device(Value(frozenset({Kind.MODULE}), frozenset({HOST_PLACE})), env)
        if qualified in torch_api.NN_TENSOR_CLASSES:
            # Assigned to a Module, it moves with the Module.
            source = positional[0] if positional else UNKNOWN
            return tensor([MODULE_DEVICE_PLACE] if self.module_method else source.places)
        if op is not None and op.like_factory and "device" in keywords:
            return tensor(self._device_argument(keywords["device"], node))
        if op is not None or qualified in torch_api.NN_TENSOR_CLASSES or qualified.startswith("torch.nn.functional."):
            return self._tensor_function(node, qualified, op, arguments)
        if qualified.rpartition(".")[2] in torch_api.DTYPE_NAMES and qualified.startswith("torch."):
            return reference(qualified)
        return UNKNOWN

    def _call_with_role(self, role: torch_api.CallRole, call: _KnownCall) -> Value | None:
        """What a call with a role of its own (see `torch_api.CallRole`) returns and does;
        None where this call is an ordinary one after all (`np.zeros(n, dtype=...)`)."""
        Role = torch_api.CallRole
        node, positional, keywords, env = call.node, call.positional, call.keywords, call.env
        if role is Role.CURRENT_ACCELERATOR:
            # The accelerator's device, or None (which the CPU mode gets) on a CPU-only build.
            self.flow.held[id(node)] = (Held.CURRENT_ACCELERATOR, node)
            return Value(frozenset({Kind.DEVICE}), device=Place(PlaceKind.DEVICE, "", None),
                         holds=frozenset({id(node)}), in_cpu_mode=SWITCHED_OFF)
        if role is Role.CPU_MODE_CHECK:
            return replace(SCALAR, in_cpu_mode=torch_api.CPU_MODE_ANSWERS[call.qualified])
        if role is Role.GLOBAL_RANK:
            return self._rank(node, "global", torch_api.CPU_MODE_ANSWERS.get(call.qualified))
        if role is Role.LOCAL_RANK:
            return self._rank(node, "local", None)
        if role is Role.ENVIRONMENT_READ:
            named = self._constant(node.args[0].value) if node.args and not node.args[0].star else None
            if not isinstance(named, str) or named not in torch_api.RANK_VARIABLES:
                return None
            return self._rank(node, torch_api.RANK_VARIABLES[named], None)
        if role is Role.MEMORY_BUFFER:
            return Value.of(Kind.MEMORY_BUFFER)
        if role is Role.DEVICE:
            place = self._device_call_place(node, positional, keywords)
            named = self._constant(node.args[0].value) if node.args else None
            if not isinstance(named, str):
                named = "cpu" if place.kind is PlaceKind.HOST or place.types and "cpu" in place.types else None
            return replace(device_value(place), in_cpu_mode=named)
        if role is Role.SET_DEFAULT_DEVICE:
            chosen = positional[0] if positional else keywords.get("device", UNKNOWN)
            if chosen.device is None and node.args:
                # `torch.set_default_tensor_type("torch.cuda.FloatTensor")`, or the type itself.
                named = self._constant(node.args[0].value)
                named = named if isinstance(named, str) else chosen.reference.qualified if chosen.reference else None
                if named is not None and named.startswith("torch.") and named.endswith("Tensor"):
                    on_cuda = named.startswith("torch.cuda.")
                    chosen = device_value(Place(PlaceKind.DEVICE, "cuda", frozenset({"cuda"})) if on_cuda else HOST_PLACE)
            # A device the model can name, or else somewhere it cannot.
            env[DEFAULT_DEVICE] = chosen if chosen.device is not None else Value.of(Kind.DEVICE)
            return SCALAR
        if role is Role.SET_CUDA_DEVICE:
            index = self._device_index_argument(node, call.arguments)
            env[CURRENT_CUDA_DEVICE] = device_value(cuda_place("'cuda'", index))
            return SCALAR
        if role is Role.WRAPPER:
            inner = positional[0] if positional else keywords.get("module", UNKNOWN)
            first = self._first_device_id(node) if call.qualified in torch_api.DATA_PARALLEL else None
            # What it wraps is a module, whatever the model could see of it.
            placed = inner.is_module_like or inner.kinds == _UNKNOWN_ONLY
            return Value(frozenset({Kind.WRAPPED_MODULE}), inner.places if placed else None,
                         device=None if first is None else cuda_place("device_ids[0]", first))
        if role is Role.DATALOADER:
            dataset = positional[0] if positional else keywords.get("dataset", UNKNOWN)
            element = UNKNOWN if "collate_fn" in keywords else self._dataset_element(dataset)
            # Which loops iterate this loader is asked of the model (see `Value.holds`).
            self.flow.held[id(node)] = (Held.DATALOADER, node)
            return Value(frozenset({Kind.DATALOADER}), items=(("*", element),), holds=frozenset({id(node)}))
        if role in (Role.DEVICE_BATCH_ITERATOR, Role.DEVICE_BATCH_ITERATOR_SPLITS):
            device = keywords.get("device")
            places = self._device_argument(device, node) if device is not None else None
            if places is None:
                return UNKNOWN
            # A batch is a record whose every field (a tensor, or a (tensor, lengths) pair) is
            # on the iterator's device (see `_attribute_value`).
            batch = Value(frozenset({Kind.CONTAINER}), places, items=(("*", Value(_UNKNOWN_ONLY, places)),))
            iterator = Value(frozenset({Kind.DATALOADER}), items=(("*", batch),))
            if role is Role.DEVICE_BATCH_ITERATOR:
                return iterator
            return Value(frozenset({Kind.CONTAINER}), items=tuple((key, iterator) for key in ("0", "1", "2", "*")))
        if role is Role.TENSOR_DATASET:
            parts = tuple((str(i), tensor(v.places) if v.is_tensor_like else UNKNOWN) for i, v in enumerate(positional))
            return Value(frozenset({Kind.DATASET}), items=(("*", Value(frozenset({Kind.CONTAINER}), items=parts)),))
        if role is Role.HOST_DATASET:
            sample = ("*", Value(frozenset({Kind.CONTAINER}), frozenset({HOST_PLACE})))
            head, _, name = call.qualified.rpartition(".")
            if head.startswith("torchvision.datasets") and name in torch_api.HOST_TENSOR_DATASET_CLASSES:
                # The split itself, as host tensors: `test_data.data[0]` (see `_attribute_value`).
                split = tensor([HOST_PLACE])
                return Value(frozenset({Kind.DATASET}), items=(sample, *((f".{attribute}", split) for attribute in
                                                                         sorted(torch_api.HOST_TENSOR_DATASET_ATTRIBUTES))))
            return Value(frozenset({Kind.DATASET}), items=(sample,))
        if role is Role.NUMPY_FLOAT64:
            return None if "dtype" in keywords else Value(frozenset({Kind.OTHER}), float64=True)
        if role is Role.LEGACY_CUDA_TENSOR:
            return tensor([Place(PlaceKind.DEVICE, "cuda", frozenset({"cuda"}))])
        if role is Role.LEGACY_HOST_TENSOR:
            default = env.get(DEFAULT_DEVICE)
            if call.qualified == "torch.Tensor" and default is not None:
                # Unlike `torch.FloatTensor`, `torch.Tensor(...)` follows the default tensor type.
                return tensor(None if default.device is None else [default.device])
            # Made on the host, like a factory without `device=` (`torch.LongTensor([[1, 2]])`
            # in `forward` meets the model's data wherever the model is).
            self.flow.origins[id(node)] = node
            return tensor([HOST_PLACE], origins=frozenset({id(node)}))
        if role is Role.RETURNS_ITS_TENSOR:
            return positional[0] if positional else None
        if role is Role.FROM_NUMPY:
            return tensor([HOST_PLACE], float64=bool(positional) and positional[0].float64)
        if role is Role.LOAD:
            # Whatever was saved (a model, a checkpoint dict, tensors), where `map_location` puts it.
            self.flow.held[id(node)] = (Held.LOAD, node)
            loaded = replace(UNKNOWN, holds=frozenset({id(node)}))
            location = keywords.get("map_location")
            if location is None and len(positional) >= 2:
                location = positional[1]
            if location is not None and location.is_known and location.device is not None:
                return loaded.with_places([location.device])
            return loaded
        if role is Role.SAVE:
            if positional:
                self.flow.saves.append((node, positional[0]))
            return SCALAR
        if role is Role.STRIP_STATE_DICT_PREFIX:
            if not node.args:
                return None
            # Strips the keys in place: what it held no longer has the prefix.
            stripped = node.args[0].value
            key = place_key(stripped.value if type(stripped) is cst.Subscript else stripped)
            if key is not None and key in env:
                env[key] = replace(env[key], holds=frozenset())
            return SCALAR
        assert role is Role.PYTHON_NUMBER
        return SCALAR

    def _rank(self, node: cst.BaseExpression, scope: torch_api.RankScope, in_cpu_mode: ModeConstant | None) -> Value:
        """A number that rules trace to where it was read (see `Held.GLOBAL_RANK`,
        `Held.LOCAL_RANK`): `scope` is "global" or "local"."""
        self.flow.held[id(node)] = (Held.GLOBAL_RANK if scope == "global" else Held.LOCAL_RANK, node)
        return replace(SCALAR, holds=frozenset({id(node)}), in_cpu_mode=in_cpu_mode)

    def _dataset_element(self, dataset: Value) -> Value:
        known = dataset.item("*")
        if known is not None:
            return known
        if dataset.instance_of is not None:
            method = self.oracle.method_of(dataset.instance_of, "__getitem__")
            if method is not None:
                result = self.oracle.call_result(method, None, [SCALAR], dataset)
                if result.on_host or (result.items is not None and all(v.on_host for _, v in result.items)):
                    return result
                return UNKNOWN
        if dataset.kinds == {Kind.CONTAINER} and dataset.items is not None and not all(
            value.on_host or not value.is_tensor_like for _, value in dataset.items
        ):
            return UNKNOWN
        if dataset.kinds & {Kind.SCALAR, Kind.OTHER}:
            return UNKNOWN
        # A dataset we cannot see: the default collate makes host tensors of its samples.
        return Value(frozenset({Kind.CONTAINER}), frozenset({HOST_PLACE}))

    def _factory(self, node: cst.Call, qualified: str, positional: list[Value], keywords: dict[str, Value],
                 has_splat: bool, default_device: Value | None) -> Value:
        if "device" in keywords:
            return tensor(self._device_argument(keywords["device"], node))
        if has_splat or "out" in keywords:
            return tensor(None)
        if default_device is not None and not (qualified == "torch.as_tensor" and positional
                                               and positional[0].is_tensor_like):
            # The program chose where factories put tensors: there, where the model knows it.
            return tensor(None if default_device.device is None else [default_device.device])
        zero_dim = qualified in torch_api.SCALAR_TENSOR_FACTORIES and bool(positional) and positional[0].kinds == {Kind.SCALAR}
        if qualified == "torch.as_tensor" and positional and positional[0].is_tensor_like:
            return tensor(positional[0].places)
        self.flow.origins[id(node)] = node
        return tensor([HOST_PLACE], origins=frozenset({id(node)}), zero_dim=zero_dim)

    def _device_argument(self, value: Value, node: cst.Call) -> frozenset[Place] | None:
        if value.device is not None:
            return frozenset({value.device})
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value == "device":
                text = dotted_name(arg.value)
                if text is not None and any(word in text.lower() for word in naming.DEVICE_VARIABLE_WORDS):
                    return frozenset({Place(PlaceKind.DEVICE, text, None)})
        return None

    def _device_call_place(self, node: cst.Call, positional: list[Value], keywords: dict[str, Value]) -> Place:
        first = positional[0] if positional else keywords.get("type")
        if first is not None and first.device is not None:
            place = first.device
            # `torch.device("cuda", 1)`, `torch.device("cuda", index=rank)`.
            written = [arg.value for arg in node.args if arg.keyword is None and not arg.star][1:2] or \
                [arg.value for arg in node.args if arg.keyword is not None and arg.keyword.value == "index"]
            if written and place.types == CUDA_ONLY:
                index = integer_value(written[0])
                # Named by its variable where the index is not a literal (see `_set`).
                return cuda_place("" if index is None else repr(f"cuda:{index}"), index)
            return place
        number = integer_value(node.args[0].value) if node.args and node.args[0].keyword is None else None
        if number is not None:
            return cuda_place(repr(f"cuda:{number}"), number)
        if first is not None and first.kinds == {Kind.SCALAR} and node.args:
            argument = node.args[0].value
            # `torch.device("cuda" if torch.cuda.is_available() else "cpu")`
            if isinstance(argument, cst.IfExp):
                types = _string_device_types(argument)
                if None not in types:
                    found = frozenset(t for t in types if t is not None)
                    return HOST_PLACE if found == {"cpu"} else Place(PlaceKind.DEVICE, "", found)
        return Place(PlaceKind.DEVICE, "", None)

    def _tensor_function(self, node: cst.Call, qualified: str, op: TorchOp | None, arguments: list[Value]) -> Value:
        last = qualified.rpartition(".")[2]
        host_only = torch_api.HOST_ARGUMENT_FUNCTIONS.get(last)
        operands: list[Operand] = []
        for position, (arg, value) in enumerate(zip(node.args, arguments, strict=True)):
            if host_only is not None and torch_api.host_argument(
                    host_only, position, None if arg.keyword is None else arg.keyword.value):
                continue
            if arg.keyword is not None and arg.keyword.value in ("device", "dtype", "out"):
                continue
            operands.extend(_tensor_operands(arg.value, value))
        if len(operands) > 1 and not (op is not None and op.device_check is DeviceCheck.UNCHECKED):
            kind = MeetingKind.EXACT if op is not None and op.device_check is DeviceCheck.SAME else MeetingKind.CALL
            self._record_meeting(node, kind, operands)
        if _returns_values_and_indices(last, len(node.args) > 1) and len(operands) == 1:
            return _values_and_indices(operands[0].value, operands[0].value.grad)
        if last in ("max", "min", "sort", "topk", "unique"):
            return UNKNOWN
        if op is not None and op.result is not Result.TENSOR and not _one_tensor_given_arguments(op, last, len(node.args) - 1):
            joined = _combined_tensor([operand.value for operand in operands]) if operands else tensor(None)
            return self._other_result(op, joined.places, joined.origins, joined.grad)
        if not operands:
            return tensor(None)
        combined = _combined_tensor([operand.value for operand in operands])
        zero_dim = combined.zero_dim and (op is None or op.pointwise or last in torch_api.SHAPE_KEEPING_METHODS) or \
            op is not None and op.reduction and len(node.args) == 1
        return replace(combined, zero_dim=zero_dim)

    # ---- iteration -----------------------------------------------------------------

    def _element_of(self, node: cst.BaseExpression, iterable: Value) -> Value:
        known = iterable.item("*")
        if known is not None:
            return known
        if iterable.is_tensor_like:
            return tensor(iterable.places)
        if iterable.kinds == {Kind.CONTAINER} and iterable.items:
            joined = join_all(value for _, value in iterable.items)
            return joined if joined is not None else UNKNOWN
        if iterable.kinds == {Kind.CONTAINER} and iterable.places is not None:
            return tensor(iterable.places, origins=iterable.origins)
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "range":
            return SCALAR
        return UNKNOWN


# How each expression type is evaluated (see `Interpreter._compute`); others are unknown.
_COMPUTE_BY_TYPE: dict[type, Callable[[Interpreter, Any, Env], Value]] = {
    cst.Name: Interpreter._compute_name,
    cst.Attribute: Interpreter._attribute,
    cst.Call: Interpreter._call,
    cst.Subscript: Interpreter._subscript,
    cst.BinaryOperation: Interpreter._binary,
    cst.UnaryOperation: Interpreter._unary,
    cst.Comparison: Interpreter._comparison,
    cst.BooleanOperation: Interpreter._boolean,
    cst.IfExp: Interpreter._if_expression,
    cst.Integer: Interpreter._number,
    cst.Float: Interpreter._number,
    cst.Imaginary: Interpreter._number,
    cst.SimpleString: Interpreter._string,
    cst.ConcatenatedString: Interpreter._string,
    cst.FormattedString: Interpreter._formatted_string,
    cst.Tuple: Interpreter._sequence,
    cst.List: Interpreter._sequence,
    cst.Dict: Interpreter._dict,
    cst.Set: Interpreter._set_display,
    cst.ListComp: Interpreter._comprehension,
    cst.SetComp: Interpreter._comprehension,
    cst.GeneratorExp: Interpreter._comprehension,
    cst.DictComp: Interpreter._comprehension,
    cst.NamedExpr: Interpreter._named_expression,
    cst.Lambda: Interpreter._lambda,
    cst.Await: Interpreter._await_or_yield,
    cst.Yield: Interpreter._await_or_yield,
    cst.StarredElement: Interpreter._starred,
    cst.Ellipsis: Interpreter._ellipsis,
}


def _tensor_operands(node: cst.BaseExpression, value: Value) -> list[Operand]:
    """The tensors an argument passes: itself, the known elements of a tuple or list, or what
    an iterator of tensors yields."""
    if value.is_tensor_like:
        return [Operand(node, value)]
    if value.kinds != {Kind.CONTAINER}:
        # `model.parameters()`: an iterator of the model's tensors.
        element = value.item("*") if value.items is not None else None
        return [Operand(node, element)] if element is not None and element.is_tensor_like else []
    if value.items is not None:
        elements: Sequence[cst.BaseElement | cst.BaseDictElement] | None = (
            node.elements if isinstance(node, (cst.List, cst.Tuple, cst.Dict)) else None
        )
        operands: list[Operand] = []
        for index, (_, item) in enumerate(value.items):
            if not item.is_tensor_like:
                continue
            element_node = elements[index].value if elements is not None and index < len(elements) else node
            operands.append(Operand(element_node, item))
        return operands
    if value.places is not None:
        return [Operand(node, tensor(value.places, origins=value.origins, grad=value.grad))]
    return []


def _joins_host_and_device(meeting: Meeting) -> bool:
    """An operand here is on the host on one path and on a device on another: where the GPU
    world, which takes the device choice's branches together, may tell them apart."""
    for operand in meeting.operands:
        places = operand.value.places
        if places is not None and HOST_PLACE in places and any(place.may_be_accelerator for place in places):
            return True
    return False


def _settings_only(call: cst.Call, arguments: Sequence[Value]) -> bool:
    """`model(**model_config)`: handed a dict of settings and nothing else, a model class (a
    maker picked from a registry, `models.__dict__[name]`) being built, not a forward pass.
    Not `model(**batch)` of data placed on a device, or of tensors: a Hugging Face forward."""
    return bool(call.args) and all(arg.star == "**" for arg in call.args) and not any(
        value.places is not None or value.is_tensor_like or value.kinds == _UNKNOWN_ONLY for value in arguments)


def _named_like_a_model(node: cst.BaseExpression) -> bool:
    """`model`, `self.net`, `encoder`: a name the program gives a model, not a maker of one
    (`Net` is a class, `build_model` and `resnet_block` make models or their parts, and a
    `model_loss` is a loss)."""
    written = (dotted_name(node) or "").rsplit(".", 1)[-1]
    name = written.lower()
    return any(word in name for word in naming.MODEL_NAME_WORDS) and not any(word in name for word in ("loss", "criterion")) \
        and not written[:1].isupper() and name.split("_", 1)[0] not in naming.BUILDER_VERBS \
        and name.rsplit("_", 1)[-1] not in naming.PART_MAKER_NOUNS


def _names_an_action(node: cst.BaseExpression) -> bool:
    """`save_model`, `train_net`: a function doing something with a model, not the model."""
    words = naming.words((dotted_name(node) or "").rsplit(".", 1)[-1])
    return bool(words) and words[0] in naming.MODEL_HANDLING_VERBS


def names_used_as_tensors(scope: cst.CSTNode) -> frozenset[str]:
    """Names the body (not its nested functions) calls a Tensor-only method on, or hands a
    model as a positional input (`preds = model(src, src_mask)`: a model takes tensors)."""
    found: set[str] = set()
    stack: list[cst.CSTNode] = list(scope.body.body if isinstance(scope, cst.FunctionDef) else
                                    scope.body if isinstance(scope, cst.Module) else [])
    while stack:
        node = stack.pop()
        node_type = type(node)
        if node_type is cst.FunctionDef or node_type is cst.ClassDef or node_type is cst.Lambda:
            continue
        if node_type is cst.Call:
            assert isinstance(node, cst.Call)
            func = node.func
            if type(func) is cst.Attribute and type(func.value) is cst.Name and func.attr.value in torch_api.TENSOR_ONLY_METHODS:
                found.add(func.value.value)
            elif _named_like_a_model(func) and not _names_an_action(func):
                found.update(arg.value.value for arg in node.args
                             if type(arg.value) is cst.Name and arg.keyword is None and not arg.star)
        stack.extend(child_nodes(node))
    return frozenset(found)


def _as_tensor_by_use(value: Value) -> Value:
    """A value of unknown kind the body uses as a tensor is one, where it was (see `_used_as_tensor`)."""
    return replace(value, kinds=_TENSOR_ONLY) if value.kinds == _UNKNOWN_ONLY else value


def _one_tensor_given_arguments(op: TorchOp, name: str, beside_the_tensor: int) -> bool:
    """`torch.where(c, x, y)`, `x.type(torch.FloatTensor)`: the overloads that take more than the
    tensor give one Tensor (`torch.where(c)` gives several, `x.type()` a string)."""
    return op.result is Result.MIXED and name in torch_api.TENSOR_RESULT_WHEN_MIXED and beside_the_tensor > 0


def _returns_values_and_indices(name: str, given_more_than_the_tensor: bool) -> bool:
    """`sort`, `topk`, `kthvalue` always; `max`, `min`, `median`, `mode` along a dimension."""
    return name in ("sort", "topk", "kthvalue") or name in _VALUES_INDICES_METHODS and given_more_than_the_tensor


def _values_and_indices(source: Value, grad: bool) -> Value:
    """`t.max(1)`, `torch.topk(t, 5)`: (values, indices), both where `source` is."""
    values = tensor(source.places, origins=source.origins, grad=grad)
    indices = tensor(source.places, origins=source.origins)
    return Value(frozenset({Kind.CONTAINER}), source.places, source.origins, items=(("0", values), ("1", indices)))


def _combined_tensor(values: Sequence[Value]) -> Value:
    """The result of an operation on tensors: where the ones with dimensions are."""
    dimensioned = [v for v in values if not (v.zero_dim and v.on_host)] or list(values)
    places: frozenset[Place] | None = frozenset()
    origins: frozenset[int] = frozenset()
    for value in dimensioned:
        if places is None or value.places is None:
            places = None
        else:
            places = places | value.places
        origins |= value.origins
    if places is not None and len(places) > 1 and HOST_PLACE in places and any(
        v.on_accelerator for v in dimensioned
    ):
        # Host and device data met (a finding there); what comes out is on the device.
        places = frozenset(p for p in places if p != HOST_PLACE)
    if places is not None and ANYWHERE_PLACE in places:
        places = frozenset(p for p in places if p != ANYWHERE_PLACE) or None
    on_host = places == frozenset({HOST_PLACE})
    return tensor(places, origins=origins if on_host else frozenset(), zero_dim=all(v.zero_dim for v in values),
                  grad=any(v.grad for v in values))


def _held_by(values: Iterable[Value]) -> frozenset[int]:
    held: frozenset[int] = frozenset()
    for value in values:
        held |= value.holds
    return held


def _names_a_field(key: str) -> bool:
    """`"rank"` of `settings["rank"]`: a field of a record, not a position (`"0"`) or any element (`*`)."""
    return key.isidentifier()


def _constant_index(node: cst.Subscript) -> str | None:
    if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
        return None
    value = node.slice[0].slice.value
    text = string_value(value)
    if text is not None:
        return text
    if isinstance(value, cst.Integer):
        return value.value
    return None


def _literal_place(text: str) -> Place | None:
    literal = parse_device_string(text)
    if literal is None:
        return None
    if literal.is_host:
        return HOST_PLACE if literal.type == "cpu" else None
    return Place(PlaceKind.DEVICE, repr(text), frozenset({literal.type}), literal.index)


def _cuda_index_of(node: cst.BaseExpression, value: Value) -> int | None:
    """The CUDA device an expression names: a number, or a CUDA device whose index is known."""
    number = integer_value(node)
    if number is not None:
        return number
    device = value.device
    if device is not None and device.kind is PlaceKind.DEVICE and device.types == CUDA_ONLY:
        return device.index
    return None


def _place_types(place: Place) -> frozenset[str] | None:
    return frozenset({"cpu"}) if place.kind is PlaceKind.HOST else place.types if place.kind is PlaceKind.DEVICE else None


def _string_device_types(node: cst.BaseExpression) -> set[str | None]:
    """`"cuda" if a else "mps" if b else "cpu"` -> {"cuda", "mps", "cpu"}."""
    if isinstance(node, cst.IfExp):
        return _string_device_types(node.body) | _string_device_types(node.orelse)
    return {_string_device_type(node)}


def _string_device_type(node: cst.BaseExpression) -> str | None:
    text = string_value(node)
    if text is None:
        return None
    literal = parse_device_string(text)
    return literal.type if literal is not None else None


def _pattern_names(pattern: cst.MatchPattern) -> list[str]:
    names: list[str] = []
    stack: list[cst.CSTNode] = [pattern]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.MatchAs) and current.name is not None or isinstance(current, cst.MatchStar) and current.name is not None:
            names.append(current.name.value)
        elif isinstance(current, cst.MatchMapping) and current.rest is not None:
            names.append(current.rest.value)
        stack.extend(current.children)
    return names


def _bound_by_comprehension(node: cst.CSTNode, name: str) -> bool:
    clause = getattr(node, "for_in", None)
    while isinstance(clause, cst.CompFor):
        if any(target.value == name for target in names_bound_by(clause.target)):
            return True
        clause = clause.inner_for_in
    return False


def _test_text(test: cst.BaseExpression) -> tuple[str, bool]:
    """A test's text without spaces and outer `not`s, and whether it holds when that text does."""
    holds = True
    while type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        test, holds = test.expression, not holds
    return "".join(_EMPTY_MODULE.code_for_node(test).split()), holds


_EMPTY_MODULE = cst.Module(body=[])


def _asks_about_the_wrapper(test: cst.BaseExpression) -> bool:
    """`isinstance(model, nn.DataParallel)`, `hasattr(model, "module")`: a test whose sides
    the flow narrows to the wrapper and the bare model, not one that chose to wrap."""
    while type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        test = test.expression
    return type(test) is cst.Call and type(test.func) is cst.Name and test.func.value in ("isinstance", "hasattr")


def _remember_the_wrapping_test(joined: Env, body: Env, other: Env, test: cst.BaseExpression,
                                taken_in_cpu_mode: ModeConstant | None) -> None:
    """Names wrapped on one side of a test and bare on the other keep the test (see
    `Value.wrapped_when`)."""
    text: tuple[str, bool] | None = None
    cpu_side = cpu_mode.truth(taken_in_cpu_mode)
    for key, value in joined.items():
        if value.wrapped_when is not None or value.wrapping is not Wrapping.MAYBE:
            continue
        in_body, in_other = body.get(key), other.get(key)
        if in_body is None or in_other is None:
            continue
        if text is None:
            text = _test_text(test)
        if Wrapping.MAYBE in (in_body.wrapping, in_other.wrapping):
            # Wrapped again under the same test (`if multi_gpu:` in a helper, then in the
            # script): still wrapped where it holds.
            inner = in_body.wrapped_when if in_body.wrapping is Wrapping.MAYBE else in_other.wrapped_when
            definite = in_other if in_body.wrapping is Wrapping.MAYBE else in_body
            if inner is not None and inner.text == text[0] and definite.wrapping is not Wrapping.MAYBE \
                    and (definite.wrapping is Wrapping.YES) is (definite is in_body) is (inner.holds is text[1]):
                joined[key] = replace(value, wrapped_when=inner)
            continue
        body_wraps = in_body.wrapping is Wrapping.YES
        bare_in_cpu_mode = cpu_side is not None and (cpu_side is not body_wraps)
        bare = in_other if body_wraps else in_body
        if bare.kinds != _MODULE_ONLY and not (bare_in_cpu_mode and bare.kinds == _UNKNOWN_ONLY):
            # What the other side holds must be the bare model: a model the file made, or,
            # where the test chose the device, what the GPU side wrapped (`if args.cuda: model =
            # nn.DataParallel(model)`: the author took it for bare). `if opt.fp16: model =
            # nn.DataParallel(model)` may leave what another file's factory wrapped already.
            continue
        joined[key] = replace(value, wrapped_when=WrappingTest(text[0], body_wraps is text[1], bare_in_cpu_mode))


def _as_wrapped(value: Value, wrapped: bool) -> Value:
    """A model that may be wrapped, seen where a test says whether it is: the wrapper, or the
    model it wraps."""
    return replace(value, kinds=frozenset({Kind.WRAPPED_MODULE}) if wrapped else (
        value.kinds - {Kind.WRAPPED_MODULE} or frozenset({Kind.MODULE})))


def _mentions(node: cst.CSTNode, key: str) -> bool:
    """Whether the code reads the place `key` names (`generator`, `self.net`)."""
    pending: list[cst.CSTNode] = [node]
    while pending:
        current = pending.pop()
        if (type(current) is cst.Name or type(current) is cst.Attribute) and place_key(current) == key:
            return True
        pending.extend(child_nodes(current))
    return False


def _modules_read(node: cst.CSTNode) -> dict[str, cst.BaseExpression]:
    """The places whose `.module` a branch reads (`generator.module`), nested functions apart."""
    found: dict[str, cst.BaseExpression] = {}
    pending: list[cst.CSTNode] = [node]
    while pending:
        current = pending.pop()
        if type(current) is cst.Attribute and current.attr.value == "module":
            key = place_key(current.value)
            if key is not None:
                found.setdefault(key, current.value)
        if type(current) in (cst.FunctionDef, cst.ClassDef, cst.Lambda) and current is not node:
            continue
        pending.extend(child_nodes(current))
    return found
