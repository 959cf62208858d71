"""A pool of identical replicas behind a router.

Workload drivers (:mod:`workloads.drivers`) call ``submit`` and ``cancel``;
replicas call ``on_done`` when a request ends.
"""
from __future__ import annotations

from typing import Callable, Optional

import simpy

from ..costmodel import CostModel
from ..metrics.gaps import GapLog
from .config import EngineConfig
from .reference import ReferenceReplica
from .replica import FastReplica
from .routing import Router
from workloads.request import Request

ENGINES = {"fast": FastReplica, "reference": ReferenceReplica}


class Pool:
    def __init__(self, env: simpy.Environment, cm: CostModel, cfg: EngineConfig, num_blocks: int, replicas: int,
                 router: Router, gaps: GapLog, engine: str = "fast",
                 on_done: Optional[Callable[[Request], None]] = None, max_model_len: int | None = None,
                 id_block_tokens: int | None = None):
        cls = ENGINES[engine]
        self.env = env
        self.router = router
        self.replicas = [cls(env, i, cm, cfg, num_blocks, gaps, on_done, max_model_len, id_block_tokens)
                         for i in range(replicas)]

    def submit(self, req: Request) -> None:
        self.replicas[self.router.choose(req, self.replicas)].submit(req)

    def end_time(self) -> float:
        """When the last request ended: the end of the simulated span. The
        clock may have run past it on a fast-engine timer made stale by a cut."""
        return max(r.t_end for r in self.replicas)

    def cancel(self, req: Request) -> None:
        if req.replica >= 0:
            self.replicas[req.replica].cancel(req)
