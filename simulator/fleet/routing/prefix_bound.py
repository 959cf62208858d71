"""Upper bounds on the replicas' cached prefixes, so a cache-aware router asks few replicas.

A router that scores replicas by cached prefix minus load can skip a
replica whose score could not beat the best so far even with the largest
hit it could have, and stop once that holds for every replica left. With
only the prompt length as that bound, a shared system prompt defeats it:
every replica caches the same ~1K tokens, the bound says ~3K, and the router
asks all of them (26 % of a 10M-DAU shard's time, 54 % of the 32-replica
benchmark's). sgl-router avoids asking by keeping its own radix tree of
what it sent where, which is approximate (it forgets on a timer, not on
eviction). These bounds are exact instead, and so leave every routing
decision unchanged:

A radix tree of every id chain routed through this router (a request's
prompt and output ids: all a replica can ever cache), each node marked with
the replicas its chains were sent to (a bitmask of replica indices). A
replica can hold an id only if a chain through that node went to it, so the
deepest node on a prompt's path whose mask has replica r bounds r's hit,
and the deepest node of all bounds everyone's. It starts from what the
replicas hold at the first request and, when it has grown to twice that,
is rebuilt from the routable replicas' caches and the ids of the requests
they have queued or running (``cache_tree`` and ``held_chains``; replicas
outside the routing list are never chosen, and one that joins it later
starts empty), so its size stays bounded by KV capacity, not by the number
of requests. Cost per request: one walk of the tree to bound and one to
enter the chain (O(depth) Python steps, C-speed run comparisons); rebuilds
amortised.

A lone request's own ids (past ``Request.shared_ids``: its prompt after
the system prompt, and its output) are left out. No other request carries
them and the router routes each request once, so no later prompt's path
can reach them and the bounds stay exact; entering them only made the tree
grow by every request's ~200 ids and be rebuilt every few thousand
requests (rebuilding and entering took 8.7 % of a 10M-DAU shard under
py-spy), where now it holds the system prompts and stops growing.
"""
from __future__ import annotations

from typing import Optional, Sequence

from ...engine.prefix_cache import agree, usable

# Below this many ids a rebuild is not worth its cost.
MIN_REBUILD = 1 << 16


class _Node:
    __slots__ = ("ids", "children", "mask")

    def __init__(self, ids: tuple, mask: int = 0) -> None:
        self.ids = ids
        self.children: dict[int, _Node] = {}
        self.mask = mask        # bit r: a chain through here went to replica index r


class Bounds:
    """A prompt's bounds: ``best`` for any replica, :meth:`of` for one."""

    __slots__ = ("best", "path")

    def __init__(self, best: int, path: list[tuple[int, int]]) -> None:
        self.best = best
        self.path = path       # (tokens, mask) per node on the prompt's path, deepest first

    def of(self, index: int) -> int:
        """Bound on the hit of the replica with this ``index``."""
        bit = 1 << index
        for tokens, mask in self.path:
            if mask & bit:
                return tokens
        return 0


class PrefixBound:
    def __init__(self) -> None:
        self.root: Optional[_Node] = None   # built from the replicas at the first request
        self.size = 0             # ids held
        self.limit = MIN_REBUILD

    def bounds(self, blocks: Sequence[int], prompt: int, replicas: Sequence) -> Optional[Bounds]:
        """Bounds on the prompt tokens each of ``replicas`` could serve from
        its cache for a ``prompt``-token request with ids ``blocks``; None
        when the replicas do not report their caches (``cache_block_tokens``,
        ``cache_tree`` and ``held_chains``): then nothing is known."""
        H = getattr(replicas[0], "cache_block_tokens", None)
        if H is None:
            return None
        if self.size > self.limit or self.root is None:
            self._rebuild(replicas)
        limit = min(len(blocks), -(-prompt // H))
        path: list[tuple[int, int]] = []
        node, pos = self.root, 0
        assert node is not None   # (re)built above
        while pos < limit:
            child = node.children.get(blocks[pos])
            if child is None:
                break
            k = agree(blocks, pos, child.ids, min(len(child.ids), limit - pos))
            pos += k
            path.append((usable(pos * H, prompt), child.mask))   # a partial last id only lowers a hit
            if k < len(child.ids):
                break
            node = child
        path.reverse()
        return Bounds(path[0][0] if path else 0, path)

    def enter(self, chain: Sequence[int], index: int, shared: Optional[int] = None) -> None:
        """Record that ``chain`` went to the replica with this ``index``; only
        its first ``shared`` ids when the rest are the request's own
        (``Request.shared_ids``)."""
        assert self.root is not None, "enter() follows a bounds() call"
        self._enter(self.root, chain, 1 << index, len(chain) if shared is None else min(shared, len(chain)))

    def _enter(self, node: _Node, run: Sequence[int], bit: int, n: int) -> tuple[_Node, int]:
        """Add ``run[:n]`` below ``node``, marking its path with ``bit``: (the
        node it now ends at, ids of it already held)."""
        pos = 0
        while pos < n:
            child = node.children.get(run[pos])
            if child is None:
                new = node.children[run[pos]] = _Node(tuple(run[pos:n]), bit)
                self.size += n - pos
                return new, pos
            have = child.ids
            k = agree(run, pos, have, min(len(have), n - pos))
            if k < len(have):   # ends or diverges inside the node: split it there
                top = node.children[run[pos]] = _Node(have[:k], child.mask | bit)
                child.ids = have[k:]
                top.children[have[k]] = child
                pos += k
                if pos == n:
                    return top, pos
                new = top.children[run[pos]] = _Node(tuple(run[pos:n]), bit)
                self.size += n - pos
                return new, pos
            child.mask |= bit
            pos += k
            node = child
        return node, pos

    def _rebuild(self, replicas: Sequence) -> None:
        """Copy the replicas' cache trees in (run by run, not path by path)
        and the chains of the requests they hold."""
        self.root, self.size = _Node(()), 0
        for r in replicas:
            bit = 1 << r.index
            tree = r.cache_tree
            if tree is not None:
                stack = [(tree, self.root)]
                while stack:
                    x, at = stack.pop()
                    for c in x.children.values():
                        stack.append((c, self._enter(at, c.ids[c.off:c.off + c.n], bit, c.n)[0]))
            for chain in r.held_chains():
                self._enter(self.root, chain, bit, len(chain))
        self.limit = max(MIN_REBUILD, 2 * self.size)
