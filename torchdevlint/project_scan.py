"""What a file's findings depend on in its project's other files.

Two facts, each read from every Python file and notebook of the project:
- whether the project's code writes checkpoints that may hold accelerator tensors (TDL003);
- which files belong to a program with a CPU mode offered by a command-line option defined
  in another file (TDL007, TDL203): `--gpu_ids -1` in an options module that a training
  script imports, where the models that script imports call `.cuda()`.

## Checkpoints

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

## A CPU mode offered elsewhere
A file is in a program with a CPU mode when some file of the project imports, directly or
not, both it and a file defining an option that runs on the CPU (`--cpu`, `--no-cuda`,
`--gpu_ids` whose help offers -1 for the CPU: `cpu_mode.option_offers_cpu_mode`). Imports are
read from the text (`import a.b`, `from .base import Model`, inside functions too) and
matched to the project's files by their dotted paths, relative imports from the importing
file's folder. Only options count: a CPU fallback in one script (`"cuda" if
torch.cuda.is_available() else "cpu"`) is that script's own, and the GPU-only scripts
beside it that import the same model stay GPU-only.

Read with Python's own `ast` and a scan of the import lines, never with the flow model: the
facts must be cheap enough for a cached run of one file, since they decide that file's
result (and are part of its cache key). Each file is read once while it is unchanged, and
what was found is kept in the findings cache's folder, so a run the cache answers reads only
the project's listing.
"""

from __future__ import annotations

import ast
import fnmatch
import hashlib
import json
import os
import re
import stat
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


@dataclass(frozen=True)
class CpuModeOption:
    """An option of another file that runs `program` on the CPU, and the program that takes
    it and imports the file asked about (paths relative to the project's root; `program` is
    empty where the file asked about is that program)."""

    file: str
    line: int
    program: str


@dataclass(frozen=True)
class _Summary:
    """What one file holds, as far as the project's facts go."""

    names_accelerator: bool = False
    # Its checkpoint saves: (line, whether what it saves comes from outside its function).
    saves: tuple[tuple[int, bool], ...] = ()
    # The modules it imports, as written: `a.b`, `.base_model`, `..utils.io` (see `_imports`).
    imports: tuple[str, ...] = ()
    # The lines of its command-line options that run the program on the CPU.
    cpu_options: tuple[int, ...] = ()
    test_code: bool = False

    def to_json(self) -> list[object]:
        return [self.names_accelerator, [list(save) for save in self.saves], list(self.imports),
                list(self.cpu_options), self.test_code]

    @classmethod
    def from_json(cls, kept: list[object]) -> _Summary:
        names_accelerator, saves, imports, cpu_options, test_code = kept
        assert isinstance(saves, list) and isinstance(imports, list) and isinstance(cpu_options, list)
        return cls(bool(names_accelerator), tuple((int(line), bool(outside)) for line, outside in saves),
                   tuple(str(name) for name in imports), tuple(int(line) for line in cpu_options), bool(test_code))


@dataclass(frozen=True)
class _ProjectFacts:
    writing: CheckpointWriting
    # Absolute file path -> the option that gives its program a CPU mode.
    cpu_mode: dict[str, CpuModeOption]


# Changes whenever what a summary means does: stores of another format are not read.
_SUMMARY_FORMAT = 3
# (path, change time, size) -> what the file holds.
_SUMMARIES: dict[tuple[str, int, int], _Summary] = {}
# Store files already read into `_SUMMARIES`.
_READ_STORES: set[str] = set()
# A run lints many files of one project within seconds: their folders' roots and the roots'
# answers are taken as they were for this long (an editor's next keystroke looks again).
FRESH_SECONDS = 2.0
_ROOTS: dict[str, tuple[float, Path]] = {}
_FOUND: dict[str, tuple[float, _ProjectFacts]] = {}


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
    facts = _facts(path, store)
    return None if facts is None else facts.writing


def cpu_mode_option(path: str, store: Path | None = None) -> CpuModeOption | None:
    """The option of another file of the project that gives a program importing `path` a CPU
    mode; None where there is none (or `path` has no project on disk)."""
    facts = _facts(path, store)
    return None if facts is None else facts.cpu_mode.get(os.path.abspath(path))


def _facts(path: str, store: Path | None) -> _ProjectFacts | None:
    root = project_root(path)
    if root is None:
        return None
    known = _FOUND.get(str(root))
    if known is not None and time.monotonic() - known[0] < FRESH_SECONDS:
        return known[1]
    found = _project_facts(root, store)
    _FOUND[str(root)] = (time.monotonic(), found)
    return found


def _project_facts(root: Path, store: Path | None) -> _ProjectFacts:
    listing, complete = _listing(root)
    if not complete:
        return _ProjectFacts(CheckpointWriting(str(root), complete=False), {})
    store_file = None if store is None else store / f"{_digest(str(root))}-{_SUMMARY_FORMAT}.json"
    if store_file is not None and str(store_file) not in _READ_STORES:
        _READ_STORES.add(str(store_file))
        _read_store(store_file)
    missing = [entry for entry in listing if entry not in _SUMMARIES]
    for entry in missing:
        _SUMMARIES[entry] = _summary(entry[0])
    if missing and store_file is not None:
        _write_store(store_file, listing)
    summaries = {entry[0]: _SUMMARIES[entry] for entry in listing}
    return _ProjectFacts(_writing(root, summaries), _cpu_mode(root, summaries))


def _writing(root: Path, summaries: dict[str, _Summary]) -> CheckpointWriting:
    names_accelerator = False
    # Saves of what came from outside their function: device saves once the project is
    # known to name an accelerator.
    foreign: list[tuple[str, int]] = []
    device_saves: list[tuple[str, int]] = []
    for path, summary in summaries.items():
        names_accelerator = names_accelerator or summary.names_accelerator
        relative = os.path.relpath(path, root)
        for line, from_outside in summary.saves:
            if summary.names_accelerator:
                device_saves.append((relative, line))
            elif from_outside:
                foreign.append((relative, line))
    if names_accelerator:
        device_saves.extend(foreign)
    return CheckpointWriting(str(root), tuple(device_saves[:3]))


def _cpu_mode(root: Path, summaries: dict[str, _Summary]) -> dict[str, CpuModeOption]:
    """Each file a program with a CPU-mode option imports (the program and the option's own
    file included), with that option."""
    offering = {path: summary.cpu_options[0] for path, summary in summaries.items()
                if summary.cpu_options and not summary.test_code}
    if not offering:
        return {}
    imported = _import_graph(root, summaries)
    importers: dict[str, set[str]] = {}
    for path, targets in imported.items():
        for target in targets:
            importers.setdefault(target, set()).add(path)
    # The programs: files that import an option-defining file, directly or not (itself too).
    programs: dict[str, tuple[str, int]] = {}
    for option_file, line in sorted(offering.items()):
        pending = [option_file]
        while pending:
            current = pending.pop()
            if current in programs or summaries[current].test_code:
                continue
            programs[current] = (option_file, line)
            pending.extend(importers.get(current, ()))
    reach: dict[str, CpuModeOption] = {}
    # Named by the program a user runs where there is one: a file nothing imports.
    for program, (option_file, line) in sorted(programs.items(), key=lambda item: (item[0] in importers, item[0])):
        option = CpuModeOption(os.path.relpath(option_file, root), line, os.path.relpath(program, root))
        pending = [program]
        while pending:
            current = pending.pop()
            if current in reach:
                continue
            reach[current] = option if current != program else CpuModeOption(option.file, option.line, "")
            pending.extend(imported.get(current, ()))
    return reach


def _import_graph(root: Path, summaries: dict[str, _Summary]) -> dict[str, set[str]]:
    """Each file's imports that are files of the project. An absolute name matches a file
    whose dotted path from the root ends with it (a project run from a subfolder, a `src`
    layout); a relative one is read from the importing file's package."""
    dotted: dict[str, str] = {}
    by_suffix: dict[str, list[str]] = {}
    for path in summaries:
        parts = list(Path(os.path.relpath(path, root)).with_suffix("").parts)
        if parts and parts[-1] == "__init__":
            parts.pop()
        if not parts:
            continue
        dotted[path] = ".".join(parts)
        for start in range(len(parts)):
            by_suffix.setdefault(".".join(parts[start:]), []).append(path)
    graph: dict[str, set[str]] = {}
    for path, summary in summaries.items():
        package = dotted[path].split(".") if path in dotted else []
        if package and not path.endswith("__init__.py"):
            package = package[:-1]
        targets: set[str] = set()
        for name in summary.imports:
            level = len(name) - len(name.lstrip("."))
            if level:
                if level - 1 > len(package):
                    continue
                base = package[:len(package) - (level - 1)]
                rest = name[level:]
                full = ".".join([*base, rest] if rest else base)
                targets.update(candidate for candidate in by_suffix.get(full, ()) if dotted[candidate] == full)
            else:
                targets.update(by_suffix.get(name, ()))
        targets.discard(path)
        graph[path] = targets
    return graph


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def _read_store(store_file: Path) -> None:
    try:
        kept = json.loads(store_file.read_text())
        for path, mtime, size, *summary in kept:
            _SUMMARIES[(str(path), int(mtime), int(size))] = _Summary.from_json(summary)
    except (OSError, ValueError, TypeError, AssertionError):
        pass  # a damaged store is read again from the files


def _write_store(store_file: Path, listing: tuple[tuple[str, int, int], ...]) -> None:
    store_json(store_file, [[*entry, *_SUMMARIES[entry].to_json()] for entry in listing])


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
            if not stat.S_ISREG(status.st_mode):
                continue  # a FIFO named `pipe.py` would block the read forever
            found.append((file_path, status.st_mtime_ns, status.st_size))
            total += status.st_size
            if len(found) > MAX_FILES or total > MAX_BYTES:
                return tuple(found), False
    return tuple(found), True


def _summary(file_path: str) -> _Summary:
    source = _python_source(file_path)
    if source is None:
        return _Summary()
    # Imported here: a run the findings cache answers reads what was found from the store.
    from torchdevlint.analysis.brains import naming

    lowered = source.lower()
    names_accelerator = any(word.encode() in lowered for word in naming.ACCELERATOR_TEXT)
    imports = _imports(source)
    test_code = _is_test_code(source, imports, Path(file_path).name)
    if test_code or b"save" not in source and b"add_argument" not in source:
        return _Summary(names_accelerator, imports=imports, test_code=test_code)
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return _Summary(names_accelerator, imports=imports)
    finder = _SaveFinder()
    try:
        finder.visit(tree)
    except RecursionError:
        return _Summary(names_accelerator, imports=imports)
    cpu_options = _cpu_options(source, finder.options) if finder.options else ()
    return _Summary(names_accelerator, tuple(finder.saves), imports, cpu_options)


# An import statement at the start of a line: `import a.b as c, d`, `from ..x import (y, z)`.
_IMPORT = re.compile(rb"^[ \t]*(?:from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#;]*)"
                     rb"|import[ \t]+([^\n#;]*))", re.MULTILINE)
_DOTTED = re.compile(r"[A-Za-z_][\w.]*\Z")
# Top-level functions and classes, for telling test code apart.
_TOP_LEVEL = re.compile(rb"^(?:async[ \t]+)?(def|class)[ \t]+(\w+)", re.MULTILINE)


def _imports(source: bytes) -> tuple[str, ...]:
    """The modules a file imports, as written: `a.b` for `import a.b`; `x` and `x.y` for
    `from x import y` (`y` may be a module); `.base` for `from .base import Model` and `.a`
    for `from . import a`. Read from the text, so that a file is not parsed for them; a line in
    a string that looks like an import adds a name, and the graph only joins the project's own
    files."""
    found: dict[str, None] = {}
    for match in _IMPORT.finditer(source):
        origin, listed, plain = (part.decode("utf-8", "replace") if part is not None else None
                                 for part in match.groups())
        if plain is not None:
            for item in plain.rstrip("\\").split(","):
                name = item.split(" as ")[0].strip()
                if _DOTTED.match(name):
                    found[name] = None
            continue
        assert origin is not None and listed is not None
        if origin.strip("."):
            found[origin] = None
        for item in listed.strip("()\\ \t\r\n").split(","):
            name = item.split(" as ")[0].strip()
            if name != "*" and _DOTTED.match(name):
                found[origin + name if origin.endswith(".") or not origin else f"{origin}.{name}"] = None
    return tuple(found)


def _is_test_code(source: bytes, imports: tuple[str, ...], file_name: str) -> bool:
    from torchdevlint.analysis.test_code import TEST_FRAMEWORKS, looks_like_test_code

    top_level = [(kind, name.decode("utf-8", "replace")) for kind, name in _TOP_LEVEL.findall(source)]
    return looks_like_test_code(
        file_name, imports_a_test_framework=any(name.split(".")[0] in TEST_FRAMEWORKS for name in imports),
        functions=(name for kind, name in top_level if kind == b"def"),
        classes=(name for kind, name in top_level if kind == b"class"))


def _cpu_options(source: bytes, calls: list[ast.Call]) -> tuple[int, ...]:
    """The lines of the `add_argument` calls that offer the CPU, judged as the linter judges
    an option of the file it lints (`cpu_mode.option_offers_cpu_mode`)."""
    import libcst as cst

    from torchdevlint.analysis.flow.cpu_mode import option_offers_cpu_mode

    text = source.decode("utf-8", "replace")
    lines: list[int] = []
    for call in calls:
        segment = ast.get_source_segment(text, call)
        try:
            parsed = cst.parse_expression(segment) if segment else None
        except (cst.ParserSyntaxError, RecursionError):
            continue
        if isinstance(parsed, cst.Call) and option_offers_cpu_mode(parsed):
            lines.append(call.lineno)
    return tuple(lines)


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


class _SaveFinder(ast.NodeVisitor):
    def __init__(self) -> None:
        self.saves: list[tuple[int, bool]] = []
        # `parser.add_argument(...)` calls, judged afterwards (`_cpu_options`).
        self.options: list[ast.Call] = []
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
        elif isinstance(func, ast.Attribute) and func.attr == "add_argument":
            self.options.append(node)
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
    cache key: whether the project writes device checkpoints, and the option elsewhere that
    gives the file's program a CPU mode."""
    facts = _facts(path, store)
    if facts is None:
        return ""
    option = facts.cpu_mode.get(os.path.abspath(path))
    offered = "none" if option is None else f"{option.file}:{option.line}"
    return f"device-checkpoints={facts.writing.writes_device_checkpoints};cpu-mode={offered}"


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
