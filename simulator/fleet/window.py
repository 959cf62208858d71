"""Where a warm start's window opens: t = 0, after ``workload.lead_in_s`` of lead-in.

A run with a warm start begins at ``-lead_in_s`` on the simulation clock
so that the window's own times (arrivals, stamps, the timeline, the bill)
read from 0 as a cold run's do. The lead-in fills the fleet (sessions in
progress, queues, prefix caches, autoscaled replicas) and is then forgotten
by what reports the window: its requests are left out as a closed loop's
warm-up is (the runner's ``src.requests[warmup:]``), and at t = 0 each pool
restarts its logs and counters here. A replica's counters keep running in
the compiled engine, so the pool keeps what they read at t = 0 and the
report subtracts it (:func:`since_window`). A replica's counters take in
an engine step (a decode stretch in the fast engine) at its end, so the
one in flight at t = 0 is split there (``done_before``): its time busy
and KV held by the clock, its iterations and tokens by where each ends,
alike in both engines. Maxima (the most KV held, the longest queue)
cannot be split so and cover the lead-in too; the ITL gaps of a fast
decode stretch in flight at t = 0 are logged at its end, whole.
"""
from __future__ import annotations

from typing import Any, Optional

__all__ = ["COUNTERS", "CACHE_COUNTERS", "TIER_COUNTERS", "LORA_COUNTERS", "open_window", "since_window"]

#: A replica's ``stats`` entries that only grow: the window's share is their growth since t = 0.
COUNTERS = ("preemptions", "outputs_clipped", "busy_time", "tokens_processed", "iterations", "kv_used_area", "kv_filled_area")
#: The prefix cache's (hit rates are read from them); ``cached_blocks`` is a level, kept as it stands.
CACHE_COUNTERS = ("lookups", "hit_requests", "hit_tokens", "prompt_tokens", "hit_ids", "prompt_ids",
                  "evicted_blocks", "evicted_by_class_cap_blocks")
#: An offload tier's (``prefix_cache.offload.<tier>``); its capacity and ``blocks_at_end`` are levels.
TIER_COUNTERS = ("offloaded_blocks", "dropped_blocks", "hit_requests", "hit_tokens", "reloaded_blocks",
                 "reloaded_bytes", "reload_s")
#: How admissions found their LoRA adapter (``lora``).
LORA_COUNTERS = ("hits", "host_loads", "disk_loads", "load_s")
#: Time averages over the replica's life: turned into the window's by their areas.
_AVERAGES = ("queue_mean", "batch_mean")


def open_window(pool) -> None:
    """Start ``pool``'s window now: its replica-count logs restart at their current values (the bill,
    GPU counts and replica figures integrate from here), admission rejections count from zero, the
    replicas already stopped are no longer the window's, and every replica's counters are kept to be
    subtracted (:func:`since_window`)."""
    from .pool import State    # (pool.py imports this module)

    now = pool.env.now
    pool.window_start = now
    pool.at_window = {r.index: _stats_at(r, now) for r in pool.replicas}
    pool.stopped_before_window = sum(1 for s in pool.state if s is State.STOPPED)
    pool.rejected = 0
    for log in (pool.billing, pool.serving, pool.working):
        before = [step for step in log if step[0] < now]
        after = log[len(before):]
        if before:   # the step in force now starts now; what came before is the lead-in's
            log[:] = after if after and after[0][0] == now else [(now, before[-1][1])] + after


def _stats_at(replica, now: float) -> dict:
    """``replica``'s stats as of ``now`` exactly: with the part of the iteration (or decode stretch) in flight
    that ran before it, which its counters take in only at its end."""
    stats = replica.stats(now)
    for k, v in replica.done_before(now).items():
        stats[k] += v
    return stats


def since_window(stats: dict, base: Optional[dict], now: float, t0: float, start: float) -> dict:
    """A replica's ``stats`` at ``now`` over the window alone: counters less what they read at its
    start (``base``, None for a replica started after it), and the queue and batch means over
    [``start``, now] of a replica alive since ``t0``."""
    if base is None:
        return stats
    out: dict[str, Any] = dict(stats)
    for k in COUNTERS:
        if k in out:
            out[k] = out[k] - base[k]
    if start > t0:
        span = now - start
        for k in _AVERAGES:
            area = stats[k] * (now - t0) - base[k] * (start - t0)
            out[k] = area / span if span > 0 else 0.0
    pc, pc0 = stats.get("prefix_cache"), base.get("prefix_cache")
    if pc is not None and pc0 is not None:
        out["prefix_cache"] = _less(pc, pc0, CACHE_COUNTERS)
        if "offload" in pc:
            out["prefix_cache"]["offload"] = {t: _less(v, pc0["offload"][t], TIER_COUNTERS)
                                              for t, v in pc["offload"].items()}
    if "lora" in stats:
        out["lora"] = _less(stats["lora"], base["lora"], LORA_COUNTERS)
    return out


def _less(now: dict, then: dict, counters: tuple[str, ...]) -> dict:
    """``now`` with each of ``counters`` less what it read ``then``; levels as they stand."""
    return {**now, **{k: now[k] - then[k] for k in counters if k in now}}
