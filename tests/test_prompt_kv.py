"""vLLM V1's prompt KV (engine.prompt_kv: per_chunk): a waiting prompt is
admitted on its whole prompt's blocks, but holds only those of the chunks
scheduled so far; a chunk that does not fit preempts as a decode does
(vllm/v1/core/sched/scheduler.py Scheduler.schedule, v1/core/kv_cache_manager.py
allocate_slots)."""
from __future__ import annotations

from unittest import mock

import pytest

from helpers_engine import compare_runs, make_requests, run_open
from simulator.engine.config import EngineConfig
from simulator.engine.reference import ReferenceReplica
from simulator.engine.replica import FastReplica
from simulator.errors import LlmsimError
from simulator.fleet import pool as fleet
from workloads.request import Request


class _Logged:
    """Records each preemption: (victim id, its state, prompt tokens it had computed)."""

    def _preempt(self, v):
        self.log.append((v.req.id, v.state, v.done))
        return super()._preempt(v)


class LoggedFast(_Logged, FastReplica):
    pass


class LoggedReference(_Logged, ReferenceReplica):
    pass


def _run(reqs, cfg, nb):
    """Both engines on one replica; their preemption logs, which must agree, and the reference run."""
    runs, logs = [], []
    with mock.patch.dict(fleet.ENGINES, {"fast": LoggedFast, "reference": LoggedReference}):
        for engine in ("fast", "reference"):
            with mock.patch.object(_Logged, "log", [], create=True) as log:
                runs.append(run_open(engine, reqs, cfg, nb))
                logs.append(list(log))
    assert not compare_runs(*runs)
    assert logs[0] == logs[1]
    return runs[1], logs[1]


# Four short requests that decode 40 tokens each and a 200-token prompt behind them, on
# one-token blocks and a 64-token budget: the first iteration runs the four prompts (40 tokens)
# and the long prompt's first 24, the next ones the four decodes and 60 prompt tokens.
SHORT, LONG = 10, 200
CFG = dict(max_num_batched_tokens=64, max_num_seqs=8, block_size=1, prefix_cache=False)


def _requests(priority_of_short: int = 1, late: float = 0.0) -> list[Request]:
    reqs = make_requests([0.0] * 4 + [late], [SHORT] * 4 + [LONG], [40] * 4 + [2])
    for r in reqs[:4]:
        r.priority = priority_of_short
    reqs[4].priority = 1
    return reqs


def test_a_prompt_part_way_preempts_itself_when_its_next_chunk_does_not_fit():
    """245 blocks: the long prompt is admitted (its 200 blocks fit beside the four prompts' 40).
    Whole, it holds them all and the decodes' third growth (4 × 12 + 200 > 245) preempts it, the
    newest, after 24 + 60 prompt tokens. Chunk by chunk, the decodes grow into the blocks its last
    chunk needs: that chunk (56 blocks, 49 free beside 4 × 13 + 144) preempts it, after 144."""
    reqs = _requests()
    _, whole = _run(reqs, EngineConfig(**CFG), 245)
    _, per_chunk = _run(reqs, EngineConfig(prompt_kv="per_chunk", **CFG), 245)
    assert whole[0] == (4, 1, 24 + 60)
    assert per_chunk[0] == (4, 1, 24 + 60 + 60)


def test_a_prompt_chunk_preempts_the_newest_request_of_the_lowest_priority():
    """The short requests of a lower class, the long prompt arriving as they prefill: it takes
    60 tokens an iteration beside their decodes, and at 250 blocks its last chunk (20 blocks, 14
    free beside 4 × 14 + 180) preempts the newest of them, a decoder already given its token this
    iteration (which it loses), not itself."""
    ref, log = _run(_requests(priority_of_short=0, late=1e-6), EngineConfig(prompt_kv="per_chunk", **CFG), 250)
    assert log[0] == (3, 2, SHORT)            # request 3 decoding (its prompt computed) goes first
    assert all(v != 4 for v, _, _ in log)
    assert ref.requests[4].preemptions == 0


def test_admission_waits_for_the_whole_prompts_blocks():
    """205 blocks: the long prompt's first chunk would fit beside the four prompts, its 200 blocks
    do not (165 free): it waits until the short requests have finished, and nothing is preempted."""
    reqs = _requests()
    ref, log = _run(reqs, EngineConfig(prompt_kv="per_chunk", **CFG), 205)
    assert not log
    long_ = ref.requests[4]
    assert long_.admitted == max(r.finish for r in ref.requests[:4])


def test_where_kv_never_binds_timings_equal_whole_prompt_allocation():
    reqs = make_requests([0.01 * i for i in range(30)], [50 + 37 * i % 700 for i in range(30)],
                         [1 + 13 * i % 90 for i in range(30)])
    cfg = dict(max_num_batched_tokens=256, max_num_seqs=16, block_size=16)
    for engine in ("fast", "reference"):
        a = run_open(engine, reqs, EngineConfig(**cfg), 10_000)
        b = run_open(engine, reqs, EngineConfig(prompt_kv="per_chunk", **cfg), 10_000)
        assert not compare_runs(a, b, kv_used=False)   # (per_chunk holds less: below)
        held = [r.stats(a.pool.end_time())["kv_used_area"] for r in a.pool.replicas]
        assert [r.stats(b.pool.end_time())["kv_used_area"] for r in b.pool.replicas][0] < held[0]


@pytest.mark.parametrize("keys", [dict(kv_allocation="contiguous", prefix_cache=False), dict(scheduler="static"),
                                  dict(kv_admission="reserve_output"), dict(kv_admission="expected_output")])
def test_per_chunk_is_refused_beside_a_whole_reservation(keys):
    with pytest.raises((ValueError, LlmsimError), match="per_chunk .*needs paged KV"):
        EngineConfig(prompt_kv="per_chunk", **keys)


def test_per_chunk_beside_a_whole_reservation_is_refused_under_its_key(tmp_path, cli):
    """The scenario's line names the key to change in its key path, as every other refused key does."""
    from helpers_whatif import write_scenario

    sc = write_scenario(tmp_path)
    r = cli("run", sc, "-o", tmp_path / "out", "--set", "pools.main.engine.prompt_kv=per_chunk",
            "--set", "pools.main.engine.scheduler=static")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    assert f"{sc}" in r.err and "pools[0].engine.prompt_kv: per_chunk (vLLM V1's allocation)" in r.err, r.err
