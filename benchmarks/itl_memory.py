"""Memory of the ITL statistics per inter-token gap segment.

    python benchmarks/itl_memory.py [--segments N]

The ITL figures of results.json treat the engine's gap log as a mixture of
uniform segments. Folded exactly
(:class:`simulator.metrics.percentiles.UniformMixture` of the raw segments)
that needs memory per segment; folded on the 1 µs grid
(:class:`simulator.metrics.gaps.GapGrid`, what runs and shard merges use) it
needs one chunk of the log at a time plus one entry per distinct
microsecond. This measures both, under tracemalloc, on synthetic segments
shaped like a 10M-DAU shard's log (79 % point masses, ITLs of 10-50 ms,
counts 1-99), beyond the log's own 24 B per segment.
"""
from __future__ import annotations

import argparse
import sys
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from simulator.metrics.gaps import GapGrid, GapLog  # noqa: E402
from simulator.metrics.percentiles import UniformMixture  # noqa: E402


def _peak(fn) -> float:
    tracemalloc.start()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--segments", type=int, default=5_000_000)
    n = ap.parse_args().segments
    rng = np.random.default_rng(0)
    lo = rng.uniform(0.01, 0.05, n)
    wide = rng.random(n) < 0.21
    hi = np.where(wide, lo + rng.uniform(0.0, 0.01, n), lo)
    w = rng.integers(1, 100, n).astype(np.float64)
    log = GapLog()
    for mine, a in ((log.lo, lo), (log.hi, hi), (log.weight, w)):
        mine.frombytes(a.tobytes())
    exact = _peak(lambda: UniformMixture(lo, hi, w, scale=1000.0).stats())
    print(f"exact fold, {n:,} segments: peak {exact / 2**20:,.0f} MiB, {exact / n:.0f} B per segment")
    cells = len(GapGrid.of(log))
    grid = _peak(lambda: GapGrid.of(log).mixture().stats())
    print(f"1 µs grid,  {n:,} segments: peak {grid / 2**20:,.0f} MiB ({grid / n:.0f} B per segment), "
          f"{cells:,} grid entries")


if __name__ == "__main__":
    main()
