"""Each SGLang attention-DP rank picks its own iteration: prefill where it has a prompt, else decode.

Without --enable-mixed-chunk a rank runs its prompts in prefill batches of their own, but the choice
is the rank's scheduler's (scheduler.py get_next_batch_to_run); the ranks then meet only in the MoE
layers (prepare_mlp_sync_batch). A long prompt arriving on one rank must not stall the decodes of
the others, except under speculative decoding, where SGLang keeps prefill and decode apart across
the ranks.
"""
from __future__ import annotations

import pytest

from helpers_engine import compare_runs, cost_model, make_requests, run_open
from simulator.engine.config import EngineConfig

CFG = EngineConfig(backend="sglang", mixed_prefill=False, kv_admission="expected_output",
                   dp_placement="round_robin", max_num_batched_tokens=512, block_size=16)


def _long_prompt_beside_decodes(engine: str, cm=None):
    """Rank 0 serves a one-token request, rank 1 a 200-token answer; then rank 0 gets a prompt of
    eight of its chunks (its rank's budget is 256) while rank 1 decodes."""
    reqs = make_requests([0.0, 0.0, 0.02], [16, 16, 2048], [1, 200, 1])
    return run_open(engine, reqs, CFG, 4000, dp=2, cm=cm)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_rank_decodes_while_another_prefills(engine):
    run = _long_prompt_beside_decodes(engine)
    _, decoding, prompt = run.requests
    prefill = prompt.first_token - prompt.admitted
    assert decoding.first_token < prompt.admitted < prompt.first_token < decoding.finish
    # every gap of rank 1's decodes is about one iteration, none the prompt's eight chunks
    assert max(run.gaps.hi) < prefill / 4


@pytest.mark.parametrize("ranked", [False, True], ids=["one-rank-prices", "rank-prices"])
def test_both_engines_agree_on_a_rank_decoding_beside_a_prefill(ranked):
    """Also with a cost model of the replica's two ranks, which prices each step by where its chunks
    and decodes sit (RankLoad: the slowest rank's attention, the busiest rank's tokens), where a
    one-rank model reads no placement."""
    cm = _two_rank_moe() if ranked else None
    fast, ref = _long_prompt_beside_decodes("fast", cm), _long_prompt_beside_decodes("reference", cm)
    assert compare_runs(fast, ref) == []


def _two_rank_moe():
    from simulator.costmodel.step import CostModel
    from simulator.profiles.hardware import load_hardware
    from simulator.profiles.model import load_model
    return CostModel(load_model("qwen3-30b-a3b"), load_hardware("h100-sxm"), 1, dp=2, ep=2)


def test_speculative_decoding_keeps_every_rank_out_of_decode_while_one_prefills():
    from simulator.costmodel.speculative import SpeculativeSpec, speculative_cost_model

    spec = speculative_cost_model(cost_model(), SpeculativeSpec(draft_model="llama-3.2-1b", k=3,
                                                                  acceptance_rate=0.8))
    run = _long_prompt_beside_decodes("fast", spec)
    _, decoding, prompt = run.requests
    assert max(run.gaps.hi) >= prompt.first_token - prompt.admitted
    assert not run.pool.replicas[0].own_modes


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_each_rank_decays_its_own_new_token_ratio(engine, monkeypatch):
    """Each DP scheduler keeps its own new_token_ratio, decayed by its own decode batches: rank 1's
    decays through all 199 of the 200-token answer's decodes, those beside rank 0's prefill
    included; rank 0, which never decodes, keeps its initial ratio."""
    from simulator.engine.base import ReplicaBase

    seen: list[list[int]] = []
    track = ReplicaBase._track_ratio

    def watch(self, chunks: list, decoding: list[int]) -> None:
        seen.append(list(self.ratio_steps))     # (before the reset once the replica idles)
        track(self, chunks, decoding)

    monkeypatch.setattr(ReplicaBase, "_track_ratio", watch)
    _long_prompt_beside_decodes(engine)
    assert max(s[1] for s in seen) == 199
    assert max(s[0] for s in seen) == 0



@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_handed_over_prompt_costs_the_decodes_beside_it_nothing(engine):
    """A decode server's handed-over request (its KV arrived whole; SGLang merges it into the running
    batch without a forward, process_prebuilt) entered the iteration as a prompt chunk of no tokens,
    which parked its rank's decodes and was priced as a prefill over its 8,000-token context beside
    the other ranks' decodes: a DeepSeek-V3 dp 8 decode gap of 49 ms read 188 ms (a decode server's
    TPOT 44 → 53 ms held out). It computes nothing and costs nothing."""
    from simulator.costmodel.step import CostModel
    from simulator.profiles.hardware import load_hardware
    from simulator.profiles.model import load_model

    cm = CostModel(load_model("deepseek-v3"), load_hardware("h200"), 1, dp=8, ep=8)
    cfg = CFG.model_copy(update={"first_token_from_prefill": True})
    alone = run_open(engine, make_requests([0.0] * 32, [16] * 32, [100] * 32), cfg, 40000, cm=cm, dp=8)
    reqs = make_requests([0.0] * 32 + [0.05 + 0.01 * k for k in range(16)], [16] * 32 + [8000] * 16,
                         [100] * 32 + [2] * 16)
    for r in reqs[32:]:
        r.preloaded = r.input_tokens
    joined = run_open(engine, reqs, cfg, 40000, cm=cm, dp=8)
    assert max(joined.gaps.hi) < 1.1 * max(alone.gaps.hi)
    if engine == "fast":
        assert compare_runs(joined, run_open("reference", reqs, cfg, 40000, cm=cm, dp=8)) == []
