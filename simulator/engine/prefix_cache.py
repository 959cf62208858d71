"""A replica's prefix cache: KV blocks kept after use, found again by block id.

Prompts carry block ids (``Request.blocks``): id j names the first
(j+1)·H tokens of the sequence (H = the workload's id block size), so two
prompts share a cached prefix exactly where their ids agree. The cache maps
ids to entries of H tokens (H/bs KV blocks; a trace's last, partial block
holds fewer), reference-counted by the running sequences that use them.

Memory follows vLLM's automatic prefix caching:

* an entry referenced by a running sequence is *pinned*: it is part of that
  sequence's KV and is shared, not copied, by every sequence that hits it;
* an unreferenced entry is *evictable*: it stays while memory allows and is
  evicted least recently used first when an allocation needs the room, so
  the evictable total never exceeds the memory not held by running
  sequences (or a configured cap, or nothing when ``unbounded``);
* a sequence releases its entries tail first, so within one sequence the
  end of a prompt is evicted before its start and the shared heads (system
  prompts, earlier turns) survive longest.

What is cached when: a sequence's prompt blocks are entered at admission
(they are allocated then and computed by its prefill); its full output
blocks are entered when it finishes, so a chat turn's response is a hit for
the next turn. A hit covers at most prompt − 1 tokens, since the last
prompt token must be computed to sample from (as vLLM does).

Hit statistics count first admissions only; a recompute after preemption
that finds its own prompt still cached is not a user-visible hit.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple, Optional, Sequence


class Match(NamedTuple):
    ids: int            # leading ids found in the cache
    tokens: int         # tokens they cover (uncapped)
    blocks: int         # KV blocks they occupy
    pinned_blocks: int  # of which already pinned by running sequences (no new memory)


NO_MATCH = Match(0, 0, 0, 0)


class PrefixCache:
    __slots__ = ("H", "bs", "u", "unbounded", "cap", "ref", "partial", "lru", "pinned", "evictable",
                 "lookups", "hit_requests", "hit_tokens", "prompt_tokens", "hit_ids", "prompt_ids",
                 "evicted_blocks")

    def __init__(self, id_block_tokens: int, kv_block_size: int, capacity_tokens: Optional[int] = None,
                 unbounded: bool = False) -> None:
        if id_block_tokens % kv_block_size:
            raise ValueError(f"prompt block ids of {id_block_tokens} tokens are not a whole number of "
                             f"{kv_block_size}-token KV blocks")
        self.H = id_block_tokens
        self.bs = kv_block_size
        self.u = id_block_tokens // kv_block_size
        self.unbounded = unbounded
        self.cap = None if capacity_tokens is None else capacity_tokens // kv_block_size
        self.ref: dict[int, int] = {}        # id -> sequences referencing it (0 = evictable)
        self.partial: dict[int, int] = {}    # id -> tokens, for entries shorter than H
        self.lru: OrderedDict[int, int] = OrderedDict()   # evictable id -> KV blocks, oldest first
        self.pinned = 0       # KV blocks of referenced entries
        self.evictable = 0    # KV blocks of unreferenced entries
        self.lookups = self.hit_requests = self.hit_tokens = self.prompt_tokens = 0
        self.hit_ids = self.prompt_ids = self.evicted_blocks = 0

    # --- queries -----------------------------------------------------------
    def match(self, ids: Sequence[int], prompt: int) -> Match:
        """The longest cached prefix of a ``prompt``-token sequence with these ids."""
        ref, partial, H, bs, u = self.ref, self.partial, self.H, self.bs, self.u
        limit = min(len(ids), -(-prompt // H))
        n = tokens = blocks = pinned = 0
        while n < limit:
            r = ref.get(ids[n])
            if r is None:
                break
            p = partial.get(ids[n])
            b = u if p is None else -(-p // bs)
            tokens += H if p is None else p
            blocks += b
            if r:
                pinned += b
            n += 1
            if p is not None:
                break
        return Match(n, tokens, blocks, pinned)

    def cached_tokens(self, ids: Optional[Sequence[int]], prompt: int) -> int:
        """Prompt tokens a request would not have to prefill (≤ prompt − 1)."""
        if not ids:
            return 0
        return max(0, min(self.match(ids, prompt).tokens, prompt - 1))

    def entered_ids(self, ids: Sequence[int], input_tokens: int) -> int:
        """How many ids a sequence enters at admission: its full prompt
        blocks, plus a trailing partial one when the ids end there (traces)."""
        full = input_tokens // self.H
        if len(ids) == -(-input_tokens // self.H) and input_tokens % self.H:
            return len(ids)
        return min(full, len(ids))

    # --- a sequence's life -------------------------------------------------
    def acquire(self, ids: Sequence[int], m: Match, input_tokens: int) -> tuple[int, int]:
        """Pin the matched entries and enter the rest of the prompt's ids.

        Returns (ids referenced, KV blocks they occupy): the sequence's KV
        beyond those blocks is its own."""
        ref, lru = self.ref, self.lru
        n = max(m.ids, self.entered_ids(ids, input_tokens))
        blocks = 0
        for j in range(n):
            i = ids[j]
            b = self._blocks(i) if j < m.ids else self._enter(i, j, input_tokens)
            r = ref.get(i, 0)
            if r == 0 and i in lru:
                del lru[i]
                self.evictable -= b
                self.pinned += b
            elif r == 0:
                self.pinned += b
            ref[i] = r + 1
            blocks += b
        return n, blocks

    def release(self, ids: Sequence[int], n: int, kv_tokens: int = 0) -> None:
        """Unreference a sequence's first ``n`` ids; with ``kv_tokens`` (a
        finished sequence) also enter its further full blocks. Tail first."""
        ref, lru = self.ref, self.lru
        end = min(len(ids), kv_tokens // self.H) if kv_tokens else n
        for j in range(max(end, n) - 1, -1, -1):
            i = ids[j]
            if j >= n:
                if i in ref:
                    continue
                ref[i] = 0
                lru[i] = self.u
                self.evictable += self.u
                continue
            r = ref[i] - 1
            ref[i] = r
            if r == 0:
                b = self._blocks(i)
                self.pinned -= b
                self.evictable += b
                lru[i] = b

    def trim(self, free_blocks: int) -> None:
        """Evict least recently used entries until the evictable ones fit in
        ``free_blocks`` (the memory no running sequence holds) and the cap."""
        if self.unbounded:
            return
        limit = free_blocks if self.cap is None else min(free_blocks, self.cap)
        lru = self.lru
        while self.evictable > limit:
            i, b = lru.popitem(last=False)
            del self.ref[i]
            self.partial.pop(i, None)
            self.evictable -= b
            self.evicted_blocks += b

    def record(self, m: Match, ids: Sequence[int], prompt: int, cached: int) -> None:
        """Count a first admission in the hit statistics."""
        self.lookups += 1
        self.prompt_tokens += prompt
        self.hit_tokens += cached
        self.hit_requests += cached > 0
        self.hit_ids += m.ids
        self.prompt_ids += min(len(ids), -(-prompt // self.H))

    # --- internals ---------------------------------------------------------
    def _blocks(self, i: int) -> int:
        p = self.partial.get(i)
        return self.u if p is None else -(-p // self.bs)

    def _enter(self, i: int, j: int, input_tokens: int) -> int:
        """Make sure id ``i`` (position j) has an entry; returns its KV blocks."""
        if i in self.ref:
            return self._blocks(i)
        self.ref[i] = 0
        rest = input_tokens - j * self.H
        if rest < self.H:
            self.partial[i] = rest
            return -(-rest // self.bs)
        return self.u

    def stats(self) -> dict:
        return {"lookups": self.lookups, "hit_requests": self.hit_requests, "hit_tokens": self.hit_tokens,
                "prompt_tokens": self.prompt_tokens, "hit_ids": self.hit_ids, "prompt_ids": self.prompt_ids,
                "evicted_blocks": self.evicted_blocks, "cached_blocks": self.pinned + self.evictable}
