"""SGLang and TensorRT-LLM serve a request longer than a rank's KV pool with its output cut to the pool.

SGLang's scheduler caps ``max_new_tokens`` at ``max_req_len - prompt - 1``, where ``max_req_len =
min(context_len - 1, max_total_num_tokens - 1)`` (scheduler.py), and answers only a prompt of
``max_req_len - 5`` tokens or more with an error (``validate_input_length``). TensorRT-LLM's KV cache
manager lowers ``max_seq_len`` to the pool's tokens and its worker cuts ``max_tokens`` to
``max_seq_len - prompt`` (``_deduce_max_tokens``), answering only a prompt that leaves no token with an
error. llmsim had rejected every such request on arrival as not fitting the pool.
"""
from __future__ import annotations

import json

import pandas as pd
import pytest

SCENARIO = """\
name: clip
workload:
  arrival: {{type: poisson, rate_per_s: 2}}
  num_requests: 6
  input_tokens: {{dist: fixed, value: {prompt}}}
  output_tokens: {{dist: fixed, value: 2000}}
pools:
  - name: main
    model: llama-3.1-8b
    gpu: h100-sxm
    dp: {dp}
    engine: {{backend: {backend}, kv_memory: {{max_tokens: 4096}}{extra}}}
"""


def _run(cli, tmp_path, engine: str, prompt: int = 3000, backend: str = "sglang", dp: int = 1, extra: str = ""):
    p = tmp_path / f"{backend}-{engine}-{prompt}-{dp}{len(extra)}.yaml"
    p.write_text(SCENARIO.format(prompt=prompt, backend=backend, dp=dp, extra=extra))
    out = tmp_path / p.stem
    cli("run", p, "--no-plots", "-o", out, "--engine", engine)
    res = json.loads((out / "results.json").read_text())["llmsim"]
    return res, pd.read_parquet(out / "requests.parquet")


@pytest.mark.parametrize("engine", ["fast", "reference"])
@pytest.mark.parametrize("dp", [1, 2])
def test_sglang_serves_a_request_past_its_pool_with_the_output_cut(cli, tmp_path, engine, dp):
    """4,096 tokens a rank: max_req_len 4,095, so 3,000 prompt tokens get 1,094 output tokens."""
    res, rows = _run(cli, tmp_path, engine, dp=dp)
    assert res["request_status"]["finished"] == 6 and res["request_status"]["rejected"] == 0
    assert (rows.output_tokens == 4095 - 3000 - 1).all()
    assert res["pools"]["main"]["outputs_clipped"] == 6


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_sglang_answers_a_prompt_within_5_tokens_of_its_pool_with_an_error(cli, tmp_path, engine):
    res, rows = _run(cli, tmp_path, engine, prompt=4090)
    assert res["request_status"]["rejected"] == 6
    assert set(rows.reject_reason) == {"too_long"}
    assert res["pools"]["main"]["outputs_clipped"] == 0
    res, rows = _run(cli, tmp_path, engine, prompt=4089)      # one token shorter: served, one output token
    assert res["request_status"]["finished"] == 6 and (rows.output_tokens == 5).all()


@pytest.mark.parametrize("engine,dp", [("fast", 1), ("reference", 2)])
def test_trtllm_cuts_the_output_to_max_seq_len_lowered_to_its_pool(cli, tmp_path, engine, dp):
    """4,096 tokens a rank: max_seq_len 4,096, so 3,000 prompt tokens get 1,096 output tokens, the whole
    pool, which its GUARANTEED_NO_EVICT admission reserves."""
    res, rows = _run(cli, tmp_path, engine, backend="trtllm", dp=dp)
    assert res["request_status"]["finished"] == 6 and res["request_status"]["rejected"] == 0
    assert (rows.output_tokens == 4096 - 3000).all()
    assert res["pools"]["main"]["outputs_clipped"] == 6


def test_trtllm_answers_a_prompt_that_leaves_no_output_token_with_an_error(cli, tmp_path):
    res, rows = _run(cli, tmp_path, "fast", prompt=4096, backend="trtllm")
    assert res["request_status"]["rejected"] == 6 and set(rows.reject_reason) == {"exceeds_kv"}
    res, rows = _run(cli, tmp_path, "fast", prompt=4095, backend="trtllm")     # one token of output left
    assert res["request_status"]["finished"] == 6 and (rows.output_tokens == 1).all()


def test_a_stack_that_does_not_cut_refuses_it(cli, tmp_path):
    """clips_output: false takes a request past its pool no further: rejected on arrival, no cut counted."""
    res, rows = _run(cli, tmp_path, "fast", backend="trtllm", extra=", clips_output: false")
    assert res["request_status"]["rejected"] == 6 and "outputs_clipped" not in res["pools"]["main"]
    assert set(rows.reject_reason) == {"exceeds_kv"}


@pytest.mark.parametrize("backend, prompt, refused", [("trtllm", 3000, False), ("trtllm", 4096, False),
                                                      ("trtllm", 4097, True), ("vllm", 3000, True)])
def test_a_bounded_workload_past_max_model_len_is_refused_only_where_the_stack_would_refuse_it(backend, prompt,
                                                                                               refused):
    """TensorRT-LLM serves prompt + output past max_seq_len with the output cut (as a run of lengths drawn
    from an unbounded distribution did), so the scenario's load-time check refuses only a prompt that
    leaves no output token; it had refused 3,000 + 2,000 fixed tokens at max_model_len 4,096 on every stack.
    The executor runs max_seq_len 4,097 under its overlap scheduler (engine/request_length.py), so a
    prompt of 4,096 tokens still gets one."""
    from simulator.errors import LlmsimError
    from simulator.scenario.compile import compile_scenario
    from simulator.scenario.schema import Scenario

    sc = Scenario.model_validate({
        "name": "clip", "workload": {"arrival": {"type": "poisson", "rate_per_s": 2}, "num_requests": 2,
                                     "input_tokens": {"dist": "fixed", "value": prompt},
                                     "output_tokens": {"dist": "fixed", "value": 2000}},
        "pools": [{"name": "main", "model": "llama-3.1-8b", "gpu": "h100-sxm",
                   "engine": {"backend": backend, "max_model_len": 4096}}]})
    if refused:
        with pytest.raises(LlmsimError) as e:
            compile_scenario(sc)
        assert e.value.key_path == "workload.input_tokens" and "4096" in e.value.message
    else:
        compile_scenario(sc)


@pytest.mark.parametrize("backend, served", [("trtllm", 4096 - 3000), ("sglang", None)])
def test_a_disaggregated_decode_pools_cut_is_the_output_the_client_receives(backend, served):
    """A decode pool that cuts the output to its pool (4,096 tokens) counted the cut, but the client's
    request kept its 2,000 output tokens: TPOT and output throughput were read over tokens never
    decoded (TensorRT-LLM: TPOT 3.9 ms for 7.1)."""
    from simulator.runner import simulate
    from simulator.scenario.schema import Scenario

    pool = {"model": "llama-3.1-8b", "gpu": "h100-sxm"}
    sc = Scenario.model_validate({
        "name": "pd", "classes": [{"name": "all", "pool": "pre"}],
        "workload": {"arrival": {"type": "poisson", "rate_per_s": 2}, "num_requests": 2,
                     "input_tokens": {"dist": "fixed", "value": 3000},
                     "output_tokens": {"dist": "fixed", "value": 2000}},
        "pools": [{"name": "pre", **pool, "engine": {"backend": backend},
                   "disaggregation": {"decode_pool": "dec", "link": {"preset": "nvlink"}}},
                  {"name": "dec", **pool, "engine": {"backend": backend, "kv_memory": {"max_tokens": 4096}}}]})
    out = simulate(sc)
    assert out.results["llmsim"]["pools"]["dec"]["outputs_clipped"] == 2
    (tokens,) = {r.output_tokens for r in out.requests}
    assert tokens < 2000 and tokens == (served or tokens)
