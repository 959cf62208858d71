"""The fleet's lone requests drawn once, and dealt to the shards.

Every shard must see its requests exactly as the unsharded workload has
them, so a shard on its own draws the whole fleet's arrivals and lengths
and keeps its ~1/N (:mod:`.split`). For a 64-shard 10M-DAU hour that is
64 draws of 18M arrivals, lengths and apps and 64 hashings of 18M ids:
~2.3 of a shard's ~20 CPU seconds. The parent instead draws them once,
hashes every id once, and gives each shard its rows (ids ascending, as a
shard's own mask would keep them); a shard then builds its requests from
those rows, equal value for value.

Only open-loop lone requests are dealt this way: sessions depend on the
fleet (a turn waits for the last) and are drawn as plans in the shard, and
a trace is read from its file. Memory: the parent holds the whole draw
while dealing it (~40 B a request, ~0.7 GB for 18M; each column is let go
once dealt) and the dealt rows (28 B a request) until each shard's job has
run.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from workloads.spec import LoneRows, spawn_streams
from ..scenario.schema import Scenario
from .split import ShardSubset, lone_shard_index

__all__ = ["dealt_rows"]

_CHUNK = 1 << 20          # ids hashed at a time
# Dealt columns (LoneRows' fields): ids, arrival, input, output tokens, app.
_DTYPES = (np.int64, np.float64, np.int32, np.int32, np.int32)


def dealt_rows(sc: Scenario, subsets: tuple[Optional[ShardSubset], ...]) -> Optional[list[LoneRows]]:
    """Each shard's rows of the fleet's lone requests, or None when the
    workload is not drawn that way (sessions, traces, closed loop, one shard)."""
    wl = sc.workload
    if len(subsets) < 2 or wl.session is not None or wl.is_trace or wl.closed_loop:
        return None
    s = spawn_streams(sc.seed)
    columns = list(wl.lone_rows(s, wl.draw_apps(s)))
    n, count = len(columns[0]), len(subsets)
    shard = np.concatenate([lone_shard_index(np.arange(lo, min(lo + _CHUNK, n)), count, sc.seed).astype(np.int32)
                            for lo in range(0, n, _CHUNK)] or [np.zeros(0, dtype=np.int32)])
    order = np.argsort(shard, kind="stable")          # stable: ids stay ascending within a shard
    cuts = np.searchsorted(shard[order], np.arange(count + 1))
    del shard
    parts = [order[cuts[k]:cuts[k + 1]] for k in range(count)]
    dealt: list[list] = [[] for _ in range(count)]
    for j in range(len(columns)):      # a column at a time, each let go once dealt
        full, columns[j] = columns[j], None
        for k, rows in enumerate(parts):
            dealt[k].append(None if full is None else full[rows].astype(_DTYPES[j]))
        del full
    return [LoneRows(*d) for d in dealt]
