"""Router policies, registered by name so scenarios and plugins can add more.

A router sees the replicas' state at the moment it routes (the request has
just arrived) and returns a replica index. New policies register with
``@register_router("name")``; the scenario's ``router:`` key picks one.
"""
from __future__ import annotations

from typing import Callable, Protocol, Sequence

import numpy as np

from ..errors import LlmsimError


class Router(Protocol):
    def choose(self, req, replicas: Sequence) -> int: ...


ROUTERS: dict[str, Callable[..., Router]] = {}


def register_router(name: str):
    def deco(cls):
        ROUTERS[name] = cls
        return cls
    return deco


def make_router(name: str, rng: np.random.Generator) -> Router:
    try:
        factory = ROUTERS[name]
    except KeyError:
        raise LlmsimError(f"unknown router {name!r}; valid: {', '.join(sorted(ROUTERS))}") from None
    return factory(rng)


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
    """Fewest prompt + output tokens in flight: a proxy for remaining work."""

    def __init__(self, rng=None) -> None:
        pass

    def choose(self, req, replicas) -> int:
        return _least(replicas, lambda r: r.outstanding_tokens)
