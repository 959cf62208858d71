"""Build a fleet from a scenario, replay its workload, and collect results.

The scenario arrives compiled (:func:`simulator.scenario.compile.compile_scenario`:
every check passed, every pool's cost model, memory plan and router factory
resolved); this module only wires SimPy to that plan: replicas behind
routers → front end → workload driver → metrics. Notebooks call
:func:`simulate`; the CLI calls it and writes the files.
"""
from __future__ import annotations

import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

import numpy as np
import simpy

from .engine.wake import run as run_events
from .fleet.autoscaler import Autoscaler
from .fleet.classes import ClassTable
from .fleet.clock import Clock
from .fleet.disaggregation import PrefillDecode
from .fleet.frontend import Fleet
from .fleet.lora import LoraPool
from .fleet.pool import Pool
from .fleet.setup import PoolSetup, setup_pool  # noqa: F401  (re-exported: notebooks size pools with it)
from .metrics.records import Records
from .fleet.timeline import Timeline
from .fleet.window import open_window
from .gcpause import without_gc
from .report.fleet_report import arrival_window, benchmark_duration, llmsim_block, timing_block
from .scenario.compile import FleetPlan, PoolPlan, compile_scenario
from .metrics.gaps import GapGrid, GapLog
from .metrics.results import compute_results
from .metrics.verdict import slo_met
from .errors import LlmsimError
from .scenario.drawn import check_source
from .scenario.load import load_scenario
from .scenario.schema import Scenario
from workloads.adapters import AdapterDraws
from workloads.drivers import make_source
from workloads.request import Request


def run_end(pools: Mapping[str, Pool], requests: Sequence[Request], window_s: Optional[float] = None) -> float:
    """When the run's window ends: the pools' last event, and no earlier than the last request's
    arrival, one the gateway refused (429) included: with the last requests refused no pool saw
    them, and the window (and the bill) ended early; with every request refused it read 0 s. Nor
    earlier than the arrival window the scenario states (``window_s``: :func:`arrival_window`):
    the fleet stands, and is paid for, until then, whether or not traffic still comes (a load
    that fell quiet after 360 s of a 3,600 s hour billed 360 s; no arrival at all read $—/month).
    A shard's window ends so too (``--shards 1`` is the plain run)."""
    end = max(p.end_time() for p in pools.values())
    return max(end, max((r.arrival for r in requests), default=end), window_s or 0.0)


@dataclass
class RunOutput:
    """One run, kept whole for whoever asked for it: the CLI writes its files
    from it, a notebook tabulates and plots it (``simulator.notebook.requests_frame``
    gives the requests as a DataFrame), a shard hands its records on to be merged."""

    scenario: Scenario
    requests: "list[Request] | Records"   # Records (columns) for a sharded run: too many for objects
    gaps: "GapLog | GapGrid"   # a sharded run has only the shards' merged grid
    results: dict
    pools: dict[str, Pool] = field(default_factory=dict)
    setups: list[PoolSetup] = field(default_factory=list)
    timeline: Optional[object] = None       # pandas DataFrame (timeline.csv)
    scalers: dict = field(default_factory=dict)   # pool name -> its Autoscaler
    timing: dict = field(default_factory=dict)    # run.json: wall-clock measurements (fleet_report.timing_block)
    plan: Optional[FleetPlan] = None              # the compiled scenario the run was wired from
    end_s: Optional[float] = None                 # the window's end (:func:`run_end`)

    @property
    def pool(self) -> Pool:
        """The first pool (the only one in a single-pool scenario)."""
        return next(iter(self.pools.values()))

    def __repr__(self) -> str:
        # the headline figures: the generated repr prints the scenario and every request (megabytes in a notebook)
        r, llmsim = self.results, self.results.get("llmsim", {})
        figures = {"completed": r.get("completed"), "ttft_p99_ms": r.get("p99_ttft_ms"),
                   "tpot_p99_ms": r.get("p99_tpot_ms"), "slo_met": slo_met(r),
                   "monthly_usd": llmsim.get("cost", {}).get("monthly_usd")}
        shown = [f"scenario={self.scenario.name!r}", f"requests={len(self.requests)}"]
        shown += [f"{k}={round(v, 2) if isinstance(v, float) else v!r}" for k, v in figures.items() if v is not None]
        return f"RunOutput({', '.join(shown)})"


def _sessions_begun(lead_in: Sequence[Request]) -> list[int]:
    """The sessions a warm start's lead-in began (a request of theirs arrived before t = 0): active from the
    window's opening, where their first counted request may come a think time later."""
    return sorted({r.session for r in lead_in if r.session >= 0})


def _open_window(pools: Mapping[str, Pool], gaps: GapLog, start_timeline: Callable[[], None]) -> None:
    """t = 0 after a warm start's lead-in: the pools' logs and counters, the gaps ITL reads and the
    timeline start there, as a cold run's do at its start."""
    for pool in pools.values():
        open_window(pool)
    gaps.clear()
    start_timeline()


def _router_rng(seed: int, pool: str, shard: tuple[int, ...] = ()) -> np.random.Generator:
    """A pool's router stream: the run's seed and the pool's name, so neither another pool nor the order
    the pools are written in moves it; and the shard's place (:func:`_shard`)."""
    return np.random.default_rng([seed, 7, zlib.crc32(pool.encode()), *shard])


def _shard(subset) -> tuple[int, ...]:
    """What keys a shard's own random streams (the routers' draws, the network delays drawn from a law):
    its index and count, so that shards do not replay one another's draws (every shard drew the same
    delays, sampling their tail N times less); none for a plain run or a single shard, which is it."""
    return () if subset is None or subset.count == 1 else (subset.index, subset.count)


def _build_pool(env, p: PoolPlan, gaps: GapLog, engine: str, rng, id_block_tokens, draws) -> Pool:
    spec = p.spec
    return Pool(env, p.setup.cm, p.setup.engine_config, p.setup.memory.usable_blocks, spec.replicas, p.router(rng), gaps,
                engine, id_block_tokens=id_block_tokens, name=spec.name, kv_budgets=p.kv_budgets or None,
                admission=p.admission, warm=p.warm, offload=p.setup.offload, lora=p.setup.lora,
                rank_tokens=p.setup.rank_tokens, rank_blocks=p.setup.rank_blocks, dp=spec.dp,
                windows=p.setup.memory.windows,
                adapters=None if spec.lora is None else LoraPool(spec.lora, draws).assign)


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
    plan = compile_scenario(sc, source)     # the run's size checked too
    wl = sc.workload
    # a warm start's lead-in runs before t = 0, so that the window's times read as a cold run's
    env = simpy.Environment(initial_time=-wl.lead_in_s) if wl.lead_in_s else simpy.Environment()
    gaps = GapLog()
    seeds = np.random.SeedSequence(sc.seed).spawn(8)
    done = [0]
    wall = time.perf_counter()
    src = make_source(wl, sc.seed, plan.folder, subset)
    check_source(sc, src, source, plan.folder, whole=subset is None)
    draws = AdapterDraws(wl, sc.seed) if any(p.spec.lora for p in plan.pools) else None
    # each pool's router draws from a stream of its own, keyed by the pool's name: one stream shared by
    # every pool made a what-if on one pool's router move another pool's latencies
    shard = _shard(subset)
    pools = {p.name: _build_pool(env, p, gaps, engine, _router_rng(sc.seed, p.name, shard), src.block_tokens,
                                 draws) for p in plan.pools}
    network = seeds[6] if not shard else np.random.SeedSequence([sc.seed, 6, *shard])
    classes = ClassTable(list(sc.classes), sc.seed, np.random.default_rng(network))

    def on_done(req: Request) -> None:
        done[0] += 1
        src.on_done(req)
        if on_end is not None:
            on_end(req)
        req.blocks = None

    targets: dict = dict(pools)           # what a class routes to: a pool, or a prefill → decode pair
    fleet = Fleet(env, targets, classes, plan.routes, on_done, plan.regions, plan.response_s)
    for pool in pools.values():
        pool.on_done = fleet.done
    for pair in plan.pairs:
        pd = PrefillDecode(env, pools[pair.prefill], pools[pair.decode], pair.link_bytes, pair.link_numbers,
                           pair.link_shares)
        pd.on_done = fleet.done
        targets[pair.prefill] = pd
    clock = Clock(env)
    scalers = {}
    for p in plan.pools:
        a = p.spec.autoscaling
        if a is not None:
            scaler = scalers[p.name] = Autoscaler(pools[p.name], a, p.cold_start_s)
            clock.every(a.interval_s, scaler.tick)
    timeline = Timeline(pools, {p.name: p.spec.gpus_per_replica for p in plan.pools})

    def start_timeline() -> None:
        timeline.start()
        clock.every(sc.timeline_interval_s, timeline.sample)

    if not wl.lead_in_s:
        start_timeline()
    else:    # the window opens at t = 0
        env.timeout(wl.lead_in_s).callbacks.append(lambda ev: _open_window(pools, gaps, start_timeline))
    if progress is not None:
        reqs = src.requests
        horizon = wl.duration_s or (reqs[-1].arrival if reqs and src.expected_total == len(reqs) else 1.0)
        clock.every(max(horizon / 50.0, 1e-3),
                    lambda: progress(env.now, done[0], src.expected_total or len(src.requests)), counted=False)
    src.start(env, fleet.submit, fleet.cancel)
    window = arrival_window(wl, getattr(src, "window_s", None))
    if window is not None and window > env.now:
        env.timeout(window - env.now)    # the run lasts the window: autoscalers and the timeline tick to its end
    try:
        run_events(env)   # env.run(), compiled
    except LlmsimError as e:   # a limit met while running (the clock's ticks): name the scenario
        raise LlmsimError(e.message, source=e.source or source, key_path=e.key_path) from None
    wall = time.perf_counter() - wall
    # A closed loop's warm-up requests and a warm start's lead-in ran (they shaped the queue) but, as in
    # a benchmark, are not counted.
    warmup = getattr(src, "warmup", 0)
    requests = src.requests[warmup:]
    end = run_end(pools, requests, window)
    records = Records.of(requests) if summarize else None
    tl = timeline.frame(end)
    if records is None:
        return RunOutput(sc, requests, gaps, {}, pools, plan.setups, tl, scalers,
                         timing_block(wall, len(requests)), plan, end)
    duration = benchmark_duration(wl, records)
    try:
        llmsim = llmsim_block(plan, pools, end, engine, records, scalers,
                              began_before=_sessions_begun(src.requests[:warmup]) if wl.lead_in_s else (),
                              replay_s=getattr(src, "window_s", None), duration=duration)
    except LlmsimError as e:     # a figure the scenario asked for cannot be read off what ran (cost.monthly)
        raise LlmsimError(e.message, source=e.source or source, key_path=e.key_path) from None
    results = compute_results(records, gaps, slo=plan.slo, llmsim=llmsim, duration=duration)
    return RunOutput(sc, requests, gaps, results, pools, plan.setups, tl, scalers,
                     timing_block(wall, len(records)), plan, end)


