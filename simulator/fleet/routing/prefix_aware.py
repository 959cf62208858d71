"""Prefix-cache-aware routing: follow the cached prefix unless that replica is a hotspot."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from .prefix_bound import PrefixBound
from .prefix_choice import choose_prefix_aware
from .registry import RouterParams, register_router


class PrefixAwareParams(RouterParams):
    """Route to the replica whose prefix cache serves most of the prompt, net of load.

    score = cached prefix tokens − ``load_weight`` × outstanding requests;
    ties go to the lower load, then the lower index. Hotspot guard: when the
    best replica has more than ``balance_abs_threshold`` requests beyond the
    least-loaded one *and* more than ``balance_rel_threshold`` times its
    load, the least-loaded replica gets the request instead. With no cached
    prefix anywhere (or no ``blocks`` on the request) this is
    least_outstanding.
    """

    type: Literal["prefix_aware"] = Field(default="prefix_aware", description="router name")
    load_weight: float = Field(default=128.0, ge=0, allow_inf_nan=False,
                               description="cached prompt tokens one extra outstanding request is worth; 0 ranks "
                                           "by cache hit alone (the guard still applies)")
    balance_abs_threshold: int = Field(default=32, ge=0,
                                       description="the guard needs the best replica to have more than this many "
                                                   "requests beyond the least-loaded one (sgl-router's default "
                                                   "was 32, its model gateway's is 64; llmsim's pair, 32 and "
                                                   "1.5, is neither release's)")
    balance_rel_threshold: float = Field(default=1.5, ge=1.0, allow_inf_nan=False,
                                         description="the guard also needs the best replica's load to exceed this "
                                                     "times the least-loaded one's (SGLang's model gateway's "
                                                     "default: 1.5; sgl-router's was 1.0001)")


@register_router("prefix_aware", params=PrefixAwareParams)
class PrefixAware:
    """Cache-hit minus load penalty, with a hotspot guard (:class:`PrefixAwareParams`).

    Why a penalty per outstanding *request* (not per outstanding token): both
    production cache-aware routers measure load in requests. SGLang's
    cache-aware router (sgl-router) counts pending requests per worker to
    decide whether the fleet is imbalanced (``balance_abs_threshold`` /
    ``balance_rel_threshold``, defaults 32 / 1.0001, 64 / 1.5 in the later
    model gateway) and, while it is balanced, follows the longest radix-tree
    prefix match; llm-d's scheduler adds a prefix-cache scorer (fraction of
    the prompt's blocks held by the pod) to a queue-depth scorer, weighted
    3 : 2 by default. ``outstanding_tokens`` would count the
    already-prefilled prompts of running requests, which cost little more.
    Here the two criteria share one unit, prompt tokens: a cache hit of k
    tokens saves k tokens of prefill, and one more request in flight is
    charged ``load_weight`` tokens (default 128: well below a typical
    prompt, since most in-flight requests are decoding, where one more
    sequence slows the batch far less than recomputing a prefix). So, as in
    both systems, the cache wins against small imbalances and the guard
    (SGLang's two thresholds, applied to the chosen replica) stops a popular
    prefix from piling its traffic onto one replica.

    Cost: ``cached_prefix_tokens`` is called at most once per replica, in
    order of increasing load, skipping a replica that could not beat the
    best score even with the largest hit it could have, and stopping once
    that holds for every replica left (:class:`~.prefix_bound.PrefixBound`;
    the bounds are exact, so the choice is the one a scan of every replica
    makes). In practice one or two replicas are asked per request.
    """

    def __init__(self, rng, params: PrefixAwareParams) -> None:
        self.w = params.load_weight
        self.abs_thr = params.balance_abs_threshold
        self.rel_thr = params.balance_rel_threshold
        self.bound = PrefixBound()

    def choose(self, req, replicas) -> int:
        return choose_prefix_aware(req, replicas, self.bound, self.w, self.abs_thr, self.rel_thr)
