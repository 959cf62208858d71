"""Routers that look at load only: the baselines every cache-aware policy is measured against."""
from __future__ import annotations

import numpy as np

from .registry import register_router


@register_router("round_robin")
class RoundRobin:
    def __init__(self, rng=None) -> None:
        self.i = -1

    def choose(self, req, replicas) -> int:
        self.i = (self.i + 1) % len(replicas)
        return self.i


@register_router("random")
class Random:
    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def choose(self, req, replicas) -> int:
        return int(self.rng.integers(len(replicas)))


def _least(replicas, load) -> int:
    """Index of the replica with the smallest load; ties to the lowest index."""
    return min(range(len(replicas)), key=lambda i: load(replicas[i]))


@register_router("least_outstanding")
class LeastOutstanding:
    """Fewest requests in flight (queued + running)."""

    def __init__(self, rng=None) -> None:
        pass

    def choose(self, req, replicas) -> int:
        return _least(replicas, lambda r: r.outstanding)


@register_router("least_outstanding_tokens")
class LeastOutstandingTokens:
    """Fewest prompt tokens in flight: a proxy for remaining work a router can see (a request's output
    length is known only when it ends; counting it made the router an oracle)."""

    def __init__(self, rng=None) -> None:
        pass

    def choose(self, req, replicas) -> int:
        return _least(replicas, lambda r: r.outstanding_tokens)
