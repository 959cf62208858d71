"""Session plans: everything a session will do, drawn when it starts.

A session's random choices (its app, how many turns, every message length,
every pause) are drawn up front, in session order, from streams that
nothing else consumes. The fleet then decides only *when* a turn is sent,
never *what* it is: a faster fleet replays the same conversations sooner,
and two fleets compared under one seed see the same users.

Plans are drawn for ``CHUNK`` sessions at a time (vectorised draws instead
of a few numpy calls per session). The chunk size is fixed, so session i's
plan does not depend on how many sessions the run has.
"""
from __future__ import annotations

from typing import Callable, Generic, Sequence, TypeVar

import numpy as np

__all__ = ["CHUNK", "Plans", "split"]

CHUNK = 256

P = TypeVar("P")


class Plans(Generic[P]):
    """``plans(i)`` for i = 0, 1, 2, ... in order, drawing a chunk when needed."""

    def __init__(self, draw: Callable[[int], Sequence[P]]):
        self._draw = draw
        self._start = 0
        self._chunk: Sequence[P] = ()

    def __call__(self, i: int) -> P:
        while i >= self._start + len(self._chunk):
            self._start += len(self._chunk)
            self._chunk = self._draw(CHUNK)
        if i < self._start:
            raise ValueError(f"session {i}'s plan was already handed out (plans are drawn in order)")
        return self._chunk[i - self._start]


def split(values: np.ndarray, counts: np.ndarray) -> list[list]:
    """``values`` cut into consecutive runs of ``counts[k]`` items, as Python lists."""
    edges = np.cumsum(counts)[:-1]
    return [part.tolist() for part in np.split(values, edges)]
