"""Which sessions and replicas each shard gets, and when that split is exact.

Sessions (a lone request counts as a session of its own) are hashed to
shards exactly as request classes and regions are split
(:class:`simulator.fleet.split.ShareSplit`: SplitMix64 of the session id,
else 2^62 + the request id, with the seed and a salt of its own), with N
equal shares. The split is therefore reproducible, consumes no random
stream, and is independent of the class and region splits. Every pool's
replicas are divided among the shards: shard k gets ``replicas // N``, plus
one for the first ``replicas % N`` shards (said in ``llmsim.shards``).

A sharded run is *exactly* the unsharded run of a fleet partitioned that
way (each shard's router sees only its shard's replicas), because:

* the traffic is the unsharded traffic: every shard draws the whole fleet's
  arrivals, lengths and session plans from the scenario's seed and keeps
  its own sessions, so the union of the shards' requests is the unsharded
  workload, request for request;
* nothing couples shards: no autoscaling (one controller per pool would
  become N, so it is refused for N > 1), no closed loop (its request total
  is shared by all users: refused), admission limits and KV budgets are per
  replica, and class/region/network draws are hashes or per-request;
* fleet figures are computed once, from the merged records and the summed
  replica timelines, taken to the end of the latest shard (a static replica
  is billed to the end of the run, as in one simulation).

Routing keeps a session inside its shard by construction, so the
partitioned fleet is an approximation of the real (unpartitioned) one,
whatever the router: with load-only routers (``round_robin``,
``least_outstanding``) a shard is a smaller pool, whose queueing is worse
than the whole fleet's; with ``session_affinity`` or ``prefix_aware`` a
hot session spills only to its shard's few replicas, where its prefix is
more likely cached than on the whole ring, so where replicas are busy the
sharded run reads more cache hits and lower tails than the fleet (the
chatbot's pools at four shards: p99 TTFT about a third low).
Two records differ from a single run of the partitioned fleet: the ids of
session requests (given in send order within a shard, renumbered at the
merge by send time, so equal unless two shards send at the same instant)
and network delays drawn from a law (the class table's stream is consumed
by each shard's requests only).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from ..errors import LlmsimError
from ..fleet.split import ShareSplit
from ..scenario.schema import Scenario
from workloads.spec import LoneRows
from ..fields import block, leaf

__all__ = ["EXACTNESS", "ShardSubset", "ShardPlan", "plan_shards", "shard_index", "lone_shard_index"]

#: The conditions, as the CLI and results.json state them.
EXACTNESS = ("exact for the fleet partitioned into the shards (each shard's router sees only its replicas): "
             "sessions hashed to shards, every pool's replicas divided, no autoscaling, no closed loop; "
             "an approximation of the unsharded fleet: load-only routers queue more in a shard's smaller pool "
             "(pessimistic), session_affinity and prefix_aware keep a busy session's spills and cache hits "
             "inside its shard (optimistic tails where replicas are busy)")

_SHARD_SALT = 0x3C6EF372FE94F82B
_LONE = np.uint64(1 << 62)          # a lone request's key offset, as ShareSplit uses
_C = [np.uint64(c) for c in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB)]


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """Vectorised :func:`simulator.fleet.routing.affinity.splitmix64`
    (uint64 arithmetic wraps modulo 2^64, as the scalar version masks)."""
    with np.errstate(over="ignore"):
        x = x + _C[0]
        x = (x ^ (x >> np.uint64(30))) * _C[1]
        x = (x ^ (x >> np.uint64(27))) * _C[2]
    return x ^ (x >> np.uint64(31))


def _unit(keys: np.ndarray, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Each key's hash as a fraction of 2^64, and the split's cumulative shares."""
    split = ShareSplit([1.0] * count, seed, _SHARD_SALT)
    h = _splitmix64(np.asarray(keys, dtype=np.uint64) ^ np.uint64(split.salt))
    return h.astype(np.float64) / 2.0 ** 64, np.asarray(split.cum)


def shard_index(keys: np.ndarray, count: int, seed: int) -> np.ndarray:
    """The shard of each hash key (a session id, or 2^62 + a lone request's
    id), equal to ``ShareSplit([1] * count, seed, salt).pick`` request by request."""
    u, cum = _unit(keys, count, seed)
    return np.minimum(np.searchsorted(cum, u, side="right"), count - 1)


def shard_mask(keys: np.ndarray, count: int, seed: int, index: int) -> np.ndarray:
    """``shard_index(keys, count, seed) == index`` by two comparisons per key
    instead of a search: a shard tests every key of the fleet's workload."""
    u, cum = _unit(keys, count, seed)
    keep = u >= cum[index - 1] if index > 0 else np.ones(u.shape, dtype=bool)
    if index < count - 1:        # the last shard also takes what lies past the last share
        keep &= u < cum[index]
    return keep


@dataclass(frozen=True)
class ShardSubset:
    """Shard ``index`` of ``count``: what a workload keeps (see
    :func:`workloads.drivers.make_source`'s ``subset``). ``rows``: its lone
    requests' draws, when the parent drew them once for every shard
    (:mod:`.predraw`); else the shard draws the fleet's and keeps its own."""

    index: int
    count: int
    seed: int
    rows: Optional[LoneRows] = field(default=None, compare=False, repr=False)

    def sessions(self, sids: np.ndarray) -> np.ndarray:
        """Mask of the sessions (by session id) this shard keeps."""
        return shard_mask(np.asarray(sids, dtype=np.uint64), self.count, self.seed, self.index)

    def requests(self, ids: np.ndarray) -> np.ndarray:
        """Mask of the lone requests (by request id) this shard keeps."""
        return shard_mask(_lone_keys(ids), self.count, self.seed, self.index)


def lone_shard_index(ids: np.ndarray, count: int, seed: int) -> np.ndarray:
    """The shard of each lone request (by id): where :meth:`ShardSubset.requests` keeps it."""
    return shard_index(_lone_keys(ids), count, seed)


def _lone_keys(ids: np.ndarray) -> np.ndarray:
    """A lone request's hash key: 2^62 + its id, apart from session ids (as ShareSplit keys them)."""
    return np.asarray(ids, dtype=np.uint64) + _LONE


@dataclass(frozen=True)
class ShardPlan:
    """The shards of one scenario: each shard's scenario (its share of every
    pool's replicas) and workload subset."""

    scenario: Scenario
    scenarios: tuple[Scenario, ...]
    subsets: tuple[Optional[ShardSubset], ...]
    replicas: dict[str, list[int]]           # pool -> replicas of each shard

    @property
    def count(self) -> int:
        return len(self.scenarios)

    @property
    def even(self) -> bool:
        return all(len(set(v)) == 1 for v in self.replicas.values())

    def describe(self) -> dict:
        """``llmsim.shards`` of results.json (the merge adds per-shard counts)."""
        return {"count": self.count,
                "split": "sessions (a lone request by its id) hashed with SplitMix64 on the seed "
                         "(as classes and regions are split), equal shares; each pool's replicas divided",
                "replicas_per_shard": self.replicas,
                "even": self.even,
                # bit for bit with one shard; with more, the run of the partitioned fleet
                "equals_unsharded_run": self.count == 1,
                "exact": EXACTNESS}


#: ``llmsim.shards``: :meth:`ShardPlan.describe`, and the merge's per-shard counts.
FIELDS = {
    "count": leaf("count", "shards (--shards)"), "split": leaf("text", "how requests and replicas were divided"),
    "replicas_per_shard": block("per pool", {"<pool>": leaf("list", "each shard's replicas")}),
    "even": leaf("bool", "every shard got the same replicas"),
    "equals_unsharded_run": leaf("bool", "the merged run is the unsharded run bit for bit (one shard)"),
    "exact": leaf("text", "when sharding equals the unsharded fleet, and when it approximates it"),
    "requests_per_shard": leaf("list", "each shard's requests"),
    "simulated_seconds_per_shard": leaf("list of s", "each shard's simulated span"),
}


def _divide(total: int, n: int) -> list[int]:
    return [total // n + (1 if k < total % n else 0) for k in range(n)]


def plan_shards(sc: Scenario, n: int, source: Optional[Path] = None) -> ShardPlan:
    """Split ``sc`` (read from ``source``) into ``n`` shards, or say why it cannot be split (exit 2).

    ``n == 1`` is the scenario itself with no subset: the plain run."""
    if n < 1:
        raise LlmsimError(f"--shards must be at least 1 (got {n})", key_path="--shards")
    if n == 1:
        return ShardPlan(sc, (sc,), (None,), {p.name: [p.replicas] for p in sc.pools})
    if sc.workload.closed_loop:
        raise LlmsimError(f"--shards {n}: a closed-loop workload (arrival concurrency) cannot be sharded: its "
                          "users share one request total, so the shards would not be independent",
                          key_path="workload.arrival", source=source)
    if sc.workload.lead_in_s:     # 0 is the cold start, sharded as ever
        raise LlmsimError(f"--shards {n}: a warm start (workload.lead_in_s) is not sharded yet: a shard's "
                          "records do not keep where the window opened; run it unsharded",
                          key_path="workload.lead_in_s", source=source)
    for i, c in enumerate(sc.classes):
        if c.rate_limit is not None:
            raise LlmsimError(f"--shards {n}: class {c.name!r} has a gateway rate limit, one bucket for all its "
                              "requests, which shards would split; run it unsharded",
                              key_path=f"classes[{i}].rate_limit", source=source)
    for i, p in enumerate(sc.pools):
        if p.autoscaling is not None:
            raise LlmsimError(f"--shards {n}: pool {p.name!r} autoscales, and one autoscaler per shard is not "
                              "the fleet's one controller; shard a fixed fleet (--set "
                              f"pools.{p.name}.autoscaling=null --set pools.{p.name}.replicas=R)",
                              key_path=f"pools[{i}].autoscaling", source=source)
        if p.replicas < n:
            raise LlmsimError(f"--shards {n}: pool {p.name!r} has {p.replicas} replica(s), fewer than the "
                              f"shards; each shard needs at least one replica of every pool",
                              key_path=f"pools[{i}].replicas", source=source)
    replicas = {p.name: _divide(p.replicas, n) for p in sc.pools}
    scenarios = tuple(
        sc.model_copy(update={"pools": [p.model_copy(update={"replicas": replicas[p.name][k]}) for p in sc.pools]})
        for k in range(n))
    return ShardPlan(sc, scenarios, tuple(ShardSubset(k, n, sc.seed) for k in range(n)), replicas)
