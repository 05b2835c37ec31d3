"""Where a program uses CUDA itself, and what says it is meant to run without a GPU.

Shared by the rules about CUDA that a CPU-only run reaches (TDL007) and CUDA hard-coded in a
program with no CPU mode (TDL203): which calls use CUDA, and which calls are evidence of a
CPU mode that the flow model's tests (`FlowModel.offers_cpu_mode`) do not show.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Protocol

import libcst as cst

from torchdevlint.analysis.brains import naming, torch_api
from torchdevlint.analysis.devices import (
    LEGACY_CUDA_TENSOR_TYPES,
    DeviceLiteral,
    asks_for_gpu,
    calls_in,
    device_literal,
    integer_value,
    mentions_any,
    string_value,
)
from torchdevlint.analysis.flow.cpu_mode import option_offers_cpu_mode
from torchdevlint.analysis.flow.results import FlowQueries
from torchdevlint.analysis.flow.values import Kind
from torchdevlint.analysis.names import EXIT_BUILTINS, EXIT_FUNCTIONS, ImportTable, NameResolver
from torchdevlint.analysis.tree import first_argument, keyword_argument

if TYPE_CHECKING:
    from torchdevlint.project_scan import CpuModeOption

# Checks whose answer may be "no GPU": code calling one expects to run without a GPU.
CPU_FALLBACK_CHECKS = frozenset(
    {"torch.cuda.is_available", "torch.accelerator.is_available", "torch.backends.mps.is_available"}
)
# Calls that take a device type but fall back (or only warn) without a GPU.
_NEEDING_A_GPU = LEGACY_CUDA_TENSOR_TYPES | torch_api.CUDA_CALLS_NEEDING_A_GPU
_TOLERANT_CALLEES = ("torch.amp.", "torch.cuda.amp.", "torch.cpu.amp.", "torch.autocast", "torch.cuda.")


def _last_name(func: cst.BaseExpression) -> str | None:
    """`is_available` for `torch.cuda.is_available` and for an imported `is_available`: a
    test that costs nothing, before the import table is asked."""
    return func.attr.value if type(func) is cst.Attribute else func.value if type(func) is cst.Name else None


class UseKind(Enum):
    MOVE = "`.cuda()`"
    DEVICE_ARGUMENT = "a `\"cuda\"` device"
    LEGACY_CONSTRUCTOR = "a `torch.cuda.*Tensor` constructor"
    CUDA_CALL = "a `torch.cuda` call that needs a GPU"
    # A call of a name that may hold a legacy constructor (`Tensor = torch.cuda.FloatTensor`):
    # a use once the flow model says it does.
    ALIAS_CALL = "a legacy constructor through another name"
    # A device variable bound to CUDA (`device = torch.device("cuda")`, `device = "cuda"`):
    # every use of the variable then allocates there.
    DEVICE_VARIABLE = "a device variable bound to `\"cuda\"`"
    # `x.pin_memory()`: page-locked memory for an accelerator, which a CPU-only build refuses
    # ("Cannot access accelerator device when none is available").
    PIN_MEMORY = "`.pin_memory()`"


@dataclass(frozen=True)
class CudaUse:
    node: cst.CSTNode
    kind: UseKind
    # For a device argument: which GPU it names (`"cuda:1"`), if any.
    index: int | None = None


_REFERENCE_ONLY = frozenset({Kind.REFERENCE})


def cuda_uses(call: cst.Call, names: NameResolver, constructor_aliases: frozenset[str] | set[str],
              flow: FlowQueries, ancestors: Sequence[cst.CSTNode]) -> list[CudaUse]:
    """The CUDA uses a call makes: the call itself, or `"cuda"` handed to it (`ancestors`:
    the call's, nearest first)."""
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value == "cuda":
        if isinstance(func.value, cst.Call) and isinstance(func.value.func, cst.Name) and func.value.func.value == "super":
            return []
        if isinstance(func.value, cst.Name) and flow.value_of(func.value).kinds == _REFERENCE_ONLY \
                and not (names.qualified_name(func) or "").startswith("torch."):
            return []  # `utils.cuda(x)`: a helper of another module (which may well ask for a GPU)
        if call.args and device_that_may_be_the_cpu(call, flow, ancestors) is not None:
            return []  # no CUDA use: where the device is the CPU it fails otherwise (TDL027)
        return [CudaUse(call, UseKind.MOVE)]
    if isinstance(func, cst.Attribute) and func.attr.value == "pin_memory" and not call.args \
            and not _inside_method_named("pin_memory", ancestors):
        # A batch class's own `pin_memory()` runs only where the DataLoader pins, with a GPU.
        return [CudaUse(call, UseKind.PIN_MEMORY)]
    needing_a_gpu = names.qualified_name(func, among=_NEEDING_A_GPU)
    if needing_a_gpu in LEGACY_CUDA_TENSOR_TYPES:
        return [CudaUse(call, UseKind.LEGACY_CONSTRUCTOR)]
    if needing_a_gpu is not None:
        return [CudaUse(call, UseKind.CUDA_CALL)]
    if isinstance(func, cst.Name) and func.value in constructor_aliases:
        return [CudaUse(call, UseKind.ALIAS_CALL)]
    is_move = isinstance(func, cst.Attribute) and func.attr.value == "to"
    if not any(_hands_cuda(arg, position, is_move, names) for position, arg in enumerate(call.args)):
        return []
    # Only now the callee matters (asked last: what a name refers to may cost an interpretation).
    qualified = names.qualified_name(func)
    if qualified is not None and qualified.startswith(_TOLERANT_CALLEES):
        return []
    uses: list[CudaUse] = []
    for position, arg in enumerate(call.args):
        keyword = arg.keyword.value if arg.keyword is not None else None
        if (
            is_move and (keyword == "device" or keyword is None and position == 0)
            or keyword == "device" and qualified is not None and qualified.startswith("torch.")
            or keyword == "map_location" and qualified in torch_api.TORCH_LOAD
        ):
            literal = _device_given(arg.value, names, keyword)
            if literal is not None and literal.type == "cuda":
                uses.append(CudaUse(arg.value, UseKind.DEVICE_ARGUMENT, literal.index))
    return uses


def _device_given(node: cst.BaseExpression, names: NameResolver, keyword: str | None) -> DeviceLiteral | None:
    """A device literal handed as a device: a string, `torch.device(...)`, or a GPU's number
    (`x.to(0)`, `torch.zeros(3, device=1)`: CUDA devices by their ordinal)."""
    literal = device_literal(node, names)
    if literal is not None or keyword == "map_location":
        return literal
    index = integer_value(node)
    return DeviceLiteral("cuda", index) if index is not None and index >= 0 else None


def _inside_method_named(name: str, ancestors: Sequence[cst.CSTNode]) -> bool:
    function = next((node for node in ancestors if type(node) is cst.FunctionDef), None)
    return function is not None and function.name.value == name


def device_that_may_be_the_cpu(call: cst.Call, flow: FlowQueries,
                               ancestors: Sequence[cst.CSTNode]) -> cst.BaseExpression | None:
    """The device handed to `.cuda(device)` where it may be the CPU (TDL027): one with a CPU
    fallback, or one the CPU mode sets to "cpu" (another tensor's `.device`, `args.device`, a
    parameter named as a device), in code the CPU mode reaches (`ancestors`: the call's,
    nearest first). None for other calls, for GPU indices, GPU settings and devices that are
    GPUs on every path, and under a test the CPU mode fails (`if device.type == "cuda":`).
    Such a call is no CUDA use: where the device is the CPU it raises for another reason than
    a missing GPU."""
    func = call.func
    if type(func) is not cst.Attribute or func.attr.value != "cuda":
        return None
    if type(func.value) is cst.Call and type(func.value.func) is cst.Name and func.value.func.value == "super":
        return None  # an override of `cuda` handing its argument on
    device = first_argument(call, "device")
    if device is None:
        return None
    value = flow.value_of(device)
    if value.device is not None and value.device.types is not None:
        if "cpu" not in value.device.types:
            return None
    elif value.in_cpu_mode != "cpu":
        return None
    elif not _data_device(device, flow) and flow.calls_cuda_without_a_device() \
            and not flow.offers_cpu_mode(by_gpu_settings=True):
        # `self.device` handed in, in a file that also calls `.cuda()` bare and has no CPU mode:
        # GPU-only code, whose `device` names a GPU (another tensor's `.device` may still be the CPU).
        return None
    return device if flow.reached_in_cpu_mode(call, ancestors) else None


def _data_device(device: cst.BaseExpression, flow: FlowQueries) -> bool:
    """A tensor's or a module's own `.device` (`x.device`): where that data is, maybe the CPU."""
    if type(device) is not cst.Attribute or device.attr.value != "device":
        return False
    owner = flow.value_of(device.value)
    return owner.is_tensor_like or owner.is_module_like


def _hands_cuda(arg: cst.Arg, position: int, is_move: bool, names: NameResolver) -> bool:
    """A CUDA device literal passed where a callee may take a device."""
    keyword = arg.keyword.value if arg.keyword is not None else None
    if not (keyword in ("device", "map_location") or is_move and keyword is None and position == 0):
        return False
    literal = _device_given(arg.value, names, keyword)
    return literal is not None and literal.type == "cuda"


def device_variable_use(node: cst.Assign | cst.AnnAssign, names: NameResolver) -> CudaUse | None:
    """`device = torch.device("cuda")` or `device = "cuda"`: a device variable that is CUDA
    whatever the machine (a name the naming brain reads as a device, or any name bound to a
    `torch.device(...)`)."""
    targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
    value = node.value
    if value is None or len(targets) != 1 or not isinstance(targets[0], (cst.Name, cst.Attribute)):
        return None
    literal = device_literal(value, names)
    if literal is None or literal.type != "cuda":
        return None
    is_call = isinstance(value, cst.Call)
    name = targets[0].value if isinstance(targets[0], cst.Name) else targets[0].attr.value
    if not is_call and not any(word in name.lower() for word in naming.DEVICE_SETTING_WORDS):
        return None
    return CudaUse(value, UseKind.DEVICE_VARIABLE, literal.index)


def names_a_constructor_alias(target: cst.BaseAssignTargetExpression, value: cst.BaseExpression) -> str | None:
    """`Tensor = torch.cuda.FloatTensor`: a name whose calls may be legacy constructors (the
    guarded `... if cuda else torch.FloatTensor` holds either, and is no use)."""
    if isinstance(target, cst.Name) and isinstance(value, cst.Attribute) and value.attr.value.endswith("Tensor"):
        return target.value
    return None


def shows_cpu_mode(call: cst.Call, names: NameResolver, ancestors: Sequence[cst.CSTNode]) -> bool:
    """A call that says the program runs without a GPU: an availability check that is no
    requirement (not in an `assert`, not an `if ...: exit`), or a command-line option for
    the CPU (see `cpu_mode.option_offers_cpu_mode`)."""
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value == "add_argument":
        return option_offers_cpu_mode(call)
    return names.qualified_name(func, among=CPU_FALLBACK_CHECKS) is not None and not requires_gpu(call, ancestors)


def declares_gpu_only(call: cst.Call, names: NameResolver, ancestors: Sequence[cst.CSTNode]) -> bool:
    """A call that makes the whole program need GPUs: a process group on NCCL, which runs
    only on CUDA devices, set up whatever the settings (`init_process_group("nccl")` in no
    `if`, where `"nccl" if torch.cuda.is_available() else "gloo"` or an `if args.distributed:`
    leaves another way)."""
    if names.qualified_name(call.func, among=torch_api.INIT_PROCESS_GROUP) is None:
        return False
    backend = keyword_argument(call, "backend")
    if backend is None:
        positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
        backend = positional[0] if positional else None
    text = string_value(backend.value) if backend is not None else None
    if text is None or text.lower() != "nccl":
        return False
    return not any(isinstance(ancestor, (cst.If, cst.IfExp, cst.While, cst.Try, cst.TryStar, cst.Match))
                   for ancestor in ancestors)


def requires_gpu(call: cst.Call, ancestors: Sequence[cst.CSTNode]) -> bool:
    """A check inside an `assert` or an `if ...: raise/exit` says the program needs a GPU."""
    for ancestor in ancestors:
        if isinstance(ancestor, cst.Assert):
            return True
        if isinstance(ancestor, cst.If) and ends_block(ancestor.body) and call in calls_in(ancestor.test):
            return True
        if isinstance(ancestor, (cst.BaseSuite, cst.FunctionDef)):
            return False
    return False


def ends_block(body: cst.BaseSuite) -> bool:
    """Whether a block ends in `raise`, `return`, `continue`, `break` or an exit call."""
    statements = body.body if isinstance(body, cst.IndentedBlock) else [body]
    if not statements:
        return False
    last = statements[-1]
    small = last.body if isinstance(last, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) else []
    for statement in small:
        if isinstance(statement, (cst.Raise, cst.Return, cst.Continue, cst.Break)):
            return True
        if isinstance(statement, cst.Expr) and isinstance(statement.value, cst.Call):
            func = statement.value.func
            name = func.value if isinstance(func, cst.Name) else None
            if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
                name = f"{func.value.value}.{func.attr.value}"
            if name in EXIT_BUILTINS or name in EXIT_FUNCTIONS:
                return True
    return False


def is_device_test(test: cst.CSTNode, names: NameResolver) -> bool:
    """A test about the device: it names one (`use_cuda`, `args.gpu`, `"cpu"`) or asks for one."""
    return mentions_any(test, naming.DEVICE_CONTEXT_WORDS, strings=True, whole_words=naming.WHOLE_DEVICE_WORDS) \
        or asks_for_gpu(test, names)


# The kinds of ancestor that `kept_for_the_gpu` looks at.
_KEEPING_KINDS = frozenset({cst.If, cst.IfExp, cst.While, cst.BooleanOperation, cst.Try, cst.TryStar, cst.FunctionDef,
                            cst.ClassDef, cst.Decorator, cst.Param})


def kept_for_the_gpu(node: cst.CSTNode, ancestors: Sequence[cst.CSTNode], names: NameResolver,
                     flow: FlowQueries) -> bool:
    """Where the flow model cannot tell, whether the code around a use keeps it for a GPU:
    a test about the device with an answer the model does not know (either branch), a branch
    the file's constants rule out, a `try`
    with a handler, a function or class named for the GPU or decorated with a GPU condition
    (`@pytest.mark.skipif(not torch.cuda.is_available(), ...)`, `@RunIf(min_cuda_gpus=1)`);
    decorators and default values are no uses at all."""
    child = node
    for ancestor in ancestors:
        kind = type(ancestor)
        if kind not in _KEEPING_KINDS:  # most ancestors: an exact type test, not LibCST's slow ABCs
            child = ancestor
            continue
        if isinstance(ancestor, (cst.If, cst.IfExp, cst.While)) and child is not ancestor.test:
            if flow.cpu_mode_truth(ancestor.test) is None and is_device_test(ancestor.test, names):
                return True
            # A branch the file's constants rule out (`if FusedNorm is not None:` after
            # `FusedNorm = None`) never runs.
            holds = flow.constant_truth(ancestor.test)
            if holds is not None and holds is (child is not ancestor.body):
                return True
        elif isinstance(ancestor, cst.BooleanOperation) and child is ancestor.right:
            if flow.cpu_mode_truth(ancestor.left) is None and is_device_test(ancestor.left, names):
                return True
        elif isinstance(ancestor, (cst.Try, cst.TryStar)) and child is ancestor.body and ancestor.handlers:
            return True
        elif isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
            if any(is_device_test(d.decorator, names) for d in ancestor.decorators):
                return True
            # Named for the GPU (`def to_cuda(x)`): kept for it, unless the file itself calls
            # it where the CPU mode goes (`print(get_gpu_name())`).
            if mentions_any(ancestor.name, naming.DEVICE_CONTEXT_WORDS, whole_words=naming.WHOLE_DEVICE_WORDS) and not (
                    isinstance(ancestor, cst.FunctionDef) and flow.called_in_cpu_mode(ancestor)):
                return True
        elif isinstance(ancestor, (cst.Decorator, cst.Param)):
            return True
        child = ancestor
    return False


@dataclass(frozen=True)
class UnavoidableCudaUse:
    """A CUDA use where the program offers no CPU mode (see `CudaProgram.hard_coded_cuda`)."""

    use: CudaUse
    ancestors: tuple[cst.CSTNode, ...]
    # Whether the name `device` would mean something else where the use is.
    device_shadowed: bool


# The name a program's device variable conventionally has.
DEVICE_VARIABLE = "device"


class CudaWalkContext(Protocol):
    """What `CudaProgram` reads of the walk that feeds it (a rule's `FileContext`)."""

    @property
    def imports(self) -> ImportTable: ...

    @property
    def names(self) -> NameResolver: ...

    @property
    def module(self) -> cst.Module: ...

    @property
    def current_scope(self) -> cst.CSTNode: ...

    def binding_scope(self, name: str) -> cst.CSTNode | None: ...

    def ancestors(self, node: cst.CSTNode) -> list[cst.CSTNode]: ...

    @property
    def flow(self) -> FlowQueries: ...

    def scopes(self) -> list[cst.CSTNode]: ...

    def project_cpu_mode(self) -> CpuModeOption | None: ...


class CudaProgram:
    """What the file says, so far in the walk, about running with or without a GPU.

    A shared analysis (`context.shared(CudaProgram)`), fed by the engine's walk: the rules
    about CUDA that a CPU-only run reaches (TDL007) and CUDA hard-coded where no CPU mode is
    offered (TDL203) ask it instead of keeping their own books. Facts about a point in the
    file hold as of the node being visited; facts about the whole file, at `leave_Module`.
    """

    def __init__(self, context: CudaWalkContext) -> None:
        self._context = context
        # An availability check that is no GPU requirement, or a command-line option for the
        # CPU, outside the script's top-level functions: the program runs without a GPU.
        self._cpu_mode_shown = False
        # The script's top-level functions that show one: only those it uses count.
        self._cpu_mode_shown_in: list[cst.FunctionDef] = []
        # A process group on NCCL set up whatever the settings: the program needs GPUs.
        self.declares_gpu_only = False
        # The program stops without a GPU: an availability check in an `assert`, or in a
        # module-level `if` that exits.
        self.says_it_needs_a_gpu = False
        # Names assigned a legacy constructor (`Tensor = torch.cuda.FloatTensor`): their calls
        # are uses once the flow model confirms what they hold.
        self.constructor_aliases: set[str] = set()
        # Scopes (by id of their node) that end, where a device test of unknown answer says
        # there is no GPU, before anything after it runs (`if not has_gpu(): return`), or that
        # a `pytestmark` skips without a GPU.
        self._exited_scopes: set[int] = set()
        # Device variables with a CPU fallback, per binding scope.
        self._fallback_devices: dict[int, set[str]] = {}
        # Every CUDA use seen, and (once asked at the end) those the program cannot avoid.
        self._cuda_uses: list[UnavoidableCudaUse] = []
        self._hard_coded: list[UnavoidableCudaUse] | None = None
        self._own_run_hard_coded: list[UnavoidableCudaUse] | None = None

    # ---- questions -----------------------------------------------------------------------

    @property
    def shows_cpu_mode(self) -> bool:
        """Code the program runs says it runs without a GPU (see `shows_cpu_mode`); a helper
        the script never calls says nothing. Whole-file: ask at the end."""
        if self._cpu_mode_shown:
            return True
        flow = self._context.flow
        return any(not flow.unused_in_a_script(function) for function in self._cpu_mode_shown_in)

    def model_method_here(self) -> cst.FunctionDef | None:
        """The method of an `nn.Module` (not `__init__`) whose code the point being visited is,
        nested functions and lambdas included: code that runs where the model's data is."""
        method = next((scope for scope in self._context.scopes() if isinstance(scope, cst.FunctionDef)), None)
        if method is None or method.name.value == "__init__":
            return None
        flow = self._context.flow
        owner = flow.class_of_method(method)
        return method if owner is not None and flow.is_module_class(owner) else None

    @functools.cached_property
    def cpu_mode_elsewhere(self) -> CpuModeOption | None:
        """The option of another file that gives a program importing this one a CPU mode
        (`project_scan`): the file's own code need not show it."""
        return self._context.project_cpu_mode()

    def exits_without_gpu(self, ancestors: Sequence[cst.CSTNode]) -> bool:
        """Whether a scope around a point (its ancestors) has already ended without a GPU."""
        return any(id(scope) in self._exited_scopes for scope in ancestors)

    def fallback_device_variable(self) -> str | None:
        """A device variable with a CPU fallback (`device = torch.device("cuda" if
        torch.cuda.is_available() else "cpu")`) that the point being visited reads."""
        for name in sorted({name for names in self._fallback_devices.values() for name in names}):
            scope = self._context.binding_scope(name)
            if scope is not None and name in self._fallback_devices.get(id(scope), set()):
                return name
        return None

    # ---- the walk --------------------------------------------------------------------------

    def _is_device_test(self, test: cst.CSTNode) -> bool:
        return is_device_test(test, self._context.imports)

    def hard_coded_cuda(self) -> list[UnavoidableCudaUse]:
        """The CUDA uses of a program that offers no CPU mode, which a run without a GPU
        reaches unguarded: the program cannot run without one. Whole-file: ask at the end."""
        if self._hard_coded is None:
            self._hard_coded = self._unavoidable_cuda_uses()
        return self._hard_coded

    def hard_coded_cuda_in_its_own_run(self) -> list[UnavoidableCudaUse]:
        """As `hard_coded_cuda`, for the file run as a script (its main guard), whatever CPU mode
        another program that imports it has: that program does not run the guard's code."""
        if self._own_run_hard_coded is None:
            self._own_run_hard_coded = self._unavoidable_cuda_uses(own_run=True)
        return self._own_run_hard_coded

    def _unavoidable_cuda_uses(self, *, own_run: bool = False) -> list[UnavoidableCudaUse]:
        if not self._cuda_uses or self.shows_cpu_mode or self.cpu_mode_elsewhere is not None and not own_run:
            return []  # TDL007's: a CPU mode reaches them
        if any(self._context.imports.imports_from(package) for package in torch_api.DISTRIBUTED_PACKAGES):
            # Written for several GPU processes (NCCL, Horovod): portable by another road (the backend).
            return []
        flow = self._context.flow
        if flow.offers_cpu_mode(by_gpu_settings=True):
            return []
        names = self._context.names
        found: list[UnavoidableCudaUse] = []
        for hard_coded in self._cuda_uses:
            use = hard_coded.use
            if use.kind is UseKind.ALIAS_CALL:
                call = cst.ensure_type(use.node, cst.Call)
                # A name bound to a type (`Tensor = torch.cuda.FloatTensor`): the exact answer.
                if names.qualified_name(call.func) not in LEGACY_CUDA_TENSOR_TYPES:
                    continue
            if flow.reached_in_cpu_mode(use.node, hard_coded.ancestors) and not kept_for_the_gpu(
                    use.node, hard_coded.ancestors, names, flow):
                found.append(hard_coded)
        return found

    def visit_Call(self, node: cst.Call) -> None:
        self._record_cuda_uses(node)
        if self._cpu_mode_shown and self.declares_gpu_only:
            return
        ancestors = self._context.ancestors(node)
        if shows_cpu_mode(node, self._context.imports, ancestors):
            top_function = ancestors[-2] if len(ancestors) >= 2 and type(ancestors[-2]) is cst.FunctionDef else None
            if top_function is None:
                self._cpu_mode_shown = True
            elif all(function is not top_function for function in self._cpu_mode_shown_in):
                self._cpu_mode_shown_in.append(top_function)
        elif declares_gpu_only(node, self._context.imports, ancestors):
            self.declares_gpu_only = True
        elif _last_name(node.func) == "is_available" \
                and self._context.imports.qualified_name(node.func) in CPU_FALLBACK_CHECKS and requires_gpu(node, ancestors) \
                and (any(isinstance(ancestor, cst.Assert) for ancestor in ancestors)
                     or isinstance(self._context.current_scope, cst.Module)):
            # `assert torch.cuda.is_available()`, or a module-level `if not ...: sys.exit()`.
            self.says_it_needs_a_gpu = True

    def _record_cuda_uses(self, node: cst.Call) -> None:
        ancestors = tuple(self._context.ancestors(node))
        uses = cuda_uses(node, self._context.names, self.constructor_aliases, self._context.flow, ancestors)
        if not uses:
            return
        device = self._context.binding_scope(DEVICE_VARIABLE)
        shadowed = device is not None and not isinstance(device, cst.Module)
        for use in uses:
            self._cuda_uses.append(UnavoidableCudaUse(use, ancestors if use.node is node else (node, *ancestors), shadowed))

    def _record_device_variable(self, node: cst.Assign | cst.AnnAssign) -> None:
        use = device_variable_use(node, self._context.names)
        if use is not None:
            self._cuda_uses.append(UnavoidableCudaUse(use, tuple(self._context.ancestors(use.node)), device_shadowed=True))

    def leave_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._record_device_variable(node)

    def visit_Assert(self, node: cst.Assert) -> None:
        if self._is_device_test(node.test):
            self._exited_scopes.add(id(self._context.current_scope))

    def visit_If(self, node: cst.If) -> None:
        if self._is_device_test(node.test) and ends_block(node.body):
            self._exited_scopes.add(id(self._context.current_scope))

    def leave_Assign(self, node: cst.Assign) -> None:
        self._record_device_variable(node)
        value = node.value
        scope = self._context.current_scope
        for target in node.targets:
            name = target.target
            if isinstance(name, cst.Name) and self._is_fallback_device(value):
                self._fallback_devices.setdefault(id(scope), set()).add(name.value)
            elif isinstance(name, cst.Name):
                self._fallback_devices.get(id(scope), set()).discard(name.value)
            alias = names_a_constructor_alias(name, value)
            if alias is not None:
                self.constructor_aliases.add(alias)
        # `pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), ...)` guards the module.
        if any(isinstance(t.target, cst.Name) and t.target.value == "pytestmark" for t in node.targets):
            if self._is_device_test(value) and isinstance(scope, cst.Module):
                self._exited_scopes.add(id(scope))

    def _is_fallback_device(self, value: cst.BaseExpression) -> bool:
        """`torch.device("cuda" if torch.cuda.is_available() else "cpu")` and the like."""
        if not isinstance(value, (cst.Call, cst.IfExp)):
            return False
        imports = self._context.imports
        if isinstance(value, cst.Call) and imports.qualified_name(value.func) != "torch.device":
            return False
        conditionals = [value] if isinstance(value, cst.IfExp) else [
            arg.value for arg in value.args if isinstance(arg.value, cst.IfExp)
        ]
        for conditional in conditionals:
            literals = [device_literal(branch, imports) for branch in (conditional.body, conditional.orelse)]
            if any(lit is not None and lit.is_host for lit in literals) and self._is_device_test(conditional.test):
                return True
        return False
