"""The links a disaggregated pair's KV crosses, as the queue they are.

Every GPU of a replica has its own link (a scale-out NIC, or its NVLink
ports), and an attention-DP rank's ``tp`` GPUs each move their share of a
hand-off over their own at once, so a rank's links act as one server: a
hand-off holds the sending rank's links and the receiving rank's for as long
as the busier side takes. Two hand-offs out of one prefill rank, or into one
decode rank, share those links. They are served one after the other, in
the order their prompts finished. The transfer engines (NIXL, Mooncake's)
pipeline concurrent reads over a NIC, splitting its bandwidth between them,
which ends the last of them when one after the other would: first come,
first served keeps the link's throughput, and of two overlapping hand-offs
ends the first earlier and the second as late as sharing would.

A hand-off starts once the links of the rank that holds the prompt's KV and of
the rank it is placed on are both free (each replica has one per attention-DP
rank; where the receiving rank is not known yet, as when TensorRT-LLM's ranks
fetch from a central queue, the earliest free), holds each for its own side's share of the move
(the side whose GPUs each hold more of a token's KV is the busiest link and
is held for the whole move; the other for its smaller share: a TP-8 prefill
rank sending GQA heads to a TP-4 decode rank holds its links half as long),
and the link's latency follows. Without this a decode replica could take in
any number of prompts' KV at once, each at the full rate: an ``ethernet``
pair or a long-prompt burst read fast hand-offs whose sum the link could
never carry.
"""
from __future__ import annotations

from typing import Any, Optional


class RankLinks:
    """The links of one replica's attention-DP ranks on one side of a pair: when each is next free."""

    __slots__ = ("free",)

    def __init__(self, ranks: int) -> None:
        self.free = [0.0] * max(ranks, 1)

    def rank(self, rank: int) -> int:
        """``rank`` where it is known (0 or more), else the one whose links free up first."""
        return rank if rank >= 0 else self.free.index(min(self.free))

    def hold(self, rank: int, start: float, seconds: float) -> None:
        """Take rank ``rank``'s links from ``start`` (no earlier than they free) for ``seconds``."""
        self.free[rank] = start + seconds


class KvLinks:
    """Both sides' links of a prefill → decode pair, per replica, created as replicas first hand off."""

    def __init__(self, shares: tuple[float, float]) -> None:
        # the share of a move each side's links are held for: (sending, receiving), the busier one 1
        self.shares = shares
        # by the replica's id, beside the replica itself: holding it keeps its id from being reused
        self.sending: dict[int, tuple[Any, RankLinks]] = {}
        self.receiving: dict[int, tuple[Any, RankLinks]] = {}

    def book(self, now: float, sender: Any, receiver: Optional[Any], move_s: float,
             send_rank: int = -1, receive_rank: int = -1) -> float:
        """Book a hand-off of ``move_s`` on the busiest link out of ``sender``'s rank ``send_rank`` into
        ``receiver``'s rank ``receive_rank`` (-1: the rank whose links free up first; ``receiver`` None
        where no decode replica is ready to take it: then its own links are not counted), and return
        how long it waits for them."""
        out = self._links(self.sending, sender)
        i = out.rank(send_rank)
        start = max(now, out.free[i])
        if receiver is not None:
            into = self._links(self.receiving, receiver)
            j = into.rank(receive_rank)
            start = max(start, into.free[j])
            into.hold(j, start, move_s * self.shares[1])
        out.hold(i, start, move_s * self.shares[0])
        return start - now

    @staticmethod
    def _links(side: dict[int, tuple[Any, RankLinks]], replica: Any) -> RankLinks:
        held = side.get(id(replica))
        if held is None:
            held = side[id(replica)] = (replica, RankLinks(getattr(replica, "dp", 1)))
        return held[1]
