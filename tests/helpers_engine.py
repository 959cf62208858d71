"""Shared helpers for the engine tests: drive a Pool directly with custom
requests, and compare two runs request by request.

Imported by tests/test_engine_*.py and tests/test_queueing.py as a plain
module (``from helpers_engine import ...``): tests/ has no __init__.py, so
pytest's default "prepend" import mode puts it on sys.path.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Optional, Sequence

import numpy as np
import simpy
from hypothesis import strategies as st
from simpy.events import URGENT

from simulator.costmodel import CostModel
from simulator.engine.blocks import ceil_div
from simulator.engine.config import EngineConfig
from simulator.fleet.pool import Pool
from simulator.fleet.routing import make_router
from simulator.hybrid_kv import SlidingGroups
from simulator.metrics.gaps import GapLog
from simulator.profiles import load_hardware, load_model
from workloads.drivers import ClosedLoop, OpenLoop
from workloads.request import Request, Status

# (model, gpu, tp, roofline): a few physically different cost models, so the
# affine decode coefficients (and a zero iteration overhead) vary.
COST_MODELS = [
    ("llama-3-8b", "h100-sxm", 1, False),
    ("llama-3.2-1b", "l40s", 1, False),
    ("llama-2-13b", "a100-sxm-80gb", 2, True),
]


@lru_cache(maxsize=None)
def cost_model(model: str = "llama-3-8b", gpu: str = "h100-sxm", tp: int = 1, roofline: bool = False) -> CostModel:
    return CostModel(load_model(model), load_hardware(gpu), tp, roofline=roofline)


@dataclass
class Run:
    requests: list[Request]
    gaps: GapLog
    pool: Pool
    env: simpy.Environment
    done_calls: dict[int, int] = field(default_factory=dict)
    # Each replica's KV blocks in use (kv_used_now) as each request arrived: what an autoscaler
    # watching KV and vLLM's kv_weighted_load DP placement read mid-iteration.
    kv_at_arrivals: list[tuple[int, ...]] = field(default_factory=list)

    def stats(self) -> list[dict]:
        return [r.stats(self.pool.end_time()) for r in self.pool.replicas]


def make_requests(arrivals: Sequence[float], inputs: Sequence[int], outputs: Sequence[int]) -> list[Request]:
    return [Request(i, float(a), int(x), int(y)) for i, (a, x, y) in enumerate(zip(arrivals, inputs, outputs))]


def clone(requests: Sequence[Request]) -> list[Request]:
    out = [Request(r.id, r.arrival, r.input_tokens, r.output_tokens, klass=r.klass, priority=r.priority,
                   blocks=r.blocks, shared_ids=r.shared_ids) for r in requests]
    for c, r in zip(out, requests):
        c.adapter = r.adapter
        c.preloaded = r.preloaded
    return out


def _logging_kv(pool: Pool) -> tuple[Callable[[Request], None], list[tuple[int, ...]]]:
    """``pool.submit`` that first logs each replica's KV blocks in use (``Run.kv_at_arrivals``), and the log."""
    log: list[tuple[int, ...]] = []

    def submit(req: Request) -> None:
        log.append(tuple(r.kv_used_now(pool.env.now) for r in pool.replicas))
        pool.submit(req)
    return submit, log


def run_open(engine: str, requests: Sequence[Request], cfg: EngineConfig, num_blocks: int, *, replicas: int = 1,
             router: str = "round_robin", router_seed: int = 0, cm: Optional[CostModel] = None,
             env: Optional[simpy.Environment] = None,
             on_done: Optional[Callable[[Request], None]] = None, id_block_tokens: Optional[int] = None,
             cancels: Sequence[tuple[float, int]] = (), kv_budgets: Optional[dict[str, int]] = None,
             offload=None, lora=None, windows: Optional[SlidingGroups] = None, dp: int = 1,
             admission: Optional[dict] = None, rank_blocks: Optional[int] = None,
             handoff_s: Optional[Callable[[Request], float]] = None) -> Run:
    """Run fresh copies of ``requests`` (open loop) through a pool; each
    ``(t, id)`` in ``cancels`` cancels request ``id`` at time t (if it has arrived). With
    ``handoff_s`` the pool is a pair's prefill pool: a finished request's KV is held for
    ``handoff_s(request)`` seconds after it ends (its hand-off), as :class:`PrefillDecode` holds it."""
    reqs = clone(requests)
    env = env or simpy.Environment()
    gaps = GapLog()
    calls: dict[int, int] = {}

    def done(req: Request) -> None:
        calls[req.id] = calls.get(req.id, 0) + 1
        if handoff_s is not None:
            env.timeout(handoff_s(req) if req.status is Status.FINISHED else 0.0).callbacks.append(
                lambda _ev: pool.release_handoff(req))
        if on_done is not None:
            on_done(req)

    pool = Pool(env, cm or cost_model(), cfg, num_blocks, replicas,
                make_router(router, np.random.default_rng(router_seed)), gaps, engine, done,
                id_block_tokens=id_block_tokens, kv_budgets=kv_budgets, offload=offload, lora=lora,
                windows=windows, dp=dp, admission=admission, rank_blocks=rank_blocks)
    if handoff_s is not None:
        pool.hold_handoffs()
    submit, kv_log = _logging_kv(pool)
    OpenLoop(reqs).start(env, submit, pool.cancel)
    for t, i in cancels:   # client events, URGENT like arrivals
        ev = simpy.Event(env)
        ev._ok, ev._value = True, None
        ev.callbacks.append(lambda ev, req=reqs[i]: pool.cancel(req))
        env.schedule(ev, URGENT, t)
    env.run()
    return Run(reqs, gaps, pool, env, calls, kv_log)


def run_closed(engine: str, concurrency: int, inputs: Sequence[int], outputs: Sequence[int], cfg: EngineConfig,
               num_blocks: int, *, cm: Optional[CostModel] = None,
               windows: Optional[SlidingGroups] = None) -> Run:
    """A closed loop of ``concurrency`` users on one replica."""
    env = simpy.Environment()
    gaps = GapLog()
    calls: dict[int, int] = {}
    holder: list[ClosedLoop] = []

    def done(req: Request) -> None:
        calls[req.id] = calls.get(req.id, 0) + 1
        holder[0].on_done(req)

    pool = Pool(env, cm or cost_model(), cfg, num_blocks, 1, make_router("round_robin", np.random.default_rng(0)),
                gaps, engine, done, windows=windows)
    loop = ClosedLoop(concurrency, len(inputs), lambda i, now: Request(i, now, int(inputs[i]), int(outputs[i])))
    holder.append(loop)
    submit, kv_log = _logging_kv(pool)   # (a closed loop's arrivals come as a request ends, in an iteration's end)
    loop.start(env, submit, pool.cancel)
    env.run()
    return Run(loop.requests, gaps, pool, env, calls, kv_log)


def mean_itl(gaps: GapLog) -> float:
    w = np.asarray(gaps.weight)
    if w.sum() == 0:
        return math.nan
    return float((w * (np.asarray(gaps.lo) + np.asarray(gaps.hi)) / 2.0).sum() / w.sum())


def close(x: float, y: float, rel: float = 1e-7, abs_: float = 1e-9) -> bool:
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    return math.isclose(x, y, rel_tol=rel, abs_tol=abs_)


STAMPS = ("admitted", "first_token", "finish")


def compare_runs(fast: Run, ref: Run, kv_used: bool = True) -> list[str]:
    """Every disagreement between two runs of the same workload, as text
    (empty when they agree); the first few per kind are enough to debug.
    ``kv_used``: compare the blocks held too (not where the runs allocate differently by design)."""
    problems: list[str] = []
    if len(fast.requests) != len(ref.requests):
        return [f"request count {len(fast.requests)} != {len(ref.requests)}"]
    for a, b in zip(fast.requests, ref.requests):
        if a.arrival != b.arrival and not close(a.arrival, b.arrival):
            problems.append(f"req {a.id}: arrival {a.arrival!r} != {b.arrival!r}")
        if a.status != b.status:
            problems.append(f"req {a.id}: status {a.status.name} != {b.status.name}")
        if a.reject_reason != b.reject_reason:
            problems.append(f"req {a.id}: reject_reason {a.reject_reason!r} != {b.reject_reason!r}")
        if a.replica != b.replica:
            problems.append(f"req {a.id}: replica {a.replica} != {b.replica}")
        if a.preemptions != b.preemptions:
            problems.append(f"req {a.id}: preemptions {a.preemptions} != {b.preemptions}")
        if a.cached_tokens != b.cached_tokens:
            problems.append(f"req {a.id}: cached_tokens {a.cached_tokens} != {b.cached_tokens}")
        for f in STAMPS:
            x, y = getattr(a, f), getattr(b, f)
            if not close(x, y):
                problems.append(f"req {a.id}: {f} fast={x!r} ref={y!r}")
    for i, (sa, sb) in enumerate(zip(fast.stats(), ref.stats())):
        if sa["preemptions"] != sb["preemptions"]:
            problems.append(f"replica {i}: preemptions {sa['preemptions']} != {sb['preemptions']}")
        if sa["iterations"] != sb["iterations"]:
            problems.append(f"replica {i}: iterations {sa['iterations']} != {sb['iterations']}")
        if not close(sa["busy_time"], sb["busy_time"]):
            problems.append(f"replica {i}: busy_time {sa['busy_time']!r} != {sb['busy_time']!r}")
        # Time averages of the waiting queue and the running batch (results.json's
        # mean_queue_depth / mean_batch_size) and their maxima.
        for k in ("queue_mean", "batch_mean"):
            if not close(sa[k], sb[k], rel=1e-6):
                problems.append(f"replica {i}: {k} {sa[k]!r} != {sb[k]!r}")
        if sa["prefix_cache"] != sb["prefix_cache"]:
            problems.append(f"replica {i}: prefix cache {sa['prefix_cache']} != {sb['prefix_cache']}")
        for k in ("queue_max", "batch_max"):
            if sa[k] != sb[k]:
                problems.append(f"replica {i}: {k} {sa[k]!r} != {sb[k]!r}")
        # Blocks held (reserved, with contiguous KV or static batching) and, with contiguous KV, filled by tokens.
        for k in (("kv_used",) if kv_used else ()) + (("kv_filled",) if "kv_filled_area" in sa or "kv_filled_area" in sb else ()):
            if sa.get(k + "_max") != sb.get(k + "_max"):
                problems.append(f"replica {i}: {k}_max {sa.get(k + '_max')!r} != {sb.get(k + '_max')!r}")
            if not close(sa.get(k + "_area", math.nan), sb.get(k + "_area", math.nan), rel=1e-6):
                problems.append(f"replica {i}: {k}_area {sa.get(k + '_area')!r} != {sb.get(k + '_area')!r}")
    if kv_used:
        for k, (a, b) in enumerate(zip(fast.kv_at_arrivals, ref.kv_at_arrivals)):
            if a != b:
                problems.append(f"KV blocks in use at arrival {k}: fast {a} != reference {b}")
                break
    wa, wb = sum(fast.gaps.weight), sum(ref.gaps.weight)
    if wa != wb:
        problems.append(f"ITL sample count {wa} != {wb}")
    ma, mb = mean_itl(fast.gaps), mean_itl(ref.gaps)
    if not close(ma, mb):
        problems.append(f"mean ITL {ma!r} != {mb!r}")
    if wa and wb:
        # Each segment's gaps run from lo to hi, so the extremes are exact.
        extremes = (("max", max(fast.gaps.hi), max(ref.gaps.hi)), ("min", min(fast.gaps.lo), min(ref.gaps.lo)))
        for what, fa, fb in extremes:
            if not close(fa, fb):
                problems.append(f"{what} ITL {fa!r} != {fb!r}")
    for run, name in ((fast, "fast"), (ref, "reference")):
        for r in run.requests:
            if run.done_calls.get(r.id, 0) != 1:
                problems.append(f"{name}: on_done called {run.done_calls.get(r.id, 0)} times for req {r.id}")
    return problems


def most_decoding(reqs: Sequence[Request]) -> int:
    """The most requests between their first token and their end at once (the largest decode batch
    a run held, were every such request in it)."""
    events = sorted([(r.first_token, 1) for r in reqs] + [(r.finish, -1) for r in reqs])
    decoding = peak = 0
    for _, step in events:
        decoding += step
        peak = max(peak, decoding)
    return peak


def finished(reqs: Sequence[Request]) -> list[Request]:
    return [r for r in reqs if r.status == Status.FINISHED]


def describe(requests: Sequence[Request], cfg: EngineConfig, num_blocks: int, **kw) -> str:
    """A copy-pasteable reproduction of a failing case."""
    rows = ", ".join(f"({r.arrival!r}, {r.input_tokens}, {r.output_tokens}, {r.priority})" for r in requests)
    return (f"cfg=EngineConfig(**{cfg.model_dump(exclude_defaults=True)!r}), num_blocks={num_blocks}, {kw}, "
            f"requests=[(arrival, in, out, priority)]=[{rows}]")


# --- hypothesis strategies ------------------------------------------------------
@st.composite
def arrivals(draw, n: int) -> list[float]:
    """Arrival times with ties (gap 0), bursts and idle stretches."""
    # one_of picks a branch uniformly: mostly overlapping requests (a decode
    # step is ~10 ms), sometimes an idle replica.
    gap = st.one_of(
        st.just(0.0),
        st.just(0.0),
        st.floats(0.0, 0.01, allow_nan=False),
        st.floats(0.0, 0.01, allow_nan=False),
        st.floats(0.0, 0.1, allow_nan=False),
        st.floats(0.0, 0.1, allow_nan=False),
        st.floats(0.0, 1.0, allow_nan=False),
        st.floats(0.0, 5.0, allow_nan=False),
    )
    start = draw(st.one_of(st.just(0.0), st.floats(0.0, 5.0, allow_nan=False)))
    t, out = start, []
    for _ in range(n):
        t += draw(gap)
        out.append(t)
    return out


@st.composite
def workloads(draw, min_n: int = 5, max_n: int = 60, max_in: int = 3000, max_out: int = 300):
    n = draw(st.integers(min_n, max_n))
    t = draw(arrivals(n))
    # Mostly short prompts with some long ones, so several fit side by side.
    inp = draw(st.lists(st.one_of(st.integers(1, 64), st.integers(1, max_in)), min_size=n, max_size=n))
    out = draw(st.lists(st.one_of(st.integers(1, 8), st.integers(1, max_out), st.integers(max_out * 2 // 3, max_out)),
                        min_size=n, max_size=n))
    reqs = make_requests(t, inp, out)
    # One draw in three mixes request classes: the queue serves the higher first and KV
    # pressure preempts the lower.
    if draw(st.sampled_from([False, False, True])):
        for r, p in zip(reqs, draw(st.lists(st.integers(-1, 2), min_size=n, max_size=n))):
            r.priority = p
    return reqs


@st.composite
def engine_configs(draw, scheduler=None, chunked=None, kv=None, admission=None) -> EngineConfig:
    scheduler = scheduler or draw(st.sampled_from(["continuous", "continuous", "static"]))
    chunked = draw(st.booleans()) if chunked is None else chunked
    seqs = draw(st.integers(1, 64))
    budget = draw(st.one_of(st.integers(seqs, max(seqs, 64)), st.integers(max(seqs, 16), 512),
                            st.just(8192)))
    if scheduler == "static" and draw(st.booleans()):
        budget = draw(st.integers(1, 512))   # static batching allows a budget below max_num_seqs
    bs = draw(st.sampled_from([1, 4, 16, 32]))
    # Chunks beside the decodes (vLLM) or in prefill-only iterations (SGLang); without chunking,
    # whole prompts either run alone (SGLang --chunked-prefill-size -1) or in flight with the
    # decodes (TensorRT-LLM).
    mixed = draw(st.sampled_from([None, None, False])) if chunked else draw(st.sampled_from([None, False, True]))
    # Contiguous KV (one draw in four) reserves prompt + max_new_tokens; a
    # request asking for more output is rejected.
    contiguous = draw(st.sampled_from([False, False, False, True])) if kv is None else kv == "contiguous"
    extra = dict(kv_allocation="contiguous", prefix_cache=False,
                 max_new_tokens=draw(st.sampled_from([8, 64, 300, 600]))) if contiguous else {}
    # TensorRT-LLM's GUARANTEED_NO_EVICT: admission reserves each request's whole output (paged,
    # continuous batching only).
    # SGLang's admission on the running requests' expected output, with a ratio that decays
    # within a few iterations and a clip the drawn outputs cross.
    # SGLang's decode server: a reserve per running request, the running requests' longest finish
    # and, retracted, a place ahead of the rest (its requests usually carry their prompt's KV).
    if scheduler == "continuous" and not contiguous:
        admission = admission or draw(st.sampled_from(["on_demand", "on_demand", "reserve_output",
                                                       "expected_output", "decode_reservation"]))
        if admission != "on_demand":
            extra["kv_admission"] = admission
        if admission == "expected_output":
            extra.update(new_token_ratio_init=draw(st.sampled_from([None, 0.3, 1.0])),
                         new_token_ratio_decay_steps=draw(st.sampled_from([3, 40, 600])),
                         output_estimate_clip=draw(st.sampled_from([50, 4096])),
                         retract_decode_steps=draw(st.sampled_from([0, 20])),
                         full_until_leave=draw(st.booleans()))
        if admission == "decode_reservation":
            extra.update(reserved_decode_tokens=draw(st.sampled_from([0, 16, 512])),
                         output_estimate_clip=draw(st.sampled_from([50, 4096])))
    # vLLM V1's prompt KV, chunk by chunk behind its whole-prompt admission gate.
    if (scheduler == "continuous" and chunked and not contiguous and "kv_admission" not in extra
            and draw(st.booleans())):
        extra["prompt_kv"] = "per_chunk"
        # from vLLM 0.20 the gate caps a sliding-window group's blocks, from 0.26 they go back once processed
        extra["sliding_window_kv"] = draw(st.sampled_from(["prompt", "capped", "processed"]))
    # vLLM 0.6's multi-step scheduling: prefill-only steps between decode blocks.
    if (scheduler == "continuous" and not chunked and not mixed
            and extra.get("kv_admission") not in ("expected_output", "decode_reservation") and draw(st.booleans())):
        extra["num_scheduler_steps"] = draw(st.sampled_from([2, 3, 8]))
    # SGLang's --max-prefill-tokens beside its chunk: a second prompt joins only under what is left of it.
    if scheduler == "continuous" and chunked and draw(st.sampled_from([False, False, True])):
        extra["max_prefill_tokens"] = draw(st.integers(1, 600))
    # TensorRT-LLM before #11490 / #11637: a prefix-cache hit spares no blocks, or no budget tokens.
    if not contiguous and draw(st.sampled_from([False, False, True])):
        extra["prefix_reuse_credit"] = draw(st.sampled_from(["blocks", "none"]))
    # TensorRT-LLM's capacity scheduler: a prompt computing another's first new block waits a pass.
    if not contiguous and draw(st.sampled_from([False, False, True])):
        extra["defers_shared_context"] = True
        extra["defers_behind_chunks"] = True    # ... and behind a prompt being chunked, as its newest releases
    # TensorRT-LLM's chunks cut to whole blocks (a budget of at least one block).
    if chunked and budget >= bs and draw(st.sampled_from([False, False, True])):
        extra["chunks_whole_blocks"] = True
    # vLLM from 0.28 beside a separate draft model: each request an iteration schedules takes a
    # budget slot beside its tokens (a budget holding every sequence's decode and slot).
    if (scheduler == "continuous" and "max_prefill_tokens" not in extra and budget >= 2 * seqs
            and draw(st.sampled_from([False, False, True]))):
        extra.update(draft_budget_slots=1, draft_budget_per="scheduled_request")
    # SGLang's overlap scheduler before 0.5.4: outputs wait for the next launch.
    if draw(st.sampled_from([False, False, False, True])):
        extra["output_after_next_launch"] = True
    # Overlap schedulers (vLLM async scheduling, SGLang, TensorRT-LLM): new requests join the iteration after next.
    if scheduler == "continuous" and draw(st.sampled_from([False, False, True])):
        extra["schedule_ahead"] = True
    return EngineConfig(scheduler=scheduler, chunked_prefill=chunked, max_num_seqs=seqs,
                        max_num_batched_tokens=budget, block_size=bs, mixed_prefill=mixed, **extra)


def check_reservation(rep, where: str) -> None:
    """Reserving outputs: the running sequences' final KV (their own blocks and
    windows plus the cache entries they pin) fits the capacity, so nothing is
    ever preempted."""
    pinned = rep.cache.pinned if rep.cache is not None else 0
    assert sum(rep.rank_pinned) == pinned, f"{where}: the ranks' pinned blocks are not the cache's"
    if not rep.no_evict:
        assert rep.reserved == [0] * rep.dp, where
        return
    for r in range(rep.dp):     # each attention-DP rank's own pool
        own_final = sum(ceil_div(s.req.input_tokens + s.req.output_tokens, rep.bs) + rep.window_blocks - s.pin_blocks
                        for s in rep.running if s.rank == r)
        assert rep.reserved[r] == own_final, where
        assert rep.rank_pinned[r] + rep.reserved[r] <= rep.rank_pool, f"{where}: reservations exceed the KV capacity"
    assert rep.preemptions == 0, f"{where}: a sequence was preempted though outputs are reserved"


def one_request_need(req, cfg: EngineConfig) -> int:
    """KV blocks one request needs to complete alone (as ``can_ever_serve``;
    contiguous KV with ``max_new_tokens``: the reservation)."""
    if cfg.max_new_tokens is not None:
        return ceil_div(req.input_tokens + cfg.max_new_tokens, cfg.block_size)
    if cfg.expects_output:   # its prompt and expected output less than the pool, a block's slack included
        return ceil_div(req.input_tokens + req.output_tokens, cfg.block_size) + 1
    if cfg.reserves_decode:  # its prompt, whole output and the reserve, a block's slack included
        return ceil_div(req.input_tokens + req.output_tokens + cfg.reserved_decode_tokens, cfg.block_size) + 1
    need = req.input_tokens + req.output_tokens - (0 if cfg.scheduler == "static" or cfg.reserves_output else 1)
    return ceil_div(max(need, 1), cfg.block_size)


@st.composite
def sliding_windows(draw, block_size: int, none: bool = True) -> Optional[SlidingGroups]:
    """Sliding-window groups drawing blocks from the pool beside each sequence's own (vLLM's
    shared pool, simulator.hybrid_kv): none mostly, else a window of a few tokens to gpt-oss's
    128 (its nine 16-token blocks a sequence), in groups holding from half to five times as
    many layers as the full-attention ones, so prompts longer than the window hold more than
    a window while they are prefilled."""
    if none and draw(st.sampled_from([False, False, True])):
        return None
    window = draw(st.sampled_from([2, 9, 40, 128]))
    layers, full = draw(st.sampled_from([(18, 18), (30, 6), (20, 16), (6, 12)]))
    return SlidingGroups(window, block_size, layers, full)


def steady(windows: Optional[SlidingGroups]) -> int:
    """The blocks a decoding sequence's windows hold (0 without)."""
    return 0 if windows is None else windows.steady


@st.composite
def capacities(draw, reqs, cfg: EngineConfig) -> int:
    """KV blocks: from less than the largest request needs (it is rejected)
    to plenty (no preemption), concentrated where preemption happens."""
    needs = sorted(one_request_need(r, cfg) for r in reqs)
    big = needs[-1]
    total = sum(needs)
    kind = draw(st.sampled_from(["below", "tight", "tight", "tight", "roomy", "huge"]))
    if kind == "below":       # the biggest requests are rejected, the rest crowd in
        return draw(st.integers(max(1, big // 4), big))
    if kind == "tight":       # everything fits alone; together they preempt
        return draw(st.integers(big, big + max(1, (total - big) // 4)))
    if kind == "roomy":
        return draw(st.integers(big, max(big, total)))
    return 10 * total + 10
