"""Which experts the measured MoE rows actually routed to, rank 0's share.

The kernel table times one rank's experts under a *synthetic* router
(AIConfigurator's collector, ``collector/helper.py`` at the data's commit):

* ``balanced``: token i takes experts (i + j·⌈E/k⌉) mod E, j < k (spread
  evenly when tokens < ⌈E/k⌉) — every expert is hit once tokens·k ≥ E,
  more distinct experts than a random router touches;
* ``power_law_α``: expert loads drawn from a power law (xmin 1, xmax
  0.8·tokens; xmin 0.01, xmax 2 when tokens·k ≤ E), rescaled to tokens·k
  pairs and rounded, each expert capped at one pair per token; what the
  cap and the rounding leave over is handed out rank by rank in turn, one
  pair to each rank's least loaded expert (or taken from its most loaded
  one), so a short batch spreads over the ranks as the balanced router
  does (one token of a top-22 layer at ep 8 puts 3 pairs on rank 0, not
  22); the most loaded EP group is swapped to rank 0; timed as the mean of
  5 draws.

Either router's choice is then routed again by the model's own router, as
vLLM runs it: for a group-limited one (DeepSeek-V3) that re-selection
decides rank 0's load (:func:`_grouped_local_counts`).

To fit kernel efficiencies rather than router statistics, the calibration
evaluates each row at the pairs and distinct experts rank 0 really had:
computed exactly for ``balanced``, averaged over seeded draws of the same
sampler for the power law (rank 0's pairs and distinct experts depend only
on its experts' counts, not on which token took which).
"""
from __future__ import annotations

import math
import zlib
from functools import lru_cache

import numpy as np
import pandas as pd

from ..costmodel.moe import padded_rows

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


def _water_fill(c: np.ndarray, q: int, ub: int) -> np.ndarray:
    """Each row of ``c`` after ``q`` single increments, each to the row's lowest
    entry below ``ub``, the first such entry on ties (``torch.argmin``). Rows
    at once: a rank by rank loop of these was most of a power-law draw."""
    s = np.sort(c, axis=-1)
    # The highest level the q units reach everywhere: filling the k lowest
    # entries to level L costs k L − (their sum), so with k filled the level
    # is (q + their sum) // k, capped at the next entry and at ub; the best k's.
    k = np.arange(1, s.shape[-1] + 1)
    above = np.concatenate([s[..., 1:], np.full(s.shape[:-1] + (1,), ub, dtype=s.dtype)], axis=-1)
    level = np.minimum(np.minimum((q + np.cumsum(s, axis=-1)) // k, above), ub)
    lo = np.where(level >= s, level, s[..., :1]).max(axis=-1, keepdims=True)
    out = np.maximum(c, lo)
    left = q - (out - c).sum(axis=-1, keepdims=True)      # never negative: the level's cost is at most q
    at = (out == lo) & (out < ub)
    out += at & (np.cumsum(at, axis=-1) <= left)
    return out


def _round_robin(counts: np.ndarray, remaining: int, step: int, ub: int) -> np.ndarray:
    """The collector's per-rank round robin (``_round_robin_adjust_per_rank``):
    rank after rank, one unit each, added to the rank's least loaded expert
    still below ``ub`` (``step`` +1) or taken from its most loaded one
    (``step`` −1), the first such expert on ties, until ``remaining`` units
    are placed. Rows of ``counts`` are ranks."""
    c = counts.copy()
    while remaining > 0:
        valid = (c < ub) if step > 0 else (c > 0)
        ranks = np.nonzero(valid.any(axis=1))[0]
        if not len(ranks):
            break
        full = remaining // len(ranks)
        if step > 0 and full:
            # `full` whole rounds: each rank water-fills its own experts.
            before = c[ranks]
            c[ranks] = after = _water_fill(before, full, ub)
            remaining -= int((after - before).sum())
            continue
        # one unit to each of the first `remaining` ranks (each rank's unit is its own)
        rows = ranks[:remaining]
        masked = np.where(valid[rows], c[rows], np.iinfo(np.int64).max if step > 0 else -1)
        c[rows, np.argmin(masked, axis=1) if step > 0 else np.argmax(masked, axis=1)] += step
        remaining -= len(rows)
    return c


def _power_law_counts(tokens: int, num_experts: int, topk: int, ep: int, alpha: float,
                      rng: np.random.Generator, draws: int = 1) -> np.ndarray:
    """Pairs per expert of ``draws`` successive power-law draws
    (``_generate_power_law_distribution``), one row each, the busiest rank's
    experts first. The draws' loads are drawn and rounded at once (the same
    numbers as one draw after another); only the round robin is per draw."""
    if tokens * topk > num_experts:
        xmin, xmax = 1.0, tokens * 0.8
    else:
        xmin, xmax = 0.01, 2.0
    u = rng.random((draws, num_experts))
    a1 = 1.0 - alpha
    load = ((xmax ** a1 - xmin ** a1) * u + xmin ** a1) ** (1.0 / a1)
    target = tokens * topk
    counts = np.round(load / load.sum(axis=1, keepdims=True) * target).astype(np.int64)
    # A token takes an expert at most once: no expert holds more than `tokens`.
    overflow = np.clip(counts - tokens, 0, None).sum(axis=1)
    counts = np.minimum(counts, tokens).reshape(draws, ep, num_experts // ep)
    for d, c in enumerate(counts):
        if overflow[d]:
            c = _round_robin(c, int(overflow[d]), +1, tokens)
        delta = target - int(c.sum())
        if delta:
            c = _round_robin(c, abs(delta), 1 if delta > 0 else -1, tokens)
        top = int(np.argmax(c.sum(axis=1)))
        c[[0, top]] = c[[top, 0]]
        counts[d] = c
    return counts.reshape(draws, num_experts)


def _assign(counts: np.ndarray, tokens: int, topk: int) -> np.ndarray:
    """Experts of each token (``_assign_experts_from_counts``): experts by
    descending load, each repeated by its count, filled column by column; the
    order of equally loaded experts is the sort's (stable here), which moves
    no pair between ranks unless a grouped router re-selects (below)."""
    order = np.argsort(-counts, kind="stable")
    return np.repeat(order, counts[order]).reshape(topk, tokens).T


def _kept_groups(ids: np.ndarray, num_experts: int, groups: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Per token and group: how many chosen experts it holds, and whether the
    router keeps it (groups ranked by the sum of their two best scores)."""
    n_group, topk_group = groups
    per = num_experts // n_group
    cell = (np.arange(ids.shape[0])[:, None] * n_group + ids // per).ravel()
    held = np.bincount(cell, minlength=ids.shape[0] * n_group).reshape(-1, n_group).astype(np.int8)
    # a group's rank: its score, then the lower index on ties (a stable sort's order), one key each
    key = np.minimum(held, 2).astype(np.int32) * n_group + np.arange(n_group - 1, -1, -1)
    least = np.partition(key, n_group - topk_group, axis=1)[:, n_group - topk_group:n_group - topk_group + 1]
    return held, key >= least


def _first_experts(groups: np.ndarray, per: int, m: int) -> np.ndarray:
    """Per token, the ``m`` lowest-indexed experts of its marked groups (each
    row marks as many groups, holding at least ``m`` experts)."""
    marked = np.nonzero(groups)[1].reshape(groups.shape[0], -1)      # ascending, row by row
    j = np.arange(m)
    return marked[:, j // per] * per + j % per


def _grouped_local_counts(ids: np.ndarray, num_experts: int, topk: int, groups: tuple[int, int],
                          ep: int) -> np.ndarray:
    """Pairs per expert of rank 0 once vLLM's group-limited router has
    re-selected the collector's logits.

    The collector hands each token's chosen experts one equal logit above an
    equal rest (``softmax(one_hot)``); a model with grouped routing
    (DeepSeek-V3: ``n_group`` 8, ``topk_group`` 4, zero correction bias)
    then ranks groups by the sum of their two best scores, keeps
    ``topk_group`` of them and takes the top-k experts inside those. When the
    chosen experts span more groups than are kept, or fewer than k of them
    fall in the kept groups, the rest are ties, broken towards the lowest
    index — which piles pairs on the lowest experts, rank 0's (an assumption
    about the kernels' tie order, borne out by the rows: the balanced
    DeepSeek rows at ep 64 run 14× what an even split predicts).

    So a token's picks are its chosen experts in kept groups, then the
    lowest-indexed other experts of kept groups, then of dropped ones, while
    k is not reached. With c chosen experts in kept groups, the k − c ties
    it takes there lie among the first k experts of those groups (only the c
    are passed over), and any further ones among the first k of its dropped
    groups: k candidates per token decide them, where a token-by-expert table
    cost most of the annotation's time (the router's sort itself is the
    tests' reference). Rank 0's experts are the lowest-indexed
    ``num_experts // ep``."""
    n_group, topk_group = groups
    per, local = num_experts // n_group, num_experts // ep
    held, kept = _kept_groups(ids, num_experts, groups)
    in_kept = np.take_along_axis(kept, ids // per, axis=1)
    picked = (held * kept).sum(axis=1, dtype=np.int32)
    picks = [ids[in_kept]]
    need = topk - picked                                   # ties to fill, per token
    if need.any():
        # the kept groups' other experts, by index
        cand = _first_experts(kept, per, min(topk, topk_group * per))
        free = ~(cand[:, :, None] == ids[:, None, :]).any(axis=2)
        picks.append(cand[free & (np.cumsum(free, axis=1) <= need[:, None])])
        need = need - np.minimum(topk_group * per - picked, need)
    if need.any():
        # then the dropped groups' experts, by index
        cand = _first_experts(~kept, per, min(topk, (n_group - topk_group) * per))
        picks.append(cand[np.arange(cand.shape[1]) < need[:, None]])
    picked_ids = np.concatenate(picks)
    return np.bincount(picked_ids[picked_ids < local], minlength=local)


def _local_counts(ids: np.ndarray, num_experts: int, ep: int) -> np.ndarray:
    local = num_experts // ep
    return np.bincount(ids[ids < local], minlength=local)


def rank0_counts(tokens: int, num_experts: int, topk: int, ep: int, distribution: str,
                 groups: tuple[int, int] | None = None) -> list[np.ndarray]:
    """Pairs per expert of rank 0, one array per draw of one measured row's
    router (one for ``balanced``, :data:`_DRAWS` seeded ones for a power
    law); ``groups`` (``n_group``, ``topk_group``): the model routes
    group-limited (:func:`_grouped_local_counts`)."""
    if distribution == "balanced":
        ids = _balanced_ids(tokens, num_experts, topk)
        return [_grouped_local_counts(ids, num_experts, topk, groups, ep) if groups
                else _local_counts(ids, num_experts, ep)]
    if not distribution.startswith("power_law_"):
        raise ValueError(f"unknown router distribution {distribution!r}")
    alpha = float(distribution.removeprefix("power_law_"))
    seed = zlib.crc32(repr((tokens, num_experts, topk, ep, distribution)).encode())
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    draws = _power_law_counts(tokens, num_experts, topk, ep, alpha, rng, _DRAWS)
    if groups:
        return [_grouped_local_counts(_assign(counts, tokens, topk), num_experts, topk, groups, ep)
                for counts in draws]
    return list(draws[:, :num_experts // ep])


# Every row block a row-padding kernel runs (matmul_ogs: powers of two
# 16..128; TRT-LLM-gen's token tiles: 8..256 and 192): rank 0's padded rows
# are annotated at each, the form picks the block per row.
PADDED_BLOCKS = (8, 16, 32, 64, 128, 192, 256)


def padded_column(block: int) -> str:
    return f"local_padded_rows_{block}"


def _summary(draws: list[np.ndarray]) -> tuple[float, ...]:
    d = np.asarray(draws, dtype=float)                  # draws × rank 0's experts, every draw at once
    return (float(d.sum(axis=1).mean()), float(np.count_nonzero(d, axis=1).mean()),
            *(float(padded_rows(d, b).mean()) for b in PADDED_BLOCKS))


def rank0_routing(tokens: int, num_experts: int, topk: int, ep: int, distribution: str,
                  groups: tuple[int, int] | None = None) -> tuple[float, float]:
    """(pairs, distinct experts) on rank 0 for one measured row's router,
    averaged over :func:`rank0_counts`' draws."""
    s = rank0_stats(tokens, num_experts, topk, ep, distribution, groups)
    return s[0], s[1]


@lru_cache(maxsize=None)
def rank0_stats(tokens: int, num_experts: int, topk: int, ep: int, distribution: str,
                groups: tuple[int, int] | None = None) -> tuple[float, ...]:
    """:func:`rank0_routing`, then the rows rank 0's grouped GEMMs compute in
    a kernel that pads each expert's pairs to a row block, one per
    :data:`PADDED_BLOCKS`, averaged over the draws. Cached: the draws are
    seeded by the row's own keys, so a row's statistics never change, and a
    process that loads the tables again (the calibration per GPU, the test
    suite per module) would otherwise redraw every router for tens of
    seconds."""
    return _summary(rank0_counts(tokens, num_experts, topk, ep, distribution, groups))


def padded_rows_at(df: pd.DataFrame, block) -> np.ndarray:
    """Per row: rank 0's padded rows at that row's block (one of :data:`PADDED_BLOCKS`)."""
    b = np.broadcast_to(np.asarray(block, dtype=float), (len(df),))
    out = np.full(len(df), np.nan)
    for blk in PADDED_BLOCKS:
        sel = b == blk
        if sel.any():
            out[sel] = df[padded_column(blk)].to_numpy()[sel]
    if np.isnan(out).any():
        raise ValueError(f"row blocks outside {PADDED_BLOCKS}: {sorted(set(b[np.isnan(out)]))}")
    return out


def annotate(df: pd.DataFrame) -> pd.DataFrame:
    """Add ``local_pairs``, ``local_active`` and the padded rows at each
    block (:func:`padded_column`; rank 0's, :func:`rank0_stats`) to MoE rows; columns
    ``n_group`` and ``topk_group``, where present and above 1, mark rows of a
    group-limited router."""
    df = df.assign(n_group=df["n_group"] if "n_group" in df else 1,
                   topk_group=df["topk_group"] if "topk_group" in df else 1)
    keys = ["num_tokens", "num_experts", "topk", "moe_ep", "distribution", "n_group", "topk_group"]
    uniq = df[keys].drop_duplicates()
    args = [(int(t), int(e), int(k), int(ep), str(dist), (int(g), int(tg)) if g > 1 else None)
            for t, e, k, ep, dist, g, tg in uniq.itertuples(index=False)]
    stats = [rank0_stats(*a) for a in args]
    uniq = uniq.assign(local_pairs=[s[0] for s in stats], local_active=[s[1] for s in stats],
                       **{padded_column(b): [s[2 + i] for s in stats] for i, b in enumerate(PADDED_BLOCKS)})
    return df.merge(uniq, on=keys, how="left")
