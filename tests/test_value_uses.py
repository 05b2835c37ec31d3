"""Where the value a statement makes is used (analysis.value_uses): what verify attributes errors to."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from torchdevlint.analysis.value_uses import uses_of_lines

RNN = textwrap.dedent("""\
    import torch
    from torch import nn


    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.GRU(8, 16)
            self.scale = torch.tensor(0.5)
            self.blocks = [nn.Linear(16, 16) for _ in range(2)]

        def init_hidden(self, batch):
            return torch.zeros(1, batch, 16)

        def forward(self, x):
            hidden = self.init_hidden(x.size(1))
            out, hidden = self.rnn(x, hidden)
            for block in self.blocks:
                out = block(out)
            return out * self.scale


    def train(model, loader, device):
        for inputs, targets in loader:
            inputs.to(device)
            logits = model(inputs)
            loss = nn.functional.cross_entropy(
                logits,
                targets.to(device))
            loss.backward()
""")


@pytest.mark.parametrize(
    ("line", "statement", "uses", "why"),
    [
        (13, {13}, {16, 17, 19, 20}, "returned: its callers' lines and what they compute from it"),
        (9, {9}, {20}, "an attribute set in __init__: the class's reads of it"),
        (10, {10}, {18, 19, 20}, "an attribute iterated over: the loop and what its target computes"),
        (25, {25}, {26, 27, 28, 29, 30},
         "a discarded move: later reads of the name it was meant to rebind, and what they compute, "
         "with every line of a statement over several lines (a traceback names its first)"),
        (29, {27, 28, 29}, {30}, "inside a statement over several lines: the whole statement"),
    ],
)
def test_uses_follow_the_value(line: int, statement: set[int], uses: set[int], why: str) -> None:
    found = uses_of_lines(cst.parse_module(RNN), [line])[line]
    assert (found.statement, found.uses) == (statement, uses), why


def test_a_line_without_a_value_has_only_its_statement() -> None:
    source = "import torch\ntorch.cuda.set_device(0)\nprint(1)\n"
    found = uses_of_lines(cst.parse_module(source), [2])[2]
    assert (found.statement, found.uses) == ({2}, set())


def test_a_test_surfaces_where_the_variables_it_reads_are_used_next() -> None:
    source = textwrap.dedent("""\
        import torch


        def forward(self, x):
            if isinstance(x, torch.LongTensor):
                x = self.embed(x)
            y = self.head(x)
            return torch.relu(y)
        """)
    found = uses_of_lines(cst.parse_module(source), [5])[5]
    assert found.statement == {5}
    # `x` is read on 6 and 7 (and what 7 makes, on 8); `torch`, an import, is no variable.
    assert found.uses == {6, 7, 8}
