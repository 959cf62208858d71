"""Routers: settings validated through the registry, session affinity with
bounded loads, and prefix-cache-aware routing, on small fake replicas."""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import Field, ValidationError

from simulator.fleet.routing import (ROUTERS, PrefixAwareParams, RouterParams, SessionAffinityParams, make_router,
                                      register_router, router_params, splitmix64)
from simulator.errors import LlmsimError, from_validation_error
from simulator.scenario.schema import PoolSpec, Scenario
from workloads.request import Request

BLOCK = 16


class FakeReplica:
    """The attributes a router may read. ``cached`` holds block ids; a
    request's cached prefix is its longest run of leading blocks held here,
    at most the prompt less one token, as a real replica's (the last prompt
    token is always computed; the router's bound relies on it)."""

    def __init__(self, index: int, outstanding: int = 0, cached=()):
        self.index = index
        self.outstanding = outstanding
        self.outstanding_tokens = 100 * outstanding
        self.cached = set(cached)
        self.calls = 0

    def cached_prefix_tokens(self, req) -> int:
        self.calls += 1
        if req.blocks is None:
            return 0
        n = 0
        for b in req.blocks:
            if b not in self.cached:
                break
            n += 1
        return min(n * BLOCK, req.input_tokens - 1)


def req(i: int, session: int = -1, blocks=None, input_tokens: int | None = None) -> Request:
    if input_tokens is None:
        input_tokens = BLOCK * len(blocks) if blocks else 64
    return Request(i, 0.0, input_tokens, 32, session=session, blocks=None if blocks is None else tuple(blocks))


def fleet(loads, cached=None):
    cached = cached or {}
    return [FakeReplica(i, load, cached.get(i, ())) for i, load in enumerate(loads)]


def router(spec):
    return make_router(spec, np.random.default_rng(0))


# --- hashing ---------------------------------------------------------------------------

def test_splitmix64_is_the_reference_generator():
    # First outputs of SplitMix64 seeded with 0 (Vigna's reference implementation).
    assert splitmix64(0) == 0xE220A8397B1DCDAF
    assert splitmix64(0x9E3779B97F4A7C15) == 0x6E789E6AA1B965F4


# --- session affinity ------------------------------------------------------------------

def test_session_affinity_is_deterministic():
    reps = fleet([0] * 6)
    a, b = router("session_affinity"), router({"type": "session_affinity"})
    sessions = [s % 40 for s in range(0, 4000, 7)]
    assert [a.choose(req(i, s), reps) for i, s in enumerate(sessions)] == \
        [b.choose(req(i, s), reps) for i, s in enumerate(sessions)]


def test_a_session_stays_on_one_replica_while_under_capacity():
    reps = fleet([3, 3, 3, 3])
    r = router("session_affinity")
    for s in range(50):
        homes = {r.choose(req(1000 * s + k, s), reps) for k in range(20)}
        assert len(homes) == 1


def test_a_full_replica_spills_and_the_session_comes_back():
    reps = fleet([0, 0, 0, 0])
    r = router({"type": "session_affinity", "load_factor": 1.25})
    home = r.choose(req(0, 7), reps)
    # Home holds 10 of the fleet's 10 requests: capacity is ceil(1.25 * 11 / 4) = 4.
    reps[home].outstanding = 10
    other = r.choose(req(1, 7), reps)
    assert other != home
    assert r.choose(req(2, 7), reps) == other   # the spill is itself sticky
    reps[home].outstanding = 0
    assert r.choose(req(3, 7), reps) == home


def test_requests_without_a_session_spread_by_id():
    reps = fleet([0] * 4)
    r = router("session_affinity")
    picks = [r.choose(req(i), reps) for i in range(4000)]
    counts = np.bincount(picks, minlength=4)
    assert counts.min() > 700, counts


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 8), c=st.sampled_from([1.0, 1.1, 1.25, 2.0]), vnodes=st.integers(1, 12),
       ops=st.lists(st.tuples(st.booleans(), st.integers(0, 5), st.integers(0, 10**6)), min_size=1, max_size=150))
def test_bounded_load_is_never_exceeded(n, c, vnodes, ops):
    """Whatever the sessions (a few hot ones here) and completions, the
    chosen replica never holds more than ceil(c * total / n) afterwards."""
    reps = fleet([0] * n)
    r = router({"type": "session_affinity", "load_factor": c, "virtual_nodes": vnodes})
    for i, (arrive, session, pick) in enumerate(ops):
        total = sum(x.outstanding for x in reps)
        if not arrive and total:
            busy = [x for x in reps if x.outstanding]
            busy[pick % len(busy)].outstanding -= 1
            continue
        j = r.choose(req(i, session), reps)
        assert 0 <= j < n
        reps[j].outstanding += 1
        assert reps[j].outstanding <= math.ceil(c * (total + 1) / n)


def _homes(r, reps, keys):
    return {k: reps[r.choose(req(10**6 + k, k), reps)].index for k in keys}


def test_adding_a_replica_moves_about_one_in_n_sessions_all_to_it():
    keys = range(5000)
    r = router("session_affinity")
    before = _homes(r, fleet([0] * 10), keys)
    after = _homes(r, fleet([0] * 11), keys)   # the ring is rebuilt for the new index set
    moved = [k for k in keys if before[k] != after[k]]
    assert all(after[k] == 10 for k in moved)
    assert 0.5 / 11 < len(moved) / len(keys) < 1.6 / 11


def test_removing_a_replica_moves_only_its_sessions():
    keys = range(3000)
    r = router("session_affinity")
    reps = fleet([0] * 8)
    before = _homes(r, reps, keys)
    after = _homes(r, [x for x in reps if x.index != 3], keys)
    assert {k for k in keys if before[k] != after[k]} == {k for k in keys if before[k] == 3}


def test_the_ring_follows_replica_indices_not_positions():
    keys = range(2000)
    r = router("session_affinity")
    reps = fleet([0] * 5)
    before = _homes(r, reps, keys)
    assert _homes(r, list(reversed(reps)), keys) == before
    swapped = reps[:2] + [FakeReplica(42)] + reps[3:]   # same length, another replica set
    after = _homes(r, swapped, keys)
    assert {k for k in keys if before[k] != after[k]} <= {k for k in keys if before[k] == 2 or after[k] == 42}


# --- prefix aware ------------------------------------------------------------------------

def test_prefix_aware_picks_the_replica_holding_the_prefix():
    prefix = list(range(100, 140))          # 40 blocks = 640 tokens
    reps = fleet([2, 0, 3, 1], cached={2: prefix, 3: prefix[:10]})
    r = router("prefix_aware")
    assert r.choose(req(0, blocks=prefix + [7, 8]), reps) == 2
    assert all(x.calls <= 1 for x in reps)


def test_prefix_aware_weighs_cache_against_load():
    prefix = list(range(8))                 # 128 tokens
    reps = fleet([5, 0], cached={0: prefix})
    # 128 cached tokens < 5 extra requests x 128: the idle replica wins...
    assert router("prefix_aware").choose(req(0, blocks=prefix), reps) == 1
    # ...unless load counts for little.
    assert router({"type": "prefix_aware", "load_weight": 10}).choose(req(0, blocks=prefix), reps) == 0


def test_prefix_aware_hotspot_guard_falls_back_to_least_loaded():
    prefix = list(range(200))               # 3200 tokens: outweighs any load below 25 requests
    r = router({"type": "prefix_aware", "load_weight": 1, "balance_abs_threshold": 8,
                "balance_rel_threshold": 1.5})
    cached = {0: prefix}
    assert r.choose(req(0, blocks=prefix), fleet([8, 0, 1], cached)) == 0    # 8 - 0 is not > 8
    assert r.choose(req(0, blocks=prefix), fleet([9, 0, 1], cached)) == 1    # over: least loaded
    assert r.choose(req(0, blocks=prefix), fleet([30, 21, 25], cached)) == 0  # 30 <= 1.5 x 21
    assert r.choose(req(0, blocks=prefix), fleet([32, 21, 25], cached)) == 1  # 32 > 1.5 x 21 and > 21 + 8


def test_prefix_aware_ties_go_to_lower_load_then_lower_index():
    prefix = list(range(4))
    r = router({"type": "prefix_aware", "load_weight": 0})
    assert r.choose(req(0, blocks=prefix), fleet([3, 1, 1, 2], {i: prefix for i in range(4)})) == 1
    assert r.choose(req(0, blocks=prefix), fleet([2, 2, 2], {1: prefix, 2: prefix})) == 1


def test_requests_without_blocks_go_to_the_least_loaded_without_asking_the_cache():
    reps = fleet([4, 2, 2, 7], cached={0: [1, 2, 3]})
    assert router("prefix_aware").choose(req(0, blocks=None), reps) == 1
    assert sum(x.calls for x in reps) == 0


def test_a_full_hit_on_the_least_loaded_replica_stops_the_search():
    prefix = list(range(10))
    reps = fleet([0, 1, 2, 3], cached={i: prefix for i in range(4)})
    assert router("prefix_aware").choose(req(0, blocks=prefix), reps) == 0
    assert [x.calls for x in reps] == [1, 0, 0, 0]


@settings(max_examples=200, deadline=None)
@given(loads=st.lists(st.integers(0, 50), min_size=1, max_size=10), w=st.sampled_from([0, 1, 128, 1e4]),
       blocks=st.one_of(st.none(), st.lists(st.integers(0, 99), min_size=1, max_size=20)))
def test_without_any_cache_prefix_aware_is_least_outstanding(loads, w, blocks):
    reps = fleet(loads)
    expect = router("least_outstanding").choose(req(0, blocks=blocks), reps)
    assert router({"type": "prefix_aware", "load_weight": w}).choose(req(0, blocks=blocks), reps) == expect
    assert all(x.calls <= 1 for x in reps)


@settings(max_examples=200, deadline=None)
@given(loads=st.lists(st.integers(0, 40), min_size=1, max_size=8), w=st.sampled_from([0, 3, 128]),
       held=st.lists(st.integers(0, 12), min_size=8, max_size=8))
def test_prefix_aware_matches_a_brute_force_argmax(loads, w, held):
    """The early stop changes how many replicas are asked, never the answer."""
    prefix = list(range(12))
    reps = fleet(loads, {i: prefix[:held[i]] for i in range(len(loads))})
    r = router({"type": "prefix_aware", "load_weight": w, "balance_abs_threshold": 10**6})
    q = req(0, blocks=prefix)
    got = r.choose(q, reps)
    best = max(range(len(reps)),
               key=lambda i: (min(held[i] * BLOCK, q.input_tokens - 1) - w * loads[i], -loads[i], -i))
    assert got == best


# --- settings through the scenario ---------------------------------------------------------

BASE = {
    "name": "t",
    "workload": {"num_requests": 5, "arrival": {"type": "poisson", "rate_per_s": 1},
                 "input_tokens": {"dist": "fixed", "value": 8}, "output_tokens": {"dist": "fixed", "value": 8}},
    "pools": [{"model": "llama-3-8b", "gpu": "h100-sxm"}],
}


def scenario_with(router_value):
    data = copy.deepcopy(BASE)
    data["pools"][0]["router"] = router_value
    return data


def error_of(data) -> str:
    with pytest.raises(ValidationError) as ei:
        Scenario.model_validate(data)
    return from_validation_error(ei.value, "s.yaml", data).render()


def test_string_and_mapping_forms_validate_to_the_same_settings():
    a = Scenario.model_validate(scenario_with("prefix_aware")).pools[0].router
    b = Scenario.model_validate(scenario_with({"type": "prefix_aware"})).pools[0].router
    assert a == b == PrefixAwareParams()
    c = Scenario.model_validate(scenario_with({"type": "prefix_aware", "load_weight": 7})).pools[0].router
    assert isinstance(c, PrefixAwareParams) and c.load_weight == 7
    s = Scenario.model_validate(scenario_with({"type": "session_affinity", "virtual_nodes": 16})).pools[0].router
    assert s == SessionAffinityParams(virtual_nodes=16)
    assert PoolSpec(model="m", gpu="g").router == RouterParams(type="round_robin")


def test_settings_survive_a_dump_and_reload():
    sc = Scenario.model_validate(scenario_with({"type": "prefix_aware", "balance_abs_threshold": 3}))
    dumped = sc.model_dump()
    assert dumped["pools"][0]["router"] == {"type": "prefix_aware", "load_weight": 128.0,
                                            "balance_abs_threshold": 3, "balance_rel_threshold": 1.5}
    assert Scenario.model_validate(dumped) == sc


@pytest.mark.parametrize("value, fragments", [
    ({"type": "prefix_aware", "lod_weight": 1}, ["s.yaml", "pools[0].router.lod_weight", "unknown key"]),
    ({"type": "prefix_aware", "load_weight": -1}, ["pools[0].router.load_weight", "greater than or equal to 0"]),
    ({"type": "session_affinity", "load_factor": 0.5}, ["pools[0].router.load_factor", "1"]),
    ({"type": "session_affinity", "virtual_nodes": "many"}, ["pools[0].router.virtual_nodes", "integer"]),
    ({"type": "round_robin", "load_weight": 1}, ["pools[0].router.load_weight", "unknown key"]),
    ("fastest", ["pools[0].router", "unknown router", "fastest", "round_robin", "prefix_aware", "session_affinity"]),
    ({"type": "fastest"}, ["pools[0].router.type", "unknown router", "fastest", "least_outstanding"]),
    ({"load_weight": 1}, ["pools[0].router.type", "required"]),
    (3, ["pools[0].router", "router name or a mapping"]),
])
def test_bad_router_settings_name_their_key(value, fragments):
    msg = error_of(scenario_with(value))
    for f in fragments:
        assert f in msg, (f, msg)


def test_make_router_accepts_names_mappings_and_validated_settings():
    rng = np.random.default_rng(0)
    for spec in ["prefix_aware", {"type": "prefix_aware", "load_weight": 2}, PrefixAwareParams(load_weight=2)]:
        r = make_router(spec, rng)
        assert type(r).__name__ == "PrefixAware"
    assert make_router(PrefixAwareParams(load_weight=2), rng).w == 2
    # A base RouterParams naming a router with settings is re-validated into its model (defaults filled).
    assert make_router(RouterParams(type="session_affinity"), rng).c == 1.25
    with pytest.raises(LlmsimError, match="unknown router.*round_robin"):
        make_router("fastest", rng)
    with pytest.raises(LlmsimError) as ei:
        make_router({"type": "prefix_aware", "lod_weight": 1}, rng)
    assert ei.value.key_path == "lod_weight"


@pytest.fixture
def plugin_router():
    class StickyParams(RouterParams):
        """A test router's settings."""
        to: int = Field(default=0, ge=0, description="where everything goes")

    @register_router("sticky_test", params=StickyParams)
    class Sticky:
        def __init__(self, rng, params):
            self.to = params.to

        def choose(self, req, replicas):
            return min(self.to, len(replicas) - 1)

    yield StickyParams
    del ROUTERS["sticky_test"]


def test_a_plugin_router_validates_through_poolspec(plugin_router):
    sc = Scenario.model_validate(scenario_with({"type": "sticky_test", "to": 2}))
    assert isinstance(sc.pools[0].router, plugin_router) and sc.pools[0].router.to == 2
    assert make_router(sc.pools[0].router, np.random.default_rng(0)).choose(req(0), fleet([0] * 4)) == 2
    assert "pools[0].router.to" in error_of(scenario_with({"type": "sticky_test", "to": -1}))
    assert "pools[0].router.too" in error_of(scenario_with({"type": "sticky_test", "too": 1}))
    assert "sticky_test" in error_of(scenario_with("stiky_test"))
    schema = Scenario.model_json_schema()
    assert "sticky_test" in str(schema["$defs"]["PoolSpec"]["properties"]["router"])


def test_a_plugin_without_settings_is_built_with_the_rng_alone():
    @register_router("rng_only_test")
    class RngOnly:
        def __init__(self, rng):
            self.rng = rng

        def choose(self, req, replicas):
            return 0

    try:
        assert Scenario.model_validate(scenario_with("rng_only_test")).pools[0].router.type == "rng_only_test"
        rng = np.random.default_rng(0)
        assert make_router("rng_only_test", rng).rng is rng
    finally:
        del ROUTERS["rng_only_test"]


@pytest.mark.parametrize("answer", [-1, 4, 1.0, True, "0", None])
def test_a_plugin_routers_answer_must_be_a_position_in_the_list(plugin_router, answer):
    """A plug-in router answering -1 silently sent every request to the last replica (Python's index from the
    end); 4 of 4, a float or a replica ended the run in a traceback from the pool."""
    router = make_router({"type": "sticky_test"}, np.random.default_rng(0))
    router.router.choose = lambda req, replicas: answer
    with pytest.raises(LlmsimError, match=r"router 'sticky_test' \(.*Sticky\): choose returned .* for 4 replicas; "
                                          r"expected the position of one in the list it was given, an int from 0 to 3"):
        router.choose(req(0), fleet([0] * 4))
    router.router.choose = lambda req, replicas: np.int64(3)
    assert router.choose(req(0), fleet([0] * 4)) == 3


def test_a_plugin_router_that_cannot_be_built_as_registered_is_refused():
    """Registered with params= but written as __init__(self, params), the router ended the run in a TypeError."""
    class NoRngParams(RouterParams):
        """A test router's settings."""

    @register_router("no_rng_test", params=NoRngParams)
    class NoRng:
        def __init__(self, params):
            self.params = params

        def choose(self, req, replicas):
            return 0

    try:
        with pytest.raises(LlmsimError, match=r"router 'no_rng_test' .* is built as .*NoRng\(rng, params\), as it was "
                                              r"registered with params=, and its __init__ does not take that"):
            make_router("no_rng_test", np.random.default_rng(0))
    finally:
        del ROUTERS["no_rng_test"]


def test_a_plugin_may_not_take_a_built_in_routers_name():
    """A plug-in registering round_robin replaced the built-in for every pool naming it, unsaid."""
    built_in = ROUTERS["round_robin"]

    class RoundRobin:
        def __init__(self, rng):
            pass

        def choose(self, req, replicas):
            return 0

    with pytest.raises(TypeError, match=r"router 'round_robin' is simulator\.fleet\.routing\.load\.RoundRobin's; "
                                        r"register .*test_routing.*RoundRobin under a name of its own"):
        register_router("round_robin")(RoundRobin)
    assert ROUTERS["round_robin"] is built_in
    register_router("round_robin")(built_in.factory)       # the same code registered again is no clash
    assert ROUTERS["round_robin"].factory is built_in.factory


def test_params_must_subclass_router_params():
    with pytest.raises(TypeError):
        register_router("bad_test", params=dict)
    assert "bad_test" not in ROUTERS


def test_json_schema_accepts_names_and_settings_and_rejects_typos():
    jsonschema = pytest.importorskip("jsonschema")
    schema = Scenario.model_json_schema()
    v = jsonschema.validators.validator_for(schema)(schema)
    for good in ["prefix_aware", {"type": "prefix_aware", "load_weight": 3}, {"type": "round_robin"},
                 {"type": "session_affinity", "virtual_nodes": 10}]:
        assert v.is_valid(scenario_with(good)), good
    for bad in ["fastest", {"type": "prefix_aware", "lod_weight": 1}, {"type": "round_robin", "load_weight": 1},
                {"type": "session_affinity", "load_weight": 1}]:
        assert not v.is_valid(scenario_with(bad)), bad


def test_router_params_keeps_validated_settings_and_revalidates_others():
    """Settings already validated as their router's model pass through (a
    scenario rebuilt from another's pools keeps them as set); settings of
    another model are validated again as the named router's: a bare
    ``RouterParams`` gets that router's defaults, and one naming no
    registered router is refused."""
    p = PrefixAwareParams(type="prefix_aware", load_weight=5)
    assert router_params(p) is p
    assert Scenario.model_validate(scenario_with(p)).pools[0].router is p
    bare = router_params(RouterParams(type="prefix_aware"))
    assert type(bare) is PrefixAwareParams and bare == router_params("prefix_aware")
    with pytest.raises(ValidationError, match="unknown router"):
        router_params(RouterParams(type="fastest"))
