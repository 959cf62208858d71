"""vLLM's null block: one block of each attention rank's pool no request ever holds.

vLLM's V1 ``BlockPool`` takes its null block off the free queue as it starts (v1/core/block_pool.py
``BlockPool.__init__``: 'self.null_block = self.free_block_queue.popleft()'), in every release, while
the pool size it logs ('GPU KV cache size') counts it. llmsim states the pool as logged and schedules
requests in the rest; SGLang and TensorRT-LLM keep nothing back of the size they log.
"""
from __future__ import annotations

import json

import pytest

from simulator.kv_memory import KvMemory
from simulator.memory import plan_memory
from simulator.profiles import load_hardware, load_model

SCENARIO = """\
name: null-block
workload:
  arrival: {{type: poisson, rate_per_s: 2}}
  num_requests: 4
  input_tokens: {{dist: fixed, value: 1000}}
  output_tokens: {{dist: fixed, value: 24}}
pools:
  - name: main
    model: llama-3.1-8b
    gpu: h100-sxm
    dp: {dp}
    engine: {{backend: vllm, backend_version: "0.28.0", num_gpu_blocks_override: {blocks}, max_model_len: 1024}}
"""


@pytest.mark.parametrize("rule, held", [("vllm", 1), ("sglang", 0), ("trtllm", 0), (None, 0)])
def test_only_vllm_keeps_a_block_of_each_rank_back(rule, held):
    kv = None if rule is None else KvMemory(rule=rule)
    mem = plan_memory(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), tp=1, dp=2, kv_memory=kv)
    assert mem.null_blocks == held
    assert mem.usable_blocks == mem.num_blocks - 2 * held
    assert mem.usable_rank_blocks == mem.num_blocks // 2 - held


@pytest.mark.parametrize("dp", [1, 2])
def test_a_request_needing_the_whole_rank_pool_is_never_served(cli, tmp_path, dp):
    """1,024 tokens in 16-token blocks need 64 blocks of a rank (the last token's KV is never written):
    vLLM 0.28.0 starts with 64 blocks a rank (its start-up check counts the null block; 0.29.0 on does
    not), yet hands out 63, so such a request can never be scheduled. With 65 blocks it is served."""
    statuses = {}
    for blocks in (64, 65):
        p = tmp_path / f"b{blocks}.yaml"
        p.write_text(SCENARIO.format(dp=dp, blocks=blocks))
        out = tmp_path / f"out{blocks}"
        r = cli("run", p, "--no-plots", "-o", out)
        res = json.loads((out / "results.json").read_text())["llmsim"]
        assert res["pools"]["main"]["kv_blocks_per_replica"] == blocks * dp      # the pool as vLLM logs it
        statuses[blocks] = (r.code, res["request_status"]["rejected"], res["request_status"]["finished"])
    assert statuses == {64: (1, 4, 0), 65: (0, 0, 4)}, statuses


@pytest.mark.parametrize("dp", [1, 2])
def test_a_rank_of_one_block_serves_nothing_and_its_utilisation_is_zero(cli, tmp_path, dp):
    """num_gpu_blocks_override: 1 on vLLM 0.28.0 (whose start-up check counts the null block) starts
    a server whose ranks hold no block a request can have: every request is rejected on arrival as
    exceeding the KV pool, and the KV usage is 0, as vLLM's BlockPool.get_usage answers a pool of
    no blocks but the null one, not a division by zero."""
    p = tmp_path / "one.yaml"
    p.write_text(SCENARIO.format(dp=dp, blocks=1).replace("value: 1000", "value: 4").replace("value: 24", "value: 4")
                 .replace("max_model_len: 1024", "max_model_len: 16"))
    out = tmp_path / "out"
    r = cli("run", p, "--no-plots", "-o", out)
    assert r.code == 1, r.err                       # overloaded: everything shed
    res = json.loads((out / "results.json").read_text())["llmsim"]
    main = res["pools"]["main"]
    assert main["kv_blocks_per_replica"] == dp
    assert (main["mean_kv_utilization"], main["max_kv_utilization"]) == (0.0, 0.0)
    assert res["request_status"]["rejected"] == 4
    import pandas as pd

    assert set(pd.read_parquet(out / "requests.parquet")["reject_reason"]) == {"exceeds_kv"}


def test_a_rank_whose_only_block_is_the_null_block_holds_no_request():
    """Three blocks over two ranks: each rank has one, its null block, so a rank holds nothing for a
    request (PoolSetup.rank_blocks 0) while the replica's pooled count is 1. A rank bound of 0 is
    a bound, not 'no dp': the one-block request is rejected, by both engines."""
    from helpers_engine import compare_runs, make_requests, run_open
    from simulator.engine.config import EngineConfig
    from workloads.rejection import Rejection

    reqs = make_requests([0.0], [8], [4])
    runs = [run_open(engine, reqs, EngineConfig(), 1, dp=2, rank_blocks=0) for engine in ("fast", "reference")]
    assert compare_runs(*runs) == []
    assert runs[0].requests[0].reject_reason is Rejection.EXCEEDS_KV


def test_a_contiguous_pool_of_no_usable_block_reports_zero_utilisation(cli, tmp_path):
    """The same pool under contiguous KV with vLLM's memory rule: its kv_allocation figures are 0 too."""
    p = tmp_path / "contiguous.yaml"
    p.write_text(SCENARIO.format(dp=1, blocks=1).replace("value: 1000", "value: 4").replace("value: 24", "value: 4")
                 .replace('backend: vllm, backend_version: "0.28.0"',
                          "kv_allocation: contiguous, prefix_cache: false, kv_memory: {rule: vllm}")
                 .replace("max_model_len: 1024", "max_model_len: 16"))
    out = tmp_path / "out"
    r = cli("run", p, "--no-plots", "-o", out)
    assert r.code == 1, r.err
    alloc = json.loads((out / "results.json").read_text())["llmsim"]["pools"]["main"]["kv_allocation"]
    assert alloc["mean_reserved_utilization"] == alloc["max_filled_utilization"] == 0.0


@pytest.mark.parametrize("dp", [1, 2, 3, 8])
def test_each_rank_cuts_its_own_pool_into_whole_blocks(dp):
    """A replica of dp ranks holds dp times one rank's whole blocks: the summed bytes cut once
    would count up to dp - 1 blocks no rank has."""
    mem = plan_memory(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), tp=1, dp=dp,
                      kv_memory=KvMemory(rule="vllm"))
    block = mem.kv_bytes_per_token * mem.block_size
    assert mem.num_blocks == dp * int(mem.kv_capacity_bytes / dp // block)
    assert mem.num_blocks % dp == 0 and mem.rank_blocks * dp == mem.num_blocks


def test_attention_dp_concurrency_is_per_rank():
    """Each rank holds its own requests: a replica runs dp times what one rank's usable blocks hold,
    never a request split over two ranks' leftovers."""
    one = plan_memory(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), tp=1, dp=1, kv_memory=KvMemory(rule="vllm"))
    four = plan_memory(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), tp=1, dp=4, kv_memory=KvMemory(rule="vllm"))
    tokens = (one.usable_blocks // 3 + 1) * one.block_size    # three fit one rank's pool whole: two do
    assert one.max_concurrent(tokens) == 2
    assert four.max_concurrent(tokens) == 4 * (four.usable_rank_blocks // -(-tokens // four.block_size))
