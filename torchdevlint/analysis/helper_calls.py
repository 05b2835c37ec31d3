"""Calls that hand values to functions of the file, read with each call's own arguments.

A function's flow joins every call's arguments: `evaluate(model_0, loader)` with a model on the
GPU and `evaluate(model_1, loader)` with one left on the CPU make its `model` either, and no
meeting inside it is certain. Asked of one call, the flow model runs the function with that
call's arguments (`FlowQueries.meetings_of_call`); this gathers the calls worth asking about.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import libcst as cst

from torchdevlint.analysis.flow.results import FlowQueries, Meeting, MeetingKind, Operand
from torchdevlint.analysis.flow.values import Value


class HelperCalls:
    """The file's calls of a plain name with arguments (`evaluate(model, loader)`), in source
    order."""

    def __init__(self, context: object) -> None:
        self.calls: list[cst.Call] = []

    def visit_Call(self, node: cst.Call) -> None:
        if type(node.func) is cst.Name and node.args:
            self.calls.append(node)

    def model_calls(self, flow: FlowQueries, handed: Callable[[Value], bool],
                    model: Callable[[Value], bool]) -> Iterator[tuple[cst.Call, Meeting, Operand]]:
        """For each call of a function of the file handed a value `handed` accepts (a model),
        the model calls inside that function, as that call runs it, where host data meets
        device data, the model called passes `model`, and the function's own flow (every
        call's arguments joined) did not already have the meeting: (the call, the meeting,
        the model called), in the function's order."""
        for call in self.calls:
            if flow.value_of(call.func).reference is None:
                continue
            if not any(handed(flow.value_of(arg.value)) for arg in call.args):
                continue
            for meeting in flow.meetings_of_call(call):
                if meeting.kind != MeetingKind.MODULE_CALL or type(meeting.node) is not cst.Call:
                    continue
                callee = meeting.node.func
                called = next((operand for operand in meeting.operands
                               if operand.node is callee and model(operand.value)), None)
                if called is None or not meeting.host_operands_meeting_device():
                    continue
                if any(found.meeting.node is meeting.node for found in flow.host_meetings()):
                    continue  # reported in the function itself
                yield call, meeting, called
