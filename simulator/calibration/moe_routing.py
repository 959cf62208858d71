"""Which experts the measured MoE rows actually routed to, rank 0's share.

The kernel table times one rank's experts under a *synthetic* router
(AIConfigurator's collector, ``collector/helper.py`` at the data's commit):

* ``balanced``: token i takes experts (i + j·⌈E/k⌉) mod E, j < k (spread
  evenly when tokens < ⌈E/k⌉) — every expert is hit once tokens·k ≥ E,
  more distinct experts than a random router touches;
* ``power_law_α``: expert loads drawn from a power law (xmin 1, xmax
  0.8·tokens, rescaled to tokens·k pairs), the most loaded EP group swapped
  to rank 0, tokens given experts in order of load; timed as the mean of 5
  draws.

To fit kernel efficiencies rather than router statistics, the calibration
evaluates each row at the pairs and distinct experts rank 0 really had:
computed exactly for ``balanced``, averaged over seeded draws of the same
sampler for the power law. Ties in the collector's top-k (a token handed
the same hot expert twice) are resolved towards the lowest expert ids, as
``torch.topk`` does for equal logits on the tested builds — an assumption,
it moves a few pairs on rank 0.
"""
from __future__ import annotations

import math
import zlib

import numpy as np
import pandas as pd

_DRAWS = 5


def _balanced_ids(tokens: int, num_experts: int, topk: int) -> np.ndarray:
    stride = math.ceil(num_experts / topk)
    i = np.arange(tokens, dtype=float)[:, None]
    j = np.arange(topk, dtype=float)[None, :]
    if tokens >= stride:
        ids = (i + j * stride) % num_experts
    else:
        ids = (i * stride / tokens + j * stride) % num_experts
    return ids.astype(np.int64)


def _power_law_ids(tokens: int, num_experts: int, topk: int, ep: int, alpha: float,
                   rng: np.random.Generator) -> np.ndarray:
    if tokens * topk > num_experts:
        xmin, xmax = 1.0, tokens * 0.8
    else:
        xmin, xmax = 0.01, 2.0
    u = rng.random(num_experts)
    a1 = 1.0 - alpha
    load = ((xmax ** a1 - xmin ** a1) * u + xmin ** a1) ** (1.0 / a1)
    target = tokens * topk
    counts = np.round(load / load.sum() * target).astype(np.int64)
    delta = target - int(counts.sum())
    order = np.argsort(-counts, kind="stable")
    if delta > 0:
        np.add.at(counts, order[np.arange(delta) % num_experts], 1)
    for step in range(-delta):
        idx = order[-(step % num_experts) - 1]
        if counts[idx] > 0:
            counts[idx] -= 1
        else:
            counts[np.argmax(counts)] -= 1
    group = num_experts // ep
    sums = counts.reshape(ep, group).sum(axis=1)
    top = int(np.argmax(sums))
    if top:
        c = counts.reshape(ep, group).copy()
        c[[0, top]] = c[[top, 0]]
        counts = c.reshape(-1)
    order = np.argsort(-counts, kind="stable")
    assignments = np.repeat(order, counts[order])
    return assignments.reshape(topk, tokens).T


def _dedupe(ids: np.ndarray, num_experts: int) -> np.ndarray:
    """Rows with a repeated expert take the lowest unused ids instead (top-k ties)."""
    s = np.sort(ids, axis=1)
    bad = np.nonzero((s[:, 1:] == s[:, :-1]).any(axis=1))[0] if ids.shape[1] > 1 else []
    for r in bad:
        row = list(dict.fromkeys(ids[r].tolist()))
        spare = (e for e in range(num_experts) if e not in set(row))
        while len(row) < ids.shape[1]:
            row.append(next(spare))
        ids[r] = row
    return ids


def _rank0(ids: np.ndarray, num_experts: int, ep: int) -> tuple[float, float]:
    local = ids[ids < num_experts // ep]
    return float(local.size), float(np.unique(local).size)


def rank0_routing(tokens: int, num_experts: int, topk: int, ep: int, distribution: str) -> tuple[float, float]:
    """(pairs, distinct experts) on rank 0 for one measured row's router."""
    if distribution == "balanced":
        return _rank0(_balanced_ids(tokens, num_experts, topk), num_experts, ep)
    if not distribution.startswith("power_law_"):
        raise ValueError(f"unknown router distribution {distribution!r}")
    alpha = float(distribution.removeprefix("power_law_"))
    seed = zlib.crc32(repr((tokens, num_experts, topk, ep, distribution)).encode())
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    draws = [_rank0(_dedupe(_power_law_ids(tokens, num_experts, topk, ep, alpha, rng), num_experts),
                    num_experts, ep) for _ in range(_DRAWS)]
    return float(np.mean([d[0] for d in draws])), float(np.mean([d[1] for d in draws]))


def annotate(df: pd.DataFrame) -> pd.DataFrame:
    """Add ``local_pairs`` and ``local_active`` (rank 0's) to MoE rows."""
    keys = ["num_tokens", "num_experts", "topk", "moe_ep", "distribution"]
    uniq = df[keys].drop_duplicates()
    stats = [rank0_routing(int(t), int(e), int(k), int(ep), str(dist)) for t, e, k, ep, dist in uniq.itertuples(index=False)]
    uniq = uniq.assign(local_pairs=[s[0] for s in stats], local_active=[s[1] for s in stats])
    return df.merge(uniq, on=keys, how="left")
