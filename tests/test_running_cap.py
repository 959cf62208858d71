"""SGLang sizes its running-request cap from each attention rank's KV pool (EngineConfig.rank_running_requests).

Its model runner takes min(clamp(KV tokens / context x 512, 2,048, 4,096), KV tokens / 2) requests a rank,
and min(--max-running-requests, KV tokens / 2) where the launch gives the flag, unclamped (model_runner.py to 0.5.9,
_resolve_max_num_reqs 0.5.14, pool_configurator.py 0.5.18-0.5.23; 0.5.10-0.5.13 hold it to the clamp). llmsim held every SGLang
rank at 2,048, the clamp's floor, so a large pool ran up to half the requests SGLang runs at once.
"""
from __future__ import annotations

import pytest

from simulator.scenario.schema import PoolSpec

POOL = {"model": "llama-3.1-8b", "gpu": "h200"}


def _engine(**engine):
    return PoolSpec.model_validate({**POOL, "engine": {"backend": "sglang", **engine}}).engine


@pytest.mark.parametrize("engine, tokens, context, cap", [
    ({}, 896_234, 131_072, 3500),          # an 8B model's pool on an H200 at its 131,072-token context
    ({}, 896_234, 8192, 4096),             # the clamp's ceiling
    ({}, 6000, 131_072, 2048),             # the clamp's floor
    ({}, 3000, 131_072, 1500),             # half a small pool
    ({"max_num_seqs": 256}, 896_234, 131_072, 256),      # the launch's flag, under the clamp
    ({"max_num_seqs": 8192, "max_num_batched_tokens": 16384}, 896_234, 8192, 8192),   # not held to it
    ({"max_num_seqs": 3000}, 896_234, 262_144, 3000),    # nor to its floor-bound 2,048
    ({"max_num_seqs": 3000}, 4000, 131_072, 2000),       # half the pool (_resolve_max_num_reqs)
    ({"max_num_seqs": 256}, 3000, 131_072, 256)])        # a flag under half the pool stands
def test_sglang_sizes_its_running_requests_from_the_pool(engine, tokens, context, cap):
    assert _engine(**engine).rank_running_requests(tokens, context) == cap


@pytest.mark.parametrize("dp, cap", [(1, 48), (2, 24), (8, 6), (64, 1)])
def test_the_48_of_sglangs_drafts_is_split_among_its_attention_ranks(dp, cap):
    """SGLang sets --max-running-requests 48 beside an EAGLE-style draft, a server's flag, which each
    attention-DP rank takes its share of (max_running_requests // dp_size); llmsim gave every rank 48.
    A pool's own max_num_seqs stays a rank's."""
    mtp = {"draft_model": "mtp", "k": 1, "acceptance_rate": 0.8}
    e = PoolSpec.model_validate({"model": "deepseek-v3", "gpu": "h200", "tp": 8, "engine": {"backend": "sglang"},
                                 "speculative": mtp}).engine
    assert e.running_cap == "server" and e.rank_running_requests(900_000, 163_840, dp) == cap
    given = PoolSpec.model_validate({"model": "deepseek-v3", "gpu": "h200", "tp": 8, "speculative": mtp,
                                     "engine": {"backend": "sglang", "max_num_seqs": 48}}).engine
    assert given.running_cap == "given" and given.rank_running_requests(900_000, 163_840, dp) == 48


def test_a_run_and_an_estimate_hold_sglangs_cap_for_the_pool():
    """A replica of an attention-DP rank or two runs what SGLang would on its pool; vLLM keeps its flag,
    and an EAGLE-style draft SGLang's 48 a server, 6 a rank of 8."""
    from simulator.estimate import scheduler_cap
    from simulator.fleet.setup import setup_pool

    for extra, per_rank in [({}, 3500), ({"tp": 1, "dp": 2}, 3452)]:
        s = setup_pool(PoolSpec.model_validate({**POOL, **extra, "engine": {"backend": "sglang"}}), 0, None)
        dp = extra.get("dp", 1)
        assert s.memory.kv_capacity_tokens // dp * 512 // 131_072 == per_rank
        assert s.engine_config.max_num_seqs == dp * per_rank
        assert scheduler_cap(s.spec.engine, s.memory, s.cm.model) == (dp * per_rank, "max_running_requests")
        assert s.memory.rank_running_requests(s.spec.engine, s.cm.model) == per_rank    # the one rule both read
    vllm = setup_pool(PoolSpec.model_validate({**POOL, "engine": {"backend": "vllm"}}), 0, None)
    assert vllm.engine_config.max_num_seqs == vllm.spec.engine.max_num_seqs
    mtp = {"draft_model": "mtp", "k": 1, "acceptance_rate": 0.8}
    for layout, seqs in [({"tp": 8}, 48), ({"tp": 1, "dp": 8, "ep": 8}, 48)]:    # 8 ranks of 6
        pool = PoolSpec.model_validate({"model": "deepseek-v3", "gpu": "h200", **layout, "speculative": mtp,
                                        "engine": {"backend": "sglang", "weight_dtype": "fp8"}})
        assert setup_pool(pool, 0, None).engine_config.max_num_seqs == seqs


def test_a_pipeline_pool_holds_sglangs_cap_for_its_pool_too():
    """A pp pool ran SGLang's unread max_num_seqs default (2,048) where its pool sizes the cap: 1.9M
    KV tokens of an 8B model over two stages of an H200 run 4,096 at once (the clamp's ceiling)."""
    from simulator.fleet.setup import setup_pool

    pool = PoolSpec.model_validate({**POOL, "pp": 2, "engine": {"backend": "sglang", "mixed_prefill": True}})
    s = setup_pool(pool, 0, None)
    tokens = s.memory.kv_capacity_tokens
    assert tokens > 8 * 131_072 and s.engine_config.max_num_seqs == 4096


def test_sglang_refuses_a_separate_draft_model_beside_attention_dp():
    """SGLang raises "standalone speculative decoding does not support dp attention" at launch (0.5.4-
    0.5.23): a pool of dp 2 with a draft model ran as if the server split its 48 among the ranks; it is
    refused on dp, while an MTP draft at dp 2 and a draft model at dp 1 still run."""
    from simulator.errors import LlmsimError
    from simulator.fleet.setup import setup_pool

    draft = {"draft_model": "llama-3.2-1b", "k": 3, "acceptance_rate": 0.7}
    pool = {"model": "llama-3.1-70b", "gpu": "h200", "tp": 2, "engine": {"backend": "sglang"}, "speculative": draft}
    with pytest.raises(LlmsimError) as e:
        setup_pool(PoolSpec.model_validate({**pool, "dp": 2}), 0, None)
    assert e.value.key_path == "pools[0].dp" and "standalone speculative decoding" in e.value.message
    assert setup_pool(PoolSpec.model_validate(pool), 0, None).engine_config.max_num_seqs == 48
    vllm = {**pool, "dp": 2, "engine": {"backend": "vllm"}}
    assert setup_pool(PoolSpec.model_validate(vllm), 0, None)


@pytest.mark.parametrize("version, cap", [("0.5.9", 8192), ("0.5.10", 4096), ("0.5.13.post1", 4096),
                                          ("0.5.14", 8192), ("0.5.23", 8192)])
def test_releases_0_5_10_to_0_5_13_hold_the_flag_to_the_clamp(version, cap):
    """_resolve_max_num_reqs of 0.5.10-0.5.13 takes min(flag // dp_size, clamp(T / context x 512, 2,048,
    4,096)); 0.5.14 min(flag // dp_size, T / 2), and to 0.5.9 the request pool is the flag's size: llmsim ran
    every release's flag unclamped, 8,192 a rank where those four ran 4,096."""
    e = _engine(max_num_seqs=8192, max_num_batched_tokens=16384, backend_version=version)
    assert e.rank_running_requests(896_234, 8192) == cap


@pytest.mark.parametrize("version, per_rank", [("0.5.22", None), ("0.5.9", None), ("0.5.23", 1)])
def test_sglang_before_0_5_23_refuses_to_start_a_48_split_to_nothing(version, per_rank):
    """48 // dp_size is 0 a rank past 48 attention ranks: TpModelWorker asserts 'max_running_request is zero'
    at start-up to 0.5.22 (resolve_max_num_reqs: max_running_requests // attn_dp_size), 0.5.23 takes max(1, ..).
    llmsim ran every release at one a rank; a release that never starts is refused on dp."""
    from simulator.errors import LlmsimError
    from simulator.fleet.setup import setup_pool

    mtp = {"draft_model": "mtp", "k": 1, "acceptance_rate": 0.8}
    engine = {"backend": "sglang", "weight_dtype": "fp8", "backend_version": version,
              "kv_memory": {"rule": "sglang", "fraction": 0.85}}
    pool = PoolSpec.model_validate({"model": "deepseek-v3", "gpu": "h200", "tp": 1, "dp": 64, "ep": 64,
                                    "speculative": mtp, "engine": engine})
    if per_rank is not None:
        assert setup_pool(pool, 0, None).engine_config.max_num_seqs == 64 * per_rank
        return
    with pytest.raises(LlmsimError) as e:
        setup_pool(pool, 0, None)
    assert e.value.key_path == "pools[0].dp" and "48 // 64 = 0" in e.value.message
