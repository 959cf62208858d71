"""Summary statistics with vLLM's conventions, for samples and for gap mixtures.

``vllm bench serve`` reports mean, median, population std (``np.std``) and
``np.percentile`` (linear interpolation) of raw per-request samples. TTFT,
TPOT and E2EL are such samples here too, so :func:`sample_stats` just applies
numpy to them, after sorting so that the result does not depend on the order
in which shards or replicas handed their records over.

Inter-token latencies are different: the fast engine never materialises the
individual gaps, it logs (lo, hi, weight) per segment (see ``gaps.py``).
:class:`UniformMixture` treats the log as a mixture of uniform distributions
(a segment with lo == hi is a point mass) and answers the same questions
numpy would answer about the expanded sample:

* mean and std are exact for the mixture;
* the percentile uses numpy's "linear" rule on a *virtual* sorted sample of
  W = Σweight values whose k-th element is the mixture quantile at mass
  k + ½. For point masses with integer weights this is exactly the expanded
  sample, so the result equals ``np.percentile`` of the expanded gaps; for a
  segment of n gaps it places them at the midpoints of n equal slices of
  [lo, hi], within one step of the engine's true gaps, and always inside the
  span of the segments involved.

Statistics over an empty set are ``None`` (JSON null), never 0 or NaN: a
planner must not mistake "no data" for "zero latency".
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

__all__ = ["DEFAULT_PERCENTILES", "percentile_key", "sample_stats", "sample_percentile", "UniformMixture",
           "fold_events", "segment_events"]

#: The percentiles every latency gets in results.json (vLLM's default is
#: only p99; capacity planning wants the shape of the tail too).
DEFAULT_PERCENTILES: tuple[float, ...] = (90.0, 95.0, 99.0)


def percentile_key(p: float) -> str:
    """vLLM's spelling of a percentile in result keys: 99 -> "p99", 99.9 -> "p99.9"."""
    p = float(p)
    return f"p{int(p)}" if int(p) == p else f"p{p}"


def _check_percentiles(percentiles: Iterable[float]) -> list[float]:
    qs = [float(q) for q in percentiles]
    for q in qs:
        if not 0.0 <= q <= 100.0:
            raise ValueError(f"percentile {q} is outside [0, 100]")
    return qs


def _sorted_finite(values: Iterable[float] | np.ndarray) -> np.ndarray:
    a = np.asarray(values, dtype=np.float64).ravel()
    if a.size and not np.isfinite(a).all():
        raise ValueError("latency samples must be finite (a NaN here means a missing timestamp)")
    return np.sort(a)


def sample_percentile(values: Iterable[float] | np.ndarray, q: float) -> float | None:
    """``np.percentile(values, q)`` as a plain float, or None for no values."""
    a = _sorted_finite(values)
    if a.size == 0:
        return None
    return float(np.percentile(a, float(q)))


def sample_stats(values: Iterable[float] | np.ndarray,
                 percentiles: Sequence[float] = DEFAULT_PERCENTILES) -> dict[str, float | None]:
    """mean, median, std (ddof=0) and the given percentiles, as vLLM computes
    them; every entry is None when there are no values."""
    qs = _check_percentiles(percentiles)
    a = _sorted_finite(values)
    keys = ["mean", "median", "std", *(percentile_key(q) for q in qs)]
    if a.size == 0:
        return dict.fromkeys(keys, None)
    out: dict[str, float | None] = {"mean": float(np.mean(a)), "median": None, "std": float(np.std(a))}
    # ``a`` is our own sorted copy: select order statistics in it rather
    # than in yet another copy (the same values; only its order changes).
    out["median"] = float(np.median(a, overwrite_input=True))
    if qs:
        for q, v in zip(qs, np.percentile(a, qs, overwrite_input=True)):
            out[percentile_key(q)] = float(v)
    return out


def _lerp(a: np.ndarray, b: np.ndarray, t: np.ndarray) -> np.ndarray:
    """numpy's own interpolation formula (``numpy.lib._function_base_impl._lerp``),
    so that point-mass mixtures reproduce ``np.percentile`` bit for bit."""
    diff = b - a
    out = a + diff * t
    return np.where(t >= 0.5, b - diff * (1.0 - t), out)


def segment_events(lo: np.ndarray, hi: np.ndarray, density: np.ndarray, at: np.ndarray, mass: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The breakpoint events (see :func:`fold_events`) of uniform segments
    [lo, hi] with these densities and of point masses ``mass`` at ``at``."""
    n, m = lo.size, at.size
    return (np.concatenate([lo, hi, at]), np.concatenate([density, -density, np.zeros(m)]),
            np.concatenate([np.ones(n), -np.ones(n), np.zeros(m)]), np.concatenate([np.zeros(2 * n), mass]))


def fold_events(pos: np.ndarray, dslope: np.ndarray, dcount: np.ndarray, jump: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Breakpoint events summed per distinct position, in position order.

    A uniform segment of weight w on [lo, hi] is two events, (lo, +w/(hi-lo),
    +1, 0) and (hi, -w/(hi-lo), -1, 0); a point mass one, (x, 0, 0, w). Summed
    events are again events, which is what lets gap grids merge."""
    order = np.argsort(pos, kind="stable")
    pos, dslope, dcount, jump = pos[order], dslope[order], dcount[order], jump[order]
    if pos.size == 0:
        return pos, dslope, dcount, jump
    first = np.flatnonzero(np.concatenate([[True], pos[1:] != pos[:-1]]))
    return (pos[first], np.add.reduceat(dslope, first), np.add.reduceat(dcount, first),
            np.add.reduceat(jump, first))


class UniformMixture:
    """A weighted mixture of uniform distributions on [lo, hi] (point masses
    where lo == hi), with the statistics vLLM reports for ITL.

    Everything is answered from the mixture's *folded* form: its distinct
    breakpoints with the point mass at each and the density right of it
    (the CDF is piecewise linear between them). That form is all a run's
    :class:`~simulator.metrics.gaps.GapGrid` keeps, so a run of any length
    and any number of shards reaches the same code through
    :meth:`from_events` in bounded memory; the constructor folds raw
    segments exactly, for the mathematics and its tests.

    Sums over breakpoints are exact (``math.fsum``), so mean, std and CDF
    are the same bit for bit whatever order the segments were logged in;
    percentiles can differ in the last bits when segments share a breakpoint.
    """

    __slots__ = ("total", "_mean", "_xs", "_jump", "_slope", "_c_left", "_c_right")

    # A segment narrower than this fraction of the whole span is treated as a
    # point mass at its midpoint: its density would be so large that summing
    # it with the others would swamp their slopes in rounding error.
    _NARROW = 1e-9

    def __init__(self, lo: Sequence[float] | np.ndarray, hi: Sequence[float] | np.ndarray,
                 weight: Sequence[float] | np.ndarray, scale: float = 1.0) -> None:
        lo = np.asarray(lo, dtype=np.float64).ravel() * scale
        hi = np.asarray(hi, dtype=np.float64).ravel() * scale
        w = np.asarray(weight, dtype=np.float64).ravel()
        if not (lo.shape == hi.shape == w.shape):
            raise ValueError("lo, hi and weight must have the same length")
        if lo.size and not (np.isfinite(lo).all() and np.isfinite(hi).all() and np.isfinite(w).all()):
            raise ValueError("gap segments must be finite")
        if (w < 0).any():
            raise ValueError("gap weights must be non-negative")
        if (hi < lo).any():
            raise ValueError("gap segments must have lo <= hi")
        keep = w > 0
        if not keep.all():
            lo, hi, w = lo[keep], hi[keep], w[keep]
        span = float(hi.max() - lo.min()) if lo.size else 0.0
        width = hi - lo
        point = width <= self._NARROW * span
        wide = ~point
        px = np.where(width == 0, lo, 0.5 * (lo + hi))[point]
        total = math.fsum(w) if w.size else 0.0
        # Averaging offsets from the smallest segment mean keeps a single point
        # mass (or a tight cluster) exact instead of drifting out of its span.
        mid = 0.5 * (lo + hi)
        self._mean = None
        if total > 0:
            ref = float(mid.min())
            m = ref + math.fsum(w * (mid - ref)) / total
            self._mean = float(min(max(m, ref), float(mid.max())))
        self._fold(*fold_events(*segment_events(lo[wide], hi[wide], w[wide] / width[wide], px, w[point])), total)

    @classmethod
    def from_events(cls, xs: np.ndarray, dslope: np.ndarray, dcount: np.ndarray, jump: np.ndarray,
                    total: float, mean: float | None) -> "UniformMixture":
        """The mixture whose distinct sorted breakpoints ``xs`` carry the given
        change of density, change of open-segment count and point mass
        (see :func:`fold_events`); ``total`` is the sum of the weights and
        ``mean`` the mixture's mean, kept exactly by whoever folded it."""
        self = cls.__new__(cls)
        self._mean = mean if total > 0 else None
        self._fold(np.asarray(xs, dtype=np.float64), np.asarray(dslope, dtype=np.float64),
                   np.asarray(dcount, dtype=np.float64), np.asarray(jump, dtype=np.float64), float(total))
        return self

    def _fold(self, xs: np.ndarray, dslope: np.ndarray, dcount: np.ndarray, jump: np.ndarray,
              total: float) -> None:
        self.total = total if xs.size else 0.0
        slope = np.cumsum(dslope)
        active = np.cumsum(dcount)
        # Where no uniform segment is open the density is exactly zero; resetting
        # it there stops rounding residue of +d/-d from leaking into gaps.
        slope[active <= 0.5] = 0.0
        np.maximum(slope, 0.0, out=slope)
        inc = jump.copy()
        inc[1:] += slope[:-1] * np.diff(xs)
        c_right = np.cumsum(inc)
        self._xs, self._jump, self._slope = xs, jump, slope
        self._c_right = c_right
        self._c_left = c_right - jump

    def __len__(self) -> int:
        """Distinct breakpoints: what the mixture holds in memory."""
        return int(self._xs.size)

    # -- moments -----------------------------------------------------------
    def _pieces(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(mass, centre, width) of every atom and every uniform piece between
        breakpoints."""
        xs, slope = self._xs, self._slope
        dx = np.diff(xs)
        mass = np.concatenate([self._jump, slope[:-1] * dx])
        centre = np.concatenate([xs, xs[:-1] + 0.5 * dx])
        width = np.concatenate([np.zeros(xs.size), dx])
        return mass, centre, width

    def mean(self) -> float | None:
        """Exact for the segments, not their folded form: carried from the
        constructor or the grid (a mean is a sum, so it merges exactly)."""
        return self._mean if self.total > 0 else None

    def std(self) -> float | None:
        """Population std (np.std's ddof=0): within-piece variance width²/12
        plus the spread of the piece centres (the density is constant on
        each piece, so every piece is one uniform)."""
        m = self.mean()
        if m is None:
            return None
        mass, centre, width = self._pieces()
        var = math.fsum(mass * (width * width / 12.0 + (centre - m) ** 2)) / math.fsum(mass)
        return math.sqrt(max(var, 0.0))

    # -- distribution ------------------------------------------------------
    def cdf(self, x: float) -> float | None:
        """Fraction of the gaps that are <= x (point masses at x count as <= x)."""
        if self.total <= 0:
            return None
        xs = self._xs
        k = int(np.searchsorted(xs, x, side="right")) - 1
        if k < 0:
            return 0.0
        c = float(self._c_right[k])
        if k + 1 < xs.size:
            c = min(c + float(self._slope[k]) * (x - float(xs[k])), float(self._c_left[k + 1]))
        return min(c / float(self._c_right[-1]), 1.0)

    def quantile_at_mass(self, mass: np.ndarray) -> np.ndarray:
        """Generalised inverse of the cumulative mass, inf{x : C(x) >= m}."""
        xs, cl, cr, slope = self._xs, self._c_left, self._c_right, self._slope
        # Rescale so that rounding in the cumulative sums cannot push a target
        # past the last breakpoint.
        m = np.clip(np.asarray(mass, dtype=np.float64), 0.0, self.total) * (cr[-1] / self.total)
        j = np.minimum(np.searchsorted(cr, m, side="left"), xs.size - 1)
        i = np.maximum(j - 1, 0)
        on_point = (j == 0) | (cl[j] <= m)
        with np.errstate(divide="ignore", invalid="ignore"):
            inside = xs[i] + (m - cr[i]) / slope[i]
        inside = np.where(slope[i] > 0, np.clip(inside, xs[i], xs[j]), xs[j])
        return np.where(on_point, xs[j], inside)

    def percentiles(self, qs: Sequence[float]) -> list[float | None]:
        """``np.percentile`` (linear) of the virtual expanded sample; see the module doc."""
        qs = _check_percentiles(qs)
        if self.total <= 0:
            return [None] * len(qs)
        last = max(self.total - 1.0, 0.0)
        vi = last * (np.asarray(qs, dtype=np.float64) / 100.0)
        k0 = np.floor(vi)
        gamma = vi - k0
        a = self.quantile_at_mass(np.minimum(k0 + 0.5, self.total))
        b = self.quantile_at_mass(np.minimum(np.minimum(k0 + 1.0, last) + 0.5, self.total))
        return [float(v) for v in _lerp(a, b, gamma)]

    def stats(self, percentiles: Sequence[float] = DEFAULT_PERCENTILES) -> dict[str, float | None]:
        """Same keys as :func:`sample_stats`."""
        qs = _check_percentiles(percentiles)
        pct = self.percentiles([50.0, *qs])
        out: dict[str, float | None] = {"mean": self.mean(), "median": pct[0], "std": self.std()}
        for q, v in zip(qs, pct[1:]):
            out[percentile_key(q)] = v
        return out
