"""Per-region results: the ``llmsim.regions.<region>`` block.

A fleet in one place serves far users later: their TTFT and E2E latency
carry the network both ways, which a fleet-wide percentile blends away.
Each declared region gets its share of the traffic (as declared, and as it
came out of the hash split), its outcome counts, TTFT and E2E percentiles
over its finished requests, and its mean network time.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from workloads.request import Request, Status
from .results import compute_results

_KEYS = ("median_ttft_ms", "p95_ttft_ms", "p99_ttft_ms", "median_e2el_ms", "p95_e2el_ms", "p99_e2el_ms")


def region_block(requests: Sequence[Request], regions: Sequence, duration: float) -> dict[str, Any]:
    by: dict[str, list[Request]] = {r.name: [] for r in regions}
    for r in requests:
        by.setdefault(r.region, []).append(r)
    total_share = sum(r.share for r in regions)
    declared = {r.name: r.share / total_share for r in regions}
    out: dict[str, Any] = {}
    for name, reqs in by.items():
        res = compute_results(reqs, None, duration=duration)
        done = [r for r in reqs if r.status == Status.FINISHED]
        block: dict[str, Any] = {
            "share": declared.get(name),
            "request_fraction": len(reqs) / len(requests) if requests else None,
            "sessions": len({r.session for r in reqs if r.session >= 0}),
            "requests": len(reqs),
            "completed": len(done),
            "rejected": sum(1 for r in reqs if r.status == Status.REJECTED),
            "cancelled": sum(1 for r in reqs if r.status == Status.CANCELLED),
        }
        block.update({k: res.get(k) for k in _KEYS})
        block["mean_network_ms"] = float(np.mean([r.net_in + r.net_out for r in done])) * 1e3 if done else None
        out[name] = block
    return out
