"""Times torchdevlint against bare LibCST parsing and its peers, as whole processes.

    python benchmarks/benchmark.py                       # synthetic corpus (generated)
    python benchmarks/benchmark.py --corpus PATH         # any folder of Python files
    python benchmarks/benchmark.py --files 600 --lines 230 --runs 5

Prints a table of medians, each with its ratio to a bare LibCST parse of the same files, and
the peak memory of the measured process. TorchFix and flake8 are timed when installed.

The cold runs and the parse they are compared with are timed in rounds, one of each per round,
and each ratio is the median of the per-round ratios: a shared machine that slows down for a
minute slows both sides of a ratio, not one. Every process runs from compiled bytecode, kept in
a private cache warmed before the first round, as after `pip install` (an environment with
PYTHONDONTWRITEBYTECODE would otherwise recompile the tool's modules, but not LibCST's, in
every process).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic_corpus import build

_PARSE_ALL = """
import sys, pathlib, libcst
for path in sorted(pathlib.Path(sys.argv[1]).rglob("*.py")):
    try:
        libcst.parse_module(path.read_bytes())
    except Exception:
        pass
"""
_AST_ALL = _PARSE_ALL.replace("import sys, pathlib, libcst", "import sys, pathlib, ast").replace(
    "libcst.parse_module(path.read_bytes())", "ast.parse(path.read_bytes())"
)


@dataclass
class Measurement:
    name: str
    seconds: list[float]
    peak_mib: float
    # Timed in rounds with the parse (see `measure_in_rounds`).
    rounds: bool = False

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


def bytecode_env(folder: Path) -> dict[str, str]:
    """The environment for measured processes: compiled bytecode kept under `folder`, as an
    installed package has it."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(folder / "bytecode")
    return env


def run_once(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, float]:
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    return elapsed, usage.ru_maxrss / 1024


def measure(name: str, command: list[str], cwd: Path, runs: int, env: dict[str, str] | None = None) -> Measurement:
    seconds: list[float] = []
    peak = 0.0
    for _ in range(runs):
        elapsed, rss = run_once(command, cwd, env)
        seconds.append(elapsed)
        peak = max(peak, rss)
    return Measurement(name, seconds, peak)


def measure_in_rounds(named_commands: list[tuple[str, list[str]]], cwd: Path, runs: int,
                      env: dict[str, str]) -> list[Measurement]:
    """Each command once per round, in order, for `runs` rounds."""
    measurements = [Measurement(name, [], 0.0) for name, _ in named_commands]
    for _ in range(runs):
        for measurement, (_, command) in zip(measurements, named_commands, strict=True):
            elapsed, rss = run_once(command, cwd, env)
            measurement.seconds.append(elapsed)
            measurement.peak_mib = max(measurement.peak_mib, rss)
    return measurements


def ratio_to(measurement: Measurement, base: Measurement) -> float:
    """The median of the per-round ratios where both were timed in the same rounds, else the
    ratio of the medians."""
    if len(measurement.seconds) == len(base.seconds) and measurement.rounds and base.rounds:
        return statistics.median(m / b for m, b in zip(measurement.seconds, base.seconds, strict=True))
    return measurement.median / base.median


def corpus_size(folder: Path) -> tuple[int, int]:
    files = sorted(folder.rglob("*.py"))
    lines = sum(path.read_bytes().count(b"\n") for path in files)
    return len(files), lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, help="folder to lint (default: a generated synthetic corpus)")
    parser.add_argument("--files", type=int, default=600, help="synthetic corpus: number of files")
    parser.add_argument("--lines", type=int, default=230, help="synthetic corpus: mean lines per file")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--torchfix", help="TorchFix executable (default: `torchfix` on PATH); "
                        "TorchFix pins an older LibCST, so it usually lives in its own virtualenv")
    parser.add_argument("--torchfix-flake8", help="a flake8 executable with the TorchFix plugin installed")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="tdl-bench-"))
    try:
        corpus = args.corpus.resolve() if args.corpus else build(workdir / "corpus", args.files, args.lines, args.seed)
        files, lines = corpus_size(corpus)
        cache = workdir / "cache"
        python = sys.executable
        tdl = [python, "-m", "torchdevlint", "check", "--exit-zero", "--format", "json"]
        small = workdir / "small.py"
        small.write_text("import torch\nx = torch.zeros(3)\nx = x.cuda()\n")

        env = bytecode_env(workdir)
        parse = [python, "-c", _PARSE_ALL, str(corpus)]
        cold_one = [*tdl, "--no-cache", "--jobs", "1", str(corpus)]
        cold_all = [*tdl, "--no-cache", str(corpus)]
        for command in (parse, [*tdl, "--no-cache", str(small)]):
            run_once(command, workdir, env)  # compiles each side's modules into the bytecode cache

        ast_parse = measure("ast.parse (stdlib), 1 process", [python, "-c", _AST_ALL, str(corpus)], workdir, args.runs, env)
        rounds = measure_in_rounds([("LibCST parse_module, 1 process", parse), ("torchdevlint cold, --jobs 1", cold_one),
                                    (f"torchdevlint cold, --jobs {os.cpu_count()}", cold_all)], workdir, args.runs, env)
        for measurement in rounds:
            measurement.rounds = True
        results = [ast_parse, *rounds]
        subprocess.run([*tdl, "--cache-dir", str(cache), str(corpus)], stdout=subprocess.DEVNULL, env=env, check=False)
        results.append(
            measure("torchdevlint warm (cache)", [*tdl, "--cache-dir", str(cache), str(corpus)], workdir, args.runs, env)
        )
        results.append(measure("torchdevlint, one small file", [*tdl, "--no-cache", str(small)], workdir, args.runs, env))
        # A hook re-run on a file that did not change: answered from the cache, no linter imported.
        subprocess.run([*tdl, "--cache-dir", str(cache), str(small)], stdout=subprocess.DEVNULL, env=env, check=False)
        results.append(measure("torchdevlint, one small file (cache)", [*tdl, "--cache-dir", str(cache), str(small)],
                               workdir, args.runs, env))
        torchfix = args.torchfix or shutil.which("torchfix")
        if torchfix:
            results.append(measure("TorchFix, all rules", [torchfix, "--select", "ALL", str(corpus)], workdir, args.runs, env))
        if args.torchfix_flake8:
            results.append(
                measure("flake8 --select TOR (TorchFix plugin)", [args.torchfix_flake8, "--select", "TOR", str(corpus)], workdir, args.runs, env)
            )
        flake8 = shutil.which("flake8")
        if flake8:
            results.append(
                measure("flake8 --select TDL (torchdevlint plugin)", [flake8, "--select", "TDL", str(corpus)], workdir, args.runs, env)
            )

        base = results[1]
        print(f"corpus: {corpus if args.corpus else 'synthetic'}: {files} files, {lines} lines; "
              f"{os.cpu_count()} cores; median of {args.runs} runs (the parse and the cold runs in {args.runs} rounds); "
              f"Python {sys.version.split()[0]}")
        print()
        print("| work | median s | × LibCST parse | peak MiB (parent process) |")
        print("|---|---:|---:|---:|")
        for result in results:
            print(f"| {result.name} | {result.median:.2f} | {ratio_to(result, base):.2f} | {result.peak_mib:.0f} |")
        one, many = results[2].median, results[3].median
        print()
        print(f"parallel speed-up: {one / many:.2f}×")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
