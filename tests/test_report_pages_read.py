"""What the sweep and plan pages say, against what their tables and plan.json hold: a grid over the seed
had two rows reading "20 ✗" and "20 ✓" (its seed column dropped), a sweep without an SLO read "0 meet the
SLO" in red, a plan at 90 % confidence hid the confidence, the fleet meeting the SLO at 50 % and its pinned
price warning, and a stopped sweep left an earlier sweep's page beside the table it kept."""
from __future__ import annotations

import json

import pandas as pd
import yaml

from simulator.cli.sweep import _partial_page
from test_sweep import write_tiny_scenario


def _text(html: str) -> str:
    import html as h
    import re

    return " ".join(h.unescape(re.sub(r"<[^>]+>", " ", html)).split())


def test_a_seed_grid_shows_its_seeds_and_no_slo_means_no_verdict(cli, tmp_path):
    write_tiny_scenario(tmp_path, slo=None)
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump({"base": "tiny.yaml", "grid": {"seed": [1, 2]}}))
    r = cli("sweep", tmp_path / "sweep.yaml", "--workers", "1", "-o", tmp_path / "sw")
    assert r.code == 0, r.err
    page = (tmp_path / "sw" / "report.html").read_text()
    assert "<th>seed</th>" in page
    assert "meet the SLO" not in _text(page) and "✗" not in page          # no SLO: no verdict to count or mark


def test_a_plan_at_a_confidence_says_so_and_shows_its_warnings(cli, tmp_path):
    p = write_tiny_scenario(tmp_path, slo={"ttft_p99_ms": 5000, "tpot_p99_ms": 200})
    r = cli("plan", p, "--vary", "pools.chat.replicas=1..2", "--confidence", "0.9", "--workers", "1",
            "-o", tmp_path / "plan")
    assert r.code in (0, 1), r.err
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
    text = _text((tmp_path / "plan" / "report.html").read_text())
    assert "Judged at 90 % confidence" in text and "At 50 % (the bias-corrected prediction)" in text
    half = plan["by_confidence"]["levels"]["0.5"]
    if half["met"]:     # the fleet's GPUs (a level's product_gpus is None: the page showed "None GPUs")
        assert f"{half['gpus']:,} GPUs" in text
    asked = plan["by_confidence"]["levels"]["0.9"]
    if asked["met"]:    # the bounds the terminal's answer gives (plan --confidence), on the page too
        assert f"The answer's bounds (ms): tpot_p99_ms {asked['slo_bounds_ms']['tpot_p99_ms']:,.1f}" in text
    for w in plan["warnings"]:
        assert " ".join(w.split()) in text


def test_a_stopped_sweep_leaves_the_page_of_the_table_it_kept(tmp_path):
    folder = tmp_path / "sw"
    folder.mkdir()
    row = {"pools.chat.replicas": 1, "seed": 3, "completed": 10, "failed": 0, "slo_met": True,
           "monthly_usd": 100.0, "gpus": 1, "ttft_p99_ms": 10.0, "tpot_p99_ms": 5.0, "error": None}
    (folder / "report.html").write_text("<p>an earlier sweep's page: 2 points swept</p>")
    pd.DataFrame([row, {**row, "pools.chat.replicas": 2}]).to_parquet(folder / "sweep.parquet", index=False)
    assert _partial_page(folder) == f" and its page {folder / 'report.html'}"
    assert "earlier sweep" not in (folder / "report.html").read_text()
    (folder / "sweep.parquet").unlink()      # nothing kept yet: no page rather than the stale one
    assert _partial_page(folder) == "" and not (folder / "report.html").exists()


def test_a_seed_grid_page_counts_a_fleet_only_if_every_seed_meets(cli, tmp_path):
    """The page named "replicas=1, seed=4" the cheapest fleet meeting the SLO while replicas=1 missed at seed 3."""
    write_tiny_scenario(tmp_path)
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(
        {"base": "tiny.yaml", "grid": {"pools.chat.replicas": [1, 2, 3], "seed": [1, 2, 3]}}))
    assert cli("sweep", tmp_path / "sweep.yaml", "--workers", "1", "-o", tmp_path / "sw").code == 0
    table = pd.read_parquet(tmp_path / "sw" / "sweep.parquet")
    every = table.groupby("pools.chat.replicas")["slo_met"].all()
    text = _text((tmp_path / "sw" / "report.html").read_text())
    assert f"{int(every.sum())} fleets meet the SLO at every seed" in text
    if every.any():
        import re

        named = re.search(r"the cheapest point meeting the SLO: (.*?) Points", text).group(1)
        assert named == f"replicas={int(every[every].index.min())}"        # the fleet, no seed


def test_a_class_not_judged_shows_its_verdict_in_parentheses(cli, tmp_path):
    classes = [{"name": "paid", "share": 0.3}, {"name": "free", "share": 0.7, "slo": {"ttft_p99_ms": 60000}}]
    p = write_tiny_scenario(tmp_path, classes=classes, slo={"ttft_p99_ms": 1, "tpot_p99_ms": 1000})
    r = cli("run", p, "--set", "slo.ttft_p99_ms=100000", "--set", "slo.tpot_p99_ms=0.001", "-o", tmp_path / "o")
    res = json.loads((tmp_path / "o" / "results.json").read_text())
    assert res["llmsim"]["classes"]["paid"]["slo_declared"] is False
    assert res["llmsim"]["classes"]["paid"]["slo"]["met"] is False
    assert "(✗)" in r.out and "(✗)" in (tmp_path / "o" / "report.html").read_text()


def test_a_one_gpu_answer_reads_one_gpu_on_the_page():
    # the terminal's answer read "1 GPU" (fleet_answer) while the page's confidence note said "1 GPUs"
    from simulator.report.page import _confidence_note
    levels = {"0.5": {"met": True, "overrides": {"pools.chat.replicas": 1}, "gpus": 1, "monthly_usd": 2183.0},
              "0.9": {"met": True, "overrides": {"pools.chat.replicas": 2}, "gpus": 2, "monthly_usd": 4366.0}}
    note = _confidence_note(0.9, {"levels": levels}, 1)
    assert "pools.chat.replicas=1, 1 GPU, $2,183/month" in note, note


def test_the_plan_pages_confidence_says_what_traffic_its_bounds_span():
    """The page said "under llmsim's measured error" alone, whether the plan ran one seed (its bounds
    hold none of the traffic's spread) or several, which the terminal's confidence line now says."""
    from simulator.report.page import _confidence_note
    levels = {"0.9": {"met": True, "overrides": {"pools.chat.replicas": 2}, "gpus": 2, "monthly_usd": 4366.0}}
    one = _confidence_note(0.9, {"levels": levels}, 1)
    assert "under llmsim's error model on one seed's traffic (--seeds N adds the traffic's spread)" in one, one
    assert "each target on its own" in one
    assert "and the spread of 3 seeds' traffic, must meet it" in _confidence_note(0.9, {"levels": levels}, 3)


def test_a_one_gpu_fleet_reads_one_gpu_in_the_run_headline():
    # `llmsim run` opened with "Fleet: 1 GPUs at peak", and a product's slice of one GPU with "1 GPUs at peak"
    from simulator.report.fleet_summary import headline
    from simulator.report.page_parts import run_answer

    pools = {"chat": {"gpus": 1, "gpu": "h100-sxm"}}
    fleet = {"slices": 1, "gpus": 1, "gpus_mean": 1.0, "monthly_usd": 2183.0}
    assert str(headline({"product": fleet, "pools": pools})).startswith("Fleet: 1 GPU at peak (chat 1 × h100-sxm")
    product = {"slices": 4, "gpus": 4, "gpus_mean": 4.0, "monthly_usd": 8732.0, "scaling": "× 4",
               "slice": {"gpus": 1, "monthly_usd": 2183.0}}
    assert "simulated slice, 1/4 of the traffic: 1 GPU at peak" in str(headline({"product": product, "pools": pools}))
    assert "1/4 of the traffic: 1 GPU at peak" in str(run_answer({"llmsim": {"product": product, "pools": pools}}))


def test_a_plans_page_is_titled_by_the_scenarios_name(tmp_path):
    # a scenario `name: reasoning-agent` in agent.yaml: its run's page read "llmsim run: reasoning-agent", its
    # plan's "llmsim plan: agent", the file's name
    from simulator.planning.plan import Plan
    from simulator.report.page import _plan_body

    missed = {"overrides": {"pools.p.replicas": 2}, "slo_met": False, "ttft_p99_ms": 900.0, "gpus": 2,
              "monthly_usd": 8760.0, "failed_slo": "ttft_p99_ms 900 ms > 500 ms"}
    plan = Plan("/somewhere/agent.yaml", "min", {"key": "pools.p.replicas", "range": [1, 2]}, [1], [missed],
                name="reasoning-agent")
    (tmp_path / "plan.json").write_text(json.dumps(plan.to_json()))
    assert _plan_body(tmp_path)[0] == "llmsim plan: reasoning-agent"
    older = {k: v for k, v in plan.to_json().items() if k != "name"}      # written before plan.json named it
    (tmp_path / "plan.json").write_text(json.dumps(older))
    assert _plan_body(tmp_path)[0] == "llmsim plan: agent"
