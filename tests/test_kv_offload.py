"""KV offload tiers (host DRAM, NVMe) below the GPU prefix cache.

Invariants: an id lives in at most one place (GPU cache, host tier, disk
tier); a tier never holds more than its capacity; tiers that can hold
nothing change nothing; a reload costs bytes / bandwidth and delays the
iteration that runs the request's first chunk by exactly that; the fast
engine equals the reference with tiers on.
"""
from __future__ import annotations

import dataclasses
import itertools
from unittest import mock

import pytest
from hypothesis import event, given, settings
from hypothesis.control import currently_in_test_context
from hypothesis import strategies as st

from helpers_engine import compare_runs, cost_model, describe, run_open
from simulator.engine.config import EngineConfig
from simulator.engine.kv_tiers import KvTiers, OffloadPlan, Tier
from simulator.engine.prefix_cache import PrefixCache
from simulator.engine.reference import ReferenceReplica
from simulator.engine.replica import FastReplica
from simulator.errors import LlmsimError
from simulator.fleet.offload import plan_offload
from simulator.hybrid_kv import SlidingGroups
from simulator.memory import plan_memory
from simulator.profiles import load_hardware, load_model
from test_prefix_cache import SETTINGS, _run_pair, cache_configs, check, prefixed
from workloads.request import Request


def tiered(H: int, bs: int, host: int, disk: int, block_bytes: float = 1000.0) -> PrefixCache:
    c = PrefixCache(H, bs)
    tiers = [Tier("host", host, 1e6)] + ([Tier("disk", disk, 1e5)] if disk else [])
    c.tiers = KvTiers(H, bs, block_bytes, tiers)
    return c


def gpu_ids(c: PrefixCache) -> list[int]:
    """Offloadable ids in the GPU cache (placeholders, < 0, are never offloaded)."""
    return [i for x in c.nodes() for i in x.ids[x.off:x.off + x.n] if i >= 0]


def check_tiers(c: PrefixCache) -> None:
    """One place per id; each tier's count is its entries' and within its capacity."""
    t = c.tiers
    g = gpu_ids(c)
    assert len(g) == len(set(g))
    places = [set(g)] + [set(x.entries) for x in t.tiers]
    for a, b in itertools.combinations(places, 2):
        assert not a & b, f"an id in two places: {sorted(a & b)[:5]}"
    for x in t.tiers:
        assert x.used == sum(t.blocks(v) for v in x.entries.values())
        assert x.used <= x.capacity


# --- unit ---------------------------------------------------------------------
def test_evicted_goes_down_the_tiers_and_a_hit_comes_back_with_its_reload_time():
    c = tiered(16, 16, host=3, disk=2, block_bytes=1000.0)
    a = (1, 2, 3, 4, 5)
    node, n, _ = c.acquire(a, c.match(a, 80), 80)
    c.release(node, a, n)
    c.trim(0)                      # all five leave the GPU: tail first into host, head newest
    host, disk = c.tiers.tiers
    assert list(host.entries) == [3, 2, 1] and list(disk.entries) == [5, 4]
    assert (host.offloaded, host.dropped, disk.offloaded) == (5, 2, 2)
    check_tiers(c)
    m = c.match(a, 81)
    assert (m.ids, m.lower.ids, m.lower.blocks) == (0, 5, (3, 2)) and m.usable(81) == 80
    assert c.cached_tokens(a, 81) == 80         # routers count tier hits too
    s = c.tiers.reload(m.lower, 0, True)
    assert s == pytest.approx(3 * 1000 / 1e6 + 2 * 1000 / 1e5)
    c.acquire(a, m, 81)
    assert not host.entries and not disk.entries and host.used == disk.used == 0
    check_tiers(c)
    # A third id past a gap (id 2 dropped) is reachable only from the start of the run.
    c2 = tiered(16, 16, host=1, disk=0)
    node, n, _ = c2.acquire(a, c2.match(a, 80), 80)
    c2.release(node, a, n)
    c2.trim(0)
    assert list(c2.tiers.tiers[0].entries) == [1] and c2.tiers.tiers[0].dropped == 4
    assert c2.match((1, 2, 3), 48).lower.ids == 1


def test_placeholders_are_never_offloaded():
    c = tiered(16, 16, host=10, disk=0)
    lone = (7, -2, -3)
    node, n, _ = c.acquire(lone, c.match(lone, 48), 48)
    c.release(node, lone, n)
    c.trim(0)
    assert list(c.tiers.tiers[0].entries) == [7]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 12), st.integers(0, 12), st.integers(0, 3),
                          st.integers(0, 60)), min_size=1, max_size=60),
       st.sampled_from([(16, 16), (16, 4), (32, 16)]), st.integers(0, 12), st.integers(0, 12))
def test_an_id_lives_in_one_place_and_tiers_keep_their_capacity(ops, sizes, host, disk):
    """Admissions, releases (with output blocks), partial last blocks and
    trims at random: GPU, host and disk never share an id, no tier exceeds
    its capacity, and a match is the GPU run then the tiers' run."""
    H, bs = sizes
    c = tiered(H, bs, host, disk)
    held = []
    fresh = itertools.count(10**6)
    for fam, shared, total, action, free in ops:
        ids = tuple(range(fam * 1000, fam * 1000 + shared)) + tuple(next(fresh) for _ in range(total))
        prompt = max(1, len(ids) * H - (fam * 5) % H)
        if action and held:
            node, hid, n = held.pop(0 if action == 1 else -1)
            c.release(node, hid, n, kv_tokens=len(hid) * H if action < 3 else 0)
        elif ids:
            m = c.match(ids, prompt)
            lower = 0 if m.lower is None else m.lower.ids
            everywhere = set(gpu_ids(c)) | c.tiers.held()
            run = next((j for j, i in enumerate(ids) if i not in everywhere), len(ids))
            assert m.ids + lower == min(run, -(-prompt // H))
            node, n, _ = c.acquire(ids, m, prompt)
            held.append((node, ids, n))
        c.trim(free)
        check(c)
        check_tiers(c)


def test_reload_delays_the_first_chunk_by_bytes_over_bandwidth():
    """A prompt whose 1,024-token head is in the host tier: its first
    iteration takes the step time of what it computes plus exactly
    blocks × block bytes / bandwidth; twice the bandwidth, half the wait."""
    cm = cost_model()
    cfg = EngineConfig(max_num_seqs=4, block_size=16)
    head = tuple(range(100, 164))                    # 64 ids × 16 = 1,024 tokens
    first = Request(0, 0.0, 1024 + 16, 1, blocks=head + (900,))
    flood = [Request(1 + i, 1.0 + i, 2000, 1, blocks=tuple(range(10_000 * (i + 1), 10_000 * (i + 1) + 125)))
             for i in range(3)]
    again = Request(9, 10.0, 1024 + 32, 1, blocks=head + (901, 902))
    waits = []
    for gbs in (10.0, 20.0):
        plan = OffloadPlan(16 * 1000.0, (("host", 10_000, gbs * 1e9),))
        run = run_open("fast", [first, *flood, again], cfg, 130, cm=cm, id_block_tokens=16, offload=plan)
        r = run.requests[-1]
        tier = run.stats()[0]["prefix_cache"]["offload"]["host"]
        assert r.cached_tokens == 1024 and tier["reloaded_blocks"] == 64 and tier["hit_requests"] == 1
        reload = 64 * 16 * 1000.0 / (gbs * 1e9)
        assert tier["reload_s"] == pytest.approx(reload, rel=1e-12)
        assert r.first_token - r.admitted == pytest.approx(cm.step_time([(32, 1024)], 0, 0, 1) + reload, rel=1e-9)
        waits.append(r.first_token - r.admitted - cm.step_time([(32, 1024)], 0, 0, 1))
    assert waits[0] == pytest.approx(2 * waits[1], rel=1e-6)


@pytest.mark.parametrize("engine", ["fast", "reference"])
@pytest.mark.parametrize("ids, prompt, cached, full, window", [
    (64, 1024 + 32, 1024, 64, 8),     # a 1,024-token head: the window of its end
    (65, 1039, 1038, 65, 9),          # the whole prompt: the window of its last token but one
])
def test_a_reload_copies_the_sliding_window_at_the_hits_end(engine, ids, prompt, cached, full, window):
    """vLLM's OffloadingConnector copies a sliding-window group's blocks within the window of
    the hit's end beside every full-attention block (update_state_after_alloc: the blocks below
    it are null placeholders), the hit capped at the prompt's last token but one for a model with
    sliding-window groups (scheduler.py _lookup: max_hit_size_tokens -= 1; read in 0.22, 0.26 and
    0.34). Under a 128-token window of 16-token blocks a 1,024-token head reloads 64
    full-attention blocks and 1,024/16 - (1,024 - 127) // 16 = 8 of the group's; a whole
    1,039-token prompt its 65 blocks and cdiv(1,038, 16) - (1,038 - 127) // 16 = 9, where the
    window of the uncapped 1,040-token hit's end took 8; at the host tier's bandwidth."""
    cm = cost_model()
    cfg = EngineConfig(max_num_seqs=4, block_size=16)
    head = tuple(range(100, 100 + ids))
    first = Request(0, 0.0, 16 * ids + 16, 1, blocks=head + (900,))
    flood = [Request(1 + i, 1.0 + i, 2000, 1, blocks=tuple(range(10_000 * (i + 1), 10_000 * (i + 1) + 125)))
             for i in range(3)]
    again = Request(9, 10.0, prompt, 1, blocks=head + tuple(range(901, 901 + -(-prompt // 16) - ids)))
    windows = SlidingGroups(window=128, block_size=16, layers=2, full=2)
    plan = OffloadPlan(16 * 1000.0, (("host", 10_000, 1e10),), window_block_bytes=16 * 500.0)
    # the gate asks a 2,000-token prompt's blocks of every group too: 250 blocks admit the flood
    run = run_open(engine, [first, *flood, again], cfg, 250, cm=cm, id_block_tokens=16,
                   offload=plan, windows=windows)
    tier = run.stats()[0]["prefix_cache"]["offload"]["host"]
    assert run.requests[-1].cached_tokens == cached and tier["reloaded_blocks"] == full
    assert windows.reloaded(0, cached) == window
    assert tier["reloaded_bytes"] == full * 16 * 1000.0 + window * 16 * 500.0
    assert tier["reload_s"] == pytest.approx(tier["reloaded_bytes"] / 1e10, rel=1e-12)


@given(window=st.integers(1, 300), bs=st.sampled_from([1, 4, 16, 32]), local=st.integers(0, 2000),
       extra=st.integers(1, 2000))
def test_a_reload_copies_the_groups_blocks_the_window_reaches_past_the_local_hit(window, bs, local, extra):
    """Block by block: those from the local hit's on whose end passes the tokens the window of
    the hit's end skips; a block-aligned hit's never more than cdiv(window, block_size), as
    vLLM asserts (num_pending_gpu_blocks <= sliding_window_size_in_chunks × blocks_per_chunk)."""
    local -= local % bs
    cached = local + extra
    groups = SlidingGroups(window=window, block_size=bs, layers=1, full=1)
    skipped = max(0, cached - window + 1)
    oracle = sum(1 for j in range(local // bs, -(-cached // bs)) if (j + 1) * bs > skipped)
    assert groups.reloaded(local, cached) == oracle
    if cached % bs == 0:
        assert oracle <= -(-window // bs)


# --- engines -------------------------------------------------------------------
@st.composite
def offload_plans(draw):
    host = draw(st.sampled_from([0, 4, 32, 1000]))
    disk = draw(st.sampled_from([0, 0, 16, 200]))
    tiers = (("host", host, draw(st.sampled_from([1e8, 1e10]))),)
    if disk:
        tiers += (("disk", disk, 1e8),)
    return OffloadPlan(draw(st.sampled_from([1e5, 2e6])), tiers)


@settings(max_examples=120, **SETTINGS)
@given(data=st.data())
def test_fast_engine_equals_reference_with_tiers(data):
    plan = data.draw(offload_plans(), label="offload")
    fast, ref, cfg, reqs = _run_pair(data, True, plan)
    if currently_in_test_context():   # --hypothesis-show-statistics: are reloads exercised?
        event("reloads: " + str(any(p and any(t["reloaded_blocks"] for t in p["offload"].values())
                                    for p in (s["prefix_cache"] for s in ref.stats()))))
    rates = {name: rate for name, _, rate in plan.tiers}
    for a, b in zip(fast.stats(), ref.stats()):
        if a["prefix_cache"] is not None:
            for name, tier in a["prefix_cache"]["offload"].items():
                assert tier == pytest.approx(b["prefix_cache"]["offload"][name], rel=1e-9)
                # every reload took its bytes over the tier's bandwidth
                assert tier["reloaded_bytes"] == tier["reloaded_blocks"] * plan.block_bytes
                assert tier["reload_s"] == pytest.approx(tier["reloaded_bytes"] / rates[name], rel=1e-9)


class _CheckTiers:
    """Asserts the tier invariants after every plan."""

    def _plan(self, now):
        out = super()._plan(now)
        if self.cache is not None and self.cache.tiers is not None:
            check_tiers(self.cache)
        return out


class CheckedTiers(_CheckTiers, ReferenceReplica):
    pass


class CheckedTiersFast(_CheckTiers, FastReplica):
    pass


@settings(max_examples=60, **SETTINGS)
@given(data=st.data())
def test_tier_invariants_hold_in_both_engines(data):
    from simulator.fleet import pool as fleet
    plan = data.draw(offload_plans(), label="offload")
    with mock.patch.dict(fleet.ENGINES, {"fast": CheckedTiersFast, "reference": CheckedTiers}):
        _run_pair(data, False, plan)


@settings(max_examples=60, **SETTINGS)
@given(data=st.data())
def test_tiers_that_hold_nothing_change_nothing(data):
    """Zero-capacity tiers (everything offloaded is dropped at once) give
    the run without tiers, request by request."""
    cfg = data.draw(cache_configs(), label="cfg")
    if cfg.cache_unbounded:
        cfg = cfg.model_copy(update={"prefix_cache_capacity_tokens": None})
    H = cfg.block_size
    reqs = data.draw(prefixed(H), label="requests")
    biggest = max(-(-(r.input_tokens + r.output_tokens) // cfg.block_size) for r in reqs)
    nb = data.draw(st.integers(max(1, biggest // 2), biggest * 3), label="num_blocks")
    engine = data.draw(st.sampled_from(["fast", "reference"]))
    plain = run_open(engine, reqs, cfg, nb, id_block_tokens=H, replicas=2, router="prefix_aware")
    empty = run_open(engine, reqs, cfg, nb, id_block_tokens=H, replicas=2, router="prefix_aware",
                     offload=OffloadPlan(1e6, (("host", 0, 1e9), ("disk", 0, 1e8))))
    for r in empty.pool.replicas:   # nothing held, nothing reloaded; then the rest must agree
        for tier in r.cache.tiers.tiers:
            assert tier.used == tier.reloaded == 0 and tier.reload_s == 0.0
        r.cache.tiers = None
    problems = compare_runs(empty, plain)
    assert not problems, "\n".join(problems[:8]) + "\n" + describe(reqs, cfg, nb, H=H)


# --- sizing from the hardware profile --------------------------------------------
def _plan(gpu: str, **offload):
    model = load_model("llama-3-8b")
    hw = load_hardware(gpu)
    mem = plan_memory(model, hw, 2)
    e = EngineConfig(kv_offload=offload)
    return plan_offload(e, hw, mem, 2, 2, "pools[0]"), mem, hw


def test_capacities_and_bandwidths_come_from_the_profile():
    p, mem, hw = _plan("h100-sxm", disk_gb=1000)
    block = mem.kv_bytes_per_token * mem.block_size
    (host, hb, hr), (disk, db, dr) = p.tiers
    assert (host, disk) == ("host", "disk")
    assert hb == int(hw.host_memory_gb_per_gpu * 2 * 1e9 // block) and db == int(1000e9 // block)
    assert hr == hw.host_link_gb_s * 1e9 * 2 and dr == min(hw.nvme_read_gb_s_per_gpu * 2, hw.host_link_gb_s * 2) * 1e9
    p, _, _ = _plan("h100-sxm", host_gb=10, host_gb_per_s=25)
    assert p.tiers == (("host", int(10e9 // block), 50e9),)


def test_a_tier_of_a_sliding_window_model_holds_every_groups_chunk():
    """vLLM's OffloadingConnector stores each block's chunk of every sliding-window group beside
    the full-attention one, each a host block of the pool's bytes per block: gpt-oss-120b's 18
    sliding-window layers beside 18 full-attention ones halve the tokens a tier holds (100 GB:
    169,542 -> 84,771 blocks of 16 tokens). A pool without shared windows stores the block alone."""
    hw = load_hardware("h100-sxm")
    e = EngineConfig(kv_offload={"host_gb": 100, "disk_gb": 1000})
    mem = plan_memory(load_model("gpt-oss-120b"), hw, 1, weight_dtype="mxfp4")
    assert mem.windows is not None and mem.windows.stored_share == 1.0
    block = mem.kv_bytes_per_token * mem.block_size
    p = plan_offload(e, hw, mem, 1, 1, "pools[0]")
    assert [t[1] for t in p.tiers] == [int(100e9 // (2 * block)), int(1000e9 // (2 * block))] == [84_771, 847_710]
    apart = plan_offload(e, hw, dataclasses.replace(mem, windows=None), 1, 1, "pools[0]")
    assert [t[1] for t in apart.tiers] == [169_542, 1_695_421]


@pytest.mark.parametrize("gpu, offload, key, words", [
    ("h100-sxm", {"host_gb": 1e6}, "host_gb", "exceeds"),
    ("h100-sxm", {"disk_gb": 1e9}, "disk_gb", "exceeds"),
    ("l40s", {}, "host_gb", "states no host_memory_gb_per_gpu"),
    ("l40s", {"host_gb": 1e6}, "host_gb", "more than any server holds"),   # no server figure: held to any server's
    ("l40s", {"host_gb": 0, "disk_gb": 10}, "disk_gb", "states no nvme_gb_per_gpu"),
])
def test_what_the_server_cannot_hold_is_refused(gpu, offload, key, words):
    with pytest.raises(LlmsimError) as e:
        _plan(gpu, **offload)
    assert e.value.key_path == f"pools[0].engine.kv_offload.{key}" and words in e.value.message
