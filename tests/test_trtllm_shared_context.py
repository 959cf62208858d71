"""TensorRT-LLM holds a prompt back a pass rather than compute blocks another prompt is computing.

Its capacity scheduler (capacityScheduler.cpp GuaranteedNoEvictScheduler, beneficialToSkip) skips a
context request whose first block not in the reuse tree is the first new block of one it took earlier
in the same pass, and goes on with the requests behind it; the skipped one reuses those blocks later.
"""
from __future__ import annotations

from helpers_engine import compare_runs, run_open
from simulator.scenario.schema import PoolSpec
from workloads.request import Request


def _cfg(**engine):
    return PoolSpec.model_validate({"model": "llama-3.1-8b", "gpu": "h200", "engine": {
        "backend": "trtllm", **engine}}).engine


def _requests() -> list[Request]:
    """Two prompts of the same 256 tokens (eight 32-token blocks of ids) and a third of others,
    all arriving together."""
    same = tuple(range(8))
    return [Request(0, 0.0, 256, 4, blocks=same), Request(1, 0.0, 256, 4, blocks=same),
            Request(2, 0.0, 256, 4, blocks=tuple(range(100, 108)))]


def test_a_prompt_computing_anothers_new_blocks_waits_a_pass_in_both_engines():
    cfg = _cfg()
    assert cfg.defers_shared_context
    fast = run_open("fast", _requests(), cfg, 2_000, id_block_tokens=32)
    ref = run_open("reference", _requests(), cfg, 2_000, id_block_tokens=32)
    assert compare_runs(fast, ref) == []
    a, b, c = fast.requests
    assert a.cached_tokens == 0 and c.cached_tokens == 0
    assert c.admitted == a.admitted          # the third, behind the held one, is still taken
    # a pass later, and the overlap loop stores the first's blocks only after that pass is scheduled
    assert b.admitted > a.admitted and b.cached_tokens == 0


def test_without_it_both_run_in_the_same_pass():
    cfg = _cfg(defers_shared_context=False)
    a, b, _ = run_open("fast", _requests(), cfg, 2_000, id_block_tokens=32).requests
    assert b.admitted == a.admitted


def test_a_prompt_whose_blocks_are_all_cached_is_not_held_back():
    """Nothing new to compute (all its whole blocks cached before the pass): no first new block."""
    cfg = _cfg()
    reqs = [Request(0, 0.0, 256, 4, blocks=tuple(range(8))), Request(1, 1.0, 256, 4, blocks=tuple(range(8))),
            Request(2, 1.0, 256, 4, blocks=tuple(range(8)))]
    _, b, c = run_open("fast", reqs, cfg, 2_000, id_block_tokens=32).requests
    assert b.admitted == c.admitted and b.cached_tokens == c.cached_tokens == 255


def _behind_a_chunked_prompt(**engine):
    """A 4,096-token prompt chunked at a 1,536-token budget, and the same prompt arriving during its
    first chunk: its last chunk leaves the budget room for the second, whose blocks are all cached."""
    cfg = _cfg(chunked_prefill=True, max_num_batched_tokens=1536, **engine)
    same = tuple(range(128))
    reqs = [Request(0, 0.0, 4096, 4, blocks=same), Request(1, 0.001, 4096, 4, blocks=same)]
    fast = run_open("fast", reqs, cfg, 4_000, id_block_tokens=32)
    assert compare_runs(fast, run_open("reference", reqs, cfg, 4_000, id_block_tokens=32)) == []
    return fast.requests


def test_a_prompt_still_being_chunked_holds_back_one_sharing_its_next_block():
    """prefillWithChunkedContextsAlreadyExecuting registers the block a running chunked context
    computes next (its computed blocks stored as each chunk ends, from 1.3.0rc11): the second prompt
    waits for the first's last chunk to run rather than join it."""
    a, b = _behind_a_chunked_prompt()
    # admitted at the pass after the last chunk, before the overlap loop stores that chunk's blocks
    assert b.cached_tokens == 3072 and b.admitted >= a.first_token


def test_before_chunks_stored_their_computed_blocks_it_joins_the_last_chunk():
    """Before, each chunk's end stored the whole prompt's blocks: the running context registered none."""
    a, b = _behind_a_chunked_prompt(backend_version="1.3.0rc10")
    assert b.admitted < a.first_token


def test_before_1_1_a_prompt_is_reused_only_once_its_request_ended():
    """The 1.0 line stored a sequence's blocks for reuse only as it was removed (releaseBlocks)."""
    a, b, c = run_open("fast", _requests(), _cfg(backend_version="1.0.0"), 2_000, id_block_tokens=32).requests
    assert b.admitted > a.admitted and b.cached_tokens == 0
    reqs = [Request(0, 0.0, 256, 4, blocks=tuple(range(8))), Request(1, 1.0, 256, 4, blocks=tuple(range(8)))]
    assert [r.cached_tokens for r in run_open("fast", reqs, _cfg(backend_version="1.0.0"), 2_000,
                                              id_block_tokens=32).requests] == [0, 255]


def test_a_handed_over_request_is_not_held_back_on_a_decode_server():
    """GuaranteedNoEvictScheduler::impl asks beneficialToSkip only of requests not in
    isDisaggGenerationInitState: two handed-over requests of the same prompt, arriving while a decode
    runs on a decode pool that reuses its cache (decode_prefix_reuse), join the same iteration."""
    cfg = _cfg(decode_prefix_reuse=True)
    assert cfg.defers_shared_context and cfg.prefix_cache

    def handed_over() -> list[Request]:
        reqs = [Request(0, 0.0, 256, 200, blocks=tuple(range(50, 58))),
                Request(1, 0.05, 256, 4, blocks=tuple(range(8))), Request(2, 0.05, 256, 4, blocks=tuple(range(8)))]
        for r in reqs:
            r.preloaded = 256
        return reqs
    fast = run_open("fast", handed_over(), cfg, 2_000, id_block_tokens=32)
    ref = run_open("reference", handed_over(), cfg, 2_000, id_block_tokens=32)
    assert compare_runs(fast, ref) == []
    _, b, c = fast.requests
    assert b.admitted == c.admitted > 0.05 and c.cached_tokens == 255


def test_entering_prompts_once_computed_still_holds_the_second_back():
    """Where prompts enter the reuse tree only once computed (prompt_cached: computed) the tree a pass
    looks at has neither prompt's blocks, and the second's first new block is the first's: held back
    a pass. Planning ahead, the first is not stored yet at the next pass and the second computes them
    too (py_executor.py _executor_loop_overlap stores after the next schedule); without, it reuses them."""
    a, b, c = run_open("fast", _requests(), _cfg(prompt_cached="computed"), 2_000, id_block_tokens=32).requests
    assert c.admitted == a.admitted and b.admitted > a.admitted and b.cached_tokens == 0
    for engine in ("fast", "reference"):
        a, b, c = run_open(engine, _requests(), _cfg(prompt_cached="computed", schedule_ahead=False), 2_000,
                           id_block_tokens=32).requests
        assert c.admitted == a.admitted and b.admitted > a.admitted and b.cached_tokens == 255
