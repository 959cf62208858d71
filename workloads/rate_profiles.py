"""Time-varying arrival rates: a day's shape, and spikes on top of it.

An open-loop arrival (``workload.arrival``, poisson or gamma; for a session
workload its session starts) may carry a ``profile`` and ``spikes``::

    arrival:
      type: poisson
      rate_per_s: 50000          # the rate at the profile's peak
      profile: {type: hourly, values: [...24 relative values...], start_hour: 9}
      # or: {type: sinusoid, period_s: 86400, peak_to_trough: 10, peak_at_s: 18000}
      spikes: [{start_s: 3600, duration_s: 300, multiplier: 3}]

The rate at time t (seconds on the simulation clock, t = 0 at the start of
the run, or of its window after a ``lead_in_s`` lead-in) is
``λ(t) = rate_per_s · shape(t) · spikes(t)``; before t = 0 the shape repeats
back in time and no spike reaches (:meth:`workloads.arrivals.OpenLoopArrival.lead_in_times`):

* ``shape`` is the profile scaled so that its maximum is 1, so
  ``rate_per_s`` is the peak rate (what capacity plans quote) and the
  trough is ``rate_per_s / peak_to_trough``. It repeats forever (every 24 h
  for ``hourly``, every ``period_s`` for ``sinusoid``).
* ``hourly`` is piecewise constant: hour h of the day runs at
  ``values[h] / max(values)`` times the peak. Steps rather than a linear
  interpolation because hourly figures are usually per-hour counts (a log
  or a trace binned by hour): with steps the expected count of hour h is
  exactly proportional to ``values[h]``, so such counts can be pasted in
  as they are. ``start_hour`` is the time of day at t = 0, so a run with
  ``duration_s: 7200`` and ``start_hour: 13`` simulates 13:00-15:00 of that
  day. Zero hours are allowed (no traffic then), not an all-zero day.
* ``sinusoid`` is ``shape(t) = (1 + 1/R)/2 + (1 − 1/R)/2 · cos(2π(t − peak_at_s)/period_s)``
  with R = ``peak_to_trough``: 1 at ``peak_at_s`` (+ whole periods),
  1/R half a period later; its mean is (1 + 1/R)/2.
* ``spikes`` multiply the rate by ``multiplier`` on
  ``[start_s, start_s + duration_s)``, once (they do not repeat with the
  profile); overlapping spikes multiply, and a multiplier below 1 is a dip.
  A spike starting at or after ``duration_s``, or running past it, would
  change nothing there (no arrival is drawn after it) and is refused
  (:class:`workloads.spec.WorkloadSpec`); so is one starting after a
  count-sized run's last arrival (:mod:`simulator.scenario.drawn`).
  They come on top of the peak: during a spike λ may exceed ``rate_per_s``.

Sampling (:class:`RateSchedule`) is the time-change of
:mod:`workloads.arrivals`: with Λ(t) = ∫₀ᵗ λ, an arrival at operational time
u (unit-rate gaps) happens at Λ⁻¹(u). Λ is in closed form, built per spike
segment from the shape's own integral G (``Λ(t) = L_k + rate·c_k·(G(t) − G(b_k))``
on segment k, from b_k with spike factor c_k), and Λ⁻¹ is exact: one
``searchsorted`` and a division for the hourly steps, and for the sinusoid
Kepler's equation ``μx + (α/ω)·sin ωx = y``, solved by safeguarded Newton to
rounding (G' = shape ≥ 1/R > 0 keeps it well posed; about 7 steps at R = 10,
0.6 s per million arrivals).
"""
from __future__ import annotations

import math
from typing import Annotated, Literal, Optional, Sequence, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from simulator.runsize import MAX_SPAN_S

__all__ = ["HourlyProfile", "SinusoidProfile", "Spike", "RateProfile", "RateSchedule"]

DAY_S = 86400.0
HOUR_S = 3600.0

_Finite = dict(allow_inf_nan=False)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HourlyProfile(_Model):
    """A day in 24 hourly steps, repeating every 24 h; ``rate_per_s`` is the busiest hour's rate.

    Hour h (``start_hour`` at t = 0) runs at ``rate_per_s · values[h] / max(values)``.
    """

    type: Literal["hourly"] = "hourly"
    values: list[Annotated[float, Field(ge=0, **_Finite)]] = Field(
        min_length=24, max_length=24,
        description="24 relative rates, hour 0 (00:00-01:00) first; only their ratios matter "
                    "(per-hour counts will do), at least one > 0")
    start_hour: float = Field(default=0.0, ge=0, lt=24, **_Finite,
                              description="hour of the day at t = 0 (9.5 = 09:30): the window of the day simulated")

    @field_validator("values")
    @classmethod
    def _some_traffic(cls, v: list[float]) -> list[float]:
        if max(v) <= 0:
            raise ValueError("all 24 values are 0: at least one hour needs traffic")
        return v

    # --- the shape, on the simulation clock (max 1) ---------------------------------

    def _levels(self) -> tuple[np.ndarray, np.ndarray]:
        v = np.asarray(self.values, dtype=float)
        v = v / v.max()
        return v, np.concatenate([[0.0], np.cumsum(v * HOUR_S)])  # levels, integral at each hour start

    def _clock_integral(self, tau: np.ndarray) -> np.ndarray:
        """∫ shape over [0, τ) of the day clock (τ = 0 at midnight)."""
        v, cum = self._levels()
        days = np.floor(tau / DAY_S)
        r = tau - days * DAY_S
        h = np.clip((r // HOUR_S).astype(np.int64), 0, 23)
        return days * cum[24] + cum[h] + v[h] * (r - h * HOUR_S)

    def shape(self, t: np.ndarray) -> np.ndarray:
        v, _ = self._levels()
        tau = np.mod(t + self.start_hour * HOUR_S, DAY_S)
        return v[np.clip((tau // HOUR_S).astype(np.int64), 0, 23)]

    def integral(self, t: np.ndarray) -> np.ndarray:
        o = self.start_hour * HOUR_S
        return self._clock_integral(t + o) - self._clock_integral(np.float64(o))

    def inverse(self, y: np.ndarray) -> np.ndarray:
        v, cum = self._levels()
        o = self.start_hour * HOUR_S
        z = y + self._clock_integral(np.float64(o))
        days = np.floor(z / cum[24])
        r = z - days * cum[24]
        over = r >= cum[24]  # rounding: the next day's start
        days, r = days + over, np.maximum(np.where(over, r - cum[24], r), 0.0)
        # The hour holding r ∈ [0, day): the last start ≤ r, which skips zero
        # hours (their start equals the next one's), so v[h] > 0 below.
        h = np.searchsorted(cum, r, side="right") - 1
        return days * DAY_S + h * HOUR_S + (r - cum[h]) / v[h] - o

    @property
    def mean(self) -> float:
        v, _ = self._levels()
        return float(v.mean())

    def max_on(self, a: float, b: float) -> float:
        """sup of the shape over [a, b), b > a (b may be inf)."""
        if b - a >= DAY_S:
            return 1.0
        v, _ = self._levels()
        o = self.start_hour * HOUR_S
        first, last = math.floor((a + o) / HOUR_S), math.ceil((b + o) / HOUR_S) - 1
        return float(max(v[h % 24] for h in range(first, max(last, first) + 1)))


class SinusoidProfile(_Model):
    """A smooth daily (or any period) wave: ``rate_per_s`` at the peak, ``rate_per_s / peak_to_trough`` at the trough.

    ``shape(t) = (1 + 1/R)/2 + (1 − 1/R)/2 · cos(2π(t − peak_at_s)/period_s)``, R = peak_to_trough.
    """

    type: Literal["sinusoid"] = "sinusoid"
    period_s: float = Field(default=DAY_S, gt=0, le=MAX_SPAN_S, **_Finite,
                            description="seconds per cycle (a day by default; at most the longest run, ~3 years)")
    peak_to_trough: float = Field(ge=1, **_Finite, description="peak rate over trough rate (1 = flat)")
    peak_at_s: float = Field(default=0.0, ge=0, le=MAX_SPAN_S, **_Finite,
                             description="a peak's time on the simulation clock (the run starts at a peak by "
                                         "default; half a period later is a trough)")

    @property
    def _mu_alpha_omega(self) -> tuple[float, float, float]:
        q = 1.0 / self.peak_to_trough
        return (1.0 + q) / 2.0, (1.0 - q) / 2.0, 2.0 * math.pi / self.period_s

    def shape(self, t: np.ndarray) -> np.ndarray:
        mu, alpha, omega = self._mu_alpha_omega
        return mu + alpha * np.cos(omega * (t - self.peak_at_s))

    def _phase_integral(self, x: np.ndarray) -> np.ndarray:
        """∫ shape from a peak over [0, x) of the phase x = t − peak_at_s."""
        mu, alpha, omega = self._mu_alpha_omega
        return mu * x + (alpha / omega) * np.sin(omega * x)

    def integral(self, t: np.ndarray) -> np.ndarray:
        return self._phase_integral(t - self.peak_at_s) - self._phase_integral(np.float64(-self.peak_at_s))

    def inverse(self, y: np.ndarray) -> np.ndarray:
        mu, alpha, omega = self._mu_alpha_omega
        per_cycle = mu * self.period_s
        z = np.atleast_1d(y + self._phase_integral(np.float64(-self.peak_at_s)))
        k = np.floor(z / per_cycle)
        r = np.clip(z - k * per_cycle, 0.0, per_cycle)
        # Solve μx + (α/ω)·sin ωx = r for x in [0, period): G is increasing with
        # slope in [1/R, 1], so Newton kept inside a shrinking bracket converges
        # (about 7 steps from x = r/μ at R = 10). G is known to a few ulps of
        # the period, so x to R times that: stop there.
        x, lo, hi = r / mu, np.zeros_like(r), np.full_like(r, self.period_s)
        tol = 8.0 * np.finfo(float).eps * self.period_s * self.peak_to_trough
        todo = np.arange(r.size)
        for _ in range(100):
            xa, ra = x[todo], r[todo]
            f = self._phase_integral(xa) - ra
            la, ha = np.where(f <= 0, xa, lo[todo]), np.where(f >= 0, xa, hi[todo])
            nxt = xa - f / (mu + alpha * np.cos(omega * xa))
            nxt = np.where((nxt >= la) & (nxt <= ha), nxt, 0.5 * (la + ha))
            x[todo], lo[todo], hi[todo] = nxt, la, ha
            todo = todo[np.abs(nxt - xa) > tol]
            if not todo.size:
                break
        return (k * self.period_s + x + self.peak_at_s).reshape(np.shape(y))

    @property
    def mean(self) -> float:
        return self._mu_alpha_omega[0]

    def max_on(self, a: float, b: float) -> float:
        if b - a >= self.period_s:
            return 1.0
        next_peak = self.peak_at_s + math.ceil((a - self.peak_at_s) / self.period_s) * self.period_s
        if next_peak < b:
            return 1.0
        return float(max(self.shape(np.float64(a)), self.shape(np.float64(b))))


class _Flat:
    """No profile: shape 1 everywhere."""

    mean = 1.0

    def shape(self, t: np.ndarray) -> np.ndarray:
        return np.ones_like(t)

    def integral(self, t: np.ndarray) -> np.ndarray:
        return t

    def inverse(self, y: np.ndarray) -> np.ndarray:
        return y

    def max_on(self, a: float, b: float) -> float:
        return 1.0


class Spike(_Model):
    """A one-off burst (or dip): the rate times ``multiplier`` on ``[start_s, start_s + duration_s)``."""

    start_s: float = Field(ge=0, **_Finite, description="when it starts, on the simulation clock; before "
                                                        "workload.duration_s where it is set, else before the "
                                                        "last arrival the count reaches (a spike from then on "
                                                        "meets no arrival and is refused)")
    duration_s: float = Field(gt=0, **_Finite, description="how long it lasts; ending by workload.duration_s "
                                                           "where it is set (a part past it is refused)")
    multiplier: float = Field(gt=0, **_Finite, description="rate factor while it lasts (< 1 is a dip)")


RateProfile = Annotated[Union[HourlyProfile, SinusoidProfile], Field(discriminator="type")]


def _array(t) -> tuple[np.ndarray, bool]:
    a = np.asarray(t, dtype=float)
    return a, a.ndim == 0


def _out(x: np.ndarray, scalar: bool):
    return float(x) if scalar else x


class RateSchedule:
    """λ(t), Λ(t) = ∫₀ᵗ λ and Λ⁻¹ for a rate, a profile and spikes (see the module doc).

    The time axis is cut at every spike edge into segments k = 0..K, segment
    k from ``edges[k]`` with spike factor ``factor[k]`` and ``Λ(edges[k]) =
    cum[k]``; the last runs forever at factor 1.
    """

    def __init__(self, rate_per_s: float, profile: Optional[RateProfile] = None,
                 spikes: Sequence[Spike] = ()):
        self.rate = float(rate_per_s)
        self.shape = profile if profile is not None else _Flat()
        edges = sorted({0.0, *(s.start_s for s in spikes), *(s.start_s + s.duration_s for s in spikes)})
        self.edges = np.asarray(edges)
        mids = [(a + b) / 2 for a, b in zip(edges, edges[1:])] + [math.inf]
        self.factor = np.asarray([math.prod(s.multiplier for s in spikes if s.start_s <= m < s.start_s + s.duration_s)
                                  for m in mids])
        self.g_edges = self.shape.integral(self.edges)
        slope = self.rate * self.factor
        self.cum = np.concatenate([[0.0], np.cumsum(slope[:-1] * np.diff(self.g_edges))])
        self._slope = slope

    def _segment(self, t: np.ndarray) -> np.ndarray:
        return np.clip(np.searchsorted(self.edges, t, side="right") - 1, 0, None)

    def rate_at(self, t):
        """λ(t): arrivals per second at time(s) t ≥ 0."""
        t, scalar = _array(t)
        return _out(self._slope[self._segment(t)] * self.shape.shape(t), scalar)

    def cumulative(self, t):
        """Λ(t) = ∫₀ᵗ λ: the expected number of arrivals before time(s) t ≥ 0 (inf past float range:
        the run's size check then refuses it)."""
        t, scalar = _array(t)
        k = self._segment(t)
        with np.errstate(over="ignore"):
            return _out(self.cum[k] + self._slope[k] * (self.shape.integral(t) - self.g_edges[k]), scalar)

    def inverse(self, u: np.ndarray) -> np.ndarray:
        """Λ⁻¹(u) for sorted operational times u ≥ 0: the arrival times (sorted too)."""
        u = np.asarray(u, dtype=float)
        k = np.clip(np.searchsorted(self.cum, u, side="right") - 1, 0, None)
        t = self.shape.inverse(self.g_edges[k] + (u - self.cum[k]) / self._slope[k])
        # Stay inside the segment and in order despite rounding (ulps at most).
        t = np.clip(t, self.edges[k], np.append(self.edges[1:], np.inf)[k])
        return np.maximum.accumulate(t) if t.size else t

    def mean_rate(self, duration_s: Optional[float] = None) -> float:
        """Mean λ over [0, duration_s); without a duration, the long-run mean
        (the profile's mean, spikes being one-off)."""
        if duration_s is None:
            return self.rate * self.shape.mean
        if not (duration_s > 0 and math.isfinite(duration_s)):
            raise ValueError(f"duration_s must be a finite number > 0, got {duration_s}")
        return self.cumulative(duration_s) / duration_s

    def peak_rate(self, duration_s: Optional[float] = None) -> float:
        """The highest λ over [0, duration_s) (over all time without a duration), spikes included."""
        end = math.inf if duration_s is None else float(duration_s)
        if not end > 0:
            raise ValueError(f"duration_s must be > 0, got {duration_s}")
        bounds = np.append(self.edges[1:], math.inf)
        return max(float(self._slope[k]) * self.shape.max_on(float(a), min(float(b), end))
                   for k, (a, b) in enumerate(zip(self.edges, bounds)) if a < end)
