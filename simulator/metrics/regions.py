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
from .records import LATENCY, Records
from .results import compute_results
from .results import latency_fields
from ..fields import leaf

_KEYS = ("median_ttft_ms", "p95_ttft_ms", "p99_ttft_ms", "median_e2el_ms", "p95_e2el_ms", "p99_e2el_ms")


#: ``llmsim.regions.<region>``.
FIELDS = {
    "share": leaf("fraction", "the region's declared share, normalised"),
    "request_fraction": leaf("fraction", "its share of the requests as drawn"),
    "sessions": leaf("count", "its sessions"), "requests": leaf("count", "its requests"),
    "completed": leaf("count", "finished"), "rejected": leaf("count", "refused by the fleet: shed by admission control, too long for its pool's server or its prompt budget, or never fitting a replica (llmsim.load counts each kind)"),
    "cancelled": leaf("count", "withdrawn by their clients"),
    "stranded": leaf("count", "preempted and never readmitted (llmsim.request_status.stranded)",
                     when="a request of the region was stranded"),
    **latency_fields(_KEYS, "the region's completed requests"),
    "mean_network_ms": leaf("ms", "mean ingress + egress of its finished requests"),
}


def region_block(requests: "Records | Sequence[Request]", regions: Sequence, duration: float) -> dict[str, Any]:
    requests = Records.of(requests).select(*LATENCY, "region", "session", "net_in", "net_out")
    by = requests.groups("region", [r.name for r in regions])
    total_share = sum(r.share for r in regions)
    declared = {r.name: r.share / total_share for r in regions}
    out: dict[str, Any] = {}
    for name, reqs in by.items():
        res = compute_results(reqs, None, duration=duration)
        done = reqs.finished
        block: dict[str, Any] = {
            "share": declared.get(name),
            "request_fraction": len(reqs) / len(requests) if len(requests) else None,
            "sessions": int(np.unique(reqs.session[reqs.session >= 0]).size),
            "requests": len(reqs),
            "completed": int(np.count_nonzero(done)),
            "rejected": reqs.count(Status.REJECTED),
            "cancelled": reqs.count(Status.CANCELLED),
        }
        if stranded := reqs.count(Status.STRANDED):    # admitted, so neither shed nor cancelled
            block["stranded"] = stranded
        block.update({k: res.get(k) for k in _KEYS})
        block["mean_network_ms"] = (float(np.mean(reqs.net_in[done] + reqs.net_out[done])) * 1e3
                                    if done.any() else None)
        out[name] = block
    return out
