"""A serving-stack file of one's own, held to the built-in stack it names.

A backend profile's ``stack`` says whose kernels, KV rule and per-stack
calibration it runs, not whose defaults: a key its file leaves out runs at
llmsim's engine default, which is no stack's. A vLLM fork written with only
the keys it changes would run without async scheduling, allocating a
prompt's whole KV at once and with no CPU time per eager kernel launch, and
be reported as served by that fork. So a file naming the stack of another profile writes
every key that profile sets (its engine keys, those its per-GPU rules set,
its overheads and the flags saying which launches it refuses), each at the
stack's value or the server's own.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import LlmsimError

if TYPE_CHECKING:
    from .backend import BackendProfile


def _engine_default(key: str) -> Any:
    from ..engine.config import EngineConfig

    field = EngineConfig.model_fields.get(key)
    return None if field is None else field.get_default(call_default_factory=True)


#: What a stack does with a launch beyond its engine defaults (which launches it refuses, what it
#: quantises as it loads, how its expert parallelism spans a replica): a profile's flags.
CAPABILITIES = ("lora_modelled", "fp8_weight_only", "w8a8_int8", "online_fp8", "upcasts_checkpoints",
                "ep_spans_replica", "speculation_batch_limit", "draft_model_beside_dp", "pp_modelled")


def missing_stack_keys(profile: "BackendProfile", stack: "BackendProfile") -> list[str]:
    """The keys ``stack``'s profile sets that ``profile`` leaves to llmsim's
    defaults (``engine.KEY``, ``overheads.KEY``, a flag of :data:`CAPABILITIES`
    by its name): a key a per-GPU rule sets counts as written where any of the
    file's own rules sets it."""
    written = set(profile.engine) | {k for rule in profile.engine_by_gpu for k in rule.set}
    by_gpu = [k for rule in stack.engine_by_gpu for k in rule.set]
    engine = [k for k, v in stack.engine.items() if v != _engine_default(k)] + by_gpu
    overheads = [k for k, v in stack.overheads.model_dump().items()
                 if v and k not in profile.overheads.model_fields_set]
    flags = [f for f in CAPABILITIES if f not in profile.model_fields_set
             and getattr(stack, f) != type(stack).model_fields[f].default]
    return ([f"engine.{k}" for k in dict.fromkeys(engine) if k not in written]
            + [f"overheads.{k}" for k in overheads] + flags)


def check_stack_keys(profile: "BackendProfile", path: Path) -> None:
    """Refuse a profile file that names another profile's stack and leaves
    out keys that profile sets (the stack's own profile is not held to itself)."""
    from .backend import backend_names, load_backend

    if profile.stack == profile.name or profile.stack not in backend_names():
        return
    stack = load_backend(profile.stack)
    missing = missing_stack_keys(profile, stack)
    if not missing:
        return
    groups = {where: [k.partition(".")[2] for k in missing if k.startswith(where + ".")]
              for where in ("engine", "overheads")}
    groups["flags"] = [k for k in missing if "." not in k]
    listed = "; ".join(f"{where} {', '.join(keys)}" for where, keys in groups.items() if keys)
    raise LlmsimError(f"leaves out what {stack.name}'s profile sets ({listed}), which would run at llmsim's "
                      f"defaults, not {profile.stack}'s; write each, at {profile.stack}'s value (`llmsim profiles "
                      f"show {stack.name} --kind backend`) or your server's", source=path,
                      key_path=missing[0].partition(".")[0])
