"""TensorRT-LLM's chunked context: a chunk cut short ends on a whole KV block.

Its FCFS chunking policy (microBatchScheduler.cpp setCtxRequestsChunkSize<kFIRST_COME_FIRST_SERVED>)
rounds a chunk the token budget cuts down to a multiple of the chunk unit, tokens_per_block in the
PyTorch backend (py_executor_creator.py), and leaves the prompt's last chunk as it is.
"""
from __future__ import annotations

import pytest

from helpers_engine import compare_runs, make_requests, run_open
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
