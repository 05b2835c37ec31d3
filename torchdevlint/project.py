"""What a project declares about itself that a rule's option may default to.

A rule option can take its default from the project instead of a constant: its field names
the fact in its metadata (`field(default="2.6", metadata={PROJECT_FACT: TORCH_FLOOR})`), and
the settings fill it in for each configuration root where the user did not set it.

- `TORCH_FLOOR`: the oldest torch the project says it supports, from the first of
  `pyproject.toml` (`[project] dependencies`, Poetry's `[tool.poetry.dependencies]`),
  `setup.cfg` (`install_requires`), `setup.py` and `requirements*.txt` that names torch:
  `torch>=2.2`, `torch==2.1.0`, `torch~=2.3` and Poetry's `^2.2` give their version; a
  requirement without a lower bound gives none.
"""

from __future__ import annotations

import configparser
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

PROJECT_FACT = "project_fact"
# The oldest torch taken where neither the configuration nor the project says (as ruff takes a
# target version): what a fix writes may assume it, but such a fix is not safe.
ASSUMED_TORCH_VERSION = "2.6"
TORCH_FLOOR = "torch-floor"

# `torch>=2.2,<3`, `torch == 2.1.0`, `torch~=2.3`, with extras or markers after it.
_TORCH_REQUIREMENT = re.compile(r"^\s*torch\s*(?:\[[^\]]*\])?\s*(?P<spec>[^;#]*)", re.IGNORECASE)
_LOWER_BOUND = re.compile(r"(?:>=|==|~=|\^|===)\s*(?P<version>\d+(?:\.\d+)*)")
# A requirement string for torch inside setup.py's code.
_QUOTED_TORCH = re.compile(r"""["'](torch\s*(?:\[[^\]]*\])?\s*[<>=~!^][^"']*)["']""", re.IGNORECASE)
_MAX_FILE_BYTES = 1_000_000


def torch_floor(root: Path) -> str | None:
    """The oldest torch version (`"2.2"`) the project at `root` declares it supports."""
    for reader in _READERS:
        try:
            requirements = reader(root)
        except (OSError, ValueError, UnicodeDecodeError, tomllib.TOMLDecodeError, configparser.Error, RecursionError):
            continue
        if requirements is None:
            continue
        found = _floor_of(requirements)
        if found is not _NOT_NAMED:
            return found if isinstance(found, str) else None
    return None


_NOT_NAMED = object()


def _floor_of(requirements: Iterable[str]) -> str | object | None:
    """The lower bound of the torch requirement among these; None when torch is required
    without one; `_NOT_NAMED` when none of them is torch."""
    for requirement in requirements:
        match = _TORCH_REQUIREMENT.match(requirement)
        if match is None:
            continue
        rest = requirement[match.start("spec"):].lstrip()
        if rest[:1].isalnum() or rest[:1] in "_-.":
            continue  # `torchvision`, `torch-geometric`: another package
        bound = _LOWER_BOUND.search(match.group("spec"))
        return bound.group("version") if bound is not None else None
    return _NOT_NAMED


def _read_text(path: Path) -> str | None:
    if not path.is_file() or path.stat().st_size > _MAX_FILE_BYTES:
        return None
    return path.read_text(encoding="utf-8")


def _from_pyproject(root: Path) -> list[str] | None:
    text = _read_text(root / "pyproject.toml")
    if text is None:
        return None
    data = tomllib.loads(text)
    found: list[str] = []
    project = data.get("project")
    if isinstance(project, dict):
        found.extend(item for item in project.get("dependencies", []) if isinstance(item, str))
    tool = data.get("tool")
    poetry = tool.get("poetry") if isinstance(tool, dict) else None
    dependencies = poetry.get("dependencies") if isinstance(poetry, dict) else None
    if isinstance(dependencies, dict):
        version = dependencies.get("torch")
        if isinstance(version, dict):
            version = version.get("version")
        if isinstance(version, str):
            found.append(f"torch{version if version[:1] in '<>=~^!' else '==' + version}")
    return found or None


def _from_setup_cfg(root: Path) -> list[str] | None:
    text = _read_text(root / "setup.cfg")
    if text is None:
        return None
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text)
    if not parser.has_option("options", "install_requires"):
        return None
    return [line.strip() for line in parser.get("options", "install_requires").splitlines() if line.strip()]


def _from_setup_py(root: Path) -> list[str] | None:
    text = _read_text(root / "setup.py")
    if text is None:
        return None
    return [match.group(1) for match in _QUOTED_TORCH.finditer(text)] or None


def _from_requirements(root: Path) -> list[str] | None:
    found: list[str] = []
    for path in sorted(root.glob("requirements*.txt")):
        text = _read_text(path)
        if text is not None:
            found.extend(line for line in text.splitlines() if not line.lstrip().startswith(("#", "-")))
    return found or None


_READERS: tuple[Callable[[Path], list[str] | None], ...] = (
    _from_pyproject, _from_setup_cfg, _from_setup_py, _from_requirements,
)

FACTS: dict[str, Callable[[Path], str | None]] = {TORCH_FLOOR: torch_floor}


@dataclass(frozen=True)
class TorchVersionOptions:
    """A rule's `torch-version` option: the oldest PyTorch the code must run on, which
    decides which API a fix may write. Unset, it is the floor the project declares for torch
    (pyproject.toml, setup.cfg, setup.py, requirements*.txt); with neither, 2.6 is assumed,
    and `declared` says so (a fix that only the assumption makes right is then unsafe)."""

    torch_version: str | None = field(default=None, metadata={PROJECT_FACT: TORCH_FLOOR})

    def __post_init__(self) -> None:
        if self.torch_version is None:
            return
        parts = self.torch_version.split(".") if isinstance(self.torch_version, str) else []
        if len(parts) < 2 or not all(part.isdigit() for part in parts[:2]):
            raise ValueError('torch-version must be a version such as "2.6"')

    @property
    def declared(self) -> bool:
        """The configuration or the project says which torch the code must run on."""
        return self.torch_version is not None

    def at_least(self, major: int, minor: int) -> bool:
        found = tuple(int(part) for part in (self.torch_version or ASSUMED_TORCH_VERSION).split(".")[:2])
        return found >= (major, minor)

    @property
    def has_accelerator_api(self) -> bool:
        """`torch.accelerator` (CUDA, ROCm, MPS, XPU alike) exists from 2.6."""
        return self.at_least(2, 6)
