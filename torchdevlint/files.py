"""Which files a run lints: paths named on the command line, and folders walked for them
(Python files and notebooks by default: `include` and `extend-include` say which)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from torchdevlint.config import Config
from torchdevlint.diagnostics import FileError


def iter_python_files(paths: Sequence[str], config: Config, root: Path, errors: list[FileError],
                      *, force_exclude: bool = False) -> Iterator[str]:
    """Files named (always, unless `force_exclude` and excluded) and included files under folders.

    Problems (a missing path, an unreadable folder, standard input) are appended to `errors`.
    Each real file is yielded once, however many symlinks reach it.
    """
    seen: set[str] = set()
    for raw in paths:
        path = Path(raw)
        if raw == "-":
            errors.append(FileError("-", "reading from standard input is not supported; name the files"))
            continue
        if path.is_file():
            if force_exclude and config.excludes_file(path, root):
                continue
            key = os.path.realpath(raw)
            if key not in seen:
                seen.add(key)
                yield raw
            continue
        if not path.exists():
            errors.append(FileError(raw, "no such file or directory"))
            continue
        yield from _walk_folder(path, config, root, errors, seen)


def _walk_folder(folder: Path, config: Config, root: Path, errors: list[FileError],
                 seen: set[str]) -> Iterator[str]:
    def unreadable(error: OSError) -> None:
        errors.append(FileError(str(error.filename), f"cannot read folder: {error.strerror}"))

    for current, dirnames, filenames in os.walk(folder, onerror=unreadable):
        current_path = Path(current)
        dirnames[:] = sorted(d for d in dirnames if not config.is_excluded(current_path / d, root))
        for name in sorted(filenames):
            file_path = current_path / name
            if not config.includes(file_path, root) or config.is_excluded(file_path, root):
                continue
            key = os.path.realpath(file_path)
            if key not in seen:
                seen.add(key)
                yield str(file_path)
