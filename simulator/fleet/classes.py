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

from typing import Annotated, Any, Optional, Union

import numpy as np
from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator, Field, Tag

from workloads.durations import ExponentialDuration, FixedDuration, LognormalDuration, UniformDuration
from workloads.request import Request
from .names import Name
from .ratelimit import RateLimitSpec
from .split import ShareSplit

#: A network delay of more than an hour is a slip (seconds written as ms, a digit too many): every
#: request would wait out the run before it reached a GPU.
MAX_NETWORK_MS = 3_600_000.0


def _within_an_hour(v: Any) -> Any:
    mean = v if isinstance(v, (int, float)) else v.mean()
    if mean > MAX_NETWORK_MS:
        raise ValueError(f"a network delay averaging {mean:g} ms is more than an hour ({MAX_NETWORK_MS:,.0f} ms); "
                         "give milliseconds")
    return v


def _millis_kind(v: Any) -> Any:
    """Which member of :data:`Millis` a value is (a law by its ``dist``), so that a bad value is
    reported by the one member it meant, not by every member of the union."""
    if isinstance(v, dict):
        return v.get("dist")
    return getattr(v, "dist", "number")


Millis = Annotated[Union[Annotated[float, Field(ge=0, allow_inf_nan=False), Tag("number")],
                         Annotated[FixedDuration, Tag("fixed")], Annotated[ExponentialDuration, Tag("exponential")],
                         Annotated[LognormalDuration, Tag("lognormal")], Annotated[UniformDuration, Tag("uniform")]],
                   Discriminator(_millis_kind, custom_error_type="network_delay",
                                 custom_error_message="expected milliseconds, or a law such as "
                                                      "{dist: lognormal, mean: 20, std: 8}"),
                   AfterValidator(_within_an_hour)]


class AdmissionSpec(BaseModel):
    """Reject on arrival rather than queue without bound (load shedding)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_queue_per_replica: Optional[int] = Field(
        default=None, ge=0, description="reject when this many requests of equal or higher priority already "
                                        "wait on the replica the router picked (in its queue, those async "
                                        "scheduling holds for the next plan and those in its front end included)")
    max_wait_s: Optional[float] = Field(
        default=None, gt=0, allow_inf_nan=False,
        description="reject when the prompts waiting ahead (equal or higher priority, counted as for "
                    "max_queue_per_replica) would take longer than this to prefill at the replica's full token budget")

    def limits(self) -> tuple[float, float]:
        inf = float("inf")
        return (inf if self.max_queue_per_replica is None else self.max_queue_per_replica,
                inf if self.max_wait_s is None else self.max_wait_s)


class RegionLatency(BaseModel):
    """A region's network latency for one class; an omitted side keeps the class's plain value."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ingress_ms: Optional[Millis] = Field(default=None, description="client to server from this region")
    egress_ms: Optional[Millis] = Field(default=None, description="server to client in this region")


def _zero(v: Optional[Millis]) -> bool:
    return v is None or (isinstance(v, (int, float)) and v == 0)


class NetworkSpec(BaseModel):
    """Time outside the GPU, in milliseconds: a number, or a duration law
    (``{dist: lognormal, mean: 20, std: 8}``) read in ms. The plain
    ``ingress_ms``/``egress_ms`` hold in every region; ``regions`` overrides
    them for the regions (declared in the scenario's ``regions``) that differ."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ingress_ms: Millis = Field(default=0.0, description="client to server, before the request can queue")
    egress_ms: Millis = Field(default=0.0, description="server to client, added to every token's arrival")
    tokenize_ms_per_1k_tokens: float = Field(default=0.0, ge=0, le=1000, allow_inf_nan=False,
                                             description="tokenisation time per 1,000 prompt tokens (CPU)")
    regions: dict[str, RegionLatency] = Field(
        default_factory=dict, description="per-region latencies, by region name: {eu-west: {ingress_ms: 90}}")

    @property
    def active(self) -> bool:
        sides = [self.ingress_ms, self.egress_ms, self.tokenize_ms_per_1k_tokens]
        sides += [v for r in self.regions.values() for v in (r.ingress_ms, r.egress_ms)]
        return not all(_zero(v) for v in sides)

    def latency(self, region: str) -> tuple[Millis, Millis]:
        """(ingress, egress) for a client in ``region`` ("" = no regions)."""
        r = self.regions.get(region)
        if r is None:
            return self.ingress_ms, self.egress_ms
        return (self.ingress_ms if r.ingress_ms is None else r.ingress_ms,
                self.egress_ms if r.egress_ms is None else r.egress_ms)


class LengthRoute(BaseModel):
    """One step of routing by prompt length: prompts shorter than ``below_tokens`` go to ``pool``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pool: str
    below_tokens: Optional[int] = Field(default=None, ge=1,
                                        description="prompts of fewer tokens go here; none on the last step "
                                                    "(it takes the rest)")


class ClassSpec(BaseModel):
    """One request class."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Name
    share: float = Field(default=1.0, gt=0, allow_inf_nan=False,
                         description="relative weight of the class in the workload (sessions keep their class)")
    priority: int = Field(default=0, ge=-(2**31), le=2**31 - 1,
                          description="larger is served first in replica queues (a 32-bit integer) of a pool whose "
                                      "engine.priority_scheduling is true (vLLM's --scheduling-policy priority, "
                                      "SGLang's --enable-priority-scheduling); classes of different priorities "
                                      "sharing a pool where it is false (the backends' default: first come, first "
                                      "served) are refused")
    pool: Optional[str] = Field(default=None, description="the pool that serves it (optional with one pool)")
    pool_by_input_length: Optional[list[LengthRoute]] = Field(
        default=None, min_length=2,
        description="instead of pool: pools by prompt length, shortest first ([{pool: h100, below_tokens: 16000}, "
                    "{pool: b200}]); a prompt goes to the first step it is below, or a later one if that pool "
                    "cannot hold it")
    slo: Optional[dict[str, Any]] = Field(default=None, description="the class's own targets, as the scenario's slo")
    admission: Optional[AdmissionSpec] = None
    kv_budget_fraction: Optional[float] = Field(
        default=None, gt=0, le=1, allow_inf_nan=False,
        description="cap on the KV blocks of a replica this class may hold: its running requests (each charged "
                    "its input + output tokens at admission) plus the unreferenced prefix-cache entries it "
                    "created, of which its least recently used are evicted first to admit its requests")
    speculative_acceptance_rate: Optional[float] = Field(
        default=None, gt=0, lt=1, allow_inf_nan=False,
        description="α for this class's requests, overriding its pool's speculative.acceptance_rate (a mixed "
                    "batch steps at its sequences' mean tokens per step)")
    network: NetworkSpec = NetworkSpec()
    rate_limit: Optional[RateLimitSpec] = Field(
        default=None, description="the gateway's token and request rate limits for this class; a request over "
                                  "them is answered 429 (rate_limited) and never reaches a GPU")


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
        self.split = ShareSplit([c.share for c in self.classes], seed, _CLASS_SALT)
        self.rng = rng
        self.network = any(c.network.active for c in self.classes)

    def assign(self, req: Request) -> ClassSpec:
        if len(self.classes) == 1:
            c = self.classes[0]
        elif req.klass in self.by_name:          # a trace that names its classes
            c = self.by_name[req.klass]
        else:
            c = self.classes[self.split.pick(req)]
        req.klass = c.name
        req.priority = c.priority
        return c

    def ingress(self, c: ClassSpec, req: Request) -> tuple[float, float]:
        """(network ingress, tokenisation) seconds before ``req`` can queue."""
        n = c.network
        return _ms(n.latency(req.region)[0], self.rng), n.tokenize_ms_per_1k_tokens * req.input_tokens / 1e6

    def egress(self, c: ClassSpec, req: Request) -> float:
        return _ms(c.network.latency(req.region)[1], self.rng)
