"""Paged-KV block arithmetic shared by both engines.

The fast engine needs Σ ceil(kv_i / bs) over a decoding batch *at a future
iteration* without visiting every sequence. Writing kv_i = c_i + g (c_i
fixed while the sequence decodes, g the replica's decode-iteration counter)
and u_i = c_i + bs − 1 = q_i·bs + r_i gives

    ceil((c_i + g)/bs) = q_i + g//bs + [r_i ≥ bs − g % bs]

so the batch total is Q + B·(g//bs) + #{r_i ≥ bs − g%bs}: three aggregates
and a histogram of residues, O(bs) to rebuild and O(1) to query.
"""
from __future__ import annotations


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class BlockDemand:
    """Aggregate block demand of a set of decoding sequences."""

    __slots__ = ("bs", "q_sum", "count", "hist", "_suffix", "_dirty")

    def __init__(self, block_size: int) -> None:
        self.bs = block_size
        self.q_sum = 0
        self.count = 0
        self.hist = [0] * block_size
        self._suffix = [0] * (block_size + 1)
        self._dirty = False

    def add(self, c: int) -> None:
        q, r = divmod(c + self.bs - 1, self.bs)
        self.q_sum += q
        self.count += 1
        self.hist[r] += 1
        self._dirty = True

    def remove(self, c: int) -> None:
        q, r = divmod(c + self.bs - 1, self.bs)
        self.q_sum -= q
        self.count -= 1
        self.hist[r] -= 1
        self._dirty = True

    def at(self, g: int) -> int:
        """Σ ceil((c_i + g)/bs): blocks the set holds when its kv is c_i + g."""
        if self._dirty:
            s = 0
            suf = self._suffix
            suf[self.bs] = 0
            for r in range(self.bs - 1, -1, -1):
                s += self.hist[r]
                suf[r] = s
            self._dirty = False
        gq, h = divmod(g, self.bs)
        return self.q_sum + self.count * gq + (self._suffix[self.bs - h] if h else 0)
