"""benchmarks/client_phase.py: where a measured TTFT falls between the two client phases, and
the output-length twins of a measurement campaign."""
from __future__ import annotations

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers_bench import load_benchmark

bench = load_benchmark("client_phase")
ttft = st.floats(min_value=1.0, max_value=1e5, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["vllm", "sglang", "trtllm"]), ttft, ttft, ttft), min_size=1,
                max_size=30))
def test_every_row_falls_between_below_or_above_once(rows):
    df = pd.DataFrame(rows, columns=["stack", "measured", "lockstep", "out_of_phase"])
    out = bench.bracket(df)
    assert int(out["rows"].sum()) == len(df)
    shares = out["inside"] + out["below"] + out["above"]
    assert ((shares - 1).abs() < 1e-9).all()


def test_a_measurement_on_either_replay_lies_between_them():
    df = pd.DataFrame({"stack": ["vllm"] * 4, "measured": [100.0, 300.0, 50.0, 400.0],
                       "lockstep": [300.0, 300.0, 300.0, 300.0], "out_of_phase": [100.0] * 4})
    r = bench.bracket(df).loc["vllm"]
    assert (r["inside"], r["below"], r["above"]) == (0.5, 0.25, 0.25)
    # |error| in %: out of phase 0, 66.7, 100, 75 (median 70.8); in lockstep 200, 0, 500, 25 (median 112.5)
    assert round(r["err_phase"], 1) == 70.8 and r["err_lock"] == 112.5


def _raw(day: str, version, ttft_1k: float, ttft_8k: float, c: int = 8) -> list[dict]:
    base = {"mode": "agg", "isl": 1024, "backend": "trtllm", "backend_version": version, "model_path": "m",
            "system": "b200_sxm", "precision": "fp8", "tp_size": 1.0, "attention_dp_size": 1.0,
            "moe_ep_size": 1.0, "silicon_data_source": f"silicon_concurrency={c}; measured={day}T00:00:00Z"}
    return [{**base, "osl": 1024, "silicon_ttft_ms": ttft_1k}, {**base, "osl": 8192, "silicon_ttft_ms": ttft_8k}]


def test_twins_pair_runs_of_one_campaign_and_flag_the_one_out_of_phase():
    raw = pd.DataFrame(_raw("2025-10-29", None, 500.0, 200.0) + _raw("2026-01-01", "1.2", 210.0, 200.0)
                       + _raw("2026-01-01", "1.2", 900.0, 100.0, c=64))      # above C = 32: not a twin
    twins = bench.osl_twins(raw)
    assert twins["configurations"].tolist() == [1, 1]       # a missing version still pairs its runs
    assert twins["ratio"].round(2).tolist() == [2.5, 1.05]
    text = bench.markdown(pd.DataFrame(), twins, "cmd")
    assert "| TensorRT-LLM | m | b200_sxm | 2025-10-29 | 1 | 2.50 |" in text
    assert "2026-01-01" not in text.split("Campaigns above")[1].split("The other")[0]


def test_position_reads_0_on_the_out_of_phase_replay_and_1_on_the_lockstep_one():
    df = pd.DataFrame({"stack": ["vllm"] * 4 + ["sglang"], "deployment": ["aic-eval", "aic-eval",
                                                                          "aiconfigurator", "aiconfigurator",
                                                                          "aiconfigurator"],
                       "concurrency": [4, 4, 64, 64, 8], "measured": [100.0, 100.0, 300.0, 500.0, 200.0],
                       "out_of_phase": [100.0, 100.0, 100.0, 100.0, 200.0],
                       "lockstep": [300.0, 100.5, 300.0, 300.0, 200.0]})
    where = bench.position(df)
    # the second row's replays agree within 1 % and the SGLang row's exactly: neither says where it lies
    assert where.loc[("vllm", "aic-eval"), "rows"] == 1 and where.loc[("vllm", "aic-eval"), "1–4"] == 0.0
    assert where.loc[("vllm", "aiconfigurator"), "49–128"] == 1.5      # median of 1 and 2
    assert ("sglang", "aiconfigurator") not in where.index
    text = bench.markdown(pd.DataFrame(), pd.DataFrame(columns=["configurations", "ratio"]), "cmd", where=where)
    assert "| vLLM | Dynamo's frontend | 2 | – | 1.50 |" in text
    assert "| vLLM | the stack's own server | 1 | 0.00 | – |" in text
