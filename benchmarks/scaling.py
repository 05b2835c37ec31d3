"""How the analysis scales with the size of one scope, as a whole `torchdevlint check` process.

    python benchmarks/scaling.py                  # 250, 500, 1000 and 2000 statements
    python benchmarks/scaling.py --sizes 1000 --runs 3

Three shapes of one function body, each repeated N times: discarded tensor moves (each a
TDL001 finding), moves guarded by the device choice (each interpreted again in the GPU world),
and plain arithmetic on tensors (the baseline). Prints the median seconds of each, and the
seconds per thousand statements, which stay flat where the work is linear. Each process runs
from compiled bytecode, as an installed package does (see `benchmark.bytecode_env`).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark import bytecode_env

HEADER = "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n\n\ndef body():\n"


def discarded_moves(count: int) -> str:
    lines = [f"    t{i} = torch.zeros({i % 7 + 1})\n    t{i}.to(device)\n" for i in range(count)]
    return HEADER + "".join(lines)


def guarded_moves(count: int) -> str:
    lines = [f"    t{i} = torch.zeros(3)\n    if torch.cuda.is_available():\n        t{i} = t{i}.cuda()\n"
             for i in range(count)]
    return HEADER + "".join(lines)


def arithmetic(count: int) -> str:
    lines = [f"    t{i} = torch.zeros(3) * {i} + 1\n" for i in range(count)]
    return HEADER + "".join(lines)


SHAPES: dict[str, Callable[[int], str]] = {
    "discarded moves": discarded_moves,
    "guarded moves": guarded_moves,
    "arithmetic": arithmetic,
}


def time_check(path: Path, runs: int, env: dict[str, str]) -> float:
    command = [sys.executable, "-m", "torchdevlint", "check", "--no-cache", "--jobs", "1", "--exit-zero", str(path)]
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[250, 500, 1000, 2000])
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    print("| shape | statements | median s | s per 1000 |")
    print("|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as folder:
        env = bytecode_env(Path(folder))
        warm_up = Path(folder) / "warm_up.py"
        warm_up.write_text(arithmetic(1), encoding="utf-8")
        time_check(warm_up, 1, env)  # compiles the tool's modules into the bytecode cache
        for name, make in SHAPES.items():
            for size in options.sizes:
                path = Path(folder) / f"{name.replace(' ', '_')}_{size}.py"
                path.write_text(make(size), encoding="utf-8")
                seconds = time_check(path, options.runs, env)
                print(f"| {name} | {size} | {seconds:.2f} | {seconds / size * 1000:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
