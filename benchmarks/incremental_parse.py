"""Times a full LibCST parse against IncrementalParser after a one-character edit inside a function.

    python benchmarks/incremental_parse.py                    # torchdevlint/analysis/flow/interpreter.py
    python benchmarks/incremental_parse.py PATH               # any Python file
    python benchmarks/incremental_parse.py --generate 1000    # a generated file of about 1,000 lines
    python benchmarks/incremental_parse.py --runs 50

The edit types one letter into a line of code near the middle of the file (inside a function or
a method). Prints the median of `libcst.parse_module` on the edited text, of IncrementalParser on
the first edit after a full parse (which also cuts the previous tree into statements once), and
of IncrementalParser on successive edits (the buffer alternating between the two texts), with how
many characters each incremental parse reparsed. Every incremental result is checked against the
full parse once.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import libcst as cst

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from torchdevlint.incremental_parse import IncrementalParser

_DEFAULT = Path(__file__).resolve().parent.parent / "torchdevlint" / "analysis" / "flow" / "interpreter.py"


def generated(lines: int) -> str:
    """About `lines` lines: imports, top-level functions and a model class, half each."""
    out = ["import torch", "import torch.nn as nn", "import torch.nn.functional as F", "", ""]
    i = 0
    while len(out) < lines // 2:
        out += [
            f"def helper_{i}(x, scale={i}):",
            f'    """Scales and clamps (helper {i})."""',
            "    y = x * scale",
            "    if y.dim() > 2:",
            "        y = y.flatten(1)",
            "    for _ in range(2):",
            "        y = F.relu(y) + 0.5",
            "    z = torch.clamp(y, min=-1.0, max=1.0)",
            "    return z.mean()",
            "",
            "",
        ]
        i += 1
    out += ["class Model(nn.Module):", "    def __init__(self):", "        super().__init__()"]
    j = 0
    while len(out) < lines:
        out += [
            "",
            f"    def block_{j}(self, x):",
            f"        h = self.layer_{j}(x)",
            "        h = F.gelu(h)",
            f"        h = h * {j} + x",
            "        return torch.tanh(h)",
        ]
        j += 1
    return "\n".join(out) + "\n"


def one_letter_edit(source: str) -> str:
    """The source with a letter typed into an identifier on a code line near the middle."""
    lines = source.splitlines(keepends=True)
    middle = len(lines) // 2
    for index in sorted(range(len(lines)), key=lambda n: abs(n - middle)):
        line = lines[index]
        at = line.find(" = ")
        if not line.startswith((" ", "\t")) or at < 0 or not line[at + 3 : at + 4].isidentifier():
            continue
        edited = "".join([*lines[:index], line[: at + 3] + "q" + line[at + 3 :], *lines[index + 1 :]])
        try:
            cst.parse_module(edited)
        except cst.ParserSyntaxError:
            continue
        return edited
    raise SystemExit("no line to edit")


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", nargs="?", type=Path, help=f"file to edit (default: {_DEFAULT.name})")
    parser.add_argument("--generate", type=int, metavar="LINES", help="edit a generated file of about LINES lines")
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()

    if args.generate:
        name, source = f"generated ({args.generate} lines)", generated(args.generate)
    else:
        path = args.path or _DEFAULT
        name, source = str(path), path.read_text(encoding="utf-8")
    edited = one_letter_edit(source)

    full: list[float] = []
    for _ in range(args.runs):
        start = time.perf_counter()
        expected = cst.parse_module(edited)
        full.append(time.perf_counter() - start)

    first: list[float] = []
    for _ in range(args.runs):
        incremental = IncrementalParser()
        incremental.parse(source)
        start = time.perf_counter()
        incremental.parse(edited)
        first.append(time.perf_counter() - start)

    incremental = IncrementalParser()
    incremental.parse(source)
    result = incremental.parse(edited)
    if not result.deep_equals(expected) or result.code != edited:
        raise SystemExit("incremental parse differs from the full parse")
    steady: list[float] = []
    reparsed = 0
    for run in range(args.runs):
        text = source if run % 2 == 0 else edited
        start = time.perf_counter()
        incremental.parse(text)
        steady.append(time.perf_counter() - start)
        reparsed = max(reparsed, incremental.last_reparsed_chars)
        if incremental.last_fallback is not None:
            raise SystemExit(f"parsed the whole text: {incremental.last_fallback}")

    print(f"file: {name}: {source.count(chr(10))} lines, {len(source)} characters; "
          f"median of {args.runs} runs; Python {sys.version.split()[0]}")
    print()
    print("| parse after a one-letter edit | median ms | characters parsed |")
    print("|---|---:|---:|")
    print(f"| libcst.parse_module | {median_ms(full):.1f} | {len(edited)} |")
    print(f"| IncrementalParser, first edit after a full parse | {median_ms(first):.1f} | {reparsed} |")
    print(f"| IncrementalParser, successive edits | {median_ms(steady):.1f} | {reparsed} |")
    print()
    print(f"speed-up on successive edits: {median_ms(full) / median_ms(steady):.0f}×")
    return 0


if __name__ == "__main__":
    sys.exit(main())
