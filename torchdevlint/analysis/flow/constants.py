"""Module constants that decide branches: `HAS_APEX = False`, `FusedNorm = None`, bound once.

A name is a constant when the whole file binds it exactly once, at module level, to `True`,
`False` or `None`: no other assignment, loop, import, `with`, parameter, definition or
`global` of that name anywhere (a local of the same name in a function also counts, which
errs towards "not a constant"). `try: import apex … except ImportError: apex = None` binds
twice and is no constant.
"""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.tree import child_nodes

_LITERALS = {"True": True, "False": False, "None": None}


class ModuleConstants:
    def __init__(self, module: cst.Module) -> None:
        self._module = module
        self._values: dict[str, bool | None] | None = None

    def truth(self, test: cst.BaseExpression) -> bool | None:
        """Whether a test holds on every run, as the file's constants decide it; None when
        they do not."""
        if isinstance(test, cst.Name):
            constants = self._constants()
            return bool(constants[test.value]) if test.value in constants else None
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            inner = self.truth(test.expression)
            return None if inner is None else not inner
        if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(test.left, cst.Name):
            target = test.comparisons[0]
            if isinstance(target.comparator, cst.Name) and target.comparator.value == "None" \
                    and isinstance(target.operator, (cst.Is, cst.IsNot)):
                constants = self._constants()
                if test.left.value not in constants:
                    return None
                is_none = constants[test.left.value] is None
                return is_none if isinstance(target.operator, cst.Is) else not is_none
            return None
        if isinstance(test, cst.BooleanOperation):
            left, right = self.truth(test.left), self.truth(test.right)
            if isinstance(test.operator, cst.And):
                if left is False or right is False:
                    return False
                return True if left and right else None
            if left is True or right is True:
                return True
            return False if left is False and right is False else None
        return None

    def _constants(self) -> dict[str, bool | None]:
        if self._values is None:
            counts: dict[str, int] = {}
            literal: dict[str, bool | None] = {}
            for statement in self._module.body:
                if isinstance(statement, cst.SimpleStatementLine):
                    for small in statement.body:
                        if isinstance(small, cst.Assign) and len(small.targets) == 1 \
                                and isinstance(small.targets[0].target, cst.Name) \
                                and isinstance(small.value, cst.Name) and small.value.value in _LITERALS:
                            literal[small.targets[0].target.value] = _LITERALS[small.value.value]
            stack: list[cst.CSTNode] = [self._module]
            while stack:
                node = stack.pop()
                for name in _bound_names(node):
                    counts[name] = counts.get(name, 0) + 1
                stack.extend(child_nodes(node))
            self._values = {name: value for name, value in literal.items() if counts.get(name) == 1}
        return self._values


def _bound_names(node: cst.CSTNode) -> list[str]:
    if isinstance(node, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For, cst.CompFor)):
        return _target_names(node.target)
    if isinstance(node, cst.NamedExpr):
        return _target_names(node.target)
    if isinstance(node, cst.AsName):
        return _target_names(node.name)
    if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
        return [node.name.value]
    if isinstance(node, cst.Param):
        return [node.name.value]
    if isinstance(node, cst.ImportAlias) and node.asname is None:
        return [str(node.name.value).split(".")[0]] if isinstance(node.name, cst.Name) else \
            [_first(node.name)]
    if isinstance(node, (cst.Global, cst.Nonlocal)):
        # A function that may rebind it: never a constant.
        return [item.name.value for item in node.names] * 2
    return []


def _first(name: cst.Attribute | cst.Name) -> str:
    current: cst.BaseExpression = name
    while isinstance(current, cst.Attribute):
        current = current.value
    return current.value if isinstance(current, cst.Name) else ""


def _target_names(target: cst.CSTNode) -> list[str]:
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [name for element in target.elements for name in _target_names(element.value)]
    if isinstance(target, cst.StarredElement):
        return _target_names(target.value)
    return []
