"""Time-varying arrival rates (workloads.rate_profiles): hourly steps, a sinusoid, spikes.

Counts are checked against the integrated rate Λ with fixed seeds: binned
counts of a Poisson process are independent Poisson variables, so
Σ (O − E)²/E is χ² with one degree of freedom per bin, and single windows
are held to 5 standard deviations. Deterministic, and far from flaky.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import simpy
from pydantic import TypeAdapter, ValidationError
from scipy import integrate, stats

from simulator.errors import from_validation_error
from workloads import GammaArrival, PoissonArrival, WorkloadSpec, make_source
from workloads.arrivals import ArrivalSpec
from workloads.request import Status
from workloads.rate_profiles import HourlyProfile, RateSchedule, SinusoidProfile, Spike

ARRIVAL = TypeAdapter(ArrivalSpec)
HOUR, DAY = 3600.0, 86400.0
# A day with a night at zero, a morning ramp, a lunch peak (hour 13 = 10) and an evening tail.
DAY_SHAPE = [0.5, 0.3, 0, 0, 0.2, 0.4, 1, 2, 4, 6, 7, 8, 9, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1.5, 1]


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def hourly(**kw) -> dict:
    return {"type": "hourly", "values": DAY_SHAPE, **kw}


def poisson(rate=10.0, **kw) -> PoissonArrival:
    return ARRIVAL.validate_python({"type": "poisson", "rate_per_s": rate, **kw})


def binned(arrival, t: np.ndarray, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(observed, expected) counts per bin."""
    return np.histogram(t, edges)[0], arrival.expected_count(edges[1:], edges[:-1])


def chi2_p(observed: np.ndarray, expected: np.ndarray) -> float:
    """p-value of independent Poisson counts against their means (bins with mean 0 must be empty)."""
    assert not observed[expected == 0].any()
    keep = expected > 0
    stat = float(np.sum((observed[keep] - expected[keep]) ** 2 / expected[keep]))
    return float(stats.chi2.sf(stat, keep.sum()))


def within_5_sigma(observed: float, expected: float) -> bool:
    return abs(observed - expected) <= 5 * math.sqrt(expected) + 1e-9


# --- the integrated rate -------------------------------------------------------

SCHEDULES = {
    "flat+spikes": (7.0, None, [Spike(start_s=100, duration_s=50, multiplier=4),
                                Spike(start_s=120, duration_s=100, multiplier=0.5)]),
    "hourly": (3.0, HourlyProfile(values=DAY_SHAPE, start_hour=20.25), []),
    "hourly+spike": (3.0, HourlyProfile(values=DAY_SHAPE), [Spike(start_s=5000, duration_s=4000, multiplier=3)]),
    "sinusoid": (2.0, SinusoidProfile(period_s=1000, peak_to_trough=10, peak_at_s=1234.5), []),
    "sinusoid+spike": (2.0, SinusoidProfile(peak_to_trough=25, peak_at_s=40000),
                       [Spike(start_s=30000, duration_s=7000, multiplier=2)]),
}


@pytest.mark.parametrize("name", SCHEDULES)
def test_cumulative_is_the_integral_of_the_rate_and_inverts(name):
    rate, profile, spikes = SCHEDULES[name]
    s = RateSchedule(rate, profile, spikes)
    # Λ against numerical quadrature of λ, over intervals crossing hour, spike and day edges.
    breaks = [*np.arange(0, 2 * DAY, HOUR / 4), *(x for sp in spikes for x in (sp.start_s, sp.start_s + sp.duration_s))]
    for a, b in [(0, 150), (90, 230), (0, 5 * HOUR + 17), (3 * HOUR + 1, 30 * HOUR), (29000, 41000), (0, 2 * DAY)]:
        pts = [p for p in breaks if a < p < b]
        quad, err = integrate.quad(s.rate_at, a, b, points=pts or None, limit=500)
        assert s.cumulative(b) - s.cumulative(a) == pytest.approx(quad, rel=1e-8, abs=1e-8)
    # Λ⁻¹ undoes Λ wherever the rate is positive (zero-rate hours are skipped by Λ⁻¹).
    t = np.linspace(0, 3 * DAY, 20001)
    back = s.inverse(s.cumulative(t))
    live = s.rate_at(t) > 0
    np.testing.assert_allclose(back[live], t[live], rtol=1e-12, atol=1e-9)
    assert np.all(np.diff(back) >= 0)


def test_helpers_rate_count_mean_and_peak():
    a = poisson(100.0, profile=hourly(start_hour=13), spikes=[{"start_s": 600, "duration_s": 60, "multiplier": 3}])
    # start_hour 13: t = 0 is 13:00, the peak hour; hour 14 runs at 9/10 of it.
    assert a.rate_at(0.0) == 100.0 and a.rate_at(599.9) == 100.0
    assert a.rate_at(600.0) == 300.0 and a.rate_at(659.99) == 300.0 and a.rate_at(660.0) == 100.0
    assert a.rate_at(HOUR) == pytest.approx(90.0)
    np.testing.assert_allclose(a.rate_at(np.array([0.0, HOUR, 2 * HOUR])), [100, 90, 80])
    # A two-hour window of the day: 13:00-15:00, plus the spike's extra 2 × 100/s × 60 s.
    assert a.expected_count(2 * HOUR) == pytest.approx(100 * HOUR + 90 * HOUR + 2 * 100 * 60)
    assert a.mean_rate(2 * HOUR) == pytest.approx(a.expected_count(2 * HOUR) / (2 * HOUR))
    assert a.mean_rate() == pytest.approx(100 * np.mean(DAY_SHAPE) / 10)  # long run: spikes are one-off
    assert a.peak_rate() == 300.0 and a.peak_rate(600) == 100.0 and a.peak_rate(600.5) == 300.0
    # Window 03:00-05:00 (start_hour 3): hour 3 is 0, hour 4 is 0.2.
    night = poisson(100.0, profile=hourly(start_hour=3))
    assert night.peak_rate(HOUR) == 0.0 and night.peak_rate(2 * HOUR) == pytest.approx(2.0)
    np.testing.assert_allclose(night.expected_count(np.array([HOUR, 2 * HOUR]), np.array([0, HOUR])), [0, 2 * HOUR])

    wave = poisson(50.0, profile={"type": "sinusoid", "peak_to_trough": 10, "peak_at_s": 50400})
    assert wave.rate_at(50400.0) == pytest.approx(50.0) and wave.rate_at(50400.0 - DAY / 2) == pytest.approx(5.0)
    assert wave.mean_rate() == pytest.approx(27.5) and wave.mean_rate(DAY) == pytest.approx(27.5)
    assert wave.peak_rate() == pytest.approx(50.0) and wave.peak_rate(15 * HOUR) == pytest.approx(50.0)
    assert wave.peak_rate(HOUR) == pytest.approx(wave.rate_at(0.0))  # 00:00-01:00 falls towards the 02:00 trough
    assert wave.peak_rate(2 * HOUR) > wave.rate_at(2 * HOUR) == pytest.approx(5.0)
    # Without a profile the helpers are the constant rate.
    flat = GammaArrival(rate_per_s=4.0, burstiness=0.5)
    assert flat.mean_rate() == flat.peak_rate() == flat.rate_at(123.0) == 4.0
    assert flat.expected_count(10.0) == 40.0 and not flat.time_varying


# --- counts against the integrated rate ------------------------------------------------

def test_hourly_counts_follow_the_profile_hour_by_hour():
    a = poisson(20.0, profile=hourly(start_hour=6.5))
    t = a.times(rng(1), duration_s=2 * DAY)
    edges = np.arange(0, 2 * DAY + 1, HOUR / 2)  # half hours: start_hour 6.5 puts hour edges on odd ones
    obs, exp = binned(a, t, edges)
    assert chi2_p(obs, exp) > 1e-6
    # The same counts against the profile one hour off are nowhere near (the test has power).
    wrong = poisson(20.0, profile=hourly(start_hour=7.5))
    with pytest.raises(AssertionError):
        assert chi2_p(obs, binned(wrong, t, edges)[1]) > 1e-6
    # The zero hours (02:00-04:00 = t in [19.5 h, 21.5 h) and a day later) get nothing, and the steps
    # sit on the hour: 13:00-13:30 (peak, 10) against 12:30-13:00 (9).
    clock = (t / HOUR + 6.5) % 24
    assert not np.any((clock >= 2) & (clock < 4))
    assert clock[(clock >= 1.5) & (clock < 2)].size > 0 and clock[(clock >= 4) & (clock < 4.5)].size > 0
    h12, h13 = ((clock >= 12.5) & (clock < 13)).sum(), ((clock >= 13) & (clock < 13.5)).sum()
    assert within_5_sigma(h12, 2 * 9 * 2 * HOUR / 2) and within_5_sigma(h13, 2 * 10 * 2 * HOUR / 2)


def test_sinusoid_10x_shows_its_peak_to_trough_ratio_in_binned_counts():
    period, periods = 1000.0, 10
    a = poisson(200.0, profile={"type": "sinusoid", "period_s": period, "peak_to_trough": 10, "peak_at_s": 250})
    t = a.times(rng(2), duration_s=periods * period)
    obs, exp = binned(a, t, np.linspace(0, periods * period, 401))
    assert chi2_p(obs, exp) > 1e-6
    # Phase-fold into 20 bins of 50 s, the first centred on the peak, the 11th on the trough.
    folded = np.histogram(np.mod(t - 250 + 25, period), np.linspace(0, period, 21))[0]
    peak, trough = folded[0], folded[10]
    exact = a.expected_count(275.0, 225.0) / a.expected_count(775.0, 725.0)  # the same every period
    assert exact == pytest.approx(10, rel=0.02)
    assert abs(peak / trough - exact) < 5 * exact * math.sqrt(1 / peak + 1 / trough)  # ±5%
    assert folded.argmax() == 0 and folded.argmin() == 10
    n = 200 * 0.55 * periods * period
    assert abs(len(t) - n) < 5 * math.sqrt(n)


def test_spikes_multiply_the_rate_in_their_window_only():
    spike = {"start_s": 400.0, "duration_s": 100.0, "multiplier": 5}
    base, spiked = poisson(50.0), poisson(50.0, spikes=[spike])
    t0, t1 = base.times(rng(3), duration_s=1000.0), spiked.times(rng(3), duration_s=1000.0)
    # Same draws, moved by Λ⁻¹: identical before the spike, every later one earlier.
    before = t0 < 400
    np.testing.assert_array_equal(t1[: before.sum()], t0[before])
    assert len(t1) > len(t0)
    inside = ((t1 >= 400) & (t1 < 500)).sum()
    assert within_5_sigma(inside, 5 * 50 * 100)
    obs, exp = binned(spiked, t1, np.arange(0, 1001, 10.0))
    assert chi2_p(obs, exp) > 1e-6
    assert set(np.unique(exp).round(9)) == {500.0, 2500.0}  # 10-s bins: 50/s outside, 250/s inside
    # A dip and a spike on top of a profile compose by multiplication.
    both = poisson(10.0, profile=hourly(start_hour=12), spikes=[spike, {**spike, "multiplier": 0.1}])
    assert both.rate_at(450.0) == pytest.approx(10.0 * 9 / 10 * 5 * 0.1)


def test_gamma_with_a_profile_keeps_the_mean_count():
    a = GammaArrival(rate_per_s=50.0, burstiness=0.5,
                     profile=SinusoidProfile(period_s=2000, peak_to_trough=4), spikes=[Spike(start_s=500, duration_s=200, multiplier=2)])
    t = a.times(rng(4), duration_s=10_000.0)
    edges = np.arange(0, 10_001, 500.0)
    obs, exp = binned(a, t, edges)
    # Gamma counts have variance ≈ mean·CV² = 2·mean: 5 such sigmas per bin.
    assert np.all(np.abs(obs - exp) <= 5 * np.sqrt(2 * exp))
    assert abs(len(t) - a.expected_count(10_000.0)) <= 5 * math.sqrt(2 * a.expected_count(10_000.0))


# --- determinism and the unchanged constant-rate path ------------------------------------

@pytest.mark.parametrize("spec", [
    {"type": "poisson", "rate_per_s": 3.0, "profile": {"type": "hourly", "values": DAY_SHAPE, "start_hour": 1}},
    {"type": "gamma", "rate_per_s": 30.0, "burstiness": 0.3, "profile": {"type": "sinusoid", "period_s": 600,
                                                                         "peak_to_trough": 8, "peak_at_s": 100}},
    {"type": "poisson", "rate_per_s": 30.0, "spikes": [{"start_s": 5, "duration_s": 5, "multiplier": 9}]},
])
def test_same_seed_same_times_and_duration_mode_agrees_with_n_mode(spec):
    a = ARRIVAL.validate_python(spec)
    t = a.times(rng(5), duration_s=4 * HOUR)
    assert t.size > 100 and np.all(t > 0) and np.all(t < 4 * HOUR) and np.all(np.diff(t) >= 0)
    np.testing.assert_array_equal(t, ARRIVAL.validate_python(spec).times(rng(5), duration_s=4 * HOUR))
    more = a.times(rng(5), n=len(t) + 1)
    np.testing.assert_allclose(more[:-1], t, rtol=1e-12)
    assert more[-1] >= 4 * HOUR
    # A profile only moves the draws: Λ of the times is the constant-rate process's operational time.
    flat = ARRIVAL.validate_python({k: v for k, v in spec.items() if k not in ("profile", "spikes")})
    op = flat.times(rng(5), n=len(t)) * flat.rate_per_s
    np.testing.assert_allclose(a.schedule.cumulative(t), op, rtol=1e-9, atol=1e-9)


def test_no_profile_is_byte_identical_to_the_constant_rate():
    a = poisson(7.0)
    gaps = rng(6).standard_exponential(1000)
    np.testing.assert_array_equal(a.times(rng(6), n=1000), np.cumsum(gaps) / 7.0)
    assert a == PoissonArrival(rate_per_s=7.0, profile=None, spikes=[])
    # A shaped arrival survives a dump and reload (how a plan's points and shards carry it) unchanged:
    # equal settings (defaults filled in) and the same draws, which differ from the constant rate's.
    shaped = poisson(7.0, profile=hourly(), spikes=[{"start_s": 1, "duration_s": 2, "multiplier": 3}])
    dumped = shaped.model_dump()
    assert dumped["profile"]["start_hour"] == 0
    again = ARRIVAL.validate_python(dumped)
    assert again == shaped and again != a
    np.testing.assert_array_equal(again.times(rng(8), n=500), shaped.times(rng(8), n=500))
    assert not np.array_equal(shaped.times(rng(8), n=500), a.times(rng(8), n=500))


# --- session starts ------------------------------------------------------------------------

def test_chat_session_starts_follow_the_profile():
    # 01:00-05:00 of DAY_SHAPE: 0.3, 0, 0, 0.2 of the peak; a 20× spike in the first zero hour
    # is still zero.
    wl = WorkloadSpec.model_validate(dict(
        duration_s=4 * HOUR,
        arrival={"type": "poisson", "rate_per_s": 1.0, "profile": hourly(start_hour=1),
                 "spikes": [{"start_s": HOUR, "duration_s": 600, "multiplier": 20}]},
        input_tokens={"dist": "fixed", "value": 10}, output_tokens={"dist": "fixed", "value": 5},
        session={"type": "chat", "turns": {"dist": "fixed", "value": 2}, "think_time_s": {"dist": "fixed", "value": 1}}))
    source = make_source(wl, 7)
    starts = np.asarray(source.starts)
    np.testing.assert_array_equal(starts, wl.arrival_times(7))
    hours = np.histogram(starts, np.arange(0, 4 * HOUR + 1, HOUR))[0]
    assert hours[1] == hours[2] == 0
    assert within_5_sigma(hours[0], 0.3 / 10 * HOUR) and within_5_sigma(hours[3], 0.2 / 10 * HOUR)

    env = simpy.Environment()
    sent = []

    def submit(req):
        sent.append(req)
        env.timeout(0.5).callbacks.append(lambda _ev: finish(req))

    def finish(req):
        req.status, req.finish = Status.FINISHED, env.now
        source.on_done(req)

    source.start(env, submit, lambda req: None)
    env.run()
    first_turns = sorted(r.arrival for r in sent if r.session is not None and
                         r.id == min(q.id for q in sent if q.session == r.session))
    np.testing.assert_allclose(first_turns, starts)
    assert len(sent) == 2 * len(starts)


# --- validation -----------------------------------------------------------------------------

@pytest.mark.parametrize("arrival, must_mention", [
    ({"profile": {"type": "hourly", "values": [1] * 23}}, "arrival.profile.values: expected at least 24 items, got 23"),
    ({"profile": {"type": "hourly", "values": [1] * 25}}, "arrival.profile.values: expected at most 24 items, got 25"),
    ({"profile": {"type": "hourly", "values": [0] * 24}}, "arrival.profile.values: all 24 values are 0"),
    ({"profile": {"type": "hourly", "values": [1] * 23 + [-1]}}, "arrival.profile.values[23]: Input should be greater"),
    ({"profile": {"type": "hourly", "values": [1] * 23 + [math.nan]}}, "arrival.profile.values[23]"),
    ({"profile": {"type": "hourly", "values": [1] * 24, "start_hour": 24}}, "arrival.profile.start_hour"),
    ({"profile": {"type": "hourly", "values": [1] * 24, "start": 3}}, "arrival.profile.start: unknown key"),
    ({"profile": {"type": "sinusoid"}}, "arrival.profile.peak_to_trough: Field required"),
    ({"profile": {"type": "sinusoid", "peak_to_trough": 0.5}}, "arrival.profile.peak_to_trough: Input should be greater"),
    ({"profile": {"type": "sinusoid", "peak_to_trough": math.inf}}, "arrival.profile.peak_to_trough: Input should be a finite"),
    ({"profile": {"type": "sinusoid", "peak_to_trough": 2, "period_s": 0}}, "arrival.profile.period_s"),
    ({"profile": {"type": "sinusoid", "peak_to_trough": 2, "peak_at_s": -1}}, "arrival.profile.peak_at_s"),
    ({"profile": {"type": "sine", "peak_to_trough": 2}}, "arrival.profile: unknown type 'sine' (valid: hourly, sinusoid)"),
    ({"spikes": [{"start_s": 1, "duration_s": 1, "multiplier": 2}, {"start_s": 1, "duration_s": 1, "multiplier": 0}]},
     "arrival.spikes[1].multiplier: Input should be greater than 0"),
    ({"spikes": [{"start_s": -1, "duration_s": 1, "multiplier": 2}]}, "arrival.spikes[0].start_s"),
    ({"spikes": [{"start_s": 1, "duration_s": 0, "multiplier": 2}]}, "arrival.spikes[0].duration_s"),
    ({"spikes": [{"start_s": 1, "length_s": 1, "duration_s": 1, "multiplier": 2}]}, "arrival.spikes[0].length_s: unknown"),
])
def test_validation_names_the_key_path(arrival, must_mention):
    data = dict(duration_s=10.0, arrival={"type": "gamma", "rate_per_s": 1.0, **arrival},
                input_tokens={"dist": "fixed", "value": 1}, output_tokens={"dist": "fixed", "value": 1})
    with pytest.raises(ValidationError) as err:
        WorkloadSpec.model_validate(data)
    assert must_mention in from_validation_error(err.value, "day.yaml", data).render()


def test_concurrency_and_duration_checks():
    with pytest.raises(ValidationError, match="profile"):
        ARRIVAL.validate_python({"type": "concurrency", "concurrency": 4, "profile": hourly()})
    a = poisson(1.0, profile=hourly())
    with pytest.raises(ValueError, match="duration_s"):
        a.mean_rate(0.0)
    with pytest.raises(ValueError, match="duration_s"):
        a.peak_rate(0.0)
