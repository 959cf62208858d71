"""The links a disaggregated pair's KV crosses take one hand-off at a time per rank and side."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings, strategies as st

from simulator.fleet.kv_link import KvLinks


def _replica(dp: int = 1) -> SimpleNamespace:
    return SimpleNamespace(dp=dp)


def test_two_hand_offs_into_one_decode_rank_take_turns():
    links, p1, p2, d = KvLinks((1.0, 1.0)), _replica(), _replica(), _replica()
    assert links.book(0.0, p1, d, 1.0) == 0.0
    assert links.book(0.0, p2, d, 1.0) == 1.0          # another prefill replica, the same decode rank
    assert links.book(0.5, _replica(), _replica(), 1.0) == 0.0   # a pair of free ranks does not wait


def test_a_replica_has_a_rank_of_links_per_attention_dp_rank():
    links, d = KvLinks((1.0, 1.0)), _replica(dp=2)
    assert [links.book(0.0, _replica(), d, 1.0) for _ in range(3)] == [0.0, 0.0, 1.0]


def test_the_side_holding_less_of_a_token_is_held_for_its_share():
    """A TP-8 prefill rank sending GQA heads to TP-4 decode ranks holds each of its GPUs' links half
    as long as the decode GPUs': its second hand-off, to another decode replica, starts at 0.5."""
    links, p = KvLinks((0.5, 1.0)), _replica()
    assert links.book(0.0, p, _replica(), 1.0) == 0.0
    assert links.book(0.0, p, _replica(), 1.0) == 0.5


def test_with_no_decode_replica_ready_only_the_sending_links_count():
    links, p = KvLinks((1.0, 1.0)), _replica()
    assert links.book(0.0, p, None, 2.0) == 0.0
    assert links.book(1.0, p, None, 2.0) == 1.0


_booking = st.tuples(st.floats(0, 5), st.integers(0, 2), st.integers(0, 2), st.floats(0.01, 2))


@settings(max_examples=200, deadline=None)
@given(st.lists(_booking, min_size=1, max_size=30), st.integers(1, 3), st.integers(1, 3),
       st.sampled_from([(1.0, 1.0), (0.5, 1.0), (1.0, 0.25)]))
def test_no_link_carries_two_hand_offs_at_once_and_none_waits_for_nothing(bookings, dp_p, dp_d, shares):
    """Each rank's links hold one hand-off at a time; a hand-off starts as soon as a link of both its
    sides is free (no earlier, no later); and what a side carried fits in the time it was open."""
    senders = [_replica(dp_p) for _ in range(3)]
    receivers = [_replica(dp_d) for _ in range(3)]
    links = KvLinks(shares)
    held = {("out", i): [] for i in range(3)} | {("in", i): [] for i in range(3)}
    now = 0.0
    for gap, s, r, move in bookings:
        now += gap
        before_out = list(links._links(links.sending, senders[s]).free)
        before_in = list(links._links(links.receiving, receivers[r]).free)
        start = now + links.book(now, senders[s], receivers[r], move)
        assert start >= now
        assert start == pytest.approx(max(now, min(before_out), min(before_in)))
        held[("out", s)].append((start, start + move * shares[0]))
        held[("in", r)].append((start, start + move * shares[1]))
    for (side, _), spans in held.items():
        ranks = dp_p if side == "out" else dp_d
        for t in {a for a, _ in spans}:         # at any start, no more hand-offs in flight than ranks
            # (a start is rebuilt as now + wait, which may land an ulp before the link it waited for frees)
            assert sum(a <= t + 1e-9 and t < b - 1e-9 for a, b in spans) <= ranks
