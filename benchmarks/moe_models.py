"""MoE and MLA models: what each shared-corpus config gives, and simulation speed.

    python benchmarks/moe_models.py corpus             # ../shared/data/models/moe/*.yaml
    python benchmarks/moe_models.py speed [--requests N] [--repeats R]

``corpus`` loads every config of the shared corpus (read in place) and
prints total and active parameters, KV bytes per token (bf16) and the layout
llmsim reads, or the one-line reason it refuses the config.

``speed`` simulates the same closed-loop ShareGPT-like workload (4 × 256
users, so replicas stay saturated) on one replica of a dense and of several
MoE/MLA models, and prints simulated requests per wall second
(``sim_requests_per_wall_s`` of the run's timing, run.json), requests and engine iterations per
CPU second of the whole ``simulate()`` call (``time.process_time``, which
other processes on a shared machine inflate much less than the wall
clock), the median over the repeats. The MoE models must
simulate as fast as the dense one: their step costs are memoised per token
count like the dense model's.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.errors import LlmsimError  # noqa: E402
from simulator.profiles import load_model  # noqa: E402
from simulator.runner import simulate  # noqa: E402
from simulator.scenario.schema import Scenario  # noqa: E402

CORPUS = ROOT.parent / "shared" / "data" / "models" / "moe"
ENGINE = {"max_num_seqs": 256, "max_num_batched_tokens": 8192}
CASES = [  # (label, pool settings)
    ("llama-3-70b tp4 h100 (dense)", {"model": "llama-3-70b", "gpu": "h100-sxm", "tp": 4}),
    ("mixtral-8x7b tp2 h100", {"model": "mixtral-8x7b", "gpu": "h100-sxm", "tp": 2}),
    ("qwen3-30b-a3b tp1 h100", {"model": "qwen3-30b-a3b", "gpu": "h100-sxm", "tp": 1}),
    ("gpt-oss-120b tp1 b200 mxfp4", {"model": "gpt-oss-120b", "gpu": "b200", "tp": 1,
                                     "engine": {**ENGINE, "weight_dtype": "mxfp4"}}),
    ("deepseek-v3 dp8 ep8 h200 fp8", {"model": "deepseek-v3", "gpu": "h200", "tp": 1, "dp": 8, "ep": 8,
                                      "engine": {**ENGINE, "weight_dtype": "fp8"}}),
]


def corpus() -> None:
    files = sorted(CORPUS.glob("*.yaml"))
    if not files:
        sys.exit(f"no configs in {CORPUS}")
    print(f"{'config':48s} {'total B':>8s} {'active B':>9s} {'KV B/tok':>9s}  layout")
    for f in files:
        try:
            m = load_model(str(f))
        except LlmsimError as e:
            print(f"{f.stem:48s} refused: {e.message} ({e.key_path})")
            continue
        print(f"{f.stem:48s} {m.num_params / 1e9:8.2f} {m.active_params / 1e9:9.2f} "
              f"{m.kv_bytes_per_token('bf16'):9,.0f}  {m.summary()['layout']}")


def scenario(pool: dict, n: int) -> Scenario:
    return Scenario.model_validate({
        "name": "moe-speed", "seed": 1,
        "workload": {"num_requests": n, "arrival": {"type": "concurrency", "concurrency": 1024},
                     "input_tokens": {"dist": "sharegpt", "part": "input"},
                     "output_tokens": {"dist": "sharegpt", "part": "output"}},
        "pools": [{"name": "main", "engine": ENGINE, **pool}],
    })


def speed(n: int, repeats: int) -> None:
    print(f"{'case':32s} {'req/wall s':>11s} {'req/CPU s':>10s} {'iter/CPU s':>11s} {'iterations':>11s} "
          f"{'mean batch':>11s}")
    rows: dict[str, list] = {label: [] for label, _ in CASES}
    for _ in range(repeats):   # cases interleaved, so each repeat sees similar background load
        for label, pool in CASES:
            c = time.process_time()
            out = simulate(scenario(pool, n))
            cpu = time.process_time() - c
            ll = out.results["llmsim"]
            rows[label].append((out.timing["sim_requests_per_wall_s"], n / cpu, ll["iterations"] / cpu, ll["iterations"],
                                ll["mean_batch_size"]))
    for label, _ in CASES:
        med = [statistics.median(r[i] for r in rows[label]) for i in range(5)]
        print(f"{label:32s} {med[0]:11,.0f} {med[1]:10,.0f} {med[2]:11,.0f} {med[3]:11,.0f} {med[4]:11.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["corpus", "speed"])
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    corpus() if a.what == "corpus" else speed(a.requests, a.repeats)


if __name__ == "__main__":
    main()
