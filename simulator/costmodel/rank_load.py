"""Where a step's work sits among a replica's attention-DP ranks.

Each attention-DP rank schedules the requests placed on it (engine/dp_placement.py), so a
step's prompt chunks and decodes are not spread evenly: one rank may hold every prompt of
the step while another only decodes. The ranks step together (the MoE layers join them
every layer), so the step lasts as long as its busiest rank; the engine, which knows each
request's rank, hands the cost model this load instead of letting it deal chunks in turn
and split decodes evenly.
"""
from __future__ import annotations

from typing import Sequence


class RankLoad:
    """The rank of each prompt chunk of a step (in the step's chunk order) and the
    decoding sequences each rank runs in it."""

    __slots__ = ("chunk_ranks", "decodes")

    def __init__(self, chunk_ranks: Sequence[int], decodes: Sequence[int]) -> None:
        self.chunk_ranks = tuple(chunk_ranks)
        self.decodes = tuple(decodes)

    @property
    def busiest_decodes(self) -> int:
        """The most decoding sequences any one rank runs."""
        return max(self.decodes, default=0)

    def prompts_only(self) -> "RankLoad":
        """The same chunks with no decodes (a draft model's prefill of them)."""
        return RankLoad(self.chunk_ranks, (0,) * len(self.decodes))

    def chunks_by_rank(self, chunks: Sequence[tuple[int, int]]) -> list[list[tuple[int, int]]]:
        """``chunks`` grouped by the rank each runs on, the ranks that hold one."""
        groups: dict[int, list[tuple[int, int]]] = {}
        for c, r in zip(chunks, self.chunk_ranks):
            groups.setdefault(r, []).append(c)
        return [groups[r] for r in sorted(groups)]

    def busiest_tokens(self, chunks: Sequence[tuple[int, int]]) -> int:
        """The most tokens (prompt chunks and one a decode) any one rank runs."""
        tokens = list(self.decodes)
        for (new, _), r in zip(chunks, self.chunk_ranks):
            tokens[r] += new
        return max(tokens, default=0)
