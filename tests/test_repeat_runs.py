"""benchmarks/repeat_runs.py: configurations the silicon sample measured more than once, and how far apart."""
from __future__ import annotations

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers_bench import load_benchmark

bench = load_benchmark("repeat_runs")


def _row(rid: str, tpot: float, ttft: float, version="1.2", c: int = 8, mode: str = "agg", day="2026-01-01",
         osl: int = 1024) -> dict:
    return {"id": rid, "mode": mode, "backend": "trtllm", "backend_version": version, "model_path": "m",
            "system": "b200_sxm", "precision": "fp8", "gemm_quant_mode": None, "moe_quant_mode": None,
            "tp_size": 8.0, "pp_size": 1.0, "attention_dp_size": 1.0, "moe_tp_size": 1.0, "moe_ep_size": 1.0,
            "isl": 1024, "osl": osl, "batch_size": float(c), "silicon_tpot_ms": tpot, "silicon_ttft_ms": ttft,
            "silicon_data_source": f"silicon_concurrency={c}; measured={day}T00:00:00Z"}


def test_a_run_copied_between_source_files_is_not_a_repeat():
    raw = pd.DataFrame([_row("a", 10.0, 100.0), _row("b", 10.0, 100.0)])
    assert bench.repeats(raw).empty


def test_two_runs_of_one_configuration_are_a_repeat_and_their_spread_is_largest_over_smallest():
    raw = pd.DataFrame([_row("a", 10.0, 100.0), _row("b", 5.0, 120.0, day="2026-01-09"),
                        _row("c", 7.0, 90.0, osl=8192)])        # another configuration, measured once
    rep = bench.repeats(raw)
    assert len(rep) == 1 and rep.loc[0, "runs"] == 2
    assert rep.loc[0, "TPOT"] == 2.0 and rep.loc[0, "TTFT"] == 1.2
    assert rep.loc[0, "days"] == "2026-01-01, 2026-01-09"


def test_versions_are_kept_apart_unless_asked_to_be_compared():
    raw = pd.DataFrame([_row("a", 10.0, 100.0, version="1.2.post2"), _row("b", 5.0, 100.0, version="1.2.post3"),
                        _row("c", 6.0, 100.0, version=None), _row("d", 6.0, 150.0, version=None)])
    within = bench.repeats(raw)
    assert within["backend_version"].tolist() == ["-"]         # a missing version pairs its own runs
    across = bench.repeats(raw, across_versions=True)
    assert len(across) == 1 and across.loc[0, "TPOT"] == 2.0
    assert across.loc[0, "backend_version"] == "-" + " / 1.2.post2 / 1.2.post3"


def test_rows_above_the_concurrency_limit_and_disaggregated_rows_are_left_out():
    raw = pd.DataFrame([_row("a", 10.0, 100.0, c=256), _row("b", 5.0, 100.0, c=256),
                        _row("c", 10.0, 100.0, mode="disagg"), _row("d", 5.0, 100.0, mode="disagg")])
    assert bench.repeats(raw, max_concurrency=128).empty
    assert len(bench.repeats(raw, max_concurrency=256)) == 1


def test_the_page_lists_only_configurations_further_apart_than_the_flag():
    raw = pd.DataFrame([_row("a", 10.0, 100.0), _row("b", 11.0, 100.0),
                        _row("c", 10.0, 100.0, osl=8192), _row("d", 15.0, 100.0, osl=8192)])
    text = bench.markdown(bench.repeats(raw), "cmd", bench.repeats(raw, across_versions=True))
    assert "| TensorRT-LLM | 2 | 1.30× | 1 | 1.00× | 0 |" in text    # medians of 1.1 and 1.5, and of 1 and 1
    flagged = text.split("Those more than")[1]
    assert "| TensorRT-LLM | m | b200_sxm | 1.2 | 1 | 1.50× | 1.00× | 2026-01-01 |" in flagged
    assert "1.10×" not in flagged
    assert "under more than one version" not in text            # no configuration ran under two versions


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1024, 8192]), st.sampled_from(["1.1", "1.2"]),
                          st.floats(1.0, 100.0), st.floats(1.0, 1e4)), min_size=1, max_size=24))
def test_every_repeat_has_two_runs_or_more_and_spreads_of_at_least_one(runs):
    raw = pd.DataFrame([_row(str(i), tpot, ttft, version=v, osl=osl) for i, (osl, v, tpot, ttft) in enumerate(runs)])
    for across in (False, True):
        rep = bench.repeats(raw, across_versions=across)
        assert (rep["runs"] >= 2).all()
        assert (rep["TPOT"] >= 1.0).all() and (rep["TTFT"] >= 1.0).all()
        assert len(rep) <= len(runs) // 2
