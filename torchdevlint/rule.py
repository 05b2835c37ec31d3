"""The Rule base class and the Valid/Invalid examples every rule carries."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from enum import Enum
from typing import ClassVar

import libcst as cst

from torchdevlint.context import FileContext
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit, PendingFix
from torchdevlint.runtime_proof import RuntimeProof
from torchdevlint.suppression import SuppressionFinding, SuppressionReview


@dataclass(frozen=True)
class Valid:
    """Code on which the rule must stay silent."""

    code: str
    name: str = ""
    # Shown as the docs' "Use instead" for the rule's documented example when that has no fix.
    in_docs: bool = False

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
    # The rule's documented example: its docs' "Example" (and, with `fixed`, "Use instead")
    # sections are rendered from it, so every documented example is one the tests run.
    in_docs: bool = False

    @property
    def source(self) -> str:
        return textwrap.dedent(self.code).lstrip("\n")

    @property
    def fixed_source(self) -> str | None:
        return None if self.fixed is None else textwrap.dedent(self.fixed).lstrip("\n")


class Mark(Enum):
    """What a rule's finding says of the code it points at, beyond its message."""

    # Use of something deprecated: the reported range is that thing.
    DEPRECATED = "deprecated"
    # Code that does nothing and can go: the reported range is that code.
    UNNECESSARY = "unnecessary"


@dataclass(frozen=True)
class NoOptions:
    """For rules that take no options."""


@dataclass(frozen=True)
class Report:
    # The rule's class, not the instance: the instance keeps its reports, and a cycle would
    # keep the whole tree alive until the garbage collector came by.
    rule: type[Rule]
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
    # How `verify` proves a finding by running the program (correctness rules, TDL0xx): the
    # error the bug raises and the machine it shows on. The default: a device mismatch on a GPU.
    proof: ClassVar[RuntimeProof] = RuntimeProof()
    # What the reported code is, where an editor shows that (struck through, faded): the
    # LSP server's diagnostic tags.
    marks: ClassVar[frozenset[Mark]] = frozenset()
    # The rule cannot fire on a file containing none of these strings, so the engine does not
    # run it there (and parses nothing when no selected rule can fire). Empty: always run.
    requires_any_text: ClassVar[tuple[str, ...]] = ()
    # And, where given, one of these too.
    requires_also_any_text: ClassVar[tuple[str, ...]] = ()
    # A rule about the file's noqa comments themselves walks no code: once the other
    # rules' findings are known, the engine hands it the directives (`review_suppressions`).
    reviews_suppressions: ClassVar[bool] = False
    # A rule about syntax an older Python allowed (`x.cuda(async=True)`) walks no code: where
    # that syntax alone stops the file from parsing, the engine reads it as meant and reports
    # each such place (see `legacy_syntax`).
    reads_legacy_syntax: ClassVar[bool] = False
    # It asks about the project's other files itself (what they save, say): `--show-settings`
    # then prints what was found there. Every cached result is keyed on those facts, whatever
    # the rules (the flow model reads them too: `RunSettings.project_facts`).
    reads_the_project: ClassVar[bool] = False
    VALID: ClassVar[list[Valid]] = []
    INVALID: ClassVar[list[Invalid]] = []
    Options: ClassVar[type] = NoOptions
    # An instance of `Options`; a rule with options narrows this annotation to its own class.
    options: object

    def __init__(self, context: FileContext, options: object | None = None) -> None:
        self.context = context
        self.options = options if options is not None else self.Options()
        self.reports: list[Report] = []
        self.setup()

    def setup(self) -> None:
        """Per-file state, and the shared analyses the rule reads (`self.context.shared(...)`)."""

    def report(self, node: cst.CSTNode, *, fix: PendingFix | None = None, message: str | None = None) -> None:
        self.reports.append(Report(type(self), node, message or self.message, fix))

    def make_fix(
        self,
        *edits: NodeEdit,
        applicability: Applicability = Applicability.SAFE,
        title: str | None = None,
        required_imports: tuple[tuple[str, str | None], ...] = (),
    ) -> PendingFix:
        return PendingFix(title or self.fix_title or "", applicability, tuple(edits), required_imports)

    @classmethod
    def review_suppressions(cls, review: SuppressionReview) -> list[SuppressionFinding]:
        """Findings about the file's `# noqa` directives (rules with `reviews_suppressions`)."""
        return []

    @classmethod
    def is_fixable(cls) -> bool:
        return any(example.fixed is not None for example in cls.INVALID)

    @classmethod
    def documentation(cls) -> str:
        return textwrap.dedent(cls.__doc__ or "").strip()
