"""Each attention-DP rank is a scheduler of its own over its own KV pool (SGLang's DP schedulers,
vLLM's DP engine cores, TensorRT-LLM's attention-DP ranks): it admits, grows and preempts the
requests placed on it against its pool and its share of the batch limits, and a request waiting
on one rank never holds up another rank's (simulator/engine/base.py, replica.py, reference.py)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers_engine import run_open
from test_engine_properties import checked_engines
from simulator.engine.config import EngineConfig
from simulator.engine.dp_placement import room
from workloads.request import Request, Status

# bootstrap_room places request i on rank room(i) % 2: ids 1, 3, 6 and 7 on rank 0, 0, 2, 4 and 5 on rank 1
RANK0, RANK1 = (1, 3, 6, 7), (0, 2, 4, 5)


def test_the_ids_sit_on_the_ranks_the_tests_name():
    assert [room(i) % 2 for i in RANK0] == [0] * 4 and [room(i) % 2 for i in RANK1] == [1] * 4


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_full_rank_holds_its_own_request_back_and_no_other_ranks(engine):
    """Two 1,200-token prompts placed on rank 0 need 150 of its 100 blocks: the second waits for
    the first to finish, though the replica's 200 blocks would hold both; a later request placed
    on rank 1, behind it in the queue, is admitted at once on its empty rank."""
    reqs = [Request(1, 0.0, 1200, 100), Request(3, 0.01, 1200, 100), Request(0, 0.02, 400, 100)]
    run = run_open(engine, reqs, EngineConfig(dp_placement="bootstrap_room", block_size=16), 200, dp=2)
    a, b, c = run.requests
    assert all(r.status is Status.FINISHED for r in run.requests)
    assert b.admitted >= a.finish           # its rank's pool, not the replica's
    assert c.admitted < a.finish and c.admitted == pytest.approx(0.02, abs=0.05)   # not behind b


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_each_rank_runs_its_share_of_the_replicas_sequences(engine):
    """max_num_seqs 2 on two ranks is one sequence a rank: of three arrivals together the two on
    rank 0 run one after the other, the one on rank 1 beside the first."""
    reqs = [Request(1, 0.0, 100, 50), Request(3, 0.0, 100, 50), Request(0, 0.0, 100, 50)]
    run = run_open(engine, reqs, EngineConfig(dp_placement="bootstrap_room", max_num_seqs=2), 1000, dp=2)
    a, b, c = run.requests
    assert c.admitted == a.admitted == 0.0 and b.admitted >= a.finish


@settings(max_examples=8, deadline=None)
@given(dp=st.sampled_from([2, 3]),
       admission=st.sampled_from(["on_demand", "reserve_output", "expected_output", "decode_reservation"]),
       chunked=st.booleans(), mixed=st.sampled_from([None, True, False]),
       rule=st.sampled_from(["round_robin", "queue_score", "active_tokens"]),
       cached=st.booleans(), seed=st.integers(0, 10**6))
def test_both_engines_run_the_ranks_pools_alike(dp, admission, chunked, mixed, rule, cached, seed):
    """Pools small enough that ranks preempt and queue on their own, with or without a prefix
    cache (a shared 128-token head): the fast engine's decisions are the reference's, every
    request ends, and no rank's count is left over."""
    import numpy as np
    rng = np.random.default_rng(seed)
    n = 20
    reqs = []
    for i, (t, k, y) in enumerate(zip(np.cumsum(rng.exponential(0.02, n)), rng.integers(2, 18, n),
                                      rng.integers(1, 120, n))):
        ids = tuple(range(8)) + tuple(1000 * (i + 1) + j for j in range(int(k) + 8))
        reqs.append(Request(i, float(t), 16 * (8 + int(k)), int(y), blocks=ids if cached else None))
    cfg = EngineConfig(kv_admission=admission, block_size=4, chunked_prefill=chunked, mixed_prefill=mixed,
                       max_num_seqs=4 * dp, max_num_batched_tokens=256 * dp, dp_placement=rule)
    # the block audits of tests/test_engine_properties.py, rank by rank (they count no cache pins)
    engines = ("fast", "reference") if cached else ("checked_fast", "checked_reference")
    with checked_engines():
        runs = [run_open(e, reqs, cfg, 110 * dp, dp=dp, id_block_tokens=16 if cached else None) for e in engines]
    for run in runs:
        assert all(r.status in (Status.FINISHED, Status.REJECTED) for r in run.requests)
        p = run.pool.replicas[0].placement
        assert p.waiting == [0] * dp and p.running == [0] * dp
    fast, ref = (run.requests for run in runs)
    assert [r.status for r in fast] == [r.status for r in ref]
    assert [r.finish for r in fast] == pytest.approx([r.finish for r in ref], rel=1e-9, abs=1e-12)
    assert [r.first_token for r in fast] == pytest.approx([r.first_token for r in ref], rel=1e-9, nan_ok=True)
    assert [r.preemptions for r in fast] == [r.preemptions for r in ref]


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_vllms_kv_weighted_load_reads_each_ranks_own_usage(engine):
    """vLLM's coordinator publishes each engine core's KV usage: rank 0, its pool 88 % held by a
    1,400-token prompt and another such prompt waiting for room, scores 2 running + 1 waiting +
    6 x 0.4 for it, and the seventh arrival goes to rank 1 (3 running) and starts at once; read as
    the replica's pooled 45 % (no pressure), the tie would send it behind the wait on rank 0."""
    reqs = [Request(0, 0.00, 1400, 150), Request(1, 0.01, 16, 200), Request(2, 0.02, 16, 30),
            Request(3, 0.03, 16, 200), Request(4, 0.04, 1400, 20), Request(5, 0.05, 16, 200),
            Request(6, 0.06, 16, 20)]
    cfg = EngineConfig(dp_placement="kv_weighted_load", block_size=16, max_num_seqs=32, max_num_batched_tokens=8192)
    run = run_open(engine, reqs, cfg, 200, dp=2)
    held, late = run.requests[4], run.requests[6]
    assert held.admitted > 1.0                                  # rank 0's waiting prompt: until the first ends
    assert late.first_token < 0.1
