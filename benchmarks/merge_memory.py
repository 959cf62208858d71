"""What bounds a sharded run's merge: memory of its figures per request and per gap segment.

    python benchmarks/merge_memory.py [--segments N] [--tile K]

The parent of a sharded run (``llmsim run --shards N``) computes every
figure of results.json from the merged records and gap log. For the
10M-DAU peak hour that is ~18M requests and ~56M gap segments, so what it
needs *per request* and *per segment* is what decides its peak. Measured
under tracemalloc (peak beyond what existed before the call):

* ITL: the gap log folded exactly
  (:class:`simulator.metrics.percentiles.UniformMixture` of the raw
  segments) against the 1 µs grid runs and merges use
  (:class:`simulator.metrics.gaps.GapGrid`), on synthetic segments shaped
  like a 10M-DAU shard's log (79 % point masses, ITLs of 10-50 ms, counts
  1-99), beyond the log's own 24 B per segment;
* the per-request figures (``compute_results`` without ITL, then the
  ``llmsim`` block: TTFT budget, cost, per-pool figures) on the records of
  a 120 s dau-10m run tiled ``--tile`` times, with the columns in memory
  (a plain run) and on disk (a merge past ``SPILL_ROWS``, where every
  column a metric reads is read afresh, so it counts).
"""
from __future__ import annotations

import argparse
import sys
import tracemalloc
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from simulator.metrics.column_files import ColumnFiles  # noqa: E402
from simulator.report.fleet_report import llmsim_block  # noqa: E402
from simulator.metrics.gaps import GapGrid, GapLog  # noqa: E402
from simulator.metrics.percentiles import UniformMixture  # noqa: E402
from simulator.metrics.records import Records  # noqa: E402
from simulator.metrics.results import compute_results  # noqa: E402
from simulator.scenario.slo import parse_slo  # noqa: E402


def _peak(fn) -> float:
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    fn()
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return peak


def gap_figures(n: int) -> None:
    rng = np.random.default_rng(0)
    lo = rng.uniform(0.01, 0.05, n)
    wide = rng.random(n) < 0.21
    hi = np.where(wide, lo + rng.uniform(0.0, 0.01, n), lo)
    w = rng.integers(1, 100, n).astype(np.float64)
    log = GapLog()
    for mine, a in ((log.lo, lo), (log.hi, hi), (log.weight, w)):
        mine.frombytes(a.tobytes())
    exact = _peak(lambda: UniformMixture(lo, hi, w, scale=1000.0).stats())
    print(f"ITL, exact fold, {n:,} segments: peak {exact / 2**20:,.0f} MiB, {exact / n:.0f} B per segment")
    cells = len(GapGrid.of(log))
    grid = _peak(lambda: GapGrid.of(log).mixture().stats())
    print(f"ITL, 1 µs grid,  {n:,} segments: peak {grid / 2**20:,.0f} MiB ({grid / n:.0f} B per segment), "
          f"{cells:,} grid entries")


def request_figures(tile: int) -> None:
    from simulator.runner import simulate
    from simulator.scenario.load import load_scenario

    sc, path = load_scenario(str(ROOT / "scenarios" / "dau-10m.yaml"), ["workload.duration_s=120"])
    out = simulate(sc, source=path)
    one = Records.of(out.requests)
    n = len(one) * tile

    def table(on_disk: bool) -> Records:
        cols = {c: np.tile(v, tile) for c, v in one.columns.items()}
        return Records(ColumnFiles.of(cols) if on_disk else cols)

    for on_disk in (False, True):
        rec = table(on_disk)
        res = _peak(lambda: compute_results(rec, None, slo=parse_slo(sc.slo)))
        block = _peak(lambda: llmsim_block(out.plan, out.pools, 120.0, "fast", rec, out.scalers))
        where = "on disk" if on_disk else "in memory"
        print(f"{n:,} requests, columns {where}: compute_results peak {res / n:.0f} B per request, "
              f"llmsim block {block / n:.0f} B per request")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--segments", type=int, default=5_000_000)
    ap.add_argument("--tile", type=int, default=100, help="copies of a 120 s dau-10m run's ~9,400 records")
    args = ap.parse_args()
    gap_figures(args.segments)
    request_figures(args.tile)


if __name__ == "__main__":
    main()
