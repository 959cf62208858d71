"""Bad baselines for `llmsim check` and bad results files for `llmsim compare`.

A CI gate that passes on a useless baseline (``{}``, typo'd keys) gates
nothing, and a results figure that is not a number would show in a diff as a
change "without a direction". Each is bad input: exit 2, one line naming the
file and the key, before any scenario runs.
"""
from __future__ import annotations

import copy
import json

import pytest

from helpers_whatif import NAME, write_scenario
from simulator.cli.check import baseline_file_name

CHECK = """\
check:
  set: {workload.num_requests: 60}
  metrics: [completed, p99_ttft_ms, llmsim.cost.usd_per_request]
"""


def _refused(r, *fragments: str) -> None:
    assert r.code == 2, r.out + r.err
    assert "Traceback" not in r.err and len(r.err.strip().splitlines()) == 1, r.err
    for f in fragments:
        assert f in r.err, (f, r.err)


# --- llmsim check: the baseline ---------------------------------------------------


@pytest.fixture
def scenario(tmp_path):
    return write_scenario(tmp_path / "scenarios", CHECK)


def _baseline(tmp_path, text: str):
    folder = tmp_path / "baselines"
    folder.mkdir(exist_ok=True)
    path = folder / baseline_file_name(NAME)
    path.write_text(text)
    return folder, path


@pytest.mark.parametrize("text, fragments", [
    ("{}", ["names none of the metrics", "completed, p99_ttft_ms, llmsim.cost.usd_per_request"]),
    ('{"p99_ttft_msx": 1.0, "foo": 3}', ["p99_ttft_msx: not a metric this scenario tracks", "foo",
                                         "did you mean p99_ttft_ms?", "completed, p99_ttft_ms"]),
    ('{"completed": 60, "p99_ttft_ms": 10.0, "p50_ttft_ms": 5.0}', ["p50_ttft_ms: not a metric"]),
    ('{"llmsim": {"cost": {"usd_per_request": 0.001}}}', ["llmsim: not a metric", "dotted keys"]),
    ('{"completed": 60, "p99_ttft_ms": "abc"}', ["p99_ttft_ms: expected a number or null", "'abc'"]),
    ('{"completed": 60, "p99_ttft_ms": NaN}', ["p99_ttft_ms: expected a finite number or null"]),
    ('[{"completed": 60}]', ["expected a JSON object (a baseline), got list"]),
], ids=["empty", "typos", "a-stray-key", "nested", "string", "nan", "list"])
def test_a_useless_or_broken_baseline_is_refused(tmp_path, cli, monkeypatch, scenario, text, fragments):
    import simulator.runner as runner

    ran = []
    monkeypatch.setattr(runner, "simulate", lambda *a, **k: ran.append(1))
    folder, path = _baseline(tmp_path, text)
    _refused(cli("check", scenario, "--baseline", folder), str(path), *fragments)
    assert ran == [] and path.read_text() == text      # refused before any run, nothing written


def test_a_correct_baseline_passes_and_a_newly_tracked_metric_is_new(tmp_path, cli, scenario):
    folder = tmp_path / "baselines"
    assert cli("check", scenario, "--baseline", folder, "--update-baseline").code == 0
    path = folder / baseline_file_name(NAME)
    written = json.loads(path.read_text())
    assert list(written["metrics"]) == ["completed", "p99_ttft_ms", "llmsim.cost.usd_per_request"]
    r = cli("check", scenario, "--baseline", folder)
    assert r.code == 0 and "check passed" in r.out, r.out + r.err
    del written["metrics"]["completed"]     # a metric added to check.metrics after the baseline was written
    path.write_text(json.dumps(written))
    r = cli("check", scenario, "--baseline", folder)
    assert r.code == 0 and "new: not in" in r.out, r.out + r.err      # the cell wraps at 80 columns


def test_update_baseline_replaces_a_refused_baseline(tmp_path, cli, scenario):
    """The messages say "rewrite it with --update-baseline": that must work."""
    folder, path = _baseline(tmp_path, '{"p99_ttft_msx": "abc"}')
    r = cli("check", scenario, "--baseline", folder, "--update-baseline")
    assert r.code == 0, r.out + r.err
    assert "replacing" in r.out and "p99_ttft_msx" in r.out
    assert list(json.loads(path.read_text())["metrics"]) == ["completed", "p99_ttft_ms", "llmsim.cost.usd_per_request"]
    assert cli("check", scenario, "--baseline", folder).code == 0


# --- llmsim compare: the results files ----------------------------------------------

RESULTS = {
    "completed": 100, "failed": 0, "request_throughput": 10.0, "p99_ttft_ms": 200.0, "median_tpot_ms": None,
    "slo": {"met": True, "targets": {"ttft_p99_ms": {"target_ms": 500.0, "measured_ms": 200.0, "met": True}},
            "goodput": {"attainment": {}}},
    "llmsim": {"gpus": 2, "note": "text is fine where no direction is read", "classes": {}},
}


def _with(path: str, value):
    out = copy.deepcopy(RESULTS)
    *parents, leaf = path.split(".")
    node = out
    for p in parents:
        node = node[p]
    node[leaf] = value
    return out


@pytest.mark.parametrize("key, value, fragment", [
    ("p99_ttft_ms", "abc", "expected a finite number or null (a figure), got 'abc'"),
    ("p99_ttft_ms", "200.0", "got '200.0'"),
    ("p99_ttft_ms", True, "got True"),
    ("llmsim.gpus", "2", "got '2'"),
    ("slo.met", "yes", "expected true, false or null (a verdict)"),
    ("slo.targets.ttft_p99_ms.met", 1.5e400, "expected a finite number or null"),
], ids=["string", "numeric-string", "bool", "nested-string", "verdict-string", "inf"])
def test_a_figure_that_is_not_a_number_is_refused(tmp_path, cli, key, value, fragment):
    good, bad = tmp_path / "a.json", tmp_path / "b.json"
    good.write_text(json.dumps(RESULTS))
    bad.write_text(json.dumps(_with(key, value)))
    for args in ((good, bad), (bad, good), (good, bad, "--json")):
        _refused(cli("compare", *args), f"{bad}: {key}: ", fragment)


def test_good_results_still_compare(tmp_path, cli):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(RESULTS))
    b.write_text(json.dumps(_with("p99_ttft_ms", 250.0)))
    rows = {c["key"]: c for c in cli("compare", a, b, "--json").json()["changes"]}
    assert rows["p99_ttft_ms"]["worse"] is True


def test_no_traceback_in_a_real_process(tmp_path, cli_subprocess):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(RESULTS))
    b.write_text(json.dumps(_with("p99_ttft_ms", "abc")))
    _refused(cli_subprocess("compare", a, b), f"{b}: p99_ttft_ms: ")


def test_a_boolean_baseline_figure_is_refused(tmp_path, cli, scenario):
    """true is not a figure (Python reads it as 1): refused as text is, not compared as a regression."""
    folder = tmp_path / "baselines"
    folder.mkdir()
    (folder / baseline_file_name(NAME)).write_text(json.dumps({"p99_ttft_ms": True}))
    r = cli("check", scenario, "--baseline", folder)
    assert r.code == 2 and "p99_ttft_ms" in r.err and "expected a number or null" in r.err


# --- llmsim compare: run folders, their scenario.yaml, --min-change ---------------------


def _folder(tmp_path, name: str, scenario: str | None = None):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps(RESULTS))
    if scenario is not None:
        (folder / "scenario.yaml").write_text(scenario)
    return folder


def test_a_folder_without_results_is_refused(tmp_path, cli):
    good = _folder(tmp_path, "good")
    empty = tmp_path / "empty"
    empty.mkdir()
    for args in ((good, empty), (empty, good)):
        _refused(cli("compare", *args), f"{empty}: a folder without results.json",
                 "expected a run folder (`llmsim run -o DIR`) or a results.json file")
    ladder = tmp_path / "ladder"
    ladder.mkdir()
    (ladder / "ladder.json").write_text("{}")
    _refused(cli("compare", good, ladder), f"{ladder}: a folder without results.json (a ladder's folder: name one "
                                           "of its steps' folders)")


@pytest.mark.parametrize("kind, files", [("plan", ("plan.json", "pareto.png", "report.html")),
                                         ("sweep", ("sweep.csv", "report.html"))])
def test_a_plans_or_sweeps_folder_is_said_to_be_one(tmp_path, cli, kind, files):
    """It read "a folder without results.json", as if a run had failed to write one: the folder is a plan's
    (or a sweep's), whose files hold a row per fleet, and two runs of its fleets are what compare takes."""
    good = _folder(tmp_path, "good")
    folder = tmp_path / kind
    (folder / "points").mkdir(parents=True)
    for name in files:
        (folder / name).write_text("{}")
    _refused(cli("compare", good, folder),
             f"{folder}: a {kind}'s folder (it holds {', '.join(files)}, points/: a row of figures for each fleet "
             f"the {kind} simulated, no run's results.json); compare takes two runs: run the fleets to compare, "
             f"each with its overrides from {files[0]} (`llmsim run SCENARIO --set KEY=VALUE -o DIR`)")
    # the file the folder is known by, named itself, read "not a results file: no 'completed' key"
    _refused(cli("compare", folder / files[0], good),
             f"{folder / files[0]}: a {kind}'s {files[0]} (a row of figures for each fleet the {kind} simulated, "
             f"no run's results); compare takes two runs")


def test_a_ladders_table_is_said_to_be_one(tmp_path, cli):
    good = _folder(tmp_path, "good")
    (tmp_path / "ladder").mkdir()
    (tmp_path / "ladder" / "ladder.json").write_text("{}")
    _refused(cli("compare", good, tmp_path / "ladder" / "ladder.json"),
             f"{tmp_path / 'ladder' / 'ladder.json'}: a ladder's ladder.json (its steps' table); name one of its "
             "steps' folders or their results.json")
    # any other JSON file without a count of requests is refused as before
    other = tmp_path / "other.json"
    other.write_text("{}")
    _refused(cli("compare", good, other), f"{other}: not a results file: no 'completed' key")


@pytest.mark.parametrize("text, fragment", [
    ("name: [unclosed\n", "invalid YAML at line"),
    ("- a\n- b\n", "expected the scenario as run (a mapping of scenario keys, as `llmsim run -o` writes it), got list"),
], ids=["invalid", "a-list"])
def test_a_broken_scenario_yaml_beside_the_results_is_refused(tmp_path, cli, text, fragment):
    """It would say which inputs differ: read wrong, it would say so wrongly."""
    good = _folder(tmp_path, "good", "name: small\n")
    bad = _folder(tmp_path, "bad", text)
    for args in ((good, bad), (bad / "results.json", good), (good, bad, "--json")):
        _refused(cli("compare", *args), f"{bad / 'scenario.yaml'}: ", fragment)


@pytest.mark.parametrize("value", ["inf", "-1", "nan", "lots"])
def test_a_min_change_that_is_not_a_percentage_is_refused(tmp_path, cli, value):
    a = _folder(tmp_path, "a")
    r = cli("compare", a, a, "--min-change", value)
    assert r.code == 2 and "Traceback" not in r.err and "--min-change" in r.err, r.err
