"""Where TTFT goes: network, tokenisation, queue, prefill, KV transfer, first decode.

The TTFT program's budget table. Each finished request's TTFT splits
exactly into

* ``network``: ingress + egress (client ↔ server),
* ``tokenize``: from reaching the server to joining a replica queue,
* ``queue``: waiting for admission to a batch,
* ``prefill``: admission to the prompt's last token computed (with chunked
  prefill this includes the iterations shared with other requests),
* ``kv_transfer``: prefill replica → decode replica (disaggregated pools),
* ``first_decode``: the decode replica's wait and first step (disaggregated
  pools; zero when the prefill emits the first token).

At a percentile p the table shows the mean split of the requests whose TTFT
lies at that percentile (the ±0.5 percentile band around it, at least one
request), so its parts add up to the TTFT a p-th percentile user sees —
unlike percentiles of each part, which do not add up to anything.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from workloads.request import Request
from .records import Records

PARTS = ("network", "tokenize", "queue", "prefill", "kv_transfer", "first_decode")


def _parts(r: Records) -> tuple[np.ndarray, np.ndarray]:
    parts = np.empty((len(r), len(PARTS)), dtype=np.float64)
    parts[:, 0] = r.net_in + r.net_out
    parts[:, 1] = r.queued - r.arrival - r.net_in
    parts[:, 2] = r.admitted - r.queued
    parts[:, 3] = r.prefill_done - r.admitted
    parts[:, 4] = r.kv_transfer
    parts[:, 5] = r.first_token - r.net_out - r.prefill_done - r.kv_transfer
    parts *= 1000.0
    return parts, (r.first_token - r.arrival) * 1000.0


def ttft_budget(requests: "Records | Sequence[Request]",
                percentiles: Sequence[float] = (50, 95, 99)) -> dict[str, Any] | None:
    records = Records.of(requests)
    done = records.select("arrival", "admitted", "first_token", "queued", "net_in", "net_out", "prefill_done",
                          "kv_transfer").where(records.finished)
    if not len(done):
        return None
    parts, ttft = _parts(done)
    order = np.argsort(ttft, kind="stable")
    n = len(done)
    out: dict[str, Any] = {"parts": list(PARTS), "mean": dict(zip(PARTS, parts.mean(axis=0).tolist()))}
    out["mean"]["ttft"] = float(ttft.mean())
    for p in percentiles:
        lo = int(np.floor((p - 0.5) / 100.0 * n))
        hi = max(int(np.ceil((p + 0.5) / 100.0 * n)), lo + 1)
        idx = order[max(0, min(lo, n - 1)):min(hi, n)]
        row = dict(zip(PARTS, parts[idx].mean(axis=0).tolist()))
        row["ttft"] = float(ttft[idx].mean())
        out[f"p{p:g}"] = row
    return out
