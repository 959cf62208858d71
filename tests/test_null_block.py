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
        r = cli("run", p, "-o", out)
        res = json.loads((out / "results.json").read_text())["llmsim"]
        assert res["pools"]["main"]["kv_blocks_per_replica"] == blocks * dp      # the pool as vLLM logs it
        statuses[blocks] = (r.code, res["request_status"]["rejected"], res["request_status"]["finished"])
    assert statuses == {64: (1, 4, 0), 65: (0, 0, 4)}, statuses
