"""``llmsim run --shards N``: the split, the exactness of the merge, bad input."""
from __future__ import annotations

import numpy as np
import pytest
import yaml
from hypothesis import given, settings, strategies as st

from simulator.errors import LlmsimError
from simulator.fleet.split import ShareSplit
from simulator.metrics.column_files import ColumnFiles
from simulator.metrics.percentiles import sample_percentile
from simulator.planning.executors import ExecutorOptions, make_executor
from simulator.runner import simulate
from simulator.scenario.load import load_scenario
from simulator.sharding import plan_shards, run_sharded
from simulator.sharding.merge import merge_outcomes
from simulator.sharding.shard import ShardJob, run_shard
from simulator.sharding.split import _SHARD_SALT, shard_index, shard_mask
from workloads.request import Request, Status

WALL = {"shards"}   # what differs by design between a sharded and a plain run
#: a small static fleet with prefix-aware routing (open loop, no sessions)
DAU = ["workload.duration_s=8", "pools.chat.replicas=4"]
#: chat sessions on session_affinity, two pools, classes, no autoscaling
CHAT = ["workload.duration_s=60", "workload.lead_in_s=0", "pools.free.autoscaling=null", "pools.paid.autoscaling=null",
        "pools.free.replicas=4", "pools.paid.replicas=2"]


def _strip(d):
    if isinstance(d, dict):
        return {k: _strip(v) for k, v in d.items() if k not in WALL}
    if isinstance(d, list):
        return [_strip(v) for v in d]
    return d


def _in_process():
    return make_executor("local", ExecutorOptions(workers=1))


def _records(requests):
    def same(v):     # NaN (a refused request's admission) compares unequal to itself
        return None if isinstance(v, float) and v != v else v
    return [tuple(map(same, (r.id, r.arrival, r.admitted, r.first_token, r.finish, r.input_tokens, r.output_tokens,
                             int(r.status), r.replica, r.pool, r.klass, r.session, r.cached_tokens, r.preemptions)))
            for r in requests]


# the gateway refusing the last requests (429): the window runs to the last arrival in both (the shard's
# ended at its pools' last event, and billed 0.85 s of an 8 s run)
LIMITED = ["workload.duration_s=8", "pools.chat.replicas=4", "workload.arrival.rate_per_s=5",
           "classes=[{name: consumer, share: 1.0, rate_limit: {requests_per_min: 6, burst_s: 10}}]",
           "workload.output_tokens={dist: fixed, value: 4}"]


@pytest.mark.parametrize("name, sets", [("dau-10m", DAU), ("chatbot", ["workload.duration_s=60", "workload.lead_in_s=0"]),
                                        ("dau-10m", LIMITED)])
def test_one_shard_is_the_plain_run_bit_for_bit(name, sets):
    sc, path = load_scenario(name, sets)
    plain = simulate(sc, source=path)
    with _in_process() as ex:
        sharded = run_sharded(sc, 1, source=path, executor=ex)
    assert _strip(sharded.results) == _strip(plain.results)
    assert _records(sharded.requests) == _records(plain.requests)
    assert sharded.timeline.equals(plain.timeline)


def _shard_runs(sc, path, n):
    """Each shard simulated on its own, outside the sharding machinery: the
    shard's scenario and its subset of the workload, straight through simulate()."""
    plan = plan_shards(sc, n)
    return [simulate(s, source=path, subset=sub) for s, sub in zip(plan.scenarios, plan.subsets)]


def test_a_sharded_trace_is_held_to_the_run_limits_whole(tmp_path, monkeypatch):
    """Each shard checked only the rows it kept, so a trace past the request limit ran in two halves."""
    import simulator.runsize as runsize
    (tmp_path / "t.csv").write_text("timestamp,input_tokens,output_tokens\n"
                                    + "".join(f"{i * 0.1},200,20\n" for i in range(60)))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({
        "name": "t", "workload": {"arrival": {"type": "trace", "path": "t.csv"}},
        "pools": [{"name": "p", "model": "llama-3.1-8b", "gpu": "h100-sxm", "replicas": 2}]}))
    sc, path = load_scenario(tmp_path / "s.yaml")
    monkeypatch.setattr(runsize, "MAX_REQUESTS", 40)
    for run in (lambda: simulate(sc, source=path), lambda: run_sharded(sc, 2, source=path, executor=_in_process())):
        with pytest.raises(LlmsimError, match="60 requests"):
            run()


def test_shards_draw_network_delays_of_their_own():
    """Each shard drew the same delays from the class table's law (one stream, seeded alike), so the
    fleet's tail was sampled N times less; a single shard keeps the plain run's stream."""
    sc, path = load_scenario("quickcode", ["workload.duration_s=10"])
    delays = [[q.net_in for q in sorted(run.requests, key=lambda q: q.arrival)[:8]] for run in _shard_runs(sc, path, 2)]
    assert all(len(d) == 8 and min(d) > 0 for d in delays) and delays[0] != delays[1]


@pytest.mark.parametrize("name, sets, n", [("dau-10m", DAU, 2), ("chatbot", CHAT, 2)])
def test_sharded_run_is_the_union_of_its_shards(name, sets, n):
    sc, path = load_scenario(name, sets)
    with _in_process() as ex:
        merged = run_sharded(sc, n, source=path, executor=ex)
    alone = _shard_runs(sc, path, n)
    # the same records, field for field (ids and replica indices as the merge numbers them)
    key = lambda r: (r.arrival, r.session, r.input_tokens, r.output_tokens)  # noqa: E731
    want = sorted((r for run in alone for r in run.requests), key=key)
    got = sorted(merged.requests, key=key)
    strip = lambda recs: [rec[1:8] + rec[9:] for rec in _records(recs)]  # noqa: E731 (without id and replica)
    assert strip(got) == strip(want)
    # the union of the shards is the whole workload: every lone request once,
    # or every session of the unsharded run once
    plain = simulate(sc, source=path)
    if sc.workload.session is None:
        assert sorted(r.id for r in merged.requests) == [r.id for r in plain.requests]
    else:
        assert {r.session for r in merged.requests} == {r.session for r in plain.requests}
    # GPU-hours and cost add up; a static fleet is billed to the end of the latest shard
    cost = merged.results["llmsim"]["cost"]
    assert cost["gpu_hours"] == pytest.approx(plain.results["llmsim"]["cost"]["gpu_hours"]
                                              * merged.results["llmsim"]["simulated_seconds"]
                                              / plain.results["llmsim"]["simulated_seconds"])
    assert merged.results.keys() == plain.results.keys()
    assert set(merged.results["llmsim"]) == set(plain.results["llmsim"]) | {"shards"}


def test_merged_percentiles_are_those_of_the_concatenated_tables():
    sc, path = load_scenario("dau-10m", DAU)
    plan = plan_shards(sc, 2)
    outcomes = [run_shard(ShardJob(s, str(path), "fast", sub)) for s, sub in zip(plan.scenarios, plan.subsets)]
    cols = [dict(o.columns) for o in outcomes]          # the merge consumes the outcomes' columns
    sizes = [o.requests for o in outcomes]
    out = merge_outcomes(plan, outcomes, source=path)
    assert not any(o.columns for o in outcomes), "the merge should move the columns, not copy them"
    done = [c["status"] == int(Status.FINISHED) for c in cols]
    ttft = np.concatenate([(c["first_token"] - c["arrival"]) * 1000.0 for c in cols])[np.concatenate(done)]
    for p in (50, 95, 99):
        assert out.results[f"{'median' if p == 50 else f'p{p}'}_ttft_ms"] == sample_percentile(ttft, p)
    # and not the average of the shards' percentiles (which would be a different number)
    per_shard = [sample_percentile(((c["first_token"] - c["arrival"]) * 1000.0)[d], 99) for c, d in zip(cols, done)]
    assert out.results["p99_ttft_ms"] != pytest.approx(np.mean(per_shard), rel=1e-9)
    assert out.results["completed"] == int(sum(d.sum() for d in done))
    assert len(out.requests) == sum(sizes) == out.results["llmsim"]["shards"]["requests_per_shard"][0] + sizes[1]


def test_local_pool_and_in_process_shards_agree():
    sc, path = load_scenario("dau-10m", DAU)
    with _in_process() as one, make_executor("local", ExecutorOptions(workers=2)) as two:
        a = run_sharded(sc, 2, source=path, executor=one)
        b = run_sharded(sc, 2, source=path, executor=two)
    assert _strip(a.results) == _strip(b.results)


@pytest.mark.parametrize("name, sets", [("dau-10m", DAU), ("chatbot", CHAT)])
def test_records_spilled_to_disk_give_the_same_run_bit_for_bit(name, sets):
    """A merge that spills every shard's columns (spill_rows=0) reads them
    back column by column: the same figures and the same table as one that
    holds them in memory, and the temporary files go with the run."""
    sc, path = load_scenario(name, sets)
    with _in_process() as ex:
        held = run_sharded(sc, 2, source=path, executor=ex)
        spilled = run_sharded(sc, 2, source=path, executor=ex, spill_rows=0)
    cols = spilled.requests.columns
    assert isinstance(cols, ColumnFiles) and len(spilled.requests) == len(held.requests)
    assert _strip(spilled.results) == _strip(held.results)
    assert _records(spilled.requests) == _records(held.requests)
    for name_ in held.requests.columns:
        a, b = held.requests.columns[name_], cols[name_]
        assert a.dtype == b.dtype and a.tolist() == b.tolist(), name_
    root = cols.root
    assert root.is_dir()
    del spilled, cols
    import gc
    gc.collect()
    assert not root.exists()


@given(keys=st.lists(st.integers(0, 2**63 - 1), min_size=1, max_size=50), n=st.integers(1, 9),
       seed=st.integers(0, 2**32))
@settings(max_examples=60, deadline=None)
def test_vectorised_split_is_the_class_split_hash(keys, n, seed):
    split = ShareSplit([1.0] * n, seed, _SHARD_SALT)
    want = [split.pick(Request(0, 0.0, 1, 1, session=k)) for k in keys]
    assert shard_index(np.array(keys, dtype=np.uint64), n, seed).tolist() == want
    for i in range(n):
        assert shard_mask(np.array(keys, dtype=np.uint64), n, seed, i).tolist() == [w == i for w in want]


@given(seed=st.integers(0, 1000), n=st.integers(2, 4))
@settings(max_examples=8, deadline=None)
def test_shards_partition_the_workload(seed, n):
    sc, path = load_scenario("dau-10m", ["workload.duration_s=2", f"seed={seed}", "pools.chat.replicas=4"])
    plan = plan_shards(sc, n)
    from workloads.drivers import make_source

    def requests(src):   # with their block ids, which an open loop attaches at arrival
        for i, r in enumerate(src.requests):
            src.attach(i, r)
        return src.requests

    whole = requests(make_source(sc.workload, sc.seed))
    parts = [requests(make_source(sc.workload, sc.seed, subset=sub)) for sub in plan.subsets]
    assert all(r.blocks for r in whole)
    ids = sorted(r.id for p in parts for r in p)
    assert ids == [r.id for r in whole]
    by_id = {r.id: r for r in whole}
    assert all((r.arrival, r.input_tokens, r.output_tokens, r.blocks) ==
               (by_id[r.id].arrival, by_id[r.id].input_tokens, by_id[r.id].output_tokens, by_id[r.id].blocks)
               for p in parts for r in p)


def test_replicas_are_divided_and_an_uneven_split_is_said():
    sc, _ = load_scenario("dau-10m", ["pools.chat.replicas=13"])
    plan = plan_shards(sc, 4)
    assert plan.replicas == {"chat": [4, 3, 3, 3]} and not plan.even
    assert [s.pools[0].replicas for s in plan.scenarios] == [4, 3, 3, 3]
    assert plan_shards(sc, 13).even


@pytest.mark.parametrize("name, sets, n, where", [
    ("dau-10m", ["pools.chat.replicas=13"], 14, "pools[0].replicas"),
    ("chatbot", ["workload.lead_in_s=0"], 2, "pools[0].autoscaling"),
    ("chatbot", [], 2, "workload.lead_in_s"),
    ("dau-10m", ["workload.duration_s=null", "workload.num_requests=10",
                 "workload.arrival={type: concurrency, concurrency: 4}"], 2, "workload.arrival"),
    ("dau-10m", [], 0, "--shards"),
])
def test_fleets_that_cannot_be_sharded_are_refused(name, sets, n, where):
    sc, _ = load_scenario(name, sets)
    with pytest.raises(LlmsimError) as e:
        plan_shards(sc, n)
    assert e.value.key_path == where


def test_a_sharded_run_writes_the_same_table_as_a_plain_one(tmp_path, cli, monkeypatch):
    """``llmsim run --shards 2 -o DIR`` writes the per-request table and the
    plots from the merged columns (no Request objects are rebuilt); one shard
    writes exactly the plain run's table."""
    import pandas as pd

    sets = [a for s in DAU for a in ("--set", s)]
    assert cli("run", "dau-10m", *sets, "-o", tmp_path / "plain", "--exit-zero").code == 0
    for shards, name in (("1", "one"), ("2", "two")):
        assert cli("run", "dau-10m", *sets, "--shards", shards, "-o", tmp_path / name, "--workers", "1",
                   "--exit-zero").code == 0
    tables = {k: pd.read_parquet(next((tmp_path / k).glob("requests.*"))) for k in ("plain", "one", "two")}
    pd.testing.assert_frame_equal(tables["one"], tables["plain"])
    two = tables["two"]
    assert len(two) == len(tables["plain"]) and set(two["status"]) <= {"finished", "rejected", "cancelled"}
    res = __import__("json").loads((tmp_path / "two" / "results.json").read_text())
    done = two[two["status"] == "finished"]
    assert res["completed"] == len(done)
    assert res["p99_ttft_ms"] == sample_percentile(done["ttft_ms"].to_numpy(), 99)
    assert list((tmp_path / "two").glob("*.png")), "the plots are drawn from the merged columns too"
    # a merge whose columns went to disk writes the same table and figures
    monkeypatch.setattr("simulator.sharding.merge.SPILL_ROWS", 0)
    assert cli("run", "dau-10m", *sets, "--shards", "2", "-o", tmp_path / "disk", "--workers", "1", "--exit-zero").code == 0
    pd.testing.assert_frame_equal(pd.read_parquet(next((tmp_path / "disk").glob("requests.*"))), two)
    assert _strip(__import__("json").loads((tmp_path / "disk" / "results.json").read_text())) == _strip(res)


@pytest.mark.parametrize("n", [3, 7])
def test_dealt_rows_are_what_each_shard_would_draw_itself(n):
    """run_sharded draws the fleet's lone requests once and deals them
    (simulator.sharding.predraw); each shard's rows must equal its own draw
    of the whole workload cut by its mask, row for row, with every request
    dealt exactly once."""
    from simulator.sharding.predraw import dealt_rows
    from workloads.spec import spawn_streams

    sc, path = load_scenario("dau-10m", ["workload.duration_s=20", "workload.system_prompt.apps=3",
                                         "workload.system_prompt.tokens={dist: uniform, min: 100, max: 900}"])
    plan = plan_shards(sc, n)
    dealt = dealt_rows(sc, plan.subsets)
    assert dealt is not None and len(dealt) == n
    wl = sc.workload
    for sub, rows in zip(plan.subsets, dealt):
        s = spawn_streams(sc.seed)
        own = wl.lone_rows(s, wl.draw_apps(s), sub.requests)
        for name, mine, theirs in zip(rows._fields, rows, own):
            assert np.array_equal(mine, theirs), name
    ids = np.sort(np.concatenate([r.ids for r in dealt]))
    assert np.array_equal(ids, np.arange(len(ids))) and len(ids) > 1000


def test_session_workloads_are_not_dealt():
    """A session's turns depend on the fleet: its shard draws its plans itself."""
    from simulator.sharding.predraw import dealt_rows

    sc, _ = load_scenario("chatbot", CHAT)
    assert sc.workload.session is not None and dealt_rows(sc, (None, None)) is None
