"""The gateway's usage metering: the ``llmsim.gateway`` block.

What a gateway bills a tenant by: per class (tenant or tier) and per hour
of arrival, the requests it sent, those answered 429, and the input and
output tokens of its completed requests. Their cost is the GPU bill of the
pools that served them shared out by tokens (each pool's dollars over the
input and output tokens of the requests it completed, alike; a prefill
pool's requests are served by its decode pool too, and a disaggregated
prefill pool's own bill is shared by input tokens alone, the only ones it
computes: by both, a tenant of short prompts and long answers paid for
prefill GPUs it hardly used), so the classes' dollars add up to the fleet's
bill for the work completed.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from workloads.request import Status
from .records import Records
from ..fields import AS_GIVEN, block, leaf

HOUR_S = 3600.0


_USAGE = {"requests": leaf("count", "requests sent"), "rate_limited": leaf("count", "answered 429"),
          "input_tokens": leaf("tokens", "prompt tokens served"), "output_tokens": leaf("tokens", "output tokens served"),
          "usd": leaf("USD", "the class's share of the bills of the pools that served it, by the tokens they "
                             "completed (input and output alike; a disaggregated prefill pool's by input tokens)")}

#: ``llmsim.gateway``: what a metering gateway would log per class.
FIELDS = {"classes": block("per class", {"<class>": block("one class", {
    "rate_limit": leaf(AS_GIVEN, "the class's classes[].rate_limit; null without one"),
    **_USAGE,
    "hours": block("the same per hour of the run", {"hour": leaf("h", "the hour, from 0"), **_USAGE},
                   unit="list of objects"),
})})}


def request_usd(r: Records, pool_usd: Mapping[str, float], decode_pools: Mapping[str, str] | None = None
                ) -> np.ndarray:
    """Each request's share of the bills of the pools that served it, by the tokens it completed (input and
    output alike, but a disaggregated prefill pool's by input tokens: it computes no others). ``decode_pools``:
    each disaggregated prefill pool's decode pool, whose bill its requests share (a request's record names
    the pool it arrived at)."""
    both = (r.input_tokens + r.output_tokens) * r.finished
    prompts = r.input_tokens * r.finished
    decode_pools = decode_pools or {}
    usd = np.zeros(len(r))
    for pool, bill in pool_usd.items():
        served = (r.pool == pool) | np.isin(r.pool, [p for p, d in decode_pools.items() if d == pool])
        tokens = prompts if pool in decode_pools else both
        total = float(tokens[served].sum())
        if total:
            usd += np.where(served, tokens * (bill / total), 0.0)
    return usd


def class_usd(requests: Records, pool_usd: Mapping[str, float],
              decode_pools: Mapping[str, str] | None = None) -> dict[str, float]:
    """Each class's share of the window's GPU bill (:func:`request_usd` summed over its requests)."""
    r = requests.select("klass", "pool", "status", "input_tokens", "output_tokens")
    usd = request_usd(r, pool_usd, decode_pools)
    return {str(k): float(usd[r.klass == k].sum()) for k in dict.fromkeys(r.klass.tolist())}


def gateway_block(requests: Records, classes: Sequence, pool_usd: Mapping[str, float],
                  decode_pools: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``decode_pools``: as :func:`request_usd` takes them."""
    r = requests.select("klass", "pool", "arrival", "status", "input_tokens", "output_tokens")
    done = r.finished
    usd = request_usd(r, pool_usd, decode_pools)
    hour = (r.arrival // HOUR_S).astype(np.int64) if len(r) else np.zeros(0, dtype=np.int64)
    limited = r.status == int(Status.RATE_LIMITED)
    out: dict[str, Any] = {}
    for c in classes:
        mine = r.klass == c.name
        hours = []
        for h in np.unique(hour[mine]).tolist():
            m = mine & (hour == h)
            hours.append({"hour": h, "requests": int(m.sum()), "rate_limited": int((m & limited).sum()),
                          "input_tokens": int((r.input_tokens * done)[m].sum()),
                          "output_tokens": int((r.output_tokens * done)[m].sum()),
                          "usd": float(usd[m].sum())})
        out[c.name] = {
            "rate_limit": None if c.rate_limit is None else c.rate_limit.model_dump(),
            "requests": int(mine.sum()),
            "rate_limited": int((mine & limited).sum()),
            "input_tokens": sum(h["input_tokens"] for h in hours),
            "output_tokens": sum(h["output_tokens"] for h in hours),
            "usd": float(usd[mine].sum()),
            "hours": hours,
        }
    return {"classes": out}
