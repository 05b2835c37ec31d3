"""Fixes as rules describe them (edits of nodes) and as the fixer applies them (text edits).

A rule cannot know offsets while the pass is under way (positions are computed only for
files with findings, afterwards), so it names nodes; `to_text_fix` places the edits once
positions are known.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

import libcst as cst
from libcst.metadata import CodeRange

from torchdevlint.diagnostics import Applicability, Edit, Fix
from torchdevlint.sourcefile import LineIndex


class EditMode(Enum):
    REPLACE = "replace"
    INSERT_BEFORE = "insert before"
    INSERT_AFTER = "insert after"
    # A new statement on its own line after the node's last line, indented like the node.
    INSERT_LINE_AFTER = "insert line after"
    # A new statement on its own line before the node's first line, indented like the node.
    INSERT_LINE_BEFORE = "insert line before"
    # Replace from the node's start up to the start of `until` (keeps `until` itself).
    REPLACE_UNTIL = "replace until"


@dataclass(frozen=True)
class NodeEdit:
    """Replace a node's source span with new code, or insert code at one of its ends.

    `replacement` is a string or a node, which is rendered with the file's own formatting.
    """

    node: cst.CSTNode
    replacement: str | cst.CSTNode
    mode: EditMode = EditMode.REPLACE
    until: cst.CSTNode | None = None

    @staticmethod
    def insert_before(node: cst.CSTNode, text: str) -> NodeEdit:
        return NodeEdit(node, text, EditMode.INSERT_BEFORE)

    @staticmethod
    def insert_after(node: cst.CSTNode, text: str) -> NodeEdit:
        return NodeEdit(node, text, EditMode.INSERT_AFTER)

    @staticmethod
    def insert_line_after(statement: cst.CSTNode, text: str) -> NodeEdit:
        return NodeEdit(statement, text, EditMode.INSERT_LINE_AFTER)

    @staticmethod
    def replace_until(node: cst.CSTNode, until: cst.CSTNode, text: str) -> NodeEdit:
        """`self.x = value` -> `f(value`: rewrite what precedes a node without re-rendering it."""
        return NodeEdit(node, text, EditMode.REPLACE_UNTIL, until)

    @staticmethod
    def insert_line_before(statement: cst.CSTNode, text: str) -> NodeEdit:
        return NodeEdit(statement, text, EditMode.INSERT_LINE_BEFORE)


@dataclass(frozen=True)
class PendingFix:
    """A fix described in nodes; the engine turns it into text edits once positions are known."""

    title: str
    applicability: Applicability
    edits: tuple[NodeEdit, ...]
    required_imports: tuple[tuple[str, str | None], ...] = ()


def _line_after(source: str, start: int, end: int, content: str) -> Edit:
    """A new line after the one where a statement ends, with the statement's indentation."""
    line_start = source.rfind("\n", 0, start) + 1
    indentation = source[line_start:start]
    if indentation.strip():
        # The statement does not begin its line (`a = 1; b = 2`): chain with a semicolon.
        return Edit(end, end, f"; {content}")
    newline_at = source.find("\n", end)
    if newline_at == -1:
        return Edit(len(source), len(source), f"\n{indentation}{content}")
    newline = "\r\n" if newline_at > 0 and source[newline_at - 1] == "\r" else "\n"
    return Edit(newline_at + 1, newline_at + 1, f"{indentation}{content}{newline}")


def _line_before(source: str, start: int, content: str) -> Edit:
    """A new line before the one where a statement starts, with the statement's indentation."""
    line_start = source.rfind("\n", 0, start) + 1
    indentation = source[line_start:start]
    if indentation.strip():
        return Edit(start, start, f"{content}; ")
    newline = "\r\n" if "\r\n" in source[start: source.find("\n", start) + 1] else "\n"
    return Edit(line_start, line_start, f"{indentation}{content}{newline}")


def to_text_fix(pending: PendingFix, position_of: Callable[[cst.CSTNode], CodeRange],
                offsets: LineIndex, module: cst.Module, source: str) -> Fix:
    """Place a rule's node edits in the source text (`offsets` indexes `source`)."""
    edits: list[Edit] = []
    for node_edit in pending.edits:
        code_range = position_of(node_edit.node)
        start = offsets.offset(code_range.start.line, code_range.start.column)
        end = offsets.offset(code_range.end.line, code_range.end.column)
        replacement = node_edit.replacement
        content = replacement if isinstance(replacement, str) else module.code_for_node(replacement)
        if node_edit.mode is EditMode.INSERT_BEFORE:
            edits.append(Edit(start, start, content))
        elif node_edit.mode is EditMode.INSERT_AFTER:
            edits.append(Edit(end, end, content))
        elif node_edit.mode is EditMode.INSERT_LINE_AFTER:
            edits.append(_line_after(source, start, end, content))
        elif node_edit.mode is EditMode.INSERT_LINE_BEFORE:
            edits.append(_line_before(source, start, content))
        elif node_edit.mode is EditMode.REPLACE_UNTIL:
            assert node_edit.until is not None
            until = position_of(node_edit.until).start
            edits.append(Edit(start, offsets.offset(until.line, until.column), content))
        else:
            edits.append(Edit(start, end, content))
    return Fix(pending.title, pending.applicability, tuple(sorted(edits, key=lambda e: (e.start, e.end))),
               pending.required_imports)
