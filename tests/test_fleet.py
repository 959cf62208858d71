"""The fleet: priority queues, classes and shedding, autoscaling with cold
starts, warm pools and draining, network latency and the TTFT budget, and
the bad scenarios each of them can be given."""
from __future__ import annotations

import copy
from collections import Counter

import pytest
import yaml
from hypothesis import given, settings, strategies as st

from simulator.cli.app import main
from simulator.engine.wait_queue import WaitQueue
from simulator.engine.sequence import Seq
from simulator.fleet import pool as fleet_pool
from simulator.runner import simulate
from simulator.scenario.schema import Scenario
from workloads.request import Request, Status

SETTINGS = dict(deadline=None, derandomize=True)


def scenario(**over) -> dict:
    base = {
        "name": "fleet-test",
        "seed": 3,
        "workload": {"num_requests": 400, "arrival": {"type": "poisson", "rate_per_s": 20},
                     "input_tokens": {"dist": "uniform", "min": 200, "max": 1200},
                     "output_tokens": {"dist": "uniform", "min": 20, "max": 120}},
        "pools": [{"name": "main", "model": "llama-3-8b", "gpu": "h100-sxm", "replicas": 1,
                   "engine": {"max_num_seqs": 32}}],
    }
    base.update(over)
    return base


def run(data: dict, engine: str = "fast"):
    return simulate(Scenario.model_validate(data), engine=engine)


def outcomes(out) -> Counter:
    return Counter((r.klass, Status(r.status).name) for r in out.requests)


# -- the waiting queue ------------------------------------------------------------

@settings(max_examples=200, **SETTINGS)
@given(ops=st.lists(st.tuples(st.sampled_from(["append", "appendleft", "pop", "remove"]),
                              st.integers(0, 2)), max_size=60))
def test_wait_queue_serves_priority_then_fifo(ops):
    """Against a list model: the head is the oldest of the highest priority,
    except that a preempted sequence (appendleft) goes first in its level."""
    q, model, n = WaitQueue(), [], 0
    for op, p in ops:
        if op in ("append", "appendleft"):
            s = Seq(Request(n, 0.0, 10, 10, priority=p))
            n += 1
            (q.append if op == "append" else q.appendleft)(s)
            if op == "append":
                model.append(s)
            else:
                i = next((k for k, x in enumerate(model) if x.req.priority == p), len(model))
                model.insert(i, s)
            model.sort(key=lambda x: -x.req.priority)          # stable: FIFO within a level
        elif op == "pop" and model:
            assert q.popleft() is model.pop(0)
        elif op == "remove" and model:
            s = model.pop(len(model) // 2)
            q.remove(s)
        assert len(q) == len(model) and list(q) == model
        if model:
            assert q[0] is model[0]
            assert q.count_at_least(1) == sum(1 for x in model if x.req.priority >= 1)


# -- classes, priority and shedding ---------------------------------------------

TIERS = [
    {"name": "free", "share": 0.7, "priority": 0, "admission": {"max_queue_per_replica": 4},
     "slo": {"ttft_p99_ms": 2000}},
    {"name": "paid", "share": 0.3, "priority": 1, "admission": {"max_queue_per_replica": 64},
     "slo": {"ttft_p99_ms": 2000}},
]


def overloaded(**over) -> dict:
    d = scenario(classes=copy.deepcopy(TIERS), **over)
    d["workload"]["arrival"]["rate_per_s"] = 40       # ~2x what one replica can serve
    return d


def test_under_overload_free_is_shed_and_paid_keeps_its_slo():
    out = run(overloaded())
    c = out.results["llmsim"]["classes"]
    assert c["free"]["rejected"] > 0 and c["paid"]["rejected"] == 0
    assert c["free"]["completed"] + c["free"]["rejected"] + c["free"]["cancelled"] == c["free"]["requests"]
    assert c["paid"]["slo"]["met"] is True
    assert c["paid"]["p99_ttft_ms"] < c["free"]["p99_ttft_ms"]
    assert out.results["llmsim"]["pools"]["main"]["rejected_on_admission"] == c["free"]["rejected"]
    # sessions keep their class and the split follows the shares
    assert 0.6 < c["free"]["requests"] / 400 < 0.8


def _burst(engine: dict, **admission) -> dict:
    """One replica of 8 slots, 200 requests at 400/s: far more than it serves."""
    d = scenario(classes=[{"name": "c", "admission": admission}])
    d["workload"] = {"num_requests": 200, "arrival": {"type": "poisson", "rate_per_s": 400},
                     "input_tokens": {"dist": "fixed", "value": 2000}, "output_tokens": {"dist": "fixed", "value": 50}}
    d["pools"][0]["engine"] = {"backend": "vllm", "prefix_cache": False, "max_num_seqs": 8, **engine}
    return d


@pytest.mark.parametrize("engine", [{"async_scheduling": True}, {"async_scheduling": True, "request_ms": 4.0},
                                    {"async_scheduling": False}],
                         ids=["async", "async-front-end", "in-turn"])
def test_queue_limit_counts_held_and_entering_requests(engine):
    """With async scheduling, arrivals during an iteration are held for the plan
    after next, and with a front end they are still being parsed: either way
    they are served before a later arrival, so they count toward its limit.
    Checked on the records: when an accepted request arrives, fewer than 4
    accepted requests are ahead of it and not yet admitted."""
    out = run(_burst(engine, max_queue_per_replica=4))
    acc = [r for r in out.requests if r.status == Status.FINISHED]
    assert 10 < len(acc) < 100
    worst = max(sum(1 for q in acc if q.arrival < r.arrival < q.admitted) for r in acc)
    assert worst == 3


def test_wait_limit_counts_held_requests():
    """max_wait_s with async scheduling: the 2000-token prompts accepted ahead
    of an accepted arrival and not yet admitted, held ones included, take no
    longer than 0.2 s at the replica's prefill rate (4 of them)."""
    out = run(_burst({"async_scheduling": True}, max_wait_s=0.2))
    acc = [r for r in out.requests if r.status == Status.FINISHED]
    worst = max(sum(1 for q in acc if q.arrival < r.arrival < q.admitted) for r in acc)
    assert worst == int(0.2 * out.pools["main"].prefill_tokens_per_s() // 2000) == 4


def test_priority_alone_orders_the_queue():
    """No admission limits: nothing is shed, and paid waits less than free."""
    d = overloaded()
    for c in d["classes"]:
        c.pop("admission")
    out = run(d)
    c = out.results["llmsim"]["classes"]
    assert c["free"]["rejected"] == c["paid"]["rejected"] == 0
    assert c["paid"]["p95_ttft_ms"] < 0.5 * c["free"]["p95_ttft_ms"]


def test_class_split_leaves_arrivals_and_lengths_unchanged():
    a, b = run(scenario()), run(scenario(classes=copy.deepcopy(TIERS)))
    key = [(r.arrival, r.input_tokens, r.output_tokens) for r in a.requests]
    assert key == [(r.arrival, r.input_tokens, r.output_tokens) for r in b.requests]


def test_kv_budget_caps_a_class_and_engines_agree():
    d = scenario(classes=[{"name": "free", "share": 1, "kv_budget_fraction": 0.005}])
    seen = []
    orig = fleet_pool.Pool.submit

    def spy(self, req):
        orig(self, req)
        for r in self.replicas:
            if r.kv_budgets:
                seen.append(r.kv_charged.get("free", 0) <= r.kv_budgets["free"])

    fleet_pool.Pool.submit = spy
    try:
        fast, ref = run(d), run(d, "reference")
    finally:
        fleet_pool.Pool.submit = orig
    assert seen and all(seen)
    assert all(r.status == Status.FINISHED for r in fast.requests)
    unc = run(scenario())
    assert fast.results["mean_ttft_ms"] > 2 * unc.results["mean_ttft_ms"]   # the cap binds
    stamps = lambda o: [t for r in o.requests for t in (r.first_token, r.finish)]  # noqa: E731
    assert stamps(fast) == pytest.approx(stamps(ref), rel=1e-9)


# -- several pools ------------------------------------------------------------------

def test_classes_route_to_their_pools():
    d = scenario(classes=[{"name": "free", "share": 1, "pool": "small"},
                          {"name": "paid", "share": 1, "pool": "big"}])
    d["pools"] = [{"name": "small", "model": "llama-3-8b", "gpu": "h100-sxm", "replicas": 1},
                  {"name": "big", "model": "llama-3-70b", "gpu": "h100-sxm", "tp": 4, "replicas": 1}]
    out = run(d)
    assert all(r.pool == {"free": "small", "paid": "big"}[r.klass] for r in out.requests)
    pools = out.results["llmsim"]["pools"]
    assert pools["big"]["gpus"] == 4 and pools["small"]["gpus"] == 1
    assert out.results["llmsim"]["gpus"] == 5
    cost = out.results["llmsim"]["cost"]
    assert cost["window_usd"] == pytest.approx(pools["big"]["usd"] + pools["small"]["usd"])
    big = [r.ttft for r in out.requests if r.klass == "paid"]
    small = [r.ttft for r in out.requests if r.klass == "free"]
    assert sum(big) / len(big) > sum(small) / len(small)            # 70B prefills slower


def test_a_pools_router_draws_are_its_own():
    """Every pool's router drew from one stream: changing pool p2's router moved the latencies of
    class a, which only pool p1 serves (its random router then drew other numbers)."""
    def first_tokens(p2_router: str) -> list:
        d = scenario(classes=[{"name": "a", "share": 0.5, "pool": "p1"}, {"name": "b", "share": 0.5, "pool": "p2"}])
        d["workload"]["num_requests"] = 300
        d["pools"] = [{"name": n, "model": "llama-3-8b", "gpu": "h100-sxm", "replicas": 3, "router": r}
                      for n, r in (("p1", "random"), ("p2", p2_router))]
        return [r.first_token for r in run(d).requests if r.klass == "a"]

    assert first_tokens("random") == first_tokens("least_outstanding")


# -- autoscaling ------------------------------------------------------------------

def ramp(**auto) -> dict:
    """Load that steps from 5 to 60 req/s and back: a replica serves ~25."""
    d = scenario()
    d["workload"] = {"duration_s": 600, "arrival": {
        "type": "poisson", "rate_per_s": 5,
        "spikes": [{"start_s": 100, "duration_s": 200, "multiplier": 12}]},
        "input_tokens": {"dist": "uniform", "min": 200, "max": 1200},
        "output_tokens": {"dist": "uniform", "min": 20, "max": 120}}
    spec = {"metric": "concurrency", "target": 12, "min_replicas": 1, "max_replicas": 8, "interval_s": 5,
            "boot_s": 10, "weight_load_gb_per_s": 4, "scale_down_window_s": 30}
    spec.update(auto)
    d["pools"][0]["autoscaling"] = spec
    return d


@pytest.fixture(scope="module")
def ramp_runs():
    return run(ramp()), run(ramp(warm_pool=2, warm_start_s=1))


def test_autoscaler_follows_the_ramp_and_bills_less_than_peak(ramp_runs):
    out, _ = ramp_runs
    p = out.results["llmsim"]["pools"]["main"]
    assert p["replicas_max"] >= 3 and p["replicas_min"] == 1
    assert p["replicas_mean"] < p["replicas_max"]
    tl = out.timeline
    assert set(tl.columns) >= {"time_s", "pool", "ready", "starting", "draining", "queue_depth",
                               "kv_utilization", "arrival_rate_per_s"}
    assert tl["starting"].max() >= 1 and tl["draining"].max() >= 0
    static = out.results["llmsim"]["cost"]["gpu_hours"]
    assert static < p["replicas_max"] * out.results["duration"] / 3600
    a = p["autoscaling"]
    assert a["cold_start_s"] == pytest.approx(16e9 / 4e9 + 10, rel=0.05)
    assert 0 < a["under_provisioned_s"] < out.results["duration"]


def test_warm_pool_cuts_the_time_under_provisioned(ramp_runs):
    cold, warm = ramp_runs
    a = cold.results["llmsim"]["pools"]["main"]["autoscaling"]
    b = warm.results["llmsim"]["pools"]["main"]["autoscaling"]
    assert b["under_provisioned_s"] <= a["under_provisioned_s"]
    assert warm.results["p99_ttft_ms"] < 0.5 * cold.results["p99_ttft_ms"]
    # the standbys are paid for, and the replica states add up to the GPUs billed
    assert warm.timeline["warm"].max() >= 1
    tl = warm.timeline
    assert (tl[["ready", "starting", "draining", "warm"]].sum(axis=1) == tl["gpus_billed"]).all()


def test_scale_in_drains_without_losing_requests(ramp_runs):
    out, _ = ramp_runs
    assert Counter(Status(r.status).name for r in out.requests) == {"FINISHED": len(out.requests)}
    pool = out.pool
    assert pool.count(fleet_pool.State.STOPPED) >= 1
    # a replica stopped only after its last request ended, and got none after it began draining
    for r in pool.replicas:
        if pool.state[r.index] is fleet_pool.State.STOPPED and r.t_end > 0:
            assert r.outstanding == 0


def test_the_starting_replicas_hold_for_the_scale_down_window():
    """The HPA records the current replica count as a recommendation before its first reading; the
    window began empty, so a pool started at 4 replicas read the first 15 s of arrivals, found them
    light and drained to 1 at once, then paid a cold start to come back."""
    d = ramp(scale_down_window_s=120, interval_s=15)
    d["pools"][0]["replicas"] = 4
    d["workload"]["arrival"]["spikes"] = []
    d["workload"]["duration_s"] = 200
    timeline = run(d).results["llmsim"]["cost"]["gpu_timeline"]
    assert timeline[0] == [0, 4]
    assert all(t >= 120 for t, gpus in timeline if gpus < 4)


@pytest.mark.parametrize("metric,target", [("request_rate", 5.0), ("concurrency", 12)])
def test_the_tolerance_band_holds_for_every_metric(metric, target):
    """autoscaling.tolerance held a concurrency-scaled pool steady and was ignored for request_rate,
    whose target is per replica (the HPA applies its band to a per-pod metric's usage ratio)."""
    from simulator.fleet.autoscaler import Autoscaler, AutoscalingSpec

    pool = _bare_pool(4, 0)
    pool.count = lambda state: sum(1 for s in pool.state if s is state)
    pool.arrivals = 0
    for r in pool.replicas:
        r.outstanding = 13     # 13 a replica against 12: inside a 0.1 band
        r.busy_time, r.tokens_processed = 0.0, 0
    spec = AutoscalingSpec(metric=metric, target=target, max_replicas=8, tolerance=0.1)
    scaler = Autoscaler(pool, spec, 10.0)
    pool.env.run(until=1.0)
    pool.arrivals = 21          # 5.25 a replica over 1 s against 5: inside the band
    assert scaler.desired()[0] == 4


def _bare_pool(ready: int, warm: int) -> fleet_pool.Pool:
    """A pool's replica lifecycle alone: replicas are placeholders, no engine."""
    import simpy
    from types import SimpleNamespace

    p = fleet_pool.Pool.__new__(fleet_pool.Pool)
    p.env = simpy.Environment()
    p._make = lambda i: SimpleNamespace(index=i, outstanding=0, handing={})
    p.holds_handoffs = False
    p.replicas, p.state, p.ready, p.warm = [], [], [], []
    p.billing, p.serving, p.working = [], [], []
    p.on_ready = None
    for _ in range(ready):
        p._new(fleet_pool.State.READY)
    for _ in range(warm):
        p.warm.append(p._new(fleet_pool.State.WARM).index)
    return p


@pytest.mark.parametrize("metric", ["queue_depth", "gpu_busy"])
def test_a_draining_replica_is_not_read_against_the_ready_ones(metric):
    """The HPA leaves out pods being deleted; llmsim read a draining replica's queue and busy time over
    the ready replicas' count, so a replica finishing its work pushed the pool to scale back out."""
    from simulator.fleet.autoscaler import Autoscaler, AutoscalingSpec

    pool = _bare_pool(3, 0)
    pool.count = lambda state: sum(1 for s in pool.state if s is state)
    pool.arrivals = 0
    for r in pool.replicas:
        r.busy_time, r.tokens_processed = 0.0, 0
        r.queued = lambda: 0
    scaler = Autoscaler(pool, AutoscalingSpec(metric=metric, target=0.5, max_replicas=8), 10.0)
    leaving = pool.replicas[2]
    pool.ready.remove(leaving)
    pool.state[2] = fleet_pool.State.DRAINING
    leaving.queued = lambda: 40                   # its own backlog, which no new request joins
    pool.env.run(until=10.0)
    leaving.busy_time = 10.0                      # busy throughout the interval, finishing it
    assert scaler.desired()[1] == 0.0


def test_a_refilling_standby_is_paid_but_never_counted_as_capacity_to_come():
    """Taking a standby starts its replacement loading; that replacement will
    join the warm pool, not serve, so it is not committed capacity and a
    scale-in cancels the activating standby rather than it."""
    S = fleet_pool.State
    p = _bare_pool(ready=1, warm=1)
    activating = p.warm[-1]
    p.start(1.0, warm=True)           # the autoscaler's scale-up with a warm pool
    p.start_warm(30.0)
    refill = len(p.replicas) - 1
    assert p.state[activating] is S.STARTING and p.state[refill] is S.WARMING
    assert p.count(S.STARTING) == 1 and p.billed == 3
    assert p.cancel_start()
    assert p.state[activating] is S.STOPPED and p.state[refill] is S.WARMING
    assert not p.cancel_start()       # nothing else was meant to serve
    p.env.run(until=31.0)
    assert p.state[refill] is S.WARM and p.warm == [refill]
    assert len(p.ready) == 1 and p.billed == 2


@settings(max_examples=12, **SETTINGS)
@given(seed=st.integers(0, 2**16), metric=st.sampled_from(["concurrency", "queue_depth", "kv_utilization",
                                                            "gpu_busy", "compute_utilization",
                                                            "request_rate"]),
       warm=st.integers(0, 2), limit=st.integers(1, 8), engine=st.sampled_from(["fast", "reference"]))
def test_every_request_ends_once_under_scaling_draining_and_shedding(seed, metric, warm, limit, engine):
    target = {"concurrency": 12, "compute_utilization": 0.3, "queue_depth": 2, "kv_utilization": 0.3, "gpu_busy": 0.7, "request_rate": 15}[metric]
    d = ramp(metric=metric, target=target, warm_pool=warm)
    d["seed"] = seed
    d["workload"]["duration_s"] = 150
    d["workload"]["arrival"]["spikes"][0]["duration_s"] = 50    # the ramp's spike up to the window's end
    d["classes"] = copy.deepcopy(TIERS)
    d["classes"][0]["admission"]["max_queue_per_replica"] = limit
    d["classes"][1]["admission"]["max_queue_per_replica"] = limit * 4
    calls = Counter()
    orig = fleet_pool.Pool.submit
    draining_got_work = []

    def spy(self, req):
        for r in self.replicas:
            if self.state[r.index] is not fleet_pool.State.READY:
                draining_got_work.append((r.index, r.outstanding))
        orig(self, req)
        if req.replica >= 0:
            assert self.state[req.replica] is fleet_pool.State.READY

    fleet_pool.Pool.submit = spy
    try:
        out = run(d, engine)
    finally:
        fleet_pool.Pool.submit = orig
    for r in out.requests:
        calls[r.id] += 1
        assert r.status in (Status.FINISHED, Status.REJECTED, Status.CANCELLED)
        if r.status == Status.REJECTED:
            assert r.klass == "free" or r.replica < 0
    assert len(calls) == len(out.requests)
    llm = out.results["llmsim"]
    busy_gpu_h = sum(r.busy_time for r in out.pool.replicas) / 3600
    assert llm["cost"]["gpu_hours"] >= busy_gpu_h - 1e-9
    pb = llm["pools"]["main"]
    assert 0 <= pb["gpu_busy_fraction"] <= 1 + 1e-9 and 0 <= pb["compute_utilization"] <= pb["gpu_busy_fraction"]
    assert 0 <= pb["mean_kv_utilization"] <= 1 + 1e-9
    # stamps never run backwards
    for r in out.requests:
        if r.status == Status.FINISHED:
            assert r.arrival <= r.queued <= r.admitted <= r.first_token <= r.finish


def test_a_memory_bound_fleet_looks_idle_on_compute_while_its_kv_is_full():
    """The case study's warning: long decodes fill KV and queue requests,
    yet model FLOPs utilisation stays low, so an autoscaler steering to 50%
    compute utilisation scales *in* a fleet that is breaching its TTFT."""
    d = scenario()
    d["workload"] = {"num_requests": 1500, "arrival": {"type": "poisson", "rate_per_s": 12},
                     "input_tokens": {"dist": "uniform", "min": 1000, "max": 3000},
                     "output_tokens": {"dist": "uniform", "min": 600, "max": 1000}}
    d["pools"][0].update(replicas=2, engine={"gpu_memory_utilization": 0.35},
                         autoscaling={"metric": "compute_utilization", "target": 0.5, "min_replicas": 1,
                                      "max_replicas": 4, "interval_s": 10, "scale_down_window_s": 20})
    out = run(d)
    p = out.results["llmsim"]["pools"]["main"]
    assert p["max_kv_utilization"] > 0.95 and p["compute_utilization"] < 0.25
    assert p["gpu_busy_fraction"] > 0.9               # "busy" by the time-based measure
    assert p["replicas_min"] == 1                     # and scaled in regardless
    assert out.results["p99_ttft_ms"] > 5000


# -- network and the TTFT budget ---------------------------------------------------

def test_fixed_network_latency_adds_to_ttft_not_to_tpot():
    base = run(scenario())
    d = scenario(classes=[{"name": "default", "network": {"ingress_ms": 20, "egress_ms": 15,
                                                          "tokenize_ms_per_1k_tokens": 1}}])
    net = run(d)
    for a, b in zip(base.requests, net.requests):
        tok = b.input_tokens / 1000 * 1e-3
        # the replica sees the request 20 ms + tokenisation later: same work, shifted
        assert b.queued == pytest.approx(a.arrival + 0.020 + tok, abs=1e-12)
    bud = net.results["llmsim"]["ttft_budget"]
    for p in ("p50", "p95", "p99", "mean"):
        row = bud[p]
        assert sum(row[k] for k in bud["parts"]) == pytest.approx(row["ttft"], rel=1e-9)
        assert row["network"] == pytest.approx(35.0)
    assert net.results["median_ttft_ms"] > base.results["median_ttft_ms"] + 30
    assert net.results["median_tpot_ms"] == pytest.approx(base.results["median_tpot_ms"], rel=0.05)


def test_the_front_ends_response_time_is_a_part_of_its_own():
    """A collocated pool emits its first token from the prefill: first_decode is zero there, and the front end's
    response_ms (vLLM's 4 ms, here 7) is the response part, not first_decode as it was."""
    d = scenario()
    d["pools"][0]["engine"] = {"response_ms": 7.0}
    bud = run(d).results["llmsim"]["ttft_budget"]
    assert bud["parts"][-1] == "response"
    for p in ("p50", "p95", "p99", "mean"):
        row = bud[p]
        assert row["response"] == pytest.approx(7.0) and row["first_decode"] == pytest.approx(0.0, abs=1e-6)
        assert sum(row[k] for k in bud["parts"]) == pytest.approx(row["ttft"], rel=1e-9)


# -- bad input ----------------------------------------------------------------------

def cli_error(tmp_path, data, capsys) -> str:
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(SystemExit) as e:
        main(["run", str(p)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_class_routed_to_no_pool(tmp_path, capsys):
    d = scenario(classes=[{"name": "free"}])
    d["pools"].append({"name": "big", "model": "llama-3-8b", "gpu": "h100-sxm"})
    err = cli_error(tmp_path, d, capsys)
    assert "classes[0].pool" in err and "routed to no pool" in err


def test_class_routed_to_a_missing_pool(tmp_path, capsys):
    err = cli_error(tmp_path, scenario(classes=[{"name": "free", "pool": "nope"}]), capsys)
    assert "classes[0].pool" in err and "nope" in err


def test_min_above_max_replicas(tmp_path, capsys):
    d = scenario()
    d["pools"][0]["autoscaling"] = {"metric": "queue_depth", "target": 2, "min_replicas": 4, "max_replicas": 2}
    err = cli_error(tmp_path, d, capsys)
    assert "pools[0].autoscaling" in err and "min_replicas" in err


def test_replicas_outside_the_autoscaling_range(tmp_path, capsys):
    d = scenario()
    d["pools"][0]["autoscaling"] = {"metric": "queue_depth", "target": 2, "min_replicas": 2, "max_replicas": 4}
    err = cli_error(tmp_path, d, capsys)
    assert "pools[0].replicas" in err


def test_paid_shed_before_free_is_refused(tmp_path, capsys):
    d = scenario(classes=copy.deepcopy(TIERS))
    d["classes"][1]["admission"]["max_queue_per_replica"] = 2
    err = cli_error(tmp_path, d, capsys)
    assert "classes[1].admission" in err and "shed before" in err


def test_hourly_profile_needs_24_values(tmp_path, capsys):
    d = scenario()
    d["workload"]["arrival"]["profile"] = {"type": "hourly", "values": [1.0] * 23}
    err = cli_error(tmp_path, d, capsys)
    assert "profile" in err and "24" in err


# -- disaggregated prefill and decode ------------------------------------------------

def long_prompts(disagg: bool, link: str = "infiniband") -> dict:
    d = scenario()
    d["pools"][0]["model"] = "llama-3.1-8b"
    d["workload"]["num_requests"] = 300
    d["workload"]["arrival"]["rate_per_s"] = 6
    d["workload"]["input_tokens"] = {"dist": "uniform", "min": 4000, "max": 12000}
    d["workload"]["output_tokens"] = {"dist": "uniform", "min": 100, "max": 300}
    if disagg:
        d["pools"] = [{"name": "prefill", "model": "llama-3.1-8b", "gpu": "h100-sxm", "replicas": 1,
                       "disaggregation": {"decode_pool": "decode", "link": {"preset": link}}},
                      {"name": "decode", "model": "llama-3.1-8b", "gpu": "h100-sxm", "replicas": 1}]
        d["classes"] = [{"name": "chat", "pool": "prefill"}]
    else:
        d["pools"][0]["replicas"] = 2
        d["pools"][0]["engine"] = {"max_num_batched_tokens": 2048}
    return d


@pytest.fixture(scope="module")
def pd_runs():
    return run(long_prompts(False)), run(long_prompts(True)), run(long_prompts(True, "ethernet"))


def test_disaggregation_removes_prefill_stalls_from_tpot(pd_runs):
    colo, pd, _ = pd_runs
    assert pd.results["completed"] == colo.results["completed"] == 300
    assert pd.results["p99_tpot_ms"] < 0.7 * colo.results["p99_tpot_ms"]
    assert pd.results["llmsim"]["gpus"] == colo.results["llmsim"]["gpus"] == 2


def test_a_prefill_pool_states_the_kv_it_hands_over(pd_runs):
    """results.json's handoff block: the link as run, a prompt token's bytes on the busiest link and what
    crossed it, read back from the transfers' times; the decode pool has none."""
    _, ib, eth = pd_runs
    kv_per_token = 128 * 1024                      # llama-3.1-8b, bf16, one GPU
    for out, (preset, gb, ms) in ((ib, ("infiniband", 45.0, 0.02)), (eth, ("ethernet", 3.0, 0.1))):
        pools = out.results["llmsim"]["pools"]
        h = pools["prefill"]["handoff"]
        moved = [r for r in out.requests if r.kv_transfer > 0]
        assert h["decode_pool"] == "decode" and "handoff" not in pools["decode"]
        assert h["link"] == {"preset": preset, "gb_per_s": gb, "latency_ms": pytest.approx(ms)}
        assert h["bytes_per_token"] == kv_per_token and h["handoffs"] == len(moved) == 300
        assert h["gb_moved"] == pytest.approx(sum(r.input_tokens for r in moved) * kv_per_token / 1e9, rel=1e-6)
        assert h["mean_ms"] == pytest.approx(1e3 * sum(r.kv_transfer for r in moved) / len(moved), rel=1e-9)
        assert h["mean_ms"] < h["p99_ms"]


def test_the_summary_and_the_page_state_the_hand_off(pd_runs):
    import io

    from rich.console import Console

    from simulator.report.page_parts import pools_table
    from simulator.report.summary import summary_table

    results = pd_runs[1].results
    h = results['llmsim']['pools']['prefill']['handoff']
    assert h["wait_mean_ms"] > 0        # 300 long prompts at 6 a second take turns on the links
    said = (f"hands its KV to decode over infiniband (45 GB/s a GPU, 0.02 ms): 131,072 bytes a prompt token on the "
            f"busiest link, {h['mean_ms']:,.1f} ms a hand-off on average ({h['wait_mean_ms']:,.1f} ms of it waiting "
            f"for the links)")
    console = Console(width=100, record=True, file=io.StringIO())
    console.print(summary_table(results))
    assert said in " ".join(console.export_text().split())
    assert f"<p>Pool prefill {said}.</p>" in pools_table(results["llmsim"])


def test_disaggregated_ttft_includes_the_kv_transfer(pd_runs):
    _, ib, eth = pd_runs
    kv_per_token = 128 * 1024                      # llama-3-8b, bf16: 128 KiB
    for out, (bw, lat) in ((ib, (45e9, 20e-6)), (eth, (3e9, 100e-6))):
        for r in out.requests:
            assert r.kv_wait >= 0.0
            assert r.kv_transfer == pytest.approx(r.kv_wait + lat + r.input_tokens * kv_per_token / bw, rel=1e-9)
            assert r.prefill_done + r.kv_transfer <= r.first_token
        bud = out.results["llmsim"]["ttft_budget"]
        assert bud["mean"]["kv_transfer"] > 0 and bud["mean"]["first_decode"] > 0
        assert sum(bud["mean"][k] for k in bud["parts"]) == pytest.approx(bud["mean"]["ttft"], rel=1e-9)
    assert eth.results["mean_ttft_ms"] > ib.results["mean_ttft_ms"] + 100    # 1 GB over 3 GB/s ≈ 0.3 s


def test_a_link_slower_than_the_prompts_it_carries_queues_them(pd_runs):
    """Over ethernet (3 GB/s a GPU) an 8K-token llama-3.1-8b prompt's KV takes about 0.35 s, and 6
    prompts a second need 2 s of link a second: the hand-offs take turns on the one decode rank's links
    (no two moves overlap), and wait for them, where a link read as free bandwidth moved every prompt
    at once and kept TTFT at the prefill's. The prefill replica keeps each prompt's KV until its
    hand-off ends, so the waiting hand-offs fill its pool and prompts queue there for memory, where
    over InfiniBand its KV stays nearly empty."""
    _, ib, eth = pd_runs
    lat = 100e-6
    moves = sorted((r.prefill_done + r.kv_wait, r.prefill_done + r.kv_transfer - lat) for r in eth.requests)
    assert all(a1 >= b0 - 1e-9 for (_, b0), (a1, _) in zip(moves, moves[1:]))
    h = eth.results["llmsim"]["pools"]["prefill"]["handoff"]
    assert h["wait_mean_ms"] > 1000 > ib.results["llmsim"]["pools"]["prefill"]["handoff"]["wait_mean_ms"]
    assert eth.results["mean_ttft_ms"] > 3 * ib.results["mean_ttft_ms"]
    kv = lambda o: o.results["llmsim"]["pools"]["prefill"]["max_kv_utilization"]  # noqa: E731
    assert kv(eth) > 0.95 and kv(ib) < 0.2
    held = [(r.prefill_done, r.prefill_done + r.kv_transfer, r.input_tokens) for r in eth.requests]
    pool_tokens = eth.results["llmsim"]["pools"]["prefill"]["kv_tokens_per_replica"]
    for r in eth.requests:       # a prompt admitted while others' hand-offs held its replica's KV fit beside them
        beside = sum(n for t0, t1, n in held if t0 <= r.admitted < t1)
        assert beside + r.input_tokens <= pool_tokens


def test_the_kv_hand_off_runs_over_the_narrower_sides_links():
    """Four prefill shards into one decode GPU arrive over that GPU's one link: the prefill pool's tp
    alone made a 4 → 1 hand-off four times as fast as 1 → 1 (and a plan picking a narrow decode pool
    read its TTFT low)."""
    def mean_transfer(tp_prefill: int, tp_decode: int) -> float:      # the move alone, its wait for the links aside
        d = long_prompts(True, "ethernet")
        d["workload"]["num_requests"] = 20
        d["pools"][0]["tp"], d["pools"][1]["tp"] = tp_prefill, tp_decode
        reqs = run(d).requests
        return sum(r.kv_transfer - r.kv_wait for r in reqs) / len(reqs)

    one = mean_transfer(1, 1)
    assert mean_transfer(4, 1) == pytest.approx(one, rel=1e-9) == mean_transfer(1, 4)
    assert mean_transfer(4, 4) < 0.3 * one


def test_a_class_kv_cap_holds_on_the_decode_pool_too():
    """kv_budget_fraction capped a disaggregated class on its prefill pool alone, where a request's KV
    stays for one prompt, and not on the decode pool that holds it to the end."""
    d = long_prompts(True)
    d["workload"]["num_requests"] = 60
    free = run(d).results["llmsim"]["pools"]["decode"]["max_batch_size"]
    d["classes"][0]["kv_budget_fraction"] = 0.05
    capped = run(d).results["llmsim"]["pools"]["decode"]["max_batch_size"]
    assert capped < free


@pytest.mark.parametrize("backend", [None, "sglang", "shared-prompt"])
def test_disaggregated_engines_agree(backend):
    d = long_prompts(True)
    d["workload"]["num_requests"] = 60
    if backend == "shared-prompt":
        d["workload"]["system_prompt"] = {"apps": 2, "tokens": {"dist": "fixed", "value": 4000}}
    elif backend:
        for p in d["pools"]:
            p["engine"] = {"backend": backend}
    a, b = run(d), run(d, "reference")
    stamps = lambda o: [t for r in o.requests for t in (r.first_token, r.finish)]  # noqa: E731
    assert stamps(a) == pytest.approx(stamps(b), rel=1e-9)


def test_decode_pool_must_serve_the_same_model(tmp_path, capsys):
    d = long_prompts(True)
    d["pools"][1]["model"] = "llama-3-70b"
    d["pools"][1]["tp"] = 4
    err = cli_error(tmp_path, d, capsys)
    assert "pools[0].disaggregation.decode_pool" in err and "same model" in err


def test_least_outstanding_tokens_sees_prompts_not_the_answers_to_come():
    """A router cannot know how long an answer will be until it ends; least_outstanding_tokens counted
    each request's true output length, an oracle: it sent a short prompt away from a replica holding a
    100-token prompt whose 5,000-token answer no real router could foresee."""
    from helpers_engine import make_requests, run_open
    from simulator.engine.config import EngineConfig

    reqs = make_requests([0.0, 0.0, 1e-4], [100, 200, 50], [5000, 10, 10])
    out = run_open("fast", reqs, EngineConfig(), 10_000, replicas=2, router="least_outstanding_tokens")
    assert [r.replica for r in out.requests] == [0, 1, 0]


def test_an_mla_hand_off_moves_the_whole_latent_over_each_link():
    """Every GPU of an MLA rank keeps the whole latent (vLLM's NIXL connector: "MLA is always
    replicated"; each decode GPU reads it from one prefill GPU), so a tp 8 → tp 8 DeepSeek-V3
    hand-off moves 61 layers × 576 values × 2 bytes per token over each link, not an eighth of
    it; GQA heads fewer than tp (Qwen3-235B's 4 at tp 8) move twice their slice."""
    from simulator.scenario.compile import _pairs
    from simulator.fleet.setup import setup_pool
    from simulator.scenario.schema import PoolSpec

    def link_bytes(model: str, tp: int, **extra) -> float:
        prefill = PoolSpec(name="p", model=model, gpu="h200", tp=tp, disaggregation={"decode_pool": "d"}, **extra)
        decode = PoolSpec(name="d", model=model, gpu="h200", tp=tp, **extra)
        (pair,) = _pairs([setup_pool(prefill, 0), setup_pool(decode, 1, decodes_for_another=True)])
        return pair.link_bytes.full

    from simulator.profiles import load_model
    assert link_bytes("deepseek-v3", 8, engine={"weight_dtype": "fp8"}) == 61 * 576 * 2
    qwen = load_model("qwen3-235b-a22b-fp8")
    assert link_bytes("qwen3-235b-a22b-fp8", 8) == pytest.approx(qwen.kv_bytes_per_token("bf16") / 4)
    llama = load_model("llama-3.1-70b")
    assert link_bytes("llama-3.1-70b", 8) == pytest.approx(llama.kv_bytes_per_token("bf16") / 8)


def test_a_gpt_oss_hand_off_moves_the_sliding_window_layers_last_blocks():
    """vLLM's NIXL connector with the hybrid KV cache manager (0.22 on) sends each sliding-window
    group's last cdiv(window, block_size) + 1 blocks beside every full-attention block
    (get_sw_clipped_blocks): gpt-oss-120b's 18 sliding-window layers send 9 blocks of 16 tokens
    of their 128-token window, as many bytes a token as its 18 full-attention layers, where
    llmsim sent the full-attention bytes alone."""
    from simulator.scenario.compile import _pairs
    from simulator.fleet.setup import setup_pool
    from simulator.scenario.schema import PoolSpec

    engine = {"backend": "vllm", "backend_version": "0.26.0", "kv_memory": {"cuda_graph_gib": 1.0}}
    prefill = PoolSpec(name="p", model="gpt-oss-120b", gpu="h100-sxm", disaggregation={"decode_pool": "d"},
                       engine=engine)
    decode = PoolSpec(name="d", model="gpt-oss-120b", gpu="h100-sxm", engine=engine)
    (pair,) = _pairs([setup_pool(prefill, 0), setup_pool(decode, 1, decodes_for_another=True)])
    per_token = 18 * 2 * 8 * 64 * 2
    assert pair.link_bytes.full == pair.link_bytes.window == per_token
    assert pair.link_bytes.of(1000) == (1000 + 144) * per_token
    assert pair.link_bytes.of(100) == 200 * per_token      # a prompt shorter than the window: all of it


def _gpt_oss_pair(backend: str, version: str, gpu: str, **keys):
    from simulator.scenario.compile import _pairs
    from simulator.fleet.setup import setup_pool
    from simulator.scenario.schema import PoolSpec

    engine = {"backend": backend, "backend_version": version, **keys}
    prefill = PoolSpec(name="p", model="gpt-oss-120b", gpu=gpu, disaggregation={"decode_pool": "d"}, engine=engine)
    decode = PoolSpec(name="d", model="gpt-oss-120b", gpu=gpu, engine=engine)
    (pair,) = _pairs([setup_pool(prefill, 0), setup_pool(decode, 1, decodes_for_another=True)])
    return pair


@pytest.mark.parametrize("backend, version, gpu, layers_of_1000, layers_of_100", [
    # SGLang's hybrid SWA pool (0.5.9 on): the full-attention pages and the SWA pages from the window's
    # start floored to a page: 128 tokens in pages of 1 (H100), 3 pages of 64 (B200's trtllm_mha)
    ("sglang", "0.5.11", "h100-sxm", 18 * 1000 + 18 * 128, 36 * 100),
    ("sglang", "0.5.23", "b200", 18 * 1000 + 18 * 192, 36 * 100),
    # one pool keeping every layer's every token: SGLang's gpt-oss to 0.5.7, TensorRT-LLM
    ("sglang", "0.5.4", "h100-sxm", 36 * 1000, 36 * 100),
    ("trtllm", "1.2.0", "h100-sxm", 36 * 1000, 36 * 100),
])
def test_a_gpt_oss_hand_off_moves_what_the_stacks_pool_keeps_of_its_sliding_window_layers(
        backend, version, gpu, layers_of_1000, layers_of_100):
    """SGLang's hybrid SWA pool sends every full-attention page and, as the request's state, the SWA
    pages from max(0, len − window) floored to a page (disaggregation/prefill.py send_kv_chunk); a pool
    that keeps every layer's every token sends them all (TensorRT-LLM's cacheFormatter.cpp
    getBlockRangeForSending with one window; SGLang's --disable-hybrid-swa-memory). llmsim sent the
    full-attention layers' bytes alone on both stacks."""
    layer_token = 2 * 8 * 64 * 2
    pair = _gpt_oss_pair(backend, version, gpu)
    assert pair.link_bytes.of(1000) == layers_of_1000 * layer_token
    assert pair.link_bytes.of(100) == layers_of_100 * layer_token


@pytest.mark.parametrize("page", [1, 16, 32, 64])
def test_an_sglang_hand_off_charges_the_most_window_pages_any_prompt_length_sends(page):
    """SGLang's prefill and decode servers both take a request's SWA pages from
    max(0, len − window) floored to the page on, which holds from window to window + page − 1
    tokens by where the prompt ends; llmsim charges each hand-off the most of them."""
    pair = _gpt_oss_pair("sglang", "0.5.11", "h100-sxm", block_size=page)
    window = 128

    def sent(tokens: int) -> int:           # SGLang's window pages, in tokens
        return (-(-tokens // page) - max(0, tokens - window) // page) * page

    assert pair.link_bytes.window_tokens == max(sent(n) for n in range(window, window + 2 * page + 1))


def _gpt_oss_pd(version: str, prefill_tp: int, decode_tp: int, **kv_memory) -> dict:
    engine = {"backend": "sglang", "backend_version": version, **({"kv_memory": kv_memory} if kv_memory else {})}
    d = scenario(workload={"num_requests": 3, "arrival": {"type": "poisson", "rate_per_s": 1},
                           "input_tokens": {"dist": "fixed", "value": 1000},
                           "output_tokens": {"dist": "fixed", "value": 4}})
    d["pools"] = [{"name": "prefill", "model": "gpt-oss-120b", "gpu": "h200", "replicas": 1, "tp": prefill_tp,
                   "engine": engine, "disaggregation": {"decode_pool": "decode", "link": {"preset": "infiniband"}}},
                  {"name": "decode", "model": "gpt-oss-120b", "gpu": "h200", "replicas": 1, "tp": decode_tp,
                   "engine": engine}]
    d["classes"] = [{"name": "chat", "pool": "prefill"}]
    return d


def test_sglang_before_0_5_22_refuses_a_hybrid_swa_hand_off_between_pools_of_different_tp(tmp_path, capsys):
    """SGLang 0.5.8-0.5.21's prefill server raises 'PD Disaggregation does NOT support PD different
    TP sizes for non-MLA SWA hybrid models yet' as it sends the SWA state to a decode server of
    another attention tp (disaggregation/mooncake/conn.py and nixl/conn.py); 0.5.22 slices the
    heads (_send_swa_state_slice). A pool without the hybrid pool sends no such state."""
    for version in ("0.5.21", "0.5.8"):   # 0.5.8 runs gpt-oss in the hybrid pool on Hopper (fa3)
        err = cli_error(tmp_path, _gpt_oss_pd(version, 1, 2), capsys)
        assert "pools[0].tp" in err and "engine.swa_handoff_across_tp" in err
    for ok in (_gpt_oss_pd("0.5.22", 1, 2), _gpt_oss_pd("0.5.21", 2, 2), _gpt_oss_pd("0.5.7", 1, 2),
               _gpt_oss_pd("0.5.21", 1, 2, swa_full_tokens_ratio=1.0)):
        assert len(run(ok).requests) == 3


def _llama_pd(prefill: dict, decode: dict) -> dict:
    d = scenario(workload={"num_requests": 3, "arrival": {"type": "poisson", "rate_per_s": 1},
                           "input_tokens": {"dist": "fixed", "value": 1000},
                           "output_tokens": {"dist": "fixed", "value": 4}})
    d["pools"] = [{"name": "prefill", "model": "llama-3.1-8b", "gpu": "h200", "engine": prefill,
                   "disaggregation": {"decode_pool": "decode"}},
                  {"name": "decode", "model": "llama-3.1-8b", "gpu": "h200", "engine": decode}]
    d["classes"] = [{"name": "chat", "pool": "prefill"}]
    return d


def test_a_prefill_pool_hands_its_kv_only_to_a_decode_pool_of_its_own_stack(tmp_path, capsys):
    """No stack's prefill server hands KV to another stack's decode server (SGLang's bootstrap
    server and transfer engine, vLLM's KV connector, TensorRT-LLM's cache transceiver each
    talk to their own kind): a pair of two stacks is refused, not run half one way, half the other."""
    for a, b in (("sglang", "vllm"), ("vllm", "trtllm")):
        err = cli_error(tmp_path, _llama_pd({"backend": a}, {"backend": b}), capsys)
        assert "pools[0].disaggregation.decode_pool" in err and f"runs {a}" in err and f"runs {b}" in err
    assert len(run(_llama_pd({"backend": "sglang"}, {"backend": "sglang"})).requests) == 3
    assert len(run(_llama_pd({}, {"backend": "vllm"})).requests) == 3     # llmsim's generic engine beside one


def test_vllm_hands_kv_over_only_between_servers_of_one_release(tmp_path, capsys):
    """vLLM's NIXL handshake refuses a peer of another vLLM version from 0.13.0 ('NIXL compatibility
    hash mismatch ... different vLLM versions': nixl_connector.py compute_nixl_compatibility_hash
    hashes vllm.__version__, enforce_handshake_compat on by default; read in the 0.13.0, 0.14.0,
    0.19.1 and 0.34.0 wheels); a pool naming no release runs the profile's default one."""
    err = cli_error(tmp_path, _llama_pd({"backend": "vllm"}, {"backend": "vllm", "backend_version": "0.18.0"}), capsys)
    assert "pools[0].disaggregation.decode_pool" in err and "0.19.1" in err and "0.18.0" in err
    err = cli_error(tmp_path, _llama_pd({"backend": "vllm", "backend_version": "0.12.0"},
                                        {"backend": "vllm", "backend_version": "0.13.0"}), capsys)
    assert "0.12.0" in err and "0.13.0" in err
    assert len(run(_llama_pd({"backend": "vllm", "backend_version": "0.19.1"}, {"backend": "vllm"})).requests) == 3
    # SGLang's hand-off compares no release
    assert len(run(_llama_pd({"backend": "sglang", "backend_version": "0.5.9"}, {"backend": "sglang"})).requests) == 3


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_an_sglang_gpt_oss_request_waits_its_window_pages_on_the_link(engine):
    """A 1,000-token gpt-oss-120b prompt handed from an SGLang 0.5.11 prefill server to its decode
    server takes the link's latency and 18 full-attention layers' 1,000 tokens with 18 sliding-window
    layers' 128 (pages of 1 on an H200) at 45 GB/s, under both engines."""
    out = run(_gpt_oss_pd("0.5.11", 1, 1), engine)
    moved = (18 * 1000 + 18 * 128) * 2 * 8 * 64 * 2
    assert [r.kv_transfer for r in out.requests] == [pytest.approx(20e-6 + moved / 45e9)] * 3


def test_sglangs_decode_server_streams_the_prefills_token_without_a_forward_pass():
    """SGLang's decode server takes the prefill server's sampled token with the KV and streams it as
    its prebuilt batch joins the running one (disaggregation/decode.py process_prebuilt), computing
    nothing for it; vLLM's decode replica recomputes the last prompt token. llmsim charged SGLang a
    one-token prefill iteration per request that stalled the running decodes (mixed chunks off)."""
    d = long_prompts(True)
    d["workload"]["num_requests"] = 120
    for p in d["pools"]:
        p["engine"] = {"backend": "sglang", "prefix_cache": False}
    took = run(d)
    d["pools"][1]["engine"]["first_token_from_prefill"] = False
    recomputed = run(d)
    part = lambda o: o.results["llmsim"]["ttft_budget"]["mean"]["first_decode"]  # noqa: E731
    assert part(took) < part(recomputed)
    assert took.results["p99_itl_ms"] < recomputed.results["p99_itl_ms"]


def test_a_decode_replica_with_a_prefix_cache_keeps_one_copy_of_a_shared_prompt():
    """vLLM's decode worker looks a transferred prompt up in its own prefix cache and pulls only the
    blocks it lacks (NIXL connector: get_num_new_matched_tokens counts the local hit); llmsim's decode
    leg held a private copy of every prompt and moved it whole: 40 requests sharing an 8,000-token
    system prompt filled 79 % of the decode replica's KV where one copy takes about 6 %. SGLang's
    decode server keeps no radix cache (engine.decode_prefix_reuse false)."""
    d = long_prompts(True)
    d["workload"].update(num_requests=40, input_tokens={"dist": "fixed", "value": 64},
                         output_tokens={"dist": "fixed", "value": 400},
                         system_prompt={"apps": 1, "tokens": {"dist": "fixed", "value": 8000}})
    d["workload"]["arrival"]["rate_per_s"] = 20
    reuse = run(d)
    d["pools"][1]["engine"] = {"decode_prefix_reuse": False}
    whole = run(d)
    kv = lambda o: o.results["llmsim"]["pools"]["decode"]["max_kv_utilization"]  # noqa: E731
    moved = lambda o: o.results["llmsim"]["pools"]["prefill"]["handoff"]["gb_moved"]  # noqa: E731
    assert kv(reuse) < 0.15 < 0.5 < kv(whole)
    assert moved(reuse) < 0.2 * moved(whole)
    assert reuse.results["completed"] == whole.results["completed"] == 40


def test_a_disaggregated_answer_streams_through_its_decode_pools_server():
    """The client's tokens leave from the decode pool's server, whose response path (engine.response_ms)
    they pay; llmsim charged the prefill pool's, the pool the class names."""
    d = long_prompts(True)
    d["workload"]["num_requests"] = 20
    d["pools"][1]["engine"] = {"response_ms": 50.0}
    slow = run(d)
    d["pools"][1]["engine"] = {"response_ms": 0.0}
    d["pools"][0]["engine"] = {"response_ms": 50.0}
    fast = run(d)
    assert slow.results["mean_ttft_ms"] == pytest.approx(fast.results["mean_ttft_ms"] + 50.0, abs=5.0)
