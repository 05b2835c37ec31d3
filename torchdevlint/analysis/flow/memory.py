"""What an editor's buffer keeps of its analysis from one version to the next.

Interpreting a body is a deterministic function of the body, its entry environment, its class
and the answers the file-wide model gives it (the interpreter's `Oracle` questions). So a
function the edit left alone (the same node: `IncrementalParser` reuses it) need not be
interpreted again when the model, asked the same questions in the same order, gives the same
answers: the kept flow is then exactly what interpreting it would give. Asking again also does
to the model whatever the questions do (definitions registered, call sites recorded), as the
interpretation would have; the first answer that differs stops the check, and the function is
interpreted (asking again what it already asked changes nothing: the model's answers are
memoised, and its budget of runs per function counts distinct arguments). Only bodies that
define no function or class are kept: nothing else reads their state while they run.

Values name definitions and calls by `id(node)`. The tree the records were last checked
against is kept alive until the next version's analysis ends, so no node of the new tree can
take the address of one a record mentions; records not checked against a version are dropped.

Each top-level statement's name uses (`call_sites.StatementNameUses`) are kept too: facts about
names, with no ids, good as long as the statement is the same node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import libcst as cst

from torchdevlint.analysis.flow.call_sites import StatementNameUses, statement_name_uses
from torchdevlint.analysis.flow.device_settings import DeviceSettings, device_settings_in
from torchdevlint.analysis.flow.interpreter import Oracle
from torchdevlint.analysis.flow.results import Env, FunctionFlow
from torchdevlint.analysis.flow.values import Value

# One question the interpreter asked and the answer it had: (the Oracle member, its arguments).
Question = tuple[str, tuple[object, ...]]


@dataclass(frozen=True)
class FlowRecord:
    """One interpretation of a function body, with the questions it asked in order."""

    function: cst.FunctionDef
    env: Env
    owner: cst.ClassDef | None
    self_name: str | None
    module_method: bool
    asked: tuple[tuple[Question, object], ...]
    flow: FunctionFlow

    def fits(self, function: cst.FunctionDef, env: Env, owner: cst.ClassDef | None,
             self_name: str | None, module_method: bool) -> bool:
        return (self.function is function and self.owner is owner and self.self_name == self_name
                and self.module_method == module_method and self.env == env)


class RecordingOracle:
    """Stands for the model in one interpretation, writing down each question and answer."""

    def __init__(self, model: Oracle) -> None:
        self._model = model
        self.asked: list[tuple[Question, object]] = []

    def _ask(self, member: str, *arguments: object) -> object:
        answer = ask(self._model, (member, arguments))
        self.asked.append(((member, arguments), answer))
        return answer

    def outer_value(self, scope: cst.CSTNode, name: str) -> Value | None:
        return self._ask("outer_value", scope, name)  # type: ignore[return-value]  # the model's answer, of the method's type

    def host_arguments(self, made: int) -> tuple[tuple[int, str], ...]:
        return self._ask("host_arguments", made)  # type: ignore[return-value]  # the model's answer, of the method's type

    def forward_host_arguments(self, class_id: int) -> tuple[tuple[int, str], ...]:
        return self._ask("forward_host_arguments", class_id)  # type: ignore[return-value]  # the model's answer, of the method's type

    def gpu_world_outer_value(self, scope: cst.CSTNode, name: str) -> Value | None:
        return self._ask("gpu_world_outer_value", scope, name)  # type: ignore[return-value]  # the model's answer, of the method's type

    def call_result(self, definition: int, call: cst.Call | None, arguments: Sequence[Value],
                    receiver: Value | None) -> Value:
        return self._ask("call_result", definition, call, tuple(arguments), receiver)  # type: ignore[return-value]  # the model's answer, of the method's type

    def instance_value(self, class_id: int) -> Value:
        return self._ask("instance_value", class_id)  # type: ignore[return-value]  # the model's answer, of the method's type

    def attribute_value(self, class_id: int, attribute: str, instance: Value) -> Value | None:
        return self._ask("attribute_value", class_id, attribute, instance)  # type: ignore[return-value]  # the model's answer, of the method's type

    def method_of(self, class_id: int, name: str) -> int | None:
        return self._ask("method_of", class_id, name)  # type: ignore[return-value]  # the model's answer, of the method's type

    def module_class_with_method(self, name: str) -> int | None:
        return self._ask("module_class_with_method", name)  # type: ignore[return-value]  # the model's answer, of the method's type

    def names_used_as_tensors(self, scope: cst.CSTNode) -> frozenset[str]:
        # Read from the body's own text: no answer of the model's to check again.
        return self._model.names_used_as_tensors(scope)

    def makes_wrappers(self) -> bool:
        # Read from the file's own text: no answer of the model's to check again.
        return self._model.makes_wrappers()

    def reads_wrapped_modules(self) -> bool:
        # Read from the file's own text: no answer of the model's to check again.
        return self._model.reads_wrapped_modules()

    def project_module_class(self, qualified: str) -> bool:
        return self._ask("project_module_class", qualified)  # type: ignore[return-value]  # the model's answer, of the method's type

    def class_moves_what_it_is_handed(self, definition: int) -> bool:
        return self._ask("class_moves_what_it_is_handed", definition)  # type: ignore[return-value]  # the model's answer, of the method's type

    def project_mover(self, qualified: str) -> bool:
        return self._ask("project_mover", qualified)  # type: ignore[return-value]  # the model's answer, of the method's type

    def moved_parameters(self, definition: int) -> tuple[tuple[str, Value], ...]:
        return self._ask("moved_parameters", definition)  # type: ignore[return-value]  # the model's answer, of the method's type

    def returns_in_cpu_mode(self, definition: int) -> bool:
        return self._ask("returns_in_cpu_mode", definition)  # type: ignore[return-value]  # the model's answer, of the method's type

    def model_wrapper_class(self, class_id: int) -> bool:
        return self._ask("model_wrapper_class", class_id)  # type: ignore[return-value]  # the model's answer, of the method's type

    def parameter_names(self, definition: int) -> tuple[str, ...]:
        return self._ask("parameter_names", definition)  # type: ignore[return-value]  # the model's answer, of the method's type

    def register_definition(self, node: cst.CSTNode, enclosing: cst.CSTNode, owner: cst.ClassDef | None) -> None:
        self._ask("register_definition", node, enclosing, owner)

    def entry_cuda_device(self, scope: cst.CSTNode) -> Value:
        return self._ask("entry_cuda_device", scope)  # type: ignore[return-value]  # the model's answer, of the method's type

    @property
    def entry_default_device(self) -> Value | None:
        return self._ask("entry_default_device")  # type: ignore[return-value]  # the model's answer, of the method's type


_PROPERTIES = frozenset({"entry_default_device"})


def ask(model: Oracle, question: Question) -> object:
    member, arguments = question
    if not arguments and member in _PROPERTIES:
        return getattr(model, member)
    return getattr(model, member)(*arguments)


def answers_again(model: Oracle, record: FlowRecord) -> bool:
    """Ask the model the record's questions in order: whether every answer is the same."""
    return all(ask(model, question) == answer for question, answer in record.asked)


def recordable(asked: Sequence[tuple[Question, object]]) -> bool:
    """Whether a body defined no function or class as it ran: then no other body reads its
    state while it runs (`FlowModel._running`), and the record holds all it depends on."""
    return not any(question[0] == "register_definition" for question, _ in asked)


class FlowMemory:
    """The records of one buffer: those checked against its last analysed version."""

    def __init__(self) -> None:
        self._kept: dict[tuple[int, bool], FlowRecord] = {}
        self._checked: dict[tuple[int, bool], FlowRecord] = {}
        # Each top-level statement's name uses, with the statement they are about.
        self._kept_uses: dict[int, tuple[cst.BaseStatement, StatementNameUses]] = {}
        self._used_uses: dict[int, tuple[cst.BaseStatement, StatementNameUses]] = {}
        # Facts read from a function's own text (`kept_text_fact`), with the function.
        self._kept_facts: dict[tuple[str, int], tuple[cst.FunctionDef, bool]] = {}
        self._used_facts: dict[tuple[str, int], tuple[cst.FunctionDef, bool]] = {}
        # Which bodies of a top-level statement change the current CUDA device, with it.
        self._kept_device_settings: dict[int, tuple[cst.BaseStatement, DeviceSettings]] = {}
        self._used_device_settings: dict[int, tuple[cst.BaseStatement, DeviceSettings]] = {}
        # The tree the kept records were checked against (see the module's docstring).
        self._anchor: cst.Module | None = None
        # Of the last version analysed: functions whose kept flow was reused, and interpreted.
        self.reused = 0
        self.interpreted = 0

    def begin(self) -> None:
        """A version's analysis starts (records are kept per function, and per attribute
        collection: a class's methods run once more while its attributes are gathered)."""
        self._checked = {}
        self._used_uses = {}
        self._used_facts = {}
        self._used_device_settings = {}
        self.reused = self.interpreted = 0

    def recall(self, function: cst.FunctionDef, attributes_only: bool) -> FlowRecord | None:
        return self._kept.get((id(function), attributes_only))

    def keep(self, record: FlowRecord, attributes_only: bool) -> None:
        self._checked[(id(record.function), attributes_only)] = record

    def statement_name_uses(self, statement: cst.BaseStatement) -> StatementNameUses:
        """`call_sites.statement_name_uses`, kept while the statement is (facts about names,
        no node ids: nothing to check)."""
        kept = self._kept_uses.get(id(statement))
        uses = kept[1] if kept is not None and kept[0] is statement else statement_name_uses(statement)
        self._used_uses[id(statement)] = (statement, uses)
        return uses

    def device_settings(self, statement: cst.BaseStatement) -> DeviceSettings:
        """`device_settings_in(statement)`, kept while the statement is the same node (the ids
        it holds are of nodes inside it)."""
        kept = self._kept_device_settings.get(id(statement))
        settings = kept[1] if kept is not None and kept[0] is statement else device_settings_in(statement)
        self._used_device_settings[id(statement)] = (statement, settings)
        return settings

    def kept_text_fact(self, fact: str, function: cst.FunctionDef, read: Callable[[cst.FunctionDef], bool]) -> bool:
        """`read(function)`, a fact of the function's own text (`_assigns_own_attributes`), kept
        while the function is the same node."""
        key = (fact, id(function))
        kept = self._kept_facts.get(key)
        answer = kept[1] if kept is not None and kept[0] is function else read(function)
        self._used_facts[key] = (function, answer)
        return answer

    def finish(self, module: cst.Module) -> None:
        """The version's analysis ended: its records are the ones kept from now on."""
        self._kept, self._checked = self._checked, {}
        self._kept_uses, self._used_uses = self._used_uses, {}
        self._kept_facts, self._used_facts = self._used_facts, {}
        self._kept_device_settings, self._used_device_settings = self._used_device_settings, {}
        self._anchor = module
