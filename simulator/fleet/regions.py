"""Client regions: where the users are, so network latency can depend on it.

A scenario's ``regions`` split the traffic by ``share`` (relative weights,
normalised to 1, as class shares are). A session keeps its region for all
its turns; the split is a hash of the seed and the session or request id
with its own salt, so it consumes no random stream, is independent of the
class split, and declaring regions leaves every arrival and length as it
was. A class's ``network.regions`` gives the latencies of the regions that
differ from its plain ``ingress_ms``/``egress_ms`` (see
:class:`simulator.fleet.classes.NetworkSpec`).
"""
from __future__ import annotations

from typing import Sequence

from pydantic import BaseModel, ConfigDict, Field

from workloads.request import Request
from .names import Name
from .split import ShareSplit

_REGION_SALT = 0x9E6C63D0676A9A99


class RegionSpec(BaseModel):
    """One client region."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Name = Field(description="what classes[].network.regions and results call it")
    share: float = Field(gt=0, allow_inf_nan=False,
                         description="relative weight of the region's users (normalised over the regions; "
                                     "sessions keep their region)")


class RegionTable:
    """Gives each request its region (``Request.region``)."""

    def __init__(self, regions: Sequence[RegionSpec], seed: int) -> None:
        self.names = [r.name for r in regions]
        self.split = ShareSplit([r.share for r in regions], seed, _REGION_SALT) if regions else None

    def assign(self, req: Request) -> str:
        if self.split is not None:
            req.region = self.names[self.split.pick(req)]
        return req.region
