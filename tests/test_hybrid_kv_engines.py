"""The fast engine against the reference where each running sequence holds sliding-window blocks of the
shared pool beside its own (vLLM's hybrid KV cache, :mod:`simulator.hybrid_kv`): with the prefix cache,
prompts' KV whole or chunk by chunk, capped classes and cancellations together, which the differential
tests' window draws (plain workloads, no ids, no classes) leave out. The windows are taken at admission
and given back on every way out (finish, preemption, cancellation); a charge left behind or taken twice
moves admissions, and with them the timestamps the two engines are held to."""
from __future__ import annotations

from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from helpers_engine import COST_MODELS, compare_runs, cost_model, describe, run_open
from simulator.fleet import pool as fleet
from test_class_kv_budget import CheckedFast, CheckedReference
from test_prefix_cache import SETTINGS, cache_configs, prefixed
from workloads.request import Request


@settings(max_examples=40, **SETTINGS)
@given(data=st.data())
def test_windows_beside_cache_classes_and_cancellations_match_reference(data):
    cfg = data.draw(cache_configs(), label="cfg")
    H = cfg.block_size * data.draw(st.sampled_from([1, 2]), label="ids per KV block")
    reqs = [Request(r.id, r.arrival, r.input_tokens, r.output_tokens, blocks=r.blocks,
                    klass=data.draw(st.sampled_from(["free", "free", "paid"])))
            for r in data.draw(prefixed(H), label="requests")]
    windows = data.draw(st.sampled_from([1, 2, 9]), label="window blocks")     # gpt-oss: 9
    biggest = max(-(-(r.input_tokens + r.output_tokens) // cfg.block_size) for r in reqs)
    nb = data.draw(st.integers(max(1, biggest // 2), biggest + 8), label="num_blocks") + windows
    budgets = {"free": data.draw(st.integers(1, nb), label="free cap")}
    cancels = [(r.arrival + data.draw(st.floats(0.0, 0.3, allow_nan=False)), r.id)
               for r in reqs if data.draw(st.integers(0, 3)) == 0]
    cmk = data.draw(st.sampled_from(COST_MODELS), label="cost model")
    kw = dict(replicas=data.draw(st.integers(1, 2)), router="least_outstanding", cm=cost_model(*cmk),
              id_block_tokens=H, kv_budgets=budgets, cancels=cancels, window_blocks=windows)
    with mock.patch.dict(fleet.ENGINES, {"fast": CheckedFast, "reference": CheckedReference}):
        fast = run_open("fast", reqs, cfg, nb, **kw)
        ref = run_open("reference", reqs, cfg, nb, **kw)
    problems = compare_runs(fast, ref)
    assert not problems, ("fast and reference disagree:\n  " + "\n  ".join(problems[:12]) + "\nreproduction: "
                          + describe(reqs, cfg, nb, H=H, budgets=budgets, cancels=cancels, cm=cmk,
                                     window_blocks=windows))
    for run in (fast, ref):       # every block given back, windows too, once every request has ended
        assert all(not r.running and r.kv_used_now(r.env.now) == 0 for r in run.pool.replicas)
