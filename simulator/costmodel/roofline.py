"""The roofline primitive shared by every op family.

``time = blend_s(compute_time, memory_time) + fixed`` where ``blend_s`` is the
s-norm ``(c^s + m^s)^(1/s)``: s = ∞ is the textbook max(), a finite s rounds
the knee where measured kernels sit below both roofs. The s-norm is
homogeneous of degree one, which the engine relies on: scaling both
operands (e.g. the total decode context) scales the time exactly, so a
decode-only iteration stays affine in its context.
"""
from __future__ import annotations

import math

import numpy as np

from . import scalar


def blend(c, m, sharpness: float):
    """s-norm of compute and memory times; works on floats and numpy arrays."""
    if math.isinf(sharpness):
        return np.maximum(c, m) if isinstance(c, np.ndarray) or isinstance(m, np.ndarray) else max(c, m)
    if isinstance(c, np.ndarray) or isinstance(m, np.ndarray):
        c = np.asarray(c, dtype=float)
        m = np.asarray(m, dtype=float)
        hi = np.maximum(c, m)
        safe = np.where(hi > 0, hi, 1.0)
        return np.where(hi > 0, hi * ((c / safe) ** sharpness + (m / safe) ** sharpness) ** (1.0 / sharpness), 0.0)
    return scalar.blend(c, m, sharpness)
