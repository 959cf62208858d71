"""One GPU count everywhere: report text, results.json, cost.png, the ladder row and gpu_timeline.

The chatbot's two autoscaled pools (one with a warm standby, billed but not
serving) are where counts used to disagree: ready replicas in one place,
billed ones in another, pools unnamed. Every figure must read the billed
step function of :mod:`simulator.metrics.gpu_counts`.
"""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st
from rich.console import Console

from simulator.metrics.gpu_counts import gpu_count
from simulator.report.summary import summary_table
from simulator.report.ladder import ladder_row
from simulator.report.plots import cost_figure
from simulator.runner import simulate
from simulator.scenario.load import load_scenario


def _text(renderable) -> str:
    console = Console(record=True, width=400, color_system=None)
    console.print(renderable)
    return console.export_text()


@pytest.fixture(scope="module")
def chatbot():
    sc, path = load_scenario("scenarios/chatbot.yaml", ["workload.duration_s=90"])
    return simulate(sc, source=path)


def test_counts_agree_across_report_json_plot_and_ladder(chatbot):
    res = chatbot.results
    ll = res["llmsim"]
    window = ll["simulated_seconds"]
    bills = {p["name"]: p for p in ll["cost"]["pools"]}
    assert set(bills) == set(ll["pools"]) == {"free", "paid"}
    # the paid pool's warm standby is billed: its peak is 2 replicas of TP 4, though 1 serves
    assert ll["pools"]["paid"]["replicas_max"] == 1 and ll["pools"]["paid"]["gpus"] == 8
    for name, p in ll["pools"].items():
        assert p["gpus"] == bills[name]["gpus"]
        assert p["gpu_hours"] == pytest.approx(bills[name]["gpu_hours"])
        assert p["gpus_mean"] == pytest.approx(p["gpu_hours"] * 3600 / window)
        assert p["gpus_mean"] <= p["gpus"]
    timeline = ll["cost"]["gpu_timeline"]
    assert ll["gpus"] == max(g for t, g in timeline if t <= window)
    assert ll["gpus"] <= sum(p["gpus"] for p in ll["pools"].values())
    assert ll["gpu_hours"] == pytest.approx(ll["cost"]["gpu_hours"])
    assert ll["gpus_mean"] == pytest.approx(sum(p["gpus_mean"] for p in ll["pools"].values()))
    # the sampled timeline.csv never shows more than the peak
    assert chatbot.timeline.groupby("time_s")["gpus_billed"].sum().max() <= ll["gpus"]
    # the product is the slice × its slices, pool by pool
    prod = ll["product"]
    n = prod["slices"]
    assert n == 2000 and prod["slice"]["gpus"] == ll["gpus"] and prod["gpus"] == n * ll["gpus"]
    assert {k: v["gpus"] for k, v in prod["pools"].items()} == {k: n * v["gpus"] for k, v in ll["pools"].items()}
    # the ladder row
    assert ladder_row("baseline", [], res, chatbot.requests)["gpus"] == ll["gpus"]
    # the report text names each pool with its peak and mean
    text = _text(summary_table(res))
    assert text.splitlines()[0].startswith(f"Product: {prod['gpus']:,} GPUs at peak (free {n * ll['pools']['free']['gpus']:,}")
    assert f"{ll['gpus']:,} GPUs at peak (free {ll['pools']['free']['gpus']} × h100-sxm, paid 8 × h100-sxm)" in text
    for name, p in ll["pools"].items():
        assert (f"pool {name}: {p['model']}, {p['weight_dtype']} weights, {p['kv_dtype']} KV; peak {p['gpus']} × "
                f"h100-sxm, mean {p['gpus_mean']:,.2f}") in text
    # cost.png labels each bar with the pool's name and the product's peak of it
    fig = cost_figure(res)
    ax = fig.axes[0]
    bars = dict(zip((t.get_text() for t in ax.get_yticklabels()), ax.texts))   # each pool's bar and its note
    for name, p in ll["pools"].items():
        assert f"\npeak {n * p['gpus']:,} × h100-sxm" in bars[name].get_text(), bars
    assert f"{prod['gpus']:,} GPUs at peak" in fig._suptitle.get_text()


@given(st.lists(st.tuples(st.floats(0, 100), st.integers(0, 64)), min_size=1, max_size=12), st.floats(1, 200))
def test_gpu_count_peak_mean_and_hours_agree(steps, end):
    steps = sorted(steps)
    c = gpu_count(steps, end)
    inside = [n for t, n in steps if t <= end]
    assert c.peak == max(inside, default=0)
    assert c.gpu_hours == pytest.approx(c.mean * end / 3600)
    assert 0 <= c.mean <= c.peak + 1e-9
