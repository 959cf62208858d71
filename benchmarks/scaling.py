"""How a simulation's cost grows with requests, replicas and prompt length.

    python benchmarks/scaling.py            # ~1 min with the compiled build, a few without
    python benchmarks/scaling.py --json     # also print the figures as JSON

CPU time of ``simulate()`` (``time.process_time``, medians of
``--repeats`` repeats) with engine_speed.py's replica (Llama-3-8B on one H100
SXM, vLLM-like defaults), along three axes, one at a time:

* requests: one replica, Poisson at 50 req/s (~75 % of its capacity on
  ShareGPT-like lengths), 10,000 to 100,000 requests. A straight line
  through the points gives the fixed cost of a run (loading, checks, the
  results summary; the drain at the end) and the cost per request.
* replicas: 1 to 64 replicas behind round robin at 50 req/s each.
* prompt length: one replica under a closed loop of 64 users, prompts of
  a fixed length (no shared prefixes), 128 output tokens.

On every axis the cost per request is the slope of a straight line through
runs of several sizes (n, 2n and 4n requests on the last two): the fixed
costs, and a drain that is long next to a short run of a big fleet, fall
into the intercept. The sizes of an axis run back to back within each
repeat, and the slope is the median of the repeats' slopes, so a change in
the machine's speed between repeats does not tilt a line. Beside it, the
engine iterations simulated per request, counted the same way: the
engine's own work is per event (an arrival, a prefill-bearing iteration,
the end of a run of decode-only iterations), never per token, so it follows
the iterations where prefills break the decode runs up.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

import engine_speed as es   # this folder: the same replica, scenario builder and imported build
from simulator.runner import simulate

RATE = 50.0
REQUESTS = (10_000, 20_000, 50_000, 100_000)
REPLICAS = ((1, 10_000), (8, 10_000), (64, 20_000))      # (replicas, n): runs of n, 2n and 4n requests
PROMPTS = ((128, 2_500), (1024, 2_500), (4096, 2_500), (7936, 2_500))   # Llama-3-8B's context is 8,192
USERS = 64


def poisson(rate: float) -> dict:
    return {"type": "poisson", "rate_per_s": rate}


def fixed(prompt: int, output: int) -> dict:
    return {"input_tokens": {"dist": "fixed", "value": prompt}, "output_tokens": {"dist": "fixed", "value": output}}


def line(make, sizes, repeats: int) -> dict:
    """CPU seconds of simulate() at each size, and a straight line through them.

    The sizes are run one after the other within a repeat, so each line sees
    one moment's machine speed; the slope and intercept are the medians of
    the repeats' lines, the times the medians per size."""
    times, fits, iterations = {n: [] for n in sizes}, [], {}
    for _ in range(repeats):
        got = []
        for n in sizes:
            t = time.process_time()
            out = simulate(make(n))
            got.append(time.process_time() - t)
            times[n].append(got[-1])
            iterations[n] = out.results["llmsim"]["iterations"]
        fits.append(np.polyfit(sizes, got, 1))
    slope, fixed_s = (statistics.median(f[i] for f in fits) for i in (0, 1))
    it_slope = np.polyfit(sizes, [iterations[n] for n in sizes], 1)[0]
    return {"requests": list(sizes), "cpu_s": [statistics.median(times[n]) for n in sizes],
            "us_per_request": 1e6 * slope, "fixed_s": fixed_s, "iterations_per_request": it_slope}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = ap.parse_args(argv)
    from simulator.engine import compiled

    print(f"{'compiled (mypyc)' if compiled() else 'plain Python'} engine, python {sys.version.split()[0]}; "
          f"CPU time of simulate(), medians of {args.repeats} repeats")
    by_n = line(lambda k: es.scenario("n", poisson(RATE), k), REQUESTS, args.repeats)
    print("\n| requests (1 replica, 50 req/s) | CPU s | CPU µs / request |\n|---:|---:|---:|")
    for n, t in zip(by_n["requests"], by_n["cpu_s"]):
        print(f"| {n:,} | {t:.2f} | {1e6 * t / n:.1f} |")
    print(f"\nstraight line: {by_n['fixed_s']:.2f} CPU s per run + {by_n['us_per_request']:.1f} µs per request, "
          f"{by_n['iterations_per_request']:.2f} iterations per request")

    rows = [("replicas", r, line(lambda k, r=r: es.scenario("r", poisson(RATE * r), k, replicas=r),
                                 (n, 2 * n, 4 * n), args.repeats)) for r, n in REPLICAS]
    closed = {"type": "concurrency", "concurrency": USERS}
    rows += [("prompt tokens", p, line(lambda k, p=p: es.scenario("p", closed, k, workload=fixed(p, 128)),
                                       (n, 2 * n, 4 * n), args.repeats)) for p, n in PROMPTS]
    print("\n| axis | value | requests | CPU µs / request | iterations / request |\n|---|---:|---:|---:|---:|")
    for axis, value, c in rows:
        sizes = ", ".join(f"{n:,}" for n in c["requests"])
        print(f"| {axis} | {value:,} | {sizes} | {c['us_per_request']:.1f} | {c['iterations_per_request']:.2f} |")
    if args.json:
        print(json.dumps({"requests": by_n, "axes": [{"axis": a, "value": v, **c} for a, v, c in rows]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
