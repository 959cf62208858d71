"""The request record: what the workload creates and every stage stamps.

A request carries no text. Its timestamps are written once by the stage that
owns them (arrival by the workload, the rest by the engine), and every
latency metric is derived from them, never re-estimated.
"""
from __future__ import annotations

import math
from enum import IntEnum
from typing import Optional, Sequence

from .rejection import Rejection

NAN = math.nan


class Status(IntEnum):
    PENDING = 0
    FINISHED = 1
    REJECTED = 2
    CANCELLED = 3
    RATE_LIMITED = 4    # answered 429 by the gateway: never reached a pool
    # admitted and streaming, then preempted, and its readmission can never fit the KV pool: the
    # server would hold it at the head of its queue forever (vLLM's sliding-window gate)
    STRANDED = 5


class Request:
    """One inference request (slotted: a million of them must stay small)."""

    __slots__ = ("id", "arrival", "input_tokens", "output_tokens", "session", "klass", "priority",
                 "admitted", "first_token", "finish", "status", "replica", "preemptions", "cached_tokens",
                 "blocks", "pool", "queued", "net_in", "net_out", "prefill_done", "kv_transfer", "kv_wait",
                 "preloaded", "region", "shared_ids", "adapter", "reject_reason")

    def __init__(self, id: int, arrival: float, input_tokens: int, output_tokens: int,
                 session: int = -1, klass: str = "default", priority: int = 0, blocks: tuple | None = None,
                 shared_ids: int | None = None):
        self.id = id
        self.arrival = arrival
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.session = session
        self.klass = klass
        self.priority = priority
        self.blocks = blocks
        # How many leading ids of ``blocks`` another request may also carry;
        # the rest are this request's alone (a lone request's own prompt and
        # output). None: any may be shared. A cache-aware router need not
        # remember ids nobody else will ask for (routing.prefix_bound).
        self.shared_ids = shared_ids
        self.admitted = NAN
        self.first_token = NAN
        self.finish = NAN
        self.status = Status.PENDING
        self.replica = -1
        self.preemptions = 0
        self.cached_tokens = 0
        # Set by the fleet: the pool that served it, when it reached a replica
        # queue (after network ingress and tokenisation), the network's
        # seconds each way, when its prompt finished prefilling (engine time)
        # and the KV transfer of a disaggregated pool: TTFT's decomposition.
        self.pool = ""
        self.queued = arrival
        self.net_in = 0.0
        self.net_out = 0.0
        self.prefill_done = NAN
        self.kv_transfer = 0.0
        self.kv_wait = 0.0       # of kv_transfer, the time its KV waited for the pair's links (fleet/kv_link.py)
        self.preloaded = 0       # prompt tokens whose KV arrives with it (disaggregated decode)
        self.region = ""         # the client's region (scenario regions), "" when none are declared
        self.adapter = -1        # the LoRA adapter it asks for (a LoRA pool draws it), -1 = the base model
        self.reject_reason: Optional[Rejection] = None     # why it ended REJECTED (None: it was not)

    def reject(self, why: Rejection, now: float) -> None:
        """End it REJECTED at ``now``, saying why: the one way a request is rejected, so that no
        rejected request goes without its reason (the report reads it instead of guessing)."""
        self.status = Status.REJECTED
        self.reject_reason = why
        self.finish = now

    @property
    def ttft(self) -> float:
        return self.first_token - self.arrival

    @property
    def e2e(self) -> float:
        return self.finish - self.arrival

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return (f"Request({self.id}, t={self.arrival:.4f}, in={self.input_tokens}, out={self.output_tokens}, "
                f"status={self.status.name}, ttft={self.ttft:.4f}, e2e={self.e2e:.4f})")


RECORD_COLUMNS = ["id", "arrival", "admitted", "first_token", "finish", "input_tokens", "output_tokens",
                  "status", "replica", "preemptions", "cached_tokens", "session", "klass", "pool", "queued",
                  "net_in", "net_out", "prefill_done", "kv_transfer", "kv_wait", "region", "reject_reason"]
