"""Names bound to string literals, scope by scope, as the walk reaches them.

`COMMAND = "nvidia-smi --query-gpu=memory.free"` then `os.popen(COMMAND)`: a rule that reads
what a command or a setting says asks `BoundStrings.text_of(name)` at the point it visits.
A shared analysis (`context.shared(BoundStrings)`), fed by the engine's walk: the binding in
force is the last one the walk has left, in the innermost scope that has one.
"""

from __future__ import annotations

from typing import Protocol

import libcst as cst

from torchdevlint.analysis.devices import string_value


def literal_text(node: cst.BaseExpression) -> str | None:
    """The text of a string literal: the literal parts of an f-string, both halves of an
    implicit concatenation; None for anything else."""
    if isinstance(node, cst.SimpleString):
        return string_value(node)
    if isinstance(node, cst.ConcatenatedString):
        left, right = literal_text(node.left), literal_text(node.right)
        return None if left is None and right is None else (left or "") + (right or "")
    if isinstance(node, cst.FormattedString):
        return "".join(part.value for part in node.parts if isinstance(part, cst.FormattedStringText))
    return None


class ScopeWalkContext(Protocol):
    """What `BoundStrings` reads of the walk that feeds it (a rule's `FileContext`)."""

    @property
    def current_scope(self) -> cst.CSTNode: ...

    def scopes(self) -> list[cst.CSTNode]: ...


class BoundStrings:
    def __init__(self, context: ScopeWalkContext) -> None:
        self._context = context
        # (scope node id, name) -> the text of the string last assigned to it.
        self._strings: dict[tuple[int, str], str] = {}

    def text_of(self, name: str) -> str | None:
        """The string `name` holds at the point being visited, where a literal was bound to
        it in a scope around that point (the innermost one that has such a binding)."""
        for scope in reversed(self._context.scopes()):
            found = self._strings.get((id(scope), name))
            if found is not None:
                return found
        return None

    def leave_Assign(self, node: cst.Assign) -> None:
        text = literal_text(node.value)
        scope = id(self._context.current_scope)
        for target in node.targets:
            if isinstance(target.target, cst.Name):
                key = (scope, target.target.value)
                if text is None:
                    self._strings.pop(key, None)
                else:
                    self._strings[key] = text
