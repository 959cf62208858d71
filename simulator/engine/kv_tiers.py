"""KV offload tiers below a replica's GPU prefix cache: host DRAM, then NVMe.

HBM holds a few minutes of a busy replica's prefixes at most; LMCache and
vLLM's CPU offloading keep what HBM evicts in host memory (and on local
disk), so a later prompt that shares the prefix copies its KV back over
PCIe instead of recomputing it. This module is that second and third tier
of one replica; :class:`~simulator.engine.prefix_cache.PrefixCache` is the
first and calls it.

Entries are block ids (one id = H tokens = H/bs KV blocks; a trace's partial
last id fewer), as in the GPU cache. Block ids are chained (an id names its
whole prefix, :mod:`workloads.block_ids`), so a tier is a flat map from id
to tokens, least recently offloaded first.

* **Evicted to, not dropped.** What the GPU cache evicts enters the host
  tier as its newest entries (a leaf's tail before its head, so heads stay
  longest); the host tier's oldest entries move to the disk tier to make
  room, and the disk tier's oldest are dropped.
* **Exclusive.** An id lives in one place: the GPU cache, the host tier or
  the disk tier. A hit moves the entries back to GPU memory (they leave
  their tier), and ids the GPU cache enters any other way (prompt blocks
  computed past a gap, a finished sequence's output) leave the tiers too.
  LMCache writes every computed chunk through to host memory, which makes
  its host tier inclusive of HBM's; the exclusive (victim) tier here holds
  HBM + host distinct prefixes, the most a host tier of that size can add.
* **Lookup.** Past the GPU match, a prompt's ids are looked up one by one in
  either tier until the first id none holds: a hit is a contiguous prefix.
* **Placeholders** (negative ids: a lone request's own blocks past its
  first) are never offloaded: no other request can reach them, and by id
  they are not unique.

Reload time is bytes / bandwidth per tier: host entries cross each GPU's
PCIe link (``host_gb_per_s`` per GPU, the KV split over the tp GPUs that
hold the sequence), disk entries are read at the NVMe bandwidth of those
GPUs' share of the drives, capped by the same PCIe links (the read and
the copy are pipelined chunk by chunk). The engines add a first admission's
reload to the iteration that runs its first prefill chunk: the connector
retrieves the KV into the request's blocks before the forward pass
(LMCache's default, non-layerwise mode, in vLLM's ``start_load_kv``), so
the transfer does not overlap with that iteration's compute and every
request in the iteration waits for it. Layerwise loading, which overlaps
each layer's copy with the previous layer's compute, is not modelled.
Copies to the tiers (device to host at eviction) are not charged: they run
on a separate stream while the GPU computes. A model's sliding-window layers
reload only the blocks within the window of the hit's end, the prompt's last
token but one where the hit covers it all (vLLM's OffloadingConnector:
:meth:`simulator.hybrid_kv.SlidingGroups.reloaded`), copied from the tier of
the hit's last id, beside every full-attention block.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple, Optional, Sequence


class Lower(NamedTuple):
    """A prompt's hit in the offload tiers, past its GPU match."""
    ids: int                    # ids found, contiguous from the GPU match
    total: int                  # tokens they cover
    tokens: tuple[int, ...]     # of which per tier
    blocks: tuple[int, ...]     # KV blocks per tier
    last: int                   # tier of the last id found


class Tier:
    """One offload tier of a replica: capacity and bandwidth, its entries
    (id → tokens, least recently offloaded first), and what passed through."""

    __slots__ = ("name", "capacity", "bytes_per_s", "entries", "used", "offloaded", "dropped",
                 "hit_requests", "hit_tokens", "reloaded", "window_bytes", "reload_s")

    def __init__(self, name: str, capacity_blocks: int, bytes_per_s: float) -> None:
        self.name = name
        self.capacity = capacity_blocks
        self.bytes_per_s = bytes_per_s
        self.entries: OrderedDict[int, int] = OrderedDict()
        self.used = 0            # KV blocks held
        self.offloaded = 0       # KV blocks written into it
        self.dropped = 0         # KV blocks pushed out of it (to the next tier, or gone)
        self.hit_requests = 0    # first admissions that reloaded from it
        self.hit_tokens = 0      # prompt tokens those reloaded from it
        self.reloaded = 0        # KV blocks reloaded from it (every admission)
        self.window_bytes = 0.0  # sliding-window layers' bytes reloaded beside them
        self.reload_s = 0.0      # seconds spent reloading them


class KvTiers:
    """The offload tiers of one replica, fastest first (host, then disk)."""

    def __init__(self, id_block_tokens: int, kv_block_size: int, block_bytes: float, tiers: list[Tier],
                 window_block_bytes: float = 0.0) -> None:
        self.H = id_block_tokens
        self.bs = kv_block_size
        self.block_bytes = block_bytes   # bytes one KV block moves (all layers, every GPU holding it)
        self.window_block_bytes = window_block_bytes   # bytes a block of every sliding-window layer moves
        self.tiers = tiers

    def blocks(self, tokens: int) -> int:
        return -(-tokens // self.bs)

    # --- the GPU cache evicts ----------------------------------------------
    def offload(self, ids: Sequence[int], lo: int, hi: int, tail: int) -> None:
        """``ids[lo:hi]`` left GPU memory: into the host tier, the last id
        first (its ``tail`` tokens when it is a partial block, else H)."""
        H = self.H
        for j in range(hi - 1, lo - 1, -1):
            key = ids[j]
            if key >= 0:
                self._put(0, key, tail if tail and j == hi - 1 else H)

    def _put(self, i: int, key: int, tokens: int) -> None:
        tiers = self.tiers
        if i >= len(tiers):
            return
        tier = tiers[i]
        b = self.blocks(tokens)
        if b > tier.capacity:          # cannot hold even this one entry
            tier.offloaded += b
            tier.dropped += b
            self._put(i + 1, key, tokens)
            return
        e = tier.entries
        if key in e:                   # (not expected: an id lives in one place)
            tier.used -= self.blocks(e.pop(key))
        e[key] = tokens
        tier.used += b
        tier.offloaded += b
        while tier.used > tier.capacity:
            old, t = tier.entries.popitem(last=False)
            ob = self.blocks(t)
            tier.used -= ob
            tier.dropped += ob
            self._put(i + 1, old, t)

    # --- a prompt is looked up and admitted ---------------------------------
    def lookup(self, ids: Sequence[int], pos: int, limit: int) -> "Optional[Lower]":
        """The ids ``ids[pos:limit]`` the tiers hold as a contiguous run
        (None: not even the first)."""
        tiers = self.tiers
        n = len(tiers)
        toks = [0] * n
        blocks = [0] * n
        last = -1
        j = pos
        while j < limit:
            key = ids[j]
            found = -1
            for i in range(n):
                t = tiers[i].entries.get(key)
                if t is not None:
                    toks[i] += t
                    blocks[i] += self.blocks(t)
                    found = i
                    break
            if found < 0:
                break
            last = found
            j += 1
        if j == pos:
            return None
        return Lower(j - pos, sum(toks), tuple(toks), tuple(blocks), last)

    def take(self, ids: Sequence[int], lo: int, hi: int) -> None:
        """``ids[lo:hi]`` are in GPU memory now: out of every tier."""
        for tier in self.tiers:
            e = tier.entries
            if not e:
                continue
            used = tier.used
            for j in range(lo, hi):
                t = e.pop(ids[j], None)
                if t is not None:
                    used -= self.blocks(t)
            tier.used = used

    def reload(self, lower: "Lower", capped: int, first: bool, window_blocks: int = 0) -> float:
        """Seconds to copy a hit's blocks back to the GPU, counted per tier;
        on a ``first`` admission also its tokens (``capped`` of them are
        computed anyway: the prompt's last token, see ``usable``).
        ``window_blocks``: those of each sliding-window group it copies too,
        the window at the capped hit's end, from the tier of its last id."""
        total = 0.0
        if window_blocks:
            tier = self.tiers[lower.last]
            w = window_blocks * self.window_block_bytes
            s = w / tier.bytes_per_s
            tier.window_bytes += w
            tier.reload_s += s
            total += s
        for i, b in enumerate(lower.blocks):
            if not b:
                continue
            tier = self.tiers[i]
            s = b * self.block_bytes / tier.bytes_per_s
            tier.reloaded += b
            tier.reload_s += s
            total += s
            if first:
                tier.hit_requests += 1
                tier.hit_tokens += lower.tokens[i] - (capped if i == lower.last else 0)
        return total

    def held(self) -> set[int]:
        """Every id a tier holds (for checks)."""
        out: set[int] = set()
        for tier in self.tiers:
            out.update(tier.entries)
        return out

    def stats(self) -> dict:
        return {t.name: {"capacity_blocks": t.capacity, "offloaded_blocks": t.offloaded,
                         "dropped_blocks": t.dropped, "hit_requests": t.hit_requests, "hit_tokens": t.hit_tokens,
                         "reloaded_blocks": t.reloaded, "reloaded_bytes": t.reloaded * self.block_bytes + t.window_bytes,
                         "reload_s": t.reload_s, "blocks_at_end": t.used} for t in self.tiers}


class OffloadPlan:
    """A pool's tiers, per replica: bytes one KV block moves, and (name,
    capacity in KV blocks, bytes/s of a reload) per tier, fastest first
    (sized by :func:`simulator.fleet.offload.plan_offload`); and the bytes a
    block of every sliding-window layer moves, 0 where none is reloaded apart."""

    __slots__ = ("block_bytes", "tiers", "window_block_bytes")

    def __init__(self, block_bytes: float, tiers: tuple[tuple[str, int, float], ...],
                 window_block_bytes: float = 0.0) -> None:
        self.block_bytes = block_bytes
        self.tiers = tiers
        self.window_block_bytes = window_block_bytes

    def make(self, id_block_tokens: int, kv_block_size: int) -> KvTiers:
        """Empty tiers for a new replica."""
        return KvTiers(id_block_tokens, kv_block_size, self.block_bytes,
                       [Tier(name, blocks, rate) for name, blocks, rate in self.tiers], self.window_block_bytes)
