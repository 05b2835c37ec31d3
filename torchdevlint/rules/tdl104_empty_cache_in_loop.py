"""TDL104 empty-cache-in-loop."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.training_loops import Loop, TrainingLoops
from torchdevlint.rule import Invalid, Rule, Valid

_EMPTY_CACHE = frozenset(
    {"torch.cuda.empty_cache", "torch.mps.empty_cache", "torch.xpu.empty_cache", "torch.accelerator.empty_cache"}
)


class EmptyCacheInLoop(Rule):
    """
    ## What it does
    Finds `torch.cuda.empty_cache()` (or the `mps`, `xpu` and `torch.accelerator` ones)
    called on every step of a training loop: a loop whose own body calls `.backward()`,
    not under `if step % N == 0:`.

    ## Why is this bad?
    `empty_cache()` frees nothing the program still holds: it hands the caching allocator's
    unused blocks back to the driver, and the next step asks the driver for them again,
    which is slow and synchronises. It does not prevent out-of-memory errors in the loop
    that calls it, and it makes each step slower. It is a performance rule: it is off by
    default.

    ## Not reported
    Not reported: calls outside training loops (after training, between evaluation phases),
    and calls every N steps.

    ## Fix safety
    No fix: where to release memory, if anywhere, is the author's choice. Removing the call
    changes no result.

    ## Options
    None.
    """

    code = "TDL104"
    slug = "empty-cache-in-loop"
    message = "empty_cache() every training step slows each step and frees nothing the loop still needs"
    default_enabled = False
    requires_any_text = ("empty_cache",)

    VALID = [
        Valid(
            """
            import torch
            for epoch in range(10):
                for step, (x, y) in enumerate(loader):
                    loss = model(x).sum()
                    loss.backward()
                    if step % 500 == 0:
                        torch.cuda.empty_cache()
            torch.cuda.empty_cache()
            for batch in test_loader:
                torch.cuda.empty_cache()
                predictions = model(batch)
            """,
            name="periodic-after-training-and-outside-a-training-loop",
        ),
        Valid(
            """
            import torch
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
            torch.cuda.empty_cache()
            """,
            name="documented-once-after-training",
            in_docs=True,
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
                torch.cuda.empty_cache()
            """,
            name="documented-every-step",
            in_docs=True,
        ),
    ]

    def setup(self) -> None:
        self._loops = self.context.shared(TrainingLoops)
        # Calls per loop (by id), kept until the walk knows whether the loop trains.
        self._calls: dict[int, list[cst.Call]] = {}

    def visit_Call(self, node: cst.Call) -> None:
        if self.context.names.qualified_name(node.func, among=_EMPTY_CACHE) is None:
            return
        loop = self._loops.innermost(node)
        if loop is not None and self._loops.every_step(node, loop):
            self._calls.setdefault(id(loop), []).append(node)

    def _leave(self, node: Loop) -> None:
        calls = self._calls.pop(id(node), [])
        if self._loops.trains(node):
            for call in calls:
                self.report(call)

    leave_For = leave_While = _leave
