"""SGLang's decode batch runs apart from its prefill chunk.

Without --enable-mixed-chunk SGLang decodes every running request in a batch of its own
(scheduler.py update_running_batch) and holds only its prefill batches to --chunked-prefill-size
(schedule_policy.py PrefillAdder), and no release checks the chunk against --max-running-requests:
a chunk of 1,024 tokens beside the 2,048 running requests the profile starts from launches. llmsim
refused it ("every running sequence needs one token per iteration"), a refusal that holds where
decodes share the budget (vLLM's own, a mixed chunk), not there.
"""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from helpers_engine import compare_runs, make_requests, most_decoding, run_open
from simulator.engine.config import EngineConfig
from simulator.scenario.schema import PoolSpec
from workloads.request import Status

POOL = {"model": "llama-3.1-8b", "gpu": "h200"}


def test_sglang_takes_a_chunk_below_its_running_requests():
    engine = PoolSpec.model_validate({**POOL, "engine": {"backend": "sglang", "max_num_batched_tokens": 1024}}).engine
    assert engine.max_num_batched_tokens < engine.max_num_seqs
    # decodes share the budget: vLLM refuses to start; mixed SGLang starts, but decodes past its chunk
    # (PrefillAdder takes the running batch off it), which llmsim's mixed iteration does not: each says so
    for mixed, why in (({"backend": "sglang", "mixed_prefill": True}, "where SGLang decodes every running request"),
                       ({"backend": "vllm"}, "every running sequence needs one token per iteration")):
        with pytest.raises(ValidationError, match=r"must be ≥ max_num_seqs") as e:
            PoolSpec.model_validate({**POOL, "engine": {**mixed, "max_num_batched_tokens": 256}})
        assert why in str(e.value)


def test_more_decodes_than_the_chunk_run_together_in_both_engines():
    """48 requests decode at once beside a 32-token chunk; the engines agree on every stamp."""
    cfg = EngineConfig(backend="sglang", mixed_prefill=False, kv_admission="expected_output", max_num_seqs=48,
                       max_num_batched_tokens=32, block_size=1)
    reqs = make_requests([i * 0.002 for i in range(60)], [20 + 37 * i % 90 for i in range(60)],
                         [30 + 53 * i % 80 for i in range(60)])
    fast, ref = run_open("fast", reqs, cfg, 20_000), run_open("reference", reqs, cfg, 20_000)
    assert compare_runs(fast, ref) == []
    assert all(r.status == Status.FINISHED for r in fast.requests)
    peak = most_decoding(fast.requests)
    assert peak > cfg.max_num_batched_tokens
