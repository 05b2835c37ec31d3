"""Flows kept between versions of an editor's buffer (`analysis.flow.memory`): each version's
findings are those of a fresh lint, whatever the edit changed, and a body the edit left alone
is not interpreted again."""

from __future__ import annotations

import random

import pytest
from conftest import FIXTURES

from torchdevlint.analysis.flow.memory import FlowMemory
from torchdevlint.diagnostics import Diagnostic
from torchdevlint.engine import InvalidSource, lint_source
from torchdevlint.incremental_parse import IncrementalParser
from torchdevlint.registry import all_rules

RULES = list(all_rules())

HELPER_AND_CALLER = '''import torch

DEVICE = "cuda"


def make_noise(n):
    return torch.randn(n)


def run(batch):
    batch = batch.to(DEVICE)
    noisy = batch + make_noise(4)
    return noisy


def main():
    print(run(torch.ones(4)))
'''

MODEL_AND_TRAINING = '''import torch
import torch.nn as nn


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.scale = torch.ones(8)

    def forward(self, x):
        return self.proj(x) * self.scale


def train(loader):
    model = Encoder().cuda()
    for x in loader:
        x = x.cuda()
        model(x).sum().backward()
'''


class Buffer:
    """One buffer typed into as the server keeps it: a parser and the flows, version to version."""

    def __init__(self) -> None:
        self.parser = IncrementalParser()
        self.memory = FlowMemory()

    def lint(self, source: str) -> list[Diagnostic]:
        """The findings with what is kept, checked against a lint that keeps nothing."""
        try:
            fresh = lint_source(source, "buffer.py", RULES)
        except InvalidSource as error:
            with pytest.raises(InvalidSource) as kept_error:
                lint_source(source, "buffer.py", RULES, parse=self.parser.parse, flow_memory=self.memory)
            assert kept_error.value.message == error.message
            return []
        kept = lint_source(source, "buffer.py", RULES, parse=self.parser.parse, flow_memory=self.memory)
        assert kept == fresh
        return kept


def found(diagnostics: list[Diagnostic]) -> list[tuple[int, str]]:
    return [(d.start.line, d.code) for d in diagnostics]


# `DEVICE = "cuda"` in a program with no CPU mode (the off-by-default TDL203, run here too).
HARD_CODED_DEVICE = (3, "TDL203")


def test_a_changed_helper_changes_its_callers_findings() -> None:
    buffer = Buffer()
    assert found(buffer.lint(HELPER_AND_CALLER)) == [HARD_CODED_DEVICE, (12, "TDL009")]
    placed = HELPER_AND_CALLER.replace("torch.randn(n)", "torch.randn(n, device=DEVICE)")
    assert found(buffer.lint(placed)) == [HARD_CODED_DEVICE]
    assert found(buffer.lint(HELPER_AND_CALLER)) == [HARD_CODED_DEVICE, (12, "TDL009")]


def test_a_changed_module_name_changes_the_functions_reading_it() -> None:
    buffer = Buffer()
    assert found(buffer.lint(HELPER_AND_CALLER)) == [HARD_CODED_DEVICE, (12, "TDL009")]
    assert found(buffer.lint(HELPER_AND_CALLER.replace('DEVICE = "cuda"', 'DEVICE = "cpu"'))) == []


def test_an_edit_elsewhere_reuses_the_bodies_it_left_alone() -> None:
    buffer = Buffer()
    buffer.lint(HELPER_AND_CALLER)
    edited = HELPER_AND_CALLER.replace("    print(run(torch.ones(4)))", "    print(run(torch.ones(4)))\n    print('done')")
    assert found(buffer.lint(edited)) == [HARD_CODED_DEVICE, (12, "TDL009")]
    assert buffer.memory.reused >= 2  # make_noise and run
    assert buffer.memory.interpreted == 1  # main


def test_a_changed_class_changes_the_findings_on_its_attributes() -> None:
    buffer = Buffer()
    unchecked_cuda = [(16, "TDL203"), (18, "TDL203")]
    assert found(buffer.lint(MODEL_AND_TRAINING)) == [(9, "TDL010"), *unchecked_cuda]
    registered = MODEL_AND_TRAINING.replace("self.scale = torch.ones(8)", 'self.register_buffer("scale", torch.ones(8))')
    assert found(buffer.lint(registered)) == unchecked_cuda
    assert found(buffer.lint(registered.replace("x = x.cuda()", "x = x.cuda()\n        x = x * 2"))) == unchecked_cuda
    assert buffer.memory.reused >= 2  # the class's methods


def test_what_a_method_s_own_text_says_is_read_again_only_once_it_is_edited(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from torchdevlint.analysis.flow import model

    read: list[str] = []
    original = model._assigns_own_attributes

    def reading(method: object, self_name: str | None) -> bool:
        read.append(method.name.value)  # type: ignore[attr-defined]  # a FunctionDef
        return original(method, self_name)  # type: ignore[arg-type]

    monkeypatch.setattr(model, "_assigns_own_attributes", reading)
    buffer = Buffer()

    def lint_kept(source: str) -> list[Diagnostic]:
        return lint_source(source, "buffer.py", RULES, parse=buffer.parser.parse, flow_memory=buffer.memory)

    first = lint_kept(MODEL_AND_TRAINING)
    assert read == ["forward"]
    read.clear()
    edited = MODEL_AND_TRAINING.replace("x = x.cuda()", "x = x.cuda()\n        x = x * 2")
    assert found(lint_kept(edited)) == found(first)
    assert read == []  # the class is the same node: its methods' text is not read again
    edited = MODEL_AND_TRAINING.replace("return self.proj(x) * self.scale", "return self.proj(x) * self.scale * 2")
    assert found(lint_kept(edited)) == found(first)
    assert read == ["forward"]


def test_a_version_that_does_not_parse_keeps_what_the_last_one_did() -> None:
    buffer = Buffer()
    buffer.lint(HELPER_AND_CALLER)
    assert buffer.lint(HELPER_AND_CALLER.replace("return noisy", "return noisy +")) == []
    assert found(buffer.lint(HELPER_AND_CALLER.replace("print(run(", "print(1, run("))) == [HARD_CODED_DEVICE, (12, "TDL009")]
    assert buffer.memory.reused >= 2


# Statements typed in at a line's indentation, and words changed in place: edits that change
# placements, calls, classes and module names.
_TYPED = ("x = torch.zeros(3)", "model.cuda()", "h = h.to(device)", "y = x.cpu()", "x.to(device)",
          "torch.save(model.state_dict(), 'p.pt')", "self.h = torch.zeros(2)", "device = torch.device('cpu')",
          "model = nn.DataParallel(model)", "state = torch.load('a.pt')", "out = model(x)", "x = x.cuda()",
          "mask = torch.ones(4)", "self.to(device)", "inputs = inputs.to(device)", "return x")
_REPLACED = (("device", "'cuda'"), (".cuda()", ".cpu()"), (".cpu()", ".cuda()"), ("cuda", "cpu"), ("self.", ""),
             (".to(device)", ""), ("torch.zeros", "torch.ones"), ("def ", "def _"))


def _edit(source: str, rng: random.Random) -> str:
    """A random statement-level edit that still parses (the source itself, after 8 tries)."""
    lines = source.splitlines(keepends=True)
    for _ in range(8):
        index = rng.randrange(len(lines))
        line = lines[index]
        indent = line[: len(line) - len(line.lstrip())] if line.strip() else ""
        kind = rng.randrange(4)
        if kind == 0:
            edited = lines[:index] + lines[index + 1 :]
        elif kind == 1:
            edited = lines[:index] + [indent + rng.choice(_TYPED) + "\n"] + lines[index:]
        elif kind == 2:
            edited = lines[:index] + [line] + lines[index:]
        else:
            old, new = rng.choice(_REPLACED)
            edited = lines[:index] + [line.replace(old, new, 1)] + lines[index + 1 :]
        candidate = "".join(edited)
        try:
            compile(candidate, "buffer.py", "exec", dont_inherit=True, flags=0x400)  # ast.PyCF_ONLY_AST
        except SyntaxError:
            continue
        return candidate
    return source


def _type_into(paths: list[str], seed: int, versions: int) -> int:
    """Edit each file `versions` times, checking every version against a fresh lint; returns
    the bodies reused."""
    reused = 0
    for number, name in enumerate(paths):
        rng = random.Random(seed + number)
        source = (FIXTURES / name).read_text(encoding="utf-8")
        buffer = Buffer()
        for _ in range(versions):
            buffer.lint(source)
            reused += buffer.memory.reused
            source = _edit(source, rng)
    return reused


_PYTHON_FIXTURES = sorted(path.name for path in FIXTURES.glob("*.py"))


@pytest.mark.slow
def test_random_edits_of_the_fixtures_find_what_a_fresh_lint_finds() -> None:
    assert _type_into(_PYTHON_FIXTURES[::3], seed=0, versions=6) > 0


# Versions all fixtures share in the slow test: its time stays bounded as fixtures are added.
_VERSIONS_IN_ALL = 700


@pytest.mark.slow
def test_many_random_edits_of_the_fixtures_find_what_a_fresh_lint_finds() -> None:
    versions = max(8, min(25, _VERSIONS_IN_ALL // len(_PYTHON_FIXTURES)))
    assert _type_into(_PYTHON_FIXTURES, seed=100, versions=versions) > 0
