"""Code written for a Python that allowed what this one refuses, read as it was meant.

PyTorch before 0.4 spelled the asynchronous copy's argument `async` (`x.cuda(async=True)`),
which has been a keyword since Python 3.7: such a file is a syntax error today, and every
device bug in it goes unseen. Where that argument is all that stops the file from parsing,
the engine reads it with the argument's new name, `non_blocking`, and reports each one
(TDL038), with the rename as its fix.
"""

from __future__ import annotations

import io
import tokenize
from dataclasses import dataclass

OLD_NAME = "async"
NEW_NAME = "non_blocking"
# The methods whose `async` argument PyTorch 0.4 renamed `non_blocking`: only there is the
# rename the fix (another function's `async=` is read the same way, but not rewritten).
RENAMED_IN = frozenset({"cuda", "to", "copy_", "type"})
# Another function's `async=` (the project's own `ReplayWrapper(..., async=True)`): a syntax
# error too, but its new name is that function's to choose.
OTHER_CALLEE_MESSAGE = "`async=` is a syntax error since Python 3.7: rename this argument where its function is defined"


@dataclass(frozen=True)
class LegacyKeyword:
    """One `async=` keyword argument of a call."""

    offset: int  # code points into the text
    line: int
    column: int  # 0-based, in code points
    # The method called (`cuda`), where the call names one.
    callee: str | None

    @property
    def renamed_by_pytorch(self) -> bool:
        return self.callee in RENAMED_IN


@dataclass(frozen=True)
class RepairedText:
    text: str
    keywords: tuple[LegacyKeyword, ...]

    def original_offset(self, offset: int) -> int:
        """An offset into the repaired text, as an offset into the original."""
        return _before_renames(offset, [keyword.offset for keyword in self.keywords])

    def original_column(self, line: int, column: int) -> int:
        """A 1-based column of a line of the repaired text, as a column of the original."""
        return _before_renames(column, [keyword.column + 1 for keyword in self.keywords if keyword.line == line])


def _before_renames(position: int, starts: list[int]) -> int:
    """A position in the renamed text, in the original one, given where each renamed word
    starts in the original (in order): a position inside a renamed word is its start's, or
    as far into it as the old word goes."""
    shift = len(NEW_NAME) - len(OLD_NAME)
    moved = 0
    for start in starts:
        renamed_start = start + moved
        if position <= renamed_start:
            break
        if position < renamed_start + len(NEW_NAME):
            return start + min(position - renamed_start, len(OLD_NAME))
        moved += shift
    return position - moved


def repaired(text: str) -> RepairedText | None:
    """The text with each call's `async=` keyword renamed `non_blocking=`; None where it has none
    (or cannot be tokenized)."""
    if OLD_NAME not in text:
        return None
    keywords = _legacy_keywords(text)
    if not keywords:
        return None
    pieces: list[str] = []
    last = 0
    for keyword in keywords:
        pieces.append(text[last:keyword.offset])
        pieces.append(NEW_NAME)
        last = keyword.offset + len(OLD_NAME)
    pieces.append(text[last:])
    return RepairedText("".join(pieces), tuple(keywords))


def _legacy_keywords(text: str) -> list[LegacyKeyword]:
    line_starts = [0]
    for line in text.splitlines(keepends=True):
        line_starts.append(line_starts[-1] + len(line))
    found: list[LegacyKeyword] = []
    # Each open bracket: whether it opens a call's arguments, and the method it calls.
    brackets: list[tuple[bool, str | None]] = []
    previous: list[tokenize.TokenInfo] = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return []
    for index, token in enumerate(tokens):
        if token.type in (tokenize.NL, tokenize.COMMENT, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            continue
        if token.type == tokenize.OP and token.string in "([{":
            before = previous[-1] if previous else None
            before_that = previous[-2] if len(previous) > 1 else None
            is_call = token.string == "(" and before is not None and (
                (before.type == tokenize.NAME and not (before_that is not None and before_that.string in ("def", "class"))
                 and before.string not in _KEYWORDS_BEFORE_BRACKETS)
                or before.string in (")", "]"))
            brackets.append((is_call, before.string if is_call and before is not None and before.type == tokenize.NAME
                             else None))
        elif token.type == tokenize.OP and token.string in ")]}":
            if brackets:
                brackets.pop()
        elif token.type == tokenize.NAME and token.string == OLD_NAME and brackets and brackets[-1][0] \
                and previous and previous[-1].string in ("(", ",") \
                and index + 1 < len(tokens) and tokens[index + 1].string == "=":
            row, column = token.start
            found.append(LegacyKeyword(line_starts[row - 1] + column, row, column, brackets[-1][1]))
        previous.append(token)
    return found


# Words a bracket can follow that make it no call: `if (`, `in (`, `return (`.
_KEYWORDS_BEFORE_BRACKETS = frozenset({"if", "elif", "while", "for", "in", "not", "and", "or", "return", "yield",
                                       "else", "assert", "del", "import", "from", "as", "is", "lambda", "with",
                                       "await"})
