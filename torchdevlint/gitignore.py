"""`.gitignore` (and `.ignore`, `.git/info/exclude`) as git reads them, for folder walks.

A walk skips what git would not track, as ruff and ripgrep do: a run's code snapshots
(`wandb/run-*/files/`), generated code, vendored copies. Each folder's own ignore files apply
below it, a deeper file's patterns win over a shallower one's, the last matching pattern of a
file wins, and `!` re-includes. Ignore files are read from the repository's top folder down
(the folder holding `.git`; without one, from the filesystem's root), so a walk that starts
inside a repository honours the patterns above it too. The user's global git excludes file
(`core.excludesFile`) is not read: finding it means running git.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

IGNORE_FILE_NAMES = (".gitignore", ".ignore")


@dataclass(frozen=True)
class IgnorePattern:
    regex: re.Pattern[str]
    negated: bool
    directories_only: bool


@dataclass(frozen=True)
class IgnoreFile:
    # The folder the patterns are relative to, as an absolute path ending in a separator.
    base: str
    patterns: tuple[IgnorePattern, ...]

    def verdict(self, relative: str, is_folder: bool) -> bool | None:
        """True (ignored), False (re-included by `!`) or None (no pattern matches)."""
        for pattern in reversed(self.patterns):
            if pattern.directories_only and not is_folder:
                continue
            if pattern.regex.match(relative):
                return not pattern.negated
        return None


def _segment_regex(segment: str) -> str:
    """One path segment of a pattern: `*` and `?` never cross a `/`; `[...]` is a class."""
    out: list[str] = []
    index = 0
    while index < len(segment):
        char = segment[index]
        if char == "\\" and index + 1 < len(segment):
            out.append(re.escape(segment[index + 1]))
            index += 2
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = segment.find("]", index + 2 if segment[index + 1:index + 2] in ("!", "^", "]") else index + 1)
            if end == -1:
                out.append(re.escape(char))
            else:
                body = segment[index + 1:end]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                index = end + 1
                continue
        else:
            out.append(re.escape(char))
        index += 1
    return "".join(out)


def compile_pattern(line: str) -> IgnorePattern | None:
    """A pattern line of an ignore file, or None for blank lines and comments."""
    line = line.rstrip("\r\n")
    # Trailing spaces are dropped unless escaped with a backslash.
    stripped = line.rstrip(" ")
    if stripped.endswith("\\") and len(stripped) < len(line):
        stripped += " "
    line = stripped
    if not line or line.startswith("#"):
        return None
    negated = line.startswith("!")
    if negated or line.startswith(("\\!", "\\#")):
        line = line[1:]
    directories_only = line.endswith("/")
    line = line.rstrip("/")
    if not line:
        return None
    # A slash at the start or in the middle anchors the pattern to the ignore file's folder;
    # otherwise it matches a name at any depth.
    anchored = "/" in line
    segments = line.lstrip("/").split("/")
    parts: list[str] = []
    for position, segment in enumerate(segments):
        last = position == len(segments) - 1
        if segment == "**":
            parts.append(".*" if last else "(?:[^/]*/)*")
        else:
            parts.append(_segment_regex(segment) + ("" if last else "/"))
    prefix = "" if anchored else "(?:.*/)?"
    return IgnorePattern(re.compile(f"^{prefix}{''.join(parts)}$", re.DOTALL), negated, directories_only)


def read_ignore_file(path: str, base: str) -> IgnoreFile | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.readlines()
    except OSError:
        return None
    patterns = tuple(pattern for pattern in map(compile_pattern, lines) if pattern is not None)
    return IgnoreFile(base, patterns) if patterns else None


class GitIgnores:
    """What the ignore files say about paths met in a walk; each folder's files are read once."""

    def __init__(self) -> None:
        self._chains: dict[str, tuple[IgnoreFile, ...]] = {}

    def _chain(self, folder: str) -> tuple[IgnoreFile, ...]:
        """The ignore files that apply inside `folder`, shallowest first."""
        known = self._chains.get(folder)
        if known is not None:
            return known
        base = folder if folder.endswith(os.sep) else folder + os.sep
        own = [found for name in IGNORE_FILE_NAMES
               if (found := read_ignore_file(os.path.join(folder, name), base)) is not None]
        parent = os.path.dirname(folder)
        if os.path.isdir(os.path.join(folder, ".git")):
            # The repository's top: nothing above it applies, but its own exclude file does.
            info = read_ignore_file(os.path.join(folder, ".git", "info", "exclude"), base)
            chain: tuple[IgnoreFile, ...] = ((info,) if info is not None else ()) + tuple(own)
        elif parent == folder:
            chain = tuple(own)
        else:
            chain = self._chain(parent) + tuple(own)
        self._chains[folder] = chain
        return chain

    def is_ignored(self, path: str, is_folder: bool) -> bool:
        """Whether git would ignore `path` (judged by the files of the folders above it)."""
        absolute = os.path.abspath(path)
        for ignore_file in reversed(self._chain(os.path.dirname(absolute))):
            if not absolute.startswith(ignore_file.base):
                continue
            relative = absolute[len(ignore_file.base):].replace(os.sep, "/")
            verdict = ignore_file.verdict(relative, is_folder)
            if verdict is not None:
                return verdict
        return False
