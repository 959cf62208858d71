"""One SLO verdict for a run, whoever reads it: the scenario's targets, each
class's own and each prompt-length bucket's own. ``llmsim run`` exited 1 on a
paid class missing its own target while results.json, the terminal's SLO
table and the page said "SLO met", and ``plan`` and ``sweep`` judged by the
scenario's targets alone, so a plan picked a fleet its own run then failed;
with class targets only, ``plan`` called the scenario SLO-less."""
from __future__ import annotations

import json

import pandas as pd

from simulator.metrics.verdict import failures, slo_blocks, slo_met

SCENARIO = """\
name: classy
seed: 1
workload:
  num_requests: 200
  arrival: {{type: poisson, rate_per_s: 10}}
  input_tokens: {{dist: fixed, value: 1000}}
  output_tokens: {{dist: fixed, value: 100}}
{fleet_slo}classes:
  - {{name: a, share: 0.5{a_slo}}}
  - {{name: b, share: 0.5}}
pools:
  - name: main
    model: llama-3.1-8b
    gpu: h100-sxm
    replicas: 1
    engine: {{backend: vllm}}
"""


def _write(tmp_path, fleet_slo: str = "", a_slo: str = ", slo: {ttft_p99_ms: 50, tpot_p99_ms: 30}"):
    p = tmp_path / "classy.yaml"
    p.write_text(SCENARIO.format(fleet_slo=fleet_slo, a_slo=a_slo))
    return p


def test_a_class_missing_its_own_target_fails_the_run_everywhere_it_is_shown(cli, tmp_path):
    p = _write(tmp_path, fleet_slo="slo: {ttft_p99_ms: 5000, tpot_p99_ms: 100}\n")
    r = cli("run", p, "-o", tmp_path / "out")
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert res["slo"]["met"] is True                            # the scenario's own targets hold
    assert res["llmsim"]["classes"]["a"]["slo_declared"] is True and res["llmsim"]["classes"]["a"]["slo"]["met"] is False
    assert res["llmsim"]["classes"]["b"]["slo_declared"] is False
    assert res["llmsim"]["slo_met"] is False and slo_met(res) is False
    assert r.code == 1 and "SLO a: ttft_p99_ms missed" in r.err
    out = " ".join(r.out.split())
    assert "SLO ✗ missed" in out and "a: TTFT p99" in out and "SLO ✓ met" not in out
    page = (tmp_path / "out" / "report.html").read_text()
    assert 'data-key="llmsim.slo_met" data-value="false"' in page and "a: TTFT p99" in page


def test_a_class_without_targets_of_its_own_is_information_only(tmp_path):
    """b holds the scenario's targets over its requests for information: b's miss fails nothing by itself."""
    res = {"slo": {"met": True, "targets": {}},
           "llmsim": {"classes": {"b": {"slo_declared": False, "slo": {"met": False, "targets": {
               "ttft_p99_ms": {"metric": "ttft", "percentile": 99, "target_ms": 1, "measured_ms": 2, "met": False}}}}}}}
    assert [label for label, _ in slo_blocks(res)] == ["SLO"] and slo_met(res) is True and failures(res) == []
    assert slo_met({"completed": 3}) is None


def test_plan_and_sweep_judge_class_targets(cli, tmp_path):
    p = _write(tmp_path)                        # targets on class a only
    r = cli("plan", p, "--vary", "pools.main.replicas=1..3", "-o", tmp_path / "plan")
    assert r.code == 0, r.err
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
    best = plan["best"]
    assert best is not None and best["overrides"]["pools.main.replicas"] >= 2
    one = [p for p in plan["probes"] if p["overrides"]["pools.main.replicas"] == 1]
    assert one and not one[0]["slo_met"] and one[0]["failed_slo"].startswith("a: ttft_p99_ms")
    # the fleet the plan picked meets every target when run
    run = cli("run", p, "--set", f"pools.main.replicas={best['overrides']['pools.main.replicas']}", "--no-plots",
              "-o", tmp_path / "run")
    assert run.code == 0, run.err
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"base: {p.name}\ngrid:\n  pools.main.replicas: [1]\n")
    s = cli("sweep", sweep, "-o", tmp_path / "sw")
    assert s.code == 0, s.err
    row = pd.read_parquet(tmp_path / "sw" / "sweep.parquet").iloc[0]
    assert bool(row["slo_met"]) is False and "a: ttft_p99_ms" in row["slo_failed"]


def test_compare_leads_with_the_one_verdict():
    from simulator.cli.compare import HEADLINE, _headline_keys
    from simulator.report.diff import diff

    a = {"llmsim": {"slo_met": False, "by_input_length": {"buckets": {"0-2000": {"slo": {"met": False}}}}}}
    b = {"llmsim": {"slo_met": True, "by_input_length": {"buckets": {"0-2000": {"slo": {"met": True}}}}}}
    keys = _headline_keys(diff(a, b))
    assert keys[0] == "llmsim.slo_met" and "llmsim.by_input_length.buckets.0-2000.slo.met" in keys
    assert HEADLINE.index("llmsim.slo_met") < HEADLINE.index("slo.met")


SHEDDING = """\
name: shedding
seed: 1
workload:
  duration_s: 30
  arrival: {type: poisson, rate_per_s: 20}
  input_tokens: {dist: lognormal, mean: 2000, std: 1000, min: 64, max: 8000}
  output_tokens: {dist: lognormal, mean: 250, std: 150, min: 8, max: 1000}
pools:
  - name: chat
    model: llama-3.1-8b
    gpu: h100-sxm
    replicas: 2
    engine: {backend: vllm}
slo: {ttft_p99_ms: 5000, tpot_p99_ms: 100}
classes:
  - {name: all, share: 1.0, admission: {max_queue_per_replica: 2}}
"""


def test_a_plan_does_not_buy_a_fleet_that_sheds_its_load(cli, tmp_path):
    """One H100 sheds 30 % of this load at its admission limit and meets its latency targets on what
    it serves; llmsim run exits 1 on it (OVERLOADED), so the plan must not call it the answer."""
    p = tmp_path / "shedding.yaml"
    p.write_text(SHEDDING)
    run = cli("run", p, "--set", "pools.chat.replicas=1", "--no-plots", "-o", tmp_path / "run")
    assert run.code == 1 and "OVERLOADED" in run.out + run.err
    r = cli("plan", p, "--vary", "pools.chat.replicas=1..3", "-o", tmp_path / "plan")
    assert r.code == 0, r.err
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert plan["best"]["overrides"]["pools.chat.replicas"] == 2
    one = [q for q in plan["probes"] if q["overrides"]["pools.chat.replicas"] == 1]
    assert one and one[0]["slo_met"] is False and one[0]["failed_slo"].startswith("load OVERLOADED")


def test_ladders_and_rows_judge_the_load_too():
    from simulator.metrics.verdict import fleet_met
    from simulator.planning.point import summarize
    from simulator.report.ladder import ladder_row

    met = {"ttft_p99_ms": {"metric": "ttft", "percentile": 99, "target_ms": 9, "measured_ms": 1, "met": True}}
    res = {"completed": 5, "slo": {"met": True, "targets": met},
           "llmsim": {"load": {"overloaded": True, "verdict": "OVERLOADED: it shed 29.1 % of the requests"}}}
    assert slo_met(res) is True and fleet_met(res) is False
    assert summarize(res)["slo_met"] is False and summarize(res)["slo_failed"].startswith("load OVERLOADED")
    assert ladder_row("s", [], res, [])["slo_met"] is False
    res["llmsim"]["load"]["overloaded"] = False
    assert fleet_met(res) is True and summarize(res)["slo_failed"] is None
    assert fleet_met({"completed": 3, "llmsim": {"load": {"overloaded": True}}}) is None


def test_a_plan_at_a_confidence_does_not_buy_a_fleet_that_sheds_either(cli, tmp_path):
    p = tmp_path / "shedding.yaml"
    p.write_text(SHEDDING)
    r = cli("plan", p, "--vary", "pools.chat.replicas=1..2", "--confidence", "0.9", "-o", tmp_path / "plan")
    assert r.code == 0, r.err
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert plan["best"]["overrides"]["pools.chat.replicas"] == 2
    one = [q for q in plan["probes"] if q["overrides"]["pools.chat.replicas"] == 1]
    assert one and one[0]["slo_met"] is False and one[0]["failed_slo"].startswith("load OVERLOADED")


def test_a_ladder_says_which_step_does_not_keep_up_slo_or_none(cli, tmp_path):
    """A ladder step that sheds its load fails as llmsim run fails it; without an SLO its verdict cell
    read "—" (no SLO to miss) and ladder.json carried nothing of its load."""
    p = tmp_path / "shedding.yaml"
    p.write_text(SHEDDING.replace("slo: {ttft_p99_ms: 5000, tpot_p99_ms: 100}\n", "").replace("replicas: 2", "replicas: 1")
                 + "variants:\n  - {name: two, set: {pools.chat.replicas: 2}}\n")
    r = cli("run", p, "--ladder", "--set", "workload.duration_s=20", "-o", tmp_path / "lad")
    assert r.code == 0, r.err
    steps = {s["step"]: s for s in json.loads((tmp_path / "lad" / "ladder.json").read_text())["steps"]}
    assert steps["baseline"]["overloaded"] is True and steps["baseline"]["load"].startswith("OVERLOADED")
    assert steps["baseline"]["slo_met"] is None and steps["two"]["overloaded"] is False
    assert "✗ overloaded" in r.out
    page = (tmp_path / "lad" / "report.html").read_text()
    assert "✗ overloaded" in page


def test_one_cell_gives_a_fleets_verdict():
    from simulator.metrics.verdict import mark

    assert mark({"slo_met": None, "overloaded": True}) == "✗ overloaded"
    assert mark({"slo_met": False, "overloaded": True}) == "✗ overloaded"
    assert [mark({"slo_met": v}) for v in (None, True, False)] == ["—", "✓", "✗"]


def test_a_class_that_sent_nothing_is_not_judged(tmp_path, cli):
    """A tenant with targets of its own that sent no request in the window read 'no samples', missed:
    the run exited 1 beside slo.met true, and every fleet of a plan failed on a quiet tenant."""
    p = tmp_path / "quiet.yaml"
    p.write_text(SCENARIO.format(fleet_slo="slo: {ttft_p99_ms: 5000}\n",
                                 a_slo=", slo: {ttft_p99_ms: 5000}").replace("share: 0.5, slo", "share: 1.0e-9, slo"))
    r = cli("run", p, "-o", tmp_path / "out", "--no-plots")
    assert r.code == 0, r.out + r.err
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    quiet = res["llmsim"]["classes"]["a"]
    assert quiet["requests"] == 0 and "slo" not in quiet and quiet["slo_declared"] is True
    assert quiet["pool"] == "main"      # where it routes, as a class that sent requests shows (it read None)
    assert res["llmsim"]["slo_met"] is True and not failures(res)


def test_a_missed_value_never_reads_as_its_target():
    """✗ TPOT p99 ≤ 60.00 ms beside 60.00, and ✗ TTFT p99 ≤ 2,000 ms beside 2,000: the tables rounded a miss
    onto its target; they show the decimals it takes (60.004, 2,000.04), and a met value as before."""
    from rich.console import Console

    from simulator.report.fleet_summary import classes_table
    from simulator.report.page_parts import classes_table as page_classes_table, slo_table
    from simulator.report.summary import _slo

    def target(metric: str, limit: float, value: float) -> dict:
        return {"metric": metric, "percentile": 99, "target_ms": limit, "measured_ms": value,
                "met": value <= limit, "attainment": 0.98}

    targets = {"tpot_p99_ms": target("tpot", 60.0, 60.004), "ttft_p99_ms": target("ttft", 2000.0, 2000.04),
               "e2el_p99_ms": target("e2el", 9000.0, 8999.996)}
    console = Console(record=True, width=150, color_system=None)
    console.print(_slo({"slo": {"met": False, "targets": targets}}))
    text = console.export_text()
    assert "60.004" in text and "2,000.04" in text and "9,000.00" in text
    page = slo_table({"slo": {"met": False, "targets": targets}})
    assert ">60.004<" in page and ">2,000.04<" in page and ">9,000<" in page
    klass = {"pool": "p", "priority": 0, "completed": 10, "rejected": 0, "cancelled": 0, "median_ttft_ms": 900.0,
             "p99_ttft_ms": 2000.04, "p99_tpot_ms": 60.004, "slo": {"met": False, "targets": targets}}
    console = Console(record=True, width=150, color_system=None)
    console.print(classes_table({"classes": {"paid": klass}}))
    row = next(line for line in console.export_text().splitlines() if "paid" in line)
    assert "2,000.04" in row and "60.004" in row
    assert ">2,000.04<" in page_classes_table({"classes": {"paid": klass}})


def test_a_replicated_run_passes_only_if_every_seed_meets_the_slo():
    """llmsim run --replicates 4 exited 0 on the first seed's pass while another seed missed (the table
    said "met by 3 of 4"); plan --seeds calls such a fleet failing, and run's exit now does too."""
    ok = {"slo": {"met": True, "targets": {}}, "llmsim": {"slo_met": True}}
    assert failures(ok) == []
    three = {**ok, "llmsim": {"slo_met": True, "replicates": {"count": 4, "seeds": [3, 4, 5, 6], "slo_met": 3}}}
    assert failures(three) == ["SLO met by 3 of 4 seeds (3, 4, 5, 6): a fleet passes only if every seed meets it"]
    every = {**ok, "llmsim": {"slo_met": True, "replicates": {"count": 2, "seeds": [3, 4], "slo_met": 2}}}
    assert failures(every) == []


def test_an_slo_is_not_met_beside_refused_requests():
    """A TensorRT-LLM run refusing 37.7 % of its requests as too long read "SLO ✓ met": the targets are
    measured over the requests served. Run, check and plan (slo_met, failures) now fail it, saying why."""
    from simulator.report.summary import _slo as slo_table

    met = {"met": True, "targets": {"ttft_p99_ms": {"metric": "ttft", "percentile": 99.0, "target_ms": 500.0,
                                                    "measured_ms": 100.0, "attainment": 1.0, "met": True}}}
    results = {"completed": 48, "failed": 29, "cancelled": 0, "slo": met,
               "llmsim": {"request_status": {"finished": 48, "rejected": 29}, "load": {"shed": 0, "too_long": 29}}}
    assert slo_met(results) is False
    assert failures(results) == ["SLO missed: 29 requests (37.7 % of 77) refused by the fleet (too long for the "
                                 "stack or its prompt budget, never fitting a replica, or stranded: llmsim.load "
                                 "says which), none served within the SLO"]
    assert "missed" in slo_table(results).title
    served = {**results, "failed": 0, "llmsim": {"request_status": {"finished": 48, "rejected": 0}}}
    assert slo_met(served) is True and failures(served) == []
    # requests a class's admission control shed are its declared policy, which the load's verdict judges
    shed = {**results, "llmsim": {"request_status": {"finished": 48, "rejected": 2}, "load": {"shed": 2}}}
    assert slo_met(shed) is True
    assert slo_met({**results, "slo": None}) is None        # no SLO declared: nothing to miss
    # the share is over the requests offered, as goodput's offered_requests counts them: not those the
    # clients cancelled or the gateway rate-limited (it read 29 of 97 here)
    gated = {**results, "failed": 39, "cancelled": 10,
             "llmsim": {"request_status": {"finished": 48, "rejected": 29, "rate_limited": 10, "cancelled": 10},
                        "load": {"shed": 0, "too_long": 29}}}
    assert "(37.7 % of 77)" in failures(gated)[0]
