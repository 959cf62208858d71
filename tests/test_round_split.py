"""benchmarks/round_split.py: a prompt's prefill and a decode step, read off a campaign's end-to-end times."""
from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers_bench import load_benchmark

bench = load_benchmark("round_split")


def _campaign(p_ms: float, d_ms: float, c: int, outputs=(128, 256, 512), llmsim_scale: float = 1.0, **key) -> list:
    """Rows of one campaign whose E is exactly C·P + OSL·D (llmsim's P scaled by ``llmsim_scale``)."""
    base = {"stack": "trtllm", "group": "m/h100-sxm/trtllm", "layout": "TP 1", "deployment": "aic-eval",
            "isl": 1024, "concurrency": c, **key}
    return [{**base, "osl": o, "e2e_measured": c * p_ms + o * d_ms, "e2e_llmsim": c * p_ms * llmsim_scale + o * d_ms}
            for o in outputs]


@settings(max_examples=30, deadline=None)
@given(p=st.floats(1.0, 500.0), d=st.floats(1.0, 100.0), c=st.integers(1, 128))
def test_a_campaign_s_prefill_and_decode_are_read_back(p, d, c):
    camps = bench.split(pd.DataFrame(_campaign(p, d, c, llmsim_scale=0.8)))
    assert len(camps) == 1
    row = camps.iloc[0]
    assert row.P_measured == pytest.approx(p, rel=1e-6) and row.D_measured == pytest.approx(d, rel=1e-6)
    assert row.P_llmsim == pytest.approx(0.8 * p, rel=1e-6) and row.D_llmsim == pytest.approx(d, rel=1e-6)


def test_two_output_lengths_make_no_campaign_and_campaigns_are_kept_apart():
    frame = pd.DataFrame(_campaign(50.0, 10.0, 8, outputs=(1024, 8192))
                         + _campaign(50.0, 10.0, 8) + _campaign(30.0, 10.0, 16))
    camps = bench.split(frame)
    assert sorted(camps["concurrency"]) == [8, 16]
    assert camps.set_index("concurrency").loc[16, "P_measured"] == pytest.approx(30.0)


def test_a_line_starting_at_or_below_zero_is_left_out_and_counted():
    frame = pd.DataFrame(_campaign(50.0, 10.0, 8) + _campaign(-5.0, 10.0, 16))
    camps = bench.split(frame)
    assert len(camps) == 2 and len(bench.held(camps)) == 1
    text = bench.markdown(camps, "cmd", 0.0)
    assert "(2; 1 whose measured line starts at or below zero are left out" in text
    assert "| TensorRT-LLM | m/h100-sxm/trtllm | 1024 | 1 | 50.00 | 50.00 | 1.00 | 1.00 |" in text


def test_without_the_sample_it_says_why_and_succeeds(capsys, tmp_path):
    assert bench.main([str(tmp_path / "absent.csv")]) == 0
    assert "skipped" in capsys.readouterr().out
