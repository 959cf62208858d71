"""Autoscaling a pool toward a target, the way a Kubernetes HPA does it.

Every ``interval_s`` the autoscaler reads one metric over the pool's ready
replicas and asks for ``ceil(ready × metric / target)`` replicas (for
``request_rate`` the target is per replica: ``ceil(rate / target)``),
inside a ``tolerance`` band where it does nothing, clamped to
``[min_replicas, max_replicas]`` and to a schedule's floor. Scale-up acts at
once (then waits ``scale_up_cooldown_s``); scale-in takes the highest
recommendation of the last ``scale_down_window_s`` (the HPA's stabilisation
window) so a dip does not throw away replicas a ramp is about to need.

A new replica is paid from the moment it is asked for but serves only after
its cold start: weight bytes / ``weight_load_gb_per_s`` + ``boot_s``. A warm
pool keeps standby replicas (paid, ready in ``warm_start_s``); each one used
is refilled by a cold start in the background. Scale-in cancels replicas
still starting first, then drains ready ones (no request is lost).

The metrics are what operators scale on, including the misleading one:
``gpu_busy`` is the fraction of wall time a replica was running an
iteration, which a memory-bound decode fleet keeps near its batch-limited
value while its KV is full and queues grow (see docs/fleet.md).
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .pool import Pool, State


@dataclass(frozen=True)
class Window:
    """What one evaluation reads: the pool, its ready replicas (at least 1)
    and what changed since the last evaluation ``dt`` seconds ago."""

    pool: Pool
    n: int
    dt: float
    busy_s: float
    arrivals: int
    tokens: int


@dataclass(frozen=True)
class ScalingMetric:
    read: Callable[[Window], float]
    # The metric is a fleet total and the target a per-replica share of it:
    # ask for ceil(total / target) replicas (the tolerance band on total / ready replicas).
    per_replica_target: bool = False


# The metrics a pool may scale on, by the name autoscaling.metric takes; adding
# one here adds it to the schema (Metric).
METRICS: dict[str, ScalingMetric] = {
    "concurrency": ScalingMetric(lambda w: sum(r.outstanding for r in w.pool.ready) / w.n),
    "queue_depth": ScalingMetric(lambda w: sum(r.queued() for r in w.pool.ready) / w.n),
    "kv_utilization": ScalingMetric(lambda w: w.pool.kv_utilization()),
    "gpu_busy": ScalingMetric(lambda w: min(w.busy_s / (w.dt * w.n), 1.0)),
    "compute_utilization": ScalingMetric(
        lambda w: min(w.tokens * w.pool.flops_per_token() / (w.pool.peak_flops() * w.dt * w.n), 1.0)),
    "request_rate": ScalingMetric(lambda w: w.arrivals / w.dt, per_replica_target=True),
}
Metric = Literal[tuple(METRICS)]  # type: ignore[valid-type]
# Those read as a fraction of a whole (capped at 1): a target above 1 is never reached.
FRACTION_METRICS = ("kv_utilization", "gpu_busy", "compute_utilization")


class ScheduleStep(BaseModel):
    """From ``at_s`` on, keep at least ``min_replicas`` (pre-warm ahead of a known ramp)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    at_s: float = Field(ge=0, allow_inf_nan=False,
                        description="simulated seconds; before workload.duration_s where it is set (a step from "
                                    "then on meets no arrival and is refused), except under sessions, whose "
                                    "later turns arrive after it")
    min_replicas: int = Field(ge=1)


class AutoscalingSpec(BaseModel):
    """How a pool grows and shrinks (``pools[].replicas`` is the count at t = 0)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: Metric = Field(description="concurrency: requests in flight (running + waiting) per ready replica; "
                                       "queue_depth: waiting requests per ready replica (zero on a healthy "
                                       "fleet, so it scales in hard: give it a long scale_down_window_s); "
                                       "compute_utilization: model FLOPs / peak FLOPs (MFU; what a DCGM "
                                       "SM-activity dashboard shows: low on a memory-bound decode fleet even "
                                       "when its KV is full); kv_utilization: "
                                       "fraction of KV blocks in use; gpu_busy: fraction of time iterating; "
                                       "request_rate: arrivals per second per replica")
    target: float = Field(gt=0, allow_inf_nan=False, description="the metric's value to steer toward")
    min_replicas: int = Field(default=1, ge=1)
    max_replicas: int = Field(ge=1)
    # At least 0.1 s: control loops evaluate every few seconds (HPA 15 s, KEDA 30 s), and each evaluation
    # reads the pool: a microsecond period made a one-second run take ten minutes.
    interval_s: float = Field(default=15.0, ge=0.1, allow_inf_nan=False,
                              description="evaluation period, at least 0.1 s (HPA: 15 s)")
    tolerance: float = Field(default=0.1, ge=0, allow_inf_nan=False,
                             description="no change while |metric/target − 1| is within it (HPA: 0.1)")
    scale_up_cooldown_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    scale_down_window_s: float = Field(default=300.0, ge=0, allow_inf_nan=False,
                                       description="scale in to the highest recommendation of this window")
    boot_s: float = Field(default=60.0, ge=0, allow_inf_nan=False,
                          description="container start, engine init and CUDA-graph capture, after weights load")
    weight_load_gb_per_s: float = Field(default=2.0, gt=0, allow_inf_nan=False,
                                        description="rate at which a replica loads its weights (GB/s)")
    warm_pool: int = Field(default=0, ge=0, description=(
        "standby replicas kept paid and ready to serve within warm_start_s; one taken to serve is replaced by "
        "a new standby, paid from then on and usable after a cold start"))
    warm_start_s: float = Field(default=5.0, ge=0, allow_inf_nan=False,
                                description="a standby replica's time to take traffic")
    schedule: list[ScheduleStep] = Field(default_factory=list, description="raise the floor at known times")

    @model_validator(mode="after")
    def _bounds(self) -> "AutoscalingSpec":
        if self.metric in FRACTION_METRICS and self.target > 1:
            raise ValueError(f"{self.metric} is a fraction (0 to 1); a target of {self.target:g} is never reached, "
                             f"so the pool would only ever scale out")
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) > max_replicas ({self.max_replicas})")
        for st in self.schedule:
            if st.min_replicas > self.max_replicas:
                raise ValueError(f"schedule at {st.at_s:g} s asks for {st.min_replicas} replicas, "
                                 f"more than max_replicas ({self.max_replicas})")
        return self

    def cold_start_s(self, weight_bytes: float) -> float:
        return weight_bytes / (self.weight_load_gb_per_s * 1e9) + self.boot_s

    def floor(self, now: float) -> int:
        f = self.min_replicas
        for st in self.schedule:
            if st.at_s <= now:
                f = max(f, st.min_replicas)
        return f


class Autoscaler:
    def __init__(self, pool: Pool, spec: AutoscalingSpec, cold_start_s: float) -> None:
        self.pool = pool
        self.spec = spec
        self.cold_start_s = cold_start_s
        self.last_up = -math.inf
        # The replicas the pool starts with count as a recommendation made at start, as the HPA records
        # the current count before its first reading (horizontal.go recordInitialRecommendation): an
        # empty window let the first reading, taken while traffic was still arriving, drain a pool
        # started at 4 replicas to 1 at 15 s with scale_down_window_s 300.
        self.recent: deque[tuple[float, int]] = deque([(pool.env.now, len(pool.ready) + pool.count(State.STARTING))])
        # per ready replica, as at the last reading: the metrics read the replicas that take traffic, as
        # the HPA leaves out pods being deleted (a draining replica's queue and busy time were read
        # against the ready count alone)
        self._busy: dict[int, float] = {}
        self._tokens: dict[int, int] = {}
        self._arrivals = 0
        self._t = pool.env.now
        self.decisions: list[tuple[float, int, float]] = []   # (time, desired, metric)

    def _metric(self) -> float:
        p = self.pool
        now = p.env.now
        n = max(len(p.ready), 1)
        dt = max(now - self._t, 1e-12)
        busy = {r.index: r.busy_time for r in p.ready}
        tokens = {r.index: r.tokens_processed for r in p.ready}
        d_busy = sum(b - self._busy.get(i, 0.0) for i, b in busy.items())     # ready since: busy from 0
        d_tok = sum(k - self._tokens.get(i, 0) for i, k in tokens.items())
        d_arr = p.arrivals - self._arrivals
        self._busy, self._tokens, self._arrivals, self._t = busy, tokens, p.arrivals, now
        return METRICS[self.spec.metric].read(Window(p, n, dt, d_busy, d_arr, d_tok))

    def desired(self) -> tuple[int, float]:
        s = self.spec
        p = self.pool
        value = self._metric()
        ready = len(p.ready)
        committed = ready + p.count(State.STARTING)
        per_replica = METRICS[s.metric].per_replica_target
        # the band is on the metric per ready replica, a fleet total's too (the HPA's usage ratio of a
        # per-pod metric: GetExternalPerPodMetricReplicas)
        if abs((value / max(ready, 1) if per_replica else value) / s.target - 1.0) <= s.tolerance:
            want = committed
        elif per_replica:
            want = math.ceil(value / s.target - 1e-9)
        else:
            want = math.ceil(ready * value / s.target - 1e-9)
        return max(s.floor(p.env.now), min(s.max_replicas, want)), value

    def tick(self) -> None:
        p, s = self.pool, self.spec
        now = p.env.now
        want, value = self.desired()
        self.decisions.append((now, want, value))
        self.recent.append((now, want))
        while self.recent and self.recent[0][0] < now - s.scale_down_window_s:
            self.recent.popleft()
        committed = len(p.ready) + p.count(State.STARTING)
        if want > committed:
            if now - self.last_up >= s.scale_up_cooldown_s:
                self.last_up = now
                for _ in range(want - committed):
                    self._scale_up()
            return
        keep = max(w for _, w in self.recent)
        for _ in range(committed - max(keep, want)):
            if not p.cancel_start():
                if len(p.ready) <= 1:
                    break
                p.drain()

    def _scale_up(self) -> None:
        p = self.pool
        if p.warm:
            p.start(self.spec.warm_start_s, warm=True)
            p.start_warm(self.cold_start_s)
        else:
            p.start(self.cold_start_s)

