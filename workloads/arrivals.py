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

Extension points: a process only has to turn *unit-rate* gaps into wall-clock
times. Each open-loop class draws gaps of mean 1 (``_unit_gaps``), and
``_to_time``/``_horizon`` map between that operational time and seconds
(÷ rate here). A time-varying rate λ(t) replaces the two maps with Λ⁻¹ and Λ
(Λ = ∫λ), the standard time-change, without touching the gap sampling, and
joins ``ArrivalSpec`` with its own ``type`` literal.
"""
from __future__ import annotations

import math
from typing import Annotated, ClassVar, Literal, Optional, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from .traces import TraceSpec

__all__ = ["ArrivalSpec", "PoissonArrival", "GammaArrival", "ConcurrencyArrival", "OpenLoopArrival"]

Rate = Annotated[float, Field(gt=0, allow_inf_nan=False, description="mean arrivals per second")]


class _Arrival(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    type: str  # each process narrows it to its own literal (the union's tag)
    # True when the engine, not this spec, decides when requests arrive.
    closed_loop: ClassVar[bool] = False


class OpenLoopArrival(_Arrival):
    """Arrival times fixed in advance: a renewal process in operational time."""

    rate_per_s: Rate

    def _unit_gaps(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """Inter-arrival gaps with mean 1 (the process's shape, not its rate)."""
        raise NotImplementedError

    def _to_time(self, op: np.ndarray) -> np.ndarray:
        return op / self.rate_per_s

    def _horizon(self, duration_s: float) -> float:
        return duration_s * self.rate_per_s

    @property
    def _cv(self) -> float:
        """Coefficient of variation of a gap (sizes the batches in duration mode)."""
        return 1.0

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
        horizon = self._horizon(duration_s)
        chunks: list[np.ndarray] = []
        last = 0.0
        while last < horizon:
            # Expected count plus ~6 standard deviations: usually one batch.
            remaining = horizon - last
            size = int(remaining + 6.0 * self._cv * math.sqrt(remaining) + 16)
            op = last + np.cumsum(self._unit_gaps(rng, size))
            chunks.append(op)
            last = float(op[-1])
        op = np.concatenate(chunks) if chunks else np.empty(0)
        return self._to_time(op[: np.searchsorted(op, horizon, side="left")])


class PoissonArrival(OpenLoopArrival):
    """Independent users: exponential gaps, inter-arrival CV = 1."""

    type: Literal["poisson"] = "poisson"

    def _unit_gaps(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return rng.standard_exponential(size)


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


class ConcurrencyArrival(_Arrival):
    """Closed loop: keep ``concurrency`` requests in flight (a load generator
    with N workers, the way throughput benchmarks are run)."""

    type: Literal["concurrency"] = "concurrency"
    concurrency: int = Field(ge=1, description="requests in flight at all times")
    closed_loop: ClassVar[bool] = True


# New processes go here with their own ``type`` literal, e.g. time-varying
# rates (overriding ``_to_time``/``_horizon``). A ``trace`` replays a file's
# timestamps and lengths (:mod:`workloads.traces`).
ArrivalSpec = Annotated[
    Union[PoissonArrival, GammaArrival, ConcurrencyArrival, TraceSpec],
    Field(discriminator="type"),
]
