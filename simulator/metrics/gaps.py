"""Inter-token gaps: logged per engine segment, summarised on a 1 µs grid.

The fast engine never touches individual tokens: a run of n decode
iterations of a batch of B sequences, whose step time grows linearly from
``lo`` to ``hi``, contributes B·n gaps evenly spread over [lo, hi]. Logging
(lo, hi, weight) per segment keeps memory per *event*, not per token; ITL
statistics treat each segment as a uniform distribution over [lo, hi]
(exact for the mean; percentiles to within one step of the segment).

A log still grows with the run: the 10M-DAU peak hour logs ~56M segments,
and folding them exactly needs ~160 B each (``benchmarks/merge_memory.py``).
So the figures are taken from a :class:`GapGrid`: every segment's ends
snapped to the nearest microsecond and its events summed per grid point.
A grid holds one entry per distinct microsecond that any segment starts or
ends at (tens of thousands for decode steps of 10–50 ms), whatever the
number of segments, and grids of shards merge by summing entries; a run's
grid is its log's, folded a million segments at a time. The mean is a sum,
so the grid carries it exactly; the price is that every other ITL figure
moves by at most half a microsecond (a planner reading milliseconds to
three decimals sees the same numbers).
"""
from __future__ import annotations

import math
from array import array
from typing import Iterable, Union

import numpy as np

from .percentiles import UniformMixture, fold_events, segment_events

__all__ = ["GapLog", "GapGrid", "CELLS_PER_S"]

#: Grid points per second: a 1 µs grid.
CELLS_PER_S = 1_000_000
_CELLS_PER_MS = CELLS_PER_S // 1000
_CHUNK = 1 << 20


class GapLog:
    __slots__ = ("lo", "hi", "weight")

    def __init__(self) -> None:
        self.lo = array("d")
        self.hi = array("d")
        self.weight = array("d")

    def add(self, lo: float, hi: float, weight: float) -> None:
        if weight > 0:
            self.lo.append(lo)
            self.hi.append(hi)
            self.weight.append(weight)

    def extend(self, other: "GapLog") -> None:
        self.lo.extend(other.lo)
        self.hi.extend(other.hi)
        self.weight.extend(other.weight)

    def clear(self) -> None:
        """Forget every gap logged so far: a warm start's lead-in (simulator/fleet/window.py), whose
        requests ITL does not count; a step in progress at the window's start is logged after it, whole."""
        for a in (self.lo, self.hi, self.weight):
            del a[:]

    def __len__(self) -> int:
        return len(self.weight)


class GapGrid:
    """The events of a gap log on the 1 µs grid, summed per grid point:
    ``cells`` (int64 microseconds, sorted, distinct), the change of density
    there (gaps per millisecond), the change of the number of open segments,
    and the point mass; plus the total weight. See the module docstring."""

    __slots__ = ("cells", "dslope", "dcount", "jump", "total", "moment")

    def __init__(self, cells: np.ndarray, dslope: np.ndarray, dcount: np.ndarray, jump: np.ndarray,
                 total: float, moment: float) -> None:
        self.cells, self.dslope, self.dcount, self.jump = cells, dslope, dcount, jump
        self.total = total
        self.moment = moment   # Σ weight × segment midpoint, in ms: the exact mean, unsnapped

    @classmethod
    def empty(cls) -> "GapGrid":
        z = np.zeros(0)
        return cls(np.zeros(0, dtype=np.int64), z, z, z, 0.0, 0.0)

    @classmethod
    def of(cls, gaps: Union["GapLog", "GapGrid", None]) -> "GapGrid":
        """The grid of a log (a grid passes through; None is the empty grid)."""
        if gaps is None:
            return cls.empty()
        if isinstance(gaps, GapGrid):
            return gaps
        lo, hi, w = (np.frombuffer(a, dtype=np.float64) if len(a) else np.zeros(0)
                     for a in (gaps.lo, gaps.hi, gaps.weight))
        grid = cls.empty()
        for k in range(0, w.size, _CHUNK):
            grid = cls.merge([grid, cls._segments(lo[k:k + _CHUNK], hi[k:k + _CHUNK], w[k:k + _CHUNK])])
        return grid

    @classmethod
    def _segments(cls, lo: np.ndarray, hi: np.ndarray, w: np.ndarray) -> "GapGrid":
        if not (np.isfinite(lo).all() and np.isfinite(hi).all() and (hi >= lo).all() and (w >= 0).all()):
            raise ValueError("gap segments must be finite, with lo <= hi and weight >= 0")
        a = np.rint(lo * CELLS_PER_S).astype(np.int64)
        b = np.rint(hi * CELLS_PER_S).astype(np.int64)
        point = a == b
        wide = ~point
        events = segment_events(a[wide], b[wide], w[wide] * _CELLS_PER_MS / (b[wide] - a[wide]), a[point], w[point])
        return cls(*fold_events(*events), math.fsum(w), math.fsum(w * (lo + hi) * 500.0))

    @classmethod
    def merge(cls, grids: Iterable["GapGrid"]) -> "GapGrid":
        """One grid holding every given grid's gaps (summed in the given order)."""
        grids = list(grids)
        if len(grids) == 1:
            return grids[0]
        if not grids:
            return cls.empty()
        parts = fold_events(*(np.concatenate([getattr(g, f) for g in grids])
                              for f in ("cells", "dslope", "dcount", "jump")))
        return cls(*parts, math.fsum(g.total for g in grids), math.fsum(g.moment for g in grids))

    def __len__(self) -> int:
        return int(self.cells.size)

    def mixture(self) -> UniformMixture:
        """The gaps as a mixture in milliseconds (what results.json reports)."""
        return UniformMixture.from_events(self.cells / float(_CELLS_PER_MS), self.dslope, self.dcount, self.jump,
                                          self.total, self.moment / self.total if self.total > 0 else None)
