"""System prompts: the apps (tenants) whose fixed preamble every prompt starts with.

A product rarely sends bare user text: each app behind the endpoint
prepends its own system prompt, so requests of one app share a head that a
prefix cache can keep. ``workload.system_prompt`` describes N apps, each
with a system-prompt length drawn once, and how popular each app is; every
open-loop request and every session picks its app once.

Popularity is over app ranks 1..N: ``zipf`` gives app k weight 1/k^s (a few
big tenants and a long tail, the usual shape of multi-tenant traffic),
``uniform`` equal weights.

``dynamic`` puts per-request (or per-session) content into the system
prompt at a token position, as a timestamp or session id pasted into it
does: from that token on the prompt differs, so a prefix cache keyed on
the token prefix (vLLM's block hashes, llmsim's chained block ids) can hit
only the blocks wholly before it. Lengths are unchanged; only which prefix
is shared moves.
"""
from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from .block_ids import APP, REQUEST, id_base, own_ids
from .lengths import LengthDist
from .request import Request

__all__ = ["DynamicContent", "SystemPromptSpec", "ZipfPopularity", "UniformPopularity", "Popularity", "Apps"]


class ZipfPopularity(BaseModel):
    """App k (1-based rank) is chosen with probability ∝ 1/k^s."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["zipf"] = "zipf"
    s: float = Field(default=1.1, gt=0, allow_inf_nan=False, description="exponent; larger = more skewed")

    def weights(self, n: int) -> np.ndarray:
        return np.arange(1, n + 1, dtype=np.float64) ** -self.s


class UniformPopularity(BaseModel):
    """Every app equally likely."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["uniform"] = "uniform"

    def weights(self, n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float64)


Popularity = Annotated[Union[ZipfPopularity, UniformPopularity], Field(discriminator="type")]


class DynamicContent(BaseModel):
    """Content inside the system prompt that changes per request or per session."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    at_token: int = Field(default=0, ge=0, description="where in the system prompt it sits: 0 = first line "
                                                        "(nothing of the prompt is shared)")
    per: Literal["request", "session"] = Field(
        default="request", description="request: differs on every request (a timestamp), so a session's next "
                                       "turn misses its own history too; session: fixed within a session (a "
                                       "session id)")


class SystemPromptSpec(BaseModel):
    """Apps with their own system prompt, prepended to every prompt of the app."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    apps: int = Field(ge=1, le=1_000_000, description="number of apps (tenants), each with its own system prompt "
                                                   "(at most a million: each is drawn and held)")
    tokens: LengthDist = Field(description="system-prompt length, drawn once per app")
    popularity: Popularity = Field(default_factory=UniformPopularity,
                                   description="how requests and sessions pick their app")
    dynamic: Optional[DynamicContent] = Field(
        default=None, description="per-request or per-session content in the system prompt (a timestamp, a "
                                  "session id) that breaks the shared prefix from its position on")


class Apps:
    """The drawn apps: system-prompt lengths and block ids, and the app chooser.

    Ids of the blocks that lie wholly inside app a's system prompt (before
    its dynamic content, if any) are the app's own (see
    :mod:`workloads.block_ids`), the same for every request and session of
    the app; a block that straddles that point is not the app's, since its
    content differs per request.
    """

    def __init__(self, spec: SystemPromptSpec, rng: np.random.Generator, block_tokens: int):
        self.rng = rng
        self.block_tokens = block_tokens
        self.tokens: list[int] = spec.tokens.sample(rng, spec.apps).tolist()
        dyn = spec.dynamic
        self.shared_tokens = [t if dyn is None else min(t, dyn.at_token) for t in self.tokens]
        self.block_ids: list[tuple[int, ...]] = [
            tuple(range(id_base(APP, a), id_base(APP, a) + t // block_tokens))
            for a, t in enumerate(self.shared_tokens)]
        self.per_request = dyn is not None and dyn.per == "request"
        w = spec.popularity.weights(spec.apps)
        self.p = w / w.sum()

    def changes_at(self, app: int) -> Optional[int]:
        """The token from which each request of ``app`` in a session differs
        from the session's previous one (per-request dynamic content), else None."""
        return self.shared_tokens[app] if self.per_request and app >= 0 else None

    def choose(self, n: int) -> np.ndarray:
        """The apps of the next ``n`` requests or sessions (consumes the apps
        stream in order). An array: a shard draws the whole fleet's apps and
        keeps ~1/N of them, so no Python int is made for the others."""
        return self.rng.choice(len(self.p), size=n, p=self.p)

    def request(self, id: int, arrival: float, user_tokens: int, output_tokens: int, app: int) -> Request:
        """A lone request of ``app``: its system prompt, then ``user_tokens`` of its own."""
        req = Request(id, arrival, self.tokens[app] + user_tokens, output_tokens)
        self.attach(req, app)
        return req

    def attach(self, req: Request, app: int) -> None:
        """Give a lone request of ``app`` its block ids: the app's, then its
        own full blocks (:func:`workloads.block_ids.own_ids`)."""
        head = self.block_ids[app]
        own = (req.input_tokens + req.output_tokens) // self.block_tokens - len(head)
        req.blocks = head + own_ids(id_base(REQUEST, req.id), len(head), own)
        req.shared_ids = len(head)
