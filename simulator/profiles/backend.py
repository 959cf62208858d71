"""Serving-stack backends: what vLLM, SGLang or TensorRT-LLM add to the kernels.

The same GPU and model served by two stacks give different TTFTs: each
stack schedules with its own defaults (token budget, chunking, whether a
prefill shares an iteration with decodes) and spends its own CPU time
outside the kernels (HTTP and tokenisation of each request, scheduling and
sampling of each iteration, streaming each token back). A backend profile
holds both, with its sources, so that ``pools[].engine.backend: vllm``
means "as ``vllm serve`` runs with default flags"; any engine key set beside
``backend`` overrides the profile's value.

Defaults that depend on the GPU (vLLM's token budget follows the GPU's
memory) are ordered rules, first match wins.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field

from .hardware import HardwareProfile
from .loader import load_profile, resolve


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Overheads(_Strict):
    """A stack's CPU time outside the GPU kernels (the kernel data excludes it).

    Each is a physical cost with its own place in the request's path:
    ``request_ms`` and ``tokenize_us_per_token`` are spent one request at a
    time by the server's front-end process (HTTP, tokenisation, hand-off to
    the scheduler) before the scheduler can see the request, so a burst of
    arrivals reaches the engine spread out, as it does on a real server;
    ``iteration_overhead_ms`` and ``iteration_us_per_seq`` are the scheduler's and
    sampler's time per engine iteration; ``response_ms`` is the time from a
    token leaving the engine to the client receiving it (detokenise, stream).
    """

    iteration_overhead_ms: float = Field(default=0.0, ge=0, le=1000)
    iteration_us_per_seq: float = Field(default=0.0, ge=0, le=10000)
    request_ms: float = Field(default=0.0, ge=0, le=10000)
    tokenize_us_per_token: float = Field(default=0.0, ge=0, le=1000)
    response_ms: float = Field(default=0.0, ge=0, le=10000)


class GpuCondition(_Strict):
    gpu_name_contains: Optional[str] = None
    min_hbm_gib: Optional[float] = Field(default=None, gt=0)
    max_hbm_gib: Optional[float] = Field(default=None, gt=0)

    def holds(self, gpu: HardwareProfile) -> bool:
        if self.gpu_name_contains is not None and self.gpu_name_contains.lower() not in gpu.name.lower():
            return False
        if self.min_hbm_gib is not None and gpu.hbm_gib < self.min_hbm_gib:
            return False
        return self.max_hbm_gib is None or gpu.hbm_gib <= self.max_hbm_gib


class GpuRule(_Strict):
    when: GpuCondition = GpuCondition()
    set: dict[str, Any]


class BackendProfile(_Strict):
    name: str
    stack: str = Field(description="vllm, sglang or trtllm")
    versions: str = ""
    source: str = ""
    engine: dict[str, Any] = Field(default_factory=dict, description="engine keys the stack's defaults set")
    engine_by_gpu: list[GpuRule] = Field(default_factory=list)
    overheads: Overheads = Overheads()
    fitted_on: str = ""

    def engine_defaults(self, gpu: HardwareProfile) -> dict[str, Any]:
        """The engine keys this stack sets on ``gpu``, overheads included."""
        out = dict(self.engine)
        for rule in self.engine_by_gpu:
            if rule.when.holds(gpu):
                out.update(rule.set)
                break
        out.update(self.overheads.model_dump())
        return out

    def summary(self) -> dict:
        o = self.overheads
        return {"name": self.name, "stack": self.stack, "versions": self.versions,
                "chunked_prefill": self.engine.get("chunked_prefill"),
                "mixed_prefill": self.engine.get("mixed_prefill"),
                "async_scheduling": bool(self.engine.get("async_scheduling", False)),
                "iteration_ms": o.iteration_overhead_ms, "iteration_us_per_seq": o.iteration_us_per_seq,
                "request_ms": o.request_ms, "response_ms": o.response_ms}


@lru_cache(maxsize=64)
def _load(path: Path, mtime: float) -> BackendProfile:
    return load_profile("backend_profiles", str(path), BackendProfile, "backend")


def load_backend(name_or_path: str) -> BackendProfile:
    """A built-in backend (``vllm``, ``sglang``, ``trtllm``) or a profile file,
    such as one ``llmsim validate --fit`` wrote (cached until the file changes)."""
    path = resolve("backend_profiles", name_or_path)
    return _load(path, path.stat().st_mtime)


def apply_backend(engine: dict[str, Any], gpu_name: str) -> dict[str, Any]:
    """``engine`` (a pool's engine mapping as written) with its backend's
    defaults for ``gpu_name`` under the keys the user set."""
    from .hardware import load_hardware

    name = engine.get("backend")
    if not isinstance(name, str):
        return engine
    prof = load_backend(name)
    merged = prof.engine_defaults(load_hardware(gpu_name))
    for key, value in engine.items():
        # A mapping set beside the backend (kv_memory: {fraction: 0.8}) refines the profile's, key by key.
        base = merged.get(key)
        merged[key] = {**base, **value} if isinstance(base, dict) and isinstance(value, dict) else value
    return merged
