"""Disaggregated rows of AIConfigurator's silicon_sample.csv: read, refused or replayed on prefill/decode pools."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from simulator.profiles.backend import load_backend
from simulator.validation.replay import ReplaySettings, predict, scenario_for
from simulator.validation.rows import RoleLayout, rows_from_csv

ROLE_KEYS = ("batch_size", "num_workers", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")
COLUMNS = ["id", "silicon_data_source", "backend", "backend_version", "model_path", "system", "precision", "mode",
           "isl", "osl", "gemm_quant_mode", "moe_quant_mode", "batch_size", "tp_size", "pp_size",
           "attention_dp_size", "moe_tp_size", "moe_ep_size",
           *(f"{role}_{k}" for role in ("prefill", "decode") for k in ROLE_KEYS), "silicon_ttft_ms", "silicon_tpot_ms"]
# DeepSeek-R1 on B200 with TensorRT-LLM, as the file's generated deployments run it: one wide-EP
# prefill worker (attention DP 8) and two decode workers of tp 8 / ep 8, in Dynamo's runtime container,
# whose tag the file gives as backend_version (validation.deployment.stack_release: no stack release).
DYNAMO = "nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.8.1.post2"
DSR1 = {"id": "dis", "silicon_data_source": "db-dump; silicon_concurrency=8; measured=2026-03-23T00:00:00Z; " + DYNAMO,
        "backend": "trtllm", "backend_version": "0.8.1.post2", "model_path": "deepseek-ai/DeepSeek-R1",
        "system": "b200_sxm", "precision": "fp8", "mode": "disagg", "isl": 1024, "osl": 64,
        "gemm_quant_mode": "fp8", "moe_quant_mode": "fp8",
        "prefill_batch_size": 1, "prefill_num_workers": 1, "prefill_tp_size": 1, "prefill_pp_size": 1,
        "prefill_attention_dp_size": 8, "prefill_moe_tp_size": 1, "prefill_moe_ep_size": 8,
        "decode_batch_size": 4, "decode_num_workers": 2, "decode_tp_size": 8, "decode_pp_size": 1,
        "decode_attention_dp_size": 1, "decode_moe_tp_size": 1, "decode_moe_ep_size": 8,
        "silicon_ttft_ms": 300.0, "silicon_tpot_ms": 12.0}
# The same model, GPU, stack, deployment and client, aggregated on the decode layout.
AGG = {**{k: v for k, v in DSR1.items() if not k.startswith(("prefill_", "decode_"))}, "id": "agg", "mode": "agg",
       "tp_size": 8, "attention_dp_size": 1, "moe_tp_size": 1, "moe_ep_size": 8, "pp_size": 1, "batch_size": 8}


def _write(tmp_path, *rows: dict):
    path = tmp_path / "silicon_sample.csv"
    pd.DataFrame(list(rows), columns=COLUMNS).to_csv(path, index=False)
    return path


def _rows(tmp_path, *rows: dict) -> dict:
    return {r.id: r for r in rows_from_csv(_write(tmp_path, *rows))}


def test_a_disaggregated_row_carries_both_roles(tmp_path):
    r = _rows(tmp_path, DSR1)["dis"]
    assert (r.skip, r.mode, r.disaggregated, r.concurrency) == ("", "disagg", True, 8)
    assert r.prefill == RoleLayout(replicas=1, tp=1, dp=8, ep=8, batch=1)
    assert r.decode == RoleLayout(replicas=2, tp=8, dp=1, ep=8, batch=4)
    assert (r.tp, r.dp, r.ep) == (8, 1, 8)          # the decode layout, which sets TPOT
    assert r.layout == "prefill 1× TP 1 DP 8 EP 8, decode 2× TP 8 EP 8"     # as validate's tables title it
    assert r.measured["throughput_output_tok_s"] == pytest.approx(8 * 64 / ((300.0 + 63 * 12.0) * 1e-3))


def test_a_disaggregated_row_becomes_a_prefill_pool_feeding_a_decode_pool(tmp_path):
    rows = _rows(tmp_path, DSR1, AGG)
    dis, agg = rows["dis"], rows["agg"]
    assert dis.deployment == agg.deployment == "aiconfigurator"
    sc = scenario_for(dis)
    prefill, decode = sc.pools
    assert (prefill.name, prefill.replicas, prefill.tp, prefill.dp, prefill.ep) == ("prefill", 1, 1, 8, 8)
    assert (decode.name, decode.replicas, decode.tp, decode.dp, decode.ep) == ("decode", 2, 8, 1, 8)
    assert prefill.disaggregation is not None and prefill.disaggregation.decode_pool == "decode"
    assert decode.disaggregation is None
    assert [(c.name, c.pool) for c in sc.classes] == [("all", "prefill")]
    # The prefill worker's batch is the row's prefill_batch_size, a cap each attention-DP rank applies
    # (engine.dp_limits), and each rank has the aggregated row's token budget for its share of C.
    assert prefill.engine.max_num_seqs == 1
    block = load_backend("trtllm").aiconfigurator.budget_block
    assert prefill.engine.max_num_batched_tokens == -(-(8 // 8 + 1024 + 1500) // block) * block
    # The decode pool is the aggregated pool of the same deployment on the decode layout: MTP drafts,
    # the same engine; the prefill pool samples one token and drafts none.
    agg_pool = scenario_for(agg).pools[0]
    assert decode.speculative == agg_pool.speculative and decode.speculative is not None
    assert prefill.speculative is None
    assert decode.engine == agg_pool.engine
    # The same client as the aggregated row (AIPerf: a burst round, then the rest out of phase), the
    # out-of-phase spread over the cycle of the two pools instead of one replica's.
    assert scenario_for(dis, mode="first-round").workload == scenario_for(agg, mode="first-round").workload
    rest, agg_rest = sc.workload.model_dump(), scenario_for(agg).workload.model_dump()
    assert rest["arrival"].pop("ramp_up_s") > 0 and agg_rest["arrival"].pop("ramp_up_s") > 0
    assert rest == agg_rest


def test_each_role_captures_cuda_graphs_up_to_its_own_batch(tmp_path):
    """SGLang on a generated deployment: graphs for batches 1..the role's batch per rank (the
    aggregated row of the same loop captures 1..C), which SGLang's memory reserve follows."""
    rows = _rows(tmp_path, {**DSR1, "backend": "sglang", "backend_version": "0.5.8.post1"},
                 {**AGG, "backend": "sglang", "backend_version": "0.5.8.post1"})
    prefill, decode = scenario_for(rows["dis"]).pools
    assert (prefill.engine.kv_memory.cuda_graph_max_bs, decode.engine.kv_memory.cuda_graph_max_bs) == (1, 4)
    assert scenario_for(rows["agg"]).pools[0].engine.kv_memory.cuda_graph_max_bs == 8
    # the release's memory default refines the launch's flags rather than replacing them
    assert decode.engine.kv_memory.draft_reserve_gib == 2
    assert decode.speculative is not None and not decode.engine.output_after_next_launch


def test_a_tensorrt_llm_prefill_worker_runs_without_the_overlap_scheduler(tmp_path):
    """AIConfigurator's generator turns TensorRT-LLM's overlap scheduler off on a prefill worker
    alone (rule_plugin/trtllm.rule): a prompt arriving there first runs in the next iteration, not
    the one after; the decode pool and the aggregated row plan ahead as the stack does; SGLang's
    prefill worker (drafting nothing) keeps its overlap loop."""
    rows = _rows(tmp_path, DSR1, AGG)
    prefill, decode = scenario_for(rows["dis"]).pools
    assert not prefill.engine.plans_ahead
    assert decode.engine.plans_ahead and scenario_for(rows["agg"]).pools[0].engine.plans_ahead
    sglang = _rows(tmp_path, {**DSR1, "backend": "sglang", "backend_version": "0.5.8.post1"})["dis"]
    assert scenario_for(sglang).pools[0].engine.plans_ahead


@pytest.mark.parametrize("change, why", [
    ({"prefill_num_workers": None, "decode_num_workers": None}, "without prefill_num_workers and "
                                                                 "decode_num_workers"),
    ({"decode_num_workers": None}, "the sizes of its prefill and decode pools are unknown"),
    ({"prefill_moe_tp_size": 0, "prefill_moe_ep_size": 0}, "the prefill layout is ambiguous"),
    ({"decode_moe_ep_size": 4}, "the decode layout is ambiguous"),
    ({"decode_pp_size": 2}, "pipeline parallelism (decode_pp_size 2)"),
    ({"system": "h100_sxm", "decode_tp_size": 16, "decode_moe_ep_size": 16}, "decode tp: tp=16 exceeds the 8 GPUs"),
    ({"system": "rtx_pro_6000"}, "GPU 'rtx_pro_6000' has no built-in profile"),
    ({"mode": "mixed"}, "neither agg nor disagg"),
    ({"model_path": "Qwen/Qwen3-32B", "precision": "bf16", "gemm_quant_mode": None, "moe_quant_mode": None},
     "prefill_attention_dp_size 8 on a dense model"),
])
def test_a_disaggregated_row_llmsim_cannot_model_is_refused_with_its_reason(tmp_path, change, why):
    r = _rows(tmp_path, {**DSR1, **change})["dis"]
    assert why in r.skip
    with pytest.raises(Exception, match="cannot be replayed"):
        scenario_for(r)


def test_without_silicon_concurrency_the_decode_batches_give_it(tmp_path):
    notes = "measured=2026-03-23; " + DYNAMO
    r = _rows(tmp_path, {**DSR1, "silicon_data_source": notes, "decode_batch_size": 3})["dis"]
    assert r.concurrency == 3 * 1 * 2          # decode_batch_size × attention DP × decode workers
    assert r.skip == ""


def test_a_small_disaggregated_row_replays_through_the_pair(tmp_path):
    """Llama-3.1-8B on H100: one prefill replica, two decode replicas, four clients. Its TTFT holds
    the prefill, the KV transfer and the decode replica's first step, so it is longer than the same
    loop's TTFT aggregated on one replica with nothing else queued at C = 1."""
    small = {**DSR1, "model_path": "meta-llama/Llama-3.1-8B-Instruct", "system": "h100_sxm", "backend": "vllm",
             "backend_version": "0.12.0", "precision": "bf16", "gemm_quant_mode": None, "moe_quant_mode": None,
             "silicon_data_source": "silicon_concurrency=1; measured=2026-03-23", "isl": 512, "osl": 16,
             "prefill_attention_dp_size": 1, "prefill_moe_ep_size": 1, "decode_tp_size": 1,
             "decode_moe_ep_size": 1, "prefill_batch_size": 1, "decode_batch_size": 1}
    agg = {**{k: v for k, v in small.items() if not k.startswith(("prefill_", "decode_"))}, "id": "agg",
           "mode": "agg", "tp_size": 1, "batch_size": 1}
    rows = _rows(tmp_path, small, agg)
    assert rows["dis"].skip == "" and rows["agg"].skip == ""
    dis, one = predict(rows["dis"]), predict(rows["agg"])
    assert set(dis) == {"ttft_mean_ms", "tpot_mean_ms", "throughput_output_tok_s"}
    assert dis["ttft_mean_ms"] > one["ttft_mean_ms"]
    assert dis["tpot_mean_ms"] > 0


def test_the_holdout_benchmark_reports_disaggregated_rows_apart(tmp_path, shared_data):
    """Aggregated rows keep their own tables; disaggregated ones get theirs, with their refusals;
    --mode agg replays none of them."""
    import importlib.util
    import sys
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("holdout_silicon", Path(__file__).resolve().parents[1]
                                                  / "benchmarks" / "holdout_silicon.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("holdout_silicon", bench)
    spec.loader.exec_module(bench)
    small = {"model_path": "meta-llama/Llama-3.1-8B-Instruct", "system": "h100_sxm", "backend": "vllm",
             "backend_version": "0.12.0", "precision": "bf16", "gemm_quant_mode": None, "moe_quant_mode": None,
             "silicon_data_source": "silicon_concurrency=2; measured=2026-03-23", "isl": 256, "osl": 16}
    roles = {"prefill_attention_dp_size": 1, "prefill_moe_ep_size": 1, "decode_tp_size": 1, "decode_moe_ep_size": 1}
    path = _write(tmp_path, {**DSR1, **small, **roles, "id": "dis-ok"},
                  {**DSR1, **small, **roles, "id": "dis-nw", "prefill_num_workers": None},
                  {**AGG, **small, "id": "agg-ok", "tp_size": 1, "moe_ep_size": 1, "batch_size": 2})
    both = bench.run(path, 128, 1, None, log=lambda s: None, mode="all")
    assert list(both["errors"].row.unique()) == ["agg-ok"]
    assert both["disagg"]["replayed"] == 1 and list(both["disagg"]["errors"].row.unique()) == ["dis-ok"]
    assert list(both["disagg"]["not_replayed"].values()) == [1]
    parts = bench.sections(both, "CMD")
    assert "1 rows replayed with the shipped profiles" in parts["agg"] and "prefill pool" not in parts["agg"]
    assert "1 disaggregated rows replayed on a prefill pool" in parts["disagg"]
    assert "without prefill_num_workers" in parts["disagg"] and "`CMD`" in parts["disagg"]
    agg_only = bench.run(path, 128, 1, None, log=lambda s: None)
    assert agg_only["disagg"] is None and agg_only["replayed"] == 1
    assert list(bench.sections(agg_only, "CMD")) == ["agg"]
    # Each kind lands between its own markers, on the page --disagg-markdown names.
    page, dis_page = tmp_path / "holdout.md", tmp_path / "disagg.md"
    page.write_text(f"# A\n\n{bench.BEGIN}\nstale table\n{bench.END}\n")
    dis_page.write_text(f"# D\n\n{bench.BEGIN_DISAGG}\nstale table\n{bench.END_DISAGG}\n")
    csv = tmp_path / "errors.csv"
    assert bench.main([str(path), "--jobs", "1", "--markdown", str(page), "--disagg-markdown", str(dis_page),
                       "--csv", str(csv)]) == 0
    assert pd.read_csv(csv).groupby("mode").row.unique().map(list).to_dict() == {"agg": ["agg-ok"],
                                                                                  "disagg": ["dis-ok"]}
    text, dis_text = page.read_text(), dis_page.read_text()
    assert "stale table" not in text and "prefill pool" not in text and bench.BEGIN_DISAGG not in text
    assert "stale table" not in dis_text and "1 disaggregated rows replayed" in dis_text
    assert f"--disagg-markdown {dis_page}" in dis_text


@pytest.mark.parametrize("backend", ["vllm", "trtllm", "sglang-at-0.88"])
def test_a_row_replayed_where_nothing_reads_sglangs_memory_flags_keeps_none(tmp_path, backend):
    """SGLang's launch flags (--cuda-graph-bs 1..C, its default prefill chunk) size SGLang's default
    reserve alone; replayed under another stack's backend (validate --backend) or an SGLang profile
    that fixes mem_fraction_static, nothing reads them, and KvMemory would refuse them."""
    import yaml

    from simulator.profiles.loader import builtin_dir

    name, rule = backend, backend.split("-")[0]
    if rule == "sglang":
        prof = yaml.safe_load((builtin_dir("backend_profiles") / "sglang.yaml").read_text())
        prof["engine"]["kv_memory"] = {"rule": "sglang", "fraction": 0.88}
        name = str(tmp_path / "fixed.yaml")
        Path(name).write_text(yaml.safe_dump({**prof, "name": "fixed"}))
    rows = _rows(tmp_path, {**DSR1, "backend": "sglang", "backend_version": "0.5.8.post1"},
                 {**AGG, "backend": "sglang", "backend_version": "0.5.8.post1"})
    for row in rows.values():
        for pool in scenario_for(row, ReplaySettings(backend=name)).pools:
            kv = pool.engine.kv_memory
            assert kv is not None and kv.rule == rule
            assert (kv.cuda_graph_max_bs, kv.chunked_prefill_size) == (None, None)
            # the release's own memory default (SGLang to 0.5.9 reserves 2 GiB for an EAGLE-style
            # draft) is a knob like the launch's: kept where SGLang's rule reads it, dropped elsewhere
            assert kv.draft_reserve_gib == (2 if rule == "sglang" else None)


def test_a_releases_defaults_stay_with_its_own_stack(tmp_path):
    """vLLM 0.15's defaults (its sort-path sampler bytes, its one-batch pipeline loop) are vLLM's: a
    vLLM row replayed under validate --backend trtllm carried them into TensorRT-LLM's accounting."""
    vllm = {**AGG, "backend": "vllm", "backend_version": "0.15.1", "id": "v"}
    row = _rows(tmp_path, vllm)["v"]
    assert row.version_keys.get("kv_memory") == {"sampler_logit_bytes": 28}
    own = scenario_for(row).pools[0].engine
    assert own.kv_memory.sampler_logit_bytes == 28 and own.pp_async == "one_batch"
    other = scenario_for(row, ReplaySettings(backend="trtllm")).pools[0].engine
    assert other.kv_memory.rule == "trtllm" and other.kv_memory.sampler_logit_bytes is None
    assert other.pp_async != "one_batch"


def test_a_drafting_sglang_decode_pool_keeps_its_launchs_cap_a_rank(tmp_path):
    """SGLang's 48 beside a draft is split among the attention ranks (running_cap: server); a
    replay whose launch sets the cap (⌈C/dp⌉ a rank) keeps it a rank's: 4,096 at once over 32
    ranks, where the 48's rule left 128 (4 a rank)."""
    from simulator.scenario.schema import PoolSpec

    row = {**DSR1, "id": "sgl", "backend": "sglang", "backend_version": "0.5.8.post1",
           "model_path": "deepseek-ai/DeepSeek-V3", "system": "gb300", "precision": "fp4",
           "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4", "osl": 1024,
           "silicon_data_source": "db-dump; silicon_concurrency=4096; measured=2026-02-12T00:00:00Z; "
                                  "lmsysorg/sglang:v0.5.8.post1-cu130-runtime",
           "prefill_num_workers": 4, "prefill_attention_dp_size": 4, "prefill_moe_ep_size": 4,
           "decode_batch_size": 128, "decode_num_workers": 1, "decode_tp_size": 1,
           "decode_attention_dp_size": 32, "decode_moe_ep_size": 32}
    decode = scenario_for(_rows(tmp_path, row)["sgl"]).pools[1]
    assert decode.speculative is not None and (decode.dp, decode.engine.max_num_seqs) == (32, 128)
    engine = PoolSpec.model_validate(decode.model_dump(exclude_unset=True)).engine
    assert engine.running_cap == "given" and engine.rank_running_requests(10**6, 2048, 32) == 128
