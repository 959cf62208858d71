"""A disaggregated pair's prefill replica keeps a finished prompt's KV until its hand-off is read.

vLLM's NIXL connector frees a prefill request's blocks only when the decode side says it read them
(``request_finished`` returns ``delay_free_blocks``), SGLang's prefill server keeps a request in its
inflight queue until the transfer polls ``Success``, TensorRT-LLM's context server keeps it in
``DISAGG_CONTEXT_TRANS_IN_PROGRESS``: a slow hand-off holds prefill memory, and a prompt that needs it
waits. Both engines hold the blocks from the request's end and give them back at the first iteration
boundary after the hand-off ends.
"""
from __future__ import annotations

import pytest

from helpers_engine import make_requests, run_open
from simulator.engine.config import EngineConfig

CFG = EngineConfig(max_num_seqs=8, max_num_batched_tokens=512, block_size=16, prefix_cache=False)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_prompt_waits_for_the_blocks_a_hand_off_holds(engine):
    """Room for one 64-token prompt (4 blocks of 5): the second starts as the first's hand-off
    gives its blocks back, 2 s after the first ended, where without the hold it starts at once."""
    reqs = make_requests([0.0, 0.0], [64, 64], [1, 1])
    held = run_open(engine, reqs, CFG, 5, handoff_s=lambda r: 2.0)
    free = run_open(engine, reqs, CFG, 5)
    a, b = held.requests
    assert b.admitted == pytest.approx(a.finish + 2.0, abs=1e-12)
    fa, fb = free.requests
    assert fb.admitted == pytest.approx(fa.finish, abs=1e-12)
    assert b.finish > fb.finish + 1.9


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_held_blocks_count_as_used_until_the_hand_off_ends(engine):
    """A 64-token prompt's 4 blocks stay in use through its 10 s hand-off, while another request
    decodes beside them and after it ended, and are free once the hand-off is over."""
    reqs = make_requests([0.0, 0.0005, 5.0, 12.0], [64, 300, 16, 16], [1, 200, 1, 1])
    run = run_open(engine, reqs, CFG, 100, handoff_s=lambda r: 10.0 if r.id == 0 else 0.0)
    assert [used for (used,) in run.kv_at_arrivals] == [0, 4, 4, 0]
    rep = run.pool.replicas[0]
    assert not rep.handing and rep.handing_blocks == 0 and not rep.read


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_hand_off_names_the_attention_dp_rank_that_holds_its_kv(engine, monkeypatch):
    """With two attention-DP ranks (round robin), each finished prompt's KV is held on the rank that
    computed it, which its hand-off leaves from (fleet/kv_link.py), and on no rank once given back."""
    import helpers_engine

    pools: list = []
    make_pool = helpers_engine.Pool
    monkeypatch.setattr(helpers_engine, "Pool", lambda *a, **k: pools.append(make_pool(*a, **k)) or pools[-1])
    ranks: dict[int, int] = {}

    def done(req) -> None:      # the pool calls it as the request ends, its KV held from then on
        ranks[req.id] = pools[0].replicas[0].handoff_rank(req.id)

    reqs = make_requests([0.0] * 4, [64] * 4, [1] * 4)
    run = run_open(engine, reqs, CFG, 40, handoff_s=lambda r: 1.0, dp=2, on_done=done)
    assert sorted(ranks.values()) == [0, 0, 1, 1]
    assert all(run.pool.replicas[0].handoff_rank(r.id) == -1 for r in run.requests)
