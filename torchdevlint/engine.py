"""Parse once, analyse and run every selected rule in one pass, produce diagnostics.

The engine knows nothing about individual rules: it dispatches `visit_<Node>` and
`leave_<Node>` methods by name, after its own analysis (the file's imports) has
seen the node, so rules always ask questions about a file read up to that point.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import libcst as cst

from torchdevlint import legacy_syntax
from torchdevlint.analysis.brains import naming
from torchdevlint.analysis.flow.memory import FlowMemory
from torchdevlint.analysis.flow.results import names_bound_by
from torchdevlint.analysis.tree import child_nodes
from torchdevlint.budget import Deadline, room_for_nesting
from torchdevlint.context import FileContext
from torchdevlint.data_literals import BlankedSource, blank_for_parsing
from torchdevlint.diagnostics import Applicability, Diagnostic, Edit, Fix, Location
from torchdevlint.edits import to_text_fix
from torchdevlint.pieces import Piece, needs_pieces
from torchdevlint.positions import StatementPositions
from torchdevlint.rule import Report, Rule
from torchdevlint.sourcefile import RELEVANCE_MARKER, LineIndex, source_lines
from torchdevlint.suppression import (
    NO_EXEMPTION,
    FileExemption,
    SuppressionReview,
    expected_failure_lines,
    file_exemption,
    is_suppressed,
    mentions_noqa,
    noqa_directives,
    noqa_lines,
)

# How many nodes are walked between two looks at the clock.
_DEADLINE_CHECK_INTERVAL = 2048


class _NewerSyntaxNotes:
    """Notes syntax that a newer Python than the running one may have added.

    LibCST parses the grammar of every Python version, the running one only its own: where the
    running Python refuses code that LibCST reads, these constructs say the code is newer, not
    wrong (see `check_syntax`).
    """

    def note_newer_syntax(self) -> None:
        raise NotImplementedError

    def newer_syntax_noted(self) -> bool:
        raise NotImplementedError

    def _newer_syntax(self, node: cst.CSTNode) -> None:
        self.note_newer_syntax()

    visit_TypeAlias = visit_TypeParameters = visit_TemplatedString = _newer_syntax

    def visit_ExceptHandler(self, node: cst.ExceptHandler | cst.ExceptStarHandler) -> None:
        # `except A, B:` without parentheses (PEP 758).
        if type(node.type) is cst.Tuple and not node.type.lpar:
            self.note_newer_syntax()

    visit_ExceptStarHandler = visit_ExceptHandler

    def visit_FormattedStringExpression(self, node: cst.FormattedStringExpression) -> None:
        # PEP 701: quotes, backslashes, comments and line breaks inside a replacement field
        # (looked for until found once: every f-string field of every file passes here).
        if not self.newer_syntax_noted() and _may_use_pep_701(node):
            self.note_newer_syntax()


class _NewerSyntax(_NewerSyntaxNotes, cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.found = False

    def note_newer_syntax(self) -> None:
        self.found = True

    def newer_syntax_noted(self) -> bool:
        return self.found


def uses_newer_syntax(module: cst.Module) -> bool:
    """Whether `module` uses syntax that a newer Python than the running one may have added."""
    visitor = _NewerSyntax()
    module.visit(visitor)
    return visitor.found


class _Analysis(_NewerSyntaxNotes):
    """The engine's own visitor: the file's imports, in source order, and syntax that only a
    newer Python accepts."""

    def __init__(self, context: FileContext) -> None:
        self.context = context
        self.imports = context.imports

    def note_newer_syntax(self) -> None:
        self.context.may_be_newer_syntax = True

    def newer_syntax_noted(self) -> bool:
        return self.context.may_be_newer_syntax

    def visit_Import(self, node: cst.Import) -> None:
        self.imports.record_import(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if isinstance(node.names, cst.ImportStar):
            self.imports.record_star_import(naming.STAR_IMPORTED_MODULES)
        else:
            self.imports.record_import_from(node)

    # A module-level rebinding that always runs means the name no longer stands for an import.

    def leave_Assign(self, node: cst.Assign) -> None:
        self._rebind(*(target.target for target in node.targets))

    def leave_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._rebind(node.target)

    def leave_AugAssign(self, node: cst.AugAssign) -> None:
        self._rebind(node.target)

    def leave_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._rebind(node.target)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._rebind(node.asname.name)

    def _rebind(self, *targets: cst.BaseExpression) -> None:
        if any(type(node) in _SCOPES_AND_BRANCHES for node in self.context.stack):
            return
        for target in targets:
            for name in names_bound_by(target):
                if self.imports.is_imported(name.value):
                    self.imports.forget(name.value)


# Where a binding is not the module's, or may not run.
_SCOPES_AND_BRANCHES = frozenset({
    cst.FunctionDef, cst.ClassDef, cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp,
    cst.If, cst.For, cst.While, cst.Try, cst.TryStar, cst.Match,
})


Handler = Callable[[cst.CSTNode], object]
# Turns source into LibCST's tree exactly as `cst.parse_module` does; an editor's buffer is
# parsed by one that reuses what the previous version's tree shares with it.
ModuleParser = Callable[[str], cst.Module]


class SyntaxCheck(Protocol):
    """`check_syntax`, or one that reuses what it parsed of an editor buffer's last version."""

    def __call__(self, source: str, path: str, *, newer_syntax: bool | None = None) -> ast.Module | None: ...


class _Walker:
    """One traversal; each node goes to the analysis, then to every rule that asked for it.

    LibCST's own visitor rebuilds every node as it goes, which costs about three times the
    parse; reading the dataclass fields directly and skipping whitespace costs a fraction.
    """

    def __init__(self, context: FileContext, analysis: _Analysis, rules: Sequence[Rule]) -> None:
        self._context = context
        shared = context.shared_analyses
        self._participants: tuple[object, ...] = (analysis, *shared, *rules)
        # Shared analyses leave before the rules (whose leave_Module reads their results);
        # the bindings analysis leaves last, so a rule's leave_Assign sees the state before it.
        self._leave_order: tuple[object, ...] = (*shared, *reversed(rules), analysis)
        self._visit_handlers: dict[type, tuple[Handler, ...]] = {}
        self._leave_handlers: dict[type, tuple[Handler, ...]] = {}

    def _handlers_for(self, node_type: type) -> tuple[tuple[Handler, ...], tuple[Handler, ...]]:
        visit = self._visit_handlers.get(node_type)
        if visit is None:
            name = node_type.__name__
            visit = tuple(
                getattr(p, "visit_" + name) for p in self._participants if hasattr(p, "visit_" + name)
            )
            leave = tuple(
                getattr(p, "leave_" + name) for p in self._leave_order if hasattr(p, "leave_" + name)
            )
            self._visit_handlers[node_type] = visit
            self._leave_handlers[node_type] = leave
            return visit, leave
        return visit, self._leave_handlers[node_type]

    def walk(self, root: cst.CSTNode) -> None:
        """Visit every node in source order, leaving it after its children.

        Iterative, not recursive: nesting as deep as a 1,000-term `+` chain must not reach
        Python's recursion limit. The work list holds nodes still to enter and, below each
        entered node's children, a marker to leave it.
        """
        stack = self._context.stack
        parents = self._context.parents
        deadline = self._context.deadline
        visit_handlers = self._visit_handlers
        leave_handlers = self._leave_handlers
        leave_marker = _LEAVE
        work: list[object] = [root]
        walked = 0
        while work:
            item = work.pop()
            if item is leave_marker:
                node = stack[-1]
                for handler in leave_handlers[type(node)]:
                    handler(node)
                stack.pop()
                continue
            node = item  # type: ignore[assignment]  # everything else on the list is a node
            walked += 1
            if not walked % _DEADLINE_CHECK_INTERVAL:
                deadline.check()
            node_type = type(node)
            visit = visit_handlers.get(node_type)
            if visit is None:
                visit = self._handlers_for(node_type)[0]
            stack.append(node)
            for handler in visit:
                handler(node)
            children = child_nodes(node)
            if not children:
                for handler in leave_handlers[node_type]:
                    handler(node)
                stack.pop()
                continue
            work.append(leave_marker)
            for child in children:
                parents[id(child)] = node
            children.reverse()
            work.extend(children)


_PEP_701_NODES = (cst.SimpleString, cst.FormattedString, cst.ConcatenatedString, cst.Comment,
                  cst.ParenthesizedWhitespace, cst.EmptyLine, cst.TrailingWhitespace, cst.Newline)


def _may_use_pep_701(node: cst.FormattedStringExpression) -> bool:
    """Whether a replacement field holds what only Python 3.12 reads inside an f-string
    (conservatively: any string, comment or line break, whitespace included)."""
    stack: list[cst.CSTNode] = [node.expression]
    while stack:
        current = stack.pop()
        if isinstance(current, _PEP_701_NODES):
            return True
        if type(current) is cst.SimpleWhitespace and ("\\" in current.value or "\n" in current.value):
            return True
        stack.extend(current.children)
    return any(type(w) is not cst.SimpleWhitespace or "\n" in w.value or "\\" in w.value
               for w in (node.whitespace_before_expression, node.whitespace_after_expression))


# Marks, in the walk's work list, the point where the node entered last is left.
_LEAVE = object()


@dataclass(frozen=True)
class AnalysedFile:
    """A file after the pass: what the analysis knew at its end, and each rule's reports."""

    context: FileContext
    rules: tuple[Rule, ...]

    @property
    def reports(self) -> list[Report]:
        return [report for rule in self.rules for report in rule.reports]


def analyse_module(
    module: cst.Module,
    path: str,
    rule_classes: Sequence[type[Rule]] = (),
    options: Mapping[str, object] | None = None,
    *,
    deadline: Deadline | None = None,
    source: str | None = None,
    flow_memory: FlowMemory | None = None,
) -> AnalysedFile:
    """The single pass: the engine's analysis and the given rules walk the module together.

    The public way in for anything that needs the analysis of a file (tests, a `debug` view):
    give it a rule whose visits ask `self.context` what they want to know. `source`, the
    text the module was parsed from, saves regenerating it where the analysis reads it.
    """
    options = options or {}
    context = FileContext(module, path, deadline, source, flow_memory)
    rules = tuple(rule_class(context, options.get(rule_class.code)) for rule_class in rule_classes)
    with room_for_nesting():
        _Walker(context, _Analysis(context), rules).walk(module)
    context.walked = True
    return AnalysedFile(context, rules)


def lint_module(
    module: cst.Module,
    source: str,
    path: str,
    rule_classes: Sequence[type[Rule]],
    options: Mapping[str, object] | None = None,
    *,
    honor_noqa: bool = True,
    python_ast: ast.Module | None = None,
    judge_syntax: bool = False,
    deadline: Deadline | None = None,
    reviewers: Sequence[type[Rule]] = (),
    selected_codes: frozenset[str] = frozenset(),
    flow_memory: FlowMemory | None = None,
    syntax_check: SyntaxCheck | None = None,
    exemption: FileExemption | None = None,
) -> list[Diagnostic]:
    """Run the rules over a parsed module; `source` must be the text it was parsed from.

    `honor_noqa=False` keeps findings on `# noqa` lines, for front ends (flake8) that apply
    suppression comments themselves; a file-level `# torchdevlint: noqa` applies always.
    `reviewers` (rules about `# noqa` comments) then judge the directives, knowing the
    `selected_codes`. With `judge_syntax`, the running Python parses the source too where it
    matters (see `lint_source`) and InvalidSource is raised if it cannot.
    `exemption` is the file's `# torchdevlint: noqa` where `source` is a piece of it.
    Raises AnalysisTimeout past the deadline.
    """
    analysed = analyse_module(module, path, rule_classes, options, deadline=deadline, source=source,
                              flow_memory=flow_memory)
    try:
        reports = analysed.reports
        reviewing = bool(reviewers) and honor_noqa and mentions_noqa(source)
        if judge_syntax and python_ast is None and (reports or reviewing or analysed.context.may_be_newer_syntax):
            python_ast = (syntax_check or check_syntax)(source, path,
                                                        newer_syntax=analysed.context.may_be_newer_syntax)
        if not reports and not reviewing:
            return []
        if exemption is None:
            exemption = file_exemption(source)
        suppressed: set[tuple[int, str]] = set()
        diagnostics: list[Diagnostic] = []
        if reports:
            with room_for_nesting():
                diagnostics = _diagnostics(reports, module, source, path, analysed.context.parents, python_ast,
                                           honor_noqa, exemption, suppressed)
        if reviewing:
            diagnostics.extend(_reviewed(reviewers, source, path, exemption, suppressed, selected_codes))
            diagnostics.sort(key=lambda d: (d.start.line, d.start.column, d.code))
        return diagnostics
    finally:
        analysed.context.release()


def _diagnostics(reports: Sequence[Report], module: cst.Module, source: str, path: str,
                 parents: dict[int, cst.CSTNode], python_ast: ast.Module | None,
                 honor_noqa: bool, exemption: FileExemption, suppressed: set[tuple[int, str]]) -> list[Diagnostic]:
    """The reports placed in the source, less those a `# noqa` turns off (noted in `suppressed`)."""
    # Only files with findings pay for positions, and only for the statements they are in.
    positions = StatementPositions(module, source, parents, python_ast)
    offsets = LineIndex(source)
    lines = source_lines(source)
    # A finding's noqa directive may sit on a later line (after a backslash continuation or a
    # multi-line string); the map is made only for files that mention noqa.
    moved = (noqa_lines(source) or {}) if honor_noqa and mentions_noqa(source) else {}
    # Lines a comment says fail on purpose ("# this will error"): what the author shows.
    shown_failing = expected_failure_lines(source)
    diagnostics: list[Diagnostic] = []
    seen: set[tuple[str, int, int]] = set()
    # A rule may attach one fix to many findings (TDL203 routes every CUDA literal through one
    # variable): it is placed in the text once, not once per finding.
    placed: dict[int, Fix] = {}
    for report in reports:
        if exemption is not NO_EXEMPTION and exemption.covers(report.rule.code):
            continue
        code_range = positions[report.node]
        start = Location(code_range.start.line, code_range.start.column + 1)
        end = Location(code_range.end.line, code_range.end.column + 1)
        key = (report.rule.code, start.line, start.column)
        if key in seen or start.line in shown_failing:
            continue
        seen.add(key)
        noqa_line = moved.get(start.line, start.line)
        line_text = lines[noqa_line - 1] if noqa_line - 1 < len(lines) else ""
        if honor_noqa and is_suppressed(line_text, report.rule.code):
            suppressed.add((noqa_line, report.rule.code))
            continue
        fix = None
        if report.fix is not None:
            fix = placed.get(id(report.fix))
            if fix is None:
                fix = placed[id(report.fix)] = to_text_fix(report.fix, positions.__getitem__, offsets, module, source)
        diagnostics.append(
            Diagnostic(report.rule.code, report.rule.slug, report.message, path, start, end, fix)
        )
    diagnostics.sort(key=lambda d: (d.start.line, d.start.column, d.code))
    return diagnostics


def _reviewed(reviewers: Sequence[type[Rule]], source: str, path: str, exemption: FileExemption,
              suppressed: set[tuple[int, str]], selected_codes: frozenset[str]) -> list[Diagnostic]:
    """What the rules about `# noqa` comments find in the file's directives."""
    from torchdevlint.registry import all_rules  # the registry imports every rule: only when asked

    review = SuppressionReview(
        directives=tuple(noqa_directives(source)),
        suppressed=frozenset(suppressed),
        selected_codes=selected_codes,
        known_codes=frozenset(rule.code for rule in all_rules()),
        exemption=exemption,
        lines=tuple(source_lines(source)),
    )
    if not review.directives:
        return []
    offsets = LineIndex(source)
    found: list[Diagnostic] = []
    for reviewer in reviewers:
        if exemption.covers(reviewer.code):
            continue
        for finding in reviewer.review_suppressions(review):
            if is_suppressed(review.lines[finding.line - 1], reviewer.code):
                continue
            fix = None
            if finding.fix is not None:
                start, end, content = finding.fix
                fix = Fix(reviewer.fix_title or "", Applicability.SAFE if finding.fix_is_safe else Applicability.UNSAFE,
                          (Edit(offsets.offset(finding.line, start), offsets.offset(finding.line, end), content),))
            found.append(Diagnostic(reviewer.code, reviewer.slug, finding.message, path,
                                    Location(finding.line, finding.start + 1), Location(finding.line, finding.end + 1),
                                    fix))
    return found


def mentions_torch(source: str) -> bool:
    return RELEVANCE_MARKER in source


def lint_source(
    source: str,
    path: str,
    rule_classes: Sequence[type[Rule]],
    options: Mapping[str, object] | None = None,
    *,
    honor_noqa: bool = True,
    deadline: Deadline | None = None,
    parse: ModuleParser = cst.parse_module,
    flow_memory: FlowMemory | None = None,
    syntax_check: SyntaxCheck | None = None,
) -> list[Diagnostic]:
    """Parse and lint; raises InvalidSource for code this Python cannot parse, and
    AnalysisTimeout past the deadline. An editor passes the parser and the flows it keeps
    for the buffer between versions, and the syntax check that keeps its last parse."""
    if not mentions_torch(source):
        return []
    selected_codes = frozenset(rule.code for rule in rule_classes)
    reviewers = [rule for rule in rule_classes if rule.reviews_suppressions]
    rule_classes = [rule for rule in rules_that_can_fire(source, rule_classes) if not rule.reviews_suppressions]
    # Megabytes of numbers in a literal are data, and an expression of hundreds of kilobytes
    # is generated: both are parsed blank (see `data_literals`), at the same offsets, so such a
    # file costs what its code costs, Python's own parse included.
    blanked = blank_for_parsing(source)
    if not rule_classes and not (reviewers and mentions_noqa(source)):
        check_syntax(blanked.text, path)
        return []
    if parse is cst.parse_module:
        pieces = needs_pieces(blanked.text)
        if pieces is not None:
            diagnostics = _lint_in_pieces(pieces, blanked.text, path, rule_classes, options, honor_noqa=honor_noqa,
                                          deadline=deadline, reviewers=reviewers, selected_codes=selected_codes)
            return _withheld_over_blanks(diagnostics, blanked)
    # Parse once: LibCST agrees with the running Python on what is valid, except for syntax
    # newer than it, which the walk notes and LibCST alone then lints. The stdlib parser runs
    # where there are findings (their positions come from its tree), where the walk noted newer
    # syntax (a real syntax error beside it is still one) or where LibCST fails (for Python's
    # own message).
    try:
        module = parse(blanked.text)
    except cst.ParserSyntaxError:
        legacy = [rule for rule in rule_classes if rule.reads_legacy_syntax]
        found = _lint_legacy_syntax(blanked.text, path, rule_classes, legacy, options, honor_noqa=honor_noqa,
                                    deadline=deadline, reviewers=reviewers, selected_codes=selected_codes) \
            if legacy else None
        if found is not None:
            return _withheld_over_blanks(found, blanked)
        check_syntax(blanked.text, path, newer_syntax=False)  # LibCST cannot read it: not newer, wrong
        raise
    diagnostics = lint_module(module, blanked.text, path, rule_classes, options, honor_noqa=honor_noqa,
                              judge_syntax=True, deadline=deadline, reviewers=reviewers,
                              selected_codes=selected_codes, flow_memory=flow_memory,
                              syntax_check=syntax_check)
    if not diagnostics and _may_nest_past_cpythons_limit(blanked.text):
        # LibCST reads brackets nested deeper than CPython's parser allows (it keeps redundant
        # parentheses on one node): code that runs nowhere, which only Python's parse tells.
        (syntax_check or check_syntax)(blanked.text, path)
    return _withheld_over_blanks(diagnostics, blanked)


def _lint_legacy_syntax(source: str, path: str, rule_classes: Sequence[type[Rule]], legacy: Sequence[type[Rule]],
                        options: Mapping[str, object] | None, *, honor_noqa: bool, deadline: Deadline | None,
                        reviewers: Sequence[type[Rule]], selected_codes: frozenset[str]) -> list[Diagnostic] | None:
    """A file that parses once its pre-Python-3.7 `async=` arguments are read as `non_blocking=`
    (see `legacy_syntax`): linted so, its findings placed in the original text, with one
    finding of each legacy rule per such argument. None where that does not make it parse."""
    repair = legacy_syntax.repaired(source)
    if repair is None:
        return None
    try:
        module = cst.parse_module(repair.text)
        check_syntax(repair.text, path, newer_syntax=False)
    except (cst.ParserSyntaxError, InvalidSource):
        return None
    exemption = file_exemption(source)
    lines = source_lines(source)
    others = [rule for rule in rule_classes if rule not in legacy]
    found = lint_module(module, repair.text, path, others, options, honor_noqa=honor_noqa, judge_syntax=False,
                        deadline=deadline, reviewers=reviewers, selected_codes=selected_codes,
                        exemption=exemption) if others else []
    diagnostics = [_in_the_original(diagnostic, repair) for diagnostic in found]
    for rule in legacy:
        if exemption.covers(rule.code):
            continue
        for keyword in repair.keywords:
            if honor_noqa and is_suppressed(lines[keyword.line - 1] if keyword.line - 1 < len(lines) else "", rule.code):
                continue
            end = keyword.offset + len(legacy_syntax.OLD_NAME)
            fix = Fix(rule.fix_title or "", Applicability.SAFE,
                      (Edit(keyword.offset, end, legacy_syntax.NEW_NAME),)) if keyword.renamed_by_pytorch else None
            message = rule.message if keyword.renamed_by_pytorch else legacy_syntax.OTHER_CALLEE_MESSAGE
            diagnostics.append(Diagnostic(rule.code, rule.slug, message, path,
                                          Location(keyword.line, keyword.column + 1),
                                          Location(keyword.line, keyword.column + 1 + len(legacy_syntax.OLD_NAME)),
                                          fix))
    diagnostics.sort(key=lambda d: (d.start.line, d.start.column, d.code))
    return diagnostics


def _in_the_original(diagnostic: Diagnostic, repair: legacy_syntax.RepairedText) -> Diagnostic:
    fix = diagnostic.fix
    if fix is not None:
        fix = replace(fix, edits=tuple(replace(edit, start=repair.original_offset(edit.start),
                                               end=repair.original_offset(edit.end)) for edit in fix.edits))
    return replace(diagnostic, fix=fix,
                   start=replace(diagnostic.start,
                                 column=repair.original_column(diagnostic.start.line, diagnostic.start.column)),
                   end=replace(diagnostic.end, column=repair.original_column(diagnostic.end.line, diagnostic.end.column)))


def _withheld_over_blanks(diagnostics: list[Diagnostic], blanked: BlankedSource) -> list[Diagnostic]:
    if not blanked.spans:
        return diagnostics
    return [replace(d, fix=None, fix_withheld="it would edit a long literal or expression, which is not analysed")
            if d.fix is not None and any(blanked.touches(edit.start, edit.end) for edit in d.fix.edits) else d
            for d in diagnostics]


def _lint_in_pieces(pieces: Sequence[Piece], source: str, path: str, rule_classes: Sequence[type[Rule]],
                    options: Mapping[str, object] | None, *, honor_noqa: bool, deadline: Deadline | None,
                    reviewers: Sequence[type[Rule]], selected_codes: frozenset[str]) -> list[Diagnostic]:
    """Each piece (see `pieces`) parsed and linted alone, after the file's earlier imports; its
    findings placed back in the file. A file-level `# torchdevlint: noqa` covers every piece."""
    exemption = file_exemption(source)
    diagnostics: list[Diagnostic] = []
    for piece in pieces:
        text = piece.header + source[piece.start:piece.end]
        header_lines = piece.header.count("\n")
        line_shift = piece.line - 1 - header_lines
        offset_shift = piece.start - len(piece.header)
        try:
            module = cst.parse_module(text)
        except cst.ParserSyntaxError as error:
            check_syntax(text, path, newer_syntax=False)  # Python's own message, at the piece's line
            raise InvalidSource(f"syntax error: {error.message}", error.raw_line + line_shift,
                                error.raw_column + 1) from None
        try:
            found = lint_module(module, text, path, rule_classes, options, honor_noqa=honor_noqa, judge_syntax=True,
                                deadline=deadline, reviewers=reviewers, selected_codes=selected_codes,
                                exemption=exemption)
        except InvalidSource as error:
            raise InvalidSource(error.message, None if error.line is None else error.line + line_shift,
                                error.column) from None
        for diagnostic in found:
            if diagnostic.start.line <= header_lines:
                continue  # the header's own lines: found where the import is
            fix = diagnostic.fix
            if fix is not None:
                if any(edit.start < len(piece.header) for edit in fix.edits):
                    fix = None  # an edit of the imports in front: not the file's text here
                else:
                    fix = replace(fix, edits=tuple(replace(edit, start=edit.start + offset_shift,
                                                           end=edit.end + offset_shift) for edit in fix.edits))
            diagnostics.append(replace(
                diagnostic, fix=fix,
                start=replace(diagnostic.start, line=diagnostic.start.line + line_shift),
                end=replace(diagnostic.end, line=diagnostic.end.line + line_shift)))
    return diagnostics


# CPython's tokenizer refuses brackets nested deeper than this ("too many nested parentheses").
_CPYTHON_BRACKET_LEVELS = 200
_BRACKET = re.compile(r"[()\[\]{}]")


def _may_nest_past_cpythons_limit(source: str) -> bool:
    """Brackets nest as deep as CPython refuses somewhere in the text (strings and comments
    counted too: at worst, Python's own parse runs for nothing)."""
    if sum(source.count(opening) for opening in "([{") < _CPYTHON_BRACKET_LEVELS:
        return False
    depth = 0
    for bracket in _BRACKET.finditer(source):
        if bracket.group() in "([{":
            depth += 1
            if depth >= _CPYTHON_BRACKET_LEVELS:
                return True
        elif depth:
            depth -= 1
    return False


class InvalidSource(Exception):
    """Source the running Python cannot parse: a syntax error, or syntax newer than it knows."""

    def __init__(self, message: str, line: int | None, column: int | None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


# Limits of CPython's parser, not of a Python version: code past them runs nowhere.
_PARSER_LIMITS = ("too many nested parentheses", "too many statically nested blocks",
                  "too many levels of indentation")


def check_syntax(source: str, path: str, *, newer_syntax: bool | None = None) -> ast.Module | None:
    """The running Python's tree of `source`, or None where only a newer Python reads it.

    The stdlib parser is the judge of what this Python accepts (at a tenth of LibCST's cost).
    Code it refuses that LibCST reads, using syntax a newer Python added, is linted from
    LibCST's tree alone, as ruff lints code of any version. Anything else it refuses is a syntax
    error (InvalidSource). A caller that parsed with LibCST says what it found (`newer_syntax`,
    as the walk noted it); otherwise LibCST parses and looks here.
    """
    try:
        # SyntaxWarnings about the user's code ("is" with a literal...) are not ours to print.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(source, path)
    except SyntaxError as error:
        message = error.msg
        if not any(limit in message for limit in _PARSER_LIMITS):
            if newer_syntax is None:
                try:
                    newer_syntax = uses_newer_syntax(cst.parse_module(source))
                except cst.ParserSyntaxError:
                    newer_syntax = False
            if newer_syntax:
                return None
        raise InvalidSource(f"syntax error: {message}", error.lineno, error.offset) from None
    except ValueError as error:  # null bytes and the like
        raise InvalidSource(f"cannot parse: {error}", None, None) from None


def rules_that_can_fire(source: str, rule_classes: Sequence[type[Rule]]) -> list[type[Rule]]:
    return [
        rule
        for rule in rule_classes
        if (not rule.requires_any_text or any(text in source for text in rule.requires_any_text))
        and (not rule.requires_also_any_text or any(text in source for text in rule.requires_also_any_text))
    ]
