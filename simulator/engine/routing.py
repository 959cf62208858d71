"""Router policies, registered by name so scenarios and plugins can add more.

A router sees the replicas' state at the moment it routes (the request has
just arrived) and returns a position in the replica list it was given.

Registering a policy::

    class MyParams(RouterParams):
        threshold: int = Field(default=4, ge=0, description="...")

    @register_router("mine", params=MyParams)
    class Mine:
        def __init__(self, rng, params: MyParams): ...
        def choose(self, req, replicas) -> int: ...

A scenario picks it with ``router: mine`` (all defaults) or
``router: {type: mine, threshold: 8}``. ``PoolSpec.router`` validates the
value through this registry (:func:`router_params`), so a plugin's router
and its settings are checked, with key paths, without editing the schema.
A router registered without ``params`` takes no settings and is built as
``factory(rng)``; one with ``params`` as ``factory(rng, params)``.

Replica attributes a router may read: ``index`` (stable identity),
``outstanding`` (requests queued + running), ``outstanding_tokens`` (their
prompt + output tokens) and ``cached_prefix_tokens(req)`` (prompt tokens
the replica's prefix cache would serve now; O(matched blocks) per call).
"""
from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Literal, Mapping, Protocol, Sequence

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SerializeAsAny, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from ..errors import LlmsimError, from_validation_error

__all__ = ["Router", "RouterParams", "RouterSpec", "ROUTERS", "register_router", "router_params", "make_router",
           "SessionAffinityParams", "PrefixAwareParams", "splitmix64"]


class Router(Protocol):
    def choose(self, req, replicas: Sequence) -> int: ...


class RouterParams(BaseModel):
    """A router without settings (round_robin, random, least_outstanding, least_outstanding_tokens): only its name.

    A router with settings subclasses this model (unknown keys stay errors).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: str = Field(description="router name: round_robin, random, least_outstanding, least_outstanding_tokens, "
                                  "session_affinity, prefix_aware, or one a plugin registered")

    @classmethod
    def doc_variants(cls) -> list[type[BaseModel]]:
        """The built-in routers' settings models, for the scenario reference."""
        out: list[type[BaseModel]] = []
        for entry in ROUTERS.values():
            if entry.params is not cls and entry.params.__module__ == __name__ and entry.params not in out:
                out.append(entry.params)
        return out


@dataclass(frozen=True)
class RouterEntry:
    factory: Callable[..., Router]
    params: type[RouterParams]


ROUTERS: dict[str, RouterEntry] = {}


def register_router(name: str, params: type[RouterParams] = RouterParams):
    """Class/factory decorator adding a router under ``name`` with its settings model."""
    if not (isinstance(params, type) and issubclass(params, RouterParams)):
        raise TypeError(f"router {name!r}: params must subclass RouterParams (got {params!r})")

    def deco(factory):
        ROUTERS[name] = RouterEntry(factory, params)
        return factory
    return deco


def _unknown_router() -> PydanticCustomError:
    return PydanticCustomError("unknown_router", "unknown router (valid: {valid})",
                               {"valid": ", ".join(sorted(ROUTERS))})


def router_params(spec: Any) -> RouterParams:
    """Validate a router spec: a name, a mapping ``{type: name, ...settings}``,
    or settings already validated. Raises pydantic errors, so inside a model
    they carry the key path (``pools[0].router.load_weight``)."""
    if isinstance(spec, RouterParams):
        entry = ROUTERS.get(spec.type)
        if entry is not None and isinstance(spec, entry.params):
            return spec
        spec = spec.model_dump()
    if isinstance(spec, str):
        if spec not in ROUTERS:
            raise _unknown_router()
        return ROUTERS[spec].params.model_validate({"type": spec})
    if not isinstance(spec, Mapping):
        raise PydanticCustomError("router_spec", "expected a router name or a mapping with a `type` key")
    name = spec.get("type")
    if isinstance(name, str) and name in ROUTERS:
        return ROUTERS[name].params.model_validate(dict(spec))
    if "type" not in spec:
        err = InitErrorDetails(type="missing", loc=("type",), input=dict(spec))
    else:
        err = InitErrorDetails(type=_unknown_router(), loc=("type",), input=name)
    raise ValidationError.from_exception_data("RouterParams", [err])


class _RouterJsonSchema:
    """JSON Schema of a router spec, built from the registry when asked (so
    plugins registered by then are included): a name, or one router's settings."""

    def __get_pydantic_json_schema__(self, core_schema, handler) -> dict:
        names_of: dict[type[RouterParams], list[str]] = {}
        for name in sorted(ROUTERS):
            names_of.setdefault(ROUTERS[name].params, []).append(name)
        variants: list[dict] = [{"type": "string", "enum": sorted(ROUTERS)}]
        for params, names in names_of.items():
            variants.append({"allOf": [handler(params.__pydantic_core_schema__)],
                             "properties": {"type": {"enum": names}}, "required": ["type"]})
        return {"anyOf": variants}


# The annotation PoolSpec.router uses: any registered router's settings,
# serialised with their own fields.
RouterSpec = Annotated[SerializeAsAny[RouterParams], BeforeValidator(router_params), _RouterJsonSchema()]


def make_router(spec: Any, rng: np.random.Generator) -> Router:
    """Build a router from a name, a mapping, or validated settings."""
    try:
        params = router_params(spec)
    except ValidationError as e:
        raise from_validation_error(e, None, spec) from None
    except PydanticCustomError as e:
        raise LlmsimError(f"{e.message()} (got {spec!r})") from None
    entry = ROUTERS[params.type]
    return entry.factory(rng) if entry.params is RouterParams else entry.factory(rng, params)


# --- load-only routers ----------------------------------------------------------------

@register_router("round_robin")
class RoundRobin:
    def __init__(self, rng=None) -> None:
        self.i = -1

    def choose(self, req, replicas) -> int:
        self.i = (self.i + 1) % len(replicas)
        return self.i


@register_router("random")
class Random:
    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def choose(self, req, replicas) -> int:
        return int(self.rng.integers(len(replicas)))


def _least(replicas, load) -> int:
    """Index of the replica with the smallest load; ties to the lowest index."""
    return min(range(len(replicas)), key=lambda i: load(replicas[i]))


@register_router("least_outstanding")
class LeastOutstanding:
    """Fewest requests in flight (queued + running)."""

    def __init__(self, rng=None) -> None:
        pass

    def choose(self, req, replicas) -> int:
        return _least(replicas, lambda r: r.outstanding)


@register_router("least_outstanding_tokens")
class LeastOutstandingTokens:
    """Fewest prompt + output tokens in flight: a proxy for remaining work."""

    def __init__(self, rng=None) -> None:
        pass

    def choose(self, req, replicas) -> int:
        return _least(replicas, lambda r: r.outstanding_tokens)


# --- session affinity ------------------------------------------------------------------

_MASK64 = (1 << 64) - 1


def splitmix64(x: int) -> int:
    """SplitMix64 finaliser (Steele, Lea & Flood 2014): a stable, well-mixed
    64-bit hash of an integer, the same in every process (unlike ``hash``)."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


_REQUEST_KEY_SALT = 0x5851F42D4C957F2D  # keeps request ids and session ids apart on the ring


class SessionAffinityParams(RouterParams):
    """Consistent hashing with bounded loads (Mirrokni, Thorup & Zadimoghaddam 2018).

    Each replica owns ``virtual_nodes`` points of a hash ring; a request's
    session (its id when it has none) hashes to a point, and the request
    goes to the first replica clockwise whose outstanding requests are below
    ``ceil(load_factor * (total outstanding + 1) / replicas)``. Turns of one
    conversation therefore meet their KV prefix again, while a hot session
    spills to the next replica on the ring instead of melting its own.
    """

    type: Literal["session_affinity"] = Field(default="session_affinity", description="router name")
    virtual_nodes: int = Field(default=100, ge=1, le=10_000,
                               description="ring points per replica; ~100 keeps each replica's share of "
                                           "sessions within ~10% of the mean")
    load_factor: float = Field(default=1.25, ge=1.0, allow_inf_nan=False,
                               description="c (the paper's 1+epsilon): a replica holding ceil(c * (total outstanding "
                                           "+ 1) / replicas) requests or more is skipped; >= 1, so one is always "
                                           "free")


def _ring_point(index: int, vnode: int) -> int:
    return splitmix64(splitmix64(index) ^ vnode)


@register_router("session_affinity", params=SessionAffinityParams)
class SessionAffinity:
    """Consistent hashing with bounded loads on ``req.session`` (see
    :class:`SessionAffinityParams`). The ring is keyed by ``replica.index``
    and rebuilt when the replica set changes; adding one replica to n moves
    about 1/(n+1) of the sessions, all of them to the new replica."""

    def __init__(self, rng, params: SessionAffinityParams) -> None:
        self.vnodes = params.virtual_nodes
        self.c = params.load_factor
        self._ids: tuple[int, ...] | None = None
        self._points: list[int] = []
        self._owners: list[int] = []   # position in the replica list of each ring point

    def _rebuild(self, ids: tuple[int, ...]) -> None:
        ring = sorted((_ring_point(idx, v), pos) for pos, idx in enumerate(ids) for v in range(self.vnodes))
        self._points = [p for p, _ in ring]
        self._owners = [pos for _, pos in ring]
        self._ids = ids

    def capacity(self, total_outstanding: int, n: int) -> int:
        """Most requests a replica may hold after taking this one."""
        return math.ceil(self.c * (total_outstanding + 1) / n)

    @staticmethod
    def key(req) -> int:
        return splitmix64(req.session) if req.session >= 0 else splitmix64(req.id ^ _REQUEST_KEY_SALT)

    def choose(self, req, replicas) -> int:
        ids = tuple(r.index for r in replicas)
        if ids != self._ids:
            self._rebuild(ids)
        n = len(replicas)
        cap = self.capacity(sum(r.outstanding for r in replicas), n)
        points, owners = self._points, self._owners
        j = bisect_left(points, self.key(req))
        seen: set[int] = set()
        for step in range(len(points)):
            pos = owners[(j + step) % len(points)]
            if pos in seen:
                continue
            if replicas[pos].outstanding < cap:
                return pos
            seen.add(pos)
            if len(seen) == n:
                break
        # Unreachable for load_factor >= 1 (some replica is below the mean); kept for safety.
        return _least(replicas, lambda r: r.outstanding)


# --- prefix-cache aware ------------------------------------------------------------------

class PrefixAwareParams(RouterParams):
    """Route to the replica whose prefix cache serves most of the prompt, net of load.

    score = cached prefix tokens − ``load_weight`` × outstanding requests;
    ties go to the lower load, then the lower index. Hotspot guard: when the
    best replica has more than ``balance_abs_threshold`` requests beyond the
    least-loaded one *and* more than ``balance_rel_threshold`` times its
    load, the least-loaded replica gets the request instead. With no cached
    prefix anywhere (or no ``blocks`` on the request) this is
    least_outstanding.
    """

    type: Literal["prefix_aware"] = Field(default="prefix_aware", description="router name")
    load_weight: float = Field(default=128.0, ge=0, allow_inf_nan=False,
                               description="cached prompt tokens one extra outstanding request is worth; 0 ranks "
                                           "by cache hit alone (the guard still applies)")
    balance_abs_threshold: int = Field(default=32, ge=0,
                                       description="the guard needs the best replica to have more than this many "
                                                   "requests beyond the least-loaded one (SGLang's default: 32)")
    balance_rel_threshold: float = Field(default=1.5, ge=1.0, allow_inf_nan=False,
                                         description="the guard also needs the best replica's load to exceed this "
                                                     "times the least-loaded one's (SGLang model gateway's "
                                                     "default: 1.5)")


@register_router("prefix_aware", params=PrefixAwareParams)
class PrefixAware:
    """Cache-hit minus load penalty, with a hotspot guard (:class:`PrefixAwareParams`).

    Why a penalty per outstanding *request* (not per outstanding token): both
    production cache-aware routers measure load in requests. SGLang's
    cache-aware router (sgl-router) counts pending requests per worker to
    decide whether the fleet is imbalanced (``balance_abs_threshold`` /
    ``balance_rel_threshold``, defaults 32 / 1.0001, 64 / 1.5 in the later
    model gateway) and, while it is balanced, follows the longest radix-tree
    prefix match; llm-d's scheduler adds a prefix-cache scorer (fraction of
    the prompt's blocks held by the pod) to a queue-depth scorer, weighted
    3 : 2 by default. ``outstanding_tokens`` would mix prompt tokens with
    output tokens (known to the simulator, not to a real router) and count
    already-prefilled prompts of running requests, which cost little more.
    Here the two criteria share one unit, prompt tokens: a cache hit of k
    tokens saves k tokens of prefill, and one more request in flight is
    charged ``load_weight`` tokens (default 128: well below a typical
    prompt, since most in-flight requests are decoding, where one more
    sequence slows the batch far less than recomputing a prefix). So, as in
    both systems, the cache wins against small imbalances and the guard
    (SGLang's two thresholds, applied to the chosen replica) stops a popular
    prefix from piling its traffic onto one replica.

    Cost: ``cached_prefix_tokens`` is called at most once per replica, in
    order of increasing load, stopping once no remaining replica could beat
    the best score even with its whole prompt cached.
    """

    def __init__(self, rng, params: PrefixAwareParams) -> None:
        self.w = params.load_weight
        self.abs_thr = params.balance_abs_threshold
        self.rel_thr = params.balance_rel_threshold

    def choose(self, req, replicas) -> int:
        order = sorted(range(len(replicas)), key=lambda i: (replicas[i].outstanding, i))
        least = order[0]
        if req.blocks is None:
            return least
        w, bound = self.w, req.input_tokens
        best, best_score = least, -math.inf
        for i in order:
            load = replicas[i].outstanding
            if bound - w * load <= best_score:
                break   # loads only grow from here: nobody left can beat (or tie ahead of) the best
            score = replicas[i].cached_prefix_tokens(req) - w * load
            if score > best_score:
                best, best_score = i, score
        lb, lm = replicas[best].outstanding, replicas[least].outstanding
        if lb - lm > self.abs_thr and lb > self.rel_thr * lm:
            return least
        return best
