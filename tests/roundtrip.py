"""Fix round trip over a body of code: `python tests/roundtrip.py FOLDER [--keep-copy]`.

Copies the folder, runs `torchdevlint check --fix --unsafe-fixes` over the copy, and checks:
every file that compiled before still compiles; no line changed outside the spans of the
fixes that were offered; a second run changes nothing. Prints the figures; exits 1 on any
violation. The tests run it on the shipped fixtures; run it by hand on real code bases.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class RoundTrip:
    files: int = 0
    compiled_before: int = 0
    files_changed: int = 0
    findings_fixable: int = 0
    still_compile: int = 0
    second_run_changes: int = 0
    violations: list[str] = field(default_factory=list)

    def report(self) -> str:
        return (
            f"files: {self.files}; compiled before: {self.compiled_before}; fixable findings: "
            f"{self.findings_fixable}; files changed: {self.files_changed}; still compile: "
            f"{self.still_compile}/{self.compiled_before}; second-run changes: {self.second_run_changes}; "
            f"violations: {len(self.violations)}"
        )


# A line a fix's `required_imports` adds beside the file's imports.
_IMPORT_LINE = re.compile(r"^(import|from) [\w.]+")


def _compiles(data: bytes, name: str) -> bool:
    try:
        # The code base's own warnings (invalid escapes, `is` with a literal) say nothing about
        # the fixes, and under `-W error` they would count a valid file as not compiling.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(data, name, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "torchdevlint", *args], capture_output=True, text=True)


def _allowed_lines(findings: list[dict], text: str) -> set[int]:  # type: ignore[type-arg]
    """Original line numbers that the offered fixes may touch (from their offsets)."""
    from torchdevlint.sourcefile import LineIndex

    lines = LineIndex(text)

    def line_of(offset: int) -> int:
        return lines.location(offset)[0]

    allowed: set[int] = set()
    for item in findings:
        allowed.update(range(item["line"], item["end_line"] + 1))
        for edit in item.get("edits", []):
            allowed.update(range(line_of(edit[0]), line_of(edit[1]) + 1))
    return allowed


def run(folder: Path, workdir: Path) -> RoundTrip:
    from torchdevlint.engine import InvalidSource, lint_source
    from torchdevlint.registry import select_rules
    from torchdevlint.sourcefile import SourceError, read_source

    copy = workdir / "copy"
    shutil.copytree(folder, copy, symlinks=True, ignore=shutil.ignore_patterns(".git", "__pycache__"))
    result = RoundTrip()
    before: dict[Path, bytes] = {}
    offered: dict[Path, list[dict]] = {}  # type: ignore[type-arg]
    rules = select_rules()
    for path in sorted(copy.rglob("*.py")):
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        before[path] = data
        result.files += 1
        if _compiles(data, str(path)):
            result.compiled_before += 1
        try:
            source = read_source(path)
            diagnostics = lint_source(source.text, str(path), rules)
        except (SourceError, InvalidSource, Exception):  # noqa: BLE001 - unparsable files stay as they are
            continue
        fixable = [d for d in diagnostics if d.fix is not None]
        result.findings_fixable += len(fixable)
        offered[path] = [
            {"line": d.start.line, "end_line": d.end.line, "edits": [[e.start, e.end] for e in d.fix.edits]}  # type: ignore[union-attr]
            for d in fixable
        ]
    _cli("check", "--fix", "--unsafe-fixes", "--no-cache", "--exit-zero", str(copy))
    after: dict[Path, bytes] = {path: path.read_bytes() for path in before}
    for path, old in before.items():
        new = after[path]
        if new == old:
            if _compiles(old, str(path)):
                result.still_compile += 1
            continue
        result.files_changed += 1
        if _compiles(new, str(path)):
            result.still_compile += 1 if _compiles(old, str(path)) else 0
        elif _compiles(old, str(path)):
            result.violations.append(f"{path}: compiled before the fix, not after")
        old_text = old.decode("utf-8", "surrogateescape")
        allowed = _allowed_lines(offered.get(path, []), old_text)
        matcher = difflib.SequenceMatcher(a=old_text.splitlines(), b=new.decode("utf-8", "surrogateescape").splitlines(), autojunk=False)
        new_lines = new.decode("utf-8", "surrogateescape").splitlines()
        for tag, first, last, new_first, new_last in matcher.get_opcodes():
            if tag == "equal":
                continue
            if tag == "insert" and all(_IMPORT_LINE.match(line) for line in new_lines[new_first:new_last]):
                continue  # an import a fix needs (`required_imports`), added beside the others
            touched = set(range(first + 1, last + 1)) if last > first else {first, first + 1}
            if not touched & allowed and not (tag == "insert" and {first, first + 1} & allowed):
                result.violations.append(f"{path}: lines {first + 1}-{last} changed outside any fix")
    _cli("check", "--fix", "--unsafe-fixes", "--no-cache", "--exit-zero", str(copy))
    for path, data in after.items():
        if path.read_bytes() != data:
            result.second_run_changes += 1
            result.violations.append(f"{path}: the second --fix run changed it")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tdl-roundtrip-") as workdir:
        result = run(args.folder, Path(workdir))
    if args.json:
        print(json.dumps(result.__dict__, indent=2))
    else:
        print(result.report())
        for violation in result.violations[:50]:
            print("  " + violation)
    return 1 if result.violations else 0


if __name__ == "__main__":
    sys.exit(main())
