"""The prefix cache: unit behaviour, fast engine == reference with the cache
and cancellations, and the cache's invariants (pinned blocks stay cached, the cache fits the KV memory).

Workloads here give requests chained block ids built from a few shared
heads ("apps") and per-request tails, so hits, partial hits, evictions under
KV pressure and recomputes after preemption all occur. Cancellations land
on queued, prefilling and decoding requests.
"""
from __future__ import annotations

import heapq
import itertools
from unittest import mock

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis.control import currently_in_test_context
from hypothesis import strategies as st

from helpers_engine import (COST_MODELS, check_reservation, close, compare_runs, cost_model, describe, make_requests,
                            run_open, workloads)
from simulator.engine.config import EngineConfig
from simulator.engine.dp_placement import RULES
from simulator.engine.prefix_cache import PrefixCache
from simulator.engine.replica import FastReplica
from simulator.engine.reference import ReferenceReplica
from workloads.request import Request, Status

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# --- unit --------------------------------------------------------------------
def cached(c: PrefixCache, ids) -> int:
    """How many leading ids are cached."""
    return c.match(ids, 10**9).ids


def check(c: PrefixCache) -> None:
    """Internal consistency: totals equal the tree's, a pinned node's parent is pinned."""
    pinned = evictable = 0
    for x in c.nodes():
        if x.lock:
            pinned += x.blocks
            assert x.parent is c.root or x.parent.lock >= x.lock
        else:
            evictable += x.blocks
        assert x.off + x.n <= len(x.ids) and x.blocks == x.n * c.u - (c.u - -(-x.tail // c.bs) if x.tail else 0)
    assert (pinned, evictable) == (c.pinned, c.evictable)


def test_match_pin_release_and_lru_order():
    c = PrefixCache(id_block_tokens=32, kv_block_size=16)
    a = (1, 2, 3, 4)
    m = c.match(a, 128)
    assert m.ids == 0
    node, n, blocks = c.acquire(a, m, 128)
    assert (n, blocks) == (4, 8) and c.pinned == 8 and c.evictable == 0
    # A second request sharing two blocks: hit, pinned already, no new memory.
    b = (1, 2, 9)
    m = c.match(b, 100)
    assert (m.ids, m.tokens, m.blocks, m.pinned_blocks) == (2, 64, 4, 4)
    assert c.cached_tokens(b, 100) == 64
    nb, _, _ = c.acquire(b, m, 100)       # splits a's run after two ids
    check(c)
    c.release(node, a, 4)
    assert c.pinned == 6 and c.evictable == 4   # a's tail (3, 4) is free; the shared head is b's too
    check(c)
    # Tail first: evicting one entry drops a's last block, not the head.
    c.trim(2)
    assert cached(c, a) == 3 and c.evicted_blocks == 2
    c.release(nb, b, 3)
    c.trim(4)
    # b was released later, so a's remaining tail (3) went first, then b's tail (9).
    assert cached(c, a) == 2 and cached(c, b) == 2
    check(c)
    # A full hit leaves one token to compute.
    assert c.cached_tokens((1, 2), 64) == 63


def test_partial_last_block_and_output_blocks():
    c = PrefixCache(id_block_tokens=32, kv_block_size=16)
    ids = (7, 8)                      # a trace prompt of 40 tokens: one full block, one of 8 tokens
    node, n, blocks = c.acquire(ids, c.match(ids, 40), 40)
    assert (n, blocks) == (2, 3)      # 2 + ceil(8/16) KV blocks
    c.release(node, ids, n)
    assert c.match(ids, 40).tokens == 40
    check(c)
    # Synthetic ids cover prompt ++ output: the output block enters at finish.
    c2 = PrefixCache(id_block_tokens=16, kv_block_size=16)
    seq = (1, 2, 3, 4)                # 40-token prompt + 30 output tokens: 4 full blocks
    node, n, _ = c2.acquire(seq, c2.match(seq, 40), 40)
    assert n == 2                     # only the prompt's full blocks at admission
    c2.release(node, seq, n, kv_tokens=40 + 30 - 1)
    assert cached(c2, seq) == 4
    check(c2)


def test_unbounded_never_evicts_and_capacity_caps():
    c = PrefixCache(16, 16, unbounded=True)
    c.release(c.root, (1, 2, 3), 0, kv_tokens=48)
    c.trim(0)
    assert c.evictable == 3
    c = PrefixCache(16, 16, capacity_tokens=32)
    c.release(c.root, (1, 2, 3), 0, kv_tokens=48)
    c.trim(100)
    assert c.evictable == 2 and cached(c, (1, 2, 3)) == 2


def test_id_block_must_be_whole_kv_blocks():
    with pytest.raises(ValueError, match="whole number"):
        PrefixCache(24, 16)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 12), st.integers(0, 12), st.booleans()),
                min_size=1, max_size=40), st.integers(0, 40))
def test_tree_matches_a_flat_model(ops, free):
    """Random admissions/releases on a few families of chained ids: the
    radix tree agrees with a plain set of cached ids on every lookup, its
    totals stay consistent, and trimming never evicts a pinned entry."""
    c = PrefixCache(16, 16)
    held = []
    fresh = itertools.count(10**6)   # ids of each request's own blocks: never reused (the chain contract)
    for fam, shared, total, release in ops:
        ids = tuple(range(fam * 1000, fam * 1000 + shared)) + tuple(next(fresh) for _ in range(total))
        if release and held:
            node, hid, n = held.pop(0)
            c.release(node, hid, n, kv_tokens=len(hid) * 16)
        else:
            m = c.match(ids, len(ids) * 16 + 1)
            node, n, _ = c.acquire(ids, m, len(ids) * 16 + 1)
            assert n == len(ids) and cached(c, ids) == len(ids)
            held.append((node, ids, n))
        c.trim(free)
        check(c)
        for node, hid, n in held:
            assert cached(c, hid) >= n, "a pinned entry was evicted"
        for probe in [ids, ids[:3], ids[:1] + (-1,)]:   # what routers ask: the match, less the last prompt token
            for prompt in (len(probe) * 16 + 1, len(probe) * 16, 20):
                assert c.cached_tokens(probe, prompt) == max(0, min(c.match(probe, prompt).tokens, prompt - 1))
        assert c.evictable <= free


class OneHeapCache(PrefixCache):
    """The LRU order as first written: every evictable leaf on one heap,
    a partly evicted one pushed back. PrefixCache splits that heap three
    ways (a FIFO of released leaves, a heap of parents, the held victim)
    and must evict exactly what it evicts."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.all = []

    def _push_leaf(self, x, released):
        heapq.heappush(self.all, (x.stamp, x.uid, next(self._push), x))

    def trim(self, free_blocks):
        limit = free_blocks if self.cap is None else min(free_blocks, self.cap)
        while self.evictable > limit:
            stamp, _, _, x = heapq.heappop(self.all)
            if x.lock or x.children or x.parent is None or x.stamp != stamp:
                continue
            self._evict(x, self.evictable - limit, self.all)


def _contents(c: PrefixCache):
    return sorted((x.ids[x.off:x.off + x.n], x.lock, x.stamp, x.tail) for x in c.nodes())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 12), st.integers(0, 12), st.integers(0, 3),
                          st.integers(0, 60)), min_size=1, max_size=60),
       st.sampled_from([(16, 16), (16, 4), (32, 16)]))
def test_eviction_order_is_that_of_one_lru_heap(ops, sizes):
    """Same ops on both (admissions, releases with and without output
    blocks, partial last blocks, trims to random sizes): same entries
    cached, pinned and stamped, the same blocks evicted, every step."""
    H, bs = sizes
    caches = [PrefixCache(H, bs), OneHeapCache(H, bs)]
    held = [[], []]
    fresh = itertools.count(10**6)
    for fam, shared, total, action, free in ops:
        ids = tuple(range(fam * 1000, fam * 1000 + shared)) + tuple(next(fresh) for _ in range(total))
        prompt = max(1, len(ids) * H - (fam * 5) % H)   # sometimes a partial last block
        for c, h in zip(caches, held):
            if action and h:
                node, hid, n = h.pop(0 if action == 1 else -1)
                c.release(node, hid, n, kv_tokens=len(hid) * H if action < 3 else 0)
            elif ids:
                node, n, _ = c.acquire(ids, c.match(ids, prompt), prompt)
                h.append((node, ids, n))
            c.trim(free)
        a, b = caches
        assert (a.evicted_blocks, a.evictable, a.pinned) == (b.evicted_blocks, b.evictable, b.pinned)
        assert _contents(a) == _contents(b)


# --- workloads with shared prefixes ----------------------------------------------
@st.composite
def prefixed(draw, H: int, max_n: int = 40, max_out: int = 120):
    """Requests with chained ids: a head shared with other requests of the
    same app, then ids of their own over prompt ++ output."""
    reqs = draw(workloads(min_n=3, max_n=max_n, max_in=1500, max_out=max_out))
    apps = draw(st.integers(1, 3))
    fresh = itertools.count(10_000)
    heads = [tuple(next(fresh) for _ in range(64)) for _ in range(apps)]
    out = []
    for r in reqs:
        full = (r.input_tokens + r.output_tokens) // H
        app = draw(st.integers(0, apps - 1))
        shared = draw(st.integers(0, min(full, r.input_tokens // H)))
        ids = heads[app][:shared] + tuple(next(fresh) for _ in range(full - min(shared, full)))
        out.append(Request(r.id, r.arrival, r.input_tokens, r.output_tokens, blocks=ids[:full]))
    return out


@st.composite
def cache_configs(draw):
    chunked = draw(st.booleans())
    seqs = draw(st.integers(1, 48))
    budget = draw(st.one_of(st.integers(seqs, max(seqs, 64)), st.integers(max(seqs, 16), 512), st.just(8192)))
    bs = draw(st.sampled_from([4, 16]))
    cap = draw(st.sampled_from([None, None, "unbounded", 0, 64, 1024]))
    sched = draw(st.sampled_from(["continuous", "continuous", "continuous", "static"]))
    admission = draw(st.sampled_from(["on_demand", "on_demand", "reserve_output", "expected_output"])) \
        if sched == "continuous" else "on_demand"
    # vLLM: a preempted request's full output blocks stay cached for its recompute.
    keep = draw(st.booleans())
    # vLLM V1: a chunked prompt's blocks (and the cache entries they fill) as its chunks are scheduled.
    prompt_kv = draw(st.sampled_from(["whole", "per_chunk"])) if chunked and admission == "on_demand" \
        and sched == "continuous" else "whole"
    # SGLang: a prompt enters the cache once computed, planning ahead or not; TensorRT-LLM to 1.0 as it ends.
    entry = draw(st.sampled_from(["allocated", "computed", "released"])) if prompt_kv == "whole" else "allocated"
    ahead = draw(st.booleans())
    # TensorRT-LLM: a prompt computing another's first new block waits a pass, whenever prompts enter.
    defers = draw(st.sampled_from([False, False, True]))
    return EngineConfig(chunked_prefill=chunked, max_num_seqs=seqs, max_num_batched_tokens=budget, block_size=bs,
                        defers_shared_context=defers, defers_behind_chunks=defers, prefix_cache_capacity_tokens=cap, scheduler=sched, kv_admission=admission,
                        cache_preempted_output=keep, prompt_kv=prompt_kv, prompt_cached=entry,
                        schedule_ahead=ahead, full_until_leave=admission == "expected_output" and draw(st.booleans()))


def _run_pair(data, with_cancels: bool, offload=None):
    cfg = data.draw(cache_configs(), label="cfg")
    H = cfg.block_size * data.draw(st.sampled_from([1, 2]), label="ids per KV block")
    reqs = data.draw(prefixed(H), label="requests")
    biggest = max(-(-(r.input_tokens + r.output_tokens) // cfg.block_size) for r in reqs)
    nb = data.draw(st.integers(max(1, biggest // 2), biggest * 3), label="num_blocks")
    cancels = []
    if with_cancels:
        for r in reqs:
            if data.draw(st.integers(0, 3)) == 0:
                cancels.append((r.arrival + data.draw(st.floats(0.0, 0.3, allow_nan=False)), r.id))
    replicas = data.draw(st.integers(1, 3), label="replicas")
    cmk = data.draw(st.sampled_from(COST_MODELS), label="cost model")
    router = data.draw(st.sampled_from(["least_outstanding", "prefix_aware", "session_affinity"]), label="router")
    # attention-DP ranks, each with its own prefix cache, placed on by each stack's rule
    dp = data.draw(st.sampled_from([1, 1, 2, 4]), label="dp")
    if dp > 1:
        cfg = cfg.model_copy(update={"dp_placement": data.draw(st.sampled_from(RULES), label="dp_placement")})
    kw = dict(replicas=replicas, router=router, cm=cost_model(*cmk), id_block_tokens=H,
              cancels=cancels, offload=offload, dp=dp)
    fast = run_open("fast", reqs, cfg, nb, **kw)
    ref = run_open("reference", reqs, cfg, nb, **kw)
    problems = compare_runs(fast, ref)
    assert not problems, ("fast and reference disagree:\n  " + "\n  ".join(problems[:12]) + "\nreproduction: "
                          + describe(reqs, cfg, nb, H=H, cancels=cancels, replicas=replicas, cm=cmk, dp=dp))
    if currently_in_test_context():   # --hypothesis-show-statistics: are the paths hit?
        pc = [s["prefix_cache"] for s in ref.stats()]
        event("hits: " + str(any(p and p["hit_tokens"] for p in pc)))
        event("evictions: " + str(any(p and p["evicted_blocks"] for p in pc)))
        event("preemptions: " + str(any(r.preemptions for r in ref.requests)))
        event("cancelled running: " + str(any(r.status == Status.CANCELLED and r.admitted == r.admitted
                                              for r in ref.requests)))
    return fast, ref, cfg, reqs


@settings(max_examples=300, **SETTINGS)
@given(data=st.data())
def test_cache_matches_reference(data):
    _run_pair(data, with_cancels=False)


@settings(max_examples=300, **SETTINGS)
@given(data=st.data())
def test_cancellation_matches_reference_and_ends_once(data):
    fast, ref, cfg, reqs = _run_pair(data, with_cancels=True)
    for run in (fast, ref):
        for r in run.requests:
            assert run.done_calls.get(r.id) == 1           # exactly one ending
            assert r.status in (Status.FINISHED, Status.REJECTED, Status.CANCELLED)
            assert r.cached_tokens <= max(0, r.input_tokens - 1)


def test_cache_off_equals_no_ids():
    """With the cache off, ids change nothing: results equal a run without them."""
    reqs = make_requests([i * 0.02 for i in range(40)], [200 + 97 * i % 1500 for i in range(40)],
                         [5 + 31 * i % 90 for i in range(40)])
    with_ids = [Request(r.id, r.arrival, r.input_tokens, r.output_tokens,
                        blocks=tuple(range((r.input_tokens + r.output_tokens) // 16))) for r in reqs]
    cfg_off = EngineConfig(prefix_cache=False, max_num_batched_tokens=512)
    for engine in ("fast", "reference"):
        a = run_open(engine, reqs, cfg_off, 200)
        b = run_open(engine, with_ids, cfg_off, 200, id_block_tokens=16)
        assert not compare_runs(a, b)
        assert all(r.cached_tokens == 0 for r in b.requests)


def test_shared_prefix_hits_and_cuts_prefill():
    """Ten requests on one replica sharing a 1,024-token head, spaced so each
    arrives after the last finished: every one after the first hits the head."""
    H = 16
    head = tuple(range(64))
    reqs = [Request(i, i * 1.0, 1100, 10, blocks=head + tuple(1000 * (i + 1) + j for j in range(8)))
            for i in range(10)]
    cfg = EngineConfig()
    hot = run_open("fast", reqs, cfg, 5000, id_block_tokens=H)
    cold = run_open("fast", reqs, EngineConfig(prefix_cache=False), 5000, id_block_tokens=H)
    assert [r.cached_tokens for r in hot.requests] == [0] + [1024] * 9
    ttft_hot = [r.ttft for r in hot.requests[1:]]
    ttft_cold = [r.ttft for r in cold.requests[1:]]
    assert max(ttft_hot) < 0.5 * min(ttft_cold)
    st_ = hot.stats()[0]["prefix_cache"]
    assert st_["hit_tokens"] == 9 * 1024 and st_["hit_requests"] == 9 and st_["lookups"] == 10


# --- invariants, checked at every iteration of the reference engine ------------------
def _pins_held(replica) -> None:
    c = replica.cache
    for s in replica.running:
        if s.pin is not None:
            assert cached(c, s.ids) >= s.pin_ids, "a running request's cached block was evicted"
    check(c)


class CheckedReference(ReferenceReplica):
    """Asserts after every plan: running sequences' entries are cached and
    pinned; own + pinned + evictable (bounded cache) fit the KV memory."""

    def _plan(self, now):
        out = super()._plan(now)
        c = self.cache
        if c is not None:
            _pins_held(self)
            assert self.own + c.pinned <= self.num_blocks
            if not c.unbounded:
                assert self.own + c.pinned + c.evictable <= self.num_blocks
        check_reservation(self, "after a plan")
        return out


class CheckedFast(FastReplica):
    def _plan(self, now):
        out = super()._plan(now)
        c = self.cache
        if c is not None:
            _pins_held(self)
            if not c.unbounded and self.cfg.scheduler != "static":
                assert self.used_blocks(self.G + (1 if out[1] else 0)) + c.evictable <= self.num_blocks
        check_reservation(self, "after a plan")
        return out


@settings(max_examples=150, **SETTINGS)
@given(data=st.data())
def test_cache_invariants(data):
    from simulator.fleet import pool as fleet
    with mock.patch.dict(fleet.ENGINES, {"fast": CheckedFast, "reference": CheckedReference}):
        _run_pair(data, with_cancels=True)


# --- the Mooncake check --------------------------------------------------------------
@pytest.mark.shared_data
def test_mooncake_unbounded_cache_reaches_the_ideal_hit_rate(shared_data):
    """Replaying the Mooncake conversation trace on one replica with an
    unbounded cache hits exactly the blocks an infinite, instant cache would:
    the ideal is computed here straight from the file's hash_ids (a block
    hits when every block before it in the prompt, and itself, was seen in an
    earlier request in arrival order), independently of llmsim's code."""
    import json

    from simulator.runner import simulate
    from simulator.scenario.schema import Scenario

    path = shared_data / "traces" / "mooncake_conversation_trace.jsonl"
    seen: set = set()
    hits = total = 0
    with open(path) as f:
        for line in f:
            ids = json.loads(line)["hash_ids"]
            total += len(ids)
            for b in ids:
                if b not in seen:
                    break
                hits += 1
            seen.update(ids)
    ideal = hits / total
    sc = Scenario.model_validate({
        "name": "mooncake-ideal",
        "workload": {"arrival": {"type": "trace", "path": str(path), "format": "mooncake"}},
        "pools": [{"model": "llama-3.1-8b", "gpu": "h100-sxm",
                   "engine": {"prefix_cache_capacity_tokens": "unbounded"}}],
    })
    out = simulate(sc)
    status = out.results["llmsim"]["request_status"]
    assert status["finished"] == len(out.requests) == 12031, status
    pc = out.results["llmsim"]["prefix_cache"]
    assert pc["evicted_blocks"] == 0
    assert pc["block_hit_rate"] == pytest.approx(ideal, abs=1e-12), (pc, ideal)
    assert 0.3 < ideal < 0.45     # the trace's own figure (0.366): a guard against reading the wrong file


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_prompt_preempted_part_way_is_cached_only_as_far_as_it_was_computed(engine):
    """A prompt's ids enter the cache at admission; preempted after ~800 of its 2,048 tokens, it kept
    them all cached, and its recompute hit 1,200 tokens it never computed (2,834 tokens through the
    model where computing it once takes 3,652). vLLM caches only the blocks it has computed, SGLang
    drops a retracted request's KV."""
    cfg = EngineConfig(max_num_batched_tokens=16, max_num_seqs=8, block_size=16)
    reqs = [Request(0, 0.0, 1100, 500, blocks=tuple(range(1000, 1069))),
            Request(1, 0.001, 2048, 4, blocks=tuple(range(5000, 5128)))]
    r = run_open(engine, reqs, cfg, 200, id_block_tokens=16)
    assert r.requests[1].preemptions == 1
    work = r.pool.replicas[0].stats(r.pool.end_time())["tokens_processed"]
    assert 1100 + 500 + 2048 + 4 - 16 <= work < 1100 + 500 + 2 * 2048     # its computed blocks do stay cached


@pytest.mark.parametrize("engine", ["fast", "reference"])
@pytest.mark.parametrize("keep", [False, True])
def test_a_preempted_request_resumes_on_its_cached_prompt_and_output(engine, keep):
    """Two 1,024-token prompts outgrow 160 blocks of 16 as they decode: the newer is preempted
    256 tokens into its output, as the older one ends. Its prompt stays cached either way; under
    vLLM's rule (cache_preempted_output) its full output blocks do too, and its recompute prefills
    only the last, partial block of what it had (vLLM hashes blocks as they fill and frees a
    preempted request's with their hashes kept, kv_cache_manager.py allocate_slots /
    get_computed_blocks)."""
    cfg = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=8, block_size=16, cache_preempted_output=keep)
    reqs = [Request(i, 0.001 * i, 1024, out, blocks=tuple(range(1000 * (i + 1), 1000 * (i + 1) + 101)))
            for i, out in enumerate([258, 600])]
    prefilled: list[tuple[int, int]] = []

    from simulator.fleet import pool as fleet

    class Recording(fleet.ENGINES[engine]):
        def _prefill_chunk_done(self, s, chunk, now):
            if s.req.preemptions:
                prefilled.append((s.prompt, chunk))
            return super()._prefill_chunk_done(s, chunk, now)

    with mock.patch.dict(fleet.ENGINES, {engine: Recording}):
        r = run_open(engine, reqs, cfg, 160, id_block_tokens=16)
    assert [q.preemptions for q in r.requests] == [0, 1]
    assert prefilled == [(1024 + 256, 16 if keep else 256)]   # one chunk: the recompute of prompt + output


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_prompt_cancelled_part_way_is_cached_only_as_far_as_it_was_computed(engine):
    """A 2,048-token prompt cancelled after its first 256-token chunk leaves 256 tokens cached, not
    the 2,047 its admission entered: the next request with the same ids prefills the other 1,792
    (vLLM caches only the blocks it has computed; an autocomplete keystroke cancels its predecessor
    mid-prefill all the time)."""
    cfg = EngineConfig(max_num_batched_tokens=256, max_num_seqs=8, block_size=16)
    ids = tuple(range(1000, 1128))
    reqs = [Request(0, 0.0, 2048, 4, blocks=ids), Request(1, 1.0, 2048, 4, blocks=ids)]
    r = run_open(engine, reqs, cfg, 400, id_block_tokens=16, cancels=[(0.002, 0)])
    assert r.requests[0].status == Status.CANCELLED
    assert r.requests[1].cached_tokens == 256
    assert r.pool.replicas[0].stats(r.pool.end_time())["tokens_processed"] == 256 + 2048 - 256 + 3


@pytest.mark.parametrize("engine", ["fast", "reference"])
@pytest.mark.parametrize("entry, ahead, hits", [
    ("allocated", False, [0, 255, 255, 255]),
    ("computed", False, [0, 0, 255, 255]),     # the first batch's two compute it each
    ("computed", True, [0, 0, 0, 0]),         # planned ahead: the second batch before the first is entered
])
def test_a_prompt_is_a_hit_once_it_is_entered(engine, entry, ahead, hits):
    """Four identical prompts, two to a prefill batch: SGLang enters a prompt in its radix tree only
    after its batch ran (and, planning ahead, after the next batch was planned); vLLM as it allocates."""
    reqs = [Request(i, 0.0, 256, 20, blocks=tuple(range(17))) for i in range(4)]
    cfg = EngineConfig(max_num_batched_tokens=512, mixed_prefill=False, block_size=16, prompt_cached=entry,
                       schedule_ahead=ahead)
    run = run_open(engine, reqs, cfg, 500, id_block_tokens=16)
    assert [r.cached_tokens for r in run.requests] == hits


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_prompt_being_chunked_is_a_hit_as_far_as_it_was_computed(engine):
    """SGLang stashes the part of its chunked request computed so far in the tree before each plan: an
    identical prompt admitted beside its last chunk hits its first chunk, not its whole prompt."""
    reqs = [Request(i, 0.0, 768, 20, blocks=tuple(range(49))) for i in range(2)]
    cfg = EngineConfig(max_num_batched_tokens=512, mixed_prefill=False, block_size=16, prompt_cached="computed",
                       schedule_ahead=True)
    run = run_open(engine, reqs, cfg, 500, id_block_tokens=16)
    assert [r.cached_tokens for r in run.requests] == [0, 512]


def test_computed_entry_needs_whole_prompt_kv():
    with pytest.raises(ValueError, match="prompt_cached"):
        EngineConfig(prompt_kv="per_chunk", prompt_cached="computed")


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_handed_over_prompt_enters_the_decode_server_s_cache_as_it_is_taken_in(engine):
    """SGLang's decode server (with its radix cache) enters a transferred prompt as it builds the batch
    that takes it in (process_prebuilt): the next identical one, taken in beside it, finds it."""
    reqs = [Request(i, 0.0, 256, 20, blocks=tuple(range(17))) for i in range(2)]
    for r in reqs:
        r.preloaded = r.input_tokens
    cfg = EngineConfig(max_num_batched_tokens=512, mixed_prefill=False, block_size=16, prompt_cached="computed",
                       schedule_ahead=True)
    run = run_open(engine, reqs, cfg, 500, id_block_tokens=16)
    assert [r.cached_tokens for r in run.requests] == [0, 255]


@pytest.mark.parametrize("engine", ["fast", "reference"])
@pytest.mark.parametrize("entry, hits", [("allocated", [0, 255, 255]), ("computed", [0, 255, 255]),
                                         ("released", [0, 0, 255])])
def test_a_prompt_entered_as_its_request_ends_is_no_hit_while_it_runs(engine, entry, hits):
    """TensorRT-LLM before #6683 stored a sequence's blocks for reuse only as it was removed
    (removeSequence -> releaseBlocks): the same prompt arriving while the first decodes computes it
    again, one arriving after it ended reuses it."""
    reqs = [Request(0, 0.0, 256, 200, blocks=tuple(range(17))), Request(1, 0.5, 256, 20, blocks=tuple(range(17))),
            Request(2, 100.0, 256, 20, blocks=tuple(range(17)))]
    cfg = EngineConfig(max_num_batched_tokens=512, block_size=16, prompt_cached=entry)
    run = run_open(engine, reqs, cfg, 500, id_block_tokens=16)
    assert run.requests[1].admitted < run.requests[0].finish < 100.0     # the second arrives while it decodes
    assert [r.cached_tokens for r in run.requests] == hits
