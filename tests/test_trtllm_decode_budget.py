"""TensorRT-LLM launches with max_num_tokens below max_batch_size.

Its llm_args.py holds max_num_tokens to no max_batch_size, and its micro-batch scheduler walks
the generation requests first and breaks at the first whose tokens no longer fit max_num_tokens
(microBatchScheduler.cpp operator()): the rest, and every context request, wait for a later
iteration. llmsim refused such a pool ("every running sequence needs one token per iteration"),
a refusal that is vLLM's (SchedulerConfig), not TensorRT-LLM's.
"""
from __future__ import annotations

from helpers_engine import compare_runs, make_requests, most_decoding, run_open
from simulator.scenario.schema import PoolSpec
from workloads.request import Status

POOL = {"model": "llama-3.1-8b", "gpu": "h200"}


def test_trtllm_takes_a_budget_below_its_batch_size():
    engine = PoolSpec.model_validate({**POOL, "engine": {"backend": "trtllm", "max_num_batched_tokens": 1024}}).engine
    assert engine.max_num_batched_tokens < engine.max_num_seqs == 2048


def test_the_budget_holds_the_batch_in_both_engines():
    """60 requests of up to 48 running beside a 32-token budget: the budget holds the batch, and the engines
    agree on every stamp."""
    cfg = PoolSpec.model_validate({**POOL, "engine": {"backend": "trtllm", "max_num_seqs": 48,
                                                       "max_num_batched_tokens": 32, "prefix_cache": False}}).engine
    assert cfg.budget_boundary == "stop" and cfg.reserves_output and not cfg.chunked_prefill
    reqs = make_requests([i * 0.0002 for i in range(60)], [1 + i % 3 for i in range(60)],
                         [30 + 53 * i % 80 for i in range(60)])
    fast, ref = run_open("fast", reqs, cfg, 20_000), run_open("reference", reqs, cfg, 20_000)
    assert compare_runs(fast, ref) == []
    assert all(r.status == Status.FINISHED for r in fast.requests)
    peak = most_decoding(fast.requests)
    # every generation request takes a token of the budget, and a context request joins only beside
    # the generation requests that left room for its whole prompt: the budget caps the batch
    assert cfg.max_num_batched_tokens - 3 <= peak <= cfg.max_num_batched_tokens < cfg.max_num_seqs
