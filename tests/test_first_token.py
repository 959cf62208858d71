"""The first-token terms a stack adds beyond the simulated engine, and their fit.

``response_ms`` (each request, in parallel) and ``tokenize_us_per_token``
(the front end, one request at a time) shift a request's first token; the
benchmark that fits them (benchmarks/first_token.py) must find known values
again and judge each model family, GPU and stack by a fit made without it.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.runner import simulate
from tests.test_backends import _closed
from helpers_bench import load_benchmark


def _bench():
    return load_benchmark("first_token")


@settings(max_examples=25, deadline=None)
@given(a=st.floats(0.0, 50.0), seed=st.integers(0, 10_000))
def test_the_fit_finds_a_known_response_term_and_holds_the_tokeniser_at_zero(a, seed):
    """The tokeniser's rate cannot be told from the prefill's own cost per token at these loads
    (benchmarks/first_token.py), so the fit holds it at zero and finds the per-request term."""
    rng = np.random.default_rng(seed)
    isl = rng.choice([1024, 2048, 4096, 8192], 60).astype(float)
    base = rng.uniform(20, 900, 60)
    fa, fb = _bench().fit_pair(base, isl, base + a)
    assert fa == pytest.approx(a, abs=0.5) and fb == 0.0
    assert _bench().fit_pair(base, isl, base + a + 1.5 * isl * 1e-3)[1] == 0.0   # a cost per token stays out


def test_each_group_is_judged_by_a_fit_made_without_it():
    """Two families with different offsets: held out, each is predicted with the other's offset."""
    bench = _bench()
    grid = {f"base@{g:g}": 100.0 for g in bench.EAGER_GRID}   # rows no launch floor reaches
    rows = [{"stack": "vllm", "family": fam, "gpu": "h200", "isl": 1024.0, **grid, "measured": 100.0 + off,
             "moe": False, "concurrency": 4}
            for fam, off in (("llama", 10.0), ("qwen3", 30.0)) for _ in range(5)]
    res = bench.table(pd.DataFrame(rows))
    fam = res["rows"][res["rows"]["split"] == "family"].set_index("held_out")
    assert (fam["eager_launch_us"] == 0.0).all()   # where nothing tells it, no floor
    assert fam.loc["llama", "response_ms"] == pytest.approx(30.0, abs=0.5)
    assert fam.loc["qwen3", "response_ms"] == pytest.approx(10.0, abs=0.5)
    assert fam.loc["llama", "in_sample_median_abs_pct"] < fam.loc["llama", "logo_median_abs_pct"]


def test_response_time_shifts_first_token_and_end_alike_and_never_tpot():
    """Per request and in parallel: five requests sent together see it once each, not queued."""
    plain = simulate(_closed(5, 5, 2048, 16, {})).results
    late = simulate(_closed(5, 5, 2048, 16, {"response_ms": 12.0})).results
    assert late["mean_ttft_ms"] - plain["mean_ttft_ms"] == pytest.approx(12.0, rel=0.1)
    assert late["mean_tpot_ms"] == pytest.approx(plain["mean_tpot_ms"], rel=1e-6)


def test_tokenizing_is_serial_so_a_burst_queues_in_the_front_end():
    """Five 2,048-token prompts sent together at 2 us a token: the front end takes 4.1 ms each, one
    after another, so the mean wait before the scheduler is about twice one prompt's."""
    plain = simulate(_closed(5, 5, 2048, 4, {})).results["mean_ttft_ms"]
    tok = simulate(_closed(5, 5, 2048, 4, {"tokenize_us_per_token": 2.0})).results["mean_ttft_ms"]
    assert tok - plain > 2048 * 2e-3 * 1.5


@settings(max_examples=15, deadline=None)
@given(pick=st.integers(1, 8), a=st.floats(0.0, 40.0), seed=st.integers(0, 10_000))
def test_the_fit_finds_a_known_launch_cost_from_the_rows_it_floors(pick, a, seed):
    """Rows replayed at each launch cost of the grid, measured as replayed at one of them plus a
    response term: the fit finds both, the launch cost from the rows the floor reaches (here the
    mixture-of-experts rows, whose replay moves with it) and the response term from the dense ones."""
    bench = _bench()
    rng = np.random.default_rng(seed)
    grid = bench.EAGER_GRID[: pick + 1]
    g_true = grid[pick]
    rows = []
    for i in range(60):
        moe = i % 2 == 0
        base = rng.uniform(40, 900)
        reps = {f"base@{g:g}": base + (3.0 * g if moe else 0.0) for g in bench.EAGER_GRID}
        rows.append({"stack": "sglang", "family": "x", "gpu": "h200", "isl": 1024.0, "moe": moe,
                     "concurrency": 4, **reps, "measured": reps[f"base@{g_true:g}"] + a})
    g, fa, fb = bench.fit_stack(pd.DataFrame(rows))
    assert g == g_true and fa == pytest.approx(a, abs=0.5) and fb == 0.0


def _rows_with_floor(dense_floor: bool):
    """Two families on two GPUs, dense and mixture-of-experts rows, measured as replayed at 60 µs a
    launch; the dense rows' replay moves with the launch cost only when ``dense_floor``."""
    bench = _bench()
    rng = np.random.default_rng(3)
    rows = []
    for fam in ("llama", "qwen3"):
        for gpu in ("h200", "b200"):
            for moe in (False, True):
                for _ in range(8):
                    base = rng.uniform(40, 400)
                    step = 2.0 if (moe or dense_floor) else 0.0
                    reps = {f"base@{g:g}": base + step * g for g in bench.EAGER_GRID}
                    rows.append({"stack": "vllm", "family": fam, "gpu": gpu, "isl": 1024.0, "moe": moe,
                                 "concurrency": 4, **reps,
                                 "measured": base + 2.0 * 60.0})
    return pd.DataFrame(rows)


def test_a_launch_cost_is_taken_only_where_dense_and_moe_rows_both_ask_for_it():
    bench = _bench()
    assert bench.launch_cost_transfers(_rows_with_floor(True))["takes_it"]
    # the dense rows cannot reach the floor and their measurement lies above it: no corroboration
    assert not bench.launch_cost_transfers(_rows_with_floor(False))["takes_it"]
