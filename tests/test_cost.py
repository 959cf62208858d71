"""The ``llmsim.cost`` block: billing, prices, monthly extrapolation, per-token
split, sessions per GPU, and the block as ``simulate`` writes it."""
from __future__ import annotations

import math

import pytest
from rich.console import Console

from simulator.metrics.cost import (DEFAULT_OUTPUT_WEIGHT, cost_block, monthly_cost, pool_billing, pool_price,
                                    replica_seconds, session_load)
from simulator.metrics.load import window_text
from simulator.report.summary import summary_table
from simulator.errors import LlmsimError
from simulator.profiles import load_hardware
from simulator.runner import simulate
from simulator.scenario.schema import PoolSpec, Scenario
from workloads.request import Request, Status

H100 = load_hardware("h100-sxm")


def pool(**kw) -> PoolSpec:
    return PoolSpec(model="llama-3-8b", gpu="h100-sxm", **kw)


def req(id, arrival, finish, inp=100, out=10, session=-1, status=Status.FINISHED) -> Request:
    r = Request(id, arrival, inp, out, session=session)
    r.finish, r.status = finish, status
    return r


def render(table) -> str:
    console = Console(record=True, width=160, color_system=None)
    console.print(table)
    return console.export_text()


# -- billing and prices -------------------------------------------------------

def test_two_replicas_of_tp4_at_3_dollars_for_an_hour_cost_24():
    b = pool_billing(pool(tp=4, replicas=2, usd_per_gpu_hour=3.0), H100, [(0.0, 2)], 3600.0)
    assert b.gpus == 8 and b.replica_seconds == 7200.0
    d = b.as_dict()
    assert d["gpu_hours"] == pytest.approx(8.0) and d["usd"] == pytest.approx(24.0)
    c = cost_block([b], [], 3600.0)
    assert c["window_usd"] == pytest.approx(24.0) and c["gpu_hours"] == pytest.approx(8.0)
    assert c["usd_per_hour"] == pytest.approx(24.0)
    assert c["monthly_usd"] == pytest.approx(24.0 * 730)
    # nothing served: every per-unit figure is null, not 0 or inf
    for k in ("usd_per_million_input_tokens", "usd_per_million_output_tokens", "usd_per_million_tokens",
              "usd_per_request", "usd_per_session", "sessions"):
        assert c[k] is None, k
    assert c["requests_per_gpu_second"] == 0.0


def test_replica_timeline_is_integrated_over_the_window():
    assert replica_seconds([(0.0, 3)], 100.0) == 300.0
    assert replica_seconds([(0.0, 2), (50.0, 4)], 100.0) == 2 * 50 + 4 * 50
    assert replica_seconds([(0.0, 2), (50.0, 4), (200.0, 9)], 100.0) == 300.0   # steps after the end: unbilled
    assert replica_seconds([(10.0, 1)], 100.0) == 90.0                           # none before the first step
    assert replica_seconds([(0.0, 2)], 0.0) == 0.0
    with pytest.raises(ValueError, match="time order"):
        replica_seconds([(50.0, 2), (0.0, 1)], 100.0)
    # an autoscaled pool is billed for its timeline, not replicas × span
    b = pool_billing(pool(replicas=4, usd_per_gpu_hour=2.0), H100, [(0.0, 1), (1800.0, 4)], 3600.0)
    assert b.usd == pytest.approx(2.0 * (0.5 + 4 * 0.5))


def test_scenario_price_overrides_the_profile():
    usd, source, assumed, note = pool_price(pool(), H100)
    assert (usd, source, assumed) == (H100.price.usd_per_gpu_hour, "profile", False)
    assert note == H100.price.source and "assum" not in note.lower()
    usd, source, assumed, note = pool_price(pool(usd_per_gpu_hour=1.25), H100)
    assert (usd, source, assumed) == (1.25, "scenario", False)
    assert f"{H100.price.usd_per_gpu_hour:g}" in note
    # b200's profile price is an assumption; the override is not
    b200 = load_hardware("b200")
    assert b200.price.source.lower().startswith("assumption")
    assert pool_price(pool(), b200)[1:3] == ("profile", True)
    assert pool_price(pool(usd_per_gpu_hour=5.0), b200)[1:3] == ("scenario", False)
    assumed = cost_block([pool_billing(pool(), b200, [(0.0, 1)], 60.0)], [], 60.0)
    assert assumed["price_assumed"] and assumed["pools"][0]["price_assumed"]


def test_pools_add_up():
    a = pool_billing(pool(name="a", replicas=2, usd_per_gpu_hour=3.0), H100, [(0.0, 2)], 3600.0)
    b = pool_billing(pool(name="b", tp=2, usd_per_gpu_hour=5.0), load_hardware("b200"), [(0.0, 1)], 3600.0)
    c = cost_block([a, b], [], 3600.0)
    assert [p["name"] for p in c["pools"]] == ["a", "b"]
    assert c["window_usd"] == pytest.approx(6.0 + 10.0) and c["gpu_hours"] == pytest.approx(4.0)
    assert not c["price_assumed"]


# -- monthly extrapolation ------------------------------------------------------

def test_monthly_basis_short_window_is_hours_long_window_is_days():
    usd, basis = monthly_cost(1.0, 300.0)
    assert usd == pytest.approx(1.0 * 12 * 730)
    assert basis == "simulated 300 s window extrapolated to 730 h/month at the same load"
    usd, basis = monthly_cost(50.0, 86_400.0)              # exactly a day: the day basis
    # a month is 730 h whichever the basis: the day × 30.42 (with 30, a fixed fleet read 1.4 % dearer by window)
    assert usd == pytest.approx(50.0 * 730 / 24) and "× 30.42 days/month (730 h)" in basis and "1-day" in basis
    usd, basis = monthly_cost(100.0, 2 * 86_400.0)         # two days: their mean day × 30.42
    assert usd == pytest.approx(50.0 * 730 / 24) and "2-day" in basis
    usd, basis = monthly_cost(0.0, 0.0)
    assert usd is None and basis
    c = cost_block([pool_billing(pool(usd_per_gpu_hour=2.0), H100, [(0.0, 1)], 86_400.0)], [], 86_400.0)
    assert c["monthly_usd"] == pytest.approx(2.0 * 730) and "days/month" in c["monthly_basis"]


# -- per-token split --------------------------------------------------------------

@pytest.mark.parametrize("weight", [DEFAULT_OUTPUT_WEIGHT, 1.0, 5.0])
def test_per_token_costs_add_up_to_the_total(weight):
    reqs = [req(0, 0.0, 1.0, inp=1000, out=200), req(1, 0.5, 2.0, inp=3000, out=50),
            req(2, 1.0, 1.0, inp=999_999, out=999_999, status=Status.REJECTED)]   # not served: no tokens
    b = pool_billing(pool(tp=4, replicas=2, usd_per_gpu_hour=3.0), H100, [(0.0, 2)], 3600.0)
    c = cost_block([b], reqs, 3600.0, output_weight=weight)
    tin, tout = 4000, 250
    assert (c["usd_per_million_input_tokens"] * tin + c["usd_per_million_output_tokens"] * tout) / 1e6 \
        == pytest.approx(24.0)
    assert c["usd_per_million_output_tokens"] == pytest.approx(weight * c["usd_per_million_input_tokens"])
    assert c["usd_per_million_input_tokens"] == pytest.approx(24.0 / (tin + weight * tout) * 1e6)
    assert c["usd_per_million_tokens"] == pytest.approx(24.0 / (tin + tout) * 1e6)
    assert c["usd_per_request"] == pytest.approx(12.0)
    assert c["requests_per_gpu_second"] == pytest.approx(2 / (8 * 3600.0))
    assert c["output_weight"] == weight and f"{weight:g}×" in c["token_split"]
    with pytest.raises(ValueError):
        cost_block([b], reqs, 3600.0, output_weight=0.0)


def test_per_unit_prices_bill_the_arrival_span_as_the_month_does():
    """60 s of arrivals drained by 120 s: the month bills the window's $/h and counts the usage over the 60 s
    it arrived in, so a price × the month's usage is the monthly bill (the whole window's bill over the
    window's usage read each price ×2)."""
    reqs = [req(0, 0.0, 110.0, inp=1000, out=200), req(1, 60.0, 120.0, inp=3000, out=50)]
    b = pool_billing(pool(tp=4, replicas=2, usd_per_gpu_hour=3.0), H100, [(0.0, 2)], 120.0)   # $0.80
    c = cost_block([b], reqs, 120.0, arrivals_s=60.0)
    month_usage = 730 * 3600 / 60.0                  # the month's usage over the window's
    assert c["monthly_usd"] == pytest.approx(24.0 * 730)
    assert c["usd_per_million_tokens"] * 4250 * month_usage / 1e6 == pytest.approx(c["monthly_usd"])
    assert c["usd_per_request"] * 2 * month_usage == pytest.approx(c["monthly_usd"])
    assert c["usd_per_request"] == pytest.approx(0.40 / 2)
    assert c["requests_per_gpu_second"] == pytest.approx(2 / (8 * 60.0))
    assert cost_block([b], reqs, 120.0)["usd_per_request"] == pytest.approx(0.80 / 2)   # no arrival span given


def test_a_light_load_is_priced_over_its_whole_duration_not_the_runs_end():
    """Two requests offered over a 500 s duration, the last ended at 470 s: the month's usage is read over the
    500 s they were offered in (the run's end cut it to 470 s, each price 6 % low); a trace's duration_s
    only cuts the replay, so its traffic arrived by its last arrival."""
    from types import SimpleNamespace

    from simulator.metrics.monthly import MonthRule

    reqs = [req(0, 0.0, 10.0), req(1, 460.0, 470.0)]
    b = pool_billing(pool(replicas=1, usd_per_gpu_hour=3.6), H100, [(0.0, 1)], 470.0)
    poisson = MonthRule(workload=SimpleNamespace(duration_s=500.0, is_trace=False))
    c = cost_block([b], reqs, 470.0, monthly=poisson, arrivals_s=460.0)
    assert c["usd_per_request"] == pytest.approx(3.6 / 3600 * 500 / 2)
    trace = MonthRule(workload=SimpleNamespace(duration_s=7200.0, is_trace=True))
    c = cost_block([b], reqs, 470.0, monthly=trace, arrivals_s=460.0)
    assert c["usd_per_request"] == pytest.approx(3.6 / 3600 * 460 / 2)


# -- sessions ------------------------------------------------------------------------

def hand_sessions() -> list[Request]:
    """Window [0, 10). Active intervals: s0 [0, 5) over two turns, s1 [4, 8),
    s5 [4.5, 4.8), s2 [5, 6) (starts as s0 ends: no overlap), s3 a turn
    rejected on arrival at 9 (zero length), s4 still in flight at 9.5 (active
    to the end). Three sessions at once in [4.5, 4.8); 10.8 session-seconds."""
    return [
        req(0, 0.0, 2.0, session=0), req(1, 3.0, 5.0, session=0),
        req(2, 4.0, 8.0, session=1),
        req(3, 4.5, 4.8, session=5),
        req(4, 5.0, 6.0, session=2),
        req(5, 9.0, 9.0, session=3, status=Status.REJECTED),
        req(6, 9.5, math.nan, session=4, status=Status.PENDING),
        req(7, 1.0, 9.9),                                   # no session: not counted
    ]


def test_session_load_of_hand_made_overlaps():
    sl = session_load(hand_sessions(), 10.0)
    assert (sl.sessions, sl.served, sl.peak_active) == (6, 4, 3)
    assert sl.session_seconds == pytest.approx(5 + 4 + 0.3 + 1 + 0 + 0.5)


def test_sessions_per_gpu_in_the_block():
    b = pool_billing(pool(tp=2, usd_per_gpu_hour=3.6), H100, [(0.0, 1)], 10.0)   # 2 GPUs, $0.02 for 10 s
    c = cost_block([b], hand_sessions(), 10.0)
    s = c["sessions"]
    assert (s["count"], s["served"], s["peak_active"]) == (6, 4, 3)
    assert s["mean_active"] == pytest.approx(1.08)
    assert s["mean_per_gpu"] == pytest.approx(10.8 / 20.0)
    assert s["peak_per_gpu"] == pytest.approx(1.5)
    assert c["window_usd"] == pytest.approx(0.02)
    assert c["usd_per_session"] == pytest.approx(0.02 / 4)          # sessions with a finished request
    assert c["usd_per_request"] == pytest.approx(0.02 / 6)          # finished requests, with or without session
    # read over the arrival span [0, 5): s0 [0, 5), s1 [4, 5), s5 [4.5, 4.8): 6.3 session-seconds
    c = cost_block([b], hand_sessions(), 10.0, arrivals_s=5.0)
    assert c["sessions"]["mean_active"] == pytest.approx(6.3 / 5)
    assert c["sessions"]["mean_per_gpu"] == pytest.approx(6.3 / 10.0)
    assert c["usd_per_session"] == pytest.approx(0.01 / 4)


# -- end to end --------------------------------------------------------------------------

def _scenario(**pool_kw) -> Scenario:
    return Scenario.model_validate({
        "name": "cost-e2e", "seed": 3,
        "workload": {"num_sessions": 12, "arrival": {"type": "poisson", "rate_per_s": 4.0},
                     "input_tokens": {"dist": "fixed", "value": 64},
                     "output_tokens": {"dist": "fixed", "value": 16},
                     "session": {"type": "chat", "turns": {"dist": "uniform", "min": 1, "max": 3},
                                 "think_time_s": {"dist": "fixed", "value": 0.5}}},
        "pools": [{"model": "llama-3-8b", "gpu": "h100-sxm", **pool_kw}],
    })


def test_simulate_writes_a_consistent_cost_block():
    out = simulate(_scenario(tp=2, replicas=2))
    res = out.results
    ll, c = res["llmsim"], res["llmsim"]["cost"]
    span = ll["simulated_seconds"]
    assert c["window_s"] == span > 0
    (p,) = c["pools"]
    assert (p["name"], p["gpu"], p["gpus_per_replica"], p["replicas"], p["gpus"]) == ("main", "h100-sxm", 2, 2, 4)
    assert p["gpus"] == ll["gpus"]
    assert (p["price_source"], p["usd_per_gpu_hour"]) == ("profile", H100.price.usd_per_gpu_hour)
    assert p["replica_seconds"] == pytest.approx(2 * span)
    assert c["window_usd"] == pytest.approx(4 * span / 3600 * H100.price.usd_per_gpu_hour) == pytest.approx(p["usd"])
    assert c["monthly_usd"] == pytest.approx(4 * 730 * H100.price.usd_per_gpu_hour)
    assert f"simulated {window_text(span)} window" in c["monthly_basis"]
    # Per-unit prices bill the arrival span (the last session's start: no duration_s), not the drain after it.
    starts: dict[int, float] = {}
    for r in out.requests:
        starts[r.session] = min(starts.get(r.session, r.arrival), r.arrival)
    arrivals = max(starts.values())
    assert arrivals < span
    billed = c["window_usd"] * arrivals / span
    tin, tout = res["total_input_tokens"], res["total_output_tokens"]
    assert (c["usd_per_million_input_tokens"] * tin + c["usd_per_million_output_tokens"] * tout) / 1e6 \
        == pytest.approx(billed)
    assert c["usd_per_request"] == pytest.approx(billed / res["completed"])
    assert c["requests_per_gpu_second"] == pytest.approx(res["completed"] / (4 * arrivals))
    s = c["sessions"]
    assert s["count"] == 12 and 1 <= s["peak_active"] <= 12
    assert s["mean_per_gpu"] == pytest.approx(s["mean_active"] / 4)
    assert c["usd_per_session"] == pytest.approx(billed / s["served"])
    text = render(summary_table(res))
    for needle in ("Monthly cost ($)", "Cost per 1M output tokens", "Sessions per GPU", "730 h/month",
                   "pool main: llama-3-8b, bf16 weights, bf16 KV; peak 4 × h100-sxm, mean 4.00",
                   "at $2.99/GPU-h from the profile"):
        assert needle in text, needle


def test_simulate_with_a_scenario_price_and_no_sessions():
    sc = Scenario.model_validate({
        "name": "cost-plain", "workload": {"num_requests": 30, "arrival": {"type": "poisson", "rate_per_s": 10.0},
                                           "input_tokens": {"dist": "fixed", "value": 32},
                                           "output_tokens": {"dist": "fixed", "value": 8}},
        "pools": [{"model": "llama-3-8b", "gpu": "b200", "usd_per_gpu_hour": 4.5}],
    })
    c = simulate(sc).results["llmsim"]["cost"]
    assert c["pools"][0]["price_source"] == "scenario" and not c["price_assumed"]
    assert c["window_usd"] == pytest.approx(c["window_s"] / 3600 * 4.5)
    assert c["sessions"] is None and c["usd_per_session"] is None
    text = render(summary_table({"llmsim": {"cost": c}}))
    assert "Sessions per GPU" not in text and "from the scenario" in text and "assumption" not in text
    # the b200 profile's own price is an assumption, and the summary says so
    c = simulate(sc.model_copy(update={"pools": [sc.pools[0].model_copy(update={"usd_per_gpu_hour": None})]}))
    assert c.results["llmsim"]["cost"]["price_assumed"]
    assert "an assumption" in render(summary_table(c.results))


def _quiet_tail(rate: float, duration_s: float = 3600, **pool_kw) -> Scenario:
    """An hour whose traffic stops after 360 s (hour 0 of the profile holds 0.1 h of it, the rest are 0)."""
    return Scenario.model_validate({
        "name": "quiet-tail", "seed": 1,
        "workload": {"duration_s": duration_s, "arrival": {"type": "poisson", "rate_per_s": rate,
                                                           "profile": {"type": "hourly", "values": [1] + [0] * 23,
                                                                       "start_hour": 0.9}},
                     "input_tokens": {"dist": "fixed", "value": 32}, "output_tokens": {"dist": "fixed", "value": 4}},
        "pools": [{"model": "llama-3-8b", "gpu": "h100-sxm", "usd_per_gpu_hour": 3.6, **pool_kw}]})


def test_the_bill_runs_to_the_end_of_the_stated_window_not_the_last_request():
    """The traffic of a 3,600 s window stops at 360 s: the fleet stands, and is paid, for the hour (it billed
    the 352 s to the last request's end); an autoscaled pool at the one replica its autoscaler keeps in the
    quiet, which it reaches by ticking on through it (its month read $7,326 for $3,088)."""
    out = simulate(_quiet_tail(0.2, replicas=3, autoscaling={"metric": "concurrency", "target": 4,
                                                               "min_replicas": 1, "max_replicas": 3}))
    ll, c = out.results["llmsim"], out.results["llmsim"]["cost"]
    assert max(r.finish for r in out.requests) < 360 < ll["simulated_seconds"] == c["window_s"] == 3600
    steps = c["gpu_timeline"]
    assert steps[-1][1] == 1 and steps[0] == [0, 3]
    billed = sum(n * (b - a) for (a, n), (b, _) in zip(steps, [*steps[1:], [3600.0, 0]]))
    assert c["pools"][0]["replica_seconds"] == pytest.approx(billed)
    assert c["monthly_usd"] == pytest.approx(billed / 3600 * 3.6 * 730)


def test_a_window_no_request_reached_is_billed_for_the_fleet_that_stood():
    """No arrival in 60 s read '$—/month' (a 0 s window): two replicas stood for the minute."""
    out = simulate(_quiet_tail(1e-4, duration_s=60, replicas=2))
    c = out.results["llmsim"]["cost"]
    assert len(out.requests) == 0 and c["window_s"] == 60
    assert c["window_usd"] == pytest.approx(2 * 3.6 / 60) and c["monthly_usd"] == pytest.approx(2 * 3.6 * 730)


_CLOSED_LOOP_AFTER_A_WARM_UP = {"duration_s": None, "num_requests": 24,
                                "arrival": {"type": "concurrency", "concurrency": 4, "warmup_requests": 16}}


@pytest.mark.parametrize("workload", [{}, _CLOSED_LOOP_AFTER_A_WARM_UP], ids=["quiet tail", "after a warm-up"])
def test_the_classes_throughputs_read_the_fleets_duration_and_add_up_to_its(workload):
    """Each class's request_throughput divides by results.json's duration, as the fleet's does (vllm bench's
    clock: to the last request's end, from the first counted request after a closed loop's warm-up), not by
    the run's window: on an hour whose traffic stops at 360 s a class read its requests over 3,600 s, after a
    warm-up over the warm-up too, and the classes' figures summed to less than the fleet's."""
    d = _quiet_tail(0.2).model_dump(exclude_none=True)
    d["classes"] = [{"name": "free", "share": 0.6}, {"name": "paid", "share": 0.4}]
    d["workload"] = {k: v for k, v in {**d["workload"], **workload}.items() if v is not None}
    r = simulate(Scenario.model_validate(d)).results
    classes = r["llmsim"]["classes"].values()
    assert all(c["completed"] for c in classes)
    assert r["duration"] < 0.8 * r["llmsim"]["simulated_seconds"]    # a quiet tail, or the warm-up's time
    for c in classes:
        assert c["request_throughput"] == pytest.approx(c["completed"] / r["duration"])
    assert sum(c["request_throughput"] for c in classes) == pytest.approx(r["request_throughput"])


def test_method_day_on_less_than_a_day_is_refused_even_without_a_duration():
    """A run sized by num_requests spans what it spans: 11 s read as a whole day would price 0.000127 days × 30.42.
    (A scenario with a duration_s under a day is refused before it runs: scenario/cost.py.)"""
    from simulator.metrics.monthly import MonthRule, MonthlySpec

    sized_by_count = Scenario.model_validate({
        "name": "d", "workload": {"num_requests": 5, "arrival": {"type": "poisson", "rate_per_s": 1},
                                  "input_tokens": {"dist": "fixed", "value": 8},
                                  "output_tokens": {"dist": "fixed", "value": 2}},
        "pools": [{"model": "llama-3-8b", "gpu": "h100-sxm"}]}).workload
    with pytest.raises(LlmsimError) as e:
        MonthRule(MonthlySpec(method="day"), sized_by_count).apply([], 1.0, 11.0)
    assert e.value.key_path == "cost.monthly.method" and "11 s" in e.value.message
    assert MonthRule(MonthlySpec(method="day"), sized_by_count).apply([], 30.0, 86_400.0)["monthly_usd"] \
        == pytest.approx(30.0 * 730 / 24)


def test_gpu_hours_print_without_an_exponent():
    """104 GPUs for a day: 2,496 GPU-h, which ',.3g' printed '2.5e+03' in the cost notes, cost.png and the
    page's hover."""
    from simulator.report.page_charts import cost_breakdown
    from simulator.report.plots import _gpu_hours
    from simulator.report.summary_format import gpu_hours

    assert [gpu_hours(x) for x in (2496.0, 74.93, 0.03614, 0.0, 999.6)] == ["2,496", "74.9", "0.0361", "0", "1,000"]
    b = pool_billing(pool(tp=8, replicas=13, usd_per_gpu_hour=2.0), H100, [(0.0, 13)], 86_400.0)
    c = cost_block([b], [], 86_400.0)
    assert "2,496 GPU-h at $2.00/GPU-h" in render(summary_table({"llmsim": {"cost": c}}))
    assert _gpu_hours(2496.0) == "2,496 GPU-h in the window"
    [(_, chart)] = cost_breakdown({"cost": c})
    assert chart["data"][0]["customdata"][0][2] == "2,496"
