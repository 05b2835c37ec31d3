"""Whether a project's own code writes checkpoints that may hold accelerator tensors.

`torch.load` without `map_location` fails only on a file saved from device tensors. The
checkpoints a linter can say anything about are the project's own: where no file of the
project saves with `torch.save` from code that may run on an accelerator, the files it loads
were made elsewhere (released weights, a conversion from another framework's weights), and
what they hold is not in the code.

A save may hold accelerator tensors when its file names an accelerator anywhere
(`naming.ACCELERATOR_TEXT`), or when what it saves comes from outside the function (a
parameter, `self.model`: a trainer class saving the model it was handed) in a project that
names one; not when what it saves passed through `.cpu()` first (`net.cpu().state_dict()`).
Test code (`conftest.py`, `test_*.py`, modules importing pytest or unittest) writes files it
reads back itself and is left out, as are the folders a walk of the project skips.

Read with Python's own `ast`, never with the flow model: the fact must be cheap enough for a
cached run of one file, since it decides that file's result (and is part of its cache key).
Each file is read once while it is unchanged, and what was found is kept in the findings
cache's folder, so a run the cache answers reads only the project's listing.
"""

from __future__ import annotations

import ast
import fnmatch
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from torchdevlint.sourcefile import DEFAULT_EXCLUDES, store_json

# A folder holding one of these is a project's root.
_ROOT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")
# Beyond these the scan stops, and the project is taken to write device checkpoints: a root
# this large is a home folder or a monorepo, where the answer would not be worth its cost.
MAX_FILES = 5_000
MAX_BYTES = 64 * 1024 * 1024
# Calls of libraries that write a training checkpoint wherever its tensors are.
_LIBRARY_SAVES = frozenset({"save_checkpoint", "save_state"})
_LIBRARY_SAVERS = ("accelerator", "fabric", "xm")


@dataclass(frozen=True)
class CheckpointWriting:
    """What a project's code saves: the saves that may hold accelerator tensors (path relative
    to the root, line), the first few; `complete` is False where the scan stopped early."""

    root: str
    device_saves: tuple[tuple[str, int], ...] = ()
    complete: bool = True

    @property
    def writes_device_checkpoints(self) -> bool:
        return bool(self.device_saves) or not self.complete


# (path, change time, size) -> whether the file names an accelerator, and its saves.
_Summary = tuple[bool, tuple[tuple[int, bool], ...]]
# Changes whenever what a summary means does: stores of another format are not read.
_SUMMARY_FORMAT = 2
_SUMMARIES: dict[tuple[str, int, int], _Summary] = {}
# Store files already read into `_SUMMARIES`.
_READ_STORES: set[str] = set()
# A run lints many files of one project within seconds: their folders' roots and the roots'
# answers are taken as they were for this long (an editor's next keystroke looks again).
FRESH_SECONDS = 2.0
_ROOTS: dict[str, tuple[float, Path]] = {}
_FOUND: dict[str, tuple[float, CheckpointWriting]] = {}


def forget() -> None:
    """Read roots and listings again from now on (a new run in the same process)."""
    _ROOTS.clear()
    _FOUND.clear()


def project_root(path: str) -> Path | None:
    """The root of the project `path` belongs to: the closest folder above it holding
    `.git`, `pyproject.toml`, `setup.py` or `setup.cfg`; without one, the highest folder reached
    from the file's own through folders that hold Python files (a folder of projects holds
    none). None for a path that is not a file on disk (standard input, an example)."""
    absolute = Path(os.path.abspath(path))
    if not absolute.is_file():
        return None
    folder = absolute.parent
    known = _ROOTS.get(str(folder))
    if known is not None and time.monotonic() - known[0] < FRESH_SECONDS:
        return known[1]
    root = _root_of(folder)
    _ROOTS[str(folder)] = (time.monotonic(), root)
    return root


def _root_of(folder: Path) -> Path:
    for candidate in (folder, *folder.parents):
        if any((candidate / marker).exists() for marker in _ROOT_MARKERS):
            return candidate
    home = Path.home()
    root = folder
    for candidate in folder.parents:
        if candidate == home or candidate.parent == candidate or not _holds_python(candidate):
            break
        root = candidate
    return root


def checkpoint_writing(path: str, store: Path | None = None) -> CheckpointWriting | None:
    """What the project of `path` saves; None where `path` has no project on disk. Each
    file is read once while it is unchanged; with `store` (a folder) what was read is kept
    there for the next run."""
    root = project_root(path)
    if root is None:
        return None
    known = _FOUND.get(str(root))
    if known is not None and time.monotonic() - known[0] < FRESH_SECONDS:
        return known[1]
    found = _checkpoint_writing(root, store)
    _FOUND[str(root)] = (time.monotonic(), found)
    return found


def _checkpoint_writing(root: Path, store: Path | None) -> CheckpointWriting:
    listing, complete = _listing(root)
    if not complete:
        return CheckpointWriting(str(root), complete=False)
    store_file = None if store is None else store / f"{_digest(str(root))}-{_SUMMARY_FORMAT}.json"
    if store_file is not None and str(store_file) not in _READ_STORES:
        _READ_STORES.add(str(store_file))
        _read_store(store_file)
    missing = [entry for entry in listing if entry not in _SUMMARIES]
    for entry in missing:
        _SUMMARIES[entry] = _summary(entry[0])
    if missing and store_file is not None:
        _write_store(store_file, listing)
    return _writing(root, listing)


def _writing(root: Path, listing: tuple[tuple[str, int, int], ...]) -> CheckpointWriting:
    names_accelerator = False
    # Saves of what came from outside their function: device saves once the project is
    # known to name an accelerator.
    foreign: list[tuple[str, int]] = []
    device_saves: list[tuple[str, int]] = []
    for entry in listing:
        file_names_accelerator, saves = _SUMMARIES[entry]
        names_accelerator = names_accelerator or file_names_accelerator
        relative = os.path.relpath(entry[0], root)
        for line, from_outside in saves:
            if file_names_accelerator:
                device_saves.append((relative, line))
            elif from_outside:
                foreign.append((relative, line))
    if names_accelerator:
        device_saves.extend(foreign)
    return CheckpointWriting(str(root), tuple(device_saves[:3]))


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def _read_store(store_file: Path) -> None:
    try:
        kept = json.loads(store_file.read_text())
        for path, mtime, size, names_accelerator, saves in kept:
            _SUMMARIES[(str(path), int(mtime), int(size))] = (
                bool(names_accelerator), tuple((int(line), bool(outside)) for line, outside in saves))
    except (OSError, ValueError, TypeError):
        pass  # a damaged store is read again from the files


def _write_store(store_file: Path, listing: tuple[tuple[str, int, int], ...]) -> None:
    store_json(store_file, [[*entry, _SUMMARIES[entry][0], [list(save) for save in _SUMMARIES[entry][1]]]
                            for entry in listing])


def _holds_python(folder: Path) -> bool:
    try:
        with os.scandir(folder) as entries:
            return any(entry.name.endswith((".py", ".ipynb")) and entry.is_file() for entry in entries)
    except OSError:
        return False


def _listing(root: Path) -> tuple[tuple[tuple[str, int, int], ...], bool]:
    """The project's Python files and notebooks with their change times and sizes, and
    whether the walk saw them all within its bounds."""
    found: list[tuple[str, int, int]] = []
    total = 0
    for current, folders, files in os.walk(root):
        # Environments, caches and builds, as a walk of `check` leaves them (hidden folders too).
        folders[:] = sorted(name for name in folders if not name.startswith(".")
                            and not any(fnmatch.fnmatch(name, pattern) for pattern in DEFAULT_EXCLUDES))
        for name in sorted(files):
            if not name.endswith((".py", ".ipynb")):
                continue
            file_path = os.path.join(current, name)
            try:
                status = os.stat(file_path)
            except OSError:
                continue
            found.append((file_path, status.st_mtime_ns, status.st_size))
            total += status.st_size
            if len(found) > MAX_FILES or total > MAX_BYTES:
                return tuple(found), False
    return tuple(found), True


def _summary(file_path: str) -> _Summary:
    source = _python_source(file_path)
    if source is None:
        return False, ()
    # Imported here: a run the findings cache answers reads what was found from the store.
    from torchdevlint.analysis.brains import naming

    lowered = source.lower()
    names_accelerator = any(word.encode() in lowered for word in naming.ACCELERATOR_TEXT)
    if b"save" not in source:
        return names_accelerator, ()
    return names_accelerator, tuple(_saves(source, Path(file_path).name))


def _python_source(file_path: str) -> bytes | None:
    """A file's Python: a notebook's Python cells as the linter reads them (magics masked)."""
    try:
        with open(file_path, "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    if not file_path.endswith(".ipynb"):
        return data
    from torchdevlint.notebook.document import NotebookDocument
    from torchdevlint.notebook.program import NotebookProgram
    from torchdevlint.sourcefile import SourceError

    try:
        return NotebookProgram(NotebookDocument.parse(data)).text.encode("utf-8")
    except (SourceError, RecursionError):
        return None


def _saves(source: bytes, file_name: str) -> list[tuple[int, bool]]:
    """The checkpoint saves of one file outside test code: (line, whether what it saves comes
    from outside its function)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    if _is_test_code(tree, file_name):
        return []
    finder = _SaveFinder()
    try:
        finder.visit(tree)
    except RecursionError:
        return []
    return finder.saves


def _is_test_code(tree: ast.Module, file_name: str) -> bool:
    from torchdevlint.analysis.test_code import TEST_FRAMEWORKS, looks_like_test_code

    imported = {alias.name.split(".")[0] for statement in tree.body if isinstance(statement, ast.Import)
                for alias in statement.names}
    imported |= {(statement.module or "").split(".")[0] for statement in tree.body
                 if isinstance(statement, ast.ImportFrom)}
    return looks_like_test_code(
        file_name, imports_a_test_framework=bool(imported & set(TEST_FRAMEWORKS)),
        functions=(s.name for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))),
        classes=(s.name for s in tree.body if isinstance(s, ast.ClassDef)))


class _SaveFinder(ast.NodeVisitor):
    def __init__(self) -> None:
        self.saves: list[tuple[int, bool]] = []
        self._torch_names: set[str] = set()
        self._save_names: set[str] = set()
        # The innermost function's parameters and assignments (name -> assigned values).
        self._functions: list[tuple[frozenset[str], dict[str, list[ast.expr]]]] = []

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == "torch":
                self._torch_names.add(alias.asname or "torch")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module == "torch":
            self._save_names.update(alias.asname or alias.name for alias in node.names if alias.name == "save")

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        arguments = node.args
        parameters = frozenset(argument.arg for argument in (
            *arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
            *((arguments.vararg,) if arguments.vararg else ()), *((arguments.kwarg,) if arguments.kwarg else ())))
        assigned: dict[str, list[ast.expr]] = {}
        for statement in ast.walk(node):
            if isinstance(statement, ast.Assign):
                for target in statement.targets:
                    for name in _bound_names(target):
                        assigned.setdefault(name, []).append(statement.value)
        self._functions.append((parameters, assigned))
        self.generic_visit(node)
        self._functions.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in self._torch_names \
                and func.attr == "save" or isinstance(func, ast.Name) and func.id in self._save_names:
            saved = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "obj"), None)
            if saved is not None and not _host_copy(saved):
                self.saves.append((node.lineno, self._from_outside(saved)))
        elif isinstance(func, ast.Attribute) and (func.attr in _LIBRARY_SAVES or func.attr == "save" and any(
                word in ast.unparse(func.value).lower() for word in _LIBRARY_SAVERS)):
            self.saves.append((node.lineno, True))
        self.generic_visit(node)

    def _from_outside(self, saved: ast.expr) -> bool:
        """What `saved` holds reaches its function's parameters or `self`, following the
        function's own assignments. At module level nothing comes from outside."""
        if not self._functions:
            return False
        parameters, assigned = self._functions[-1]
        seen: set[str] = set()
        pending = [saved]
        while pending:
            for name in ast.walk(pending.pop()):
                if not isinstance(name, ast.Name) or name.id in seen:
                    continue
                seen.add(name.id)
                if name.id in parameters:
                    return True
                pending.extend(assigned.get(name.id, ()))
        return False


def project_facts(path: str, store: Path | None = None) -> str:
    """What a finding of `path` may depend on in the project's other files, as text for a
    cache key: whether the project writes device checkpoints."""
    writing = checkpoint_writing(path, store)
    return "" if writing is None else f"device-checkpoints={writing.writes_device_checkpoints}"


def _bound_names(target: ast.expr) -> list[str]:
    """The names an assignment binds (`a`, `a, (b, *c)`); `a.weight = ...` binds none."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Starred):
        return _bound_names(target.value)
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for element in target.elts for name in _bound_names(element)]
    return []


def _host_copy(saved: ast.expr) -> bool:
    """What is saved passed through `.cpu()` first: `net.cpu().state_dict()`,
    `features.detach().cpu()`, `{k: v.cpu() for k, v in weights.items()}`."""
    if isinstance(saved, (ast.DictComp, ast.ListComp)):
        return _host_copy(saved.value if isinstance(saved, ast.DictComp) else saved.elt)
    while isinstance(saved, ast.Call) and isinstance(saved.func, ast.Attribute):
        if saved.func.attr == "cpu":
            return True
        saved = saved.func.value
    return False
