"""Session affinity: a session's turns land where its history is cached, without melting a replica."""
from __future__ import annotations

import math
from bisect import bisect_left
from typing import Literal

from pydantic import Field

from .registry import RouterParams, register_router
from .load import _least


_MASK64 = (1 << 64) - 1


def splitmix64(x: int) -> int:
    """SplitMix64 finaliser (Steele, Lea & Flood 2014): a stable, well-mixed
    64-bit hash of an integer, the same in every process (unlike ``hash``)."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


_REQUEST_KEY_SALT = 0x5851F42D4C957F2D  # keeps request ids and session ids apart on the ring


class SessionAffinityParams(RouterParams):
    """Consistent hashing with bounded loads (Mirrokni, Thorup & Zadimoghaddam 2018).

    Each replica owns ``virtual_nodes`` points of a hash ring; a request's
    session (its id when it has none) hashes to a point, and the request
    goes to the first replica clockwise whose outstanding requests are below
    ``ceil(load_factor * (total outstanding + 1) / replicas)``. Turns of one
    conversation therefore meet their KV prefix again, while a hot session
    spills to the next replica on the ring instead of melting its own.
    """

    type: Literal["session_affinity"] = Field(default="session_affinity", description="router name")
    virtual_nodes: int = Field(default=100, ge=1, le=10_000,
                               description="ring points per replica; ~100 keeps each replica's share of "
                                           "sessions within ~10% of the mean")
    load_factor: float = Field(default=1.25, ge=1.0, allow_inf_nan=False,
                               description="c (the paper's 1+epsilon): a replica holding ceil(c * (total outstanding "
                                           "+ 1) / replicas) requests or more is skipped; >= 1, so one is always "
                                           "free")


def _ring_point(index: int, vnode: int) -> int:
    return splitmix64(splitmix64(index) ^ vnode)


@register_router("session_affinity", params=SessionAffinityParams)
class SessionAffinity:
    """Consistent hashing with bounded loads on ``req.session`` (see
    :class:`SessionAffinityParams`). The ring is keyed by ``replica.index``
    and rebuilt when the replica set changes; adding one replica to n moves
    about 1/(n+1) of the sessions, all of them to the new replica."""

    def __init__(self, rng, params: SessionAffinityParams) -> None:
        self.vnodes = params.virtual_nodes
        self.c = params.load_factor
        self._ids: tuple[int, ...] | None = None
        self._points: list[int] = []
        self._owners: list[int] = []   # position in the replica list of each ring point

    def _rebuild(self, ids: tuple[int, ...]) -> None:
        ring = sorted((_ring_point(idx, v), pos) for pos, idx in enumerate(ids) for v in range(self.vnodes))
        self._points = [p for p, _ in ring]
        self._owners = [pos for _, pos in ring]
        self._ids = ids

    def capacity(self, total_outstanding: int, n: int) -> int:
        """Most requests a replica may hold after taking this one."""
        return math.ceil(self.c * (total_outstanding + 1) / n)

    @staticmethod
    def key(req) -> int:
        return splitmix64(req.session) if req.session >= 0 else splitmix64(req.id ^ _REQUEST_KEY_SALT)

    def choose(self, req, replicas) -> int:
        ids = tuple(r.index for r in replicas)
        if ids != self._ids:
            self._rebuild(ids)
        n = len(replicas)
        cap = self.capacity(sum(r.outstanding for r in replicas), n)
        points, owners = self._points, self._owners
        j = bisect_left(points, self.key(req))
        seen: set[int] = set()
        for step in range(len(points)):
            pos = owners[(j + step) % len(points)]
            if pos in seen:
                continue
            if replicas[pos].outstanding < cap:
                return pos
            seen.add(pos)
            if len(seen) == n:
                break
        # Unreachable for load_factor >= 1 (some replica is below the mean); kept for safety.
        return _least(replicas, lambda r: r.outstanding)
