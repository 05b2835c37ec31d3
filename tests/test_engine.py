"""The engine's contract with rules: shared analyses run once per file, ahead of the rules."""

from __future__ import annotations

import gc
import textwrap

import libcst as cst

from torchdevlint.engine import lint_source
from torchdevlint.registry import all_rules
from torchdevlint.rule import Rule


class _CallCounter:
    def __init__(self, context) -> None:  # type: ignore[no-untyped-def]
        self.calls = 0

    def visit_Call(self, node: cst.Call) -> None:
        self.calls += 1


def _probe(code: str) -> type[Rule]:
    class Probe(Rule):
        """Reads the shared counter as it stands when the rule sees each call."""

        slug = f"probe-{code.lower()}"
        message = "probe"

        def __init__(self, context, options=None):  # type: ignore[no-untyped-def]
            super().__init__(context, options)
            self.counter = context.shared(_CallCounter)
            self.seen: list[int] = []
            seen_by[code] = (self.counter, self.seen)

        def visit_Call(self, node: cst.Call) -> None:
            self.seen.append(self.counter.calls)

    Probe.code = code
    return Probe


seen_by: dict[str, tuple[_CallCounter, list[int]]] = {}


def test_a_shared_analysis_is_one_instance_fed_once_and_before_the_rules() -> None:
    seen_by.clear()
    lint_source("import torch\ntorch.zeros(1)\ntorch.ones(2)\n", "a.py", [_probe("TDL990"), _probe("TDL991")])
    (first_counter, first_seen), (second_counter, second_seen) = seen_by["TDL990"], seen_by["TDL991"]
    assert first_counter is second_counter
    assert first_counter.calls == 2  # not 4: the walk feeds it once
    assert first_seen == second_seen == [1, 2]  # each rule sees the call already counted


def test_a_linted_file_leaves_nothing_for_the_garbage_collector() -> None:
    # The run collects garbage rarely (it would walk every tree being built): that is only
    # safe while each file's analysis is freed by reference counting, without cycles.
    source = textwrap.dedent(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 2)
                self.mask = torch.ones(2)
            def forward(self, x):
                h = torch.zeros(x.size(0), 2)
                return self.fc(x) + h + self.mask

        def train(model, loader, device):
            for x, y in loader:
                loss = nn.functional.cross_entropy(model(x.to(device)), y)
                loss.backward()

        model = nn.DataParallel(Net()).cuda()
        train(model, DataLoader([]), "cuda")
        torch.save(model.state_dict(), "m.pt")
        state = torch.load("m.pt")
        """
    )
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        diagnostics = lint_source(source, "net.py", list(all_rules()))
        unreachable = gc.collect()
    finally:
        if was_enabled:
            gc.enable()
    assert diagnostics  # the analysis did run its course
    assert unreachable == 0
