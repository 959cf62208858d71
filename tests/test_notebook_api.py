"""simulator.notebook as a notebook user calls it: every lever of the CLI, and every slip refused in one line.

A notebook user types arguments the command line would have parsed for
them: a string where a list goes, pairs where a dict goes, a misspelt
engine, the Scenario object ``load`` returned. Each ends in one
LlmsimError naming the argument and what it expects, or does what was
clearly meant, before any run. docs/planning.md's "From Python" example
is run here too (at a few simulated seconds), since no other test runs
a page's Python on planning.
"""
from __future__ import annotations

import re
import warnings

import pytest

from conftest import REPO_ROOT

from simulator import notebook as nb
from simulator.errors import LlmsimError
from workloads.request import Status

FAST = {"workload.duration_s": 5}
GPU_AXIS = ["pools.chat.replicas=8..8", "pools.chat.gpu=h100-sxm,h200"]


@pytest.fixture(scope="module")
def autocomplete():
    return nb.run("autocomplete", FAST)


def _prices(plan) -> dict[str, float]:
    return {c["overrides"]["pools.chat.gpu"]: c["usd_per_gpu_hour"]["chat"] for c in plan.candidates}


def test_a_plan_takes_sets_and_bills_each_gpu_at_its_own_price():
    with warnings.catch_warnings():
        warnings.simplefilter("error", nb.PlanWarning)      # the advice followed: nothing left to warn of
        plan = nb.plan("dau-10m", GPU_AXIS, sets={**FAST, "pools.chat.usd_per_gpu_hour": None})
    assert _prices(plan) == {"h100-sxm": 2.99, "h200": 5.41}
    assert plan.sets == {**FAST, "pools.chat.usd_per_gpu_hour": None} and plan.warnings == []


def test_a_plan_shows_its_warnings_each_time_it_runs():
    with warnings.catch_warnings(record=True) as seen:
        for _ in range(2):      # a cell run again: Python's default filter would show it once per line
            plan = nb.plan("dau-10m", GPU_AXIS, sets=FAST)
    assert [w.category for w in seen] == [nb.PlanWarning] * 2
    assert re.search(r"pinned at \$3\.00.*add --set pools\.chat\.usd_per_gpu_hour=null", str(seen[0].message))
    assert _prices(plan) == {"h100-sxm": 3.0, "h200": 3.0}


def test_a_plan_takes_variants_and_a_confidence():
    plan = nb.plan("autocomplete", "pools.autocomplete.replicas=1..4", sets=FAST, variants=[], confidence=0.9)
    assert plan.confidence == 0.9 and plan.best is not None
    assert "slo_bounds_ms" in plan.best          # judged at the confidence, under the error model
    assert nb.plan("chatbot", ["pools.free.replicas=1..2"], sets=FAST, variants="static").variants == ["static"]


def test_a_bad_confidence_is_refused_before_any_run():
    with pytest.raises(LlmsimError, match=r"confidence: must be a probability at least 0.5 and below 1"):
        nb.plan("autocomplete", ["pools.autocomplete.replicas=1..4"], confidence=1.5)


@pytest.mark.parametrize("call", [
    lambda: nb.run("autocomplete", FAST, engine="slow"),
    lambda: nb.ladder("autocomplete", FAST, engine="slow"),
    lambda: nb.plan("autocomplete", ["pools.autocomplete.replicas=1..4"], sets=FAST, engine="slow"),
], ids=["run", "ladder", "plan"])
def test_a_misspelt_engine_is_refused_naming_the_engines(call):
    """The argument is named as the notebook spells it (engine), not as the command line does (--engine)."""
    with pytest.raises(LlmsimError, match=r"expected fast or reference \(got 'slow'\)") as e:
        call()
    assert e.value.key_path == "engine"


@pytest.mark.parametrize("overrides", [[("workload.duration_s", 5)], "workload.duration_s=5", {5: 5}],
                         ids=["pairs", "text", "not-a-key-path"])
def test_overrides_must_be_a_dict_of_key_paths(overrides):
    with pytest.raises(LlmsimError, match=r"^overrides: expected .*key.path.*workload\.duration_s"):
        nb.run("autocomplete", overrides)


def test_plan_sets_must_be_a_dict():
    with pytest.raises(LlmsimError, match=r"^sets: expected a dict \{key\.path: value\}"):
        nb.plan("autocomplete", ["pools.autocomplete.replicas=1..4"], sets=["workload.duration_s=5"])


def test_one_string_where_a_list_goes_is_a_list_of_one():
    (static, _), (listed, _) = nb.load("chatbot", variants="static"), nb.load("chatbot", variants=["static"])
    assert static == listed and static.pools[0].autoscaling is None


@pytest.mark.parametrize("call, argument", [
    (lambda: nb.plan("autocomplete", {"pools.autocomplete.replicas": "1..4"}), "vary"),
    (lambda: nb.plan("autocomplete", [("pools.autocomplete.replicas", "1..4")]), "vary"),
    (lambda: nb.run("chatbot", FAST, 3), "variants"),
], ids=["vary-dict", "vary-pairs", "variants-number"])
def test_other_lists_are_refused_asking_for_strings(call, argument):
    with pytest.raises(LlmsimError, match=rf"^{argument}: expected a list of strings"):
        call()


def test_a_loaded_scenario_runs_with_its_overrides_and_variants(autocomplete):
    sc, _ = nb.load("autocomplete")
    again = nb.run(sc, FAST)
    assert again.results["completed"] == autocomplete.results["completed"]
    assert again.results["p99_ttft_ms"] == autocomplete.results["p99_ttft_ms"]
    edited = nb.run(sc.model_copy(update={"seed": sc.seed + 1}), FAST, "round_robin")   # a what-if made in Python
    assert edited.results["llmsim"]["seed"] == sc.seed + 1
    assert edited.scenario.pools[0].router.type == "round_robin" and sc.pools[0].router.type != "round_robin"


def test_a_loaded_scenario_is_checked_as_a_file_is():
    sc, _ = nb.load("chatbot")
    with pytest.raises(LlmsimError, match=r"scenario chatbot .*workload\.duration_s=-5.*greater than 0"):
        nb.run(sc, {"workload.duration_s": -5})
    with pytest.raises(LlmsimError, match=r"no variant named 'nope'"):
        nb.run(sc, FAST, ["nope"])
    with pytest.raises(LlmsimError, match=r"^scenario: ladder\(\) needs the scenario's file"):
        nb.ladder(sc)


def test_a_scenario_that_is_neither_name_nor_path_is_refused():
    with pytest.raises(LlmsimError, match=r"^scenario: expected a built-in scenario name .*\(got NoneType None\)"):
        nb.run(None)


def test_a_run_and_a_ladder_step_show_their_figures_not_their_requests(autocomplete):
    text = repr(autocomplete)
    assert len(text) < 300, text
    assert text.startswith("RunOutput(scenario='autocomplete', requests=") and "ttft_p99_ms=" in text
    step = nb.LadderRun("baseline", "as written", {}, autocomplete)
    assert repr(step) == f"LadderRun(step='baseline', output={text})"


def test_requests_frame_has_a_column_a_field(autocomplete):
    df = nb.requests_frame(autocomplete)
    assert len(df) == len(autocomplete.requests)
    assert {"id", "status", "ttft_ms", "tpot_ms", "e2el_ms"} <= set(df.columns)
    assert set(df.status) <= {s.name.lower() for s in Status} and "finished" in set(df.status)
    assert nb.requests_frame(nb.LadderRun("baseline", "", {}, autocomplete)).equals(df)
    with pytest.raises(LlmsimError, match=r"^output: expected what run\(\) returns"):
        nb.requests_frame(autocomplete.results)


def test_the_functions_planning_md_uses_say_what_they_are_for():
    from simulator.planning.executors import make_executor
    from simulator.planning.plan import plan_fleet
    from simulator.planning.sweep import run_sweep
    from simulator.planning.vary import parse_vary
    from simulator.runner import RunOutput

    for f in (make_executor, parse_vary, run_sweep, plan_fleet, RunOutput):
        assert f.__doc__ and len(f.__doc__) > 80, f.__name__
    assert "``axes``" in plan_fleet.__doc__ and "``executor``" in plan_fleet.__doc__


def _planning_md_blocks() -> tuple[str, str]:
    """The page's "From Python" code and the sweep file it reads (the page's dau-sweep.yaml listing)."""
    text = (REPO_ROOT / "docs" / "planning.md").read_text()
    (code,) = re.findall(r"^```python\n(.*?)^```", text[text.index("## From Python"):], re.S | re.M)
    (sweep,) = [b for b in re.findall(r"^```yaml\n(.*?)^```", text, re.S | re.M) if b.startswith("# dau-sweep.yaml")]
    return code, sweep


def test_planning_md_from_python_runs(tmp_path, monkeypatch, capsys):
    code, sweep = _planning_md_blocks()
    # smoke size: 2 simulated seconds a run instead of the page's 60 (the plan) and 30 (the sweep)
    code, n = re.subn(r'"workload\.duration_s": \d+', '"workload.duration_s": 2', code)
    sweep, m = re.subn(r"workload\.duration_s: \d+", "workload.duration_s: 2", sweep)
    assert n == 1 and m == 1, "the example's window moved: shrink it here too, or this test runs it at full size"
    code, k = re.subn(r'make_executor\("local"\)', 'make_executor("local", ExecutorOptions(workers=1))', code)
    assert k == 1      # in this process: a pool of worker processes takes longer to start than the runs take
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dau-sweep.yaml").write_text(sweep)
    from simulator.planning.executors import ExecutorOptions

    exec(compile(code, "planning.md", "exec"), {"__name__": "__main__", "ExecutorOptions": ExecutorOptions})
    out = capsys.readouterr().out
    assert re.search(r"\{'pools\.chat\.replicas': \d+\} \$[\d,]+ a month|no combination meets the SLO", out), out
    assert "8 runs, 0 failed; table: sweep-out/sweep." in out, out


def test_plan_fleet_takes_one_variant_name_and_refuses_sets_that_are_not_a_mapping():
    """planning.md documents plan_fleet itself: variants="tp2" read as 't', 'p', '2'; sets=["k=v"] was a
    bare ValueError."""
    from simulator.errors import LlmsimError
    from simulator.planning.executors import make_executor
    from simulator.planning.plan import plan_fleet
    from simulator.planning.vary import parse_vary

    with make_executor("local") as ex, pytest.raises(LlmsimError, match=r"sets: expected a dict"):
        plan_fleet("dau-10m", [parse_vary("pools.chat.replicas=8..9")], ex, sets=["workload.duration_s=5"])
    with make_executor("local") as ex, pytest.raises(LlmsimError, match=r"no variant named 'nope'"):
        plan_fleet("dau-10m", [parse_vary("pools.chat.replicas=8..9")], ex, variants="nope")


def test_numpy_values_an_edited_scenario_and_odd_seeds():
    """A cell's np.int64 ended in a YAML RepresenterError; a Scenario edited with model_copy and nothing
    to apply ran unvalidated (a TypeError deep in numpy); seeds=1.5 a bare TypeError."""
    import numpy as np

    out = nb.run("autocomplete", {"workload.duration_s": np.int64(2)})
    assert out.scenario.workload.duration_s == 2
    sc, _ = nb.load("autocomplete")
    with pytest.raises(LlmsimError, match=r"seed: Input should be a valid integer"):
        nb.run(sc.model_copy(update={"seed": "x"}))
    for seeds in (1.5, "2", 0):
        with pytest.raises(LlmsimError, match=r"seeds: expected a whole number of seeds, at least 1"):
            nb.plan("autocomplete", ["pools.autocomplete.replicas=1..2"], seeds=seeds)


def test_a_run_is_judged_by_every_slo_and_its_load_as_llmsim_run_judges_it():
    """nb.met: the scenario's targets met is not enough where a class missed its own or the
    fleet fell behind its load (the notebooks' tables and colours read it)."""
    from simulator import notebook as nb

    ok = {"slo": {"met": True}}
    assert nb.met(ok) is True and nb.met({}) is None
    paid = {"slo": {"met": True}, "llmsim": {"classes": {"paid": {"slo_declared": True, "slo": {"met": False}}}}}
    assert nb.met(paid) is False
    assert nb.met({"slo": {"met": True}, "llmsim": {"load": {"overloaded": True}}}) is False


def test_a_run_carries_the_intervals_llmsim_run_writes(tmp_path, cli):
    """nb.run's results lacked llmsim.intervals and llmsim.error_model, which llmsim run prints under its
    SLO table and writes to results.json: a what-if reading the 90 % bound got a KeyError."""
    import json

    from test_sweep import write_tiny_scenario

    scenario = write_tiny_scenario(tmp_path)
    cli("run", scenario, "-o", tmp_path / "out", "--no-plots", "--confidence", "0.8")
    written = json.loads((tmp_path / "out" / "results.json").read_text())["llmsim"]
    got = nb.run(scenario, confidence=0.8).results["llmsim"]
    assert got["intervals"] == written["intervals"] and got["intervals"]["p99_ttft_ms"]["confidence"] == 0.8
    assert got["error_model"] == written["error_model"]
    with pytest.raises(LlmsimError, match=r"confidence: must be a probability"):
        nb.run(scenario, confidence=1.5)


def test_every_function_the_notebooks_call_is_public():
    """The notebooks judge their runs with nb.met, which __all__ left out: help(simulator.notebook) did not
    list it, and ``from simulator.notebook import *`` did not bring it, so a notebook written from the
    module's public names could not judge a run as llmsim run does."""
    import json

    used = set()
    for path in sorted((REPO_ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        used |= {m for c in cells if c["cell_type"] == "code" for m in re.findall(r"\bnb\.(\w+)", "".join(c["source"]))}
    assert "met" in used and used <= set(nb.__all__), used - set(nb.__all__)

