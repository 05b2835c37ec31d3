"""The one way into a node's children, for the engine's walk and for rules' small searches,
and the few questions about plain syntax that every part asks.

LibCST's `node.children` rebuilds every node it visits (through its visitor machinery), which
costs more than a rule's own work; reading the dataclass fields directly is a fraction of
that. Whitespace, comments and punctuation are skipped: no rule looks inside them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence

import libcst as cst

SKIPPED_FIELDS = frozenset(
    {
        "lpar", "rpar", "comma", "colon", "first_colon", "second_colon", "dot", "equal",
        "lbrace", "lbracket", "rbrace", "rbracket", "semicolon", "leading_lines",
        "lines_after_decorators", "header", "footer", "newline", "trailing_whitespace",
        "leading_whitespace", "empty_lines", "operator", "asynchronous", "trailing_comma",
        "separator", "posonly_ind", "comment", "indent", "star",
    }
)
# Source order where the dataclass field order differs and it matters to the analysis:
# comprehensions bind their loop variables before the element is evaluated.
_FIELD_ORDER_OVERRIDES: dict[str, tuple[str, ...]] = {
    "ListComp": ("for_in", "elt"),
    "SetComp": ("for_in", "elt"),
    "GeneratorExp": ("for_in", "elt"),
    "DictComp": ("for_in", "key", "value"),
    "FunctionDef": ("decorators", "name", "type_parameters", "params", "returns", "body"),
    "ClassDef": ("decorators", "name", "type_parameters", "bases", "keywords", "body"),
}

_FIELDS: dict[type, tuple[str, ...]] = {}


def child_fields(node_type: type) -> tuple[str, ...]:
    fields = _FIELDS.get(node_type)
    if fields is None:
        override = _FIELD_ORDER_OVERRIDES.get(node_type.__name__)
        names = [f.name for f in dataclasses.fields(node_type)]
        if override is not None:
            names = [name for name in override if name in names]
        fields = _FIELDS[node_type] = tuple(
            name for name in names if name not in SKIPPED_FIELDS and not name.startswith("whitespace")
        )
    return fields


# Field values that are never code: names' text, flags, absent parts.
_LEAF_TYPES = frozenset({str, bool, int, type(None), cst.MaybeSentinel})


def child_nodes(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The node's children that can hold code, in source order.

    Type lookups rather than `isinstance(value, cst.CSTNode)`: CSTNode is an ABC, and its
    instance check costs more than the rest of a walk.
    """
    children: list[cst.CSTNode] = []
    for name in child_fields(type(node)):
        value = getattr(node, name)
        value_type = type(value)
        if value_type is tuple or value_type is list:
            children.extend(value)  # LibCST's sequences hold nodes only
        elif value_type not in _LEAF_TYPES:
            children.append(value)
    return children


# What opens a scope of its own: a walk of one body does not enter them.
_DEFINITIONS = frozenset({cst.FunctionDef, cst.ClassDef, cst.Lambda})


def descendants(node: cst.CSTNode, *, into_definitions: bool = True) -> Iterator[cst.CSTNode]:
    """The node and every node below it; not below a nested function, class or lambda
    unless `into_definitions`."""
    stack: list[cst.CSTNode] = [node]
    while stack:
        current = stack.pop()
        yield current
        # Exact type tests: isinstance on LibCST's ABCs is slow.
        if into_definitions or current is node or type(current) not in _DEFINITIONS:
            stack.extend(child_nodes(current))


def top_level_definition(module: cst.Module, enclosing: Iterable[cst.CSTNode]) -> cst.FunctionDef | cst.ClassDef | None:
    """The module-level function or class whose code a point is, given the nodes around it
    outermost first; None at module level, in a definition nested in a statement (`if`), or
    for a decorated one (a decorator may register it where a computed name finds it)."""
    for node in enclosing:
        if type(node) is cst.FunctionDef or type(node) is cst.ClassDef:
            return node if not node.decorators and any(statement is node for statement in module.body) else None
    return None


def keyword_argument(call: cst.Call, name: str) -> cst.Arg | None:
    """The argument passed as `name=...`, if any."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


def first_argument(call: cst.Call, keyword: str) -> cst.BaseExpression | None:
    """The call's first positional argument, or else the one passed as `keyword`
    (`x.cuda(rank)`, `x.cuda(device=rank)`); None for neither."""
    positional = next((arg.value for arg in call.args if arg.keyword is None and not arg.star), None)
    if positional is not None:
        return positional
    named = keyword_argument(call, keyword)
    return named.value if named is not None else None


def argument_for(call: cst.Call, position: int, name: str) -> cst.Arg | None:
    """The argument a call passes for a parameter, by its position or its keyword; None where
    it passes none, or a `*args` hides which."""
    for index, arg in enumerate(call.args):
        if arg.star:
            return None
        if arg.keyword is None and index == position or arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


def small_statements(body: Sequence[cst.BaseStatement]) -> Iterator[cst.CSTNode]:
    """The statements of a block in order, with `a; b` split into its small statements."""
    for statement in body:
        if isinstance(statement, cst.SimpleStatementLine):
            yield from statement.body
        else:
            yield statement


def definitions_by_id(module: cst.Module) -> dict[int, cst.FunctionDef | cst.ClassDef]:
    """Every function and class the module defines, at any depth, by node id (as the flow's
    values name them). Only statements are searched: no definition is inside an expression."""
    found: dict[int, cst.FunctionDef | cst.ClassDef] = {}
    stack: list[cst.CSTNode] = list(module.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            found[id(node)] = node
        if isinstance(node, (cst.BaseCompoundStatement, cst.BaseSuite, cst.Else, cst.ExceptHandler,
                             cst.ExceptStarHandler, cst.Finally, cst.MatchCase)):
            stack.extend(child for child in child_nodes(node)
                         if isinstance(child, (cst.BaseStatement, cst.BaseSuite, cst.Else, cst.ExceptHandler,
                                               cst.ExceptStarHandler, cst.Finally, cst.MatchCase)))
    return found


# The comment before each cell of a notebook linted as one program (`notebook/program.py`).
NOTEBOOK_CELL_MARKER = "# %% torchdevlint cell "


def ends_notebook_cell(module: cst.Module, statement: cst.BaseStatement) -> bool:
    """Whether a top-level statement of a notebook's program is the last of its cell: Jupyter
    shows the value of such an expression statement (`y_preds.cpu()`), so it is not thrown
    away."""
    body = module.body
    for index, candidate in enumerate(body):
        if candidate is statement:
            if index + 1 == len(body):
                return True
            return any(line.comment is not None and line.comment.value.startswith(NOTEBOOK_CELL_MARKER.rstrip())
                       for line in body[index + 1].leading_lines)
    return False


def under_main_guard(node: cst.CSTNode, ancestors: Iterable[cst.CSTNode]) -> bool:
    """In the body of `if __name__ == "__main__":` (`ancestors`: the node's, nearest first)."""
    inner = node
    for ancestor in ancestors:
        if type(ancestor) is cst.If and ancestor.body is inner and is_main_guard(ancestor.test):
            return True
        inner = ancestor
    return False


def is_main_guard(test: cst.BaseExpression) -> bool:
    """`__name__ == "__main__"` (either way round): code under it runs when the file is the
    program, not when it is imported."""
    if type(test) is not cst.Comparison or len(test.comparisons) != 1 \
            or type(test.comparisons[0].operator) is not cst.Equal:
        return False
    sides = (test.left, test.comparisons[0].comparator)
    return any(type(side) is cst.Name and side.value == "__name__" for side in sides) and any(
        type(side) is cst.SimpleString and side.evaluated_value == "__main__" for side in sides)


def is_written(node: cst.BaseExpression, parent_of: Callable[[cst.CSTNode], cst.CSTNode | None]) -> bool:
    """Whether an expression is written or deleted where it stands, not read: an assignment's
    target (also inside a tuple or list of targets: `model.a, model.b = ...`), an augmented or
    annotated assignment's target, or what `del` removes. `parent_of`: the walk's parent lookup."""
    child: cst.CSTNode = node
    parent = parent_of(node)
    while isinstance(parent, (cst.Element, cst.Tuple, cst.List, cst.StarredElement)):
        child, parent = parent, parent_of(parent)
    if isinstance(parent, (cst.AssignTarget, cst.Del)):
        return True
    return isinstance(parent, (cst.AnnAssign, cst.AugAssign)) and parent.target is child
