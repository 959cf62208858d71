"""Which LoRA adapter a request asks for: one uniform draw per session or lone request.

A pool that serves LoRA adapters (``pools[].lora``) turns the draw into an
adapter through its popularity law (inverse CDF), so the workload needs to
know nothing of the pools, and changing the number of adapters or the law
moves each request along the same quantile. A session asks for one adapter
throughout (a user talks to one fine-tuned product); lone requests,
closed-loop requests and trace rows each draw their own.

The draws come from the ``adapters`` stream of :class:`workloads.spec.Streams`,
consumed in key order (session id, or request id) a chunk at a time, so
request i's draw depends neither on how many requests the run has nor on
the order the fleet sends them in, and a shard's requests draw what they
draw in the whole workload.
"""
from __future__ import annotations

import numpy as np

from .request import Request
from .spec import SeedLike, WorkloadSpec, spawn_streams

__all__ = ["AdapterDraws"]

_CHUNK = 4096


class AdapterDraws:
    """``draws(request)``: the request's uniform draw in [0, 1) for its adapter."""

    def __init__(self, workload: WorkloadSpec, seed: SeedLike):
        self.rng = spawn_streams(seed).adapters
        # Sessions are the synthetic session workloads'; a trace's session column only groups its rows.
        self.per_session = workload.session is not None
        self.u = np.empty(0)

    def __call__(self, req: Request) -> float:
        key = req.session if self.per_session else req.id
        if key >= len(self.u):
            more = max(_CHUNK, key + 1 - len(self.u))
            more = -(-more // _CHUNK) * _CHUNK          # whole chunks: the same values whatever the key order
            self.u = np.concatenate([self.u, self.rng.random(more)])
        return float(self.u[key])
