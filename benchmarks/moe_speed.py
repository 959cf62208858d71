"""Does an MoE model simulate as fast as a dense one with the same batches?

    python benchmarks/moe_speed.py              # ~2 min on an idle core
    python benchmarks/moe_speed.py --quick      # 5x fewer requests, for smoke tests
    python benchmarks/moe_speed.py --json       # also print the numbers as JSON

An MoE layer's time depends on how many distinct experts a batch touches, an
expectation over the router that is costlier to evaluate than a dense GEMM
(gpt-oss's MXFP4 experts on Hopper sum a binomial per token count). The cost
model memoises it per token count as it does the dense terms, so once the
engine has seen a batch size the MoE model should cost no more per
iteration than a dense one. This benchmark checks that where it matters,
in a whole simulation: each MoE model is run against a dense model on the
same GPU and parallel layout, with the same closed loop (concurrency 128,
ShareGPT-like lengths, vLLM's chunked prefill), so both engines see the
same batch sizes, and the speed is simulated requests per CPU-second of the
whole ``simulate()`` call (memo fills included: every call builds its own
cost model; one small untimed run of each model first pays the imports).
Pairs run interleaved, ``--repeats`` times, and the ratio is taken within a
repeat, so background load on a shared machine cancels; the
median ratio is reported. Mean batch and iterations per request are printed
beside it to show that the two engines did the same work.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
try:   # the installed llmsim (compiled by `pip install .`), else the checkout's plain Python
    import simulator  # noqa: F401
except ImportError:
    sys.path.insert(0, str(ROOT))

from simulator.runner import simulate  # noqa: E402
from simulator.scenario.schema import Scenario  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_speed import run_llmsim  # noqa: E402  (one timed simulate(), wall and CPU)

CONCURRENCY = 128
ENGINE = {"max_num_seqs": 256, "max_num_batched_tokens": 8192, "chunked_prefill": True, "block_size": 16,
          "gpu_memory_utilization": 0.9}
LENGTHS = {"input_tokens": {"dist": "sharegpt", "part": "input"},
           "output_tokens": {"dist": "sharegpt", "part": "output"}}
# (MoE model, its weights, dense yardstick, its weights, GPU, tp, ep): layouts that fit
# and leave the closed loop's KV room, so both engines run the same batches.
PAIRS = [
    ("qwen3-30b-a3b", "bf16", "llama-3.1-8b", "bf16", "h100-sxm", 1, 1),
    ("mixtral-8x7b", "bf16", "qwen3-32b", "bf16", "h100-sxm", 2, 1),
    ("gpt-oss-120b", "mxfp4", "qwen3-32b", "bf16", "h100-sxm", 2, 1),
    ("qwen3-235b-a22b-fp8", "fp8", "llama-3.1-70b", "fp8", "h200", 8, 8),
    ("deepseek-v3", "fp8", "llama-3.1-70b", "fp8", "h200", 8, 8),
]


def scenario(model: str, dtype: str, gpu: str, tp: int, ep: int, n: int) -> Scenario:
    return Scenario.model_validate({
        "name": f"{model}-speed", "seed": 1,
        "workload": {"num_requests": n, "arrival": {"type": "concurrency", "concurrency": CONCURRENCY}, **LENGTHS},
        "pools": [{"model": model, "gpu": gpu, "tp": tp, "ep": ep, "replicas": 1,
                   "engine": {**ENGINE, "weight_dtype": dtype}}],
    })


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="5x fewer requests")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    n = 4_000 if args.quick else 20_000
    runs: dict[str, list[tuple[dict, dict]]] = {p[0]: [] for p in PAIRS}
    for moe, mdt, dense, ddt, gpu, tp, ep in PAIRS:   # imports and first-use costs, not timed
        simulate(scenario(moe, mdt, gpu, tp, ep, 50))
        simulate(scenario(dense, ddt, gpu, tp, 1, 50))
    for _ in range(args.repeats):
        for moe, mdt, dense, ddt, gpu, tp, ep in PAIRS:
            m = run_llmsim(scenario(moe, mdt, gpu, tp, ep, n))
            d = run_llmsim(scenario(dense, ddt, gpu, tp, 1, n))
            runs[moe].append((m, d))
    print(f"closed loop at concurrency {CONCURRENCY}, {n:,} ShareGPT-like requests, "
          f"median of {args.repeats} interleaved repeats (load average at the end {os.getloadavg()[0]:.1f})")
    print(f"{'MoE model':<22}{'yardstick':<16}{'layout':<16}{'MoE req/CPU-s':>14}{'dense req/CPU-s':>16}"
          f"{'ratio':>7}{'batch MoE/dense':>17}{'iters/req MoE/dense':>21}")
    rows = []
    for moe, mdt, dense, ddt, gpu, tp, ep in PAIRS:
        pairs = runs[moe]
        ratio = statistics.median(m["cpu"] / d["cpu"] for m, d in pairs)
        m_rate = statistics.median(m["cpu"] for m, _ in pairs)
        d_rate = statistics.median(d["cpu"] for _, d in pairs)
        m0, d0 = pairs[0]
        per_request = [m0["iterations"] / m0["requests"], d0["iterations"] / d0["requests"]]
        row = {"moe": moe, "dense": dense, "gpu": gpu, "tp": tp, "ep": ep, "moe_rate": m_rate, "dense_rate": d_rate,
               "ratio": ratio, "mean_batch": [m0["mean_batch"], d0["mean_batch"]], "iterations_per_request": per_request}
        rows.append(row)
        print(f"{moe:<22}{dense:<16}{f'{gpu} tp{tp} ep{ep}':<16}{m_rate:>14,.0f}{d_rate:>16,.0f}{ratio:>7.2f}"
              f"{m0['mean_batch']:>9.1f} / {d0['mean_batch']:<6.1f}"
              f"{per_request[0]:>11.2f} / {per_request[1]:<7.2f}")
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
