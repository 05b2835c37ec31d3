"""The package's layers: config -> registry -> engine -> fixer -> reporting, front ends at the
edges. Read from the source, every import counts (deferred and type-checking ones too)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from conftest import ROOT

PACKAGE = ROOT / "torchdevlint"
FRONT_ENDS = frozenset({"torchdevlint.cli", "torchdevlint.flake8_plugin", "torchdevlint.verify.command",
                        "torchdevlint.server"})


def _module_name(path_parts: tuple[str, ...]) -> str:
    parts = list(path_parts)
    parts[-1] = parts[-1].removesuffix(".py")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["torchdevlint", *parts])


@cache
def sources() -> dict[str, Path]:
    return {_module_name(path.relative_to(PACKAGE).parts): path for path in PACKAGE.rglob("*.py")}


@cache
def modules() -> dict[str, frozenset[str]]:
    """Every module of the package -> the package modules it imports."""
    graph: dict[str, frozenset[str]] = {}
    for name, path in sources().items():
        imported: set[str] = set()
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], base]).strip(".")
                imported.add(base)
                # `from torchdevlint import rules` imports a module, not a name.
                imported.update(f"{base}.{alias.name}" for alias in node.names)
        graph[name] = frozenset(module for module in imported if module in sources() and module != name)
    return graph


def reachable(start: str) -> set[str]:
    graph = modules()
    seen: set[str] = set()
    pending = [start]
    while pending:
        current = pending.pop()
        for imported in graph[current]:
            if imported not in seen:
                seen.add(imported)
                pending.append(imported)
    return seen


def test_no_module_takes_part_in_an_import_cycle() -> None:
    cyclic = sorted(name for name in modules() if name in reachable(name))
    # `torchdevlint` and `torchdevlint.rules` (packages) import nothing that imports them back.
    assert cyclic == [], f"modules in an import cycle: {cyclic}"


def test_rules_and_analysis_never_import_a_front_end() -> None:
    core = [name for name in modules() if name.startswith(("torchdevlint.rules", "torchdevlint.analysis"))]
    assert core
    for name in core:
        assert not reachable(name) & FRONT_ENDS, f"{name} reaches a front end: {reachable(name) & FRONT_ENDS}"


def test_the_engine_never_reaches_verify_or_a_front_end() -> None:
    for name in ("torchdevlint.engine", "torchdevlint.fixer", "torchdevlint.runner", "torchdevlint.reporting"):
        reached = reachable(name)
        assert not {module for module in reached if module.startswith("torchdevlint.verify")}, name
        assert not reached & FRONT_ENDS, name


def test_rules_read_the_analysis_through_its_results_never_its_interpreter_or_each_other() -> None:
    rules = [name for name in modules() if name.startswith("torchdevlint.rules.")]
    assert rules
    for name in rules:
        imported = modules()[name]
        assert "torchdevlint.analysis.flow.interpreter" not in imported, f"{name} imports the interpreter"
        assert "torchdevlint.analysis.flow.model" not in imported, f"{name} imports the model: ask context.flow"
        others = {module for module in imported if module.startswith("torchdevlint.rules.")}
        assert not others, f"{name} imports other rules: {others}"


def test_rules_ask_what_a_name_refers_to_through_one_oracle() -> None:
    """`context.names` answers for every rule; the import table it reads first and the flow
    model's resolution behind it are the engine's."""
    for name, path in sources().items():
        if not name.startswith("torchdevlint.rules."):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("imports", "imported_name"):
                assert not (isinstance(node.value, ast.Attribute) and node.value.attr in ("context", "flow")), \
                    f"{name}:{node.lineno} reads {node.attr} of the {node.value.attr}: ask self.context.names"
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                imported = {alias.name for alias in node.names}
                assert not imported & {"ImportTable", "NameOracle"}, f"{name}:{node.lineno} imports a resolver"


def test_the_analysis_never_reaches_a_rule_s_context_or_its_fixes() -> None:
    analysis = [name for name in modules() if name.startswith("torchdevlint.analysis")]
    for name in analysis:
        reached = reachable(name) & {"torchdevlint.context", "torchdevlint.edits", "torchdevlint.rule"}
        assert not reached, f"{name} reaches {reached}"


# Syntax helpers the brains may read code with: they know nothing of values or flow.
SYNTAX_HELPERS = frozenset({"torchdevlint.analysis.devices", "torchdevlint.analysis.names", "torchdevlint.analysis.tree"})
# The band a rule sits above: it is handed to the engine, never the other way round.
ENGINE_BAND = frozenset(f"torchdevlint.{name}" for name in (
    "settings", "config", "registry", "runner", "programs", "fixer", "engine", "positions", "reporting",
    "cache", "ruledocs", "terminal", "files", "gitignore", "debug", "progress", "incremental_parse"))
# Modules at the bottom of the picture: they import only each other.
LEAVES = frozenset(f"torchdevlint.{name}" for name in (
    "diagnostics", "sourcefile", "suppression", "budget", "runtime_proof", "rule_index"))


def test_rules_reach_neither_the_engine_band_nor_verify() -> None:
    rules = [name for name in modules() if name.startswith("torchdevlint.rules.")]
    for name in rules:
        reached = reachable(name)
        above = reached & ENGINE_BAND | {module for module in reached if module.startswith("torchdevlint.verify")}
        assert not above, f"{name} reaches {sorted(above)}: a rule sits below the engine and verify"


def test_the_flow_engine_never_imports_the_shared_analyses() -> None:
    for name, imported in modules().items():
        if not name.startswith("torchdevlint.analysis.flow"):
            continue
        shared = {module for module in imported if module.startswith("torchdevlint.analysis.")
                  and not module.startswith(("torchdevlint.analysis.flow", "torchdevlint.analysis.brains"))
                  and module not in SYNTAX_HELPERS | {"torchdevlint.analysis.local_names"}}
        assert not shared, f"{name} imports {sorted(shared)}: the shared analyses sit above the flow engine"


def test_syntax_helpers_and_leaf_modules_import_nothing_above_them() -> None:
    helpers = SYNTAX_HELPERS | {"torchdevlint.analysis.local_names"}
    for name in helpers:
        assert modules()[name] <= helpers, f"{name} imports {sorted(modules()[name] - helpers)}"
    for name in LEAVES:
        assert modules()[name] <= LEAVES, f"{name} imports {sorted(modules()[name] - LEAVES)}"


def test_the_brains_are_the_bottom_layer() -> None:
    brains = [name for name in modules() if name.startswith("torchdevlint.analysis.brains")]
    assert "torchdevlint.analysis.brains.torch_ops" in brains
    for name in brains:
        reached = {module for module in reachable(name) if not module.startswith("torchdevlint.analysis.brains")}
        assert reached <= SYNTAX_HELPERS, f"{name} reaches {reached - SYNTAX_HELPERS}: the brains are the bottom layer"


def test_only_verify_imports_torch() -> None:
    for name, path in sources().items():
        if name.startswith("torchdevlint.verify"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                imported = [node.module or ""]
            else:
                continue
            assert not any(n == "torch" or n.startswith("torch.") for n in imported), f"{name} imports torch"


# Imports each named module first in a process forked from one that has imported only the
# third-party libraries (LibCST, torch where installed): the module and everything of ours it
# pulls in start from nothing, as in a fresh interpreter, without paying for those libraries
# once per module. Prints one JSON object: module -> the end of its traceback.
_IMPORT_EACH_ALONE = """
import importlib, json, os, sys, traceback
import libcst
try:
    import torch
except ImportError:
    pass
assert not any(name == "torchdevlint" or name.startswith("torchdevlint.") for name in sys.modules)
failures = {}
for name in json.loads(sys.argv[1]):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            importlib.import_module(name)
        except BaseException:
            os.write(write, traceback.format_exc()[-300:].encode())
            os._exit(1)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        told = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        failures[name] = told or f"exit status {status}"
print(json.dumps(failures))
"""


@pytest.mark.slow
def test_every_module_imports_on_its_own() -> None:
    # An import cycle or a missing import shows as a failure only when the module is the first
    # of ours imported. One forking process per core, each taking its share of the modules.
    from concurrent.futures import ThreadPoolExecutor

    def imports_alone(names: list[str]) -> dict[str, str]:
        result = subprocess.run([sys.executable, "-c", _IMPORT_EACH_ALONE, json.dumps(names)], capture_output=True,
                                text=True, timeout=300, check=False, cwd=ROOT)
        assert result.returncode == 0, result.stderr[-1000:]
        answer: dict[str, str] = json.loads(result.stdout.strip().splitlines()[-1])
        return answer

    # `__main__` runs the command line when imported: that is its job.
    names = sorted(set(modules()) - {"torchdevlint.__main__"})
    cores = max(1, len(os.sched_getaffinity(0)))
    shares = [names[index::cores] for index in range(cores)]
    with ThreadPoolExecutor(max_workers=cores) as pool:
        failures = {name: told for answer in pool.map(imports_alone, shares) for name, told in answer.items()}
    assert failures == {}
    assert len(names) > 100  # every module of the package was tried


def test_a_check_answered_from_the_cache_imports_no_rule_analysis_or_libcst(tmp_path: Path) -> None:
    # Pre-commit and CI re-run `check` over files that did not change: the cache answers, and
    # what only linting needs (the rules, the analysis, LibCST) is never imported.
    (tmp_path / "train.py").write_text("import torch\nx = torch.zeros(3)\nx.cuda()\n")
    code = (
        "import sys\n"
        "from torchdevlint.cli import main\n"
        "main(['check', '--exit-zero', '--format', 'full', 'train.py'])\n"
        "heavy = sorted(m for m in sys.modules if m == 'libcst' or m.startswith("
        "('libcst.', 'torchdevlint.analysis', 'torchdevlint.rules.', 'torchdevlint.engine')))\n"
        "print('IMPORTED', heavy)\n"
    )
    runs = [subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                           timeout=120, check=False) for _ in range(2)]
    assert "TDL001" in runs[0].stdout and "IMPORTED []" not in runs[0].stdout  # the first run lints
    assert "TDL001" in runs[1].stdout, runs[1].stderr
    assert "IMPORTED []" in runs[1].stdout, runs[1].stdout.splitlines()[-1]
