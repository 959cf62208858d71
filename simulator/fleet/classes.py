"""Request classes (tiers, tenants, products): who is served first, shed first, and where.

A scenario's ``classes`` split the workload by ``share`` (a session keeps
its class for all its turns; the split is a hash of the seed and the
session or request id, so it consumes no random stream and changing it
leaves every arrival and length unchanged). Each class names the pool that
serves it, its priority in replica queues (larger first), its admission
limits, its cap on KV memory, its network latency outside the GPU, and its
own SLO.
"""
from __future__ import annotations

from typing import Any, Optional, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from workloads.durations import Duration
from workloads.request import Request
from ..engine.routing.affinity import splitmix64

Millis = Union[float, Duration]


class AdmissionSpec(BaseModel):
    """Reject on arrival rather than queue without bound (load shedding)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_queue_per_replica: Optional[int] = Field(
        default=None, ge=0, description="reject when this many requests of equal or higher priority already "
                                        "wait on the replica the router picked")
    max_wait_s: Optional[float] = Field(
        default=None, gt=0, allow_inf_nan=False,
        description="reject when the prompts waiting ahead (equal or higher priority) would take longer than "
                    "this to prefill at the replica's full token budget")

    def limits(self) -> tuple[float, float]:
        inf = float("inf")
        return (inf if self.max_queue_per_replica is None else self.max_queue_per_replica,
                inf if self.max_wait_s is None else self.max_wait_s)


class NetworkSpec(BaseModel):
    """Time outside the GPU, in milliseconds: a number, or a duration law
    (``{dist: lognormal, mean: 20, std: 8}``) read in ms."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ingress_ms: Millis = Field(default=0.0, description="client to server, before the request can queue")
    egress_ms: Millis = Field(default=0.0, description="server to client, added to every token's arrival")
    tokenize_ms_per_1k_tokens: float = Field(default=0.0, ge=0, allow_inf_nan=False,
                                             description="tokenisation time per 1,000 prompt tokens (CPU)")

    @property
    def active(self) -> bool:
        return any(not (isinstance(v, (int, float)) and v == 0)
                   for v in (self.ingress_ms, self.egress_ms, self.tokenize_ms_per_1k_tokens))


class ClassSpec(BaseModel):
    """One request class."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    share: float = Field(default=1.0, gt=0, allow_inf_nan=False,
                         description="relative weight of the class in the workload (sessions keep their class)")
    priority: int = Field(default=0, description="larger is served first in replica queues")
    pool: Optional[str] = Field(default=None, description="the pool that serves it (optional with one pool)")
    slo: Optional[dict[str, Any]] = Field(default=None, description="the class's own targets, as the scenario's slo")
    admission: Optional[AdmissionSpec] = None
    kv_budget_fraction: Optional[float] = Field(
        default=None, gt=0, le=1, allow_inf_nan=False,
        description="cap on the KV blocks of a replica this class's running requests may hold (each is charged "
                    "its input + output tokens at admission)")
    network: NetworkSpec = NetworkSpec()


DEFAULT = ClassSpec(name="default")

_CLASS_SALT = 0x2545F4914F6CDD1D


def _ms(v: Millis, rng: np.random.Generator) -> float:
    if isinstance(v, (int, float)):
        return float(v) / 1000.0
    return float(v.sample(rng, 1)[0]) / 1000.0


class ClassTable:
    """Assigns classes to requests and draws their network delays."""

    def __init__(self, classes: list[ClassSpec], seed: int, rng: np.random.Generator) -> None:
        self.classes = classes or [DEFAULT]
        self.by_name = {c.name: c for c in self.classes}
        w = np.array([c.share for c in self.classes], dtype=np.float64)
        self.cum = (np.cumsum(w) / w.sum()).tolist()
        self.salt = splitmix64(seed ^ _CLASS_SALT)
        self.rng = rng
        self.network = any(c.network.active for c in self.classes)

    def assign(self, req: Request) -> ClassSpec:
        if len(self.classes) == 1:
            c = self.classes[0]
        elif req.klass in self.by_name:          # a trace that names its classes
            c = self.by_name[req.klass]
        else:
            key = req.session if req.session >= 0 else (1 << 62) + req.id
            u = splitmix64(key ^ self.salt) / 2.0 ** 64
            c = self.classes[next(i for i, x in enumerate(self.cum) if u < x or i == len(self.cum) - 1)]
        req.klass = c.name
        req.priority = c.priority
        return c

    def ingress(self, c: ClassSpec, req: Request) -> tuple[float, float]:
        """(network ingress, tokenisation) seconds before ``req`` can queue."""
        n = c.network
        return _ms(n.ingress_ms, self.rng), n.tokenize_ms_per_1k_tokens * req.input_tokens / 1e6

    def egress(self, c: ClassSpec) -> float:
        return _ms(c.network.egress_ms, self.rng)
