"""Contiguous KV allocation (``pools[].engine.kv_allocation: contiguous``):
each admitted request reserves its maximum length until it ends, so the
reservations, not the tokens, cap concurrency; what llmsim refuses to
combine with it; and the QuickCode rung that shows paging's jump."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers_case_studies import path_of
from helpers_engine import make_requests, run_open, workloads
from simulator.engine.blocks import ceil_div
from simulator.engine.config import EngineConfig
from simulator.errors import LlmsimError
from simulator.runner import simulate
from simulator.scenario.load import load_scenario
from simulator.scenario.overlays import load_with_variants
from simulator.scenario.variants import ladder_steps
from workloads.request import Status

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def contiguous(**kw) -> EngineConfig:
    return EngineConfig(kv_allocation="contiguous", prefix_cache=False, **kw)


@settings(max_examples=60, **SETTINGS)
@given(reqs=workloads(max_n=40, max_in=400, max_out=200), bs=st.sampled_from([1, 16]),
       slots=st.integers(1, 6), engine=st.sampled_from(["fast", "reference"]))
def test_reservations_cap_concurrency(reqs, bs, slots, engine):
    """With max_model_len reserved per request, at most num_blocks // R run
    at once, however short the requests, and none is ever preempted; the
    tokens fill no more than the reservations hold."""
    cfg = contiguous(block_size=bs)
    r = run_open(engine, reqs, cfg, 1)   # the model's max_model_len, from the replica
    mml = r.pool.replicas[0].max_model_len
    per = ceil_div(mml, bs)
    nb = slots * per + per - 1           # room for `slots` reservations, not one more
    run = run_open(engine, reqs, cfg, nb)
    s = run.stats()[0]
    assert s["batch_max"] <= slots
    assert s["kv_used_max"] <= slots * per
    assert s["kv_filled_max"] <= s["kv_used_max"]
    assert all(q.preemptions == 0 for q in run.requests)
    assert all(q.status == Status.FINISHED for q in run.requests)


def test_paged_runs_more_sequences_in_the_same_memory():
    """Short requests in KV for four max-length reservations: paging runs
    them all at once, contiguous allocation four."""
    reqs = make_requests([0.0] * 32, [200] * 32, [50] * 32)
    paged = run_open("fast", reqs, EngineConfig(block_size=16, prefix_cache=False), 4 * 512)
    cont = run_open("fast", reqs, contiguous(block_size=16), 4 * 512)   # llama-3-8b: 8,192 tokens = 512 blocks
    assert cont.stats()[0]["batch_max"] == 4
    assert paged.stats()[0]["batch_max"] == 32
    assert max(q.first_token for q in cont.requests) > 3 * max(q.first_token for q in paged.requests)


def test_max_new_tokens_reserves_prompt_plus_limit_and_rejects_beyond():
    reqs = make_requests([0.0, 0.0, 0.0], [100, 300, 50], [20, 64, 65])
    run = run_open("reference", reqs, contiguous(block_size=16, max_new_tokens=64), 100)
    assert [q.status for q in run.requests] == [Status.FINISHED, Status.FINISHED, Status.REJECTED]
    # 100 + 64 and 300 + 64 tokens reserved: 11 + 23 blocks while both run
    assert run.stats()[0]["kv_used_max"] == 11 + 23


@pytest.mark.parametrize("engine, message", [
    ({"kv_allocation": "contiguous", "prefix_cache": True}, "set prefix_cache: false"),
    ({"max_new_tokens": 80}, "needs kv_allocation: contiguous"),
    ({"kv_allocation": "blocks", "prefix_cache": False}, "paged"),
])
def test_unmodelled_combinations_are_refused(engine, message):
    sets = [f"pools.node.engine.{k}={v}" for k, v in engine.items()]
    with pytest.raises(LlmsimError) as e:
        load_scenario(path_of("quickcode"), sets)
    assert message in str(e.value) and "pools" in str(e.value)


def test_quickcode_paging_holds_several_times_the_sequences():
    """The QuickCode ladder's tgi rung (contiguous KV, max_model_len reserved)
    against its continuous rung (paged) at the same KV memory: paging runs
    at least 3x the sequences at once (the case study: 32 -> 128) and its
    TTFT falls by more than 10x; the contiguous reservations sit mostly empty."""
    path = path_of("quickcode")
    sc, _ = load_scenario(path)
    steps = {s.name: s for s in ladder_steps(sc.variants, sc.ladder)}
    sets = ["workload.duration_s=40"]
    tgi, paged = (simulate(load_with_variants(path, steps[n].variants, sets), source=path).results["llmsim"]
                  for n in ("tgi", "continuous"))
    block = tgi["kv_allocation"]
    assert "kv_allocation" not in paged
    assert abs(tgi["kv_tokens_per_replica"] / paged["kv_tokens_per_replica"] - 1) < 0.05
    assert tgi["max_batch_size"] <= block["max_sequences_per_replica"]
    assert paged["max_batch_size"] >= 3 * tgi["max_batch_size"]
    assert block["filled_fraction_of_reserved"] < 0.5


def test_a_sliding_window_models_reservations_count_its_windows(tmp_path):
    """gpt-oss-120b under vLLM's accounting holds nine window blocks a running sequence beside its
    reservation, as both engines charge them: 378 sequences of 4,096 tokens fit one H200's 100,337
    blocks, not the 391 that the reservations alone would."""
    from simulator.scenario.schema import Scenario

    sc = Scenario.model_validate({
        "name": "swa-contiguous", "seed": 1,
        "workload": {"duration_s": 2, "arrival": {"type": "poisson", "rate_per_s": 2},
                     "input_tokens": {"dist": "uniform", "min": 16, "max": 500},
                     "output_tokens": {"dist": "uniform", "min": 4, "max": 48}},
        "pools": [{"name": "p", "model": "gpt-oss-120b", "gpu": "h200",
                   "engine": {"backend": "vllm", "kv_allocation": "contiguous", "prefix_cache": False,
                              "max_model_len": 4096}}]})
    out = simulate(sc).results["llmsim"]
    windows = out["kv_memory"]["window_blocks_per_sequence"]
    assert windows == 9
    assert out["kv_allocation"]["max_sequences_per_replica"] == out["kv_blocks_per_replica"] // (256 + windows)


def test_each_attention_dp_rank_holds_whole_reservations_of_its_own():
    """Two attention-DP ranks of 46,734 usable blocks each hold 24 reservations of 30,000 tokens
    (1,875 blocks) apiece, 48 a replica: their pooled 93,468 blocks would count 49, one that no
    rank's pool holds (a request stays on its rank)."""
    from simulator.fleet.setup import setup_pool
    from simulator.report.fleet_report import _contiguous_block
    from simulator.scenario.schema import Scenario

    sc = Scenario.model_validate({
        "name": "dp-contiguous", "workload": {"num_requests": 1, "arrival": {"type": "concurrency", "concurrency": 1},
                                             "input_tokens": {"dist": "fixed", "value": 16},
                                             "output_tokens": {"dist": "fixed", "value": 4}},
        "pools": [{"model": "mixtral-8x7b", "gpu": "h100-sxm", "tp": 2, "dp": 2, "ep": 4,
                   "engine": {"backend": "vllm", "kv_allocation": "contiguous", "prefix_cache": False,
                              "max_model_len": 30_000}}]})
    ps = setup_pool(sc.pools[0], 0)
    assert (ps.memory.usable_rank_blocks, ps.memory.usable_blocks, ps.memory.block_size) == (46_734, 93_468, 16)
    stats = [{"kv_used_area": 0.0, "kv_filled_area": 0.0, "kv_filled_max": 0}]
    assert _contiguous_block(ps, stats, 1.0)["max_sequences_per_replica"] == 2 * (46_734 // 1875) == 48
