"""Re-parse an edited buffer by reusing the statements the edit left alone.

The language server re-lints a buffer after each keystroke, and `libcst.parse_module` is most of
that lint (about 55 ms of 72 ms for a 900-line file). An edit usually stays inside one function,
leaving every other statement's text as it was, so `IncrementalParser` keeps the previous
version's tree, parses only the changed region and splices it in between the reused statements.
The result is the tree `libcst.parse_module(source)` would build (`deep_equals`, the same `code`,
the same module fields); wherever that cannot be shown cheaply it parses the whole text instead.

How the splice stays exact
--------------------------
The text is cut into *units*, one per top-level statement: from the start of the statement's
first code line to the start of the next one's (the first unit also holds the module header,
the last the footer). A cut always lies just before a code line at column 0, where the tokenizer
is clean (no open bracket, string or line continuation, every block dedented). LibCST decides
three things from context at a cut:

* Which blank and comment lines before the next statement the previous compound statement keeps
  in its indented block's `footer` (those down to the last one indented as deep as the block) and
  which become the next statement's `leading_lines`. Both lie inside the previous unit, so they
  stay as they were when the previous unit is reused. At the far end of a parsed region a
  sentinel statement `pass` at column 0 stands in for the reused statement that follows: the
  region is parsed in the same context as in the whole text, and the sentinel's leading lines
  are exactly the ones the reused statement gets.
* Whether the next line continues the previous statement (`else:`, `except`, an indented line, a
  dangling decorator, an unclosed bracket or string, a trailing backslash). A region starting or
  ending like that does not parse alone, or with the sentinel, or is widened first; a region that
  fails to parse is widened by one unit on each side once, then the whole text is parsed (which
  raises the real error, if there is one).
* The module fields, which `parse_module` reads from the whole text: `default_newline` from the
  first line and `has_trailing_newline` from the last characters (both computed here), and
  `default_indent` from the first indented block (found per statement here). An
  `IndentedBlock.indent` or `Newline.value` of None means "the module's default", so reused and
  new statements are only combined when all were built with the values the whole text has.

One level down, the body of a top-level `def`, `class`, `if`, `for`, `while` or `with` (no
`else`) is cut the same way, at code lines indented as its block: an edit inside one method of a
class reparses that method, wrapped in `class _:` so it is parsed at the same indentation (only
where the block is indented by the module's default indent), with the sentinel indented as the
block when a reused statement of the block follows.

The first unit can only be reused from the front (it holds the header) and the last only from
the back (it was parsed up to the end of the text). The cuts are found once per full parse by
rendering the tree statement by statement, each piece checked against the text; where rendering
does not reproduce the text (LibCST drops a line holding only a backslash), or the text has a
byte order mark or a lone carriage return, every version is parsed whole. Reused statements are
the previous tree's own (immutable) nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst

__all__ = ["IncrementalParser"]

# Stands in for the reused statement that follows a parsed region.
_SENTINEL = "pass"
# Wraps a region of a compound statement's body, so that it is parsed at its indentation.
_WRAPPER = "class _:"
# `parse_module`'s indentation when the text has no indented block.
_FALLBACK_INDENT = "    "
# Compound statements whose first indented block is found here; any other forces a full parse.
_CLAUSED = (cst.FunctionDef, cst.ClassDef, cst.With, cst.For, cst.While, cst.If, cst.Try, cst.TryStar)
# Top-level statements whose body is cut into units of its own: one block, nothing after it.
_NESTABLE = (cst.FunctionDef, cst.ClassDef, cst.With, cst.For, cst.While, cst.If)

_Statement = cst.SimpleStatementLine | cst.BaseCompoundStatement


class _Fallback(Exception):
    """The splice cannot be shown to equal a full parse; parse the whole text."""


@dataclass
class _Version:
    """The last text that parsed, its tree, and what was worked out about it (on first use)."""

    source: str
    module: cst.Module
    # Each top-level statement's unit; None until computed, () where the text cannot be cut.
    units: tuple[str, ...] | None = None
    # Per statement: relative indent of its first indented block, "" for none, None until computed.
    first_indents: list[str | None] | None = None
    # Per statement (computed with the units): its unit cut as its body is (the head up to the
    # first statement of the body, then one unit per statement of the body); () where it is not.
    bodies: list[tuple[str, ...]] | None = None


class IncrementalParser:
    """Parses successive versions of one buffer, reusing the top-level statements an edit left alone."""

    def __init__(self, *, inside_bodies: bool = True) -> None:
        """`inside_bodies`: also reuse the statements of a top-level statement's body (one level down)."""
        self._inside_bodies = inside_bodies
        self._last: _Version | None = None
        self.last_reparsed_chars = 0
        """How many characters of the last source were parsed (the whole source, or the changed region)."""
        self.last_reused_statements = 0
        """How many statements (top-level, and of the edited statement's body) came from the previous tree."""
        self.last_fallback: str | None = None
        """Why the last call parsed the whole text; None when it spliced or the text was unchanged."""
        self.last_splice_depth: int | None = None
        """Where the last call spliced: 0 among top-level statements, 1 inside one's body; None when it did not."""

    def parse(self, source: str) -> cst.Module:
        """Returns `libcst.parse_module(source)`'s tree; raises `libcst.ParserSyntaxError` exactly when it would."""
        last = self._last
        if last is not None and source == last.source:
            self.last_reparsed_chars = 0
            self.last_reused_statements = len(last.module.body)
            self.last_fallback = None
            self.last_splice_depth = None
            return last.module
        reason = "no previous version"
        if last is not None:
            try:
                return self._splice(last, source)
            except _Fallback as why:
                reason = str(why)
            except Exception as error:  # noqa: BLE001 - e.g. RecursionError rendering a deep tree: parse it whole
                reason = f"internal error: {error!r}"
        self.last_reparsed_chars = len(source)
        self.last_reused_statements = 0
        self.last_fallback = reason
        self.last_splice_depth = None
        module = cst.parse_module(source)  # on an error the last good version stays
        self._last = _Version(source, module)
        return module

    def _splice(self, last: _Version, source: str) -> cst.Module:
        if source.startswith("\ufeff"):
            raise _Fallback("byte order mark")  # parse_module drops it: the text and the tree disagree
        if "\r" in source and source.count("\r") != source.count("\r\n"):
            raise _Fallback("lone carriage return")
        if last.module.default_newline != _default_newline(source):
            raise _Fallback("default newline differs")
        units = _units_of(last)
        if not units:
            raise _Fallback("no statements" if not last.module.body else "statements do not cut cleanly")
        n = len(units)
        # Units unchanged from the front (never the last, parsed up to the end of the text) and
        # from the back (never the first, which holds the header).
        k, a, j, b = _unchanged_ends(units, source, 0, len(source), first_from_back=1)
        if self._inside_bodies and j == k + 1 and (j == n or _ends_line(source, a, b)):
            try:
                return self._splice_body(last, source, units, k, a, b)
            except _Fallback:
                pass  # reparse the whole statement instead
        return self._splice_top(last, source, units, k, a, j, b)

    def _splice_top(self, last: _Version, source: str, units: tuple[str, ...], k: int, a: int, j: int, b: int) -> cst.Module:
        """Reparses top-level units [k, j), at [a, b) in `source`."""
        n = len(units)
        old = last.module
        old_body = old.body
        newline = old.default_newline
        parsed: cst.Module | None = None
        for attempt in range(2):
            if attempt:  # the region failed to parse: it may need one more statement on each side
                k, a, j, b = _grow(units, k, a, j, b, floor=0)
            k, a, j, b = _widen_to_cuts(source, units, k, a, j, b, indent="", floor=0)
            if k == 0 and j == n:
                raise _Fallback("edit reaches both ends")
            try:
                parsed = cst.parse_module(source[a:b] + (_SENTINEL + newline if j < n else ""))
            except Exception:  # noqa: BLE001 - any failure: the whole-text parse decides what is raised
                continue
            break
        if parsed is None:
            raise _Fallback("changed region does not parse alone")
        self.last_reparsed_chars = b - a

        body = list(parsed.body)
        sentinel = body.pop() if j < n and body else None
        if j < n and not _is_sentinel(sentinel):
            raise _Fallback("sentinel statement absorbed")
        region = source[a:b]
        if body:
            cut = _cut(parsed, body, region, _header_length(parsed), "", nest=True, at_end=j == n)
            if cut is None or (k > 0 and cut[0][0][0] != 0):
                raise _Fallback("changed region's statements do not cut at line starts")
            new_units, new_bodies = _units_and_bodies(region, cut[0])
        elif k == 0 and j < n and "".join(map(parsed.code_for_node, parsed.header)) == region:
            # Only comments and blank lines before the first reused statement: its unit takes them.
            new_units, new_bodies = (), []
        else:
            raise _Fallback("changed region holds no statement")
        if k > 0:
            # The lines before it lie in the reused unit before, as they did in the last version.
            body[0] = body[0].with_changes(leading_lines=old_body[k].leading_lines)
        following = _with_leading_lines(old_body[j], sentinel.leading_lines) if sentinel is not None else None

        trailing = _has_trailing_newline(source)
        if parsed.default_newline != newline:
            raise _Fallback("changed region's newline differs")
        if trailing != (old.has_trailing_newline if j < n else parsed.has_trailing_newline):
            raise _Fallback("trailing newline differs")
        new_indents = [_first_indent(stmt, parsed.default_indent) for stmt in body]
        indent = _old_first_indent(last, 0, k) or next(filter(None, new_indents), "")
        indent = indent or _old_first_indent(last, j, n) or _FALLBACK_INDENT
        if old.default_indent != indent:
            raise _Fallback("default indent differs")
        if any(new_indents) and parsed.default_indent != indent:
            raise _Fallback("changed region's indent differs")

        new_body: list[_Statement] = [*old_body[:k], *body]
        if following is not None:
            new_body += [following, *old_body[j + 1 :]]
        module = cst.Module(
            body=new_body,
            header=old.header if k > 0 else parsed.header,
            footer=old.footer if j < n else parsed.footer,
            encoding=old.encoding,
            default_indent=indent,
            default_newline=newline,
            has_trailing_newline=trailing,
        )
        old_indents = last.first_indents or [None] * n
        old_bodies = last.bodies or [()] * n
        if body:
            next_units = (*units[:k], *new_units, *units[j:])
            next_bodies = [*old_bodies[:k], *new_bodies, *old_bodies[j:]]
        else:  # the first reused unit takes the new header, and so does its body's head
            next_units = (region + units[j], *units[j + 1 :])
            reused = old_bodies[j]
            next_bodies = [(region + reused[0], *reused[1:]) if reused else (), *old_bodies[j + 1 :]]
        self._last = _Version(
            source,
            module,
            units=next_units,
            first_indents=[*old_indents[:k], *new_indents, *old_indents[j:]],
            bodies=next_bodies,
        )
        self.last_reused_statements = k + (n - j)
        self.last_fallback = None
        self.last_splice_depth = 0
        return module

    def _splice_body(self, last: _Version, source: str, units: tuple[str, ...], i: int, a: int, b: int) -> cst.Module:
        """Reparses part of top-level statement `i`'s body; the statement's new text is at [a, b)."""
        n = len(units)
        old = last.module
        stmt = old.body[i]
        cut = last.bodies[i] if last.bodies is not None else ()
        if not cut or not isinstance(stmt, _NESTABLE) or not isinstance(stmt.body, cst.IndentedBlock):
            raise _Fallback("not cut into its body's statements")
        head, inner = cut[0], cut[1:]
        if not source.startswith(head, a) or a + len(head) > b:
            raise _Fallback("the statement's head changed")
        block = stmt.body
        indent = block.indent if block.indent is not None else old.default_indent
        if indent != old.default_indent:
            raise _Fallback("the body's indent is not the default")
        m = len(inner)
        k, a2, j, b2 = _unchanged_ends(inner, source, a + len(head), b, first_from_back=0)
        newline = old.default_newline
        # What follows the body: a reused statement of it, the next top-level statement, or the end.
        parsed: cst.Module | None = None
        for attempt in range(2):
            if attempt:
                k, a2, j, b2 = _grow(inner, k, a2, j, b2, floor=0)
            k, a2, j, b2 = _widen_to_cuts(source, inner, k, a2, j, b2, indent=indent, floor=0)
            tail = indent + _SENTINEL + newline if j < m else _SENTINEL + newline if i + 1 < n else ""
            try:
                parsed = cst.parse_module(_WRAPPER + newline + source[a2:b2] + tail)
            except Exception:  # noqa: BLE001 - any failure: fall back
                continue
            break
        if parsed is None:
            raise _Fallback("changed region does not parse alone")

        top_sentinel = parsed.body[1] if j == m and i + 1 < n and len(parsed.body) == 2 else None
        wrapper = parsed.body[0] if len(parsed.body) == 1 + (j == m and i + 1 < n) else None
        if not isinstance(wrapper, cst.ClassDef) or not isinstance(wrapper.body, cst.IndentedBlock):
            raise _Fallback("changed region left the body")
        if j == m and i + 1 < n and not _is_sentinel(top_sentinel):
            raise _Fallback("sentinel statement absorbed")
        if wrapper.body.indent is not None or parsed.default_indent != indent or parsed.default_newline != newline:
            raise _Fallback("changed region's indent or newline differs")
        body = [_statement(node) for node in wrapper.body.body]
        sentinel = body.pop() if j < m and body else None
        if j < m and not _is_sentinel(sentinel):
            raise _Fallback("sentinel statement absorbed")
        region = source[a2:b2]
        at_end = j == m and i + 1 == n
        region_cut = _cut(parsed, body, region, 0, indent, nest=False, at_end=at_end)
        if not body or region_cut is None or region_cut[0][0][0] != 0:
            raise _Fallback("changed region's statements do not cut at line starts")
        starts = [start for start, _ in region_cut[0]]
        trailing = _has_trailing_newline(source)
        if trailing != (parsed.has_trailing_newline if at_end else old.has_trailing_newline):
            raise _Fallback("trailing newline differs")

        old_inner = [_statement(node) for node in block.body]
        body[0] = body[0].with_changes(leading_lines=old_inner[k].leading_lines)
        new_inner: list[cst.BaseStatement] = [*old_inner[:k], *body]
        if sentinel is not None:
            new_inner += [_with_leading_lines(old_inner[j], sentinel.leading_lines), *old_inner[j + 1 :]]
        new_block = block.with_changes(body=new_inner, footer=block.footer if j < m else wrapper.body.footer)
        new_body: list[_Statement] = [*old.body[:i], stmt.with_changes(body=new_block)]
        if top_sentinel is not None:
            new_body.append(_with_leading_lines(old.body[i + 1], top_sentinel.leading_lines))
            new_body += old.body[i + 2 :]
        else:
            new_body += old.body[i + 1 :]
        module = old.with_changes(
            body=new_body, footer=parsed.footer if at_end else old.footer, has_trailing_newline=trailing
        )
        bodies = list(last.bodies or [()] * n)
        bodies[i] = (head, *inner[:k], *_slices(region, starts), *inner[j:])
        self._last = _Version(
            source,
            module,
            units=(*units[:i], source[a:b], *units[i + 1 :]),
            first_indents=last.first_indents,  # the statement's first block is the one edited inside
            bodies=bodies,
        )
        self.last_reparsed_chars = b2 - a2
        self.last_reused_statements = n - 1 + k + (m - j)
        self.last_fallback = None
        self.last_splice_depth = 1
        return module


def _unchanged_ends(
    units: Sequence[str], text: str, lo: int, hi: int, *, first_from_back: int
) -> tuple[int, int, int, int]:
    """The units unchanged at the front, [0, k) ending at a, and at the back, [j, n) starting at b, of text[lo:hi]."""
    n = len(units)
    k, a = 0, lo
    while k < n - 1 and a + len(units[k]) <= hi and text.startswith(units[k], a):
        a += len(units[k])
        k += 1
    j, b = n, hi
    while j - 1 >= max(k, first_from_back):
        start = b - len(units[j - 1])
        if start < a or not text.startswith(units[j - 1], start):
            break
        j, b = j - 1, start
    return k, a, j, b


def _grow(units: Sequence[str], k: int, a: int, j: int, b: int, *, floor: int) -> tuple[int, int, int, int]:
    """The region one unit wider on each side."""
    if k > floor:
        k -= 1
        a -= len(units[k])
    if j < len(units):
        b += len(units[j])
        j += 1
    return k, a, j, b


def _widen_to_cuts(
    text: str, units: Sequence[str], k: int, a: int, j: int, b: int, *, indent: str, floor: int
) -> tuple[int, int, int, int]:
    """Moves the region's ends out until both are cuts: before a code line indented as `indent`.

    At the top level (`indent` "") the region may start at the text's start; in a body it starts
    after the head, at a code line.
    """
    n = len(units)
    while True:
        if (k > 0 or indent) and not _is_code_start(text, a, indent):
            if k <= floor:
                raise _Fallback("changed region does not start at a statement")
            k -= 1
            a -= len(units[k])
            continue
        # The next reused unit starts with a code line: the region must end with a line of its own.
        if j < n and not _ends_line(text, a, b):
            b += len(units[j])
            j += 1
            continue
        return k, a, j, b


def _ends_line(text: str, a: int, b: int) -> bool:
    """Whether text[a:b] is not empty and ends with a newline that no backslash continues."""
    return b > a and text[b - 1] == "\n" and not text.endswith(("\\\n", "\\\r\n"), a, b)


def _is_code_start(text: str, offset: int, indent: str = "") -> bool:
    """Whether a line starts at `offset` with `indent` then a token (no further indentation, comment or backslash)."""
    if offset > 0 and text[offset - 1] != "\n":
        return False
    if not text.startswith(indent, offset) or offset + len(indent) >= len(text):
        return False
    char = text[offset + len(indent)]
    return not (char.isspace() or char in "#\\")


def _default_newline(source: str) -> str:
    """`parse_module`'s default newline: the first line's (no lone carriage returns get here)."""
    end = source.find("\n")
    return "\r\n" if end > 0 and source[end - 1] == "\r" else "\n"


def _has_trailing_newline(source: str) -> bool:
    return source.endswith("\n") and not source.endswith(("\\\n", "\\\r\n"))


def _is_sentinel(stmt: cst.CSTNode | None) -> bool:
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return False
    small, trailing = stmt.body[0], stmt.trailing_whitespace
    return (
        isinstance(small, cst.Pass)
        and small.semicolon is cst.MaybeSentinel.DEFAULT
        and trailing.comment is None
        and not trailing.whitespace.value
    )


def _with_leading_lines(stmt: _Statement, lines: Sequence[cst.EmptyLine]) -> _Statement:
    """`stmt` with `lines` before it: the same object when they are equal."""
    same = len(lines) == len(stmt.leading_lines) and all(
        x.deep_equals(y) for x, y in zip(lines, stmt.leading_lines, strict=True)
    )
    return stmt if same else stmt.with_changes(leading_lines=lines)


def _statement(node: cst.BaseStatement) -> _Statement:
    if not isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
        raise _Fallback(f"unknown statement {type(node).__name__}")
    return node


def _slices(text: str, starts: Sequence[int], end: int | None = None) -> tuple[str, ...]:
    """`text` cut at `starts`: the first piece from starts[0], the last to `end` (default: the end)."""
    ends = [*starts[1:], len(text) if end is None else end]
    return tuple(text[start:stop] for start, stop in zip(starts, ends, strict=True))


def _header_length(module: cst.Module) -> int:
    return sum(len(module.code_for_node(line)) for line in module.header)


def _units_of(version: _Version) -> tuple[str, ...]:
    """The version's top-level units (and its statements' bodies cut), computed from its tree once."""
    if version.units is None:
        module = version.module
        cut = _cut(module, module.body, version.source, _header_length(module), "", nest=True, at_end=True)
        if cut and cut[0]:
            units, bodies = _units_and_bodies(version.source, cut[0])
            version.units, version.bodies = units, bodies
        else:
            version.units, version.bodies = (), []
    return version.units


def _units_and_bodies(
    text: str, entries: Sequence[tuple[int, list[int] | None]]
) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """The units of `text` (the first from 0), and each one cut at its body's statements where found."""
    starts = [0, *(start for start, _ in entries[1:])]
    ends = [*starts[1:], len(text)]
    units = tuple(text[start:end] for start, end in zip(starts, ends, strict=True))
    bodies = [
        () if inner is None else _slices(text, [start, *inner], end)
        for (_, inner), start, end in zip(entries, starts, ends, strict=True)
    ]
    return units, bodies


_Cut = tuple[list[tuple[int, list[int] | None]], int]


def _cut(
    module: cst.Module,
    stmts: Sequence[_Statement],
    text: str,
    offset: int,
    indent: str,
    *,
    nest: bool,
    at_end: bool,
) -> _Cut | None:
    """Where `stmts`, parsed as part of `module` and indented by `indent`, start their first code lines in `text`.

    Their text starts at `offset`. Returns, per statement, its code line's start and (with `nest`,
    for a statement whose body is cut too) the start of each of its body's statements; and where
    the last statement ends. None where rendering the statements does not reproduce the text or a
    statement's code line is no cut (LibCST drops a line holding only a backslash, for one).
    `at_end`: the statements end the text, so the last may render a newline the text lacks.
    """
    newline = module.default_newline
    entries: list[tuple[int, list[int] | None]] = []
    for position, stmt in enumerate(stmts):
        lead = _lines_text(stmt.leading_lines, indent, newline)
        start = offset + len(lead)
        if not text.startswith(lead, offset) or not _is_code_start(text, start, indent):
            return None
        missing_newline = at_end and position == len(stmts) - 1 and not module.has_trailing_newline
        body = _cut_body(module, stmt, text, start) if nest and not missing_newline else None
        if body is not None:
            inner, offset = body
            entries.append((start, inner))
            continue
        if indent:
            block = cst.IndentedBlock(body=[stmt], indent=indent, header=cst.TrailingWhitespace())
            code = module.code_for_node(block)[len(newline) :]
        else:
            code = module.code_for_node(stmt)
        if not text.startswith(code, offset):
            # The tokenizer added a newline at the end of the text, which the statement renders.
            if not (missing_newline and code.endswith(newline) and text.startswith(code[: -len(newline)], offset)):
                return None
        entries.append((start, None))
        offset += len(code)
    return entries, offset


def _cut_body(module: cst.Module, stmt: _Statement, text: str, start: int) -> tuple[list[int], int] | None:
    """Where the statements of top-level `stmt`'s body start in `text` and where `stmt` ends, if it is cut so."""
    if not isinstance(stmt, _NESTABLE) or getattr(stmt, "orelse", None) is not None:
        return None
    block = stmt.body
    if not isinstance(block, cst.IndentedBlock) or not block.body:
        return None
    newline = module.default_newline
    indent = block.indent if block.indent is not None else module.default_indent
    # The statement without its leading lines and with `pass` for its body's statements and footer.
    bare = module.code_for_node(
        stmt.with_changes(leading_lines=(), body=block.with_changes(body=(), footer=()))
    )
    filler = indent + "pass" + newline
    head = bare[: -len(filler)]
    if not bare.endswith(filler) or not text.startswith(head, start):
        return None
    inner = _cut(module, [_statement(node) for node in block.body], text, start + len(head), indent, nest=False, at_end=False)
    if inner is None:
        return None
    entries, end = inner
    footer = _lines_text(block.footer, indent, newline)
    if not text.startswith(footer, end):
        return None
    return [code_start for code_start, _ in entries], end + len(footer)


def _lines_text(lines: Sequence[cst.EmptyLine], indent: str, newline: str) -> str:
    """`lines` rendered inside a block indented by `indent` (as EmptyLine renders them)."""
    return "".join(
        (indent if line.indent else "")
        + line.whitespace.value
        + (line.comment.value if line.comment is not None else "")
        + (line.newline.value if line.newline.value is not None else newline)
        for line in lines
    )


def _old_first_indent(version: _Version, start: int, stop: int) -> str:
    """The first indent among the version's statements [start, stop), "" for none (each computed once)."""
    body = version.module.body
    if version.first_indents is None or len(version.first_indents) != len(body):
        version.first_indents = [None] * len(body)
    indents = version.first_indents
    for index in range(start, stop):
        found = indents[index]
        if found is None:
            found = indents[index] = _first_indent(body[index], version.module.default_indent)
        if found:
            return found
    return ""


def _first_indent(stmt: cst.CSTNode, default: str) -> str:
    """Relative indent of the first indented block in `stmt` (the first INDENT token), "" for none."""
    if isinstance(stmt, cst.SimpleStatementLine):
        return ""
    if isinstance(stmt, cst.Match):
        return stmt.indent if stmt.indent is not None else default
    if isinstance(stmt, (cst.Else, cst.Finally, cst.ExceptHandler, cst.ExceptStarHandler)):
        return _suite_indent(stmt.body, default)
    if not isinstance(stmt, _CLAUSED):
        raise _Fallback(f"unknown statement {type(stmt).__name__}")
    found = _suite_indent(stmt.body, default)
    if found:
        return found
    clauses: list[cst.CSTNode] = []
    if isinstance(stmt, (cst.For, cst.While, cst.If)) and stmt.orelse is not None:
        clauses.append(stmt.orelse)
    elif isinstance(stmt, (cst.Try, cst.TryStar)):
        clauses.extend(stmt.handlers)
        if stmt.orelse is not None:
            clauses.append(stmt.orelse)
        if stmt.finalbody is not None:
            clauses.append(stmt.finalbody)
    for clause in clauses:
        found = _first_indent(clause, default)
        if found:
            return found
    return ""


def _suite_indent(suite: cst.BaseSuite, default: str) -> str:
    if isinstance(suite, cst.IndentedBlock):
        return suite.indent if suite.indent is not None else default
    return ""
