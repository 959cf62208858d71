"""KV capacity as llmsim sizes it against what the stacks logged at start-up.

    python benchmarks/kv_capacity.py

Each case is a public start-up log of a known deployment (the address is
beside it) and the figure the stack printed: vLLM's
``available_kv_cache_memory`` (GiB per GPU), SGLang's ``KV Cache is
allocated. #tokens``. llmsim sizes the same deployment with the stack's
accounting (:mod:`simulator.kv_memory`) and the engine settings the log
states or the stack's defaults of the time; nothing is fitted to these
figures.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.kv_memory import KvMemory  # noqa: E402
from simulator.memory import plan_memory  # noqa: E402
from simulator.profiles import load_hardware, load_model  # noqa: E402
from simulator.profiles.hardware import GIB  # noqa: E402


@dataclass(frozen=True)
class Case:
    name: str
    source: str
    model: str
    gpu: str
    tp: int
    weight_dtype: str
    metric: str                 # "kv_gib_per_gpu" or "tokens"
    logged: float
    engine: dict[str, Any] = field(default_factory=dict)


CASES = [
    # vLLM 0.6.5's profiling summary (V0 worker; the same accounting as V1's
    # determine_available_memory): total 79.22 GiB, can use 71.29, weights 14.96,
    # non-torch 1.79, activation peak 1.26, available 53.29 GiB. Defaults of that
    # serve: an 8,192-token budget (max_model_len, no chunked prefill), 256 sequences.
    Case("vLLM Llama-3-8B 1×H100", "github.com/vllm-project/vllm/pull/10511", "llama-3-8b", "h100-sxm", 1,
         "bf16", "kv_gib_per_gpu", 53.29, {"max_num_batched_tokens": 8192, "max_num_seqs": 256}),
    # Same log at tp 2: weights 7.48, non-torch 3.58, activation 1.26 of 71.29 GiB.
    Case("vLLM Llama-3-8B 2×H100", "github.com/vllm-project/vllm/pull/10511", "llama-3-8b", "h100-sxm", 2,
         "bf16", "kv_gib_per_gpu", 71.29 - 7.48 - 3.58 - 1.26,
         {"max_num_batched_tokens": 8192, "max_num_seqs": 256}),
    # SGLang --tp 4 --mem-fraction-static 0.93: "KV Cache is allocated. #tokens: 367404".
    Case("SGLang Qwen3-235B-A22B-FP8 4×H100", "github.com/vllm-project/vllm/issues/21348", "qwen3-235b-a22b-fp8",
         "h100-sxm", 4, "fp8", "tokens", 367404,
         {"kv_memory": KvMemory(rule="sglang", fraction=0.93), "block_size": 1}),
]


def llmsim_value(c: Case) -> float:
    e = dict(c.engine)
    kv = e.pop("kv_memory", None)
    mem = plan_memory(load_model(c.model), load_hardware(c.gpu), c.tp, c.weight_dtype, "bf16",
                      max_num_batched_tokens=e.get("max_num_batched_tokens", 8192),
                      max_num_seqs=e.get("max_num_seqs", 256), block_size=e.get("block_size", 16), kv_memory=kv)
    if c.metric == "tokens":
        return float(mem.kv_capacity_tokens)
    return mem.kv_capacity_bytes / c.tp / GIB


def main() -> int:
    print("| deployment | logged | llmsim | error | source |\n|---|---:|---:|---:|---|")
    for c in CASES:
        v = llmsim_value(c)
        unit = " tokens" if c.metric == "tokens" else " GiB/GPU"
        fmt = "{:,.0f}" if c.metric == "tokens" else "{:.2f}"
        print(f"| {c.name} | {fmt.format(c.logged)}{unit} | {fmt.format(v)}{unit} | "
              f"{100 * (v / c.logged - 1):+.1f} % | {c.source} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
