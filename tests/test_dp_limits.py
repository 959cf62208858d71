"""Attention data parallelism: every rank schedules its own batch under the stack's limits.

A replica of dp ranks holds dp × max_num_seqs sequences, and its token budget is dp × the
flag (vLLM, TensorRT-LLM) or the flag itself split among the ranks (SGLang); one prompt's
chunk never exceeds its rank's share.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine.config import EngineConfig
from simulator.errors import LlmsimError
from simulator.fleet.setup import rank_limits, setup_pool
from simulator.runner import simulate
from simulator.scenario.schema import Scenario
from workloads.request import Status


@settings(max_examples=40, deadline=None)
@given(budget=st.integers(64, 65536), seqs=st.integers(1, 64), dp=st.integers(1, 16),
       how=st.sampled_from(["per_rank", "split"]))
def test_a_rank_never_gets_more_than_the_flag_and_the_replica_holds_dp_ranks(budget, seqs, dp, how):
    e = EngineConfig(max_num_batched_tokens=max(budget, seqs), max_num_seqs=seqs, dp_limits=how)
    replica = rank_limits(e, dp)
    if dp == 1:
        assert replica is e
        return
    rank = e.max_num_batched_tokens if how == "per_rank" else max(1, e.max_num_batched_tokens // dp)
    assert replica.max_num_seqs == seqs * dp
    assert replica.max_num_batched_tokens == rank * dp
    assert replica.max_num_batched_tokens >= replica.max_num_seqs or how == "split"


def _burst(dp: int, backend: str, isl: int = 2048) -> Scenario:
    """Four prompts at once on one replica of four GPUs: dp attention ranks (expert parallel
    across them) and 4/dp-way tensor parallelism."""
    return Scenario.model_validate({
        "name": "dp", "workload": {"num_requests": 4, "arrival": {"type": "concurrency", "concurrency": 4},
                                   "input_tokens": {"dist": "fixed", "value": isl},
                                   "output_tokens": {"dist": "fixed", "value": 4}},
        "pools": [{"model": "mixtral-8x7b", "gpu": "h100-sxm", "tp": 4 // dp, "dp": dp, "ep": dp,
                   # a serial front end (2 us a prompt token) hands the burst to the scheduler one
                   # prompt at a time, so the first starts an iteration alone
                   "engine": {"backend": backend, "max_num_batched_tokens": 2048, "max_num_seqs": 8,
                              "prefix_cache": False, "tokenize_us_per_token": 2.0}}]})


@pytest.mark.parametrize("backend", ["vllm", "trtllm"])
def test_per_rank_budgets_prefill_one_prompt_on_each_rank_at_once(backend):
    """Four 2,048-token prompts under a 2,048-token flag: on four ranks the three that find
    the first iteration running (the first arrival starts it alone) share the next one and
    see their first token together; on one rank (TP 4) they queue, one prompt per iteration."""
    four = np.array(sorted(r.first_token - r.arrival for r in simulate(_burst(4, backend)).requests))
    assert four[1:] == pytest.approx([four[-1]] * 3) and four[0] < four[1]
    alone = np.array(sorted(r.first_token - r.arrival for r in simulate(_burst(1, backend)).requests))
    assert (np.diff(alone) > 0).all()


def test_sglang_splits_its_budget_among_the_ranks():
    """SGLang divides the chunk by dp: a 2,048-token prompt on a 512-token rank share takes
    four iterations, though the four ranks run side by side."""
    setup = setup_pool(_burst(4, "sglang").pools[0], 0)
    assert (setup.rank_tokens, setup.engine_config.max_num_batched_tokens) == (512, 2048)
    vllm = setup_pool(_burst(4, "vllm").pools[0], 0)
    assert (vllm.rank_tokens, vllm.engine_config.max_num_batched_tokens, vllm.engine_config.max_num_seqs) == \
        (2048, 8192, 32)
    assert vllm.spec.engine.max_num_batched_tokens == 2048      # the scenario's flag is left as written


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_both_engines_schedule_attention_dp_alike(backend):
    # prompts past the 2,048-token budget, which TensorRT-LLM without chunking answers with an error
    sc = _burst(4, backend, isl=2048 if backend == "trtllm" else 3000)
    fast, ref = simulate(sc), simulate(sc, engine="reference")
    assert [r.first_token for r in fast.requests] == pytest.approx([r.first_token for r in ref.requests])
    assert [r.finish for r in fast.requests] == pytest.approx([r.finish for r in ref.requests])


def test_sglang_keeps_its_unchunked_prefill_cap_whole_on_every_rank():
    """_handle_data_parallelism divides chunked_prefill_size by dp, not max_prefill_tokens: with
    --chunked-prefill-size -1 each rank's prefill batch takes up to 16,384 tokens."""
    sc = _burst(4, "sglang")
    engine = sc.pools[0].engine.model_copy(update={"chunked_prefill": False, "max_num_batched_tokens": 16384})
    setup = setup_pool(sc.pools[0].model_copy(update={"engine": engine}), 0)
    assert (setup.rank_tokens, setup.engine_config.max_num_batched_tokens) == (16384, 4 * 16384)


def test_sglang_under_aiconfigurators_launch_chunks_at_a_ranks_share_of_the_chunk():
    """The generator sets --max-prefill-tokens ISL + 1,500 and keeps SGLang's GPU default chunk,
    which SGLang divides among the attention-DP ranks: the chunk is each rank's budget (decodes
    counted in it) and ISL + 1,500 the cap a second prompt must fit under."""
    from simulator.validation.deployment import engine_keys

    eight = engine_keys("aiconfigurator", "sglang", 64, 8192, dp=8, prefill_chunk=16384)
    assert (eight["max_num_seqs"], eight["max_num_batched_tokens"], eight["max_prefill_tokens"],
            eight["dp_limits"]) == (8, 2048, 8192 + 1500, "per_rank")
    one = engine_keys("aiconfigurator", "sglang", 64, 8192, prefill_chunk=8192)
    assert (one["max_num_batched_tokens"], one["max_prefill_tokens"]) == (8192, 9692)
    short = engine_keys("aiconfigurator", "sglang", 64, 1024, prefill_chunk=8192)
    assert (short["max_num_batched_tokens"], short["max_prefill_tokens"]) == (8192, 2524)
    assert "dp_limits" not in engine_keys("aiconfigurator", "vllm", 64, 8192, dp=8, prefill_chunk=16384)


def _capped(backend: str, isl: int) -> Scenario:
    """Two prompts on one replica of two attention-DP ranks, each rank's pool capped at 8,192
    tokens (SGLang's --max-total-tokens, TensorRT-LLM's KvCacheConfig.max_tokens); TensorRT-LLM's
    budget holds the prompts whole (it answers a longer one with an error without chunking)."""
    return Scenario.model_validate({
        "name": "dp-pool", "workload": {"num_requests": 2, "arrival": {"type": "concurrency", "concurrency": 1},
                                        "input_tokens": {"dist": "fixed", "value": isl},
                                        "output_tokens": {"dist": "fixed", "value": 4}},
        "pools": [{"model": "mixtral-8x7b", "gpu": "h100-sxm", "tp": 2, "dp": 2, "ep": 2,
                   "engine": {"backend": backend, "max_num_batched_tokens": 16384 if backend == "trtllm" else 2048,
                              "max_num_seqs": 8, "prefix_cache": False, "kv_memory": {"max_tokens": 8192}}}]})


@pytest.mark.parametrize("engine", ["fast", "reference"])
@pytest.mark.parametrize("backend", ["sglang", "trtllm"])
def test_a_request_must_fit_one_ranks_pool(backend, engine):
    """A request lives on one rank and only that rank's pool holds its KV: a 10,000-token prompt
    fits the replica's two 8,192-token pools together but neither alone, so it is rejected on
    arrival (SGLang caps a prompt at its rank's max_total_num_tokens, TensorRT-LLM its max_seq_len
    at the rank's blocks), where one of 7,000 tokens is served."""
    setup = setup_pool(_capped(backend, 10_000).pools[0], 0)
    assert setup.rank_blocks * setup.memory.block_size == 8192
    assert setup.memory.num_blocks == 2 * setup.rank_blocks
    assert {r.status for r in simulate(_capped(backend, 10_000), engine=engine).requests} == {Status.REJECTED}
    assert {r.status for r in simulate(_capped(backend, 7_000), engine=engine).requests} == {Status.FINISHED}


def _ep_pool(backend: str, ep: int) -> Scenario:
    return Scenario.model_validate({
        "name": "ep", "workload": {"num_requests": 1, "arrival": {"type": "concurrency", "concurrency": 1},
                                   "input_tokens": {"dist": "fixed", "value": 100},
                                   "output_tokens": {"dist": "fixed", "value": 4}},
        "pools": [{"model": "deepseek-v3", "gpu": "h200", "tp": 1, "dp": 8, "ep": ep,
                   "engine": {"backend": backend}}]})


@pytest.mark.parametrize("ep", [2, 4])
def test_vllm_has_no_expert_parallel_group_smaller_than_the_replica(ep, cli):
    """vLLM's --enable-expert-parallel makes ep_size tp × dp and the MoE tp 1 (FusedMoEParallelConfig.make,
    read in the 0.19.1 and 0.34.0 wheels), with no flag for a smaller group: a pool with 1 < ep < tp × dp
    is refused on its ep, not priced as experts split ep ways and by width, which vLLM cannot launch.
    SGLang's --ep-size and TensorRT-LLM's moe_expert_parallel_size take any divisor."""
    with pytest.raises(LlmsimError) as e:
        setup_pool(_ep_pool("vllm", ep).pools[0], 0)
    assert e.value.key_path == "pools[0].ep" and "set ep to 1 or 8" in e.value.message
    for backend in ("sglang", "trtllm"):
        assert setup_pool(_ep_pool(backend, ep).pools[0], 0).cm.par.ep == ep
    for ok in (1, 8):
        assert setup_pool(_ep_pool("vllm", ok).pools[0], 0).cm.par.ep == ok
    r = cli("estimate", "request", "--gpu", "h200", "--model", "deepseek-v3", "--dp", "8", "--ep", str(ep),
            "--input", "100", "--output", "10", "--backend", "vllm")
    assert r.code == 2 and "Traceback" not in r.err and r.err.startswith("error: --ep: ep="), r.err
