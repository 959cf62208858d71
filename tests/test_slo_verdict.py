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
    assert r.code == 1 and "SLO a ttft_p99_ms missed" in r.err
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
    assert one and not one[0]["slo_met"] and one[0]["failed_slo"].startswith("a ttft_p99_ms")
    # the fleet the plan picked meets every target when run
    run = cli("run", p, "--set", f"pools.main.replicas={best['overrides']['pools.main.replicas']}", "-o", tmp_path / "run")
    assert run.code == 0, run.err
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"base: {p.name}\ngrid:\n  pools.main.replicas: [1]\n")
    s = cli("sweep", sweep, "-o", tmp_path / "sw")
    assert s.code == 0, s.err
    row = pd.read_parquet(tmp_path / "sw" / "sweep.parquet").iloc[0]
    assert bool(row["slo_met"]) is False and "a ttft_p99_ms" in row["slo_failed"]


def test_compare_leads_with_the_one_verdict():
    from simulator.cli.compare import HEADLINE, _headline_keys
    from simulator.report.diff import diff

    a = {"llmsim": {"slo_met": False, "by_input_length": {"buckets": {"0-2000": {"slo": {"met": False}}}}}}
    b = {"llmsim": {"slo_met": True, "by_input_length": {"buckets": {"0-2000": {"slo": {"met": True}}}}}}
    keys = _headline_keys(diff(a, b))
    assert keys[0] == "llmsim.slo_met" and "llmsim.by_input_length.buckets.0-2000.slo.met" in keys
    assert HEADLINE.index("llmsim.slo_met") < HEADLINE.index("slo.met")
