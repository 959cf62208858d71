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
An installed package's routers (``llmsim.routers`` entry points,
:mod:`simulator.plugins`) are imported the first time a name is not found.
A router registered without ``params`` takes no settings and is built as
``factory(rng)``; one with ``params`` as ``factory(rng, params)``.

Replica attributes a router may read: ``index`` (stable identity),
``outstanding`` (requests queued + running), ``outstanding_tokens`` (their
prompt tokens: their output lengths are unknown until they end), ``cached_prefix_tokens(req)`` (prompt tokens
the replica's prefix cache would serve now; O(tree depth) per call), and
``cache_block_tokens``, ``cache_tree`` and ``held_chains()`` (tokens per
block id, the cache's radix tree, and the ids of the requests it holds: what
:class:`~.prefix_bound.PrefixBound` is built from).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Mapping, Protocol, Sequence

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SerializeAsAny, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from ...errors import LlmsimError, from_validation_error
from ...plugins import load_code

__all__ = ["Router", "RouterParams", "RouterSpec", "ROUTERS", "register_router", "router_params", "make_router"]


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
            if entry.params is not cls and entry.params.__module__.startswith(__package__) and entry.params not in out:
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
        taken = ROUTERS.get(name)
        if taken is not None and _where(taken.factory) != _where(factory):
            # a plug-in reusing a name would silently swap the router of every pool that names it
            raise TypeError(f"router {name!r} is {_where(taken.factory)}'s; register {_where(factory)} "
                            "under a name of its own")
        ROUTERS[name] = RouterEntry(factory, params)
        return factory
    return deco


def _where(factory: Callable) -> str:
    """``module.Class``: where a registered router's code is."""
    return f"{getattr(factory, '__module__', '?')}.{_qualname(factory)}"


def _known(name: object) -> bool:
    """Whether ``name`` is registered, once the installed plug-ins' routers are loaded if it is not."""
    if isinstance(name, str) and name not in ROUTERS:
        load_code("llmsim.routers")
    return isinstance(name, str) and name in ROUTERS


def _unknown_router() -> PydanticCustomError:
    load_code("llmsim.routers")
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
        if not _known(spec):
            raise _unknown_router()
        return ROUTERS[spec].params.model_validate({"type": spec})
    if not isinstance(spec, Mapping):
        raise PydanticCustomError("router_spec", "expected a router name or a mapping with a `type` key")
    name = spec.get("type")
    if _known(name):
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
        load_code("llmsim.routers")      # `llmsim schema` lists the installed packages' routers too
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
    args = (rng,) if entry.params is RouterParams else (rng, params)
    if _builtin(entry.factory):
        return entry.factory(*args)
    what = _plugin_name(params.type, entry.factory)
    try:
        inspect.signature(entry.factory).bind(*args)
    except TypeError:
        raise LlmsimError(f"{what} is built as {_qualname(entry.factory)}("
                          f"{'rng' if len(args) == 1 else 'rng, params'}), as it was registered "
                          f"{'without' if len(args) == 1 else 'with'} params=, and its __init__ does not take that "
                          f"({_qualname(entry.factory)}{inspect.signature(entry.factory)})") from None
    except ValueError:      # a factory without a signature Python can read: called as it is
        pass
    return CheckedRouter(entry.factory(*args), what)


def _builtin(factory: Callable) -> bool:
    return getattr(factory, "__module__", "").startswith(__package__ + ".")


def _qualname(factory: Callable) -> str:
    return getattr(factory, "__qualname__", repr(factory))


def _plugin_name(name: str, factory: Callable) -> str:
    return f"router {name!r} ({_where(factory)})"


class CheckedRouter:
    """A plug-in's router, whose every answer is held to the contract the
    pool indexes its ready replicas with: a position in the list it was
    given. An answer out of range, or not a position (a replica, a float),
    would otherwise end the run in a traceback from the pool, and a negative
    one would silently pick a replica counted from the end."""

    def __init__(self, router: Router, what: str):
        self.router = router
        self.what = what

    def choose(self, req, replicas: Sequence) -> int:
        i = self.router.choose(req, replicas)
        if type(i) is not int and not isinstance(i, np.integer) or not 0 <= i < len(replicas):
            raise LlmsimError(f"{self.what}: choose returned {i!r} for {len(replicas)} replica"
                              f"{'s' if len(replicas) != 1 else ''}; expected the position of one in the list it "
                              f"was given, an int from 0 to {len(replicas) - 1}")
        return int(i)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.router, name)
