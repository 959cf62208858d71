"""Merging shards into one run, exactly.

Nothing is averaged across shards. The per-request records are
concatenated and every figure of results.json — percentiles, throughput,
goodput, SLO attainment, the per-class, per-pool and cost blocks — is
computed from the merged records by the same functions a plain run calls
(:func:`simulator.metrics.results.compute_results`,
:func:`simulator.report.fleet_report.llmsim_block`). Those functions see a
merged pool per pool: every shard's replicas (renumbered after the earlier
shards'), the replica-count logs summed on the union of their step times,
rejections summed. The run ends when the latest shard does, and each
finished replica answers at that end as its live self would have, so
time-weighted figures and the bill cover the same window as one run.
Hence a sharded run with N = 1 is the plain run, bit for bit (its wall
times are in ``timing``, run.json), and with N > 1 it is the run of the partitioned fleet (see
:mod:`.split` for when that equals the unsharded fleet).
"""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import MutableMapping, Optional

import numpy as np

from workloads.drivers import make_source

from ..report.fleet_report import _merge_steps, benchmark_duration, llmsim_block, timing_block
from ..metrics.column_files import ColumnFiles
from ..metrics.gaps import GapGrid
from ..metrics.records import Records
from ..metrics.results import compute_results
from ..planning.executors import Executor, make_executor
from ..runner import RunOutput
from ..scenario.compile import FleetPlan, compile_scenario
from ..scenario.drawn import check_source
from ..scenario.schema import Scenario
from .shard import PoolRecord, ShardJob, ShardOutcome, run_shard
from .predraw import dealt_rows
from .split import ShardPlan, plan_shards

__all__ = ["run_sharded", "merge_outcomes", "merge_columns"]


#: Requests the merge holds in memory before it spills every shard's
#: columns to disk (~140 B each: 2M is ~280 MB); see ``column_files.py``.
SPILL_ROWS = 2_000_000


def run_sharded(sc: Scenario, shards: int, *, source: Optional[Path] = None, engine: str = "fast",
                executor: Optional[Executor] = None, spill_rows: Optional[int] = None) -> RunOutput:
    """Simulate ``sc`` as ``shards`` shards on ``executor`` (default: local
    processes, one per core) and merge them into one :class:`RunOutput`.

    Once the shards returned hold more than ``spill_rows`` (default
    :data:`SPILL_ROWS`) requests, their
    columns (and every later shard's) go to a temporary directory as they
    arrive, and the merged table stays there: the figures are the same bit
    for bit, memory is bounded by a few columns instead of the table."""
    wall = time.perf_counter()
    compiled = compile_scenario(sc, source)    # the run's size checked before the lone requests are drawn
    replay_s = None
    if sc.workload.is_trace:     # the whole trace's replay window, which no shard's rows tell
        whole = make_source(sc.workload, sc.seed, compiled.folder)
        replay_s = whole.window_s
        if shards > 1:
            # a shard checks only the rows it keeps: the whole trace is held to the run's limits here, once
            check_source(sc, whole, source, compiled.folder)
        del whole
    plan = plan_shards(sc, shards, source)
    rows = dealt_rows(sc, plan.subsets)

    def jobs():   # each job takes its shard's rows along; none are kept here
        for k, (s, sub) in enumerate(zip(plan.scenarios, plan.subsets)):
            if rows is not None:
                sub, rows[k] = replace(sub, rows=rows[k]), None
            yield ShardJob(s, str(source) if source is not None else None, engine, sub)

    own = executor is None
    ex = make_executor("local") if own else executor
    outcomes: list[ShardOutcome] = []
    held, spill_rows = 0, SPILL_ROWS if spill_rows is None else spill_rows
    try:
        for _, o in ex.map_unordered(run_shard, jobs()):
            outcomes.append(o)
            held += o.requests
            if held > spill_rows:
                for done in outcomes:
                    if not isinstance(done.columns, ColumnFiles):
                        done.columns = ColumnFiles.of(done.columns)
    finally:
        if own:
            ex.close()
    return merge_outcomes(plan, outcomes, source=source, engine=engine, started=wall, compiled=compiled,
                          replay_s=replay_s)


def merge_columns(plan: ShardPlan, outcomes: list[ShardOutcome]) -> "MutableMapping[str, np.ndarray]":
    """The shards' records as one table in the unsharded run's id order.

    Lone requests keep their workload ids (the same in every shard);
    session requests are numbered per shard in send order, so they are
    renumbered by (send time, shard-local id, shard). Replica indices are
    offset by the replicas the earlier shards created in the same pool.
    The table is built a column at a time and each shard's column is
    consumed as it is copied, so the records are held about once, never
    twice; when any shard's columns were spilled to disk
    (:class:`~simulator.metrics.column_files.ColumnFiles`), so is the table,
    and memory holds two columns at most."""
    outcomes = sorted(outcomes, key=lambda o: o.index)
    if len(outcomes) == 1:
        return outcomes[0].columns
    offset: dict[str, int] = {}
    for o in outcomes:
        c = o.columns
        pools, where = np.unique(c["pool"].astype(str), return_inverse=True)
        replica = c["replica"]
        base = np.array([offset.get(p, 0) for p in pools.tolist()], dtype=replica.dtype)[where]
        c["replica"] = np.where(replica >= 0, replica + base, replica)
        for name, pool in o.pools.items():
            offset[name] = offset.get(name, 0) + len(pool.replicas)
    ids = np.concatenate([o.columns["id"] for o in outcomes])
    if plan.scenario.workload.session is not None:
        shard = np.concatenate([np.full(o.requests, o.index, dtype=np.int32) for o in outcomes])
        order = np.lexsort((shard, ids, np.concatenate([o.columns["arrival"] for o in outcomes])))
        del shard
    else:
        order = np.argsort(ids, kind="stable")
    del ids
    spilled = [o.columns for o in outcomes if isinstance(o.columns, ColumnFiles)]
    out: MutableMapping[str, np.ndarray] = ColumnFiles(spilled[0].root.parent) if spilled else {}
    renumber = plan.scenario.workload.session is not None
    for name in list(outcomes[0].columns):
        if name == "id" and renumber:
            out[name] = np.arange(order.size, dtype=np.int64)
        else:
            out[name] = np.concatenate([o.columns[name] for o in outcomes])[order]
        for o in outcomes:
            del o.columns[name]
    for o in outcomes:
        if isinstance(o.columns, ColumnFiles):
            o.columns.close()
    return out


def _merge_pool(name: str, records: list[PoolRecord]) -> PoolRecord:
    if len(records) == 1:
        return records[0]
    first = records[0]
    return PoolRecord(name, [r for p in records for r in p.replicas],
                      _merge_steps([p.billing for p in records]), _merge_steps([p.serving for p in records]),
                      _merge_steps([p.working for p in records]), sum(p.rejected for p in records),
                      max(p.t_rejected for p in records), sum(p.arrivals for p in records),
                      sum(p.ready_at_end for p in records), first.flops, first.peak)


def _merge_timeline(frames: list, end: float):
    """Per-pool timeline rows summed over shards at each sample time; a shard
    that ended earlier holds its last state (queue and arrivals zero)."""
    import pandas as pd

    frames = [f for f in frames if f is not None]
    if len(frames) <= 1:
        return frames[0] if frames else None
    grid = sorted({t for f in frames for t in f["time_s"].tolist() if t <= end + 1e-9})
    out = []
    for pool in frames[0]["pool"].unique().tolist():
        filled = []
        for f in frames:
            g = f[f["pool"] == pool].set_index("time_s").reindex(grid)
            idle = g["ready"].isna()
            g = g.ffill()
            g.loc[idle, ["queue_depth", "arrival_rate_per_s"]] = 0.0
            filled.append(g)
        total = sum(g.drop(columns=["pool"]) for g in filled)
        ready = total["ready"].where(total["ready"] > 0)
        total["kv_utilization"] = (sum(g["kv_utilization"] * g["ready"] for g in filled) / ready).fillna(0.0)
        total.insert(0, "pool", pool)
        out.append(total.reset_index().rename(columns={"index": "time_s"}))
    merged = pd.concat(out).sort_values(["time_s", "pool"], kind="stable").reset_index(drop=True)
    return merged[frames[0].columns].astype(frames[0].dtypes.to_dict())


def merge_outcomes(plan: ShardPlan, outcomes: list[ShardOutcome], *, source: Optional[Path] = None,
                   engine: str = "fast", started: Optional[float] = None,
                   compiled: Optional[FleetPlan] = None, replay_s: Optional[float] = None) -> RunOutput:
    """One run's output from the shards' (see the module docstring);
    ``compiled``: the whole scenario's plan, when the caller has it; ``replay_s``: a trace's replay
    window (:func:`~simulator.report.fleet_report.llmsim_block`)."""
    sc = plan.scenario
    outcomes = sorted(outcomes, key=lambda o: o.index)
    compiled = compile_scenario(sc, source) if compiled is None else compiled
    end = max(o.end for o in outcomes)
    pools = {p.name: _merge_pool(p.name, [o.pools[p.name] for o in outcomes]) for p in compiled.pools}
    scalers = outcomes[0].scalers if len(outcomes) == 1 else {}
    per_shard = [o.requests for o in outcomes]
    requests = Records(merge_columns(plan, outcomes))
    gaps = GapGrid.merge(o.gaps for o in outcomes)
    wall = time.perf_counter() - started if started is not None else sum(o.wall_s for o in outcomes)
    duration = benchmark_duration(sc.workload, requests)
    llmsim = llmsim_block(compiled, pools, end, engine, requests, scalers, replay_s=replay_s, duration=duration)
    llmsim["shards"] = {**plan.describe(),
                        "requests_per_shard": per_shard,
                        "simulated_seconds_per_shard": [o.end for o in outcomes]}
    results = compute_results(requests, gaps, slo=compiled.slo, llmsim=llmsim, duration=duration)
    timing = {**timing_block(wall, len(requests)), "wall_time_s_per_shard": [o.wall_s for o in outcomes]}
    return RunOutput(sc, requests, gaps, results, pools, compiled.setups, _merge_timeline([o.timeline for o in outcomes], end),
                     timing=timing, plan=compiled)
