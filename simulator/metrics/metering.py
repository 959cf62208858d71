"""The gateway's usage metering: the ``llmsim.gateway`` block.

What a gateway bills a tenant by: per class (tenant or tier) and per hour
of arrival, the requests it sent, those answered 429, and the input and
output tokens of its completed requests. Their cost is the GPU bill of the
pool that served them shared out by tokens (each pool's dollars over the
tokens it completed), so the classes' dollars add up to the fleet's bill
for the work completed.
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
          "usd": leaf("USD", "the class's share of its pool's bill, by GPU time")}

#: ``llmsim.gateway``: what a metering gateway would log per class.
FIELDS = {"classes": block("per class", {"<class>": block("one class", {
    "rate_limit": leaf(AS_GIVEN, "the class's classes[].rate_limit; null without one"),
    **_USAGE,
    "hours": block("the same per hour of the run", {"hour": leaf("h", "the hour, from 0"), **_USAGE},
                   unit="list of objects"),
})})}


def gateway_block(requests: Records, classes: Sequence, pool_usd: Mapping[str, float]) -> dict[str, Any]:
    r = requests.select("klass", "pool", "arrival", "status", "input_tokens", "output_tokens")
    done = r.finished
    tokens = (r.input_tokens + r.output_tokens) * done
    per_token = {}
    for pool, usd in pool_usd.items():
        served = int(tokens[r.pool == pool].sum())
        per_token[pool] = usd / served if served else 0.0
    usd = np.array([per_token.get(p, 0.0) for p in r.pool.tolist()], dtype=np.float64) * tokens if len(r) else \
        np.zeros(0)
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
