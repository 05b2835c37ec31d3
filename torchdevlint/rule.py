"""The Rule base class and the Valid/Invalid examples every rule carries."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, ClassVar, Union

import libcst as cst

from torchdevlint.diagnostics import Applicability

if TYPE_CHECKING:
    from torchdevlint.engine import FileContext


@dataclass(frozen=True)
class Valid:
    """Code on which the rule must stay silent."""

    code: str
    name: str = ""

    @property
    def source(self) -> str:
        return textwrap.dedent(self.code).lstrip("\n")


@dataclass(frozen=True)
class Invalid:
    """Code the rule must report; `fixed` is the output of applying all its fixes."""

    code: str
    fixed: str | None = None
    applicability: Applicability | None = None
    name: str = ""
    # Number of findings expected (defaults to at least one).
    count: int | None = None

    @property
    def source(self) -> str:
        return textwrap.dedent(self.code).lstrip("\n")

    @property
    def fixed_source(self) -> str | None:
        return None if self.fixed is None else textwrap.dedent(self.fixed).lstrip("\n")


@dataclass(frozen=True)
class NoOptions:
    """For rules that take no options."""


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
    replacement: Union[str, cst.CSTNode]
    mode: EditMode = EditMode.REPLACE
    until: cst.CSTNode | None = None

    @staticmethod
    def insert_before(node: cst.CSTNode, text: str) -> "NodeEdit":
        return NodeEdit(node, text, EditMode.INSERT_BEFORE)

    @staticmethod
    def insert_after(node: cst.CSTNode, text: str) -> "NodeEdit":
        return NodeEdit(node, text, EditMode.INSERT_AFTER)

    @staticmethod
    def insert_line_after(statement: cst.CSTNode, text: str) -> "NodeEdit":
        return NodeEdit(statement, text, EditMode.INSERT_LINE_AFTER)

    @staticmethod
    def replace_until(node: cst.CSTNode, until: cst.CSTNode, text: str) -> "NodeEdit":
        """`self.x = value` -> `f(value`: rewrite what precedes a node without re-rendering it."""
        return NodeEdit(node, text, EditMode.REPLACE_UNTIL, until)

    @staticmethod
    def insert_line_before(statement: cst.CSTNode, text: str) -> "NodeEdit":
        return NodeEdit(statement, text, EditMode.INSERT_LINE_BEFORE)


@dataclass(frozen=True)
class PendingFix:
    """A fix described in nodes; the engine turns it into text edits once positions are known."""

    title: str
    applicability: Applicability
    edits: tuple[NodeEdit, ...]
    required_imports: tuple[tuple[str, str | None], ...] = ()


@dataclass(frozen=True)
class Report:
    rule: "Rule"
    node: cst.CSTNode
    message: str
    fix: PendingFix | None


class Rule:
    """One device bug. Subclasses define `visit_<Node>` / `leave_<Node>` methods.

    The engine calls them during its single pass, after its own analysis has seen the node,
    so `self.context` answers questions about everything that came before in the file.
    """

    code: ClassVar[str]
    slug: ClassVar[str]
    message: ClassVar[str]
    fix_title: ClassVar[str | None] = None
    default_enabled: ClassVar[bool] = True
    # The rule cannot fire on a file containing none of these strings, so the engine does not
    # run it there (and parses nothing when no selected rule can fire). Empty: always run.
    requires_any_text: ClassVar[tuple[str, ...]] = ()
    VALID: ClassVar[list[Valid]] = []
    INVALID: ClassVar[list[Invalid]] = []
    Options: ClassVar[type] = NoOptions

    def __init__(self, context: "FileContext", options: object | None = None) -> None:
        self.context = context
        self.options = options if options is not None else self.Options()
        self.reports: list[Report] = []

    def report(self, node: cst.CSTNode, *, fix: PendingFix | None = None, message: str | None = None) -> None:
        self.reports.append(Report(self, node, message or self.message, fix))

    def make_fix(
        self,
        *edits: NodeEdit,
        applicability: Applicability = Applicability.SAFE,
        title: str | None = None,
        required_imports: tuple[tuple[str, str | None], ...] = (),
    ) -> PendingFix:
        return PendingFix(title or self.fix_title or "", applicability, tuple(edits), required_imports)

    @classmethod
    def is_fixable(cls) -> bool:
        return any(example.fixed is not None for example in cls.INVALID)

    @classmethod
    def documentation(cls) -> str:
        return textwrap.dedent(cls.__doc__ or "").strip()
