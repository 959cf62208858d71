"""Build a fleet from a scenario, replay its workload, and collect results.

This is the one place that knows how the pieces fit: profiles → cost model
and memory plan → replicas behind a router → workload driver → metrics.
Notebooks call :func:`simulate`; the CLI calls it and writes the files.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import simpy

from .engine.routing import make_router
from .engine.wake import run as run_events
from .fleet.autoscaler import Autoscaler
from .fleet.checks import base_dir, check_scenario, class_routes
from .fleet.classes import ClassTable
from .fleet.clock import Clock
from .fleet.disaggregation import PrefillDecode
from .fleet.frontend import Fleet
from .fleet.regions import RegionTable
from .fleet.pool import Admission, Pool
from .fleet.setup import PoolSetup, setup_pool  # noqa: F401  (re-exported: notebooks size pools with it)
from .metrics.records import Records
from .fleet.timeline import Timeline
from .gcpause import without_gc
from .metrics.fleet_report import llmsim_block, timing_block
from .metrics.gaps import GapGrid, GapLog
from .metrics.results import compute_results
from .errors import LlmsimError
from .runsize import check_arrivals, check_run_size
from .scenario.load import load_scenario
from .scenario.schema import Scenario
from workloads.drivers import make_source
from workloads.request import Request


@dataclass
class RunOutput:
    scenario: Scenario
    requests: "list[Request] | Records"   # Records (columns) for a sharded run: too many for objects
    gaps: "GapLog | GapGrid"   # a sharded run has only the shards' merged grid
    results: dict
    pools: dict[str, Pool] = field(default_factory=dict)
    setups: list[PoolSetup] = field(default_factory=list)
    timeline: Optional[object] = None       # pandas DataFrame (timeline.csv)
    scalers: dict = field(default_factory=dict)   # pool name -> its Autoscaler
    timing: dict = field(default_factory=dict)    # run.json: wall-clock measurements (fleet_report.timing_block)

    @property
    def pool(self) -> Pool:
        """The first pool (the only one in a single-pool scenario)."""
        return next(iter(self.pools.values()))


def _build_pool(env, ps: PoolSetup, sc: Scenario, routes: dict[str, str], gaps: GapLog, engine: str, rng,
                id_block_tokens) -> Pool:
    spec = ps.spec
    mine = [c for c in sc.classes if routes[c.name] == spec.name]
    budgets = {c.name: max(1, int(c.kv_budget_fraction * ps.memory.num_blocks))
               for c in mine if c.kv_budget_fraction is not None}
    admission = {c.name: Admission(c.admission.max_queue_per_replica, c.admission.max_wait_s)
                 for c in mine if c.admission is not None}
    warm = spec.autoscaling.warm_pool if spec.autoscaling else 0
    return Pool(env, ps.cm, spec.engine, ps.memory.num_blocks, spec.replicas, make_router(spec.router, rng), gaps,
                engine, id_block_tokens=id_block_tokens, name=spec.name, kv_budgets=budgets or None,
                admission=admission, warm=warm, offload=ps.offload)


def _check_drawn(sc: Scenario, src, source) -> None:
    """The run-size limits on the arrivals as drawn: a trace's rows and times, sessions' starts."""
    starts = getattr(src, "starts", None)
    if starts is not None:
        if starts:
            check_arrivals(sc, len(starts), starts[-1], source)
    elif not sc.workload.closed_loop and src.requests:
        check_arrivals(sc, len(src.requests), src.requests[-1].arrival, source)


@without_gc
def simulate(scenario: Scenario | str | Path, engine: str = "fast", source: str | Path | None = None,
             progress: Optional[Callable[[float, int, int], None]] = None, subset=None,
             on_end: Optional[Callable[[Request], None]] = None, summarize: bool = True) -> RunOutput:
    """Replay the scenario's workload through its fleet; ``subset`` keeps one
    shard's sessions (:mod:`simulator.sharding`).

    ``summarize=False`` leaves ``results`` empty: a shard's figures are
    computed once, from the merged records, so a shard that summarised
    itself (its records turned to columns, ITL folded, percentiles taken)
    would do that work for nothing.

    A request's block ids are dropped when it ends: nothing reads them
    after, and they are most of a finished request's memory (a chat turn's
    history, ~3.5 KB; a 24 h chatbot day holds a million turns).
    ``on_end(request)`` is called as each request ends, ids still attached,
    for a caller that wants to keep or stream them."""
    if not isinstance(scenario, Scenario):
        scenario, source = load_scenario(scenario)
    sc = scenario
    setups = check_scenario(sc, source)
    check_run_size(sc, source)
    env = simpy.Environment()
    gaps = GapLog()
    wl = sc.workload
    seeds = np.random.SeedSequence(sc.seed).spawn(8)
    router_rng = np.random.default_rng(seeds[7])
    done = [0]
    wall = time.perf_counter()
    src = make_source(wl, sc.seed, base_dir(source), subset)
    _check_drawn(sc, src, source)
    routes = class_routes(sc, source)
    pools = {ps.spec.name: _build_pool(env, ps, sc, routes, gaps, engine, router_rng, src.block_tokens)
             for ps in setups}
    classes = ClassTable(list(sc.classes), sc.seed, np.random.default_rng(seeds[6]))

    def on_done(req: Request) -> None:
        done[0] += 1
        src.on_done(req)
        if on_end is not None:
            on_end(req)
        req.blocks = None

    targets: dict = dict(pools)           # what a class routes to: a pool, or a prefill → decode pair
    fleet = Fleet(env, targets, classes, routes, on_done, RegionTable(sc.regions, sc.seed),
                  {ps.spec.name: ps.spec.engine.response_ms * 1e-3 for ps in setups})
    for p in pools.values():
        p.on_done = fleet.done
    for ps in setups:
        d = ps.spec.disaggregation
        if d is not None:
            e = ps.spec.engine
            pair = PrefillDecode(env, pools[ps.spec.name], pools[d.decode_pool],
                                 ps.cm.model.kv_bytes_per_token(e.kv_dtype), ps.spec.tp, d.link)
            pair.on_done = fleet.done
            targets[ps.spec.name] = pair
    clock = Clock(env)
    scalers = {}
    for ps in setups:
        a = ps.spec.autoscaling
        if a is not None:
            sc_ = scalers[ps.spec.name] = Autoscaler(pools[ps.spec.name], a, a.cold_start_s(ps.memory.weights_bytes))
            clock.every(a.interval_s, sc_.tick)
    timeline = Timeline(pools, {ps.spec.name: ps.spec.gpus_per_replica for ps in setups})
    timeline.sample()
    clock.every(sc.timeline_interval_s, timeline.sample)
    if progress is not None:
        reqs = src.requests
        horizon = wl.duration_s or (reqs[-1].arrival if reqs and src.expected_total == len(reqs) else 1.0)
        clock.every(max(horizon / 50.0, 1e-3),
                    lambda: progress(env.now, done[0], src.expected_total or len(src.requests)), counted=False)
    src.start(env, fleet.submit, fleet.cancel)
    try:
        run_events(env)   # env.run(), compiled
    except LlmsimError as e:   # a limit met while running (the clock's ticks): name the scenario
        raise LlmsimError(e.message, source=e.source or source, key_path=e.key_path) from None
    wall = time.perf_counter() - wall
    # A closed loop's warm-up requests ran (they shaped the queue) but, as in
    # a benchmark, are not counted.
    requests = src.requests[getattr(src, "warmup", 0):]
    end = max(p.end_time() for p in pools.values())
    tl = timeline.frame(end)
    if not summarize:
        return RunOutput(sc, requests, gaps, {}, pools, setups, tl, scalers, timing_block(wall, len(requests)))
    records = Records.of(requests)
    llmsim = llmsim_block(sc, setups, pools, end, engine, records, scalers)
    results = compute_results(records, gaps, slo=sc.slo, llmsim=llmsim)
    return RunOutput(sc, requests, gaps, results, pools, setups, tl, scalers, timing_block(wall, len(records)))


