"""Apply chosen fixes, re-lint to a fixpoint, add the imports fixes need.

Fixes are text edits; each round applies every non-overlapping applicable fix, checks the
result still parses, and lints again, until nothing applicable is left.
"""

from __future__ import annotations

import ast
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import libcst as cst

from torchdevlint.budget import Deadline, room_for_nesting
from torchdevlint.diagnostics import Diagnostic, Edit, Fix, is_applicable
from torchdevlint.engine import ModuleParser, lint_source
from torchdevlint.pieces import needs_pieces
from torchdevlint.rule import Rule

MAX_ROUNDS = 10
# Why a fix was withheld, as the reports say it.
DID_NOT_PARSE = "its output did not parse"
DID_NOT_CONVERGE = "it did not remove its finding"

# Why a fix must not be applied to this text (a notebook's cell boundaries), or None.
FixGate = Callable[[str, Fix], "str | None"]


@dataclass
class FixOutcome:
    text: str
    # What is still reported after fixing (unfixable, unsafe-but-not-allowed, withheld).
    remaining: list[Diagnostic] = field(default_factory=list)
    # How many of the findings before fixing are gone after it.
    fixed_count: int = 0
    # One code per applied fix, in the order applied.
    fixed_codes: list[str] = field(default_factory=list)

    def changed(self, original: str) -> bool:
        return self.text != original


def _overlaps(edit: Edit, taken: Sequence[Edit]) -> bool:
    for other in taken:
        if edit.start < other.end and other.start < edit.end:
            return True
        # Two edits at the same point, or one touching the other's span, would race.
        if edit.start == other.start or edit.end == other.end:
            return True
        if edit.start == edit.end and other.start <= edit.start <= other.end:
            return True
        if other.start == other.end and edit.start <= other.start <= edit.end:
            return True
    return False


def apply_fixes(source: str, fixes: Sequence[Fix]) -> tuple[str, list[Fix]]:
    """Apply the fixes whose edits do not overlap an earlier one; return text and applied."""
    taken: list[Edit] = []
    applied: list[Fix] = []
    for fix in sorted(fixes, key=lambda f: (f.edits[0].start, f.edits[0].end) if f.edits else (0, 0)):
        if any(_overlaps(edit, taken) for edit in fix.edits):
            continue
        taken.extend(fix.edits)
        applied.append(fix)
    text = source
    for edit in sorted(taken, key=lambda e: (e.start, e.end), reverse=True):
        text = text[: edit.start] + edit.content + text[edit.end :]
    imports = [imp for fix in applied for imp in fix.required_imports]
    if imports:
        text = add_imports(text, imports)
    return text, applied


def add_imports(text: str, imports: Sequence[tuple[str, str | None]]) -> str:
    # libcst.codemod pulls in libcst.matchers (~0.2 s): import it only when a fix needs it.
    from libcst.codemod import CodemodContext
    from libcst.codemod.visitors import AddImportsVisitor

    module = cst.parse_module(text)
    context = CodemodContext()
    for module_name, obj in imports:
        AddImportsVisitor.add_needed_import(context, module_name, obj)
    return module.visit(AddImportsVisitor(context)).code


def _compiles(text: str) -> bool:
    """Whether `text` compiles as a module (piece by piece where it is linted so)."""
    pieces = needs_pieces(text)
    if pieces is not None:
        return all(_compiles_whole(piece.header + text[piece.start:piece.end]) for piece in pieces)
    return _compiles_whole(text)


def _compiles_whole(text: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(text, "<source>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def _parses(text: str, *, compiles: bool = True) -> bool:
    """Whether fixed code parses, and with `compiles` (the code before the fix compiled) also
    compiles: a notebook's top-level `await` parses but does not compile as a module. A file
    linted in pieces is judged piece by piece, as it was linted (see `pieces`)."""
    pieces = needs_pieces(text)
    if pieces is not None:
        return all(_parses_whole(piece.header + text[piece.start:piece.end], compiles=compiles)
                       for piece in pieces)
    return _parses_whole(text, compiles=compiles)


def _parses_whole(text: str, *, compiles: bool) -> bool:
    try:
        cst.parse_module(text)
    except cst.ParserSyntaxError:
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(text, "<fixed>", "exec", flags=0 if compiles else ast.PyCF_ONLY_AST, dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def apply_one_fix(text: str, fix: Fix) -> str | None:
    """`text` with one finding's fix applied, as an editor's quick fix offers it; None where it
    changes nothing, or where its output would not parse though `text` did (`fix_source`
    would withhold it). The running Python's parser judges: a quick fix is not linted again."""
    fixed, applied = apply_fixes(text, [fix])
    if not applied:
        return None
    if not _python_parses(fixed) and _python_parses(text):
        return None
    return fixed


def _python_parses(text: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(text, "<fixed>", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def _made_progress(before: Sequence[Diagnostic], after: Sequence[Diagnostic], unsafe: bool) -> bool:
    """Whether a round removed at least one fixable finding (by code, counted)."""
    remaining = Counter(d.code for d in after if is_applicable(d.fix, unsafe))
    return any(remaining.get(code, 0) < count for code, count in Counter(d.code for d in before).items())


def fix_source(
    source: str,
    path: str,
    rule_classes: Sequence[type[Rule]],
    options: Mapping[str, object] | None = None,
    *,
    unsafe: bool = False,
    deadline: Deadline | None = None,
    gate: FixGate | None = None,
    parse: ModuleParser = cst.parse_module,
    unfixable: frozenset[str] = frozenset(),
) -> FixOutcome:
    """Fix until no applicable fix remains; a fix whose output would not parse, or that `gate`
    refuses, is withheld, and the fixes of `unfixable` codes are never applied.

    The deadline covers every round; past it, AnalysisTimeout is raised and nothing is fixed.
    """
    with room_for_nesting():
        return _fix_to_fixpoint(source, path, rule_classes, options, unsafe, deadline, gate, parse, unfixable)


def _fix_to_fixpoint(source: str, path: str, rule_classes: Sequence[type[Rule]],
                     options: Mapping[str, object] | None, unsafe: bool,
                     deadline: Deadline | None, gate: FixGate | None, parse: ModuleParser,
                     unfixable: frozenset[str]) -> FixOutcome:
    text = source
    fixed_codes: list[str] = []
    # (code, line, column) of a finding -> why its fix is withheld.
    withheld: dict[tuple[str, int, int], str] = {}
    diagnostics = lint_source(text, path, rule_classes, options, deadline=deadline, parse=parse)
    found = len(diagnostics)
    compiles = _compiles(source) if diagnostics else True
    for _ in range(MAX_ROUNDS):
        candidates = [
            d for d in diagnostics
            if is_applicable(d.fix, unsafe) and d.code not in unfixable
            and (d.code, d.start.line, d.start.column) not in withheld
        ]
        if gate is not None:
            for diagnostic in candidates:
                assert diagnostic.fix is not None
                reason = gate(text, diagnostic.fix)
                if reason is not None:
                    withheld[(diagnostic.code, diagnostic.start.line, diagnostic.start.column)] = reason
            candidates = [d for d in candidates if (d.code, d.start.line, d.start.column) not in withheld]
        if not candidates:
            break
        new_text, applied = apply_fixes(text, [d.fix for d in candidates if d.fix is not None])
        if not _parses(new_text, compiles=compiles):
            # Find the culprits one by one, keep the rest.
            new_text = text
            applied = []
            for diagnostic in candidates:
                assert diagnostic.fix is not None
                attempt, one = apply_fixes(new_text, [diagnostic.fix])
                if one and _parses(attempt, compiles=compiles):
                    new_text = attempt
                    applied.extend(one)
                    break
                withheld[(diagnostic.code, diagnostic.start.line, diagnostic.start.column)] = DID_NOT_PARSE
        if not applied:
            if not withheld:
                break
            continue
        new_diagnostics = lint_source(new_text, path, rule_classes, options, deadline=deadline, parse=parse)
        if not _made_progress(candidates, new_diagnostics, unsafe):
            # The fixes did not remove their findings (a rule whose fix does not converge):
            # keep the text of before this round and withhold them, never loop on them.
            withheld.update({(d.code, d.start.line, d.start.column): DID_NOT_CONVERGE for d in candidates})
            break
        code_of_fix = {id(d.fix): d.code for d in candidates}
        fixed_codes.extend(code_of_fix[id(fix)] for fix in applied)
        text = new_text
        diagnostics = new_diagnostics
    remaining = [
        replace(d, fix_withheld=withheld[(d.code, d.start.line, d.start.column)])
        if (d.code, d.start.line, d.start.column) in withheld else d
        for d in diagnostics
    ]
    # Counted in findings, as `check` counts them: fixed and remaining add up to what it reports
    # (one fix can take several findings away, and a partial fix leaves its finding).
    fixed = max(0, found - len(remaining)) if fixed_codes else 0
    return FixOutcome(text, remaining, fixed, fixed_codes)
