"""The compiled scalar path of the cost model (simulator.costmodel.scalar)
gives the array-capable definitions' floats, bit for bit.

:func:`scalar.prefill_attention` restates
:func:`components.prefill_attention_flops_bytes` summed over a step's chunks
and the s-norm blend; a step's time must not move by an ulp when the engine
takes the fast path (the compiled build is held to the plain one by
test_compiled; this holds the fast path to the definitions in either).
"""
from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.costmodel import components as C
from simulator.costmodel import roofline, scalar

chunks = st.lists(st.tuples(st.integers(1, 32_768), st.integers(0, 262_144)), min_size=1, max_size=12)
shapes = st.sampled_from([(64, 8, 128), (8, 1, 128), (40, 40, 128), (4, 1, 64)])
sharpness = st.sampled_from([1.0, 1.5, 2.0, 4.0, math.inf])


def _blend_as_written(c, m, s):
    """roofline.blend's float arithmetic before it had a fast path."""
    if math.isinf(s):
        return max(c, m)
    hi = c if c > m else m
    if hi <= 0.0:
        return 0.0
    return hi * ((c / hi) ** s + (m / hi) ** s) ** (1.0 / s)


@settings(max_examples=300, deadline=None)
@given(chunks, shapes, st.sampled_from([2.0, 1.0]), sharpness,
       st.floats(1e12, 2e15), st.floats(1e11, 5e12))
def test_prefill_attention_is_the_definition_bit_for_bit(ch, shape, kv_bytes, s, compute, memory):
    heads, kv_heads, head_dim = shape
    flops = nbytes = 0.0
    for new, cached in ch:
        f, b = C.prefill_attention_flops_bytes(new, cached, heads, kv_heads, head_dim, kv_bytes)
        flops += f
        nbytes += b
    want = _blend_as_written(flops / compute, nbytes / memory, s)
    got = scalar.prefill_attention(ch, heads, kv_heads, head_dim, kv_bytes, compute, memory, s)
    assert got == want   # exact: same operations in the same order


@settings(max_examples=300, deadline=None)
@given(st.floats(0, 1e3), st.floats(0, 1e3), sharpness)
def test_blend_on_floats_is_the_definition(c, m, s):
    assert roofline.blend(c, m, s) == _blend_as_written(c, m, s)
    assert scalar.blend(np.float64(c), np.float64(m), s) == _blend_as_written(c, m, s)
