"""A pool of identical replicas behind a router, fed by a workload driver.

Arrivals are scheduled one at a time as URGENT events (one pending event
per open-loop workload, not one per request), so memory does not grow with
the number of requests still to come.
"""
from __future__ import annotations

from typing import Callable, Iterable, Iterator, Optional

import numpy as np
import simpy
from simpy.events import URGENT

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


def _fire(env: simpy.Environment, delay: float, callback) -> None:
    ev = simpy.Event(env)
    ev._ok = True
    ev._value = None
    ev.callbacks.append(callback)
    env.schedule(ev, URGENT, delay)


def drive_open_loop(env: simpy.Environment, requests: Iterable[Request], submit: Callable[[Request], None]) -> None:
    """Submit each request at its arrival time, keeping one event pending."""
    it: Iterator[Request] = iter(requests)

    def step(_ev=None, req: Request | None = None) -> None:
        if req is not None:
            submit(req)
        nxt = next(it, None)
        if nxt is not None:
            _fire(env, max(nxt.arrival - env.now, 0.0), lambda ev: step(ev, nxt))

    step()


class ClosedLoop:
    """``concurrency`` users, each sending its next request when the last ends.

    A follow-up is created at the finish time and delivered as an URGENT
    event, i.e. after the replica has planned the iteration starting then:
    it joins at the next iteration boundary, like a real client whose reply
    crossed the network.
    """

    def __init__(self, env: simpy.Environment, concurrency: int, total: int,
                 lengths: Callable[[int], tuple[int, int]], submit: Callable[[Request], None]):
        self.env = env
        self.total = total
        self.lengths = lengths
        self.submit = submit
        self.issued: list[Request] = []
        for _ in range(min(concurrency, total)):
            self._issue()

    def _issue(self) -> None:
        i = len(self.issued)
        inp, out = self.lengths(i)
        req = Request(i, self.env.now, inp, out)
        self.issued.append(req)
        _fire(self.env, 0.0, lambda ev: self.submit(req))

    def on_done(self, req: Request) -> None:
        if len(self.issued) < self.total:
            self._issue()


def length_table(inputs: np.ndarray, outputs: np.ndarray) -> Callable[[int], tuple[int, int]]:
    return lambda i: (int(inputs[i]), int(outputs[i]))
