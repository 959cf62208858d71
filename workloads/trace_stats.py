"""Summary statistics of a request stream (a trace or a synthetic workload).

Docs quote these to describe a trace, tests pin them to the published
numbers, and the prefix-cache tests compare the simulated hit rate with the
ideal one computed here. They work on any list of
:class:`workloads.request.Request`, so a synthetic workload can be checked
against the trace it imitates.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

import numpy as np

from .request import Request

__all__ = ["TraceStats", "trace_stats", "ideal_block_hit_rate"]


@dataclass(frozen=True)
class TraceStats:
    """Count, time span, rate, length percentiles and burstiness.

    ``rate_per_s`` is ``count / duration_s`` (duration = last − first
    arrival), the number people quote as "N requests over M minutes".
    ``interarrival_cv`` is std/mean of the gaps between consecutive
    arrivals: 1 for Poisson, ≫ 1 for bursty traffic, 0 for a fixed grid.
    """

    count: int
    duration_s: float
    rate_per_s: float
    input_mean: float
    input_p50: float
    input_p99: float
    output_mean: float
    output_p50: float
    output_p99: float
    interarrival_cv: float

    def as_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return (f"{self.count} requests over {self.duration_s:.1f} s ({self.rate_per_s:.3f} req/s, "
                f"inter-arrival CV {self.interarrival_cv:.2f}); input mean/p50/p99 "
                f"{self.input_mean:.0f}/{self.input_p50:.0f}/{self.input_p99:.0f}, output "
                f"{self.output_mean:.0f}/{self.output_p50:.0f}/{self.output_p99:.0f} tokens")


def trace_stats(requests: Sequence[Request]) -> TraceStats:
    """Statistics of ``requests`` (any order; sorted by arrival here)."""
    n = len(requests)
    if n == 0:
        raise ValueError("trace_stats needs at least one request")
    t = np.sort(np.fromiter((r.arrival for r in requests), dtype=np.float64, count=n))
    inp = np.fromiter((r.input_tokens for r in requests), dtype=np.float64, count=n)
    out = np.fromiter((r.output_tokens for r in requests), dtype=np.float64, count=n)
    duration = float(t[-1] - t[0])
    gaps = np.diff(t)
    cv = float(gaps.std() / gaps.mean()) if len(gaps) and gaps.mean() > 0 else math.nan
    p_in = np.percentile(inp, [50, 99])
    p_out = np.percentile(out, [50, 99])
    return TraceStats(count=n, duration_s=duration, rate_per_s=n / duration if duration > 0 else math.inf,
                      input_mean=float(inp.mean()), input_p50=float(p_in[0]), input_p99=float(p_in[1]),
                      output_mean=float(out.mean()), output_p50=float(p_out[0]), output_p99=float(p_out[1]),
                      interarrival_cv=cv)


def ideal_block_hit_rate(requests: Iterable[Request], *, prefix_only: bool = True) -> float:
    """Fraction of prompt block ids an infinite, instant cache would already hold.

    Requests are taken in arrival order (ties by id) and every earlier
    request's blocks count as cached, however recent: the upper bound any
    finite prefix cache can reach. With ``prefix_only`` (the default) a
    request stops hitting at its first unseen block, as a prefix cache
    does; without it, every previously seen id counts. On hash-chained ids
    (Mooncake) the two agree, since a block's id depends on its whole
    prefix. Requests without block ids are skipped; NaN if none have any.
    Synthetic lone requests share placeholder ids past their own first id
    (:func:`workloads.block_ids.own_ids`), which only ``prefix_only`` reads
    right.
    """
    seen: set = set()
    hits = total = 0
    for r in sorted(requests, key=lambda r: (r.arrival, r.id)):
        blocks = r.blocks
        if not blocks:
            continue
        total += len(blocks)
        if prefix_only:
            k = 0
            for b in blocks:
                if b not in seen:
                    break
                k += 1
            hits += k
        else:
            hits += sum(1 for b in blocks if b in seen)
        seen.update(blocks)
    return hits / total if total else math.nan
