"""What a calibration run is doing, n of N, and about how long it has left.

Each step of a run is announced before it starts, with the time so far
and an estimate of what is left: the remaining steps' expected costs
(seconds on two cores, :data:`COST`) scaled by how fast the run has gone
against the same expectations so far. Plain lines, so a pipe or a CI log
shows them as well as a terminal.
"""
from __future__ import annotations

import sys
import time
from typing import Callable, TextIO

# Expected seconds per kind of step on a two-core machine (measured there).
COST = {
    "read": 1.0,            # a kernel table, parsed columns cached
    "read-first": 6.0,      # the same, parsed from the gzip CSV the first time
    "fit": 2.0,             # one op family of one GPU
    "stacks": 1.5,          # one GPU's per-stack comparisons and refits
    "fp8": 0.5,
    "transfer": 1.0,
    "report": 3.0,
    "moe-read": 60.0,       # reading and routing the MoE/MLA tables
    "moe": 420.0,           # one GPU's MoE formats and MLA modules
}


class Progress:
    """Announces planned steps on ``out`` (stderr); :meth:`step` for each."""

    def __init__(self, plan: list[str], out: TextIO | None = None, clock: Callable[[], float] = time.monotonic):
        self.plan = plan
        self.out = out if out is not None else sys.stderr
        self.clock = clock
        self.start = clock()
        self.done = 0

    def _left(self, elapsed: float) -> float:
        spent = sum(COST[k] for k in self.plan[:self.done])
        rest = sum(COST[k] for k in self.plan[self.done:])
        speed = elapsed / spent if spent > 0 and elapsed > 0 else 1.0
        return rest * speed

    def replan(self, rest: list[str]) -> None:
        """Replace the steps not yet started (once the data says what there is to fit)."""
        self.plan = self.plan[:self.done] + rest

    def step(self, what: str) -> None:
        """Announce the next planned step (``what`` it does)."""
        elapsed = self.clock() - self.start
        n = min(self.done + 1, len(self.plan))
        self.out.write(f"calibrate: [{n}/{len(self.plan)}] {what}; {_fmt(elapsed)} elapsed, "
                       f"about {_fmt(self._left(elapsed))} left\n")
        self.out.flush()
        self.done = n

    def finish(self) -> None:
        self.out.write(f"calibrate: done in {_fmt(self.clock() - self.start)}\n")
        self.out.flush()


def _fmt(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s} s" if s < 90 else f"{s // 60} min {s % 60:02d} s"


class Silent(Progress):
    """A run nobody watches (tests, notebooks)."""

    def __init__(self) -> None:
        super().__init__([])

    def step(self, what: str) -> None:
        pass

    def replan(self, rest: list[str]) -> None:
        pass

    def finish(self) -> None:
        pass
