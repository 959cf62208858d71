"""The prefix-aware choice itself, apart from its parameters and registration.

It runs once per request and is a fleet's busiest routing code, so it is
compiled with the engine (setup.py); :mod:`.prefix_aware` holds the
policy's parameters (a pydantic model, which mypyc does not compile) and
calls this. What it decides is documented there.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from ...engine.prefix_cache import usable
from .prefix_bound import PrefixBound


def choose_prefix_aware(req: Any, replicas: Sequence[Any], bound: PrefixBound, w: float, abs_thr: int,
                        rel_thr: float) -> int:
    """Index into ``replicas`` of the replica for ``req`` (any objects with a
    replica's ``outstanding``, ``index`` and ``cached_prefix_tokens``)."""
    n = len(replicas)
    # Replicas by (load, index), sorted as plain ints: load·n + index.
    order: list[int] = [r.outstanding * n + i for i, r in enumerate(replicas)]
    order.sort()
    least = order[0] % n
    if req.blocks is None:
        return least
    known = bound.bounds(req.blocks, req.input_tokens, replicas)
    top = usable(req.input_tokens, req.input_tokens) if known is None else known.best
    best, best_score = least, -math.inf
    for key in order:
        i = key % n
        load = key // n
        if top - w * load <= best_score:
            break   # loads only grow from here: nobody left can beat (or tie ahead of) the best
        if known is not None and known.of(replicas[i].index) - w * load <= best_score:
            continue   # this one cannot, whatever it holds: no need to ask
        score = replicas[i].cached_prefix_tokens(req) - w * load
        if score > best_score:
            best, best_score = i, score
    lb, lm = replicas[best].outstanding, replicas[least].outstanding
    chosen = least if lb - lm > abs_thr and lb > rel_thr * lm else best
    if known is not None:
        bound.enter(req.blocks, replicas[chosen].index, req.shared_ids)
    return chosen
