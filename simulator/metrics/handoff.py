"""The KV hand-off of a disaggregated pair: a prefill pool's ``handoff`` block.

The TTFT budget says what the hand-off cost a request; someone sizing the
link and the P:D pairing needs what it carried: which pool the prompts went
to, over what link, the bytes one prompt token puts on the busiest link (each
GPU sends what it holds: a 1/tp slice of the heads, MLA's whole latent at any
tp, a GQA head twice where tp passes the heads), and how much crossed it. The
bytes are read back from each transfer's time, so a decode replica's prefix
hits (blocks it already holds and is not sent) and sliding-window layers'
windows count as they moved.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .records import Records
from ..fields import block, leaf

#: ``llmsim.pools.<pool>.handoff``.
FIELDS = {
    "decode_pool": leaf("text", "the pool its requests decode on (disaggregation.decode_pool)"),
    "link": block("the link as run", {
        "preset": leaf("text", "disaggregation.link.preset"),
        "gb_per_s": leaf("GB/s", "each GPU's link, the preset's or bandwidth_gb_per_s"),
        "latency_ms": leaf("ms", "per hand-off, the preset's or latency_ms")}),
    "bytes_per_token": leaf("bytes", "the KV one prompt token puts on the busiest link: its full-attention layers' "
                                     "share that one GPU holds (a sliding-window layer adds its window's tokens "
                                     "alone where the pool keeps a window)"),
    "handoffs": leaf("count", "prompts whose KV crossed the link (or took its latency)"),
    "gb_moved": leaf("GB", "bytes the busiest link carried over the run, all hand-offs"),
    "mean_ms": leaf("ms", "a hand-off's mean time, from its prompt's end to its KV's arrival: the wait for the "
                          "links, the move and the latency"),
    "p99_ms": leaf("ms", "its 99th percentile"),
    "wait_mean_ms": leaf("ms", "of that time, the mean wait for the links: hand-offs out of one prefill rank or "
                               "into one decode rank take turns"),
    "wait_p99_ms": leaf("ms", "the wait's 99th percentile"),
}


def handoff_block(requests: Records, prefill: str, decode: str, preset: str, bytes_per_s: float,
                  latency_s: float, bytes_per_token: float) -> dict[str, Any]:
    """``prefill``'s hand-offs to ``decode`` over a link of ``bytes_per_s`` a GPU and ``latency_s``."""
    r = requests.select("pool", "kv_transfer", "kv_wait")
    mine = (r.pool == prefill) & (r.kv_transfer > 0)
    took, wait = r.kv_transfer[mine], r.kv_wait[mine]
    n = int(took.size)
    return {
        "decode_pool": decode,
        "link": {"preset": preset, "gb_per_s": bytes_per_s / 1e9, "latency_ms": latency_s * 1e3},
        "bytes_per_token": bytes_per_token,
        "handoffs": n,
        "gb_moved": float(np.maximum(took - wait - latency_s, 0.0).sum() * bytes_per_s / 1e9),
        "mean_ms": float(took.mean() * 1e3) if n else None,
        "p99_ms": float(np.percentile(took, 99) * 1e3) if n else None,
        "wait_mean_ms": float(wait.mean() * 1e3) if n else None,
        "wait_p99_ms": float(np.percentile(wait, 99) * 1e3) if n else None,
    }
