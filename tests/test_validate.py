"""``llmsim validate``: replay measured rows, report signed errors, fit a stack's overheads."""
from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import LlmsimError
from simulator.scenario.schema import PoolSpec
from simulator.validation.fit import fit
from simulator.validation.replay import ReplaySettings, predict
from simulator.validation.rows import Row

# Small configurations: a 1B model on one H100, short prompts, so each replay takes milliseconds.
CONFIGS = [("vllm", 1, 512, 64, 2), ("vllm", 1, 1024, 48, 32), ("sglang", 1, 512, 64, 4),
           ("sglang", 1, 2048, 32, 24), ("trtllm", 1, 512, 48, 16), ("trtllm", 1, 1024, 64, 3)]


def _rows(settings: ReplaySettings) -> list[Row]:
    """Rows whose 'measurements' are llmsim's own predictions under ``settings``."""
    rows = []
    for i, (stack, tp, isl, osl, c) in enumerate(CONFIGS):
        r = Row(f"r{i}", stack, "llama-3.2-1b", "h100-sxm", tp, "bf16", "bf16", isl, osl, concurrency=c,
                measured={"ttft_mean_ms": 1.0, "tpot_mean_ms": 1.0, "throughput_output_tok_s": 1.0})
        r.measured = predict(r, settings)
        rows.append(r)
    return rows


def _csv(rows: list[Row], path) -> None:
    pd.DataFrame([{"row_id": r.id, "engine": r.stack, "model": "meta-llama/Llama-3.2-1B", "gpu": "H100-SXM5-80GB",
                   "tp": r.tp, "precision": "bf16", "isl_mean": r.isl, "osl_mean": r.osl, "isl_dist": "fixed",
                   "osl_dist": "fixed", "concurrency": r.concurrency, **r.measured} for r in rows]).to_csv(path, index=False)


def test_rows_llmsim_generated_validate_to_zero_error(tmp_path, cli):
    rows = _rows(ReplaySettings())
    _csv(rows, tmp_path / "own.csv")
    res = cli("validate", tmp_path / "own.csv", "--model", "llama-3.2-1b", "--json", "--workers", "1")
    assert res.code == 0, res.err
    out = json.loads(res.out)
    assert out["replayed"] == len(CONFIGS)
    assert max(abs(e["error_pct"]) for e in out["errors"]) < 1e-6


def test_fit_recovers_known_overheads():
    """Rows made with known overheads; a fit from zero finds them again. A
    closed loop's TTFT sees the front end and the response time only as a
    sum, so that sum is what must come back, beside the two iteration costs.
    vLLM's launch floor is held at zero in both: a 1B model's prefill
    iterations all sit on it, and an iteration on the floor hides the
    per-sequence time the fit looks for."""
    known = {"iteration_overhead_ms": 2.0, "iteration_us_per_seq": 40.0, "request_ms": 6.0, "response_ms": 3.0,
             "eager_launch_us": 0.0}
    rows = _rows(ReplaySettings(engine=known))
    res = fit(rows, ReplaySettings(engine={"eager_launch_us": 0.0}), iterations=4, logo=False)
    o = res.overheads
    assert o.iteration_overhead_ms == pytest.approx(2.0, abs=0.3)
    assert o.iteration_us_per_seq == pytest.approx(40.0, abs=12.0)
    assert o.request_ms + o.response_ms == pytest.approx(9.0, abs=2.0)


@pytest.mark.parametrize("text, expect", [
    ("engine,model\nvllm,x\n", "missing column"),
    ("engine,model,gpu,tp,isl_mean,osl_mean\nvllm,x,h100,1,1,1\n", "no measured metric"),
    # replayed at tp 1 whatever the deployment measured: 339 % off on a TP-2 row, the fault seemingly llmsim's
    ("engine,model,gpu,isl_mean,osl_mean,concurrency,ttft_mean_ms\nvllm,llama-3-8b,h100,100,10,8,50\n",
     "missing column(s) tp;"),
    ("\x00\x01\x02", "missing column(s) engine"),
    ("id,silicon_ttft_ms\nx,1\n", "missing column(s) silicon_data_source"),   # AIConfigurator's layout, cut
])
def test_bad_csv_is_one_line(tmp_path, cli, text, expect):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    res = cli("validate", p)
    assert res.code == 2 and expect in res.err and "Traceback" not in res.err
    assert len(res.err.strip().splitlines()) == 1


def test_a_json_that_is_not_a_bench_result_is_one_line(tmp_path, cli):
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"hello": 1}))
    res = cli("validate", p, "--backend", "vllm", "--model", "llama-3.1-8b", "--gpu", "h100-sxm")
    assert res.code == 2 and "not a `vllm bench serve` result" in res.err and "Traceback" not in res.err


def test_an_unknown_backend_is_one_line(tmp_path, cli):
    rows = _rows(ReplaySettings())[:1]
    _csv(rows, tmp_path / "own.csv")
    res = cli("validate", tmp_path / "own.csv", "--model", "llama-3.2-1b", "--backend", "tgi")
    assert res.code == 2 and "unknown serving backend 'tgi'" in res.err and "Traceback" not in res.err


def test_bench_json_rows_replay(tmp_path, cli):
    """A `vllm bench serve` result with its configuration on the command line."""
    r = Row("b", "vllm", "llama-3.2-1b", "h100-sxm", 1, "bf16", "bf16", 512, 32, concurrency=4,
            measured={"ttft_mean_ms": 1.0, "tpot_mean_ms": 1.0})
    p = predict(r, ReplaySettings(client="burst"))
    d = {"completed": 16, "total_input_tokens": 16 * 512, "total_output_tokens": 16 * 32, "max_concurrency": 4,
         "request_rate": "inf", "mean_ttft_ms": p["ttft_mean_ms"], "mean_tpot_ms": p["tpot_mean_ms"]}
    f = tmp_path / "run.json"
    f.write_text(json.dumps(d))
    res = cli("validate", f, "--backend", "vllm", "--model", "llama-3.2-1b", "--gpu", "h100-sxm",
              "--client", "burst", "--json", "--workers", "1")
    assert res.code == 0, res.err
    errs = {e["metric"]: e["error_pct"] for e in json.loads(res.out)["errors"]}
    assert abs(errs["ttft_mean_ms"]) < 1e-6 and abs(errs["tpot_mean_ms"]) < 1e-6


@pytest.mark.parametrize("flag", ["--backend-version", "--stack-version"])
def test_bench_json_rows_take_their_stack_versions_defaults(tmp_path, cli, flag):
    """Generated by a vLLM that overlaps scheduling (0.14 and later), the
    same result replays with no error only when its version is given (by the
    name estimate and the scenario use, or validate's older one)."""
    r = Row("b", "vllm", "llama-3.2-1b", "h100-sxm", 1, "bf16", "bf16", 512, 32, concurrency=4,
            measured={"ttft_mean_ms": 1.0, "tpot_mean_ms": 1.0}, version_keys={"async_scheduling": True})
    p = predict(r, ReplaySettings(client="burst"))
    d = {"completed": 16, "total_input_tokens": 16 * 512, "total_output_tokens": 16 * 32, "max_concurrency": 4,
         "request_rate": "inf", "mean_ttft_ms": p["ttft_mean_ms"], "mean_tpot_ms": p["tpot_mean_ms"]}
    f = tmp_path / "run.json"
    f.write_text(json.dumps(d))
    args = (f, "--backend", "vllm", "--model", "llama-3.2-1b", "--gpu", "h100-sxm", "--client", "burst", "--json",
            "--workers", "1")
    for version, exact in (("0.19.0", True), ("0.11.2", False)):
        res = cli("validate", *args, flag, version)
        assert res.code == 0, res.err
        err = {e["metric"]: e["error_pct"] for e in json.loads(res.out)["errors"]}["tpot_mean_ms"]
        assert (abs(err) < 1e-6) is exact, (version, err)


def test_a_rows_provenance_names_its_deployment(tmp_path):
    """AIConfigurator's rows (source and measurement record) replay its
    evaluation runs before its generator emitted benchmarks, and the
    generated deployment after; any other row the stack's defaults."""
    from simulator.validation.rows import rows_from_csv

    base = {"engine": "vllm", "model": "meta-llama/Llama-3.1-8B", "gpu": "H100-SXM5-80GB", "tp": 1,
            "isl_mean": 1024, "osl_mean": 128, "concurrency": 8, "ttft_mean_ms": 50.0}
    aic = "NVIDIA AIConfigurator silicon measurements (vendor, raw e2e)"
    pd.DataFrame([{**base, "row_id": "a", "source_kind": aic, "notes": "silicon_concurrency=8; measured=2025-10-29"},
                  {**base, "row_id": "b", "source_kind": aic, "notes": "silicon_concurrency=8"},
                  {**base, "row_id": "c", "source_kind": "vLLM blog", "notes": "measured=2025-01-01"},
                  {**base, "row_id": "d", "source_kind": aic, "notes": "measured=2026-04-21T00:00:00.000Z"}]
                 ).to_csv(tmp_path / "p.csv", index=False)
    assert ([r.deployment for r in rows_from_csv(tmp_path / "p.csv")]
            == ["aic-eval", "defaults", "defaults", "aiconfigurator"])


def test_the_deployment_changes_ttft_and_replays_to_zero_under_itself(tmp_path, cli):
    """A budget of one prompt (plus headroom) per iteration spreads a burst
    of prefills; rows made under it validate to zero only when told so."""
    rows = [Row("d", "vllm", "llama-3.2-1b", "h100-sxm", 1, "bf16", "bf16", 2048, 32, concurrency=16,
                measured={"ttft_mean_ms": 1.0})]
    rows[0].measured = predict(rows[0], ReplaySettings(deployment="aiconfigurator"))
    own = predict(rows[0], ReplaySettings(deployment="defaults"))
    assert own["ttft_mean_ms"] != pytest.approx(rows[0].measured["ttft_mean_ms"], rel=0.02)
    _csv(rows, tmp_path / "own.csv")
    for dep, zero in (("aiconfigurator", True), ("defaults", False)):
        res = cli("validate", tmp_path / "own.csv", "--model", "llama-3.2-1b", "--deployment", dep, "--json",
                  "--workers", "1")
        assert res.code == 0, res.err
        err = max(abs(e["error_pct"]) for e in json.loads(res.out)["errors"])
        assert (err < 1e-6) == zero


def test_a_rate_driven_row_is_not_replayed_under_a_launch_sized_by_concurrency():
    """AIConfigurator's launches size their batch and budget by the client's concurrency (and set keys
    beside them: TensorRT-LLM's CUTLASS experts, a context server without the overlap scheduler); a row
    driven by a request rate had none of them replayed, its stack's defaults standing in unannounced.
    Refused with the reason; under the stacks' defaults it replays."""
    from simulator.validation.replay import refusals

    for stack in ("vllm", "trtllm"):
        row = Row("r", stack, "llama-3.2-1b", "h100-sxm", 1, "bf16", "bf16", 512, 32, rate=2.0, num_requests=4,
                  measured={"ttft_mean_ms": 1.0})
        said = refusals([row], ReplaySettings(deployment="aiconfigurator"))
        assert "sized by the client's concurrency" in said["r"] and "request rate" in said["r"]
        assert refusals([row], ReplaySettings(deployment="defaults")) == {}
        # the evaluation pipeline launched TensorRT-LLM alone, vLLM with its defaults
        assert ("r" in refusals([row], ReplaySettings(deployment="aic-eval"))) is (stack == "trtllm")


def test_an_unknown_deployment_is_one_line(tmp_path, cli):
    rows = _rows(ReplaySettings())[:1]
    _csv(rows, tmp_path / "own.csv")
    res = cli("validate", tmp_path / "own.csv", "--model", "llama-3.2-1b", "--deployment", "k8s")
    assert res.code == 2 and "unknown deployment 'k8s'" in res.err and "Traceback" not in res.err


@given(st.sampled_from(["vllm", "sglang", "trtllm"]), st.integers(1, 1024), st.integers(1, 131072))
@settings(max_examples=60, deadline=None)
def test_generated_deployments_are_engines_llmsim_accepts(stack, c, isl):
    """Every generated budget holds every running decode and one whole prompt, and every
    generated key is one the stack's backend reads (its KV memory rule: kv_memory.KvRule.knobs)."""
    from simulator.engine.config import EngineConfig
    from simulator.profiles.backend import apply_backend
    from simulator.validation.deployment import engine_keys

    keys = engine_keys("aiconfigurator", stack, c, isl)
    cfg = EngineConfig(**apply_backend({"backend": stack, **keys}, "h100-sxm"))
    assert cfg.max_num_seqs == c and cfg.max_num_batched_tokens >= c + isl


@pytest.mark.parametrize("c", [4, 32])
def test_generated_sglang_launch_keeps_its_gpu_default_prefill_chunk(c):
    """AIConfigurator's generator sets --max-prefill-tokens and --cuda-graph-bs
    1..C but no --chunked-prefill-size, so SGLang sizes its memory reserve
    for its GPU's default chunk (16,384 tokens on a B200), whatever the
    prompt cap: DeepSeek-R1's fp8 weights on four B200s then leave no KV
    room under SGLang's default mem_fraction_static, and on eight the pool
    is what that reserve leaves."""
    from simulator.fleet.setup import setup_pool
    from simulator.kv_memory import sglang_mem_fraction_static
    from simulator.profiles.backend import load_backend
    from simulator.validation.deployment import engine_keys, speculative, speculative_engine_keys

    keys = engine_keys("aiconfigurator", "sglang", c, 8192)
    assert keys["kv_memory"] == {"cuda_graph_max_bs": c, "chunked_prefill_size": "default"}
    assert "kv_memory" not in engine_keys("aiconfigurator", "vllm", c, 8192)

    # the stack's own switches under its MTP draft over the launch's, as the replay lays them
    # (SGLang 0.5.9 turns the generator's mixed chunks off beside a draft)
    drafting = {**keys, **speculative_engine_keys("sglang", load_backend("sglang").version_keys("0.5.9"))}
    assert keys["mixed_prefill"] is True and drafting["mixed_prefill"] is False

    def pool(tp):
        return PoolSpec.model_validate({"model": "deepseek-v3", "gpu": "b200", "tp": tp,
                                        "speculative": speculative("aiconfigurator", 1),
                                        "engine": {"backend": "sglang", "backend_version": "0.5.9",
                                                   "weight_dtype": "fp8", "kv_dtype": "fp8", **drafting}})

    with pytest.raises(LlmsimError, match=r"does not fit on 4× b200 as SGLang sizes.*16,384-token prefill chunk"):
        setup_pool(pool(4), 0)
    mem = setup_pool(pool(8), 0).memory
    # the release the file's SGLang rows name: its 2 GiB draft term, no piecewise prefill graphs yet
    assert mem.fraction == sglang_mem_fraction_static(183359, 8, 1, 16384, c, speculative=True, draft_head_gib=2)[0]


def test_phases_replay_one_burst_round_then_the_rest_out_of_phase():
    """AIPerf's counted phase: the first C requests are a burst on an empty
    server, the other rounds out of phase; means are over both runs'
    requests, so the burst round weighs 1 of the counted rounds."""
    from simulator.runner import simulate
    from simulator.validation.deployment import AIPERF_EVAL_CLIENT
    from simulator.validation.replay import client_mode, scenario_for

    row = Row("p", "vllm", "llama-3.2-1b", "h100-sxm", 1, "bf16", "bf16", 1024, 64, concurrency=8,
              measured={"ttft_mean_ms": 1.0, "tpot_mean_ms": 1.0}, deployment="aic-eval")
    assert client_mode(row, ReplaySettings()) == "phases"
    assert client_mode(replace(row, deployment="defaults"), ReplaySettings()) == "burst"
    first = simulate(scenario_for(row, ReplaySettings(), "first-round"))
    rest = simulate(scenario_for(row, ReplaySettings(), "rest"))
    assert len(first.requests) == 8 and {r.arrival for r in first.requests} == {0.0}
    assert len(rest.requests) == (AIPERF_EVAL_CLIENT.counted_rounds - 1) * 8
    r = AIPERF_EVAL_CLIENT.counted_rounds
    want = (first.results["mean_ttft_ms"] + (r - 1) * rest.results["mean_ttft_ms"]) / r
    got = predict(row, ReplaySettings())
    assert got["ttft_mean_ms"] == pytest.approx(want, rel=1e-9)
    assert first.results["mean_ttft_ms"] > rest.results["mean_ttft_ms"]    # the burst queues
    assert predict(row, ReplaySettings(client="burst"))["ttft_mean_ms"] != pytest.approx(want, rel=1e-3)


def test_an_unknown_client_is_one_line(tmp_path, cli):
    rows = _rows(ReplaySettings())[:1]
    _csv(rows, tmp_path / "own.csv")
    res = cli("validate", tmp_path / "own.csv", "--model", "llama-3.2-1b", "--client", "lockstep")
    assert res.code == 2 and "unknown client 'lockstep'" in res.err and "Traceback" not in res.err


@given(st.sampled_from(["vllm", "sglang", "trtllm"]), st.integers(1, 1024), st.integers(1, 131072))
@settings(max_examples=40, deadline=None)
def test_aic_eval_generated_engine_configs_for_tensorrt_llm_only(stack, c, isl):
    """AIConfigurator's 2025 evaluation runs launched vLLM and SGLang on their
    defaults and TensorRT-LLM on the generator's config: one whole prompt
    beside a batch of C, block reuse off."""
    from simulator.validation.deployment import engine_keys

    keys = engine_keys("aic-eval", stack, c, isl)
    if stack != "trtllm":
        assert keys == {}
    else:
        assert keys["max_num_seqs"] == c and keys["max_num_batched_tokens"] >= c + isl
        assert keys["max_num_batched_tokens"] % 32 == 0 and keys["prefix_cache"] is False


def test_an_8k_prompt_on_tensorrt_llm_is_not_starved_under_the_generated_budget():
    """On TensorRT-LLM's default 8,192-token budget without chunked context an
    8,192-token prompt waits for the running batch to drain; the evaluation
    runs' generated budget admits it beside the decodes."""
    row = Row("t", "trtllm", "llama-3.2-1b", "h100-sxm", 1, "bf16", "bf16", 8192, 64, concurrency=8,
              measured={"ttft_mean_ms": 1.0}, deployment="aic-eval")
    generated = predict(row, ReplaySettings())["ttft_mean_ms"]
    stock = predict(row, ReplaySettings(engine={"max_num_batched_tokens": 8192, "max_num_seqs": 2048,
                                                "prefix_cache": True}))["ttft_mean_ms"]
    assert generated < 0.5 * stock


@settings(max_examples=25, deadline=None)
@given(c=st.integers(1, 128), isl=st.integers(16, 8192), osl=st.integers(2, 2048))
def test_the_out_of_phase_cycle_is_never_shorter_than_a_request_alone_and_grows_with_c(c, isl, osl):
    """Out of phase, clients spread over the loop's cycle: at least one request
    alone, and no shorter with more clients sharing the GPU."""
    from simulator.validation.replay import _cycle_seconds

    row = Row("c", "vllm", "llama-3.2-1b", "h100-sxm", 1, "bf16", "bf16", isl, osl, concurrency=c,
              measured={"ttft_mean_ms": 1.0})
    alone = _cycle_seconds(replace(row, concurrency=1))
    assert _cycle_seconds(row) >= alone * (1 - 1e-12)
    assert _cycle_seconds(replace(row, concurrency=c + 1)) >= _cycle_seconds(row) * (1 - 1e-12)


def test_clients_squeezed_into_a_request_alone_queue_behind_each_other():
    """Long prompts at high concurrency: a round's GPU time is several times
    one request's, and clients spread over only the latter meet each other's
    prefills every round; spread over the cycle, they wait less."""
    from simulator.validation.replay import _cycle_seconds

    row = Row("q", "vllm", "llama-3.2-1b", "h100-sxm", 1, "bf16", "bf16", 8192, 128, concurrency=48,
              measured={"ttft_mean_ms": 1.0})
    alone, cycle = _cycle_seconds(replace(row, concurrency=1)), _cycle_seconds(row)
    assert cycle > 2 * alone
    spread = predict(row, ReplaySettings(client="spread"))["ttft_mean_ms"]
    squeezed = predict(row, ReplaySettings(client="spread", arrival={"ramp_up_s": alone}))["ttft_mean_ms"]
    assert spread < squeezed


AIC = "NVIDIA AIConfigurator silicon measurements github.com/ai-dynamo/aiconfigurator"


@pytest.mark.parametrize("stack, version, notes, want", [
    ("sglang", "0.5.1.post1", "silicon_concurrency=16", "aic-genai-perf"),  # released 2025-08, genai-perf era
    ("trtllm", "1.0.0rc3", "silicon_concurrency=16", "aic-genai-perf"),    # released 2025-07
    ("sglang", "0.5.6.post2", "silicon_concurrency=16", "aic-eval"),       # released 2025-12, AIPerf
    ("vllm", "0.17.0", "silicon_concurrency=8", "aiconfigurator"),         # released after 2026-02-11
    ("sglang", "nightly-dev-20260216-d3bae71e", "", "aiconfigurator"),     # a nightly's tag carries its date
    ("sglang", "nightly-dev", "", "defaults"),                             # unknown: no inference
    ("trtllm", "1.0.0rc3", "measured=2026-03-01T00:00:00Z", "aiconfigurator"),   # a measurement record wins
    ("vllm", "0.12.0", "measured=2025-10-29T00:00:00Z", "aic-eval"),
])
def test_an_undated_aiconfigurator_row_is_dated_no_earlier_than_its_stack_version(stack, version, notes, want):
    from simulator.validation.deployment import of_source

    assert of_source(AIC, notes, stack, version) == want
    assert of_source("a blog post", notes, stack, version) == "defaults"   # only AIConfigurator's pipeline is known


@given(stack=st.sampled_from(["vllm", "sglang", "trtllm"]), version=st.text(max_size=20), notes=st.text(max_size=40))
def test_a_version_never_moves_a_row_before_its_release(stack, version, notes):
    """Whatever the version says, a row is never given a pipeline older than
    its own measurement record, and a row of no known date keeps the defaults."""
    from simulator.validation.deployment import of_source, released

    got = of_source(AIC, notes, stack, version)
    if "measured=" not in notes and released(stack, version) is None:
        assert got == "defaults"
    assert got in ("defaults", "aic-genai-perf", "aic-eval", "aiconfigurator")


@settings(max_examples=8, deadline=None)
@given(stack=st.sampled_from(["vllm", "sglang", "trtllm"]), isl=st.integers(2048, 6144), osl=st.integers(8, 64),
       c=st.integers(2, 24))
def test_llmsims_own_loop_leaves_room_for_its_prefills(stack, isl, osl, c):
    """A loop of distinct compute-bound prompts cannot run a round in less time
    than its C prefills take, packed into as few iterations as its token
    budget allows: on rows llmsim measured itself the prefill share stays at
    or below 1. (Priced one at a time, it did not: four 2,048-token prompts
    of Llama-3.2-1B in one iteration take 16 % less than four alone, and
    hypothesis found vLLM's loop at C = 19 with 8 output tokens at 1.0003.)
    Over enough rounds: a loop's last requests meet fewer prompts than a
    round holds, so over a benchmark's few rounds the mean request is
    shorter than a round (vLLM, C = 24, 6,144-token prompts, 8 output
    tokens: 1.012 over the 4 rounds a row without a count replays, 0.978
    over 40)."""
    from simulator.validation.replay import prefill_share

    row = Row("w", stack, "llama-3.2-1b", "h100-sxm", 1, "bf16", "bf16", isl, osl, concurrency=c,
              num_requests=40 * c, measured={"ttft_mean_ms": 1.0, "tpot_mean_ms": 1.0})
    row.measured = predict(row, ReplaySettings(client="burst"))
    assert prefill_share(row) <= 1.0 + 1e-6


def test_a_fitted_profile_keeps_its_stacks_launch_cost(tmp_path):
    """The fit does not fit the launch cost: the profile it writes keeps the base stack's."""
    import yaml

    from simulator.cli.validate import _write_profile
    from simulator.profiles.backend import Overheads, load_backend

    rows = [r for r in _rows(ReplaySettings()) if r.stack == "vllm"][:2]
    path = tmp_path / "mine.yaml"
    _write_profile(path, rows, Overheads(iteration_overhead_ms=1.5), None)
    written = yaml.safe_load(path.read_text())["overheads"]
    assert written["eager_launch_us"] == load_backend("vllm").overheads.eager_launch_us > 0
    assert written["iteration_overhead_ms"] == 1.5


def test_a_row_llmsim_cannot_model_is_left_out_with_its_reason(tmp_path, cli):
    """A measured file may hold a layout llmsim refuses (tp 3 on a 32-head model): that row is listed as not
    replayed with the reason; the others are replayed. Every row refused is one line naming the file."""
    good, bad = (Row(f"r{i}", "vllm", "llama-3.2-1b", "h100-sxm", tp, "bf16", "bf16", 512, 16, concurrency=2,
                     measured={"ttft_mean_ms": 20.0, "tpot_mean_ms": 3.0}) for i, tp in ((0, 1), (1, 3)))
    _csv([good, bad], tmp_path / "m.csv")
    res = cli("validate", tmp_path / "m.csv", "--json", "--workers", "1")
    assert res.code == 0, res.err
    out = json.loads(res.out)
    assert out["replayed"] == 1 and "tp=3 must divide" in out["skipped"]["r1"]
    _csv([bad], tmp_path / "all.csv")
    r = cli("validate", tmp_path / "all.csv", "--workers", "1")
    assert r.code == 2 and "all.csv" in r.err and "tp=3 must divide" in r.err and "Traceback" not in r.err


_HEADER = ("row_id,engine,model,gpu,tp,precision,isl_mean,osl_mean,isl_dist,osl_dist,concurrency,ttft_mean_ms,"
           "tpot_mean_ms\n")


def _table(tmp_path, *rows: str):
    """A serving-results CSV of llama-3.2-1b rows on one H100: ``id,isl,osl,isl_dist,concurrency,ttft,tpot``."""
    lines = []
    for r in rows:
        rid, isl, osl, dist, c, ttft, tpot = r.split(",")
        lines.append(f"{rid},vllm,meta-llama/Llama-3.2-1B,H100-SXM5-80GB,1,bf16,{isl},{osl},{dist},{dist},{c},"
                     f"{ttft},{tpot}\n")
    path = tmp_path / "m.csv"
    path.write_text(_HEADER + "".join(lines))
    return path


def test_a_row_whose_tp_is_empty_is_left_out_not_replayed_at_tp_1(tmp_path):
    from simulator.validation.rows import rows_from_csv

    path = _table(tmp_path, "ok,512,32,fixed,2,20,3", "blank,512,32,fixed,2,20,3")
    path.write_text(path.read_text().replace("blank,vllm,meta-llama/Llama-3.2-1B,H100-SXM5-80GB,1,",
                                             "blank,vllm,meta-llama/Llama-3.2-1B,H100-SXM5-80GB,,"))
    rows = {r.id: r for r in rows_from_csv(path)}
    assert rows["ok"].skip == "" and rows["blank"].skip.startswith("tp is empty")


def test_a_fixed_length_that_is_not_a_whole_number_of_tokens_leaves_its_row_out(tmp_path, cli):
    """100.5 tokens was replayed as 100, unsaid. A row of varying lengths (a dataset's) states a mean, which may
    be fractional (published_serving_results.csv's ShareGPT rows: 194.3): it is kept, and not replayed for its
    lengths not being fixed."""
    from simulator.validation.rows import rows_from_csv

    path = _table(tmp_path, "ok,512,32,fixed,2,20,3", "half,100.5,32,fixed,2,20,3", "outs,512,31.5,,2,20,3",
                  "share,512,194.3,ShareGPT empirical,2,20,3")
    res = cli("validate", path, "--json", "--workers", "1")
    assert res.code == 0, res.err
    out = json.loads(res.out)
    assert out["replayed"] == 1 and {e["row"] for e in out["errors"]} == {"ok"}
    assert out["skipped"]["half"].startswith("isl_mean 100.5 is not a whole number of tokens")
    assert out["skipped"]["outs"].startswith("osl_mean 31.5 is not a whole number of tokens")   # no dist: fixed
    assert out["skipped"]["share"] == "only fixed input/output lengths are replayed"
    rows = {r.id: r for r in rows_from_csv(path)}
    assert (rows["half"].isl, rows["share"].osl) == (100, 194)
    text = cli("validate", path, "--workers", "1")
    assert "isl_mean 100.5 is not a whole number of tokens" in text.out and "(row half)" in text.out


def test_a_measured_figure_of_0_is_read_as_not_measured_and_named(tmp_path, cli):
    """A 0 was dropped from the comparison unsaid (and fitted on, the log of 0). Benchmarks write 0 for a figure
    they did not measure: it is left out and named, per row; a row left with nothing to compare is not replayed,
    saying why; a negative latency leaves its row out naming the column."""
    path = _table(tmp_path, "ok,512,32,fixed,2,20,3", "t0,512,32,fixed,4,0,3", "both0,512,32,fixed,4,0,0",
                  "neg,512,32,fixed,4,-3,3")
    res = cli("validate", path, "--json", "--workers", "1")
    assert res.code == 0, res.err
    out = json.loads(res.out)
    assert out["not_measured"] == {"t0": ["ttft_mean_ms"]}
    assert {(e["row"], e["metric"]) for e in out["errors"]} == {("ok", "ttft_mean_ms"), ("ok", "tpot_mean_ms"),
                                                                 ("t0", "tpot_mean_ms")}
    assert out["skipped"]["both0"] == "no measured metric (ttft_mean_ms, tpot_mean_ms written as 0: not measured)"
    assert "ttft_mean_ms" in out["skipped"]["neg"] and "not a positive number" in out["skipped"]["neg"]
    text = cli("validate", path, "--workers", "1")
    assert ("1 row(s) replayed without a figure they write as 0, read as not measured: ttft_mean_ms (row t0)"
            in " ".join(text.out.split()))
    fitted = cli("validate", path, "--workers", "1", "--fit", tmp_path / "new" / "mine.yaml")
    assert fitted.code == 0 and "Traceback" not in fitted.err and "nan" not in fitted.out
    assert (tmp_path / "new" / "mine.yaml").is_file()       # a missing folder is made, as for --csv


def test_a_bench_result_measuring_nothing_but_zeros_is_not_replayed(tmp_path, cli):
    """`vllm bench serve` writes a TPOT of 0 when no request had a second token: that figure is not measured."""
    d = {"completed": 4, "total_input_tokens": 4 * 256, "total_output_tokens": 4, "max_concurrency": 2,
         "mean_ttft_ms": 0.0, "mean_tpot_ms": 0.0}
    (tmp_path / "zero.json").write_text(json.dumps(d))
    args = ("--backend", "vllm", "--model", "llama-3.2-1b", "--gpu", "h100-sxm", "--workers", "1")
    res = cli("validate", tmp_path / "zero.json", *args)
    assert res.code == 2 and "Traceback" not in res.err and len(res.err.strip().splitlines()) == 1
    assert "no measured metric (mean_ttft_ms, mean_tpot_ms written as 0: not measured)" in res.err
    (tmp_path / "ttft.json").write_text(json.dumps({**d, "mean_ttft_ms": 30.0}))
    out = json.loads(cli("validate", tmp_path / "ttft.json", *args, "--json").out)
    assert out["not_measured"] == {"ttft": ["mean_tpot_ms"]} and {e["metric"] for e in out["errors"]} == \
        {"ttft_mean_ms"}


def test_two_rows_under_one_id_refuse_the_file(tmp_path, cli):
    """The second row under an id was kept beside the first, and the JSON's rows not replayed, keyed by id, held
    one of their reasons. Lines are the file's, a quoted cell's line break and a blank line counted."""
    path = _table(tmp_path, "a,512,32,fixed,2,20,3", "b,512,32,fixed,4,20,3", "a,512,32,fixed,8,20,3")
    text = path.read_text().splitlines(keepends=True)
    text[2] = text[2].replace(",bf16,", ',"bf16\nsecond line",')
    path.write_text("".join(text[:3]) + "\n" + "".join(text[3:]))
    res = cli("validate", path, "--workers", "1", "--csv", tmp_path / "out.csv")
    assert res.code == 2 and "Traceback" not in res.err and len(res.err.strip().splitlines()) == 1
    assert "m.csv: row_id: row id 'a' is on lines 2 and 6; give each row an id of its own" in res.err
    assert not (tmp_path / "out.csv").exists()
    unnamed = _table(tmp_path, ",512,32,fixed,2,20,3", ",512,32,fixed,4,20,3")      # no id: each its row number
    assert json.loads(cli("validate", unnamed, "--workers", "1", "--json").out)["replayed"] == 2


def _bench_json(tmp_path, name="run.json"):
    f = tmp_path / name
    f.write_text(json.dumps({"completed": 16, "total_input_tokens": 16 * 512, "total_output_tokens": 16 * 32,
                             "max_concurrency": 4, "request_rate": "inf", "mean_ttft_ms": 30.0,
                             "mean_tpot_ms": 6.0}))
    return f


def test_a_fitted_profile_replays_a_bench_result_and_a_new_fit_names_what_it_fitted(tmp_path, cli):
    """Step 4 of the validate guide checked on the next `vllm bench serve` result: --backend FILE was
    refused for JSON ('unknown backend'); the fitted profile said its first-token terms were fitted on
    the built-in's 2,287 rows."""
    import yaml

    from simulator.cli.validate import _write_profile
    from simulator.profiles.backend import Overheads

    rows = [r for r in _rows(ReplaySettings()) if r.stack == "vllm"][:2]
    mine = tmp_path / "mine.yaml"
    _write_profile(mine, rows, Overheads(iteration_overhead_ms=9.0, response_ms=1.0), None)
    doc = yaml.safe_load(mine.read_text())
    assert doc["fitted_on"].endswith(": iteration_overhead_ms, response_ms")
    assert doc["first_token_fitted_on"].startswith("tokenize_us_per_token, eager_launch_us as vllm's profile: ")
    f = _bench_json(tmp_path)
    args = ["validate", f, "--model", "llama-3.2-1b", "--gpu", "h100-sxm", "--json", "--workers", "1"]
    own, stock = (json.loads(cli(*args, "--backend", b).out)["errors"] for b in (mine, "vllm"))
    assert own[0]["predicted"] != stock[0]["predicted"]       # the profile's overheads replay the row


@pytest.mark.parametrize("flag, value, says", [("--gpu", "h100sxm", "--gpu: unknown GPU 'h100sxm'"),
                                               ("--backend", "nope.yaml", "nope.yaml: --backend: file not found"),
                                               ("--backend", "stackless.yaml", "stackless.yaml: stack: Field required"),
                                               ("--backend", "vlm.yaml", "vlm.yaml: stack: unknown stack 'vlm'")])
def test_a_bench_results_flags_are_blamed_for_their_own_faults(tmp_path, cli, monkeypatch, flag, value, says):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "stackless.yaml").write_text("name: stackless\n")
    (tmp_path / "vlm.yaml").write_text("name: vlm\nstack: vlm\n")
    args = {"--backend": "vllm", "--model": "llama-3.2-1b", "--gpu": "h100-sxm", flag: value}
    r = cli("validate", _bench_json(tmp_path), *[x for kv in args.items() for x in kv])
    assert r.code == 2 and says in r.err and "run.json" not in r.err, r.err


def test_fit_replaces_an_earlier_fit_but_not_a_users_file(tmp_path, cli, monkeypatch):
    mine = tmp_path / "mine.yaml"
    mine.write_text("name: mine\nstack: vllm\n# my own notes\n")
    r = cli("validate", _bench_json(tmp_path), "--backend", "vllm", "--model", "llama-3.2-1b", "--gpu",
            "h100-sxm", "--fit", mine)
    assert r.code == 2 and "--fit: exists and is not a profile `llmsim validate --fit` wrote" in r.err
    assert "# my own notes" in mine.read_text()


@pytest.mark.parametrize("label, gpu", [("GH200", None), ("H100 NVL", None), ("H200 NVL", None),
                                        ("A100 80GB PCIe", None), ("A100-PCIE-40GB", None),
                                        ("H100-SXM5-80GB", "h100-sxm"), ("GB200", "gb200-nvl72"),
                                        ("A100-SXM4-40GB", "a100-sxm-40gb"), ("A100-SXM4-80GB", "a100-sxm-80gb")])
def test_a_benchmark_gpu_label_names_its_gpu_or_none(label, gpu):
    """GH200 was replayed on an H200 and H100 NVL on an H100 SXM, silently."""
    from simulator.profiles.hardware import match_benchmark_gpu

    assert match_benchmark_gpu(label) == gpu


@pytest.mark.parametrize("label, stack", [("vLLM", "vllm"), ("vllm 0.19", "vllm"), ("SGLang", "sglang"),
                                          ("TensorRT-LLM (TRT engine)", "trtllm"), ("trtllm", "trtllm"),
                                          ("vllmx", None), ("sglangx", None), ("trtx", None)])
def test_an_engine_label_names_its_stack_as_a_word(label, stack):
    from simulator.validation.rows import _longest_first, _stack

    assert _stack(label, _longest_first()) == stack


@pytest.mark.parametrize("lens, skipped", [([4, 1024, 300, 80], True), ([1024, 1026, 1025, 1024], False),
                                           ([0, 4, 1024, 300], True)])
def test_a_bench_result_of_varying_lengths_is_not_replayed_at_its_mean(tmp_path, lens, skipped):
    """A ShareGPT run's per-request lengths spread from 4 to 1,024 tokens: replayed at their mean it stood
    for another run. A fixed-length run re-tokenised a few tokens apart is replayed."""
    from simulator.validation.rows import rows_from_bench_json

    f = _bench_json(tmp_path)
    d = json.loads(f.read_text())
    f.write_text(json.dumps({**d, "completed": 4, "total_input_tokens": sum(lens), "total_output_tokens": 128,
                             "max_concurrency": 4, "input_lens": lens, "output_lens": [32] * 4}))
    row, = rows_from_bench_json([f], "vllm", "llama-3.2-1b", "h100-sxm", 1)
    assert bool(row.skip) == skipped and (not skipped or "its input lengths vary (4 to 1,024 tokens)" in row.skip)
    # (a failed request's length, 0 as vLLM writes it, did not turn the check off)


def test_rows_replayed_with_another_backend_say_so(tmp_path, cli):
    """--backend on a CSV replays every row with it, while the tables name each row's measured stack."""
    rows = [r for r in _rows(ReplaySettings()) if r.stack == "sglang"][:1]
    _csv(rows, tmp_path / "own.csv")
    r = cli("validate", tmp_path / "own.csv", "--backend", "vllm", "--workers", "1")
    assert r.code == 0 and "every row replayed with --backend vllm" in r.out, r.out + r.err
    js = cli("validate", tmp_path / "own.csv", "--backend", "vllm", "--workers", "1", "--json").json()
    assert js["replayed_with"] == "vllm" and {e["stack"] for e in js["errors"]} == {"sglang"}


def test_a_concurrency_cap_that_leaves_no_row_says_so(tmp_path, cli):
    """--max-concurrency below every measured row's concurrency left no row to replay, and the refusal
    named only the reasons of rows the cap kept (a row of unknown concurrency: 'disaggregated row
    without prefill/decode worker counts'), not the cap that dropped the rest."""
    head = "row_id,engine,engine_version,model,gpu,tp,isl_mean,osl_mean,concurrency,ttft_mean_ms,scenario\n"
    rows = [f"r{c},vllm,0.19.1,meta-llama/Llama-3.2-1B,H100-SXM5-80GB,1,512,64,{c},20.0,\n" for c in (4, 8)]
    csv = tmp_path / "rows.csv"
    csv.write_text(head + "".join(rows))
    r = cli("validate", csv, "--max-concurrency", "2", "--workers", "1")
    assert r.code == 2 and "Traceback" not in r.err and len(r.err.strip().splitlines()) == 1, r.err
    assert "no row can be replayed: 2 rows above --max-concurrency 2" in r.err, r.err
