"""What a prefix-cache hit spares a TensorRT-LLM context request at scheduling, by release.

Before #11490 (1.3.0rc5) the capacity scheduler reserved every block of the prompt, and before
#11637 (taken as 1.3.0rc7) the micro-batch scheduler charged max_num_tokens the whole prompt
(microBatchScheduler.cpp getNumTokens(0)); from then on, only the uncached part.
"""
from __future__ import annotations

import pytest

from helpers_engine import compare_runs, run_open
from simulator.scenario.schema import PoolSpec
from workloads.request import Request

POOL = {"model": "llama-3.1-8b", "gpu": "h200"}
H = 32      # tokens per block id (TensorRT-LLM's tokens_per_block)


def _cfg(release=None, credit=None):
    engine = {"backend": "trtllm", "max_num_batched_tokens": 256}
    if release is not None:
        engine["backend_version"] = release
    if credit is not None:
        engine["prefix_reuse_credit"] = credit
    return PoolSpec.model_validate({**POOL, "engine": engine}).engine


@pytest.mark.parametrize("release, credit", [("1.0.0", "none"), ("1.2.0", "none"), ("1.3.0rc5", "blocks"),
                                             ("1.3.0rc6", "blocks"), ("1.3.0rc7", "blocks_and_tokens"),
                                             (None, "blocks_and_tokens")])
def test_the_credit_follows_the_release(release, credit):
    assert _cfg(release).prefix_reuse_credit == credit


def _requests() -> list[Request]:
    """A 224-token prompt, then two that share its first 192 tokens (6 blocks) once it decodes."""
    shared = tuple(range(1, 7))
    return [Request(0, 0.0, 224, 30, blocks=shared + (100,)),
            Request(1, 0.2, 224, 2, blocks=shared + (101,)),
            Request(2, 0.2, 224, 2, blocks=shared + (102,))]


@pytest.mark.parametrize("credit, together", [("blocks_and_tokens", True), ("blocks", False), ("none", False)])
def test_the_budget_charges_the_hit_only_with_the_credit(credit, together):
    """Beside the first prompt's decode, the two 32-token remainders share one iteration of a 256-token
    budget; charged their whole 224 tokens, the second waits for the next."""
    cfg = _cfg(credit=credit)
    fast = run_open("fast", _requests(), cfg, 2_000, id_block_tokens=H)
    ref = run_open("reference", _requests(), cfg, 2_000, id_block_tokens=H)
    assert compare_runs(fast, ref) == []
    a, b, c = fast.requests
    assert b.cached_tokens == c.cached_tokens == 192
    assert (b.admitted == c.admitted) is together


def test_no_credit_reserves_every_block():
    """A pool that holds the first request to completion and the others' own blocks, not their shared
    ones too: without the block credit the second waits for the first to finish."""
    reqs = _requests()[:2]
    # 224 + 30 tokens: 8 blocks; the second 224 + 2: 8 blocks, 1 of them its own beyond the shared 6 + 1
    runs = {credit: run_open("fast", reqs, _cfg(credit=credit), 10, id_block_tokens=H)
            for credit in ("blocks", "none")}
    first_end = runs["none"].requests[0].finish
    assert runs["blocks"].requests[1].admitted < first_end <= runs["none"].requests[1].admitted
