"""Which names a function binds itself, so a fix knows whether `name = ...` is safe there.

Python decides at compile time that a name assigned anywhere in a function is local to all
of it. A fix that writes `x = x.cuda()` into a function that only reads a module-level (or
enclosing) `x` makes `x` local, and the read on its right raises UnboundLocalError.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst

from torchdevlint.analysis.tree import child_nodes

# Their loop variables are their own; a walrus inside still binds in the function.
_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


@dataclass(frozen=True)
class FunctionBindings:
    # Bound in the body or as a parameter.
    local: frozenset[str]
    # Declared `global` or `nonlocal`: an assignment rebinds the outer variable.
    declared_outer: frozenset[str]

    def assignment_keeps_variable(self, name: str) -> bool:
        """Whether `name = ...` anywhere in the function still names the variable it reads."""
        return name in self.local or name in self.declared_outer


def function_bindings(function: cst.FunctionDef) -> FunctionBindings:
    params = function.params
    local = {param.name.value for param in (*params.posonly_params, *params.params, *params.kwonly_params)}
    local.update(star.name.value for star in (params.star_arg, params.star_kwarg) if isinstance(star, cst.Param))
    bound, declared = _bound_in_body([function.body])
    return FunctionBindings(frozenset((local | bound) - declared), frozenset(declared))


def rebound_parameters(function: cst.FunctionDef) -> frozenset[str]:
    """Parameters the body assigns again (`lengths = lengths.to(device)`): past that line the
    name holds the function's own value, not what the callers passed."""
    params = function.params
    names = {param.name.value for param in (*params.posonly_params, *params.params, *params.kwonly_params)}
    return frozenset(names & _bound_in_body([function.body])[0])


def scope_bindings(scope: cst.CSTNode) -> frozenset[str]:
    """The names a scope binds itself: a function's locals, a module's or class body's names,
    a lambda's parameters, a comprehension's loop variables."""
    if isinstance(scope, cst.FunctionDef):
        return function_bindings(scope).local
    if isinstance(scope, cst.Lambda):
        params = scope.params
        names = {param.name.value for param in (*params.posonly_params, *params.params, *params.kwonly_params)}
        names.update(star.name.value for star in (params.star_arg, params.star_kwarg) if isinstance(star, cst.Param))
        return frozenset(names)
    if isinstance(scope, _COMPREHENSIONS):
        targets: set[str] = set()
        clause: cst.CompFor | None = scope.for_in
        while clause is not None:
            _add_target(clause.target, targets)
            clause = clause.inner_for_in
        return frozenset(targets)
    if isinstance(scope, cst.Module):
        return frozenset(_bound_in_body(scope.body)[0])
    if isinstance(scope, cst.ClassDef):
        return frozenset(_bound_in_body(scope.body.body)[0])
    return frozenset()


def _bound_in_body(statements: Sequence[cst.CSTNode]) -> tuple[set[str], set[str]]:
    """(names the statements bind, names they declare global or nonlocal), not looking
    inside nested functions and classes, whose names they do bind."""
    local: set[str] = set()
    declared: set[str] = set()
    pending = list(statements)
    # Exact type tests: isinstance on LibCST's ABCs would cost more than the walk itself.
    while pending:
        node = pending.pop()
        if type(node) is cst.FunctionDef or type(node) is cst.ClassDef:
            local.add(node.name.value)
            continue
        if type(node) is cst.Lambda:
            continue
        if type(node) is cst.Global or type(node) is cst.Nonlocal:
            declared.update(item.name.value for item in node.names)
            continue
        if type(node) in _BINDING_NODE_TYPES:
            _collect_bound(node, local)
        pending.extend(_children_in_function(node))
    return local, declared


# The nodes `_collect_bound` finds bindings in.
_BINDING_NODE_TYPES = frozenset({
    cst.Assign, cst.AnnAssign, cst.AugAssign, cst.For, cst.NamedExpr, cst.WithItem, cst.ExceptHandler,
    cst.Del, cst.Import, cst.ImportFrom, cst.MatchAs, cst.MatchStar, cst.MatchMapping,
})


def _children_in_function(node: cst.CSTNode) -> list[cst.CSTNode]:
    if type(node) in _COMPREHENSIONS and isinstance(node, _COMPREHENSIONS):
        # Only walruses in a comprehension bind in the function; its targets do not.
        return [child for child in child_nodes(node) if not isinstance(child, cst.CompFor)] + (
            _comprehension_clauses(node.for_in)
        )
    return list(child_nodes(node))


def _comprehension_clauses(clause: cst.CompFor) -> list[cst.CSTNode]:
    found: list[cst.CSTNode] = [clause.iter, *(condition.test for condition in clause.ifs)]
    if clause.inner_for_in is not None:
        found.extend(_comprehension_clauses(clause.inner_for_in))
    return found


def _collect_bound(node: cst.CSTNode, local: set[str]) -> None:
    if isinstance(node, cst.Assign):
        for target in node.targets:
            _add_target(target.target, local)
    elif isinstance(node, (cst.AnnAssign, cst.AugAssign, cst.For, cst.NamedExpr)):
        _add_target(node.target, local)
    elif isinstance(node, cst.WithItem) and node.asname is not None:
        _add_target(node.asname.name, local)
    elif isinstance(node, cst.ExceptHandler) and node.name is not None:
        _add_target(node.name.name, local)
    elif isinstance(node, cst.Del):
        _add_target(node.target, local)
    elif isinstance(node, (cst.Import, cst.ImportFrom)) and not isinstance(node.names, cst.ImportStar):
        for alias in node.names:
            if alias.asname is not None:
                _add_target(alias.asname.name, local)
            else:
                # `import a.b` binds `a`.
                bound: cst.BaseExpression = alias.name
                while isinstance(bound, cst.Attribute):
                    bound = bound.value
                _add_target(bound, local)
    elif isinstance(node, (cst.MatchAs, cst.MatchStar)) and node.name is not None:
        local.add(node.name.value)
    elif isinstance(node, cst.MatchMapping) and node.rest is not None:
        local.add(node.rest.value)


def _add_target(target: cst.BaseExpression, local: set[str]) -> None:
    local.update(name.value for name in target_names(target))


def target_names(target: cst.BaseExpression) -> list[cst.Name]:
    """The plain names an assignment target binds: `h` in `h`, `out, h`, `[a, *rest]`."""
    if isinstance(target, cst.Name):
        return [target]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [name for element in target.elements for name in target_names(element.value)]
    if isinstance(target, cst.StarredElement):
        return target_names(target.value)
    return []
