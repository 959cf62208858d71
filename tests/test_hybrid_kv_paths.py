"""vLLM's sliding-window groups (:mod:`simulator.hybrid_kv`) beside the paths the other window
tests leave out: KV offload tiers under the prefix cache, speculative decoding (draft tokens in
the budget, a draft model's slots), attention-DP ranks (a rank's budget and pool below the replica's) and
a disaggregated decode leg (its prompt's KV arrived with it). On each, both engines audit their
blocks and windows at every boundary, never use more than the pool, give every block back by
the end and agree request by request; a slip in how a path frees or charges the windows moves
admissions, and with them the timestamps compared."""
from __future__ import annotations

from contextlib import nullcontext
from unittest import mock

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from helpers_engine import compare_runs, describe, run_open, sliding_windows
from simulator.engine.reference import ReferenceReplica
from simulator.engine.replica import FastReplica
from simulator.fleet import pool as fleet
from test_engine_properties import check_run
from test_hybrid_kv_engines import Audited, _with_pool_keys, alone, chunked_vllm
from test_kv_offload import _CheckTiers, offload_plans
from test_prefix_cache import SETTINGS, prefixed
from test_speculative import SPEC, _spec_cm
from workloads.request import Status


class RankBound:
    """Admits nothing that asks more than one attention-DP rank's pool (``rank_blocks``), whatever
    the replica's other ranks have free: a rank's engine core could not."""

    def _no_room(self, s, need: int, total: int, free: int, kept: int = 0) -> bool:
        refused = super()._no_room(s, need, total, free, kept)
        assert refused or need <= self.rank_blocks, (s.req.id, need, self.rank_blocks)
        return refused


class Fast(_CheckTiers, Audited, RankBound, FastReplica):
    pass


class Reference(_CheckTiers, Audited, RankBound, ReferenceReplica):
    pass


def _run_both(data, path: str):
    cfg = data.draw(chunked_vllm(), label="cfg")
    H = cfg.block_size
    # fewer requests where a run costs more (the speculative cost model prices every iteration the
    # reference steps through, shorter outputs too; the tiers are audited every plan)
    n, out = {"speculative": (20, 60), "offload": (24, 300)}.get(path, (40, 300))
    reqs = data.draw(prefixed(H, max_n=n, max_out=out), label="requests")
    windows = data.draw(sliding_windows(cfg.block_size, none=False), label="windows")
    kw: dict = dict(id_block_tokens=H, windows=windows)
    rank, dp = None, 1
    if path == "offload":
        kw["offload"] = data.draw(offload_plans(), label="offload")
    elif path == "speculative":
        kw["cm"] = _spec_cm()
        if cfg.max_num_batched_tokens >= 1 + SPEC.k:
            cfg = cfg.model_copy(update={"draft_tokens_in_budget": data.draw(st.booleans(), label="drafts in budget")})
    elif path == "dp":
        dp = data.draw(st.integers(2, 3), label="dp")
        rank = max(cfg.max_num_seqs, 16, cfg.max_num_batched_tokens // dp)
        cfg = cfg.model_copy(update={"max_num_batched_tokens": rank * dp, "max_num_seqs": cfg.max_num_seqs * dp})
    else:       # a disaggregated decode leg: the prompt's KV (all but its last token, or all) arrived
        whole = data.draw(st.booleans(), label="first token from prefill")
        for r in reqs:
            r.preloaded = r.input_tokens if whole else r.input_tokens - 1
    biggest = max(alone(r, windows) for r in reqs)
    # (on dp ranks: a rank's pool, the engine's one pool holding dp of them)
    nb = data.draw(st.integers(max(1, biggest // 2), 2 * biggest), label="num_blocks")
    ranks = nullcontext() if rank is None else \
        mock.patch.object(fleet.Pool, "__init__", _with_pool_keys(rank_tokens=rank, rank_blocks=nb))
    nb *= dp
    with mock.patch.dict(fleet.ENGINES, {"fast": Fast, "reference": Reference}), ranks:
        fast = run_open("fast", reqs, cfg, nb, **kw)
        ref = run_open("reference", reqs, cfg, nb, **kw)
    for run in (fast, ref):
        check_run(run)
        # stranded only once preempted: its readmission gate, output included, outgrew the pool
        assert all(r.status in (Status.FINISHED, Status.REJECTED) or (r.status is Status.STRANDED and r.preemptions)
                   for r in run.requests)
        assert all(rep.window_extra == 0 and not any(s.window_extra for s in rep.lingering)
                   for rep in run.pool.replicas)
    problems = compare_runs(fast, ref)
    assert not problems, (f"fast and reference disagree ({path}):\n  " + "\n  ".join(problems[:12])
                          + "\nreproduction: " + describe(reqs, cfg, nb, H=H, windows=windows))


@pytest.mark.parametrize("path", ["offload", "speculative", "dp", "decode leg"])
@settings(max_examples=25, **SETTINGS)
@given(data=st.data())
def test_windows_beside_each_path_hold_the_audit_and_engines_agree(path, data):
    _run_both(data, path)
