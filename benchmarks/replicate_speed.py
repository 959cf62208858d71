"""Replicates in parallel against the same runs one after another.

    python benchmarks/replicate_speed.py scenarios/chatbot.yaml --replicates 8 --workers 2 --pairs 3

A: ``llmsim run SCENARIO --replicates N --workers W``; B: the N seeds as N
plain ``llmsim run SCENARIO --set seed=S`` one after another. Each is a
whole process timed from outside (start-up included), A and B alternated so
that a drift in the machine's speed hits both; the figure is the median of
the pairs' ratios A / (B / W): 1.0 is a perfect split over the W workers,
and what is left above it is the pool's start-up, the first seed's records
sent back, and the slowest seed's tail.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml


def _timed(cmd: list[list[str]]) -> float:
    t = time.perf_counter()
    for c in cmd:
        subprocess.run(c, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario")
    ap.add_argument("--replicates", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--pairs", type=int, default=3)
    args = ap.parse_args(argv)
    seed = yaml.safe_load(Path(args.scenario).read_text()).get("seed", 0)
    llmsim = [sys.executable, "-c", "from simulator.cli.app import main; main()"]   # the console script
    a = [[*llmsim, "run", args.scenario, "--replicates", str(args.replicates), "--workers", str(args.workers),
          "--json"]]
    b = [[*llmsim, "run", args.scenario, "--set", f"seed={seed + k}", "--json"] for k in range(args.replicates)]
    ratios = []
    for i in range(args.pairs):
        ta, tb = _timed(a), _timed(b)
        ratios.append(ta / (tb / args.workers))
        print(f"pair {i + 1}: replicates {ta:.1f} s, sequential {tb:.1f} s, ratio to sequential / {args.workers} "
              f"workers {ratios[-1]:.2f}", flush=True)
    print(f"median ratio {statistics.median(ratios):.2f} over {args.pairs} pairs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
