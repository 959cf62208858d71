"""Build a fleet from a scenario, replay its workload, and collect results.

This is the one place that knows how the pieces fit: profiles → cost model
and memory plan → replicas behind a router → workload driver → metrics.
Notebooks call :func:`simulate`; the CLI calls it and writes the files.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import simpy

from . import __version__
from .costmodel import CostModel
from .engine.fleet import Pool
from .engine.routing import make_router
from .errors import LlmsimError
from .memory import MemoryPlan, plan_memory
from .metrics.cost import cost_block, pool_billing
from .metrics.gaps import GapLog
from .metrics.results import compute_results
from .profiles import load_hardware, load_model
from .scenario.load import _max_length, load_scenario
from .scenario.schema import PoolSpec, Scenario
from workloads.drivers import make_source
from workloads.request import Request


@dataclass
class PoolSetup:
    spec: PoolSpec
    cm: CostModel
    memory: MemoryPlan


@dataclass
class RunOutput:
    scenario: Scenario
    requests: list[Request]
    gaps: GapLog
    results: dict
    pool: Optional[Pool] = None
    setups: list[PoolSetup] = field(default_factory=list)


def setup_pool(spec: PoolSpec, index: int, source: str | Path | None = None) -> PoolSetup:
    where = f"pools[{index}]"

    def at(key: str, fn):
        try:
            return fn()
        except LlmsimError as e:
            raise LlmsimError(e.message, source=source, key_path=f"{where}.{key}") from None

    model = at("model", lambda: load_model(spec.model))
    gpu = at("gpu", lambda: load_hardware(spec.gpu))
    e = spec.engine
    cm = at("tp", lambda: CostModel(model, gpu, spec.tp, e.weight_dtype, e.kv_dtype,
                                    iteration_overhead_ms=e.iteration_overhead_ms))
    mem = at("engine", lambda: plan_memory(model, gpu, spec.tp, e.weight_dtype, e.kv_dtype,
                                           e.gpu_memory_utilization, e.max_num_batched_tokens, e.max_num_seqs,
                                           e.block_size))
    if e.num_gpu_blocks_override:
        mem = replace(mem, num_blocks=e.num_gpu_blocks_override)
    at("router", lambda: make_router(spec.router, np.random.default_rng(0)))
    return PoolSetup(spec, cm, mem)


def check_scenario(sc: Scenario, source: str | Path | None = None) -> list[PoolSetup]:
    """Everything that can be known wrong before simulating."""
    if len(sc.pools) > 1:
        raise LlmsimError("several pools need request classes routed to pools, which this version does not "
                          "support yet; give one pool", source=source, key_path="pools")
    setups = [setup_pool(p, i, source) for i, p in enumerate(sc.pools)]
    ctx = setups[0].cm.model.max_position_embeddings
    mi, mo = _max_length(sc.workload.input_tokens), _max_length(sc.workload.output_tokens)
    if mi is not None and mo is not None and mi + mo > ctx:
        raise LlmsimError(f"input ({mi}) + output ({mo}) tokens can exceed {setups[0].cm.model.name}'s context "
                          f"of {ctx} tokens", source=source, key_path="workload.input_tokens")
    ids = sc.workload.id_block_tokens(_base_dir(source))
    for i, p in enumerate(sc.pools):
        bs = p.engine.block_size
        if ids and p.engine.prefix_cache and ids % bs:
            raise LlmsimError(f"the workload's prompt block ids stand for {ids} tokens, not a whole number of "
                              f"{bs}-token KV blocks: set a block_size dividing it, or prefix_cache: false",
                              source=source, key_path=f"pools[{i}].engine.block_size")
    return setups


def _base_dir(source: str | Path | None) -> Path | None:
    """The scenario's folder, against which relative trace paths resolve."""
    return Path(source).parent if isinstance(source, Path) else None


def simulate(scenario: Scenario | str | Path, engine: str = "fast", source: str | Path | None = None,
             progress: Optional[Callable[[float, int, int], None]] = None) -> RunOutput:
    """Replay the scenario's workload through its fleet."""
    if not isinstance(scenario, Scenario):
        scenario, source = load_scenario(scenario)
    sc = scenario
    setups = check_scenario(sc, source)
    ps = setups[0]
    env = simpy.Environment()
    gaps = GapLog()
    wl = sc.workload
    router_rng = np.random.default_rng(np.random.SeedSequence(sc.seed).spawn(8)[7])
    done = [0]
    wall = time.perf_counter()
    src = make_source(wl, sc.seed, _base_dir(source))

    def on_done(req: Request) -> None:
        done[0] += 1
        src.on_done(req)

    pool = Pool(env, ps.cm, ps.spec.engine, ps.memory.num_blocks, ps.spec.replicas,
                make_router(ps.spec.router, router_rng), gaps, engine, on_done, id_block_tokens=src.block_tokens)
    src.start(env, pool.submit, pool.cancel)
    if progress is None:
        env.run()
    else:
        reqs = src.requests
        horizon = wl.duration_s or (reqs[-1].arrival if reqs and src.expected_total == len(reqs) else 1.0)
        step = max(horizon / 50.0, 1e-3)
        while env.peek() != float("inf"):
            env.run(until=env.now + step)
            progress(env.now, done[0], src.expected_total or len(src.requests))
    wall = time.perf_counter() - wall
    requests = src.requests
    llmsim = _llmsim_block(sc, ps, pool, pool.end_time(), wall, engine, requests)
    results = compute_results(requests, gaps, slo=sc.slo, llmsim=llmsim)
    return RunOutput(sc, requests, gaps, results, pool, setups)


def _llmsim_block(sc: Scenario, ps: PoolSetup, pool: Pool, now: float, wall: float, engine: str,
                  requests: list[Request]) -> dict:
    n = len(requests)
    reps = pool.replicas
    stats = [r.stats(now) for r in reps]
    span = max(now, 1e-12)
    nb = ps.memory.num_blocks
    kv_mean = sum(s["kv_used_area"] for s in stats) / (span * nb * len(reps))
    gpu = ps.cm.gpu
    return {
        "version": __version__,
        "seed": sc.seed,
        "scenario": sc.name,
        "engine": engine,
        "calibration": {"gpu": gpu.name, "status": gpu.calibration.status,
                        "calibrated": gpu.calibration.status == "calibrated"},
        "replicas": len(reps),
        "gpus": len(reps) * ps.spec.tp,
        "kv_blocks_per_replica": nb,
        "kv_tokens_per_replica": nb * ps.memory.block_size,
        "mean_kv_utilization": kv_mean,
        "max_kv_utilization": max(s["kv_used_max"] for s in stats) / nb,
        "preemptions": sum(s["preemptions"] for s in stats),
        "mean_queue_depth": sum(s["queue_mean"] for s in stats),
        "max_queue_depth_per_replica": max(s["queue_max"] for s in stats),
        "mean_batch_size": sum(s["batch_mean"] for s in stats) / len(reps),
        "max_batch_size": max(s["batch_max"] for s in stats),
        "gpu_busy_fraction": sum(s["busy_time"] for s in stats) / (span * len(reps)),
        "iterations": sum(s["iterations"] for s in stats),
        "prefix_cache": _prefix_cache_block(ps, stats),
        # a fixed pool: its replica-count timeline is one step at t = 0
        "cost": cost_block([pool_billing(ps.spec, gpu, [(0.0, len(reps))], now)], requests, now),
        "simulated_seconds": now,
        "wall_time_s": wall,
        "sim_requests_per_wall_s": n / wall if wall > 0 else None,
    }


def _prefix_cache_block(ps: PoolSetup, stats: list[dict]) -> dict:
    """Hit rates over first admissions, summed over replicas (vLLM's
    prefix-cache hit rate is tokens; requests count one hit block or more)."""
    e = ps.spec.engine
    pcs = [s["prefix_cache"] for s in stats if s["prefix_cache"] is not None]
    out: dict = {"enabled": bool(pcs), "capacity_tokens": e.prefix_cache_capacity_tokens}
    if not pcs:
        out["why_off"] = ("prefix_cache: false" if not e.prefix_cache
                          else "no request carries block ids (add sessions, system prompts or a trace with ids)")
        return out
    tot = {k: sum(p[k] for p in pcs) for k in pcs[0]}

    def rate(a: str, b: str):
        return tot[a] / tot[b] if tot[b] else None

    out.update(token_hit_rate=rate("hit_tokens", "prompt_tokens"), request_hit_rate=rate("hit_requests", "lookups"),
               block_hit_rate=rate("hit_ids", "prompt_ids"), hit_tokens=tot["hit_tokens"],
               prompt_tokens=tot["prompt_tokens"], evicted_blocks=tot["evicted_blocks"],
               cached_blocks_at_end=tot["cached_blocks"])
    return out
