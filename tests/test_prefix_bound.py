"""prefix_aware's bounds on cached prefixes (PrefixBound) are exact.

The router skips a replica that could not beat the best score even with
the largest hit it could have, and stops once no replica left could. Those
bounds come from a radix tree of everything routed, marked with where it
went and rebuilt from the replicas now and then; if one ever fell below a
replica's real hit the router could skip the replica it should have chosen. So, on workloads with shared heads, chat-like chains
(a request extends an earlier one's prompt and output), evictions under KV
pressure, cancellations, rebuilds forced every few requests, and lone
requests whose own ids the tree leaves out (``Request.shared_ids``):

* at every routing decision each replica's bound is ≥ its hit, and the
  overall bound ≥ each replica's bound;
* every request ends exactly as when the router asks every replica.
"""
from __future__ import annotations

import itertools
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers_engine import compare_runs, run_open, workloads
from simulator.fleet.routing import prefix_bound
from simulator.fleet.routing.prefix_bound import PrefixBound
from test_prefix_cache import SETTINGS, cache_configs
from workloads.request import Request


@st.composite
def chained(draw, H: int):
    """Requests whose ids are an app's head, or an earlier request's whole
    chain (a next chat turn), followed by ids of their own."""
    reqs = draw(workloads(min_n=3, max_n=40, max_in=1500, max_out=120))
    fresh = itertools.count(10_000)
    heads = [tuple(next(fresh) for _ in range(64)) for _ in range(draw(st.integers(1, 3)))]
    out: list[Request] = []
    extended: set[int] = set()
    own_from: list[int] = []
    for r in reqs:
        full = (r.input_tokens + r.output_tokens) // H
        if out and draw(st.booleans()):
            prev = draw(st.sampled_from(out))
            extended.add(prev.id)
            base = prev.blocks[:min(len(prev.blocks), r.input_tokens // H)]
        else:
            base = draw(st.sampled_from(heads))[:draw(st.integers(0, r.input_tokens // H))]
        ids = base + tuple(next(fresh) for _ in range(max(0, full - len(base))))
        out.append(Request(r.id, r.arrival, r.input_tokens, r.output_tokens, blocks=ids[:full]))
        own_from.append(len(base))
    # A request no later one extends is a lone request: its ids past the
    # head are its own (Request.shared_ids), which the tree leaves out.
    for r, n in zip(out, own_from):
        if r.id not in extended and draw(st.booleans()):
            r.shared_ids = min(n, len(r.blocks))
    return out


def _checked_bounds(real):
    def bounds(self, blocks, prompt, replicas):
        known = real(self, blocks, prompt, replicas)
        for r in replicas:
            if r.cache is not None:
                r._sync_cache(r.env.now)
                hit = r.cache.cached_tokens(blocks, prompt)
                assert hit <= known.of(r.index) <= known.best, "a bound is below a replica's hit"
        return known
    return bounds


def _ask_everyone(self, blocks, prompt, replicas):
    return None    # nothing known: the router asks every replica, as before the bounds


@settings(max_examples=150, **SETTINGS)
@given(data=st.data())
def test_the_bound_covers_every_replica_and_changes_no_choice(data):
    cfg = data.draw(cache_configs(), label="cfg")
    H = cfg.block_size
    reqs = data.draw(chained(H), label="requests")
    biggest = max(-(-(r.input_tokens + r.output_tokens) // cfg.block_size) for r in reqs)
    nb = data.draw(st.integers(max(1, biggest // 2), biggest * 3), label="num_blocks")
    cancels = [(r.arrival + data.draw(st.floats(0.0, 0.3, allow_nan=False)), r.id)
               for r in reqs if data.draw(st.integers(0, 4)) == 0]
    kw = dict(replicas=data.draw(st.integers(2, 4), label="replicas"), router="prefix_aware",
              id_block_tokens=H, cancels=cancels)
    rebuild_at = data.draw(st.sampled_from([0, 8, 200]), label="MIN_REBUILD")
    with mock.patch.object(prefix_bound, "MIN_REBUILD", rebuild_at), \
            mock.patch.object(PrefixBound, "bounds", _checked_bounds(PrefixBound.bounds)):
        bounded = run_open("fast", reqs, cfg, nb, **kw)
    with mock.patch.object(PrefixBound, "bounds", _ask_everyone):
        everyone = run_open("fast", reqs, cfg, nb, **kw)
    problems = compare_runs(bounded, everyone)
    assert not problems, "\n".join(problems[:12])


def test_rebuilds_keep_the_tree_bounded_by_what_replicas_hold():
    """Many one-off chains through a small cache: the tree is rebuilt and
    stays near what the replicas hold, instead of growing with the run."""
    from simulator.engine.config import EngineConfig

    reqs = [Request(i, i * 0.01, 640, 16, blocks=(1, 2, 3) + tuple(range(1000 + 100 * i, 1000 + 100 * i + 38)))
            for i in range(300)]
    seen: list[PrefixBound] = []
    real = PrefixBound.bounds

    def spy(self, blocks, prompt, replicas):
        seen.append(self)
        return real(self, blocks, prompt, replicas)

    with mock.patch.object(prefix_bound, "MIN_REBUILD", 500), mock.patch.object(PrefixBound, "bounds", spy):
        run = run_open("fast", reqs, EngineConfig(prefix_cache_capacity_tokens=16 * 200), 2000, replicas=2,
                       router="prefix_aware", id_block_tokens=16)
    bound = seen[-1]
    assert all(r.status.name == "FINISHED" for r in run.requests)
    # Each replica caches at most 200 evictable ids, plus the chains of the
    # requests it holds; without rebuilds the tree would hold all 300 x 38 + 3.
    assert bound.limit > 500, "never rebuilt"
    assert bound.size <= bound.limit + 41 and bound.limit < 300 * 38 / 4


def _dau_windows():
    """A 10M-DAU window (one shared system prompt) and one with four
    Zipf-popular apps on 6 replicas whose caches are capped (evictions)."""
    from pathlib import Path

    from simulator.scenario.load import load_scenario

    dau = Path(__file__).resolve().parent.parent / "scenarios" / "dau-10m.yaml"
    apps = ["workload.system_prompt.apps=4", "workload.system_prompt.popularity={type: zipf, s: 1.1}",
            "workload.system_prompt.tokens={dist: uniform, min: 500, max: 3000}", "pools.chat.replicas=6",
            "pools.chat.engine.prefix_cache_capacity_tokens=60000"]
    for sets in (["workload.duration_s=40"], ["workload.duration_s=40", *apps]):
        yield load_scenario(dau, sets)


def _same_requests(a, b):
    assert len(a.requests) > 1000
    assert [(r.replica, r.cached_tokens, r.first_token, r.finish) for r in a.requests] == \
           [(r.replica, r.cached_tokens, r.first_token, r.finish) for r in b.requests]
    assert len({r.replica for r in a.requests}) > 1


@pytest.fixture(scope="module")
def dau_runs():
    """Each DAU window (:func:`_dau_windows`) with its run as llmsim runs it, which both tests below
    compare a changed run against (they only read it)."""
    from simulator.runner import simulate

    return [(sc, path, simulate(sc, source=path)) for sc, path in _dau_windows()]


def test_lone_requests_route_as_if_all_their_ids_were_shared(dau_runs):
    """Leaving a lone request's own ids out of the tree changes no decision:
    the DAU windows end request for request as when every id is entered."""
    from simulator.runner import simulate
    from workloads.system_prompts import Apps

    real = Apps.attach

    def all_shared(self, req, app):
        real(self, req, app)
        req.shared_ids = None

    for sc, path, own in dau_runs:
        with mock.patch.object(Apps, "attach", all_shared):
            shared = simulate(sc, source=path)
        _same_requests(own, shared)
        # and it did leave them out: the tree holds the system prompts only
        assert own.pool.router.bound.size < 500 < shared.pool.router.bound.size


def test_placeholder_ids_change_nothing(dau_runs):
    """A lone request's own ids past the first are shared placeholders
    (workloads.block_ids.own_ids); with a unique id for every block instead,
    the DAU windows end request for request the same, with the same cache
    statistics (hits, evictions)."""
    from simulator.runner import simulate
    from workloads import system_prompts

    def unique(base, start, n):
        return tuple(range(base, base + max(n, 0)))

    for sc, path, held in dau_runs:
        with mock.patch.object(system_prompts, "own_ids", unique):
            distinct = simulate(sc, source=path)
        _same_requests(held, distinct)
        assert held.results["llmsim"]["prefix_cache"] == distinct.results["llmsim"]["prefix_cache"]
    assert held.results["llmsim"]["prefix_cache"]["evicted_blocks"] > 0   # the capped window evicts
