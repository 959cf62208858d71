"""Token budgets without chunked prefill, as each stack takes them.

vLLM refuses to start on a ``max_num_batched_tokens`` below ``max_model_len`` when it does not chunk
prompts (no longer prompt could ever be scheduled), and raises a budget the launch leaves unset to the
longest request (config/scheduler.py ``verify_max_model_len``,
engine/arg_utils.py). TensorRT-LLM answers a prompt longer than ``max_num_tokens`` with an error
unless ``enable_chunked_prefill`` (llmapi/llm.py ``_check_arguments``); a generation-only request,
prefilled on another server, is not checked.
"""
from __future__ import annotations

import pytest

from simulator.scenario.load import load_scenario
from workloads.request import Status

SCENARIO = """\
name: budgets
workload:
  arrival: {{type: poisson, rate_per_s: 4}}
  duration_s: 10
  input_tokens: {input}
  output_tokens: {{dist: fixed, value: 20}}
pools:
  - name: main
    model: llama-3.1-8b
    gpu: h100-sxm
    engine: {{backend: {backend}{extra}}}
"""
UNBOUNDED = "{dist: lognormal, mean: 3000, std: 3000}"


def _write(tmp_path, backend: str, extra: str = "", input: str = "{dist: fixed, value: 1000}"):
    p = tmp_path / f"{backend}.yaml"
    p.write_text(SCENARIO.format(backend=backend, extra=extra, input=input))
    return p


def test_vllm_refuses_an_unchunked_budget_below_the_context(cli, tmp_path):
    r = cli("run", _write(tmp_path, "vllm", ", chunked_prefill: false, max_num_batched_tokens: 4096"),
            "--no-plots", "-o", tmp_path / "out")
    said = " ".join(r.err.split())
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    assert "pools[0].engine.max_num_batched_tokens" in said and "(131,072: llama-3.1-8b's context)" in said
    assert "'max_num_batched_tokens (4096) is smaller than max_model_len (131072)'" in said
    assert not (tmp_path / "out").exists()
    # what the message offers runs: a max_model_len within the budget, or chunking
    for extra in (", chunked_prefill: false, max_num_batched_tokens: 4096, max_model_len: 4096",
                  ", chunked_prefill: true, max_num_batched_tokens: 4096"):
        ok = cli("run", _write(tmp_path, "vllm", extra), "--no-plots", "-o", tmp_path / "ok", "--overwrite")
        assert ok.code == 0, ok.err


@pytest.mark.parametrize("backend, extra, budget", [("sglang", ", chunked_prefill: false", 16384),
                                                    ("sglang", "", 8192),
                                                    ("sglang", ", chunked_prefill: false, max_num_batched_tokens: 4096",
                                                     4096)])
def test_sglang_takes_its_prefill_cap_for_an_unset_unchunked_budget(tmp_path, backend, extra, budget):
    """--chunked-prefill-size -1: SGLang's prefill batch is capped by --max-prefill-tokens (16,384), not
    by the chunk its GPU would take (8,192 on an H100)."""
    sc, _ = load_scenario(_write(tmp_path, backend, extra))
    assert sc.pools[0].engine.max_num_batched_tokens == budget


@pytest.mark.parametrize("extra, budget", [(", chunked_prefill: false", 131072),
                                           (", chunked_prefill: false, max_model_len: 20000", 20000),
                                           (", chunked_prefill: false, max_model_len: 4000", 8192),
                                           ("", 8192)])
def test_vllm_takes_the_context_for_an_unset_unchunked_budget(tmp_path, extra, budget):
    """max(max_model_len, the default: 8,192 on an H100); chunked, the default stands."""
    sc, _ = load_scenario(_write(tmp_path, "vllm", extra))
    assert sc.pools[0].engine.max_num_batched_tokens == budget


def test_trtllm_answers_an_unchunked_prompt_over_max_num_tokens_with_an_error(tmp_path):
    from simulator.runner import simulate

    out = simulate(_write(tmp_path, "trtllm", ", max_num_batched_tokens: 4096", UNBOUNDED))
    long = [r for r in out.requests if r.input_tokens > 4096]
    short = [r for r in out.requests if r.input_tokens <= 4096]
    assert long and short
    assert all(r.status == Status.REJECTED for r in long)
    assert all(r.status == Status.FINISHED for r in short)
    # a configuration that answers part of the traffic with errors fails the run (plans skip it), as
    # stranded requests do; they are neither shed nor too long for the model
    load = out.results["llmsim"]["load"]
    assert load["over_budget"] == len(long) and load["shed"] == load["too_long"] == 0 and load["overloaded"]
    assert f"{len(long):,} requests" in load["verdict"] and "answered with an error" in load["verdict"]
    # chunked, TensorRT-LLM takes them; the generic engine runs a long prompt alone
    for backend, extra in (("trtllm", ", max_num_batched_tokens: 4096, chunked_prefill: true"),
                           ("vllm", ", max_num_batched_tokens: 4096")):
        out = simulate(_write(tmp_path, backend, extra, UNBOUNDED))
        assert all(r.status == Status.FINISHED for r in out.requests), backend


def test_trtllm_refuses_a_bounded_workload_whose_prompts_outgrow_its_budget(cli, tmp_path):
    r = cli("run", _write(tmp_path, "trtllm", ", max_num_batched_tokens: 2048",
                          "{dist: uniform, min: 1000, max: 3000}"), "--no-plots", "-o", tmp_path / "out")
    said = " ".join(r.err.split())
    assert r.code == 2 and "workload.input_tokens" in said and "token budget of 2048" in said, r.err
    assert "''s" not in said, said         # "pool 'chat''s token budget"


def test_a_trtllm_generation_server_takes_prompts_prefilled_elsewhere(tmp_path):
    """The check skips generation-only requests: a decode pool's legs carry prompts past its budget."""
    from simulator.runner import simulate

    p = tmp_path / "pd.yaml"
    p.write_text(SCENARIO.format(backend="trtllm", extra=", chunked_prefill: true", input="{dist: fixed, value: 6000}")
                 .replace("    engine:", "    disaggregation: {decode_pool: gen}\n    engine:")
                 .replace("pools:\n", "classes: [{name: all, pool: main}]\npools:\n")
                 + "  - name: gen\n    model: llama-3.1-8b\n    gpu: h100-sxm\n"
                   "    engine: {backend: trtllm, max_num_batched_tokens: 4096}\n")
    out = simulate(p)
    assert out.requests and all(r.status == Status.FINISHED for r in out.requests)


def test_estimate_refuses_the_prompt_trtllm_answers_with_an_error(cli):
    """A run refuses a prompt past a TensorRT-LLM pool's budget without chunked prefill: the estimate
    refuses it in the run's words, rather than pricing a prefill the server never runs."""
    args = ("estimate", "request", "--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--input", "20000", "--output", "100",
            "--backend", "trtllm", "--json")
    r = cli(*args)
    assert r.code == 2 and r.out == "" and "Traceback" not in r.err, r.err
    assert " ".join(r.err.split()) == (
        "error: --input: input (20000) tokens can exceed the token budget of 8192 (--max-num-batched-tokens), and "
        "trtllm without chunked prefill answers a longer prompt with an error; raise --max-num-batched-tokens or "
        "shorten the prompt")
    assert cli(*args, "--max-num-batched-tokens", "20000").code == 0
    assert cli(*args[:-3], "--backend", "vllm", "--json").code == 0


@pytest.mark.parametrize("version, refused", [("0.10.0", True), ("0.11.0", True), ("0.11.1", False)])
def test_vllm_before_0_11_1_chunks_every_prompt(cli, tmp_path, version, refused):
    """vLLM 0.10.0-0.11.0 set enable_chunked_prefill = True for every generation model whatever the launch
    said (engine/arg_utils.py _set_default_args_v1 / _set_default_args: 'V1 always uses chunked prefills'):
    such a server neither refuses a budget below the context nor runs a prompt whole, so an unchunked pool of
    those releases is refused on engine.chunked_prefill, not on the budget; 0.11.1 takes the flag."""
    extra = f", backend_version: '{version}', chunked_prefill: false, max_num_batched_tokens: 4096"
    r = cli("run", _write(tmp_path, "vllm", extra), "--no-plots", "-o", tmp_path / "out")
    said = " ".join(r.err.split())
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    if refused:
        assert "pools[0].engine.chunked_prefill" in said and f"vllm {version} chunks every prompt" in said, said
        ok = cli("run", _write(tmp_path, "vllm", extra.replace("false", "true")), "--no-plots", "-o", tmp_path / "ok")
        assert ok.code == 0, ok.err
    else:
        assert "pools[0].engine.max_num_batched_tokens" in said, said


def test_trtllm_refuses_a_system_prompt_that_takes_prompts_past_its_budget(cli, tmp_path):
    """The prompt TensorRT-LLM checks is the whole prompt, system prompt and all, as the context check
    counts it: 2,000 + 3,000 tokens outgrow a 4,096-token budget at load, not in a run of errors."""
    p = _write(tmp_path, "trtllm", ", max_num_batched_tokens: 4096", "{dist: fixed, value: 3000}")
    p.write_text(p.read_text().replace("pools:", "  system_prompt: {apps: 1, tokens: {dist: fixed, value: 2000}}\npools:"))
    r = cli("run", p, "--no-plots", "-o", tmp_path / "out")
    said = " ".join(r.err.split())
    assert r.code == 2 and "workload.system_prompt.tokens" in said and "token budget of 4096" in said, r.err
    p.write_text(p.read_text().replace("value: 2000", "value: 1000"))
    assert cli("run", p, "--no-plots", "-o", tmp_path / "ok").code == 0


def test_a_decode_pool_serving_a_class_of_its_own_counts_its_errors_over_budget(tmp_path):
    """A pool that decodes for a prefill pool and serves a class directly: its direct prompts past its
    budget end in errors (over_budget, failing the run), not as load shed; its decode legs, recorded
    under the prefill pool the class routes to, pass."""
    from simulator.runner import simulate

    p = tmp_path / "pd.yaml"
    p.write_text(SCENARIO.format(backend="trtllm", extra=", chunked_prefill: true", input=UNBOUNDED)
                 .replace("rate_per_s: 4", "rate_per_s: 6")
                 .replace("    engine:", "    disaggregation: {decode_pool: gen}\n    engine:")
                 .replace("pools:\n", "classes: [{name: a, pool: main, share: 0.5}, {name: b, pool: gen, share: 0.5}]"
                                      "\npools:\n")
                 + "  - name: gen\n    model: llama-3.1-8b\n    gpu: h100-sxm\n"
                   "    engine: {backend: trtllm, max_num_batched_tokens: 4096}\n")
    out = simulate(p)
    long = [r for r in out.requests if r.klass == "b" and r.input_tokens > 4096]
    assert long and all(r.status == Status.REJECTED for r in long)
    assert all(r.status == Status.FINISHED for r in out.requests if r.klass == "a")
    load = out.results["llmsim"]["load"]
    assert load["over_budget"] == len(long) and load["shed"] == 0 and load["overloaded"]


def test_vllm_mixes_whole_prompts_with_decodes_without_chunking(tmp_path):
    """V1 schedules the running decodes first and then whole waiting prompts in the same iteration
    (Scheduler.schedule breaks at the first prompt past the budget left): never V0's prefill-only
    iterations. A pool's own mixed_prefill: false (TGI's prefill batches) stays."""
    sc, _ = load_scenario(_write(tmp_path, "vllm", ", chunked_prefill: false"))
    assert sc.pools[0].engine.mixes_prefill and not sc.pools[0].engine.chunked_prefill
    sc, _ = load_scenario(_write(tmp_path, "vllm", ", chunked_prefill: false, mixed_prefill: false"))
    assert not sc.pools[0].engine.mixes_prefill
