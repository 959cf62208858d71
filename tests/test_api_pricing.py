"""API prices beside the self-hosted bill (``cost.api`` → ``llmsim.cost.api``)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.metrics.api_pricing import ApiPricingSpec, api_block
from simulator.metrics.monthly import MonthRule, MonthlySpec, usage_factor
from simulator.metrics.records import Records
from simulator.runner import simulate
from simulator.scenario.schema import Scenario
from workloads.request import Request, Status


def records(rows):
    reqs = []
    for i, (inp, out, hit, status) in enumerate(rows):
        r = Request(i, float(i), inp, out)
        r.cached_tokens, r.status = hit, status
        reqs.append(r)
    return Records.of(reqs)


@settings(max_examples=100, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(1, 10000), st.integers(1, 2000), st.integers(0, 10000),
                               st.sampled_from([Status.FINISHED, Status.FINISHED, Status.REJECTED])),
                     min_size=1, max_size=30),
       read=st.floats(0, 1), write=st.floats(1, 2))
def test_reads_and_writes_split_each_completed_prompt(rows, read, write):
    """Every completed prompt token is a read (its cached part) or a write;
    with reads cheaper than writes, caching pays exactly when reads are
    worth more than the writes' premium."""
    spec = ApiPricingSpec(input_usd_per_million=3, output_usd_per_million=15, cache_read=read, cache_write=write)
    b = api_block(spec, records(rows), 2.0, None, 1.0)
    done = [(i, o, min(h, i)) for i, o, h, s in rows if s == Status.FINISHED]
    assert b["input_tokens"] == sum(i for i, _, _ in done) == b["cache_read_tokens"] + b["cache_write_tokens"]
    assert b["cache_read_tokens"] == sum(h for _, _, h in done)
    saved = (b["cache_read_tokens"] * (1 - read) - b["cache_write_tokens"] * (write - 1)) * 3e-6
    assert b["window_usd_without_caching"] - b["window_usd_with_caching"] == pytest.approx(saved, abs=1e-9)
    assert b["monthly_usd_with_caching"] == pytest.approx(2 * b["window_usd_with_caching"])


def test_the_month_scales_usage_as_the_bill():
    assert usage_factor(MonthRule(MonthlySpec(method="window")), 1800.0) == pytest.approx(730 * 2)
    assert usage_factor(MonthRule(MonthlySpec(method="day")), 2 * 86400.0) == pytest.approx(730 / 48)


def test_a_run_prices_its_completed_requests():
    sc = Scenario.model_validate({
        "name": "api", "seed": 2,
        "workload": {"num_requests": 200, "arrival": {"type": "poisson", "rate_per_s": 10},
                     "system_prompt": {"apps": 1, "tokens": {"dist": "fixed", "value": 800}},
                     "input_tokens": {"dist": "uniform", "min": 10, "max": 200},
                     "output_tokens": {"dist": "uniform", "min": 10, "max": 100}},
        "pools": [{"name": "p", "model": "llama-3-8b", "gpu": "h100-sxm", "replicas": 1}],
        "cost": {"api": {"input_usd_per_million": 1.0, "output_usd_per_million": 4.0}},
    })
    res = simulate(sc).results
    a = res["llmsim"]["cost"]["api"]
    assert a["input_tokens"] == res["total_input_tokens"] and a["output_tokens"] == res["total_output_tokens"]
    assert a["cache_read_tokens"] > 0.7 * a["input_tokens"]        # the 800-token system prompt hits
    assert a["window_usd_with_caching"] < a["window_usd_without_caching"]
    assert a["monthly_usd_self_hosted"] == res["llmsim"]["cost"]["monthly_usd"]


def test_the_month_extrapolates_the_arrivals_not_the_drain():
    """A 20-second load the fleet drains by 24 s: its API month is the 20 seconds' tokens × 730 h / 20 s
    (it read 17 % less, scaled over the whole window)."""
    sc = Scenario.model_validate({
        "name": "api", "seed": 1,
        "workload": {"duration_s": 20, "arrival": {"type": "poisson", "rate_per_s": 20},
                     "input_tokens": {"dist": "fixed", "value": 2000}, "output_tokens": {"dist": "fixed", "value": 300}},
        "pools": [{"name": "p", "model": "llama-3.1-8b", "gpu": "h100-sxm", "replicas": 2}],
        "cost": {"api": {"input_usd_per_million": 0.1, "output_usd_per_million": 0.4}},
    })
    res = simulate(sc).results
    a = res["llmsim"]["cost"]["api"]
    assert res["duration"] > 21
    assert a["monthly_usd_without_caching"] == pytest.approx(a["window_usd_without_caching"] * 730 * 3600 / 20)
    assert usage_factor(MonthRule(MonthlySpec(method="window")), 30.0, 20.0) == pytest.approx(730 * 180)


def test_a_sessions_traffic_arrives_by_its_last_session_start():
    """Without duration_s the month counted from the last arrival: a chat session's later turns arrive
    minutes after the last session starts, so 552 sessions read their API month about 4× low."""
    from simulator.report.fleet_report import _arrival_span

    reqs = [Request(i, t, 100, 10, session=s) for i, (t, s) in
            enumerate([(0.0, 0), (30.0, 0), (60.0, 0), (5.0, 1), (400.0, 1), (10.0, 2), (12.0, -1)])]
    assert _arrival_span(Records.of(reqs)) == 12.0          # the last session starts at 10 s, a lone request at 12
    assert _arrival_span(Records.of(reqs[:6])) == 10.0
    assert _arrival_span(Records.of([])) is None
