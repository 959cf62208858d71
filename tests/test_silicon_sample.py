"""AIConfigurator's silicon_sample.csv read as replayable rows."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from simulator.validation.rows import rows_from_csv

COLUMNS = ["id", "silicon_data_source", "backend", "backend_version", "model_path", "system", "precision", "mode",
           "isl", "osl", "gemm_quant_mode", "moe_quant_mode", "batch_size", "tp_size", "pp_size",
           "attention_dp_size", "moe_tp_size", "moe_ep_size", "silicon_ttft_ms", "silicon_tpot_ms"]
BASE = {"id": "x", "silicon_data_source": "silicon_concurrency=8", "backend": "vllm", "backend_version": "0.11.0",
        "model_path": "meta-llama/Llama-3.1-8B-Instruct", "system": "h100_sxm", "precision": None, "mode": "agg",
        "isl": 1024, "osl": 128, "gemm_quant_mode": None, "moe_quant_mode": None, "batch_size": 8, "tp_size": 1,
        "pp_size": 1, "attention_dp_size": 1, "moe_tp_size": 1, "moe_ep_size": 1,
        "silicon_ttft_ms": 100.0, "silicon_tpot_ms": 10.0}
# BASE's 0.11.0 is a vLLM release: a TensorRT-LLM row names one of its own that llmsim describes, as
# TensorRT-LLM 0.11.0 (and 1.0.0rc3, before 1.0.0) is older than those (validation.deployment.release_unread)
DSR1 = {"model_path": "deepseek-ai/DeepSeek-R1", "system": "b200_sxm", "backend": "trtllm", "precision": "fp4",
        "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4", "backend_version": "1.1.0rc2.post2"}


def _write(tmp_path, *rows: dict):
    path = tmp_path / "silicon_sample.csv"
    pd.DataFrame([{**BASE, **r} for r in rows], columns=COLUMNS).to_csv(path, index=False)
    return path


def test_rows_carry_the_configuration_in_llmsims_terms(tmp_path):
    path = _write(
        tmp_path,
        {"id": "dense", "silicon_data_source": "db-dump; silicon_concurrency=16; measured=2026-03-02T00:00:00Z",
         "batch_size": 16, "tp_size": 2},
        # No silicon_concurrency: batch_size is per attention-DP rank.
        {"id": "moe", "silicon_data_source": "source_file=a.csv; measured=2025-11-04", **DSR1, "tp_size": 1,
         "attention_dp_size": 8, "moe_tp_size": 1, "moe_ep_size": 8, "batch_size": 32},
        {"id": "oss", "model_path": "openai/gpt-oss-120b", "system": "h200_sxm", "backend": "tensorrt_llm",
         "backend_version": "1.1.0rc2.post2", "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4"},
        {"id": "fp8block", "model_path": "Qwen/Qwen3-235B-A22B-FP8", "gemm_quant_mode": "fp8",
         "moe_quant_mode": "fp8_block", "tp_size": 4, "moe_tp_size": 1, "moe_ep_size": 4},
        {"id": "gb", "system": "gb200"})
    rows = {r.id: r for r in rows_from_csv(path)}
    d = rows["dense"]
    assert (d.skip, d.stack, d.model, d.gpu, d.tp, d.dp, d.ep) == ("", "vllm", "llama-3.1-8b", "h100-sxm", 2, 1, 1)
    assert (d.weight_dtype, d.kv_dtype, d.isl, d.osl, d.concurrency) == ("bf16", "bf16", 1024, 128, 16)
    assert d.deployment == "aiconfigurator" and d.throughput_identity
    assert d.measured["ttft_mean_ms"] == 100.0 and d.measured["tpot_mean_ms"] == 10.0
    assert d.measured["throughput_output_tok_s"] == pytest.approx(16 * 128 / ((100.0 + 127 * 10.0) * 1e-3))
    m = rows["moe"]
    assert (m.skip, m.stack, m.model, m.gpu, m.weight_dtype) == ("", "trtllm", "deepseek-v3", "b200", "nvfp4")
    assert (m.tp, m.dp, m.ep, m.concurrency, m.deployment) == (1, 8, 8, 256, "aic-eval")
    assert m.kv_dtype == "fp8"     # AIConfigurator's nvfp4 profile keeps KV in fp8, passed to TensorRT-LLM
    # gpt-oss is published in MXFP4 only: its 4-bit rows ran that checkpoint (weight-only on Hopper).
    assert (rows["oss"].skip, rows["oss"].stack, rows["oss"].weight_dtype) == ("", "trtllm", "mxfp4")
    assert (rows["fp8block"].model, rows["fp8block"].weight_dtype, rows["fp8block"].ep) == \
        ("qwen3-235b-a22b-fp8", "fp8", 4)
    # no measured day: dated by its release, vLLM 0.11.0 (2025-10-04), before AIPerf ran the evaluations
    assert rows["gb"].gpu == "gb200-nvl72" and rows["gb"].deployment == "aic-genai-perf"


@pytest.mark.parametrize("backend, measured, precision, kv", [
    ("vllm", "2026-03-02", "fp8", "fp8"),        # the generator passes --kv-cache-dtype fp8
    ("sglang", "2026-03-02", "fp4", "fp8"),
    ("vllm", "2026-03-02", "bf16", "bf16"),
    ("vllm", "2026-03-02", "int4", "bf16"),      # outside AIConfigurator's profiles: the stack's default
    ("trtllm", "2025-10-29", "fp8", "fp8"),      # evaluation runs: TensorRT-LLM's engine config had the KV dtype
    ("vllm", "2025-10-29", "fp8", "fp8"),        # ... and, by their measurements, vLLM (deployment.kv_dtype)
])
def test_kv_dtype_follows_the_deployments_quantisation_profile(tmp_path, backend, measured, precision, kv):
    path = _write(tmp_path, {"silicon_data_source": f"silicon_concurrency=8; measured={measured}", "backend": backend,
                             "precision": precision})
    assert rows_from_csv(path)[0].kv_dtype == kv


@pytest.mark.parametrize("model, measured, mtp, release", [
    ("deepseek-ai/DeepSeek-R1", "2026-03-25", True, "0.5.9"),    # a generated deployment of a model with an MTP layer
    ("deepseek-ai/DeepSeek-R1", "2026-03-25", True, "0.5.11"),   # spec v2 keeps the overlap scheduler
    ("deepseek-ai/DeepSeek-R1", "2025-11-02", False, "0.5.9"),   # the evaluation runs' stacks ran without it
    ("Qwen/Qwen3-235B-A22B-FP8", "2026-03-25", False, "0.5.9"),  # no MTP layer to draft with
])
def test_generated_deepseek_deployments_decode_with_one_mtp_draft_token(tmp_path, model, measured, mtp, release):
    from simulator.validation.replay import scenario_for
    path = _write(tmp_path, {"silicon_data_source": f"silicon_concurrency=8; measured={measured}", "backend": "sglang",
                             "backend_version": release,      # 0.5.9 is spec v1: the overlap scheduler off with a draft
                             "model_path": model, "system": "h200_sxm", "precision": "fp8", "gemm_quant_mode": "fp8",
                             "moe_quant_mode": "fp8_block", "tp_size": 8, "moe_tp_size": 8, "moe_ep_size": 1})
    (row,) = rows_from_csv(path)
    pool = scenario_for(row).pools[0]
    spec, engine = pool.speculative, pool.engine
    assert (spec is not None) == mtp
    if mtp:     # SGLang drops mixed chunks for speculative decoding, and to 0.5.10 its overlap scheduler
        assert (spec.draft_model, spec.k, spec.acceptance_rate) == ("mtp", 1, 0.85)
        assert engine.output_after_next_launch == (release != "0.5.9") and not engine.mixes_prefill
    else:
        assert engine.output_after_next_launch


@pytest.mark.parametrize("row, why", [
    ({"mode": "disagg"}, "disaggregated"),
    ({"system": "rtx_pro_6000"}, "GPU 'rtx_pro_6000' has no built-in profile"),
    ({"model_path": "zhipuai/GLM-5"}, "model 'zhipuai/GLM-5' has no built-in profile"),
    ({"pp_size": 2}, "pipeline parallelism"),
    ({"gemm_quant_mode": "int8_sq"}, "quant mode 'int8_sq' is not one llmsim models"),
    ({**DSR1, "gemm_quant_mode": "fp8"}, "one weight format per pool"),
    ({**DSR1, "tp_size": 1, "moe_tp_size": 2, "moe_ep_size": 1}, "parallel layout is ambiguous"),
    ({**DSR1, "tp_size": 16, "moe_tp_size": 4, "moe_ep_size": 4}, "tp=16 exceeds the 8 GPUs"),
    ({**DSR1, "id": "dsr1_b200_agg_tp4_ep4_1", "tp_size": 4, "attention_dp_size": 2, "moe_tp_size": 1,
      "moe_ep_size": 8}, "stated inconsistently"),     # the id says 4 GPUs, the columns 8
    ({**DSR1, "system": "h200_sxm"}, "needs FP4 tensor cores"),
    ({"silicon_data_source": "x", "batch_size": None}, "no concurrency"),
    ({"silicon_tpot_ms": None}, "no measured TTFT and TPOT"),
    # a fixed length of 1024.5 tokens was read as 1024; a 0 ms and a negative TTFT were dropped unsaid
    ({"isl": 1024.5}, "isl 1024.5 is not a whole number of tokens"),
    ({"silicon_ttft_ms": 0.0}, "no measured TTFT and TPOT (silicon_ttft_ms written as 0: not measured)"),
    ({"silicon_ttft_ms": -5.0}, "silicon_ttft_ms -5 is negative"),
])
def test_a_row_llmsim_cannot_model_is_kept_with_its_reason(tmp_path, row, why):
    (r,) = rows_from_csv(_write(tmp_path, row))
    assert why in r.skip


def test_an_id_may_name_the_gpus_of_an_attention_dp_replica_as_its_tp(tmp_path):
    """AIConfigurator's ids call one rank of tp 1 × dp 8 "tp8": the row is its columns' layout."""
    (r,) = rows_from_csv(_write(tmp_path, {**DSR1, "id": "dsr1_b200_agg_c64_tp8_0_ep8_0_1", "tp_size": 1,
                                           "attention_dp_size": 8, "moe_tp_size": 1, "moe_ep_size": 8,
                                           "silicon_data_source": "silicon_concurrency=64", "batch_size": 8}))
    assert r.skip == "" and (r.tp, r.dp, r.ep, r.layout) == (1, 8, 8, "TP 1 DP 8 EP 8")


def test_model_configs_name_models_without_a_builtin_profile(tmp_path, shared_data):
    moe = shared_data / "models" / "moe"
    path = _write(tmp_path, {"model_path": "MiniMaxAI/MiniMax-M2.5", "gemm_quant_mode": "fp8",
                             "moe_quant_mode": "fp8", "tp_size": 2, "moe_tp_size": 2},
                  {"id": "q35", "model_path": "Qwen/Qwen3.5-397B-A17B"})
    mm, q35 = rows_from_csv(path, model_configs=moe)
    assert mm.skip == "" and mm.model.endswith("MiniMaxAI--MiniMax-M2.5.yaml") and mm.weight_dtype == "fp8"
    assert mm.group == "MiniMaxAI--MiniMax-M2.5/h100-sxm/vllm"
    assert "cannot model this architecture" in q35.skip


def test_validate_replays_the_layout(tmp_path, cli):
    path = _write(tmp_path, {"id": "ok", "isl": 256, "osl": 16, "silicon_data_source": "silicon_concurrency=2",
                             "batch_size": 2}, {"id": "dis", "mode": "disagg"})
    res = cli("validate", path, "--json", "--workers", "1")
    assert res.code == 0, res.err
    out = json.loads(res.out)
    assert out["replayed"] == 1 and "disaggregated" in out["skipped"]["dis"]
    assert {e["metric"] for e in out["errors"]} == {"ttft_mean_ms", "tpot_mean_ms", "throughput_output_tok_s"}


def test_a_missing_model_configs_folder_is_one_line(tmp_path, cli):
    res = cli("validate", _write(tmp_path, {}), "--model-configs", tmp_path / "nope")
    assert res.code == 2 and "not a folder" in res.err and "Traceback" not in res.err


def test_the_holdout_benchmark_leaves_out_the_fitted_rows(tmp_path, shared_data):
    """A row of closed_loop_silicon.csv (the rows the overheads are fitted on) is never replayed
    as held out; a repeated measurement counts once; the section lands between its markers."""
    import importlib.util
    import sys
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("holdout_silicon", Path(__file__).resolve().parents[1]
                                                  / "benchmarks" / "holdout_silicon.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("holdout_silicon", bench)
    spec.loader.exec_module(bench)
    fitted_id = sorted(bench.fitted_ids())[0]
    small = {"isl": 256, "osl": 16, "silicon_data_source": "silicon_concurrency=2", "batch_size": 2}
    path = _write(tmp_path, {**small, "id": fitted_id}, {**small, "id": "held"}, {**small, "id": "held-again"})
    res = bench.run(path, 128, 1, None, log=lambda s: None)
    assert (res["fitted"], res["replayed"]) == (1, 1)
    assert list(res["errors"].row.unique()) == ["held"]
    page = tmp_path / "accuracy.md"
    page.write_text(f"# A\n\n{bench.BEGIN}\nstale table\n{bench.END}\n\n## B\n")
    assert bench.main([str(path), "--jobs", "1", "--markdown", str(page)]) == 0
    text = page.read_text()
    assert "stale table" not in text and "1 rows replayed" in text and text.endswith("## B\n")


def test_two_rows_under_one_id_refuse_the_file(tmp_path, cli):
    """validate names rows by id (its rows not replayed are keyed by it): a second row under one id was
    told apart nowhere."""
    path = _write(tmp_path, {"id": "a"}, {"id": "b"}, {"id": "a", "batch_size": 16})
    res = cli("validate", path, "--workers", "1")
    assert res.code == 2 and "Traceback" not in res.err and len(res.err.strip().splitlines()) == 1
    assert "silicon_sample.csv: id: row id 'a' is on lines 2 and 4" in res.err
