"""How many replicas ``prefix_aware`` asks per request.

    python benchmarks/router_probes.py

Counts calls of a replica's ``cached_prefix_tokens`` (what the router asks)
per routed request, on two workloads: the 32-replica case (e) of
``engine_speed.py`` (four ~5.7K-token system prompts, Zipf, 20,000
requests) and a 300 s run of the 10M-DAU shard (13 nodes, one shared
1K-token system prompt). With ``--everyone`` the router's bounds are
switched off, so it asks as it did before them (every replica that could
beat the best with its whole prompt cached).
"""
from __future__ import annotations

import argparse
from contextlib import nullcontext
import sys
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import engine_speed as es  # noqa: E402
from simulator.engine.base import ReplicaBase  # noqa: E402
from simulator.fleet.routing.prefix_bound import PrefixBound  # noqa: E402
from simulator.runner import simulate  # noqa: E402
from simulator.scenario.load import load_scenario  # noqa: E402


def asked_per_request(sc, source=None) -> float:
    calls = [0]
    real = ReplicaBase.cached_prefix_tokens

    def counted(self, req):
        calls[0] += 1
        return real(self, req)

    with mock.patch.object(ReplicaBase, "cached_prefix_tokens", counted):
        out = simulate(sc, source=source)
    return calls[0] / len(out.requests)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--everyone", action="store_true", help="without the bounds (ask as before them)")
    args = ap.parse_args()
    e = es.scenario("e", {"type": "poisson", "rate_per_s": 12.17 * es.PREFIX_REPLICAS}, 20_000,
                    replicas=es.PREFIX_REPLICAS, workload=es.PREFIX_WORKLOAD, router="prefix_aware")
    dau, path = load_scenario(str(ROOT / "scenarios" / "dau-10m.yaml"), ["workload.duration_s=300"])
    patch = mock.patch.object(PrefixBound, "bounds", lambda *a: None) if args.everyone else nullcontext()
    with patch:
        print(f"(e) 32 replicas, 4 apps: {asked_per_request(e):.2f} replicas asked per request")
        print(f"dau-10m shard, 13 nodes: {asked_per_request(dau, path):.2f} replicas asked per request")


if __name__ == "__main__":
    main()
