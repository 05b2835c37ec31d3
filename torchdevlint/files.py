"""Which files a run lints, and the settings of each: paths named on the command line, and
folders walked for them (Python files and notebooks by default: `include` and
`extend-include` say which), skipping what `exclude`, `extend-exclude` and git's ignore files
leave out."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

from torchdevlint.diagnostics import FileError
from torchdevlint.gitignore import GitIgnores
from torchdevlint.settings import Settings, SettingsFinder


def iter_python_files(paths: Sequence[str], finder: SettingsFinder, errors: list[FileError],
                      *, force_exclude: bool = False,
                      respect_gitignore: bool | None = None) -> Iterator[tuple[str, Settings]]:
    """Files named (always, unless `force_exclude` and excluded) and included files under
    folders, each with the settings that configure it.

    Problems (a missing path, an unreadable folder, standard input) are appended to `errors`.
    Each real file is yielded once, however many symlinks reach it. `respect_gitignore`
    overrides the configured `respect-gitignore`; ignore files apply to walks, never to a
    file named explicitly (pre-commit names only files git tracks).
    """
    seen: set[str] = set()
    ignores = GitIgnores()
    for raw in paths:
        path = Path(raw)
        if raw == "-":
            errors.append(FileError("-", "reading from standard input is not supported; name the files"))
            continue
        if path.is_file():
            settings = finder.for_file(path)
            if force_exclude and settings.config.excludes_file(path, settings.root):
                continue
            key = os.path.realpath(raw)
            if key not in seen:
                seen.add(key)
                yield raw, settings
            continue
        if not path.exists():
            errors.append(FileError(raw, "no such file or directory"))
            continue
        special = _special_kind(path)
        if special is not None:
            errors.append(FileError(raw, f"not a regular file or folder ({special}): not read"))
            continue
        yield from _walk_folder(path, finder, ignores, respect_gitignore, errors, seen)


def _walk_folder(folder: Path, finder: SettingsFinder, ignores: GitIgnores, respect_gitignore: bool | None,
                 errors: list[FileError], seen: set[str]) -> Iterator[tuple[str, Settings]]:
    def unreadable(error: OSError) -> None:
        errors.append(FileError(str(error.filename), f"cannot read folder: {error.strerror}"))

    for current, dirnames, filenames in os.walk(folder, onerror=unreadable):
        current_path = Path(current)
        settings = finder.for_folder(current_path)
        honour_ignores = settings.config.respect_gitignore if respect_gitignore is None else respect_gitignore
        applying = ignores if honour_ignores else None
        dirnames[:] = sorted(d for d in dirnames if not _skipped(current_path / d, True, settings, applying))
        for name in sorted(filenames):
            file_path = current_path / name
            if not settings.config.includes(file_path, settings.root) or _skipped(file_path, False, settings, applying):
                continue
            special = _special_kind(file_path)
            if special is not None:
                # Reading a FIFO would wait for a writer forever.
                errors.append(FileError(str(file_path), f"not a regular file ({special}): not read"))
                continue
            key = os.path.realpath(file_path)
            if key not in seen:
                seen.add(key)
                yield str(file_path), settings


def _special_kind(path: Path) -> str | None:
    """What `path` is when it is neither a regular file nor a folder (following links): a FIFO,
    a socket, a device. None for files, folders, and paths that cannot be examined (reading
    them reports why)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device"


def _skipped(path: Path, is_folder: bool, settings: Settings, ignores: GitIgnores | None) -> bool:
    """Whether a walk leaves `path` out: excluded, or ignored by git's files (unless None)."""
    if settings.config.is_excluded(path, settings.root):
        return True
    return ignores is not None and ignores.is_ignored(str(path), is_folder)
