"""The proof budget: a run ends, successfully, once it has shown what it was run for.

A training script would otherwise train to the end, three times over (the original, the fixed
program, the CPU reference). A finding is *exercised* once its statement has run to completion
and then one of the lines that use its value has too (`analysis.value_uses`); where no use is
known, once its statement has. When every finding of the run is exercised, the run is given a
short grace (so a small program finishes and prints its result) and is then stopped. `--seconds`
and `--steps` (optimizer steps) stop a run earlier, as the user asks.

Runs inside the verify child, in the program's own process; lines are the program's.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

# Seconds a run goes on after its findings are exercised: a small program ends by itself.
GRACE_SECONDS = 3.0
# Why a run stopped once its findings were exercised (the other reasons name an option).
EXERCISED = "every finding's line and the use of its value had run"


class BudgetSpent(BaseException):
    """Raised into the program to end it; a BaseException so `except Exception` lets it through."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Watch:
    """One finding in the program that runs: its statement's lines and the lines using its value."""

    statement: frozenset[int]
    uses: frozenset[int]

    def to_json(self) -> dict[str, object]:
        return {"statement": sorted(self.statement), "uses": sorted(self.uses)}

    @classmethod
    def from_json(cls, data: object) -> Watch:
        if not isinstance(data, dict):
            return cls(frozenset(), frozenset())

        def lines(key: str) -> frozenset[int]:
            value = data.get(key)
            return frozenset(item for item in value if isinstance(item, int)) if isinstance(value, list) else frozenset()

        return cls(lines("statement"), lines("uses"))


@dataclass(frozen=True)
class Budget:
    watches: tuple[Watch, ...] = ()
    # `--seconds`/`--steps`: stop after this long or this many optimizer steps (None: no limit).
    seconds: float | None = None
    steps: int | None = None
    grace: float = GRACE_SECONDS

    def to_json(self) -> dict[str, object]:
        return {"watches": [watch.to_json() for watch in self.watches], "seconds": self.seconds,
                "steps": self.steps, "grace": self.grace}

    @classmethod
    def from_json(cls, data: object) -> Budget:
        if not isinstance(data, dict):
            return cls()
        watches = data.get("watches")
        seconds, steps, grace = data.get("seconds"), data.get("steps"), data.get("grace")
        return cls(
            tuple(Watch.from_json(item) for item in watches) if isinstance(watches, list) else (),
            float(seconds) if isinstance(seconds, (int, float)) else None,
            int(steps) if isinstance(steps, int) else None,
            float(grace) if isinstance(grace, (int, float)) else GRACE_SECONDS,
        )


class _Exercise:
    """Which findings have been exercised, from the program's line events."""

    def __init__(self, watches: Sequence[Watch]) -> None:
        self.pending = [watch for watch in watches if watch.statement]
        # Per pending finding: has its statement completed yet?
        self.ran = [False] * len(self.pending)

    def completed(self, line: int) -> bool:
        """Line `line` ran to completion; True once every finding is exercised."""
        still: list[Watch] = []
        ran: list[bool] = []
        for watch, statement_ran in zip(self.pending, self.ran, strict=True):
            beyond = watch.uses - watch.statement
            if line in watch.statement:
                statement_ran = True
                if not beyond:
                    continue  # nothing else is known to use the value: the statement itself is the use
            elif statement_ran and line in beyond:
                continue
            still.append(watch)
            ran.append(statement_ran)
        self.pending, self.ran = still, ran
        return not self.pending

    def unreached(self) -> tuple[int, ...]:
        """The first line of each finding whose statement has not run to completion."""
        return tuple(sorted(min(watch.statement) for watch, ran in zip(self.pending, self.ran, strict=True)
                            if not ran))


class ProofBudget:
    """Installs the line tracer, the timer and the optimizer-step hook for one run."""

    def __init__(self, path: str, budget: Budget) -> None:
        self.path = path
        self.budget = budget
        self.progress = _Exercise(budget.watches)
        self.started = time.monotonic()
        self.pid = os.getpid()
        self.tracing = bool(self.progress.pending)
        self.exercised_at: float | None = None
        self.steps = 0
        self.removers: list[Callable[[], None]] = []

    # -- stopping -----------------------------------------------------------------------------

    def _stop(self, reason: str) -> None:
        self.end()
        raise BudgetSpent(reason)

    def _alarm(self, signum: int, frame: types.FrameType | None) -> None:
        if os.getpid() != self.pid:
            return
        if self.exercised_at is not None:
            self._stop(EXERCISED)
        self._stop(f"stopped after {self.budget.seconds:g} s, as --seconds asks")

    def _exercised(self) -> None:
        self.tracing = False
        sys.settrace(None)
        self.exercised_at = time.monotonic()
        if not hasattr(signal, "setitimer"):
            self._stop(EXERCISED)  # no timer for a grace here
        left = self.budget.grace
        if self.budget.seconds is not None:
            left = min(left, self.budget.seconds - (self.exercised_at - self.started))
        signal.setitimer(signal.ITIMER_REAL, max(left, 0.001))

    # -- tracing ------------------------------------------------------------------------------

    def _call(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if not self.tracing or os.getpid() != self.pid:
            return None
        if frame.f_code.co_filename != self.path:
            return None
        return self._local_tracer()

    def _local_tracer(self) -> Callable[..., object]:
        current: list[int | None] = [None]

        def local(frame: types.FrameType, event: str, arg: Any) -> Any:
            if not self.tracing:
                return None
            if event == "line":
                previous, current[0] = current[0], frame.f_lineno
                if previous is not None and self.progress.completed(previous):
                    self._exercised()
                    return None
            elif event == "exception":
                current[0] = None  # the line raised: it did not complete
            elif event == "return" and current[0] is not None:
                finished, current[0] = current[0], None
                if self.progress.completed(finished):
                    self._exercised()
                    return None
            return local

        return local

    # -- steps --------------------------------------------------------------------------------

    def _install_step_hook(self, limit: int) -> None:
        optimizer = sys.modules.get("torch.optim.optimizer")
        register = getattr(optimizer, "register_optimizer_step_post_hook", None)
        if register is None:
            return

        def after_step(*_: object) -> None:
            if os.getpid() != self.pid:
                return
            self.steps += 1
            if self.steps >= limit:
                self._stop(f"stopped after {limit} optimizer step{'s' if limit != 1 else ''}, as --steps asks")

        handle = register(after_step)
        self.removers.append(handle.remove)

    def start(self) -> None:
        if hasattr(signal, "setitimer"):
            signal.signal(signal.SIGALRM, self._alarm)
            if self.budget.seconds is not None:
                signal.setitimer(signal.ITIMER_REAL, self.budget.seconds)
        if self.budget.steps is not None:
            self._install_step_hook(self.budget.steps)
        if self.tracing:
            sys.settrace(self._call)

    def unreached(self) -> tuple[int, ...]:
        return self.progress.unreached()

    def end(self) -> None:
        self.tracing = False
        sys.settrace(None)
        if hasattr(signal, "setitimer"):
            signal.setitimer(signal.ITIMER_REAL, 0)
        removers, self.removers = self.removers, []
        for remove in removers:
            remove()
