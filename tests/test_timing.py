"""The waits TDL105 looks for inside what a measured call runs, whatever the order it meets them in."""

from __future__ import annotations

import textwrap

from torchdevlint.engine import lint_source
from torchdevlint.registry import rules_for_codes

PROGRAM = textwrap.dedent('''\
    import time
    import torch
    from torch import nn

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    net = nn.Linear(8, 2).to(device)
    batch = torch.randn(4, 8, device=device)


    def settle(out):
        torch.cuda.synchronize()
        return out


    def report(out):
        return settle(out)


    def evaluate(out):
        return report(out)


    start = time.perf_counter()
    evaluate(net(batch))
    print("with evaluation", time.perf_counter() - start)
    start = time.perf_counter()
    report(net(batch))
    print("with a report", time.perf_counter() - start)
    start = time.perf_counter()
    net(batch)
    print("forward", time.perf_counter() - start)
''')


def test_a_wait_two_calls_down_counts_however_deep_the_same_call_was_met_first() -> None:
    # `evaluate(...)` is looked into two levels: `report`'s body, where the call `settle(...)`
    # is met but not looked into, so that measurement is reported. The same `settle(...)` call,
    # met again one level down from `report(...)`, is looked into and waits: no finding there.
    found = lint_source(PROGRAM, "timing.py", rules_for_codes(("TDL105",)))
    assert [diagnostic.start.line for diagnostic in found] == [25, 31]


def test_a_helper_of_the_file_that_returns_nothing_has_not_waited() -> None:
    # `remember(y)` only keeps the tensor; a helper returning numbers would have read them on
    # the host (`loss = score(x)`), which waits.
    program = textwrap.dedent('''\
        import time
        import torch

        device = torch.device("cuda")
        model = torch.nn.Linear(8, 8).to(device)
        history = []


        def remember(value):
            history.append(value)


        def score(value):
            return value.sum().item()


        x = torch.randn(4, 8, device=device)
        start = time.time()
        y = model(x)
        remember(y)
        print("kept", time.time() - start)
        start = time.time()
        total = score(model(x))
        print("scored", time.time() - start)
    ''')
    found = lint_source(program, "timing.py", rules_for_codes(("TDL105",)))
    assert [diagnostic.start.line for diagnostic in found] == [21]
