"""`torchdevlint debug flow FILE[:LINE]`: what the device-flow model concluded, line by line.

When a finding surprises, the model's facts where it fired are the explanation: each name a
line binds, with its kind and where it lives, and each place where host data meets data on
an accelerator.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from torchdevlint.analysis.flow.model import FlowModel
from torchdevlint.analysis.flow.results import Env, Scope
from torchdevlint.analysis.flow.values import CPU_MODE_UNREACHED
from torchdevlint.analysis.tree import child_nodes
from torchdevlint.budget import room_for_nesting


def _parents(module: cst.Module) -> dict[int, cst.CSTNode]:
    parents: dict[int, cst.CSTNode] = {}
    stack: list[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        for child in child_nodes(node):
            parents[id(child)] = node
            stack.append(child)
    return parents


def model_for(module: cst.Module) -> FlowModel:
    """A flow model of a whole parsed module, outside the engine's walk."""
    parents = _parents(module)

    def enclosing_scope(node: cst.CSTNode) -> Scope:
        current = parents.get(id(node))
        while current is not None and not isinstance(current, (cst.FunctionDef, cst.Module)):
            current = parents.get(id(current))
        return current if current is not None else module

    return FlowModel(module, enclosing_scope)


def _changes(before: Env, after: Env) -> Iterator[tuple[str, str]]:
    for key in sorted(after):
        if before.get(key) != after[key]:
            yield key, after[key].describe()


# A program line -> (its notebook cell, or None, and its line there).
Placement = Callable[[int], "tuple[int | None, int]"]


def flow_lines(source: str, path: str, only_line: int | None = None, *, place: Placement | None = None,
               only_cell: int | None = None) -> list[str]:
    """The report, one line per fact, ordered by line; `place` says where a notebook's program
    lines are in its cells (`only_line` then counts within `only_cell`)."""
    module = cst.parse_module(source)
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    facts: list[tuple[int, int, str]] = []
    with room_for_nesting():
        model = model_for(module)
        for flow in model.all_flows():
            for key, statement in flow.statements.items():
                line = positions[statement].start.line
                if CPU_MODE_UNREACHED in flow.before[key] and type(statement) is cst.SimpleStatementLine:
                    code = module.code_for_node(statement).strip()
                    facts.append((line, 0, f"{code}: not reached in the CPU mode"))
                after = flow.after.get(key)
                if after is None and isinstance(statement, (cst.For, cst.While)) and statement.body.body:
                    first = statement.body.body[0]
                    after = flow.before.get(id(first))
                if after is None:
                    continue
                for name, description in _changes(flow.before[key], after):
                    if name.startswith(("__", "<")):  # dunders, and the model's own entries
                        continue
                    facts.append((line, 0, f"{name}: {description}"))
            for meeting in flow.meetings.values():
                line = positions[meeting.node].start.line
                for host, device in meeting.host_operands_meeting_device():
                    facts.append((line, 1, f"host data `{module.code_for_node(host.node)}` meets accelerator data "
                                           f"`{module.code_for_node(device.node)}` ({meeting.kind})"))
    facts.sort(key=lambda fact: (fact[0], fact[1]))
    shown = []
    for line, _, text in facts:
        cell, cell_line = place(line) if place is not None else (None, line)
        if only_line is not None and (cell_line, cell) != (only_line, only_cell):
            continue
        where = f"{path}:cell {cell}:{cell_line}" if cell is not None else f"{path}:{cell_line}"
        shown.append(f"{where}: {text}")
    return shown
