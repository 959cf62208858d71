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

_CHUNK = 256


class AdapterDraws:
    """``draws(request)``: the request's uniform draw in [0, 1) for its adapter.

    Key k's draw is the k-th value of the stream: its chunk is drawn after
    jumping the generator ahead (PCG64 ``advance``; one 64-bit output per
    double), so keys far apart (a sub-session's id) cost one chunk each,
    not every draw between them."""

    def __init__(self, workload: WorkloadSpec, seed: SeedLike):
        self.state = spawn_streams(seed).adapters.bit_generator.state
        # Sessions are the synthetic session workloads'; a trace's session column only groups its rows.
        self.per_session = workload.session is not None
        self.chunks: dict[int, list[float]] = {}

    def __call__(self, req: Request) -> float:
        key = req.session if self.per_session else req.id
        c, i = divmod(key, _CHUNK)
        chunk = self.chunks.get(c)
        if chunk is None:
            bg = np.random.PCG64()
            bg.state = self.state
            bg.advance(c * _CHUNK)
            chunk = self.chunks[c] = np.random.Generator(bg).random(_CHUNK).tolist()
        return chunk[i]
