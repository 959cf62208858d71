"""SGLang's KV admission (``kv_admission: expected_output``), against hand computations.

A waiting request is admitted only while its prompt and expected output are
less than the free KV less the running requests' remaining outputs scaled by
new_token_ratio; the ratio decays every decode-only iteration, is back at its
start when the replica idles and is re-estimated after a preemption. The
differential and property tests hold the fast engine to the reference in this
mode (``helpers_engine.engine_configs`` draws it); these pin what it means.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers_engine import capacities, cost_model, engine_configs, make_requests, run_open, workloads
from simulator.engine.base import ReplicaBase
from simulator.engine.config import EngineConfig
from simulator.engine.sequence import DECODE
from simulator.fleet.setup import expected_output_admission

ENGINES = ["fast", "reference"]
# The ratio starts at 0.5 and falls 0.025 an iteration to 0.25 (ten iterations).
RATIO = dict(new_token_ratio_init=0.5, new_token_ratio_min_factor=0.5, new_token_ratio_decay_steps=10)


def sglang_engine(admission: str = "expected_output", **kw) -> EngineConfig:
    """SGLang's scheduling (page size 1, chunks in prefill-only batches) without its overheads."""
    extra = RATIO if admission == "expected_output" else {}
    return EngineConfig(block_size=1, chunked_prefill=True, mixed_prefill=False, prefix_cache=False,
                        kv_admission=admission, **{**extra, **kw})


def ratio(j: int) -> float:
    return max(0.5 - j * 0.025, 0.25) if j else 0.5


def decodes_until_admitted(pool: int, running_prompt: int, running_output: int, cost: int) -> int:
    """Decode iterations of the one running request until the waiting one passes: after j of them
    the runner holds prompt + j tokens and has min(output − 1 − j, clip) left to write."""
    j = 0
    while not cost < pool - (running_prompt + j) - ratio(j) * (running_output - 1 - j):
        j += 1
    return j


@pytest.mark.parametrize("engine", ENGINES)
def test_a_request_waits_for_the_running_output_its_prompt_alone_would_not(engine):
    # 390 tokens of KV. A (100 in, 200 out) is admitted at 0 (300 < 390) and charges its 200 to the
    # pass; B (100 in, 100 out) then needs 200 < 390 − 100 − 200: it waits, where its prompt alone
    # (100 blocks of the 290 free) would have joined A's prefill batch.
    reqs = make_requests([0.0, 0.0], [100, 100], [200, 100])
    on_prompt = run_open(engine, reqs, sglang_engine("on_demand"), 390).requests
    assert on_prompt[1].admitted == 0.0
    a, b = run_open(engine, reqs, sglang_engine(), 390).requests
    # After A's prefill it decodes alone; B passes once 90 − j > ratio(j) × (199 − j): j = 3 (83.3).
    j = decodes_until_admitted(390, 100, 200, 200)
    assert j == 3
    cm = cost_model()
    t = a.first_token + sum(cm.step_time([], 1, 101 + i, 1) for i in range(j))
    assert b.admitted == pytest.approx(t, rel=1e-12)
    assert b.admitted > a.first_token


@pytest.mark.parametrize("engine", ENGINES)
def test_a_rank_held_full_admits_nothing_until_a_request_leaves(engine):
    # 520 tokens of KV. A (100 in, 200 out) and C (100 in, 20 out) pass at 0 (300, then 120 < 220); B
    # (100 in, 100 out) fails beside them (200 < 100 does not). Tried again at the next plan, without
    # the pass's charges, it joins after the prefill batch; SGLang, its batch_is_full set by that
    # failure, tries again only once C has left.
    reqs = make_requests([0.0, 0.0, 0.0], [100, 100, 100], [200, 20, 100])
    a, c, b = run_open(engine, reqs, sglang_engine(), 520).requests
    assert b.admitted == a.first_token < c.finish
    a, c, b = run_open(engine, reqs, sglang_engine(full_until_leave=True), 520).requests
    assert b.admitted == c.finish


@pytest.mark.parametrize(("model", "version", "held"), [
    ("gpt-oss-120b", "0.5.11", True), ("gpt-oss-120b", "0.5.12", False), ("gpt-oss-120b", "0.5.23", False),
    ("llama-3.1-8b", "0.5.12", True), ("llama-3.1-8b", "0.5.23", True)])
def test_a_hybrid_swa_pool_clears_the_full_flag_at_every_plan_from_0_5_12(model, version, held):
    """SGLang's get_new_batch_prefill resets batch_is_full at every plan for a hybrid-SWA pool from 0.5.12
    ('if self.enable_priority_preemption or self.is_hybrid_swa'; priority preemption alone in 0.5.10 and
    0.5.11): gpt-oss, whose pool splits into full-attention and sliding-window parts, then tries its head
    again each plan, as full_until_leave: false runs; a model without sliding-window layers does not."""
    from simulator.fleet.setup import setup_pool
    from simulator.scenario.schema import PoolSpec

    spec = PoolSpec.model_validate({"name": "p", "model": model, "gpu": "h200", "replicas": 1,
                                    "engine": {"backend": "sglang", "backend_version": version}})
    ps = setup_pool(spec, 0)
    assert (ps.engine or ps.spec.engine).full_until_leave is held


def test_a_pool_that_keeps_every_window_token_holds_its_flag():
    """--disable-hybrid-swa-memory (swa_full_tokens_ratio 1: every layer keeps every token) is no hybrid pool."""
    from simulator.fleet.setup import setup_pool
    from simulator.scenario.schema import PoolSpec

    spec = PoolSpec.model_validate({"name": "p", "model": "gpt-oss-120b", "gpu": "h200", "replicas": 1,
                                    "engine": {"backend": "sglang", "kv_memory": {"swa_full_tokens_ratio": 1.0}}})
    ps = setup_pool(spec, 0)
    assert (ps.engine or ps.spec.engine).full_until_leave is True


@pytest.mark.parametrize("engine", ENGINES)
def test_the_ratio_is_back_at_its_start_when_the_replica_idles(engine):
    # The same pair again at t = 100, after the first has ended: B waits the same three decodes.
    # Had the ratio stayed at its floor (0.25), B' would pass at once: 90 > 0.25 × 199.
    a, b, a2, b2 = run_open(engine, make_requests([0, 0, 100, 100], [100] * 4, [200, 100, 200, 100]),
                            sglang_engine(), 390).requests
    assert b2.finish > 0 and a.finish < 100 and b.finish < 100
    assert b2.admitted - a2.first_token == pytest.approx(b.admitted - a.first_token, rel=1e-9)
    assert b2.admitted > a2.first_token


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_the_ratio_resets_only_with_nothing_waiting(data):
    """SGLang resets the ratio in its idle housekeeping: 0.5.9-0.5.10.post1 whenever no batch runs
    (scheduler_runtime_checker_mixin.py self_check_during_idle), from 0.5.11 only with the waiting
    queue empty too (on_idle behind is_fully_idle). A replica here plans no iteration only with
    nothing waiting, whatever waits fitting it empty (or rejected on arrival), so the releases'
    two rules are one; were that to change, the later one would need a release rule."""
    reqs = data.draw(workloads(min_n=5, max_n=40, max_in=600, max_out=300), label="requests")
    cfg = data.draw(engine_configs(scheduler="continuous", kv="paged", admission="expected_output"), label="cfg")
    nb = data.draw(capacities(reqs, cfg), label="num_blocks")
    waiting_at_reset: list[int] = []
    track = ReplicaBase._track_ratio

    def watch(self, chunks: list, decoding: list[int]) -> None:
        if not (any(self.retracted) or chunks or any(decoding)):
            waiting_at_reset.append(self.queued())
        track(self, chunks, decoding)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ReplicaBase, "_track_ratio", watch)
        run_open("reference", reqs, cfg, nb)
    assert not any(waiting_at_reset)


def test_the_ratio_after_a_preemption_is_the_kept_batch_s_progress(monkeypatch):
    """After a preemption the ratio is (Σ decoded + 20 n) / (Σ outputs + 1) over the decoding
    requests the preemption left running, at most 1; the request with the fewest output tokens
    goes first."""
    seen: list[tuple[float, list[tuple[int, int]], list[int]]] = []
    track = ReplicaBase._track_ratio

    def watch(self, chunks: list, decoding: list[int]) -> None:
        retracted = any(self.retracted)
        track(self, chunks, decoding)
        if retracted:
            kept = [(s.generated, s.req.output_tokens) for s in self.running if s.state == DECODE]
            seen.append((self.ratio_base[0], kept, [s.req.id for s in self.waiting]))

    monkeypatch.setattr(ReplicaBase, "_track_ratio", watch)
    # A ratio of 0.1 lets B in beside A long before A's output is written; 150 tokens hold A's 10 + 100
    # and B's 10 + 100 only until the pair has written 130.
    cfg = sglang_engine(new_token_ratio_init=0.1)
    run = run_open("reference", make_requests([0.0, 0.001], [10, 10], [100, 100]), cfg, 150)
    a, b = run.requests
    assert b.preemptions >= 1 and a.preemptions == 0
    r, kept, waiting = seen[0]
    assert len(kept) == 1 and waiting == [1]      # A kept (more output), B retracted
    decoded, out = kept[0]
    assert r == pytest.approx(min(1.0, (decoded + 20) / (out + 1)), rel=1e-15)
    fast = run_open("fast", make_requests([0.0, 0.001], [10, 10], [100, 100]), cfg, 150).requests
    assert [x.finish for x in fast] == pytest.approx([x.finish for x in run.requests], rel=1e-9)


def test_a_decode_pool_reserves_decode_tokens_and_dp_attention_starts_lower():
    e = sglang_engine(admission="expected_output", new_token_ratio_init=None)
    assert expected_output_admission(e, 1, decodes_for_another=True).kv_admission == "decode_reservation"
    assert expected_output_admission(e, 4, decodes_for_another=False).new_token_ratio_init == pytest.approx(0.21)
    assert expected_output_admission(e, 1, decodes_for_another=False) is e
    set_init = e.model_copy(update={"new_token_ratio_init": 0.5})
    assert expected_output_admission(set_init, 4, decodes_for_another=False) is set_init


@pytest.mark.parametrize("kw, words", [
    ({"kv_admission": "on_demand", "output_estimate_clip": 100}, "output_estimate_clip"),
    ({"kv_admission": "expected_output", "scheduler": "static"}, "continuous"),
    ({"kv_admission": "expected_output", "chunked_prefill": False, "mixed_prefill": False,
      "num_scheduler_steps": 2}, "multi-step"),
])
def test_expected_output_settings_are_refused_where_they_do_not_apply(kw, words):
    with pytest.raises(ValueError, match=words):
        EngineConfig(**kw)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("order, retracted", [("fewest_output", 0), ("newest", 1)])
def test_the_retraction_order_picks_the_request_sglang_drops(engine, order, retracted):
    # A (30 in) and B (10 in) join one prefill batch (an output estimate clipped at 10 lets both in:
    # 40 < 150, then 20 < 150 - 30 - 10) and decode together until their 40 + 2g tokens pass 150.
    # With equal outputs the length order retracts the longer prompt (A); SGLang to 0.5.16 under
    # speculative decoding drops the batch's last request (B, admitted after A).
    cfg = sglang_engine(output_estimate_clip=10, retraction_order=order)
    reqs = run_open(engine, make_requests([0.0, 0.0], [30, 10], [100, 100]), cfg, 150).requests
    assert [r.preemptions for r in reqs] == [int(i == retracted) for i in range(2)]


@pytest.mark.parametrize("version, order", [("0.5.9", "newest"), ("0.5.16", "newest"), ("0.5.17", "fewest_output")])
def test_sglang_retracts_from_the_batch_s_back_under_speculation_to_0_5_16(version, order):
    from simulator.profiles.backend import load_backend

    prof = load_backend("sglang")
    keys = prof.version_keys(version)
    assert prof.speculative_keys(keys).get("retraction_order", "fewest_output") == order
    assert "retraction_order" not in {k for k in keys if k != "speculative_engine"}    # without a draft: by length
