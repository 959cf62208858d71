"""The fleet's front door: class, region, network, pool.

A request leaves the client (in its region, when the scenario declares
regions) at ``arrival``, spends its class's network ingress for that
region and tokenisation time, and reaches the pool serving its class at
``queued``. Its response travels back with the egress latency, which the
client sees on every token: the first token and the finish are stamped
client-side, so TTFT and E2EL include the network while TPOT and ITL (gaps
between tokens) do not change. A session's next turn starts from the
response the client received.

A class with a ``rate_limit`` passes the gateway's token buckets
(:mod:`simulator.fleet.ratelimit`) when it reaches the server, after the
ingress: over the limit, it ends ``RATE_LIMITED`` there and the client hears
so after the egress, as any response.
"""
from __future__ import annotations

import math
from typing import Callable, Mapping, Optional

import simpy

from workloads.drivers import fire
from workloads.request import Request, Status
from .classes import ClassTable
from .ratelimit import RateLimiter
from .regions import RegionTable


class Fleet:
    """Routes each request of the workload to the pool of its class."""

    def __init__(self, env: simpy.Environment, pools: Mapping[str, object], classes: ClassTable,
                 routes: Mapping[str, str], on_done: Optional[Callable[[Request], None]] = None,
                 regions: Optional[RegionTable] = None, response_s: Optional[Mapping[str, float]] = None) -> None:
        self.env = env
        self.pools = pools
        self.classes = classes
        self.regions = regions
        self.routes = routes              # class name -> pool name
        self.on_done = on_done
        self._egress: dict[int, float] = {}
        self._transit: set[int] = set()           # ids between the client and a pool
        # pool name -> its serving stack's time from a token leaving the
        # engine to the client (detokenise, stream): on every token, like egress.
        self.response_s = {k: v for k, v in (response_s or {}).items() if v > 0}
        self.limits = {c.name: RateLimiter(c.rate_limit, env.now) for c in classes.classes
                       if c.rate_limit is not None}
        # class -> [(below_tokens or None, pool)]: routing by prompt length
        self.by_length = {c.name: [(s.below_tokens, s.pool) for s in c.pool_by_input_length]
                          for c in classes.classes if c.pool_by_input_length is not None}

    def submit(self, req: Request) -> None:
        c = self.classes.assign(req)
        if self.regions is not None:
            self.regions.assign(req)
        req.pool = self.routes[c.name] if c.name not in self.by_length else self._by_length(c.name, req)
        if not self.classes.network:
            self._queue(req)
            return
        net, tok = self.classes.ingress(c, req)
        req.net_in = net
        self._egress[req.id] = self.classes.egress(c, req)
        delay = net + tok
        if delay > 0:
            self._transit.add(req.id)
            fire(self.env, delay, lambda _ev: self._queue(req))
        else:
            self._queue(req)

    def _by_length(self, klass: str, req: Request) -> str:
        """The first pool whose step the prompt is below and that can hold
        it (prompt + output within its context and KV), else the last."""
        steps = self.by_length[klass]
        for below, pool in steps:
            if (below is None or req.input_tokens < below) and self.pools[pool].can_hold(req):
                return pool
        return steps[-1][1]

    def _queue(self, req: Request) -> None:
        if req.status is not Status.PENDING:      # cancelled on its way in
            return
        if req.id in self._transit:          # after ingress (otherwise queued = arrival, exactly)
            self._transit.discard(req.id)
            req.queued = self.env.now
        if self.limits:
            limit = self.limits.get(req.klass)
            if limit is not None and not limit.admit(self.env.now, req.input_tokens + req.output_tokens):
                req.status = Status.RATE_LIMITED
                req.finish = self.env.now
                self.done(req)
                return
        self.pools[req.pool].submit(req)

    def cancel(self, req: Request) -> None:
        """The client gave up: a request still on its way in ends here,
        one already queued is the pool's to end."""
        if req.status is not Status.PENDING:
            return
        if req.id in self._transit:
            self._transit.discard(req.id)
            self._egress.pop(req.id, None)
            req.status = Status.CANCELLED
            req.finish = self.env.now
            if self.on_done:
                self.on_done(req)
            return
        self.pools[req.pool].cancel(req)

    def done(self, req: Request) -> None:
        """A pool ended ``req``: stamp what the client sees, then tell the workload."""
        if math.isnan(req.prefill_done):
            req.prefill_done = req.first_token
        out = self._egress.pop(req.id, 0.0)
        late = out + self.response_s.get(req.pool, 0.0) if self.response_s else out
        if late and req.status is Status.FINISHED:
            req.net_out = out
            req.first_token += late
            req.finish += late
            if self.on_done:
                fire(self.env, late, lambda _ev: self.on_done(req))
            return
        if self.on_done:
            self.on_done(req)
