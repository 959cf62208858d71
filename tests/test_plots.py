"""Plots: what they draw (checked on the Figure's artists, not pixels) and
when `llmsim run` writes them."""
from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

from helpers_whatif import TTFT_P99_TARGET, write_scenario
from simulator.metrics.derive import RequestArrays
from simulator.report.plots import (cost_figure, ladder_figure, latency_cdf_figure, pool_costs, timeline_figure,
                                    write_run_plots)
from simulator.runner import simulate

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from simulator.scenario.load import load_scenario

    sc, path = load_scenario(write_scenario(tmp_path_factory.mktemp("sc")))
    return simulate(sc, source=path)


def timeline(pools=("free", "paid"), n=30) -> pd.DataFrame:
    t = np.arange(n) * 10.0
    return pd.DataFrame([{"time_s": x, "pool": p, "ready": 2 + (x > 100), "starting": int(90 < x <= 100),
                          "draining": 0, "queue_depth": i % 5, "kv_utilization": 0.5, "arrival_rate_per_s": 7.0 + k}
                         for k, p in enumerate(pools) for i, x in enumerate(t)])


def _vertical_lines_at(ax) -> set[float]:
    return {float(line.get_xdata()[0]) for line in ax.lines
            if len(line.get_xdata()) == 2 and line.get_xdata()[0] == line.get_xdata()[1]}


def test_cdfs_hold_every_finished_request_and_the_slo_lines(run):
    fig = latency_cdf_figure(run.requests, run.results)
    ttft_ax, tpot_ax = fig.axes
    a = RequestArrays(run.requests)
    curve = ttft_ax.lines[0]
    assert curve.get_xdata().max() == pytest.approx(np.nanmax(a.ttft_ms[a.finished]))
    assert curve.get_ydata()[-1] == 1.0
    tpot = a.tpot_ms[np.isfinite(a.tpot_ms)]
    assert tpot_ax.lines[0].get_xdata().max() == pytest.approx(tpot.max())
    assert tpot_ax.lines[0].get_xdata().min() == pytest.approx(tpot.min())
    assert TTFT_P99_TARGET in _vertical_lines_at(ttft_ax) and 100.0 in _vertical_lines_at(tpot_ax)
    assert "ms" in ttft_ax.get_xlabel() and "ms" in tpot_ax.get_xlabel()
    legend = [t.get_text() for t in ttft_ax.get_legend().get_texts()]
    assert any(f"SLO p99 ≤ {TTFT_P99_TARGET:,} ms (met)" in t for t in legend)


def test_a_missed_slo_is_drawn_red(run):
    res = {**run.results, "slo": {"targets": {"ttft_p99_ms": {"metric": "ttft", "percentile": 99.0,
                                                              "target_ms": 5.0, "met": False}}}}
    ax = latency_cdf_figure(run.requests, res).axes[0]
    assert any("missed" in t.get_text() for t in ax.get_legend().get_texts())
    assert ax.get_xscale() == "log"     # 5 ms beside hundreds: a linear axis would hide one of them


def test_no_finished_requests_still_draws():
    fig = latency_cdf_figure([], {})
    assert "no finished requests" in fig.axes[0].texts[0].get_text()


def test_timeline_has_a_panel_per_quantity_and_a_line_per_pool():
    fig = timeline_figure(timeline())
    rate, replicas, queue, kv = fig.axes
    assert [len(ax.lines) for ax in fig.axes] == [2, 6, 2, 2]
    assert "draining (dotted)" in replicas.get_title(loc="left") and "warm" not in replicas.get_title(loc="left")
    warm = timeline_figure(timeline().assign(warm=1)).axes[1]
    assert len(warm.lines) == 8 and "warm (dash-dot)" in warm.get_title(loc="left")
    assert replicas.lines[0].get_ydata().max() == 3
    assert kv.get_ylim()[1] <= 1.1
    assert "time (min)" in kv.get_xlabel() and kv.lines[0].get_xdata().max() == pytest.approx(290 / 60)
    # The fleet's rate repeated on every pool's rows is drawn once.
    same = timeline()
    same["arrival_rate_per_s"] = 7.0
    assert len(timeline_figure(same).axes[0].lines) == 1


def test_pool_costs_prefer_per_pool_blocks():
    cost = {"window_usd": 3.0, "gpu_hours": 1.0, "monthly_usd": 300.0,
            "pools": [{"name": "chat", "usd": 1.0, "gpu_hours": 0.5, "gpus": 2, "gpu": "h100-sxm",
                       "usd_per_gpu_hour": 1.0},
                      {"name": "code", "usd": 2.0, "gpu_hours": 0.5, "gpus": 1, "gpu": "a100-80gb",
                       "usd_per_gpu_hour": 4.0}]}
    assert [p["gpu"] for p in pool_costs({"llmsim": {"cost": cost}})] == ["h100-sxm", "a100-80gb"]
    fleet = {"llmsim": {"cost": cost, "pools": {"chat": {"usd": 1.0, "gpu_hours": 0.5, "gpus": 2, "tp": 2,
                                                           "replicas_min": 1, "replicas_max": 3},
                                                  "code": {"usd": 2.0, "gpu_hours": 0.5, "gpus": 1}}}}
    got = pool_costs(fleet)
    assert [(p["name"], p["usd"], p["usd_per_gpu_hour"]) for p in got] == [("chat", 1.0, 1.0), ("code", 2.0, 4.0)]
    single = {"llmsim": {"scenario": "s", "gpus": 4, "cost": {"window_usd": 5.0, "gpu_hours": 2.0}}}
    assert pool_costs(single) == [{"name": "s", "gpu_hours": 2.0, "usd": 5.0, "gpus": 4, "gpus_mean": None, "gpu": None,
                                   "usd_per_gpu_hour": None, "monthly_usd": None}]
    assert pool_costs({"llmsim": {}}) == [] and cost_figure({"llmsim": {}}) is None
    # Monthly bars, split as the window's cost is.
    ax = cost_figure(fleet).axes[0]
    assert [b.get_width() for b in ax.patches] == pytest.approx([100.0, 200.0])
    # Two bare $ in one string would turn the text between them into mathtext.
    fig = ax.figure
    texts = [t.get_text() for t in ax.texts + ax.get_yticklabels()] + [fig._suptitle.get_text(), ax.get_xlabel()]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["chat", "code"]
    assert any(t.endswith("\npeak 1 × a100-80gb at \\$4.00/GPU-h") for t in texts)
    assert not [t for t in texts if re.search(r"(?<!\\)\$", t)]
    assert any(t.endswith("\npeak 2 × h100-sxm at \\$1.00/GPU-h") for t in texts)   # the billed peak
    _all_text_fits(fig)


def _all_text_fits(fig) -> None:
    """Every piece of text inside the figure, and no two tick labels of an axis over each other."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)     # a Figure made without pyplot has no renderer of its own
    canvas.draw()
    r = canvas.get_renderer()
    box = fig.bbox
    drawn = [t for ax in fig.axes for axis in (ax.xaxis, ax.yaxis) for tick in axis._update_ticks()
             for t in (tick.label1,) if t.get_visible() and t.get_text()]
    texts = [*drawn, *fig.texts, *([fig._suptitle] if fig._suptitle else []),
             *(t for ax in fig.axes for t in (*ax.texts, ax.title, ax._left_title, ax.xaxis.label, ax.yaxis.label))]
    for t in texts:
        if not t.get_text():
            continue
        e = t.get_window_extent(r)
        assert box.x0 - 1 <= e.x0 and e.x1 <= box.x1 + 1 and box.y0 - 1 <= e.y0 and e.y1 <= box.y1 + 1, t.get_text()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            shown = [t.label1.get_window_extent(r) for t in axis._update_ticks() if t.label1.get_text()]
            assert not any(a.overlaps(b) for i, a in enumerate(shown) for b in shown[i + 1:])


def test_a_sliced_products_cost_figure_fits(run):
    results = json.loads(json.dumps(run.results))
    results["llmsim"]["product"] = {**results["llmsim"]["product"], "slices": 2000,
                                    "gpus": 2000 * results["llmsim"]["gpus"]}
    _all_text_fits(cost_figure(results, title="a long scenario name"))


def test_ladder_bars_are_the_rows():
    rows = [{"step": s, "ttft_p95_ms": p95, "ttft_p99_ms": p95 * 2, "monthly_usd": m, "usd_per_request": 0.001,
             "gpus": g} for s, p95, m, g in (("baseline", 50.0, 100.0, 1), ("more", 20.0, 200.0, 2))]
    lat, money = ladder_figure(rows, {"targets": {"ttft_p99_ms": {"metric": "ttft", "percentile": 99.0,
                                                                  "target_ms": 80.0}}}).axes
    heights = [b.get_height() for b in lat.patches]
    assert heights == [50.0, 20.0, 100.0, 40.0]
    assert [b.get_height() for b in money.patches] == [100.0, 200.0]
    assert any(line.get_ydata()[0] == 80.0 for line in lat.lines)
    assert [t.get_text() for t in money.get_xticklabels()] == ["baseline", "more"]
    assert lat.get_yscale() == "linear"
    # A target far above the bars: on a linear axis they would be slivers under the line.
    far = ladder_figure(rows, {"targets": {"ttft_p99_ms": {"metric": "ttft", "percentile": 99.0, "target_ms": 2000.0}}})
    assert far.axes[0].get_yscale() == "log"


def test_a_sliced_ladder_shows_the_products_bill_and_gpus():
    """The ladder's table and report lead with the product; the chart showed the slice's $20,383 and 10 GPUs,
    unlabelled, beside their $40.8M and 20,000 GPUs."""
    rows = [{"step": s, "ttft_p95_ms": 50.0, "ttft_p99_ms": 90.0, "monthly_usd": m, "usd_per_request": 0.001,
             "gpus": g, "product_monthly_usd": 2000 * m, "product_gpus": 2000 * g}
            for s, m, g in (("baseline", 20_383.0, 10), ("more", 30_000.0, 14))]
    money = ladder_figure(rows).axes[1]
    assert [b.get_height() for b in money.patches] == [2000 * 20_383.0, 2000 * 30_000.0]
    assert "20,000 GPUs" in " ".join(t.get_text() for t in money.texts)
    assert "the product, 2,000 × the simulated slice" in money.get_title(loc="left")


def test_write_run_plots_skips_the_timeline_without_one(run, tmp_path):
    (tmp_path / "a").mkdir()
    names = sorted(p.name for p in write_run_plots(tmp_path / "a", run.results, run.requests, None))
    assert names == ["cost.png", "latency_cdf.png"]
    (tmp_path / "b").mkdir()
    written = write_run_plots(tmp_path / "b", run.results, run.requests, timeline())
    assert sorted(p.name for p in written) == ["cost.png", "latency_cdf.png", "timeline.png"]
    for p in written:
        assert p.read_bytes()[:8] == PNG and p.stat().st_size > 10_000


# --- from the command line ---------------------------------------------------------

def test_run_with_o_writes_plots_unless_told_not_to(tmp_path, cli):
    sc = write_scenario(tmp_path)
    assert cli("run", sc, "-o", tmp_path / "with").code == 0
    assert {"latency_cdf.png", "cost.png", "results.json"} <= {p.name for p in (tmp_path / "with").iterdir()}
    # timeline.csv and its figure come together, when the runner gives a timeline
    assert (tmp_path / "with" / "timeline.png").exists() == (tmp_path / "with" / "timeline.csv").exists()
    assert cli("run", sc, "-o", tmp_path / "without", "--no-plots").code == 0
    assert not list((tmp_path / "without").glob("*.png"))
    r = cli("run", sc, "--plots")
    assert r.code == 2 and "-o DIR" in r.err


def test_a_runner_timeline_becomes_timeline_csv_and_png(tmp_path, cli, monkeypatch):
    import simulator.runner as runner

    real = runner.simulate

    def with_timeline(*a, **k):
        out = real(*a, **k)
        out.timeline = timeline(("main",))
        return out

    monkeypatch.setattr(runner, "simulate", with_timeline)
    out = tmp_path / "out"
    assert cli("run", write_scenario(tmp_path), "-o", out).code == 0
    back = pd.read_csv(out / "timeline.csv")
    assert list(back.columns) == ["time_s", "pool", "ready", "starting", "draining", "queue_depth",
                                  "kv_utilization", "arrival_rate_per_s"]
    assert len(back) == 30 and (out / "timeline.png").is_file()
