"""A percentile target over too few requests to have one above it is flagged, not passed off as a tail."""
from __future__ import annotations

import json

import pytest

from simulator.metrics.tail_samples import few_samples, samples_needed
from simulator.notebook import run
from simulator.planning.executors import make_executor
from simulator.planning.plan import plan_fleet
from simulator.planning.vary import parse_vary
from simulator.report.page_parts import slo_table
from test_sweep import write_sweep, write_tiny_scenario, words


@pytest.mark.parametrize("pct, needed", [(99, 100), (95, 20), (90, 10), (99.9, 1000), (50, 2), (100, None)])
def test_samples_needed_puts_one_above_the_percentile(pct, needed):
    assert samples_needed(pct) == needed


def test_few_samples_only_between_none_and_enough():
    assert few_samples(0, 99) is None          # nothing measured: the target is already not met
    assert few_samples(99, 99) == {"samples": 99, "needed": 100}
    assert few_samples(100, 99) is None
    assert few_samples(5, 100) is None          # the maximum is exact on any sample


def test_a_p99_of_30_requests_is_flagged_in_results_terminal_and_page(tmp_path, cli):
    scenario = write_tiny_scenario(tmp_path)
    results = run(scenario, {"workload.num_requests": 30}).results
    target = results["slo"]["targets"]["ttft_p99_ms"]
    assert target["few_samples"] == {"samples": 30, "needed": 100}
    assert "30 samples of the 100 a p99 needs" in slo_table(results)
    r = cli("run", scenario, "--set", "workload.num_requests=30")
    assert "TTFT p99 (30 samples of the 100 a p99 needs)" in words(r.out), r.out
    # enough requests: no flag, no note
    full = cli("run", scenario)
    assert "samples of the" not in full.out


def test_a_plan_answered_on_a_thin_tail_warns(tmp_path):
    scenario = write_tiny_scenario(tmp_path)
    plan = plan_fleet(scenario, [parse_vary("pools.chat.replicas=2..3")], make_executor("local"),
                      sets={"workload.num_requests": 40})
    assert plan.best is not None
    assert any("pools.chat.replicas=2 rests on too few samples" in w and "40 samples of the 100" in w
               for w in plan.warnings), plan.warnings
    assert json.loads(json.dumps(plan.to_json()))["warnings"] == plan.warnings


def test_llmsim_check_says_a_pass_rests_on_too_few_samples(tmp_path, cli):
    scenario = write_tiny_scenario(tmp_path)
    r = cli("check", scenario, "--set", "workload.num_requests=30")
    assert "note: TTFT p99 (30 samples of the 100 a p99 needs)" in words(r.out), r.out
    assert "samples of the" not in cli("check", scenario).out


def test_a_sweep_says_which_points_judge_the_slo_on_too_few_samples(tmp_path, cli):
    sweep = write_sweep(tmp_path, {"grid": {"pools.chat.replicas": [2, 3]}, "points": [{"workload.num_requests": 40}]})
    r = cli("sweep", sweep, "-o", tmp_path / "out", "--workers", "1")
    assert r.code == 0, r.err
    assert ("warning: 2 of 2 points judge the SLO on too few samples; the first, workload.num_requests=40, "
            "pools.chat.replicas=2: TPOT p99 (40 samples of the 100 a p99 needs)") in words(r.err), r.err
