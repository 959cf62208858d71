"""A ``--vary`` (or ``--set``) key that names nothing: the whole axis as given, and the nearest key.

``--vary pools.chat.replica=1..2`` once said ``(--vary pools.chat.replica=1)``:
the range's low end, as if the value were at fault, and no hint of
``replicas``. A key that names nothing is wrong at every value, so the
message shows the axis as typed and the key meant; a fault of one value
still names that value.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from simulator.errors import LlmsimError
from simulator.scenario.load import load_scenario
from simulator.scenario.overrides import _nothing_at, key_fault, no_item
import test_plan_bad_choices
from test_plan_bad_choices import refused
from test_sweep import TINY, write_tiny_scenario

no_runs = test_plan_bad_choices.no_runs     # the fixture that fails a test if any point is simulated

SCENARIOS = sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("vary, fragments", [
    ("pools.chat.replica=1..2",
     ["(--vary pools.chat.replica=1..2)", "pools[0].replica: unknown key (did you mean pools.chat.replicas?"]),
    ("pools.0.replica=1..2", ["(--vary pools.0.replica=1..2)", "did you mean pools.0.replicas?"]),
    ("pools.caht.replicas=1..2",
     ["(--vary pools.caht.replicas=1..2)", "pools.caht: no item named 'caht' (did you mean chat?); names: chat"]),
    ("pools.chat.autoscaling.max_replica=1..2",     # under a key the scenario leaves unset
     ["(--vary pools.chat.autoscaling.max_replica=1..2)", "did you mean pools.chat.autoscaling.max_replicas?"]),
    ("pools.chat.replicas=1..2 --vary pools.chat.tpp=1,2",
     ["(--vary pools.chat.tpp=1,2)", "did you mean pools.chat.tp?"]),
    ("pools.chat.replicas=1..2 --vary workload.input_tokens.maen=100,200",
     ["(--vary workload.input_tokens.maen=100,200)", "workload.input_tokens.maen: unknown key "
                                                     "(did you mean workload.input_tokens.mean?"]),
    ("pools.chat.zzzz=1..2", ["(--vary pools.chat.zzzz=1..2)", "pools[0].zzzz: unknown key (check the spelling; "]),
    ("pools[0].replicas=1..2", ["(--vary pools[0].replicas=1..2)", "by position or name: pools.0.replicas;"]),
])
def test_a_varied_key_that_names_nothing_shows_the_axis_and_the_nearest_key(tmp_path, cli, no_runs, vary, fragments):
    out = tmp_path / "plan"
    r = cli("plan", write_tiny_scenario(tmp_path), "-o", out, *(a for v in vary.split(" --vary ") for a in ("--vary", v)))
    refused(r, *fragments)
    assert "=1)" not in r.err and "=100)" not in r.err
    assert not out.exists()


def test_a_fault_of_one_value_still_names_that_value(tmp_path, cli, no_runs):
    r = cli("plan", write_tiny_scenario(tmp_path), "--vary", "pools.chat.replicas=1..2", "--vary",
            "pools.chat.router=least_outstanding,{type: prefix_aware, load_wieght: 4}")
    refused(r, "(--vary pools.chat.router={load_wieght: 4, type: prefix_aware})", "load_wieght: unknown key")


def test_set_and_vary_name_a_missing_list_item_alike(tmp_path, cli, no_runs):
    path = write_tiny_scenario(tmp_path)
    by_set = cli("run", path, "--set", "pools.caht.replicas=2")
    by_vary = cli("plan", path, "--vary", "pools.caht.replicas=1..2")
    expected = "pools.caht: " + no_item("caht", ["chat"])
    assert expected in by_set.err and expected in by_vary.err
    assert "(did you mean chat?)" in expected


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    sc, _ = load_scenario(write_tiny_scenario(tmp_path_factory.mktemp("tiny")))
    return sc


def test_a_value_fault_at_an_existing_key_is_not_the_keys(tiny):
    err = LlmsimError("Input should be greater than or equal to 1 (got 0)", key_path="pools[0].replicas")
    assert key_fault(tiny, "pools.chat.replicas", err) is None
    # the key names nothing, but the error is about another key: not reworded
    assert key_fault(tiny, "pools.chat.replica", err) is None
    err = LlmsimError("unknown key (check the spelling; see `llmsim schema`)", key_path="pools[0].replica")
    assert "did you mean pools.chat.replicas?" in key_fault(tiny, "pools.chat.replica", err).message


def test_settings_that_depend_on_a_type_are_left_to_validation(tiny):
    """The tiny pool's router is least_outstanding; a prefix_aware router has load_weight. Whether a
    router or arrival has a key is the validated object's to say, and a mapping of free keys has any key."""
    assert _nothing_at(tiny, "pools.chat.router.type") is None
    assert _nothing_at(tiny, "workload.arrival.rate_per_s") is None
    assert _nothing_at(tiny, "slo.ttft_p95_ms") is None
    assert _nothing_at(tiny, "pools.5.replicas") is None      # an index out of range: apply_override says so


def _key_paths(node, prefix=()):
    """Every key path of a scenario as dumped (list items by position)."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield (*prefix, str(k))
            yield from _key_paths(v, (*prefix, str(k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield (*prefix, str(i))
            yield from _key_paths(v, (*prefix, str(i)))


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_no_key_a_scenario_has_is_called_unknown(path):
    sc, _ = load_scenario(path)
    for parts in _key_paths(sc.model_dump(mode="json", by_alias=True)):
        assert _nothing_at(sc, ".".join(parts)) is None, parts


@pytest.mark.parametrize("key, fragments", [
    ("pools.chat.replica=2", ["pools[0].replica: unknown key (did you mean pools.chat.replicas?"]),
    ("workload.arrivl.rate_per_s=2", ["workload.arrivl: unknown key (did you mean workload.arrival?"]),
    # a list item written as error messages and the key reference print it
    ("pools[0].replicas=2", ["pools[0]: unknown key (a list's item is addressed after a dot, by position or name: "
                             "pools.0.replicas;"]),
    ("pools[].engine.backend=vllm", ["pools[]: unknown key (a list's item is addressed after a dot, by position or "
                                     "name: pools.0.engine.backend;"]),
])
def test_a_set_key_that_names_nothing_gets_the_nearest_key_as_vary_does(tmp_path, cli, key, fragments):
    """`--set` words a misspelt key as `--vary` does, after the file alone validates; a bad value at a
    key that exists keeps validation's own message."""
    sc = write_tiny_scenario(tmp_path)
    r = cli("run", sc, "--set", key, "-o", tmp_path / "out")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    assert f"(with --set {key})" in r.err
    for f in fragments:
        assert f in r.err, r.err
    assert not (tmp_path / "out").exists()
    value = cli("run", sc, "--set", "pools.chat.replicas=abc", "-o", tmp_path / "out")
    assert value.code == 2 and "pools[0].replicas: Input should be a valid integer" in value.err
    assert "did you mean" not in value.err


@pytest.mark.parametrize("command", ["plan", "sweep"])
def test_plan_and_sweep_name_the_set_that_names_nothing(tmp_path, cli, command):
    """A misspelt --set of a plan or sweep is named with its value, as run names it, not as "(--set)"."""
    sc = write_tiny_scenario(tmp_path)
    (tmp_path / "sw.yaml").write_text(f"base: {sc.name}\ngrid: {{pools.chat.replicas: [1, 2]}}\n")
    args = {"plan": ["plan", sc, "--vary", "pools.chat.replicas=1..2"], "sweep": ["sweep", tmp_path / "sw.yaml"]}
    r = cli(*args[command], "--set", "pools.chat.tpp=2", "-o", tmp_path / "out")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    assert "(--set pools.chat.tpp=2): pools[0].tpp: unknown key (did you mean pools.chat.tp?" in r.err


@pytest.mark.parametrize("vary, says", [
    ("pools.1.replicas=1..3", "(--vary pools.1.replicas=1..3): pools.1: index 1 out of range (the list has 1 item)"),
    ("pools.1.tp=2,4", "(--vary pools.1.tp=2,4): pools.1: index 1 out of range"),
])
def test_a_fault_every_choice_shares_shows_the_axis_as_given(tmp_path, cli, no_runs, vary, says):
    """An index past the list fails at every choice: the error shows the whole --vary, not one end
    of the range that would read as the culprit; a fault of one choice still names that choice."""
    sc = write_tiny_scenario(tmp_path)
    search = [] if ".." in vary else ["--vary", "pools.chat.replicas=1..2"]
    r = cli("plan", sc, "--vary", vary, *search, "-o", tmp_path / "out")
    assert r.code == 2 and says in r.err, r.err
    one = cli("plan", sc, "--vary", "pools.chat.replicas=1..2", "--vary", "pools.chat.tp=2,3", "-o", tmp_path / "o")
    assert one.code == 2 and "(--vary pools.chat.tp=3): pools[0].tp: tp=3 must divide" in one.err, one.err


def test_a_serving_stacks_own_name_for_an_engine_key_is_answered_with_llmsims(tmp_path, cli):
    # a letter's distance answered free_gpu_memory_fraction with gpu_memory_utilization, vLLM's, which a
    # TensorRT-LLM pool then refuses
    path = write_tiny_scenario(tmp_path)
    r = cli("run", path, "--set", "pools.chat.engine.free_gpu_memory_fraction=0.8")
    assert r.code == 2
    assert ("pools[0].engine.free_gpu_memory_fraction: unknown key (TensorRT-LLM's kv_cache_config."
            "free_gpu_memory_fraction is pools.chat.engine.kv_memory.fraction here;") in " ".join(r.err.split()), r.err
    assert "gpu_memory_utilization" not in r.err
    pool = {**TINY["pools"][0], "engine": {"backend": "sglang", "max_running_requests": 64, "page_size": 16}}
    r = cli("run", write_tiny_scenario(tmp_path, pools=[pool]))
    said = " ".join(r.err.split())
    assert "pools[0].engine.max_running_requests: unknown key (SGLang's --max-running-requests is max_num_seqs here;" \
        in said and "pools[0].engine.page_size: unknown key (SGLang's --page-size is block_size here;" in said, said


def test_an_engine_key_written_on_the_pool_is_answered_with_its_place_under_engine(tmp_path, cli):
    # a pool's weight_dtype, backend or kv_dtype is no slip of a letter: "check the spelling" sent the user
    # hunting for a typo that was not there
    path = write_tiny_scenario(tmp_path)
    r = cli("run", path, "--set", "pools.chat.weight_dtype=fp8")
    assert r.code == 2
    assert "pools[0].weight_dtype: unknown key (did you mean pools.chat.engine.weight_dtype?" in r.err, r.err
    (tmp_path / "high").mkdir()
    r = cli("run", write_tiny_scenario(tmp_path / "high", pools=[{**TINY["pools"][0], "backend": "vllm",
                                                                  "kv_dtype": "fp8"}]))
    said = " ".join(r.err.split())
    assert "pools[0].backend: unknown key (did you mean engine.backend?" in said, said
    assert "pools[0].kv_dtype: unknown key (did you mean engine.kv_dtype?" in said, said
    # a slip of a letter keeps its nearest key
    assert "did you mean pools.chat.replicas?" in cli("run", path, "--set", "pools.chat.replica=2").err


def test_a_key_a_level_down_is_named_only_where_one_mapping_takes_it():
    from simulator.scenario.schema import PoolSpec, Scenario
    from simulator.scenario.strict import deeper_key
    assert deeper_key(PoolSpec, "weight_dtype") == "engine.weight_dtype"
    assert deeper_key(PoolSpec, "replicas") is None              # a key of the pool itself
    assert deeper_key(PoolSpec, "zzzz") is None
    assert deeper_key(Scenario, "duration_s") == "workload.duration_s"


def test_a_stacks_name_is_answered_only_in_an_engine(tmp_path, cli):
    # a trace's block_size is its hash blocks' tokens (Mooncake's 512), not SGLang's --page-size nor
    # TensorRT-LLM's tokens_per_block: "SGLang's --page-size is workload.arrival.block_size here" sent the
    # user to the wrong key
    from simulator.stack_names import stack_name
    from workloads.traces import TraceSpec
    assert stack_name("page_size", [f.alias or n for n, f in TraceSpec.model_fields.items()]) is None
    trace = {"type": "trace", "path": "t.csv", "tokens_per_block": 16}
    r = cli("run", write_tiny_scenario(tmp_path, workload={"arrival": trace}))
    assert r.code == 2 and "tokens_per_block: unknown key" in r.err and "TensorRT-LLM" not in r.err, r.err


def test_a_set_key_with_spaces_around_the_equals_sign_is_the_key(tmp_path):
    """`--set "key = value"` named `key ` (its space kept) and was answered "pools[0].replicas : unknown key
    (did you mean replicas?)", where --vary and the overlap check read the same text as the key."""
    sc, _ = load_scenario(write_tiny_scenario(tmp_path), ["pools.chat.replicas = 1"])
    assert sc.pools[0].replicas == 1
