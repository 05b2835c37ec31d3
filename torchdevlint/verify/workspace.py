"""Where a verify run happens: a copy-on-write view of the program's folder.

A program reads its data and its sibling modules by relative paths and writes checkpoints,
logs and caches beside them. Each run (the original, the fixed program, the CPU reference)
therefore gets its own *mirror* of the working folder: real directories, and a symbolic link
for every file. Reads go through to the user's files; the first write to a file, from any
Python `open`, `os.open` or `torch.save`, replaces its link in the mirror by a private copy
(`guard_originals`, installed in the run's process), so a run never changes what the user has,
and one run never sees another's writes.

A folder too large to mirror entry by entry (a dataset, past `MIRROR_ENTRIES`) or one that is
only tooling (`.git`, virtual environments) is linked whole; the guard refuses writes that
would reach the user's files through such a link, with a message that says so.

The parent side (`mirror`) never imports torch.
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path

# Entries mirrored one by one before the remaining folders are linked whole.
MIRROR_ENTRIES = 20_000
# How a run's scratch folder is named: where the temporary folder lies inside the program's
# folder (`TMPDIR=./tmp`), the scratch folders of this run and of others are left out of the
# mirror, which would otherwise hold itself without end.
SCRATCH_PREFIX = "torchdevlint-verify-"
# Folders that hold tooling, not the program's data: linked whole.
_LINKED_WHOLE = frozenset({
    ".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv", "venv", ".tox", ".nox",
    ".mypy_cache", ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints", ".torchdevlint_cache",
})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def mirror(original: Path, into: Path, entries: int = MIRROR_ENTRIES) -> Path:
    """Build the mirror of `original` at `into` (which must not exist yet); returns `into`."""
    original = original.resolve()
    into.mkdir()
    itself = into.resolve()
    budget = entries
    folders: deque[tuple[Path, Path]] = deque([(original, into)])
    while folders:
        source, target = folders.popleft()
        try:
            children = sorted(os.scandir(source), key=lambda entry: entry.name)
        except OSError:
            continue  # an unreadable folder stays empty in the mirror, as the program would find it
        if len(children) > budget and target != into:
            # A folder of more files than are left to mirror (a dataset): linked whole instead.
            target.rmdir()
            _link(source, target)
            continue
        for child in children:
            if child.name.startswith(SCRATCH_PREFIX) or Path(child.path) == itself:
                continue
            budget -= 1
            destination = target / child.name
            if child.is_dir(follow_symlinks=False) and budget > 0 and child.name not in _LINKED_WHOLE:
                destination.mkdir()
                folders.append((Path(child.path), destination))
            else:
                _link(Path(child.path), destination)
    return into


def _link(source: Path, destination: Path) -> None:
    try:
        destination.symlink_to(source, target_is_directory=source.is_dir())
    except OSError:
        # No symbolic links here (Windows without the privilege): small files are copied,
        # the rest left out.
        if source.is_file() and source.stat().st_size <= 16 << 20:
            shutil.copy2(source, destination)


def mirrored(path: Path, original: Path, mirror_root: Path) -> Path:
    """Where `path`, inside `original`, lies in its mirror (`path` itself when outside)."""
    try:
        return mirror_root / Path(path).resolve().relative_to(original.resolve())
    except ValueError:
        return Path(path)


# -- in the run's own process ----------------------------------------------------------------


def _writes(mode: object, flags: object) -> bool:
    if isinstance(mode, str):
        return any(letter in mode for letter in "wax+")
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


def _truncates(mode: object, flags: object) -> bool:
    if isinstance(mode, str):
        return "w" in mode
    return isinstance(flags, int) and bool(flags & os.O_TRUNC)


def _inside(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root + os.sep) for root in roots)


class _Guard:
    def __init__(self, mirror_root: str, protected: tuple[str, ...], own: tuple[str, ...]) -> None:
        self.mirror_root = mirror_root
        # The run's own folders (the mirror, and the scratch folder that holds it, its output
        # files and its temporary folder), writable even where they lie inside the user's folder.
        self.own = own
        self.protected = protected

    def refuse(self, real: str) -> None:
        raise PermissionError(
            errno.EACCES,
            "torchdevlint verify keeps your files as they are: this run may not change a file outside "
            "its copy of the working folder",
            real,
        )

    def before_write(self, path: object, truncating: bool) -> None:
        if not isinstance(path, (str, bytes, os.PathLike)):
            return  # an open file descriptor: checked when it was opened
        name = os.path.abspath(os.fsdecode(path))
        if _inside(name, (self.mirror_root,)) and os.path.islink(name):
            target = os.path.realpath(name)
            if _inside(target, self.protected):
                # Copy on write: the run's own copy replaces the link to the user's file.
                os.unlink(name)
                if not truncating and os.path.isfile(target):
                    shutil.copy2(target, name)
                return
        self.check_reach(name)

    def check_reach(self, name: str) -> None:
        """Refuse a change that would land in the user's files (through a folder linked whole)."""
        parent = os.path.realpath(os.path.dirname(name))
        if _inside(parent, self.protected) and not _inside(parent, self.own):
            self.refuse(os.path.join(parent, os.path.basename(name)))

    def hook(self, event: str, args: tuple[object, ...]) -> None:
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            if path is not None and _writes(mode, flags):
                self.before_write(path, _truncates(mode, flags))
        elif event in ("os.truncate", "os.chmod", "os.utime"):
            if isinstance(args[0], (str, bytes, os.PathLike)):
                self.before_write(args[0], truncating=False)
        elif event in ("os.remove", "os.rmdir", "os.mkdir", "shutil.rmtree"):
            self.check_entry(args[0])
        elif event in ("os.rename", "os.link", "os.symlink"):
            self.check_entry(args[1])
            if event == "os.rename":
                self.check_entry(args[0])

    def check_entry(self, path: object) -> None:
        if isinstance(path, (str, bytes, os.PathLike)):
            self.check_reach(os.path.abspath(os.fsdecode(path)))


def guard_originals(mirror_root: str, protected: Iterable[str], scratch: str | None = None) -> None:
    """From now on in this process, writes into the mirror copy first; writes past it (and past
    the run's `scratch` folder, where given) are refused."""
    root = os.path.realpath(mirror_root)
    own = (root,) if scratch is None else (root, os.path.realpath(scratch))
    guard = _Guard(root, tuple(os.path.realpath(folder) for folder in protected), own)
    sys.addaudithook(guard.hook)
    _announce_torch_save_opens()


def _announce_torch_save_opens() -> None:
    """`torch.save(obj, "model.pt")` opens its file in C++, where no audit event is raised."""
    serialization = sys.modules.get("torch.serialization")
    writer: type | None = getattr(serialization, "_open_zipfile_writer_file", None)
    if writer is None:
        return
    opened: Callable[..., None] = vars(writer)["__init__"]

    def __init__(self: object, name: object, *args: object, **kwargs: object) -> None:
        sys.audit("open", name, "wb", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        opened(self, name, *args, **kwargs)

    writer.__init__ = __init__  # type: ignore[misc]  # the audit hook wraps the constructor
