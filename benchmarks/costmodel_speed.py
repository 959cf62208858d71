"""How many iteration-time evaluations per second the cost model answers.

    python benchmarks/costmodel_speed.py            # ~10 s, one core
    python benchmarks/costmodel_speed.py --json     # also print the numbers as JSON

The engine asks :meth:`CostModel.step_time` once per scheduled iteration
that contains a prefill chunk, and :meth:`CostModel.decode_coefficients`
once per run of decode-only iterations, so these two calls bound how fast a
simulation can go. Mixes measured, each on the shipped (calibrated)
parameters of the GPU:

* decode-only iterations of a fixed batch size with varying context
  (warm memo: the batch size has been seen before, as in a steady state);
* the same with the memo cleared before every call (cold: every call
  recomputes the GEMM/all-reduce/elementwise terms from scratch);
* mixed iterations, one 512-token prefill chunk over a varying cached prefix
  plus a decode batch (vLLM's chunked prefill), warm and cold;
* ``decode_coefficients(B)`` for varying B, warm and cold.

Each figure is the best of 40 short (~2 ms) timed repeats on one pinned core (the best,
as timeit does, because other processes only ever add time); the load
average at the start is printed so a noisy machine shows.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import machine  # noqa: E402
import numpy as np  # noqa: E402

from simulator import CostModel, load_hardware, load_model  # noqa: E402

REPEATS = 40
# Calls per timed repeat: ~2 ms each, short enough that some repeats run
# unpreempted on a busy machine.
CALLS = 4_000
COLD_CALLS = 250


def pin_one_core() -> str:
    if hasattr(os, "sched_setaffinity"):
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        return f"pinned to CPU {cpu}"
    return "not pinned (no sched_setaffinity)"


def clear(cm: CostModel) -> None:
    cm._token_cache.clear()
    cm._lm_cache.clear()


def rate(fn, args: list, cold: CostModel | None = None) -> float:
    """Calls per second of ``fn(*a)`` over ``args``; with ``cold`` the
    memo is cleared before every call (clearing is timed too: it is a
    couple of dict.clear() calls, small against a cold evaluation)."""
    times = []
    for _ in range(REPEATS):
        if cold is None:
            t0 = time.perf_counter()
            for a in args:
                fn(*a)
            dt = time.perf_counter() - t0
        else:
            t0 = time.perf_counter()
            for a in args:
                clear(cold)
                fn(*a)
            dt = time.perf_counter() - t0
        times.append(dt)
    return len(args) / min(times)


def bench(model: str, gpu: str, tp: int, rng: random.Random) -> list[dict]:
    cm = CostModel(load_model(model), load_hardware(gpu), tp)
    label = f"{model} TP{tp} {gpu} ({cm.describe()['mode']})"
    rows = []

    def row(mix: str, calls_per_s: float) -> None:
        rows.append({"config": label, "mix": mix, "calls_per_s": calls_per_s, "us_per_call": 1e6 / calls_per_s})

    for batch in (1, 32, 256):
        args = [((), batch, float(batch * rng.randint(100, 8000))) for _ in range(CALLS)]
        cm.step_time(*args[0])  # warm the memo for this batch size
        row(f"step_time decode B={batch} warm", rate(cm.step_time, args))
        row(f"step_time decode B={batch} cold", rate(cm.step_time, args[:COLD_CALLS], cold=cm))

    # Chunked prefill: a 512-token chunk over a random cached prefix, plus a
    # decode batch whose size drifts (so the token count varies as in a run).
    mixed = []
    for _ in range(CALLS):
        b = rng.randint(0, 64)
        mixed.append(([(512, rng.randint(0, 7680))], b, float(b * rng.randint(100, 8000))))
    for a in mixed:
        cm.step_time(*a)
    row("step_time prefill 512 + decode B~U(0,64) warm", rate(cm.step_time, mixed))
    row("step_time prefill 512 + decode B~U(0,64) cold", rate(cm.step_time, mixed[:COLD_CALLS], cold=cm))

    coeff = [(rng.randint(1, 256),) for _ in range(CALLS)]
    for a in coeff:
        cm.decode_coefficients(*a)
    row("decode_coefficients B~U(1,256) warm", rate(cm.decode_coefficients, coeff))
    row("decode_coefficients B~U(1,256) cold", rate(cm.decode_coefficients, coeff[:COLD_CALLS], cold=cm))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="also print the results as JSON")
    args = ap.parse_args()
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    pinned = pin_one_core()
    rng = random.Random(20240607)
    t0 = time.perf_counter()
    rows = bench("llama-3-8b", "h100-sxm", 1, rng) + bench("llama-3-70b", "h100-sxm", 4, rng)
    elapsed = time.perf_counter() - t0

    info = {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "numpy": np.__version__,
        "platform": platform.platform(),
        "cpu": machine.cpu_model(),
        "nproc": os.cpu_count(),
        "affinity": pinned,
        "loadavg_1m": round(load[0], 2) if load else None,
        "elapsed_s": round(elapsed, 1),
    }
    for k, v in info.items():
        print(f"{k:>9}: {v}")
    print()
    w = max(len(r["mix"]) for r in rows)
    config = None
    for r in rows:
        if r["config"] != config:
            config = r["config"]
            print(config)
            print(f"  {'mix':<{w}}  {'calls/s':>10}  {'µs/call':>8}")
        print(f"  {r['mix']:<{w}}  {r['calls_per_s']:>10,.0f}  {r['us_per_call']:>8.2f}")
    if args.json:
        print(json.dumps({"info": info, "results": rows}, indent=2))


if __name__ == "__main__":
    main()
