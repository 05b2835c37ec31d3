"""Where to cut a file too big to analyse at once: between its top-level statements.

LibCST's tree of a module costs several hundred times the module's text, and Python's own
parse about two hundred times, so a generated file of a quarter of a million assignments
(6.5 MB) took over 4 GB before any rule ran. A file of more code than `PIECEWISE_ABOVE` is
therefore linted in pieces of whole top-level statements (`engine.lint_source`), each parsed
and analysed alone after the imports of the pieces before it, so that `torch` still names
torch. Memory is then what one piece costs, whatever the file's size. What one piece binds
is unknown in the next (a device chosen in one piece, a model moved in another), so a finding
that needs both is not seen; the docs say so.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass

# Characters of code (long literals already blanked) past which a file is linted in pieces.
PIECEWISE_ABOVE = 1_000_000
# Or top-level statements: the flow keeps the bindings before each statement of a body, so a
# module of ten thousand assignments cost 2.6 GB whole. Only a file of more lines, and more
# lines starting at the margin, than this is counted (the tokenizer's pass costs about a
# second a megabyte).
PIECEWISE_STATEMENTS_ABOVE = 2_000
# At most this much text, and this many top-level statements, in a piece: the flow keeps the
# bindings before each statement, so a piece's cost grows with the square of its statements.
PIECE_CHARACTERS = 100_000
PIECE_STATEMENTS = 1_000

# A line that starts with code at the margin: each top-level statement starts on one, so their
# count bounds the statements without the tokenizer's pass over a long module of classes.
_AT_COLUMN_ZERO = re.compile(r"^[^\s#]", re.MULTILINE)

# Keywords that continue the compound statement above them at the same indentation.
_CONTINUATIONS = frozenset({"else", "elif", "except", "finally"})


@dataclass(frozen=True)
class Piece:
    """Top-level statements `start`..`end` (character offsets into the file) from `line` on,
    with the file's earlier top-level imports (`header`) to parse in front of them."""

    start: int
    end: int
    line: int
    header: str
    # How many top-level statements come before the piece's first.
    statement_index: int = 0


def needs_pieces(source: str) -> list[Piece] | None:
    """The pieces to lint `source` in, where it is too big to analyse at once; None where it
    is linted whole."""
    if len(source) <= PIECEWISE_ABOVE and (source.count("\n") <= PIECEWISE_STATEMENTS_ABOVE or len(
            _AT_COLUMN_ZERO.findall(source)) <= PIECEWISE_STATEMENTS_ABOVE):
        return None  # too few lines, or too few that start at the margin, to hold so many statements
    cut = cut_into_pieces(source)
    if cut is None or len(cut) < 2:
        return None
    if len(source) <= PIECEWISE_ABOVE and cut[-1].statement_index <= PIECEWISE_STATEMENTS_ABOVE - PIECE_STATEMENTS:
        return None  # many lines, few statements (a large module of classes and functions)
    return cut


def cut_into_pieces(source: str) -> list[Piece] | None:
    """The pieces of `source`; None where its tokens do not read (the whole file is parsed
    then, and the parser says what is wrong)."""
    if "\r" in source.replace("\r\n", ""):
        return None  # a lone carriage return ends a line for some readers and not others
    line_offsets = _line_offsets(source)
    try:
        starts, imports = _top_level_statements(source, line_offsets)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    pieces: list[Piece] = []
    header: list[str] = []
    first = 0
    while first < len(starts):
        last = first + 1
        begin = line_offsets[starts[first] - 1]
        while last < len(starts) and last - first < PIECE_STATEMENTS \
                and line_offsets[starts[last] - 1] - begin < PIECE_CHARACTERS:
            last += 1
        end = line_offsets[starts[last] - 1] if last < len(starts) else len(source)
        pieces.append(Piece(begin, end, starts[first], "".join(header), first))
        for line in starts[first:last]:
            statement = imports.get(line)
            if statement is not None:
                header.append(statement)
        first = last
    if pieces and pieces[0].start > 0:
        # Comments and blank lines before the first statement belong to the first piece.
        pieces[0] = Piece(0, pieces[0].end, 1, "")
    return pieces


def _top_level_statements(source: str, line_offsets: list[int]) -> tuple[list[int], dict[int, str]]:
    """The first line of each top-level statement a piece may start at, and the text (one
    logical line) of each top-level import, by its first line."""
    starts: list[int] = []
    imports: dict[int, str] = {}
    depth = 0
    at_statement_start = True
    after_decorator = False
    import_start: tuple[int, int] | None = None
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        kind = token.type
        if kind == tokenize.INDENT:
            depth += 1
            continue
        if kind == tokenize.DEDENT:
            depth -= 1
            continue
        if kind in (tokenize.NL, tokenize.COMMENT, tokenize.ENCODING, tokenize.ENDMARKER):
            continue
        if kind == tokenize.NEWLINE:
            if import_start is not None:
                first_line, last_line = import_start[0], token.end[0]
                end = line_offsets[last_line] if last_line < len(line_offsets) else len(source)
                statement = source[line_offsets[first_line - 1]:end]
                imports[first_line] = statement if statement.endswith("\n") else statement + "\n"
                import_start = None
            at_statement_start = True
            continue
        if at_statement_start:
            at_statement_start = False
            if depth == 0:
                continues = kind == tokenize.NAME and token.string in _CONTINUATIONS
                if not continues and not after_decorator:
                    starts.append(token.start[0])
                after_decorator = kind == tokenize.OP and token.string == "@"
                if kind == tokenize.NAME and token.string in ("import", "from") and token.start[1] == 0:
                    import_start = token.start
    return starts, imports


def _line_offsets(source: str) -> list[int]:
    """The character offset each line starts at (1-based lines at index line - 1)."""
    offsets = [0]
    position = source.find("\n")
    while position != -1:
        offsets.append(position + 1)
        position = source.find("\n", position + 1)
    return offsets
