"""Loops, as the walk reaches them: which statements run on every step, and which loops train.

A host synchronisation costs once per step of a training loop, so the rules about per-step
work ask which loop runs a point on every step, and whether that loop trains: a
`.backward()` call in its own body (not in a loop nested in it). A shared analysis
(`context.shared(TrainingLoops)`), fed by the engine's walk; whether a loop trains is known
once the walk has left it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import libcst as cst

from torchdevlint.analysis.names import dotted_name
from torchdevlint.analysis.tree import child_nodes

Loop = cst.For | cst.While
_NESTED_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)
_EXITS = frozenset({"exit", "quit", "sys.exit", "os._exit"})


class LoopWalkContext(Protocol):
    def ancestors(self, node: cst.CSTNode) -> list[cst.CSTNode]: ...


class TrainingLoops:
    def __init__(self, context: LoopWalkContext) -> None:
        self._context = context
        self._open: list[Loop] = []
        # id(loop) -> the loop whose body it is in (directly or through other statements).
        self._outer: dict[int, Loop | None] = {}
        self._training: set[int] = set()

    # ---- questions -----------------------------------------------------------------------

    def innermost(self, node: cst.CSTNode) -> Loop | None:
        """The innermost loop the walk is in whose body holds `node` directly (not through a
        nested function, class or lambda)."""
        if not self._open:
            return None
        innermost = self._open[-1]
        for ancestor in self._context.ancestors(node):
            if ancestor is innermost:
                return innermost
            if isinstance(ancestor, _NESTED_SCOPES):
                return None
        return None

    def outer(self, loop: Loop) -> Loop | None:
        """The loop the walk was in when it reached `loop`."""
        return self._outer.get(id(loop))

    def trains(self, loop: Loop) -> bool:
        """Whether a `.backward()` call sits in the loop's own body (known once it is left)."""
        return id(loop) in self._training

    def every_step(self, node: cst.CSTNode, loop: Loop) -> bool:
        """Whether `node` runs on every step of `loop`: not under `if step % N == 0:`, nor in a
        branch that leaves the loop (`sys.exit(1)`), which runs once."""
        return not _under_periodic_if(node, self._context.ancestors(node), loop)

    # ---- the walk --------------------------------------------------------------------------

    def _enter(self, node: Loop) -> None:
        # An inner loop (over metrics, say) runs on every step of the loop around it.
        self._outer[id(node)] = self._open[-1] if self._open else None
        self._open.append(node)

    def _leave(self, node: Loop) -> None:
        if self._open and self._open[-1] is node:
            self._open.pop()

    visit_For = visit_While = _enter
    leave_For = leave_While = _leave

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "backward":
            loop = self.innermost(node)
            if loop is not None:
                self._training.add(id(loop))


def _is_periodic(test: cst.BaseExpression) -> bool:
    """`if step % log_every == 0:`: logging every N steps, the recommended way."""
    stack: list[cst.CSTNode] = [test]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo):
            return True
        stack.extend(child_nodes(node))
    return False


def _leaves_loop(block: cst.BaseSuite) -> bool:
    """A branch that raises, breaks, returns or exits: taken once, not every step."""
    statements = block.body if isinstance(block, cst.IndentedBlock) else [block]
    for statement in statements:
        small = statement.body if isinstance(statement, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) else []
        for item in small:
            if isinstance(item, (cst.Raise, cst.Break, cst.Return)):
                return True
            if isinstance(item, cst.Expr) and isinstance(item.value, cst.Call) and dotted_name(item.value.func) in _EXITS:
                return True
    return False


def _under_periodic_if(node: cst.CSTNode, ancestors: Sequence[cst.CSTNode], loop: Loop) -> bool:
    child: cst.CSTNode = node
    for ancestor in ancestors:
        if ancestor is loop:
            return False
        if isinstance(ancestor, (cst.If, cst.IfExp)) and _is_periodic(ancestor.test):
            return True
        if isinstance(ancestor, cst.If) and child is ancestor.body and _leaves_loop(ancestor.body):
            return True
        child = ancestor
    return False
