"""The busiest expert-parallel rank: expected maxima of binomial counts, and
a MoE layer under expert parallelism priced at that rank."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.costmodel import moe as M
from simulator.costmodel.busiest_rank import expected_max_binomial
from simulator.costmodel.moe import busiest_rank_load
from simulator.profiles import load_hardware

H200 = load_hardware("h200")


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 200_000), p=st.floats(0.001, 1.0), ranks=st.integers(1, 72))
def test_the_maximum_lies_between_the_mean_and_every_draw(n, p, ranks):
    m = expected_max_binomial(n, p, ranks)
    assert n * p * (1 - 1e-9) - 1e-9 <= m <= n + 1e-9
    if ranks == 1:
        assert m == pytest.approx(n * p, rel=1e-9, abs=1e-9)
    else:
        assert expected_max_binomial(n, p, ranks + 1) >= m - 1e-9


@pytest.mark.parametrize("tokens", [1, 8, 32])
def test_the_busiest_rank_matches_sampled_routing(tokens):
    """Against 2,000 sampled batches of a uniform top-8 router over 256
    experts on 8 ranks (each token's experts distinct, so ranks' loads are
    dependent): the busiest rank's distinct experts within 2 %, its pairs
    within 6 % (the independent-rank maximum reads a little low for a
    handful of pairs: 2.44 against 2.57 for one token)."""
    rng = np.random.default_rng(0)
    pairs, experts = [], []
    for _ in range(2000):
        ids = np.argsort(rng.random((tokens, 256)), axis=1)[:, :8].ravel()
        pairs.append(np.bincount(ids // 32, minlength=8).max())
        experts.append(np.bincount(np.unique(ids) // 32, minlength=8).max())
    p, e = busiest_rank_load(tokens, 256, 8, 8)
    assert e == pytest.approx(np.mean(experts), rel=0.02)
    assert p == pytest.approx(np.mean(pairs), rel=0.06)


def test_one_decoding_token_over_eight_ranks():
    """DeepSeek-V3's eight experts of one token over ep 8: the busiest rank holds 2.4 of them, not 1."""
    pairs, experts = busiest_rank_load(1, 256, 8, 8)
    assert pairs == pytest.approx(2.44, abs=0.01) and experts == pytest.approx(2.5, abs=0.1)


@settings(max_examples=40, deadline=None)
@given(tokens=st.integers(1, 20_000), ep=st.sampled_from([2, 4, 8, 16, 32]))
def test_expert_parallel_layer_waits_for_the_busiest_rank(tokens, ep):
    """Never faster than the mean rank, and within the rank's whole batch (as if
    every pair and every expert of the model landed on it)."""
    shape = M.MoeShape(7168, 2048, 256, 8, ep=ep)
    p = H200.calibration.moe_for("fp8_block", ep)
    busiest = M.moe_layer_time(tokens, shape, "fp8_block", H200, p)
    mean = M.moe_layer_time(tokens, shape, "fp8_block", H200, p,
                            active_experts=M.expected_active_experts(tokens, 256, 8))
    assert busiest >= mean * (1 - 1e-12)
    pairs, experts = busiest_rank_load(tokens, 256, 8, ep)
    assert tokens * 8 / ep <= pairs <= tokens * 8 and experts <= 256 // ep


@pytest.mark.parametrize("tokens", [1, 3, 40, 300])
def test_without_expert_parallelism_one_rank_holds_the_sampled_mean(tokens):
    """At ep = 1 the one rank holds every routed pair and, on average, the
    distinct experts a sampled top-8-of-256 router touches (each token picks
    8 distinct experts): 1,000 batches drawn here, against the closed form."""
    rng = np.random.default_rng(tokens)
    touched = [len(np.unique(np.argsort(rng.random((tokens, 256)), axis=1)[:, :8])) for _ in range(1000)]
    pairs, experts = busiest_rank_load(float(tokens), 256, 8, 1)
    assert pairs == tokens * 8
    sem = np.std(touched) / np.sqrt(len(touched))
    assert abs(experts - np.mean(touched)) <= 4 * sem + 1e-6


@pytest.mark.parametrize("n, p, ranks", [(1, 0.125, 8), (64, 0.125, 8), (2048, 0.125, 8), (8192, 0.125, 8),
                                         (40_000, 1 / 32, 32), (3_700, 0.5, 4), (600, 0.95, 8)])
def test_the_maximum_is_the_sum_over_the_whole_support(n, p, ranks):
    """The windowed sum (within 1e-6 of the excess over the mean) and, from
    a standard deviation of 30, the normal form (within 1 % of the excess,
    itself under 1 % of the mean there), against Σ_x (1 − F(x)^ranks) over
    every count (scipy's CDF)."""
    from scipy.stats import binom

    x = np.arange(0, n + 1)
    exact = float(np.sum(1.0 - binom.cdf(x, n, p) ** ranks))
    normal = n * p * (1 - p) >= 30.0**2
    assert expected_max_binomial(n, p, ranks) - n * p == pytest.approx(exact - n * p, rel=1e-2 if normal else 1e-6,
                                                                        abs=1e-9)
