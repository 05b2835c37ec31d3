"""Values that flow from rules to the fixer and the reporters."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from torchdevlint.sourcefile import ProgramView


class Applicability(Enum):
    """How far a fix may be trusted; `--fix` applies only SAFE ones."""

    SAFE = "safe"
    UNSAFE = "unsafe"


@dataclass(frozen=True)
class Edit:
    """Replace the text between two offsets (code points into the decoded source)."""

    start: int
    end: int
    content: str


@dataclass(frozen=True)
class Fix:
    title: str
    applicability: Applicability
    edits: tuple[Edit, ...]
    # (module, name) pairs the fixed code needs, e.g. ("torch", None) for `import torch`.
    required_imports: tuple[tuple[str, str | None], ...] = ()

    @property
    def is_safe(self) -> bool:
        return self.applicability is Applicability.SAFE


def is_applicable(fix: Fix | None, unsafe: bool) -> bool:
    """Whether a fix is applied: safe ones always, unsafe ones with `--unsafe-fixes`."""
    return fix is not None and (fix.is_safe or unsafe)


@dataclass(frozen=True)
class Location:
    """1-based line, 1-based column (in code points), like ruff and the JSON output."""

    line: int
    column: int


@dataclass(frozen=True)
class Diagnostic:
    code: str
    slug: str
    message: str
    path: str
    start: Location
    end: Location
    fix: Fix | None = None
    # Set by the fixer when a fix existed but was not applied: why, in words ("its output did
    # not parse"); empty otherwise.
    fix_withheld: str = ""
    # The notebook cell (1-based, every cell counted) the finding is in; its lines and columns
    # then count within the cell. None for a Python file.
    cell: int | None = None

    def to_json(self) -> dict[str, object]:
        fix: dict[str, object] | None = None
        if self.fix is not None:
            fix = {"applicability": self.fix.applicability.value, "title": self.fix.title}
        return {
            "code": self.code,
            "slug": self.slug,
            "path": self.path,
            "cell": self.cell,
            "line": self.start.line,
            "column": self.start.column,
            "end_line": self.end.line,
            "end_column": self.end.column,
            "message": self.message,
            "fix": fix,
        }


@dataclass(frozen=True)
class FileError:
    """A file that could not be read or parsed: reported, never raised."""

    path: str
    message: str
    line: int | None = None
    column: int | None = None
    # For a notebook cell that cannot be parsed: its number; the line counts within it.
    cell: int | None = None

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "cell": self.cell, "line": self.line, "column": self.column,
                "message": self.message}


@dataclass
class FileResult:
    path: str
    diagnostics: list[Diagnostic] = field(default_factory=list)
    # The file (or some of its notebook cells) could not be read, parsed or written.
    errors: list[FileError] = field(default_factory=list)
    fixed_count: int = 0
    # Unified diff when run with --diff; the new text is written only with --fix.
    diff: str | None = None
    # Codes of the findings that were fixed, one entry per fix applied (for --show-fixes).
    fixed_codes: list[str] = field(default_factory=list)
    # The text the diagnostics' positions refer to (the fixed text after --fix or --diff);
    # set only when there are diagnostics, for reporters that show source lines or fixes.
    view: ProgramView | None = None
    # The fixed file's bytes, when fixing input that is not written back (standard input).
    output: bytes | None = None
    # Suppression directives added or extended (`--add-noqa`).
    noqa_added: int = 0
    # How the file was read, where the user should know though nothing failed (IPython lines
    # set aside in a `.py` file).
    notices: list[str] = field(default_factory=list)
    # What the user wrote that the tool reads differently than they meant (a malformed noqa
    # directive, which suppresses nothing); printed as warnings.
    warnings: list[str] = field(default_factory=list)
