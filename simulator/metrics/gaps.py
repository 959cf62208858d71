"""Inter-token gaps, logged per engine segment instead of per token.

The fast engine never touches individual tokens: a run of n decode
iterations of a batch of B sequences, whose step time grows linearly from
``lo`` to ``hi``, contributes B·n gaps evenly spread over [lo, hi]. Logging
(lo, hi, weight) per segment keeps memory per *event*, not per token; ITL
statistics treat each segment as a uniform distribution over [lo, hi]
(exact for the mean; percentiles to within one step of the segment).
"""
from __future__ import annotations

from array import array


class GapLog:
    __slots__ = ("lo", "hi", "weight")

    def __init__(self) -> None:
        self.lo = array("d")
        self.hi = array("d")
        self.weight = array("d")

    def add(self, lo: float, hi: float, weight: float) -> None:
        if weight > 0:
            self.lo.append(lo)
            self.hi.append(hi)
            self.weight.append(weight)

    def extend(self, other: "GapLog") -> None:
        self.lo.extend(other.lo)
        self.hi.extend(other.hi)
        self.weight.extend(other.weight)

    def __len__(self) -> int:
        return len(self.weight)
