"""report.html in a real browser: it draws without errors, its headline is results.json's, every chart has data.

The pages are opened in Debian's Chromium (``helpers_browser``), offline,
and a screenshot of each is kept as a test artefact (in
``$LLMSIM_ARTEFACTS`` when set, else under pytest's temporary folder) so a
person can look at what the suite looked at.
"""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers_browser import browser_page  # noqa: E402
from helpers_case_studies import SCENARIOS, run  # noqa: E402

SCENARIO = """\
name: page
seed: 5
workload:
  num_requests: 400
  arrival: {type: poisson, rate_per_s: 8}
  input_tokens: {dist: uniform, min: 64, max: 1024}
  output_tokens: {dist: uniform, min: 16, max: 128}
classes:
  - {name: free, share: 0.7, pool: small}
  - {name: paid, share: 0.3, pool: big, slo: {ttft_p99_ms: 900}}
pools:
  - {name: small, model: llama-3-8b, gpu: h100-sxm, replicas: 1,
     autoscaling: {metric: concurrency, target: 8, min_replicas: 1, max_replicas: 3, interval_s: 5, warm_pool: 1}}
  - {name: big, model: llama-3-8b, gpu: h200, replicas: 2}
product: {slices: 10}
slo: {ttft_p99_ms: 1500, tpot_p99_ms: 80}
variants:
  - {name: h200-small, set: {pools.small.gpu: h200}}
"""

#: Waits until Plotly has drawn every chart (each sets data-drawn when its promise resolves).
ALL_DRAWN = ("document.querySelectorAll('div.chart').length > 0 && document.querySelectorAll('div.chart').length "
             "=== document.querySelectorAll('div.chart[data-drawn]').length")

#: Per chart: its name, how many traces it has, how many points they hold, and its SVG's size.
CHARTS = """Array.from(document.querySelectorAll('div.chart')).map(el => ({
  name: el.dataset.chart, traces: el.data.length,
  points: el.data.reduce((n, t) => n + (t.x ? t.x.length : 0), 0),
  svg: el.querySelectorAll('svg.main-svg').length,
  drawn: el.querySelectorAll('g.trace, g.point, path.js-line').length,
  labels: el.data.reduce((n, t) => n + (Array.isArray(t.text) ? t.text.filter(Boolean).length : 0), 0)}))"""

FIGURES = """Array.from(document.querySelectorAll('#answer .figure')).map(el => ({
  key: el.dataset.key, value: JSON.parse(el.dataset.value), text: el.querySelector('.big').textContent}))"""


def artefacts(tmp_path_factory) -> Path:
    where = os.environ.get("LLMSIM_ARTEFACTS")
    folder = Path(where) if where else tmp_path_factory.getbasetemp() / "artefacts"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _dig(d, key: str):
    for part in key.split("."):
        d = d[int(part)] if isinstance(d, list) else d[part]
    return d


def _shown_number(text: str) -> float:
    """The number a headline figure shows: $42,953,267 -> 42953267."""
    m = re.search(r"-?[\d,]+(\.\d+)?", text)
    assert m, f"no number in {text!r}"
    return float(m.group(0).replace(",", ""))


def check_page(page, errors: list[str], html: Path, source: dict, shot: Path) -> list[dict]:
    """Open the page; no errors, every chart drawn with data, every headline
    figure equal to ``source`` (the JSON file it names). Returns the charts."""
    page.goto(html.resolve().as_uri())
    page.wait_for_function(ALL_DRAWN, timeout=60_000)
    page.screenshot(path=str(shot), full_page=True)
    assert errors == [], f"{html}: console errors {errors}"
    charts = page.evaluate(CHARTS)
    for c in charts:
        assert c["svg"] >= 1 and c["traces"] >= 1 and c["points"] >= 1 and c["drawn"] >= 1, c
    figures = page.evaluate(FIGURES)
    assert figures
    for f in figures:
        stored = _dig(source, f["key"])
        assert f["value"] == stored, f
        if isinstance(stored, bool):
            continue
        if isinstance(stored, (int, float)):
            assert _shown_number(f["text"]) == pytest.approx(stored, abs=0.5), f
    return charts


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("page") / "page.yaml"
    p.write_text(SCENARIO)
    return p


def test_a_runs_page_draws_its_answer_and_charts(scenario, tmp_path, tmp_path_factory, cli):
    out = tmp_path / "run"
    r = cli("run", scenario, "-o", out, "--exit-zero")
    assert r.code == 0, r.err
    results = json.loads((out / "results.json").read_text())
    with browser_page() as (page, errors):
        charts = check_page(page, errors, out / "report.html", results, artefacts(tmp_path_factory) / "run.png")
        text = page.inner_text("body")
    names = {c["name"] for c in charts}
    assert {"cdf-ttft", "cdf-tpot", "cdf-e2el", "timeseries", "cost"} <= names
    prod = results["llmsim"]["product"]
    assert prod["slices"] == 10 and prod["standby_gpus"] == 10      # one warm h100 per slice
    assert prod["pooled_gpus"] == prod["gpus"] - 9
    assert "warm standby" in text and "page.yaml" not in text and "name: page" in text   # the scenario as run
    # the SLO lines sit where the targets are
    spec = json.loads(re.search(r'id="chart-cdf-ttft-spec">(.*?)</script>', (out / "report.html").read_text()).group(1))
    assert {s["x0"] for s in spec["layout"]["shapes"] if s["xref"] == "x"} == {1500}
    # redrawn from the folder alone, the page is the same
    first = (out / "report.html").read_bytes()
    (out / "report.html").unlink()
    assert cli("report", out).code == 0
    assert (out / "report.html").read_bytes() == first


def test_ladder_plan_and_sweep_pages(scenario, tmp_path, tmp_path_factory, cli):
    lad, plan, sweep = tmp_path / "ladder", tmp_path / "plan", tmp_path / "sweep"
    assert cli("run", scenario, "--ladder", "-o", lad).code == 0
    r = cli("plan", scenario, "--vary", "pools.big.replicas=1..3", "--vary", "pools.big.gpu=h100-sxm,h200",
            "--workers", "1", "-o", plan)
    assert r.code == 0, r.err
    (tmp_path / "sweep.yaml").write_text(f"base: {scenario}\ngrid:\n  pools.big.replicas: [1, 2]\n")
    assert cli("sweep", tmp_path / "sweep.yaml", "--workers", "1", "-o", sweep).code == 0, "sweep"
    shots = artefacts(tmp_path_factory)
    with browser_page() as (page, errors):
        ladder = json.loads((lad / "ladder.json").read_text())
        charts = check_page(page, errors, lad / "report.html", ladder, shots / "ladder.png")
        # every step named on the scatter (points at one place share a label)
        scatter = next(c for c in charts if c["name"] == "ladder-scatter")
        assert scatter["labels"] >= 1 and scatter["points"] == scatter["labels"]
        plan_json = json.loads((plan / "plan.json").read_text())
        charts = check_page(page, errors, plan / "report.html", plan_json, shots / "plan.png")
        pareto = next(c for c in charts if c["name"] == "pareto")
        assert pareto["labels"] == len(plan_json["probes"])       # every fleet simulated, labelled
        table = pd.read_parquet(sweep / "sweep.parquet")
        met = table[table["slo_met"] == True]  # noqa: E712
        swept = {"points": len(table), "slo_met": len(met),
                 "cheapest_meeting_slo": {"monthly_usd": met["product_monthly_usd"].min() if len(met) else None}}
        check_page(page, errors, sweep / "report.html", swept, shots / "sweep.png")
    best = plan_json["best"]
    assert best["product_gpus"] == 10 * best["gpus"] and best["product_monthly_usd"] == pytest.approx(
        10 * best["monthly_usd"])
    assert "the product:" in r.out


@pytest.mark.slow
def test_every_case_studys_page_opens_with_its_headline(tmp_path, tmp_path_factory):
    """The five case studies at their check size, each folder written as llmsim run -o writes it."""
    from simulator.cli.rundir import write_run_files
    from simulator.report.page import write_report

    shots = artefacts(tmp_path_factory)
    with browser_page() as (page, errors):
        for path in sorted(SCENARIOS.glob("*.yaml")):
            out = run(path.stem)
            folder = tmp_path / path.stem
            write_run_files(folder, out, plots=False)     # the PNGs are test_plots' business
            write_report(folder)
            results = json.loads((folder / "results.json").read_text())
            figures = check_page(page, errors, folder / "report.html", results, shots / f"{path.stem}.png")
            assert figures


def test_intervals_are_shown_beside_the_slo_when_results_carry_them():
    """``llmsim.intervals`` (replicated runs) however an interval is stored: beside its SLO target and listed."""
    from simulator.report.page_parts import interval_text, run_answer

    assert interval_text({"low": 140.0, "high": 160.5, "level": 0.95}) == "[140, 160.5] (95 %)"
    assert interval_text([1.0, 2.0]) == "[1, 2]" and interval_text({"mean": 3}) is None
    assert interval_text([8742.3, 33218.9]) == "[8,742, 33,219]"     # was [8,742, 3.322e+04]
    target = {"metric": "ttft", "percentile": 99.0, "target_ms": 2000.0, "measured_ms": 151.2, "attainment": 1.0,
              "met": True}
    results = {"slo": {"met": True, "targets": {"ttft_p99_ms": target}},
               "llmsim": {"product": {"slices": 1, "gpus": 4, "gpus_mean": 4.0, "monthly_usd": 100.0},
                          "intervals": {"p99_ttft_ms": {"lo": 140.0, "hi": 165.0}, "monthly_usd": [90.0, 110.0]}}}
    html = run_answer(results)
    assert "<td>[140, 165]</td>" in html            # in the SLO table's row
    assert "<td>monthly_usd</td><td>[90, 110]</td>" in html


def test_the_page_says_what_its_intervals_cover():
    """The terminal titles its interval table with what the intervals hold (llmsim's error alone for one
    seed, the seeds' spread too with --replicates); the page showed the same brackets unexplained, so a
    single seed's narrow interval read as covering the traffic's noise too."""
    from simulator.report.page_parts import run_answer

    target = {"metric": "ttft", "percentile": 99.0, "target_ms": 2000.0, "measured_ms": 151.2, "attainment": 1.0,
              "met": True}
    iv = {"lo": 140.0, "hi": 165.0, "confidence": 0.9, "bound": 160.0, "model": "ttft"}
    results = {"slo": {"met": True, "targets": {"ttft_p99_ms": target}},
               "llmsim": {"product": {"slices": 1, "gpus": 4, "gpus_mean": 4.0, "monthly_usd": 100.0},
                          "intervals": {"p99_ttft_ms": iv}}}
    captions = re.findall(r"<caption>(.*?)</caption>", run_answer(results))
    one = "90 % interval from llmsim&#x27;s error (one replicate: --replicates N adds the run-to-run spread)"
    assert captions == [one, one]          # the SLO table's and the intervals table's
    results["llmsim"]["replicates"] = {"count": 3, "seeds": [1, 2, 3], "slo_met": 3}
    assert re.findall(r"<caption>(.*?)</caption>", run_answer(results)) == [
        "90 % interval over 3 replicates and llmsim&#x27;s error"] * 2
    del results["llmsim"]["intervals"]     # none: nothing to explain
    assert "<caption>" not in run_answer(results)


def test_the_page_writes_money_as_the_terminal_does():
    """A request's cost showed as $8.361e-05 on the page where the terminal printed 0.00008361: every money
    figure of the cost table is the terminal's (summary_format.usd), whole from $100 as its monthly bill."""
    from simulator.report.page_parts import cost_table, money
    from simulator.report.summary_format import usd

    cost = {"monthly_usd": 12345.678, "window_usd": 0.25, "usd_per_million_output_tokens": 1.23456,
            "usd_per_million_input_tokens": 0.0123456, "usd_per_request": 8.361e-05, "usd_per_session": 0.000512,
            "sessions": {"mean_per_gpu": 3.0, "peak_per_gpu": 5}, "monthly_basis": "24/7"}
    html = cost_table({"cost": cost})
    for label, key in (("per 1M output tokens", "usd_per_million_output_tokens"),
                       ("per 1M input tokens", "usd_per_million_input_tokens"),
                       ("per request", "usd_per_request"), ("per session", "usd_per_session"),
                       ("the simulated window", "window_usd")):
        assert f"<th>{label}</th><td>${usd(cost[key])}</td>" in html, (label, html)
    assert "$0.00008361" in html and "$12,346" in html and "e-0" not in html
    assert money(8.361e-05) == "$0.00008361" and money(250) == "$250" and money(None) == "—"


def test_a_big_request_table_is_sampled_not_read_whole(scenario, tmp_path, cli, monkeypatch):
    import simulator.report.page as page

    out = tmp_path / "run"
    assert cli("run", scenario, "-o", out, "--no-plots", "--exit-zero").code == 0
    full, k = page._requests(out)
    assert k == 1
    monkeypatch.setattr(page, "SAMPLE_ROWS", len(full) // 4)
    part, k = page._requests(out)
    assert k in (4, 5) and len(part) <= len(full) // 4 + k
    assert "charts drawn from every" in page.report_html(out)


def test_a_replicated_runs_page_says_how_many_seeds_met_the_slo(tmp_path):
    """With --replicates the page is the first seed's: its "SLO met" alone hid the seeds that missed,
    which the terminal counts ("met by 3 of 4"); the answer and the SLO table now say it."""
    from simulator.notebook import run as simulate_run
    from simulator.report.page_parts import run_answer
    from test_sweep import write_tiny_scenario

    results = simulate_run(write_tiny_scenario(tmp_path), {"pools.chat.replicas": 4}).results
    assert results["llmsim"]["slo_met"] is True
    results["llmsim"]["replicates"] = {"count": 4, "seeds": [3, 4, 5, 6], "slo_met": 3,
                                       "slo_targets_met": {"ttft_p99_ms": 4, "tpot_p99_ms": 3}}
    page = run_answer(results)
    assert "seed 3's run, and 3 of 4 seeds (3, 4, 5, 6) met it" in page
    assert "<th>seeds met</th>" in page and "<td>3 of 4</td>" in page and "<td>4 of 4</td>" in page
    del results["llmsim"]["replicates"]     # one seed: no count to give
    assert "seeds" not in run_answer(results)


def test_a_plan_of_a_whole_fleet_names_the_fleet_not_a_product(tmp_path):
    """The plan and ladder pages called every headline figure "the product"'s, also where the scenario
    simulates the whole fleet (no product: slices), as the run page does not."""
    from simulator.planning.executors import ExecutorOptions, make_executor
    from simulator.planning.plan import plan_fleet
    from simulator.planning.vary import parse_vary
    from simulator.report.page import report_html
    from test_sweep import write_tiny_scenario

    plan = plan_fleet(write_tiny_scenario(tmp_path), [parse_vary("pools.chat.replicas=3..4")],
                      make_executor("local", ExecutorOptions(workers=1)))
    (tmp_path / "plan.json").write_text(json.dumps(plan.to_json()))
    page = report_html(tmp_path)
    assert "GPUs at peak, the fleet" in page and "the product" not in page
    data = plan.to_json()
    for row in (data["best"], *data["candidates"]):     # the same fleet as a slice of 64
        row["product_gpus"], row["product_monthly_usd"] = 64 * row["gpus"], 64 * row["monthly_usd"]
    (tmp_path / "plan.json").write_text(json.dumps(data))
    assert "GPUs at peak, the product" in report_html(tmp_path)
    # the candidates' probes, as the terminal's table names them: the page headed them "runs", where the
    # terminal's runs are the probes times the seeds ("3 runs (1 probe × 3 seeds)" beside a page's 1 run)
    assert "<th>probes</th>" in page and "<th>runs</th>" not in page
    data["seeds"] = [1, 2, 3]
    (tmp_path / "plan.json").write_text(json.dumps(data))
    assert "<th>probes (× 3 seeds)</th>" in report_html(tmp_path)


def test_an_slo_label_on_a_log_axis_sits_at_its_target():
    """Plotly places an annotation on a log axis at the log of its value, a shape at the value: the label of
    a 2,000 ms TTFT limit was drawn at 10^2000 ms, off the chart, beside a line in its place."""
    from simulator.report.page_charts import latency_cdfs

    n = 200
    requests = pd.DataFrame({"status": ["finished"] * n, "ttft_ms": [10.0 + 10 * i for i in range(n)],
                             "tpot_ms": [7.0 + 0.01 * i for i in range(n)], "e2el_ms": [1e3 + i for i in range(n)]})
    slo = {"targets": {f"{m}_p99_ms": {"metric": m, "percentile": 99, "target_ms": ms}
                       for m, ms in (("ttft", 2000), ("tpot", 30))}}
    charts = dict(latency_cdfs(requests, slo))
    ttft, tpot = charts["cdf-ttft"]["layout"], charts["cdf-tpot"]["layout"]
    assert ttft["xaxis"]["type"] == "log" and tpot["xaxis"]["type"] == "linear"
    assert [a["x"] for a in ttft["annotations"]] == [pytest.approx(3.30103)]
    assert {s["x0"] for s in ttft["shapes"] if s["xref"] == "x"} == {2000}
    assert [a["x"] for a in tpot["annotations"]] == [30]
