"""TensorRT-LLM's chunked context: a chunk cut short ends on a whole KV block.

Its FCFS chunking policy (microBatchScheduler.cpp setCtxRequestsChunkSize<kFIRST_COME_FIRST_SERVED>)
rounds a chunk the token budget cuts down to a multiple of the chunk unit, tokens_per_block in the
PyTorch backend (py_executor_creator.py), and leaves the prompt's last chunk as it is.
"""
from __future__ import annotations

import pytest

from helpers_engine import compare_runs, make_requests, run_open
from simulator.engine.config import EngineConfig
from simulator.scenario.schema import PoolSpec

POOL = {"model": "llama-3.1-8b", "gpu": "h200"}


def _cfg(budget: int):
    return PoolSpec.model_validate({**POOL, "engine": {
        "backend": "trtllm", "chunked_prefill": True, "max_num_batched_tokens": budget,
        "prefix_cache": False}}).engine


def test_a_cut_chunk_ends_on_a_block_in_both_engines():
    """A 200-token prompt under a 100-token budget and 32-token blocks runs as 96 + 96 + 8 (three
    iterations, not the two of 100 + 100); a 300-token one beside it waits for a whole block."""
    cfg = _cfg(100)
    assert cfg.chunks_whole_blocks and cfg.block_size == 32
    reqs = make_requests([0.0, 0.0], [200, 300], [1, 1])
    fast, ref = run_open("fast", reqs, cfg, 1_000), run_open("reference", reqs, cfg, 1_000)
    assert compare_runs(fast, ref) == []
    rep = fast.pool.replicas[0]
    assert rep._chunk_of(200, 100) == 96 and rep._chunk_of(8, 100) == 8 and rep._chunk_of(300, 31) == 0
    # 96, 96, 8 + 64 (the second prompt's first chunk: 92 left, two blocks), then 96, 96, 44
    assert fast.stats()[0]["iterations"] == 6


def test_a_budget_below_a_block_is_refused():
    with pytest.raises(ValueError, match="below one KV block"):
        _cfg(16)


def _behind_a_prompt_with_no_chunk(seqs: int = 8, blocks: int = 1_000):
    """Prompts of 1,000, 500 and 3 tokens (and one output token: 32, 16 and 1 blocks reserved)
    arriving together under a 100-token budget: the first takes 96, the second rounds to no whole
    block of the 4 left, the third fits them whole."""
    cfg = EngineConfig(max_num_batched_tokens=100, max_num_seqs=seqs, block_size=32, chunks_whole_blocks=True,
                       kv_admission="reserve_output")
    reqs = make_requests([0.0, 0.0, 0.0], [1000, 500, 3], [1, 1, 1])
    fast, ref = run_open("fast", reqs, cfg, blocks), run_open("reference", reqs, cfg, blocks)
    assert compare_runs(fast, ref) == []
    return fast.requests


def test_a_prompt_given_no_chunk_keeps_its_place_and_those_behind_it_are_tried():
    """setCtxRequestsChunkSize<kFIRST_COME_FIRST_SERVED> goes on past a context whose chunk rounds to 0."""
    a, b, c = _behind_a_prompt_with_no_chunk()
    assert a.admitted == c.admitted == 0.0 < b.admitted
    assert c.first_token < a.first_token     # the third ran in the first iteration
    a, b, c = _behind_a_prompt_with_no_chunk(blocks=49)
    assert a.admitted == c.admitted == 0.0 < b.admitted


def test_a_prompt_given_no_chunk_still_holds_its_sequence_slot_in_the_pass():
    """The capacity scheduler took it (max requests 2), so the third is not: it waits as the second does."""
    a, b, c = _behind_a_prompt_with_no_chunk(seqs=2)
    assert a.admitted == 0.0 < b.admitted <= c.admitted


def test_a_prompt_given_no_chunk_still_holds_its_blocks_in_the_pass():
    """... and reserved its blocks: with 48, none is left for the third."""
    a, b, c = _behind_a_prompt_with_no_chunk(blocks=48)
    assert a.admitted == 0.0 < b.admitted <= c.admitted
