"""Value-kind inference: what is this expression — a Tensor, a Module, a wrapped Module?

Flow: one pass in source order. Each scope keeps the kinds bound to its names so far. A
plain assignment replaces a binding; an assignment inside an `if`/loop/`try` joins with the
previous one, so `model = nn.DataParallel(model)` under `if` makes `model` maybe-wrapped.
Anything the tables do not recognise is UNKNOWN, and UNKNOWN poisons a join: rules only
speak on evidence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import libcst as cst

from torchdevlint.analysis import torch_api
from torchdevlint.analysis.devices import string_value
from torchdevlint.analysis.flow.values import Wrapping
from torchdevlint.analysis.names import ImportTable, dotted_name
from torchdevlint.budget import Deadline, NoDeadline


class Kind(Enum):
    TENSOR = "tensor"
    # A DataLoader batch: a tuple, list or dict of tensors.
    TENSOR_BATCH = "tensor batch"
    MODULE = "module"
    WRAPPED_MODULE = "wrapped module"
    DEVICE = "device"
    DATALOADER = "dataloader"
    # Known, but nothing the rules care about (a number, a string, a function …).
    OTHER = "other"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class ValueInfo:
    """The set of kinds an expression may have at this point."""

    kinds: frozenset[Kind]

    @staticmethod
    def of(*kinds: Kind) -> ValueInfo:
        return ValueInfo(frozenset(kinds))

    def join(self, other: ValueInfo) -> ValueInfo:
        return ValueInfo(self.kinds | other.kinds)

    @property
    def is_known(self) -> bool:
        return bool(self.kinds) and Kind.UNKNOWN not in self.kinds

    @property
    def is_tensor(self) -> bool:
        return self.kinds == {Kind.TENSOR}

    @property
    def is_tensor_batch(self) -> bool:
        return self.kinds == {Kind.TENSOR_BATCH}

    @property
    def is_device(self) -> bool:
        return self.kinds == {Kind.DEVICE}

    @property
    def is_dataloader(self) -> bool:
        return self.kinds == {Kind.DATALOADER}

    @property
    def is_module_like(self) -> bool:
        """A Module, wrapped or not (every possibility is some Module)."""
        return bool(self.kinds) and self.kinds <= {Kind.MODULE, Kind.WRAPPED_MODULE}

    @property
    def wrapping(self) -> Wrapping:
        """Wrapped on every path (YES), on some path (MAYBE), or on none (NO).

        A name that a DataParallel/DDP result was bound to on some path is maybe-wrapped
        whatever else it may hold: only a Module can have been wrapped.
        """
        if Kind.WRAPPED_MODULE not in self.kinds:
            return Wrapping.NO
        return Wrapping.YES if self.kinds == {Kind.WRAPPED_MODULE} else Wrapping.MAYBE


UNKNOWN = ValueInfo.of(Kind.UNKNOWN)
OTHER = ValueInfo.of(Kind.OTHER)
TENSOR = ValueInfo.of(Kind.TENSOR)
MODULE = ValueInfo.of(Kind.MODULE)
DEVICE = ValueInfo.of(Kind.DEVICE)

# How many kinds are computed between two looks at the clock.
_DEADLINE_CHECK_INTERVAL = 4096

_DEVICE_STRING_PREFIXES = ("cuda", "cpu", "mps", "xpu", "meta")


@dataclass
class ClassInfo:
    name: str
    is_module: bool
    # Kinds of `self.<attr>` from assignments seen so far in this class's methods.
    attributes: dict[str, ValueInfo] = field(default_factory=dict)
    method_names: set[str] = field(default_factory=set)


class ScopeKind(Enum):
    MODULE = "module"
    CLASS = "class"
    FUNCTION = "function"


@dataclass
class Scope:
    kind: ScopeKind
    node: cst.CSTNode
    bindings: dict[str, ValueInfo] = field(default_factory=dict)
    classes: dict[str, ClassInfo] = field(default_factory=dict)
    # For a method: the class it belongs to and the name of its `self` parameter.
    owner: ClassInfo | None = None
    self_name: str | None = None
    # How many if/loop/try blocks deep we are inside this scope.
    conditional_depth: int = 0
    class_info: ClassInfo | None = None


def is_device_string(node: cst.BaseExpression) -> bool:
    value = string_value(node)
    return value is not None and value.split(":", 1)[0] in _DEVICE_STRING_PREFIXES


def _is_pretrained_model_class(node: cst.BaseExpression) -> bool:
    """`AutoModel`, `BertForSequenceClassification`: models, unlike tokenizers and configs."""
    name = dotted_name(node)
    if name is None:
        return False
    last = name.rsplit(".", 1)[-1]
    return "Model" in last or "For" in last


def keyword_argument(call: cst.Call, name: str) -> cst.Arg | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


class KindInference:
    """Tracks scopes and bindings during the engine's pass and answers `kind_of`."""

    def __init__(self, imports: ImportTable, deadline: Deadline | None = None) -> None:
        self.imports = imports
        self.deadline = deadline if deadline is not None else NoDeadline()
        self.scopes: list[Scope] = []
        # Questions answered from scratch; every so many, the file's time budget is checked.
        self.computed = 0
        # kind_of answers, per node, valid until the next change of scopes, bindings or imports:
        # rules ask about every sub-expression of a statement, and a `+` chain asks about its
        # left operand at each level, so without the memo the cost grows exponentially.
        self._generation = 0
        self._memo: dict[int, tuple[cst.BaseExpression, ValueInfo]] = {}
        self._memo_generation: tuple[int, int] = (0, 0)

    def _changed(self) -> None:
        self._generation += 1

    # ---- scope bookkeeping (called by the engine) ---------------------------------

    def push(self, scope: Scope) -> None:
        self._changed()
        self.scopes.append(scope)

    def pop(self) -> Scope:
        self._changed()
        return self.scopes.pop()

    def declare_class(self, info: ClassInfo) -> None:
        """A `class` statement in the current scope: the name now means the class."""
        self._changed()
        enclosing = self.current
        enclosing.bindings.pop(info.name, None)
        enclosing.classes[info.name] = info

    def set_binding(self, scope: Scope, name: str, info: ValueInfo) -> None:
        """Bind unconditionally (a `def`, a parameter): no join with what came before."""
        self._changed()
        scope.bindings[name] = info

    @property
    def current(self) -> Scope:
        return self.scopes[-1]

    def enter_conditional(self) -> None:
        self.current.conditional_depth += 1

    def leave_conditional(self) -> None:
        self.current.conditional_depth -= 1

    def enclosing_method(self) -> Scope | None:
        """The outermost function scope that is a method of a class, if we are inside one."""
        for scope in self.scopes:
            if scope.kind is ScopeKind.FUNCTION and scope.owner is not None:
                return scope
        return None

    def lookup_class(self, name: str) -> ClassInfo | None:
        for scope in reversed(self.scopes):
            if name in scope.bindings and scope.kind is not ScopeKind.CLASS:
                # A rebinding of the class name shadows the class.
                if name not in scope.classes:
                    return None
            if name in scope.classes:
                return scope.classes[name]
        return None

    def class_info_for_bases(self, node: cst.ClassDef) -> bool:
        """Whether a class's bases make it an nn.Module (torch.nn classes or local Modules)."""
        for base in node.bases:
            if base.keyword is not None:
                continue
            value = base.value
            qualified = self.imports.qualified_name(value)
            if qualified is not None:
                if qualified in torch_api.MODULE_BASE_CLASSES or torch_api.is_module_constructor(qualified):
                    return True
                if qualified in torch_api.WRAPPERS:
                    return True
                continue
            if isinstance(value, cst.Name):
                local = self.lookup_class(value.value)
                if local is not None and local.is_module:
                    return True
        return False

    # ---- bindings ------------------------------------------------------------------

    def lookup(self, name: str) -> ValueInfo | None:
        innermost = self.scopes[-1] if self.scopes else None
        for scope in reversed(self.scopes):
            # Class bodies are not enclosing scopes for the functions inside them.
            if scope.kind is ScopeKind.CLASS and scope is not innermost:
                continue
            if name in scope.bindings:
                return scope.bindings[name]
            if name in scope.classes:
                return OTHER
        return None

    def binding_scope(self, name: str) -> Scope | None:
        """The scope whose binding of `name` is visible here (what `lookup` reads), if any.

        Rules that track facts of their own about names key them by this scope, so that a
        local of the same name in another function never inherits them.
        """
        innermost = self.scopes[-1] if self.scopes else None
        for scope in reversed(self.scopes):
            if scope.kind is ScopeKind.CLASS and scope is not innermost:
                continue
            if name in scope.bindings:
                return scope
        return None

    def bind_name(self, name: str, info: ValueInfo) -> None:
        self._changed()
        scope = self.current
        previous = scope.bindings.get(name)
        if scope.conditional_depth > 0 and previous is not None:
            info = previous.join(info)
        scope.bindings[name] = info
        if scope.kind is ScopeKind.MODULE or scope.kind is ScopeKind.FUNCTION:
            scope.classes.pop(name, None)
        if self.imports.is_imported(name) and scope.kind is ScopeKind.MODULE and scope.conditional_depth == 0:
            self.imports.forget(name)

    def bind_attribute(self, target: cst.Attribute, info: ValueInfo) -> None:
        method = self.enclosing_method()
        if method is None or method.owner is None or method.self_name is None:
            return
        if not (isinstance(target.value, cst.Name) and target.value.value == method.self_name):
            return
        self._changed()
        attributes = method.owner.attributes
        name = target.attr.value
        previous = attributes.get(name)
        conditional = any(s.conditional_depth > 0 for s in self.scopes if s.kind is ScopeKind.FUNCTION)
        # Outside __init__, or under a condition, a new assignment adds a possibility.
        if previous is not None and (conditional or self._function_name(method) != "__init__"):
            info = previous.join(info)
        attributes[name] = info

    @staticmethod
    def _function_name(scope: Scope) -> str | None:
        node = scope.node
        return node.name.value if isinstance(node, cst.FunctionDef) else None

    def bind_target(self, target: cst.BaseExpression, info: ValueInfo) -> None:
        if isinstance(target, cst.Name):
            self.bind_name(target.value, info)
        elif isinstance(target, cst.Attribute):
            self.bind_attribute(target, info)
        elif isinstance(target, (cst.Tuple, cst.List)):
            element_info = TENSOR if (info.is_tensor_batch or info.is_tensor) else UNKNOWN
            for element in target.elements:
                value = element.value
                if isinstance(element, cst.StarredElement):
                    self.bind_target(value, UNKNOWN)
                else:
                    self.bind_target(value, element_info)
        elif isinstance(target, cst.StarredElement):
            self.bind_target(target.value, UNKNOWN)

    def bind_assignment(self, targets: list[cst.BaseExpression], value: cst.BaseExpression) -> None:
        for target in targets:
            if isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, (cst.Tuple, cst.List)):
                if len(target.elements) == len(value.elements) and not any(
                    isinstance(e, cst.StarredElement) for e in (*target.elements, *value.elements)
                ):
                    infos = [self.kind_of(e.value) for e in value.elements]
                    for element, info in zip(target.elements, infos, strict=True):
                        self.bind_target(element.value, info)
                    continue
            self.bind_target(target, self.kind_of(value))

    def bind_loop_target(self, target: cst.BaseExpression, iterable: cst.BaseExpression) -> None:
        """`for x, y in loader`, `for i, (x, y) in enumerate(tqdm(loader))`, `for batch in loader`."""
        enumerated = False
        while isinstance(iterable, cst.Call) and iterable.args:
            callee = iterable.func
            if isinstance(callee, cst.Name) and callee.value == "enumerate" and self.lookup("enumerate") is None:
                enumerated = True
                iterable = iterable.args[0].value
                continue
            qualified = self.imports.qualified_name(callee) or (
                callee.value if isinstance(callee, cst.Name) and callee.value == "iter" else None
            )
            if qualified in torch_api.PASS_THROUGH_ITERATORS:
                iterable = iterable.args[0].value
                continue
            break
        element = ValueInfo.of(Kind.TENSOR_BATCH) if self.kind_of(iterable).is_dataloader else UNKNOWN
        if enumerated:
            if isinstance(target, cst.Tuple) and len(target.elements) == 2:
                self.bind_target(target.elements[0].value, OTHER)
                self.bind_target(target.elements[1].value, element)
                return
            self.bind_target(target, UNKNOWN)
            return
        self.bind_target(target, element)

    # ---- the question rules ask -----------------------------------------------------

    def kind_of(self, node: cst.BaseExpression) -> ValueInfo:
        generation = (self._generation, self.imports.generation)
        if generation != self._memo_generation:
            self._memo.clear()
            self._memo_generation = generation
        cached = self._memo.get(id(node))
        if cached is not None and cached[0] is node:
            return cached[1]
        self.computed += 1
        if not self.computed % _DEADLINE_CHECK_INTERVAL:
            self.deadline.check()
        info = self._compute_kind(node)
        self._memo[id(node)] = (node, info)
        return info

    def _compute_kind(self, node: cst.BaseExpression) -> ValueInfo:
        if isinstance(node, cst.Name):
            found = self.lookup(node.value)
            return found if found is not None else UNKNOWN
        if isinstance(node, cst.Attribute):
            return self._attribute_kind(node)
        if isinstance(node, cst.Call):
            return self._call_kind(node)
        if isinstance(node, cst.Subscript):
            base = self.kind_of(node.value)
            if base.is_tensor or base.is_tensor_batch:
                return TENSOR
            return UNKNOWN
        if isinstance(node, cst.IfExp):
            unwrapped = self._unwrap_conditional(node)
            if unwrapped is not None:
                return unwrapped
            return self.kind_of(node.body).join(self.kind_of(node.orelse))
        if isinstance(node, cst.BinaryOperation):
            left_is_tensor = self.kind_of(node.left).is_tensor
            if isinstance(node.operator, cst.MatrixMultiply):
                return TENSOR if left_is_tensor or self.kind_of(node.right).is_tensor else UNKNOWN
            if left_is_tensor and (
                isinstance(node.right, (cst.Integer, cst.Float)) or self.kind_of(node.right).is_tensor
            ):
                return TENSOR
            return UNKNOWN
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
            return TENSOR if self.kind_of(node.expression).is_tensor else UNKNOWN
        if isinstance(node, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)):
            return DEVICE if is_device_string(node) else OTHER
        if isinstance(node, (cst.Integer, cst.Float, cst.Imaginary, cst.Dict, cst.List, cst.Tuple, cst.Set,
                             cst.ListComp, cst.DictComp, cst.SetComp, cst.Lambda, cst.Comparison)):
            return OTHER
        if isinstance(node, cst.NamedExpr):
            return self.kind_of(node.value)
        return UNKNOWN

    def _attribute_kind(self, node: cst.Attribute) -> ValueInfo:
        attr = node.attr.value
        qualified = self.imports.qualified_name(node)
        if qualified is not None:
            return UNKNOWN
        base_node = node.value
        method = self.enclosing_method()
        if (
            method is not None
            and method.owner is not None
            and isinstance(base_node, cst.Name)
            and base_node.value == method.self_name
            and self.lookup(base_node.value) is None
        ):
            return method.owner.attributes.get(attr, UNKNOWN)
        base = self.kind_of(base_node)
        if base.is_tensor:
            if attr in torch_api.TENSOR_ATTRIBUTES:
                return TENSOR
            if attr == "device":
                return DEVICE
            return UNKNOWN
        if base.is_module_like:
            if attr == "module":
                # `.module` of a wrapper is the bare model; of a bare model it is an attribute.
                return MODULE if base.wrapping is Wrapping.YES else UNKNOWN
            if attr in ("weight", "bias"):
                return TENSOR
        return UNKNOWN

    def _call_kind(self, node: cst.Call) -> ValueInfo:
        callee = node.func
        qualified = self.imports.qualified_name(callee)
        if qualified is not None:
            return self._qualified_call_kind(qualified, node)
        if isinstance(callee, cst.Name):
            name = callee.value
            local = self.lookup_class(name)
            if local is not None:
                return MODULE if local.is_module else OTHER
            if name == "getattr" and self.lookup(name) is None and len(node.args) == 3:
                obj, attr, default = (arg.value for arg in node.args)
                if string_value(attr) == "module" and self._same_expression(obj, default):
                    return MODULE if self.kind_of(obj).is_module_like else UNKNOWN
            return UNKNOWN
        if isinstance(callee, cst.Attribute):
            method_name = callee.attr.value
            receiver = self.kind_of(callee.value)
            if receiver.is_tensor and method_name in torch_api.TENSOR_RETURNING_METHODS:
                return TENSOR
            if receiver.is_module_like and method_name in torch_api.MODULE_SELF_RETURNING_METHODS:
                return receiver
            if method_name == "from_pretrained" and _is_pretrained_model_class(callee.value):
                return MODULE
        return UNKNOWN

    def _qualified_call_kind(self, qualified: str, node: cst.Call) -> ValueInfo:
        if qualified.endswith(".from_pretrained") and isinstance(node.func, cst.Attribute):
            return MODULE if _is_pretrained_model_class(node.func.value) else UNKNOWN
        if qualified in torch_api.WRAPPERS:
            return ValueInfo.of(Kind.WRAPPED_MODULE)
        if qualified in torch_api.DATALOADERS:
            return ValueInfo.of(Kind.DATALOADER)
        if qualified == torch_api.TORCH_DEVICE:
            return DEVICE
        if torch_api.is_tensor_function(qualified):
            return TENSOR
        if torch_api.is_module_constructor(qualified):
            return MODULE
        return UNKNOWN

    def _unwrap_conditional(self, node: cst.IfExp) -> ValueInfo | None:
        """`model.module if hasattr(model, "module") else model` (or `if ddp`) is the bare model."""
        body = node.body
        if isinstance(body, cst.Attribute) and body.attr.value == "module":
            if self._same_expression(body.value, node.orelse):
                return MODULE if self.kind_of(node.orelse).is_module_like else UNKNOWN
        return None

    @staticmethod
    def _same_expression(a: cst.BaseExpression, b: cst.BaseExpression) -> bool:
        left, right = dotted_name(a), dotted_name(b)
        return left is not None and left == right

    def annotation_kind(self, annotation: cst.Annotation | None) -> ValueInfo:
        if annotation is None:
            return UNKNOWN
        value = annotation.annotation
        if isinstance(value, cst.SimpleString):
            return UNKNOWN
        qualified = self.imports.qualified_name(value)
        if qualified in ("torch.Tensor", "torch.FloatTensor", "torch.LongTensor", "torch.nn.Parameter"):
            return TENSOR
        if qualified in torch_api.MODULE_BASE_CLASSES or (qualified and torch_api.is_module_constructor(qualified)):
            return MODULE
        if isinstance(value, cst.Name):
            local = self.lookup_class(value.value)
            if local is not None and local.is_module:
                return MODULE
        return UNKNOWN
