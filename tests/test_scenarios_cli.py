"""``llmsim run`` and ``llmsim schema`` end to end, and every kind of bad input.

Bad input must end in exit code 2 with one clear ``error:`` line naming the
file and the key path, no traceback, and no output folder left behind.
Those cases run as real processes (``cli_subprocess`` from conftest), since
what matters is what a user at a terminal sees; the rest run in-process.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

SCENARIO = """\
name: small
description: a few hundred requests, seconds to simulate
seed: 3
workload:
  num_requests: 300
  arrival: {type: poisson, rate_per_s: 12}
  input_tokens: {dist: uniform, min: 16, max: 1500}
  output_tokens: {dist: uniform, min: 1, max: 200}
pools:
  - name: main
    model: llama-3-8b
    gpu: h100-sxm
    replicas: 1
    router: round_robin
    engine: {max_num_seqs: 32, max_num_batched_tokens: 1024}
slo: {ttft_p99_ms: 2000, tpot_p99_ms: 100, ttft_ms: 1500, tpot_ms: 80}
"""

VLLM_KEYS = ["completed", "failed", "duration", "total_input_tokens", "total_output_tokens", "request_throughput",
             "output_throughput", "total_token_throughput", "request_goodput"]
LATENCY = ["ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"]
STATS = ["mean", "median", "std", "p90", "p95", "p99"]
LLMSIM_KEYS = ["seed", "version", "mean_kv_utilization", "max_kv_utilization", "preemptions", "mean_queue_depth",
               "mean_batch_size", "gpu_busy_fraction"]
TIMING_KEYS = ["wall_time_s", "sim_requests_per_wall_s"]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def scenario(tmp_path) -> Path:
    return write(tmp_path / "scenarios" / "small.yaml", SCENARIO)


def check_results(res: dict, n: int) -> None:
    for k in VLLM_KEYS:
        assert k in res, k
    for m in LATENCY:
        for s in STATS:
            key = f"{s}_{m}"
            assert key in res, key
            assert res[key] is not None and math.isfinite(res[key]) and res[key] >= 0, key
    assert res["completed"] + res["failed"] == n
    assert res["completed"] == n
    assert res["duration"] > 0
    assert res["total_input_tokens"] > 0 and res["total_output_tokens"] > 0
    assert res["request_throughput"] == pytest.approx(res["completed"] / res["duration"])
    assert res["request_goodput"] is not None and 0 <= res["request_goodput"] <= res["request_throughput"]
    assert res["mean_ttft_ms"] <= res["p99_ttft_ms"] or res["std_ttft_ms"] == 0
    blk = res["llmsim"]
    for k in LLMSIM_KEYS:
        assert k in blk, k
    assert blk["seed"] == 3
    assert isinstance(blk["version"], str) and blk["version"]
    assert 0 <= blk["mean_kv_utilization"] <= blk["max_kv_utilization"] <= 1
    assert 0 < blk["gpu_busy_fraction"] <= 1
    assert blk["preemptions"] >= 0 and blk["mean_queue_depth"] >= 0 and blk["mean_batch_size"] > 0
    assert not set(TIMING_KEYS) & set(blk)   # measured, not simulated: run.json


# --- running ----------------------------------------------------------------------
def test_run_from_another_cwd_writes_results_and_table(tmp_path, scenario, cli_subprocess):
    elsewhere = tmp_path / "somewhere" / "else"
    elsewhere.mkdir(parents=True)
    r = cli_subprocess("run", scenario, "-o", "out", "--json", cwd=elsewhere, timeout=120)
    assert r.code == 0, r.err
    assert "Traceback" not in r.err
    printed = json.loads(r.out)
    out = elsewhere / "out"
    on_disk = json.loads((out / "results.json").read_text())
    assert printed == on_disk
    timing = json.loads((out / "run.json").read_text())
    assert timing["wall_time_s"] > 0 and timing["sim_requests_per_wall_s"] > 0
    check_results(json.loads((out / "results.json").read_text()), 300)
    tables = sorted(p.name for p in out.iterdir() if p.stem == "requests")
    assert tables in (["requests.parquet"], ["requests.csv"])
    # No temporary folder left beside the output.
    assert [p.name for p in elsewhere.iterdir()] == ["out"]
    if tables == ["requests.parquet"]:
        pq = pytest.importorskip("pyarrow.parquet")
        t = pq.read_table(out / "requests.parquet")
        assert t.num_rows == 300
        for col in ("id", "arrival", "admitted", "first_token", "finish", "status", "ttft_ms", "e2el_ms"):
            assert col in t.column_names
        assert set(t.column("status").to_pylist()) == {"finished"}


def test_relative_scenario_path_resolves_against_cwd(tmp_path, cli_subprocess):
    write(tmp_path / "sc.yaml", SCENARIO.replace("num_requests: 300", "num_requests: 20"))
    r = cli_subprocess("run", "sc.yaml", "--json", cwd=tmp_path)
    assert r.code == 0, r.err
    assert json.loads(r.out)["completed"] == 20


def test_set_overrides_change_the_run(scenario, cli):
    base = cli("run", scenario, "--json").json()
    two = cli("run", scenario, "--json", "--set", "pools.main.replicas=2").json()
    tp2 = cli("run", scenario, "--json", "--set", "pools.0.tp=2").json()
    assert base["llmsim"]["replicas"] == 1 and base["llmsim"]["gpus"] == 1
    assert two["llmsim"]["replicas"] == 2 and two["llmsim"]["gpus"] == 2
    assert tp2["llmsim"]["replicas"] == 1 and tp2["llmsim"]["gpus"] == 2
    # Same traffic (same seed), different fleets: faster service.
    assert two["total_input_tokens"] == base["total_input_tokens"] == tp2["total_input_tokens"]
    assert two["mean_ttft_ms"] < base["mean_ttft_ms"]
    assert tp2["mean_tpot_ms"] < base["mean_tpot_ms"]
    assert tp2["llmsim"]["kv_blocks_per_replica"] > base["llmsim"]["kv_blocks_per_replica"]


def test_no_slo_means_no_goodput(tmp_path, cli):
    p = write(tmp_path / "noslo.yaml", SCENARIO.split("slo:")[0].replace("num_requests: 300", "num_requests: 30"))
    res = cli("run", p, "--json").json()
    assert res["request_goodput"] is None
    assert "slo" not in res


def test_reference_engine_from_the_cli_agrees(tmp_path, cli):
    p = write(tmp_path / "tiny.yaml", SCENARIO.replace("num_requests: 300", "num_requests: 40"))
    fast = cli("run", p, "--json").json()
    ref = cli("run", p, "--json", "--engine", "reference").json()
    assert ref["llmsim"]["engine"] == "reference"
    for k in ("completed", "total_output_tokens", "mean_ttft_ms", "p99_e2el_ms", "mean_itl_ms"):
        assert fast[k] == pytest.approx(ref[k], rel=1e-7), k


def test_schema_is_valid_json_schema(cli, scenario):
    r = cli("schema")
    assert r.code == 0, r.err
    schema = json.loads(r.out)
    assert schema["type"] == "object"
    assert {"name", "workload", "pools"} <= set(schema["properties"])
    assert set(schema["required"]) >= {"name", "workload", "pools"}
    jsonschema = pytest.importorskip("jsonschema")
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    # The schema accepts a good scenario and rejects a typo, like the loader.
    import yaml
    data = yaml.safe_load(SCENARIO)
    cls(schema).validate(data)
    data["pools"][0]["engine"]["max_num_seq"] = 4
    assert not cls(schema).is_valid(data)


# --- bad input ------------------------------------------------------------------------
def _edit(old: str, new: str):
    def f(text: str) -> str:
        assert old in text, old
        return text.replace(old, new, 1)
    return f


# (id, how to change the scenario text, extra CLI args, fragments the message must contain)
BAD = [
    ("negative-rate", _edit("rate_per_s: 12", "rate_per_s: -3"), [], ["workload.arrival.rate_per_s", "greater than 0"]),
    ("zero-replicas", _edit("replicas: 1", "replicas: 0"), [], ["pools[0].replicas", "greater than or equal to 1"]),
    ("engine-key-typo", _edit("max_num_seqs: 32", "max_num_seq: 32"), [],
     ["pools[0].engine.max_num_seq", "unknown key"]),
    ("unknown-top-level-key", lambda t: t + "replica_count: 3\n", [], ["replica_count", "unknown key"]),
    ("input-above-context", _edit("input_tokens: {dist: uniform, min: 16, max: 1500}",
                                  "input_tokens: {dist: fixed, value: 9000}"), [],
     ["workload.input_tokens", "8192", "context"]),
    ("model-does-not-fit", lambda t: t.replace("model: llama-3-8b", "model: llama-3-70b")
     .replace("gpu: h100-sxm", "gpu: a100-sxm-40gb"), [], ["pools[0]", "llama-3-70b", "does not fit", "a100-sxm-40gb"]),
    ("unknown-gpu", _edit("gpu: h100-sxm", "gpu: h900-sxm"), [], ["pools[0].gpu", "h900-sxm", "h100-sxm"]),
    ("unknown-router", _edit("router: round_robin", "router: fastest"), [],
     ["pools[0].router", "fastest", "round_robin"]),
    ("malformed-yaml", _edit("arrival: {type: poisson, rate_per_s: 12}", "arrival: {type: poisson, rate_per_s: 12"), [],
     ["invalid YAML", "line"]),
    ("set-unknown-item", None, ["--set", "pools.chat.replicas=2"], ["pools.chat", "no item named 'chat'", "main"]),
    ("set-bad-value", None, ["--set", "pools.main.replicas=-1"], ["pools[0].replicas", "--set pools.main.replicas=-1"]),
    ("bad-slo-key", _edit("tpot_ms: 80", "tpot_msec: 80"), [], ["slo.tpot_msec", "unknown SLO key"]),
    ("negative-seed", _edit("seed: 3", "seed: -3"), [], ["seed", "greater than or equal to 0"]),
    ("budget-below-batch", _edit("max_num_seqs: 32, max_num_batched_tokens: 1024",
                                 "max_num_seqs: 32, max_num_batched_tokens: 8"), [],
     ["pools[0].engine", "max_num_batched_tokens"]),
    ("tp-not-dividing-heads", _edit("replicas: 1", "replicas: 1\n    tp: 3"), [], ["pools[0].tp", "tp=3"]),
    ("min-above-max", _edit("min: 16, max: 1500", "min: 1500, max: 16"), [], ["workload.input_tokens", "min"]),
    ("empty-file", lambda t: "", [], ["expected a mapping"]),
]


def _check_bad(r, path: Path, out: Path, fragments) -> None:
    assert r.code == 2, f"exit {r.code}\nstdout:\n{r.out}\nstderr:\n{r.err}"
    assert "Traceback" not in r.err, r.err
    msg = r.err.strip()
    assert msg.startswith("error:"), msg
    assert str(path) in msg, f"message does not name the file: {msg}"
    for frag in fragments:
        assert frag in msg, f"{frag!r} missing from: {msg}"
    assert not out.exists(), "an output folder was created for a failed run"
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name], "something was left behind"
    assert r.out == ""


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_input_is_one_clear_error(case, tmp_path, cli):
    """In-process (fast): an exception other than LlmsimError would escape
    ``main`` and fail the test just as it would print a traceback."""
    name, change, extra, fragments = case
    path = write(tmp_path / "bad.yaml", change(SCENARIO) if change else SCENARIO)
    out = tmp_path / "results"
    _check_bad(cli("run", path, "-o", out, *extra), path, out, fragments)


REAL_PROCESS = ("engine-key-typo", "model-does-not-fit", "malformed-yaml")


@pytest.mark.parametrize("case", [c for c in BAD if c[0] in REAL_PROCESS], ids=lambda c: c[0])
def test_bad_input_in_a_real_process(case, tmp_path, cli_subprocess):
    """What a user at a terminal sees: exit code 2, one line, no traceback."""
    name, change, extra, fragments = case
    path = write(tmp_path / "bad.yaml", change(SCENARIO) if change else SCENARIO)
    out = tmp_path / "results"
    r = cli_subprocess("run", path, "-o", out, *extra)
    _check_bad(r, path, out, fragments)
    assert len(r.err.strip().splitlines()) == 1, r.err


def test_missing_file_is_one_clear_error(tmp_path, cli_subprocess):
    missing = tmp_path / "nope" / "scenario.yaml"
    out = tmp_path / "results"
    r = cli_subprocess("run", missing, "-o", out)
    assert r.code == 2 and "Traceback" not in r.err
    assert str(missing) in r.err and "not found" in r.err
    assert not out.exists()


def test_unknown_builtin_scenario_lists_the_names(cli):
    r = cli("run", "no-such-scenario")
    assert r.code == 2
    assert "no-such-scenario" in r.err and "chatbot" in r.err


def test_bad_engine_flag(cli, scenario, tmp_path):
    r = cli("run", scenario, "--engine", "turbo", "-o", tmp_path / "o")
    assert r.code == 2 and "--engine" in r.err
    assert not (tmp_path / "o").exists()


def test_several_problems_are_listed_at_once(tmp_path, cli):
    text = SCENARIO.replace("rate_per_s: 12", "rate_per_s: -3").replace("replicas: 1", "replicas: 0")
    r = cli("run", write(tmp_path / "two.yaml", text))
    assert r.code == 2
    assert "workload.arrival.rate_per_s" in r.err and "pools[0].replicas" in r.err
    assert "two.yaml" in r.err


# --- formerly known gaps, fixed --------------------------------------------------------
def test_non_utf8_file_is_one_clear_error(tmp_path, cli):
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"\xff\xfe name: x\n")
    _check_bad(cli("run", path), path, tmp_path / "none", [])


def test_output_path_that_is_a_file_is_one_clear_error(tmp_path, scenario, cli):
    target = tmp_path / "afile"
    target.write_text("keep me")
    r = cli("run", scenario, "-o", target)
    assert r.code == 2 and "Traceback" not in r.err
    assert str(target) in r.err or "afile" in r.err
    assert target.read_text() == "keep me"


def test_set_a_router_setting_on_a_router_given_by_name():
    from simulator.scenario.overrides import apply_override

    data = {"pools": [{"name": "main", "router": "prefix_aware"}]}
    apply_override(data, "pools.main.router.load_weight=64")
    assert data["pools"][0]["router"] == {"type": "prefix_aware", "load_weight": 64}


def test_trace_block_ids_must_be_whole_kv_blocks(tmp_path, cli):
    """Mooncake ids stand for 512 tokens: a 24-token KV block cannot hold
    them, and the run says so before simulating, naming the key."""
    (tmp_path / "t.jsonl").write_text(
        '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n')
    p = write(tmp_path / "sc.yaml", "name: t\nworkload:\n  arrival: {type: trace, path: t.jsonl}\n"
                                    "pools: [{model: llama-3-8b, gpu: h100-sxm, engine: {block_size: 24}}]\n")
    r = cli("run", p)
    assert r.code == 2 and "Traceback" not in r.err
    assert "pools[0].engine.block_size" in r.err and "512" in r.err
    assert cli("run", p, "--set", "pools.0.engine.prefix_cache=false").code == 0


def test_synthetic_block_ids_follow_vllm_034s_64_token_blocks(tmp_path, cli):
    """vLLM 0.34.0 keeps 64-token KV blocks, and a system prompt's synthetic ids stand for
    workload.block_tokens: unset, it follows the blocks (64) and the scenario runs; set to 16, the
    refusal names that key, and a multiple of 64 runs."""
    p = write(tmp_path / "sc.yaml",
              "name: t\nworkload:\n  num_requests: 4\n  arrival: {type: poisson, rate_per_s: 10}\n"
              "  input_tokens: {dist: fixed, value: 200}\n  output_tokens: {dist: fixed, value: 4}\n"
              "  system_prompt: {apps: 1, tokens: {dist: fixed, value: 256}}\n"
              "pools: [{model: llama-3.2-1b, gpu: h100-sxm, engine: {backend: vllm, backend_version: 0.34.0, "
              "kv_memory: {cuda_graph_gib: 1.0}}}]\n")
    assert cli("run", p).code == 0
    r = cli("run", p, "--set", "workload.block_tokens=16")
    assert r.code == 2 and "Traceback" not in r.err and len(r.err.strip().splitlines()) == 1, r.err
    assert f"{p} (with --set workload.block_tokens=16): workload.block_tokens: 16 tokens per prompt block id are " \
           "not a whole number of the 64-token KV blocks of pool 'main'" in r.err and "multiple of 64" in r.err
    assert cli("run", p, "--set", "workload.block_tokens=128").code == 0
