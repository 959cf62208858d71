"""A validated scenario compiled into the fleet plan a run wires together.

Schema errors come from pydantic (:mod:`.load`); everything else that can
be known wrong before simulating is found here, once: the checks that need
the profiles (the model must fit, lengths must fit the context) and those
that look across sections (classes route to pools that exist, admission
never sheds a higher class first, disaggregation pairs share a model and
KV dtype, regions are declared, SLO and cost blocks parse). Each ends in
one LlmsimError naming the file and key path.

What the checks resolve is kept rather than recomputed: each pool's cost
model and memory plan, its router factory, the per-class KV budgets and
admission limits it enforces, the class → pool routes, the region table,
the parsed SLOs and the monthly cost rule. :func:`simulator.runner.simulate`
only wires SimPy objects to this plan and the fleet report reads it, so a
scenario flows one way: scenario → plan → fleet → engine → records → report.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, NoReturn, Optional, Sequence

import numpy as np

from ..fleet.routing import Router, make_router
from ..errors import LlmsimError
from ..fleet.classes import ClassSpec
from ..fleet.disaggregation import HandoffBytes, KvLinkSpec
from ..fleet.pool import Admission
from ..fleet.regions import RegionTable
from ..fleet.setup import PoolSetup, setup_pool
from ..hybrid_kv import window_share
from ..kv_memory import swa_tokens_ratio
from ..metrics.monthly import MonthRule
from ..metrics.slo import SloSpec
from ..fleet.pp_refusals import check_pp_pairs
from ..parallelism import kv_copies
from ..profiles.backend import BackendProfile
from ..profiles.model import window_span_blocks
from ..runsize import check_run_size
from .schema import PoolSpec, Scenario
from workloads.spec import MAX_PAGED_BLOCK_TOKENS, paged_block_tokens
from workloads.traces import TraceSpec
from .cost import month_rule
from .decode_servers import check_direct_decode_routes
from .nvlink_handoff import nvlink_refusal
from .priority_scheduling import check_priority_scheduling
from .slo import parse_slo
from .trace_path import check_trace_path
from ..engine.request_length import LengthLimit, length_limit, over_budget, too_long

__all__ = ["FleetPlan", "PoolPlan", "PairPlan", "compile_scenario", "class_routes", "base_dir"]


@dataclass(frozen=True)
class PoolPlan:
    """One pool, resolved: its building blocks and what it enforces per class."""

    setup: PoolSetup
    router: Callable[[np.random.Generator], Router]   # a fresh router drawing from the given stream
    kv_budgets: dict[str, int]          # class → KV blocks its sequences may hold on one replica
    admission: dict[str, Admission]     # class → its admission limits
    warm: int                           # replicas kept warm beyond the autoscaler's count
    cold_start_s: Optional[float]       # an autoscaled replica's start-up; None for a fixed pool

    @property
    def spec(self) -> PoolSpec:
        return self.setup.spec

    @property
    def name(self) -> str:
        return self.setup.spec.name


@dataclass(frozen=True)
class PairPlan:
    """A prefill pool handing its requests' KV to a decode pool."""

    prefill: str
    decode: str
    link_bytes: HandoffBytes       # KV bytes the busiest link of the hand-off carries
    link: KvLinkSpec
    link_numbers: tuple[float, float]   # its bytes/s per GPU and latency (s), from the pair's GPUs
    # the share of a move each side's links are held for, (prefill, decode): the busier side 1 (fleet/kv_link.py)
    link_shares: tuple[float, float] = (1.0, 1.0)


@dataclass(frozen=True)
class FleetPlan:
    """A scenario with every cross-section check passed and every derived table built."""

    scenario: Scenario
    source: str | Path | None
    pools: list[PoolPlan]               # in the scenario's order
    routes: dict[str, str]              # class name → the pool it enters
    pairs: list[PairPlan]
    regions: RegionTable
    slo: SloSpec                        # the scenario's SLO, parsed
    class_slos: dict[str, SloSpec]      # each class's own SLO, parsed
    bucket_slos: dict[str, SloSpec]     # each input-length bucket's SLO, parsed
    month: MonthRule                    # the cost basis: how the window's bill extends to a month

    @property
    def setups(self) -> list[PoolSetup]:
        return [p.setup for p in self.pools]

    @property
    def response_s(self) -> dict[str, float]:
        """Each pool's front-end time per token (``engine.response_ms``), in seconds: the fleet adds it to the
        stamps a client sees, and the TTFT budget reports it as a part of its own. A disaggregated request's
        tokens stream from its decode pool's server, so a prefill pool answers with its decode pool's."""
        out = {p.name: p.spec.engine.response_ms * 1e-3 for p in self.pools}
        out.update({pair.prefill: out[pair.decode] for pair in self.pairs})
        return out

    @property
    def folder(self) -> Path | None:
        """The scenario's folder (relative trace paths resolve against it)."""
        return base_dir(self.source)


def compile_scenario(sc: Scenario, source: str | Path | None = None) -> FleetPlan:
    """Check ``sc`` against its profiles and across its sections, and resolve it into a plan.

    The run's size is checked here, first (:mod:`simulator.runsize`): every
    run compiles its scenario once, so each is held to the limits once, before
    anything is built or drawn."""
    check_run_size(sc, source)
    check_trace_path(sc, source, base_dir(source))

    def fail(msg: str, key: str) -> NoReturn:
        raise LlmsimError(msg, source=source, key_path=key)

    names = [p.name for p in sc.pools]
    for i, n in enumerate(names):
        if names.index(n) != i:
            fail(f"two pools are named {n!r}; pool names must differ (classes route to them by name)",
                 f"pools[{i}].name")
    decode_pools = {p.disaggregation.decode_pool for p in sc.pools if p.disaggregation is not None}
    setups = [setup_pool(p, i, source, p.name in decode_pools) for i, p in enumerate(sc.pools)]
    routes = class_routes(sc, source)
    served = {names.index(p) for p in routes.values()}
    mi, mo = _max_length(sc.workload.input_tokens), _max_length(sc.workload.output_tokens)
    for i in sorted(served):
        limit = sc.pools[i].engine.max_model_len
        ctx = sc.pools[i].engine.longest_request(setups[i].cm.model)
        # TensorRT-LLM cuts the output to max_seq_len - prompt (engine.clips_output: max_seq_len): only a
        # prompt that leaves no output token is refused, as the replica does (ReplicaBase.can_ever_serve);
        # a stack may count more than the prompt and output against it (SGLang's draft slots)
        lim = length_limit(sc.pools[i].engine, sc.pools[i].speculative, ctx)
        whose = f"engine.max_model_len (pool {names[i]!r})" if limit else f"{setups[i].cm.model.name}'s context"
        refusal = too_long(lim, mi, mo if mo is not None else 1, whose, "" if limit else f" (pool {names[i]!r})") \
            if mi is not None and (mo is not None or lim.cuts_output) else None
        if refusal is not None:
            fail(refusal[0], f"workload.{refusal[1]}_tokens")
        _check_prompt_budget(sc, sc.pools[i], mi, fail)
        _check_session_lengths(sc, lim, names[i], source)
    ids = sc.workload.id_block_tokens(base_dir(source))
    for i, p in enumerate(sc.pools):
        bs = p.engine.block_size
        if ids and p.engine.prefix_cache and ids % bs:
            _refuse_id_blocks(sc, i, ids, fail)
        a = p.autoscaling
        if a is not None and not a.min_replicas <= p.replicas <= a.max_replicas:
            fail(f"replicas ({p.replicas}) must lie within autoscaling's min_replicas..max_replicas "
                 f"({a.min_replicas}..{a.max_replicas})", f"pools[{i}].replicas")
        _check_schedule_in_window(sc, i, fail)
    _check_system_prompt(sc, source)
    _check_disaggregation(sc, setups, source)
    # a class routed to a prefill pool holds its KV on that pool's decode pool too, longest there
    decodes_on = {p.name: p.disaggregation.decode_pool for p in sc.pools if p.disaggregation is not None}
    _check_every_pool_serves(sc, routes, decodes_on, source)
    check_direct_decode_routes(sc, decodes_on, source)
    check_priority_scheduling(sc, routes, decodes_on, source)
    check_pp_pairs(sc.pools, source)
    class_slos, bucket_slos = _check_classes(sc, routes, source)
    setups = _class_speculation(setups, sc.classes, routes, source)
    _check_regions(sc, source)
    month = month_rule(sc, source)
    pools = [_pool_plan(ps, i, source, [c for c in sc.classes if routes[c.name] == ps.spec.name],
                        [c for c in sc.classes if ps.spec.name in (routes[c.name], decodes_on.get(routes[c.name]))])
             for i, ps in enumerate(setups)]
    return FleetPlan(sc, source, pools, routes, _pairs(setups), RegionTable(sc.regions, sc.seed),
                     parse_slo(sc.slo), class_slos, bucket_slos, month)


def _check_schedule_in_window(sc: Scenario, i: int, fail: Callable[[str, str], NoReturn]) -> None:
    """A floor raised at or after the window's end (``duration_s``, where arrivals stop) meets no arrival:
    the replicas it adds serve nothing, the router having placed every request already, and are only
    billed while the earlier ones drain. A slip of units or of the window, refused. Without a duration
    the run's span is the count's, and a step is reached or not; a session workload's duration ends its
    session starts, and their later turns still arrive after it."""
    a, d = sc.pools[i].autoscaling, sc.workload.duration_s
    if a is None or d is None or sc.workload.session is not None:
        return
    for j, step in enumerate(a.schedule):
        if step.at_s >= d:
            fail(f"{step.at_s:g} s is at or after the window's end (workload.duration_s: {d:g} s): no request "
                 f"arrives after it, so the replicas the step keeps would serve none; schedule it inside the "
                 f"window or remove it", f"pools[{i}].autoscaling.schedule[{j}].at_s")


def _refuse_id_blocks(sc: Scenario, i: int, ids: int, fail: Callable[[str, str], NoReturn]) -> NoReturn:
    """Refuse the prompt block ids of ``ids`` tokens, not a whole number of pool ``i``'s KV blocks, on the key
    to change: workload.block_tokens where the scenario set it (unset, it follows the pools' blocks up to
    MAX_PAGED_BLOCK_TOKENS, :meth:`WorkloadSpec.paged_by`), else the pool's block_size (a trace's ids have
    the trace's size; a multiple past that bound is the scenario's to choose)."""
    bs = sc.pools[i].engine.block_size
    sizes = [p.engine.block_size for p in sc.pools if p.engine.prefix_cache]
    pages = math.lcm(*sizes)
    if isinstance(sc.workload.arrival, TraceSpec):
        fail(f"the workload's prompt block ids stand for {ids} tokens, not a whole number of {bs}-token KV "
             "blocks: set a block_size dividing it, or prefix_cache: false", f"pools[{i}].engine.block_size")
    if "block_tokens" in sc.workload.model_fields_set:
        fail(f"{ids} tokens per prompt block id are not a whole number of the {bs}-token KV blocks of pool "
             f"{sc.pools[i].name!r} (its engine.block_size): set a multiple of {pages} (every prefix-cached "
             "pool's block)"
             + (", or leave block_tokens out to follow them" if paged_block_tokens(sizes) is not None else "")
             + ", or prefix_cache: false on the pool", "workload.block_tokens")
    fail(f"the workload's prompt block ids stand for {ids} tokens, not a whole number of {bs}-token KV blocks, "
         f"and a multiple of 16 and of every prefix-cached pool's block passes the {MAX_PAGED_BLOCK_TOKENS} tokens "
         f"an unset workload.block_tokens follows: set workload.block_tokens to a multiple of {pages}, a "
         f"block_size dividing {ids}, or prefix_cache: false", f"pools[{i}].engine.block_size")


def _router_factory(spec: PoolSpec, index: int, source) -> Callable[[np.random.Generator], Router]:
    """The pool's router, built by each run from that run's stream (its
    settings were validated with the schema); a router whose own factory
    refuses them is reported against the pool."""
    def build(rng: np.random.Generator) -> Router:
        try:
            return make_router(spec.router, rng)
        except LlmsimError as e:
            raise LlmsimError(e.message, source=source, key_path=f"pools[{index}].router") from None
    return build


def _pool_plan(ps: PoolSetup, index: int, source, mine: list[ClassSpec], holding: list[ClassSpec]) -> PoolPlan:
    """``mine``: the classes routed to the pool (its admission limits); ``holding``: those whose KV it
    holds, which under disaggregation include the classes of the prefill pools it decodes for (their
    kv_budget_fraction capped the prefill pool alone, where a request's KV stays for one prompt)."""
    budgets = {c.name: max(1, int(c.kv_budget_fraction * ps.memory.usable_blocks))
               for c in holding if c.kv_budget_fraction is not None}
    admission = {c.name: Admission(c.admission.max_queue_per_replica, c.admission.max_wait_s)
                 for c in mine if c.admission is not None}
    a = ps.spec.autoscaling
    return PoolPlan(ps, _router_factory(ps.spec, index, source), budgets, admission, a.warm_pool if a else 0,
                    a.cold_start_s(ps.memory.weights_bytes) if a else None)


def _pairs(setups: list[PoolSetup]) -> list[PairPlan]:
    """Each prefill → decode hand-off. Every GPU of a prefill rank sends what it holds and every GPU of
    the decode rank receives what it will hold, each over its own link, so the busiest link carries the
    larger of one prefill GPU's and one decode GPU's KV: tp 4 prefill shards into one decode GPU arrive
    over that GPU's one link, and a model whose GPUs each keep more than a 1/tp slice moves more. MLA's
    latent is whole on every GPU (vLLM's NIXL connector: "MLA is always replicated", each decode GPU
    reads it from one prefill GPU: kv_connector/utils.py TpKVTopology), and GQA heads fewer than tp are
    held twice or more (:func:`simulator.parallelism.kv_copies`): a DeepSeek-V3 hand-off at tp 8 moves
    the whole latent per link, 8× what a 1/tp slice would. A sliding-window layer sends its window's
    last blocks alone where the pool keeps a window of it (vLLM's hybrid pool, SGLang's hybrid SWA pool:
    :func:`_handoff_bytes`), every token where it keeps every one."""
    by_name = {ps.spec.name: ps for ps in setups}

    def per_gpu(ps: PoolSetup) -> float:      # the share of a token's KV one GPU holds
        return kv_copies(ps.cm.model, ps.spec.tp) / ps.spec.tp

    pairs = []
    for ps in setups:
        if (d := ps.spec.disaggregation) is not None:
            dec = by_name[d.decode_pool]
            sides = per_gpu(ps), per_gpu(dec)
            busiest = max(sides)
            pairs.append(PairPlan(ps.spec.name, d.decode_pool, _handoff_bytes(ps, busiest), d.link,
                                  d.link.numbers((ps.cm.gpu, dec.cm.gpu)), (sides[0] / busiest, sides[1] / busiest)))
    return pairs


def _handoff_bytes(ps: PoolSetup, per_gpu: float) -> HandoffBytes:
    """What a hand-off from prefill pool ``ps`` moves over a link carrying ``per_gpu`` of a token's KV.
    A sliding-window layer moves what the pool keeps of it. vLLM's hybrid pool: the last blocks of the
    window (:attr:`~simulator.hybrid_kv.SlidingGroups.handoff_tokens`). SGLang's hybrid SWA pool
    (``swa_full_tokens_ratio`` below 1): every full-attention page of the prompt and, as the request's
    state, the SWA pool's pages from the window's start rounded down to a page
    (disaggregation/prefill.py ``send_kv_chunk``, its ``_swa_payload`` from 0.5.14, inline before:
    ``window_start = max(0, seq_len - window_size)`` floored to ``page_size``; decode.py the same for the
    pages it receives; read in 0.5.4, 0.5.9, 0.5.11, 0.5.14, 0.5.18, 0.5.20-0.5.23), at most
    cdiv(window − 1, page) + 1 pages. A pool that keeps every layer's every token (ratio 1: TensorRT-LLM's one window, whose
    cache formatter sends every block of the request's one pool, cacheFormatter.cpp
    ``getBlockRangeForSending``: ``windowsMetadata.size() == 1`` returns ``fromAllBlockIds``; SGLang's
    --disable-hybrid-swa-memory, gpt-oss to 0.5.7, whose one MHA pool's buffers are all it registers)
    moves every sliding-window layer's token as a full-attention one."""
    model = ps.cm.model
    # the KV dtype the prefill side sends
    full = model.kv_bytes_per_token(ps.spec.engine.kv_dtype) * per_gpu
    window = full * window_share(model)
    if ps.memory.windows is not None:
        return HandoffBytes(full, window, ps.memory.windows.handoff_tokens)
    ratio = swa_tokens_ratio(ps.spec.engine.kv_memory, model.num_sliding_layers)
    if ratio is None:
        return HandoffBytes(full)
    if ratio >= 1:
        return HandoffBytes(full + window)
    block = ps.memory.block_size
    return HandoffBytes(full, window, window_span_blocks(model.window_tokens, block) * block)


def _max_length(dist) -> int | None:
    """The largest length a distribution can produce, when it is bounded."""
    for attr in ("value",):
        if hasattr(dist, attr) and isinstance(getattr(dist, attr), int):
            return getattr(dist, attr)
    if getattr(dist, "dist", None) == "empirical":
        return int(max(dist.values))
    mx = getattr(dist, "max", None)
    return int(mx) if isinstance(mx, (int, float)) else None


def _min_length(dist) -> int:
    """The smallest length a distribution can produce (1 where it does not say)."""
    if dist is None:
        return 0
    v = getattr(dist, "value", None)
    if isinstance(v, int):
        return v
    if getattr(dist, "dist", None) == "empirical":
        return int(min(dist.values))
    return int(getattr(dist, "min", None) or 1)


def _check_prompt_budget(sc: Scenario, pool: PoolSpec, mi: Optional[int], fail: Callable[[str, str], NoReturn]) -> None:
    """A bounded workload whose prompts can outgrow the token budget ``pool``'s stack takes without chunked
    prefill (:meth:`~simulator.engine.config.EngineConfig.longest_prompt`) is refused, as one past the
    context is: the prompt the stack checks is the whole of it, a system prompt before the input too."""
    cap = pool.engine.longest_prompt(pool.dp)
    sp = sc.workload.system_prompt
    sp_max = _max_length(sp.tokens) if sp else 0
    if mi is None or sp_max is None or cap is None or sp_max + mi <= cap:
        return
    what = f"input ({mi})" if not sp_max else f"a system prompt of up to {sp_max} and input ({mi})"
    fail(over_budget(what, cap, f"in pool {pool.name!r} (engine.max_num_batched_tokens"
                                f"{' per attention-DP rank' if pool.dp > 1 else ''})", pool.engine.stack_label,
                     "bound the prompts, raise the budget, or set engine.chunked_prefill: true"),
         "workload.input_tokens" if mi > cap or not sp_max else "workload.system_prompt.tokens")


def _check_session_lengths(sc: Scenario, lim: LengthLimit, pool: str, source) -> None:
    """Prompts the workload builds beyond ``input_tokens`` held to the pool's length limit as
    ``input_tokens`` is (a request that can exceed it is refused), counted as its stack counts it
    (``lim``: SGLang's draft slots, TensorRT-LLM's executor max_seq_len and output cut): a system
    prompt, an edited file and its typing, and sessions' turns, which end once the history passes
    it. Unchecked, a system prompt longer than the context only simulated refusals, and an
    autocomplete session inserting a billion tokens a keystroke, or a chat of a million turns,
    built prompts for minutes before any refusal; held to the bare context, a session SGLang
    refuses beside a draft passed, and one TensorRT-LLM serves was refused."""
    wl, s = sc.workload, sc.workload.session
    sp = wl.system_prompt
    sp_max, sp_min = (_max_length(sp.tokens), _min_length(sp.tokens)) if sp else (0, 0)
    mo, out_min = lim.counted(_max_length(wl.output_tokens) or 0), _min_length(wl.output_tokens)
    where = f"the {lim.limit:,}-token context of pool {pool!r}{lim.said}"

    def refuse(msg: str, key: str):
        raise LlmsimError(f"{msg} can exceed {where}", source=source, key_path=key)

    if getattr(s, "type", None) == "autocomplete":
        if lim.exceeded(s.tokens_per_keystroke, mo):
            refuse(f"one keystroke's {s.tokens_per_keystroke:,.0f} tokens", "workload.session.tokens_per_keystroke")
        file_max = _max_length(s.file_tokens)
        typed = (_max_length(s.bursts) or 0) * (_max_length(s.keystrokes) or 0) * s.tokens_per_keystroke
        if file_max is None or sp_max is None:
            return
        if lim.exceeded(sp_max + file_max, mo):
            refuse(f"a file of up to {file_max:,} tokens (with the system prompt and output)",
                   "workload.session.file_tokens")
        if lim.exceeded(sp_max + file_max + typed, mo):
            refuse(f"a file of up to {file_max:,} tokens and the {typed:,.0f} its typing adds",
                   "workload.session.tokens_per_keystroke")
        return
    mi = _max_length(wl.input_tokens)
    if sp_max and mi is not None and lim.exceeded(sp_max + mi, mo):
        refuse(f"a system prompt of up to {sp_max:,} tokens, input ({mi:,}) and output ({mo:,})",
               "workload.system_prompt.tokens")
    turns = getattr(s, "turns", None)
    if turns is None or _max_length(turns) is None:
        return
    grows = (_min_length(s.tool_result_tokens) if s.type == "agentic" else _min_length(wl.input_tokens)) + out_min
    prompt = sp_min + _min_length(wl.input_tokens)     # the first turn's, the least it can be
    # a session ends at the turn the stack refuses, or the client's max_context_tokens stops (prompt + output)
    ends = [(lim.tokens, lim.counted(out_min), where)]
    if (longest := lim.longest_prompt()) is not None:      # and at the turn whose prompt SGLang's input check refuses
        ends.append((longest, 0, where))
    client_cap = getattr(s, "max_context_tokens", None)
    if client_cap:
        ends.append((client_cap, out_min, f"{client_cap:,} tokens (session.max_context_tokens)"))
    fit, what = min((1 + max(0, cap - prompt - last) // max(grows, 1), what) for cap, last, what in ends)
    if _max_length(turns) > fit:
        raise LlmsimError(f"up to {_max_length(turns):,} turns, but a session ends when its history passes "
                          f"{what}, after at most {fit:,} turns of at least {grows:,} tokens each",
                          source=source, key_path="workload.session.turns")


def _check_system_prompt(sc: Scenario, source) -> None:
    """Dynamic content placed past the longest system prompt would never sit
    in one: every prompt would be shared whole, which is not what was written."""
    spec = sc.workload.system_prompt
    if spec is None or spec.dynamic is None:
        return
    longest = _max_length(spec.tokens)
    if longest is not None and spec.dynamic.at_token >= longest:
        raise LlmsimError(f"at_token {spec.dynamic.at_token} lies at or past the end of the longest system prompt "
                          f"({longest} tokens), so no prompt would hold the dynamic content; place it inside "
                          f"(below {longest}) or drop dynamic", source=source,
                          key_path="workload.system_prompt.dynamic.at_token")


def _check_disaggregation(sc: Scenario, setups: list[PoolSetup], source) -> None:
    names = [p.name for p in sc.pools]
    for i, p in enumerate(sc.pools):
        d = p.disaggregation
        if d is None:
            continue
        key = f"pools[{i}].disaggregation.decode_pool"
        if d.decode_pool not in names or d.decode_pool == p.name:
            raise LlmsimError(f"decode_pool must name another pool (pools: {', '.join(names)})",
                              source=source, key_path=key)
        j = names.index(d.decode_pool)
        q = sc.pools[j]
        if q.lora is not None:
            raise LlmsimError(f"pool {q.name!r} serves LoRA adapters; LoRA beside disaggregation is not modelled",
                              source=source, key_path=key)
        if q.disaggregation is not None:
            raise LlmsimError(f"pool {q.name!r} prefills for another pool itself; a decode pool must decode",
                              source=source, key_path=key)
        a, b = setups[i].cm, setups[j].cm
        if a.model.name != b.model.name or p.engine.kv_dtype != q.engine.kv_dtype:
            raise LlmsimError(f"the KV of {a.model.name} ({p.engine.kv_dtype}) cannot be decoded by pool "
                              f"{q.name!r} ({b.model.name}, {q.engine.kv_dtype}): both pools need the same model "
                              f"and kv_dtype", source=source, key_path=key)
        refusal = _handoff_refusal(setups[i], setups[j])
        if refusal:
            raise LlmsimError(refusal, source=source, key_path=key)
        refusal = nvlink_refusal(p, q, a.gpu, b.gpu)
        if refusal:
            raise LlmsimError(refusal, source=source, key_path=f"pools[{i}].disaggregation.link.preset")
        if p.tp != q.tp and _window_state_same_tp(setups[i]):
            raise LlmsimError(f"pool {p.name!r} prefills {a.model.name} at tp {p.tp} for pool {q.name!r} at tp "
                              f"{q.tp}: {setups[i].spec.engine.stack_label} sends its hybrid pool's "
                              f"sliding-window state only between equal tp and fails the transfer "
                              f"(engine.swa_handoff_across_tp: false); set tp alike on both, use a release that "
                              f"sends it across tp, or kv_memory.swa_full_tokens_ratio: 1 "
                              f"(--disable-hybrid-swa-memory)", source=source, key_path=f"pools[{i}].tp")
        if p.engine.block_size != q.engine.block_size and _same_pages_stack(p, q):
            # SGLang's decode server refuses a prefill server of another page size as it connects
            # (disaggregation/common/conn.py: "Page size mismatch ... Both servers must use the same
            # --page-size value"); its default page differs by GPU (trtllm_mha / trtllm_mla on Blackwell)
            raise LlmsimError(f"pool {p.name!r} prefills in {p.engine.block_size}-token pages and pool "
                              f"{q.name!r} decodes in {q.engine.block_size}-token pages; SGLang's decode server "
                              f"refuses a prefill server of another page size: set engine.block_size alike on "
                              f"both", source=source, key_path=key)


def _handoff_refusal(prefill: PoolSetup, decode: PoolSetup) -> str:
    """Why a prefill pool's stack could not hand its KV to its decode pool's ("" if it could): each
    stack's hand-off speaks only to its own kind (SGLang's bootstrap server and transfer engine,
    vLLM's KV connector, TensorRT-LLM's cache transceiver), and vLLM's decode server refuses a
    prefill server whose release or attention kernel differs (``handoff_hash_since``,
    ``attention_kernels``). llmsim's generic engine, a stack of none, pairs with any."""
    from ..profiles.backend import load_backend

    p, q = prefill.spec, decode.spec
    if p.engine.backend is None or q.engine.backend is None:
        return ""
    a, b = load_backend(p.engine.backend), load_backend(q.engine.backend)
    if a.stack != b.stack:
        return (f"pool {p.name!r} runs {a.stack} and pool {q.name!r} runs {b.stack}: a prefill server hands its "
                f"KV only to a decode server of its own stack; set engine.backend alike on both")
    ra, rb = a.release_run(p.engine.backend_version), b.release_run(q.engine.backend_version)
    if not (a.hashes_handoff(ra) or b.hashes_handoff(rb)):
        return ""
    why = f"{b.stack}'s decode server refuses a prefill server of another"
    if ra != rb:
        return (f"pool {p.name!r} runs {a.stack} {ra} and pool {q.name!r} {b.stack} {rb}: {why} release as they "
                f"connect (from {b.handoff_hash_since}); set engine.backend_version alike on both")
    ka, kb = (prof.attention_kernel(_release_keys(prof, ps.spec.engine.backend_version), ps.cm.gpu, ps.cm.model,
                                    ps.spec.speculative is not None, ps.spec.engine.kv_dtype)
              for prof, ps in ((a, prefill), (b, decode)))
    if ka is not None and kb is not None and ka.kernel != kb.kernel:
        return (f"pool {p.name!r} runs {a.stack}'s {ka.kernel} attention on {p.gpu} and pool {q.name!r} "
                f"{kb.kernel} on {q.gpu}: {why} attention kernel as they connect (from {b.handoff_hash_since}); "
                f"pair GPUs on which the stack runs one kernel")
    return ""


def _release_keys(prof: BackendProfile, version: Optional[str]) -> dict:
    """The keys of the release a pool names (none: the profile's own, an empty mapping)."""
    return (prof.version_keys(version) or {}) if version else {}


def _window_state_same_tp(ps: PoolSetup) -> bool:
    """Whether a prefill pool hands its sliding-window layers' window over as a state that its stack
    sends only to a decode pool of its own tp (SGLang's hybrid SWA pool before 0.5.22:
    ``engine.swa_handoff_across_tp``); a pool keeping every layer's every token sends none."""
    ratio = swa_tokens_ratio(ps.spec.engine.kv_memory, ps.cm.model.num_sliding_layers)
    return not ps.spec.engine.swa_handoff_across_tp and ratio is not None and ratio < 1


def _same_pages_stack(p: PoolSpec, q: PoolSpec) -> bool:
    """Whether a disaggregated pair's stack needs both sides to page the KV alike (SGLang)."""
    from ..profiles.backend import load_backend

    return (p.engine.backend is not None and q.engine.backend is not None
            and load_backend(p.engine.backend).stack == load_backend(q.engine.backend).stack == "sglang")


def _check_every_pool_serves(sc: Scenario, routes: dict[str, str], decodes_on: dict[str, str], source) -> None:
    """Refuse a pool no request can reach: it would be built and billed for
    the whole window while serving nothing, and the month's bill would carry
    it without a word (a class re-routed by a --set leaves its old pool so).
    ``decodes_on``: each prefill pool's decode pool, which its classes reach."""
    reached = set(routes.values())
    reached.update(st.pool for c in sc.classes for st in (c.pool_by_input_length or []))
    reached.update(decodes_on[name] for name in list(reached) if name in decodes_on)
    for i, p in enumerate(sc.pools):
        if p.name not in reached:
            into = [a for a, b in decodes_on.items() if b == p.name]
            how = (f"no class routes to pool {into[0]!r}, which prefills for it" if into
                   else f"no class routes to pool {p.name!r}")
            raise LlmsimError(f"{how}: it would be billed and serve nothing; route a class to it or remove it",
                              source=source, key_path=f"pools[{i}]")


def _length_routes(sc: Scenario, i: int, c, source) -> str:
    """Check a class's routing by prompt length; returns its last pool (the
    one that takes every prompt the others do not, and whose admission
    would apply)."""
    key = f"classes[{i}].pool_by_input_length"
    pools = {p.name: p for p in sc.pools}
    steps = c.pool_by_input_length
    if c.pool is not None:
        raise LlmsimError(f"class {c.name!r} sets both pool and pool_by_input_length; keep one", source=source,
                          key_path=f"classes[{i}].pool")
    for what in ("admission", "kv_budget_fraction", "speculative_acceptance_rate"):
        if getattr(c, what) is not None:
            raise LlmsimError(f"class {c.name!r} is routed by prompt length over several pools; its {what} "
                              "would hold on one of them only, which is not modelled", source=source,
                              key_path=f"classes[{i}].{what}")
    bounds = [s.below_tokens for s in steps]
    if bounds[-1] is not None or None in bounds[:-1] or any(b <= a for a, b in zip(bounds[:-2], bounds[1:-1])):
        raise LlmsimError("every step but the last needs below_tokens, increasing; the last takes the rest and "
                          f"has none (got {bounds})", source=source, key_path=key)
    for j, st in enumerate(steps):
        if st.pool not in pools:
            raise LlmsimError(f"pool {st.pool!r} does not exist (pools: {', '.join(pools)})", source=source,
                              key_path=f"{key}[{j}].pool")
        if pools[st.pool].disaggregation is not None:
            raise LlmsimError(f"pool {st.pool!r} prefills for another pool; routing by prompt length to a "
                              "disaggregated pair is not modelled", source=source, key_path=f"{key}[{j}].pool")
    return steps[-1].pool


def class_routes(sc: Scenario, source: str | Path | None = None) -> dict[str, str]:
    """Class name → pool name; every class must reach exactly one pool."""
    names = [p.name for p in sc.pools]
    if not sc.classes:
        if len(names) > 1:
            raise LlmsimError(f"{len(names)} pools but no classes: declare classes and route each to a pool "
                              f"(classes: [{{name: ..., pool: {names[0]}}}, ...])", source=source, key_path="classes")
        return {"default": names[0]}
    routes = {}
    for i, c in enumerate(sc.classes):
        if c.name in routes:
            raise LlmsimError(f"two classes are named {c.name!r}", source=source, key_path=f"classes[{i}].name")
        if c.pool_by_input_length is not None:
            routes[c.name] = _length_routes(sc, i, c, source)
            continue
        if c.pool is None:
            if len(names) > 1:
                raise LlmsimError(f"class {c.name!r} is routed to no pool: set its pool to one of "
                                  f"{', '.join(names)}", source=source, key_path=f"classes[{i}].pool")
            routes[c.name] = names[0]
        elif c.pool not in names:
            raise LlmsimError(f"class {c.name!r} is routed to pool {c.pool!r}, which does not exist "
                              f"(pools: {', '.join(names)})", source=source, key_path=f"classes[{i}].pool")
        else:
            routes[c.name] = c.pool
    return routes


def _check_classes(sc: Scenario, routes: dict[str, str], source) -> tuple[dict[str, SloSpec], dict[str, SloSpec]]:
    """Class and input-length bucket SLOs parse, and admission never sheds a
    higher class before a lower one sharing its pool: limits may not shrink
    as priority grows. Returns each class's and each bucket's SLO, parsed."""
    slos, buckets = {}, {}
    for i, c in enumerate(sc.classes):
        try:
            slos[c.name] = parse_slo(c.slo)
        except LlmsimError as e:
            raise LlmsimError(e.message, source=source, key_path=f"classes[{i}].{e.key_path}") from None
    for label, slo in (sc.input_length_buckets.slo if sc.input_length_buckets else {}).items():
        try:
            buckets[label] = parse_slo(slo)
        except LlmsimError as e:
            raise LlmsimError(e.message, source=source,
                              key_path=f"input_length_buckets.slo.{label}.{(e.key_path or '').removeprefix('slo.')}") from None
    for i, c in enumerate(sc.classes):
        for j, d in enumerate(sc.classes):
            if routes[d.name] != routes[c.name] or d.priority <= c.priority:
                continue
            lc = c.admission.limits() if c.admission else (float("inf"),) * 2
            ld = d.admission.limits() if d.admission else (float("inf"),) * 2
            if any(x < y for x, y in zip(ld, lc)):
                raise LlmsimError(f"class {d.name!r} (priority {d.priority}) would be shed before {c.name!r} "
                                  f"(priority {c.priority}): a higher class's admission limits must be at least "
                                  f"the lower one's", source=source, key_path=f"classes[{j}].admission")
    return slos, buckets


def _check_regions(sc: Scenario, source) -> None:
    """Region names differ, and every region a class gives latencies for is declared."""
    names = [r.name for r in sc.regions]
    for i, n in enumerate(names):
        if names.index(n) != i:
            raise LlmsimError(f"two regions are named {n!r}", source=source, key_path=f"regions[{i}].name")
    for i, c in enumerate(sc.classes):
        for r in c.network.regions:
            if r not in names:
                declared = f"declared: {', '.join(names)}" if names else "the scenario declares no regions"
                raise LlmsimError(f"class {c.name!r} gives network latencies for region {r!r}, which is not "
                                  f"declared ({declared}: top-level regions: [{{name, share}}, ...])", source=source,
                                  key_path=f"classes[{i}].network.regions.{r}")


def _class_speculation(setups: list[PoolSetup], classes: Sequence[ClassSpec], routes: dict[str, str],
                       source: str | Path | None = None) -> list[PoolSetup]:
    """The setups with each class's own speculative acceptance rate given to
    the pool that decodes it (its pool, or that pool's decode pool when it
    only prefills); a class setting one where no draft model runs is an error."""
    index = {ps.spec.name: i for i, ps in enumerate(setups)}
    rates: dict[int, dict[str, float]] = {}
    for j, c in enumerate(classes):
        if c.speculative_acceptance_rate is None:
            continue
        i = index[routes[c.name]]
        d = setups[i].spec.disaggregation
        if d is not None:
            i = index[d.decode_pool]
        if setups[i].spec.speculative is None:
            raise LlmsimError(f"class {c.name!r} sets speculative_acceptance_rate but pool "
                              f"{setups[i].spec.name!r}, which decodes it, has no speculative decoding (set "
                              f"pools[{i}].speculative)", source=source,
                              key_path=f"classes[{j}].speculative_acceptance_rate")
        rates.setdefault(i, {})[c.name] = c.speculative_acceptance_rate
    return [replace(ps, cm=ps.cm.with_class_rates(rates[i])) if i in rates else ps for i, ps in enumerate(setups)]


def base_dir(source: str | Path | None) -> Path | None:
    """The scenario's folder, against which relative trace paths resolve."""
    return Path(source).parent if isinstance(source, Path) else None
