"""The monthly extrapolation (``cost.monthly``): window, day, and a peak
window scaled hour by hour by a daily profile."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st
from rich.console import Console

from simulator.metrics.cost import PoolBilling, cost_block
from simulator.metrics.monthly import MonthlySpec, MonthRule, daily_load, peak_window_month
from simulator.report.summary import summary_table
from simulator.runner import simulate
from simulator.scenario.schema import Scenario
from test_fleet import cli_error
from workloads.rate_profiles import HourlyProfile, SinusoidProfile, Spike

HOUR = 3600.0
PRICE = 3.0


def billing(mean_replicas: float, window_s: float = 1800.0, tp: int = 1, floor: int | None = None,
            name: str = "p") -> PoolBilling:
    return PoolBilling(name, "h100-sxm", tp, int(mean_replicas + 0.999), PRICE, "scenario", False, "",
                       mean_replicas * window_s, floor)


def hourly(values, start_hour: float = 0.0) -> HourlyProfile:
    return HourlyProfile(values=list(values), start_hour=start_hour)


def month(pools, profile, window_s: float = 1800.0, spikes=()) -> tuple[float, dict]:
    return peak_window_month(pools, daily_load(profile, spikes, window_s), window_s)


# -- the daily multipliers ----------------------------------------------------------

def test_hourly_multipliers_are_each_hour_over_the_window():
    v = [1.0] * 24
    v[14] = 4.0
    v[3] = 0.0
    d = daily_load(hourly(v, start_hour=14), (), HOUR)   # the window is 14:00-15:00, the peak
    assert d.multipliers[14] == 1.0 and d.multipliers[3] == 0.0 and d.multipliers[0] == 0.25
    assert d.hour_0.startswith("00:00")
    # a window straddling 13:30-14:30 has load 2.5: hours are relative to it
    d = daily_load(hourly(v, start_hour=13.5), (), HOUR)
    assert d.multipliers[14] == pytest.approx(4 / 2.5) and d.multipliers[13] == pytest.approx(1 / 2.5)


def test_sinusoid_multipliers_span_the_peak_to_trough_ratio():
    d = daily_load(SinusoidProfile(peak_to_trough=10, peak_at_s=1800), (), HOUR)  # window = peak hour
    m = d.multipliers
    assert m[0] == pytest.approx(1.0) and max(m) == pytest.approx(1.0)
    assert min(m) == pytest.approx(0.1, abs=0.005)                      # the trough hour, 12 h later
    assert sum(m) / 24 == pytest.approx(0.55, rel=0.01)                 # the sinusoid's mean (1 + 1/10)/2


def test_a_spike_in_the_window_makes_every_other_hour_relatively_quieter():
    flat = daily_load(hourly([1.0] * 24), (), HOUR)
    spiked = daily_load(hourly([1.0] * 24), [Spike(start_s=0, duration_s=HOUR / 2, multiplier=3)], HOUR)
    assert flat.multipliers == (1.0,) * 24
    assert spiked.multipliers == pytest.approx((0.5,) * 24)             # window load (3 + 1)/2 = 2


# -- the peak-window month ----------------------------------------------------------

@pytest.mark.parametrize("pool", [billing(3.0), billing(2.37, floor=1), billing(4.0, tp=4, floor=2)])
def test_a_flat_profile_bills_the_window_rate_for_730_hours(pool):
    """One month whichever the method: a flat day × 30.42 is the window's rate × 730 h, as `window` bills."""
    usd, detail = month([pool], hourly([5.0] * 24))
    window_usd_per_h = pool.usd / (1800.0 / HOUR)
    assert usd == pytest.approx(window_usd_per_h * 730, rel=1e-12)
    assert detail["gpus"] == pytest.approx([pool.replica_seconds / 1800.0 * pool.gpus_per_replica] * 24)


def test_a_trough_of_a_tenth_costs_less_floored_at_min_replicas():
    day = [1.0] * 12 + [0.1] * 12                  # the window is hour 0, at the peak
    scaled = billing(5.0, floor=2)
    usd, detail = month([scaled], hourly(day))
    assert detail["replicas"]["p"] == [5.0] * 12 + [2.0] * 12          # 0.5 replica needed, 2 kept
    assert usd == pytest.approx((12 * 5 + 12 * 2) * PRICE * 730 / 24)
    fixed = billing(3.0)                             # resized hourly to whole replicas: ceil(0.3) = 1
    usd_f, detail_f = month([fixed], hourly(day))
    assert detail_f["replicas"]["p"] == [3.0] * 12 + [1.0] * 12
    assert usd_f == pytest.approx((12 * 3 + 12 * 1) * PRICE * 730 / 24)
    flat, _ = month([scaled], hourly([1.0] * 24))
    assert usd < flat


def test_warm_standbys_are_kept_whatever_the_hours_load():
    """A pool's warm standbys were scaled with its load: a window mean of 6 billed (4 serving, 2 standby)
    ran 12 at twice the window's load where 4 × 2 + 2 = 10 serve it, and off-peak the standbys shrank."""
    pool = PoolBilling("p", "h100-sxm", 1, 6, PRICE, "scenario", False, "", 6.0 * 1800.0, 3, 2)
    _, detail = month([pool], hourly([1.0] + [2.0] + [0.5] * 22))
    assert detail["replicas"]["p"][:3] == [6.0, 10.0, 4.0]      # 4 × 0.5 + 2 = 4, above the floor of 3


def test_pools_add_up_with_their_gpus_and_prices():
    a, b = billing(2.0, tp=4, floor=1, name="a"), billing(3.0, name="b")
    usd, detail = month([a, b], hourly([1.0] * 12 + [0.5] * 12))
    ua, _ = month([a], hourly([1.0] * 12 + [0.5] * 12))
    ub, _ = month([b], hourly([1.0] * 12 + [0.5] * 12))
    assert usd == pytest.approx(ua + ub)
    assert detail["gpus"][0] == 2 * 4 + 3 and detail["gpus"][23] == 1 * 4 + 2


@settings(max_examples=60, deadline=None, derandomize=True)
@given(base=st.lists(st.floats(0.0, 1.0), min_size=24, max_size=24),
       bump=st.lists(st.floats(0.0, 1.0), min_size=24, max_size=24),
       mean=st.floats(0.5, 20.0), floor=st.sampled_from([None, 1, 3]))
def test_monthly_cost_is_monotone_in_the_daily_profile(base, bump, mean, floor):
    """Raising any hour's load (the window, hour 0 at the peak, kept as it
    is) never lowers the month, with or without autoscaling floors."""
    lo = [1.0] + base[1:]
    hi = [1.0] + [min(1.0, x + y) for x, y in zip(base[1:], bump[1:])]
    pool = billing(mean, floor=floor)
    assert month([pool], hourly(hi), HOUR)[0] >= month([pool], hourly(lo), HOUR)[0] - 1e-9


# -- the rule as cost_block and simulate use it -------------------------------------

def test_auto_keeps_the_old_extrapolation_and_names_it():
    p = billing(2.0, window_s=HOUR)
    c = cost_block([p], [], HOUR)
    assert (c["monthly_method"], c["monthly_usd"]) == ("window", pytest.approx(2 * PRICE * 730))
    p = billing(2.0, window_s=2 * 86400)
    c = cost_block([p], [], 2 * 86400, monthly=MonthRule(MonthlySpec(method="auto")))
    assert (c["monthly_method"], c["monthly_usd"]) == ("day", pytest.approx(2 * PRICE * 730))
    assert "monthly_hourly" not in c


def _raw(**cost) -> dict:
    return {
        "name": "monthly", "seed": 2,
        "workload": {"duration_s": 120, "arrival": {"type": "poisson", "rate_per_s": 4,
                                                    "profile": {"type": "sinusoid", "peak_to_trough": 10,
                                                                "peak_at_s": 60}},
                     "input_tokens": {"dist": "fixed", "value": 64}, "output_tokens": {"dist": "fixed", "value": 8}},
        "pools": [{"model": "llama-3-8b", "gpu": "h100-sxm", "replicas": 2, "usd_per_gpu_hour": PRICE}],
        "cost": cost,
    }


def _scenario(**cost) -> Scenario:
    return Scenario.model_validate(_raw(**cost))


def test_simulate_reports_the_peak_window_month_and_the_summary_names_it():
    window = simulate(_scenario()).results["llmsim"]["cost"]
    peak = simulate(_scenario(monthly={"method": "peak_window"})).results["llmsim"]["cost"]
    assert window["window_usd"] == peak["window_usd"]
    h = peak["monthly_hourly"]
    assert peak["monthly_method"] == "peak_window" and "workload's sinusoid profile" in peak["monthly_basis"]
    assert len(h["gpus"]) == 24 and max(h["gpus"]) == 2 and min(h["gpus"]) == 1      # ceil(2 × ~0.1) = 1
    assert peak["monthly_usd"] == pytest.approx(sum(h["gpus"]) * PRICE * 730 / 24)
    assert peak["monthly_usd"] < window["monthly_usd"]
    console = Console(record=True, width=200, color_system=None)
    console.print(summary_table({"llmsim": {"cost": peak}}))
    text = console.export_text()
    assert "Monthly cost ($)" in text and "peak_window" not in text and "scaled to each hour of the day" in text
    # the same day written out by hand gives the same month
    by_hand = simulate(_scenario(monthly={"method": "peak_window", "daily_profile": {
        "type": "sinusoid", "peak_to_trough": 10, "peak_at_s": 60}})).results["llmsim"]["cost"]
    assert by_hand["monthly_usd"] == peak["monthly_usd"]


def test_each_pool_states_its_own_month_and_the_cost_plot_draws_it():
    """Under peak_window pools scale apart: one pinned at a floor all day against one following the load.
    The cost plot split the month by the window's shares (the chatbot's paid pool, at its floor all day,
    drew $15,265 of a slice's $21,255 where its hours give $17,222)."""
    from simulator.report.plots import cost_figure

    raw = _raw(monthly={"method": "peak_window"})
    raw["pools"] = [{**raw["pools"][0], "name": "busy", "replicas": 3},
                    {**raw["pools"][0], "name": "floor", "replicas": 1}]
    raw["classes"] = [{"name": "a", "share": 0.8, "pool": "busy"}, {"name": "b", "share": 0.2, "pool": "floor"}]
    res = simulate(Scenario.model_validate(raw)).results
    c = res["llmsim"]["cost"]
    by = {p["name"]: p for p in c["pools"]}
    assert sum(p["monthly_usd"] for p in by.values()) == pytest.approx(c["monthly_usd"])
    shares = {n: p["usd"] / c["window_usd"] for n, p in by.items()}
    assert by["floor"]["monthly_usd"] / c["monthly_usd"] > shares["floor"] + 0.05
    ax = cost_figure(res).axes[0]
    drawn = {t.get_text(): b.get_width() for t, b in zip(ax.get_yticklabels(), ax.patches)}
    assert drawn == {n: pytest.approx(p["monthly_usd"]) for n, p in by.items()}


# -- bad input ----------------------------------------------------------------------

@pytest.mark.parametrize("monthly, key, words", [
    ({"method": "day"}, "cost.monthly.method", "whole days"),
    ({"method": "window", "daily_profile": {"type": "sinusoid", "peak_to_trough": 2}}, "cost.monthly", "peak_window only"),
    ({"method": "peak_window", "daily_profile": {"type": "sinusoid", "peak_to_trough": 2, "period_s": 3600}},
     "cost.monthly", "period_s 86400"),
    ({"method": "peak_window", "daily_profile": {"type": "hourly", "values": [1] * 23}},
     "cost.monthly.daily_profile", "24"),
    ({"method": "sometimes"}, "cost.monthly.method", "peak_window"),
])
def test_bad_monthly_settings(tmp_path, capsys, monthly, key, words):
    err = cli_error(tmp_path, _raw(monthly=monthly), capsys)
    assert key in err and words in err


def test_peak_window_needs_a_profile(tmp_path, capsys):
    d = _raw(monthly={"method": "peak_window"})
    del d["workload"]["arrival"]["profile"]
    err = cli_error(tmp_path, d, capsys)
    assert "cost.monthly.daily_profile" in err and "daily_profile" in err and "workload.arrival.profile" in err


def test_peak_window_refuses_a_day_or_more(tmp_path, capsys):
    """Scaling a whole day by the day's own shape would double-count the floors."""
    d = _raw(monthly={"method": "peak_window"})
    d["workload"]["duration_s"] = 86400
    err = cli_error(tmp_path, d, capsys)
    assert "cost.monthly.method" in err and "use method day" in err
