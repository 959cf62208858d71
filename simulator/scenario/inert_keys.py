"""Engine keys a pool states that would change nothing on it.

``engine.pp_async`` on a pool of one pipeline stage or of several scheduled in turn
(``async_scheduling: false``; ``unsupported``, which turns async scheduling off, acts there), or
``engine.mxfp4_activation`` on a pool whose experts are not MXFP4, describes
a server the pool does not run: the run is the same with or without the key,
and its results would be read as the knob's. Such a key is refused where the
pool's own engine mapping states it (its scenario, a variant, ``--set``,
``--vary``). A backend profile sets both keys on every pool it serves, so its
defaults are not the pool's statement and stand wherever they do nothing; a
pool stating the very value it would run without the key stands too (the run
is the one it would be unstated, and a run folder's scenario.yaml writes the
backend's defaults out as keys of the pool).
"""
from __future__ import annotations

import typing
from typing import Any, Callable, Mapping, Optional

from ..engine.config import EngineConfig
from ..errors import KeyRefusal, LlmsimError

__all__ = ["refuse_inert_keys", "without_inert_keys", "INERT_KEYS"]

#: The engine keys that do nothing on some pools.
INERT_KEYS = ("pp_async", "mxfp4_activation")


def without_inert_keys(engine: Mapping[str, Any]) -> dict[str, Any]:
    """``engine`` less the keys of :data:`INERT_KEYS`: what the pool runs unless it states them."""
    return {k: v for k, v in engine.items() if k not in INERT_KEYS}


def _stated(engine: Mapping[str, Any], key: str) -> Optional[str]:
    """The value the pool states for ``key``, where it is one the key takes; a value the engine settings
    refuse anyway is left for their own message (naming what the key takes), and ``null`` states nothing."""
    value = engine.get(key)
    taken = {a for arg in typing.get_args(EngineConfig.model_fields[key].annotation)
             for a in (typing.get_args(arg) or (arg,)) if isinstance(a, str)}
    return value if isinstance(value, str) and value in taken else None


def _default(unstated: Callable[[], Mapping[str, Any]], key: str) -> Any:
    return unstated().get(key, EngineConfig.model_fields[key].default)


def refuse_inert_keys(pool: Mapping[str, Any], engine: Mapping[str, Any],
                      unstated: Callable[[], Mapping[str, Any]]) -> None:
    """Raise :class:`KeyRefusal` at the first key of ``engine`` (the pool's engine mapping as written, before
    any backend default joins it) that does nothing on ``pool`` (its mapping as written). ``unstated``: the
    engine settings the pool would run without those keys (its backend's defaults; an empty mapping for
    EngineConfig's own), asked for only where a key would be refused. A pool whose ``pp``, model or GPU is
    itself wrong is left to the message naming that key."""
    pp_async = _stated(engine, "pp_async")
    pp = pool.get("pp", 1)
    if (pp_async is not None and isinstance(pp, (int, float)) and not isinstance(pp, bool)
            and pp_async != _default(unstated, "pp_async")):
        if pp == 1:
            raise KeyRefusal("engine.pp_async",
                             f"{pp_async}: pp_async says how async scheduling runs between pipeline stages; this "
                             "pool runs pp 1, a single stage, where it does nothing; remove engine.pp_async or set "
                             "pp above 1")
        asynchronous = engine.get("async_scheduling")
        if pp_async != "unsupported" and (asynchronous is False or (
                asynchronous is None and _default(unstated, "async_scheduling") is False)):
            raise KeyRefusal("engine.pp_async",
                             f"{pp_async}: pp_async says how async scheduling runs between pipeline stages; this "
                             "pool schedules in turn (async_scheduling: false), where it does nothing; remove "
                             "engine.pp_async or set engine.async_scheduling: true")
    why = _why_activation_does_nothing(pool, engine)
    if why is not None and engine["mxfp4_activation"] != _default(unstated, "mxfp4_activation"):
        raise KeyRefusal("engine.mxfp4_activation", f"{engine['mxfp4_activation']}: {why}")


def _why_activation_does_nothing(pool: Mapping[str, Any], engine: Mapping[str, Any]) -> Optional[str]:
    """Why the ``mxfp4_activation`` ``engine`` states does nothing on ``pool``, or None where it acts (or
    states nothing, or the pool's model, GPU or weights are wrong themselves)."""
    if _stated(engine, "mxfp4_activation") is None or not isinstance(pool.get("model"), str) \
            or not isinstance(pool.get("gpu"), str):
        return None
    if engine.get("weight_dtype") is not None and _stated(engine, "weight_dtype") is None:
        return None
    from ..profiles import load_hardware, load_model

    try:
        model, gpu = load_model(pool["model"]), load_hardware(pool["gpu"])
        weights = _stated(engine, "weight_dtype") or model.served_weight_dtype()
    except LlmsimError:
        return None
    if weights != "mxfp4":
        return (f"mxfp4_activation sets the activations of MXFP4 experts; this pool serves {model.name} in "
                f"{weights}, which has no MXFP4 experts, so it does nothing; remove engine.mxfp4_activation")
    if not gpu.has_unit("fp4"):
        return (f"mxfp4_activation picks the activations MXFP4 experts compute in on FP4 tensor cores; {gpu.name} "
                "has none, so its MXFP4 experts always compute in bf16 and the key does nothing; remove "
                "engine.mxfp4_activation, or use a GPU with FP4 units")
    return None
