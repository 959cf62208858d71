"""Where TTFT goes: network, tokenisation, queue, prefill, KV transfer, first decode, response.

The TTFT program's budget table. Each finished request's TTFT splits
exactly into

* ``network``: ingress + egress (client ↔ server),
* ``tokenize``: from reaching the server to joining a replica queue,
* ``queue``: waiting for admission to a batch,
* ``prefill``: admission to the prompt's last token computed (with chunked
  prefill this includes the iterations shared with other requests),
* ``kv_transfer``: prefill replica → decode replica (disaggregated pools),
* ``first_decode``: the decode replica's wait and first step (disaggregated
  pools; zero when the prefill emits the first token),
* ``response``: the serving stack's front end, from the token leaving the
  engine to its leaving the server (detokenise, stream: the backend's
  ``engine.response_ms``, 4 ms for vLLM), on every pool.

At a percentile p the table shows the mean split of the requests whose TTFT
lies at that percentile (the ±0.5 percentile band around it, at least one
request), so its parts add up to the TTFT a p-th percentile user sees —
unlike percentiles of each part, which do not add up to anything.

The parts are computed one at a time from the columns they read, so a
merged 18M-request table on disk is never loaded whole.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

import numpy as np

from workloads.request import Request
from .records import Records
from ..fields import block, leaf

PARTS = ("network", "tokenize", "queue", "prefill", "kv_transfer", "first_decode", "response")

_PART = {"network": "ingress + egress, client ↔ server", "tokenize": "reaching the server to joining a replica queue",
         "queue": "waiting for admission to a batch", "prefill": "admission to the prompt's last token computed",
         "kv_transfer": "prefill replica → decode replica (disaggregated pools)",
         "first_decode": "the decode replica's wait and first step (disaggregated pools; zero on the others)",
         "response": "the front end: the first token leaving the engine to its leaving the server (engine.response_ms)"}
_SPLIT = {**{p: leaf("ms", _PART[p]) for p in PARTS}, "ttft": leaf("ms", "their sum, the TTFT")}
_BANDS = (50, 95, 99)

#: ``llmsim.ttft_budget``: null when no request finished.
FIELDS = {
    "parts": leaf("list of text", "the parts' names, in order"),
    "mean": block("each part's mean over finished requests", _SPLIT),
    **{f"p{p}": block(f"each part's mean over the requests whose TTFT lies at the {p}th percentile "
                      "(±0.5 percentile)", _SPLIT) for p in _BANDS},
}


def _parts(col: Callable[[str], np.ndarray], response_s: Mapping[str, float]) -> Iterator[tuple[str, np.ndarray]]:
    """Each part in ms, one at a time (each reads only its own columns). The front end's time is no column: it
    is its pool's ``response_s``, as the fleet added it to the first token's stamp."""
    response = np.zeros(len(col("arrival")))
    if response_s:
        pool = col("pool")
        for name, seconds in response_s.items():
            response[pool == name] = seconds
    yield "network", (col("net_in") + col("net_out")) * 1000.0
    yield "tokenize", (col("queued") - col("arrival") - col("net_in")) * 1000.0
    yield "queue", (col("admitted") - col("queued")) * 1000.0
    yield "prefill", (col("prefill_done") - col("admitted")) * 1000.0
    yield "kv_transfer", col("kv_transfer") * 1000.0
    yield "first_decode", (col("first_token") - col("net_out") - col("prefill_done") - col("kv_transfer")
                           - response) * 1000.0
    yield "response", response * 1000.0


def ttft_budget(requests: "Records | Sequence[Request]", percentiles: Sequence[float] = _BANDS,
                response_s: Optional[Mapping[str, float]] = None) -> dict[str, Any] | None:
    """``llmsim.ttft_budget`` (the module docstring); ``response_s``: each pool's front-end time, seconds."""
    records = Records.of(requests)
    done = records.finished
    n = int(np.count_nonzero(done))
    if not n:
        return None
    every = n == done.size

    def col(name: str) -> np.ndarray:   # a finished request's column, copied only when some are not
        values = records.columns[name]
        return values if every else values[done]

    ttft = (col("first_token") - col("arrival")) * 1000.0
    order = np.argsort(ttft, kind="stable")
    bands = []
    for p in percentiles:
        lo = int(np.floor((p - 0.5) / 100.0 * n))
        hi = max(int(np.ceil((p + 0.5) / 100.0 * n)), lo + 1)
        bands.append(order[max(0, min(lo, n - 1)):min(hi, n)].copy())
    del order
    out: dict[str, Any] = {"parts": list(PARTS), "mean": {}}
    rows: list[dict[str, float]] = [{} for _ in percentiles]
    for name, part in _parts(col, response_s or {}):
        out["mean"][name] = float(part.mean())
        for row, idx in zip(rows, bands):
            row[name] = float(part[idx].mean())
    out["mean"]["ttft"] = float(ttft.mean())
    for p, row, idx in zip(percentiles, rows, bands):
        row["ttft"] = float(ttft[idx].mean())
        out[f"p{p:g}"] = row
    return out
