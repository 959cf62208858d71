"""A serving stack's front end: requests reach the scheduler one at a time.

Every serving stack receives a request in a front-end process (vLLM's API
server, SGLang's tokenizer manager, TensorRT-LLM's executor client) that
parses the HTTP request, tokenises the prompt and hands it to the scheduler.
That process handles one request at a time, so a burst of arrivals (a
closed-loop benchmark's clients all replying to the same iteration's
finishes, or its start) reaches the scheduler spread over the front end's
time per request, and the scheduler, which picks up what has arrived at each
iteration boundary, splits the burst across iterations. This is what breaks
the lockstep a closed loop of identical requests would otherwise keep
forever: nothing random, only a serial stage with a cost per request.

One front end per replica, FIFO, deterministic: a request entering at ``t``
reaches the replica at ``max(t, free) + request_ms + tokens · tokenize_us``.
A request in the front end is already the replica's: it counts in the
replica's outstanding requests and tokens, the load routers and autoscalers
read, or a burst routed by load (every client of a closed loop at its
start) would all go to the replica that looked idlest before the first of
them reached its scheduler.
"""
from __future__ import annotations

from typing import Any, Callable

import simpy

from workloads.drivers import fire
from workloads.request import Request, Status


class FrontEnd:
    """The serial front end of one replica."""

    __slots__ = ("env", "replica", "per_request_s", "per_token_s", "free_at", "inside", "by_priority")

    def __init__(self, env: simpy.Environment, replica: Any, request_ms: float, tokenize_us_per_token: float) -> None:
        self.env = env
        self.replica = replica
        self.per_request_s = request_ms * 1e-3
        self.per_token_s = tokenize_us_per_token * 1e-6
        self.free_at = env.now   # a warm start's lead-in runs before t = 0
        self.inside: dict[int, Request] = {}   # requests still in the front end, by id, in entry order
        self.by_priority: dict[int, int] = {}   # how many of them each priority has (admission counts them per arrival)

    def enter(self, req: Request, deliver: Callable[[Request], None]) -> None:
        now = self.env.now
        done = max(now, self.free_at) + self.per_request_s + req.input_tokens * self.per_token_s
        self.free_at = done
        self.inside[req.id] = req
        self._count(req, 1)

        def out(_ev: object) -> None:
            if req.id not in self.inside:        # dropped meanwhile (cancelled)
                return
            del self.inside[req.id]
            self._count(req, -1)
            if req.status is Status.PENDING:
                deliver(req)
        fire(self.env, done - now, out)

    def ahead(self, priority: int) -> list[Request]:
        """The requests inside of ``priority`` or higher: they reach the
        replica's queue before a request entering now, and are served before it there."""
        return [r for r in self.inside.values() if r.priority >= priority]

    def holds(self, req: Request) -> bool:
        return req.id in self.inside

    def drop(self, req: Request) -> None:
        """The client gave up while the request was in the front end."""
        if req.id in self.inside:
            del self.inside[req.id]
            self._count(req, -1)

    def count_ahead(self, priority: int) -> int:
        """``len(ahead(priority))`` without listing the requests inside: admission asks it on every arrival."""
        return sum(n for p, n in self.by_priority.items() if p >= priority)

    def _count(self, req: Request, n: int) -> None:
        self.by_priority[req.priority] = self.by_priority.get(req.priority, 0) + n
        r = self.replica
        r.outstanding += n
        r.outstanding_tokens += n * req.input_tokens
