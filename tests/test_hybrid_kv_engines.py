"""The fast engine against the reference where each running sequence holds sliding-window blocks of the
shared pool beside its own (vLLM's hybrid KV cache, :mod:`simulator.hybrid_kv`): with the prefix cache,
prompts' KV whole or chunk by chunk, capped classes and cancellations together, which the differential
tests' window draws (plain workloads, no ids, no classes) leave out. The windows are taken at admission
and given back on every way out (finish, preemption, cancellation); a charge left behind or taken twice
moves admissions, and with them the timestamps the two engines are held to."""
from __future__ import annotations

from unittest import mock

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from helpers_engine import COST_MODELS, compare_runs, cost_model, describe, run_open, sliding_windows
from simulator.engine.config import EngineConfig
from simulator.engine.reference import ReferenceReplica
from simulator.engine.replica import FastReplica
from simulator.engine.sequence import Seq
from simulator.fleet import pool as fleet
from simulator.hybrid_kv import SlidingGroups, sliding_groups
from simulator.profiles import load_model
from test_class_kv_budget import CheckedFast, CheckedReference
from test_engine_properties import check_prompt_windows
from test_prefix_cache import SETTINGS, cache_configs, prefixed
from workloads.request import Request, Status


@settings(max_examples=40, **SETTINGS)
@given(data=st.data())
def test_windows_beside_cache_classes_and_cancellations_match_reference(data):
    cfg = data.draw(cache_configs(), label="cfg")
    H = cfg.block_size * data.draw(st.sampled_from([1, 2]), label="ids per KV block")
    reqs = [Request(r.id, r.arrival, r.input_tokens, r.output_tokens, blocks=r.blocks,
                    klass=data.draw(st.sampled_from(["free", "free", "paid"])))
            for r in data.draw(prefixed(H), label="requests")]
    windows = data.draw(sliding_windows(cfg.block_size, none=False), label="windows")
    biggest = max(-(-(r.input_tokens + r.output_tokens) // cfg.block_size) for r in reqs)
    nb = data.draw(st.integers(max(1, biggest // 2), biggest + 8), label="num_blocks") + windows.steady
    budgets = {"free": data.draw(st.integers(1, nb), label="free cap")}
    cancels = [(r.arrival + data.draw(st.floats(0.0, 0.3, allow_nan=False)), r.id)
               for r in reqs if data.draw(st.integers(0, 3)) == 0]
    cmk = data.draw(st.sampled_from(COST_MODELS), label="cost model")
    kw = dict(replicas=data.draw(st.integers(1, 2)), router="least_outstanding", cm=cost_model(*cmk),
              id_block_tokens=H, kv_budgets=budgets, cancels=cancels, windows=windows)
    with mock.patch.dict(fleet.ENGINES, {"fast": CheckedFast, "reference": CheckedReference}):
        fast = run_open("fast", reqs, cfg, nb, **kw)
        ref = run_open("reference", reqs, cfg, nb, **kw)
    problems = compare_runs(fast, ref)
    assert not problems, ("fast and reference disagree:\n  " + "\n  ".join(problems[:12]) + "\nreproduction: "
                          + describe(reqs, cfg, nb, H=H, budgets=budgets, cancels=cancels, cm=cmk,
                                     windows=windows))
    for run in (fast, ref):       # every block given back, windows too, once every request has ended
        assert all(not r.running and r.kv_used_now(r.env.now) == 0 for r in run.pool.replicas)


class Audited:
    """Checks what prompts hold in the sliding-window groups after every plan."""

    def _boundary(self, _ev=None) -> None:
        self.chunks_planned: list = []
        super()._boundary(_ev)
        check_prompt_windows(self, {id(s): c for s, c in self.chunks_planned}, "after _boundary")
        assert 0 <= self.kv_used_now(self.env.now) <= self.num_blocks
        if getattr(self, "seg", None) is not None and self.lingering:    # kept one iteration, not a stretch
            assert self.seg[1] == 1, "a decode stretch holds a chunk's windows past its first iteration"

    def _plan(self, now):
        planned = super()._plan(now)
        self.chunks_planned = planned[0]
        return planned


class WindowsAudited(Audited, FastReplica):
    pass


class ReferenceWindowsAudited(Audited, ReferenceReplica):
    pass


@st.composite
def chunked_vllm(draw) -> EngineConfig:
    """vLLM V1's scheduling in miniature: prompts chunked beside the decodes in a small token
    budget, their KV chunk by chunk (or whole), a preempted request's blocks kept in the prefix
    cache or not, new requests joining the iteration after next or the next."""
    seqs = draw(st.integers(1, 16))
    return EngineConfig(chunked_prefill=True, max_num_seqs=seqs, block_size=draw(st.sampled_from([4, 16])),
                        max_num_batched_tokens=draw(st.integers(max(seqs, 16), 300)),
                        prompt_kv=draw(st.sampled_from(["per_chunk", "per_chunk", "whole"])),
                        sliding_window_kv=draw(st.sampled_from(["prompt", "capped", "processed"])),
                        cache_preempted_output=draw(st.booleans()), schedule_ahead=draw(st.booleans()))


def alone(r: Request, windows: SlidingGroups) -> int:
    """Blocks ``r`` needs to run alone and, preempted, be readmitted with no prefix cache: its KV
    and window, and its uncapped admission gate with all but its last token to recompute."""
    bs, longest = windows.block_size, max(r.input_tokens + r.output_tokens - 1, r.input_tokens)
    return max(-(-longest // bs) + windows.steady, -(-longest // bs) + windows.admission(longest, 0))


@settings(max_examples=60, **SETTINGS)
@given(data=st.data())
def test_prompt_windows_over_chunks_hits_and_preemption_match_reference(data):
    """Long prompts over several chunks, each chunk holding the window behind it and itself in
    the sliding-window groups while it runs, prefix hits that skip the groups' blocks below their
    window, and preemptions a chunk's blocks set off, drawn together: both engines audit their
    blocks at every boundary (``check_prompt_windows``), agree request by request, and end with
    every block back."""
    cfg = data.draw(chunked_vllm(), label="cfg")
    H = cfg.block_size * data.draw(st.sampled_from([1, 2]), label="ids per KV block")
    reqs = data.draw(prefixed(H, max_out=600), label="requests")
    windows = data.draw(sliding_windows(cfg.block_size, none=False), label="windows")
    biggest = max(alone(r, windows) for r in reqs)     # from some rejected to a few side by side
    nb = data.draw(st.one_of(st.integers(max(1, biggest // 2), biggest), st.integers(biggest, biggest * 5 // 4),
                             st.integers(biggest, 2 * biggest)), label="num_blocks")
    with mock.patch.dict(fleet.ENGINES, {"fast": WindowsAudited, "reference": ReferenceWindowsAudited}):
        fast = run_open("fast", reqs, cfg, nb, id_block_tokens=H, windows=windows)
        ref = run_open("reference", reqs, cfg, nb, id_block_tokens=H, windows=windows)
    for run in (fast, ref):     # every request ended, every block given back
        # stranded only once preempted: its readmission gate, output included, outgrew the pool
        assert all(r.status in (Status.FINISHED, Status.REJECTED) or (r.status is Status.STRANDED and r.preemptions)
                   for r in run.requests)
        assert all(not r.running and r.kv_used_now(r.env.now) == 0 for r in run.pool.replicas)
    problems = compare_runs(fast, ref)
    assert not problems, ("fast and reference disagree:\n  " + "\n  ".join(problems[:12]) + "\nreproduction: "
                          + describe(reqs, cfg, nb, H=H, windows=windows))
    done = [r for r in ref.requests if r.status is Status.FINISHED]
    event("preempted: " + str(any(r.preemptions for r in done)))
    event("stranded: " + str(any(r.status is Status.STRANDED for r in ref.requests)))
    event("a prompt past its window over several chunks: " + str(any(
        r.input_tokens - r.cached_tokens > cfg.max_num_batched_tokens and r.input_tokens > windows.window
        for r in done)))
    event("a hit past the window: " + str(any(r.cached_tokens >= windows.window for r in done)))


class Probe:
    """Records the free blocks after each plan (during the iteration it launched)."""

    def _boundary(self, _ev=None) -> None:
        super()._boundary(_ev)
        self.free_log.append((self.env.now, self.num_blocks - self.kv_used_now(self.env.now)))


class FastProbe(Probe, FastReplica):
    free_log: list = []


class ReferenceProbe(Probe, ReferenceReplica):
    free_log: list = []


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_long_prompt_of_gpt_oss_waits_for_twice_its_blocks(engine):
    """gpt-oss-120b in 16-token blocks: one sliding-window group of 18 layers beside 18
    full-attention ones, a 128-token window, nine blocks a decoding request. On 1,100 blocks a
    1,600-token prompt decoding 1,000 tokens holds 101 + 9 of them, so 990 at most are free, but an
    8,000-token prompt asks 500 blocks in each group, 1,000 (vLLM's can_fit_full_sequence):
    it waits for the first to finish, where a window's charge (500 + 9) would have let it in.
    Then its four chunks of 2,048 tokens hold 128, 256, 384 and 500 blocks of their own and, in
    the sliding-window group, the window behind each chunk and the chunk: 128, 256 − 120 = 136,
    384 − 248 = 136 and 500 − 376 = 124 (1,100 less both: 844, 708, 580 and 476 free), given back
    when the iteration ends; its first decode holds 501 + 9 (590 free)."""
    windows = sliding_groups(load_model("gpt-oss-120b"), 16)
    assert windows == SlidingGroups(128, 16, 18, 18) and windows.steady == 9
    cfg = EngineConfig(chunked_prefill=True, max_num_batched_tokens=2048, max_num_seqs=8, block_size=16,
                       prompt_kv="per_chunk", prefix_cache=False)
    reqs = [Request(0, 0.0, 1600, 1000), Request(1, 0.0, 8000, 3)]
    probe = {"fast": FastProbe, "reference": ReferenceProbe}[engine]
    probe.free_log = []
    with mock.patch.dict(fleet.ENGINES, {engine: probe}):
        run = run_open(engine, reqs, cfg, 1100, cm=cost_model("gpt-oss-120b", "h100-sxm"), windows=windows)
    first, long = run.requests
    assert long.admitted == first.finish and long.preemptions == 0
    free = dict(probe.free_log)
    assert free[first.admitted] == 1100 - 100 - 100     # its one chunk: 100 blocks, 100 in the group
    assert max(f for t, f in probe.free_log if first.admitted < t < first.finish) == 990   # < 1,000
    after = [f for t, f in probe.free_log if t >= long.admitted]
    assert after[:5] == [844, 708, 580, 476, 590]
    assert run.pool.replicas[0].window_extra == 0


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_from_0_20_the_gate_asks_a_group_no_more_than_a_request_holds(engine):
    """sliding_window_kv: capped (vLLM 0.20 on): with a 2,048-token budget a request holds at most
    cdiv(127 + 2,048, 16) + 1 = 137 blocks in the sliding-window group, so the gate asks the
    8,000-token prompt for 500 + 137 = 637 blocks: it takes what the first prompt's iteration
    leaves of the budget at once, where the whole prompt's gate kept it out until the first ended."""
    windows = sliding_groups(load_model("gpt-oss-120b"), 16)
    assert windows.request_bound(2048, 16384) == 137
    cfg = EngineConfig(chunked_prefill=True, max_num_batched_tokens=2048, max_num_seqs=8, block_size=16,
                       prompt_kv="per_chunk", prefix_cache=False, sliding_window_kv="capped", max_model_len=16384)
    reqs = [Request(0, 0.0, 1600, 1000), Request(1, 0.0, 8000, 3)]
    run = run_open(engine, reqs, cfg, 1100, cm=cost_model("gpt-oss-120b", "h100-sxm"), windows=windows)
    first, long = run.requests
    assert long.admitted == first.admitted == 0.0 and long.preemptions == 0


def test_a_long_hit_past_a_capped_gate_waits_for_its_first_chunk():
    """A capped gate asks little of a prompt whose cache hit passes the cap: 8,000 tokens of
    gpt-oss-120b of which 7,936 are cached (496 blocks) ask max(137 − 496, 0) new blocks and the
    hit's 8 inside the window (blocks 488-495), 9 with the window charged, beside its 500 of the
    full-attention layers: 509. But allocate_slots then tests its one 64-token chunk, which holds
    the window behind it and itself, blocks 488-499: 12, so it waits for 512, as the uncapped gate
    (cdiv(8,000, 16) − 488 = 12) asks."""
    windows = sliding_groups(load_model("gpt-oss-120b"), 16)
    ids = tuple(range(500))
    reqs = [Request(0, 0.0, 8000, 1, blocks=ids)]
    need = {}
    for mode in ("capped", "prompt"):
        cfg = EngineConfig(chunked_prefill=True, max_num_batched_tokens=2048, max_num_seqs=8, block_size=16,
                           prompt_kv="per_chunk", sliding_window_kv=mode, max_model_len=16384)
        run = run_open("reference", reqs, cfg, 1100, id_block_tokens=16, windows=windows)
        rep = run.pool.replicas[0]      # its cache holds the first prompt, unreferenced
        s = Seq(Request(1, 1.0, 8000, 1, blocks=ids[:496] + (1000, 1001, 1002, 1003)))
        need[mode] = (rep._admission(s)[0], rep._admission(s, budget=2048)[0])
    assert need == {"capped": (509, 512), "prompt": (512, 512)}


@pytest.mark.parametrize("engine", ["fast", "reference"])
@pytest.mark.parametrize("mode, free", [("prompt", [844, 708, 580, 476, 590]),
                                        ("processed", [844, 588, 452, 348, 474, 590])])
def test_from_0_26_a_chunks_windows_go_back_once_it_is_processed(engine, mode, free):
    """An 8,000-token prompt of gpt-oss-120b alone in 2,048-token chunks, the next iteration
    scheduled while one runs. Freed as scheduled (0.19-0.25) each chunk holds the window behind
    it and itself in the sliding-window group: 1,100 blocks less 128 + 128, 256 + 136, 384 + 136,
    500 + 124, then 501 + 9 as it decodes. Freed once processed (0.26 on) a chunk keeps the
    window behind the previous chunk and that chunk, the previous chunk's tokens being in
    flight: 256 + 256, 384 + (384 − 120), 500 + (500 − 248), and its first decode the last
    chunk's, 501 + (501 − 376), before 501 + 9."""
    windows = sliding_groups(load_model("gpt-oss-120b"), 16)
    cfg = EngineConfig(chunked_prefill=True, max_num_batched_tokens=2048, max_num_seqs=8, block_size=16,
                       prompt_kv="per_chunk", prefix_cache=False, sliding_window_kv=mode, schedule_ahead=True,
                       max_model_len=16384)
    probe = {"fast": FastProbe, "reference": ReferenceProbe}[engine]
    probe.free_log = []
    with mock.patch.dict(fleet.ENGINES, {engine: probe}):
        run_open(engine, [Request(0, 0.0, 8000, 3)], cfg, 1100, cm=cost_model("gpt-oss-120b", "h100-sxm"),
                 windows=windows)
    assert [f for _, f in probe.free_log][:len(free)] == free


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_prompt_whose_gate_fits_is_served_though_its_readmission_would_not_fit(engine):
    """gpt-oss-120b on 1,214 blocks (one H100 at vLLM 0.19.1's defaults): a 9,000-token prompt
    asks 563 blocks in each group (1,126) and fits; readmitted after a preemption with its
    1,000-token output it would ask 625 in each (1,250), past the pool. Alone it is never
    preempted, so vLLM serves it: it is not rejected on arrival. A prompt whose own gate exceeds
    the pool (10,000 tokens: 625 × 2) never is, and is rejected."""
    windows = sliding_groups(load_model("gpt-oss-120b"), 16)
    cfg = EngineConfig(chunked_prefill=True, max_num_batched_tokens=2048, max_num_seqs=8, block_size=16,
                       prompt_kv="per_chunk", prefix_cache=False, max_model_len=11088)
    reqs = [Request(0, 0.0, 9000, 1000), Request(1, 100.0, 10000, 10)]
    run = run_open(engine, reqs, cfg, 1214, cm=cost_model("gpt-oss-120b", "h100-sxm"), windows=windows)
    served, too_long = run.requests
    assert served.status is Status.FINISHED and served.preemptions == 0
    assert too_long.status is Status.REJECTED


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_preempted_request_the_gate_never_readmits_ends_stranded_once_the_pool_drains(engine):
    """A 16-token prompt decoding 1,100 tokens, then a 500-token one decoding 400, on 90 blocks of 16
    tokens (a 128-token window, one group as many layers as the full-attention ones): the second's
    gate asks 32 + 32 blocks and both run until their growth preempts it, some 800 tokens long.
    Readmitted with its output so far and no prefix cache, its gate asks past the 90 blocks, which
    vLLM 0.19 would wait for forever: it ends STRANDED once nothing else runs, the first finished, having
    been admitted and streamed (never REJECTED, which says a request was never admitted)."""
    windows = SlidingGroups(128, 16, 1, 1)
    cfg = EngineConfig(chunked_prefill=True, max_num_batched_tokens=2048, max_num_seqs=8, block_size=16,
                       prompt_kv="per_chunk", prefix_cache=False)
    reqs = [Request(0, 0.0, 16, 1100), Request(1, 0.001, 500, 400)]
    run = run_open(engine, reqs, cfg, 90, windows=windows)
    first, second = run.requests
    assert first.status is Status.FINISHED
    assert second.preemptions >= 1 and second.status is Status.STRANDED and second.finish >= first.finish
    assert second.admitted < second.first_token < second.finish
    assert all(not r.running and r.kv_used_now(r.env.now) == 0 for r in run.pool.replicas)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_readmission_past_one_dp_ranks_pool_waits_and_strands_whatever_the_other_ranks_hold(engine):
    """The windows of the stranded test above on a replica of two attention-DP ranks of 90 blocks
    (180 in the engine's one pool): six requests, three preempted as the decodes grow. Requests 3 and
    4, readmitted with their output so far, ask 94 and 112 blocks, more than their rank holds; the
    other rank's free blocks once let them back in and they finished, where vLLM's rank would have
    held them at the head of its queue forever. They wait, and end STRANDED once nothing runs."""
    windows = SlidingGroups(128, 16, 1, 1)
    cfg = EngineConfig(chunked_prefill=True, max_num_batched_tokens=2048, max_num_seqs=8, block_size=16,
                       prompt_kv="per_chunk", prefix_cache=False)
    arrivals = [0.0097, 0.0245, 0.0408, 0.0417, 0.0822, 0.0992]
    shapes = [(16, 1100), (200, 200), (200, 800), (16, 800), (500, 400), (16, 800)]
    reqs = [Request(i, t, p, o) for i, (t, (p, o)) in enumerate(zip(arrivals, shapes))]
    with mock.patch.object(fleet.Pool, "__init__", _with_pool_keys(rank_blocks=90)):
        run = run_open(engine, reqs, cfg, 180, windows=windows)
    ends = [(r.status, r.preemptions) for r in run.requests]
    assert ends[3] == ends[4] == (Status.STRANDED, 1)
    assert [s for s, _ in ends[:3]] + [ends[5][0]] == [Status.FINISHED] * 4
    assert all(not r.running and r.kv_used_now(r.env.now) == 0 for r in run.pool.replicas)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_attention_dp_ranks_cap_the_gate_at_one_ranks_budget(engine):
    """Each of vLLM's attention-DP engine cores sizes its sliding-window groups from its own
    max_num_batched_tokens, which a replica of two ranks doubles (4,096 for two of 2,048): the
    gate asks the 8,000-token prompt for 500 + 137 blocks as on one rank, not 500 + 265
    (cdiv(127 + 4,096, 16) + 1). On 900 blocks the first prompt's chunk leaves 700 free (100 of
    its own, 100 in the group), so the long prompt joins it at once; at 265 it waited for the
    first's iteration to end."""
    windows = sliding_groups(load_model("gpt-oss-120b"), 16)
    cfg = EngineConfig(chunked_prefill=True, max_num_batched_tokens=4096, max_num_seqs=8, block_size=16,
                       prompt_kv="per_chunk", prefix_cache=False, sliding_window_kv="capped", max_model_len=16384)
    reqs = [Request(0, 0.0, 1600, 1000), Request(1, 0.0, 8000, 3)]
    with mock.patch.object(fleet.Pool, "__init__", _with_rank_tokens(2048)):
        run = run_open(engine, reqs, cfg, 900, cm=cost_model("gpt-oss-120b", "h100-sxm"), windows=windows)
    assert run.pool.replicas[0].window_cap == 137 == windows.request_bound(2048, 16384)
    first, long = run.requests
    assert long.admitted == first.admitted == 0.0


def _with_rank_tokens(rank_tokens: int):
    """Pool.__init__ given one attention rank's budget, as fleet.setup passes a dp > 1 pool's."""
    return _with_pool_keys(rank_tokens=rank_tokens)


def _with_pool_keys(**keys):
    """Pool.__init__ given one attention rank's limits (rank_tokens, rank_blocks), as fleet.setup
    passes a dp > 1 pool's."""
    init = fleet.Pool.__init__

    def patched(self, *args, **kw):
        init(self, *args, **{**kw, **keys})
    return patched
