"""Metrics: results.json with vLLM's keys and definitions, the gap mixture,
the per-request table and the terminal summary.

The small cases use binary-fraction timestamps (0.25, 0.125, ...) so that
the hand-computed expectations are exact; statistics are written out as
arithmetic, not recomputed with numpy.
"""
from __future__ import annotations

import json
import math
import random
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from simulator.errors import LlmsimError
from simulator.metrics import (GapGrid, GapLog, UniformMixture, compute_results, jsonable, percentile_key, request_table,
                               sample_stats, write_requests, write_results)
from simulator.report.summary import summary_table
from simulator.scenario.slo import parse_slo
from workloads.request import RECORD_COLUMNS, Request, Status

approx = lambda x: pytest.approx(x, rel=1e-12, abs=1e-12)  # noqa: E731


def req(id, arrival, first=math.nan, finish=math.nan, *, inp=100, out=1, status=Status.FINISHED):
    r = Request(id, arrival, inp, out)
    r.first_token, r.finish, r.status = first, finish, status
    if status != Status.PENDING:
        r.admitted = arrival
    return r


def hand_case():
    """A: ttft 250, e2el 1250, tpot 250 | B: one token, ttft 500, e2el 500 |
    C: ttft 125, e2el 1125, tpot 125 | D rejected | E cancelled mid-decode
    (its finish stamp, 3.5 s, is the last stamp of the run)."""
    reqs = [
        req(0, 0.0, 0.25, 1.25, inp=100, out=5),
        req(1, 0.5, 1.0, 1.0, inp=50, out=1),
        req(2, 1.0, 1.125, 2.125, inp=200, out=9),
        req(3, 2.0, inp=1000, out=10, status=Status.REJECTED),
        req(4, 2.5, 3.0, 3.5, inp=400, out=7, status=Status.CANCELLED),
    ]
    gaps = GapLog()
    gaps.add(0.25, 0.25, 4)    # A: 4 gaps of 250 ms
    gaps.add(0.125, 0.125, 8)  # C: 8 gaps of 125 ms
    return reqs, gaps


def pop_std(xs):
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))


VLLM_KEYS = ["completed", "failed", "duration", "total_input_tokens", "total_output_tokens", "request_throughput",
             "request_goodput", "output_throughput", "total_token_throughput"] + [
    f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "median", "std", "p90", "p95", "p99")]


# -- results.json --------------------------------------------------------------

def test_keys_in_vllm_order():
    reqs, gaps = hand_case()
    keys = list(compute_results(reqs, gaps))
    assert keys == VLLM_KEYS[:2] + ["cancelled"] + VLLM_KEYS[2:] + ["llmsim"]   # llmsim's key beside vLLM's failed
    assert list(compute_results(reqs, gaps, slo=parse_slo({"ttft_p99_ms": 1})))[-2:] == ["slo", "llmsim"]


def test_counts_duration_and_throughputs():
    reqs, gaps = hand_case()
    r = compute_results(reqs, gaps)
    assert r["completed"] == 3
    assert r["failed"] == 1 and r["cancelled"] == 1  # a client's cancel is not a failure
    assert r["duration"] == 3.5
    assert r["total_input_tokens"] == 350  # D and E are not counted
    assert r["total_output_tokens"] == 15
    assert r["request_throughput"] == approx(3 / 3.5)
    assert r["output_throughput"] == approx(15 / 3.5)
    assert r["total_token_throughput"] == approx(365 / 3.5)
    assert r["request_goodput"] is None  # no SLO, as in vLLM
    assert r["llmsim"]["request_status"] == {"pending": 0, "finished": 3, "rejected": 1, "cancelled": 1}


def test_latency_statistics_by_hand():
    reqs, gaps = hand_case()
    r = compute_results(reqs, gaps)
    # TTFT [250, 500, 125]: sorted [125, 250, 500]; p-th at index 2p/100
    assert r["mean_ttft_ms"] == approx(875 / 3)
    assert r["median_ttft_ms"] == approx(250)
    assert r["std_ttft_ms"] == approx(pop_std([250, 500, 125]))
    assert (r["p90_ttft_ms"], r["p95_ttft_ms"], r["p99_ttft_ms"]) == (approx(450), approx(475), approx(495))
    # TPOT: B has one output token and is excluded -> [250, 125]
    assert r["mean_tpot_ms"] == approx(187.5)
    assert r["median_tpot_ms"] == approx(187.5)
    assert r["std_tpot_ms"] == approx(62.5)
    assert (r["p90_tpot_ms"], r["p95_tpot_ms"], r["p99_tpot_ms"]) == (approx(237.5), approx(243.75), approx(248.75))
    # ITL pooled: 8 x 125 and 4 x 250
    assert r["mean_itl_ms"] == approx(2000 / 12)
    assert r["median_itl_ms"] == approx(125)
    assert r["std_itl_ms"] == approx(pop_std([125] * 8 + [250] * 4))
    assert (r["p90_itl_ms"], r["p95_itl_ms"], r["p99_itl_ms"]) == (approx(250), approx(250), approx(250))
    # E2EL [1250, 500, 1125]: sorted [500, 1125, 1250]
    assert r["mean_e2el_ms"] == approx(2875 / 3)
    assert r["median_e2el_ms"] == approx(1125)
    assert r["std_e2el_ms"] == approx(pop_std([1250, 500, 1125]))
    assert (r["p90_e2el_ms"], r["p95_e2el_ms"], r["p99_e2el_ms"]) == (approx(1225), approx(1237.5), approx(1247.5))


def test_itl_interpolates_between_segments():
    """Gaps 8 x 125 and 4 x 250 expanded: p50 sits at index 5.5 -> 125; p70 at
    7.7 -> 125 + 0.7 * 125 (np.percentile's linear rule, across segments)."""
    reqs, gaps = hand_case()
    r = compute_results(reqs, gaps, percentiles=(50, 70, 99.9))
    assert r["p50_itl_ms"] == approx(125)
    assert r["p70_itl_ms"] == approx(125 + 0.7 * 125)
    assert "p99.9_ttft_ms" in r and percentile_key(99.9) == "p99.9" and percentile_key(90.0) == "p90"


def test_one_token_outputs_have_no_tpot_and_empty_sets_are_null():
    reqs = [req(0, 0.0, 0.5, 0.5), req(1, 1.0, 1.25, 1.25)]
    r = compute_results(reqs, GapLog())
    assert r["mean_ttft_ms"] == approx(375)
    for s in ("mean", "median", "std", "p90", "p95", "p99"):
        assert r[f"{s}_tpot_ms"] is None
        assert r[f"{s}_itl_ms"] is None
    json.dumps(r, allow_nan=False)


def test_no_requests():
    r = compute_results([], GapLog())
    assert r["completed"] == r["failed"] == r["total_input_tokens"] == r["total_output_tokens"] == 0
    assert r["duration"] == 0.0
    assert r["request_throughput"] is None and r["output_throughput"] is None and r["mean_e2el_ms"] is None
    assert compute_results([], None)["mean_itl_ms"] is None
    json.dumps(r, allow_nan=False)


def test_pending_requests_fail_and_duration_override():
    reqs, gaps = hand_case()
    reqs.append(req(5, 3.0, 3.25, out=4, status=Status.PENDING))
    r = compute_results(reqs, gaps, duration=10.0)
    assert r["failed"] == 2 and r["completed"] == 3 and r["cancelled"] == 1   # rejected + pending fail
    assert r["llmsim"]["request_status"]["pending"] == 1
    assert r["duration"] == 10.0 and r["request_throughput"] == approx(0.3)
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError):
            compute_results(reqs, gaps, duration=bad)


def test_rejected_on_arrival_ends_at_its_arrival():
    r = compute_results([req(0, 0.0, 0.25, 0.5), req(1, 7.0, status=Status.REJECTED)], GapLog())
    assert r["duration"] == 7.0


def test_finished_without_stamps_is_an_engine_bug():
    with pytest.raises(ValueError, match="first_token or finish"):
        compute_results([req(0, 0.0, math.nan, 1.0)], GapLog())


# -- SLO and goodput -------------------------------------------------------------

def test_percentile_targets_goodput_and_attainment():
    reqs, gaps = hand_case()
    r = compute_results(reqs, gaps, slo=parse_slo({"ttft_p99_ms": 400, "tpot_p99_ms": 250, "e2el_p99_ms": 2000}))
    # good: A (250/250/1250 — TPOT equal to the limit passes) and C; B's TTFT 500 > 400
    assert r["request_goodput"] == approx(2 / 3.5)
    slo = r["slo"]
    t = slo["targets"]
    assert t["ttft_p99_ms"] == {"metric": "ttft", "percentile": 99.0, "target_ms": 400.0,
                                "measured_ms": approx(495), "attainment": approx(2 / 3), "met": False,
                                # three requests are too few for a p99 to have one above it: said, not hidden
                                "few_samples": {"samples": 3, "needed": 100}}
    assert t["tpot_p99_ms"]["few_samples"] == {"samples": 2, "needed": 100}   # B's one token has no TPOT
    assert t["tpot_p99_ms"]["measured_ms"] == approx(248.75) and t["tpot_p99_ms"]["met"] is True
    assert t["tpot_p99_ms"]["attainment"] == 1.0  # B's one token counts as TPOT 0, as in vLLM's goodput
    assert t["e2el_p99_ms"]["met"] is True and t["e2el_p99_ms"]["attainment"] == 1.0
    assert slo["met"] is False
    assert slo["goodput"] == {"thresholds_ms": {"ttft": 400.0, "tpot": 250.0, "e2el": 2000.0},
                              "attainment": {"ttft": approx(2 / 3), "tpot": 1.0, "e2el": 1.0},
                              # over the 4 offered: the rejected request was not served within the SLO (the
                              # cancelled one was withdrawn by its client)
                              "good_requests": 2, "offered_requests": 4, "good_fraction": approx(2 / 4)}


def test_all_targets_met():
    reqs, gaps = hand_case()
    r = compute_results(reqs, gaps, slo=parse_slo({"ttft_p99_ms": 500, "itl_p50_ms": 125}))
    assert r["slo"]["met"] is True
    itl = r["slo"]["targets"]["itl_p50_ms"]
    assert itl["measured_ms"] == approx(125) and itl["attainment"] == approx(8 / 12)
    assert r["slo"]["goodput"]["thresholds_ms"] == {"ttft": 500.0}  # ITL cannot enter goodput
    assert r["request_goodput"] == approx(3 / 3.5)


def test_plain_thresholds_are_vllm_goodput():
    reqs, gaps = hand_case()
    r = compute_results(reqs, gaps, slo=parse_slo({"ttft_ms": 600, "tpot_ms": 200}))
    # A fails TPOT (250 > 200); B passes (one token -> TPOT 0); C passes
    assert r["request_goodput"] == approx(2 / 3.5)
    assert r["slo"]["targets"] == {} and r["slo"]["met"] is True
    # a plain threshold overrides the target's for goodput; the highest percentile wins otherwise
    r = compute_results(reqs, gaps, slo=parse_slo({"ttft_p99_ms": 400, "ttft_ms": 600}))
    assert r["slo"]["goodput"]["thresholds_ms"] == {"ttft": 600.0}
    r = compute_results(reqs, gaps, slo=parse_slo({"ttft_p99_ms": 600, "ttft_p50_ms": 100}))
    assert r["slo"]["goodput"]["thresholds_ms"] == {"ttft": 600.0}


def test_itl_only_slo_has_no_goodput():
    reqs, gaps = hand_case()
    r = compute_results(reqs, gaps, slo=parse_slo({"itl_p99_ms": 100}))
    assert r["request_goodput"] is None and "goodput" not in r["slo"]
    assert r["slo"]["met"] is False


def test_unmeasurable_target_is_not_met():
    r = compute_results([req(0, 0.0, 0.5, 0.5)], GapLog(), slo=parse_slo({"tpot_p99_ms": 50}))
    assert r["slo"]["targets"]["tpot_p99_ms"]["measured_ms"] is None
    assert r["slo"]["met"] is False


@pytest.mark.parametrize("slo", [{"ttft_p99": 5}, {"itl_ms": 5}, {"ttft_p99_ms": -1}, {"ttft_p99_ms": True},
                                 {"ttft_p99_ms": "fast"}, {"ttft_p0_ms": 5}, {"ttft_p101_ms": 5}])
def test_bad_slo_is_a_user_error(slo):
    with pytest.raises(LlmsimError) as e:
        parse_slo(slo)
    assert e.value.key_path == f"slo.{next(iter(slo))}"


# -- JSON, merging, determinism --------------------------------------------------

def test_llmsim_block_is_merged_and_made_json_safe(tmp_path):
    reqs, gaps = hand_case()
    engine = {"seed": np.int64(7), "version": "0.1.0", "kv_utilisation": np.float32(0.5),
              "preemptions": 3, "idle": math.nan, "fleet": np.array([1, 2]), "status": Status.FINISHED}
    r = compute_results(reqs, gaps, llmsim=engine, slo=parse_slo({"ttft_p99_ms": 400}))
    b = r["llmsim"]
    assert b["seed"] == 7 and type(b["seed"]) is int
    assert b["kv_utilisation"] == 0.5 and type(b["kv_utilisation"]) is float
    assert b["idle"] is None and b["fleet"] == [1, 2] and type(b["status"]) is int
    assert "request_status" in b
    text = json.dumps(r, allow_nan=False)
    assert json.loads(text) == r
    out = write_results(r, tmp_path / "results.json")
    assert json.loads(out.read_text()) == r
    # the engine's own figures win over ours if it sends the same key
    assert compute_results(reqs, gaps, llmsim={"request_status": "x"})["llmsim"]["request_status"] == "x"
    with pytest.raises(TypeError):
        jsonable({"x": object()})


def test_all_values_are_plain_python():
    reqs, gaps = hand_case()

    def walk(o):
        if isinstance(o, dict):
            for v in o.values():
                walk(v)
        else:
            assert o is None or type(o) in (int, float, bool, str), (o, type(o))

    walk(compute_results(reqs, gaps, slo=parse_slo({"ttft_p99_ms": 400, "tpot_ms": 10, "itl_p90_ms": 3})))


def _random_run(seed, n=60):
    rng = random.Random(seed)
    reqs, gaps = [], GapLog()
    for i in range(n):
        a = rng.uniform(0, 50)
        out = rng.randint(1, 40)
        status = rng.choice([Status.FINISHED] * 6 + [Status.REJECTED, Status.CANCELLED])
        ft = a + rng.uniform(0.01, 2)
        fin = ft + rng.uniform(0.01, 0.05) * (out - 1)
        reqs.append(req(i, a, ft, fin, inp=rng.randint(1, 4000), out=out, status=status))
        lo = rng.uniform(0.005, 0.05)
        gaps.add(lo, lo + rng.choice([0.0, rng.uniform(0, 0.01)]), rng.randint(1, 100))
    return reqs, gaps


def test_deterministic_and_independent_of_record_order():
    slo = {"ttft_p99_ms": 1500, "tpot_p99_ms": 40, "itl_p95_ms": 45}
    reqs, gaps = _random_run(1)
    first = json.dumps(compute_results(reqs, gaps, slo=parse_slo(slo)))
    assert json.dumps(compute_results(reqs, gaps, slo=parse_slo(slo))) == first
    # shards or replicas may hand over records and gap segments in any order
    rng = random.Random(2)
    rng.shuffle(reqs)
    seg = list(zip(gaps.lo, gaps.hi, gaps.weight))
    rng.shuffle(seg)
    shuffled = GapLog()
    for s in seg:
        shuffled.add(*s)
    again, first = compute_results(reqs, shuffled, slo=parse_slo(slo)), json.loads(first)
    # exact sums make everything bit-identical, except that ITL percentiles may
    # move in the last bits where segments share a breakpoint
    itl_pct = [k for k in first if k.startswith("p") and k.endswith("_itl_ms")]
    for k in itl_pct:
        assert again.pop(k) == approx(first.pop(k))
    assert again["slo"]["targets"].pop("itl_p95_ms")["measured_ms"] == approx(
        first["slo"]["targets"].pop("itl_p95_ms")["measured_ms"])
    assert again == first


# -- the gap mixture -------------------------------------------------------------

point_segments = st.lists(st.tuples(st.integers(0, 50).map(lambda k: k * 0.001 + 0.01), st.integers(1, 20)),
                          min_size=1, max_size=25)
qs = st.lists(st.floats(0, 100, allow_nan=False), min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(point_segments, qs)
def test_point_masses_match_numpy_on_expanded_gaps(segs, q):
    x = np.array([v for v, _ in segs])
    w = np.array([k for _, k in segs], dtype=float)
    mix = UniformMixture(x, x, w)
    expanded = np.repeat(x, w.astype(int))
    assert mix.percentiles(q) == [float(v) for v in np.percentile(expanded, q)]
    assert mix.percentiles([50])[0] == pytest.approx(float(np.median(expanded)), rel=1e-15)
    assert mix.mean() == pytest.approx(float(np.mean(expanded)), rel=1e-12)
    assert mix.std() == pytest.approx(float(np.std(expanded)), rel=1e-9, abs=1e-15)
    stats = mix.stats((90, 99))
    ref = sample_stats(expanded, (90, 99))
    assert stats["p90"] == ref["p90"] and stats["p99"] == ref["p99"]
    for t in (0.0, float(x[0]), 0.03, 1.0):
        assert mix.cdf(t) == pytest.approx(float(np.mean(expanded <= t)), rel=1e-12)


segments = st.lists(
    st.tuples(st.floats(0.001, 1.0), st.one_of(st.just(0.0), st.floats(1e-6, 0.5)), st.integers(1, 1000)),
    min_size=1, max_size=30)


@settings(max_examples=200, deadline=None)
@given(segments, qs)
def test_uniform_segments_stay_in_span_and_invert_the_cdf(segs, q):
    lo = np.array([s[0] for s in segs])
    hi = lo + np.array([s[1] for s in segs])
    w = np.array([s[2] for s in segs], dtype=float)
    mix = UniformMixture(lo, hi, w)
    ps = mix.percentiles(sorted(q))
    assert all(lo.min() <= p <= hi.max() for p in ps)
    assert all(a <= b for a, b in zip(ps, ps[1:]))
    assert lo.min() <= mix.mean() <= hi.max()
    # the mixture quantile really inverts the CDF
    for m in np.linspace(0.5, mix.total - 0.5, 7):
        x = mix.quantile_at_mass(np.array([m]))[0]
        assert mix.cdf(x) >= m / mix.total - 1e-9
        assert mix.cdf(x - 1e-9) <= m / mix.total + 1e-9


@settings(max_examples=50, deadline=None)
@given(st.floats(0.01, 1.0), st.floats(1e-4, 0.5), st.integers(2, 400), qs)
def test_single_segment_within_one_step_of_the_true_gaps(lo, width, n, q):
    """The engine's n gaps are evenly spaced from lo to hi; the mixture
    places them at slice midpoints, so every percentile is within one step."""
    hi = lo + width
    got = UniformMixture([lo], [hi], [n]).percentiles(q)
    want = np.percentile(np.linspace(lo, hi, n), q)
    step = width / (n - 1)
    assert all(abs(g - v) <= step + 1e-12 for g, v in zip(got, want))


def test_moments_of_a_uniform_segment():
    mix = UniformMixture([1.0, 3.0], [3.0, 3.0], [2, 2])  # U[1,3] and a point at 3, equal weight
    assert mix.mean() == approx(2.5)
    assert mix.std() == approx(math.sqrt((4 / 12 + 0.25 + 0.25) / 2))
    assert mix.percentiles([0, 100]) == [approx(1.5), approx(3.0)]
    assert mix.cdf(2.0) == approx(0.25)


def test_near_degenerate_segment_does_not_swamp_the_rest():
    # a huge, almost zero-width segment next to a wide one
    mix = UniformMixture([0.1, 0.02], [0.1 + 1e-15, 0.04], [1e6, 1000])
    p = mix.percentiles([0.05, 50, 99.99])
    assert 0.02 <= p[0] <= 0.04 and p[1] == approx(0.1) and p[2] == approx(0.1)
    assert mix.cdf(0.03) == approx(500 / 1001000)


# -- the 1 µs gap grid -------------------------------------------------------------

def _log(lo, hi, w) -> GapLog:
    g = GapLog()
    for a, b, k in zip(lo, hi, w):
        g.add(float(a), float(b), float(k))
    return g


grid_segments = st.lists(
    st.tuples(st.floats(0.005, 0.2), st.one_of(st.just(0.0), st.floats(0.0, 0.02)), st.integers(1, 500)),
    min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(grid_segments, qs)
def test_grid_moves_every_figure_by_at_most_half_a_microsecond(segs, q):
    """The grid snaps each segment's ends to the nearest µs: every percentile
    of the mixture moves by at most that (each segment's CDF lies between its
    own shifted by ±½ µs, so the mixture's quantiles do too); the std moves
    by no more than twice that, and the mean, a sum, not at all."""
    lo = np.array([s[0] for s in segs])
    hi = lo + np.array([s[1] for s in segs])
    w = np.array([s[2] for s in segs], dtype=float)
    exact = UniformMixture(lo, hi, w, scale=1000.0)
    grid = GapGrid.of(_log(lo, hi, w)).mixture()
    half_us = 0.0005 + 1e-9   # in ms, with room for rounding
    for a, b in zip(grid.percentiles(q), exact.percentiles(q)):
        assert abs(a - b) <= half_us
    assert grid.mean() == pytest.approx(exact.mean(), rel=1e-12)
    assert abs(grid.std() - exact.std()) <= 2 * half_us
    assert grid.total == exact.total


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(5_000, 60_000), st.integers(1, 30)), min_size=1, max_size=40), qs)
def test_grid_point_masses_on_the_grid_are_numpy_exactly(points, q):
    """Gaps that already sit on whole microseconds are the expanded sample
    itself: np.percentile of it, bit for bit, in milliseconds."""
    us = np.array([p for p, _ in points])
    k = np.array([c for _, c in points])
    grid = GapGrid.of(_log(us / 1e6, us / 1e6, k)).mixture()
    expanded = np.repeat(us / 1000.0, k)
    assert grid.percentiles(q) == [float(v) for v in np.percentile(expanded, q)]
    assert grid.mean() == pytest.approx(float(np.mean(expanded)), rel=1e-12)


@settings(max_examples=100, deadline=None)
@given(grid_segments, st.integers(1, 5))
def test_grids_of_parts_merge_into_the_grid_of_the_whole(segs, parts):
    """What the shard merge relies on: summing the grids of any split of a
    log gives the grid of the log (to rounding in the summed densities)."""
    lo = np.array([s[0] for s in segs])
    hi = lo + np.array([s[1] for s in segs])
    w = np.array([s[2] for s in segs], dtype=float)
    cut = np.array_split(np.arange(len(segs)), parts)
    merged = GapGrid.merge([GapGrid.of(_log(lo[i], hi[i], w[i])) for i in cut])
    whole = GapGrid.of(_log(lo, hi, w))
    assert merged.cells.tolist() == whole.cells.tolist()
    assert merged.jump.tolist() == whole.jump.tolist() and merged.dcount.tolist() == whole.dcount.tolist()
    assert merged.dslope == pytest.approx(whole.dslope, rel=1e-12, abs=1e-9)
    a, b = merged.mixture(), whole.mixture()
    assert a.percentiles([50, 99]) == pytest.approx(b.percentiles([50, 99]), rel=1e-12)


def test_grid_holds_one_entry_per_distinct_microsecond_not_per_segment():
    rng = np.random.default_rng(1)
    n = 300_000
    lo = rng.integers(10_000, 12_000, n) / 1e6          # 2,000 distinct step times
    hi = lo + rng.integers(0, 3, n) / 1e6
    g = GapGrid.of(_log(lo, hi, rng.integers(1, 64, n)))
    assert len(g) <= 2_002 < n
    assert GapGrid.merge([g, g]).total == 2 * g.total and len(GapGrid.merge([g, g])) == len(g)


def test_grid_refuses_bad_segments_and_an_empty_log_has_no_figures():
    with pytest.raises(ValueError):
        GapGrid.of(_log([0.2], [0.1], [1]))
    empty = GapGrid.of(None).mixture()
    assert empty.mean() is None and empty.percentiles([99]) == [None] and empty.cdf(1.0) is None


def test_mixture_rejects_bad_segments():
    for lo, hi, w in (([1.0], [0.5], [1]), ([1.0], [2.0], [-1]), ([math.nan], [1.0], [1]), ([1.0], [1.0, 2.0], [1])):
        with pytest.raises(ValueError):
            UniformMixture(lo, hi, w)
    empty = UniformMixture([1.0], [2.0], [0])  # zero-weight segments are dropped
    assert empty.mean() is None and empty.percentiles([50]) == [None] and empty.cdf(1.0) is None


# -- per-request table -----------------------------------------------------------

def test_request_table_parquet_agrees_with_results(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    reqs, gaps = hand_case()
    path = write_requests(reqs, tmp_path / "out" / "requests")
    assert path.name == "requests.parquet"
    df = pd.read_parquet(path)
    assert list(df.columns) == RECORD_COLUMNS + ["ttft_ms", "tpot_ms", "e2el_ms"]
    assert df["status"].tolist() == ["finished", "finished", "finished", "rejected", "cancelled"]
    assert df["ttft_ms"].tolist()[:3] == [250, 500, 125] and math.isnan(df["ttft_ms"][3])
    assert df["ttft_ms"][4] == 500  # a cancelled request still had a first token
    assert math.isnan(df["tpot_ms"][1]) and math.isnan(df["e2el_ms"][4])
    r = compute_results(reqs, gaps)
    done = df[df["status"] == "finished"]
    assert done["ttft_ms"].mean() == approx(r["mean_ttft_ms"])
    assert done["tpot_ms"].dropna().mean() == approx(r["mean_tpot_ms"])
    assert done["e2el_ms"].quantile(0.99) == approx(r["p99_e2el_ms"])
    # an explicit suffix is replaced, not doubled; an empty run still has a typed table
    assert write_requests(reqs, tmp_path / "again.parquet").name == "again.parquet"
    empty = pd.read_parquet(write_requests([], tmp_path / "empty"))
    assert len(empty) == 0 and empty["id"].dtype == np.int64 and list(empty.columns) == list(df.columns)


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_request_table_written_in_chunks_is_the_same_file_content(tmp_path, monkeypatch, fmt):
    """A big table is written a slice of rows at a time (the merge of a
    sharded run keeps its columns on disk); the rows do not depend on it."""
    pd = pytest.importorskip("pandas")
    if fmt == "parquet":
        pytest.importorskip("pyarrow")
    reqs, _ = hand_case()
    read = pd.read_parquet if fmt == "parquet" else pd.read_csv
    whole = read(write_requests(reqs, tmp_path / "whole", fmt=fmt))
    monkeypatch.setattr("simulator.metrics.table._ROWS", 2)
    pd.testing.assert_frame_equal(read(write_requests(reqs, tmp_path / "parts", fmt=fmt)), whole)
    assert len(whole) == len(reqs)


def test_request_table_csv_fallback(tmp_path, monkeypatch):
    import csv

    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # as if pyarrow were not installed
    reqs, _ = hand_case()
    path = write_requests(reqs, tmp_path / "requests")
    assert path.suffix == ".csv"
    rows = list(csv.DictReader(path.open()))
    assert rows[0]["ttft_ms"] == "250.0" and rows[1]["tpot_ms"] == "" and rows[3]["status"] == "rejected"
    assert set(request_table(reqs)) == set(rows[0])
    with pytest.raises(ValueError):
        write_requests(reqs, tmp_path / "x", fmt="xlsx")


# -- summary ---------------------------------------------------------------------

def _render(table) -> str:
    console = Console(record=True, width=140, color_system=None)
    console.print(table)
    return console.export_text()


def test_summary_table_shows_counts_latencies_and_slo():
    reqs, gaps = hand_case()
    text = _render(summary_table(compute_results(reqs, gaps, slo=parse_slo({"ttft_p99_ms": 400, "tpot_p99_ms": 250}))))
    for needle in ("Successful requests", "Request goodput", "Total token throughput", "TTFT", "TPOT", "ITL",
                   "E2EL", "median", "p95", "p99", "495.00", "248.75", "✓", "✗", "goodput"):
        assert needle in text, needle
    plain = _render(summary_table(compute_results(reqs, gaps)))
    assert "SLO" not in plain and "goodput" not in plain
    assert "—" in _render(summary_table(compute_results([], GapLog())))


def test_a_goodput_of_zero_is_shown_not_hidden():
    """Every request past a 1 ms TTFT threshold: goodput 0.00 is the row to read, not one to drop."""
    reqs, gaps = hand_case()
    res = compute_results(reqs, gaps, slo=parse_slo({"ttft_p95_ms": 1}))
    assert res["request_goodput"] == 0.0
    row = next(line for line in _render(summary_table(res)).splitlines() if "Request goodput" in line)
    assert "0.00" in row


# -- columns on disk ---------------------------------------------------------------

def test_column_files_read_back_what_was_written(tmp_path):
    from simulator.metrics.column_files import ColumnFiles
    from simulator.metrics.records import Records

    cols = ColumnFiles(tmp_path)
    cols["t"] = np.array([0.5, 1.25, 2.0])
    cols["n"] = np.array([3, 1, 2], dtype=np.int32)
    cols["klass"] = np.array(["paid", None, "paid"], dtype=object)
    assert list(cols) == ["t", "n", "klass"] and cols.rows == 3 and len(Records(cols)) == 3
    assert cols["n"].dtype == np.int32 and cols["t"].tolist() == [0.5, 1.25, 2.0]
    k = cols["klass"]
    assert k.tolist() == ["paid", None, "paid"] and k[0] is k[2]   # shared str objects, as in memory
    assert cols.rows_of("klass", 1, 3).tolist() == [None, "paid"] and cols.rows_of("t", 2, 3).tolist() == [2.0]
    parts = list(Records(cols).chunks(2))
    assert [len(p) for p in parts] == [2, 1] and parts[1].columns["n"].tolist() == [2]
    with pytest.raises(ValueError):
        cols["bad"] = np.zeros(2)
    del cols["t"]
    assert "t" not in cols and not (cols.root / "t.npy").exists()
    root = cols.root
    cols.close()
    assert not root.exists()
