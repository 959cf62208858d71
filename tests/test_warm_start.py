"""workload.lead_in_s: the window opens mid-stream, and the lead-in before it counts nowhere."""
from __future__ import annotations

import math

import numpy as np
import pytest
import yaml
from hypothesis import given, settings, strategies as st

from simulator.errors import LlmsimError
from simulator.profiles import load_hardware
from simulator.runner import simulate
from simulator.runsize import estimate_run_size
from simulator.scenario.schema import Scenario
from simulator.sharding.split import plan_shards
from tests.test_bad_input import one_line_error
from tests.test_results_reference import results_digest
from tests.test_sweep import TINY
from workloads.arrivals import PoissonArrival
from workloads.rate_profiles import HourlyProfile, SinusoidProfile
from workloads.spec import spawn_streams

CHAT = {
    "name": "chat",
    "seed": 5,
    "workload": {
        "duration_s": 600,
        "arrival": {"type": "poisson", "rate_per_s": 3.0},
        "system_prompt": {"apps": 2, "tokens": {"dist": "uniform", "min": 250, "max": 450}},
        "session": {"type": "chat", "turns": {"dist": "uniform", "min": 3, "max": 8},
                    "think_time_s": {"dist": "lognormal", "mean": 30, "std": 20}},
        "input_tokens": {"dist": "lognormal", "mean": 250, "std": 150, "min": 8, "max": 2000},
        "output_tokens": {"dist": "lognormal", "mean": 300, "std": 200, "min": 8, "max": 1200},
    },
    "classes": [{"name": "free", "share": 0.8}, {"name": "paid", "share": 0.2}],
    "pools": [{"name": "main", "model": "llama-3-8b", "gpu": "h100-sxm", "replicas": 3,
               "router": "session_affinity"}],
    "timeline_interval_s": 30,
}

AGENTIC = {**CHAT, "name": "agents", "workload": {
    "duration_s": 60, "arrival": {"type": "poisson", "rate_per_s": 0.5},
    "session": {"type": "agentic", "turns": {"dist": "uniform", "min": 2, "max": 5},
                "pause_s": {"dist": "exponential", "mean": 2}, "tool_result_tokens": {"dist": "fixed", "value": 200}},
    "input_tokens": {"dist": "fixed", "value": 500}, "output_tokens": {"dist": "fixed", "value": 100}}}


def scenario(body: dict, **workload) -> Scenario:
    return Scenario.model_validate({**body, "workload": {**body["workload"], **workload}})


def counted_rates(out) -> tuple[float, float]:
    """Counted requests per second over [0, 300) and [300, 600)."""
    a = np.array([r.arrival for r in out.requests])
    return float((a < 300).sum() / 300), float(((a >= 300) & (a < 600)).sum() / 300)


@pytest.fixture(scope="module")
def chat_runs():
    return {w: simulate(scenario(CHAT, **({} if w is None else {"lead_in_s": w}))) for w in (None, 600.0)}


# --- a warm start of 0 s is the cold start, figure for figure ----------------------------------------------
@pytest.mark.parametrize("body,workload", [
    (CHAT, {"duration_s": 60}), (AGENTIC, {}), (TINY, {}), (TINY, {"arrival": {"type": "gamma", "rate_per_s": 60,
                                                                                 "burstiness": 0.5}})])
@pytest.mark.parametrize("seed", [0, 11])
def test_a_warm_start_of_zero_is_todays_run(body, workload, seed):
    cold = simulate(scenario({**body, "seed": seed}, **workload))
    zero = simulate(scenario({**body, "seed": seed}, **workload, lead_in_s=0))
    assert results_digest(zero.results) == results_digest(cold.results)
    assert zero.timeline.equals(cold.timeline)
    assert [r.arrival for r in zero.requests] == [r.arrival for r in cold.requests]


# --- the window opens at the steady rate --------------------------------------------------------------------
def test_a_warm_start_opens_the_window_at_its_steady_rate(chat_runs):
    first, steady = counted_rates(chat_runs[None])
    assert first / steady < 0.75          # cold: sessions still piling up (about 2/3)
    first, steady = counted_rates(chat_runs[600.0])
    assert first / steady == pytest.approx(1.0, abs=0.06)


# --- what came before the window counts nowhere ------------------------------------------------------------
def test_lead_in_requests_are_served_but_counted_nowhere(chat_runs):
    out = chat_runs[600.0]
    r, llmsim = out.results, out.results["llmsim"]
    arrivals = np.array([q.arrival for q in out.requests])
    ids = np.array([q.id for q in out.requests])
    assert arrivals.min() >= 0.0
    assert ids[0] > 0 and (np.diff(ids) == 1).all()        # the lead-in's requests, ids 0.., are dropped whole
    lead_in = len(PoissonArrival(rate_per_s=3.0).lead_in_times(spawn_streams(5).lead_in, 600.0))
    assert min(q.session for q in out.requests) < lead_in   # ... but a lead-in session's later turns count
    assert r["completed"] + r["failed"] == len(out.requests)
    assert sum(c["requests"] for c in llmsim["classes"].values()) == len(out.requests)
    # the bill, the GPU figures and the timeline are the window's: 3 GPUs from t = 0 to the end
    end = llmsim["simulated_seconds"]
    assert llmsim["gpu_hours"] == pytest.approx(3 * end / 3600)
    price = load_hardware("h100-sxm").price.usd_per_gpu_hour
    assert llmsim["cost"]["window_usd"] == pytest.approx(3 * end / 3600 * price)
    assert out.timeline["time_s"].min() == 0.0
    assert r["duration"] == pytest.approx(end)
    pool = llmsim["pools"]["main"]
    assert pool["replicas_mean"] == pytest.approx(3.0)
    assert 0 < pool["gpu_busy_fraction"] <= 1.0
    # the engine's counters are the window's: the prompts the prefix cache looked up are the counted ones
    # (and those of lead-in requests still waiting at t = 0), not the lead-in's too, about as many again
    counted = sum(q.input_tokens for q in out.requests)
    assert pool["prefix_cache"]["prompt_tokens"] == pytest.approx(counted, rel=0.03)



# --- where it means nothing, it is refused -----------------------------------------------------------------
def test_a_warm_start_is_refused_where_there_is_no_arrival_process(tmp_path, cli):
    closed = tmp_path / "closed.yaml"
    closed.write_text(yaml.safe_dump({**TINY, "workload": {**TINY["workload"],
                                                           "arrival": {"type": "concurrency", "concurrency": 4}}}))
    one_line_error(cli("run", closed, "--set", "workload.lead_in_s=60"), "closed.yaml",
                   "workload.lead_in_s", "'concurrency' arrival", "warmup_requests")
    (tmp_path / "t.csv").write_text("timestamp,input_length,output_length\n0,10,10\n1000,10,10\n")
    trace = tmp_path / "trace.yaml"
    trace.write_text(yaml.safe_dump({**TINY, "workload": {"arrival": {"type": "trace", "path": "t.csv"}}}))
    one_line_error(cli("run", trace, "--set", "workload.lead_in_s=60"), "trace.yaml",
                   "workload.lead_in_s", "'trace' arrival")
    with pytest.raises(LlmsimError, match="warm start") as e:
        plan_shards(scenario(CHAT, lead_in_s=60), 2)
    assert e.value.key_path == "workload.lead_in_s"


def test_a_warm_start_of_zero_is_taken_wherever_the_cold_start_is(tmp_path):
    """0 is the cold start, as unset: a closed loop, a trace and a sharded run take it and run as without
    it (they refused it as a warm start, so a --vary of lead_in_s=0,600 could not keep 0 there)."""
    closed = {**TINY, "workload": {**TINY["workload"], "arrival": {"type": "concurrency", "concurrency": 4}}}
    cold, zero = simulate(scenario(closed)), simulate(scenario(closed, lead_in_s=0))
    assert results_digest(zero.results) == results_digest(cold.results)
    (tmp_path / "t.csv").write_text("timestamp,input_tokens,output_tokens\n0,10,10\n1000,10,10\n")
    trace = Scenario.model_validate({**TINY, "workload": {"arrival": {"type": "trace", "path": str(tmp_path / "t.csv")},
                                                          "lead_in_s": 0}})
    assert simulate(trace).results["completed"] == 2
    assert plan_shards(scenario(CHAT, lead_in_s=0), 2).replicas == plan_shards(scenario(CHAT), 2).replicas


# --- the lead-in's arrivals ---------------------------------------------------------------------------------
PROFILES = st.one_of(
    st.none(),
    st.builds(SinusoidProfile, period_s=st.floats(600, 86400), peak_to_trough=st.floats(1, 20),
              peak_at_s=st.floats(0, 86400)),
    st.builds(HourlyProfile, values=st.lists(st.floats(0, 10), min_size=24, max_size=24).filter(lambda v: max(v) > 0),
              start_hour=st.floats(0, 23.99)))


@settings(max_examples=60, deadline=None)
@given(rate=st.floats(0.01, 50), profile=PROFILES, span=st.floats(0.1, 7200), seed=st.integers(0, 2**16))
def test_lead_in_arrivals_fall_before_the_window_in_order(rate, profile, span, seed):
    a = PoissonArrival(rate_per_s=rate, profile=profile)
    t = a.lead_in_times(np.random.default_rng(seed), span)
    assert ((t >= -span) & (t < 0)).all() and (np.diff(t) >= 0).all()
    assert a.lead_in_count(span) >= 0


def test_a_lead_in_of_hours_at_rate_zero_expects_no_arrivals():
    """The hour before the window at rate 0 beside an hour of a tiny rate: the shape's integral rounded
    to +2e-106 over it, and the expected count read -2e-106 (the hypothesis test above found it)."""
    values = [0.0] * 22 + [1.0, 5.632681824048084e-110]
    a = PoissonArrival(rate_per_s=1.0, profile=HourlyProfile(values=values, start_hour=0.0))
    assert a.lead_in_count(1.0) == 0.0
    assert len(a.lead_in_times(np.random.default_rng(0), 1.0)) == 0


def test_the_lead_in_follows_the_profile_back_in_time():
    """A sinusoid peaking 1 h before the window: the lead-in's busiest hour is that one, at the rate the
    profile gives then, and the expected count is what the run's size check adds."""
    a = PoissonArrival(rate_per_s=10.0, profile=SinusoidProfile(period_s=86400, peak_to_trough=10,
                                                                peak_at_s=86400 - 3600))
    t = a.lead_in_times(np.random.default_rng(1), 4 * 3600.0)
    hours = np.histogram(t, bins=np.arange(-4, 1) * 3600.0)[0] / 3600.0
    expected = [a.lead_in_count(3600.0 * (k + 1)) - a.lead_in_count(3600.0 * k) for k in (3, 2, 1, 0)]
    assert np.argmax(hours) in (2, 3)
    assert hours == pytest.approx(np.array(expected) / 3600.0, rel=0.05)
    assert len(t) == pytest.approx(a.lead_in_count(4 * 3600.0), rel=0.02)
    cold, warm = (estimate_run_size(scenario(CHAT, **w)) for w in ({}, {"lead_in_s": 600}))
    assert warm.requests == pytest.approx(cold.requests * 2)
    assert warm.span_s == pytest.approx(cold.span_s + 600)
    assert math.isfinite(warm.requests)


def test_a_front_end_serves_the_lead_in_before_the_window():
    """A serial front end (engine.request_ms) made before t = 0 is free from when it is made: one
    free from t = 0 held every lead-in request until the window opened."""
    body = {**CHAT, "pools": [{**CHAT["pools"][0], "engine": {"request_ms": 1.0}}]}
    ended = []
    simulate(scenario(body, duration_s=30, lead_in_s=60), on_end=ended.append)
    lead_in = [r for r in ended if r.arrival < 0]
    assert lead_in and all(r.first_token - r.arrival < 1.0 for r in lead_in if r.first_token < -1.0)
    assert min(r.first_token for r in lead_in) < -50


@pytest.mark.parametrize("engine,key", [({"kv_offload": {"host_gb": 20}, "gpu_memory_utilization": 0.3}, "offload"),
                                        ({}, "lora")])
def test_lora_and_offload_counters_are_the_windows(engine, key):
    """A LoRA pool's admissions and an offload tier's hits are counted from t = 0, as the prefix cache's
    are: both kept the lead-in's, so that 120 s of it before a 30 s window read about four times the
    window's admissions, and a host tier's token hit rate could pass 1 (its hit tokens the lead-in's too,
    the prompt tokens not: 1.15 in a chat of 300 s of lead-in and 60 s of window)."""
    pool = {"name": "main", "model": "llama-3-8b", "gpu": "h100-sxm", "replicas": 1, "engine": engine}
    if key == "lora":
        pool["lora"] = {"max_loras": 2, "max_lora_rank": 16, "max_cpu_loras": 4, "adapters": 50}
    body = {**CHAT, "seed": 3, "pools": [pool]}
    out = simulate(scenario(body, duration_s=30, lead_in_s=120, arrival={"type": "poisson", "rate_per_s": 0.5}))
    block = out.results["llmsim"]["pools"]["main"]
    cache = block["prefix_cache"]
    assert block["preemptions"] == 0
    if key == "lora":     # one admission each, as the prefix cache's lookups count them
        p, end = out.pools["main"], out.results["llmsim"]["simulated_seconds"]
        lookups = sum(p.replica_stats(r, end)["prefix_cache"]["lookups"] for r in p.replicas)
        assert block["lora"]["admissions"] == lookups
    else:                 # every block the cache evicts goes to the tier
        host = cache["offload"]["host"]
        assert host["hit_requests"] > 0 and host["offloaded_blocks"] == cache["evicted_blocks"]


DISAGG = {
    "name": "disagg", "seed": 2,
    "workload": {"duration_s": 20, "arrival": {"type": "poisson", "rate_per_s": 4},
                 "input_tokens": {"dist": "uniform", "min": 2000, "max": 6000},
                 "output_tokens": {"dist": "uniform", "min": 100, "max": 300}},
    "classes": [{"name": "chat", "pool": "prefill"}],
    "pools": [{"name": "prefill", "model": "llama-3.1-8b", "gpu": "h100-sxm", "replicas": 1,
               "disaggregation": {"decode_pool": "decode"}},
              {"name": "decode", "model": "llama-3.1-8b", "gpu": "h100-sxm", "replicas": 1}],
}


def test_the_step_in_flight_at_the_window_is_split_there_alike_in_both_engines():
    """The engines account an iteration (the fast engine a decode stretch) at its end, so the one in
    flight at t = 0 counted whole in the window, the lead-in's part of it too: a saturated decode pool read
    busy 1.0018 of its time in the fast engine (a stretch of many iterations) and 1.00003 in the reference
    one, and their iterations differed (7,183 against 7,171). Its time and KV are split at t = 0, its
    iterations and tokens by where each ends: the engines agree as they do cold, and busy stays <= 1."""
    fast, ref = (simulate(scenario(DISAGG, lead_in_s=60), engine=e).results["llmsim"]
                 for e in ("fast", "reference"))
    for name in ("prefill", "decode"):
        f, r = fast["pools"][name], ref["pools"][name]
        assert f["iterations"] == r["iterations"]
        for k in ("gpu_busy_fraction", "mean_kv_utilization", "compute_utilization"):
            assert f[k] == pytest.approx(r[k], rel=1e-9), k
        assert 0 < f["gpu_busy_fraction"] <= 1.0 + 1e-12
    assert fast["pools"]["decode"]["gpu_busy_fraction"] > 0.99     # saturated: a stretch in flight at t = 0


def test_a_session_begun_in_the_lead_in_is_active_from_the_window_on():
    """A chat begun before t = 0 is active through the window's first think time, before its next turn:
    counted from that turn, the window's mean active sessions (and sessions per GPU) read 18 % low over
    a 120 s window (395 against 481), 3.6 % over 600 s; they are what every session's requests, the
    lead-in's too, make of the window."""
    from simulator.metrics.cost import session_load

    ended = []
    out = simulate(scenario(CHAT, duration_s=120, lead_in_s=300), on_end=ended.append)
    sessions = out.results["llmsim"]["cost"]["sessions"]
    every = session_load(ended, out.results["llmsim"]["simulated_seconds"], span_s=120.0)
    assert sessions["mean_active"] == pytest.approx(every.span_seconds / 120.0, rel=0.005)
    assert sessions["peak_active"] == every.peak_active


def test_replicas_the_lead_in_stopped_are_not_the_windows():
    """An autoscaled pool that scaled up for a peak in the lead-in and back down before t = 0 counted
    the replica it stopped there among the window's replicas_created (3 where the window saw 2)."""
    body = {"name": "auto", "seed": 9,
            "workload": {"duration_s": 60, "arrival": {"type": "poisson", "rate_per_s": 20, "profile": {
                "type": "sinusoid", "period_s": 600, "peak_to_trough": 10, "peak_at_s": 450}},
                "input_tokens": {"dist": "lognormal", "mean": 600, "std": 300, "min": 32, "max": 3000},
                "output_tokens": {"dist": "lognormal", "mean": 200, "std": 60, "min": 8, "max": 400}},
            "pools": [{"name": "main", "model": "llama-3-8b", "gpu": "h100-sxm", "replicas": 1, "autoscaling": {
                "metric": "concurrency", "target": 20, "max_replicas": 8, "interval_s": 15,
                "scale_down_window_s": 30, "boot_s": 20}}]}
    out = simulate(scenario(body, lead_in_s=400))
    pool, first = out.pools["main"], out.timeline.iloc[0]
    assert first["time_s"] == 0.0
    at_window = int(first["ready"] + first["starting"] + first["draining"] + first["warm"])
    started_since = sum(1 for r in pool.replicas if r.t0 >= 0)
    assert len(pool.replicas) > at_window + started_since      # the lead-in stopped one
    assert out.results["llmsim"]["pools"]["main"]["replicas_created"] == at_window + started_since
