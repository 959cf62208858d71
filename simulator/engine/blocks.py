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


def kv_usage(used: float, blocks: float) -> float:
    """``used`` blocks over a pool of ``blocks`` that requests can hold, 0 for a pool of none:
    vLLM's null block can be a rank's only block (num_gpu_blocks_override: 1 starts on releases
    whose start-up check counts it), and BlockPool.get_usage answers such a pool 0, not a
    division by zero."""
    return used / blocks if blocks > 0 else 0.0


def _divmod(a: int, b: int) -> tuple[int, int]:
    """``divmod`` on ints: compiled, the builtin boxes both and builds a
    tuple; this is two native operations (floor semantics, as divmod)."""
    q = a // b
    return q, a - q * b


class BlockDemand:
    """Aggregate block demand of a set of decoding sequences."""

    __slots__ = ("bs", "q_sum", "count", "hist")

    def __init__(self, block_size: int) -> None:
        self.bs = block_size
        self.q_sum = 0
        self.count = 0
        self.hist = [0] * block_size

    def add(self, c: int) -> None:
        q, r = _divmod(c + self.bs - 1, self.bs)
        self.q_sum += q
        self.count += 1
        self.hist[r] += 1

    def remove(self, c: int) -> None:
        q, r = _divmod(c + self.bs - 1, self.bs)
        self.q_sum -= q
        self.count -= 1
        self.hist[r] -= 1

    def at(self, g: int) -> int:
        """Σ ceil((c_i + g)/bs): blocks the set holds when its kv is c_i + g."""
        bs = self.bs
        gq, h = _divmod(g, bs)
        total = self.q_sum + self.count * gq
        hist = self.hist
        for r in range(bs - h, bs):   # a loop, not sum() of a slice: compiled, it makes no list
            total += hist[r]
        return total
