"""Replaying a measured row through llmsim, as its server and client ran it.

A closed-loop row (fixed concurrency C) is replayed the way the benchmark
tools run it (``vllm bench serve --max-concurrency``, SGLang's
``bench_serving``, AIPerf's concurrency mode): all C clients start at
t = 0 and each sends its next request when its last one ends
(``client: burst``, the default), on the server the row's deployment
launched, with the warm-up and counted requests its client used
(:mod:`.deployment`). A closed loop of identical requests keeps the phase
its start gave it: prompts prefilled in one iteration finish, and come
back, together. The token budget decides how many do, so the deployment's
flags matter more to TTFT than any overhead. ``client: spread`` replays
the out-of-phase state instead: clients spread over one request's no-load
duration, one round of warm-up left out.

A Poisson row is replayed open loop at its rate.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Optional

from ..costmodel import CostModel
from ..errors import LlmsimError
from ..profiles import load_hardware, load_model
from ..scenario.schema import Scenario
from . import deployment
from .rows import METRICS, Row

Client = Literal["spread", "burst"]


@dataclass(frozen=True)
class ReplaySettings:
    backend: Optional[str] = None           # None: the row's stack; else a backend name or profile file
    engine: Optional[Mapping[str, Any]] = None   # engine keys set on top (e.g. fitted overheads)
    arrival: Optional[Mapping[str, Any]] = None  # closed-loop arrival keys set on top (e.g. turnaround_ms)
    client: Client = "burst"
    deployment: Optional[str] = None        # None: the row's own (validation.deployment); else one for all rows
    seed: int = 0


def _no_load_seconds(row: Row) -> float:
    """One request alone: its prefill plus its decode steps (for the client spread)."""
    cm = CostModel(load_model(row.model), load_hardware(row.gpu), row.tp, row.weight_dtype, row.kv_dtype,
                   dp=row.dp, ep=row.ep)
    t = cm.step_time([(row.isl, 0)])
    a, b = cm.decode_coefficients(1)
    return t + sum(a + b * (row.isl + j) for j in range(1, row.osl))


def scenario_for(row: Row, s: ReplaySettings = ReplaySettings()) -> Scenario:
    if row.skip:
        raise LlmsimError(f"row {row.id} cannot be replayed: {row.skip}")
    dep = s.deployment or row.deployment
    engine = {"backend": s.backend or row.stack, "weight_dtype": row.weight_dtype, "kv_dtype": row.kv_dtype}
    if row.concurrency is not None:
        engine.update(deployment.engine_keys(dep, row.stack, row.concurrency, row.isl))
    engine.update(s.engine or {})
    lengths = {"input_tokens": {"dist": "fixed", "value": row.isl},
               "output_tokens": {"dist": "fixed", "value": row.osl}}
    if row.concurrency is not None:
        c = row.concurrency
        bench = deployment.client(dep)
        if s.client == "burst":
            arrival: dict = {"type": "concurrency", "concurrency": c}
            if bench.warmup_rounds:
                arrival["warmup_requests"] = bench.warmup_rounds * c
                arrival["warmup_drain"] = bench.drain
            n = row.num_requests or bench.counted_rounds * c
        else:
            arrival = {"type": "concurrency", "concurrency": c, "warmup_requests": c,
                       "ramp_up_s": _no_load_seconds(row)}
            n = bench.counted_rounds * c
        arrival.update(s.arrival or {})
        workload = {"num_requests": n, "arrival": arrival, **lengths}
    else:
        assert row.rate is not None
        n = row.num_requests or max(200, math.ceil(row.rate * 120))
        workload = {"num_requests": n, "arrival": {"type": "poisson", "rate_per_s": row.rate}, **lengths}
    return Scenario.model_validate({
        "name": row.id, "seed": s.seed, "workload": workload,
        "pools": [{"model": row.model, "gpu": row.gpu, "tp": row.tp, "dp": row.dp, "ep": row.ep, "replicas": 1,
                   "engine": engine}]})


def predict(row: Row, s: ReplaySettings = ReplaySettings()) -> dict[str, float]:
    """llmsim's value of each metric the row measured (results.json keys mapped back)."""
    from ..runner import simulate

    res = simulate(scenario_for(row, s)).results
    out = {col: float(res[key]) for col, key in METRICS.items() if col in row.measured and key in res}
    if row.throughput_identity and row.concurrency and "throughput_output_tok_s" in out:
        ttft, tpot = res["mean_ttft_ms"], res["mean_tpot_ms"]
        out["throughput_output_tok_s"] = row.concurrency * row.osl / ((ttft + (row.osl - 1) * tpot) * 1e-3)
    return out
