"""Suppression comments, as flake8 and ruff read them: `# noqa` and `# noqa: TDL001, TDL004`
on a finding's first line, and a file-level `# torchdevlint: noqa` (or `# flake8: noqa`) on a
line of its own, bare or naming codes. Also where `--add-noqa` writes them."""

from __future__ import annotations

import functools
import io
import itertools
import re
import tokenize
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from torchdevlint.sourcefile import LINE_BREAK, source_lines

# A noqa directive, bare or with a colon and codes separated by commas or blanks, as ruff reads
# them. A colon with no code after it, or any other character straight after the word, is
# malformed: such a directive suppresses nothing, and a warning says so.
_NOQA = re.compile(
    r"#\s*noqa(?:(?P<colon>:\s*(?P<codes>[A-Z]+[0-9]+(?:(?:\s*,\s*|\s+)[A-Z]+[0-9]+)*)?)|(?P<other>[^\s:#]))?",
    re.IGNORECASE,
)
_CODE = re.compile(r"[A-Z]+[0-9]+", re.IGNORECASE)
_NOQA_WORD = re.compile("noqa", re.IGNORECASE)
_FILE_NOQA = re.compile(
    r"^[ \t]*#[ \t]*(?:torchdevlint|flake8)[ \t]*:[ \t]*noqa"
    r"(?:[ \t]*:[ \t]*(?P<codes>[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*))?[ \t]*$",
    re.IGNORECASE | re.MULTILINE,
)


def mentions_noqa(text: str) -> bool:
    """Whether `text` has the word at all, in any case (a whole file is not copied to ask)."""
    return _NOQA_WORD.search(text) is not None


def is_suppressed(line_text: str, code: str) -> bool:
    """True when the physical line carries a bare `# noqa` or one naming `code` (or a prefix)."""
    if not mentions_noqa(line_text):
        return False
    for match in _NOQA.finditer(line_text):
        codes = match.group("codes")
        if codes is None:
            if _is_malformed(match):
                continue  # it suppresses nothing
            return True
        for named in _CODE.findall(codes):
            if code.upper().startswith(named.upper()):
                return True
    return False


_FILE_NOQA_WITHOUT_CODES = re.compile(
    r"^[ \t]*#[ \t]*torchdevlint[ \t]*:[ \t]*noqa[ \t]*:[ \t]*$", re.IGNORECASE | re.MULTILINE)


def _is_malformed(match: re.Match[str]) -> bool:
    """A colon with no code after it, or the word run on into other text (`noqa-ish`)."""
    return match.group("other") is not None or (match.group("colon") is not None and match.group("codes") is None)


def malformed_noqa_lines(source: str) -> list[int]:
    """Lines whose comment holds a malformed noqa directive (a colon with no code after it, the
    word run on into other text) or a file-level one with a colon and no code. Such a
    directive suppresses nothing, and the user is warned, as ruff warns."""
    if not mentions_noqa(source):
        return []
    found: set[int] = set()
    for line, _, text in _comments(source):
        if _FILE_NOQA_WITHOUT_CODES.match(text) or any(_is_malformed(match) for match in _NOQA.finditer(text)):
            found.add(line)
    return sorted(found)


def noqa_lines(source: str) -> dict[int, int] | None:
    """Where a finding's `# noqa` goes, as ruff places it, for the lines where that is not the
    line itself: a line continued by a backslash, or one a multi-line string runs on from,
    takes its comment on the last line of that run (no comment can end the line before).
    None when the tokenizer refuses the source."""
    tokens = _tokens(source)
    if tokens.refused:
        return None
    lines = source_lines(source)
    joins_next = set(tokens.string_lines)
    commented = {line for line, _, _ in tokens.comments}
    for number, text in enumerate(lines, start=1):
        if number not in commented and text.endswith("\\") and number not in joins_next:
            joins_next.add(number)
    moved: dict[int, int] = {}
    for number in sorted(joins_next, reverse=True):
        target = moved.get(number + 1, number + 1)
        if target <= len(lines):
            moved[number] = target
    return moved


# Python 3.12 tokenizes f-strings in parts; 3.11 gives one STRING token.
_FSTRING_START = getattr(tokenize, "FSTRING_START", -1)
_FSTRING_END = getattr(tokenize, "FSTRING_END", -1)


@dataclass(frozen=True)
class FileExemption:
    """What a file-level comment turns off: everything, some codes (and prefixes), or nothing."""

    everything: bool = False
    codes: tuple[str, ...] = ()

    def covers(self, code: str) -> bool:
        return self.everything or any(code.startswith(named) for named in self.codes)


NO_EXEMPTION = FileExemption()


def file_exemption(source: str) -> FileExemption:
    """The file-level `# torchdevlint: noqa[: codes]` comments of `source`, real comments only
    (the same text inside a string turns nothing off)."""
    if not mentions_noqa(source):
        return NO_EXEMPTION
    candidates = {source.count("\n", 0, match.start()) + 1: match.group("codes")
                  for match in _FILE_NOQA.finditer(source)}
    if not candidates:
        return NO_EXEMPTION
    codes: list[str] = []
    for line, _, _ in _comments(source):
        if line in candidates:
            named = candidates[line]
            if named is None:
                return FileExemption(everything=True)
            codes.extend(code.upper() for code in _CODE.findall(named))
    return FileExemption(codes=tuple(codes)) if codes else NO_EXEMPTION


@dataclass(frozen=True)
class _Tokens:
    """What the tokenizer says of a source, as the readers of `# noqa` ask it."""

    # (line, column, text) of each comment, up to any point the tokenizer refuses.
    comments: tuple[tuple[int, int, str], ...]
    # Lines a string token runs on from (a multi-line string, a multi-line f-string).
    string_lines: frozenset[int]
    refused: bool
    # Refused for good (an indentation error), not for ending inside a string or brackets.
    refused_inside: bool = False
    # The tokenizer recovered from something it could not read (an unclosed quote): how it
    # goes on depends on what came before, so a chunk's answer is not the whole text's.
    recovered: bool = False


# A line that starts a statement at column 0 where the tokenizer is clean: nothing before it
# can continue into it, and the indentation is back to none.
_CHUNK_START = re.compile(r"[^\s#]")
# Each chunk of the last source tokenized, by its text (see `_tokens`).
_chunk_tokens: dict[str, _Tokens] = {}


@functools.lru_cache(maxsize=2)
def _tokens(source: str) -> _Tokens:
    """The tokenizer's comments and string lines of a source, one pass shared by every reader.

    A pass over a 1,000-line buffer costs about 30 ms, and the language server asks after each
    keystroke. So the source is tokenized in chunks, each from a line that starts at column 0
    (no blank, no comment) to the next, and a chunk whose text is unchanged since the last
    source is not tokenized again. A chunk that ends inside a string, brackets or a backslash
    continuation (a docstring line at column 0) is refused alone and joined with the next ones
    until it is not; one that tokenizes alone ends clean, so the next starts as a whole-file
    pass would, and comments and strings come out the same. Where the tokenizer had to recover
    from text it could not read (an unclosed quote), the whole source is tokenized in one pass:
    how it recovers depends on what came before."""
    lines = io.StringIO(source).readlines()
    kept, used = dict(_chunk_tokens), dict[str, _Tokens]()
    comments: list[tuple[int, int, str]] = []
    string_lines: set[int] = set()
    start = 0
    while start < len(lines):
        end, more = start + 1, 1
        while True:
            while end < len(lines) and not _CHUNK_START.match(lines[end]):
                end += 1
            text = "".join(lines[start:end])
            found = used.get(text) or kept.get(text) or _tokenize(text)
            if found.recovered:
                _keep_chunks({})
                return _tokenize(source)
            if not found.refused or found.refused_inside or end >= len(lines):
                break
            # Join the next chunks, by twice as many lines each time (a docstring of column-0 lines).
            end, more = min(len(lines), end + more), more * 2
        used[text] = found
        comments.extend((line + start, column, comment) for line, column, comment in found.comments)
        string_lines.update(line + start for line in found.string_lines)
        if found.refused:
            _keep_chunks(used)
            return _Tokens(tuple(comments), frozenset(string_lines), refused=True)
        start = end
    _keep_chunks(used)
    return _Tokens(tuple(comments), frozenset(string_lines), refused=False)


def _keep_chunks(used: dict[str, _Tokens]) -> None:
    """Keep only the chunks of the source just tokenized: memory stays one source's worth."""
    _chunk_tokens.clear()
    _chunk_tokens.update(used)


def _tokenize(text: str) -> _Tokens:
    comments: list[tuple[int, int, str]] = []
    string_lines: set[int] = set()
    # Where each f-string still open started (they nest on Python 3.12).
    open_fstrings: list[int] = []
    recovered = False
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.ERRORTOKEN:
                recovered = True
            elif token.type == tokenize.COMMENT:
                comments.append((token.start[0], token.start[1], token.string))
            elif token.type == tokenize.STRING:
                string_lines.update(range(token.start[0], token.end[0]))
            elif token.type == _FSTRING_START:
                open_fstrings.append(token.start[0])
            elif token.type == _FSTRING_END and open_fstrings:
                string_lines.update(range(open_fstrings.pop(), token.end[0]))
    except tokenize.TokenError:
        return _Tokens(tuple(comments), frozenset(string_lines), refused=True, recovered=recovered)
    except SyntaxError:
        return _Tokens(tuple(comments), frozenset(string_lines), refused=True, refused_inside=True, recovered=recovered)
    return _Tokens(tuple(comments), frozenset(string_lines), refused=False, recovered=recovered)


def _comments(source: str) -> Iterable[tuple[int, int, str]]:
    """(line, column, text) of each comment token; nothing past a point the tokenizer refuses."""
    return _tokens(source).comments


# A comment saying the code beside or below it fails on purpose, as teaching notebooks show
# an error: "(this will error)", "will raise an error", "this fails: the model is on the GPU".
_EXPECTED_FAILURE = re.compile(
    r"\b(?:will|would|should|going to|this)\s+(?:error|fail|raise|throw|crash|break)(?:s)?\b"
    r"|\bwill\s+(?:cause|give|throw|raise)\s+(?:an?\s+)?error\b"
    r"|\berrors?\s+out\b|\bexpected\s+to\s+fail\b",
    re.IGNORECASE)


def expected_failure_lines(source: str) -> frozenset[int]:
    """Lines the author marked as failing on purpose, by a comment at their end or on the
    lines just above them (down to the next blank line): their findings are what the author
    shows, not a bug to report."""
    if _EXPECTED_FAILURE.search(source) is None:
        return frozenset()
    lines = source_lines(source)
    found: set[int] = set()
    for line, column, text in _comments(source):
        if _EXPECTED_FAILURE.search(text) is None:
            continue
        if lines[line - 1][:column].strip():
            found.add(line)  # at the end of the line it is about
            continue
        # A comment line above code: the lines below it, past the block's other comment lines,
        # down to the next blank line (a notebook cell's "# this will break!" over its lines).
        below = line + 1
        while below <= len(lines) and lines[below - 1].lstrip().startswith("#"):
            below += 1
        while below <= len(lines) and lines[below - 1].strip():
            found.add(below)
            below += 1
    return frozenset(found)


@dataclass(frozen=True)
class NoqaDirective:
    """A `# noqa: CODES` in a comment; columns are 0-based code points within its line."""

    line: int
    # Where the comment starts and the directive starts and ends within the line.
    comment_start: int
    start: int
    end: int
    codes: tuple[str, ...]
    # What follows the directive in its comment (another comment, a reason, or blanks).
    tail: str


def noqa_directives(source: str) -> list[NoqaDirective]:
    """The `# noqa: CODES` directives naming codes, in real comments (bare ones name nothing)."""
    if not mentions_noqa(source):
        return []
    found = []
    for line, column, text in _comments(source):
        for match in _NOQA.finditer(text):
            codes = match.group("codes")
            if codes is None:
                continue
            found.append(NoqaDirective(line, column, column + match.start(), column + match.end(),
                                       tuple(code.upper() for code in _CODE.findall(codes)),
                                       tail=text[match.end():]))
    return found


@dataclass(frozen=True)
class SuppressionReview:
    """What a rule about `# noqa` comments is told of a file, once the findings are known."""

    directives: tuple[NoqaDirective, ...]
    # (line, code) of each finding a line's directive suppressed.
    suppressed: frozenset[tuple[int, str]]
    # The codes run on the file (a rule that cannot fire in it counts as run), and every code.
    selected_codes: frozenset[str]
    known_codes: frozenset[str]
    exemption: FileExemption
    lines: tuple[str, ...]


@dataclass(frozen=True)
class SuppressionFinding:
    """A finding on a directive; columns are 0-based within the line, and the fix, if any,
    replaces the text between two columns of that line."""

    line: int
    start: int
    end: int
    message: str
    fix: tuple[int, int, str] | None = None
    fix_is_safe: bool = True


def add_noqa(source: str, codes_by_line: Mapping[int, Sequence[str]]) -> tuple[str, int, list[int]]:
    """`source` with `# noqa: CODES` added (or merged into the line's directive) for each line's
    findings, as ruff's `--add-noqa` does, on the line `noqa_lines` gives: (new source,
    directives added or extended, lines that cannot take one: all, where the tokenizer
    refuses the source)."""
    moved = noqa_lines(source)
    if moved is None:
        return source, 0, sorted(codes_by_line)
    wanted_by_line: dict[int, list[str]] = {}
    for line, codes in sorted(codes_by_line.items()):
        wanted_by_line.setdefault(moved.get(line, line), []).extend(codes)
    directives = {directive.line: directive for directive in noqa_directives(source)}
    # Split as the tokenizer does: str.splitlines would also break at form feeds.
    breaks = [0, *(match.end() for match in LINE_BREAK.finditer(source))]
    if breaks[-1] < len(source):
        breaks.append(len(source))
    lines = [source[start:end] for start, end in itertools.pairwise(breaks)]
    changed = 0
    refused: list[int] = []
    for line, codes in sorted(wanted_by_line.items()):
        if line > len(lines):
            refused.append(line)
            continue
        text = lines[line - 1]
        body = text.rstrip("\r\n")
        ending = text[len(body):]
        existing = directives.get(line)
        if existing is not None:
            wanted = [code for code in dict.fromkeys(codes) if code not in existing.codes]
            if not wanted:
                continue
            merged = ", ".join((*existing.codes, *wanted))
            body = f"{body[:existing.start]}# noqa: {merged}{body[existing.end:]}"
        else:
            body = f"{body.rstrip()}  # noqa: {', '.join(dict.fromkeys(codes))}"
        lines[line - 1] = body + ending
        changed += 1
    return "".join(lines), changed, refused
