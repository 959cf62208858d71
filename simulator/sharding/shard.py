"""One shard, simulated and reduced to what the merge needs.

``run_shard`` is what an executor ships to a worker, so it is module-level
and its job and outcome are picklable. The outcome carries no Request
objects and no live engine: the per-request records become numpy columns,
the gap log its 1 µs grid (bounded by the distinct step times, not the
steps), each replica the counters and time averages its ``stats`` reads,
each pool its replica-count step logs. That
keeps what crosses a process (or a network) small and lets the merge ask
the same questions of a finished shard that the metrics ask of a live pool,
at the run's end rather than the shard's.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from ..gcpause import without_gc
from ..metrics.gaps import GapGrid
from ..metrics.records import Records
from ..scenario.schema import Scenario
from .split import ShardSubset

__all__ = ["ShardJob", "ShardOutcome", "ReplicaRecord", "PoolRecord", "ScalerRecord", "run_shard"]

_TIME_AVERAGED = ("queue_mean", "queue_max", "batch_mean", "batch_max")


@dataclass(frozen=True)
class ShardJob:
    scenario: Scenario
    source: Optional[str]
    engine: str
    subset: Optional[ShardSubset]

    @property
    def index(self) -> int:
        return 0 if self.subset is None else self.subset.index


class ReplicaRecord:
    """A finished replica as :func:`simulator.report.fleet_report.llmsim_block`
    sees it: ``stats(now)`` for any ``now`` after its shard ended, as the
    live replica would have answered (its queue and batch are empty then)."""

    __slots__ = ("index", "t0", "counters", "queue_len", "batch_size")

    def __init__(self, replica, now: float) -> None:
        self.index = replica.index
        self.t0 = replica.t0
        self.counters = {k: v for k, v in replica.stats(now).items() if k not in _TIME_AVERAGED}
        self.queue_len = copy.copy(replica.queue_len)
        self.batch_size = copy.copy(replica.batch_size)

    def stats(self, now: float) -> dict:
        return {**self.counters, "queue_mean": self.queue_len.mean(now), "queue_max": self.queue_len.max,
                "batch_mean": self.batch_size.mean(now), "batch_max": self.batch_size.max}


@dataclass
class PoolRecord:
    """A finished pool: the fields and methods the fleet report reads."""

    name: str
    replicas: list[ReplicaRecord]
    billing: list[tuple[float, int]]
    serving: list[tuple[float, int]]
    working: list[tuple[float, int]]
    rejected: int
    t_rejected: float
    arrivals: int
    ready_at_end: int
    flops: float
    peak: float

    @property
    def ready(self) -> list:
        return [None] * self.ready_at_end

    window_start = 0.0     # a sharded run has no warm start (sharding/split.py refuses one)
    stopped_before_window = 0

    def replica_stats(self, replica: ReplicaRecord, now: float) -> dict:
        return replica.stats(now)

    def flops_per_token(self) -> float:
        return self.flops

    def peak_flops(self) -> float:
        return self.peak

    @classmethod
    def of(cls, pool, end: float) -> "PoolRecord":
        return cls(pool.name, [ReplicaRecord(r, end) for r in pool.replicas], list(pool.billing),
                   list(pool.serving), list(pool.working), pool.rejected, pool.t_rejected, pool.arrivals,
                   len(pool.ready), pool.flops_per_token(), pool.peak_flops())


@dataclass
class ScalerRecord:
    spec: Any
    cold_start_s: float
    decisions: list


@dataclass
class ShardOutcome:
    index: int
    columns: dict[str, np.ndarray]
    gaps: GapGrid
    pools: dict[str, PoolRecord]
    scalers: dict[str, ScalerRecord]
    end: float
    wall_s: float
    timeline: Any = None

    @property
    def requests(self) -> int:
        return len(Records(self.columns))


@without_gc
def run_shard(job: ShardJob) -> ShardOutcome:
    """Simulate one shard (its scenario and workload subset)."""
    from ..runner import simulate  # heavy; imported in the worker

    wall = time.perf_counter()
    out = simulate(job.scenario, engine=job.engine, source=Path(job.source) if job.source else None,
                   subset=job.subset, summarize=False)
    end = out.end_s
    assert end is not None
    pools = {name: PoolRecord.of(p, end) for name, p in out.pools.items()}
    scalers = {name: _scaler_record(out, name) for name in out.scalers}
    gaps = GapGrid.of(out.gaps)
    cols = Records.of(out.requests).columns
    # Free the requests by reference counting now. The run's structure is one
    # cycle that the collector frees once it runs again after the pause, and
    # it would walk every request held in it too (~0.5 s of an hour-shard).
    out.requests.clear()
    return ShardOutcome(job.index, cols, gaps, pools, scalers, end, time.perf_counter() - wall, out.timeline)


def _scaler_record(out, name: str) -> ScalerRecord:
    s = out.scalers[name]
    return ScalerRecord(s.spec, s.cold_start_s, list(s.decisions))
