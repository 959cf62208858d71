"""A replica's prefix cache: KV blocks kept after use, found again by block id.

Prompts carry block ids (``Request.blocks``): id j names the first
(j+1)·H tokens of the sequence (H = the workload's id block size), so two
prompts share a cached prefix exactly where their ids agree. Each id is a
cache entry of H tokens (H/bs KV blocks; a trace's last, partial block
holds fewer).

Memory follows vLLM's automatic prefix caching:

* an entry a running sequence uses is *pinned*: part of that sequence's KV,
  shared (not copied) by every sequence that hits it;
* an unused entry is *evictable*: it stays while memory allows and is
  evicted least recently used first when an allocation needs the room, so
  the evictable total never exceeds the memory running sequences leave
  free (or a configured cap, or nothing when ``unbounded``);
* within what one sequence released, the end of its prompt goes before its
  start, so shared heads (system prompts, earlier turns) outlive tails.

What is cached when: a sequence's prompt blocks are entered at admission
(they are allocated then and computed by its prefill; a prompt preempted
part-way forgets those it had not computed); its full output
blocks when it finishes, so a chat turn's response is a hit for the next
turn. A hit covers at most prompt − 1 tokens, since the last prompt token
must be computed to sample from (as vLLM does).

Structure: a radix tree over ids, as SGLang's RadixAttention keeps tokens.
Chained ids make the cached set prefix-closed, so each node holds a run of
ids with no branch inside, ``ids[off:off+n]`` of the tuple of the
sequence that entered it when the run is at least half of that tuple (no
slice copied; else a copy of the run, see ``_run``); an eviction lowers
``n``, a split moves ``off``, and only the upper half of a split, the head
other sequences go on matching, gets a tuple of its own. A sequence pins its path by reference counts
on the nodes (O(depth), not O(blocks)). A lookup compares runs as tuple
slices (C speed) and only branches per node. Eviction takes the evictable
leaf with the oldest release stamp and drops ids from its tail; a parent
becomes a leaf, and evictable, only when its last child goes. So the cost
per request is O(tree depth) Python steps plus O(prompt blocks) C work.

Hit statistics count first admissions only; a recompute after preemption
that finds its own prompt still cached is not a user-visible hit.

Owners (only when a replica has per-class KV caps, :meth:`PrefixCache.track_owners`):
each node belongs to the class whose request created it (prompt blocks at
admission, output blocks at finish), and ``owned[c]`` counts the
*evictable* blocks class c owns, so a cap can cover a class's cached
history as well as its running requests. A node that another class's entry
extends (a system prompt both tiers send) becomes *shared*: owner None,
charged to no class, evicted only by the global LRU. So an owned node's
whole subtree has its owner, and :meth:`evict_owned` can always free every
evictable block of a class by taking its own leaves, least recently
released first, without touching another class's entries. A per-owner
heap mirrors the global one; with tracking off (the default) nodes carry
no owner and nothing per owner is done.
"""
from __future__ import annotations

import heapq
from collections import deque
from itertools import count
from typing import NamedTuple, Optional, Sequence

from .kv_tiers import KvTiers, Lower


class Node:
    __slots__ = ("ids", "off", "n", "parent", "children", "lock", "stamp", "tail", "blocks", "uid", "owner")

    def __init__(self, ids: tuple, parent: Optional["Node"], blocks: int, uid: int, tail: Optional[int] = None,
                 off: int = 0, n: int = -1):
        # The node's run is ids[off:off+n]: a node made from a sequence's ids
        # shares its tuple instead of copying a slice, a split moves ``off``,
        # an eviction shortens ``n``.
        self.ids = ids
        self.off = off
        self.n = len(ids) - off if n < 0 else n
        self.parent = parent
        self.children: dict[int, Node] = {}
        self.lock = 0          # running sequences whose path includes this node
        self.stamp = 0         # release clock when it was last unpinned
        self.tail = tail       # tokens of the last id when it is a partial block
        self.blocks = blocks   # KV blocks it occupies
        self.uid = uid
        self.owner: Optional[str] = None   # creating class when owners are tracked; None: shared / untracked


def agree(ids: Sequence[int], pos: int, run: tuple, span: int, off: int = 0) -> int:
    """How many of ``run[off:off+span]`` equal ``ids[pos:]`` (``run[off]`` is
    known to match): one C-speed slice comparison when they all do, a
    bisection on slice equality when the two diverge inside the run."""
    if ids[pos:pos + span] == (run if off == 0 and span == len(run) else run[off:off + span]):
        return span
    lo, hi = 1, span - 1   # ids[pos:pos+lo] agrees; find the largest such lo
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ids[pos:pos + mid] == run[off:off + mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _run(ids: Sequence[int], off: int, n: int) -> tuple[tuple, int]:
    """A node's (ids, off) for the run ``ids[off:off+n]``: the tuple itself
    when the run is at least half of it (no copy, and what it keeps alive
    beyond the run is at most the run again), else a copy of the run (a
    short own part after a long shared head must not pin the head's ids:
    a cached lone request would hold ~3 KB of a 6K-token prompt's ids
    instead of a few hundred bytes)."""
    if isinstance(ids, tuple) and 2 * n >= len(ids):
        return ids, off
    return tuple(ids[off:off + n]), 0


def usable(tokens: int, prompt: int) -> int:
    """Cached tokens a ``prompt``-token sequence can skip: the last prompt
    token is always computed, since the next token is sampled from it."""
    return max(0, min(tokens, prompt - 1))


class Match(NamedTuple):
    ids: int            # leading ids found in the cache
    tokens: int         # tokens they cover (uncapped)
    blocks: int         # KV blocks they occupy
    pinned_blocks: int  # of which already pinned by running sequences (no new memory)
    node: Optional[Node] = None   # deepest node reached (None: none)
    k: int = 0                    # ids matched inside it
    lower: Optional[Lower] = None   # the ids after those found in the offload tiers (None: none)

    def usable(self, prompt: int) -> int:
        """Prompt tokens the sequence skips: its GPU hit and what it reloads."""
        if self.lower is None:
            return usable(self.tokens, prompt)
        return usable(self.tokens + self.lower.total, prompt)


class PrefixCache:
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
        self._uid = count()
        self.root = Node((), None, 0, next(self._uid))
        # Evictable leaves, LRU first, as (stamp, uid, push, node) entries,
        # lazily invalidated, in three places whose least entry goes next
        # (see _least): ``fifo``, the leaves a release made, whose stamps only
        # grow (a deque is their heap, and touches only its ends: the heap
        # of them was cold memory, a cache miss a level); ``heap``, the
        # parents left childless by an eviction, whose stamps are older; and
        # ``held``, the leaf the last trim left partly evicted (trims nibble
        # one leaf a few blocks at a time, each step of a decode stretch).
        self.fifo: deque[tuple[int, int, int, Node]] = deque()
        self.heap: list[tuple[int, int, int, Node]] = []
        self._push = count()
        self.held: Optional[Node] = None
        self.held_stamp = 0
        self.clock = 0
        self.pinned = 0       # KV blocks of entries running sequences use
        self.evictable = 0    # KV blocks of the others
        self.lookups = self.hit_requests = self.hit_tokens = self.prompt_tokens = 0
        self.hit_ids = self.prompt_ids = self.evicted_blocks = 0
        self.tracks_owners = False
        self.owned: dict[str, int] = {}                  # evictable blocks per owning class (when tracked)
        self.by_owner: dict[str, list] = {}              # per-owner evictable leaves, like ``heap``
        self.owner_evicted_blocks = 0
        self.tiers: Optional[KvTiers] = None             # offload tiers below the GPU (None: evicted is gone)

    def track_owners(self) -> None:
        """Attribute entries to the class that created them (see the module
        docstring); call before the first entry is added."""
        self.tracks_owners = True

    # --- queries -----------------------------------------------------------
    def match(self, ids: Sequence[int], prompt: int) -> Match:
        """The longest cached prefix of a ``prompt``-token sequence with these
        ids: in GPU memory, then continued in the offload tiers."""
        H, u = self.H, self.u
        limit = min(len(ids), -(-prompt // H))
        node = self.root
        pos = blocks = pinned = 0
        last, k = None, 0
        while pos < limit:
            child = node.children.get(ids[pos])
            if child is None:
                break
            L = child.n
            k = agree(ids, pos, child.ids, min(L, limit - pos), child.off)
            b = child.blocks if k == L else k * u
            blocks += b
            if child.lock:
                pinned += b
            pos += k
            last = child
            if k < L:
                break
            node = child
        tokens = pos * H
        if last is not None and k == last.n and last.tail is not None:
            tokens += last.tail - H
        t = self.tiers
        if t is not None and pos < limit:
            return Match(pos, tokens, blocks, pinned, last, k, t.lookup(ids, pos, limit))
        return Match(pos, tokens, blocks, pinned, last, k)

    def cached_tokens(self, ids: Optional[Sequence[int]], prompt: int) -> int:
        """Prompt tokens a request would not have to prefill (≤ prompt − 1),
        found in GPU memory or the offload tiers: what a cache-aware router
        asks of a replica (a reload takes milliseconds, the prefill it
        saves far more, so a tier hit counts like a GPU one)."""
        return self.match(ids, prompt).usable(prompt) if ids else 0

    def entered_ids(self, ids: Sequence[int], input_tokens: int) -> int:
        """How many ids a sequence enters at admission: its full prompt
        blocks, plus a trailing partial one when the ids end there (traces)."""
        if len(ids) == -(-input_tokens // self.H) and input_tokens % self.H:
            return len(ids)
        return min(input_tokens // self.H, len(ids))

    # --- a sequence's life -------------------------------------------------
    def acquire(self, ids: Sequence[int], m: Match, input_tokens: int, owner: Optional[str] = None,
                entered: int = -1) -> tuple[Node, int, int]:
        """Pin the matched path and enter the rest of the prompt's ids
        (created by class ``owner``), or of its first ``entered`` ids (≥ 0:
        a prompt whose blocks are allocated chunk by chunk, :meth:`extend`).

        Returns (deepest node, ids on its path, KV blocks they occupy): the
        sequence's KV beyond those blocks is its own."""
        node = self.root if m.node is None else m.node
        if m.node is not None and m.k < node.n:
            node = self._split(node, m.k)
        pos, blocks = m.ids, m.blocks
        n = self.entered_ids(ids, input_tokens) if entered < 0 else entered
        t = self.tiers
        if t is not None:   # reloaded and newly computed ids are in GPU memory now
            t.take(ids, pos, max(n, pos + (0 if m.lower is None else m.lower.ids)))
        if n > pos:
            tail = input_tokens - (n - 1) * self.H if n * self.H > input_tokens else None
            node = self._add(node, ids, pos, n - pos, tail, owner)
            self.evictable += node.blocks   # moved to pinned by the walk below
            blocks += node.blocks
            pos = n
        x = node
        while x.parent is not None:
            if not x.lock:
                self.evictable -= x.blocks
                self.pinned += x.blocks
                if x.owner is not None:
                    self.owned[x.owner] -= x.blocks
            x.lock += 1
            x = x.parent
        return node, pos, blocks

    def extend(self, node: Node, n: int, blocks: int, ids: Sequence[int], upto: int, input_tokens: int,
               owner: Optional[str] = None) -> tuple[Node, int, int]:
        """The path a prompt pins (``node``, ``n`` ids of ``blocks`` KV blocks)
        extended over its ids up to its first ``upto`` tokens: vLLM caches a
        chunk's full blocks as ``allocate_slots`` allocates them, so an entry
        exists once the chunk computing it is scheduled, not at admission.
        Ids another sequence entered meanwhile are shared, the rest entered
        (created by ``owner``). Returns :meth:`acquire`'s triple."""
        target = self.entered_ids(ids, input_tokens) if upto >= input_tokens else min(upto // self.H, len(ids))
        if target <= n:
            return node, n, blocks
        tiers, self.tiers = self.tiers, None     # these ids are computed here, not reloaded
        m = self.match(ids, target * self.H)
        self.tiers = tiers
        out = self.acquire(ids, m, input_tokens, owner, target)
        x = node        # the old path lies on the new one, pinned twice now: once is enough
        while x.parent is not None:
            x.lock -= 1
            x = x.parent
        return out

    def release(self, node: Node, ids: Sequence[int], n: int, kv_tokens: int = 0,
                owner: Optional[str] = None, computed: int = -1) -> None:
        """Unpin a sequence's path (``node`` at depth ``n`` ids); with
        ``kv_tokens`` (a finished sequence) also enter its full output blocks
        (created by class ``owner``). ``computed`` (≥ 0): the ids of the path
        whose KV the sequence computed before it was preempted mid-prompt; the
        rest, entered at admission but never computed, is forgotten where no
        other sequence holds it (vLLM caches only the blocks it has computed)."""
        self.clock += 1
        t = self.clock
        if kv_tokens:
            end = min(len(ids), kv_tokens // self.H)
            if end > n and ids[n] not in node.children:
                if self.tiers is not None:
                    self.tiers.take(ids, n, end)
                leaf = self._add(node, ids, n, end - n, None, owner)
                self.evictable += leaf.blocks
                leaf.stamp = t
                self._push_leaf(leaf, True)
        x = node
        while x.parent is not None:
            x.lock -= 1
            if not x.lock:
                self.pinned -= x.blocks
                self.evictable += x.blocks
                x.stamp = t
                if x.owner is not None:
                    self.owned[x.owner] += x.blocks
                if not x.children:
                    self._push_leaf(x, True)
            x = x.parent
        if 0 <= computed < n:
            self._forget(node, n, computed)

    def _forget(self, x: Node, end: int, keep: int) -> None:
        """Drop the path's ids past ``keep`` from the leaf ``x`` (whose run ends at depth ``end``) upwards,
        while a node is unpinned and childless: KV that was never computed is not cached, not evicted
        (no offload, no eviction count)."""
        while x.parent is not None and end > keep and not x.lock and not x.children:
            start = end - x.n
            k = end - max(start, keep)              # ids dropped from its tail
            dropped = k * self.u
            if x.tail is not None:                  # the partial last block is among them
                dropped += -(-x.tail // self.bs) - self.u
                x.tail = None
            self.evictable -= dropped
            if x.owner is not None:
                self.owned[x.owner] -= dropped
            x.blocks -= dropped
            x.n -= k
            if x.n:
                return                              # still a leaf: its queue entries stay valid
            p = x.parent
            del p.children[x.ids[x.off]]
            x.parent = None                         # its queue entries go stale
            if self.held is x:
                self.held = None
            x, end = p, start
        if x.parent is not None and not x.lock and not x.children and end <= keep:
            self._push_leaf(x, True)                # a parent left childless: an evictable leaf

    def trim(self, free_blocks: int) -> None:
        """Evict least recently released entries until the evictable ones fit
        in ``free_blocks`` (memory no running sequence holds) and the cap."""
        if self.unbounded:
            return
        limit = free_blocks if self.cap is None else min(free_blocks, self.cap)
        while self.evictable > limit:
            stamp, x = self._least()
            if x.lock or x.children or x.parent is None or x.stamp != stamp:
                continue   # stale: pinned again, grew children, or already gone
            self._evict(x, self.evictable - limit, None)

    def _least(self) -> tuple[int, Node]:
        """Take the least (stamp, uid) entry of ``held``, ``fifo`` and
        ``heap``: the one a single heap of them all would pop (entries with
        equal (stamp, uid) are one node's, at one stamp, so either will do)."""
        x = self.held
        src = 0
        stamp = uid = 0
        if x is not None:
            stamp, uid = self.held_stamp, x.uid
        else:
            src = -1
        fifo, heap = self.fifo, self.heap
        if fifo:
            e = fifo[0]
            if src < 0 or e[0] < stamp or (e[0] == stamp and e[1] < uid):
                src, stamp, uid = 1, e[0], e[1]
        if heap:
            e = heap[0]
            if src < 0 or e[0] < stamp or (e[0] == stamp and e[1] < uid):
                src = 2
        if src == 0:
            assert x is not None
            self.held = None
            return stamp, x
        e = fifo.popleft() if src == 1 else heapq.heappop(heap)
        return e[0], e[3]

    def evict_owned(self, owner: str, limit: int) -> None:
        """Evict class ``owner``'s unreferenced entries, least recently
        released first among its own, until it owns at most ``limit``
        evictable blocks (a class KV cap, before another class's entry is touched)."""
        owned = self.owned
        heap = self.by_owner.get(owner)
        evicted = self.evicted_blocks
        while owned.get(owner, 0) > limit and heap:
            stamp, uid, _, x = heapq.heappop(heap)
            if x.lock or x.children or x.parent is None or x.stamp != stamp or x.owner != owner:
                continue   # stale, as in trim, or shared since
            self._evict(x, owned[owner] - limit, heap)
        self.owner_evicted_blocks += self.evicted_blocks - evicted

    def _evict(self, x: Node, excess: int, heap: Optional[list]) -> None:
        """Drop ids from the tail of evictable leaf ``x`` (a partial last
        block first) until ``excess`` blocks are gone or ``x`` is; what is
        left of it goes back on ``heap`` (its entry on the other heap stays
        valid), or is held (``held``) when ``heap`` is None,
        and a parent left childless becomes an evictable leaf."""
        u = self.u
        dropped = 0
        L = x.n
        tail = 0
        if x.tail is not None:        # a partial last block goes first
            tail = x.tail
            dropped = -(-x.tail // self.bs)
            x.tail = None
            L -= 1
        k = min(L, -(-(excess - dropped) // u)) if excess > dropped else 0
        dropped += k * u
        if self.tiers is not None:
            self.tiers.offload(x.ids, x.off + L - k, x.off + x.n, tail)
        L -= k
        self.evictable -= dropped
        self.evicted_blocks += dropped
        if x.owner is not None:
            self.owned[x.owner] -= dropped
        x.blocks -= dropped
        if L:
            x.n = L        # no copy of the tuple: a leaf is often trimmed a few blocks at a time
            if heap is not None:
                heapq.heappush(heap, (x.stamp, x.uid, next(self._push), x))
                return
            h = self.held
            if h is not None and h is not x:   # two candidates left over: the heap takes the other back
                heapq.heappush(self.heap, (self.held_stamp, h.uid, next(self._push), h))
            self.held, self.held_stamp = x, x.stamp
        else:
            p = x.parent
            assert p is not None   # the root is never evicted
            del p.children[x.ids[x.off]]
            x.parent = None
            if p.parent is not None and not p.lock and not p.children:
                self._push_leaf(p, False)

    def record(self, m: Match, ids: Sequence[int], prompt: int, cached: int) -> None:
        """Count a first admission in the hit statistics."""
        self.lookups += 1
        self.prompt_tokens += prompt
        self.hit_tokens += cached
        self.hit_requests += cached > 0
        self.hit_ids += m.ids if m.lower is None else m.ids + m.lower.ids
        self.prompt_ids += min(len(ids), -(-prompt // self.H))

    # --- internals ---------------------------------------------------------
    def _push_leaf(self, x: Node, released: bool) -> None:
        """``x`` became an evictable leaf at its stamp: onto the LRU order
        (``fifo`` when a release made it, at the newest stamp; else ``heap``),
        and its owner's heap."""
        e = (x.stamp, x.uid, next(self._push), x)
        if released:
            self.fifo.append(e)
        else:
            heapq.heappush(self.heap, e)
        if x.owner is not None:
            h = self.by_owner.setdefault(x.owner, [])
            heapq.heappush(h, e)
            if len(h) > 1024 and len(h) > 4 * self.owned[x.owner]:   # mostly stale entries: compact
                h[:] = [y for y in h if not (y[3].lock or y[3].children or y[3].parent is None
                                             or y[3].stamp != y[0] or y[3].owner != x.owner)]
                heapq.heapify(h)

    def _add(self, parent: Node, ids: Sequence[int], off: int, n: int, tail: Optional[int],
             owner: Optional[str] = None) -> Node:
        """A new node below ``parent`` for ``ids[off:off+n]`` (a tuple is
        shared, not sliced), counted evictable by the caller."""
        blocks = n * self.u
        if tail is not None:
            blocks += -(-tail // self.bs) - self.u
        run, off = _run(ids, off, n)
        x = Node(run, parent, blocks, next(self._uid), tail, off, n)
        if self.tracks_owners and owner is not None:
            x.owner = owner
            self.owned[owner] = self.owned.get(owner, 0) + blocks
            if parent.owner is not None and parent.owner != owner:
                self._share(parent)
        parent.children[run[off]] = x
        return x

    def _share(self, x: Node) -> None:
        """Another class's entry now hangs below ``x``: it and its owned
        ancestors become shared (the ancestors of a shared node are shared)."""
        while x.parent is not None and x.owner is not None:
            if not x.lock:
                self.owned[x.owner] -= x.blocks
            x.owner = None
            x = x.parent

    def _split(self, x: Node, k: int) -> Node:
        """Cut node ``x`` after its first k ids; the new upper node is returned
        and ``x`` keeps the rest (so sequences holding ``x`` still hold their end)."""
        p = x.parent
        assert p is not None   # the root is never split
        top = Node(x.ids[x.off:x.off + k], p, k * self.u, next(self._uid))   # a head others match: a tuple of its own
        top.lock, top.stamp, top.owner = x.lock, x.stamp, x.owner
        p.children[x.ids[x.off]] = top
        x.ids, x.off = _run(x.ids, x.off + k, x.n - k)
        x.n -= k
        x.blocks -= top.blocks
        x.parent = top
        top.children[x.ids[x.off]] = x
        return top

    def nodes(self):
        """Every node below the root (for checks and debugging)."""
        stack = list(self.root.children.values())
        while stack:
            x = stack.pop()
            yield x
            stack.extend(x.children.values())

    def stats(self) -> dict:
        out: dict = {"lookups": self.lookups, "hit_requests": self.hit_requests, "hit_tokens": self.hit_tokens,
               "prompt_tokens": self.prompt_tokens, "hit_ids": self.hit_ids, "prompt_ids": self.prompt_ids,
               "evicted_blocks": self.evicted_blocks, "cached_blocks": self.pinned + self.evictable}
        if self.tracks_owners:
            out["evicted_by_class_cap_blocks"] = self.owner_evicted_blocks
        if self.tiers is not None:
            out["offload"] = self.tiers.stats()
        return out
