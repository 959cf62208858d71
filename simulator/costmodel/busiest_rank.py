"""The busiest expert-parallel rank of a MoE layer under a uniform router.

With ``ep > 1`` every rank holds ``E/ep`` experts and the layer ends at the
combine all-to-all, which waits for the last rank: the layer takes as long
as its *busiest* rank, not its average one. A uniform router spreads the
batch's routed pairs evenly only in expectation; each rank's share is a
random draw, and the largest of ``ep`` draws exceeds the mean by a few
standard deviations of one. The gap is a law of small numbers: with one
decoding token's eight experts spread over eight ranks, the busiest rank
holds 2.4 of them against a mean of one; with 2,048 pairs it holds 3 % more
than the mean. Nothing here is fitted: it is the expected maximum of
``ep`` binomial counts, for the routed pairs (the GEMMs' rows) and for the
distinct local experts (the weights read), each rank's count taken as
independent of the others' (:func:`.moe.busiest_rank_load` applies it to a
layer's routing). Against sampled batches of a uniform top-8
router over 256 experts on 8 ranks, the busiest rank's distinct experts
come out within 1 % and its pairs within 5 % (low for a handful of pairs:
the ranks' loads are dependent; tests/test_busiest_rank.py).
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

# The sum runs over the counts within this many standard deviations (plus
# as many counts) of the mean; P(max > x) is 1 to double precision below
# the window and 0 above it.
_WINDOW_SD = 12.0
# From this standard deviation on, the counts are normal to well under 1 %
# of the maximum's excess over the mean (itself under 1 % of the mean
# there): the mean plus sd times the expected maximum of ``ranks`` standard
# normals.
_NORMAL_SD = 30.0


@lru_cache(maxsize=None)
def _normal_max(ranks: int) -> float:
    """E[max of ``ranks`` independent standard normals]."""
    from scipy import integrate        # scipy on first use: it costs every command's start-up 1.5 s
    from scipy.stats import norm

    value, _ = integrate.quad(lambda z: z * ranks * norm.pdf(z) * norm.cdf(z) ** (ranks - 1), -12.0, 12.0)
    return value


def expected_max_binomial(n: float, p: float, ranks: int) -> float:
    """E[max of ``ranks`` independent Binomial(``n``, ``p``)] = Σ_x P(max > x).

    The CDF is the running sum of the log-space pmf over the window (the
    mass below it is under 1e-30), which costs a few microseconds where
    scipy's distribution objects cost a hundred: the engine asks once per
    distinct token count of a run. Counts with a standard deviation of
    :data:`_NORMAL_SD` or more are taken as normal."""
    if ranks <= 1 or n <= 0 or p <= 0.0:
        return n * p
    if p >= 1.0:
        return float(n)
    n = int(round(n))
    sd = math.sqrt(n * p * (1.0 - p))
    if sd >= _NORMAL_SD:
        return min(float(n), n * p + sd * _normal_max(ranks))
    lo = max(0, int(math.floor(n * p - _WINDOW_SD * sd - _WINDOW_SD)))
    hi = min(n, int(math.ceil(n * p + _WINDOW_SD * sd + _WINDOW_SD)))
    from scipy.special import gammaln

    x = np.arange(lo, hi + 1, dtype=float)
    log_pmf = (gammaln(n + 1.0) - gammaln(x + 1.0) - gammaln(n - x + 1.0)
               + x * math.log(p) + (n - x) * math.log1p(-p))
    cdf = np.minimum(np.cumsum(np.exp(log_pmf)), 1.0)
    return min(float(n), float(lo + np.sum(1.0 - cdf ** ranks)))


__all__ = ["expected_max_binomial"]
