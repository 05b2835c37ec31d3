"""Where a wrapped model's `state_dict()` goes: into `torch.save`, directly, inside a dict or
list, through a variable (a checkpoint dict), or through a saver helper defined in the file
(`def save_checkpoint(state, path): torch.save(state, path)`).

Shared by the rules about DataParallel/DDP checkpoints, computed once per file; complete
only at the end of the file (helpers may be defined after their callers).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from torchdevlint.analysis import torch_api
from torchdevlint.analysis.flow.values import Wrapping
from torchdevlint.analysis.tree import child_nodes
from torchdevlint.context import FileContext

# Nodes a state dict may pass through on its way into a saved object.
_CONTAINERS = (cst.Dict, cst.DictElement, cst.List, cst.Tuple, cst.Element, cst.Arg)


@dataclass(frozen=True)
class SavedStateDict:
    """A wrapped model's `state_dict()` call that reaches `torch.save`."""

    call: cst.Call
    receiver: cst.BaseExpression
    wrapping: Wrapping
    # The torch.save call, or None when it is saved inside a helper.
    save: cst.Call | None


def helper_name(call: cst.Call) -> str | None:
    """`save_checkpoint(...)` or `self.save_checkpoint(...)`: a candidate saver helper."""
    func = call.func
    if isinstance(func, cst.Name):
        return func.value
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
        return func.attr.value
    return None


class WrappedStateDictSaves:
    """A shared analysis (`context.shared(WrappedStateDictSaves)`): `saved` lists every saved
    wrapped `state_dict()` call once the file has been read (at the rules' leave_Module)."""

    def __init__(self, context: FileContext) -> None:
        self.context = context
        self.saved: list[SavedStateDict] = []
        # (scope node id, variable name) -> saved-to-be state dicts held in that variable.
        self._pending: dict[tuple[int, str], list[SavedStateDict]] = {}
        # (helper name, argument index) -> state dicts passed to that helper.
        self._passed_to_helper: dict[tuple[str, int], list[SavedStateDict]] = {}
        # Helpers defined in this file that hand one parameter straight to torch.save.
        self._savers: set[tuple[str, int]] = set()

    def visit_Call(self, node: cst.Call) -> None:
        if self.context.flow.qualified_name(node.func) in torch_api.TORCH_SAVE:
            self._check_save(node)
            return
        self._check_helper_call(node)
        if not (isinstance(node.func, cst.Attribute) and node.func.attr.value == "state_dict" and not node.args):
            return
        receiver = node.func.value
        wrapping = self.context.flow.value_of(receiver).wrapping
        if wrapping is Wrapping.NO:
            return
        destination = self._destination(node)
        if isinstance(destination, cst.Call):
            self.saved.append(SavedStateDict(node, receiver, wrapping, destination))
        elif isinstance(destination, str):
            self._pending.setdefault(self._key(destination), []).append(
                SavedStateDict(node, receiver, wrapping, None)
            )
        elif isinstance(destination, tuple):
            self._passed_to_helper.setdefault(destination, []).append(SavedStateDict(node, receiver, wrapping, None))

    def _destination(self, node: cst.Call) -> cst.Call | str | tuple[str, int] | None:
        """The torch.save call saving the value, the variable it is stored in, or
        (helper name, argument index) for a call of a function that may save it."""
        child: cst.CSTNode = node
        for ancestor in self.context.ancestors(node):
            if isinstance(ancestor, _CONTAINERS):
                child = ancestor
                continue
            if isinstance(ancestor, cst.Call):
                if self.context.flow.qualified_name(ancestor.func) in torch_api.TORCH_SAVE:
                    return ancestor if ancestor.args and child is ancestor.args[0] else None
                helper = helper_name(ancestor)
                if helper is not None and isinstance(child, cst.Arg) and child.keyword is None and child in ancestor.args:
                    return helper, ancestor.args.index(child)
                return None
            if isinstance(ancestor, cst.Assign) and len(ancestor.targets) == 1:
                target: cst.BaseExpression = ancestor.targets[0].target
                if isinstance(target, cst.Subscript):
                    target = target.value
                return target.value if isinstance(target, cst.Name) else None
            return None
        return None

    def _key(self, name: str) -> tuple[int, str]:
        return id(self.context.current_scope), name

    def _check_save(self, node: cst.Call) -> None:
        if not node.args or not isinstance(node.args[0].value, cst.Name):
            return
        name = node.args[0].value.value
        for saved in self._pending.pop(self._key(name), []):
            self.saved.append(SavedStateDict(saved.call, saved.receiver, saved.wrapping, node))
        self._record_saver(name)

    def _record_saver(self, name: str) -> None:
        function = self.context.enclosing_function()
        if function is None or self.context.current_scope is not function:
            return
        params = [*function.params.posonly_params, *function.params.params]
        method = self.context.enclosing_method()
        offset = 1 if method is not None and method.function is function else 0
        for index, param in enumerate(params[offset:]):
            if param.name.value == name:
                self._savers.add((function.name.value, index))

    def _check_helper_call(self, node: cst.Call) -> None:
        helper = helper_name(node)
        if helper is None:
            return
        for index, arg in enumerate(node.args):
            if arg.keyword is None and not arg.star and isinstance(arg.value, cst.Name):
                for saved in self._pending.get(self._key(arg.value.value), []):
                    self._passed_to_helper.setdefault((helper, index), []).append(saved)

    def leave_Assign(self, node: cst.Assign) -> None:
        # A plain rebinding forgets what the variable held (unless it holds a state dict again).
        for target in node.targets:
            if isinstance(target.target, cst.Name) and not _mentions_state_dict(node.value):
                self._pending.pop(self._key(target.target.value), None)

    def leave_Module(self, node: cst.Module) -> None:
        for helper, saved_list in self._passed_to_helper.items():
            if helper in self._savers:
                for saved in saved_list:
                    self.saved.append(saved)


def _mentions_state_dict(value: cst.CSTNode) -> bool:
    stack: list[cst.CSTNode] = [value]
    while stack:
        node = stack.pop()
        if type(node) is cst.Attribute and node.attr.value == "state_dict":
            return True
        stack.extend(child_nodes(node))
    return False
