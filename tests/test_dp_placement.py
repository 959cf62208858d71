"""Attention-DP ranks keep their own prefix caches, and each stack's DP front end places a request
on one rank (simulator/engine/dp_placement.py): hits fall with dp where placement ignores the cache."""
from __future__ import annotations

import itertools
from typing import get_args

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers_engine import run_open
from simulator.engine.config import EngineConfig
from simulator.engine.dp_placement import RULES, RankPlacement, rank_ids, room
from simulator.fleet.setup import prefill_placement
from workloads.request import Request

H = 16


def chat(sessions: int = 10, turns: int = 6, seed: int = 3) -> list[Request]:
    """Sessions of a chat app: a 1,024-token system prompt, then each turn's prompt is the last
    turn's prompt and answer plus 64 new tokens; the sessions' turns interleave in a shuffled
    order, one request every 0.5 s (each ends before the next arrives)."""
    rng = np.random.default_rng(seed)
    fresh = itertools.count(10**6)
    history = {s: tuple(range(64)) for s in range(sessions)}
    out: list[Request] = []
    for _ in range(turns):
        for s in rng.permutation(sessions):
            prompt = history[s] + tuple(next(fresh) for _ in range(4))
            ids = prompt + tuple(next(fresh) for _ in range(2))
            out.append(Request(len(out), 0.5 * len(out), len(prompt) * H, 2 * H, session=int(s), blocks=ids))
            history[s] = ids
    return out


def hit_rate(run) -> float:
    pc = run.stats()[0]["prefix_cache"]
    return pc["hit_tokens"] / pc["prompt_tokens"]


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_sessions_next_turn_misses_when_it_lands_on_another_rank(engine):
    """Round-robin placement (SGLang's default) sends a session's next turn to another rank
    about (dp - 1)/dp of the time, where its history is not cached: the hit rate falls with dp."""
    reqs = chat()
    cfg = EngineConfig(dp_placement="round_robin")
    rates = {dp: hit_rate(run_open(engine, reqs, cfg, 20000, id_block_tokens=H, dp=dp)) for dp in (1, 2, 4)}
    assert rates[1] > rates[2] > rates[4]
    assert rates[1] - rates[4] > 0.1      # 0.93, 0.87, 0.80: older turns and the system prompt still hit


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_shared_system_prompt_is_computed_and_held_once_per_rank(engine):
    """Eight requests sharing a 64-id system prompt, one after another on a replica of four ranks
    in turn: the first on each rank computes it, the next four hit it, and every rank's cache holds it."""
    head = tuple(range(64))
    reqs = [Request(i, i * 1.0, 1100, 10, blocks=head + tuple(1000 * (i + 1) + j for j in range(8)))
            for i in range(8)]
    run = run_open(engine, reqs, EngineConfig(dp_placement="round_robin"), 5000, id_block_tokens=H, dp=4)
    assert [r.cached_tokens for r in run.requests] == [0] * 4 + [1024] * 4
    cache = run.pool.replicas[0].cache
    assert [cache.match(rank_ids(head, r, 4), 1100).ids for r in range(4)] == [64] * 4
    one = run_open(engine, reqs, EngineConfig(), 5000, id_block_tokens=H)
    assert [r.cached_tokens for r in one.requests] == [0] + [1024] * 7
    assert cache.stats()["cached_blocks"] - one.pool.replicas[0].cache.stats()["cached_blocks"] == 3 * 64


def test_a_router_is_answered_for_the_rank_the_request_would_go_to():
    """A cache-aware router asks the replica, not its ranks: it hears the hit the request would
    get on the rank the DP front end would place it on now."""
    head = tuple(range(64))
    reqs = [Request(0, 0.0, 1100, 10, blocks=head + (5000,) * 5)]
    run = run_open("reference", reqs, EngineConfig(dp_placement="round_robin"), 5000, id_block_tokens=H, dp=2)
    rep = run.pool.replicas[0]
    probe = Request(1, 0.0, 1100, 10, blocks=head + (6000,) * 5)
    assert rep.placement.peek(1) == 1 and rep.cached_prefix_tokens(probe) == 0
    rep.placement.place(7, 1100)              # the next arrival would now go to rank 0, which holds the head
    assert rep.cached_prefix_tokens(probe) == 1024
    assert rep.cache_block_tokens is None     # no bound over the requests' own ids: ask every replica


def test_vllm_takes_the_least_queue_score_and_counts_its_pick_at_once():
    p = RankPlacement("queue_score", 3)
    p.running = [2, 0, 1]
    p.waiting = [0, 1, 0]
    assert p.peek(0) == 2                      # scores 2, 4, 1
    assert p.place(0, 10) == 2 and p.waiting == [0, 1, 1]
    assert p.place(0, 10) == 0                 # 2, 4, 5: the lowest rank on a tie
    p.running = [0, 0, 0]
    p.waiting = [0, 0, 0]
    assert p.peek(0) == 0                      # idle: rank 0 every time


@pytest.mark.parametrize("rule", ["queue_score", "active_tokens"])
def test_load_rules_keep_an_idle_replicas_sessions_on_rank_0_and_spread_a_burst(rule):
    """One request at a time finds every rank idle and goes to rank 0, so its cache is all the
    sessions': no hit is lost; a burst is spread over the ranks by the counts its placements raise."""
    reqs = chat()
    cfg = EngineConfig(dp_placement=rule)
    one = hit_rate(run_open("fast", reqs, cfg, 20000, id_block_tokens=H))
    assert hit_rate(run_open("fast", reqs, cfg, 20000, id_block_tokens=H, dp=4)) == one
    p = RankPlacement(rule, 4)
    assert sorted(p.place(0, 1000) for _ in range(8)) == [0, 0, 1, 1, 2, 2, 3, 3]


def test_tensorrt_llm_takes_the_fewest_active_tokens_below_an_even_share():
    p = RankPlacement("active_tokens", 2)
    p.running = [1, 3]
    p.tokens = [5000, 300]
    # expected = max(ceil((4 + 1) / 2), 3) = 3: rank 1 is full, rank 0 takes it though it holds more tokens
    assert p.peek(0) == 0
    p.running = [3, 3]
    assert p.peek(0) == 1                      # both below expected = 4: fewest tokens
    p.tokens = [300, 300]
    p.waiting = [1, 0]
    assert p.peek(0) == 1                      # a token tie goes to fewer requests


def test_the_engine_key_offers_every_rule_and_no_other():
    assert get_args(EngineConfig.model_fields["dp_placement"].annotation) == RULES


def test_vllm_from_0_25_breaks_ties_in_turn_and_from_0_27_weighs_waiting_by_kv_pressure():
    for rule, ranks in (("queue_score", [0, 0, 0]), ("queue_score_rotating", [0, 1, 2])):
        p = RankPlacement(rule, 3)
        got = []
        for _ in range(3):                                     # each ends before the next arrives
            got.append(p.place(0, 10))
            p.ended(got[-1], 10, True)
        assert got == ranks
    p = RankPlacement("kv_weighted_load", 2)
    p.waiting, p.running = [1, 0], [0, 3]
    assert p.peek(0, 0.5) == 0                                 # 1 < 3: no pressure at half full
    assert p.peek(0, 0.9) == 1                                 # 1 + 6 x 0.4 = 3.4 > 3
    p.turn = 1
    p.waiting, p.running = [0, 0], [2, 2]
    assert p.peek(0, 0.9) == 1                                 # a tie: from the rotating start


def test_sglangs_prefill_server_places_by_the_routers_random_room():
    """A disaggregated SGLang prefill pool resolves load_balance_method auto to follow_bootstrap_room:
    bootstrap_room % dp, the room drawn at random per request, so the ranks are taken evenly and a
    session's next turn lands on its last turn's rank 1 time in dp, as under round robin."""
    sglang = EngineConfig(kv_admission="expected_output", dp_placement="round_robin")
    assert prefill_placement(sglang, 4, True).dp_placement == "bootstrap_room"
    assert prefill_placement(sglang, 4, False) is sglang                      # not a prefill server
    assert prefill_placement(sglang, 1, True) is sglang                       # one rank: nothing to place
    vllm = EngineConfig(dp_placement="queue_score")
    assert prefill_placement(vllm, 4, True) is vllm
    p = RankPlacement("bootstrap_room", 4)
    ranks = [p.place(i, 100) for i in range(8000)]
    assert all(abs(ranks.count(r) - 2000) < 150 for r in range(4))           # 4 sigma of a fair draw
    assert [p.peek(i) for i in range(50)] == ranks[:50]                       # a request's room is its own
    assert 0 <= min(map(room, range(1000))) and max(map(room, range(1000))) < 2**63


def test_an_unknown_rule_is_refused_by_its_key():
    with pytest.raises(ValueError, match="dp_placement"):
        RankPlacement("shortest_queue", 2)
    with pytest.raises(ValueError, match="dp_placement"):
        EngineConfig(dp_placement="shortest_queue")


@settings(max_examples=40, deadline=None)
@given(rule=st.sampled_from(RULES), dp=st.sampled_from([2, 3, 4]), seed=st.integers(0, 10**6),
       gap=st.sampled_from([0.01, 0.05, 0.5]))
def test_every_placed_request_is_counted_off_its_rank_when_it_ends(rule, dp, seed, gap):
    """The per-rank counts the rules read come back to zero once every request has ended, on both
    engines alike (finishes, preemptions under a small pool and readmissions included)."""
    reqs = [Request(r.id, r.arrival * gap / 0.5, r.input_tokens, r.output_tokens, session=r.session,
                    blocks=r.blocks) for r in chat(6, 4, seed)]
    cfg = EngineConfig(dp_placement=rule, max_num_batched_tokens=512)
    for engine in ("fast", "reference"):
        p = run_open(engine, reqs, cfg, 160, id_block_tokens=H, dp=dp).pool.replicas[0].placement
        assert p.waiting == [0] * dp and p.running == [0] * dp and p.tokens == [0] * dp
