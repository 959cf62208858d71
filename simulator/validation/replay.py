"""Replaying a measured row through llmsim, as its server and client ran it.

A closed-loop row (fixed concurrency C) is replayed on the server its
deployment launched, with the client its benchmark ran
(:mod:`.deployment`). How the loop's requests fall into phase decides most
of its TTFT, so the client is replayed in one of three ways:

``burst``
    All C clients start at t = 0 and each sends its next request when its
    last one ends, every round in the phase that start gives it (prompts
    prefilled in one iteration finish, and come back, together): the runs
    of ``vllm bench serve --max-concurrency`` and SGLang's
    ``bench_serving``, whose rows it replays best.
``spread``
    The out-of-phase state: clients' phases spread evenly over the loop's
    cycle (the GPU time one round takes, prefills and decode steps), one
    round of warm-up left out.
``phases``
    AIPerf's counted phase (its warm-up drained first): one round of C
    requests sent at once to an empty server, which queue behind each
    other's prefills, then the other rounds out of phase. Real stacks do
    not hold the lockstep a simulated loop of identical requests keeps
    after such a burst: on the AIPerf rows of the shared data, replaying
    every round in lockstep reads TTFT 30–50 % high at low concurrency,
    and out of phase, the burst round's queue is what makes TTFT grow
    with C (docs/accuracy.md). Means and medians are over the union of
    both runs' requests (one round, then the rest); rates come from the
    out-of-phase run.

``auto`` (the default) takes ``phases`` for AIPerf, whose clients hand
each next request over between processes, and ``burst`` for clients that
send it from the thread the last one ended on (genai-perf's perf_analyzer,
``vllm bench serve``, SGLang's ``bench_serving``).

A Poisson row is replayed open loop at its rate.

A disaggregated row (:attr:`.rows.Row.disaggregated`) is replayed on
llmsim's prefill/decode pair (:mod:`simulator.fleet.disaggregation`): a
prefill pool of the row's prefill workers, each a replica of the prefill
layout, hands every prompt's KV to a decode pool of its decode workers,
with the same client as an aggregated row of the same deployment. The
client's first token comes from the decode worker once the KV has arrived
(the flow Dynamo's SGLang guide draws: the decode worker starts once the
KV is in, then streams the tokens; ai-dynamo/dynamo
``components/backends/sglang/docs/sglang-kv-transfer-explainer.md``), so
TTFT holds the prefill, the transfer and the decode worker's first
iteration. The KV moves over the default link (``infiniband``: 90 % of each GPU's
scale-out NIC, 45 GB/s for one NDR HCA, 90 on GB300's ConnectX-8); a DeepSeek-V3 prompt of 8K tokens in fp8 takes a few
milliseconds on it, so the choice of link hardly moves TTFT.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Literal, Mapping, Optional

import numpy as np
from pydantic import ValidationError

from ..costmodel import CostModel
from ..errors import LlmsimError, from_validation_error
from ..profiles import load_hardware, load_model
from ..profiles.checkpoint_weights import measured_checkpoints
from ..scenario.schema import RELEASE_CONTEXT, Scenario
from . import deployment
from .rows import METRICS, RoleLayout, Row

ClientMode = Literal["auto", "burst", "spread", "phases"]
CLIENT_MODES: tuple[str, ...] = ClientMode.__args__


@dataclass(frozen=True)
class ReplaySettings:
    backend: Optional[str] = None           # None: the row's stack; else a backend name or profile file
    engine: Optional[Mapping[str, Any]] = None   # engine keys set on top (e.g. fitted overheads)
    arrival: Optional[Mapping[str, Any]] = None  # closed-loop arrival keys set on top (e.g. turnaround_ms)
    client: ClientMode = "auto"
    deployment: Optional[str] = None        # None: the row's own (validation.deployment); else one for all rows
    seed: int = 0
    # kv_memory.cuda_graph_gib of every row whose release takes its CUDA graphs out of the KV pool
    # (vLLM 0.20.0 on: validate --cuda-graph-gib); None: such a row is refused
    cuda_graph_gib: Optional[float] = None


def _cost_model(row: Row, layout: Optional[RoleLayout] = None, gpu_only: bool = False) -> CostModel:
    """The row's replica cost model; ``layout``: one role of a disaggregated row;
    ``gpu_only``: without the GPU profile's CPU time per iteration."""
    lay = layout or row
    return CostModel(load_model(row.model), load_hardware(row.gpu), lay.tp, row.weight_dtype, row.kv_dtype,
                     dp=lay.dp, ep=lay.ep, iteration_overhead_ms=0.0 if gpu_only else None)


def prefill_share(row: Row) -> float:
    """The GPU time C distinct prompts take to prefill (packed into as few
    iterations as the row's token budget allows, at llmsim's kernel speeds),
    over the measured round (TTFT + (OSL − 1)·TPOT): above 1, the measured
    loop prefilled less than C distinct prompts per round -- its prompts were
    reused (prefix-cache hits) -- or its prefills ran faster than the kernel
    calibration allows. Packed, not one at a time: a loop that batches
    several prompts into one iteration reads the weights once for all of
    them (Llama-3.2-1B, 2,048-token prompts on H100: 4 in one iteration take
    16 % less than 4 alone). GPU time: the CPU's share of an iteration can
    hide behind the GPU's (vLLM's async scheduling), and counted here it
    put llmsim's own vLLM loops of 6K-token prompts at 1.04. A disaggregated
    row's prompts are shared by its prefill workers (C / N_p each, on the
    prefill layout)."""
    assert row.concurrency is not None
    ttft, tpot = row.measured["ttft_mean_ms"], row.measured["tpot_mean_ms"]
    round_s = (ttft + (row.osl - 1) * tpot) * 1e-3
    engine = scenario_for(row).pools[0].engine
    prompts = row.concurrency if row.prefill is None else -(-row.concurrency // row.prefill.replicas)
    return packed_prefill_seconds(_cost_model(row, row.prefill, gpu_only=True), row.isl, prompts,
                                  engine.max_num_batched_tokens, engine.chunked_prefill) / round_s


def packed_prefill_seconds(cm: CostModel, isl: int, prompts: int, budget: int, split: bool) -> float:
    """``prompts`` distinct prompts of ``isl`` tokens in iterations of at most
    ``budget`` tokens: split across iterations to fill each one
    (``split``, chunked prefill), else whole prompts, at least one per
    iteration."""
    if not split:
        per = max(1, budget // isl)
        full, rest = divmod(prompts, per)
        return full * cm.step_time([(isl, 0)] * per) + (cm.step_time([(isl, 0)] * rest) if rest else 0.0)
    total, chunks, room = 0.0, [], budget
    for _ in range(prompts):
        done = 0
        while done < isl:
            take = min(isl - done, room)
            chunks.append((take, done))
            done, room = done + take, room - take
            if room == 0:
                total, chunks, room = total + cm.step_time(chunks), [], budget
    return total + (cm.step_time(chunks) if chunks else 0.0)


def _cycle_seconds(row: Row) -> float:
    """How long one client's round lasts once all C run: the GPU time a round
    of the loop takes (C prompts prefilled, OSL decode steps of the whole
    batch), and never less than one request alone. The out-of-phase state is
    the clients' phases spread evenly over this cycle; spread over a request's
    no-load duration instead, C prompts arrive in a fraction of the cycle and
    queue behind each other every round, a lockstep of their own.

    Disaggregated, the two pools work side by side: a round lasts as long
    as the busier of them takes for it (C / N_p prompts on each prefill
    replica, OSL decode steps of C / N_d sequences on each decode one)."""
    assert row.concurrency is not None
    c = row.concurrency
    if row.prefill is not None and row.decode is not None:
        pcm, dcm = _cost_model(row, row.prefill), _cost_model(row, row.decode)
        prefill = pcm.step_time([(row.isl, 0)])
        a1, b1 = dcm.decode_coefficients(1)
        alone = prefill + sum(a1 + b1 * (row.isl + j) for j in range(1, row.osl))
        per_decode = -(-c // row.decode.replicas)
        a, b = dcm.decode_coefficients(per_decode)
        loaded = max(-(-c // row.prefill.replicas) * prefill,
                     (row.osl - 1) * (a + b * per_decode * (row.isl + row.osl / 2)))
        return max(alone, loaded)
    cm = _cost_model(row)
    prefill = cm.step_time([(row.isl, 0)])
    a1, b1 = cm.decode_coefficients(1)
    alone = prefill + sum(a1 + b1 * (row.isl + j) for j in range(1, row.osl))
    a, b = cm.decode_coefficients(c)
    loaded = c * prefill + (row.osl - 1) * (a + b * c * (row.isl + row.osl / 2))
    return max(alone, loaded)


def _counted(row: Row, s: ReplaySettings) -> int:
    """Closed-loop requests the benchmark counted: the row's, else its client's rounds × C."""
    assert row.concurrency is not None
    return row.num_requests or deployment.client(s.deployment or row.deployment).counted_rounds * row.concurrency


def client_mode(row: Row, s: ReplaySettings) -> str:
    """How the row's closed loop is replayed (see the module docstring)."""
    if s.client != "auto":
        return s.client
    return "burst" if deployment.client(s.deployment or row.deployment).lockstep else "phases"


def scenario_for(row: Row, s: ReplaySettings = ReplaySettings(), mode: Optional[str] = None) -> Scenario:
    """The row as one scenario; ``mode`` (default: the row's client mode)
    ``first-round`` is the burst round that opens AIPerf's counted phase."""
    if row.skip:
        raise LlmsimError(f"row {row.id} cannot be replayed: {row.skip}")
    dep = s.deployment or row.deployment
    if row.concurrency is None and deployment.sized_by_concurrency(dep, row.stack):
        # its launch (batch, token budget, and the keys beside them) would be the stack's defaults unannounced
        raise LlmsimError(f"row {row.id} cannot be replayed: the {dep} deployment launches {row.stack} with a "
                          f"batch and token budget sized by the client's concurrency, and the row is driven by "
                          f"a request rate; replay it as --deployment defaults if its servers ran the defaults")
    spec = deployment.speculative(dep, load_model(row.model).num_nextn_predict_layers)
    keys = deployment.engine_keys(dep, row.stack, row.concurrency, row.isl, row.dp, _prefill_chunk(row),
                                  osl=row.osl) if row.concurrency is not None else {}
    engine = _engine(row, s, keys, spec is not None)
    lengths = {"input_tokens": {"dist": "fixed", "value": row.isl},
               "output_tokens": {"dist": "fixed", "value": row.osl}}
    if row.concurrency is not None:
        c = row.concurrency
        bench = deployment.client(dep)
        mode = mode or client_mode(row, s)
        total = _counted(row, s)
        if mode == "burst":
            arrival: dict = {"type": "concurrency", "concurrency": c}
            if bench.warmup_rounds:
                arrival["warmup_requests"] = bench.warmup_rounds * c
                arrival["warmup_drain"] = bench.drain
            n = total
        elif mode == "first-round":
            arrival, n = {"type": "concurrency", "concurrency": c}, min(c, total)
        else:   # spread, or the rounds of ``phases`` after the first
            arrival = {"type": "concurrency", "concurrency": c, "warmup_requests": c,
                       "ramp_up_s": _cycle_seconds(row)}
            n = total if mode == "spread" else max(total - c, 1)
        arrival.update(s.arrival or {})
        workload = {"num_requests": n, "arrival": arrival, **lengths}
    else:
        assert row.rate is not None
        n = row.num_requests or max(200, math.ceil(row.rate * 120))
        workload = {"num_requests": n, "arrival": {"type": "poisson", "rate_per_s": row.rate}, **lengths}
    pool = {"model": row.model, "gpu": row.gpu, "tp": row.tp, "dp": row.dp, "ep": row.ep, "replicas": 1,
            "engine": engine}
    if spec is not None:
        pool["speculative"] = spec
    body: dict[str, Any] = {"name": row.id, "seed": s.seed, "workload": workload, "pools": [pool]}
    if row.disaggregated:       # every request enters at the prefill pool
        body.update(pools=_disaggregated_pools(row, s, dep, pool), classes=[{"name": "all", "pool": "prefill"}])
    try:
        return Scenario.model_validate(body, context={RELEASE_CONTEXT: _release(row, s)})
    except ValidationError as e:
        # a launch llmsim cannot build: the row's refusal, as a layout that does not fit is. vLLM 0.20.0
        # and later size the pool after a CUDA-graph figure no measurement records, which the command
        # replaying the row takes as a flag: the scenario's key would name nothing its user can set.
        from ..kv_memory import GRAPHS_FLAG, graphs_needed, graphs_refused

        if graphs_refused(e):
            raise GraphsWanted(graphs_needed(f"give {GRAPHS_FLAG} as", otherwise="")) from None
        raise from_validation_error(e, None, body) from None


class GraphsWanted(LlmsimError):
    """:func:`scenario_for`'s refusal of a row whose release takes its CUDA graphs out of the KV pool while the
    settings state no figure: told apart so that :func:`takes_graphs` can say which rows the figure reaches."""


def takes_graphs(row: Row, s: ReplaySettings) -> bool:
    """Whether the row's launch takes ``s.cuda_graph_gib``: without it, the row would be refused for want of
    it. Elsewhere the figure is left out (a release whose graphs live outside the pool, a stack that never
    reads it, a profile stating its own), and a user giving it wants to know it priced nothing."""
    try:
        scenario_for(row, replace(s, cuda_graph_gib=None))
    except GraphsWanted:
        return True
    except LlmsimError:     # refused for another reason, which the replay names
        return False
    return False


def _prefill_chunk(row: Row) -> int:
    """SGLang's default prefill chunk on the row's GPU (the chunk a launch
    that sets none keeps; :func:`.deployment.engine_keys` reads it only for
    such launches)."""
    from ..kv_memory import MIB, sglang_chunked_prefill_size

    # the table of the row's release, else of the release its stack's profile describes
    prof = deployment.stack_profile(row.stack)
    own = (prof.engine.get("kv_memory") or {}) if prof is not None else {}
    tiers = (row.version_keys.get("kv_memory") or {}).get("gpu_tiers") or own.get("gpu_tiers", "0.5")
    return sglang_chunked_prefill_size(load_hardware(row.gpu).hbm_bytes / MIB, tiers)


def _release(row: Row, s: ReplaySettings) -> dict[str, Any]:
    """The keys of the release the row ran (:attr:`.rows.Row.version_keys`), which every pool takes
    as one naming that release as ``engine.backend_version`` does (:func:`.apply_backend`): its
    defaults under the launch's keys, its GPU and model rules, its attention kernels' block sizes.
    Empty under another stack's backend (validate --backend), where vLLM 0.15's sampler bytes or
    pipeline loop would be read as that stack's."""
    return dict(row.version_keys) if _stack_of(s.backend or row.stack) == row.stack else {}


def _engine(row: Row, s: ReplaySettings, keys: Mapping[str, Any], speculative: bool) -> dict[str, Any]:
    """A pool's engine keys: the row's backend and dtypes, the deployment's
    ``keys``, the stack's speculative-decoding keys where it drafts, then the
    settings' own. The release's defaults are not among them: the pool takes
    them from the scenario's validation context (:func:`scenario_for`)."""
    engine = {"backend": s.backend or row.stack, "weight_dtype": row.weight_dtype, "kv_dtype": row.kv_dtype}
    release = _release(row, s)
    launch = keys.get("kv_memory") or None
    engine.update(keys)
    if speculative:
        # the stack's own switches under speculation, over the launch's flags; a batch cap the launch
        # sets (--max-running-requests) stays, as the flag overrides SGLang's 48, and stays a rank's
        # (the keys' max_num_seqs is ⌈C/dp⌉ a rank): the 48's running_cap (server, split among the
        # ranks) goes with it, else a decode pool of 32 ranks ran C/32 requests at once, not C
        spec = deployment.speculative_engine_keys(row.stack, release)
        if "max_num_seqs" in keys:
            spec.pop("max_num_seqs", None)
            spec.pop("running_cap", None)
        engine.update(spec)
    engine.update(s.engine or {})
    if launch is not None and engine.get("kv_memory") is launch:
        # The launch's memory flags are its own stack's (SGLang's CUDA-graph batch and prefill chunk,
        # which size its default fraction; its window ratio); under another stack's backend (validate
        # --backend) or one that fixes the fraction, nothing reads them, and KvMemory refuses them.
        from ..kv_memory import RULES

        merged = _pool_kv(engine, row, release)
        if merged is not None:
            read = RULES[merged.get("rule", "vllm")].reads(merged.get("fraction") is not None)
            engine["kv_memory"] = {k: v for k, v in launch.items() if k in read}
    if s.cuda_graph_gib is not None:
        _state_graphs(engine, _pool_kv(engine, row, release), s.cuda_graph_gib)
    return engine


def _pool_kv(engine: Mapping[str, Any], row: Row, release: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """The ``kv_memory`` mapping a pool of ``engine`` keys runs on the row's GPU and model, its release's
    defaults and rules merged in as the scenario merges them; None where the merge is refused, which the
    scenario then names."""
    from ..profiles.backend import apply_backend

    try:
        merged = apply_backend(dict(engine), row.gpu, model=load_model(row.model), release=release)
    except LlmsimError:
        return None
    return merged.get("kv_memory") or {}


def _state_graphs(engine: dict[str, Any], kv: Optional[dict[str, Any]], gib: float) -> None:
    """Set ``gib`` as ``engine``'s ``kv_memory.cuda_graph_gib`` where its release takes an estimate of its
    CUDA graphs out of the KV pool and the engine states none (``kv``: the pool's merged mapping,
    :func:`_pool_kv`); elsewhere the figure would shrink a pool whose graphs live outside it (vLLM to
    0.19.1), or be refused by a stack that never reads it."""
    from ..kv_memory import KvMemory, graphs_unstated

    try:
        needed = isinstance(kv, dict) and graphs_unstated(KvMemory.model_validate(kv)) is not None
    except ValidationError:
        return          # the scenario refuses the mapping, naming its key
    if needed:
        engine["kv_memory"] = {**(engine.get("kv_memory") or {}), "cuda_graph_gib": gib}


def _stack_of(backend: str) -> str | None:
    """The serving stack a backend profile (a built-in name or a profile file) describes."""
    from ..profiles.backend import load_backend

    try:
        return load_backend(backend).stack
    except LlmsimError:
        return None


def _disaggregated_pools(row: Row, s: ReplaySettings, dep: str, pool: dict) -> list[dict]:
    """A disaggregated row's prefill pool (first: the front end routes to it)
    and decode pool, each the aggregated ``pool`` of the same deployment on
    its role's layout and launch (:func:`.deployment.role_engine_keys`). The
    decode pool drafts where the aggregated pool would; the prefill pool
    samples one token and drafts none."""
    assert row.prefill is not None and row.decode is not None
    out = []
    for name, lay in (("prefill", row.prefill), ("decode", row.decode)):
        # without a concurrency the deployment sets no keys (scenario_for refuses one that would)
        keys = {} if row.concurrency is None else deployment.role_engine_keys(
            dep, row.stack, row.concurrency, row.isl, lay.batch, lay.dp, prefill=name == "prefill",
            prefill_chunk=_prefill_chunk(row))
        role = {**pool, "name": name, "tp": lay.tp, "dp": lay.dp, "ep": lay.ep, "replicas": lay.replicas}
        if name == "prefill":
            role.pop("speculative", None)
            role["disaggregation"] = {"decode_pool": "decode"}
        role["engine"] = _engine(row, s, keys, "speculative" in role)
        out.append(role)
    return out


# Latencies a phases replay takes over the union of its two runs' requests.
_UNION = {"mean_ttft_ms": ("ttft_ms", np.nanmean), "median_ttft_ms": ("ttft_ms", np.nanmedian),
          "mean_tpot_ms": ("tpot_ms", np.nanmean), "median_tpot_ms": ("tpot_ms", np.nanmedian),
          "median_e2el_ms": ("e2el_ms", np.nanmedian)}


def _results(row: Row, s: ReplaySettings) -> dict[str, Any]:
    with measured_checkpoints():
        return _replayed(row, s)


def _replayed(row: Row, s: ReplaySettings) -> dict[str, Any]:
    from ..metrics.derive import RequestArrays
    from ..runner import simulate

    if row.concurrency is None or client_mode(row, s) != "phases":
        return dict(simulate(scenario_for(row, s)).results)
    first = simulate(scenario_for(row, s, "first-round"))
    if _counted(row, s) <= row.concurrency:
        return dict(first.results)
    rest = simulate(scenario_for(row, s, "rest"))
    union = RequestArrays(list(first.requests) + list(rest.requests))
    res = dict(rest.results)
    for key, (col, stat) in _UNION.items():
        res[key] = float(stat(getattr(union, col)))
    return res


def refusals(rows: list[Row], s: ReplaySettings = ReplaySettings()) -> dict[str, str]:
    """Why llmsim cannot replay each row it refuses (its scenario does not
    compile: a tp that does not divide the model, weights that do not fit),
    by row id. A measurement file may hold layouts llmsim cannot model; such
    a row is left out with its reason, as a malformed one is, rather than
    ending the replay of all the others. Rows of one configuration and
    lengths compile once."""
    from ..scenario.compile import compile_scenario

    seen: dict[str, Optional[str]] = {}
    out: dict[str, str] = {}
    for row in rows:
        try:
            sc = scenario_for(row, s)
        except LlmsimError as e:
            out[row.id] = e.render()
            continue
        key = sc.model_dump_json(include={"pools", "classes", "workload"}, exclude={"workload": {"num_requests"}})
        if key not in seen:
            try:
                with measured_checkpoints():
                    compile_scenario(sc)
                seen[key] = None
            except LlmsimError as e:
                seen[key] = e.render()
        if seen[key] is not None:
            out[row.id] = seen[key]
    return out


def predict(row: Row, s: ReplaySettings = ReplaySettings()) -> dict[str, float]:
    """llmsim's value of each metric the row measured (results.json keys mapped back)."""
    res = _results(row, s)
    out = {col: float(res[key]) for col, key in METRICS.items() if col in row.measured and key in res}
    if row.throughput_identity and row.concurrency and "throughput_output_tok_s" in out:
        ttft, tpot = res["mean_ttft_ms"], res["mean_tpot_ms"]
        out["throughput_output_tok_s"] = row.concurrency * row.osl / ((ttft + (row.osl - 1) * tpot) * 1e-3)
    return out
