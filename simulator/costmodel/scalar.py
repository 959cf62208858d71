"""The cost model's per-iteration arithmetic on plain numbers, compiled.

The engine prices every iteration that prefills: the roofline blend of its
chunks' attention, summed chunk by chunk. Interpreted, through the
array-capable functions of :mod:`.components` and :mod:`.roofline`, that was
~5 % of a 10M-DAU shard (three Python calls a chunk). Compiled with the
engine (setup.py), it is one call a step.

Each expression is written operation for operation as in
:func:`.components.prefill_attention_flops_bytes` and
:func:`.roofline.blend`, so the floats are the same bits;
``tests/test_costmodel_scalar.py`` holds them equal. Those stay the
definitions (they take numpy arrays: the calibration fit evaluates
thousands of measured shapes at once); this module is their scalar fast
path, and ``roofline.blend`` sends plain numbers here.
"""
from __future__ import annotations

import math
from typing import Sequence


def blend(c: float, m: float, sharpness: float) -> float:
    """s-norm of compute and memory times: :func:`.roofline.blend` on floats."""
    if math.isinf(sharpness):
        return m if m > c else c   # max(c, m)
    hi = c if c > m else m
    if hi <= 0.0:
        return 0.0
    return hi * ((c / hi) ** sharpness + (m / hi) ** sharpness) ** (1.0 / sharpness)


def window_pairs(new: int, cached: int, window: int) -> float:
    """Query-key pairs of ``new`` queries after ``cached`` tokens in a layer whose query at
    position p attends min(p + 1, ``window``) keys: the attention kernels skip the tiles outside
    the window, so a sliding layer's 8,192-token chunk of gpt-oss (window 128) does ~1/32 of the
    causal triangle's work, not all of it."""
    lo, hi = cached + 1, cached + new          # keys the first and the last query attend, uncapped
    if hi <= window:
        return (lo + hi) * new / 2.0
    if lo >= window:
        return float(new) * window
    return (lo + window) * (window - lo + 1) / 2.0 + float(hi - window) * window


def prefill_attention(chunks: Sequence[tuple[int, int]], heads: int, kv_heads: int, head_dim: int,
                      kv_bytes: float, compute_rate: float, memory_rate: float, sharpness: float,
                      window: int = 0) -> float:
    """Seconds of one layer's prefill attention over ``(new, cached)``
    chunks, fixed cost aside: FLOPs and bytes summed over the chunks, then
    blended once (``compute_rate``, ``memory_rate``: the derated roofs).
    ``window`` > 0: a sliding-window layer (pass ``cached`` capped at it: the keys it reads)."""
    flops = nbytes = 0.0
    for new, cached in chunks:
        pairs = window_pairs(new, cached, window) if window > 0 else new * cached + new * (new + 1) / 2.0
        flops += 4.0 * heads * head_dim * pairs
        nbytes += (2.0 * new * heads * head_dim * 2.0
                   + (cached + new) * 2.0 * kv_heads * head_dim * kv_bytes
                   + new * 2.0 * kv_heads * head_dim * kv_bytes)
    return blend(flops / compute_rate, nbytes / memory_rate, sharpness)
