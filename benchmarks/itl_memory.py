"""Memory of the exact ITL percentiles per inter-token gap segment.

    python benchmarks/itl_memory.py [--segments N]

The ITL figures of results.json treat the engine's gap log as a mixture of
uniform segments and take exact percentiles of it
(:class:`simulator.metrics.percentiles.UniformMixture`). This measures, under
tracemalloc, the peak memory of building that mixture and its statistics,
per segment beyond the log's own 24 B, on synthetic segments shaped like a
10M-DAU shard's log (79 % point masses, ITLs of 10-50 ms, counts 1-99):
what bounds a sharded run's merge, whose log is every shard's.
"""
from __future__ import annotations

import argparse
import sys
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from simulator.metrics.percentiles import UniformMixture  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--segments", type=int, default=5_000_000)
    n = ap.parse_args().segments
    rng = np.random.default_rng(0)
    lo = rng.uniform(0.01, 0.05, n)
    wide = rng.random(n) < 0.21
    hi = np.where(wide, lo + rng.uniform(0.0, 0.01, n), lo)
    w = rng.integers(1, 100, n).astype(np.float64)
    tracemalloc.start()
    UniformMixture(lo, hi, w, scale=1000.0).stats()
    _, peak = tracemalloc.get_traced_memory()
    print(f"{n:,} segments: peak {peak / 2**20:,.0f} MiB, {peak / n:.0f} B per segment beyond the log's 24 B")


if __name__ == "__main__":
    main()
