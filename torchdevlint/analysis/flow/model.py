"""The file-wide device-flow model: lazily interpreted functions, their summaries, classes.

Nothing is computed until a rule asks. Asking about a node interprets the function it is in
(once; the module body first, since functions read its names), and the functions that one
calls, through context-insensitive summaries of their return values. Methods see `self` as
an instance of their class: inside a Module's methods its parameters, submodules, buffers
and `forward`'s inputs are on one symbolic place, the module's device. Given an editor's
`FlowMemory`, a function its last version interpreted is reused where nothing it asked
about changed (see `memory`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

import libcst as cst

from torchdevlint.analysis.brains import naming, torch_api
from torchdevlint.analysis.flow import cpu_mode
from torchdevlint.analysis.flow.call_sites import (
    CallSite,
    NameUses,
    depends_on_device_parameter,
    name_uses,
    parameters_from_call_sites,
    refined,
    takes_call_site_arguments,
)
from torchdevlint.analysis.flow.checkpoint_files import CheckpointFiles
from torchdevlint.analysis.flow.constants import ModuleConstants
from torchdevlint.analysis.flow.device_settings import DeviceSettings, device_settings_in
from torchdevlint.analysis.flow.interpreter import Interpreter, Oracle, names_used_as_tensors
from torchdevlint.analysis.flow.memory import FlowMemory, FlowRecord, RecordingOracle, answers_again, recordable
from torchdevlint.analysis.flow.results import (
    Env,
    FixAgreement,
    FunctionFlow,
    Held,
    HostMeeting,
    Meeting,
    OriginSite,
    SavedStateDict,
    SavedWrapper,
    Scope,
)
from torchdevlint.analysis.flow.values import (
    CPU_MODE_UNREACHED,
    HOST_PLACE,
    MODULE_DEVICE_PLACE,
    SCALAR,
    UNKNOWN,
    Kind,
    Off,
    Place,
    PlaceKind,
    Value,
    Wrapping,
    cuda_place,
    device_value,
    tensor,
)
from torchdevlint.analysis.local_names import rebound_parameters
from torchdevlint.analysis.names import ImportTable, dotted_name, module_bound_names, module_import_table
from torchdevlint.analysis.tree import child_nodes, descendants, first_argument, is_main_guard
from torchdevlint.budget import Deadline, NoDeadline

# Sequence lengths: data, unless the function hands them to a function wanting them on the CPU.
_LENGTH_WORDS = ("len",)
_SCALAR_ANNOTATIONS = frozenset({"int", "float", "bool", "str", "list", "tuple", "dict"})
_NUMBER_ANNOTATIONS = frozenset({"int", "float"})
# A value on the host on every path.
_JUST_HOST_PLACES = frozenset({HOST_PLACE})
# The kinds of ancestor that can keep the CPU mode out of what they hold.
_GATING_KINDS = frozenset({cst.If, cst.IfExp, cst.While, cst.BooleanOperation, cst.For, cst.FunctionDef})
# Interpretations of one function with a call's own arguments, at most.
_PER_CALL_RUNS = 4


# How many statements `fix_agreement` may interpret again, in all, to judge the fixes of one
# body: each judgement interprets the whole body, so a body of 50 statements has 160 fixes
# judged, and one of 2,000 (a thousand discarded moves) 4, which keeps the work linear.
FIX_JUDGEMENT_STATEMENTS = 8_000


@dataclass
class _Definition:
    node: cst.FunctionDef | cst.ClassDef
    # The function or module body whose execution defines it (for free names).
    enclosing: Scope
    owner: cst.ClassDef | None


@dataclass
class _ClassSummary:
    node: cst.ClassDef
    is_module: bool
    methods: dict[str, cst.FunctionDef]
    moves_itself: bool
    attributes: dict[str, Value] | None = None
    # Methods that were running when `attributes` was collected, and so not read (ids).
    skipped: frozenset[int] = frozenset()
    collecting: bool = False
    class_level: dict[str, Value] = field(default_factory=dict)
    # A base, or a base's base in the file, is a class of another library than torch.
    library_base: bool = False


class FlowModel:
    """Answers, for any expression, its value at its program point (see `value_of`)."""

    def __init__(self, module: cst.Module, enclosing_scope: Callable[[cst.CSTNode], Scope],
                 deadline: Deadline | None = None, source: str | None = None,
                 memory: FlowMemory | None = None,
                 project_module_classes: Callable[[], tuple[frozenset[str], frozenset[str], frozenset[str]]] | None = None,
                 project_default_device: Callable[[], bool] | None = None,
                 project_saves_the_file: Callable[[str, str, tuple[tuple[str, str], ...]], bool] | None = None
                 ) -> None:
        self.module = module
        # Whether a function or class of another file of the project (by qualified name) saves
        # the file a path's code names (see `project_scan.saves_the_file`).
        self._project_saves_the_file = project_saves_the_file
        # Names the module's body binds (read on first need).
        self._module_bound: set[str] | None = None
        # Whether another file of the program changes the default device (see
        # `project_scan.default_device_elsewhere`), asked once where it matters.
        self._project_default_device = project_default_device
        # `stem.Class` of the project's other files' Module classes (those that make layers of
        # their own, and all of them), and `stem.name` of its functions and classes that move
        # what they are handed (`project_scan.movers`), asked for once.
        self._project_module_classes = project_module_classes
        self._known_project_classes: tuple[frozenset[str], frozenset[str], frozenset[str]] | None = None
        self._project_mover_names: dict[str, list[str]] = {}
        # Origins (ids) whose host tensors meet device data or are returned (`host_data_reaches_a_device`).
        self._origins_reaching_a_device: frozenset[int] | None = None
        # Class id -> whether its methods move what it is handed (`class_moves_what_it_is_handed`).
        self._class_movers: dict[int, bool] = {}
        # Of all those classes: each class name -> the `stem.Class` entries defining it, and the stems.
        self._project_class_names: dict[str, list[str]] = {}
        self._project_class_stems: frozenset[str] = frozenset()
        # Class id -> whether it is a Module only through another file's base (see `model_wrapper_class`).
        self._model_wrapper_classes: dict[int, bool] = {}
        # Flows kept from the buffer's last version (an editor's), and kept for its next.
        self._memory = memory
        if memory is not None:
            memory.begin()
        # The text the module was parsed from (regenerated from the tree when not given).
        self._source = source
        # ids of the bodies that change the current CUDA device directly (see `entry_cuda_device`).
        self._device_setting_bodies: frozenset[int] | None = None
        self._entry_cuda_devices = {index: device_value(cuda_place("'cuda'", index)) for index in (0, None)}
        self._entry_default_device: tuple[Value | None] | None = None
        self._trains_only_on_the_host: bool | None = None
        self._names_no_accelerator: bool | None = None
        self._reads_wrapped_modules: bool | None = None
        self._makes_wrappers: bool | None = None
        self._script: bool | None = None
        # Class id -> whether the program keeps every instance on the host (see
        # `instances_stay_on_the_host`): asked for each factory of the class's methods.
        self._instances_on_the_host: dict[int, bool] = {}
        self._enclosing_scope = enclosing_scope
        self.deadline = deadline if deadline is not None else NoDeadline()
        self._definitions: dict[int, _Definition] = {}
        self._flows: dict[int, FunctionFlow] = {}
        self._in_progress: set[int] = set()
        # Body id -> the names it uses as tensors (see `Interpreter._used_as_tensor`).
        self._tensor_uses: dict[int, frozenset[str]] = {}
        # Scope id -> how many statements `fix_agreement` has interpreted again there (see
        # `FIX_JUDGEMENT_STATEMENTS`).
        self._fix_judgement_cost: dict[int, int] = {}
        # Flows being interpreted (their values so far), for class bases read meanwhile.
        self._running: dict[int, FunctionFlow] = {}
        # Flows that used provisional answers, reused while the question that made them lasts.
        self._provisional: dict[int, FunctionFlow] = {}
        self._classes: dict[int, _ClassSummary] = {}
        self._summaries: dict[int, Value] = {}
        # Counts answers given from unfinished work (a body still being interpreted, a class
        # whose attributes are being collected): a flow that used one is not kept.
        self._provisional_reads: set[int] = set()
        # Reads of a class's attributes while they are being collected (read as unknown), by
        # the body being interpreted and what it calls: each makes that body provisional, even
        # where a sibling's read had already marked the class. (Reads of attributes collected
        # while methods of the class ran are the running methods' own unfinished state: those
        # go by `_provisional_reads` alone.)
        self._unfinished_attribute_reads = 0
        self._host_meetings: list[HostMeeting] | None = None
        self._origins: dict[int, tuple[cst.Call, cst.CSTNode]] = {}
        # Checkpoint calls by id (see `Value.holds`), from every body interpreted.
        self._held: dict[int, tuple[Held, cst.BaseExpression]] = {}
        self._host_argument_losses: dict[int, tuple[tuple[int, str], ...]] = {}
        self._forward_host_arguments: dict[int, tuple[tuple[int, str], ...]] = {}
        # class id -> the parameters its `forward` hands, as they are, where the host is required.
        self._forward_host_requirements: dict[int, tuple[str, ...]] = {}
        # class id -> its attributes as the file's constructor calls make them (None: not known).
        self._constructed: dict[int, dict[str, Value] | None] = {}
        self._module_imports: ImportTable | None = None
        self._saved_state_dicts: list[SavedStateDict] | None = None
        self._checkpoint_files: CheckpointFiles | None = None
        self._constants: ModuleConstants | None = None
        self._loads_into_state_dicts: frozenset[int] | None = None
        # The file's own calls of each function (by call node), from the declared-parameter runs.
        self._call_sites: dict[int, dict[int, CallSite]] = {}
        # Runs with parameters from call sites or a fix applied: their calls are not recorded.
        self._specialising = 0
        self._specialised: dict[int, FunctionFlow | None] = {}
        self._specialised_entry: dict[int, Env] = {}
        # Functions whose call-site run is running now, and those whose callers' are being run first.
        self._specialising_now: set[int] = set()
        self._setting_up: set[int] = set()
        # The bodies being interpreted with declared parameters, innermost last, and the
        # call-site runs made meanwhile (good until those runs end).
        self._declared_runs: list[Scope] = []
        self._provisional_specialised: dict[int, FunctionFlow | None] = {}
        self._name_uses: NameUses | None = None
        # Results of calls run with their own arguments (see `_result_for_these_arguments`).
        self._per_call_results: dict[tuple[int, tuple[tuple[str, Value], ...]], Value | None] = {}
        # `meetings_of_call`: by call, and the distinct argument sets run per function.
        self._call_meetings: dict[int, list[Meeting]] = {}
        self._call_runs: dict[int, set[tuple[tuple[str, Value], ...]]] = {}
        self._per_call_arguments: dict[int, set[tuple[int, tuple[tuple[str, Value], ...]]]] = {}
        self._all_declared_done = False
        self._functions_reached_in_cpu_mode: dict[int, bool] = {}
        # What the module binds when it finishes on a GPU machine (see `gpu_world_outer_value`).
        self._gpu_world_final: tuple[Env | None] | None = None

    def entry_cuda_device(self, scope: cst.CSTNode) -> Value:
        """The current CUDA device where a body starts: cuda:0, unless code outside the body
        may change it first (`torch.cuda.set_device`, `with torch.cuda.device(n)` in another
        function, a nested one, or a lambda); then unknown until the body sets it. A body
        that itself holds every change starts on cuda:0, and the interpretation follows its
        changes branch by branch (ImageNet's `if args.gpu is not None: set_device(...)` and
        its `else: model.cuda()`)."""
        if self._device_setting_bodies is None:
            text = self._source if self._source is not None else self.module.code
            changes = "set_device" in text or "cuda.device(" in text
            reader = self._memory.device_settings if self._memory is not None else device_settings_in
            self._device_setting_bodies = _device_setting_bodies(self.module, reader) if changes else frozenset()
        index = 0 if self._device_setting_bodies <= {id(scope)} else None
        return self._entry_cuda_devices[index]

    def trains_only_on_the_host(self) -> bool:
        """A self-contained program that keeps all its data on the host: it trains a model
        itself (it calls `.backward()`) and its text names no accelerator, device, move or
        parallel wrapper anywhere (`naming.ACCELERATOR_TEXT`). Model code in it meets no GPU
        data; the same class in a file of models that another program moves may."""
        if self._trains_only_on_the_host is None:
            self._trains_only_on_the_host = ".backward(" in self._lower_text() and self.names_no_accelerator()
        return self._trains_only_on_the_host

    def instances_stay_on_the_host(self, class_node: cst.ClassDef) -> bool:
        """A program that trains itself (it calls `.backward()`) makes instances of the class
        and keeps every one of them on the host, while it moves models of another class to a
        GPU: no value of the file holding one may be on an accelerator (a notebook's CPU-only
        LSTM, beside the GPU version of its next cells)."""
        if ".backward(" not in self._lower_text():
            return False
        key = id(class_node)
        known = self._instances_on_the_host.get(key)
        if known is None:
            known = self._instances_on_the_host[key] = self._all_instances_on_the_host(class_node)
        return known

    def _all_instances_on_the_host(self, class_node: cst.ClassDef) -> bool:
        key = id(class_node)
        found = moved_elsewhere = False
        for flow in self.all_flows():
            if type(flow.node) is cst.FunctionDef and self.class_of_method(flow.node) is class_node:
                continue  # `self` in its own methods: wherever the instance is
            for value in flow.values.values():
                if value.instance_of != key:
                    moved_elsewhere = moved_elsewhere or value.is_module_like and value.places is not None and any(
                        place.kind is PlaceKind.DEVICE and place.may_be_accelerator for place in value.places)
                    continue
                if value.places is None or value.places != _JUST_HOST_PLACES:
                    return False
                found = True
        # Only where the program shows how it moves models (another class's, to a GPU): a
        # script that moves none may mean to move this one later.
        return found and moved_elsewhere

    def names_no_accelerator(self) -> bool:
        """The file's text names no accelerator, device, move or parallel wrapper anywhere
        (`naming.ACCELERATOR_TEXT`): nothing in it runs on a GPU."""
        if self._names_no_accelerator is None:
            text = self._lower_text()
            self._names_no_accelerator = not any(word in text for word in naming.ACCELERATOR_TEXT)
        return self._names_no_accelerator

    def calls_cuda_without_a_device(self) -> bool:
        """The file's text calls `.cuda()` with no device, or makes a CUDA stream, somewhere:
        code written for a GPU."""
        text = self._lower_text()
        return ".cuda()" in text or "torch.cuda.stream(" in text

    def makes_wrappers(self) -> bool:
        """The file's text names DataParallel or DistributedDataParallel: only then can a test
        wrap a model on one side (see `Value.wrapped_when`)."""
        if self._makes_wrappers is None:
            self._makes_wrappers = "DataParallel" in (self._source if self._source is not None else self.module.code)
        return self._makes_wrappers

    def reads_wrapped_modules(self) -> bool:
        """The file's text reads a `.module` attribute somewhere (`model.module`): only then
        can a branch unwrap a model (see `Interpreter._unwrapped_on_one_side`)."""
        if self._reads_wrapped_modules is None:
            self._reads_wrapped_modules = ".module" in (self._source if self._source is not None else self.module.code)
        return self._reads_wrapped_modules

    def _lower_text(self) -> str:
        return (self._source if self._source is not None else self.module.code).lower()

    @property
    def entry_default_device(self) -> Value | None:
        """Where tensor factories without `device=` put tensors where a body starts: on the
        host (None) unless the file changes the default device somewhere; then unknown until
        the body sets it (`torch.set_default_device` acts on the whole process), or another
        file of the program does."""
        if self._entry_default_device is None:
            text = self._source if self._source is not None else self.module.code
            # Not for a `with torch.device(d):` block, though a function called in one makes its
            # tensors on d too: such blocks build models (`forward` runs outside them), and
            # a whole file's factories unplaced for one would hide the bugs in its `forward`s.
            changes = "set_default_device" in text or "set_default_tensor_type" in text
            if not changes and self._project_default_device is not None:
                # A launcher of the program sets it (`torch.set_default_tensor_type(
                # 'torch.cuda.FloatTensor')`) before it runs this file's code.
                changes = self._project_default_device()
            self._entry_default_device = (Value.of(Kind.DEVICE),) if changes else (None,)
        return self._entry_default_device[0]

    # ---- questions rules ask -------------------------------------------------------

    def value_of(self, node: cst.BaseExpression) -> Value:
        flow = self.flow_for(self._enclosing_scope(node))
        return flow.values.get(id(node), UNKNOWN) if flow is not None else UNKNOWN

    def value_on_a_gpu_machine(self, node: cst.BaseExpression) -> Value:
        """What the expression is on a machine with a GPU, where the tests of the device
        choice (`if torch.cuda.is_available():`, `if train_on_gpu:`) all take their GPU side;
        `value_of` where its body has no such test that leaves data on both sides."""
        flow = self.flow_for(self._enclosing_scope(node))
        values = flow.gpu_world_values if flow is not None else None
        found = values.get(id(node)) if values is not None else None
        return found if found is not None else self.value_of(node)

    def move_destination(self, call: cst.Call) -> Place | None:
        """Where a `.to(...)`, `.cuda()` or `.cpu()` call sends its receiver; None when the
        code does not say, or the call is no move (`.to(torch.float16)`)."""
        if not (type(call.func) is cst.Attribute and call.func.attr.value in torch_api.PLACING_METHODS):
            return None  # no move, whatever the flow: asked of every call, it need not interpret one
        flow = self.flow_for(self._enclosing_scope(call))
        return flow.moves.get(id(call)) if flow is not None else None

    def imported_name(self, node: cst.BaseExpression) -> tuple[bool, str | None]:
        """Whether the model evaluated the expression (decorators and annotations it does not),
        and the imported name it stands for there (`torch.load` for `load` after `from torch
        import load`; None where a local, a parameter or a `def` shadows the import).

        Rules ask `context.names` (`analysis/name_oracle.py`), which asks this."""
        flow = self.flow_for(self._enclosing_scope(node))
        value = flow.values.get(id(node)) if flow is not None else None
        if value is None:
            return False, None
        if value.reference is None or value.reference.definition is not None:
            return True, None
        return True, value.reference.qualified

    def env_before(self, statement: cst.CSTNode) -> Env | None:
        """The program's bindings before a statement (without the model's own entries)."""
        flow = self.flow_for(self._enclosing_scope(statement))
        env = flow.before.get(id(statement)) if flow is not None else None
        return None if env is None else {key: value for key, value in env.items() if not key.startswith("<")}

    # ---- the CPU mode (see `cpu_mode`) -------------------------------------------------

    def offers_cpu_mode(self, *, by_gpu_settings: bool = False) -> bool:
        """Whether some test the program reaches without a GPU chooses a way on there: an
        availability check, a device with a CPU fallback, a setting that names the CPU; with
        `by_gpu_settings`, also a GPU setting alone (`if opt.use_gpu:`) outside the methods of
        a model class."""
        return any((any(flow.cpu_mode_tests.values()) or by_gpu_settings and any(flow.gpu_setting_tests.values())
                    and not self._in_a_model_method(flow.node))
                   and not (type(flow.node) is cst.FunctionDef and self.unused_in_a_script(flow.node))
                   for flow in self.all_flows())

    def unused_in_a_script(self, function: cst.FunctionDef) -> bool:
        """A top-level function of a script (a file with `if __name__ == "__main__":` or a loop
        at its top level) that the file never calls, passes on or decorates: a helper left
        over (`def to_var(x): return x.cuda() if torch.cuda.is_available() else x`, unused),
        whose tests are no choice the program makes."""
        if function.decorators or not any(statement is function for statement in self.module.body):
            return False
        if not self._is_a_script():
            return False
        if not takes_call_site_arguments(function, self._uses().escaping):
            return False  # passed on, or named where the file cannot see its calls
        self._run_every_declared_body()
        return not self._call_sites.get(id(function))

    def _is_a_script(self) -> bool:
        if self._script is None:
            self._script = any(type(statement) in (cst.For, cst.While) or type(statement) is cst.If
                               and is_main_guard(statement.test) for statement in self.module.body)
        return self._script

    def _in_a_model_method(self, node: cst.CSTNode) -> bool:
        """A method of an `nn.Module` class: a GPU setting tested there (`if self.cuda:`, `if
        next(self.parameters()).is_cuda:`) is the model following where it is put, on either
        device, not a program choosing the CPU."""
        if type(node) is not cst.FunctionDef:
            return False
        owner = self.class_of_method(node)
        return owner is not None and self.is_module_class(owner) and not self.model_wrapper_class(id(owner))

    def model_wrapper_class(self, class_id: int) -> bool:
        """A class that is an `nn.Module` only through a base of another file of the project
        (`class Pix2PixHDModel(BaseModel)`): a program's model wrapper, built from its options,
        whose tests of `self.gpu_ids` are the program choosing its device, not a layer
        following where it is put."""
        known = self._model_wrapper_classes.get(class_id)
        if known is None:
            summary = self._class(class_id)
            known = summary is not None and summary.is_module and not self._bases_make_module(
                summary.node, self._enclosing_scope(summary.node), other_files=False)
            self._model_wrapper_classes[class_id] = known
        return known

    def cpu_mode_truth(self, test: cst.BaseExpression) -> bool | None:
        """Whether a test holds when the program runs in its CPU mode, where that is known."""
        return cpu_mode.truth(self.value_of(test).in_cpu_mode)

    def statement_reached_in_cpu_mode(self, statement: cst.CSTNode) -> bool | None:
        """Whether the CPU mode can reach a statement of a body; None for other nodes."""
        flow = self.flow_for(self._enclosing_scope(statement))
        env = flow.before.get(id(statement)) if flow is not None else None
        return None if env is None else CPU_MODE_UNREACHED not in env

    def reached_in_cpu_mode(self, node: cst.CSTNode, ancestors: Sequence[cst.CSTNode]) -> bool:
        """Whether the CPU mode reaches a node, given its ancestors (nearest first): its
        statement, the conditionals and `and`/`or` around it, the functions it is in."""
        statement_known = False
        child = node
        # The scope whose flow holds the ancestors' statements: found once, and again past a
        # function (a `def` is a statement of the scope around it). Finding it for each ancestor
        # walked the parents again each time: cubic in a deep expression with many findings.
        flow: FunctionFlow | None = None
        scope_found = False
        for ancestor in ancestors:
            if not statement_known:
                if not scope_found or type(ancestor) is cst.FunctionDef:
                    flow = self.flow_for(self._enclosing_scope(ancestor))
                    scope_found = True
                env = flow.before.get(id(ancestor)) if flow is not None else None
                if env is not None:
                    statement_known = True
                    if CPU_MODE_UNREACHED in env:
                        return False
            if self._keeps_cpu_mode_out(ancestor, child):
                return False
            child = ancestor
        return True

    def _keeps_cpu_mode_out(self, ancestor: cst.CSTNode, child: cst.CSTNode) -> bool:
        if type(ancestor) not in _GATING_KINDS:  # most ancestors: an exact type test, not LibCST's slow ABCs
            return False
        if isinstance(ancestor, (cst.If, cst.IfExp, cst.While)) and child is not ancestor.test:
            holds = self.cpu_mode_truth(ancestor.test)
            return holds is not None and holds is (child is not ancestor.body)
        if isinstance(ancestor, cst.BooleanOperation) and child is ancestor.right:
            holds = self.cpu_mode_truth(ancestor.left)
            return holds is not None and holds is isinstance(ancestor.operator, cst.Or)
        if isinstance(ancestor, cst.For) and child is ancestor.body:
            return self._empty_in_cpu_mode(ancestor.iter)
        return isinstance(ancestor, cst.FunctionDef) and not self.function_reached_in_cpu_mode(ancestor)

    def _empty_in_cpu_mode(self, iterable: cst.BaseExpression) -> bool:
        """`range(torch.cuda.device_count())`, `range(n_gpus)`: no step in the CPU mode."""
        if not (isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name) and iterable.func.value == "range"
                and len(iterable.args) == 1 and iterable.args[0].keyword is None and not iterable.args[0].star):
            return False
        count = self.value_of(iterable.args[0].value).in_cpu_mode
        return isinstance(count, Off) or count == 0 and not isinstance(count, bool)

    def function_reached_in_cpu_mode(self, function: cst.FunctionDef) -> bool:
        """False when the file makes every call of the function, and the CPU mode reaches none."""
        key = id(function)
        known = self._functions_reached_in_cpu_mode.get(key)
        if known is not None:
            return known
        self._functions_reached_in_cpu_mode[key] = True  # also while deciding (recursion)
        sites = self._call_sites_in_sight(function)
        reached = sites is None or any(self._call_reached_in_cpu_mode(site.call) for site in sites)
        self._functions_reached_in_cpu_mode[key] = reached
        return reached

    def called_in_cpu_mode(self, function: cst.FunctionDef) -> bool:
        """Whether the file calls the function somewhere the CPU mode reaches."""
        sites = self._call_sites_in_sight(function)
        return sites is not None and any(self._call_reached_in_cpu_mode(site.call) for site in sites)

    def _call_sites_in_sight(self, function: cst.FunctionDef) -> list[CallSite] | None:
        """The file's calls of a function, where they are all its calls (None if it has none)."""
        if self._flow(function) is None:
            return None
        definition = self._definitions.get(id(function))
        if definition is None:
            return None
        if definition.owner is not None:
            if not self._called_only_by_the_file(definition):
                return None
        elif not takes_call_site_arguments(function, self._uses().escaping):
            return None
        self._run_every_declared_body()
        sites = self._call_sites.get(id(function))
        return list(sites.values()) if sites else None

    def _call_reached_in_cpu_mode(self, call: cst.Call) -> bool:
        scope = self._enclosing_scope(call)
        flow = self._flows.get(id(scope))
        if flow is not None and id(call) in flow.calls_unreached_in_cpu_mode:
            return False
        return not isinstance(scope, cst.FunctionDef) or self.function_reached_in_cpu_mode(scope)

    def meetings(self, scope: Scope) -> list[Meeting]:
        flow = self.flow_for(scope)
        return list(flow.meetings.values()) if flow is not None else []

    def all_flows(self) -> Iterator[FunctionFlow]:
        """Every body in the file as rules see it (see `flow_for`), the module first."""
        for flow in list(self._declared_flows()):
            specialised = self.flow_for(flow.node) if isinstance(flow.node, cst.FunctionDef) else None
            yield specialised if specialised is not None else flow

    def _declared_flows(self) -> Iterator[FunctionFlow]:
        """Every body in the file, parameters as declared (interpreting what has not been yet)."""
        module_flow = self._flow(self.module)
        if module_flow is None:
            return
        yield module_flow
        done: set[int] = {id(self.module)}
        while True:
            pending = [d for key, d in self._definitions.items()
                       if key not in done and isinstance(d.node, cst.FunctionDef)]
            if not pending:
                return
            for definition in pending:
                done.add(id(definition.node))
                assert isinstance(definition.node, cst.FunctionDef)
                flow = self._flow(definition.node)
                if flow is not None:
                    yield flow

    def host_meetings(self) -> list[HostMeeting]:
        """Everywhere in the file that data on the host meets data on an accelerator."""
        if self._host_meetings is None:
            found: list[HostMeeting] = []
            for flow in self.all_flows():
                for meeting in flow.meetings.values():
                    for host, device in meeting.host_operands_meeting_device():
                        found.append(HostMeeting(meeting, host, device, flow))
            self._host_meetings = found
        return self._host_meetings

    def host_data_reaches_a_device(self, made: cst.Call) -> bool:
        """Whether the host tensor a call makes (its origin: a factory, a copy to the host)
        meets data on an accelerator somewhere in the file, or leaves a function as what it
        returns, where a caller may hand it to a model on one."""
        if self._origins_reaching_a_device is None:
            # Gathered once: the host origins of every host meeting and of every function's return.
            found = {origin for meeting in self.host_meetings() for origin in meeting.host.value.origins}
            for flow in self.all_flows():
                if isinstance(flow.node, cst.FunctionDef) and flow.returns is not None:
                    found |= _all_origins(flow.returns)
            self._origins_reaching_a_device = frozenset(found)
        return id(made) in self._origins_reaching_a_device

    def saved_state_dicts(self) -> list[SavedStateDict]:
        """Every wrapped model's `state_dict()` that reaches `torch.save`, directly, inside a
        checkpoint dict or list, through variables, or through a helper the file calls."""
        if self._saved_state_dicts is None:
            found: dict[tuple[int, int], SavedStateDict] = {}
            for flow in self.all_flows():
                for save, saved in flow.saves:
                    for held in self.held_calls(saved, Held.WRAPPED_STATE_DICT):
                        if (id(held), id(save)) not in found:
                            made_here = id(held) in flow.held
                            found[(id(held), id(save))] = SavedStateDict(
                                held, save, made_here, made_here and self._wrapped_only_to_save(flow.node, held))
            self._saved_state_dicts = list(found.values())
        return self._saved_state_dicts

    def _wrapped_only_to_save(self, body: cst.CSTNode, state_dict: cst.Call) -> bool:
        """`net.state_dict()` where, in the block that holds it, `net = DataParallel(net)`
        comes after the bare `net` was put to work (called, or a method of its own called) and
        before nothing else reads `net` but its `state_dict()`."""
        receiver = state_dict.func.value if type(state_dict.func) is cst.Attribute else None
        if type(receiver) is not cst.Name:
            return False
        name = receiver.value
        block = _innermost_block(body, state_dict)
        if block is None:
            return False
        holding = next(index for index, statement in enumerate(block) if _contains(statement, state_dict))
        wrap = next((index for index in range(holding - 1, -1, -1) if _binds(block[index], name)), None)
        if wrap is None or not self._rewraps(block[wrap], name):
            return False
        worked = any(_puts_to_work(node, name) for statement in block[:wrap] for node in descendants(statement))
        return worked and all(_only_its_state_dict(statement, name) for statement in block[wrap + 1:])

    def _rewraps(self, statement: cst.CSTNode, name: str) -> bool:
        """`name = DataParallel(name, ...)` (or DDP): the same model, now wrapped."""
        if type(statement) is not cst.SimpleStatementLine or len(statement.body) != 1:
            return False
        assign = statement.body[0]
        if type(assign) is not cst.Assign or type(assign.value) is not cst.Call:
            return False
        wrapped = first_argument(assign.value, "module")
        return type(wrapped) is cst.Name and wrapped.value == name \
            and self.value_of(assign.value).wrapping is Wrapping.YES

    def saved_wrappers(self) -> list[SavedWrapper]:
        """Every `torch.save(model, path)` whose first argument is a model wrapped in
        DataParallel/DDP, on every path or on some: the wrapper object pickled whole."""
        found: dict[int, SavedWrapper] = {}
        for flow in self.all_flows():
            for save, saved in flow.saves:
                argument = first_argument(save, "obj")
                if argument is None or id(save) in found:
                    continue
                if saved.wrapping is Wrapping.YES or saved.wrapping is Wrapping.MAYBE:
                    found[id(save)] = SavedWrapper(save, argument, saved.wrapping)
        return list(found.values())

    def constant_truth(self, test: cst.BaseExpression) -> bool | None:
        """Whether a test holds on every run because the names it reads are module constants
        bound once (`if FusedNorm is not None:` after `FusedNorm = None`)."""
        if self._constants is None:
            self._constants = ModuleConstants(self.module)
        return self._constants.truth(test)

    def written_earlier_in_run(self, load: cst.Call) -> bool:
        """Whether the program saved the file a `torch.load` reads earlier in the same run (a
        script that reloads its best checkpoint, a notebook's later cell): the saving device
        is then present."""
        if self._checkpoint_files is None:
            self._checkpoint_files = CheckpointFiles(self.module)
        return self._checkpoint_files.written_before(load, self._qualified_in, self._project_saves_the_file)

    def saved_by_the_program(self, load: cst.Call) -> bool:
        """Whether the program itself saves the file a `torch.load` reads, in this run or an
        earlier one (see `CheckpointFiles`)."""
        if self._checkpoint_files is None:
            self._checkpoint_files = CheckpointFiles(self.module)
        return self._checkpoint_files.saved_by_the_program(load, self._qualified_in)

    def same_checkpoint_file(self, save: cst.Call, load: cst.Call) -> bool:
        """Whether a `torch.save` and a `torch.load` of the file name the same file, each path
        read where it is written (see `CheckpointFiles`)."""
        if self._checkpoint_files is None:
            self._checkpoint_files = CheckpointFiles(self.module)
        return self._checkpoint_files.same_file(save, load, self._qualified_in)

    def may_read_what_was_saved(self, save: cst.Call, load: cst.Call) -> bool:
        """Whether a `torch.load` may read what a `torch.save` of its file wrote: not a save
        that only ever runs after it, or one another save of the file always overwrites
        first (see `CheckpointFiles`)."""
        if self._checkpoint_files is None:
            self._checkpoint_files = CheckpointFiles(self.module)
        return self._checkpoint_files.may_read_what_was_saved(save, load, self._qualified_in)

    def loaded_into_state_dict(self, load: cst.Call) -> bool:
        """Whether what a `torch.load` returns, or an item of it, goes into some
        `load_state_dict(...)`, which copies each value onto the receiver's own device."""
        if self._loads_into_state_dicts is None:
            found: set[int] = set()
            # Each node with the body it is evaluated in: the walk reaches code the rules'
            # visitor has not yet, whose body `value_of` could not tell.
            stack: list[tuple[cst.CSTNode, Scope]] = [(self.module, self.module)]
            while stack:
                node, scope = stack.pop()
                if type(node) is cst.Call and type(node.func) is cst.Attribute \
                        and node.func.attr.value == "load_state_dict" and node.args:
                    flow = self.flow_for(scope)
                    value = flow.values.get(id(node.args[0].value), UNKNOWN) if flow is not None else UNKNOWN
                    found.update(id(call) for call in self.held_calls(value, Held.LOAD))
                inner = node if type(node) is cst.FunctionDef else scope
                stack.extend((child, inner) for child in child_nodes(node))
            self._loads_into_state_dicts = frozenset(found)
        return id(load) in self._loads_into_state_dicts

    def host_arguments(self, made: int) -> tuple[tuple[int, str], ...]:
        """The host arguments of a loss made in a body interpreted so far (see
        `FunctionFlow.host_argument_losses`)."""
        return self._host_argument_losses.get(made, ())

    def forward_host_arguments(self, class_id: int) -> tuple[tuple[int, str], ...]:
        """The arguments of a call of the class's instances that its `forward` hands on where
        host data is required (`pack_padded_sequence`'s lengths): (position, name), `self`
        not counted; keyword-only ones at negative positions."""
        known = self._forward_host_arguments.get(class_id)
        if known is not None:
            return known
        summary = self._class(class_id)
        forward = summary.methods.get("forward") if summary is not None else None
        if forward is None:
            return ()
        params = forward.params
        positional = [*params.posonly_params, *params.params][1:]
        found = [(position, param.name.value) for position, param in enumerate(positional)
                 if _passed_as_host_argument(forward, param.name.value, self._imports(), or_moved_there=True)]
        found.extend((-1 - index, param.name.value) for index, param in enumerate(params.kwonly_params)
                     if _passed_as_host_argument(forward, param.name.value, self._imports(), or_moved_there=True))
        # Asked at every call of the class's instances: its `forward` is walked once.
        answer = self._forward_host_arguments[class_id] = tuple(found)
        return answer

    def _imports(self) -> ImportTable:
        """The module's own imports (read once), for naming calls syntactically."""
        if self._module_imports is None:
            self._module_imports = module_import_table(self.module)
        return self._module_imports

    def arguments_forward_needs_on_host(self, call: cst.Call) -> list[cst.Arg]:
        """The arguments of a call of a module of the file that its `forward` hands, as they
        are, where the host is required (`pack_padded_sequence`'s lengths); none for other calls."""
        callee = self.value_of(call.func)
        if callee.instance_of is None or not callee.is_module_like:
            return []
        required = self._forward_host_parameters(callee.instance_of, frozenset())
        if not required:
            return []
        summary = self._class(callee.instance_of)
        assert summary is not None  # a class with requirements has a summary
        params = summary.methods["forward"].params
        positional = [param.name.value for param in (*params.posonly_params, *params.params)][1:]  # less `self`
        return [arg for position, arg in enumerate(call.args)
                if (positional[position] if arg.keyword is None and position < len(positional)
                    else arg.keyword.value if arg.keyword is not None else None) in required]

    def runs_only_while_constructing(self, function: cst.FunctionDef) -> bool:
        """A method the file calls only from its class's `__init__` (`self.feature_size()`
        measuring a layer's output on a dummy input): it runs while the new module is still on
        the host, before anyone can move it, unless `__init__` moves it itself."""
        owner = self.class_of_method(function)
        summary = self._class(id(owner)) if owner is not None else None
        if summary is None or summary.moves_itself or function.name.value.startswith("__") \
                or function.name.value not in self._uses().called_only_on_self:
            return False
        self._run_every_declared_body()
        init = summary.methods.get("__init__")
        sites = self._call_sites.get(id(function))
        return init is not None and sites is not None and bool(sites) \
            and all(site.caller is init for site in sites.values())

    def _run_every_declared_body(self) -> None:
        """Once: every body run with its declared parameters, so every call site is known."""
        if not self._all_declared_done:
            self._all_declared_done = True
            for _ in self._declared_flows():
                pass

    def _forward_host_parameters(self, class_id: int, visiting: frozenset[int]) -> tuple[str, ...]:
        """The parameters a module class's `forward` hands, as they are, where the host is
        required: to `pack_padded_sequence` itself, or to a part of the module that does
        (`self.encoder(input_seq, input_length)`, the encoder given to the constructor)."""
        known = self._forward_host_requirements.get(class_id)
        if known is not None:
            return known
        summary = self._class(class_id)
        forward = summary.methods.get("forward") if summary is not None else None
        if summary is None or forward is None or class_id in visiting:
            return ()
        params = forward.params
        names = [param.name.value for param in (*params.posonly_params, *params.params, *params.kwonly_params)]
        # A parameter the body binds again (`input_lengths = input_lengths.cpu().numpy()`) is not
        # what reaches the call: the caller's lengths may be anywhere.
        handed_on = set(names[1:]) - rebound_parameters(forward)
        required = [name for name in names if name in handed_on and _passed_as_host_argument(
            forward, name, self._imports(), functions=torch_api.HOST_REQUIRED_BY_LAST_NAME)]
        self_name = self._self_name(forward)
        for part_call, attribute in _calls_of_own_attributes(forward, self_name):
            part = self._constructed_attribute(class_id, attribute)
            if part is None or part.instance_of is None or not part.is_module_like:
                continue
            part_required = self._forward_host_parameters(part.instance_of, visiting | {class_id})
            part_summary = self._class(part.instance_of)
            part_forward = part_summary.methods.get("forward") if part_summary is not None else None
            if not part_required or part_forward is None:
                continue
            positional = [param.name.value for param in (*part_forward.params.posonly_params,
                                                         *part_forward.params.params)][1:]
            for position, arg in enumerate(part_call.args):
                target = arg.keyword.value if arg.keyword is not None else \
                    positional[position] if position < len(positional) and not arg.star else None
                if target in part_required and type(arg.value) is cst.Name and arg.value.value in handed_on:
                    required.append(arg.value.value)
        found = self._forward_host_requirements[class_id] = tuple(dict.fromkeys(required))
        return found

    def _constructed_attribute(self, class_id: int, attribute: str) -> Value | None:
        """What `self.<attribute>` holds once `__init__` has run with what the file's own
        constructor calls pass it (`GreedySearchDecoder(encoder, decoder)`), where those calls
        are all the class's: its name is used only to call it. Asked by queries, after the runs."""
        if self._in_progress:
            return None  # the call sites are not all known yet
        if class_id not in self._constructed:
            self._constructed[class_id] = self._attributes_from_constructor_calls(class_id)
        found = self._constructed[class_id]
        return found.get(attribute) if found is not None else None

    def _attributes_from_constructor_calls(self, class_id: int) -> dict[str, Value] | None:
        summary = self._class(class_id)
        init = summary.methods.get("__init__") if summary is not None else None
        if summary is None or init is None or summary.node.decorators \
                or summary.node.name.value in self._uses().escaping:
            return None
        self._run_every_declared_body()
        sites = self._call_sites.get(class_id)
        definition = self._definitions.get(id(init))
        if not sites or definition is None:
            return None
        declared = self._entry_env(definition)
        passed = parameters_from_call_sites(init, [replace(site, bound_method=True) for site in sites.values()],
                                            self._default_values(definition))
        env = {name: refined(value, passed[name]) if name in passed else value for name, value in declared.items()}
        flow = self._run(init, env, summary.node)
        self_name = self._self_name(init)
        attributes = dict(flow.attribute_writes)
        for name in attributes:
            final = _final_value(flow, f"{self_name}.{name}") if self_name is not None else None
            if final is not None:
                attributes[name] = final
        return attributes

    def held_calls(self, value: Value, kind: Held) -> list[cst.Call]:
        """The calls of that kind whose result the value is or contains."""
        return [node for node in self.held_expressions(value, kind) if type(node) is cst.Call]

    def held_expressions(self, value: Value, kind: Held) -> list[cst.BaseExpression]:
        """The expressions of that kind (a call, an `os.environ[...]` read) the value holds."""
        return [node for held_kind, node in (self._held[key] for key in value.holds if key in self._held)
                if held_kind is kind]

    def holds(self, value: Value, kind: Held) -> bool:
        """Whether the value is or contains what an expression of that kind gave."""
        return bool(self.held_expressions(value, kind))

    def origin(self, origin_id: int) -> tuple[cst.Call, Scope] | None:
        """The call that put host data into a value (see `Value.origins`), and its body."""
        self.host_meetings()
        found = self._origins.get(origin_id)
        if found is None:
            return None
        call, scope = found
        assert isinstance(scope, (cst.Module, cst.FunctionDef))
        return call, scope

    def origin_site(self, origin_id: int) -> OriginSite | None:
        located = self.origin(origin_id)
        if located is None:
            return None
        call, scope = located
        owner = self.class_of_method(scope) if isinstance(scope, cst.FunctionDef) else None
        qualified = self._qualified_in(scope, call.func)
        legacy = qualified in torch_api.LEGACY_HOST_TENSOR_TYPES
        return OriginSite(
            call,
            scope,
            is_factory=qualified is not None and (torch_api.takes_device(qualified) or legacy),
            module_class=owner if owner is not None and self.is_module_class(owner) else None,
            in_method=owner is not None,
            legacy_constructor=legacy,
        )

    def _qualified_in(self, scope: Scope, node: cst.BaseExpression) -> str | None:
        flow = self.flow_for(scope)
        value = flow.values.get(id(node)) if flow is not None else None
        if value is None or value.reference is None or value.reference.definition is not None:
            return None
        return value.reference.qualified

    def class_of_method(self, function: cst.FunctionDef) -> cst.ClassDef | None:
        self._flow(function)
        definition = self._definitions.get(id(function))
        return definition.owner if definition is not None else None

    def is_module_class(self, class_node: cst.ClassDef) -> bool:
        if id(class_node) not in self._definitions:
            # Interpreting the body that defines the class registers it.
            self._flow(self._enclosing_scope(class_node))
        summary = self._class(id(class_node))
        return summary is not None and summary.is_module

    def attributes_handed_to_modules(self, method: cst.FunctionDef) -> frozenset[str]:
        """The attributes of `self` that a method hands to a call making a module
        (`nn.Sequential(*self.layers)`, `nn.ModuleList(self.blocks)`), or hands the items of
        (`nn.Sequential(self.noisy[0], nn.ReLU(), self.noisy[1])`), nested functions included:
        a container kept there is registered after all."""
        params = method.params.params
        if not params:
            return frozenset()
        self_name = params[0].name.value
        found: set[str] = set()
        stack: list[tuple[cst.CSTNode, Scope]] = [(method.body, method)]
        while stack:
            node, scope = stack.pop()
            if type(node) is cst.FunctionDef:
                scope = node
            elif type(node) is cst.Call:
                handed = [attribute.attr.value for arg in node.args
                          if isinstance(attribute := arg.value.value if type(arg.value) is cst.Subscript else arg.value,
                                        cst.Attribute)
                          and isinstance(attribute.value, cst.Name) and attribute.value.value == self_name]
                flow = self.flow_for(scope) if handed else None
                if flow is not None and flow.values.get(id(node), UNKNOWN).is_module_like:
                    found.update(handed)
            stack.extend((child, scope) for child in child_nodes(node))
        return frozenset(found)

    def fix_agreement(self, statement: cst.BaseSmallStatement, replacement: cst.BaseSmallStatement,
                      moved: Collection[str]) -> FixAgreement:
        """Interpret `statement`'s body again with `replacement` in its place, and compare the
        meetings: the model's judgement of whether a fix that moves the places written as
        `moved` (`x`, `batch["x"]`) leaves the program agreeing on devices."""
        scope = self._enclosing_scope(statement)
        original = self.flow_for(scope)
        if original is None or id(scope) in self._in_progress:
            return FixAgreement.NO_EVIDENCE
        spent = self._fix_judgement_cost.get(id(scope), 0) + len(original.statements)
        if spent > FIX_JUDGEMENT_STATEMENTS:
            # Past this the cost would grow with the square of the body: the rest of its fixes
            # stand unjudged (unsafe).
            return FixAgreement.NO_EVIDENCE
        self._fix_judgement_cost[id(scope)] = spent
        if isinstance(scope, cst.Module):
            env: Env = {}
            owner = None
        else:
            definition = self._definitions[id(scope)]
            owner = definition.owner
            env = self._specialised_entry.get(id(scope)) or self._entry_env(definition)
        fixed = self._run(scope, env, owner, {id(statement): replacement})
        changed = [meeting for key, meeting in fixed.meetings.items()
                   if _operand_values(meeting) != _operand_values(original.meetings.get(key))]
        moved_code = {code.replace(" ", "") for code in moved}
        for meeting in changed:
            if meeting.host_operands_meeting_device() and any(
                    self.module.code_for_node(operand.node).replace(" ", "") in moved_code for operand in meeting.operands):
                return FixAgreement.BREAKS
        if changed and all(meeting.agrees() for meeting in changed):
            return FixAgreement.AGREES
        return FixAgreement.NO_EVIDENCE

    # ---- interpretation ------------------------------------------------------------

    def flow_for(self, scope: Scope) -> FunctionFlow | None:
        """The flow rules see: a plain function that the file only calls directly runs with
        the arguments of those calls (see `call_sites`); any other body as declared."""
        if isinstance(scope, cst.FunctionDef):
            specialised = self._specialised_flow(scope)
            if specialised is not None:
                return specialised
        return self._flow(scope)

    def _specialised_flow(self, function: cst.FunctionDef) -> FunctionFlow | None:
        key = id(function)
        if key in self._specialised:
            return self._specialised[key]
        if self._declared_runs and key in self._provisional_specialised:
            return self._provisional_specialised[key]
        if self._in_progress and not self._specialising:
            # Asked from inside a run with declared parameters: those runs collect the call
            # sites that specialised runs start from, so they see parameters as declared.
            return None
        if key not in self._setting_up:
            # Callers first, each with its own callers' arguments: `train_iters(model, ...)`
            # then passes the file's model on to `train(model, ...)`.
            self._setting_up.add(key)
            try:
                for caller in self._calling_functions(function):
                    self._specialised_flow(caller)
            finally:
                self._setting_up.discard(key)
            if key in self._specialised:
                return self._specialised[key]
        self._specialised[key] = None  # also while it runs
        self._specialising_now.add(key)
        try:
            env, complete = self._call_site_env(function)
            flow = None
            if env is not None:
                definition = self._definitions[key]
                self._specialised_entry[key] = env
                flow = self._run(function, env, definition.owner)
        finally:
            self._specialising_now.discard(key)
        if not self._declared_runs and (complete or not (self._specialising_now or self._setting_up)):
            # (An outermost request kept even so: its callers call it back, in a cycle.)
            self._specialised[key] = flow
        else:
            # Asked from a caller's run, whose callers could not reach this run; or while a
            # body still runs that may call it again (`f(train_loader)`, later `f(test_loader)`):
            # what it gives serves that run, and the next request runs it again.
            del self._specialised[key]
            self._specialised_entry.pop(key, None)
            if self._declared_runs and complete:
                self._provisional_specialised[key] = flow
        return flow

    def _calling_functions(self, function: cst.FunctionDef) -> list[cst.FunctionDef]:
        sites = self._call_sites_in_sight(function)
        callers = {id(site.caller): site.caller for site in sites or ()
                   if type(site.caller) is cst.FunctionDef and site.caller is not function}
        return [caller for caller in callers.values() if isinstance(caller, cst.FunctionDef)]

    def _call_site_env(self, function: cst.FunctionDef) -> tuple[Env | None, bool]:
        """The entry environment from the file's calls, if they say more than the declaration;
        and whether every calling function's own call-site run could be asked."""
        sites = self._call_sites_in_sight(function)
        if sites is None:
            # Inside another body's run the declared runs that find the sites may be unfinished.
            return None, not self._in_progress
        sites, complete = self._through_callers_call_sites(function, sites)
        definition = self._definitions[id(function)]
        declared = self._entry_env(definition)
        passed = parameters_from_call_sites(function, sites, self._default_values(definition))
        env = {name: refined(value, passed[name]) if name in passed else value for name, value in declared.items()}
        return (env if env != declared else None), complete

    def _through_callers_call_sites(self, function: cst.FunctionDef,
                                    sites: list[CallSite]) -> tuple[list[CallSite], bool]:
        """Call sites inside functions that themselves run with their callers' arguments
        (`train_iters(model, ...)` calling `train(model, ...)`): the arguments as that run
        has them, so a model passed down two levels is still the file's model."""
        through: list[CallSite] = []
        complete = True
        for site in sites:
            caller = site.caller
            if type(caller) is cst.FunctionDef and caller is not function:
                if id(caller) in self._specialising_now or id(caller) not in self._specialised:
                    complete = False  # running, or set up only for a run that asked it
                else:
                    flow = self._specialised[id(caller)]
                    if flow is not None:
                        site = replace(site, arguments=tuple(flow.values.get(id(arg.value), value)
                                                             for arg, value in zip(site.call.args, site.arguments,
                                                                                   strict=True)))
            through.append(site)
        return through, complete

    def _default_values(self, definition: _Definition) -> dict[str, Value]:
        """The values of a function's parameter defaults, evaluated where it is defined."""
        function = definition.node
        assert isinstance(function, cst.FunctionDef)
        flow = self._flows.get(id(definition.enclosing)) or self._running.get(id(definition.enclosing))
        if flow is None:
            return {}
        params = function.params
        return {param.name.value: flow.values[id(param.default)]
                for param in (*params.posonly_params, *params.params, *params.kwonly_params)
                if param.default is not None and id(param.default) in flow.values}

    def _called_only_by_the_file(self, method: _Definition) -> bool:
        """A method of a plain class (no base a framework could call it from) that the file
        only calls as `self.<name>(...)`: its callers are all in sight."""
        owner, function = method.owner, method.node
        assert owner is not None and isinstance(function, cst.FunctionDef)
        if function.decorators or function.name.value.startswith("__"):
            return False
        if any(dotted_name(base.value) != "object" for base in owner.bases):
            return False
        return function.name.value in self._uses().called_only_on_self

    def _bound_by_module(self) -> set[str]:
        if self._module_bound is None:
            self._module_bound = module_bound_names(self.module)
        return self._module_bound

    def _uses(self) -> NameUses:
        if self._name_uses is None:
            self._name_uses = name_uses(self.module, self._memory.statement_name_uses if self._memory else None)
        return self._name_uses

    def _run(self, scope: Scope, env: Env, owner: cst.ClassDef | None,
             replacements: dict[int, cst.BaseSmallStatement] | None = None) -> FunctionFlow:
        """Interpret a body once more, outside the cache (other parameters, or a fix applied)."""
        self._in_progress.add(id(scope))
        self._specialising += 1
        try:
            interpreter = Interpreter(self, scope, env, owner=owner,
                                      self_name=self._self_name(scope) if owner is not None else None,
                                      module_method=owner is not None and self.is_module_class(owner),
                                      deadline=self.deadline, replacements=replacements)
            flow = interpreter.run(scope.body if isinstance(scope, cst.Module) else scope.body.body)
            if replacements is None:
                self._held.update(flow.held)
                self._host_argument_losses.update(flow.host_argument_losses)
            return flow
        finally:
            self._specialising -= 1
            self._in_progress.discard(id(scope))
            if not self._in_progress:
                self._provisional.clear()

    def _flow(self, scope: Scope) -> FunctionFlow | None:
        """The body's flow as the interpretation itself uses it (parameters as declared)."""
        key = id(scope)
        flow = self._flows.get(key) or self._provisional.get(key)
        if flow is not None:
            return flow
        if key in self._in_progress:
            return None
        if isinstance(scope, cst.Module):
            return self._interpret(scope, {}, None)
        if key not in self._definitions:
            # Interpreting the body that defines it registers it.
            self._flow(self._enclosing_scope(scope))
            if key not in self._definitions:
                return None
        definition = self._definitions[key]
        assert isinstance(definition.node, cst.FunctionDef)
        return self._interpret(definition.node, self._entry_env(definition), definition.owner)

    def _interpret(self, scope: Scope, env: Env, owner: cst.ClassDef | None, *,
                   attributes_only: bool = False) -> FunctionFlow:
        key = id(scope)
        self._in_progress.add(key)
        self._declared_runs.append(scope)
        reads_before = set(self._provisional_reads)
        outer_attribute_reads, self._unfinished_attribute_reads = self._unfinished_attribute_reads, 0
        try:
            self_name = self._self_name(scope) if owner is not None else None
            module_method = owner is not None and self.is_module_class(owner)
            flow = self._remembered(scope, env, owner, self_name, module_method, attributes_only)
            if flow is None:
                flow = self._interpreted(scope, env, owner, self_name, module_method, attributes_only)
        finally:
            self._in_progress.discard(key)
            self._declared_runs.pop()
            if not self._declared_runs:
                self._provisional_specialised.clear()
            self._running.pop(key, None)
            own_attribute_reads = self._unfinished_attribute_reads
            self._unfinished_attribute_reads = outer_attribute_reads + own_attribute_reads
        for origin_key, call in flow.origins.items():
            self._origins[origin_key] = (call, scope)
        self._held.update(flow.held)
        self._host_argument_losses.update(flow.host_argument_losses)
        # Reading its own unfinished state (through a function it calls) does not make a body
        # provisional; reading another unfinished body's does.
        self._provisional_reads.discard(key)
        if self._provisional_reads <= reads_before and not own_attribute_reads:
            # Complete: an attribute collection's run that read no unfinished attributes is
            # the method's flow too (the class's methods would otherwise all run twice).
            self._flows[key] = flow
        elif not attributes_only and self._in_progress:
            # Good until the outermost question is answered: interpreted once per question,
            # however many times a script's loop calls it.
            self._provisional[key] = flow
        if not self._in_progress:
            self._provisional.clear()
        return flow

    def _interpreted(self, scope: Scope, env: Env, owner: cst.ClassDef | None, self_name: str | None,
                     module_method: bool, attributes_only: bool) -> FunctionFlow:
        """Interpret the body; with a memory, write down what it asked, for the next version."""
        recording = RecordingOracle(self) if self._memory is not None and isinstance(scope, cst.FunctionDef) else None
        oracle: Oracle = recording if recording is not None else self
        interpreter = Interpreter(oracle, scope, env, owner=owner, self_name=self_name,
                                  module_method=module_method, deadline=self.deadline)
        body = scope.body if isinstance(scope, cst.Module) else scope.body.body
        self._running[id(scope)] = interpreter.flow
        flow = interpreter.run(body)
        if recording is not None:
            assert self._memory is not None and isinstance(scope, cst.FunctionDef)
            self._memory.interpreted += 1
            if recordable(recording.asked):
                self._memory.keep(FlowRecord(scope, dict(env), owner, self_name, module_method,
                                             tuple(recording.asked), flow), attributes_only)
        return flow

    def _remembered(self, scope: Scope, env: Env, owner: cst.ClassDef | None, self_name: str | None,
                    module_method: bool, attributes_only: bool) -> FunctionFlow | None:
        """The flow kept from the buffer's last version, where asking the model again what
        its interpretation asked gives the same answers (see `memory`)."""
        if self._memory is None or not isinstance(scope, cst.FunctionDef):
            return None
        record = self._memory.recall(scope, attributes_only)
        if record is None or not record.fits(scope, env, owner, self_name, module_method):
            return None
        if not answers_again(self, record):
            return None
        self._memory.reused += 1
        self._memory.keep(record, attributes_only)
        return record.flow

    def _text_fact(self, fact: str, function: cst.FunctionDef, read: Callable[[cst.FunctionDef], bool]) -> bool:
        """`read(function)`; an editor's buffer keeps it while the function is unchanged."""
        return self._memory.kept_text_fact(fact, function, read) if self._memory is not None else read(function)

    def keep_in_memory(self) -> None:
        """The analysis of this version is complete: its flows are the ones to reuse next."""
        if self._memory is not None:
            self._memory.finish(self.module)

    @staticmethod
    def _self_name(scope: Scope) -> str | None:
        if not isinstance(scope, cst.FunctionDef):
            return None
        decorators = {dotted_name(d.decorator) for d in scope.decorators}
        if "staticmethod" in decorators or "classmethod" in decorators:
            return None
        params = [*scope.params.posonly_params, *scope.params.params]
        return params[0].name.value if params else None

    def _entry_env(self, definition: _Definition) -> Env:
        function = definition.node
        assert isinstance(function, cst.FunctionDef)
        env: Env = {}
        params = function.params
        self_name = self._self_name(function) if definition.owner is not None else None
        owner_summary = self._class(id(definition.owner)) if definition.owner is not None else None
        is_forward = function.name.value == "forward" and owner_summary is not None and owner_summary.is_module
        for param in (*params.posonly_params, *params.params, *params.kwonly_params):
            name = param.name.value
            if name == self_name and definition.owner is not None:
                env[name] = self._self_value(id(definition.owner))
                continue
            env[name] = self._parameter_value(param, is_forward, definition)
        for star in (params.star_arg, params.star_kwarg):
            if isinstance(star, cst.Param):
                env[star.name.value] = UNKNOWN
        return env

    def _parameter_value(self, param: cst.Param, is_forward: bool, definition: _Definition) -> Value:
        annotation = param.annotation.annotation if param.annotation is not None else None
        annotated = self._annotation_value(annotation, definition) if annotation is not None else UNKNOWN
        if annotation is not None and dotted_name(annotation) in _NUMBER_ANNOTATIONS:
            return SCALAR  # `num_components: int = 50`: `torch.tensor(self.num_components)` is 0-dim
        if annotation is not None and dotted_name(annotation) in _SCALAR_ANNOTATIONS:
            return UNKNOWN
        if annotated.is_module_like and param.default is not None:
            default = self._default_values(definition).get(param.name.value)
            if default is not None and default.reference is not None:
                # `act_layer: nn.Module = nn.GELU`: a class (or factory), annotated as if an instance.
                return UNKNOWN
        if is_forward:
            name = param.name.value.lower()
            if any(word in name for word in naming.FORWARD_NUMBER_WORDS) or param.default is not None:
                return UNKNOWN
            if any(word in name for word in _LENGTH_WORDS) and _passed_as_host_argument(
                    definition.node, param.name.value, self._imports()):
                return UNKNOWN
            kind = Kind.TENSOR if annotated.is_tensor else Kind.MODEL_OUTPUT
            return Value(frozenset({kind}), frozenset({MODULE_DEVICE_PLACE}))
        return annotated

    def _annotation_value(self, annotation: cst.BaseExpression, definition: _Definition) -> Value:
        dotted = dotted_name(annotation)
        if dotted is None:
            return UNKNOWN
        head, dot, rest = dotted.partition(".")
        flow = self._flows.get(id(definition.enclosing)) or self._running.get(id(definition.enclosing))
        value = None
        if flow is not None:
            value = _final_value(flow, head) or flow.values.get(id(annotation))
        if value is None:
            value = self.outer_value(definition.node, head)
        if value is None or value.reference is None:
            return UNKNOWN
        if value.reference.definition is not None:
            summary = self._class(value.reference.definition)
            if summary is None or not summary.is_module or rest:
                return UNKNOWN
            # `model: CharRNN`: an instance of the file's class, wherever it was moved.
            return Value(frozenset({Kind.MODULE}), instance_of=value.reference.definition)
        qualified = f"{value.reference.qualified}{dot}{rest}"
        if qualified in ("torch.Tensor", "torch.FloatTensor", "torch.LongTensor", "torch.nn.Parameter"):
            return tensor(None)
        if qualified in torch_api.MODULE_BASE_CLASSES or torch_api.is_module_constructor(qualified):
            return Value(frozenset({Kind.MODULE}))
        return UNKNOWN

    # ---- what the interpreter asks (its Oracle) ------------------------------------

    def register_definition(self, node: cst.CSTNode, enclosing: cst.CSTNode, owner: cst.ClassDef | None) -> None:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)) and isinstance(enclosing, (cst.Module, cst.FunctionDef)):
            self._definitions.setdefault(id(node), _Definition(node, enclosing, owner))

    def outer_value(self, scope: cst.CSTNode, name: str) -> Value | None:
        """A free name of a function: what the enclosing bodies bind it to when they finish."""
        definition = self._definitions.get(id(scope))
        while definition is not None:
            enclosing = definition.enclosing
            flow = self._flow(enclosing)
            if flow is None:
                # Called while the enclosing body still runs (a script calling its functions):
                # its names as they are now. Provisional, so not kept.
                self._provisional_reads.add(id(enclosing))
                flow = self._running.get(id(enclosing))
                if flow is None:
                    return UNKNOWN
            found = _final_value(flow, name)
            if found is not None:
                return found
            definition = self._definitions.get(id(enclosing))
        return None

    def gpu_world_outer_value(self, scope: cst.CSTNode, name: str) -> Value | None:
        """A free name of a function as the module leaves it on a GPU machine, where every
        test of the device choice took its GPU side (see `Interpreter.gpu_world`); in other
        enclosing bodies, and where the module is still running, as `outer_value` says."""
        definition = self._definitions.get(id(scope))
        if definition is None or not isinstance(definition.enclosing, cst.Module):
            return self.outer_value(scope, name)
        final = self._module_gpu_world_final()
        found = final.get(name) if final is not None else None
        return found if found is not None else self.outer_value(scope, name)

    def _module_gpu_world_final(self) -> Env | None:
        if self._gpu_world_final is None:
            flow = self._flow(self.module)
            if flow is None or not (flow.cpu_mode_tests or flow.gpu_setting_tests):
                return flow.final if flow is not None else None
            interpreter = Interpreter(self, self.module, {}, owner=None, self_name=None, module_method=False,
                                      deadline=self.deadline, gpu_world=True)
            self._gpu_world_final = (interpreter.run(self.module.body).final,)
        return self._gpu_world_final[0]

    def call_result(self, definition: int, call: cst.Call | None, arguments: Sequence[Value],
                    receiver: Value | None) -> Value:
        if call is not None and not self._specialising:
            caller = self._declared_runs[-1] if self._declared_runs else None
            self._call_sites.setdefault(definition, {})[id(call)] = CallSite(call, tuple(arguments), receiver is not None,
                                                                             caller)
        summary = self._class(definition)
        if summary is not None:
            return self._instance_value(summary)
        target = self._definitions.get(definition)
        if target is None or not isinstance(target.node, cst.FunctionDef):
            return UNKNOWN
        specialised = self._specialised_flow(target.node) if self._specialising else None
        result = specialised.returns if specialised is not None else self._summaries.get(definition)
        if result is None:
            flow = self._flow(target.node)
            if flow is None:
                self._provisional_reads.add(id(target.node))  # recursion
                return UNKNOWN
            if flow.returns is None:
                return UNKNOWN
            result = flow.returns
            if id(target.node) in self._flows:
                self._summaries[definition] = result
        if receiver is None and call is not None and target.owner is None \
                and (depends_on_device_parameter(result, target.node)
                     or any(Kind.WRAPPED_MODULE in argument.kinds for argument in arguments)
                     or _computed_from_unplaced_inputs(result, arguments)):
            for_these = self._result_for_these_arguments(target.node, call, arguments)
            if for_these is not None:
                result = for_these
            elif depends_on_device_parameter(result, target.node):
                # Not run again for these arguments (from inside another such run): the places
                # named by the callee's device parameters are where the devices passed put them,
                # where those are known; another function's parameter means nothing here.
                result = self._with_devices_passed(result, target, call, arguments)
        if receiver is not None and receiver.places is not None:
            result = _substitute_module_device(result, receiver.places)
        elif receiver is None and target.owner is None:
            result = _placed_by_these_arguments(result, arguments)
        return result

    def _with_devices_passed(self, result: Value, target: _Definition, call: cst.Call,
                             arguments: Sequence[Value]) -> Value:
        function = target.node
        assert isinstance(function, cst.FunctionDef)
        passed = parameters_from_call_sites(function, [CallSite(call, tuple(arguments), False)],
                                            self._default_values(target))
        devices = {name: value.device for name, value in passed.items() if value.device is not None}
        return _substitute_parameter_devices(result, devices) if devices else result

    def _result_for_these_arguments(self, function: cst.FunctionDef, call: cst.Call,
                                    arguments: Sequence[Value]) -> Value | None:
        """The result of one call, where the function places it on a device its caller
        chooses: `make_batch(device="cuda")` and `make_batch()` (device=None) differ; or
        where it is handed a wrapped model (whose `state_dict()` keys are prefixed).

        A few interpretations per function (one per distinct set of arguments, kept unless
        it read names of a body still running), and none from inside another such run: the
        answer is then the function's summary."""
        if self._specialising or id(function) in self._in_progress:
            return None
        definition = self._definitions[id(function)]
        declared = self._entry_env(definition)
        passed = parameters_from_call_sites(function, [CallSite(call, tuple(arguments), False)],
                                            self._default_values(definition))
        env = {name: refined(value, passed[name]) if name in passed else value for name, value in declared.items()}
        if env == declared:
            return None
        key = (id(function), tuple(sorted(env.items(), key=lambda item: item[0])))
        if key in self._per_call_results:
            return self._per_call_results[key]
        # Counted by distinct arguments: asking again for the same ones (a result that read a
        # body still running is not kept) costs nothing of the budget.
        tried = self._per_call_arguments.setdefault(id(function), set())
        if key not in tried and len(tried) >= _PER_CALL_RUNS:
            return None
        tried.add(key)
        returns = self._run(function, env, None).returns
        if not self._provisional_reads:
            self._per_call_results[key] = returns
        return returns

    def project_module_class(self, qualified: str) -> bool:
        """`src.model.handpose_model`: a Module class of another file of the project that makes
        layers of its own (see `project_scan.stateful_module_classes`)."""
        return self._in_project_classes(qualified, stateful=True)

    def project_mover(self, qualified: str) -> bool:
        """`stepbystep.v4.StepByStep`: a function or class of another file of the project that
        moves in place what it is handed (see `project_scan.movers`)."""
        known = self._project_entries()
        if known is None or not known[2]:
            return False
        parts = qualified.split(".")
        if len(parts) < 2:
            return False
        if ".".join(parts[-2:]) in known[2]:
            return True
        # Re-exported by a package (`from trainers import Trainer`): a name one file defines.
        defined_by = self._project_mover_names.get(parts[-1], [])
        return len(defined_by) == 1

    def class_moves_what_it_is_handed(self, definition: int) -> bool:
        """A class of the file whose methods move a parameter or an attribute of `self` with
        `.to(...)`/`.cuda(...)` (a trainer whose `__init__` does `self.model.to(self.device)`):
        a model handed to its constructor may be where it was moved afterwards."""
        target = self._definitions.get(definition)
        if target is None or not isinstance(target.node, cst.ClassDef):
            return False
        known = self._class_movers.get(definition)
        if known is None:
            known = self._class_movers[definition] = _class_moves_what_it_is_handed(target.node)
        return known

    def _project_entries(self) -> tuple[frozenset[str], frozenset[str], frozenset[str]] | None:
        if self._project_module_classes is None:
            return None
        if self._known_project_classes is None:
            self._known_project_classes = self._project_module_classes()
            for entry in self._known_project_classes[1]:
                self._project_class_names.setdefault(entry.rsplit(".", 1)[-1], []).append(entry)
            self._project_class_stems = frozenset(entry.split(".", 1)[0] for entry in self._known_project_classes[1])
            for entry in self._known_project_classes[2]:
                self._project_mover_names.setdefault(entry.rsplit(".", 1)[-1], []).append(entry)
        return self._known_project_classes

    def _in_project_classes(self, qualified: str, *, stateful: bool) -> bool:
        entries = self._project_entries()
        if entries is None:
            return False
        parts = qualified.split(".")
        known = entries[0 if stateful else 1]
        if len(parts) < 2:
            return False
        if ".".join(parts[-2:]) in known:
            return True
        # `from models import VariationalAutoencoder`, which `models/__init__.py` re-exports
        # from `models/vae.py`: a class name only one file of the project defines.
        defined_by = self._project_class_names.get(parts[-1], [])
        return len(defined_by) == 1 and defined_by[0] in known and parts[-2] not in self._project_class_stems

    def moved_parameters(self, definition: int) -> tuple[tuple[str, Value], ...]:
        """A plain function's parameters it leaves moved to an accelerator, as its own flow
        ends (`model.cuda()` in `train_model(model, ...)`): Modules move in place, so the
        caller's model is there too. Empty while the function runs."""
        target = self._definitions.get(definition)
        if target is None or target.owner is not None or not isinstance(target.node, cst.FunctionDef):
            return ()
        flow = self._flows.get(definition) or self._flow(target.node)
        if flow is None:
            return ()
        moved = []
        for name in self.parameter_names(definition):
            # (A body that ends in `return`: what its last statement saw.)
            final = _final_value(flow, name)
            if final is not None and not final.is_tensor_like and final.places is not None and final.on_accelerator:
                moved.append((name, final))
        return tuple(moved)

    def returns_in_cpu_mode(self, definition: int) -> bool:
        """Whether the CPU mode gets past a call of a plain function of the file: False where
        every way out of it without a GPU raises or exits (`else: raise NotImplementedError(
        "This code requires GPU")`). True while the function runs (a recursive call)."""
        target = self._definitions.get(definition)
        if target is None or target.owner is not None or not isinstance(target.node, cst.FunctionDef) \
                or definition in self._running:
            return True
        flow = self._flows.get(definition) or self._flow(target.node)
        return flow is None or flow.returns_in_cpu_mode

    def parameter_names(self, definition: int) -> tuple[str, ...]:
        target = self._definitions.get(definition)
        if target is None or not isinstance(target.node, cst.FunctionDef):
            return ()
        params = target.node.params
        return tuple(param.name.value for param in (*params.posonly_params, *params.params))

    def meetings_of_call(self, call: cst.Call) -> list[Meeting]:
        """The meetings of a same-file plain function's body as this call runs it: its
        parameters bound to this call's arguments (`evaluate(model_1, loader)` with the model
        left on the CPU, where the file also calls it with a model on the GPU and the
        function's own flow joins both). Empty for anything else, or past the budget of runs."""
        known = self._call_meetings.get(id(call))
        if known is not None:
            return known
        found: list[Meeting] = []
        self._call_meetings[id(call)] = found
        scope = self._enclosing_scope(call)
        flow = self.flow_for(scope)
        callee = flow.values.get(id(call.func)) if flow is not None else None
        target = self._definitions.get(callee.reference.definition) \
            if callee is not None and callee.reference is not None and callee.reference.definition is not None else None
        if flow is None or target is None or target.owner is not None or not isinstance(target.node, cst.FunctionDef):
            return found
        function = target.node
        if id(function) in self._in_progress or len(self._call_runs.setdefault(id(function), set())) >= _PER_CALL_RUNS:
            return found
        arguments = tuple(flow.values.get(id(arg.value), UNKNOWN) for arg in call.args)
        declared = self._entry_env(target)
        passed = parameters_from_call_sites(function, [CallSite(call, arguments, False)], self._default_values(target))
        env = {name: refined(value, passed[name]) if name in passed else value for name, value in declared.items()}
        key = tuple(sorted(env.items(), key=lambda item: item[0]))
        self._call_runs[id(function)].add(key)
        # (As a fix's trial run: nothing it finds is kept for the file's other questions.)
        found.extend(self._run(function, env, None, {}).meetings.values())
        return found

    def instance_value(self, class_id: int) -> Value:
        summary = self._class(class_id)
        return self._instance_value(summary) if summary is not None else UNKNOWN

    def names_used_as_tensors(self, scope: cst.CSTNode) -> frozenset[str]:
        known = self._tensor_uses.get(id(scope))
        if known is None:
            known = self._tensor_uses[id(scope)] = names_used_as_tensors(scope)
        return known

    def module_class_with_method(self, name: str) -> int | None:
        """The one nn.Module class of the file that defines a method so named, if only one does."""
        found: int | None = None
        for key, definition in list(self._definitions.items()):
            if not isinstance(definition.node, cst.ClassDef):
                continue
            summary = self._class(key)
            if summary is not None and summary.is_module and name in summary.methods:
                if found is not None:
                    return None
                found = key
        return found

    def method_of(self, class_id: int, name: str) -> int | None:
        summary = self._class(class_id)
        if summary is None:
            return None
        method = summary.methods.get(name)
        return id(method) if method is not None else None

    def attribute_value(self, class_id: int, attribute: str, instance: Value) -> Value | None:
        summary = self._class(class_id)
        if summary is None:
            return None
        if summary.collecting:
            self._provisional_reads.add(class_id)
            self._unfinished_attribute_reads += 1
        attributes = self._attributes(summary)
        value = attributes.get(attribute)
        if value is None:
            value = summary.class_level.get(attribute)
            if value is None:
                return None
        if summary.is_module and instance.places is not None:
            if value.is_module_like:
                # Submodules move with their parent.
                return value.with_places(instance.places)
            if _holds_modules(value):
                # `self.blocks = [self.b1, self.b2]`: the modules in it move with their parent.
                return _modules_placed(value, instance.places)
            return _substitute_module_device(value, instance.places)
        if summary.is_module and Kind.MODULE in instance.kinds:
            # A model whose place is unknown (a parameter annotated with its class): so is the
            # place of what moves with it.
            if value.is_module_like:
                return value.with_places(None)
            if _holds_modules(value):
                return _modules_placed(value, None)
            if value.places is not None and MODULE_DEVICE_PLACE in value.places:
                return replace(value, places=None, origins=frozenset())
        return value

    # ---- classes -------------------------------------------------------------------

    def _class(self, class_id: int) -> _ClassSummary | None:
        summary = self._classes.get(class_id)
        if summary is not None:
            return summary
        definition = self._definitions.get(class_id)
        if definition is None or not isinstance(definition.node, cst.ClassDef):
            return None
        node = definition.node
        methods = {s.name.value: s for s in node.body.body if isinstance(s, cst.FunctionDef)}
        # Placeholder while the bases are read (a class naming itself is not a Module by that).
        summary = self._classes[class_id] = _ClassSummary(node, False, methods, False)
        summary.is_module = self._bases_make_module(node, definition.enclosing)
        init = methods.get("__init__")
        summary.moves_itself = init is not None and self._text_fact("moves itself", init, _moves_self)
        return summary

    def _imported_from(self, node: cst.BaseExpression) -> str | None:
        """`decoder.DecoderBase` for `DecoderBase` after `from .decoder import DecoderBase` (or
        `from pkg.decoder import ...`) at the top of the file."""
        if not isinstance(node, cst.Name):
            return None
        for statement in self.module.body:
            if not isinstance(statement, cst.SimpleStatementLine):
                continue
            for small in statement.body:
                if not isinstance(small, cst.ImportFrom) or isinstance(small.names, cst.ImportStar) \
                        or small.module is None:
                    continue
                for alias in small.names:
                    bound = alias.asname.name if alias.asname is not None else alias.name
                    if isinstance(bound, cst.Name) and bound.value == node.value:
                        module_name = dotted_name(small.module) or ""
                        return f"{module_name.rsplit('.', 1)[-1]}.{dotted_name(alias.name)}"
        return None

    def module_owns_state(self, class_id: int) -> bool:
        """Whether instances of a same-file Module class hold parameters, buffers or tensors
        they make themselves: a stateful base (`class Head(nn.Linear)`), or an attribute its
        methods set to a module or tensor made there (`self.fc = nn.Linear(...)`,
        `nn.Parameter(...)`). Not a module of modules handed in (`Searcher(encoder, decoder)`)
        or of stateless parts only (a loss, a Gram matrix)."""
        return self._owns_state(class_id, set())

    def _owns_state(self, class_id: int, seen: set[int]) -> bool:
        summary = self._class(class_id)
        if summary is None or not summary.is_module or class_id in seen:
            return False
        seen.add(class_id)
        definition = self._definitions[class_id]
        flow = self._flows.get(id(definition.enclosing)) or self._flow(definition.enclosing)
        for base in summary.node.bases:
            reference = flow.values.get(id(base.value), UNKNOWN).reference if flow is not None else None
            if reference is None:
                continue
            if reference.definition is not None:
                if self._owns_state(reference.definition, seen):
                    return True
            elif torch_api.is_module_constructor(reference.qualified) \
                    and reference.qualified not in torch_api.MODULE_BASE_CLASSES \
                    and not torch_api.is_stateless_module(reference.qualified):
                return True
        for value in self._attributes(summary).values():
            if value.instance_of is not None and value.instance_of != class_id:
                if self._owns_state(value.instance_of, seen):
                    return True
                continue
            made_here = value.places is not None and bool(value.places & {HOST_PLACE, MODULE_DEVICE_PLACE})
            if made_here and (value.is_module_like or value.is_tensor_like):
                return True
        return False

    def _bases_make_module(self, node: cst.ClassDef, enclosing: Scope, *, other_files: bool = True) -> bool:
        """Whether a base makes the class an `nn.Module`: torch's, a same-file Module class, or
        (with `other_files`) a Module class of another file of the project."""
        flow = self._flows.get(id(enclosing)) or self._running.get(id(enclosing)) or self._flow(enclosing)
        library_base = False
        for base in node.bases:
            if base.keyword is not None:
                continue
            value = flow.values.get(id(base.value), UNKNOWN) if flow is not None else UNKNOWN
            reference = value.reference
            if reference is None:
                # `from .decoder import DecoderBase` (a relative import names no reference).
                imported = self._imported_from(base.value) if other_files else None
                if imported is not None and self._in_project_classes(imported, stateful=False):
                    return True
                # `class CustomEncoder(Encoder)` after `from espnet...encoder import *`.
                library_base = library_base or self._star_imported_from_a_library(base.value)
                continue
            if reference.definition is not None:
                base_summary = self._class(reference.definition)
                if base_summary is not None and base_summary.is_module:
                    return True
                library_base = library_base or base_summary is not None and base_summary.library_base
                continue
            qualified = reference.qualified
            if qualified in torch_api.MODULE_BASE_CLASSES or torch_api.is_module_constructor(qualified) \
                    or qualified in torch_api.WRAPPERS \
                    or other_files and self._in_project_classes(qualified, stateful=False):
                # (Also a Module class of another file of the project: `class LSTMDecoder(Decoder)`.)
                return True
            library_base = library_base or _library_model_base(qualified)
        summary = self._classes.get(id(node))
        if summary is not None:
            summary.library_base = library_base
        # A class of another library (espnet's `E2E`, directly or through a class of the file)
        # that the class gives a `forward`: a Module, as only a Module's `forward` is called so.
        return library_base and any(type(item) is cst.FunctionDef and item.name.value == "forward"
                                    for item in node.body.body)

    def _star_imported_from_a_library(self, base: cst.BaseExpression) -> bool:
        """A name the file binds nowhere, where it star-imports from another library than torch."""
        if not isinstance(base, cst.Name) or base.value in self._bound_by_module():
            return False
        return any(isinstance(small, cst.ImportFrom) and isinstance(small.names, cst.ImportStar)
                   and _library_model_base(f"{dotted_name(small.module) if small.module else ''}.{base.value}")
                   for statement in self.module.body if isinstance(statement, cst.SimpleStatementLine)
                   for small in statement.body)

    def _self_value(self, class_id: int) -> Value:
        summary = self._class(class_id)
        if summary is not None and summary.is_module:
            return Value(frozenset({Kind.MODULE}), frozenset({MODULE_DEVICE_PLACE}), instance_of=class_id)
        return Value(frozenset({Kind.OTHER}), instance_of=class_id)

    def _instance_value(self, summary: _ClassSummary) -> Value:
        if summary.is_module:
            places = None if summary.moves_itself else frozenset({HOST_PLACE})
            return Value(frozenset({Kind.MODULE}), places, instance_of=id(summary.node))
        if "__getitem__" in summary.methods and "__len__" in summary.methods:
            return Value(frozenset({Kind.DATASET}), instance_of=id(summary.node))
        return Value(frozenset({Kind.OTHER}), instance_of=id(summary.node))

    def _attributes(self, summary: _ClassSummary) -> dict[str, Value]:
        """`self.<attr>` as all the class's methods assign it (joined).

        A method still running when they were collected (`check_cuda()`, asked about first,
        reading `self.D` before its own `self.D.cuda()`) could not be read: the collection is
        kept only while that method runs, its readers are provisional, and it is made again
        once the method is done. So the answer does not depend on which body was asked first."""
        if summary.attributes is not None:
            if not summary.skipped or summary.skipped <= self._in_progress:
                if summary.skipped:
                    self._provisional_reads.add(id(summary.node))
                return summary.attributes
            summary.attributes, summary.skipped = None, frozenset()
        summary.attributes = {}  # while collecting, attributes read as unknown
        summary.collecting = True
        collected: dict[str, Value] = {}
        definition = self._definitions[id(summary.node)]
        # What the collection reads as unknown is the collection's own definition, not a
        # provisional answer: the caller's flow stays complete.
        reads = set(self._provisional_reads)
        attribute_reads = self._unfinished_attribute_reads
        try:
            skipped = self._collect_attributes(summary, definition, collected)
        finally:
            summary.collecting = False
            self._provisional_reads = reads
            self._unfinished_attribute_reads = attribute_reads
        summary.attributes, summary.skipped = collected, skipped
        if skipped:
            self._provisional_reads.add(id(summary.node))
        return collected

    def _collect_attributes(self, summary: _ClassSummary, definition: _Definition,
                            collected: dict[str, Value]) -> frozenset[int]:
        """Gather the attribute writes of the class's methods into `collected`; the methods
        skipped because they are running (ids)."""
        skipped: set[int] = set()
        for method in summary.methods.values():
            self.register_definition(method, definition.enclosing, summary.node)
            method_definition = self._definitions[id(method)]
            flow = self._flows.get(id(method))
            if flow is None:
                if id(method) in self._in_progress:
                    if self._text_fact("assigns own attributes", method,
                                       lambda m: _assigns_own_attributes(m, self._self_name(m))):
                        skipped.add(id(method))
                    continue
                if not self._text_fact(
                        "assigns own attributes", method, lambda m: _assigns_own_attributes(m, self._self_name(m))):
                    continue
                # Reads of this class's attributes by an earlier method must not hide this one's.
                self._provisional_reads.discard(id(summary.node))
                flow = self._interpret(method, self._entry_env(method_definition), summary.node, attributes_only=True)
            self_name = self._self_name(method)
            for name, value in flow.attribute_writes.items():
                if method.name.value == "__init__" and self_name is not None:
                    # What the instance holds once built: `self.G = Net()` then `self.G.cuda()`
                    # (a Module moves in place) leaves G on the GPU, under `if gpu_mode:` on
                    # the GPU or the host.
                    final = _final_value(flow, f"{self_name}.{name}")
                    if final is not None and final.kinds <= value.kinds:
                        value = final
                previous = collected.get(name)
                collected[name] = value if previous is None else previous.join(value)
        return frozenset(skipped)


def _operand_values(meeting: Meeting | None) -> tuple[Value, ...] | None:
    return None if meeting is None else tuple(operand.value for operand in meeting.operands)


def _library_model_base(qualified: str) -> bool:
    """A base class imported from another library than torch (whose classes the brain knows)
    or Python's own: `espnet.nets.pytorch_backend.e2e_asr_transformer.E2E`."""
    root = qualified.partition(".")[0]
    return "." in qualified and root not in ("torch", "builtins", "abc", "typing", "collections", "enum",
                                              "dataclasses", "numpy", "object")


def _computed_from_unplaced_inputs(result: Value, arguments: Sequence[Value]) -> bool:
    """A tensor result the summary cannot place, or a result it does not know at all, from a
    call handed placed tensors (`loss_fn(model(x), y)`, `accuracy(logits, y)` computing from
    parameters it cannot tell are tensors): with these arguments it may say where the result
    is."""
    return (result.is_tensor_like and result.places is None or not result.is_known) and any(
        argument.is_tensor_like and argument.places is not None for argument in arguments)


def _final_value(flow: FunctionFlow, name: str) -> Value | None:
    if flow.final is not None:
        return flow.final.get(name)
    # The body never finishes (it ends in a raise or `sys.exit`): what its last statement saw.
    if flow.before:
        last = next(reversed(flow.before.values()))
        return last.get(name)
    return None


def _holds_modules(value: Value) -> bool:
    """A list, tuple or dict whose known items are all modules."""
    return value.kinds == {Kind.CONTAINER} and bool(value.items) and all(
        item.is_module_like for _, item in value.items or ())


def _modules_placed(value: Value, places: frozenset[Place] | None) -> Value:
    """A container of modules, each on `places` (None: unknown)."""
    items = tuple((key, item.with_places(places)) for key, item in value.items or ())
    return replace(value, items=items, places=places, origins=frozenset())


def _substitute_parameter_devices(value: Value, devices: Mapping[str, Place]) -> Value:
    """The value with the places a function's device parameters name (`.to(device)` in its
    body) replaced by the devices its caller passed for them."""
    items = value.items
    if items:
        substituted = tuple((key, _substitute_parameter_devices(item, devices)) for key, item in items)
        if substituted != items:
            value = replace(value, items=substituted)
    if value.places is None:
        return value
    places = frozenset(devices.get(place.symbol, place) if place.kind is PlaceKind.DEVICE else place
                       for place in value.places)
    return value if places == value.places else replace(value, places=places)


# Kinds of argument that carry no data of a model's: they say nothing of where its result is.
_NO_MODEL_DATA = frozenset({Kind.DEVICE, Kind.DATALOADER, Kind.DATASET, Kind.SCALAR, Kind.MEMORY_BUFFER,
                            Kind.REFERENCE, Kind.OTHER})


def _placed_by_these_arguments(result: Value, arguments: Sequence[Value]) -> Value:
    """A plain function's result "on the module's device": where the models and the model
    outputs it is handed are, as its summary saw them at other calls (a caller's run with its
    own parameters unknown: `loss_func(model(x), y)` in a `train(model, x, y)` seen as
    declared). Where this call hands it only data whose places are known, none on a module's
    device, the result is where those are."""
    if not _mentions_module_device(result):
        return result
    places: set[Place] = set()
    for argument in arguments:
        if argument.kinds and argument.kinds <= _NO_MODEL_DATA:
            continue
        if argument.places is None or MODULE_DEVICE_PLACE in argument.places:
            return result
        places |= argument.places
    return _substitute_module_device(result, frozenset(places)) if places else result


def _mentions_module_device(value: Value) -> bool:
    return value.places is not None and MODULE_DEVICE_PLACE in value.places or any(
        _mentions_module_device(item) for _, item in value.items or ())


def _substitute_module_device(value: Value, places: frozenset[Place]) -> Value:
    """The value as seen from outside a module that is on `places`: its device, the module's
    own, is where the module is; in a returned tuple too (`init_hidden` returning `(h, c)`)."""
    items = value.items
    if items:
        substituted = tuple((key, _substitute_module_device(item, places)) for key, item in items)
        if substituted != items:
            value = replace(value, items=substituted)
    if value.places is None or MODULE_DEVICE_PLACE not in value.places:
        return value
    return replace(value, places=(value.places - {MODULE_DEVICE_PLACE}) | places)


def _moves_self(init: cst.FunctionDef) -> bool:
    """`self.to(device)` or `self.cuda()` in `__init__`: instances are not on the host."""
    params = init.params.params
    if not params:
        return False
    self_name = params[0].name.value
    stack: list[cst.CSTNode] = [init.body]
    while stack:
        node = stack.pop()
        # Exact type tests: isinstance on LibCST's ABCs is slow.
        if type(node) is cst.Call and type(node.func) is cst.Attribute \
                and type(node.func.value) is cst.Name and node.func.value.value == self_name \
                and node.func.attr.value in ("to", "cuda", "xpu", "mps"):
            return True
        if (type(node) is cst.FunctionDef or type(node) is cst.ClassDef) and node is not init:
            continue
        stack.extend(child_nodes(node))
    return False


def _device_setting_bodies(module: cst.Module,
                           settings: Callable[[cst.BaseStatement], DeviceSettings] = device_settings_in
                           ) -> frozenset[int]:
    """The ids of the bodies (the module, functions, lambdas) whose own code calls something
    that changes the current CUDA device, statement by top-level statement (an editor's
    memory keeps each unchanged statement's answer)."""
    found: set[int] = set()
    for statement in module.body:
        at_module_level, inner = settings(statement)
        if at_module_level:
            found.add(id(module))
        found |= inner
    return frozenset(found)


def _assigns_own_attributes(method: cst.FunctionDef, self_name: str | None) -> bool:
    """Whether the method's own body binds `self.<name>`, or moves one in place
    (`self.D.cuda()`): the only writes its interpretation records. A method that does neither
    adds nothing to the class's attributes."""
    if self_name is None:
        return False
    stack: list[cst.CSTNode] = [method.body]
    while stack:
        node = stack.pop()
        if type(node) is cst.FunctionDef or type(node) is cst.ClassDef or type(node) is cst.Lambda:
            continue
        targets: list[cst.BaseExpression] = []
        if type(node) is cst.Expr and type(node.value) is cst.Call and type(node.value.func) is cst.Attribute \
                and node.value.func.attr.value in ("to", "cuda", "cpu"):
            targets = [node.value.func.value]
        elif type(node) is cst.Assign:
            targets = [target.target for target in node.targets]
        elif type(node) is cst.AnnAssign or type(node) is cst.AugAssign or type(node) is cst.For \
                or type(node) is cst.CompFor or type(node) is cst.NamedExpr:
            targets = [node.target]
        elif type(node) is cst.WithItem and node.asname is not None:
            targets = [node.asname.name]
        while targets:
            target = targets.pop()
            if type(target) is cst.Attribute and type(target.value) is cst.Name and target.value.value == self_name:
                return True
            if type(target) is cst.Tuple or type(target) is cst.List:
                targets.extend(element.value for element in target.elements)
            elif type(target) is cst.StarredElement:
                targets.append(target.value)
        stack.extend(child_nodes(node))
    return False


def _moved_to_the_host(node: cst.BaseExpression) -> cst.BaseExpression | None:
    """`x.cpu()` or `x.to("cpu")`: the `x` moved; else None."""
    if type(node) is not cst.Call or type(node.func) is not cst.Attribute:
        return None
    method = node.func.attr.value
    if method == "cpu" and not node.args or method == "to" and len(node.args) == 1 and \
            type(node.args[0].value) is cst.SimpleString and node.args[0].value.evaluated_value == "cpu":
        return node.func.value
    return None


def _calls_of_own_attributes(function: cst.FunctionDef, self_name: str | None) -> list[tuple[cst.Call, str]]:
    """`self.encoder(...)` calls in the body, with the attribute's name."""
    found: list[tuple[cst.Call, str]] = []
    if self_name is None:
        return found
    stack: list[cst.CSTNode] = [function.body]
    while stack:
        node = stack.pop()
        if type(node) is cst.Call and type(node.func) is cst.Attribute and type(node.func.value) is cst.Name \
                and node.func.value.value == self_name:
            found.append((node, node.func.attr.value))
        stack.extend(child_nodes(node))
    return found


def _passed_as_host_argument(function: cst.CSTNode, parameter: str, imports: ImportTable, *,
                             or_moved_there: bool = False,
                             functions: dict[str, dict[int, str]] = torch_api.HOST_ARGUMENT_FUNCTIONS) -> bool:
    """Is the parameter itself handed to `pack_padded_sequence` as its lengths (which must be
    on the CPU), or where another of `functions` (by last name) takes host data? Then it is host
    data; `lengths.cpu()` there says the opposite, though the caller may then pass either
    (`or_moved_there`). Calls are named through the file's imports (`from
    torch.nn.utils.rnn import pack_padded_sequence as pack`), else as written."""
    stack: list[cst.CSTNode] = [function]
    while stack:
        node = stack.pop()
        if type(node) is cst.Call:
            name = imports.qualified_name(node.func) or dotted_name(node.func)
            wanted = functions.get(name.rpartition(".")[2]) if name is not None else None
            if wanted is not None:
                for position, arg in enumerate(node.args):
                    matches = torch_api.host_argument(wanted, position, None if arg.keyword is None else arg.keyword.value)
                    handed = (_moved_to_the_host(arg.value) if or_moved_there else None) or arg.value
                    if matches and isinstance(handed, cst.Name) and handed.value == parameter:
                        return True
        stack.extend(child_nodes(node))
    return False


def _contains(root: cst.CSTNode, node: cst.CSTNode) -> bool:
    return any(current is node for current in descendants(root, into_definitions=False))


def _innermost_block(body: cst.CSTNode, node: cst.CSTNode) -> Sequence[cst.CSTNode] | None:
    """The statements of the innermost block of `body` (a function or the module) that holds
    `node` in one of them, not below a nested definition."""
    statements: Sequence[cst.CSTNode] | None
    if type(body) is cst.Module:
        statements = body.body
    elif type(body) is cst.FunctionDef and type(body.body) is cst.IndentedBlock:
        statements = body.body.body
    else:
        return None
    while True:
        holding = next((statement for statement in statements if _contains(statement, node)), None)
        if holding is None:
            return None
        inner = next((block.body for block in _blocks_of(holding) if any(_contains(s, node) for s in block.body)), None)
        if inner is None:
            return statements
        statements = inner


def _blocks_of(statement: cst.CSTNode) -> list[cst.IndentedBlock]:
    """The indented blocks of a compound statement (`if`/`elif`/`else`, loops, `with`, `try`)."""
    blocks: list[cst.IndentedBlock] = []
    for child in child_nodes(statement):
        if type(child) is cst.IndentedBlock:
            blocks.append(child)
        elif type(child) in (cst.Else, cst.If, cst.Finally, cst.ExceptHandler):
            blocks.extend(_blocks_of(child))
    return blocks


def _binds(statement: cst.CSTNode, name: str) -> bool:
    """The statement assigns `name` at its top (`name = ...`)."""
    return type(statement) is cst.SimpleStatementLine and any(
        type(small) is cst.Assign and any(type(target.target) is cst.Name and target.target.value == name
                                          for target in small.targets)
        for small in statement.body)


def _puts_to_work(node: cst.CSTNode, name: str) -> bool:
    """`name(...)` or `name.method(...)` with a method that is more than a move, a mode or
    a dtype (`net.predict(x)`, `net.load_weights(path)`)."""
    if type(node) is not cst.Call:
        return False
    func = node.func
    if type(func) is cst.Name:
        return func.value == name
    return type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value == name \
        and func.attr.value not in torch_api.MODULE_SELF_RETURNING_METHODS


def _only_its_state_dict(statement: cst.CSTNode, name: str) -> bool:
    """Every read of `name` in the statement is `name.state_dict`."""
    parents: dict[int, cst.CSTNode] = {}
    for node in descendants(statement):
        for child in child_nodes(node):
            parents[id(child)] = node
        if type(node) is cst.Name and node.value == name:
            parent = parents.get(id(node))
            if not (type(parent) is cst.Attribute and parent.value is node and parent.attr.value == "state_dict"):
                return False
    return True


def _all_origins(value: Value) -> set[int]:
    """The origins of a value and of the items it holds (a returned tuple's members)."""
    found: set[int] = set()
    pending = [value]
    while pending:
        current = pending.pop()
        found.update(current.origins)
        pending.extend(item for _, item in current.items or ())
    return found


def _class_moves_what_it_is_handed(class_node: cst.ClassDef) -> bool:
    for method in class_node.body.body:
        if type(method) is not cst.FunctionDef:
            continue
        params = [param.name.value for param in (*method.params.posonly_params, *method.params.params,
                                                  *method.params.kwonly_params)]
        self_name = params[0] if params else None
        for node in descendants(method):
            if type(node) is not cst.Call or type(node.func) is not cst.Attribute or node.func.attr.value not in ("to", "cuda"):
                continue
            moved = node.func.value
            if type(moved) is cst.Name and moved.value in params and moved.value != self_name:
                return True
            if type(moved) is cst.Attribute and type(moved.value) is cst.Name and moved.value.value == self_name:
                return True
    return False
