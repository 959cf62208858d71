"""`llmsim check`: SLO and baseline gating for CI, and the verdict rules under it.

Exit codes carry the meaning: 0 passed, 1 the fleet got worse (an SLO
missed, a metric regressed), 2 the input is broken (a baseline missing or
written for another run among it).
"""
from __future__ import annotations

import json

import pytest

from helpers_whatif import VARIANTS, with_ttft_target, write_scenario
from simulator.report.regression import judge, rounded
from simulator.scenario.ci import DEFAULT_METRICS, CheckSpec, check_metric_names

CHECK = """\
check:
  set: {workload.num_requests: 120}
  metrics: [completed, p95_ttft_ms, p99_ttft_ms, median_tpot_ms, llmsim.cost.usd_per_request]
"""


@pytest.fixture
def scenario(tmp_path):
    return write_scenario(tmp_path / "scenarios", CHECK)


def baseline_of(tmp_path, cli, scenario):
    base = tmp_path / "baselines"
    r = cli("check", scenario, "--baseline", base, "--update-baseline")
    assert r.code == 0, r.out + r.err
    return base


# --- verdicts ---------------------------------------------------------------------

@pytest.mark.parametrize("metric, base, now, tol, verdict, failed", [
    ("p99_ttft_ms", 100.0, 104.0, 0.05, "ok", False),
    ("p99_ttft_ms", 100.0, 106.0, 0.05, "regressed", True),
    ("p99_ttft_ms", 100.0, 80.0, 0.05, "improved", False),
    ("request_throughput", 10.0, 9.0, 0.05, "regressed", True),
    ("request_throughput", 10.0, 11.0, 0.05, "improved", False),
    ("total_input_tokens", 1000, 1100, 0.05, "moved", True),      # no direction: any move beyond tolerance
    ("total_input_tokens", 1000, 900, 0.05, "moved", True),
    ("failed", 0, 3, 0.05, "regressed", True),                     # from zero: an infinite relative move
    ("failed", 0, 0, 0.0, "ok", False),
    ("p99_ttft_ms", 100.0, None, 0.05, "missing", True),           # no samples any more
    ("p99_ttft_ms", None, 50.0, 0.05, "measured", False),          # samples now, none in the baseline
    ("p99_ttft_ms", 100.0, float("nan"), 0.05, "missing", True),   # NaN would pass any tolerance
])
def test_verdicts(metric, base, now, tol, verdict, failed):
    v = judge(metric, base, now, tol)
    assert (v.verdict, v.failed) == (verdict, failed)


def test_a_metric_the_baseline_lacks_is_new_not_failed():
    v = judge("p50_ttft_ms", None, 3.0, 0.05, in_baseline=False)
    assert v.verdict == "new" and not v.failed


def test_baseline_values_are_rounded_the_same_way_they_are_compared():
    assert rounded(0.1234567891) == 0.123457 and rounded(7) == 7 and rounded(None) is None
    v = 0.1234567891
    assert judge("p99_ttft_ms", rounded(v), v, 0.0).verdict == "ok"


# --- the command ------------------------------------------------------------------

def test_update_writes_small_baselines_of_tracked_metrics_at_fast_settings(tmp_path, cli, scenario):
    base = baseline_of(tmp_path, cli, scenario)
    written = json.loads((base / "small.json").read_text())
    assert written["scenario"] == "small" and written["settings"] == {"check.set": {"workload.num_requests": 120},
                                                                       "--set": []}
    saved = written["metrics"]
    assert list(saved) == ["completed", "p95_ttft_ms", "p99_ttft_ms", "median_tpot_ms",
                           "llmsim.cost.usd_per_request"]
    assert saved["completed"] == 120                  # check.set shrank the 300-request scenario
    assert all(len(repr(v)) <= 12 for v in saved.values())
    r = cli("check", scenario, "--baseline", base)
    assert r.code == 0, r.out
    assert "PASS" in r.out and "check passed" in r.out and "regressed" not in r.out


def test_a_set_on_the_check_block_changes_what_check_runs(tmp_path, cli, scenario):
    base = tmp_path / "b"
    r = cli("check", scenario, "--baseline", base, "--update-baseline", "--set", "check.set={workload.num_requests: 60}")
    assert r.code == 0, r.out + r.err
    written = json.loads((base / "small.json").read_text())
    assert written["metrics"]["completed"] == 60       # not the file's 120: the --set was taken, as recorded
    assert written["settings"]["check.set"] == {"workload.num_requests": 60}
    r = cli("check", scenario, "--baseline", base, "--set", "check={set: {bogus.key: 1}}")
    assert r.code == 2 and "bogus" in r.err          # refused as the same key in the file is


def test_a_worse_fleet_fails_and_names_the_metric(tmp_path, cli, scenario):
    base = baseline_of(tmp_path, cli, scenario)
    r = cli("check", scenario, "--baseline", base, "--set", "pools.main.engine.max_num_batched_tokens=128")
    assert r.code == 1, r.out
    assert "FAIL" in r.out and "check failed" in r.out
    failures = r.out.split("check failed")[1]
    assert "small: p95_ttft_ms regressed" in failures and "tolerance 5%" in failures
    # Within a loose enough tolerance the same run passes.
    loose = cli("check", scenario, "--baseline", base, "--set", "pools.main.engine.max_num_batched_tokens=128",
                "--tolerance", "1000")
    assert loose.code == 0 and "--tolerance 1000 lets a metric move by 100,000 %" in " ".join(loose.out.split())


def test_per_metric_tolerance_overrides_the_flag(tmp_path, cli):
    loose = CHECK + "  tolerance: {p95_ttft_ms: 1000, p99_ttft_ms: 1000, median_tpot_ms: 1000, completed: 0}\n"
    sc = write_scenario(tmp_path / "scenarios", loose)
    base = baseline_of(tmp_path, cli, sc)
    r = cli("check", sc, "--baseline", base, "--set", "pools.main.engine.max_num_batched_tokens=128")
    assert r.code == 0, r.out


def test_an_improvement_passes_and_asks_for_a_refresh(tmp_path, cli, scenario):
    base = baseline_of(tmp_path, cli, scenario)
    r = cli("check", scenario, "--baseline", base, "--set", "pools.main.replicas=2")
    assert "improved" in r.out
    # ... though a second replica doubles the cost per request: that is a regression.
    assert r.code == 1 and "llmsim.cost.usd_per_request regressed" in r.out


def test_a_missed_slo_fails_without_any_baseline(tmp_path, cli):
    sc = write_scenario(tmp_path, CHECK, text=with_ttft_target(1))
    r = cli("check", sc)
    assert r.code == 1
    assert "SLO ttft_p99_ms" in r.out and "VIOLATED" in r.out and "target ≤ 1" in r.out


def test_a_class_that_misses_its_own_slo_fails(tmp_path, cli):
    """The fleet meets its targets over all traffic; the paid class's own,
    stricter target is missed, and that alone fails the check."""
    classes = "classes: [{name: free, share: 3}, {name: paid, share: 1, slo: {ttft_p99_ms: 1}}]\n"
    r = cli("check", write_scenario(tmp_path, CHECK + classes))
    assert r.code == 1
    failures = r.out.split("check failed")[1]
    assert "SLO paid: ttft_p99_ms missed: simulated" in failures and "SLO free" not in r.out
    assert "SLO ttft_p99_ms" in r.out and "small: SLO ttft_p99_ms" not in failures


def test_a_missed_slo_fails_even_when_updating(tmp_path, cli):
    sc = write_scenario(tmp_path, CHECK, text=with_ttft_target(1))
    r = cli("check", sc, "--baseline", tmp_path / "b", "--update-baseline")
    assert r.code == 1 and (tmp_path / "b" / "small.json").is_file()


def test_a_missing_baseline_is_exit_2_before_any_run(tmp_path, cli, monkeypatch, scenario):
    """No baseline: the check is not set up for the scenario, which CI must tell from a worse fleet (exit 1)."""
    import simulator.runner as runner

    ran = []
    monkeypatch.setattr(runner, "simulate", lambda *a, **k: ran.append(1))
    (tmp_path / "empty").mkdir()
    r = cli("check", scenario, "--baseline", tmp_path / "empty")
    assert r.code == 2 and "no baseline for the scenario 'small'" in r.err and "--update-baseline" in r.err, r.err
    assert ran == []


def test_a_missing_baseline_folder_is_exit_2(tmp_path, cli, scenario):
    r = cli("check", scenario, "--baseline", tmp_path / "nothing-here")
    assert r.code == 2 and "nothing-here: no such folder" in r.err and "--update-baseline" in r.err


def test_several_scenarios_one_failing(tmp_path, cli, scenario):
    other = write_scenario(tmp_path / "scenarios", CHECK, name="other.yaml",
                           text=with_ttft_target(1, name="other small"))
    r = cli("check", scenario, other, "--baseline", tmp_path / "b", "--update-baseline")
    assert r.code == 1 and "1 of 2 scenarios" in r.out
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["other-small.json", "small.json"]


# --- bad input is exit 2 ----------------------------------------------------------

@pytest.mark.parametrize("extra, args, fragments", [
    ("check: {metrics: [p95_ttfx_ms]}\n", [], ["check.metrics", "p95_ttfx_ms", "did you mean p95_ttft_ms"]),
    ("check: {metrics: [llmsim.engine]}\n", [], ["check.metrics", "not a number"]),
    ("check: {metrics: [p95_ttft_ms], tolerance: {p99_ttft_ms: 0.1}}\n", [], ["not tracked: p99_ttft_ms"]),
    ("check: {tolerance: {p99_ttft_ms: -1}}\n", [], ["check.tolerance.p99_ttft_ms"]),
    ("check: {set: {workload.nope.x: 1}}\n", [], ["(with check.set)", "workload.nope: unknown key"]),
    ("check: {set: {workload.num_requests: many}}\n", [], ["check.set", "workload.num_requests"]),
    (VARIANTS + "  - {name: broken, set: {pools.1.tp: 2}}\n", [], ["variants.broken.set.pools.1.tp"]),
    ("", ["--update-baseline"], ["--baseline DIR"]),
    ("", ["--engine", "turbo"], ["--engine"]),
])
def test_bad_input_is_exit_2(tmp_path, cli, extra, args, fragments):
    sc = write_scenario(tmp_path, extra)
    r = cli("check", sc, *args)
    assert r.code == 2, r.out + r.err
    assert "Traceback" not in r.err
    for f in fragments:
        assert f in r.err, (f, r.err)


def test_a_corrupt_baseline_is_exit_2(tmp_path, cli, scenario):
    base = tmp_path / "b"
    base.mkdir()
    (base / "small.json").write_text('{"completed": "lots"}')
    r = cli("check", scenario, "--baseline", base)
    assert r.code == 2 and "small.json" in r.err and "completed" in r.err


def test_a_baseline_without_its_metrics_says_so(tmp_path, cli, scenario):
    base = baseline_of(tmp_path, cli, scenario)
    f = base / "small.json"
    f.write_text(json.dumps({k: v for k, v in json.loads(f.read_text()).items() if k != "metrics"}))
    r = cli("check", scenario, "--baseline", base)
    assert r.code == 2 and "metrics: missing" in r.err and "note:" not in r.out + r.err


def test_two_scenarios_sharing_a_name_cannot_share_a_baseline(tmp_path, cli, scenario):
    twin = write_scenario(tmp_path / "elsewhere", CHECK)
    (tmp_path / "b").mkdir()
    r = cli("check", scenario, twin, "--baseline", tmp_path / "b")
    assert r.code == 2 and "same name" in r.err


def test_check_runs_no_scenario_before_all_are_valid(tmp_path, cli, monkeypatch, scenario):
    import simulator.runner as runner

    ran = []
    monkeypatch.setattr(runner, "simulate", lambda *a, **k: ran.append(1))
    broken = write_scenario(tmp_path, "check: {set: {pools.9.tp: 2}}\n", name="broken.yaml")
    assert cli("check", scenario, broken).code == 2
    assert ran == []


# --- check.metrics is read as the scenario loads -------------------------------------

@pytest.mark.parametrize("metric, fragments", [
    ("p95_ttfx_ms", ["'p95_ttfx_ms' is not a key of results.json; did you mean p95_ttft_ms?"]),
    ("llmsim.cost.monthy_usd", ["did you mean llmsim.cost.monthly_usd?"]),
    ("llmsim.pools.main.replicsa", ["did you mean llmsim.pools.main.replicas?"]),
    ("zzzz", ["its top-level keys are completed, failed", " more"]),
    ("llmsim.zzzz", ["llmsim's keys are "]),
    ("p99_ttft_ms.x", ["p99_ttft_ms is a figure, with no keys below it"]),
    ("llmsim.cost", ["'llmsim.cost' is a block of results.json, not a figure; name one of its keys: llmsim.cost."]),
], ids=["typo", "nested-typo", "named-pool", "unknown", "unknown-nested", "below-a-figure", "block"])
@pytest.mark.parametrize("command", ["run", "check", "plan", "sweep"])
def test_a_metric_no_results_json_has_is_refused_by_every_command(tmp_path, cli, command, metric, fragments):
    """llmsim run (and plan, sweep) of a file llmsim check refuses accepted it:
    the file is refused as it loads, before anything runs or is written."""
    sc = write_scenario(tmp_path, f"check: {{metrics: [completed, '{metric}']}}\n")
    out = tmp_path / "out"
    args = {"run": ["run", sc, "-o", out], "check": ["check", sc],
            "plan": ["plan", sc, "--vary", "pools.main.replicas=1..2", "-o", out],
            "sweep": ["sweep", tmp_path / "sw.yaml", "-o", out]}[command]
    (tmp_path / "sw.yaml").write_text(f"base: {sc.name}\ngrid: {{pools.main.replicas: [1, 2]}}\n")
    r = cli(*args)
    assert r.code == 2 and "Traceback" not in r.err and len(r.err.strip().splitlines()) == 1, r.out + r.err
    assert f"{sc}" in r.err and "check.metrics[1]: " in r.err
    for f in fragments:
        assert f in r.err, (f, r.err)
    assert not out.exists()


@pytest.mark.parametrize("metric, says", [
    ("llmsim.engine", "'llmsim.engine' is text, not a number to hold against a baseline"),
    ("slo.met", "'slo.met' is a yes/no, not a number"),
    ("llmsim.ttft_budget.parts.0", "'llmsim.ttft_budget.parts.0' is a list of names, not a number"),
    ("llmsim.by_input_length.edges", "'llmsim.by_input_length.edges' is a list (list of tokens), not a figure; "
                                     "name one item by its index: llmsim.by_input_length.edges.0"),
    ("llmsim.cost.gpu_timeline.0", "'llmsim.cost.gpu_timeline.0' is a list (list of [s, GPUs]), not a figure; "
                                   "name one entry of an item by its index: llmsim.cost.gpu_timeline.0.1"),
], ids=["text", "verdict", "list-of-names-item", "whole-list", "item-of-pairs"])
def test_a_key_that_is_never_a_number_is_refused_as_the_scenario_loads(tmp_path, cli, monkeypatch, metric, says):
    """Text, a verdict or a whole list is declared in results.json but can never be held against a baseline:
    refused before the run, naming the entry, where check used to say so only after simulating."""
    from simulator import runner

    ran = []
    monkeypatch.setattr(runner, "simulate", lambda *a, **k: ran.append(1))
    sc = write_scenario(tmp_path, f"check: {{metrics: [completed, '{metric}']}}\n")
    r = cli("check", sc)
    assert r.code == 2 and f"check.metrics[1]: {says}" in r.err, r.err
    assert ran == []


@pytest.mark.parametrize("metrics", [
    list(DEFAULT_METRICS),
    ["slo.targets.ttft_p99_ms.measured_ms", "slo.goodput.attainment.ttft", "llmsim.cost.pools.main.usd",
     "llmsim.pools.main.gpus", "llmsim.classes.paid.slo.targets.ttft_p99_ms.attainment",
     "llmsim.by_input_length.edges.0", "llmsim.cost.gpu_timeline.0.1", "llmsim.stage_layers.0",
     "llmsim.intervals.p99_ttft_ms.hi", "llmsim.gateway.classes.paid.rate_limit.rate_per_s"],
], ids=["defaults", "named-and-listed"])
def test_metrics_results_json_declares_are_accepted(metrics):
    """Figures, named by pool, class or target, and list items by index."""
    from simulator.cli.app import results_fields

    check_metric_names(CheckSpec(metrics=metrics), results_fields(), "s.yaml")


CLASSES = "classes:\n  - {name: paid, share: 1.0, pool: main}\n"


@pytest.mark.parametrize("metric, says", [
    ("llmsim.pools.mian.gpus", "'llmsim.pools.mian.gpus' is not a key of results.json; did you mean "
                               "llmsim.pools.main.gpus?"),
    ("llmsim.classes.free.median_ttft_ms", "'llmsim.classes.free.median_ttft_ms' is not a key of results.json; "
                                           "the scenario's class names are paid"),
    ("llmsim.gateway.classes.paid.rate_limit", "'llmsim.gateway.classes.paid.rate_limit' is a setting repeated as "
                                               "the scenario wrote it, not a figure; name a number inside it"),
], ids=["pool", "class", "setting-as-given"])
def test_a_pool_or_class_the_scenario_lacks_is_refused_as_it_loads(tmp_path, cli, monkeypatch, metric, says):
    """A results key under a pool or class names one of the scenario's: another name was accepted at load
    and refused by check only after its run, which stopped the scenarios after it from being checked."""
    from simulator import runner

    ran = []
    monkeypatch.setattr(runner, "simulate", lambda *a, **k: ran.append(1))
    sc = write_scenario(tmp_path, CLASSES + f"check: {{metrics: [completed, '{metric}']}}\n")
    for args in (("check", sc), ("run", sc, "-o", tmp_path / "out")):
        r = cli(*args)
        assert r.code == 2 and f"check.metrics[1]: {says}" in r.err, r.err
    assert ran == []


def test_a_class_metric_of_a_scenario_without_classes_is_refused(tmp_path, cli):
    sc = write_scenario(tmp_path, "check: {metrics: [llmsim.classes.paid.median_ttft_ms]}\n")
    r = cli("run", sc, "-o", tmp_path / "out")
    assert r.code == 2 and "the scenario has no class names to put there" in r.err, r.err


def test_a_setting_that_holds_a_name_is_refused_as_a_tracked_metric_at_load(tmp_path, cli):
    """speculative.draft_model is a name: tracked against a baseline it passed the load and was refused
    only by check, after its run."""
    from test_sweep import write_tiny_scenario

    path = write_tiny_scenario(tmp_path, check={"metrics": ["llmsim.speculative.draft_model"]})
    for command in ("run", "check"):
        r = cli(command, path)
        assert r.code == 2 and "is text, not a number to hold against a baseline" in r.err, (command, r.err)


def test_a_metric_of_a_block_this_run_does_not_write_says_when_it_is_written(tmp_path, cli):
    """llmsim.gateway is there only when a class is rate limited: the key is spelt right, so the message
    names the condition rather than calling it no key of results.json."""
    sc = write_scenario(tmp_path, CLASSES + "check: {metrics: [completed, llmsim.gateway.classes.paid.requests]}\n")
    r = cli("check", sc)
    assert r.code == 2 and "check.metrics[1]: llmsim.gateway is written only when a class has a rate_limit" in r.err


@pytest.mark.parametrize("edit, says", [
    (('"workload.num_requests": 120', '"workload.num_requests": 60'), 'written at other fast settings (check.set {"workload.num_requests": 60}) than the '
                      'scenario\'s check.set now (check.set {"workload.num_requests": 120})'),
    (('"scenario": "small"', '"scenario": "other"'), "written for the scenario 'other', not 'small'"),
], ids=["other-check-set", "other-scenario"])
def test_a_baseline_of_another_run_is_refused_before_any_run(tmp_path, cli, monkeypatch, scenario, edit, says):
    """A baseline copied from another scenario, or written before the scenario's check.set changed, held
    figures of another run and was compared as this one's: every metric 'regressed' or 'improved'."""
    import simulator.runner as runner

    base = baseline_of(tmp_path, cli, scenario)
    path = base / "small.json"
    path.write_text(path.read_text().replace(*edit))
    before = path.read_text()
    ran = []
    monkeypatch.setattr(runner, "simulate", lambda *a, **k: ran.append(1))
    r = cli("check", scenario, "--baseline", base)
    assert r.code == 2 and f"{path}: " in r.err and says in r.err and "--update-baseline" in r.err, r.err
    assert ran == [] and path.read_text() == before


def test_a_set_the_baseline_was_not_written_with_is_said(tmp_path, cli, scenario):
    """A what-if held against the committed figures (--set at check time) is compared, with a note."""
    base = baseline_of(tmp_path, cli, scenario)
    r = cli("check", scenario, "--baseline", base, "--set", "pools.main.replicas=2")
    said = " ".join(r.out.split())     # the note wraps at the terminal's width
    assert "was written with no --set, this check runs with --set pools.main.replicas=2" in said, r.out


def test_a_baseline_of_figures_alone_is_still_read(tmp_path, cli, scenario):
    """An older llmsim wrote the figures without what they were written for: compared as before, and said so."""
    base = baseline_of(tmp_path, cli, scenario)
    path = base / "small.json"
    path.write_text(json.dumps(json.loads(path.read_text())["metrics"]))
    r = cli("check", scenario, "--baseline", base)
    assert r.code == 0 and "without the scenario and settings" in r.out and "check passed" in r.out, r.out


def test_a_move_past_its_tolerance_and_a_latency_past_its_target_read_past_them():
    """+5.04 % against a 5 % tolerance printed as +5.0 %, and 25.004 ms against a 25 ms target as 25.0:
    a failure line that read as a pass."""
    from simulator.cli.check import _past, _pct, _val

    assert _pct(0.0504, 0.05) == "+5.04%" and _pct(-0.0503, 0.05) == "-5.03%" and _pct(0.06, 0.05) == "+6.0%"
    assert _pct(0.0504) == "+5.0%" and _pct(float("inf"), 0.05) == "from 0"
    assert _past(25.004, 25.0, met=False) == "25.004" and _past(24.99, 25.0, met=True) == "24.99"
    # one value, one spelling: what a baseline stores (six digits) is what every cell shows
    assert _val(7015.5451) == _val(rounded(7015.5451))


def test_an_slo_with_no_samples_says_so(tmp_path, cli):
    """One-token answers have no TPOT: the row read '— ... 100.0% within ... VIOLATED', the line 'simulated — ms'."""
    sc = write_scenario(tmp_path, CHECK)
    r = cli("check", sc, "--set", "workload.output_tokens={dist: uniform, min: 1, max: 1}")
    failures = " ".join(r.out.split("check failed")[1].split())
    assert r.code == 1 and "SLO tpot_p99_ms missed: no samples, target ≤ 100 ms" in failures, r.out
    assert "│ no samples │ — │ VIOLATED" in " ".join(r.out.split())


def test_a_narrow_terminal_folds_metric_names_rather_than_cutting_them(tmp_path, cli, monkeypatch):
    """At 60 columns median_ttft_ms and median_tpot_ms were both cut to median_t…."""
    monkeypatch.setenv("COLUMNS", "60")
    from simulator.cli import output

    monkeypatch.setattr(output.console, "width", 60)
    sc = write_scenario(tmp_path, CHECK)
    r = cli("check", sc)
    assert "…" not in r.out.split("metric")[1].split("verdict")[0]
    names = "".join(line.split("│")[1].strip() for line in r.out.splitlines() if line.count("│") > 2)
    assert "p95_ttft_ms" in names and "median_tpot_ms" in names, r.out


def test_junit_reports_each_scenario_as_a_suite_and_each_row_as_a_case(tmp_path, cli, scenario):
    import xml.etree.ElementTree as ET

    base = baseline_of(tmp_path, cli, scenario)
    report = tmp_path / "reports" / "check.xml"
    r = cli("check", scenario, "--baseline", base, "--set", "pools.main.engine.max_num_batched_tokens=128",
            "--junit", report)
    assert r.code == 1, r.out + r.err
    root = ET.parse(report).getroot()
    suite = root.find("testsuite")
    assert root.tag == "testsuites" and suite.get("name") == "small" and suite.get("file") == str(scenario)
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert {"load", "SLO ttft_p99_ms", "completed", "p95_ttft_ms", "llmsim.cost.usd_per_request"} <= set(cases)
    failed = {n for n, c in cases.items() if c.find("failure") is not None}
    said = [line.split("small: ", 1)[1] for line in r.out.split("check failed")[1].splitlines() if "small: " in line]
    assert failed and int(suite.get("failures")) == len(failed) == len(said)
    assert "p95_ttft_ms regressed" in cases["p95_ttft_ms"].find("failure").get("message")


@pytest.mark.parametrize("where, says", [("folder", "--junit: ") , ("scenario", "--junit")])
def test_a_junit_path_that_cannot_be_written_is_refused_before_any_run(tmp_path, cli, monkeypatch, scenario,
                                                                       where, says):
    import simulator.runner as runner

    ran = []
    monkeypatch.setattr(runner, "simulate", lambda *a, **k: ran.append(1))
    target = tmp_path if where == "folder" else scenario
    before = scenario.read_text()
    r = cli("check", scenario, "--junit", target)
    assert r.code == 2 and says in r.err and "Traceback" not in r.err, r.err
    assert ran == [] and scenario.read_text() == before


def test_confidence_on_an_slo_with_no_samples_is_a_verdict_not_a_traceback(tmp_path, cli):
    sc = write_scenario(tmp_path, CHECK)
    r = cli("check", sc, "--set", "workload.output_tokens={dist: uniform, min: 1, max: 1}", "--confidence", "0.9")
    assert r.code == 1 and "SLO tpot_p99_ms missed: no samples, target ≤ 100 ms" in " ".join(r.out.split()), r.out + r.err


@pytest.mark.parametrize("edit, key", [
    (lambda d: d["settings"].update({"--set": 5}), "settings.--set"),
    (lambda d: d["settings"].update({"--set": "pools.main.replicas=2"}), "settings.--set"),
    (lambda d: d["settings"].pop("--set"), "settings"),
    (lambda d: d["settings"].update({"extra": 1}), "settings"),
    (lambda d: d.pop("scenario"), "scenario"),
], ids=["number", "text", "missing", "extra", "no-scenario"])
def test_a_baselines_record_of_its_run_is_checked(tmp_path, cli, scenario, edit, key):
    """A hand-edited settings block ended in a traceback, was read character by character, or said
    'written with no --set, this check runs with no --set'; a missing scenario read 'the scenario None'."""
    base = baseline_of(tmp_path, cli, scenario)
    path = base / "small.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    r = cli("check", scenario, "--baseline", base)
    assert r.code == 2 and f"{path}: {key}: " in r.err and "Traceback" not in r.err, r.err


def test_a_baseline_path_that_is_a_folder_is_refused_before_any_run(tmp_path, cli, monkeypatch, scenario):
    import simulator.runner as runner

    ran = []
    monkeypatch.setattr(runner, "simulate", lambda *a, **k: ran.append(1))
    (tmp_path / "b" / "small.json").mkdir(parents=True)
    for extra in ((), ("--update-baseline",)):
        r = cli("check", scenario, "--baseline", tmp_path / "b", *extra)
        assert r.code == 2 and "small.json: is not a file" in r.err, r.err
    assert ran == []


def test_an_index_on_a_figure_is_refused_as_the_scenario_loads(tmp_path, cli):
    sc = write_scenario(tmp_path, "check: {metrics: [p99_ttft_ms.0]}\n")
    r = cli("run", sc, "-o", tmp_path / "out")
    assert r.code == 2 and "'p99_ttft_ms.0' indexes 'p99_ttft_ms', which is a figure, not a list" in r.err


def test_a_scenario_given_twice_is_said_so(tmp_path, cli, scenario):
    r = cli("check", scenario, scenario)
    assert r.code == 2 and f"{scenario}: is given twice; list each scenario once" in r.err, r.err


def test_the_load_row_says_cannot_tell_as_run_does_and_fails(tmp_path, cli):
    """30 requests that all outlast their 0.5 s window: run reads the load as "cannot tell", and
    check's row read "keeps up" beside "completed 0 req/s", then passed the fleet. Run's exit code,
    which its help called check's rule, still passed it (exit 0) once check failed it."""
    sc = write_scenario(tmp_path, CHECK.replace("num_requests: 120", "num_requests: 30"))
    sets = ("--set", "workload.num_requests=30", "--set", "workload.arrival.rate_per_s=60",
            "--set", "workload.output_tokens={dist: uniform, min: 400, max: 500}")
    r = cli("check", sc, *sets[2:])
    row = next(line for line in r.out.splitlines() if line.strip("│ ").startswith("load"))
    assert "completed 0 of" in row and row.rstrip(" │").endswith("cannot tell"), row
    # and a gate does not pass a fleet it did not judge: it passed, exit 0, on "cannot tell"
    said = " ".join(r.out.split())
    assert r.code == 1 and "check failed" in said, said
    assert "load cannot tell: no request finished within the arrival window" in said, said
    assert "a fleet whose load could not be judged does not pass (the scenario's check.set and --set " \
           "size the window the check runs)" in said, said
    ran = cli("run", sc, *sets)
    assert ran.code == 1 and "exit 1: load cannot tell: no request finished" in " ".join(ran.err.split()), ran.err
    assert cli("run", sc, *sets, "--exit-zero").code == 0


def test_a_fleet_keeping_up_on_a_short_window_passes_and_its_load_row_says_so(tmp_path, cli):
    """Requests of 200 to 1,000 tokens over a 10 s window, most still running at its end, some finished:
    the fleet was judged, so check and run pass it, but check's row read a bare "keeps up", hiding what
    the verdict says of it."""
    sc = write_scenario(tmp_path, CHECK)
    sets = ("--set", "pools.main.engine.max_num_seqs=256",
            "--set", "workload.output_tokens={dist: uniform, min: 200, max: 1000}")
    r = cli("check", sc, *sets)
    lines = r.out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip("│ ").startswith("load"))
    # the row's last cell, over the lines a narrow terminal wraps it onto
    rest = [line.split("│") for line in lines[at + 1:]]
    wrapped = [cells for cells in rest[:next((i for i, c in enumerate(rest) if len(c) < 3 or c[1].strip()), None)]]
    outcome = " ".join(c[-2].strip() for c in [lines[at].split("│"), *wrapped])
    assert outcome == "keeps up, on a short window", lines[at:at + 3]
    assert r.code == 0, r.out
    assert cli("run", sc, *sets).code == 0


def test_the_load_row_says_why_requests_went_unanswered():
    """Autocomplete on A100s: check's row read "completed 26.52 of 437.9 req/s" beside "keeps up", a
    contradiction to whoever reads the gate, where 92.5 % of the requests were cancelled by their clients
    (only the JUnit text, the load verdict, said so). The row names each cause with its share."""
    from pathlib import Path

    from rich.console import Console
    from rich.table import Table

    from simulator.cli.check import _Job, _load_row

    zero = {k: 0 for k in ("shed", "too_long", "never_fit", "rate_limited", "cancelled")}
    load = {"overloaded": False, "window_s": 120.0, "offered_rps": 437.9, "completed_rps": 26.52,
            "queued_at_mid": 7, "queued_at_end": 7, "running_at_end": 77, "unfinished": 0,
            **zero, **{f"{k}_fraction": 0.0 for k in zero}, "cancelled": 55_347, "cancelled_fraction": 0.925,
            "verdict": "keeps up: ..."}

    def row(block: dict) -> str:
        t = Table()
        for _ in range(5):
            t.add_column()
        _load_row({"llmsim": {"load": block}}, t, _Job(Path("s.yaml"), None, None, None, None, False))
        console = Console(width=300, record=True)
        console.print(t)
        return " ".join(console.export_text().split())

    assert "completed 26.52 of 437.9 req/s (55,347 requests (92.5 %) cancelled by their clients)" in row(load)
    assert "completed 26.52 of 437.9 req/s │" in row({**load, "cancelled": 0, "cancelled_fraction": 0.0})
