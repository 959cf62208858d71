"""Stable splits of the traffic by share: classes, regions.

A split must not consume a random stream (so declaring classes or regions
leaves every arrival and length unchanged) and must keep a session's turns
together. So each request hashes its session id (else its own id) with the
seed and a salt per split, and the uniform that hash gives picks the share.
Different salts make the splits independent of each other.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from workloads.request import Request
from .routing.affinity import splitmix64


class ShareSplit:
    """Picks index i with probability ``shares[i] / sum(shares)`` per session."""

    def __init__(self, shares: Sequence[float], seed: int, salt: int) -> None:
        w = np.asarray(shares, dtype=np.float64)
        self.cum = (np.cumsum(w) / w.sum()).tolist()
        self.salt = splitmix64(seed ^ salt)

    def pick(self, req: Request) -> int:
        key = req.session if req.session >= 0 else (1 << 62) + req.id
        u = splitmix64(key ^ self.salt) / 2.0 ** 64
        return next(i for i, x in enumerate(self.cum) if u < x or i == len(self.cum) - 1)
