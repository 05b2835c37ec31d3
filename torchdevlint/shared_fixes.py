"""The fixes several rules share, beside `edits.py` since rules never import each other:
`pin_memory=True` given to the DataLoaders TDL101 and TDL102 report, a CUDA use sent
through a device variable (TDL007, TDL203), and the device of a model's data where a method
makes a tensor (TDL002, TDL022)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import libcst as cst

from torchdevlint.analysis.cuda_uses import CudaUse, UseKind
from torchdevlint.analysis.flow.results import Env, names_bound_by
from torchdevlint.analysis.flow.values import MODULE_DEVICE_PLACE
from torchdevlint.analysis.loader_flow import LoaderCall
from torchdevlint.analysis.tree import child_nodes
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.rule import Rule


def pin_memory_fix(rule: Rule, *loaders: LoaderCall) -> PendingFix | None:
    """`pin_memory=True` added to each loader; safe when every dataset yields CPU tensors."""
    edits = [NodeEdit.insert_after(loader.call.args[-1], ", pin_memory=True") for loader in loaders if loader.call.args]
    if not edits:
        return None
    safe = all(loader.host_dataset for loader in loaders)
    return rule.make_fix(
        *edits,
        applicability=Applicability.SAFE if safe else Applicability.UNSAFE,
        title="Pass pin_memory=True",
    )


def route_through(use: CudaUse, device: str, code_for_node: Callable[[cst.CSTNode], str]) -> tuple[NodeEdit, ...]:
    """The edits that send a use through a device variable: `.cuda()` -> `.to(device)`,
    `"cuda"` -> `device`, `torch.cuda.FloatTensor(...)` -> `torch.FloatTensor(...).to(device)`.
    None for a GPU named by number (`.cuda(1)`, `"cuda:1"`), code over several lines, or a use
    no variable can stand in for (a `torch.cuda` call, a constructor through another name)."""
    if use.kind is UseKind.DEVICE_ARGUMENT:
        if use.index is None and "\n" not in code_for_node(use.node):
            return (NodeEdit(use.node, device),)
        return ()
    if use.kind is UseKind.MOVE:
        call = cst.ensure_type(use.node, cst.Call)
        func = cst.ensure_type(call.func, cst.Attribute)
        if any(arg.keyword is None for arg in call.args):
            return ()
        if call.args:
            return NodeEdit(func.attr, "to"), NodeEdit.insert_before(call.args[0], f"{device}, ")
        receiver = code_for_node(func.value)
        return () if "\n" in receiver else (NodeEdit(call, f"{receiver}.to({device})"),)
    if use.kind is UseKind.LEGACY_CONSTRUCTOR:
        call = cst.ensure_type(use.node, cst.Call)
        named = call.func
        if isinstance(named, cst.Attribute) and isinstance(named.value, cst.Attribute):
            return NodeEdit(named.value, code_for_node(named.value.value)), NodeEdit.insert_after(call, f".to({device})")
    return ()


def model_data_device(rule: Rule, call: cst.Call, scope: cst.FunctionDef) -> tuple[str, Applicability] | None:
    """Where the model's data is, as code, for a tensor a module's method makes at `call`.

    A parameter of the method that holds the model's data there (even if it is rebound
    later), never one the method uses as a dict or a list (`fields.items()`, `**batch`, `for x
    in xs`): safe when it is annotated as a Tensor, unsafe otherwise (it may be a list or a
    dict). With no such input, `next(self.parameters()).device`, unsafe (a module without
    parameters has none). None where neither is at hand.
    """
    env = _env_at(rule, call, scope)
    if env is None:
        return None
    params = [*scope.params.posonly_params, *scope.params.params]
    self_name = params[0].name.value if params else None
    shadowed = _names_bound_around(rule, call, scope) | _used_as_containers(scope)
    for param in params[1:]:
        name = param.name.value
        value = env.get(name)
        if name in shadowed or value is None or not value.is_tensor_like:
            continue
        if value.places != frozenset({MODULE_DEVICE_PLACE}):
            continue
        return f"{name}.device", Applicability.SAFE if value.is_tensor else Applicability.UNSAFE
    if self_name is None or self_name in shadowed or self_name not in env:
        return None
    # No input at hand: the module's own device (fails only on a module without parameters).
    return f"next({self_name}.parameters()).device", Applicability.UNSAFE


def _env_at(rule: Rule, call: cst.Call, scope: cst.FunctionDef) -> Env | None:
    flow = rule.context.flow.flow_for(scope)
    if flow is None:
        return None
    current: cst.CSTNode | None = call
    while current is not None and id(current) not in flow.before:
        current = rule.context.parents.get(id(current))
    if current is None:
        return None
    return rule.context.flow.env_before(current)


def _names_bound_around(rule: Rule, call: cst.Call, scope: cst.FunctionDef) -> set[str]:
    """Names a comprehension or lambda between the call and its function binds."""
    names: set[str] = set()
    current = rule.context.parents.get(id(call))
    while current is not None and current is not scope:
        if isinstance(current, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
            clause: cst.CompFor | None = current.for_in
            while clause is not None:
                names.update(name.value for name in names_bound_by(clause.target))
                clause = clause.inner_for_in
        elif isinstance(current, cst.Lambda):
            names.update(p.name.value for p in current.params.params)
        current = rule.context.parents.get(id(current))
    return names


_CONTAINER_METHODS = frozenset({"items", "keys", "values", "get", "append", "extend"})


def _used_as_containers(scope: cst.FunctionDef) -> set[str]:
    """Names the method uses as a dict or list (`batch.items()`, `**batch`, `batch["x"]`,
    `for x in xs`): no tensor whose `.device` a fix could read."""
    found: set[str] = set()
    stack: list[cst.CSTNode] = [scope.body]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and isinstance(node.func.value, cst.Name) \
                and node.func.attr.value in _CONTAINER_METHODS:
            found.add(node.func.value.value)
        elif isinstance(node, cst.Arg) and node.star and isinstance(node.value, cst.Name) or isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name) and len(node.slice) == 1 \
                and isinstance(node.slice[0].slice, cst.Index) and isinstance(node.slice[0].slice.value, cst.SimpleString):
            found.add(node.value.value)
        elif isinstance(node, (cst.For, cst.CompFor)) and isinstance(node.iter, cst.Name):
            found.add(node.iter.value)
        stack.extend(child_nodes(node))
    return found


# One argument that is a size, not data: `x.size()`, `x.shape`, `len(xs)`, `int(n)`.
_SIZE_METHODS = frozenset({"size", "len", "int", "numel", "dim"})


def legacy_constructor_factory(args: Sequence[cst.Arg]) -> str | None:
    """The factory a legacy constructor's positional arguments ask for (`torch.FloatTensor(2, 3)`,
    `torch.Tensor([0.5, 1])`): `empty` for sizes, `tensor` for data; None where one argument
    may be either."""
    if len(args) != 1:
        return "empty"  # none, or several: each a size
    value = args[0].value
    if isinstance(value, (cst.List, cst.Tuple)):
        return "tensor"
    if isinstance(value, cst.Integer):
        return "empty"
    if isinstance(value, cst.Attribute) and value.attr.value == "shape":
        return "empty"
    if isinstance(value, cst.Call):
        name = value.func.attr.value if isinstance(value.func, cst.Attribute) else (
            value.func.value if isinstance(value.func, cst.Name) else "")
        if name in _SIZE_METHODS or name == "Size":
            return "empty"
    return None
