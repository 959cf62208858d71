"""Arrival processes, registered by name so scenarios and plug-ins can add more.

``workload.arrival: {type: NAME, ...}`` is validated through this registry
(:func:`arrival_spec`), as ``pools[].router`` is through the routers', so a
new process and its settings are checked, with key paths, without editing
the schema. Registering one::

    from workloads.arrivals import OpenLoopArrival, register_arrival

    @register_arrival("uniform")
    class UniformArrival(OpenLoopArrival):
        type: Literal["uniform"] = "uniform"

        def _unit_gaps(self, rng, size):
            return np.ones(size)          # gaps of mean 1: the process's shape, not its rate

An open-loop process (:class:`workloads.arrivals.OpenLoopArrival`) only
draws gaps of mean 1 (checked on a sample as a scenario names it), which
llmsim turns into times, so ``rate_per_s``, ``profile`` and
``spikes``, ``num_requests`` and ``duration_s`` and sessions all work for it
unchanged. An installed package's processes (``llmsim.arrivals`` entry
points, :mod:`simulator.plugins`) are imported the first time a name is not
found.

This module holds the base model and the registry only; the built-ins
register themselves in :mod:`workloads.arrivals` (poisson, gamma,
concurrency) and :mod:`workloads.traces` (trace).
"""
from __future__ import annotations

from typing import Annotated, Any, ClassVar, Mapping

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SerializeAsAny, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from simulator.plugins import load_code

__all__ = ["ArrivalProcess", "ARRIVALS", "register_arrival", "arrival_spec", "ArrivalSpec"]

GROUP = "llmsim.arrivals"


class ArrivalProcess(BaseModel):
    """``workload.arrival``: when requests arrive (or sessions start); ``type`` names the process."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: str = Field(description="the process: poisson, gamma, concurrency, trace, or one a plug-in registered")
    # True when the engine, not this spec, decides when requests arrive.
    closed_loop: ClassVar[bool] = False

    @classmethod
    def doc_variants(cls) -> list[type[BaseModel]]:
        """The built-in processes' models, for the scenario reference (the trace last)."""
        return sorted((c for c in ARRIVALS.values() if c.__module__.startswith("workloads.")),
                      key=lambda c: c.__module__ != "workloads.arrivals")


ARRIVALS: dict[str, type[ArrivalProcess]] = {}


def register_arrival(name: str):
    """Class decorator adding an arrival process under ``name`` (its ``type:``)."""
    def deco(cls: type[ArrivalProcess]) -> type[ArrivalProcess]:
        if not (isinstance(cls, type) and issubclass(cls, ArrivalProcess)):
            raise TypeError(f"arrival process {name!r} must subclass ArrivalProcess (got {cls!r})")
        default = cls.model_fields["type"].default
        if isinstance(default, str) and default != name:
            raise TypeError(f"arrival process {name!r}: its type field defaults to {default!r}")
        taken = ARRIVALS.get(name)
        if taken is not None and _where(taken) != _where(cls):
            # a plug-in reusing a name would silently swap the arrivals of every scenario that names it
            raise TypeError(f"arrival process {name!r} is {_where(taken)}'s; register {_where(cls)} under a name "
                            "of its own")
        ARRIVALS[name] = cls
        return cls
    return deco


def _where(cls: type) -> str:
    """``module.Class``: where a registered process's code is."""
    return f"{cls.__module__}.{cls.__qualname__}"


def _known(name: object) -> bool:
    """Whether ``name`` is registered, once the installed plug-ins' processes are loaded if it is not."""
    if isinstance(name, str) and name not in ARRIVALS:
        load_code(GROUP)
    return isinstance(name, str) and name in ARRIVALS


def arrival_spec(spec: Any) -> ArrivalProcess:
    """Validate ``{type: name, ...settings}`` (or a process already validated).
    Raises pydantic errors, so inside a model they carry the key path
    (``workload.arrival.rate_per_s``)."""
    if isinstance(spec, ArrivalProcess):
        if isinstance(spec, ARRIVALS.get(spec.type, ())):
            return spec
        spec = spec.model_dump()
    if not isinstance(spec, Mapping):
        raise PydanticCustomError("arrival_spec", "expected a mapping with a `type` key (poisson, gamma, ...)")
    name = spec.get("type")
    if _known(name):
        return ARRIVALS[name].model_validate(dict(spec))
    if "type" not in spec:
        err = InitErrorDetails(type="missing", loc=("type",), input=dict(spec))
    else:
        err = InitErrorDetails(type=PydanticCustomError("unknown_arrival", "unknown arrival process (valid: {valid})",
                                                        {"valid": ", ".join(sorted(ARRIVALS))}),
                               loc=("type",), input=name)
    raise ValidationError.from_exception_data("ArrivalProcess", [err])


class _ArrivalJsonSchema:
    """JSON Schema of ``workload.arrival``, built from the registry when asked
    (so plug-ins registered by then are included): one of the processes."""

    def __get_pydantic_json_schema__(self, core_schema, handler) -> dict:
        load_code(GROUP)
        return {"anyOf": [handler(ARRIVALS[name].__pydantic_core_schema__) for name in sorted(ARRIVALS)]}


# The annotation WorkloadSpec.arrival uses: any registered process, serialised with its own fields.
ArrivalSpec = Annotated[SerializeAsAny[ArrivalProcess], BeforeValidator(arrival_spec), _ArrivalJsonSchema()]
