"""`llmsim compare A B` and the flattening and direction rules under it
(every declared key's direction: tests/test_compare_directions.py)."""
from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers_whatif import write_scenario
from simulator.cli.app import results_fields
from simulator.fields import declare_results
from simulator.report.diff import change, diff, flatten, worse_direction

RESULTS = {
    "completed": 100, "failed": 0, "request_throughput": 10.0, "p99_ttft_ms": 200.0, "median_tpot_ms": 8.0,
    "total_input_tokens": 5000,
    "slo": {"met": True, "targets": {"ttft_p99_ms": {"metric": "ttft", "target_ms": 500.0, "measured_ms": 200.0,
                                                      "attainment": 1.0, "met": True}},
            "goodput": {"thresholds_ms": {"ttft": 500.0}, "attainment": {"ttft": 1.0}}},
    "llmsim": {"gpus": 2, "wall_time_s": 0.5, "cost": {"monthly_usd": 4000.0, "window_s": 10.0,
                                                       "pools": [{"name": "chat", "usd": 1.0}, {"name": "code", "usd": 2.0}]}},
}


@pytest.fixture(autouse=True)
def declared():
    """Directions come from results.json's declarations, which the command line names."""
    declare_results(results_fields)


def write(tmp_path, name, obj):
    p = tmp_path / name
    p.write_text(json.dumps(obj))
    return p


def test_flatten_keys_named_items_by_name_and_others_by_index():
    flat = flatten({"a": {"b": 1}, "pools": [{"name": "x", "n": 2}], "xs": [3, 4], "empty": {}})
    assert flat == {"a.b": 1, "pools.x.n": 2, "xs.0": 3, "xs.1": 4, "empty": {}}


@pytest.mark.parametrize("key, direction", [
    ("p99_ttft_ms", 1), ("slo.targets.ttft_p99_ms.measured_ms", 1), ("llmsim.cost.monthly_usd", 1),
    ("llmsim.cost.pools.chat.usd", 1), ("failed", 1), ("llmsim.request_status.rejected", 1), ("llmsim.gpus", 1),
    ("llmsim.mean_queue_depth", 1), ("completed", -1), ("request_throughput", -1), ("request_goodput", -1),
    ("slo.met", -1), ("slo.goodput.attainment.ttft", -1), ("llmsim.prefix_cache.token_hit_rate", -1),
    ("slo.targets.ttft_p99_ms.target_ms", 0), ("slo.goodput.thresholds_ms.ttft", 0), ("total_input_tokens", 0),
    ("llmsim.cost.window_s", 0), ("llmsim.seed", 0), ("duration", 0),
    # power is worse up; sessions and requests per GPU are worse down; prices given are inputs
    ("llmsim.energy.pools.chat.busy_w_per_gpu", 1), ("llmsim.energy.pools.chat.mean_w_per_gpu", 1),
    ("llmsim.energy.co2e_kg_per_month", 1), ("llmsim.cost.sessions_per_gpu_mean", -1),
    ("llmsim.cost.requests_per_gpu_second", -1), ("llmsim.cost.api.prices.input_usd_per_million", 0),
    ("llmsim.cost.power.usd_per_kwh", 0), ("llmsim.cost.pools.chat.usd_per_gpu_hour", 0),
    ("llmsim.load.overloaded", 1), ("llmsim.replicates.slo_targets_met.ttft_p99_ms", -1),
])
def test_which_way_is_worse(key, direction):
    assert worse_direction(key) == direction


def test_diff_marks_bad_moves_and_hides_noise():
    b = copy.deepcopy(RESULTS)
    b["p99_ttft_ms"] = 300.0                          # worse
    b["request_throughput"] = 12.0                    # better
    b["total_input_tokens"] = 6000                    # no direction
    b["slo"]["met"] = False                           # worse
    b["llmsim"]["wall_time_s"] = 9.0                  # noise: hidden
    b["llmsim"]["cost"]["monthly_usd"] = 4000.0 * (1 + 1e-13)   # float noise: not a change
    b["llmsim"]["cost"]["pools"][1]["usd"] = 3.0      # worse
    changes = {c.key: c for c in diff(RESULTS, b)}
    assert set(changes) == {"p99_ttft_ms", "request_throughput", "total_input_tokens", "slo.met",
                            "llmsim.cost.pools.code.usd"}
    assert changes["p99_ttft_ms"].worse is True and changes["p99_ttft_ms"].rel == pytest.approx(0.5)
    assert changes["p99_ttft_ms"].delta == pytest.approx(100.0)
    assert changes["request_throughput"].worse is False
    assert changes["total_input_tokens"].worse is None
    assert changes["slo.met"].worse is True
    every = {c.key for c in diff(RESULTS, b, include_unchanged=True)}
    assert {"llmsim.wall_time_s", "completed", "llmsim.cost.monthly_usd"} <= every


def test_a_vanished_measurement_is_worse():
    b = dict(RESULTS, p99_ttft_ms=None)
    [c] = diff(RESULTS, b)
    assert c.key == "p99_ttft_ms" and c.worse is True and c.delta is None


def test_compare_json_from_the_command_line(tmp_path, cli):
    b = copy.deepcopy(RESULTS)
    b["p99_ttft_ms"] = 250.0
    b["llmsim"]["gpus"] = 1
    out = cli("compare", write(tmp_path, "a.json", RESULTS), write(tmp_path, "b.json", b), "--json").json()
    rows = {c["key"]: c for c in out["changes"]}
    assert set(rows) == {"p99_ttft_ms", "llmsim.gpus"}
    assert rows["p99_ttft_ms"] == {"key": "p99_ttft_ms", "a": 200.0, "b": 250.0, "delta": 50.0, "rel": 0.25,
                                   "worse": True}
    assert rows["llmsim.gpus"]["worse"] is False and rows["llmsim.gpus"]["rel"] == -0.5
    every = cli("compare", tmp_path / "a.json", tmp_path / "b.json", "--json", "--all").json()
    assert len(every["changes"]) == len(flatten(RESULTS))


def test_compare_table_of_two_real_runs(tmp_path, cli, monkeypatch):
    from simulator.cli.output import console

    monkeypatch.setattr(console, "width", 160)     # wide enough that no key wraps
    sc = write_scenario(tmp_path)
    assert cli("run", sc, "-o", tmp_path / "one", "--no-plots").code == 0
    assert cli("run", sc, "-o", tmp_path / "two", "--no-plots", "--set", "pools.main.replicas=2").code == 0
    r = cli("compare", tmp_path / "one" / "results.json", tmp_path / "two" / "results.json")
    assert r.code == 0, r.err
    # the folders name the same results; their scenario.yaml files say what was changed, before the figures
    assert cli("compare", tmp_path / "one", tmp_path / "two").out == r.out
    assert r.out.startswith("inputs that differ (scenario.yaml, A → B): 1\n  pools.main.replicas: 1 → 2\n")
    assert "warning" not in r.err
    lines = {line.split("│")[1].strip(): line for line in r.out.splitlines() if line.count("│") > 4}
    assert "worse" in lines["llmsim.cost.monthly_usd"] and "+100.0%" in lines["llmsim.cost.monthly_usd"]
    assert "better" in lines["median_ttft_ms"]
    # the headline first, the rest counted; --all lists them
    keys = list(lines)
    assert keys.index("llmsim.cost.monthly_usd") < keys.index("llmsim.gpus") < keys.index("median_ttft_ms")
    assert "mean_ttft_ms" not in lines and "--all lists them" in r.out
    assert "llmsim.wall_time_s" not in lines
    assert "keys differ" in r.out
    every = cli("compare", tmp_path / "one" / "results.json", tmp_path / "two" / "results.json", "--all")
    rows = {line.split("│")[1].strip(): line for line in every.out.splitlines() if line.count("│") > 4}
    assert "better" in rows["mean_ttft_ms"]
    assert not [k for k in rows if k.startswith("llmsim.cost.gpu_timeline.")]   # one row for the series
    same = cli("compare", tmp_path / "one" / "results.json", tmp_path / "one" / "results.json")
    assert same.code == 0 and "no differences" in same.out


@pytest.mark.parametrize("content, fragment", [
    (None, "file not found"),
    ("{not json", "invalid JSON at line 1"),
    ("[1, 2]", "expected a JSON object"),
])
def test_bad_files_are_one_clear_error(tmp_path, cli, content, fragment):
    good = write(tmp_path, "a.json", RESULTS)
    bad = tmp_path / "b.json"
    if content is not None:
        bad.write_text(content)
    for args in ((good, bad), (bad, good)):
        r = cli("compare", *args)
        assert r.code == 2 and "Traceback" not in r.err
        assert fragment in r.err and str(bad) in r.err


def test_a_figure_that_is_a_list_or_an_object_in_one_file_is_shown_as_such(tmp_path, cli, monkeypatch):
    """Not as a figure gone missing (worse, for a latency): the other file holds a list or an object
    there, and that is what the row says. Keys results.json does not declare (another tool's); a
    declared figure held as a list is refused (tests/test_compare_mismatched_files.py)."""
    from simulator.cli.output import console

    monkeypatch.setattr(console, "width", 160)     # wide enough that no row wraps
    a = {**copy.deepcopy(RESULTS), "vendor_ttft_ms": 200.0, "vendor_tokens": 5000, "vendor_tpot_ms": 20.0}
    b = copy.deepcopy(a)
    b["vendor_ttft_ms"] = [190.0, 210.0]
    b["vendor_tokens"] = {"lo": 4000, "hi": 6000}
    b["vendor_tpot_ms"] = []
    a_file, b_file = write(tmp_path, "a.json", a), write(tmp_path, "b.json", b)
    rows = {c["key"]: c for c in cli("compare", a_file, b_file, "--json").json()["changes"]}
    assert rows["vendor_ttft_ms"] == {"key": "vendor_ttft_ms", "a": 200.0, "b": [190.0, 210.0], "delta": None,
                                      "rel": None, "worse": None}
    assert rows["vendor_tokens"]["b"] == {"lo": 4000, "hi": 6000} and rows["vendor_tpot_ms"]["b"] == []
    r = cli("compare", a_file, b_file, "--all")
    assert r.code == 0, r.err
    table = {line.split("│")[1].strip(): line for line in r.out.splitlines() if line.count("│") > 4}
    assert "list of 2" in table["vendor_ttft_ms"] and "not a number" in table["vendor_ttft_ms"]
    assert "worse" not in table["vendor_ttft_ms"] and "—" not in table["vendor_ttft_ms"].split("│")[3]
    assert "2-key object" in table["vendor_tokens"] and "empty list" in table["vendor_tpot_ms"]
    assert "not compared" in r.out and "0 worse" in r.out


def test_lists_a_real_results_file_holds_compare_as_lists(tmp_path, cli):
    """error_model's widened is a list of names, empty in one run and not in another."""
    a, b = copy.deepcopy(RESULTS), copy.deepcopy(RESULTS)
    a["llmsim"]["error_model"] = {"metrics": {"ttft": {"residuals": 10, "widened": []}}}
    b["llmsim"]["error_model"] = {"metrics": {"ttft": {"residuals": 10, "widened": ["isl"]}}}
    out = cli("compare", write(tmp_path, "a.json", a), write(tmp_path, "b.json", b), "--json").json()
    rows = {c["key"]: c for c in out["changes"]}
    key = "llmsim.error_model.metrics.ttft.widened"
    assert rows[key]["a"] == [] and rows[key]["b"] == ["isl"] and rows[f"{key}.0"]["b"] == "isl"


# --- noise: a move that shows as 0.0 % ------------------------------------------------


def _nudged():
    """RESULTS with moves too small to show at one decimal, and one that shows."""
    b = copy.deepcopy(RESULTS)
    b["p99_ttft_ms"] = 200.06                 # +0.03 %
    b["request_throughput"] = 9.996           # -0.04 %
    b["completed"] = 101                      # +1 %
    return b


def _rows(out: str) -> dict[str, str]:
    return {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") > 4}


def test_a_move_that_shows_as_zero_is_not_called_worse(tmp_path, cli, monkeypatch):
    from simulator.cli.output import console

    monkeypatch.setattr(console, "width", 160)
    a_file, b_file = write(tmp_path, "a.json", RESULTS), write(tmp_path, "b.json", _nudged())
    r = cli("compare", a_file, b_file, "--all")
    assert r.code == 0, r.err
    rows = _rows(r.out)
    assert "worse" not in rows["p99_ttft_ms"] and "better" not in rows["request_throughput"]
    assert rows["p99_ttft_ms"].split("│")[5].strip() == "0.0%"
    assert "+1.0% better" in rows["completed"]
    assert "-0.0%" not in r.out and "+0.0%" not in r.out
    assert "1 keys differ: 0 worse, 1 better" in r.out
    assert "2 key(s) moved by less than 0.05% and count as unchanged (--min-change)" in r.out
    out = cli("compare", a_file, b_file, "--json").json()
    assert [c["key"] for c in out["changes"]] == ["completed"] and out["min_change_pct"] == 0.05


def test_min_change_sets_the_threshold(tmp_path, cli, monkeypatch):
    from simulator.cli.output import console

    monkeypatch.setattr(console, "width", 160)
    a_file, b_file = write(tmp_path, "a.json", RESULTS), write(tmp_path, "b.json", _nudged())
    every = cli("compare", a_file, b_file, "--min-change", "0")
    rows = _rows(every.out)
    assert "+0.03% worse" in rows["p99_ttft_ms"] and "-0.04% worse" in rows["request_throughput"]
    assert "3 keys differ: 2 worse, 1 better" in every.out and "count as unchanged" not in every.out
    coarse = cli("compare", a_file, b_file, "--min-change", "5", "--json").json()
    assert coarse["changes"] == [] and coarse["min_change_pct"] == 5
    r = cli("compare", a_file, b_file, "--min-change", "5")
    assert r.code == 0 and "no differences" in r.out and "3 key(s) moved by less than 5%" in r.out


@settings(max_examples=300, deadline=None)
@given(a=st.floats(1e-6, 1e9), factor=st.floats(0.5, 2.0),
       min_change=st.sampled_from([0.0, 0.0005, 0.01]), key=st.sampled_from(["p99_ttft_ms", "request_throughput"]))
def test_a_marked_move_always_shows_as_one(a, factor, min_change, key):
    """Never "-0.0% worse": a move marked worse or better is at least the
    threshold, and its change column shows digits that are not zero."""
    from simulator.cli.compare import _rel

    c = change(key, a, a * factor, min_change)
    shown = _rel(c)
    assert shown not in ("+0.0%", "-0.0%")
    if c.worse is not None:
        assert c.changed and abs(c.rel) >= min_change
        assert shown != "0.0%" and (c.worse == (c.delta > 0)) == (key == "p99_ttft_ms")
    if shown == "0.0%":
        assert c.worse is None


# --- run folders, scenarios and their inputs ------------------------------------------


def _run_folder(tmp_path, name: str, results: dict, scenario: str | None = None):
    folder = tmp_path / name
    folder.mkdir()
    write(folder, "results.json", results)
    if scenario is not None:
        (folder / "scenario.yaml").write_text(scenario)
    return folder


SCENARIO_AS_RUN = """\
# the scenario as run: small
name: small
seed: 3
workload: {num_requests: 300}
pools:
- name: main
  model: llama-3-8b
  replicas: 1
  engine: {kv_dtype: fp8}
"""


def test_a_run_folder_is_compared_as_its_results_json(tmp_path, cli):
    b = copy.deepcopy(RESULTS)
    b["p99_ttft_ms"] = 250.0
    one = _run_folder(tmp_path, "one", RESULTS)
    two = _run_folder(tmp_path, "two", b)
    by_folder = cli("compare", one, two, "--json").json()
    by_file = cli("compare", one / "results.json", two / "results.json", "--json").json()
    assert by_folder == by_file and by_folder["b"] == str(two / "results.json")
    assert by_folder["inputs"] is None          # neither folder holds scenario.yaml
    mixed = cli("compare", one, two / "results.json")
    assert mixed.code == 0 and "inputs" not in mixed.out


def test_the_inputs_that_differ_come_before_the_figures(tmp_path, cli):
    b = copy.deepcopy(RESULTS)
    b["p99_ttft_ms"] = 250.0
    changed = SCENARIO_AS_RUN.replace("replicas: 1", "replicas: 2").replace("  engine: {kv_dtype: fp8}\n", "")
    one = _run_folder(tmp_path, "one", RESULTS, SCENARIO_AS_RUN)
    two = _run_folder(tmp_path, "two", b, changed.replace("seed: 3", "seed: 3\ndescription: '[red]x'"))
    r = cli("compare", one, two)
    assert r.code == 0, r.err
    assert r.out.splitlines()[:4] == ["inputs that differ (scenario.yaml, A → B): 3",
                                      "  pools.main.replicas: 1 → 2",
                                      "  pools.main.engine.kv_dtype: fp8 → not set",
                                      "  description: not set → [red]x"]      # text, not markup
    assert r.out.index("inputs that differ") < r.out.index("headline")
    out = cli("compare", one, two, "--json").json()
    assert {"key": "pools.main.replicas", "a": 1, "b": 2} in out["inputs"]
    same = cli("compare", one, _run_folder(tmp_path, "three", b, SCENARIO_AS_RUN))
    assert same.out.startswith("inputs: A's and B's scenario.yaml are the same\n")
    assert cli("compare", one, one, "--json").json()["inputs"] == []


@pytest.mark.parametrize("names, warned", [(("assistant", "chatbot"), True), (("chatbot", "chatbot"), False),
                                           (("chatbot", None), False)])
def test_runs_of_different_scenarios_are_named_in_a_warning(tmp_path, cli, names, warned):
    files = []
    for i, name in enumerate(names):
        r = copy.deepcopy(RESULTS)
        if name is None:
            del r["llmsim"]        # a vllm bench serve result records no scenario
        else:
            r["llmsim"]["scenario"] = name
        files.append(write(tmp_path, f"{i}.json", r))
    r = cli("compare", *files)
    assert r.code == 0, r.err
    if warned:
        assert r.err.strip().splitlines() == ["warning: A is a run of scenario 'assistant' and B of 'chatbot': the "
                                              "figures below compare two workloads, not one change"]
    else:
        assert r.err == ""
    out = cli("compare", *files, "--json").json()
    assert out["scenarios"] == {"a": names[0], "b": names[1]} and bool(out["warnings"]) == warned


def test_the_audits_falling_power_draw_is_better(tmp_path, cli):
    a, b = copy.deepcopy(RESULTS), copy.deepcopy(RESULTS)
    a["llmsim"]["energy"] = {"pools": {"chat": {"busy_w_per_gpu": 693.5, "idle_w": 70.0}}}
    b["llmsim"]["energy"] = {"pools": {"chat": {"busy_w_per_gpu": 673.3, "idle_w": 60.0}}}
    rows = {c["key"]: c for c in cli("compare", write(tmp_path, "a.json", a), write(tmp_path, "b.json", b),
                                     "--json").json()["changes"]}
    assert rows["llmsim.energy.pools.chat.busy_w_per_gpu"]["worse"] is False
    assert rows["llmsim.energy.pools.chat.idle_w"]["worse"] is None       # the GPU profile's, an input


def test_a_verdict_turns_rather_than_moving_by_minus_one(tmp_path, cli, monkeypatch):
    """slo.met true → false read "B − A = -1, -100.0% worse"; 0 → 0 read "—" where 1 → 1 read "0.0%"."""
    from simulator.cli.output import console

    monkeypatch.setattr(console, "width", 160)
    b = copy.deepcopy(RESULTS)
    b["slo"]["met"] = False
    a_file, b_file = write(tmp_path, "a.json", RESULTS), write(tmp_path, "b.json", b)
    rows = _rows(cli("compare", a_file, b_file).out)
    cells = [c.strip() for c in rows["slo.met"].split("│")[1:6]]
    assert cells == ["slo.met", "true", "false", "—", "worse"], cells
    assert rows["failed"].split("│")[5].strip() == "0.0%"
    assert [c.strip() for c in rows["slo.targets.ttft_p99_ms.met"].split("│")[4:6]] == ["—", "same"]
    met = [c for c in cli("compare", a_file, b_file, "--json").json()["changes"] if c["key"] == "slo.met"]
    assert met == [{"key": "slo.met", "a": True, "b": False, "delta": None, "rel": None, "worse": True}]


def test_a_block_that_is_null_in_one_file_holds_nothing_there():
    """chatbot against dau-10m read `llmsim.classes.free.slo.met true → — worse`: dau-10m has no classes
    (`llmsim.classes` null), so free's verdict is only in A, not a verdict that vanished."""
    a = {"llmsim": {"classes": {"free": {"slo": {"met": True}}}}}
    b = {"llmsim": {"classes": None}}
    changes = {c.key: c for c in diff(a, b)}
    c = changes["llmsim.classes.free.slo.met"]
    assert c.only_in == "a" and c.worse is None
