"""A cache of findings keyed by file content and path, tool version and effective configuration.

Like ruff's: an unchanged file is not parsed again. Entries are written atomically (temporary
file, then rename), so concurrent runs never see half an entry; a damaged entry is a miss.
The cache folder carries its own `.gitignore`.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from torchdevlint import __version__
from torchdevlint.diagnostics import Applicability, Diagnostic, Edit, Fix, Location
from torchdevlint.sourcefile import store_json

CACHE_DIR_NAME = ".torchdevlint_cache"


def settings_digest(rule_codes: tuple[str, ...], rule_options: tuple[tuple[str, object], ...]) -> str:
    text = repr((__version__, rule_codes, [(code, repr(options)) for code, options in rule_options]))
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def content_digest(data: bytes, path: str, project_facts: str = "") -> str:
    """The key of a file's findings: its bytes and its path, which decides what kind of file
    it is (a notebook, a `.py`) and its role (`conftest.py` and `test_*.py` are test code),
    and what rules read of the project's other files (whether it writes GPU checkpoints)."""
    digest = hashlib.blake2b(data, digest_size=20)
    digest.update(b"\0" + os.fsencode(path))
    if project_facts:
        digest.update(b"\0" + project_facts.encode())
    return digest.hexdigest()


def _encode(diagnostic: Diagnostic) -> dict[str, object]:
    fix = None
    if diagnostic.fix is not None:
        fix = {
            "title": diagnostic.fix.title,
            "applicability": diagnostic.fix.applicability.value,
            "edits": [[edit.start, edit.end, edit.content] for edit in diagnostic.fix.edits],
            "imports": [list(item) for item in diagnostic.fix.required_imports],
        }
    return {
        "code": diagnostic.code,
        "slug": diagnostic.slug,
        "message": diagnostic.message,
        "start": [diagnostic.start.line, diagnostic.start.column],
        "end": [diagnostic.end.line, diagnostic.end.column],
        "fix": fix,
        "cell": diagnostic.cell,
    }


def _decode(item: dict[str, Any], path: str) -> Diagnostic:
    """A cached finding back from JSON; a malformed entry raises KeyError/TypeError/ValueError."""
    fix = None
    raw_fix = item["fix"]
    if raw_fix is not None:
        fix = Fix(
            raw_fix["title"],
            Applicability(raw_fix["applicability"]),
            tuple(Edit(int(start), int(end), str(content)) for start, end, content in raw_fix["edits"]),
            tuple((str(module), name) for module, name in raw_fix["imports"]),
        )
    cell = item.get("cell")
    return Diagnostic(
        item["code"], item["slug"], item["message"], path,
        Location(*item["start"]), Location(*item["end"]), fix, cell=None if cell is None else int(cell),
    )


class FindingsCache:
    def __init__(self, root: Path, settings: str) -> None:
        self.root = root
        self.folder = root / __version__ / settings
        # What project-wide facts were read from each file (see `project_scan`).
        self.project_store = root / __version__ / "projects"

    def _entry(self, digest: str) -> Path:
        return self.folder / digest[:2] / f"{digest}.json"

    def load(self, digest: str, path: str) -> list[Diagnostic] | None:
        try:
            items = json.loads(self._entry(digest).read_text())
            if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
                return None  # not an entry this tool wrote (`{}`, a number): a miss, not "no findings"
            return [_decode(item, path) for item in items]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def store(self, digest: str, diagnostics: list[Diagnostic]) -> None:
        store_json(self._entry(digest), [_encode(d) for d in diagnostics])
        try:
            self._ignore_in_git()
        except OSError:
            pass

    def _ignore_in_git(self) -> None:
        marker = self.root / ".gitignore"
        if not marker.exists():
            marker.write_text("# Created by torchdevlint.\n*\n")
