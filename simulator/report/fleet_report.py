"""The ``llmsim`` block of results.json for a fleet: per pool, per class, the bill.

What the engines counted (busy time, KV area, queue lengths) is turned
into fleet figures here, normalised by the replica-seconds each pool
actually served (an autoscaled pool's replicas come and go).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Optional, Sequence

import numpy as np

from .. import __version__
from ..engine.blocks import kv_usage
from ..fleet.lora import lora_block
from ..fleet.pool import Pool
from ..fleet.setup import PoolSetup
from ..scenario.compile import FleetPlan
from workloads.request import Request
from ..costmodel.speculative import expected_tokens_per_step
from ..metrics.api_pricing import api_block
from ..metrics.by_input_length import input_length_block
from ..metrics.classes import class_block
from ..metrics.gpu_counts import gpu_count
from ..metrics.handoff import FIELDS as HANDOFF_FIELDS, handoff_block
from ..metrics.load import load_block
from ..metrics.metering import class_usd, gateway_block
from ..metrics.product import product_block
from ..metrics.cost import cost_block, pool_billing, replica_seconds
from ..metrics.derive import last_stamp
from ..metrics.energy import PoolPower, activity, energy_block, monthly_kwh, power_cost
from ..metrics.monthly import usage_factor
from ..metrics.records import Records, session_spans
from ..metrics.regions import region_block
from ..metrics.ttft_budget import ttft_budget
from ..fields import AS_GIVEN, block, leaf, of_model
from ..costmodel.speculative import SpeculativeSpec
from ..dtypes import gemm_scheme
from ..fleet.lora import LORA_FIELDS
from ..memory import KV_MEMORY_FIELDS
from ..metrics import by_input_length, classes, cost, energy, gpu_counts, load, metering, product, regions, results
from ..metrics import ttft_budget as ttft_budget_fields
from ..metrics.intervals import ERROR_MODEL_FIELDS, INTERVAL_FIELDS, REPLICATE_FIELDS, SLO_INTERVAL_FIELDS
from ..profiles.hardware import PROVENANCE_FIELDS


_OFFLOAD_TIER = {
    "offloaded_blocks": leaf("blocks", "blocks written to the tier"),
    "dropped_blocks": leaf("blocks", "blocks the full tier dropped"),
    "hit_requests": leaf("count", "admissions that reloaded blocks from the tier"),
    "hit_tokens": leaf("tokens", "prompt tokens reloaded from the tier instead of prefilled"),
    "reloaded_blocks": leaf("blocks", "blocks reloaded"), "reloaded_bytes": leaf("bytes", "bytes reloaded"),
    "reload_s": leaf("s", "time spent reloading, summed over replicas"),
    "blocks_at_end": leaf("blocks", "blocks the tier held at the end"),
    "capacity_blocks_per_replica": leaf("blocks", "one replica's tier capacity"),
    "token_hit_rate": leaf("fraction", "hit_tokens / prompt tokens looked up"),
    "mean_reload_ms": leaf("ms", "reload time per hit request"),
}
_PREFIX_CACHE = {
    "enabled": leaf("bool", "the prefix cache ran (on, and requests carry block ids)"),
    "capacity_tokens": leaf("tokens", "engine.prefix_cache_capacity_tokens; null: the whole KV pool"),
    "why_off": leaf("text", "why it did not run", when="enabled is false"),
    **{k: leaf(u, m, when="enabled") for k, u, m in (
        ("token_hit_rate", "fraction", "prompt tokens found cached / prompt tokens (vLLM's hit rate)"),
        ("request_hit_rate", "fraction", "first admissions that hit one block or more"),
        ("block_hit_rate", "fraction", "prompt blocks found cached / prompt blocks"),
        ("hit_tokens", "tokens", "prompt tokens found cached"), ("prompt_tokens", "tokens", "prompt tokens looked up"),
        ("evicted_blocks", "blocks", "cached blocks evicted"),
        ("cached_blocks_at_end", "blocks", "blocks cached at the end"))},
    "offload": block("per KV offload tier (engine.kv_offload)", {"<tier>": block("one tier, summed over replicas",
                                                                             _OFFLOAD_TIER)},
                     when="the pool offloads KV to host or disk"),
}
_CONTIGUOUS = {
    "mode": leaf("text", "contiguous"),
    "reserved_tokens_per_request": leaf("tokens", "what each request reserves: max_model_len, or 'prompt + N'"),
    "max_sequences_per_replica": leaf("count", "sequences the reservations allow; null when they vary"),
    "mean_reserved_utilization": leaf("fraction", "KV reserved / the pool, over working time"),
    "mean_filled_utilization": leaf("fraction", "KV the tokens filled / the pool (what paging would hold)"),
    "max_filled_utilization": leaf("fraction", "the most filled at once / the pool"),
    "filled_fraction_of_reserved": leaf("fraction", "filled / reserved"),
}
_SCALING = {
    "metric": leaf("text", "autoscaling.metric"), "target": leaf("as the metric", "autoscaling.target"),
    "cold_start_s": leaf("s", "a new replica's start-up"), "evaluations": leaf("count", "autoscaler ticks"),
    "under_provisioned_s": leaf("s", "time with fewer replicas serving than the autoscaler wanted"),
    "under_provisioned_fraction": leaf("fraction", "under_provisioned_s / the run"),
    "ttft_slo_ms": leaf("ms", "the SLO's per-request TTFT threshold", when="the SLO sets ttft_ms"),
    "ttft_attainment_under_provisioned": leaf("fraction", "TTFT attainment of requests that arrived under-provisioned",
                                              when="the SLO sets ttft_ms"),
    "ttft_attainment_otherwise": leaf("fraction", "TTFT attainment of the other requests", when="the SLO sets ttft_ms"),
}
_DP, _PP = "dp > 1 or ep > 1", "pp > 1"

#: ``llmsim.pools.<pool>``: one pool's engines, memory and bill (:func:`_pool_block`, :func:`llmsim_block`).
POOL_FIELDS = {
    "model": leaf("text", "the model"), "gpu": leaf("text", "the GPU"),
    "weight_dtype": leaf("text", "the weights it served (engine.weight_dtype, else the checkpoint's format)"),
    "gemm_scheme": leaf("text", "the widths its quantised GEMMs run at, weights and activations (W8A8; W8A16 where "
                                "the GPU has no unit for the weights' format and computes in 16 bits)"),
    "kv_dtype": leaf("text", "the KV cache's format"), "tp": leaf("GPUs", "tensor parallelism"),
    **{k: leaf(u, m, when="the pool names engine.backend") for k, u, m in (
        ("backend", "text", "the serving stack whose defaults and overheads it ran (engine.backend)"),
        ("backend_release", "text", "the stack's release whose defaults applied: engine.backend_version, else "
                                    "the profile's default release; null when a profile file names none"),
        ("backend_release_given", "bool", "whether the scenario named that release (engine.backend_version) "
                                          "rather than taking the profile's default"))},
    "moe_backend": leaf("text", "TensorRT-LLM's MoE backend its routed experts ran: engine.moe_backend as the stack "
                                "resolves it for the model and GPU, the setting beside it where that is another "
                                "word (trtllm (auto): the release's default auto picked TRT-LLM-gen)",
                        when="a MoE model on TensorRT-LLM"),
    "dp": leaf("ranks", "attention data parallelism", when=_DP), "ep": leaf("GPUs", "expert parallelism", when=_DP),
    "pp": leaf("stages", "pipeline stages", when=_PP), "stage_layers": leaf("list", "layers per stage", when=_PP),
    "gpus_per_replica": leaf("GPUs", "tp × pp × dp", when=_PP),
    "pp_scheduling": leaf("text", "ahead (one batch of every running sequence walks the stages at a time, its CPU "
                                  "time overlapped: vLLM 0.16.0 and later) or in turn (pp micro-batches in flight)",
                          when=_PP),
    "replicas": leaf("count", "most replicas serving at once"), "replicas_min": leaf("count", "fewest serving"),
    "replicas_mean": leaf("count", "replica-seconds serving / the run"), "replicas_max": leaf("count", "most serving"),
    "replicas_created": leaf("count", "replicas started over the run"),
    "kv_blocks_per_replica": leaf("blocks", "a replica's KV pool, as its stack logs it (vLLM's counts the null "
                                            "block each attention rank keeps back from requests)"),
    "kv_tokens_per_replica": leaf("tokens", "the same in tokens"),
    "kv_memory": block("how the KV pool was sized", KV_MEMORY_FIELDS),
    "mean_kv_utilization": leaf("fraction", "KV blocks in use / the blocks requests can hold, over working replica "
                                            "time"),
    "max_kv_utilization": leaf("fraction", "the most in use at once on a replica / the blocks requests can hold"),
    "preemptions": leaf("count", "sequences preempted for want of KV"),
    "outputs_clipped": leaf("count", "requests longer than an attention rank's KV pool served with their output cut "
                                    "to what it holds", when="the pool's stack cuts them (engine.clips_output: SGLang, TensorRT-LLM)"),
    "rejected_on_admission": leaf("count", "requests the pool's admission control shed"),
    "mean_queue_depth": leaf("requests", "waiting requests, time-averaged, summed over replicas"),
    "max_queue_depth_per_replica": leaf("requests", "the longest queue on a replica"),
    "mean_batch_size": leaf("sequences", "running sequences per iteration, over working time"),
    "max_batch_size": leaf("sequences", "the largest batch"),
    "gpu_busy_fraction": leaf("fraction", "time iterating / working replica time"),
    "compute_utilization": leaf("fraction", "model FLOPs / peak FLOPs over working time (MFU)"),
    "iterations": leaf("count", "engine iterations, summed over replicas"),
    "prefix_cache": block("the prefix cache's hits", _PREFIX_CACHE),
    "kv_allocation": block("contiguous KV: reserved against filled", _CONTIGUOUS,
                           when="engine.kv_allocation is contiguous"),
    "autoscaling": block("how the autoscaler did", _SCALING, when="the pool autoscales"),
    "floor_replicas": leaf("count", "autoscaling.min_replicas", when="the pool has an autoscaling block"),
    "standby_gpus": leaf("GPUs", "warm-pool GPUs paid whatever the load", when="the pool has an autoscaling block"),
    "speculative": block("speculative decoding as set, and its expected tokens per step", {
        **of_model(SpeculativeSpec),
        "tokens_per_step": leaf("tokens", "E = (1 − α^(k+1)) / (1 − α): accepted draft tokens plus the target's own"),
        "classes": leaf(AS_GIVEN, "classes with their own acceptance rate: theirs and their E",
                        when="a class sets its own acceptance rate")}, when="the pool sets speculative"),
    "lora": block("multi-LoRA serving", LORA_FIELDS, when="the pool sets lora"),
    **gpu_counts.FIELDS,
    "usd": leaf("USD", "the pool's bill for the window"),
    "handoff": block("the KV it hands its decode pool", HANDOFF_FIELDS, when="the pool prefills for a decode pool (disaggregation)"),
}

_ONE_POOL = "the fleet has one pool"

#: ``llmsim``: llmsim's own figures, in the order :func:`llmsim_block` writes them.
FIELDS = {
    "product": block("the product behind the simulated slice", product.FIELDS),
    "load": block("does the fleet keep up", load.FIELDS),
    "slo_met": leaf("bool", "every SLO the run is judged on holds: the scenario's slo, each class's and each "
                            "prompt-length bucket's own (llmsim run exits 1 otherwise; plan, sweep and "
                            "ladders judge by it and by llmsim.load: an overloaded fleet does not meet)",
                  when="an SLO is declared"),
    "version": leaf("text", "llmsim's version"), "seed": leaf("int", "the scenario's seed"),
    "scenario": leaf("text", "the scenario's name"), "engine": leaf("text", "fast or reference"),
    "calibration": block("where the first pool's GPU cost model comes from", {
        "gpu": leaf("text", "the GPU"), **PROVENANCE_FIELDS,
        "other_gpus": block("the other pools' GPUs", {"<gpu>": block("one GPU", PROVENANCE_FIELDS)},
                            when="pools run on different GPUs")}),
    "replicas": leaf("count", "the pools' replicas, summed"),
    **gpu_counts.FIELDS,
    **{k: replace(f, when=_ONE_POOL + (f" and {f.when}" if f.when else ""), copy_of=f"llmsim.pools.<pool>.{k}")
       for k, f in POOL_FIELDS.items() if k not in ("replicas", "usd", "gpu_hours") and k not in gpu_counts.FIELDS},
    "by_input_length": block("figures per prompt-length bucket", by_input_length.FIELDS,
                             when="the scenario sets input_length_buckets"),
    "gateway": block("the metering gateway's log", metering.FIELDS, when="a class has a rate_limit"),
    "pools": block("per pool", {"<pool>": block("one pool", POOL_FIELDS)}),
    "classes": block("per traffic class; null without classes", {"<class>": block("one class", classes.FIELDS)}),
    "regions": block("per client region; null without regions", {"<region>": block("one region", regions.FIELDS)}),
    "ttft_budget": block("where TTFT goes; null when no request finished", ttft_budget_fields.FIELDS),
    "cost": block("the bill", {**cost.FIELDS, "power": block("the energy's bill", energy.POWER_FIELDS,
                                                             when="energy.usd_per_kwh is set")}),
    "simulated_seconds": leaf("s", "simulation time at the window's end: the last request's end, or the end of the "
                                   "stated arrival window (duration_s, a trace's replay window) where that is later"),
    "energy": block("energy and emissions", energy.FIELDS),
    "request_status": block("every request once, by how it ended", results.STATUS_FIELDS),
    "intervals": block("where the real value of each figure lies, from llmsim's measured error",
                       INTERVAL_FIELDS, when="`llmsim run` writes the file"),
    "slo_intervals": block("the same for each class's and prompt-length bucket's own SLO targets",
                           SLO_INTERVAL_FIELDS, when="`llmsim run` writes the file and a class or prompt-length "
                                                     "bucket declares its own slo"),
    "error_model": block("which measured residuals judged the run", ERROR_MODEL_FIELDS,
                         when="`llmsim run` writes the file"),
    "replicates": block("the spread over seeds", REPLICATE_FIELDS, when="`llmsim run --replicates N`, N > 1"),
}


def calibration_block(gpus: list) -> dict:
    """Where the cost model of the fleet's GPUs comes from: the first pool's
    GPU at the top level, each other GPU under ``other_gpus``; a transferred
    calibration names the measured sibling it came from."""
    first, block = gpus[0], {"gpu": gpus[0].name, **gpus[0].provenance()}
    others = {g.name: g.provenance() for g in gpus[1:] if g.name != first.name}
    if others:
        block["other_gpus"] = others
    return block


def timing_block(wall: float, requests: int) -> dict:
    """run.json: what was measured, not simulated, kept out of results.json so
    that a seed's results are byte-identical from run to run."""
    return {"wall_time_s": wall, "sim_requests_per_wall_s": requests / wall if wall > 0 else None}


def arrival_window(workload, replay_s: Optional[float] = None) -> Optional[float]:
    """The arrival window the scenario states, which the load verdict reads and the run lasts at least
    (:func:`simulator.runner.run_end`): the workload's ``duration_s``, except for a trace,
    whose window is its replay's (``replay_s``: the spec's start_s to end_s within the file's rows, or
    to its last replayed arrival where max_requests or num_requests cut it; None: load_block takes the
    last arrival). On a trace ``duration_s`` only cuts the replay, and one longer than it divided a
    60 s burst's rates over 7,200 s and read its queue at 3,600 s, long drained: an overloaded fleet
    passed."""
    return replay_s if getattr(workload.arrival, "type", None) == "trace" else workload.duration_s


def _counted_from(workload, requests: Records) -> float:
    """Where the counted traffic starts: a closed loop's first counted request, after its warm-up
    (``arrival.warmup_requests``), whose requests are left out of every figure; else t = 0. Counted
    from t = 0, 200 requests at 10 req/s after 200 of warm-up read as offered at 5 req/s, and each
    priced twice what it costs (the per-unit prices' arrival span, :func:`_arrival_span`, is then
    counted from here too; the bill's window still runs from t = 0)."""
    if not getattr(workload.arrival, "warmup_requests", 0) or not len(requests):
        return 0.0
    return float(requests.arrival.min())


def benchmark_duration(workload, requests: Records) -> float:
    """results.json's ``duration``, vllm bench's and AIPerf's clock: from where the counted traffic
    starts (:func:`_counted_from`: their clocks start once the warm-up is done; from t = 0, 400
    requests at 16.4 req/s read 14.8) to the last request's end, not to the end of the stated window,
    which the run lasts and the bill reads (a benchmark stops once its requests are answered). Every
    throughput divides by it, the fleet's and each class's alike, so the classes' add up to the
    fleet's: divided by the stated window, a class read 0.44 req/s beside the fleet's 0.57 (its
    only class, on a window whose traffic ended 68 s early)."""
    return max(last_stamp(requests) - _counted_from(workload, requests), 0.0)


def _arrival_span(requests: Records) -> Optional[float]:
    """How long the traffic took to arrive where the workload states no duration: the last request's
    arrival, a session counting from its start (its later turns follow the traffic, they do not extend
    it: 552 chat sessions started over 120 s had turns arriving for minutes after)."""
    r = requests.select("arrival", "session")
    if not len(r):
        return None
    alone = r.session < 0
    span = float(r.arrival[alone].max()) if alone.any() else 0.0
    if not alone.all():
        span = max(span, float(session_spans(r.session[~alone], r.arrival[~alone]).first.max()))
    return span


def llmsim_block(plan: FleetPlan, pools: dict[str, Pool], now: float,
                 engine: str, requests: "Records | list[Request]", scalers: dict,
                 began_before: Sequence[int] = (), replay_s: Optional[float] = None,
                 duration: Optional[float] = None) -> dict:
    """``replay_s``: a trace's replay window (:attr:`workloads.drivers.OpenLoop.window_s`), the time
    its traffic was offered over, which the load verdict and the per-unit prices read. ``duration``:
    :func:`benchmark_duration`, where the caller has it for results.json's top level."""
    sc, setups = plan.scenario, plan.setups
    requests = Records.of(requests)
    ttft_ms = plan.slo.thresholds.get("ttft")
    by_pool = requests.select("arrival", "first_token", "status", "pool").groups(
        "pool", [ps.spec.name for ps in setups]) if scalers else {}
    blocks = {ps.spec.name: _pool_block(ps, pools[ps.spec.name], now, scalers.get(ps.spec.name),
                                        by_pool.get(ps.spec.name), ttft_ms) for ps in setups}
    bills = [pool_billing(ps.spec, ps.cm.gpu, pools[ps.spec.name].billing, now) for ps in setups]
    gpu_logs = {ps.spec.name: [(t, k * ps.spec.gpus_per_replica) for t, k in pools[ps.spec.name].billing]
                for ps in setups}
    for b in bills:
        blocks[b.name].update(gpu_count(gpu_logs[b.name], now).as_dict())
        blocks[b.name]["usd"] = b.usd
    for pair in plan.pairs:
        blocks[pair.prefill]["handoff"] = handoff_block(requests, pair.prefill, pair.decode, pair.link.preset,
                                                        *pair.link_numbers, pair.link_bytes.full)
    gpu_timeline = _merge_steps(list(gpu_logs.values()))
    fleet = gpu_count(gpu_timeline, now)
    first = blocks[setups[0].spec.name]
    single = len(setups) == 1
    load_window = arrival_window(sc.workload, replay_s)
    opens = _counted_from(sc.workload, requests)
    arrivals = load_window if sc.workload.is_trace and load_window else _arrival_span(requests)
    if arrivals is not None:
        arrivals -= opens
        if opens and not arrivals > 0:
            # the counted requests all sent at once: read over the run after the warm-up, as a burst at t = 0
            # is over the run (arrival_span's fallback, which counted from t = 0 would price the warm-up)
            arrivals = now - opens
    out = {
        "version": __version__,
        "seed": sc.seed,
        "scenario": sc.name,
        "engine": engine,
        "calibration": calibration_block([ps.cm.gpu for ps in setups]),
        "replicas": sum(b["replicas"] for b in blocks.values()),
        **fleet.as_dict(),
    }
    if single:     # the one pool's figures at the top level, as before pools could be several
        out.update({k: v for k, v in first.items() if k not in out and k not in ("usd", "gpu_hours")})
    # every block's rates over the one duration the fleet's own read (results.json's top level): the
    # buckets and regions once read over the run's end, drain included, so their throughputs did not add
    # up to the fleet's
    span = benchmark_duration(sc.workload, requests) if duration is None else duration
    if sc.input_length_buckets is not None:
        out["by_input_length"] = input_length_block(requests, sc.input_length_buckets, span, plan.bucket_slos)
    pool_usd, decode_pools = {b.name: b.usd for b in bills}, {p.prefill: p.decode for p in plan.pairs}
    if any(c.rate_limit is not None for c in sc.classes):
        out["gateway"] = gateway_block(requests, sc.classes, pool_usd, decode_pools)
    out.update({
        "pools": blocks,
        "classes": class_block(requests, sc.classes, plan.class_slos, plan.slo, span, plan.routes,
                               class_usd(requests, pool_usd, decode_pools)) if sc.classes else None,
        "regions": region_block(requests, sc.regions, span) if sc.regions else None,
        "ttft_budget": ttft_budget(requests, response_s=plan.response_s),
        "cost": cost_block(bills, requests, now, gpu_timeline=gpu_timeline,
                           monthly=plan.month, arrivals_s=arrivals, began_before=began_before),
        "load": load_block(requests, load_window, opens, began_before),
        "simulated_seconds": now,
    })
    out["energy"] = _energy(plan, pools, bills, now, requests)
    power = power_cost(sc.energy, out["energy"], out["cost"]) if "why_none" not in out["energy"] else None
    if power is not None:
        out["cost"]["power"] = power
    if sc.cost.api is not None:
        c = out["cost"]
        c["api"] = api_block(sc.cost.api, requests, usage_factor(plan.month, now, arrivals),
                             c.get("monthly_usd"), c["window_usd"])
    # The answer first: the product's fleet and bill, then whether it keeps up.
    product = product_block(sc.product.slices if sc.product else 1, out)
    return {"product": product, "load": out.pop("load"), **out}


def _energy(plan: FleetPlan, pools: dict[str, Pool], bills: list, now: float, requests: Records) -> dict:
    """The ``llmsim.energy`` block from each pool's counted busy time, tokens,
    iterations and KV held (:mod:`simulator.metrics.energy`)."""
    missing = sorted({ps.cm.gpu.name for ps in plan.setups if ps.cm.gpu.power is None})
    if missing:
        return {"why_none": f"no power block (idle_w, tdp_w) in the GPU profile of {', '.join(missing)}: add "
                            "`power: {tdp_w: W, idle_w: W, source: ...}` to it for energy figures and a power price"}
    powers = [_pool_power(ps, pools[ps.spec.name], b.gpu_seconds, now) for ps, b in zip(plan.setups, bills)]
    done = requests.finished
    out_tok, in_tok = int(requests.output_tokens[done].sum()), int(requests.input_tokens[done].sum())
    spec = plan.scenario.energy
    return energy_block(powers, spec, now, out_tok, in_tok, monthly_kwh(powers, bills, spec, now, plan.month))


def _pool_power(ps: PoolSetup, pool: Pool, gpu_seconds: float, now: float) -> PoolPower:
    """A pool's activity while iterating: FLOPs = tokens × 2 × active
    parameters; HBM bytes = iterations × (the weights + the KV blocks held,
    averaged over the busy time)."""
    stats = [pool.replica_stats(r, now) for r in pool.replicas]
    busy = sum(s["busy_time"] for s in stats)
    held = sum(s["kv_used_area"] for s in stats) / busy if busy > 0 else 0.0
    mem, gpu = ps.memory, ps.cm.gpu
    flops = sum(s["tokens_processed"] for s in stats) * pool.flops_per_token()
    hbm = sum(s["iterations"] for s in stats) * (mem.weights_bytes + held * mem.block_size * mem.kv_bytes_per_token)
    n, g = ps.spec.gpus_per_replica, gpu.calibration.gemm
    uc, um, _ = activity(flops, hbm, busy, pool.peak_flops() * g.eta_compute, gpu.hbm_bandwidth * n * g.eta_memory)
    assert gpu.power is not None
    return PoolPower(ps.spec.name, gpu.name, gpu.power.idle_w, gpu.power.tdp_w, gpu_seconds, busy * n, uc, um)


def _merge_steps(logs: list[list[tuple[float, int]]]) -> list[tuple[float, int]]:
    """The sum of several step functions, as one (time, value) log."""
    times = sorted({t for log in logs for t, _ in log})
    out = []
    for t in times:
        total = 0
        for log in logs:
            v = 0
            for tt, k in log:
                if tt > t:
                    break
                v = k
            total += v
        out.append((t, total))
    return out


def _pool_block(ps: PoolSetup, pool: Pool, now: float, scaler, requests: Optional[Records],
                ttft_ms: float | None) -> dict:
    reps = pool.replicas
    stats = [pool.replica_stats(r, now) for r in reps]
    lived = [now - max(r.t0, pool.window_start) for r in reps]   # each replica's part of the window
    nb = ps.memory.num_blocks
    usable = ps.memory.usable_blocks     # utilisation is of what requests can hold
    serving = max(replica_seconds(pool.serving, now), 1e-12)
    working = max(replica_seconds(pool.working, now), 1e-12)     # draining replicas still iterate
    counts = [k for _, k in pool.serving] or [0]
    mean_ready = serving / now if now > 0 else float(len(pool.ready))
    block = {
        "model": ps.cm.model.name,
        "gpu": ps.cm.gpu.name,
        "weight_dtype": ps.spec.engine.weight_dtype,
        "gemm_scheme": gemm_scheme(ps.spec.engine.weight_dtype, ps.cm.gpu.units),
        "kv_dtype": ps.spec.engine.kv_dtype,
        "tp": ps.spec.tp,
        **_serving_stack(ps.spec.engine.backend, ps.spec.engine.backend_version),
        **({"moe_backend": moe} if (moe := ps.cm.describe().get("moe_backend")) else {}),
        **({"dp": ps.spec.dp, "ep": ps.spec.ep} if ps.spec.dp > 1 or ps.spec.ep > 1 else {}),
        **({"pp": ps.spec.pp, "stage_layers": list(ps.cm.pipe.layers), "gpus_per_replica": ps.spec.gpus_per_replica,
            "pp_scheduling": ps.cm.describe()["pp_scheduling"]} if ps.spec.pp > 1 else {}),
        "replicas": max(counts),
        "replicas_min": min(counts),
        "replicas_mean": mean_ready,
        "replicas_max": max(counts),
        "replicas_created": len(reps) - pool.stopped_before_window,   # the window's: none a lead-in stopped
        "kv_blocks_per_replica": nb,
        "kv_tokens_per_replica": nb * ps.memory.block_size,
        "kv_memory": ps.memory.describe(),
        "mean_kv_utilization": kv_usage(sum(s["kv_used_area"] for s in stats), working * usable),
        "max_kv_utilization": kv_usage(max(s["kv_used_max"] for s in stats), usable),
        "preemptions": sum(s["preemptions"] for s in stats),
        **({"outputs_clipped": sum(s["outputs_clipped"] for s in stats)} if ps.engine_config.clips_output else {}),
        "rejected_on_admission": pool.rejected,
        "mean_queue_depth": sum(s["queue_mean"] * d for s, d in zip(stats, lived)) / max(now, 1e-12),
        "max_queue_depth_per_replica": max(s["queue_max"] for s in stats),
        "mean_batch_size": sum(s["batch_mean"] * d for s, d in zip(stats, lived)) / working,
        "max_batch_size": max(s["batch_max"] for s in stats),
        "gpu_busy_fraction": sum(s["busy_time"] for s in stats) / working,
        # model FLOPs utilisation: what an SM-activity dashboard would show
        "compute_utilization": sum(s["tokens_processed"] for s in stats) * pool.flops_per_token()
        / (pool.peak_flops() * working),
        "iterations": sum(s["iterations"] for s in stats),
        "prefix_cache": _prefix_cache_block(ps, stats),
    }
    if ps.spec.engine.contiguous:
        block["kv_allocation"] = _contiguous_block(ps, stats, working)
    if scaler is not None:
        block["autoscaling"] = _scaling_block(pool, scaler, now, requests, ttft_ms)
    a = ps.spec.autoscaling
    if a is not None:   # what the pool holds whatever the load: the floor, and its paid standby
        block["floor_replicas"] = a.min_replicas
        block["standby_gpus"] = a.warm_pool * ps.spec.gpus_per_replica
    spec = ps.spec.speculative
    if spec is not None:
        block["speculative"] = {**spec.model_dump(), "tokens_per_step": expected_tokens_per_step(
            spec.k, spec.acceptance_rate)}
        if getattr(ps.cm, "class_acceptance", None):   # classes with their own α: theirs and their E
            block["speculative"]["classes"] = ps.cm.class_figures()
    if ps.spec.lora is not None:
        block["lora"] = lora_block(ps.spec.lora, stats)
    return block


def _serving_stack(backend: Optional[str], version: Optional[str]) -> dict:
    """The stack a pool ran and the release whose defaults it took ({} for llmsim's generic engine)."""
    if backend is None:
        return {}
    from ..profiles.backend import load_backend

    prof = load_backend(backend)
    return {"backend": prof.name, "backend_release": prof.release_run(version),
            "backend_release_given": version is not None}


def _contiguous_block(ps: PoolSetup, stats: list[dict], working: float) -> dict:
    """Contiguous KV: what the reservations held against what the tokens
    filled (what paging would have held), and the concurrency the
    reservations allow (with max_model_len reserved, a fixed count, each
    sequence's sliding-window blocks beside its reservation as the engines
    charge them: :attr:`simulator.memory.MemoryPlan.window_blocks`; each
    attention-DP rank holds whole reservations in its own pool, so the
    replica's count is dp times one rank's, not its pooled blocks')."""
    nb = ps.memory.usable_blocks
    cfg = ps.spec.engine
    reserved = sum(s["kv_used_area"] for s in stats)
    filled = sum(s["kv_filled_area"] for s in stats)
    per_request = None if cfg.max_new_tokens is not None else cfg.longest_request(ps.cm.model)
    return {
        "mode": "contiguous",
        "reserved_tokens_per_request": per_request if per_request is not None else f"prompt + {cfg.max_new_tokens}",
        "max_sequences_per_replica": None if per_request is None
        else ps.memory.max_concurrent(per_request),
        "mean_reserved_utilization": kv_usage(reserved, working * nb),
        "mean_filled_utilization": kv_usage(filled, working * nb),
        "max_filled_utilization": kv_usage(max(s["kv_filled_max"] for s in stats), nb),
        "filled_fraction_of_reserved": filled / reserved if reserved > 0 else None,
    }


def _scaling_block(pool: Pool, scaler, now: float, requests: Records, ttft_ms: float | None) -> dict:
    """How the autoscaler did: time with fewer replicas serving than it
    wanted (the ramps cold starts make the fleet wait through), and the
    TTFT SLO attainment of the requests that arrived then against the rest."""
    windows = []
    ticks = scaler.decisions
    start = pool.window_start     # a decision of a warm start's lead-in holds into the window until the next
    for (t, want, _), nxt in zip(ticks, [*(d[0] for d in ticks[1:]), now]):
        t = max(t, start)
        ready = 0
        for tt, k in pool.serving:
            if tt > t:
                break
            ready = k
        if ready < want and min(nxt, now) > t:
            windows.append((t, min(nxt, now)))
    under = sum(b - a for a, b in windows)
    out = {"metric": scaler.spec.metric, "target": scaler.spec.target, "cold_start_s": scaler.cold_start_s,
           "evaluations": sum(1 for d in ticks if d[0] >= start), "under_provisioned_s": under,
           "under_provisioned_fraction": under / now if now > 0 else None}
    if ttft_ms is not None:
        starts = [a for a, _ in windows]

        ends = np.array([b for _, b in windows], dtype=np.float64)
        i = np.searchsorted(np.array(starts, dtype=np.float64), requests.arrival, side="right") - 1
        during = (i >= 0) & (requests.arrival < ends[np.maximum(i, 0)]) if windows else np.zeros(len(requests), bool)
        ok = requests.finished & ((requests.first_token - requests.arrival) * 1e3 <= ttft_ms)

        def met(mask: np.ndarray):
            return int(np.count_nonzero(ok & mask)) / int(np.count_nonzero(mask)) if mask.any() else None

        out.update(ttft_slo_ms=ttft_ms, ttft_attainment_under_provisioned=met(during),
                   ttft_attainment_otherwise=met(~during))
    return out


def _prefix_cache_block(ps: PoolSetup, stats: list[dict]) -> dict:
    """Hit rates over first admissions, summed over replicas (vLLM's
    prefix-cache hit rate is tokens; requests count one hit block or more)."""
    e = ps.spec.engine
    pcs = [s["prefix_cache"] for s in stats if s["prefix_cache"] is not None]
    out: dict = {"enabled": bool(pcs), "capacity_tokens": e.prefix_cache_capacity_tokens}
    if not pcs:
        out["why_off"] = ("prefix_cache: false" if not e.prefix_cache
                          else "SGLang's decode server runs a chunk cache, no radix tree "
                               "(engine.decode_prefix_reuse: false)" if not ps.engine_config.prefix_cache
                          else "no request carries block ids (add sessions, system prompts or a trace with ids)")
        return out
    tot = {k: sum(p[k] for p in pcs) for k in pcs[0] if k != "offload"}

    def rate(a: str, b: str):
        return tot[a] / tot[b] if tot[b] else None

    out.update(token_hit_rate=rate("hit_tokens", "prompt_tokens"), request_hit_rate=rate("hit_requests", "lookups"),
               block_hit_rate=rate("hit_ids", "prompt_ids"), hit_tokens=tot["hit_tokens"],
               prompt_tokens=tot["prompt_tokens"], evicted_blocks=tot["evicted_blocks"],
               cached_blocks_at_end=tot["cached_blocks"])
    if "offload" in pcs[0]:
        out["offload"] = _offload_block([p["offload"] for p in pcs], tot["prompt_tokens"])
    return out


def _offload_block(per_replica: list[dict], prompt_tokens: int) -> dict:
    """Per offload tier, summed over replicas: what entered, what came back
    and the reload time it cost (capacity is one replica's)."""
    out = {}
    for name, first in per_replica[0].items():
        t = {k: sum(r[name][k] for r in per_replica) for k in first if k != "capacity_blocks"}
        t["capacity_blocks_per_replica"] = first["capacity_blocks"]
        t["token_hit_rate"] = t["hit_tokens"] / prompt_tokens if prompt_tokens else None
        t["mean_reload_ms"] = 1e3 * t["reload_s"] / t["hit_requests"] if t["hit_requests"] else None
        out[name] = t
    return out
