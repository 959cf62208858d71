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
from .records import LATENCY, Records

__all__ = ["RequestArrays"]

class RequestArrays:
    """Column arrays of the fields metrics need, plus derived latencies (ms).

    ``ttft_ms`` is given wherever a first token was stamped (a cancelled
    request may have one); ``e2el_ms`` and ``tpot_ms`` only for finished
    requests, because for a cancelled one ``output_tokens`` is the requested,
    not the produced, length. Missing values are NaN.
    """

    __slots__ = (*LATENCY, "finished", "ttft_ms", "e2el_ms", "tpot_ms", "tpot_or_zero_ms")

    def __init__(self, requests: "Records | Iterable[Request]") -> None:
        rec = Records.of(requests)
        for name in LATENCY:
            setattr(self, name, rec.columns[name])
        self.finished = self.status == int(Status.FINISHED)
        bad = self.finished & ~(np.isfinite(self.first_token) & np.isfinite(self.finish))
        if bad.any():
            ids = self.id[bad][:5].tolist()
            raise ValueError(f"finished request(s) {ids} lack a first_token or finish stamp "
                             "(an engine bug: every finished request must carry both)")
        ttft_s = self.first_token - self.arrival
        e2el_s = np.where(self.finished, self.finish - self.arrival, np.nan)
        multi = self.finished & (self.output_tokens > 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            tpot_s = np.where(multi, (e2el_s - ttft_s) / (self.output_tokens - 1), np.nan)
        self.ttft_ms = ttft_s * 1000.0
        self.e2el_ms = e2el_s * 1000.0
        self.tpot_ms = tpot_s * 1000.0
        # vLLM's goodput counts a one-token answer's TPOT as 0 (it has no
        # inter-token time to violate).
        self.tpot_or_zero_ms = np.where(self.finished & ~multi, 0.0, self.tpot_ms)

    def __len__(self) -> int:
        return int(self.id.size)

    def last_stamp(self) -> float:
        """The latest timestamp of any kind: a request rejected on arrival
        has no finish stamp but still ended at its arrival."""
        if len(self) == 0:
            return 0.0
        stamps = np.concatenate([self.arrival, self.admitted, self.first_token, self.finish])
        stamps = stamps[np.isfinite(stamps)]
        return float(stamps.max()) if stamps.size else 0.0
