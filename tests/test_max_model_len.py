"""``engine.max_model_len``: the longest request a server takes, and vLLM's
refusal to start when one request of it does not fit an attention rank's KV
pool (v1/core/kv_cache_utils.py ``check_enough_kv_cache_memory``). gpt-oss-120b
on one H100 at vLLM's defaults leaves it 0.56 GB of KV (of the 79.22 GiB CUDA
reports, beside the 65.5 GiB its Triton MoE kernels hold the MXFP4 experts and
their fp32 biases in), 944 blocks, of which its sliding-window layers may hold a
window and a budget of tokens in flight (kv_cache_interface.py
SlidingWindowSpec.max_memory_usage_bytes): 7,536 tokens, short of its 131,072-token context. The server does not start,
and a plan must not buy it."""
from __future__ import annotations

import json

import pytest

from simulator.memory import context_room, does_not_fit, plan_memory
from simulator.kv_memory import KvMemory
from simulator.profiles import load_hardware, load_model
from simulator.validation.deployment import engine_keys
from workloads.request import Status

SCENARIO = """\
name: goss
workload:
  arrival: {{type: poisson, rate_per_s: 2}}
  duration_s: 5
  input_tokens: {{dist: fixed, value: {isl}}}
  output_tokens: {{dist: fixed, value: 100}}
pools:
  - name: main
    model: gpt-oss-120b
    gpu: h100-sxm
    tp: 1
    replicas: 1
    engine: {{backend: {backend}{extra}}}
"""


def _scenario(tmp_path, backend: str = "vllm", extra: str = "", isl: int = 1000):
    p = tmp_path / "goss.yaml"
    p.write_text(SCENARIO.format(backend=backend, extra=extra, isl=isl))
    return p


def test_vllm_refuses_a_pool_that_holds_no_request_of_its_context(cli, tmp_path):
    r = cli("run", _scenario(tmp_path), "--no-plots", "-o", tmp_path / "out")
    assert r.code == 2 and "Traceback" not in r.err
    assert "pools[0].engine.max_model_len" in r.err and "131,072-token context does not fit on 1× h100-sxm" in r.err
    assert "at most 7,536" in " ".join(r.err.split())
    assert not (tmp_path / "out").exists()


def test_a_max_model_len_the_pool_holds_runs(cli, tmp_path):
    r = cli("run", _scenario(tmp_path, extra=", max_model_len: 4096"), "--no-plots", "-o", tmp_path / "out")
    assert r.code == 0, r.err
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert res["completed"] > 0 and res["failed"] == 0


def test_the_pool_vllm_refuses_is_one_held_one_token_short():
    """The check is in blocks of one attention rank, the request's sliding-window layers' taken from the
    same pool, a window and the tokens in flight (cdiv(127 + 8,192, 16) + 1 = 521 blocks; from 0.26 under
    async scheduling two budgets in flight, 1,033): the largest max_model_len the refusal names runs."""
    model, gpu = load_model("gpt-oss-120b"), load_hardware("h100-sxm")
    vllm = KvMemory(rule="vllm")
    mem = plan_memory(model, gpu, 1, "mxfp4", "bf16", 0.9, 8192, 1024, 16, kv_memory=vllm)
    for in_flight, windows in ((8192, 521), (2 * 8192, 1033)):
        assert mem.windows.request_bound(in_flight, 10**6) == windows
        held = (mem.num_blocks - windows) * mem.block_size
        assert context_room(mem, vllm, model, gpu.name, 1, held, in_flight) is None
        why = context_room(mem, vllm, model, gpu.name, 1, held + 1, in_flight)
        assert why is not None and does_not_fit(why)       # a plan's infeasible candidate, not bad input
        assert f"at most {held:,}" in why
    assert context_room(mem, None, model, gpu.name, 1, held + 1, 8192) is None     # llmsim's generic engine starts
    for rule in ("sglang", "trtllm"):   # they cap a prompt at the pool instead of refusing to start
        other = plan_memory(model, gpu, 2, "mxfp4", "bf16", 0.9, 8192, 1024, 16, kv_memory=KvMemory(rule=rule))
        assert context_room(other, KvMemory(rule=rule), model, gpu.name, 2, 10**9, 8192) is None


def test_tensor_parallel_gpus_hold_the_context(cli, tmp_path):
    """The same model on two H100s holds 131,072 tokens, so vLLM starts without a max_model_len."""
    p = _scenario(tmp_path)
    r = cli("run", p, "--set", "pools.main.tp=2", "--no-plots", "-o", tmp_path / "out")
    assert r.code == 0, r.err


def test_max_model_len_past_the_models_context_is_refused(cli, tmp_path):
    r = cli("run", _scenario(tmp_path, extra=", max_model_len: 200000"), "--no-plots", "-o", tmp_path / "out")
    assert r.code == 2 and "pools[0].engine.max_model_len" in r.err and "context of 131,072" in r.err


def test_a_workload_longer_than_max_model_len_is_refused_at_load(cli, tmp_path):
    r = cli("run", _scenario(tmp_path, extra=", max_model_len: 4096", isl=4000), "--no-plots", "-o", tmp_path / "out")
    assert r.code == 2 and "workload.input_tokens" in r.err and "engine.max_model_len (pool 'main') of 4096" in r.err
    assert "''s" not in r.err, r.err         # "pool 'main''s engine.max_model_len"


def test_requests_longer_than_max_model_len_are_rejected_on_arrival(tmp_path):
    """An unbounded length draw past the server's limit is rejected as the server rejects it (HTTP 400)."""
    from simulator.runner import simulate

    text = SCENARIO.format(backend="sglang", extra=", max_model_len: 2048", isl=1000).replace(
        "input_tokens: {dist: fixed, value: 1000}", "input_tokens: {dist: lognormal, mean: 1500, std: 1500}")
    text = text.replace("tp: 1", "tp: 2")
    p = tmp_path / "long.yaml"
    p.write_text(text)
    out = simulate(p)
    reqs = out.requests
    long = [r for r in reqs if r.input_tokens + r.output_tokens > 2048]
    assert long and all(r.status == Status.REJECTED for r in long)
    assert all(r.status == Status.FINISHED for r in reqs if r.input_tokens + r.output_tokens <= 2048)


def test_aiconfigurators_vllm_launch_sets_max_model_len():
    """Its rule launches vLLM with --max-model-len ISL + OSL + 1,500 (generator/rule_plugin/vllm.rule)."""
    assert engine_keys("aiconfigurator", "vllm", 8, 1024, osl=1024)["max_model_len"] == 3548
    assert "max_model_len" not in engine_keys("aiconfigurator", "sglang", 8, 1024, osl=1024)
    assert "max_model_len" not in engine_keys("aic-eval", "vllm", 8, 1024, osl=1024)


def test_estimate_says_vllm_would_not_start(cli):
    r = cli("estimate", "request", "--gpu", "h100-sxm", "--model", "gpt-oss-120b", "--input", "1000", "--output", "100",
            "--backend", "vllm", "--json")
    assert r.code == 0
    assert any("vLLM refuses to start" in w for w in r.json()["warnings"])
    ok = cli("estimate", "request", "--gpu", "h100-sxm", "--model", "gpt-oss-120b", "--tp", "2", "--input", "1000",
             "--output", "100", "--backend", "vllm", "--json")
    assert "warnings" not in ok.json()



def test_vllm_checks_the_pool_it_measured_before_num_gpu_blocks_override(cli, tmp_path):
    """vLLM to 0.20.0 checks the profiled pool, then the override applies (kv_cache_utils.py
    get_kv_cache_configs): a small override still starts, a large one does not rescue a short pool."""
    small = cli("run", _scenario(tmp_path, extra=", max_model_len: 4096, num_gpu_blocks_override: 100"),
                "--no-plots", "-o", tmp_path / "a")
    assert small.code in (0, 1) and "does not fit" not in small.err, small.err
    big = cli("run", _scenario(tmp_path, extra=", max_model_len: 80000, num_gpu_blocks_override: 100000"),
              "--no-plots", "-o", tmp_path / "b")
    assert big.code == 2 and "80,000-token context does not fit" in big.err


@pytest.mark.parametrize("release, utilization", [("0.20.1", 0.92), ("0.26.0", 0.86)])
def test_vllm_checks_the_pool_num_gpu_blocks_override_gives(cli, tmp_path, release, utilization):
    """From 0.20.1 get_kv_cache_configs turns the override into the available memory before the check,
    so 100 blocks with a 4,096-token max_model_len do not start and 10,000 start an 80,000-token context
    the measured pool does not hold (23,792 tokens on 0.20.1, 12,704 on 0.26.0 at 86 % of the GPU),
    where 0.20.0 started the first and refused the second."""
    stated = (f", backend_version: '{release}', kv_memory: {{cuda_graph_gib: 1.0}}, "
              f"gpu_memory_utilization: {utilization}")
    small = cli("run", _scenario(tmp_path, extra=stated + ", max_model_len: 4096, num_gpu_blocks_override: 100"),
                "--no-plots", "-o", tmp_path / "a")
    assert small.code == 2 and "pools[0].engine.max_model_len" in small.err
    said = " ".join(small.err.split())
    assert "4,096-token context does not fit" in said and "at most 784" in said
    assert "raise engine.num_gpu_blocks_override" in said and "gpu_memory_utilization" not in said
    big = cli("run", _scenario(tmp_path, extra=stated + ", max_model_len: 80000, num_gpu_blocks_override: 10000"),
              "--no-plots", "-o", tmp_path / "b")
    assert big.code in (0, 1) and "does not fit" not in big.err, big.err
    measured = cli("run", _scenario(tmp_path, extra=stated + ", max_model_len: 80000"), "--no-plots",
                   "-o", tmp_path / "c")
    assert measured.code == 2 and "80,000-token context does not fit" in measured.err


@pytest.mark.parametrize("release, starts", [("0.28.0", True), ("0.29.0", False)])
def test_vllm_holds_the_null_block_back_from_its_start_up_check_from_0_29_0(cli, tmp_path, release, starts):
    """From 0.29.0 get_kv_cache_configs takes one block off the memory it checks ('Reserve the null block
    BlockPool permanently holds back'): Llama-3.1-8B on 100 overridden blocks of 16 tokens starts a
    1,600-token max_model_len on 0.28.0 and is refused it on 0.29.0, which starts 1,584."""
    stated = f", backend_version: '{release}', kv_memory: {{cuda_graph_gib: 1.0}}, num_gpu_blocks_override: 100"

    def run(max_model_len: int, out: str):
        p = tmp_path / f"{out}.yaml"
        p.write_text(SCENARIO.format(backend="vllm", extra=f"{stated}, max_model_len: {max_model_len}", isl=1000)
                     .replace("gpt-oss-120b", "llama-3.1-8b"))
        return cli("run", p, "--no-plots", "-o", tmp_path / out)

    whole = run(1600, "whole")
    said = " ".join(whole.err.split())
    if starts:
        assert whole.code in (0, 1) and "does not fit" not in said, said
    else:
        assert whole.code == 2 and "pools[0].engine.max_model_len" in said and "at most 1,584" in said
        assert "null block" in said
    shorter = run(1584, "shorter")
    assert shorter.code in (0, 1) and "does not fit" not in shorter.err, shorter.err


def test_requests_past_max_model_len_are_not_load_turned_away(tmp_path):
    """Rejected as the stack rejects bad input, they are counted apart from shed: an idle fleet read
    OVERLOADED ("it shed 7.7 % of the requests") and exited 1."""
    from simulator.runner import simulate

    text = SCENARIO.format(backend="sglang", extra=", max_model_len: 2048", isl=1000).replace(
        "input_tokens: {dist: fixed, value: 1000}", "input_tokens: {dist: lognormal, mean: 1500, std: 1500}")
    p = tmp_path / "long.yaml"
    p.write_text(text.replace("tp: 1", "tp: 2"))
    load = simulate(p).results["llmsim"]["load"]
    assert load["too_long"] > 0 and load["shed"] == 0 and not load["overloaded"]
    assert "longer than the server takes" in load["verdict"]
