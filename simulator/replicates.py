"""Replicates: one scenario at several seeds, run side by side, so a figure comes with its spread.

One seed is one draw of the traffic: its p99 is a sample statistic of
that draw. Replicate ``k`` is the scenario at ``seed + k`` (replicate 0 is
the scenario as written, so its files are those of a plain ``llmsim
run``). Each runs on the executor as a pure function of its job (the
scenario object, its source, the engine), like sweep points and shards;
only replicate 0 sends back its per-request records and timeline (for
the run's files and plots), the others only their results.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from .errors import LlmsimError
from .planning.executors import Executor
from .scenario.schema import Scenario

__all__ = ["ReplicateJob", "ReplicateOutcome", "run_replicate", "run_replicates", "check_replicates"]


@dataclass(frozen=True)
class ReplicateJob:
    index: int
    scenario: Scenario
    source: Optional[str]
    engine: str
    keep_records: bool


@dataclass
class ReplicateOutcome:
    index: int
    results: dict
    timing: dict
    columns: Any = None        # replicate 0's per-request records, as columns (Records do not pickle)
    timeline: Any = None


def check_replicates(n: int) -> int:
    from .runsize import check_run_count

    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise LlmsimError(f"must be a whole number of runs, at least 1 (got {n!r})", key_path="--replicates")
    check_run_count(n, "the replicates", key_path="--replicates", raisable=False)   # as a sweep's or plan's runs
    return n


def run_replicate(job: ReplicateJob) -> ReplicateOutcome:
    from .metrics.records import Records
    from .runner import simulate    # heavy; imported in the worker

    # the scenario's file as a Path: a relative trace path resolves against its folder (compile.base_dir)
    out = simulate(job.scenario, engine=job.engine, source=Path(job.source) if job.source else None)
    if not job.keep_records:
        return ReplicateOutcome(job.index, out.results, out.timing)
    return ReplicateOutcome(job.index, out.results, out.timing, Records.of(out.requests).columns, out.timeline)


def run_replicates(sc: Scenario, n: int, executor: Executor, *, source: Optional[Path] = None,
                   engine: str = "fast") -> list[ReplicateOutcome]:
    """The outcomes of seeds ``sc.seed .. sc.seed + n - 1``, in seed order."""
    check_replicates(n)
    jobs = [ReplicateJob(k, sc.model_copy(update={"seed": sc.seed + k}), str(source) if source else None, engine,
                         keep_records=k == 0) for k in range(n)]
    wall = time.perf_counter()
    outs = sorted((o for _, o in executor.map_unordered(run_replicate, jobs)), key=lambda o: o.index)
    outs[0].timing = {**outs[0].timing, "replicates": n, "replicates_wall_time_s": time.perf_counter() - wall,
                      "workers": executor.workers}
    return outs
