"""Per-request latencies derived from the timestamps, in one place.

results.json and the per-request table must agree to the last bit, so both
take TTFT/TPOT/E2EL from here, using vLLM's formulas in vLLM's order of
operations (seconds first, then ×1000):

* TTFT = first_token − arrival
* E2EL = finish − arrival (vLLM's "latency")
* TPOT = (E2EL − TTFT) / (output − 1), defined only when output > 1
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

from workloads.request import Request, Status
from .records import Records

__all__ = ["RequestArrays", "last_stamp"]


def last_stamp(requests: "Records | Iterable[Request]") -> float:
    """The latest timestamp of any kind, where the benchmark's clock stops: a request rejected on
    arrival has no finish stamp but still ended at its arrival; 0 over no stamp."""
    cols = Records.of(requests).columns
    last = max(_finite_max(cols[c]) for c in ("arrival", "first_token", "finish", "admitted"))
    return last if last > -np.inf else 0.0


class RequestArrays:
    """The fields metrics need, plus derived latencies (ms).

    ``ttft_ms`` is given wherever a first token was stamped (a cancelled
    request may have one); ``e2el_ms`` and ``tpot_ms`` only for finished
    requests, because for a cancelled one ``output_tokens`` is the requested,
    not the produced, length. Missing values are NaN.

    Timestamps are read one or two at a time and not kept: columns on disk
    (a sharded run's 18M records) are read afresh per access, so the peak is
    the derived arrays plus two timestamp columns, not all of them.
    """

    __slots__ = ("status", "input_tokens", "output_tokens", "finished", "ttft_ms", "e2el_ms", "tpot_ms",
                 "tpot_or_zero_ms", "_last")

    def __init__(self, requests: "Records | Iterable[Request]") -> None:
        records = Records.of(requests)
        cols = records.columns
        self.status, self.input_tokens, self.output_tokens = (cols[c] for c in ("status", "input_tokens",
                                                                                  "output_tokens"))
        finished = self.finished = self.status == int(Status.FINISHED)
        arrival = cols["arrival"]
        first = cols["first_token"]
        bad = finished & ~np.isfinite(first)
        ttft_s = first - arrival
        del first
        finish = cols["finish"]
        bad |= finished & ~np.isfinite(finish)
        if bad.any():
            ids = cols["id"][bad][:5].tolist()
            raise ValueError(f"finished request(s) {ids} lack a first_token or finish stamp "
                             "(an engine bug: every finished request must carry both)")
        e2el_s = np.where(finished, finish - arrival, np.nan)
        del finish, arrival
        self._last = last_stamp(records)
        multi = finished & (self.output_tokens > 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            tpot_s = np.where(multi, (e2el_s - ttft_s) / (self.output_tokens - 1), np.nan)
        for a in (ttft_s, e2el_s, tpot_s):
            a *= 1000.0      # the same rounding as a fresh product: seconds first, then ms
        self.ttft_ms, self.e2el_ms, self.tpot_ms = ttft_s, e2el_s, tpot_s
        # vLLM's goodput counts a one-token answer's TPOT as 0 (it has no
        # inter-token time to violate).
        self.tpot_or_zero_ms = np.where(finished & ~multi, 0.0, self.tpot_ms)

    def __len__(self) -> int:
        return int(self.status.size)

    def last_stamp(self) -> float:
        """:func:`last_stamp` of these requests."""
        return self._last


def _finite_max(a: np.ndarray) -> float:
    return float(np.max(a, where=np.isfinite(a), initial=-np.inf))
