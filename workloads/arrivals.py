"""Arrival processes: when requests reach the fleet.

Open-loop processes (Poisson, gamma) fix arrival times in advance, whatever
the fleet does: this is how a product's users behave and what exposes
queueing. The closed-loop one (``concurrency``) has no arrival times of its
own: a new request is sent when one finishes, so the engine drives it and
this module only validates it. A ``trace`` (:class:`workloads.traces.TraceSpec`)
replays a file's timestamps and lengths instead.

Open-loop times are generated the way vLLM's ``bench serve`` does (gamma
gaps with shape = burstiness and scale = 1/(rate·burstiness); burstiness 1 is
Poisson), and the first arrival comes one gap after t = 0, not at 0. Unlike
vLLM we do not rescale the gaps so the last arrival lands exactly at n/rate:
that conditions the process on its total and would make ``n`` and
``duration_s`` runs of the same seed disagree.

A process only has to turn *unit-rate* gaps into wall-clock times. Each
open-loop class draws gaps of mean 1 (``_unit_gaps``), and
``_to_time``/``_horizon`` map between that operational time and seconds:
÷ rate for a constant rate, and Λ⁻¹ and Λ (Λ = ∫λ) when a ``profile`` or
``spikes`` make the rate vary over the day (:mod:`workloads.rate_profiles`;
``rate_per_s`` is then the profile's peak rate).

That time-change, rather than Lewis–Shedler thinning, because

* it is exact: unit-rate Poisson points mapped through Λ⁻¹ form a Poisson
  process of intensity λ, and Λ⁻¹ is closed-form (or solved to machine
  precision) for every profile here;
* it draws one gap per arrival, where thinning draws peak/mean candidates
  (and as many uniforms) per kept arrival: 1.8 for a 10× sinusoid, 5.5
  with a 3× spike on it;
* it leaves the gap sampling alone, so a gamma process varies its rate the
  same way (a time-changed renewal process: locally gamma with CV
  1/√burstiness while λ changes little over a gap; thinning a gamma
  process would not be gamma), a profile only moves the same draws in time
  (same seed, same operational times), and ``n`` and ``duration_s`` runs
  still agree on their common prefix.

Without a profile or spikes nothing changes: same draws, same times.
"""
from __future__ import annotations

import math
from functools import cached_property
from typing import Annotated, Callable, ClassVar, Literal, Optional

import numpy as np
from pydantic import Field, model_validator

from .arrival_registry import ARRIVALS, ArrivalProcess, ArrivalSpec, register_arrival
from .rate_profiles import RateProfile, RateSchedule, Spike
from .traces import TraceSpec  # noqa: F401  (registers ``trace``)

__all__ = ["ArrivalSpec", "ArrivalProcess", "ARRIVALS", "register_arrival", "PoissonArrival", "GammaArrival",
           "ConcurrencyArrival", "OpenLoopArrival"]

Rate = Annotated[float, Field(gt=0, allow_inf_nan=False,
                               description="mean arrivals per second; with a profile, the rate at its peak "
                                           "(spikes multiply on top)")]


class OpenLoopArrival(ArrivalProcess):
    """Arrival times fixed in advance: a renewal process in operational time.

    A new open-loop process subclasses this with its own ``type`` literal and
    ``_unit_gaps``, and registers itself (:func:`register_arrival`)."""

    rate_per_s: Rate
    profile: Optional[RateProfile] = Field(
        default=None, description="the rate's shape over the day (hourly or sinusoid); rate_per_s is its peak")
    spikes: list[Spike] = Field(default=[], description="one-off bursts or dips that multiply the rate")

    @property
    def time_varying(self) -> bool:
        return self.profile is not None or bool(self.spikes)

    @cached_property
    def schedule(self) -> RateSchedule:
        """λ, Λ and Λ⁻¹ of this rate (:class:`workloads.rate_profiles.RateSchedule`)."""
        return RateSchedule(self.rate_per_s, self.profile, self.spikes)

    def rate_at(self, t):
        """Arrivals per second at time(s) ``t`` ≥ 0 (a float, or an array like ``t``)."""
        return self.schedule.rate_at(t)

    def expected_count(self, t_end, t_start=0.0):
        """Expected arrivals in [t_start, t_end) (arrays allowed: per-bin counts for a schedule)."""
        return self.schedule.cumulative(t_end) - self.schedule.cumulative(t_start)

    def mean_rate(self, duration_s: Optional[float] = None) -> float:
        """Mean arrivals per second over [0, duration_s), or in the long run
        without it: what back-of-envelope sizing should use, not ``rate_per_s``."""
        return self.schedule.mean_rate(duration_s)

    def peak_rate(self, duration_s: Optional[float] = None) -> float:
        """The highest rate over [0, duration_s) (all time without it), spikes included."""
        return self.schedule.peak_rate(duration_s)

    def _unit_gaps(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """Inter-arrival gaps with mean 1 (the process's shape, not its rate)."""
        raise NotImplementedError(f"{type(self).__qualname__} defines no _unit_gaps(self, rng, size), the method an "
                                  "open-loop process draws its gaps of mean 1 with")

    @model_validator(mode="after")
    def _gaps_of_mean_one(self) -> "OpenLoopArrival":
        # rate_per_s is only the rate if the gaps have mean 1: a plug-in's of mean 2 would halve the load
        # unsaid. The built-in laws have mean 1 by their parameters; another process is sampled once per
        # setting (:func:`_gap_fault`).
        if type(self)._unit_gaps not in _MEAN_ONE_BY_LAW:
            fault = _gap_fault(self)
            if fault:
                raise ValueError(fault)
        return self

    def _to_time(self, op: np.ndarray) -> np.ndarray:
        if self.time_varying:
            return self.schedule.inverse(op)
        return op / self.rate_per_s

    def _horizon(self, duration_s: float) -> float:
        if self.time_varying:
            return float(self.schedule.cumulative(duration_s))
        return duration_s * self.rate_per_s

    @property
    def _cv(self) -> float:
        """Coefficient of variation of a gap (sizes the batches in duration mode)."""
        return 1.0

    def _lead_in(self, span_s: float) -> tuple[float, Callable[[np.ndarray], np.ndarray]]:
        """Operational time at ``-span_s`` (≤ 0; 0 at t = 0) and its map back to seconds, for the process
        before the run: the profile continues back in time (a day or a period repeats) and spikes, which
        start at t ≥ 0, do not reach it. RateSchedule's own Λ starts at 0, hence the shape's integral here."""
        shape = self.profile
        if shape is None:
            return -span_s * self.rate_per_s, lambda op: op / self.rate_per_s
        # min: an integral over hours of rate 0 can round to a hair above 0 (+2e-106), a negative count
        lo = min(float(self.rate_per_s * shape.integral(np.float64(-span_s))), 0.0)
        return lo, lambda op: shape.inverse(op / self.rate_per_s)

    def lead_in_count(self, span_s: float) -> float:
        """Expected arrivals over [-span_s, 0): what a warm start adds to the run."""
        return -self._lead_in(span_s)[0]

    def lead_in_times(self, rng: np.random.Generator, span_s: float) -> np.ndarray:
        """Sorted arrival times in [-span_s, 0): the same process run for ``span_s`` seconds before the
        window (``workload.lead_in_s``), its first arrival one gap after -span_s."""
        lo, to_time = self._lead_in(span_s)
        t = np.clip(to_time(self._operational(rng, lo, 0.0)), -span_s, np.nextafter(0.0, -1.0))
        return np.maximum.accumulate(t) if t.size else t

    def times(self, rng: np.random.Generator, n: Optional[int] = None,
              duration_s: Optional[float] = None) -> np.ndarray:
        """Sorted arrival times in seconds: the first ``n`` arrivals, or every
        arrival before ``duration_s``. All are > 0 (only a gamma burstiness
        ≲ 0.05 can underflow gaps to exactly 0, i.e. simultaneous arrivals).

        The gaps come off ``rng`` in order, so the same generator state gives
        the same prefix in both modes: ``times(n=k)`` equals (to float
        rounding) the first k entries of a ``duration_s`` run that holds at
        least k arrivals.
        """
        if (n is None) == (duration_s is None):
            raise ValueError("give exactly one of n or duration_s")
        if n is not None:
            if n < 0:
                raise ValueError(f"n must be ≥ 0, got {n}")
            return self._to_time(np.cumsum(self._unit_gaps(rng, int(n))))
        if not (duration_s >= 0 and math.isfinite(duration_s)):
            raise ValueError(f"duration_s must be a finite number ≥ 0, got {duration_s}")
        return self._to_time(self._operational(rng, 0.0, self._horizon(duration_s)))

    def _operational(self, rng: np.random.Generator, start: float, stop: float) -> np.ndarray:
        """The arrivals' operational times in (``start``, ``stop``): unit-rate gaps summed from ``start``."""
        chunks: list[np.ndarray] = []
        last = start
        while last < stop:
            # Expected count plus ~6 standard deviations: usually one batch.
            remaining = stop - last
            size = int(remaining + 6.0 * self._cv * math.sqrt(remaining) + 16)
            op = last + np.cumsum(self._unit_gaps(rng, size))
            chunks.append(op)
            last = float(op[-1])
        op = np.concatenate(chunks) if chunks else np.empty(0)
        return op[: np.searchsorted(op, stop, side="left")]


@register_arrival("poisson")
class PoissonArrival(OpenLoopArrival):
    """Independent users: exponential gaps, inter-arrival CV = 1."""

    type: Literal["poisson"] = "poisson"

    def _unit_gaps(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return rng.standard_exponential(size)


@register_arrival("gamma")
class GammaArrival(OpenLoopArrival):
    """Bursty (burstiness < 1) or smoother-than-Poisson (> 1) traffic.

    vLLM bench's parameterisation, so a ``--burstiness`` from a benchmark
    carries over: gaps ~ Gamma(shape = burstiness, scale = 1/(rate·burstiness)),
    mean 1/rate, CV = 1/√burstiness.
    """

    type: Literal["gamma"] = "gamma"
    burstiness: float = Field(default=1.0, gt=0, allow_inf_nan=False,
                              description="gamma shape; 1 = Poisson, < 1 burstier")

    def _unit_gaps(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return rng.gamma(self.burstiness, 1.0 / self.burstiness, size)

    @property
    def _cv(self) -> float:
        return 1.0 / math.sqrt(self.burstiness)


#: The built-in gap laws, whose mean is 1 by their parameters (not sampled).
_MEAN_ONE_BY_LAW = {PoissonArrival._unit_gaps, GammaArrival._unit_gaps}
#: Gaps a plug-in's law is checked on: its mean to within 1 %, or 6 standard errors of so many.
GAP_SAMPLE = 65_536
_GAP_FAULTS: dict[tuple, str] = {}


def _gap_fault(process: OpenLoopArrival) -> str:
    """Why ``process``'s ``_unit_gaps`` breaks the contract rate_per_s relies on ("" when it keeps it):
    :data:`GAP_SAMPLE` gaps drawn from a fixed seed must be finite, ≥ 0 and of mean 1, to within 1 %
    or 6 standard errors (a heavy tail's sample mean wanders). Once per class and settings."""
    cls = type(process)
    key = (cls, process.model_dump_json(exclude={"rate_per_s", "profile", "spikes"}))
    if key in _GAP_FAULTS:
        return _GAP_FAULTS[key]
    who = f"the {process.type!r} arrival process ({cls.__module__}.{cls.__qualname__})"
    try:
        gaps = np.asarray(process._unit_gaps(np.random.default_rng(0), GAP_SAMPLE), dtype=float)
    except Exception as e:      # a plug-in's own fault, named with it
        fault = f"{who} failed to draw its gaps: {type(e).__name__}: {e}"
    else:
        if gaps.shape != (GAP_SAMPLE,):
            fault = f"{who} returned gaps of shape {gaps.shape} for {GAP_SAMPLE:,} asked"
        elif not (np.isfinite(gaps).all() and (gaps >= 0).all()):
            fault = f"{who} returned gaps that are negative or not finite"
        else:
            mean, spread = float(gaps.mean()), float(gaps.std()) / math.sqrt(GAP_SAMPLE)
            fault = ""
            if abs(mean - 1.0) > max(0.01, 6.0 * spread):
                fault = (f"{who} draws gaps of mean {mean:.4g} over {GAP_SAMPLE:,}, where _unit_gaps must return "
                         f"gaps of mean 1 (the process's shape; rate_per_s sets the rate): its arrivals would come "
                         + (f"at {1.0 / mean:.3g} × rate_per_s" if mean > 0 else "all at once"))
    _GAP_FAULTS[key] = fault
    return fault


@register_arrival("concurrency")
class ConcurrencyArrival(ArrivalProcess):
    """Closed loop: keep ``concurrency`` requests in flight (a load generator
    with N workers, the way throughput benchmarks are run)."""

    type: Literal["concurrency"] = "concurrency"
    concurrency: int = Field(ge=1, le=1_000_000, description="requests in flight at all times")
    ramp_up_s: float = Field(
        default=0.0, ge=0, le=86400, allow_inf_nan=False,
        description="clients start evenly over this many seconds (0: all at t = 0, as `vllm bench serve "
                    "--max-concurrency` and AIPerf's concurrency mode start)")
    warmup_requests: int = Field(
        default=0, ge=0, le=10_000_000,
        description="requests sent first and left out of the results, as a benchmark's warm-up; "
                    "num_requests are counted after them")
    warmup_drain: bool = Field(
        default=False,
        description="false: the loop runs on from warm-up into the counted requests without a pause; true: "
                    "the warm-up requests all finish before the counted ones start, as one fresh burst of "
                    "`concurrency` (AIPerf's warm-up phase)")
    turnaround_ms: float = Field(
        default=0.0, ge=0, le=60000, allow_inf_nan=False,
        description="a client sends its next request this long after its last one finished, exponentially "
                    "distributed with this mean: the benchmark client's own time to take in the response and "
                    "post the next request (event loop, HTTP); 0: at once")
    closed_loop: ClassVar[bool] = True

    @model_validator(mode="after")
    def _drain_needs_warmup(self) -> "ConcurrencyArrival":
        if self.warmup_drain and self.warmup_requests == 0:
            raise ValueError("warmup_drain: true needs warmup_requests > 0 (there is no warm-up to drain)")
        return self
