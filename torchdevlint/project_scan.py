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

Within such a program, a module-level class or function reaches the CPU mode only where a file
of the program names it (or may look it up by a computed name): `cpu_mode_option_using`. That
answer depends on the program's files as they are, so the cache key of a file in such a
program holds their change times.

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
import warnings
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from torchdevlint.sourcefile import DEFAULT_EXCLUDES, store_json

# A folder holding one of these is a project's root.
_ROOT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")
# What a repository's top folder holds, in a copy without `.git` too (a GitHub zip, `git
# archive`): weaker, since a subfolder may hold one as well (see `_root_of`).
_REPOSITORY_FILES = (".gitignore", "requirements.txt", "README.md", "README.rst", "LICENSE", "LICENSE.md", "LICENSE.txt")
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
    to the root, line), the first few; `complete` is False where the scan stopped early.
    `written`: each file name a save names (`vocab.pt`), with whether some save of it may hold
    accelerator tensors; `path_names`: the file names the project gives names of paths
    (`caffe_pretrain_path = "checkpoints/vgg16_caffe.pth"`, `--weights` with its default)."""

    root: str
    device_saves: tuple[tuple[str, int], ...] = ()
    complete: bool = True
    written: tuple[tuple[str, bool], ...] = ()
    path_names: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def writes_device_checkpoints(self) -> bool:
        return bool(self.device_saves) or not self.complete

    def file_names(self, target: PathTarget) -> frozenset[str]:
        """The file names a path may name: its own text's, or those its name is given."""
        if target.file_name:
            return frozenset({target.file_name})
        return frozenset(dict(self.path_names).get(target.path_name, ())) if target.path_name else frozenset()

    def may_hold_device_tensors(self, file_names: frozenset[str]) -> bool:
        """Whether a file so named may have been written from accelerator tensors: False only
        where the project's saves write files of that name, and none of them may hold any (a
        vocabulary pickled beside the GPU checkpoints, weights converted on the CPU), or where
        no save writes one and the name says it was made elsewhere (see `_made_elsewhere`)."""
        if not self.complete:
            return True
        writers = [device for name, device in self.written if name in file_names]
        if writers:
            return any(writers)
        return not file_names or not all(_made_elsewhere(name) for name in file_names)

    @property
    def key(self) -> str:
        """What a file's findings may depend on, as text (see `project_facts`)."""
        written = ",".join(f"{name}={int(device)}" for name, device in self.written)
        names = ";".join(f"{name}={','.join(files)}" for name, files in self.path_names)
        return f"{self.writes_device_checkpoints}:{_digest(written + '|' + names)}"


@dataclass(frozen=True)
class PathTarget:
    """The file a path expression names, where its own text says (`"ckpt/vocab.pt"`,
    `os.path.join(root, "model.pth")`): its last component; else the name it is read from
    (`args.weights`, `WEIGHTS_PATH`, `cfg["weights"]`), to look up among the project's paths."""

    file_name: str = ""
    path_name: str = ""


@dataclass(frozen=True)
class CpuModeOption:
    """An option of another file that runs `program` on the CPU, and the program that takes
    it and imports the file asked about (paths relative to the project's root; `program` is
    empty where the file asked about is that program)."""

    file: str
    line: int
    program: str
    # Not an option but a device choice with a CPU fallback (`torch.device("cuda" if
    # torch.cuda.is_available() else "cpu")`): the program runs on the CPU where there is no GPU.
    falls_back: bool = False


@dataclass(frozen=True)
class _Save:
    line: int
    # What it saves comes from outside its function.
    from_outside: bool
    # What it saves is host data whatever the device: a `.cpu()` copy, a vocabulary.
    host: bool = False
    target: PathTarget = PathTarget()

    def to_json(self) -> list[object]:
        return [self.line, self.from_outside, self.host, self.target.file_name, self.target.path_name]

    @classmethod
    def from_json(cls, kept: object) -> _Save:
        assert isinstance(kept, list)
        line, from_outside, host, file_name, path_name = kept
        return cls(int(line), bool(from_outside), bool(host), PathTarget(str(file_name), str(path_name)))


@dataclass(frozen=True)
class _Summary:
    """What one file holds, as far as the project's facts go."""

    names_accelerator: bool = False
    saves: tuple[_Save, ...] = ()
    # The modules it imports, as written: `a.b`, `.base_model`, `..utils.io` (see `_imports`).
    imports: tuple[str, ...] = ()
    # The lines of its command-line options that run the program on the CPU.
    cpu_options: tuple[int, ...] = ()
    test_code: bool = False
    # Names it gives file paths, with the file names (see `_path_names`).
    path_names: tuple[tuple[str, str], ...] = ()
    # It chooses the current GPU (see `_SELECTS_A_GPU`).
    selects_a_gpu: bool = False
    # It reads wrappers' checkpoints: loads a state dict into a model it wrapped (see
    # `_loads_into_a_wrapper`), or strips the `module.` prefix from one (`_strips_the_prefix`).
    loads_into_a_wrapper: bool = False
    # Its top-level nn.Module classes that make layers or parameters of their own (see
    # `_stateful_module_classes`).
    module_classes: tuple[str, ...] = ()
    # All its top-level nn.Module classes (a base class another file derives its model from).
    all_module_classes: tuple[str, ...] = ()
    # Functions of other files it hands a model bound to a DataParallel/DDP wrapper (see
    # `_wrapped_handoffs`): `stem.function:position` and `stem.function:keyword`.
    wrapped_handoffs: tuple[str, ...] = ()
    # The tests under which it wraps a model it then loads a state dict into (`if
    # params.multi_gpu: model = nn.DataParallel(model)`), as text without spaces (see
    # `_wrapping_tests_of_loads`).
    wrapping_tests_of_loads: tuple[str, ...] = ()
    # The line of a device choice that falls back to the CPU (`"cuda" if torch.cuda.is_available()
    # else "cpu"`, see `_CPU_FALLBACK`); 0 where there is none. Negative where the line is
    # indented (in a function, under a main guard): the choice of this file's own run, which
    # files importing it for a helper do not share. Where there is none, minus the line of an
    # availability check guarding a move of the file (`if torch.cuda.is_available():
    # model.cuda()`: see `_guarded_moves_line`).
    cpu_fallback: int = 0
    # It changes where factories without `device=` put tensors, for the whole process
    # (`torch.set_default_tensor_type('torch.cuda.FloatTensor')`, `torch.set_default_device(...)`).
    sets_default_device: bool = False
    # Its top-level functions' parameters that reach `.numpy()` as they are (see
    # `_numpy_parameters`): `function:position:name`.
    numpy_parameters: tuple[str, ...] = ()
    # Its top-level functions and classes that move in place what they are handed (see
    # `_movers`).
    movers: tuple[str, ...] = ()
    # Its top-level functions and classes that save a checkpoint of a known file name:
    # `name:file_name` (see `_savers`).
    savers: tuple[str, ...] = ()
    # The line of its first module-level call that initialises CUDA (`torch.cuda.is_available()`),
    # where no call of a name imported from outside the standard library and torch comes
    # before it at module level (which may run another file's code first); 0 where none.
    initialises_cuda_at: int = 0
    # Its top-level functions' parameters that `torch.save` writes as they are, or an item of it
    # (`torch.save(states['state_dict'], ...)`): `function:position:name` (see `_saved_parameters`).
    saved_parameters: tuple[str, ...] = ()

    def to_json(self) -> list[object]:
        return [self.names_accelerator, [save.to_json() for save in self.saves], list(self.imports),
                list(self.cpu_options), self.test_code, [list(pair) for pair in self.path_names], self.selects_a_gpu,
                self.loads_into_a_wrapper, list(self.module_classes), list(self.all_module_classes),
                list(self.wrapped_handoffs), list(self.wrapping_tests_of_loads), self.cpu_fallback,
                self.sets_default_device, list(self.numpy_parameters), list(self.movers), list(self.savers),
                self.initialises_cuda_at, list(self.saved_parameters)]

    @classmethod
    def from_json(cls, kept: list[object]) -> _Summary:
        (names_accelerator, saves, imports, cpu_options, test_code, path_names, selects_a_gpu, wrapped_load,
         module_classes, all_module_classes, wrapped_handoffs, wrapping_tests_of_loads, cpu_fallback,
         sets_default_device, numpy_parameters, movers, savers, initialises_cuda_at, saved_parameters) = kept
        assert isinstance(module_classes, list) and isinstance(all_module_classes, list)
        assert isinstance(wrapped_handoffs, list) and isinstance(wrapping_tests_of_loads, list)
        assert isinstance(saves, list) and isinstance(imports, list) and isinstance(cpu_options, list)
        assert isinstance(path_names, list) and isinstance(numpy_parameters, list) and isinstance(movers, list)
        assert isinstance(savers, list) and isinstance(saved_parameters, list)
        return cls(bool(names_accelerator), tuple(_Save.from_json(save) for save in saves),
                   tuple(str(name) for name in imports), tuple(int(line) for line in cpu_options), bool(test_code),
                   tuple((str(name), str(file_name)) for name, file_name in path_names), bool(selects_a_gpu),
                   bool(wrapped_load), tuple(str(name) for name in module_classes),
                   tuple(str(name) for name in all_module_classes), tuple(str(name) for name in wrapped_handoffs),
                   tuple(str(test) for test in wrapping_tests_of_loads), int(str(cpu_fallback)),
                   bool(sets_default_device), tuple(str(entry) for entry in numpy_parameters),
                   tuple(str(name) for name in movers), tuple(str(entry) for entry in savers),
                   int(str(initialises_cuda_at)), tuple(str(entry) for entry in saved_parameters))


@dataclass(frozen=True)
class _ProjectFacts:
    writing: CheckpointWriting
    # Absolute file path -> the option that gives its program a CPU mode.
    cpu_mode: dict[str, CpuModeOption]
    # Absolute file path -> the file of its program that chooses the current GPU (see
    # `_SELECTS_A_GPU`), relative to the root.
    gpu_selection: dict[str, str] = field(default_factory=dict)
    # The scan stopped early: any file may be in such a program.
    complete: bool = True
    # The files that load a state dict into a model they wrapped (relative to the root).
    wrapped_loads: tuple[str, ...] = ()
    # `stem.Class` of the project's stateful Module classes (see `_stateful_module_classes`),
    # and of all its Module classes.
    module_classes: frozenset[str] = frozenset()
    all_module_classes: frozenset[str] = frozenset()
    # `stem.function:position` / `stem.function:keyword` the project's code hands a wrapped model
    # (see `_wrapped_handoffs`), with the first file that does.
    wrapped_handoffs: dict[str, str] = field(default_factory=dict)
    # Absolute file path -> the file of its program that changes the default device (see
    # `_Summary.sets_default_device`), relative to the root.
    default_device: dict[str, str] = field(default_factory=dict)
    # The tests under which the project's files wrap a model they load a state dict into ->
    # those files (relative to the root).
    wrapping_tests_of_loads: dict[str, frozenset[str]] = field(default_factory=dict)
    # `stem.function` -> the (position, name) of each parameter it calls `.numpy()` on.
    numpy_parameters: dict[str, tuple[tuple[int, str], ...]] = field(default_factory=dict)
    # `stem.function` -> the (position, name) of each parameter it hands `torch.save`.
    saved_parameters: dict[str, tuple[tuple[int, str], ...]] = field(default_factory=dict)
    # `stem.name` of the project's functions and classes that move what they are handed.
    movers: frozenset[str] = frozenset()
    # `stem.name:file_name` of the project's functions and classes that save checkpoints.
    savers: frozenset[str] = frozenset()
    # The programs whose module-level code initialises CUDA (see `_Summary.initialises_cuda_at`),
    # in the order programs are named by: (absolute path, the initialising file relative to
    # the root, its line).
    cuda_programs: tuple[tuple[str, str, int], ...] = ()
    # The programs with a CPU mode, in the order `cpu_mode` chose from: (absolute path, the
    # option, its `program` left empty), and the project's import graph (see `_import_graph`).
    cpu_programs: tuple[tuple[str, CpuModeOption], ...] = ()
    imported: dict[str, set[str]] = field(default_factory=dict)
    # Asked lazily: each program's files, and each file's words.
    # Each file's (change time, size), as listed.
    stamps: dict[str, tuple[int, int]] = field(default_factory=dict)
    closures: dict[str, frozenset[str]] = field(default_factory=dict)
    words: dict[str, frozenset[str]] = field(default_factory=dict)
    sources: dict[str, bytes] = field(default_factory=dict)

    def program_files(self, program: str) -> frozenset[str]:
        """The files a program imports, directly or not, itself included."""
        known = self.closures.get(program)
        if known is None:
            found: set[str] = set()
            pending = [program]
            while pending:
                current = pending.pop()
                if current not in found:
                    found.add(current)
                    pending.extend(self.imported.get(current, ()))
            known = self.closures[program] = frozenset(found)
        return known

    def source_of(self, path: str) -> bytes:
        """A file's Python (see `_python_source`), read once; empty where it cannot be read."""
        known = self.sources.get(path)
        if known is None:
            known = self.sources[path] = _python_source(path) or b""
        return known

    def words_of(self, path: str) -> frozenset[str]:
        known = self.words.get(path)
        if known is None:
            known = self.words[path] = frozenset(word.decode("ascii") for word in _WORD.findall(self.source_of(path)))
        return known

    def program_uses(self, program: str, absolute: str, name: str) -> bool:
        """Whether a program imports the file `absolute` and uses its top-level definition
        `name`: another file of the program names it, or may look it up by a computed name
        (see `_looks_up_by_name`)."""
        files = self.program_files(program)
        return absolute in files and any(name in self.words_of(other) or _looks_up_by_name(self, other, absolute)
                                         for other in files if other != absolute)


_WORD = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_LOOKUP_WORDS = frozenset({"getattr", "globals", "eval", "importlib", "__import__"})
_GETATTR = re.compile(rb"getattr\(\s*([A-Za-z_][A-Za-z0-9_.]*)\s*,")
_COMPUTED_LOOKUP = re.compile(rb"(?<![\w.])(?:globals\(\)|eval\(|importlib\b|__import__\()")
_STAR_IMPORT = re.compile(rb"^\s*from\s+\S+\s+import\s+\*", re.MULTILINE)
# Changes whenever what a summary means does: stores of another format are not read.
_SUMMARY_FORMAT = 29
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
    none), or the folder above that where it holds a repository's top files and that folder
    holds none (`pose_estimation/train.py` beside `lib/`, under a folder with a README and a
    `requirements.txt`). None for a path that is not a file on disk (standard input, an
    example)."""
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
    above = root.parent
    if above != home and above.parent != above and not _holds_any(root, _REPOSITORY_FILES) \
            and _holds_any(above, _REPOSITORY_FILES):
        return above
    return root


def _holds_any(folder: Path, names: tuple[str, ...]) -> bool:
    return any((folder / name).is_file() for name in names)


def checkpoint_writing(path: str, store: Path | None = None) -> CheckpointWriting | None:
    """What the project of `path` saves; None where `path` has no project on disk. Each
    file is read once while it is unchanged; with `store` (a folder) what was read is kept
    there for the next run."""
    facts = _facts(path, store)
    return None if facts is None else facts.writing


def gpu_selection(path: str, store: Path | None = None) -> str | None:
    """The file of a program `path` is part of that chooses the current GPU or the GPUs the
    process sees (relative to the root; "?" where the scan stopped early); None where there
    is none (or `path` has no project on disk)."""
    facts = _facts(path, store)
    if facts is None:
        return None
    return facts.gpu_selection.get(os.path.abspath(path)) if facts.complete else "?"


def wrapped_checkpoint_loads(path: str, store: Path | None = None) -> tuple[str, ...]:
    """The files of the project of `path` (the first few, relative to its root) that load a
    state dict into a model they wrapped in DataParallel/DDP, or strip the wrapper's `module.`
    prefix before a load; empty where there is none, or no project on disk."""
    facts = _facts(path, store)
    return () if facts is None else facts.wrapped_loads


def wrapped_handoffs(path: str, store: Path | None = None) -> dict[str, dict[str, str]]:
    """The functions of the file `path` that other files of its project hand a model bound to
    a DataParallel/DDP wrapper: function name (`save_model`, or `SaveBestModel.__call__` for
    an instance called) -> {position or keyword -> the first such file, relative to the root}.
    Empty where there is none, or no project on disk."""
    facts = _facts(path, store)
    if facts is None:
        return {}
    stem = Path(path).stem
    found: dict[str, dict[str, str]] = {}
    for handoff, caller in facts.wrapped_handoffs.items():
        qualified, _, argument = handoff.rpartition(":")
        module, _, function = qualified.partition(".")  # `general.SaveBestModel.__call__`
        if module == stem:
            found.setdefault(function, {}).setdefault(argument, caller)
    return found


def numpy_parameters(path: str, store: Path | None = None) -> dict[str, tuple[tuple[int, str], ...]]:
    """`stem.function` (`plot_lib.show_scatterplot`) of the top-level functions of the project
    of `path` that call `.numpy()` on a parameter as it is -> each such parameter's position
    and name; empty where there is none, or no project on disk."""
    facts = _facts(path, store)
    return {} if facts is None else facts.numpy_parameters


def saved_parameters(path: str, store: Path | None = None) -> dict[str, tuple[tuple[int, str], ...]]:
    """`stem.function` (`utils.save_checkpoint`) of the top-level functions of the project of
    `path` that hand a parameter, or an item of one, to `torch.save` as it is -> each such
    parameter's position and name; empty where there is none, or no project on disk."""
    facts = _facts(path, store)
    return {} if facts is None else facts.saved_parameters


def stateful_module_classes(path: str, store: Path | None = None) -> frozenset[str]:
    """`stem.Class` (`model.Net` for `class Net` in `model.py`) of each nn.Module class of the
    project of `path` that makes layers or parameters of its own; empty where there is none
    or no project on disk."""
    facts = _facts(path, store)
    return frozenset() if facts is None else facts.module_classes


def movers(path: str, store: Path | None = None) -> frozenset[str]:
    """`stem.name` of the functions and classes of the project of `path` that move in place a
    model they are handed (see `_movers`)."""
    facts = _facts(path, store)
    return frozenset() if facts is None else facts.movers


def saves_the_file(path: str, qualified: str, path_code: str, arguments: Sequence[tuple[str, str]] = (),
                   store: Path | None = None) -> bool:
    """Whether the function or class `qualified` (`utils.tools.EarlyStopping`) of another file
    of the project of `path` saves a checkpoint of the file `path_code` names
    (`path + '/' + 'checkpoint.pth'`): a run that calls it before a load of that file wrote it.
    `arguments` are the call's, (position or keyword, code): a function that saves to the file
    a parameter names (`save_model(model, target_dir, model_name)`) saves the one it is handed."""
    facts = _facts(path, store)
    if facts is None or not facts.savers:
        return False
    file_name = path_target_of_code(path_code).file_name
    parts = qualified.split(".")
    if not file_name or len(parts) < 2:
        return False
    saver = f"{parts[-2]}.{parts[-1]}"
    if not any(entry.partition(":")[0] == saver for entry in facts.savers):
        # Re-exported by a package (`from utils import EarlyStopping`): a name one file defines.
        defining = {entry.partition(":")[0] for entry in facts.savers
                    if entry.partition(":")[0].endswith(f".{parts[-1]}")}
        if len(defining) != 1:
            return False
        saver = defining.pop()
    if f"{saver}:{file_name}" in facts.savers:
        return True
    given = dict(arguments)
    for entry in facts.savers:
        name, _, written = entry.partition(":")
        if name != saver or not written.startswith("@"):
            continue
        parameter, _, position = written[1:].partition("@")
        code = given.get(parameter, given.get(position))
        if code is not None and (path_target_of_code(code).file_name == file_name
                                 or _names_by_template(code, file_name)):
            return True
    return False


def _names_by_template(code: str, file_name: str) -> bool:
    """Whether an f-string's file names (`f"07_{model}_{epochs}_epochs.pth"`, saved in a loop)
    include `file_name`: its text parts in order, each placeholder any name."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(f"(\n{code}\n)", mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    if not isinstance(tree, ast.JoinedStr):
        return False
    parts = [re.escape(value.value) if isinstance(value, ast.Constant) and isinstance(value.value, str) else "[^/]+"
             for value in tree.values]
    # Text enough to tell its files from others' (words besides the extension: not `f"{name}.pth"`).
    text = "".join(value.value for value in tree.values if isinstance(value, ast.Constant) and isinstance(value.value, str))
    if len(text.strip(" ./_-")) < 5:
        return False
    return re.fullmatch("".join(parts), file_name) is not None


def module_classes(path: str, store: Path | None = None) -> frozenset[str]:
    """`stem.Class` of every nn.Module class of the project of `path` (a base class such as
    `decoder.Decoder`, which another file's model derives from)."""
    facts = _facts(path, store)
    return frozenset() if facts is None else facts.all_module_classes


def default_device_elsewhere(path: str, store: Path | None = None) -> str | None:
    """The file of a program that `path` is part of that changes the default device for the
    whole process (`torch.set_default_tensor_type('torch.cuda.FloatTensor')` in a launcher);
    None where there is none, or no project on disk."""
    facts = _facts(path, store)
    return None if facts is None else facts.default_device.get(os.path.abspath(path))


def cpu_mode_option(path: str, store: Path | None = None) -> CpuModeOption | None:
    """The option of another file of the project that gives a program importing `path` a CPU
    mode; None where there is none (or `path` has no project on disk)."""
    facts = _facts(path, store)
    return None if facts is None else facts.cpu_mode.get(os.path.abspath(path))


def cuda_initialised_before_using(path: str, name: str, store: Path | None = None) -> tuple[str, int, str] | None:
    """Where a program that imports `path` and uses its top-level definition `name` (as
    `cpu_mode_option_using` reads use) initialised CUDA at module level before: (that file,
    its line, the program; paths relative to the root, the program empty where it is the
    initialising file). None where no program does, or `path` has no project on disk."""
    facts = _facts(path, store)
    absolute = os.path.abspath(path)
    if facts is None or not facts.cuda_programs:
        return None
    root = project_root(path)
    for program, initialising, line in facts.cuda_programs:
        # (The file's own module level is the rule's to read.)
        if program != absolute and facts.program_uses(program, absolute, name):
            relative = os.path.relpath(program, root) if root is not None else program
            return initialising, line, "" if relative == initialising else relative
    return None


def cpu_mode_option_using(path: str, name: str, store: Path | None = None) -> CpuModeOption | None:
    """The option of a program with a CPU mode that imports `path` and uses its top-level
    definition `name`: another file of the program names it, or imports a project module it
    may look it up in by a computed name (`getattr(models, config["arch"])`). None where no
    such program does (a GPU prefetcher class only the GPU path of another program builds),
    or `path` has no project on disk."""
    facts = _facts(path, store)
    absolute = os.path.abspath(path)
    if facts is None or absolute not in facts.cpu_mode:
        return None
    root = project_root(path)
    for program, option in facts.cpu_programs:
        if facts.program_uses(program, absolute, name):
            relative = "" if program == absolute or root is None else os.path.relpath(program, root)
            return replace(option, program=relative)
    return None


def _looks_up_by_name(facts: _ProjectFacts, path: str, target: str) -> bool:
    """A file that may reach a definition of the file `target` by a computed name: `getattr`
    on a project module of its imports that is `target` or takes its names with `import *`
    (`getattr(models, config["arch"]["type"])`), or `globals()`, the `eval` builtin, `importlib`."""
    words = facts.words_of(path)
    if words.isdisjoint(_LOOKUP_WORDS):
        return False
    source = facts.source_of(path)
    if _COMPUTED_LOOKUP.search(source):
        return True
    looked_in = {match.group(1).decode("ascii").rpartition(".")[2] for match in _GETATTR.finditer(source)}
    for module in facts.imported.get(path, ()):
        name = Path(module).parent.name if Path(module).name == "__init__.py" else Path(module).stem
        if name in looked_in and target in _star_reach(facts, module):
            return True
    return False


def _star_reach(facts: _ProjectFacts, module: str) -> set[str]:
    """A module's file and the files whose names it takes, through `import *`, directly or not."""
    found: set[str] = set()
    pending = [module]
    while pending:
        current = pending.pop()
        if current in found:
            continue
        found.add(current)
        if _STAR_IMPORT.search(facts.source_of(current)):
            pending.extend(facts.imported.get(current, ()))
    return found


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
        return _ProjectFacts(CheckpointWriting(str(root), complete=False), {}, complete=False)
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
    # The import graph is read only where some file marks the programs that import it.
    marks = any((summary.cpu_options or summary.cpu_fallback or summary.selects_a_gpu or summary.sets_default_device)
                and not summary.test_code for summary in summaries.values())
    imported = _import_graph(root, summaries) if marks else {}
    wrapped_loads = tuple(os.path.relpath(path, root) for path, summary in summaries.items()
                          if summary.loads_into_a_wrapper and not summary.test_code)
    module_classes = frozenset(f"{Path(path).stem}.{name}" for path, summary in summaries.items()
                               if not summary.test_code for name in summary.module_classes)
    all_module_classes = frozenset(f"{Path(path).stem}.{name}" for path, summary in summaries.items()
                                   if not summary.test_code for name in summary.all_module_classes)
    wrapped_handoffs: dict[str, str] = {}
    for path, summary in summaries.items():
        if not summary.test_code:
            for handoff in summary.wrapped_handoffs:
                wrapped_handoffs.setdefault(handoff, os.path.relpath(path, root))
    loading_files: dict[str, set[str]] = {}
    for path, summary in summaries.items():
        for test in () if summary.test_code else summary.wrapping_tests_of_loads:
            loading_files.setdefault(test, set()).add(os.path.relpath(path, root))
    wrapping_tests_of_loads = {test: frozenset(files) for test, files in loading_files.items()}
    numpy_parameters: dict[str, list[tuple[int, str]]] = {}
    saved_parameters: dict[str, list[tuple[int, str]]] = {}
    for path, summary in summaries.items():
        for entries, gathered in ((summary.numpy_parameters, numpy_parameters),
                                  (summary.saved_parameters, saved_parameters)):
            for item in () if summary.test_code else entries:
                function, position, name = item.split(":")
                gathered.setdefault(f"{Path(path).stem}.{function}", []).append((int(position), name))
    cpu_programs: list[tuple[str, CpuModeOption]] = []
    cpu_mode = _cpu_mode(root, summaries, imported, cpu_programs)
    movers = frozenset(f"{Path(path).stem}.{name}" for path, summary in summaries.items()
                       if not summary.test_code for name in summary.movers)
    initialising = {path: (path, summary.initialises_cuda_at) for path, summary in summaries.items()
                    if summary.initialises_cuda_at and not summary.test_code}
    if initialising and not imported:
        imported = _import_graph(root, summaries)
    cuda_programs = tuple((program, os.path.relpath(marked, root), line)
                          for program, (marked, line) in _programs_with(initialising, summaries, imported))
    return _ProjectFacts(_writing(root, summaries), cpu_mode,
                         _gpu_selection(root, summaries, imported), wrapped_loads=wrapped_loads[:3],
                         module_classes=module_classes, all_module_classes=all_module_classes,
                         wrapped_handoffs=wrapped_handoffs, wrapping_tests_of_loads=wrapping_tests_of_loads,
                         default_device=_default_device(root, summaries, imported),
                         numpy_parameters={key: tuple(found) for key, found in numpy_parameters.items()},
                         saved_parameters={key: tuple(found) for key, found in saved_parameters.items()},
                         cpu_programs=tuple(cpu_programs), imported=imported, movers=movers, cuda_programs=cuda_programs,
                         savers=frozenset(f"{Path(path).stem}.{entry}" for path, summary in summaries.items()
                                          if not summary.test_code for entry in summary.savers),
                         stamps={entry[0]: (entry[1], entry[2]) for entry in listing})


def _writing(root: Path, summaries: dict[str, _Summary]) -> CheckpointWriting:
    names_accelerator = any(summary.names_accelerator for summary in summaries.values())
    path_names: dict[str, set[str]] = {}
    for summary in summaries.values():
        for name, file_name in summary.path_names:
            path_names.setdefault(name, set()).add(file_name)
    named = tuple(sorted((name, tuple(sorted(files))) for name, files in path_names.items()))
    lookup = CheckpointWriting(str(root), path_names=named)
    # Saves in files that name an accelerator, then saves of what came from outside a
    # function in other files: device data once the project is known to name one.
    own: list[tuple[str, int]] = []
    foreign: list[tuple[str, int]] = []
    written: dict[str, bool] = {}
    for path, summary in summaries.items():
        relative = os.path.relpath(path, root)
        for save in summary.saves:
            device = not save.host and (summary.names_accelerator or save.from_outside and names_accelerator)
            if device:
                (own if summary.names_accelerator else foreign).append((relative, save.line))
            for file_name in lookup.file_names(save.target):
                written[file_name] = written.get(file_name, False) or device
    return CheckpointWriting(str(root), tuple([*own, *foreign][:3]), written=tuple(sorted(written.items())),
                             path_names=named)


def _cpu_mode(root: Path, summaries: dict[str, _Summary], imported: dict[str, set[str]],
              programs: list[tuple[str, CpuModeOption]]) -> dict[str, CpuModeOption]:
    """Each file a program with a CPU-mode option imports (the program and the option's own
    file included), with that option. Adds each such program to `programs`, in the order
    chosen from, with its option (`program` left empty)."""
    offering = {path: (path, summary.cpu_options[0]) for path, summary in summaries.items()
                if summary.cpu_options and not summary.test_code}
    shared_fallback = {path: (path, summary.cpu_fallback) for path, summary in summaries.items()
                       if summary.cpu_fallback > 0 and not summary.test_code}
    reach: dict[str, CpuModeOption] = {}
    # An option names the CPU mode outright: it wins over a fallback where a file has both.
    for marked, falls_back in ((offering, False), (shared_fallback, True)):
        for program, (option_file, line) in _programs_with(marked, summaries, imported):
            programs.append((program, CpuModeOption(os.path.relpath(option_file, root), line, "", falls_back)))
        for current, ((option_file, line), program) in _in_programs_with(marked, summaries, imported).items():
            if current not in reach:
                reach[current] = CpuModeOption(os.path.relpath(option_file, root), line,
                                               os.path.relpath(program, root) if current != program else "",
                                               falls_back=falls_back)
    # A fallback inside a function or a main guard is its own file's run: what that file
    # imports runs in it, the files importing it for a helper do not.
    for path, summary in sorted(summaries.items()):
        if summary.cpu_fallback < 0 and not summary.test_code:
            programs.append((path, CpuModeOption(os.path.relpath(path, root), -summary.cpu_fallback, "", True)))
            pending = [path]
            while pending:
                current = pending.pop()
                if current in reach or summaries[current].test_code:
                    continue
                reach[current] = CpuModeOption(os.path.relpath(path, root), -summary.cpu_fallback,
                                               os.path.relpath(path, root) if current != path else "",
                                               falls_back=True)
                pending.extend(imported.get(current, ()))
    return reach


def _default_device(root: Path, summaries: dict[str, _Summary], imported: dict[str, set[str]]) -> dict[str, str]:
    """Each file of a program one of whose files changes the default device, with that file."""
    setting = {path: path for path, summary in summaries.items() if summary.sets_default_device and not summary.test_code}
    return {current: os.path.relpath(setting_file, root)
            for current, (setting_file, _) in _in_programs_with(setting, summaries, imported).items()}


def _gpu_selection(root: Path, summaries: dict[str, _Summary], imported: dict[str, set[str]]) -> dict[str, str]:
    """Each file of a program one of whose files chooses the current GPU, with that file."""
    selecting = {path: path for path, summary in summaries.items() if summary.selects_a_gpu and not summary.test_code}
    return {current: os.path.relpath(selecting_file, root)
            for current, (selecting_file, _) in _in_programs_with(selecting, summaries, imported).items()}


_Mark = TypeVar("_Mark", str, tuple[str, int])


def _in_programs_with(marked: dict[str, _Mark], summaries: dict[str, _Summary],
                      imported: dict[str, set[str]]) -> dict[str, tuple[_Mark, str]]:
    """Each file a program holding a marked file imports (the program and the marked file
    included), with the mark and the program: the programs are the files that import a
    marked file, directly or not (itself too), and the first mark (by its file's path) wins."""
    reach: dict[str, tuple[_Mark, str]] = {}
    for program, mark in _programs_with(marked, summaries, imported):
        pending = [program]
        while pending:
            current = pending.pop()
            if current in reach:
                continue
            reach[current] = (mark, program)
            pending.extend(imported.get(current, ()))
    return reach


def _programs_with(marked: dict[str, _Mark], summaries: dict[str, _Summary],
                   imported: dict[str, set[str]]) -> list[tuple[str, _Mark]]:
    """The programs holding a marked file (the files that import one, directly or not, itself
    too), each with the first mark (by its file's path), in the order a file's program is
    named by: a program a user runs (a file nothing imports) first."""
    if not marked:
        return []
    importers: dict[str, set[str]] = {}
    for path, targets in imported.items():
        for target in targets:
            importers.setdefault(target, set()).add(path)
    programs: dict[str, _Mark] = {}
    for marked_file, mark in sorted(marked.items(), key=lambda item: item[0]):
        pending = [marked_file]
        while pending:
            current = pending.pop()
            if current in programs or summaries[current].test_code:
                continue
            programs[current] = mark
            pending.extend(importers.get(current, ()))
    return sorted(programs.items(), key=lambda item: (item[0] in importers, item[0]))


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


def _parse(source: bytes) -> ast.Module:
    """Python's tree of a project file: warnings about the user's code (an invalid escape
    sequence) are not ours to print, and where they are errors the file is not read."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(source)


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
    parsed = _ParsedOnce(source)
    read = _Summary(names_accelerator, imports=imports, test_code=test_code, path_names=_path_names(source),
                    cpu_fallback=_fallback_line(source) or -_guarded_moves_line(source, parsed),
                    sets_default_device=_SETS_DEFAULT_DEVICE.search(source) is not None,
                    selects_a_gpu=_SELECTS_A_GPU.search(source) is not None,
                    loads_into_a_wrapper=_loads_into_a_wrapper(source, parsed) or _strips_the_prefix(source, parsed),
                    module_classes=_stateful_module_classes(source, parsed), all_module_classes=_module_classes(source),
                    wrapped_handoffs=_wrapped_handoffs(source, parsed),
                    wrapping_tests_of_loads=_wrapping_tests_of_loads(source, parsed),
                    numpy_parameters=_numpy_parameters(source, parsed), movers=_movers(source, parsed),
                    savers=_savers(source, parsed), initialises_cuda_at=_initialises_cuda_at(source, parsed),
                    saved_parameters=_saved_parameters(source, parsed))
    if test_code or b"save" not in source and b"add_argument" not in source:
        return read
    tree = parsed.tree()
    if tree is None:
        return read
    finder = _SaveFinder()
    try:
        finder.visit(tree)
    except RecursionError:
        return read
    cpu_options = _cpu_options(source, finder.options) if finder.options else ()
    return replace(read, saves=tuple(finder.saves), cpu_options=cpu_options)


class _ParsedOnce:
    """A file's syntax tree, parsed the first time a reader of the file needs it (most need only
    its text), and only once; None where Python cannot parse it."""

    def __init__(self, source: bytes) -> None:
        self._source = source
        self._tree: ast.Module | None = None
        self._tried = False

    def tree(self) -> ast.Module | None:
        if not self._tried:
            self._tried = True
            try:
                self._tree = _parse(self._source)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                self._tree = None
        return self._tree


# `torch.set_default_tensor_type(...)`, `torch.set_default_device(...)` outside a comment.
_SETS_DEFAULT_DEVICE = re.compile(rb"^[^#\n]*\bset_default_(?:tensor_type|device)\(", re.MULTILINE)

# A device chosen with a fallback to the CPU, on one line: `torch.device("cuda:0" if
# torch.cuda.is_available() else "cpu")`, `"cuda" if use_cuda else "cpu"`.
_CPU_FALLBACK = re.compile(rb"""\belse\s+(?:torch\.device\(\s*)?['"]cpu['"]""")

def _fallback_line(source: bytes) -> int:
    """The line of the first CPU fallback (see `_Summary.cpu_fallback`: negative where
    indented): an `else "cpu"` whose line, before it and outside a comment, has an `if`. Each
    `else "cpu"` is found first and its line read once: a pattern with the `if` in front would
    backtrack over every `if` of a long line."""
    for found in _CPU_FALLBACK.finditer(source):
        start = source.rfind(b"\n", 0, found.start()) + 1
        head = source[start:found.start()]
        if b"#" in head or re.search(rb"\bif\b", head) is None:
            continue
        line = source.count(b"\n", 0, start) + 1
        return -line if head[:1] in (b" ", b"\t") else line
    return 0


def _guarded_moves_line(source: bytes, parsed: _ParsedOnce) -> int:
    """The line of the first `if` testing `torch.cuda.is_available()` whose body calls
    `.cuda()` (not in test code): a script that moves its model or data only where there is
    a GPU means to run on the CPU elsewhere, and so do the modules it imports. Its own
    unguarded `.cuda()` calls, if any, are that CPU mode's failures (TDL007 in its file), and
    so are theirs: each fails a CPU run once the one before is mended. 0 where there is none."""
    if b"is_available" not in source or b".cuda(" not in source:
        return 0
    tree = parsed.tree()
    if tree is None:
        return 0
    guarded: set[int] = set()
    first = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "torch.cuda.is_available" in ast.unparse(node.test) \
                and not isinstance(node.test, ast.UnaryOp) and not _refuses_to_go_on(node.orelse):
            calls = {id(inner) for statement in node.body for inner in ast.walk(statement) if _calls_cuda(inner)}
            if calls:
                guarded |= calls
                first = node.lineno if not first else min(first, node.lineno)
    return first


def _refuses_to_go_on(body: list[ast.stmt]) -> bool:
    """An `else:` that raises or exits (`raise SystemError('GPU device not found')`): the
    program has no CPU mode there, it stops."""
    from torchdevlint.analysis.names import EXIT_BUILTINS, EXIT_FUNCTIONS

    if not body:
        return False
    last = body[-1]
    if isinstance(last, ast.Raise):
        return True
    return isinstance(last, ast.Expr) and isinstance(last.value, ast.Call) \
        and ast.unparse(last.value.func) in EXIT_BUILTINS | EXIT_FUNCTIONS


def _calls_cuda(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "cuda"


# `model = torch.nn.DataParallel(model).cuda()`: a name bound to a wrapper.
_WRAPPER_BINDING = re.compile(rb"^[ \t]*([A-Za-z_][\w.]*)[ \t]*=[ \t]*(?:[\w.]*\.)?(?:DataParallel|DistributedDataParallel)\(",
                              re.MULTILINE)


def _loads_into_a_wrapper(source: bytes, parsed: _ParsedOnce) -> bool:
    """A state dict loaded into a model the same body bound to a DataParallel/DDP wrapper on
    every path (`model = nn.DataParallel(model).cuda()` straight in a function's body, then
    `model.load_state_dict(...)`): the checkpoints it reads carry the wrapper's `module.`
    prefix. A wrapping under a test (`if device == "cuda":`) is not every path."""
    if not any(re.search(rb"(?<![\w.])" + re.escape(binding.group(1)) + rb"\.load_state_dict\(", source[binding.end():])
               for binding in _WRAPPER_BINDING.finditer(source)):
        return False  # the common case, read from the text alone
    tree = parsed.tree()
    if tree is None:
        return False
    # Every block: a function's, and a main guard's or any other statement's (`if __name__ ==
    # "__main__": model = DataParallel(model)`, then `model.load_state_dict(...)`).
    bodies: list[list[ast.stmt]] = [tree.body]
    bodies.extend(block for node in ast.walk(tree) if isinstance(node, ast.stmt)
                  for block in (getattr(node, "body", None), getattr(node, "orelse", None))
                  if isinstance(block, list) and block)
    for body in bodies:
        wrapped: set[str] = set()
        for statement in body:
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and _makes_a_wrapper(statement.value):
                wrapped.add(ast.unparse(statement.targets[0]))
            elif wrapped and any(isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                                 and node.func.attr == "load_state_dict" and ast.unparse(node.func.value) in wrapped
                                 for node in ast.walk(statement)):
                return True
    return False


def _wrapping_tests_of_loads(source: bytes, parsed: _ParsedOnce) -> tuple[str, ...]:
    """The tests under which a body wraps a model in DataParallel/DDP and, after the test,
    loads a state dict into it (`if params.multi_gpu: model = nn.DataParallel(model)`, then
    `model.load_state_dict(torch.load(path))`): the checkpoints it reads carry the `module.`
    prefix where the test holds. The text of each test, `not`s taken off, without spaces."""
    if not _WRAPPER_BINDING.search(source) or b"load_state_dict" not in source:
        return ()  # the common case, read from the text alone
    tree = parsed.tree()
    if tree is None:
        return ()
    found: list[str] = []
    bodies: list[list[ast.stmt]] = [tree.body]
    bodies.extend(node.body for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)))
    for body in bodies:
        wrapped: dict[str, str] = {}  # name -> the test it was wrapped under
        for statement in body:
            if isinstance(statement, ast.If):
                for inner in (*statement.body, *statement.orelse):
                    if isinstance(inner, ast.Assign) and len(inner.targets) == 1 and _makes_a_wrapper(inner.value):
                        test = statement.test
                        while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                            test = test.operand
                        wrapped[ast.unparse(inner.targets[0])] = "".join(ast.unparse(test).split())
            for node in ast.walk(statement) if wrapped else ():
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and node.func.attr == "load_state_dict":
                    test_text = wrapped.get(ast.unparse(node.func.value))
                    if test_text is not None and test_text not in found:
                        found.append(test_text)
    return tuple(found)


def files_loading_wrapped_under(path: str, test: str, store: Path | None = None) -> frozenset[str]:
    """The files of the project of `path` (relative to its root) that load a state dict into a
    model they wrapped under a test of this text (see `_wrapping_tests_of_loads`)."""
    facts = _facts(path, store)
    return frozenset() if facts is None else facts.wrapping_tests_of_loads.get(test, frozenset())


def _wrapped_handoffs(source: bytes, parsed: _ParsedOnce) -> tuple[str, ...]:
    """The functions of other files a body hands a name it bound to a DataParallel/DDP wrapper
    earlier (`model = DistributedDataParallel(model)` under `if args.distributed:`, then
    `save_model(epoch, model, ...)` with `from utils.general import save_model`), as
    `general.save_model:1` (the position) or `general.save_model:model` (the keyword)."""
    if b"DataParallel" not in source:
        return ()  # the common case, read from the text alone
    tree = parsed.tree()
    if tree is None:
        return ()
    imported: dict[str, str] = {}  # local name -> `stem.name` (or `stem` for a module)
    wrappers = {"DataParallel", "DistributedDataParallel"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            stem = node.module.rsplit(".", 1)[-1]
            for alias in node.names:
                imported[alias.asname or alias.name] = f"{stem}.{alias.name}"
                if alias.name in wrappers and alias.asname:
                    wrappers.add(alias.asname)  # `DistributedDataParallel as DDP`
        elif isinstance(node, ast.Import):
            for alias in node.names:
                imported[alias.asname or alias.name.split(".")[0]] = alias.name.rsplit(".", 1)[-1] \
                    if alias.asname else alias.name.split(".")[0]
    found: list[str] = []
    bodies: list[list[ast.stmt]] = [tree.body]
    bodies.extend(node.body for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)))
    for body in bodies:
        wrapped: set[str] = set()
        # Instances of imported classes: `save_best = SaveBestModel()`, called as `save_best(model, ...)`.
        instances: dict[str, str] = {}
        for statement in _statements_in_order(body):
            for node in _own_nodes(statement):
                if not isinstance(node, ast.Call):
                    continue
                callee = _imported_callee(node.func, imported)
                if callee is None and isinstance(node.func, ast.Name) and node.func.id in instances:
                    callee = f"{instances[node.func.id]}.__call__"
                if callee is None:
                    continue
                for position, argument in enumerate(node.args):
                    if isinstance(argument, ast.Name) and argument.id in wrapped:
                        found.append(f"{callee}:{position}")
                for keyword in node.keywords:
                    if keyword.arg is not None and isinstance(keyword.value, ast.Name) and keyword.value.id in wrapped:
                        found.append(f"{callee}:{keyword.arg}")
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
                    and isinstance(statement.targets[0], ast.Name):
                name = statement.targets[0].id
                made = _imported_callee(statement.value.func, imported) if isinstance(statement.value, ast.Call) else None
                instances.pop(name, None)
                if _makes_a_wrapper(statement.value, wrappers):
                    wrapped.add(name)
                else:
                    wrapped.discard(name)
                    if made is not None and made.rsplit(".", 1)[-1][:1].isupper():
                        instances[name] = made
    return tuple(dict.fromkeys(found))


def _statements_in_order(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """A body's statements and those of the blocks in them, in program order (not the bodies
    of functions and classes defined there)."""
    for statement in body:
        yield statement
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for field_name in ("body", "orelse", "finalbody"):
            inner = getattr(statement, field_name, None)
            if isinstance(inner, list):
                yield from _statements_in_order([item for item in inner if isinstance(item, ast.stmt)])
        for handler in getattr(statement, "handlers", []):
            yield from _statements_in_order(handler.body)


def _own_nodes(statement: ast.stmt) -> Iterator[ast.AST]:
    """The nodes of a statement outside the blocks it holds (those come as statements of their own)."""
    stack: list[ast.AST] = [statement]
    while stack:
        node = stack.pop()
        yield node
        for field_name, value in ast.iter_fields(node):
            if field_name in ("body", "orelse", "finalbody", "handlers") and isinstance(value, list):
                continue
            if isinstance(value, ast.AST):
                stack.append(value)
            elif isinstance(value, list):
                stack.extend(item for item in value if isinstance(item, ast.AST))


def _imported_callee(func: ast.expr, imported: dict[str, str]) -> str | None:
    """`general.save_model` for `save_model(...)` after `from utils.general import save_model`,
    or for `general.save_model(...)` after `from utils import general`."""
    if isinstance(func, ast.Name):
        found = imported.get(func.id)
        return found if found is not None and "." in found else None
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        module = imported.get(func.value.id)
        if module is not None:
            return f"{module.rsplit('.', 1)[-1]}.{func.attr}"
    return None


def _strips_the_prefix(source: bytes, parsed: _ParsedOnce) -> bool:
    """A state dict's keys stripped of the wrapper's `module.` prefix before a load
    (`k.replace("module.", "")`, `if "module" in k: new[k[7:]] = v`, torch's
    `consume_prefix_in_state_dict_if_present(sd, "module.")`): the project's checkpoints carry
    the prefix, and its readers expect it. Read from the code, not from text in docstrings."""
    if b"load_state_dict" not in source or b"module" not in source:
        return False
    lines = source.splitlines()
    if b"consume_prefix_in_state_dict_if_present" not in source and not any(
            _KEY_STRIPPING.search(b"\n".join(lines[max(0, index - 2):index + 12])) is not None
            for index, line in enumerate(lines) if _PREFIX_LITERAL.search(line) is not None):
        return False  # the common case, read from the text alone
    tree = parsed.tree()
    if tree is None:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else \
                node.func.id if isinstance(node.func, ast.Name) else ""
            if name == "consume_prefix_in_state_dict_if_present":
                return True
            if name in _STRIPPING_METHODS and node.args and _names_the_prefix(node.args[0]):
                return True
            if _names_a_prefix_remover(name) and any(_names_the_prefix(arg) for arg in node.args):
                return True  # `remove_prefix(state_dict, "module.")`: the project's own helper
        elif isinstance(node, ast.If) and any(_names_the_prefix(part) for part in ast.walk(node.test)) \
                and any(isinstance(part, ast.Subscript) and isinstance(part.slice, ast.Slice)
                        and part.slice.lower is not None for statement in node.body for part in ast.walk(statement)):
            return True  # `if "module" in key: new[key[7:]] = value`
        elif isinstance(node, ast.IfExp) and any(_names_the_prefix(part) for part in ast.walk(node.test)) \
                and isinstance(node.body, ast.Subscript) and isinstance(node.body.slice, ast.Slice) \
                and node.body.slice.lower is not None:
            return True  # `key[7:] if key.startswith("module.") else key`
    return False


def _numpy_parameters(source: bytes, parsed: _ParsedOnce) -> tuple[str, ...]:
    """`function:position:name` for each parameter of a top-level function that the function
    calls `.numpy()` on as it is (`X.numpy()`, `x.data.numpy()`, `x.detach().numpy()`): a
    helper (a plotting one, most often) that fails when handed a tensor on a GPU. Not one it
    gives another value first, perhaps on the host (`X = X.cpu()`); `X = X.numpy()` is the
    conversion itself."""
    if b".numpy()" not in source:
        return ()
    return _parameters_read_as_they_are(
        parsed, _numpied_root,
        rebinds=lambda node: not (_numpied_root(node.value) is not None and len(node.targets) == 1))


def _parameters_read_as_they_are(parsed: _ParsedOnce, read: Callable[[ast.AST], str | None], *,
                                 rebinds: Callable[[ast.Assign], bool] = lambda node: True) -> tuple[str, ...]:
    """`function:position:name` for each parameter of a top-level function that `read` finds
    read (the name it gives back for a node) and that the function never binds again (an
    assignment `rebinds` counts, a loop or `with` target, an augmented assignment)."""
    tree = parsed.tree()
    if tree is None:
        return ()
    found: list[str] = []
    for function in tree.body:
        if not isinstance(function, ast.FunctionDef):
            continue
        params = [arg.arg for arg in (*function.args.posonlyargs, *function.args.args)]
        used: set[str] = set()
        rebound: set[str] = set()
        for node in ast.walk(function):
            root = read(node)
            if root is not None:
                used.add(root)
            elif isinstance(node, ast.Assign) and rebinds(node):
                rebound.update(name for target in node.targets for name in _bound_names(target))
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.comprehension, ast.NamedExpr)):
                rebound.update(_bound_names(node.target))
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                rebound.update(_bound_names(node.optional_vars))
        found.extend(f"{function.name}:{position}:{name}" for position, name in enumerate(params)
                     if name in used and name not in rebound)
    return tuple(found)


def _numpied_root(node: ast.AST) -> str | None:
    """`X.numpy()`, `x.data.numpy()`: the name whose tensor the call converts as it is (a
    rebinding `X = X.numpy()` is the conversion itself); None for anything else."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "numpy" \
            and not node.args and not node.keywords:
        return _unmoved_root(node.func.value)
    return None


def _unmoved_root(node: ast.expr) -> str | None:
    """The parameter a receiver is, through `.data`, `.detach()`, `.squeeze()` and indexing, with
    no move to the host on the way; None otherwise."""
    while True:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute) and node.attr in ("data", "T") or isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("detach", "squeeze", "unsqueeze", "reshape", "view", "flatten", "float",
                                       "double", "long", "int", "clone", "contiguous", "permute", "transpose",
                                       "t"):
            node = node.func.value
        else:
            return None


def _names_a_prefix_remover(name: str) -> bool:
    lowered = name.lower()
    return "prefix" in lowered or "strip" in lowered or "remove" in lowered


def strips_the_prefix(source: bytes) -> bool:
    """Whether the file strips a state dict's keys of the wrapper's `module.` prefix before a
    load (see `_strips_the_prefix`)."""
    return _strips_the_prefix(source, _ParsedOnce(source))


def _names_the_prefix(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) \
        and node.value.lstrip("^").startswith("module") and len(node.value) <= 10


_PREFIX_LITERAL = re.compile(rb"""(['"])\^?module(\.|\\\.)?\1""")
# What takes the prefix off a key: a replacement, a slice past it, `removeprefix`, `re.sub`.
_KEY_STRIPPING = re.compile(rb"""\.replace\(|\[\s*7\s*:\s*\]|\[\s*len\(|removeprefix\(|\.sub\(|\.lstrip\(|\.split\(|"""
                            rb"""(?i:prefix|strip|remove)\w*\(""")
_STRIPPING_METHODS = frozenset({"replace", "removeprefix", "sub", "lstrip", "split"})


# A top-level class whose bases name a Module (`class Net(nn.Module):`).
_MODULE_CLASS = re.compile(rb"^class[ \t]+\w+[ \t]*\([^)]*\bModule\b", re.MULTILINE)


def _module_classes(source: bytes) -> tuple[str, ...]:
    """The file's top-level classes whose bases name a Module (`class Decoder(nn.Module):`)."""
    return tuple(match.group(1).decode() for match in _NAMED_MODULE_CLASS.finditer(source))


_NAMED_MODULE_CLASS = re.compile(rb"^class[ \t]+(\w+)[ \t]*\([^)]*\bModule\b", re.MULTILINE)


def _stateful_module_classes(source: bytes, parsed: _ParsedOnce) -> tuple[str, ...]:
    """The file's top-level `nn.Module` classes whose `__init__` makes layers or parameters of
    its own (`self.fc = nn.Linear(...)`, `nn.Parameter(...)`): a model another file builds
    with `Net()` is then on the CPU until it is moved. Classes that only hold what they are
    handed, or stateless parts (a loss, an activation), are not."""
    if _MODULE_CLASS.search(source) is None:
        return ()
    tree = parsed.tree()
    if tree is None:
        return ()
    from torchdevlint.analysis.brains import torch_api

    def makes_state(body: ast.AST, helpers: frozenset[str]) -> bool:
        for call in ast.walk(body):
            if not isinstance(call, ast.Call):
                continue
            dotted = ast.unparse(call.func)
            last = dotted.rsplit(".", 1)[-1]
            qualified = f"torch.nn.{last}"
            if dotted in helpers or last == "Parameter" or dotted.startswith(("nn.", "torch.nn.")) \
                    and torch_api.is_module_constructor(qualified) and not torch_api.is_stateless_module(qualified) \
                    and qualified not in torch_api.MODULE_CONTAINERS:
                return True
        return False

    # The file's functions that make layers (`make_layers(cfg)` returning an nn.Sequential of convolutions).
    helpers = frozenset(node.name for node in tree.body
                        if isinstance(node, ast.FunctionDef) and makes_state(node, frozenset()))
    found: list[str] = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef) or not any(
                (base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")) == "Module"
                for base in node.bases):
            continue
        init = next((item for item in node.body if isinstance(item, ast.FunctionDef) and item.name == "__init__"), None)
        if init is not None and makes_state(init, helpers):
            found.append(node.name)
    return tuple(found)


def _savers(source: bytes, parsed: _ParsedOnce) -> tuple[str, ...]:
    """`name:file_name` for each top-level function or class of the file that calls
    `torch.save` to a file its path names (`torch.save(model.state_dict(), path + '/' +
    'checkpoint.pth')` in an early-stopping helper), or through a name assigned such a path
    in the same function."""
    if b"torch.save" not in source:
        return ()
    tree = parsed.tree()
    if tree is None:
        return ()
    found: list[str] = []
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        names: set[str] = set()
        functions = [node] if not isinstance(node, ast.ClassDef) else \
            [item for item in node.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for function in functions:
            assigned = {target.id: statement.value for statement in ast.walk(function) if isinstance(statement, ast.Assign)
                        for target in statement.targets if isinstance(target, ast.Name)}
            for call in ast.walk(function):
                if not (isinstance(call, ast.Call) and ast.unparse(call.func) == "torch.save"):
                    continue
                saved = call.args[1] if len(call.args) > 1 else next(
                    (keyword.value for keyword in call.keywords if keyword.arg == "f"), None)
                if isinstance(saved, ast.Name) and saved.id in assigned:
                    saved = assigned[saved.id]
                name = path_target(saved).file_name if saved is not None else ""
                if name:
                    names.add(name)
                elif saved is not None and function is node:
                    named_by = _file_name_parameter(saved, function, assigned)
                    if named_by:
                        names.add(named_by)
        found.extend(f"{node.name}:{name}" for name in sorted(names))
    return tuple(found)


def _file_name_parameter(saved: ast.expr, function: ast.FunctionDef | ast.AsyncFunctionDef,
                         assigned: dict[str, ast.expr]) -> str:
    """`@name@position` where the file name of a saved path is a parameter of the top-level
    function, never rebound (`target_dir_path / model_name`, `os.path.join(folder,
    file_name)`); "" otherwise."""
    last: ast.expr | None = None
    if isinstance(saved, ast.BinOp) and isinstance(saved.op, ast.Div):
        last = saved.right
    elif isinstance(saved, ast.Call) and saved.args and not saved.keywords and isinstance(saved.func, ast.Attribute) \
            and saved.func.attr == "join":
        last = saved.args[-1]
    if not isinstance(last, ast.Name) or last.id in assigned:
        return ""
    parameters = [argument.arg for argument in (*function.args.posonlyargs, *function.args.args)]
    if last.id not in parameters:
        return ""
    return f"@{last.id}@{parameters.index(last.id)}"


def _saved_parameters(source: bytes, parsed: _ParsedOnce) -> tuple[str, ...]:
    """`function:position:name` for each parameter of a top-level function that the function
    hands `torch.save` as it is, or an item of it (`def save_checkpoint(states, is_best,
    output_dir)` with `torch.save(states['state_dict'], ...)`), and never rebinds: what a
    caller hands that parameter is what the file holds."""
    if b"torch.save" not in source:
        return ()
    return _parameters_read_as_they_are(parsed, _saved_root)


def _saved_root(node: ast.AST) -> str | None:
    """`torch.save(states, ...)`, `torch.save(states["state_dict"], ...)`: the name saved."""
    if not (isinstance(node, ast.Call) and node.args and ast.unparse(node.func) == "torch.save"):
        return None
    written = node.args[0]
    if isinstance(written, ast.Subscript):
        written = written.value
    return written.id if isinstance(written, ast.Name) else None


# Modules whose calls run none of the project's code.
_LIBRARY_ROOTS = frozenset({"torch", "torchvision", "numpy", "np", "os", "sys", "argparse", "random", "time", "math",
                            "json", "logging", "warnings", "pathlib", "datetime", "collections", "re", "pandas",
                            "pd", "matplotlib", "plt", "yaml", "tqdm", "shutil", "glob", "pickle", "copy"})


def _initialises_cuda_at(source: bytes, parsed: _ParsedOnce) -> int:
    """The line of the file's first module-level call that initialises CUDA
    (`torch.cuda.is_available()`, `set_device`, ...: code outside functions and classes, a main
    guard's included), where no module-level call of a function or class of the file, or of a
    name imported from elsewhere than the standard library and common libraries, comes first
    (it may run another file's code before); 0 where there is none."""
    if b"torch.cuda." not in source:
        return 0
    tree = parsed.tree()
    if tree is None:
        return 0
    # Imported here: a run the findings cache answers reads what was found from the store.
    from torchdevlint.analysis.devices import CUDA_INITIALISING_FUNCTIONS

    imported: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] not in _LIBRARY_ROOTS):
            imported.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            imported.update((alias.asname or alias.name).split(".")[0] for alias in node.names
                            if alias.name.split(".")[0] not in _LIBRARY_ROOTS)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            imported.add(node.name)  # its own function may call another file's
    calls: list[ast.Call] = []
    pending: list[ast.AST] = list(tree.body)
    while pending:
        current = pending.pop()
        if isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(current, ast.Call):
            calls.append(current)
        pending.extend(ast.iter_child_nodes(current))
    calls.sort(key=lambda call: (call.lineno, call.col_offset))
    for call in calls:
        func = call.func
        dotted = ast.unparse(func)
        if dotted in CUDA_INITIALISING_FUNCTIONS:
            return call.lineno
        head = dotted.split(".", 1)[0].split("(", 1)[0]
        if head in imported:
            return 0  # another file's code may run first
    return 0


# A move inside a function or class body: indented (one at module level is no mover's).
_MOVES = re.compile(rb"^[ \t]+[^\n#]*\.(?:to|cuda)\(", re.MULTILINE)


def _movers(source: bytes, parsed: _ParsedOnce) -> tuple[str, ...]:
    """The file's top-level functions that move a parameter with `.to(...)`/`.cuda(...)`, and
    classes whose methods move a parameter or an attribute of `self` (a trainer whose
    `__init__` does `self.model.to(self.device)`): a model handed to one may be where it was
    moved afterwards, since a Module moves in place."""
    if _MOVES.search(source) is None:
        return ()
    tree = parsed.tree()
    if tree is None:
        return ()

    def moves(function: ast.FunctionDef | ast.AsyncFunctionDef, through_self: bool) -> bool:
        args = function.args
        names = {arg.arg for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs,
                                     *((args.vararg,) if args.vararg else ()))}
        self_name = args.args[0].arg if through_self and args.args else None
        # `def to_device(device, *models): return [m.to(device) for m in models]`: what a
        # loop over a parameter takes from it is handed too.
        for loop in ast.walk(function):
            if isinstance(loop, (ast.For, ast.comprehension)) and isinstance(loop.iter, ast.Name) \
                    and loop.iter.id in names and loop.iter.id != self_name:
                names.update(_bound_names(loop.target))
        for call in ast.walk(function):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in ("to", "cuda")):
                continue
            moved = call.func.value
            if isinstance(moved, ast.Name) and moved.id in names and moved.id != self_name:
                return True
            if self_name is not None and isinstance(moved, ast.Attribute) and isinstance(moved.value, ast.Name) \
                    and moved.value.id == self_name:
                return True
        return False

    def class_moves(node: ast.ClassDef) -> bool:
        return any(isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and moves(item, True) for item in node.body)

    return tuple(node.name for node in tree.body
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and moves(node, False)
                 or isinstance(node, ast.ClassDef) and class_moves(node))


def _makes_a_wrapper(value: ast.expr, names: Collection[str] = ("DataParallel", "DistributedDataParallel")) -> bool:
    """`nn.DataParallel(model)`, `DistributedDataParallel(model).cuda()`, `...to(device)`
    (`names`: what the file calls the wrappers)."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in ("cuda", "to"):
        value = value.func.value
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name in names


# Code that chooses which GPU the process uses: `torch.cuda.set_device(gpu_ids[0])`, `with
# torch.cuda.device(rank):`, or which GPUs it sees (`CUDA_VISIBLE_DEVICES`).
_SELECTS_A_GPU = re.compile(rb"^[^#\n]*(?:\bset_device\s*\(|\bcuda\.device\s*\(|CUDA_VISIBLE_DEVICES)", re.MULTILINE)


# `weights_path = "ckpt/model.pth"`, `self.vocab_file: str = 'vocab.pt'`: a name given a path.
_PATH_ASSIGNMENT = re.compile(rb"""^[ \t]*(?:self\.)?(\w+)[ \t]*(?::[^=\n]*)?=[ \t]*[rR]?(['"])([^'"\n]*)\2""",
                              re.MULTILINE)
# `res152_path = os.path.join(root, "ResNet", "resnet152-b121ed2d.pth")`, `Path(root, "x.pt")`.
_JOINED_PATH_ASSIGNMENT = re.compile(
    rb"""^[ \t]*(?:self\.)?(\w+)[ \t]*(?::[^=\n]*)?=[ \t]*(?:[\w.]*\bjoin|Path)\([^\n]*?[rR]?(['"])([^'"\n]*)\2[ \t]*\)[ \t]*(?:#[^\n]*)?$""",
    re.MULTILINE)
# `vocab_path = data_dir + "vocab.pt"`, `path = root + "/model.pth"`: a folder's name and a file name.
_CONCATENATED_PATH_ASSIGNMENT = re.compile(
    rb"""^[ \t]*(?:self\.)?(\w+)[ \t]*(?::[^=\n]*)?=[ \t]*([\w.]+)[ \t]*\+[ \t]*[rR]?(['"])([^'"\n]*)\3[ \t]*(?:#[^\n]*)?$""",
    re.MULTILINE)
# `parser.add_argument("--weights", ..., default="model.pth")`: an option's default path.
_PATH_OPTION = re.compile(rb"""add_argument\(\s*['"]-{1,2}([\w-]+)['"][^()]*?\bdefault\s*=\s*[rR]?(['"])([^'"\n]*)\2""")


def _path_names(source: bytes) -> tuple[tuple[str, str], ...]:
    """The names the file gives paths of files (assignments of a string, options' defaults),
    with each path's file name: where a load reads `args.weights`, which file that is."""
    found: set[tuple[str, str]] = set()
    for pattern in (_PATH_ASSIGNMENT, _JOINED_PATH_ASSIGNMENT, _PATH_OPTION):
        for match in pattern.finditer(source):
            name = match.group(1).decode("utf-8", "replace").replace("-", "_")
            file_name = _file_name(match.group(3).decode("utf-8", "replace"))
            if file_name:
                found.add((name, file_name))
    for match in _CONCATENATED_PATH_ASSIGNMENT.finditer(source):
        file_name = _concatenated_file_name(match.group(2).decode("utf-8", "replace"),
                                            match.group(4).decode("utf-8", "replace"))
        if file_name:
            found.add((match.group(1).decode("utf-8", "replace"), file_name))
    return tuple(sorted(found))


def _concatenated_file_name(folder: str, text: str) -> str:
    """The file name of `folder + text`: where the text starts a folder (`"/model.pth"`), or
    the name on the left is a folder's (`data_dir + "vocab.pt"`); not `stem + ".pth"` or
    `prefix + "_model.pth"`, which name part of a file."""
    from torchdevlint.analysis.brains import naming

    if "/" in text or set(naming.words(folder.rsplit(".", 1)[-1])) & _FOLDER_WORDS:
        return _file_name(text)
    return ""


# Words of a name that holds a folder (`data_dir`, `dataset_path`, `save_folder`, `root`).
_FOLDER_WORDS = frozenset({"dir", "directory", "folder", "path", "root"})


def _made_elsewhere(file_name: str) -> bool:
    """A file name that says the file was made outside the project: weights torch.hub
    publishes (named with a prefix of their hash, `resnet152-b121ed2d.pth`), or weights
    converted from another framework's (`vgg16-caffe.pth`, `yolov3_darknet.pth`)."""
    from torchdevlint.analysis.brains import naming, torch_ops

    hashed = re.search(torch_ops.HUB_HASH_PATTERN, file_name)
    if hashed is not None and len(hashed.group(1)) >= _HUB_HASH_DIGITS:
        return True
    return bool(set(naming.words(file_name)) & naming.OTHER_FRAMEWORK_WORDS)


# torch.hub's published file names carry 8 hex digits or more; fewer could be a word (`-cafe.`).
_HUB_HASH_DIGITS = 8

# The last component of a path that names one file: a stem and an extension, no placeholders.
_FILE_NAME = re.compile(r"[\w+-][\w.+-]*\.[A-Za-z]\w*")


def _file_name(path: str) -> str:
    last = path.replace("\\", "/").rsplit("/", 1)[-1]
    return last if _FILE_NAME.fullmatch(last) else ""


def path_target_of_code(code: str) -> PathTarget:
    """`path_target` of an expression's code (a rule's node, rendered)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(f"(\n{code}\n)", mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return PathTarget()
    return path_target(tree.body)


def path_target(path: ast.expr) -> PathTarget:
    """What file a path expression names (see `PathTarget`); empty where it does not say."""
    if isinstance(path, ast.Constant) and isinstance(path.value, str):
        return PathTarget(_file_name(path.value))
    if isinstance(path, ast.JoinedStr) and path.values:
        last = path.values[-1]
        # `f"{folder}/vocab.pt"`: a last part with a folder separator and no placeholder after it.
        if isinstance(last, ast.Constant) and isinstance(last.value, str) and "/" in last.value:
            return PathTarget(_file_name(last.value))
        return PathTarget()
    if isinstance(path, ast.BinOp) and isinstance(path.right, ast.Constant) and isinstance(path.right.value, str):
        # `folder / "model.pth"`; `folder + "/model.pth"`, `data_dir + "vocab.pt"` (not `stem + ".pth"`).
        if isinstance(path.op, ast.Div):
            return PathTarget(_file_name(path.right.value))
        if isinstance(path.op, ast.Add) and isinstance(path.left, (ast.Name, ast.Attribute)):
            return PathTarget(_concatenated_file_name(ast.unparse(path.left), path.right.value))
        if isinstance(path.op, ast.Add) and "/" in path.right.value:
            return PathTarget(_file_name(path.right.value))
        if isinstance(path.op, ast.Add) and isinstance(path.left, ast.BinOp) and isinstance(path.left.op, ast.Add) \
                and isinstance(path.left.right, ast.Constant) and isinstance(path.left.right.value, str) \
                and path.left.right.value.endswith(("/", "\\")):
            # `path + '/' + 'checkpoint.pth'`
            return PathTarget(_file_name(path.right.value))
        return PathTarget()
    if isinstance(path, ast.Call) and path.args and not path.keywords:
        func = path.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name == "join":
            return path_target(path.args[-1])
        if name in ("Path", "str", "expanduser", "abspath", "realpath", "normpath") and len(path.args) == 1:
            return path_target(path.args[0])
        return PathTarget()
    if isinstance(path, ast.Name):
        return PathTarget(path_name=path.id)
    if isinstance(path, ast.Attribute):
        return PathTarget(path_name=path.attr)
    if isinstance(path, ast.Subscript) and isinstance(path.slice, ast.Constant) and isinstance(path.slice.value, str):
        return PathTarget(path_name=path.slice.value)
    return PathTarget()


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
        self.saves: list[_Save] = []
        # `parser.add_argument(...)` calls, judged afterwards (`_cpu_options`).
        self.options: list[ast.Call] = []
        self._torch_names: set[str] = set()
        self._save_names: set[str] = set()
        # The innermost function's parameters and assignments (name -> assigned values).
        self._functions: list[tuple[frozenset[str], dict[str, list[ast.expr]]]] = []
        # And the names whose entries it sets to host copies (`sd[k] = sd[k].cpu()`).
        self._host_entries: list[set[str]] = []

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == "torch":
                self._torch_names.add(alias.asname or "torch")
            elif alias.name.startswith("torch.") and alias.asname is None:
                self._torch_names.add("torch")  # `import torch.utils.data` binds `torch` too

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if any(alias.name == "*" for alias in node.names):
            # `from utils import *`, where utils imports torch (see `naming.STAR_IMPORTED_MODULES`).
            self._torch_names.add("torch")
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
            elif isinstance(statement, (ast.For, ast.AsyncFor, ast.comprehension)):
                # `for prefix, state in zip(prefixes, states):` holds what it iterates.
                for name in _bound_names(statement.target):
                    assigned.setdefault(name, []).append(statement.iter)
        self._functions.append((parameters, assigned))
        self._host_entries.append(_host_entries(node))
        self.generic_visit(node)
        self._functions.pop()
        self._host_entries.pop()

    def visit_Module(self, node: ast.Module) -> None:
        self._host_entries.append(_host_entries(node))
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in self._torch_names \
                and func.attr == "save" or isinstance(func, ast.Name) and func.id in self._save_names:
            saved = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "obj"), None)
            path = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "f"), None)
            if saved is not None:
                host = _host_copy(saved) or _host_data(saved) or isinstance(saved, ast.Name) \
                    and bool(self._host_entries) and saved.id in self._host_entries[-1]
                self.saves.append(_Save(node.lineno, self._from_outside(saved), host,
                                        PathTarget() if path is None else path_target(path)))
        elif isinstance(func, ast.Attribute) and func.attr == "add_argument":
            self.options.append(node)
        elif isinstance(func, ast.Attribute) and (func.attr in _LIBRARY_SAVES or func.attr == "save" and any(
                word in ast.unparse(func.value).lower() for word in _LIBRARY_SAVERS)):
            self.saves.append(_Save(node.lineno, True))
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
    absolute = os.path.abspath(path)
    option = facts.cpu_mode.get(absolute)
    offered = "none" if option is None else f"{option.file}:{option.line}{'/fallback' if option.falls_back else ''}"
    if option is not None:
        # Which of the file's definitions those programs use (`cpu_mode_option_using`): any
        # change to one of their files may change it.
        programs = [program for program, _ in facts.cpu_programs if absolute in facts.program_files(program)]
        files = sorted(set().union(*(facts.program_files(program) for program in programs)))
        offered += "/" + _digest(repr([(program, facts.stamps.get(program)) for program in programs]
                                      + [(other, facts.stamps.get(other)) for other in files]))
    selection = facts.gpu_selection.get(os.path.abspath(path), "none") if facts.complete else "?"
    default_device = facts.default_device.get(os.path.abspath(path), "none")
    return (f"device-checkpoints={facts.writing.key};cpu-mode={offered};gpu-selection={selection};"
            f"wrapped-loads={','.join(facts.wrapped_loads)};module-classes={_digest(','.join(sorted(facts.module_classes)))}"
            f":{_digest(','.join(sorted(facts.all_module_classes)))}"
            f";handoffs={_digest(repr(sorted(wrapped_handoffs(path, store).items())))}"
            f";default-device={default_device};wrapping-tests-of-loads={_digest(repr(sorted(facts.wrapping_tests_of_loads.items())))}"
            f";numpy-parameters={_digest(repr(sorted(facts.numpy_parameters.items())))}"
            f";saved-parameters={_digest(repr(sorted(facts.saved_parameters.items())))}"
            f";movers={_digest(','.join(sorted(facts.movers)))}"
            f";savers={_digest(','.join(sorted(facts.savers)))}"
            f";cuda-programs={_cuda_programs_key(facts, absolute)}")


def _cuda_programs_key(facts: _ProjectFacts, absolute: str) -> str:
    """The programs initialising CUDA that import the file, with their files' change times
    (`cuda_initialised_before_using` reads which of them use what)."""
    programs = [(program, line) for program, _, line in facts.cuda_programs
                if program != absolute and absolute in facts.program_files(program)]
    if not programs:
        return "none"
    files = sorted(set().union(*(facts.program_files(program) for program, _ in programs)))
    return _digest(repr(programs) + repr([(other, facts.stamps.get(other)) for other in files]))


def _bound_names(target: ast.expr) -> list[str]:
    """The names an assignment binds (`a`, `a, (b, *c)`); `a.weight = ...` binds none."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Starred):
        return _bound_names(target.value)
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for element in target.elts for name in _bound_names(element)]
    return []


def _host_data(saved: ast.expr) -> bool:
    """What is saved is named as host data only: `(vocab_src, vocab_tgt)`, `vars(args)`,
    `{"stoi": stoi, "itos": itos}` (see `naming.names_host_data`)."""
    from torchdevlint.analysis.brains import naming

    if isinstance(saved, (ast.Tuple, ast.List)):
        return bool(saved.elts) and all(_host_data(element) for element in saved.elts)
    if isinstance(saved, ast.Dict):
        return bool(saved.values) and all(_host_data(value) for value in saved.values)
    if isinstance(saved, ast.Call) and isinstance(saved.func, ast.Name) and saved.func.id == "vars" and len(saved.args) == 1:
        return _host_data(saved.args[0])
    if isinstance(saved, ast.Name):
        return naming.names_host_data(saved.id)
    if isinstance(saved, ast.Attribute):
        return naming.names_host_data(saved.attr)
    return False


def _host_copy(saved: ast.expr) -> bool:
    """What is saved passed through `.cpu()` first: `net.cpu().state_dict()`,
    `features.detach().cpu()`, `{k: v.cpu() for k, v in weights.items()}`."""
    if isinstance(saved, (ast.DictComp, ast.ListComp)):
        return _host_copy(saved.value if isinstance(saved, ast.DictComp) else saved.elt)
    while isinstance(saved, ast.Call) and isinstance(saved.func, ast.Attribute):
        if saved.func.attr == "cpu" or saved.func.attr == "to" and _names_the_cpu(saved):
            return True
        saved = saved.func.value
    return False


def _host_entries(body: ast.AST) -> set[str]:
    """Names whose entries the body sets to host copies (`state_dict[key] =
    state_dict[key].to(torch.device("cpu"))`, in a loop over its keys): saved, they hold host
    tensors."""
    return {target.value.id for statement in ast.walk(body) if isinstance(statement, ast.Assign)
            and _host_copy(statement.value)
            for target in statement.targets if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)}


def _names_the_cpu(move: ast.Call) -> bool:
    """`.to("cpu")`, `.to(torch.device("cpu"))`, `.to(device="cpu")`."""
    target = move.args[0] if move.args else next((k.value for k in move.keywords if k.arg == "device"), None)
    if isinstance(target, ast.Call) and target.args:
        target = target.args[0]  # torch.device("cpu")
    return isinstance(target, ast.Constant) and target.value == "cpu"
