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


def test_a_hand_off_takes_the_links_of_the_ranks_that_hold_and_receive_its_kv():
    """Out of prefill rank 1 into decode rank 0: a second hand-off out of rank 1 waits for it though
    rank 0's links are free, one out of rank 0 into decode rank 1 does not, and one whose receiving
    rank is not known yet (-1) takes the decode rank whose links free up first."""
    links, p, d = KvLinks((1.0, 1.0)), _replica(dp=2), _replica(dp=2)
    assert links.book(0.0, p, d, 1.0, 1, 0) == 0.0
    assert links.book(0.0, p, d, 1.0, 1, 1) == 1.0
    assert links.book(0.0, p, d, 1.0, 0, 1) == 2.0       # decode rank 1 is taken until 2.0
    assert links.book(0.0, p, _replica(), 1.0, 0, -1) == 3.0


_booking = st.tuples(st.floats(0, 5), st.integers(0, 2), st.integers(0, 2), st.floats(0.01, 2),
                     st.integers(-1, 2), st.integers(-1, 2))


@settings(max_examples=200, deadline=None)
@given(st.lists(_booking, min_size=1, max_size=30), st.integers(1, 3), st.integers(1, 3),
       st.sampled_from([(1.0, 1.0), (0.5, 1.0), (1.0, 0.25)]))
def test_no_link_carries_two_hand_offs_at_once_and_none_waits_for_nothing(bookings, dp_p, dp_d, shares):
    """Each rank's links hold one hand-off at a time; a hand-off starts as soon as the links of its
    rank on both sides are free (its own where known, else the one freeing first; no earlier, no
    later); and what a side carried fits in the time it was open."""
    senders = [_replica(dp_p) for _ in range(3)]
    receivers = [_replica(dp_d) for _ in range(3)]
    links = KvLinks(shares)
    held: dict[tuple, list] = {}
    now = 0.0
    for gap, s, r, move, send_rank, receive_rank in bookings:
        now += gap
        send_rank = min(send_rank, dp_p - 1)
        receive_rank = min(receive_rank, dp_d - 1)
        before_out = list(links._links(links.sending, senders[s]).free)
        before_in = list(links._links(links.receiving, receivers[r]).free)
        i = send_rank if send_rank >= 0 else before_out.index(min(before_out))
        j = receive_rank if receive_rank >= 0 else before_in.index(min(before_in))
        start = now + links.book(now, senders[s], receivers[r], move, send_rank, receive_rank)
        assert start >= now
        assert start == pytest.approx(max(now, before_out[i], before_in[j]))
        held.setdefault(("out", s, i), []).append((start, start + move * shares[0]))
        held.setdefault(("in", r, j), []).append((start, start + move * shares[1]))
    for spans in held.values():
        for t in {a for a, _ in spans}:         # at any start, one hand-off in flight on a rank's links
            # (a start is rebuilt as now + wait, which may land an ulp before the link it waited for frees)
            assert sum(a <= t + 1e-9 and t < b - 1e-9 for a, b in spans) <= 1
