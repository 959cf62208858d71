"""KV capacity as llmsim sizes it against what the stacks logged at start-up.

    python benchmarks/kv_capacity.py

Each case is a public start-up log of a known deployment (the address is
beside it) and the figure the stack printed: vLLM's
``available_kv_cache_memory`` / ``Available KV cache memory`` (GiB per GPU,
before a hybrid model's sliding-window layers take their share), SGLang's
``KV Cache is allocated. #tokens``. llmsim sizes the same deployment with
the stack's accounting (:mod:`simulator.kv_memory`) and the engine settings
the log states or the stack's defaults of the time (a case naming the
release its log ran resolves them through the backend profile, as a pool's
``engine.backend_version`` does); nothing is fitted to these figures.

A case whose gap llmsim does not model yet carries ``gap``: the reading of
which term of the stack's accounting the gap is, printed under the table
(the row is marked with a dagger). The error of a logged figure at or below
zero (a deployment the stack refused) is the difference, not a ratio.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.costmodel.step import CostModel  # noqa: E402
from simulator.engine.config import EngineConfig  # noqa: E402
from simulator.kv_memory import KvMemory, kv_budget  # noqa: E402
from simulator.memory import gpu_share, plan_memory  # noqa: E402
from simulator.profiles import load_hardware, load_model  # noqa: E402
from simulator.profiles.backend import apply_backend  # noqa: E402
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
    gap: str = ""               # a known gap llmsim does not model, and its reading
    release: str = ""           # the vLLM release the log ran: its defaults and rules, engine keys over them


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
    # The same issue's vLLM launch: `vllm serve Qwen3-235B-A22B-FP8 --tensor-parallel-size 4`
    # (and an LMCache kv-transfer connector), "Available KV cache memory: 8.11 GiB" per GPU
    # ("GPU KV cache size: 178,880 tokens" is derived from it). vLLM of July 2025 (0.9.2, or
    # 0.10.0 two days later): V1 defaults on an H100 of gpu_memory_utilization 0.9 of the 79.22
    # GiB CUDA reports, 8,192 batched tokens, 1,024 sequences (engine/arg_utils.py).
    Case("vLLM Qwen3-235B-A22B-FP8 4×H100", "github.com/vllm-project/vllm/issues/21348",
         "qwen3-235b-a22b-fp8", "h100-sxm", 4, "fp8", "kv_gib_per_gpu", 8.11,
         {"max_num_batched_tokens": 8192, "max_num_seqs": 1024},
         gap="with llmsim's weights (the SGLang row holds them right), vLLM keeps 8.1 GiB a GPU for its "
             "profiling peak and non-torch memory against llmsim's 4.4. Its V1 profiling run samples 1,024 "
             "dummy requests over the 151,936-token vocabulary, and without FlashInfer the PyTorch "
             "top-k/top-p path (v1/sample/ops/topk_topp_sampler.py: sorted fp32 values, int64 indices, "
             "masks, softmax) holds those logits about 7 times (28 bytes an entry, 4 GiB; vLLM all-gathers "
             "them, so every GPU holds the whole vocabulary), llmsim the 14 bytes of the in-place path "
             "vLLM runs from 0.17 (2 GiB; kv_memory.sampler_logit_bytes: 28 gives the sort path); at tp 4 "
             "NCCL and all-reduce buffers exceed llmsim's 2 GiB runtime (vLLM logged 3.58 GiB outside "
             "torch at tp 2 for Llama-3-8B, above)"),
    # `vllm serve openai/gpt-oss-120b --gpu-memory-utilization 0.95 --max-num-batched-tokens 1024`
    # on one H100: "Available KV cache memory: 1.71 GiB" (then the 131,072-token context does not
    # fit). vLLM 0.11.0: the log's gpu_worker.py:298 and core.py:708 ("EngineCore failed to
    # start.") are those lines in 0.11.0, its environment torch 2.8.0; its default max_num_seqs on an
    # H100 is 1,024. That release holds the MXFP4 experts in Marlin's padded layout and samples the
    # profiling run's dummy requests on the PyTorch sort path (FlashInfer is an extra of its wheel):
    # backend_profiles/vllm.yaml by_version.
    Case("vLLM gpt-oss-120b 1×H100 (0.95)", "github.com/vllm-project/vllm/issues/27508", "gpt-oss-120b",
         "h100-sxm", 1, "mxfp4", "kv_gib_per_gpu", 1.71,
         {"gpu_memory_utilization": 0.95, "max_num_batched_tokens": 1024}, release="0.11.0"),
    # Same deployment at vLLM 0.10.1's defaults (0.9, 8,192 tokens, 1,024 sequences): "Model loading
    # took 65.9651 GiB" (Marlin MXFP4 backend; llmsim's Marlin layout: 65.90 GiB, the experts' bf16
    # biases included), "Available KV cache memory: -2.14 GiB": vLLM refuses it.
    Case("vLLM gpt-oss-120b 1×H100 (0.9)", "github.com/vllm-project/vllm/issues/23278", "gpt-oss-120b",
         "h100-sxm", 1, "mxfp4", "kv_gib_per_gpu", -2.14, release="0.10.1"),
]


def llmsim_value(c: Case) -> float:
    if c.release:
        return _release_value(c)
    e = dict(c.engine)
    kv = e.pop("kv_memory", None)
    model, gpu = load_model(c.model), load_hardware(c.gpu)
    mem = plan_memory(model, gpu, c.tp, c.weight_dtype, "bf16",
                      max_num_batched_tokens=e.get("max_num_batched_tokens", 8192),
                      max_num_seqs=e.get("max_num_seqs", 256), block_size=e.get("block_size", 16), kv_memory=kv,
                      expert_storage=CostModel(model, gpu, c.tp, c.weight_dtype).expert_storage)
    if c.metric == "tokens":
        return float(mem.kv_capacity_tokens)
    # vLLM's available KV memory is the pool before its sliding-window layers take their share.
    return (mem.kv_capacity_bytes + mem.kv_window_bytes) / c.tp / GIB


def _release_value(c: Case) -> float:
    """vLLM's available KV memory per GPU for ``c`` under its release's defaults and rules."""
    model, gpu = load_model(c.model), load_hardware(c.gpu)
    e = EngineConfig(**apply_backend({"backend": "vllm", "backend_version": c.release, "weight_dtype": c.weight_dtype,
                                      **c.engine}, c.gpu, model=model))
    cm = CostModel(model, gpu, c.tp, e.weight_dtype, mxfp4_expert_layout=e.mxfp4_expert_layout)
    share = gpu_share(model, gpu, c.tp, e.weight_dtype, e.max_num_batched_tokens, e.max_num_seqs,
                      expert_storage=cm.expert_storage)
    return kv_budget(share, e.kv_memory, e.gpu_memory_utilization).kv_bytes / GIB   # negative: refused


def error(c: Case, value: float) -> str:
    """llmsim against the log: relative, or the difference where the stack logged no room."""
    if c.logged <= 0:
        return f"{value - c.logged:+.2f} GiB"
    return f"{100 * (value / c.logged - 1):+.1f} %"


def main() -> int:
    print("| deployment | logged | llmsim | error | source |\n|---|---:|---:|---:|---|")
    gaps = []
    for c in CASES:
        v = llmsim_value(c)
        unit = " tokens" if c.metric == "tokens" else " GiB/GPU"
        fmt = "{:,.0f}" if c.metric == "tokens" else "{:.2f}"
        mark = " †" if c.gap else ""
        print(f"| {c.name}{mark} | {fmt.format(c.logged)}{unit} | {fmt.format(v)}{unit} | "
              f"{error(c, v)} | {c.source} |")
        if c.gap:
            gaps.append(f"† {c.name}: {c.gap}.")
    if gaps:
        print("\nKnown gaps llmsim does not model yet:\n")
        print("\n".join(gaps))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
