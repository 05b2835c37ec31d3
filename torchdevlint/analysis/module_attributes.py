"""What each nn.Module class does with the attributes of `self`: tensors it keeps in plain
attributes, buffers it registers, attributes `forward` reads, and those other methods assign.

A tensor kept as a plain attribute stays where it was made when the module moves. A shared
analysis (`context.shared(ModuleAttributes)`), fed by the engine's walk; a class's facts are
complete once the walk has left it (`ModuleAttributes.of`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import libcst as cst

from torchdevlint.analysis.brains import torch_api
from torchdevlint.analysis.devices import string_value
from torchdevlint.analysis.flow.results import FlowQueries
from torchdevlint.analysis.flow.values import MODULE_DEVICE_PLACE, PlaceKind
from torchdevlint.analysis.names import ImportTable
from torchdevlint.analysis.tree import child_nodes, keyword_argument


class EnclosingMethod(Protocol):
    @property
    def function(self) -> cst.FunctionDef: ...

    @property
    def owner(self) -> cst.ClassDef: ...

    @property
    def self_name(self) -> str | None: ...


class AttributeWalkContext(Protocol):
    @property
    def flow(self) -> FlowQueries: ...

    @property
    def imports(self) -> ImportTable: ...

    def enclosing_method(self) -> EnclosingMethod | None: ...

    def ancestors(self, node: cst.CSTNode) -> list[cst.CSTNode]: ...


_REGISTERED_TENSORS = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.nn.Buffer"})
_ON_MODULE_DEVICE = frozenset({MODULE_DEVICE_PLACE})
# Calls that keep where a tensor is, and are no move themselves (`.bool()`, `.contiguous()`).
_CASTS = torch_api.SHAPE_KEEPING_METHODS - {"to", "cpu", "cuda", "type", "type_as", "pin_memory"}


@dataclass
class ModuleClassAttributes:
    """What one Module class does with the attributes of `self`."""

    node: cst.ClassDef
    # attribute -> the `self.<attr> = tensor` statement in __init__
    tensor_attributes: dict[str, cst.Assign] = field(default_factory=dict)
    registered: set[str] = field(default_factory=set)
    used_in_forward: set[str] = field(default_factory=set)
    # Attributes assigned anywhere else in the class (a buffer only takes tensors or None).
    assigned_elsewhere: set[str] = field(default_factory=set)
    # Attributes a method rebuilds on the module's own device (`self.grid = grid.to(x.device)`):
    # a cache the module keeps on its data's device itself.
    rebuilt_on_module_device: set[str] = field(default_factory=set)
    # `super().__init__()` seen in __init__: before it, register_buffer raises.
    module_initialised: bool = False
    before_init: set[str] = field(default_factory=set)


# `self.mean.to(x.device)`, `self.scale.item()`: uses that never mix devices.
_DEVICE_SAFE_METHODS = frozenset({"to", "cuda", "type_as"}) | torch_api.HOST_READ_METHODS


def _device_safe_use(node: cst.Attribute, ancestors: list[cst.CSTNode]) -> bool:
    if not ancestors:
        return False
    parent = ancestors[0]
    if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value in _DEVICE_SAFE_METHODS:
        return True
    if isinstance(parent, cst.Comparison) and all(
            isinstance(target.operator, (cst.Is, cst.IsNot)) for target in parent.comparisons):
        return True  # `if self.alpha is not None:` asks what it is, not where
    # float(self.lo), int(self.n): a Python number
    return (
        len(ancestors) >= 2
        and isinstance(parent, cst.Arg)
        and isinstance(ancestors[1], cst.Call)
        and isinstance(ancestors[1].func, cst.Name)
        and ancestors[1].func.value in ("float", "int", "bool")
    )


def _is_module_init_call(node: cst.Call) -> bool:
    """`super().__init__(...)`, `super(Net, self).__init__()`, `nn.Module.__init__(self)`."""
    func = node.func
    if not (isinstance(func, cst.Attribute) and func.attr.value == "__init__"):
        return False
    owner = func.value
    if isinstance(owner, cst.Call) and isinstance(owner.func, cst.Name) and owner.func.value == "super":
        return True
    return isinstance(owner, (cst.Name, cst.Attribute))


def _self_attribute(node: cst.BaseExpression, self_name: str | None) -> str | None:
    if (
        self_name is not None
        and type(node) is cst.Attribute
        and type(node.value) is cst.Name
        and node.value.value == self_name
    ):
        return node.attr.value
    return None


# A Module's own override of how it moves (`def to(self, device)`), which moves an attribute
# along with its parameters (`self.action_scale = self.action_scale.to(device)`).
_MOVING_OVERRIDES = frozenset({"to", "cuda", "_apply"})


def _moves_itself(value: cst.BaseExpression, name: str, self_name: str | None) -> bool:
    """`self.<name>.to(...)` / `.cuda(...)`: the attribute moved where it is asked."""
    return type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value in ("to", "cuda") \
        and _self_attribute(value.func.value, self_name) == name


class ModuleAttributes:
    def __init__(self, context: AttributeWalkContext) -> None:
        self.context = context
        self._classes: list[ModuleClassAttributes | None] = []
        self._finished: dict[int, ModuleClassAttributes] = {}

    def of(self, class_node: cst.ClassDef) -> ModuleClassAttributes | None:
        """The attributes of a Module class the walk has left; None for other classes."""
        return self._finished.get(id(class_node))

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._classes.append(ModuleClassAttributes(node) if self.context.flow.is_module_class(node) else None)

    def leave_ClassDef(self, node: cst.ClassDef) -> None:
        current = self._classes.pop()
        if current is not None:
            self._finished[id(node)] = current

    def _current_class(self) -> ModuleClassAttributes:
        current = self._classes[-1]
        assert current is not None, "asked only where _method() found a module class"
        return current

    def _method(self) -> tuple[str, str | None] | None:
        if not self._classes or self._classes[-1] is None:
            return None
        method = self.context.enclosing_method()
        if method is None or method.owner is not self._classes[-1].node:
            return None
        return method.function.name.value, method.self_name

    def leave_Assign(self, node: cst.Assign) -> None:
        where = self._method()
        if where is None or len(node.targets) != 1:
            return
        current = self._classes[-1]
        assert current is not None
        name = _self_attribute(node.targets[0].target, where[1])
        if name is None:
            return
        if where[0] == "__init__" and name in current.tensor_attributes and self._made_as_parameter(node.value):
            # `self.pix = torch.stack(...)`, then `self.pix = nn.Parameter(torch.cat([self.pix, ...]))`:
            # a step on the way to a Parameter, which follows the module.
            del current.tensor_attributes[name]
            return
        if where[0] != "__init__" or name in current.tensor_attributes:
            current.assigned_elsewhere.add(name)
            if where[0] != "__init__" and (self._placed_on_module_device(node.value)
                                           or where[0] in _MOVING_OVERRIDES and _moves_itself(node.value, name, where[1])):
                current.rebuilt_on_module_device.add(name)
            return
        if not current.module_initialised:
            current.before_init.add(name)
        value = node.value
        if self._made_as_parameter(value):
            return
        if isinstance(value, cst.Call) and (
            self.context.imports.qualified_name(value.func) in _REGISTERED_TENSORS
            or keyword_argument(value, "device") is not None
            or keyword_argument(value, "requires_grad") is not None
            or self._moved_to_a_device(value)
        ):
            return
        # The analysis has not bound this assignment yet: ask about the value itself.
        if self.context.flow.value_of(value).is_tensor_like:
            current.tensor_attributes.setdefault(name, node)

    def _moved_to_a_device(self, value: cst.Call) -> bool:
        """`torch.sqrt(torch.tensor([0.5])).to(device)`: placed where the constructor was told,
        as `device=device` places it (`.cpu()` is not: the module may move away from there)."""
        destination = self.context.flow.move_destination(value)
        return destination is not None and destination.kind is PlaceKind.DEVICE

    def _made_as_parameter(self, value: cst.BaseExpression) -> bool:
        """`nn.Parameter(...)`, also with methods called on it (`nn.Parameter(w).float()`):
        `.float()` of a float32 Parameter is that Parameter, and whatever the others return,
        turning it into a buffer would stop it being trained and saved."""
        while isinstance(value, cst.Call):
            if self.context.imports.qualified_name(value.func) in _REGISTERED_TENSORS:
                return True
            if not isinstance(value.func, cst.Attribute):
                return False
            value = value.func.value
        return False

    def _placed_on_module_device(self, value: cst.BaseExpression) -> bool:
        """Moved or made, explicitly, where the module's data is (`.to(x.device)`,
        `.type_as(x)`, `torch.zeros(..., device=x.device)` in a method of the module)."""
        if not isinstance(value, cst.Call):
            return False
        flow = self.context.flow
        placed = flow.value_of(value).places == _ON_MODULE_DEVICE
        # `.type_as(x).bool()`: the move under casts that keep where the data is.
        while isinstance(value.func, cst.Attribute) and value.func.attr.value in _CASTS and not value.args \
                and isinstance(value.func.value, cst.Call):
            value = value.func.value
        type_as = isinstance(value.func, cst.Attribute) and value.func.attr.value == "type_as"
        explicit = flow.move_destination(value) is not None or keyword_argument(value, "device") is not None or type_as
        like = value.args[0].value if type_as and value.args else None
        while isinstance(like, cst.Attribute) and like.attr.value == "data":
            like = like.value  # `.type_as(x.data)`: the same storage, where `x` is
        if isinstance(like, cst.Name):
            # `.type_as(x)` with `x` the method's input: where the module's data is, whatever
            # the model could tell of `x`.
            method = self.context.enclosing_method()
            params = method.function.params if method is not None else None
            if params is not None and like.value in {
                    param.name.value for param in (*params.posonly_params, *params.params, *params.kwonly_params)}:
                return True
        return explicit and placed

    def visit_Call(self, node: cst.Call) -> None:
        where = self._method()
        if where is None:
            return
        if where[0] == "__init__" and _is_module_init_call(node):
            self._current_class().module_initialised = True
            return
        if not (isinstance(node.func, cst.Attribute) and node.func.attr.value == "register_buffer"):
            return
        value = string_value(node.args[0].value) if node.args else None
        if value is not None:
            self._current_class().registered.add(value)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        where = self._method()
        if where is None or where[0] != "forward":
            return
        name = _self_attribute(node, where[1])
        if name is not None and not _device_safe_use(node, self.context.ancestors(node)):
            self._current_class().used_in_forward.add(name)



def attributes_read_after_construction(class_node: cst.ClassDef) -> frozenset[str] | None:
    """The attributes of `self` that a class's methods read once the instance is built: in
    every method but `__init__` and the helpers only `__init__` (or such helpers) call
    (`self.backbone = self._pick(name)` reading a table of candidates). A container only
    those read is a setup-time table, not the module's state. None where the class has no
    other method (its `forward` is elsewhere): nothing shows what is used."""
    methods = {statement.name.value: statement for statement in class_node.body.body
               if isinstance(statement, cst.FunctionDef)}
    callers: dict[str, set[str]] = {name: set() for name in methods}
    reads: dict[str, set[str]] = {name: set() for name in methods}
    for name, method in methods.items():
        self_name = _first_parameter(method)
        if self_name is None:
            continue
        stack: list[tuple[cst.CSTNode, cst.CSTNode | None]] = [(method.body, None)]
        while stack:
            node, parent = stack.pop()
            attribute = _self_attribute(node, self_name) if isinstance(node, cst.BaseExpression) else None
            if attribute is not None and not (isinstance(parent, cst.AssignTarget) and parent.target is node):
                reads[name].add(attribute)
                if attribute in methods:
                    called = isinstance(parent, cst.Call) and parent.func is node
                    # Passed around (`callback=self._pick`): anyone may call it later.
                    callers[attribute].add(name if called else "<escapes>")
            stack.extend((child, node) for child in child_nodes(node))
    setup = {"__init__"}
    changed = True
    while changed:
        changed = False
        for name, calling in callers.items():
            if name not in setup and calling and calling <= setup:
                setup.add(name)
                changed = True
    if set(methods) <= setup:
        return None
    return frozenset(attribute for name, found in reads.items() if name not in setup for attribute in found)


def _first_parameter(function: cst.FunctionDef) -> str | None:
    params = [*function.params.posonly_params, *function.params.params]
    return params[0].name.value if params else None
