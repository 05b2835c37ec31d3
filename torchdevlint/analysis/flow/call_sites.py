"""What a file's own calls pass to its functions: parameters bound from call sites.

A plain function that the file only ever calls directly (never passes around, decorates
or exports through another name) runs with what those calls pass. Its parameters are then
the join of those arguments: `train(model, loader, device)` sees the model moved where its
callers moved it. Values that reach it from other files stay unknown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

import libcst as cst

from torchdevlint.analysis.flow.values import HOST_PLACE, SCALAR, UNKNOWN, Kind, PlaceKind, Value
from torchdevlint.analysis.names import dotted_name
from torchdevlint.analysis.tree import child_nodes

# Decorators that leave who calls the function, and with what, unchanged.
_TRANSPARENT_DECORATORS = ("no_grad", "inference_mode", "enable_grad")


@dataclass(frozen=True)
class CallSite:
    call: cst.Call
    arguments: tuple[Value, ...]
    # Called as a method (`obj.f(...)`): the first parameter is the receiver.
    bound_method: bool
    # The body the call is in (a function's, or the module's), where known.
    caller: cst.CSTNode | None = None


@dataclass(frozen=True)
class NameUses:
    """How the file uses its names, for deciding whose callers are all in sight."""

    # Names used as anything but the callee of a call, the name a `def` or `class` binds or
    # the class named in `super(Net, self)` (attribute and keyword names, `x.train()` and
    # `f(train=...)`, are other things).
    escaping: frozenset[str]
    # Attribute names used only as `self.<name>(...)` calls: methods no code here passes
    # around or calls on another object.
    called_only_on_self: frozenset[str]


@dataclass(frozen=True)
class StatementNameUses:
    """`NameUses`' facts about one top-level statement; a file's are the union of its
    statements' (each fact is about a node and its parent), so an editor keeps them per
    statement from one version of a buffer to the next."""

    escaping: frozenset[str]
    called_on_self: frozenset[str]
    other_attribute_uses: frozenset[str]


def name_uses(module: cst.Module,
              statement_uses: Callable[[cst.BaseStatement], StatementNameUses] | None = None) -> NameUses:
    """Both facts of `NameUses`, from each top-level statement's (`statement_name_uses`, or a
    kept copy of it)."""
    parts = [(statement_uses or statement_name_uses)(statement) for statement in module.body]
    called_on_self = frozenset().union(*(part.called_on_self for part in parts))
    other_attribute_uses = frozenset().union(*(part.other_attribute_uses for part in parts))
    return NameUses(frozenset().union(*(part.escaping for part in parts)), called_on_self - other_attribute_uses)


def statement_name_uses(statement: cst.BaseStatement) -> StatementNameUses:
    """One walk over a statement for its `StatementNameUses`."""
    not_references: set[int] = set()
    escaping: set[str] = set()
    self_calls: set[int] = set()
    called_on_self: set[str] = set()
    other_attribute_uses: set[str] = set()
    stack: list[cst.CSTNode] = [statement]
    # Exact type tests: LibCST's node classes are ABCs, and isinstance on them would be most
    # of this walk's cost.
    while stack:
        node = stack.pop()
        if type(node) is cst.Name:
            if id(node) not in not_references:
                escaping.add(node.value)
            continue
        if type(node) is cst.Call:
            func = node.func
            not_references.add(id(func))
            if type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value == "self":
                self_calls.add(id(func))
            elif type(func) is cst.Name and func.value == "super" and node.args:
                not_references.add(id(node.args[0].value))  # `super(Net, self)`: not a use of the class
        elif type(node) is cst.FunctionDef or type(node) is cst.ClassDef:
            not_references.add(id(node.name))
        elif type(node) is cst.Attribute:
            not_references.add(id(node.attr))
            (called_on_self if id(node) in self_calls else other_attribute_uses).add(node.attr.value)
        elif type(node) is cst.Arg and node.keyword is not None:
            not_references.add(id(node.keyword))
        stack.extend(child_nodes(node))
    return StatementNameUses(frozenset(escaping), frozenset(called_on_self), frozenset(other_attribute_uses))


def takes_call_site_arguments(function: cst.FunctionDef, escaping: frozenset[str]) -> bool:
    if function.name.value in escaping:
        return False
    for decorator in function.decorators:
        name = dotted_name(decorator.decorator.func if isinstance(decorator.decorator, cst.Call) else decorator.decorator)
        if name is None or name.rsplit(".", 1)[-1] not in _TRANSPARENT_DECORATORS:
            return False
    return True


def parameters_from_call_sites(function: cst.FunctionDef, sites: Iterable[CallSite],
                               defaults: Mapping[str, Value]) -> dict[str, Value]:
    """Each parameter's value joined over the call sites; unknown where any site is opaque.
    `defaults`: the values of the parameters' defaults, where the model evaluated them."""
    joined: dict[str, Value] = {}
    for site in sites:
        bound = _bind(function, site, defaults)
        for name in _parameter_names(function):
            value = bound.get(name, UNKNOWN) if bound is not None else UNKNOWN
            joined[name] = value if name not in joined else joined[name].join(value)
    return joined


def _parameter_names(function: cst.FunctionDef) -> list[str]:
    params = function.params
    return [p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)]


def _bind(function: cst.FunctionDef, site: CallSite, defaults: Mapping[str, Value]) -> dict[str, Value] | None:
    params = function.params
    positional = [*params.posonly_params, *params.params]
    if site.bound_method:
        positional = positional[1:]
    bound: dict[str, Value] = {}
    index = 0
    for arg, value in zip(site.call.args, site.arguments, strict=True):
        if arg.star:
            return None
        if arg.keyword is not None:
            bound[arg.keyword.value] = value
        elif index < len(positional):
            bound[positional[index].name.value] = value
            index += 1
    for param in (*positional, *params.kwonly_params):
        if param.name.value not in bound and param.default is not None:
            bound[param.name.value] = _default_value(param.default, defaults.get(param.name.value))
    return bound


def _default_value(default: cst.BaseExpression, evaluated: Value | None) -> Value:
    if isinstance(default, cst.Name) and default.value == "None":
        # Passed as a device (`device=None`), None means the default device: the host.
        return replace(SCALAR, device=HOST_PLACE)
    if evaluated is not None and evaluated.device is not None:
        # `device="cpu"`, `device=torch.device("cpu")`.
        return evaluated
    if isinstance(default, (cst.Integer, cst.Float, cst.SimpleString, cst.ConcatenatedString)):
        return SCALAR
    if isinstance(default, cst.Name) and default.value in ("True", "False"):
        # What it is in the CPU mode too: a caller that leaves `cuda=True` out gets the GPU
        # whatever the program's settings (a setting read by name is off there).
        return replace(SCALAR, in_cpu_mode=default.value == "True")
    return UNKNOWN


def depends_on_device_parameter(result: Value, function: cst.FunctionDef) -> bool:
    """Is the result placed on a device the function's caller chooses (`device=device`)?"""
    names = set(_parameter_names(function))
    pending = [result]
    while pending:
        value = pending.pop()
        if value.places is not None and any(place.kind is PlaceKind.DEVICE and place.symbol in names
                                            for place in value.places):
            return True
        pending.extend(item for _, item in value.items or ())
    return False


def refined(declared: Value, passed: Value) -> Value:
    """The parameter's value for a body run from the file's own calls: what they pass, where
    it says more than the declaration (an annotation gives the kind, not the place)."""
    if Kind.WRAPPED_MODULE in passed.kinds:
        # Callers in other files may pass the bare model: wrapped only maybe. Where the file's
        # own callers pass a wrapper on some paths, what they pass on the others is the model
        # it wraps (`model = Net(); if n > 1: model = DataParallel(model)`), whatever the
        # model could see of the class.
        passed = replace(passed, kinds=(passed.kinds - {Kind.UNKNOWN}) | {Kind.MODULE})
    if not passed.is_known or passed.places is None and declared.is_known:
        return declared
    if not declared.is_known:
        return passed
    if declared.places is not None:
        return declared
    same_kind = (passed.kinds <= declared.kinds or (declared.is_tensor_like and passed.is_tensor_like)
                 or (declared.is_module_like and passed.is_module_like))
    return passed if same_kind else declared


