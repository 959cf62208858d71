"""A fault in the trace a plan or sweep replays is refused up front, as ``llmsim run`` refuses it.

Compiling a scenario does not read its trace, so a negative length, a
cell that is not a number, a class the scenario does not declare or a
trace past the run-size limits used to reach every run: plan wrote
plan.json with each fleet "infeasible" for it, sweep a table of error rows,
and only then exited 2. Now each distinct trace is read before the first
run and the command ends in the line ``llmsim run`` gives, nothing written.
"""
from __future__ import annotations

import json

import pytest
import yaml

import simulator.planning.plan as plan_module
import test_plan_bad_choices
from test_plan_bad_choices import refused
from test_sweep import words, write_tiny_scenario

no_runs = test_plan_bad_choices.no_runs     # the fixture: a point simulated before the refusal fails the test

HEADER = "timestamp,input_tokens,output_tokens"
ROWS = [(i * 0.05, 500, 100) for i in range(100)]
TRACE_WORKLOAD = {"arrival": {"type": "trace", "path": "t.csv"}}


def write_trace(path, rows=ROWS, column: str = "", cells=None) -> None:
    """``rows`` as an llmsim CSV trace; ``column`` adds one more column, row i's cell ``cells(i)``."""
    lines = [HEADER + (f",{column}" if column else "")]
    lines += [",".join(map(str, r)) + (f",{cells(i)}" if column else "") for i, r in enumerate(rows)]
    path.write_text("\n".join(lines) + "\n")


def with_row(i: int, row) -> list:
    rows = list(ROWS)
    rows[i] = row
    return rows


GOLD = [{"name": "gold", "share": 1.0}]

# (trace, the scenario's classes, what the one line must say); line N is row N - 2 (the header is line 1)
BAD = {
    "negative length": (dict(rows=with_row(5, (0.25, -3, 100))), [], ["t.csv: line 7: input length is negative (-3)"]),
    "not a number": (dict(rows=with_row(7, (0.35, "abc", 100))), [],
                     ["t.csv: line 9: column 'input_tokens' is not a number (got 'abc')"]),
    "class, no classes declared": (dict(column="class", cells=lambda i: "gold"), [],
                                   ["t.csv: class: 100 row(s) name a class ('gold'), but the scenario declares no "
                                    "classes"]),
    "undeclared class": (dict(column="class", cells=lambda i: "silver" if i == 3 else "gold"), GOLD,
                         ["t.csv: class: 1 row(s) name class 'silver', which the scenario does not declare"]),
    "past the run-size limits": (dict(rows=with_row(99, (2e8, 500, 100))), [],
                                 ["tiny.yaml: workload.arrival: this run cannot finish",
                                  "llmsim simulates at most 1e+08 s"]),
}


def trace_scenario(folder, trace: dict, classes: list):
    write_trace(folder / "t.csv", **trace)
    return write_tiny_scenario(folder, workload=TRACE_WORKLOAD, **({"classes": classes} if classes else {}))


def write_trace_sweep(folder, grid: dict):
    path = folder / "sweep.yaml"
    path.write_text(yaml.safe_dump({"base": "tiny.yaml", "grid": grid}, sort_keys=False))
    return path


def plan_or_sweep(command: str, folder, scenario, *vary: str) -> list:
    """The command line of a plan over ``vary`` (key=a,b), or of a sweep whose grid crosses the same
    values, into ``folder``/out (plan) or ``folder``/out-sweep."""
    if command == "plan":
        return ["plan", scenario, "-o", folder / "out", "--vary", "pools.chat.replicas=1..2",
                *(a for v in vary for a in ("--vary", v))]
    grid = {"pools.chat.replicas": [1, 2]}
    for key, values in (v.split("=") for v in vary):
        grid[key] = [yaml.safe_load(x) for x in values.split(",")]
    return ["sweep", write_trace_sweep(folder, grid), "-o", folder / "out-sweep"]


@pytest.mark.parametrize("command", ["plan", "sweep"])
@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_trace_ends_plan_and_sweep_before_any_run_as_it_ends_run(tmp_path, cli, no_runs, case, command):
    trace, classes, fragments = BAD[case]
    scenario = trace_scenario(tmp_path, trace, classes)
    refused(cli("run", scenario, "-o", tmp_path / "run"), *fragments)
    refused(cli(*plan_or_sweep(command, tmp_path, scenario, "seed=1,2")), *fragments)
    assert not {"run", "out", "out-sweep"} & {p.name for p in tmp_path.iterdir()}


@pytest.mark.parametrize("command, where", [
    ("plan", "(--vary workload.arrival.path=bad.csv)"),
    ("sweep", "sweep.yaml: grid.workload.arrival.path = 'bad.csv')")])
def test_a_varied_trace_is_blamed_on_the_choice_naming_it(tmp_path, cli, no_runs, command, where):
    scenario = trace_scenario(tmp_path, {}, [])
    write_trace(tmp_path / "bad.csv", with_row(5, (0.25, -3, 100)))
    r = cli(*plan_or_sweep(command, tmp_path, scenario, "workload.arrival.path=t.csv,bad.csv"))
    refused(r, where, "bad.csv: line 7: input length is negative")
    assert not {"out", "out-sweep"} & {p.name for p in tmp_path.iterdir()}


def test_a_bad_trace_is_refused_even_where_the_model_does_not_fit(tmp_path, cli, no_runs):
    """The trace is input whatever the fleet: a plan whose every choice is too small for its model
    would otherwise answer "infeasible" about a file llmsim cannot replay."""
    scenario = trace_scenario(tmp_path, BAD["negative length"][0], [])
    refused(cli(*plan_or_sweep("plan", tmp_path, scenario, "pools.chat.model=llama-3-70b")),
            "t.csv: line 7: input length is negative")


def test_a_good_trace_still_plans_and_sweeps_and_a_model_too_big_stays_a_result(tmp_path, cli):
    scenario = trace_scenario(tmp_path, {}, [])
    r = cli(*plan_or_sweep("plan", tmp_path, scenario, "pools.chat.model=llama-3-8b,llama-3-70b"), "--workers", "1")
    assert r.code == 0, r.err
    assert "best: " in words(r.out)
    by = {c["overrides"]["pools.chat.model"]: c
          for c in json.loads((tmp_path / "out" / "plan.json").read_text())["candidates"]}
    assert by["llama-3-8b"]["slo_met"] and not by["llama-3-70b"]["slo_met"]
    assert "does not fit" in by["llama-3-70b"]["failed_slo"]
    r = cli(*plan_or_sweep("sweep", tmp_path, scenario), "--workers", "1")
    assert r.code == 0, r.err
    assert (tmp_path / "out-sweep" / "sweep.parquet").exists()


def test_a_run_failing_on_its_input_mid_plan_stops_the_plan_rather_than_ranking_an_infeasible_fleet(
        tmp_path, cli, monkeypatch):
    """What the precheck cannot see (here the trace edited after it was read) still fails a run on its
    input: that says nothing about the fleet, so the plan ends on it, without plan.json."""
    scenario = trace_scenario(tmp_path, {}, [])
    checked = plan_module.check_runs

    def check_then_edit(*args, **kwargs):
        checked(*args, **kwargs)
        write_trace(tmp_path / "t.csv", with_row(5, (0.25, -3, 100)))

    monkeypatch.setattr(plan_module, "check_runs", check_then_edit)
    r = cli(*plan_or_sweep("plan", tmp_path, scenario), "--workers", "1")
    refused(r, "a run of the plan (pools.chat.replicas=", "failed on its input, not on its fleet",
            "t.csv: line 7: input length is negative (-3)")
    assert not (tmp_path / "out" / "plan.json").exists()
