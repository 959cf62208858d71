"""The gateway: per-class token and request rate limits (token buckets)
and usage metering (``llmsim.gateway``)."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import LlmsimError
from simulator.fleet.ratelimit import RateLimiter, RateLimitSpec
from simulator.runner import simulate
from simulator.scenario.schema import Scenario
from simulator.sharding.split import plan_shards
from workloads.request import Status


@settings(max_examples=200, deadline=None)
@given(tpm=st.floats(100, 1e6), rpm=st.none() | st.floats(1, 600), burst=st.floats(0.1, 120),
       reqs=st.lists(st.tuples(st.floats(0, 5), st.integers(1, 20000)), min_size=1, max_size=80))
def test_buckets_never_pass_more_than_their_rate_over_any_window(tpm, rpm, burst, reqs):
    """Whatever arrives, what passes in any window [t_i, t_j] is at most a
    bucket's depth plus its rate times the window, for tokens and requests;
    and a request is refused only when a bucket lacked its cost."""
    spec = RateLimitSpec(tokens_per_min=tpm, requests_per_min=rpm, burst_s=burst)
    lim = RateLimiter(spec)
    t, passed = 0.0, []
    for gap, cost in reqs:
        t += gap
        if lim.admit(t, cost):
            passed.append((t, cost))
    assert lim.limited == len(reqs) - len(passed)
    for i in range(len(passed)):
        tokens = n = 0
        for j in range(i, len(passed)):
            tokens += passed[j][1]
            n += 1
            w = passed[j][0] - passed[i][0]
            assert tokens <= tpm / 60 * (burst + w) * (1 + 1e-9)
            if rpm is not None:
                assert n <= rpm / 60 * (burst + w) * (1 + 1e-9) + 1e-9


def test_a_full_bucket_passes_its_burst_then_refuses():
    lim = RateLimiter(RateLimitSpec(tokens_per_min=6000, burst_s=10))   # 100 tokens/s, 1,000 deep
    assert [lim.admit(0.0, 400) for _ in range(3)] == [True, True, False]
    assert lim.admit(2.0, 400)          # 200 left + 2 s x 100
    assert not lim.admit(2.0, 1001)     # deeper than the bucket: never
    with pytest.raises(ValueError, match="needs tokens_per_min"):
        RateLimitSpec(burst_s=5)


def scenario(limit: dict | None) -> Scenario:
    return Scenario.model_validate({
        "name": "gw", "seed": 3,
        "workload": {"duration_s": 60, "arrival": {"type": "poisson", "rate_per_s": 6},
                     "input_tokens": {"dist": "uniform", "min": 200, "max": 2000},
                     "output_tokens": {"dist": "uniform", "min": 20, "max": 200}},
        "classes": [{"name": "app", "share": 2}, {"name": "batch", "share": 1, "rate_limit": limit}],
        "pools": [{"name": "p", "model": "llama-3-8b", "gpu": "h100-sxm", "replicas": 1}],
    })


def test_rate_limited_requests_are_counted_and_never_reach_a_gpu():
    limited = simulate(scenario({"tokens_per_min": 60000, "burst_s": 5}))
    free = simulate(scenario(None))
    gw = limited.results["llmsim"]["gateway"]["classes"]
    n429 = gw["batch"]["rate_limited"]
    assert n429 > 0 and gw["app"]["rate_limited"] == 0
    assert limited.results["llmsim"]["request_status"]["rate_limited"] == n429
    assert "rate_limited" not in free.results["llmsim"]["request_status"]
    assert "gateway" not in free.results["llmsim"]
    assert limited.results["llmsim"]["classes"]["batch"]["rate_limited"] == n429
    out = [r for r in limited.requests if r.status == Status.RATE_LIMITED]
    assert len(out) == n429
    assert all(r.klass == "batch" and r.replica == -1 and math.isnan(r.admitted) for r in out)
    # the same arrivals; the GPU ran only what passed
    assert len(limited.requests) == len(free.requests)
    assert limited.results["llmsim"]["gpu_busy_fraction"] < \
        free.results["llmsim"]["gpu_busy_fraction"]
    # what passed stays within the bucket over the run: 60,000 tokens/min, 5,000 deep
    passed = sum(r.input_tokens + r.output_tokens for r in limited.requests
                 if r.klass == "batch" and r.status != Status.RATE_LIMITED)
    assert passed <= 5000 + 1000 * 60
    # metering: the hours add up, and the classes' dollars are the pool's bill for completed work
    for c in gw.values():
        assert sum(h["requests"] for h in c["hours"]) == c["requests"]
    assert sum(c["usd"] for c in gw.values()) == pytest.approx(limited.results["llmsim"]["pools"]["p"]["usd"])


def test_a_fleet_whose_every_request_is_refused_is_still_billed_for_the_window():
    sc = scenario({"tokens_per_min": 10})
    sc = sc.model_copy(update={"classes": [c for c in sc.classes if c.rate_limit is not None]})
    out = simulate(sc)
    arrivals = max(r.arrival for r in out.requests)
    assert all(r.status == Status.RATE_LIMITED for r in out.requests)
    cost, load = out.results["llmsim"]["cost"], out.results["llmsim"]["load"]
    assert arrivals < sc.workload.duration_s       # the fleet stands, and is billed, for the window the scenario states
    assert cost["window_s"] == pytest.approx(sc.workload.duration_s) and cost["monthly_usd"] > 0   # not $0: it was up
    assert "every request ended unserved" in load["verdict"] and "longer" not in load["verdict"]


def test_the_class_tables_count_429s():
    """The class tables in the terminal and on the page showed a rate-limited class as done, shed 0,
    cancelled 0 and its SLO met, with 44 of its 101 requests answered 429."""
    from rich.console import Console

    from simulator.report.fleet_summary import classes_table
    from simulator.report.page_parts import classes_table as page_classes_table

    llmsim = simulate(scenario({"tokens_per_min": 60000, "burst_s": 5})).results["llmsim"]
    n429 = llmsim["classes"]["batch"]["rate_limited"]
    console = Console(width=200, record=True)
    console.print(classes_table(llmsim))
    text = console.export_text()
    row = next(line for line in text.splitlines() if "batch" in line)
    assert "429" in text and f" {n429} " in row
    assert "rate-limited (429)" in page_classes_table(llmsim)
    unlimited = simulate(scenario(None)).results["llmsim"]
    assert "429" not in page_classes_table(unlimited)


def test_429s_are_failed_requests_and_the_serving_tables_show_them():
    """vLLM's bench counts a 429 as a failed request: completed + failed + cancelled = requests held with 130
    of 4,708 requests answered 429 nowhere (completed 4,578, failed 0), and neither table showed them."""
    from rich.console import Console

    from simulator.report.page_parts import latency_table
    from simulator.report.summary import summary_table

    res = simulate(scenario({"tokens_per_min": 60000, "burst_s": 5})).results
    n429 = res["llmsim"]["request_status"]["rate_limited"]
    assert n429 > 0
    assert res["completed"] + res["failed"] + res["cancelled"] == sum(res["llmsim"]["request_status"].values())
    assert res["failed"] >= n429
    console = Console(width=200, record=True)
    console.print(summary_table(res))
    row = next(line for line in console.export_text().splitlines() if "rate-limited (429 at the gateway)" in line)
    assert row.split()[-2] == f"{n429:,}"
    assert f"<th>failed: rate-limited (429 at the gateway)</th><td>{n429:,}</td>" in latency_table(res)


def test_a_rate_limited_class_is_not_sharded():
    with pytest.raises(LlmsimError, match="rate limit"):
        plan_shards(scenario({"requests_per_min": 10}), 2)


def test_a_disaggregated_fleets_decode_bill_is_metered_to_its_tenants():
    """Requests arrive at the prefill pool and decode at its decode pool: the tenants' dollars are
    both pools' bills (the decode pool was 64 % of this one and went to no tenant)."""
    sc = Scenario.model_validate({
        "name": "disagg", "seed": 1,
        "workload": {"duration_s": 10, "arrival": {"type": "poisson", "rate_per_s": 8},
                     "input_tokens": {"dist": "fixed", "value": 2000}, "output_tokens": {"dist": "fixed", "value": 100}},
        "pools": [{"name": "pre", "model": "llama-3.1-8b", "gpu": "h100-sxm", "replicas": 1,
                   "disaggregation": {"decode_pool": "dec"}},
                  {"name": "dec", "model": "llama-3.1-8b", "gpu": "h200", "replicas": 2}],
        "classes": [{"name": "a", "share": 0.5, "pool": "pre", "rate_limit": {"tokens_per_min": 1e8}},
                    {"name": "b", "share": 0.5, "pool": "pre"}]})
    res = simulate(sc).results["llmsim"]
    gw = res["gateway"]["classes"]
    bills = {name: p["usd"] for name, p in res["pools"].items()}
    assert bills["dec"] > 0.3 * sum(bills.values())
    assert sum(c["usd"] for c in gw.values()) == pytest.approx(sum(bills.values()))


def test_every_tenant_has_its_bill_rate_limit_or_not():
    """llmsim.classes.<class>.usd: each class's share of the pools' bills by the tokens it completed, the
    gateway's rule, written whether or not any class has a rate limit (a tenant's cost was in
    llmsim.gateway alone, which only a rate limit writes); the classes' add up to both pools' bills."""
    d = {"name": "tenants", "seed": 1,
         "workload": {"duration_s": 4, "arrival": {"type": "poisson", "rate_per_s": 8},
                      "input_tokens": {"dist": "fixed", "value": 2000},
                      "output_tokens": {"dist": "fixed", "value": 100}},
         "pools": [{"name": "pre", "model": "llama-3.1-8b", "gpu": "h100-sxm", "replicas": 1,
                    "disaggregation": {"decode_pool": "dec"}},
                   {"name": "dec", "model": "llama-3.1-8b", "gpu": "h200", "replicas": 2}],
         "classes": [{"name": "a", "share": 0.25, "pool": "pre"}, {"name": "b", "share": 0.75, "pool": "pre"}]}
    res = simulate(Scenario.model_validate(d)).results["llmsim"]
    assert "gateway" not in res
    classes, bills = res["classes"], sum(p["usd"] for p in res["pools"].values())
    assert sum(c["usd"] for c in classes.values()) == pytest.approx(bills)
    share = classes["a"]["completed"] / (classes["a"]["completed"] + classes["b"]["completed"])
    assert classes["a"]["usd"] == pytest.approx(share * bills)      # one length: by completed requests
    d["classes"][0]["rate_limit"] = {"tokens_per_min": 1e8}
    res = simulate(Scenario.model_validate(d)).results["llmsim"]
    assert {k: c["usd"] for k, c in res["classes"].items()} == \
        {k: c["usd"] for k, c in res["gateway"]["classes"].items()}


def test_a_prefill_pools_bill_is_shared_by_the_prompts_it_computed():
    """A disaggregated prefill pool computes prompts alone: shared by input and output tokens alike, a
    tenant of 100-token prompts and 4,000-token answers paid 45 % of its bill for 2 % of its prompts."""
    import numpy as np

    from simulator.metrics.metering import request_usd
    from simulator.metrics.records import Records
    from workloads.request import Status

    r = Records({"klass": np.array(["rag", "chat"]), "pool": np.array(["pre", "pre"]),
                 "status": np.array([int(Status.FINISHED)] * 2), "input_tokens": np.array([4900, 100]),
                 "output_tokens": np.array([100, 4000])})
    usd = request_usd(r, {"pre": 100.0, "dec": 50.0}, {"pre": "dec"})
    assert usd[0] == pytest.approx(100.0 * 4900 / 5000 + 50.0 * 5000 / 9100)
    assert usd[1] == pytest.approx(100.0 * 100 / 5000 + 50.0 * 4100 / 9100)
    colocated = request_usd(r, {"pre": 100.0}, {})           # a colocated pool: both kinds alike
    assert colocated == pytest.approx([100.0 * 5000 / 9100, 100.0 * 4100 / 9100])
