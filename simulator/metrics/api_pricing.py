"""The same traffic at an API provider's prices: ``cost.api`` → ``llmsim.cost.api``.

Build or buy is one comparison: what the simulated fleet costs a month
against what its completed requests would cost at a provider's per-token
rates, with and without prompt caching. Providers that cache prompts bill a
cache read at a fraction of the input rate (0.1×) and a cache write at a
premium (1.25× for a 5-minute entry, 2.0× for an hour). Each completed
request's prompt is priced from the simulation's own counts: its cached
tokens (``cached_tokens``, the prefix cache's hit) as reads, the rest as
writes (a chat client marks the whole prompt cacheable, so the next turn
can read it); without caching, all of it at the input rate. The hits are
the simulated fleet's: a provider's cache (its routing, capacity and TTL)
would hit more or less. The month scales the window's usage as the
self-hosted figure does (``cost.monthly``).
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from .records import Records
from ..fields import block, leaf, of_model

__all__ = ["ApiPricingSpec", "api_block"]


#: Dearest list price accepted, $ per million tokens: past it a price is a slip of digits, and 1e308 made the
#: bill infinite, written as null in results.json.
MAX_USD_PER_MILLION = 1_000_000.0


class ApiPricingSpec(BaseModel):
    """A provider's list prices for the model the scenario serves."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_usd_per_million: float = Field(gt=0, le=MAX_USD_PER_MILLION, allow_inf_nan=False,
                                         description="base input price, $/1M tokens")
    output_usd_per_million: float = Field(gt=0, le=MAX_USD_PER_MILLION, allow_inf_nan=False,
                                          description="output price, $/1M tokens")
    cache_read: float = Field(default=0.1, ge=0, le=100, allow_inf_nan=False,
                              description="a cache read's price as a multiple of the input price")
    cache_write: float = Field(default=1.25, ge=0, le=100, allow_inf_nan=False,
                               description="a cache write's price as a multiple of the input price (1.25: "
                                           "5-minute entries; 2.0: one hour)")


#: ``llmsim.cost.api``: the same finished tokens at a hosted API's prices.
FIELDS = {
    "prices": block("cost.api as given", of_model(ApiPricingSpec)),
    "input_tokens": leaf("tokens", "prompt tokens of finished requests"),
    "cache_read_tokens": leaf("tokens", "of those, tokens the prefix cache held (priced as cache reads)"),
    "cache_write_tokens": leaf("tokens", "the rest (priced as cache writes)"),
    "output_tokens": leaf("tokens", "output tokens of finished requests"),
    "window_usd_without_caching": leaf("USD", "the window's tokens at the plain input and output prices"),
    "window_usd_with_caching": leaf("USD", "the same with cache reads and writes priced as such"),
    "window_usd_self_hosted": leaf("USD", "the fleet's own bill for the window (llmsim.cost.window_usd)"),
    "monthly_usd_without_caching": leaf("USD/month", "window_usd_without_caching extrapolated as the bill is, over "
                                                     "the time the traffic took to arrive (not the drain after it)"),
    "monthly_usd_with_caching": leaf("USD/month", "window_usd_with_caching extrapolated the same way"),
    "monthly_usd_self_hosted": leaf("USD/month", "the fleet's monthly bill (llmsim.cost.monthly_usd)"),
}


def api_block(spec: ApiPricingSpec, requests: Records, monthly_factor: Optional[float],
              self_hosted_monthly: Optional[float], self_hosted_window: float) -> dict[str, Any]:
    """``monthly_factor``: the month's usage over the window's (None: no month)."""
    r = requests.select("status", "input_tokens", "output_tokens", "cached_tokens")
    done = r.finished
    inp = int(r.input_tokens.sum(where=done))
    out = int(r.output_tokens.sum(where=done))
    hit = int(np.minimum(r.cached_tokens, r.input_tokens).sum(where=done))
    write = inp - hit
    m = 1e-6
    plain = (inp * spec.input_usd_per_million + out * spec.output_usd_per_million) * m
    cached = ((hit * spec.cache_read + write * spec.cache_write) * spec.input_usd_per_million
              + out * spec.output_usd_per_million) * m

    def month(x: float) -> Optional[float]:
        return None if monthly_factor is None else x * monthly_factor

    return {
        "prices": spec.model_dump(),
        "input_tokens": inp, "cache_read_tokens": hit, "cache_write_tokens": write, "output_tokens": out,
        "window_usd_without_caching": plain, "window_usd_with_caching": cached,
        "window_usd_self_hosted": self_hosted_window,
        "monthly_usd_without_caching": month(plain), "monthly_usd_with_caching": month(cached),
        "monthly_usd_self_hosted": self_hosted_monthly,
    }
