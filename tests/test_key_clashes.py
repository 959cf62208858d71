"""One key given twice across ``--set``, ``--vary`` and a sweep's grid is refused, however it is spelled.

``pools.0.tp`` is ``pools.chat.tp`` when pool 0 is ``chat``, and
``pools.chat.engine`` holds ``pools.chat.engine.max_num_seqs``: applied in
turn, the later silently undid the earlier. Each clash is one line naming
both spellings, exit code 2, before any run and with nothing written; so is
a ``--vary`` choice, grid value or point given twice (the same point run
again into a second row). Keys apart, in the same pool or not, still run.
"""
from __future__ import annotations

import pytest
import yaml

import simulator.planning.plan as plan_module
import simulator.planning.sweep as sweep_module
from simulator.planning.sweep import plan_sweep
from simulator.scenario.overrides import Given, refuse_overlaps, resolved_key
from test_plan_bad_choices import refused
from test_sweep import TINY, write_sweep, write_tiny_scenario

POOL = TINY["pools"][0]


class Reached(Exception):
    """Raised where a plan or sweep would start its runs: every check before them passed."""


@pytest.fixture
def no_runs(monkeypatch):
    """No point is simulated: reaching the runs raises :class:`Reached`, which a refusal never does."""
    def run_points(*a, **k):
        raise Reached

    monkeypatch.setattr(plan_module, "run_points", run_points)
    monkeypatch.setattr(sweep_module, "run_points", run_points)


def _sets(*assignments: str) -> list[str]:
    return [a for s in assignments for a in ("--set", s)]


def _command(command: str, tmp_path, *args: str) -> list:
    """``llmsim COMMAND`` on the tiny scenario (pool 0 is ``chat``) with ``args``; plan searches
    pools.chat.replicas, sweep sweeps the seed."""
    if command == "sweep":
        return ["sweep", write_sweep(tmp_path, {"grid": {"seed": [1, 2]}}), "-o", tmp_path / "out", *args]
    scenario = write_tiny_scenario(tmp_path)
    if command == "plan":
        return ["plan", scenario, "-o", tmp_path / "out", "--vary", "pools.chat.replicas=1..2", *args]
    return [command, scenario, *args]


# --- --set twice ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["run", "check", "plan", "sweep"])
@pytest.mark.parametrize("sets, fragments", [
    (["pools.0.tp=1", "pools.chat.tp=1"],
     ["pools.chat.tp is set twice (--set pools.0.tp=1 and --set pools.chat.tp=1: pools.0 is pools.chat)"]),
    (["pools.chat.engine={max_num_seqs: 8}", "pools.chat.engine.max_num_seqs=16"],
     ["pools.chat.engine.max_num_seqs is set twice (--set pools.chat.engine={max_num_seqs: 8}, which sets all "
      "of pools.chat.engine, and --set pools.chat.engine.max_num_seqs=16)"]),
    (["pools.0.engine.max_num_seqs=16", "pools.chat.engine={max_num_seqs: 8}"],
     ["pools.0.engine.max_num_seqs is set twice (--set pools.0.engine.max_num_seqs=16 and "
      "--set pools.chat.engine={max_num_seqs: 8}, which sets all of pools.chat.engine: pools.0 is pools.chat)"]),
])
def test_one_key_set_twice_under_two_spellings_is_refused(tmp_path, cli, no_runs, command, sets, fragments):
    refused(cli(*_command(command, tmp_path, *_sets(*sets))), "--set: ", *fragments, "give each key once")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("sets, fragments", [
    (["pools.0.replicas=2", "pools.free.replicas=3"],      # told apart by the file: named in the message
     ["scenarios/chatbot.yaml: --set: ", "(--set pools.0.replicas=2 and --set pools.free.replicas=3: "
                                         "pools.0 is pools.free)"]),
    (["pools.free.engine={backend: sglang}", "pools.free.engine.backend=vllm"],
     ["(--set pools.free.engine={backend: sglang}, which sets all of pools.free.engine, and "
      "--set pools.free.engine.backend=vllm)"]),
    (["pools.free.engine.backend=vllm", "pools.free.engine={backend: sglang}"],
     ["(--set pools.free.engine.backend=vllm and --set pools.free.engine={backend: sglang}, which sets all of "
      "pools.free.engine)"]),
])
def test_the_chatbot_reproductions_are_refused(cli, sets, fragments):
    """The reproductions: scenarios/chatbot.yaml's pool 0 is named free."""
    refused(cli("check", "scenarios/chatbot.yaml", *_sets(*sets)), "--set: ", *fragments, "give each key once")


# --- a pool a --variant adds ----------------------------------------------------------------------------------
def _with_variant(tmp_path):
    """The tiny scenario with a variant ``two`` that adds the pool ``extra`` (pools.1)."""
    path = tmp_path / "v.yaml"
    path.write_text(yaml.safe_dump({**TINY, "variants": [{"name": "two", "set": {
        "pools": [POOL, {**POOL, "name": "extra", "replicas": 1}],
        "classes": [{"name": "a", "share": 0.5, "pool": "chat"}, {"name": "b", "share": 0.5, "pool": "extra"}]}}]},
        sort_keys=False))
    return path


@pytest.mark.parametrize("command", [["run"], ["plan", "--vary", "pools.chat.replicas=1..2"]])
def test_a_set_of_a_pool_a_variant_adds_is_resolved_after_the_variant(tmp_path, cli, no_runs, command):
    r = cli(command[0], _with_variant(tmp_path), *command[1:], "-o", tmp_path / "out", "--variant", "two",
            *_sets("pools.extra.replicas=2", "pools.1.replicas=3"))
    refused(r, "--set pools.extra.replicas=2 and --set pools.1.replicas=3: pools.extra is pools.1")
    assert not (tmp_path / "out").exists()


def test_a_plan_may_set_a_pool_its_variant_adds(tmp_path, cli, no_runs):
    """Its --set was once checked on the file without the variant: "no item named 'extra'"."""
    with pytest.raises(Reached):
        cli("plan", _with_variant(tmp_path), "-o", tmp_path / "out", "--variant", "two",
            "--set", "pools.extra.replicas=2", "--vary", "pools.chat.replicas=1..2")


# --- --set and --vary, two --vary -----------------------------------------------------------------------------
@pytest.mark.parametrize("args, fragments", [
    (["--set", "pools.chat.replicas=2"],
     ["--vary: pools.chat.replicas is both set and varied (--set pools.chat.replicas=2 and "
      "--vary pools.chat.replicas=1..2)"]),
    (["--set", "pools.0.replicas=2"],
     ["pools.chat.replicas is both set and varied (--set pools.0.replicas=2 and --vary pools.chat.replicas=1..2: "
      "pools.0 is pools.chat)"]),
    (["--set", "pools.chat={name: chat, model: llama-3-8b, gpu: h100-sxm, replicas: 2}"],
     ["pools.chat.replicas is both set and varied (--set pools.chat={gpu: h100-sxm, model: llama-3-8b, name: chat, "
      "replicas: 2}, which sets all of pools.chat, and --vary pools.chat.replicas=1..2)"]),
    (["--vary", "pools.0.tp=1,2", "--set", "pools.chat.tp=1"],
     ["pools.0.tp is both set and varied (--set pools.chat.tp=1 and --vary pools.0.tp=1,2: pools.chat is pools.0)"]),
    (["--vary", "pools.0.replicas=2,3"],      # a range and a list that overlap
     ["--vary: pools.0.replicas is varied twice (--vary pools.chat.replicas=1..2 and --vary pools.0.replicas=2,3: "
      "pools.chat is pools.0)"]),
    (["--vary", "pools.chat.replicas=3,4"],
     ["pools.chat.replicas is varied twice (--vary pools.chat.replicas=1..2 and --vary pools.chat.replicas=3,4)"]),
    (["--vary", "pools.chat.engine.max_num_seqs=8,16", "--vary", "pools.0.engine={max_num_seqs: 8}"],
     ["pools.chat.engine.max_num_seqs is varied twice (--vary pools.chat.engine.max_num_seqs=8,16 and "
      "--vary pools.0.engine={max_num_seqs: 8}, which varies all of pools.0.engine: pools.chat is pools.0)"]),
])
def test_a_key_both_set_and_varied_or_varied_twice_is_refused(tmp_path, cli, no_runs, args, fragments):
    refused(cli(*_command("plan", tmp_path, *args)), *fragments, "give each key once")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("choice, fragment", [
    ("pools.chat.tp=1,1,2", "--vary pools.chat.tp: 1 is given twice in 1,1,2; give each choice once"),
    ("pools.chat.tp=1,2,1.0", "--vary pools.chat.tp: 1.0 repeats 1 in 1,2,1.0; give each choice once"),
    ("pools.chat.gpu=h100-sxm,h200,h100-sxm", "h100-sxm is given twice in h100-sxm,h200,h100-sxm"),
    # the loader reads a profile's name whatever its case: H200 is h200's file, the same fleet again
    ("pools.chat.gpu=h200,H200", "--vary pools.chat.gpu: H200 repeats h200 in h200,H200; give each choice once"),
])
def test_a_choice_given_twice_is_refused(tmp_path, cli, no_runs, choice, fragment):
    refused(cli(*_command("plan", tmp_path, "--vary", choice)), fragment)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("vary, fragment", [
    ("workload.arrival.rate_per_s=1,2", "workload.arrival.rate_per_s is both searched and varied (--max-rate and "
                                        "--vary workload.arrival.rate_per_s=1,2)"),
    ("workload.arrival={type: poisson}", "which varies all of workload.arrival"),
])
def test_max_rate_refuses_a_vary_of_its_rate_however_spelt(tmp_path, cli, no_runs, vary, fragment):
    out = tmp_path / "out"
    refused(cli("plan", write_tiny_scenario(tmp_path), "-o", out, "--max-rate", "--vary", vary,
                "--vary", "pools.chat.tp=1"), fragment)
    assert not out.exists()


# --- sweeps ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("body, sets, fragments", [
    ({"grid": {"pools.chat.replicas": [1, 2]}}, ["pools.chat.replicas=3"],
     ["sweep.yaml: grid.pools.chat.replicas: pools.chat.replicas is both set and swept "
      "(--set pools.chat.replicas=3 and grid.pools.chat.replicas)"]),
    ({"grid": {"pools.chat.replicas": [1, 2]}}, ["pools.0.replicas=3"],
     ["(--set pools.0.replicas=3 and grid.pools.chat.replicas: pools.0 is pools.chat)"]),
    ({"grid": {"pools.chat.engine.max_num_seqs": [8, 16]}}, ["pools.chat.engine={max_num_seqs: 4}"],
     ["(--set pools.chat.engine={max_num_seqs: 4}, which sets all of pools.chat.engine, and "
      "grid.pools.chat.engine.max_num_seqs)"]),
    ({"grid": {"pools.0.replicas": [1, 2], "pools.chat.replicas": [3]}}, [],
     ["grid.pools.chat.replicas: pools.chat.replicas is swept twice (grid.pools.0.replicas and "
      "grid.pools.chat.replicas: pools.0 is pools.chat)"]),
    ({"grid": {"pools.chat.tp": [1]}, "points": [{"pools.0.tp": 2}]}, [],
     ["points[0]: pools.0.tp is both swept and set (grid.pools.chat.tp and points[0].pools.0.tp: "
      "pools.chat is pools.0)"]),
    ({"points": [{"pools.0.tp": 1, "pools.chat.tp": 1}]}, [],
     ["points[0]: pools.chat.tp is set twice (points[0].pools.0.tp and points[0].pools.chat.tp: pools.0 is pools.chat)"]),
    ({"grid": {"pools.chat.replicas": [1, 2, 1]}}, [],
     ["sweep.yaml: grid.pools.chat.replicas: 1 is given twice; give each value once"]),
    ({"grid": {"pools.chat.gpu": ["h200", "H200"]}}, [],
     ["sweep.yaml: grid.pools.chat.gpu: 'H200' repeats 'h200'; give each value once"]),
    ({"grid": {"seed": [1, 2]}, "points": [{"pools.0.tp": 1}, {"pools.chat.tp": 2}, {"pools.chat.tp": 1}]}, [],
     ["sweep.yaml: points: points[2] repeats points[0] (the same keys and values); give each point once"]),
    ({"points": [{"pools.0.tp": 1}, {"pools.chat.tp": 2}]}, ["pools.chat.tp=4"],
     ["--set: --set pools.chat.tp=4 reaches no run: every point sets pools.chat.tp"]),
    ({"points": [{"pools.chat.engine": {"max_num_seqs": 8}}, {"pools.0.engine": {"max_num_seqs": 16}}]},
     ["pools.chat.engine.max_num_batched_tokens=4096"], ["reaches no run: every point sets"]),
])
def test_a_sweep_giving_a_key_or_a_point_twice_is_refused(tmp_path, cli, no_runs, body, sets, fragments):
    out = tmp_path / "out"
    refused(cli("sweep", write_sweep(tmp_path, body), "-o", out, *_sets(*sets)), *fragments)
    assert not out.exists()


# --- keys apart still run -------------------------------------------------------------------------------------
def test_keys_apart_still_run(tmp_path, cli):
    """Two keys of one pool, one by index, one by name; a key beside a mapping it is not in."""
    r = cli("run", write_tiny_scenario(tmp_path), "--exit-zero", "--json",
            *_sets("pools.0.replicas=1", "pools.chat.engine.max_num_seqs=8", "workload.arrival.rate_per_s=20",
                   "workload.input_tokens={dist: fixed, value: 100}"))
    assert r.code == 0, r.err


@pytest.mark.parametrize("args", [
    ["--set", "pools.chat.engine.max_num_seqs=64", "--vary", "pools.0.tp=1,2"],
    ["--set", "pools.0.engine.max_num_seqs=64", "--vary", "pools.chat.engine.max_num_batched_tokens=4096,8192"],
    ["--set", "workload.num_requests=100", "--vary", "seed=1,2"],
])
def test_a_plan_with_keys_apart_reaches_its_runs(tmp_path, cli, no_runs, args):
    with pytest.raises(Reached):
        cli(*_command("plan", tmp_path, *args))


def test_a_sweep_with_keys_apart_plans_every_point(tmp_path):
    """A point may set a --set key (its own override, as documented); grid, points and --set keys are apart."""
    sweep = write_sweep(tmp_path, {"grid": {"pools.0.replicas": [1, 2]},
                                   "points": [{"pools.chat.tp": 1}, {"pools.chat.tp": 2, "seed": 5}]})
    points = plan_sweep(sweep, {"seed": 4, "pools.chat.engine.max_num_seqs": 64})
    assert len(points) == 4
    assert {dict(p.overrides)["seed"] for p in points} == {4, 5}


# --- the comparison itself ------------------------------------------------------------------------------------
def test_keys_resolve_by_name_and_index_as_far_as_the_data_goes():
    data = {"pools": [{"name": "chat", "router": "least_outstanding"}, {"name": "free"}]}
    assert resolved_key(data, "pools.free.tp") == resolved_key(data, "pools.1.tp") == ("pools", "1", "tp")
    assert resolved_key(data, "pools.01.tp") == ("pools", "1", "tp")
    assert resolved_key(data, "pools.nope.tp") == ("pools", "nope", "tp")       # left for apply to name
    assert resolved_key(data, "pools.-1.tp") == ("pools", "-1", "tp")
    assert resolved_key(data, "pools.chat.router.load_weight") == ("pools", "0", "router", "load_weight")
    assert resolved_key(None, "pools.chat.tp") == ("pools", "chat", "tp")
    apart = [Given("pools.chat.tp", "a"), Given("pools.free.tp", "b"), Given("pools.chat.replicas", "c"),
             Given("pools.chatty", "d"), Given("pools.0.engine.max_num_seqs", "e")]
    refuse_overlaps(apart, data)
