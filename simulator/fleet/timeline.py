"""The fleet over time: one row per pool per sample (``timeline.csv``).

Sampled on the fleet clock rather than at every event, so its size depends
on the simulated span, not on the traffic: a day at 10 s is 8,640 rows per
pool whether the fleet served a thousand requests or a billion.
"""
from __future__ import annotations

from typing import Mapping

from .pool import Pool, State

COLUMNS = ["time_s", "pool", "ready", "starting", "draining", "warm", "gpus_billed", "queue_depth",
           "kv_utilization", "arrival_rate_per_s"]


class Timeline:
    def __init__(self, pools: Mapping[str, Pool], gpus_per_replica: Mapping[str, int]) -> None:
        self.pools = pools
        self.tp = gpus_per_replica
        self.rows: list[tuple] = []
        self._last = {name: (p.env.now, p.arrivals) for name, p in pools.items()}

    def start(self) -> None:
        """The first sample, now: t = 0, where the window opens (after a warm start's lead-in, whose
        arrivals no row's rate counts)."""
        self._last = {name: (p.env.now, p.arrivals) for name, p in self.pools.items()}
        self.sample()

    def sample(self) -> None:
        for name, p in self.pools.items():
            now = p.env.now
            t0, a0 = self._last[name]
            rate = (p.arrivals - a0) / (now - t0) if now > t0 else 0.0
            self._last[name] = (now, p.arrivals)
            # ``warm``: the standbys a pool pays for, the ones still loading included, so the
            # states add up to what is billed.
            self.rows.append((now, name, len(p.ready), p.count(State.STARTING), p.count(State.DRAINING),
                              len(p.warm) + p.count(State.WARMING), p.billed * self.tp[name], p.queue_depth(),
                              p.kv_utilization(), rate))

    def frame(self, end: float):
        """The samples up to ``end`` (the run's last request) as a DataFrame."""
        import pandas as pd

        return pd.DataFrame([r for r in self.rows if r[0] <= end + 1e-9], columns=COLUMNS)
