"""The scenario file: what `llmsim run` replays, validated by pydantic.

Every mapping forbids unknown keys, so a typo is an error naming its key
path instead of a silently ignored setting. `llmsim schema` prints the JSON
Schema generated from these models.
"""
from __future__ import annotations

from typing import Any, Optional

from pydantic import (BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, ValidatorFunctionWrapHandler,
                      field_validator, model_validator)

from ..costmodel.speculative import SpeculativeSpec, draft_kind
from ..engine.config import EngineConfig
from ..fleet.routing import RouterSpec
from ..errors import KeyRefusal, LlmsimError
from ..fleet.autoscaler import AutoscalingSpec
from ..fleet.classes import ClassSpec
from ..fleet.disaggregation import DisaggregationSpec
from ..fleet.lora import LoraSpec
from ..fleet.names import Name
from ..fleet.regions import RegionSpec
from ..metrics.by_input_length import InputLengthBuckets
from ..metrics.cost import CostSpec
from ..metrics.energy import EnergySpec
from ..metrics.product import ProductSpec
from ..profiles.hardware import MAX_USD_PER_GPU_HOUR
from workloads.spec import WorkloadSpec
from .ci import CheckSpec
from .inert_keys import refuse_inert_keys, without_inert_keys
from .variants import LadderMode, Variants


#: The validation context key (``Scenario.model_validate(body, context=...)``) under which the
#: replay of a measured row hands every pool its release's keys, for :func:`.apply_backend`'s
#: ``release``: a row's version label need not be a name ``engine.backend_version`` takes.
RELEASE_CONTEXT = "release_keys"


def release_of(info: ValidationInfo) -> Optional[dict[str, Any]]:
    """The release keys the validation's context hands the pools (None: each pool's ``backend_version``'s)."""
    return (info.context or {}).get(RELEASE_CONTEXT) if isinstance(info.context, dict) else None


class PoolSpec(BaseModel):
    """A set of identical replicas (model, GPU kind, TP, engine settings)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: Name = "main"
    model: str = Field(description="built-in model name, model YAML or config.json path")
    gpu: str = Field(description="built-in GPU name or hardware YAML path")
    tp: int = Field(default=1, ge=1, description="attention tensor-parallel GPUs (one data-parallel rank)")
    dp: int = Field(default=1, ge=1, description="attention data-parallel ranks per replica (each tp GPUs; "
                                                 "a replica spans tp × dp GPUs)")
    ep: int = Field(default=1, ge=1, description="expert-parallel degree of the MoE layers (divides tp × dp; "
                                                 "experts are split tp·dp/ep ways by width)")
    pp: int = Field(default=1, ge=1, description="pipeline-parallel stages per replica, each tp GPUs holding its "
                                                 "share of the layers and their KV (a replica spans tp × pp GPUs); "
                                                 "dense models, vLLM (or SGLang with chunked_prefill), dp and ep 1")
    replicas: int = Field(default=1, ge=1, description="replicas serving at t = 0 (autoscaled pools then move)")
    autoscaling: Optional[AutoscalingSpec] = Field(default=None, description="grow and shrink with the load")
    disaggregation: Optional[DisaggregationSpec] = Field(
        default=None, description="make this a prefill pool: its requests decode on another pool after a KV transfer")
    router: RouterSpec = Field(
        default="round_robin", validate_default=True,
        description="a router name (round_robin, random, least_outstanding, least_outstanding_tokens, "
                    "session_affinity, prefix_aware) or a mapping {type: name, ...its settings below}")
    usd_per_gpu_hour: Optional[float] = Field(default=None, gt=0, le=MAX_USD_PER_GPU_HOUR,
                                              description="override the GPU profile's price")
    engine: EngineConfig = EngineConfig()
    speculative: Optional[SpeculativeSpec] = Field(default=None, description="draft-model speculative decoding")
    lora: Optional[LoraSpec] = Field(default=None, description="serve LoRA adapters on the model, as vLLM's --enable-lora")

    @model_validator(mode="before")
    @classmethod
    def _backend_defaults(cls, data: Any, info: ValidationInfo) -> Any:
        """A named serving backend fills the engine keys the pool leaves unset;
        its GPU-dependent defaults need the pool's GPU, hence here. A replayed
        row's release comes as the validation's context (:data:`RELEASE_CONTEXT`)."""
        if not isinstance(data, dict):
            return data
        engine = data.get("engine")
        if isinstance(engine, dict) and engine.get("backend") is None:
            refuse_inert_keys(data, engine, dict)        # the pool runs EngineConfig's defaults
        if not isinstance(engine, dict) or engine.get("backend") is None or not isinstance(data.get("gpu"), str):
            return data
        from ..profiles import load_hardware, load_model
        from ..profiles.backend import apply_backend, load_backend
        try:
            load_hardware(data["gpu"])
            # the defaults follow the model too: the attention kernel, which may fix the KV block size, and a
            # release's model runner (vLLM)
            model = load_model(data["model"]) if isinstance(data.get("model"), str) else None
        except LlmsimError:
            # the pool's gpu (or model) key says what is wrong with it, under its own name; the backend's
            # GPU- and model-dependent defaults wait for them, its name does not
            try:
                load_backend(engine["backend"])
            except LlmsimError as e:
                # the file and its key, as the refusal below names them ("file not found" says which file only so)
                where = ": ".join(str(x) for x in (e.source, e.key_path) if x)
                raise KeyRefusal("engine.backend", f"{where + ': ' if where else ''}{e.message}") from None
            return data
        try:
            spec = data.get("speculative")
            draft = spec.get("draft_model") if isinstance(spec, dict) else getattr(spec, "draft_model", None)
            kind = draft_kind(draft) if spec is not None else ""
            merged = apply_backend(engine, data["gpu"], kind, model, release_of(info))
            # the pool's own keys against what its backend runs without them
            refuse_inert_keys(data, engine, lambda: apply_backend(without_inert_keys(engine), data["gpu"], kind,
                                                                  model, release_of(info)))
        except LlmsimError as e:
            where = ": ".join(str(x) for x in (e.source, e.key_path) if x)
            raise KeyRefusal("engine.backend", f"{where + ': ' if where else ''}{e.message}") from None
        if data.get("disaggregation") is not None:     # a prefill (context) server runs what its stack runs there
            merged = load_backend(engine["backend"]).prefill_server_keys(merged, engine, release_of(info) is not None)
        pp = data.get("pp", 1)
        if (isinstance(pp, int) and pp > 1 and merged.get("pp_async", "unsupported") == "unsupported"
                and "async_scheduling" not in engine):
            # A release that cannot pipeline asynchronously turns its default off with pp > 1 (vLLM 0.14
            # logs "will be disabled"); asked for explicitly, it is refused (simulator/fleet/pp_refusals.py).
            merged = {**merged, "async_scheduling": False}
        return {**data, "engine": merged}

    @field_validator("engine", mode="wrap")
    @classmethod
    def _profile_named(cls, engine: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        """An engine refused for keys its backend profile set names the profile, not keys the pool never wrote."""
        try:
            return handler(engine)
        except ValidationError as e:
            gpu, model = info.data.get("gpu"), info.data.get("model")
            if not isinstance(engine, dict) or not isinstance(gpu, str):
                raise
            from ..profiles import load_model
            from ..profiles.backend_fault import profile_at_fault

            try:
                profile = load_model(model) if isinstance(model, str) else None
                fault = profile_at_fault(engine, gpu, profile, e, release_of(info))
            except LlmsimError:
                raise e from None
            if fault is None:
                raise
            raise KeyRefusal("backend", fault) from None

    @property
    def gpus_per_replica(self) -> int:
        """GPUs one replica occupies (and is billed for): tp × dp × pp."""
        return self.tp * self.dp * self.pp


class Scenario(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: Name = Field(description="shown in reports")
    description: str = ""
    seed: int = Field(default=0, ge=0, description="all randomness derives from it: same seed, same results")
    workload: WorkloadSpec = Field(description="the traffic")
    pools: list[PoolSpec] = Field(min_length=1, description="replica groups, each with its own model and GPU")
    classes: list[ClassSpec] = Field(
        default_factory=list, description="request classes (tiers): share of the traffic, pool, priority, "
                                          "admission limits, KV budget, network, SLO; none = one class")
    regions: list[RegionSpec] = Field(
        default_factory=list, description="client regions and their shares of the users, for per-region network "
                                          "latency (classes[].network.regions) and per-region results")
    cost: CostSpec = Field(default_factory=CostSpec, description="how the bill is extrapolated to a month")
    energy: EnergySpec = Field(default_factory=EnergySpec,
                               description="PUE, node overhead, grid carbon intensity and $/kWh of llmsim.energy")
    product: Optional[ProductSpec] = Field(
        default=None, description="what fraction of the product the scenario simulates ({slices: 64}: 1/64 of its "
                                  "users on 1/64 of its fleet); the report leads with the product's fleet and bill")
    timeline_interval_s: float = Field(default=10.0, gt=0, allow_inf_nan=False,
                                       description="sampling period of timeline.csv (simulated seconds)")
    slo: Optional[dict[str, Any]] = Field(
        default=None, description="percentile targets such as ttft_p99_ms, tpot_p99_ms, e2el_p95_ms (ms)")
    input_length_buckets: Optional[InputLengthBuckets] = Field(
        default=None, description="percentiles (llmsim.by_input_length) and SLOs per prompt-length bucket")
    variants: Variants = Field(default_factory=list,
                               description="named what-if overlays: `--variant NAME` applies one, `--ladder` runs them")
    ladder: LadderMode = Field(default="cumulative",
                               description="cumulative: step i applies variants 0..i; independent: each alone")
    check: Optional[CheckSpec] = Field(default=None, description="fast settings and tracked metrics for `llmsim check`")

    @model_validator(mode="after")
    def _ids_follow_pages(self) -> "Scenario":
        # A pool's KV block follows its GPU and model (SGLang's kernel on Blackwell forces 64-token pages): an
        # unset workload.block_tokens follows them, where a fixed 16 refused a scenario that set neither.
        self.workload = self.workload.paged_by(p.engine.block_size for p in self.pools if p.engine.prefix_cache)
        return self
