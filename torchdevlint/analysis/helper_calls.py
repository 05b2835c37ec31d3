"""Calls that hand values to functions of the file, read with each call's own arguments.

A function's flow joins every call's arguments: `evaluate(model_0, loader)` with a model on the
GPU and `evaluate(model_1, loader)` with one left on the CPU make its `model` either, and no
meeting inside it is certain. Asked of one call, the flow model runs the function with that
call's arguments (`FlowQueries.meetings_of_call`); this gathers the calls worth asking about.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import libcst as cst

from torchdevlint.analysis.flow.results import FlowQueries, Meeting
from torchdevlint.analysis.flow.values import Value


class HelperCalls:
    """The file's calls of a plain name with arguments (`evaluate(model, loader)`), in source
    order."""

    def __init__(self, context: object) -> None:
        self.calls: list[cst.Call] = []

    def visit_Call(self, node: cst.Call) -> None:
        if type(node.func) is cst.Name and node.args:
            self.calls.append(node)

    def handing(self, flow: FlowQueries, wanted: Callable[[Value], bool]) -> Iterator[tuple[cst.Call, list[Meeting]]]:
        """Each call of a function of the file that is handed a value `wanted` accepts, with
        the function's meetings as that call runs it."""
        for call in self.calls:
            if flow.value_of(call.func).reference is None:
                continue
            if any(wanted(flow.value_of(arg.value)) for arg in call.args):
                yield call, flow.meetings_of_call(call)
