"""One worker's job of the 10M-DAU hour: its cost, and a fingerprint of its result.

    python benchmarks/shard_cost.py                 # shard 0 of 64, the whole hour
    python benchmarks/shard_cost.py --duration 300  # its first 300 simulated seconds

What ``benchmarks/fleet_scale.py`` runs 64 of: ``simulate()`` of shard 0 of
``plan_shards(hour, 64)`` (13 TP-8 nodes, ~280,000 requests over the hour;
the shard draws its own requests here, as a worker's dealt rows would give
it). Prints the CPU seconds of that call and a SHA-1 of the per-request
records, so that two builds (say ``pip install --target`` of two commits,
each put first on ``PYTHONPATH`` in turn) can be compared for speed and held
to the same result in one go.

This VM's speed drifts by ±25 % over minutes, so CPU seconds compare only
between runs that alternate. Instructions do not drift:
``valgrind --tool=callgrind python benchmarks/shard_cost.py --duration 300``
minus the same with ``--duration 1`` (imports, scenario loading and the
plan, which are the same in both) counts the instructions of ``simulate()``
alone, the same to a few parts in a million from run to run. Run it from
outside the checkout (``cd /tmp``) so that the installed, compiled package
is the one imported.
"""
from __future__ import annotations

import argparse
import hashlib
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=3600.0, help="simulated seconds of the peak hour")
    ap.add_argument("--shards", type=int, default=64, help="the fleet's shards (this runs the first)")
    args = ap.parse_args()

    from simulator.engine import compiled
    from simulator.metrics.records import Records
    from simulator.runner import simulate
    from simulator.scenario.load import load_scenario
    from simulator.sharding import plan_shards

    sc, path = load_scenario(str(ROOT / "scenarios" / "dau-10m.yaml"),
                             ["workload.arrival.rate_per_s=5000", "pools.chat.replicas=832",
                              f"workload.duration_s={args.duration:g}"])
    plan = plan_shards(sc, args.shards, path)
    cpu = time.process_time()
    out = simulate(plan.scenarios[0], source=path, subset=plan.subsets[0], summarize=False)
    cpu = time.process_time() - cpu
    columns = Records.of(out.requests).columns
    digest = hashlib.sha1()
    for name in sorted(columns):
        a = columns[name]
        digest.update(name.encode())
        digest.update(a.astype(str).tobytes() if a.dtype == object else a.tobytes())
    print(f"shard 0 of {args.shards}, {args.duration:g} s: {len(out.requests):,} requests, "
          f"simulate() {cpu:.2f} CPU s ({'compiled' if compiled() else 'python'} engine), "
          f"records sha1 {digest.hexdigest()[:16]}")


if __name__ == "__main__":
    main()
