"""A class's KV cap covers its running requests and the cache entries it
created, and admitting its requests evicts its own cached history first
(engine/base.py ``_charge``, PrefixCache owners).

Unit tests pin the eviction order and the "shared" rule on the cache alone;
hypothesis drives both engines with shared-prefix workloads of two classes
under caps (they must agree, and at every admission a capped class holds no
more than its cap while running + cached + free never exceed the KV); a
scenario shows what the cap is for: a free tier's long chat histories no
longer crowd the paid tier's out of the cache.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from helpers_engine import COST_MODELS, compare_runs, cost_model, describe, run_open
from simulator.engine.prefix_cache import PrefixCache
from simulator.engine.reference import ReferenceReplica
from simulator.engine.replica import FastReplica
from simulator.runner import simulate
from test_prefix_cache import SETTINGS, cache_configs, check, prefixed
from workloads.request import Request


# --- the cache alone -----------------------------------------------------------
def owned_by_tree(c: PrefixCache) -> dict[str, int]:
    """Evictable blocks per owner, recomputed from the tree; and every owned
    node's subtree has its owner (what lets a class free all its entries)."""
    out: dict[str, int] = {}
    for x in c.nodes():
        if x.owner is not None:
            stack = list(x.children.values())
            while stack:
                y = stack.pop()
                assert y.owner == x.owner, "an owned node has another class's entry below it"
                stack.extend(y.children.values())
            if not x.lock:
                out[x.owner] = out.get(x.owner, 0) + x.blocks
    return out


def consistent(c: PrefixCache) -> None:
    check(c)
    assert {k: v for k, v in c.owned.items() if v} == owned_by_tree(c)


def cache_with(entries) -> PrefixCache:
    """A cache (16-token ids and blocks) holding each (owner, ids) entry,
    entered by a request that then finished: released in the given order."""
    c = PrefixCache(16, 16)
    c.track_owners()
    for owner, ids in entries:
        node, n, _ = c.acquire(ids, c.match(ids, 16 * len(ids)), 16 * len(ids), owner)
        c.release(node, ids, n, 0, owner)
    return c


def test_a_class_evicts_its_own_least_recent_entries_and_no_one_elses():
    # paid's entry is the oldest: a global LRU would take it first
    c = cache_with([("paid", (1, 2, 3)), ("free", (10, 11)), ("free", (20, 21, 22, 23)), ("paid", (30,))])
    assert c.owned == {"paid": 4, "free": 6}
    c.evict_owned("free", 4)          # free's older entry goes, its newer stays
    assert c.match((10, 11), 32).ids == 0 and c.match((20, 21, 22, 23), 64).ids == 4
    assert c.match((1, 2, 3), 48).ids == 3 and c.owned["paid"] == 4
    c.evict_owned("free", 1)          # from the tail of the newer one: three ids
    assert c.match((20, 21, 22, 23), 64).ids == 1 and c.owned == {"paid": 4, "free": 1}
    assert c.evicted_blocks == c.owner_evicted_blocks == 5
    consistent(c)
    c.trim(2)                         # global pressure stays LRU over everyone: paid's oldest first
    assert c.match((1, 2, 3), 48).ids == 0 and c.match((20,), 16).ids == c.match((30,), 16).ids == 1
    consistent(c)


def test_an_entry_another_class_extends_is_shared_and_charged_to_no_one():
    c = cache_with([("free", (1, 2)), ("paid", (1, 2, 3, 4))])
    assert c.owned == {"free": 0, "paid": 2}          # (1, 2) is now a shared head
    c.evict_owned("free", 0)
    assert c.match((1, 2, 3, 4), 64).ids == 4         # free cannot evict what paid builds on
    consistent(c)


@settings(max_examples=200, **SETTINGS)
@given(ops=st.lists(st.tuples(st.sampled_from(["run", "run", "run", "evict", "trim"]), st.sampled_from("ab"),
                              st.integers(0, 2), st.integers(0, 8), st.integers(0, 12)), max_size=50))
def test_owner_counts_follow_the_tree_and_evict_owned_spares_others(ops):
    c = PrefixCache(16, 16)
    c.track_owners()
    heads = {0: (1, 2, 3, 4), 1: (5, 6), 2: ()}
    live = []
    uid = 100
    for op, who, head, extra, n in ops:
        if op == "run":
            uid += 20
            ids = heads[head] + tuple(range(uid, uid + extra))
            if ids:
                node, k, _ = c.acquire(ids, c.match(ids, 16 * len(ids)), 16 * len(ids), who)
                live.append((node, ids, k, who))
            if live and n % 2:        # a running one finishes (entering an output block) or is preempted
                node, ids, k, w = live.pop(n % len(live))
                c.release(node, ids + (uid + 19,), k, 16 * (len(ids) + 1) if n % 4 == 1 else 0, w)
        elif op == "evict":
            other = {k: v for k, v in c.owned.items() if k != who}
            c.evict_owned(who, n)
            assert c.owned.get(who, 0) <= n                 # always reachable: all its entries are leaves' ancestors
            assert {k: v for k, v in c.owned.items() if k != who} == other
        else:
            c.trim(n)
        consistent(c)


# --- both engines, capped classes ------------------------------------------------------
def _held_within_caps(r) -> None:
    for k, cap in r.kv_budgets.items():
        assert r.class_kv_held(k) <= cap, f"class {k} holds {r.class_kv_held(k)} blocks over its cap {cap}"


class CheckedReference(ReferenceReplica):
    def _attach(self, s, total, m):
        taken = super()._attach(s, total, m)
        _held_within_caps(self)
        return taken

    def _plan(self, now):
        out = super()._plan(now)
        c = self.cache
        if c is not None and not c.unbounded:
            assert self.own + c.pinned + c.evictable <= self.num_blocks
            consistent(c)
        return out


class CheckedFast(FastReplica):
    def _attach(self, s, total, m):
        taken = super()._attach(s, total, m)
        _held_within_caps(self)
        return taken


@settings(max_examples=150, **SETTINGS)
@given(data=st.data())
def test_engines_agree_and_caps_hold_at_every_admission(data):
    cfg = data.draw(cache_configs(), label="cfg")
    H = cfg.block_size * data.draw(st.sampled_from([1, 2]), label="ids per KV block")
    reqs = data.draw(prefixed(H), label="requests")
    reqs = [Request(r.id, r.arrival, r.input_tokens, r.output_tokens, blocks=r.blocks,
                    klass=data.draw(st.sampled_from(["free", "free", "paid"]))) for r in reqs]
    biggest = max(-(-(r.input_tokens + r.output_tokens) // cfg.block_size) for r in reqs)
    nb = data.draw(st.integers(max(1, biggest // 2), biggest * 3), label="num_blocks")
    budgets = {"free": data.draw(st.integers(1, nb), label="free cap")}
    if data.draw(st.booleans()):
        budgets["paid"] = data.draw(st.integers(1, nb), label="paid cap")
    cmk = data.draw(st.sampled_from(COST_MODELS), label="cost model")
    kw = dict(replicas=data.draw(st.integers(1, 2)), router="least_outstanding", cm=cost_model(*cmk),
              id_block_tokens=H, kv_budgets=budgets)
    from simulator.fleet import pool as fleet
    with mock.patch.dict(fleet.ENGINES, {"fast": CheckedFast, "reference": CheckedReference}):
        fast = run_open("fast", reqs, cfg, nb, **kw)
        ref = run_open("reference", reqs, cfg, nb, **kw)
    pc = [x["prefix_cache"] for x in ref.stats()]
    event("evicted for a class cap: " + str(any(x and x.get("evicted_by_class_cap_blocks") for x in pc)))
    event("free waited: " + str(any(r.admitted > r.arrival for r in ref.requests if r.klass == "free")))
    problems = compare_runs(fast, ref)
    assert not problems, ("fast and reference disagree:\n  " + "\n  ".join(problems[:12]) + "\nreproduction: "
                          + describe(reqs, cfg, nb, H=H, budgets=budgets, cm=cmk))


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_shared_entry_handed_back_by_another_class_keeps_the_cap(engine):
    """Free enters block A, paid reuses it; free then fills its cap with a running request; paid ending
    unreferences A, which is free's: free's history is trimmed then, not only when free next admits
    (hypothesis found free holding 5 blocks under a cap of 4)."""
    from simulator.engine.config import EngineConfig
    from simulator.fleet import pool as fleet

    A = 10_000
    reqs = [Request(0, 0.0, 16, 1, blocks=(A,), klass="free"),          # enters A, owned by free
            Request(1, 0.5, 16, 2, blocks=(A,), klass="paid"),           # hits A and holds it
            Request(2, 0.5, 1, 47, blocks=(A + 2, A + 3, A + 4), klass="free"),   # 3 blocks: free at its cap
            Request(3, 0.6, 16, 1, blocks=(A + 5,), klass="paid")]       # admitted after paid 1 ended
    cfg = EngineConfig(block_size=16, max_num_seqs=8, max_num_batched_tokens=512)
    with mock.patch.dict(fleet.ENGINES, {"fast": CheckedFast, "reference": CheckedReference}):
        out = run_open(engine, reqs, cfg, 16, cm=cost_model(*COST_MODELS[0]), id_block_tokens=16,
                       kv_budgets={"free": 3})
    assert all(r.status.name == "FINISHED" for r in out.requests)
    assert out.requests[1].cached_tokens == 15             # paid did reuse free's block (its last token recomputed)
    assert out.requests[1].finish < out.requests[3].admitted < out.requests[2].finish


# --- what the cap is for (the scenario of benchmarks/class_kv_cap.py) ------------------
def _load_study():
    name = "class_kv_cap"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "benchmarks"
                                                      / "class_kv_cap.py")
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def test_capping_free_keeps_paid_histories_cached():
    """Without a cap the free tier's idle histories, three times as many,
    push the paid tier's out of the shared LRU; capped at 30% of KV (running
    + cached), free evicts its own first and paid's hit rate rises."""
    study = _load_study()
    shared, capped = simulate(study.chat(None)), simulate(study.chat(0.3))
    ref = simulate(study.chat(0.3), engine="reference")
    token_hit_rate = study.token_hit_rate
    assert [r.cached_tokens for r in ref.requests] == [r.cached_tokens for r in capped.requests]
    assert [r.finish for r in ref.requests] == pytest.approx([r.finish for r in capped.requests], rel=1e-9)
    assert token_hit_rate(capped, "paid") > 2 * token_hit_rate(shared, "paid")
    assert token_hit_rate(capped, "free") < token_hit_rate(shared, "free")       # what free pays for it
    stats = capped.pools["main"].replicas[0].stats(capped.pools["main"].end_time())["prefix_cache"]
    assert stats["evicted_by_class_cap_blocks"] > 0
