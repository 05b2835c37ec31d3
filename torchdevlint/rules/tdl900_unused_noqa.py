"""TDL900 unused-noqa."""

from __future__ import annotations

from torchdevlint.diagnostics import Applicability
from torchdevlint.rule import Invalid, Mark, Rule, Valid
from torchdevlint.suppression import NoqaDirective, SuppressionFinding, SuppressionReview

# Only our own codes are judged: codes of other tools (E501) belong to them.
_OWN_PREFIX = "TDL"


class UnusedNoqa(Rule):
    """
    ## What it does
    Finds `# noqa` directives naming torchdevlint codes that suppress nothing: an unknown code
    (a typo, or a code that never existed), a rule this run does not select ("non-enabled"),
    or a selected rule with no finding on that line (the bug was fixed, or the code moved).
    Codes of other tools (`# noqa: E501`) and bare `# noqa` comments are left alone. A rule
    that is off by default, like ruff's RUF100.

    ## Why is this bad?
    A stale `# noqa: TDL001` silently hides the next device bug written on that line, and an
    unknown code hides nothing at all while looking as if it did.

    ## Fix safety
    Safe when it removes unknown and unused codes: nothing on the line was suppressed by them.
    Unsafe when it removes a non-enabled code, which may serve another run (flake8 with its
    own selection, or a configuration that turns the rule on). A directive that would lose
    every code is removed, up to another comment that follows it (`# noqa: TDL001  # type:
    ignore`); one followed by other text (`# noqa: TDL001 - why`) gets no fix.

    ## Options
    None. Select it with `extend-select = ["TDL900"]` (or `--extend-select TDL900`).
    """

    code = "TDL900"
    slug = "unused-noqa"
    message = "Unused `noqa` directive"
    fix_title = "Remove the unused codes from the `noqa` directive"
    default_enabled = False
    marks = frozenset({Mark.UNNECESSARY})
    reviews_suppressions = True

    VALID = [
        Valid(
            """
            import torch
            x = torch.zeros(3)
            x.cuda()  # noqa: E501
            """,
            name="codes-of-other-tools",
        ),
        Valid(
            """
            import torch
            x = torch.zeros(3)  # noqa
            """,
            name="a-bare-noqa",
        ),
        Valid(
            """
            import torch
            note = "# noqa: TDL999 in a string is no comment"
            """,
            name="text-in-a-string",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            x = torch.zeros(3)  # noqa: TDL999
            """,
            fixed="""
            import torch
            x = torch.zeros(3)
            """,
            applicability=Applicability.SAFE,
            name="an-unknown-code",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            x = torch.zeros(3)  # noqa: E501, TDL999
            """,
            fixed="""
            import torch
            x = torch.zeros(3)  # noqa: E501
            """,
            applicability=Applicability.SAFE,
            name="another-tools-code-stays",
        ),
        Invalid(
            """
            import torch
            x = torch.zeros(3)
            x.cuda()  # noqa: TDL001
            """,
            fixed="""
            import torch
            x = torch.zeros(3)
            x.cuda()
            """,
            applicability=Applicability.UNSAFE,
            name="a-rule-this-run-does-not-select",
        ),
        Invalid(
            """
            import torch
            x = torch.zeros(3)  # noqa: TDL999 - kept for the record
            """,
            name="other-comment-text-gets-no-fix",
        ),
        Invalid(
            """
            import torch
            x = torch.zeros(3)  # noqa: TDL999  # type: ignore
            """,
            fixed="""
            import torch
            x = torch.zeros(3)  # type: ignore
            """,
            applicability=Applicability.SAFE,
            name="a-comment-after-it-stays",
        ),
    ]

    @classmethod
    def review_suppressions(cls, review: SuppressionReview) -> list[SuppressionFinding]:
        return [finding for directive in review.directives
                if (finding := _judged(directive, review)) is not None]


def _judged(directive: NoqaDirective, review: SuppressionReview) -> SuppressionFinding | None:
    unknown, non_enabled, unused, kept = [], [], [], []
    for named in directive.codes:
        if not named.startswith(_OWN_PREFIX) or review.exemption.covers(named):
            kept.append(named)
        elif not any(code.startswith(named) for code in review.known_codes):
            unknown.append(named)
        elif not any(code.startswith(named) for code in review.selected_codes):
            non_enabled.append(named)
        elif not any(line == directive.line and code.startswith(named) for line, code in review.suppressed):
            unused.append(named)
        else:
            kept.append(named)
    if not (unknown or non_enabled or unused):
        return None
    parts = [f"{label}: {', '.join(codes)}" for label, codes in
             (("unused", unused), ("non-enabled", non_enabled), ("unknown", unknown)) if codes]
    return SuppressionFinding(
        directive.line, directive.start, directive.end,
        f"{UnusedNoqa.message} ({'; '.join(parts)})",
        fix=_removal(directive, kept, review.lines[directive.line - 1]),
        fix_is_safe=not non_enabled,
    )


def _removal(directive: NoqaDirective, kept: list[str], line_text: str) -> tuple[int, int, str] | None:
    """The edit leaving only the `kept` codes: the directive rewritten, or removed (with the
    blanks before it at the end of a line, or up to a comment that follows it)."""
    if kept:
        return directive.start, directive.end, f"# noqa: {', '.join(kept)}"
    if not directive.tail.strip():
        return len(line_text[:directive.start].rstrip()), len(line_text.rstrip()), ""
    if directive.tail.lstrip().startswith("#"):
        return directive.start, directive.end + len(directive.tail) - len(directive.tail.lstrip()), ""
    return None
