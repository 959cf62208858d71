"""The gateway's rate limits: token buckets per request class, on tokens and requests.

An API gateway limits each tenant by tokens (input + requested output) and
by requests per minute, not by requests alone: one 100K-token prompt costs
the GPUs as much as a hundred short ones. Each limit is a token bucket that
refills at its rate and holds ``burst_s`` seconds of it; a request passes
when every bucket of its class holds its cost, and then takes it from
each. One that does not pass is answered 429 at the gateway: it is counted
(``rate_limited``) and never reaches a GPU. A request whose cost exceeds a
bucket's depth never passes, as a gateway refuses a request larger than
the tenant's limit.
"""
from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["RateLimitSpec", "TokenBucket", "RateLimiter"]


class RateLimitSpec(BaseModel):
    """Per-class limits at the gateway (a class is one tenant, or a tier sharing one limit)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tokens_per_min: Optional[float] = Field(
        default=None, gt=0, allow_inf_nan=False,
        description="input + output tokens per minute (the output as requested: the request's max tokens)")
    requests_per_min: Optional[float] = Field(default=None, gt=0, allow_inf_nan=False,
                                              description="requests per minute")
    burst_s: float = Field(default=60.0, gt=0, allow_inf_nan=False,
                           description="bucket depth in seconds of each rate: the burst a quiet tenant may send "
                                       "at once (60: a minute's allowance)")

    @model_validator(mode="after")
    def _some_limit(self) -> "RateLimitSpec":
        if self.tokens_per_min is None and self.requests_per_min is None:
            raise ValueError("a rate limit needs tokens_per_min, requests_per_min or both")
        return self


class TokenBucket:
    """Refills at ``rate`` per second up to ``depth``; starts full."""

    __slots__ = ("rate", "depth", "level", "t")

    def __init__(self, rate: float, depth: float, t0: float = 0.0) -> None:
        self.rate = rate
        self.depth = depth
        self.level = depth
        self.t = t0

    def refill(self, now: float) -> None:
        if now > self.t:
            self.level = min(self.depth, self.level + (now - self.t) * self.rate)
            self.t = now

    def holds(self, cost: float) -> bool:
        return self.level >= cost


class RateLimiter:
    """One class's buckets: tokens and requests, both must hold a request's cost."""

    def __init__(self, spec: RateLimitSpec, t0: float = 0.0) -> None:
        self.spec = spec
        self.buckets: list[tuple[TokenBucket, bool]] = []   # (bucket, charged in tokens?)
        if spec.tokens_per_min is not None:
            r = spec.tokens_per_min / 60.0
            self.buckets.append((TokenBucket(r, r * spec.burst_s, t0), True))
        if spec.requests_per_min is not None:
            r = spec.requests_per_min / 60.0
            self.buckets.append((TokenBucket(r, r * spec.burst_s, t0), False))
        self.limited = 0

    def admit(self, now: float, tokens: int) -> bool:
        """Take ``tokens`` (and one request) if every bucket holds them; else count a 429."""
        for b, in_tokens in self.buckets:
            b.refill(now)
        if not all(b.holds(tokens if in_tokens else 1) for b, in_tokens in self.buckets):
            self.limited += 1
            return False
        for b, in_tokens in self.buckets:
            b.level -= tokens if in_tokens else 1
        return True
