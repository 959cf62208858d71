"""Attention-DP ranks keep their own prefix caches, and each stack's DP front end places a request
on one rank (simulator/engine/dp_placement.py): hits fall with dp where placement ignores the cache."""
from __future__ import annotations

import itertools
from typing import Optional
from typing import get_args

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers_engine import cost_model, run_open
from workloads.drivers import OpenLoop
from simulator.engine.config import EngineConfig
from simulator.engine.dp_placement import RULES, RankPlacement, rank_ids, room
from simulator.fleet.disaggregation import HandoffBytes, KvLinkSpec, PrefillDecode
from simulator.fleet.pool import Pool
from simulator.fleet.routing import make_router
from simulator.fleet.setup import prefill_placement
from simulator.metrics.gaps import GapLog
from workloads.request import Request, Status

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


def test_tensorrt_llm_assigns_a_fetched_batch_longest_first():
    """Requests fetched together go longest first, each to the rank of least (prompt tokens,
    active requests) below the even share: 900 and 100 to rank 0, 500 and 300 to rank 1 (one at a
    time in arrival order they would have gone 100, 500 to rank 0 and 900, 300 to rank 1)."""
    p = RankPlacement("active_tokens", 2)
    assert p.assign([100, 900, 500, 300]) == [(1, 0), (2, 1), (3, 1), (0, 0)]
    assert p.waiting == [2, 2] and p.tokens == [1000, 800]
    q = RankPlacement("active_tokens", 2)
    assert [q.place(i, n) for i, n in enumerate([100, 900, 500, 300])] == [0, 1, 0, 1]
    p = RankPlacement("active_tokens", 3)
    p.running = [2, 0, 0]
    assert [r for _, r in p.assign([10, 10])] == [1, 2]     # an even share of 2 leaves rank 0 out
    # a share of 3: rank 0, holding no prompt tokens counted, takes one first, then ranks 1, 2, 1
    assert [r for _, r in p.assign([10, 10, 10, 10])] == [0, 1, 2, 1]


def test_tensorrt_llm_fetches_at_most_dp_times_the_batch_less_the_active():
    p = RankPlacement("active_tokens", 2)
    p.running = [3, 1]
    p.waiting = [0, 2]
    assert p.fetch_limit(4) == 2 and p.fetch_limit(3) == 0


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_tensorrt_llm_holds_an_arrival_in_one_queue_until_a_rank_has_room(engine):
    """Two ranks of one sequence each, both busy: request 2 waits in the replica's queue
    (fetching it would pass dp x max_batch_size) and is fetched when request 1 ends, to the rank
    that freed, long before request 0 ends. Placed on its arrival it went to the rank of fewer
    prompt tokens, request 0's, and waited there for its 200 tokens."""
    reqs = [Request(0, 0.0, 100, 200), Request(1, 0.0, 1000, 5), Request(2, 0.001, 100, 5)]
    run = run_open(engine, reqs, EngineConfig(dp_placement="active_tokens", max_num_seqs=2), 5000, dp=2)
    a, b, c = run.requests
    assert b.finish <= c.admitted and c.finish < a.first_token + (a.finish - a.first_token) / 4
    p = run.pool.replicas[0].placement
    assert p.waiting == [0, 0] and p.running == [0, 0] and p.tokens == [0, 0]


def test_a_request_cancelled_in_the_replicas_queue_leaves_no_rank_count():
    reqs = [Request(0, 0.0, 100, 200), Request(1, 0.0, 100, 200), Request(2, 0.001, 100, 5)]
    run = run_open("reference", reqs, EngineConfig(dp_placement="active_tokens", max_num_seqs=2), 5000, dp=2,
                   cancels=[(0.002, 2)])
    assert run.requests[2].status is Status.CANCELLED
    rep = run.pool.replicas[0]
    assert rep.placement.waiting == [0, 0] and rep.placement.tokens == [0, 0] and not rep.central


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
    assert p.peek(0, [0.5, 0.9]) == 0                          # 1 < 3: no pressure at half full
    assert p.peek(0, [0.9, 0.0]) == 1                          # 1 + 6 x 0.4 = 3.4 > 3
    p.turn = 1
    p.waiting, p.running = [0, 0], [2, 2]
    assert p.peek(0, [0.9, 0.9]) == 1                          # a tie: from the rotating start


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


def _hand_offs(engine: str, reqs: list[Request], cancel_at: Optional[tuple[float, int]] = None):
    """``reqs`` through a prefill replica and a decode replica of two attention-DP ranks each, the decode
    one with a prefix cache (vLLM's NIXL decode side, queue_score_rotating), over a link of 1 MB a token at
    3 GB/s (a 16-token hand-off takes 5 ms, a 64-token one 21 ms; two ranks' links a side, so two
    hand-offs at once do not wait for each other). Returns the pair and every decode leg."""
    env = simpy.Environment()
    make = lambda cfg, dp: Pool(env, cost_model(), cfg, 5000, 1, make_router("round_robin", np.random.default_rng(0)),  # noqa: E731
                                GapLog(), engine, id_block_tokens=H, dp=dp)
    prefill = make(EngineConfig(), 2)
    decode = make(EngineConfig(dp_placement="queue_score_rotating"), 2)
    pd = PrefillDecode(env, prefill, decode, HandoffBytes(1e6), KvLinkSpec(preset="ethernet", latency_ms=0.0).numbers(()))
    legs: list[Request] = []
    ended: list[Request] = []
    decoded = pd._decoded
    pd._decoded = lambda dec: (legs.append(dec), decoded(dec))[1]
    pd.on_done = ended.append
    OpenLoop(reqs).start(env, pd.submit, pd.cancel)
    if cancel_at is not None:
        env.process(_cancel(env, pd, reqs, *cancel_at))
    env.run()
    # a hand-off counts in its decode replica's load from its start (Pool.expect) to its landing or
    # cancellation (Pool.landed): none is left counted once all have ended
    assert [(r.outstanding, r.outstanding_tokens) for r in prefill.replicas + decode.replicas] == [(0, 0)] * 2
    return pd, legs, ended


def _cancel(env, pd, reqs, t: float, i: int):
    yield env.timeout(t)
    pd.cancel(reqs[i])


def _shared_prompt_requests() -> list[Request]:
    """A (a 64-id prompt) decodes on rank 0, B (another) on rank 1; then C (A's prompt and 4 ids more)
    and D (one id of its own) prefill in one iteration: C's hand-off moves its 4 new blocks and
    D's 1, so D reaches the decode replica first."""
    head = tuple(range(64))
    return [Request(0, 0.0, 64 * H, 2, blocks=head),
            Request(1, 5.0, 64 * H, 2, blocks=tuple(range(5000, 5064))),
            Request(2, 10.0, 68 * H, 2, blocks=head + (9000, 9001, 9002, 9003)),
            Request(3, 10.0, H, 2, blocks=(7000,))]


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_decode_leg_runs_on_the_rank_whose_cache_its_hand_off_counted(engine):
    """A decode server's DP front end places a handed-over request on its rank as it arrives, before
    the KV is pulled, and the rank's scheduler pulls what its own cache lacks (vLLM's NIXL connector:
    get_num_new_matched_tokens). llmsim read the hit on the rank the request would go to at the
    hand-off's start, then placed it anew when the KV arrived, after D had taken that rank: C moved
    4 blocks for a prompt its rank held none of."""
    pd, legs, ended = _hand_offs(engine, _shared_prompt_requests())
    sent = {r.id: r.kv_transfer for r in ended}
    assert {r.id: r.cached_tokens for r in legs} == {0: 0, 1: 0, 2: 64 * H, 3: 0}
    assert all(sent[r.id] == pytest.approx(pd.transfer_s(r.input_tokens - r.cached_tokens)) for r in legs)
    assert all(r.kv_wait == 0.0 for r in ended)
    p = pd.decode.replicas[0].placement
    assert p.waiting == p.running == p.tokens == [0, 0]


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_leg_cancelled_on_the_link_leaves_the_rank_it_was_placed_on(engine):
    """Placed ahead, a decode leg counts on its rank from the hand-off's start; cancelled while its
    KV is on the link, it never arrives, and the rank's counts let it go."""
    _, _, ended = _hand_offs(engine, _shared_prompt_requests())
    c = next(r for r in ended if r.id == 2)
    pd, legs, ended = _hand_offs(engine, _shared_prompt_requests(), (c.prefill_done + c.kv_transfer / 2, 2))
    assert next(r for r in ended if r.id == 2).status == Status.CANCELLED and 2 not in {r.id for r in legs}
    p = pd.decode.replicas[0].placement
    assert p.waiting == p.running == p.tokens == [0, 0] and not pd.decode.replicas[0].ahead


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_replica_without_a_prefix_cache_still_places_each_request_on_a_rank(engine):
    """The DP front end places every arrival on one rank, cache or none: the rank's pool and
    scheduler run it whether or not a prefix cache exists to split."""
    env = simpy.Environment()
    pool = Pool(env, cost_model(), EngineConfig(dp_placement="round_robin"), 1000, 1,
                make_router("round_robin", np.random.default_rng(0)), GapLog(), engine, dp=2)
    reqs = [Request(i, 0.0, 100, 5) for i in range(4)]
    for r in reqs:
        pool.submit(r)
    rep = pool.replicas[0]
    assert rep.cache is None
    assert [rep.seqs[r.id].rank for r in reqs] == [0, 1, 0, 1]
    env.run()
    assert all(r.status is Status.FINISHED for r in reqs)
    assert rep.placement.waiting == [0, 0] and rep.placement.running == [0, 0]


def _moe_dp2():
    from simulator.costmodel import CostModel
    from simulator.profiles import load_hardware, load_model
    return CostModel(load_model("mixtral-8x7b"), load_hardware("h100-sxm"), 1, dp=2, ep=2)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_two_prompts_placed_on_one_rank_take_longer_than_on_two(engine):
    """Each rank prefills the prompts placed on it: two prompts SGLang's prefill-server rule puts
    on rank 0 (their rooms are both even) run through that rank's layers together, while in turn
    they run side by side on both ranks, so the step, and the first tokens, take longer."""
    reqs = [Request(1, 0.0, 2000, 2), Request(3, 0.0, 2000, 2)]
    assert [room(r.id) % 2 for r in reqs] == [0, 0]
    cm = _moe_dp2()
    piled = run_open(engine, reqs, EngineConfig(dp_placement="bootstrap_room"), 4000, cm=cm, dp=2)
    spread = run_open(engine, reqs, EngineConfig(dp_placement="round_robin"), 4000, cm=cm, dp=2)
    assert piled.requests[0].first_token == piled.requests[1].first_token    # one iteration either way
    assert piled.requests[0].first_token > 1.1 * spread.requests[0].first_token   # 0.130 s against 0.114 s


def test_both_engines_price_each_ranks_own_decodes_alike():
    """Uneven ranks (requests of different lengths end at different times, so one rank decodes
    more than the other): the fast engine's decode stretches price the busiest rank's decodes as
    the reference's iterations do."""
    rng = np.random.default_rng(5)
    reqs = [Request(i, float(t), int(x), int(y)) for i, (t, x, y) in
            enumerate(zip(np.cumsum(rng.exponential(0.05, 24)), rng.integers(50, 600, 24), rng.integers(5, 120, 24)))]
    cfg = EngineConfig(dp_placement="round_robin", max_num_seqs=16)
    fast, ref = (run_open(e, reqs, cfg, 3000, cm=_moe_dp2(), dp=2) for e in ("fast", "reference"))
    assert [r.finish for r in fast.requests] == pytest.approx([r.finish for r in ref.requests], rel=1e-9)
    assert [r.first_token for r in fast.requests] == pytest.approx([r.first_token for r in ref.requests], rel=1e-9)
