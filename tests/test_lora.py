"""Multi-LoRA serving (pools[].lora): the batch rule, the adapter caches, the
kernels' price, the adapter draws, and the two engines agreeing under them."""
from __future__ import annotations

from collections import Counter, OrderedDict
from functools import lru_cache
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from helpers_engine import compare_runs, describe, engine_configs, run_open, workloads
from test_prefix_cache import cache_configs, prefixed
from simulator.costmodel import CostModel
from simulator.costmodel.lora import LoraCost, adapter_bytes, adapter_shard_bytes
from simulator.engine.lora import AdapterSlots, LoraPlan
from simulator.engine.reference import ReferenceReplica
from simulator.engine.replica import FastReplica
from simulator.fleet.lora import LoraPool, LoraSpec
from simulator.fleet.setup import setup_pool
from simulator.profiles import load_hardware, load_model
from simulator.scenario.schema import PoolSpec
from workloads.adapters import AdapterDraws
from workloads.request import Request
from workloads.spec import WorkloadSpec, spawn_streams

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@lru_cache(maxsize=None)
def lora_cost_model(model: str, gpu: str, rank: int) -> CostModel:
    cm = CostModel(load_model(model), load_hardware(gpu))
    cm.lora = LoraCost(cm, rank)
    return cm


# --- the batch rule, in both engines, at every iteration --------------------------------------------
def _batch_within_max_loras(rep) -> None:
    """The running batch holds at most max_loras distinct adapters, and the
    replica's count of them is the batch's."""
    held = Counter(s.req.adapter for s in rep.running)
    assert len(held) <= rep.lora.plan.max_loras, f"{len(held)} adapters in the batch > max_loras"
    assert held == Counter(rep.lora.running), (held, rep.lora.running)


class CheckedReference(ReferenceReplica):
    def _plan(self, now):   # every iteration is planned here
        out = super()._plan(now)
        _batch_within_max_loras(self)
        return out


class CheckedFast(FastReplica):
    def _plan(self, now):   # every stretch is planned here, and a stretch's batch is fixed
        out = super()._plan(now)
        _batch_within_max_loras(self)
        return out


@st.composite
def lora_plans(draw) -> LoraPlan:
    max_loras = draw(st.integers(1, 4), label="max_loras")
    cpu = draw(st.integers(max_loras, max_loras + 4), label="max_cpu_loras")
    host = draw(st.sampled_from([0.0, 0.002, 0.03]), label="host load s")
    return LoraPlan(max_loras, cpu, host, draw(st.sampled_from([0.0, 0.01, 0.2]), label="disk load s"))


@settings(max_examples=150, **SETTINGS)
@given(data=st.data())
def test_engines_agree_and_no_batch_holds_more_than_max_loras(data):
    reqs = data.draw(workloads(max_n=40), label="requests")
    n_adapters = data.draw(st.integers(1, 10), label="adapters")
    for r in reqs:
        r.adapter = data.draw(st.integers(0, n_adapters - 1))
    cfg = data.draw(engine_configs(scheduler="continuous", kv="paged"), label="cfg")
    if cfg.reserves_output:     # TensorRT-LLM's admission: refused beside LoRA
        cfg = cfg.model_copy(update={"kv_admission": "on_demand"})
    need = max(-(-(r.input_tokens + r.output_tokens) // cfg.block_size) for r in reqs)
    nb = data.draw(st.integers(need, need * 4), label="num_blocks")
    plan = data.draw(lora_plans(), label="lora")
    rank = data.draw(st.sampled_from([8, 64]), label="max_lora_rank")
    kw = dict(replicas=data.draw(st.integers(1, 2), label="replicas"), router="least_outstanding",
              cm=lora_cost_model("llama-3-8b", "h100-sxm", rank), lora=plan)
    from simulator.fleet import pool as fleet
    with mock.patch.dict(fleet.ENGINES, {"fast": CheckedFast, "reference": CheckedReference}):
        fast = run_open("fast", reqs, cfg, nb, **kw)
        ref = run_open("reference", reqs, cfg, nb, **kw)
    order = sorted(ref.requests, key=lambda r: (r.arrival, r.id))
    event("skipped for its adapter: " + str(any(b.admitted < a.admitted for a, b in zip(order, order[1:])
                                                if b.priority == a.priority)))
    problems = compare_runs(fast, ref)
    assert not problems, ("fast and reference disagree:\n  " + "\n  ".join(problems[:12]) + "\nreproduction: "
                          + describe(reqs, cfg, nb, plan=plan, adapters=[r.adapter for r in reqs]))
    stats = [(r.stats(0)["lora"]) for r in fast.pool.replicas], [r.stats(0)["lora"] for r in ref.pool.replicas]
    assert [{k: v for k, v in s.items() if k != "load_s"} for s in stats[0]] == \
           [{k: v for k, v in s.items() if k != "load_s"} for s in stats[1]]


@settings(max_examples=80, **SETTINGS)
@given(data=st.data())
def test_engines_agree_with_a_prefix_cache_cancels_and_per_adapter_ids(data):
    cfg = data.draw(cache_configs(), label="cfg")
    cfg = cfg.model_copy(update={"scheduler": "continuous", "kv_admission": "on_demand"})
    reqs = data.draw(prefixed(cfg.block_size), label="requests")
    n = data.draw(st.integers(1, 6), label="adapters")
    u = data.draw(st.lists(st.floats(0.0, 0.999), min_size=len(reqs), max_size=len(reqs)), label="draws")
    assign = LoraPool(LoraSpec(adapters=n), lambda r: u[r.id])
    for r in reqs:
        assign.assign(r)
    cancels = [(r.arrival + data.draw(st.floats(0.0, 0.3)), r.id) for r in reqs if data.draw(st.integers(0, 4)) == 0]
    biggest = max(-(-(r.input_tokens + r.output_tokens) // cfg.block_size) for r in reqs)
    nb = data.draw(st.integers(max(1, biggest // 2), biggest * 3), label="num_blocks")
    kw = dict(replicas=data.draw(st.integers(1, 2)), router="prefix_aware", id_block_tokens=cfg.block_size,
              cm=lora_cost_model("llama-3-8b", "h100-sxm", 16), lora=data.draw(lora_plans(), label="lora"),
              cancels=cancels)
    from simulator.fleet import pool as fleet
    with mock.patch.dict(fleet.ENGINES, {"fast": CheckedFast, "reference": CheckedReference}):
        fast = run_open("fast", reqs, cfg, nb, **kw)
        ref = run_open("reference", reqs, cfg, nb, **kw)
    problems = compare_runs(fast, ref)
    assert not problems, "\n".join(problems[:12]) + "\n" + describe(reqs, cfg, nb, adapters=[r.adapter for r in reqs])


def test_a_request_whose_adapter_does_not_fit_is_skipped_not_blocking():
    """max_loras 1: a request of adapter 1 behind a running adapter 0 waits, and
    the adapter-0 request that arrived after it is admitted first (vLLM skips
    the waiting request, it does not block the queue)."""
    reqs = [Request(0, 0.0, 100, 50), Request(1, 0.001, 100, 5), Request(2, 0.002, 100, 5)]
    for r, a in zip(reqs, (0, 1, 0)):
        r.adapter = a
    from simulator.engine.config import EngineConfig
    plan = LoraPlan(1, 1, 0.0, 0.0)
    for engine in ("fast", "reference"):
        run = run_open(engine, reqs, EngineConfig(), 1000, cm=lora_cost_model("llama-3-8b", "h100-sxm", 16),
                       lora=plan)
        r0, r1, r2 = run.requests
        assert r2.admitted < r1.admitted, engine
        assert r1.admitted >= r0.finish and r1.admitted >= r2.finish, engine   # adapter 1 waits for the batch to empty


# --- the adapter caches: an independent LRU oracle -----------------------------------------------------
class TwoLru:
    """vLLM's two caches written out: GPU slots and host cache, LRU, the
    batch's adapters touched every iteration (in adapter order)."""

    def __init__(self, plan: LoraPlan):
        self.plan = plan
        self.gpu: OrderedDict = OrderedDict()
        self.cpu: OrderedDict = OrderedDict()
        self.running: Counter = Counter()

    def tick(self) -> None:
        for a in sorted(+self.running):
            for c in (self.gpu, self.cpu):
                c.move_to_end(a)

    def enter(self, a: int) -> str:
        if self.running[a]:
            kind = "hit"
        else:
            kind = "hit" if a in self.gpu else "host" if a in self.cpu else "disk"
            for c, cap in ((self.gpu, self.plan.max_loras), (self.cpu, self.plan.max_cpu_loras)):
                c[a] = True
                c.move_to_end(a)
                while len(c) > cap:
                    victim = next(k for k in c if not self.running[k] and k != a)
                    del c[victim]
        self.running[a] += 1
        return kind


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_adapter_caches_are_the_lru_caches_vllm_keeps(data):
    plan = data.draw(lora_plans())
    slots, oracle = AdapterSlots(plan), TwoLru(plan)
    iteration = 0
    seqs: list[tuple[int, int]] = []    # running sequences: (adapter, iteration it joined before)
    admitting = False                   # the plan after an iteration: leaves first, then admissions
    for _ in range(data.draw(st.integers(1, 80))):
        op = data.draw(st.sampled_from(["enter", "enter", "leave", "tick"]))
        if op == "tick":
            iteration += 1
            admitting = False
            oracle.tick()
        elif op == "enter":
            a = data.draw(st.integers(0, 9))
            if slots.blocked(a):
                assert len(+oracle.running) >= plan.max_loras and not oracle.running[a]
                continue
            admitting = True
            before = (slots.hits, slots.host_loads, slots.disk_loads)
            kind = oracle.enter(a)
            cost = slots.enter(a)
            seqs.append((a, iteration))
            after = (slots.hits, slots.host_loads, slots.disk_loads)
            assert [y - x for x, y in zip(before, after)] == [kind == k for k in ("hit", "host", "disk")], kind
            assert cost == {"hit": 0.0, "host": plan.host_load_s, "disk": plan.host_load_s + plan.disk_load_s}[kind]
        else:   # a sequence leaves after at least one iteration in the batch, before the next admissions
            ran = [i for i, (_, t) in enumerate(seqs) if t < iteration]
            if not ran or admitting:
                continue
            a, _ = seqs.pop(data.draw(st.sampled_from(ran)))
            oracle.running[a] -= 1
            slots.leave(a, iteration)
        assert len(slots.idle) + len(slots.running) <= plan.max_cpu_loras


def test_a_host_copy_then_a_disk_read_by_hand():
    s = AdapterSlots(LoraPlan(max_loras=1, max_cpu_loras=2, host_load_s=0.01, disk_load_s=0.1))
    assert s.enter(0) == pytest.approx(0.11)      # never seen: disk, then host link
    s.leave(0, 1)
    assert s.enter(1) == pytest.approx(0.11)
    s.leave(1, 2)
    assert s.enter(1) == 0.0                      # still in its slot
    s.leave(1, 3)
    assert s.enter(0) == pytest.approx(0.01)      # in host memory, not in the one slot
    s.leave(0, 4)
    assert s.enter(2) == pytest.approx(0.11)      # the host cache drops 1, the least recent
    s.leave(2, 5)
    assert s.enter(1) == pytest.approx(0.11)


# --- sizes and the kernels' price ------------------------------------------------------------------------
def test_adapter_size_is_rank_times_in_plus_out_of_every_projection():
    m = load_model("llama-3-8b")     # h 4096, q 4096, kv 1024, ffn 14336, 32 layers
    per_layer = (4096 + 4096) + 2 * (4096 + 1024) + (4096 + 4096) + 2 * (4096 + 14336) + (14336 + 4096)
    assert adapter_bytes(m, 16) == 16 * per_layer * 2 * 32 == 83_886_080
    # TP splits every projection's B or A: the shards hold the adapter once, plus A or B copies.
    assert adapter_shard_bytes(m, 16, 2) < adapter_bytes(m, 16) < 2 * adapter_shard_bytes(m, 16, 2)


def test_lora_kernels_cost_grows_with_rank_adapters_and_tokens():
    base = CostModel(load_model("llama-3-8b"), load_hardware("h100-sxm"))
    t = {r: lora_cost_model("llama-3-8b", "h100-sxm", r) for r in (8, 64)}
    step = base.step_time((), 32, 32_000)
    assert t[8].step_time((), 32, 32_000, adapters=1) > step
    assert t[64].step_time((), 32, 32_000, adapters=1) > t[8].step_time((), 32, 32_000, adapters=1)
    assert t[64].step_time((), 32, 32_000, adapters=8) > t[64].step_time((), 32, 32_000, adapters=1)
    assert t[64].lora_time(4096, 4) > t[64].lora_time(32, 4)
    for B, d in ((1, 1), (32, 4), (200, 9)):   # the fast engine's affine form holds with LoRA
        a, b = t[64].decode_coefficients(B, d)
        assert a + b * 12_345 == pytest.approx(t[64].step_time((), B, 12_345, adapters=d), rel=1e-12)


def test_the_slots_come_out_of_the_kv_cache():
    plain = setup_pool(PoolSpec(model="llama-3-8b", gpu="h100-sxm"), 0)
    spec = PoolSpec(model="llama-3-8b", gpu="h100-sxm", lora={"max_loras": 8, "max_lora_rank": 64, "adapters": 5})
    lora = setup_pool(spec, 0)
    slots = 8 * adapter_bytes(load_model("llama-3-8b"), 64)
    assert lora.memory.kv_capacity_bytes == pytest.approx(plain.memory.kv_capacity_bytes - slots)
    assert lora.memory.num_blocks < plain.memory.num_blocks
    assert lora.lora.host_load_s == pytest.approx(adapter_bytes(load_model("llama-3-8b"), 64) / 64e9)


# --- which adapter a request asks for ---------------------------------------------------------------------
WL = WorkloadSpec.model_validate({"num_requests": 5000, "arrival": {"type": "poisson", "rate_per_s": 10},
                                  "input_tokens": {"dist": "fixed", "value": 10},
                                  "output_tokens": {"dist": "fixed", "value": 10}})


def test_draws_do_not_depend_on_the_order_requests_come_in():
    a, b = AdapterDraws(WL, 7), AdapterDraws(WL, 7)
    ids = list(range(0, 9000, 7))
    fwd = [a(Request(i, 0.0, 1, 1)) for i in ids]
    back = [b(Request(i, 0.0, 1, 1)) for i in reversed(ids)]
    assert fwd == back[::-1]
    assert fwd == spawn_streams(7).adapters.random(9000)[ids].tolist()   # key k: the stream's k-th draw
    assert 0.0 <= a(Request(10**12, 0.0, 1, 1)) < 1.0                    # a far key costs one chunk
    assert len(a.chunks) == len({i // 256 for i in ids}) + 1
    other = AdapterDraws(WL, 8)
    assert [other(Request(i, 0.0, 1, 1)) for i in ids] != fwd     # another seed, other draws


def test_a_session_keeps_its_adapter_and_zipf_favours_the_first():
    chat = WorkloadSpec.model_validate({
        "num_sessions": 10, "arrival": {"type": "poisson", "rate_per_s": 1},
        "input_tokens": {"dist": "fixed", "value": 10}, "output_tokens": {"dist": "fixed", "value": 10},
        "session": {"type": "chat", "turns": {"dist": "fixed", "value": 3},
                    "think_time_s": {"dist": "fixed", "value": 1.0}}})
    draws = AdapterDraws(chat, 0)
    pool = LoraPool(LoraSpec(adapters=50, popularity={"type": "zipf", "s": 1.2}), draws)
    turns = [Request(i, 0.0, 1, 1, session=i // 3) for i in range(30)]
    for r in turns:
        pool.assign(r)
    assert all(len({r.adapter for r in turns[s * 3:s * 3 + 3]}) == 1 for s in range(10))
    lone = LoraPool(LoraSpec(adapters=50, popularity={"type": "zipf", "s": 1.2}), AdapterDraws(WL, 0))
    reqs = [Request(i, 0.0, 1, 1) for i in range(5000)]
    for r in reqs:
        lone.assign(r)
    share = Counter(r.adapter for r in reqs)
    p0 = 1.0 / sum(1.0 / k ** 1.2 for k in range(1, 51))
    assert share[0] / 5000 == pytest.approx(p0, abs=0.02)
    assert share[0] > share[1] > share[5]
    uniform = LoraPool(LoraSpec(adapters=4), AdapterDraws(WL, 0))
    for r in reqs:
        uniform.assign(r)
    assert all(abs(n / 5000 - 0.25) < 0.03 for n in Counter(r.adapter for r in reqs).values())


def test_prefix_cache_ids_are_shared_within_an_adapter_only():
    """vLLM hashes a block with its adapter: the same system prompt under two
    adapters is two cache entries."""
    class Fixed:
        def __init__(self, u):
            self.u = u

        def __call__(self, req):
            return self.u[req.id]
    pool = LoraPool(LoraSpec(adapters=2), Fixed([0.1, 0.9, 0.2]))
    reqs = [Request(i, 0.0, 64, 1, blocks=(100, 101, 102 + i)) for i in range(3)]
    for r in reqs:
        pool.assign(r)
    assert [r.adapter for r in reqs] == [0, 1, 0]
    assert reqs[0].blocks[0] == reqs[2].blocks[0] != reqs[1].blocks[0]
    assert reqs[0].blocks[1:] == (101, 102)


# --- the what-if: more adapters, less throughput -------------------------------------------------------------
def test_throughput_falls_as_adapters_grow():
    from simulator.runner import simulate
    from simulator.scenario.load import load_scenario
    out = {}
    path = Path(__file__).resolve().parents[1] / "scenarios" / "multi-lora.yaml"
    for n in (10, 100, 1000):
        sc, src = load_scenario(path,
                                overrides=["workload.num_requests=400", f"pools.lora-8b.lora.adapters={n}"])
        out[n] = simulate(sc, "fast", src).results["output_throughput"]
    assert out[10] > out[100] > out[1000], out
