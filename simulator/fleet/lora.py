"""A pool serving LoRA adapters on its base model (``pools[].lora``), as vLLM does.

Three places, one each in llmsim's layers: the request's adapter and the
prefix cache's namespace (:class:`LoraPool`, here, before routing), the
batch rule and the adapter caches (:mod:`simulator.engine.lora`), and the
kernels' time and GPU memory (:mod:`simulator.costmodel.lora`).
:func:`lora_setup` joins them to a pool's profiles and refuses what the
model does not cover: other stacks' LoRA schedulers (SGLang's
``max_loras_per_batch``, TensorRT-LLM's paged LoRA cache), static batching
and contiguous or output-reserving KV (not vLLM's), MoE, MLA and
sliding-window layouts (their LoRA layers are not priced), and LoRA
beside speculative decoding, disaggregation or KV offload tiers.

Loads: an adapter not in a GPU slot is copied from host memory over each
GPU's host link (its shard of the adapter; the GPU profile's
``host_link_gb_s`` unless ``host_gb_per_s`` says otherwise). One that the
host cache dropped is first read whole by every worker from local storage
at ``disk_gb_per_s`` (default: the GPU profile's NVMe read per GPU): an
assumption that the adapters sit on the server's NVMe, as vLLM's
``--lora-modules`` paths or a warm resolver cache put them; downloads from a
hub or object store are not modelled, nor the CPU's time to parse the file.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import replace
from typing import Optional

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..costmodel import CostModel
from ..costmodel.lora import RANKS, LoraCost, adapter_bytes, adapter_shard_bytes
from ..engine.lora import LoraPlan
from ..errors import LlmsimError
from ..kv_memory import KvMemory
from ..memory import MemoryPlan, pool_blocks
from ..profiles.backend import load_backend
from ..profiles.hardware import HardwareProfile
from workloads.request import Request
from workloads.system_prompts import Popularity, UniformPopularity
from ..fields import leaf, of_model

__all__ = ["LoraSpec", "LoraPool", "lora_setup", "lora_block"]


class LoraSpec(BaseModel):
    """Multi-LoRA serving: vLLM's ``--enable-lora`` settings and the adapters the traffic asks for."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_loras: int = Field(default=1, ge=1, le=1024, description="vLLM's max_loras: GPU adapter slots, and the "
                                                                "most distinct adapters one batch may hold")
    max_lora_rank: int = Field(default=16, description=f"vLLM's max_lora_rank, one of {', '.join(map(str, RANKS))}: "
                                                       "the slots' rank, at which the LoRA kernels run")
    max_cpu_loras: Optional[int] = Field(default=None, ge=1, description="adapters kept in host memory "
                                                                         "(≥ max_loras); default: max_loras")
    adapters: int = Field(ge=1, le=1_000_000, description="distinct adapters the pool's traffic asks for")
    rank: Optional[int] = Field(default=None, ge=1, description="the adapters' own rank (≤ max_lora_rank), which "
                                                               "sizes a load; default: max_lora_rank")
    popularity: Popularity = Field(default_factory=UniformPopularity,
                                   description="how often each adapter is asked for ({type: zipf, s: 1.0}: "
                                               "adapter k by rank with weight 1/k^s; {type: uniform}), as "
                                               "workload.system_prompt.popularity")
    host_gb_per_s: Optional[float] = Field(default=None, gt=0, allow_inf_nan=False,
                                           description="host-to-GPU copy bandwidth per GPU, GB/s; default: the "
                                                       "GPU profile's host_link_gb_s")
    disk_gb_per_s: Optional[float] = Field(default=None, gt=0, allow_inf_nan=False,
                                           description="adapter read bandwidth from local storage per GPU, GB/s; "
                                                       "default: the GPU profile's nvme_read_gb_s_per_gpu")

    @field_validator("max_lora_rank")
    @classmethod
    def _vllm_rank(cls, v: int) -> int:
        if v not in RANKS:
            raise ValueError(f"max_lora_rank {v} is not a rank vLLM accepts ({', '.join(map(str, RANKS))})")
        return v

    @model_validator(mode="after")
    def _vllm_limits(self) -> "LoraSpec":
        if self.max_cpu_loras is not None and self.max_cpu_loras < self.max_loras:
            raise ValueError(f"max_cpu_loras ({self.max_cpu_loras}) must be >= max_loras ({self.max_loras}), "
                             f"as vLLM requires: the host cache holds every adapter in a GPU slot")
        if self.rank is not None and self.rank > self.max_lora_rank:
            raise ValueError(f"rank {self.rank} exceeds max_lora_rank {self.max_lora_rank}: vLLM refuses an "
                             f"adapter whose rank its slots cannot hold")
        return self

    @property
    def cpu_loras(self) -> int:
        return self.max_loras if self.max_cpu_loras is None else self.max_cpu_loras

    def cdf(self) -> np.ndarray:
        """Cumulative probability of adapters 0..adapters−1."""
        c = np.cumsum(self.popularity.weights(self.adapters))
        return c / c[-1]


class LoraPool:
    """What a LoRA pool does to a request before routing it: give it its
    adapter, and put its prompt's block ids in that adapter's namespace.

    vLLM's prefix cache hashes a block with its request's adapter, so two
    requests share cached KV only under the same adapter. The ids here are
    chained (a match walks from the first id), so giving the first id a
    fresh stand-in per (first id, adapter) separates the adapters and keeps
    every match within one."""

    _FIRST_STANDIN = -(1 << 62)   # below every placeholder id (workloads.block_ids)

    def __init__(self, spec: LoraSpec, draws) -> None:
        self.cdf = spec.cdf().tolist()
        self.draws = draws           # workloads.adapters.AdapterDraws
        self.standins: dict[tuple[int, int], int] = {}

    def assign(self, req: Request) -> None:
        a = min(bisect_right(self.cdf, self.draws(req)), len(self.cdf) - 1)
        req.adapter = a
        b = req.blocks
        if b:
            key = (b[0], a)
            first = self.standins.get(key)
            if first is None:
                first = self.standins[key] = self._FIRST_STANDIN - len(self.standins)
            req.blocks = (first,) + b[1:]


def _refuse(msg: str, where: str, source, key: str = "lora") -> LlmsimError:
    return LlmsimError(msg, source=source, key_path=f"{where}.{key}")


def _check_modelled(spec, cm: CostModel, where: str, source) -> None:
    """What the LoRA model does not cover is refused, not approximated."""
    e = spec.engine
    if e.backend is not None:
        prof = load_backend(e.backend)
        if not prof.lora_modelled:
            stack = prof.stack
            raise _refuse(f"LoRA serving is modelled as vLLM schedules and caches adapters; {stack}'s LoRA "
                          f"(its own batch limit and adapter cache) is not modelled: use engine.backend: vllm",
                          where, source)
    rule = KvMemory().rule if e.kv_memory is None else e.kv_memory.rule
    rules = [(e.scheduler == "static", "static batching"),
             (e.contiguous, "kv_allocation: contiguous"),
             (e.reserves_output, "kv_admission: reserve_output (TensorRT-LLM's)"),
             (e.expects_output, "kv_admission: expected_output (SGLang's)"),
             (e.reserves_decode, "kv_admission: decode_reservation (SGLang's)"),
             (not load_backend(rule).lora_modelled, f"the {rule} KV memory rule"),
             (spec.speculative is not None, "speculative decoding"),
             (spec.disaggregation is not None, "disaggregation"),
             # The tiers key a block by its id alone (an id names its whole prefix), but an adapter's
             # namespace is its prompts' first id (LoraPool): past it two adapters' ids agree.
             (e.kv_offload is not None, "kv_offload (its tiers cannot tell two adapters' blocks apart)")]
    for bad, what in rules:
        if bad:
            raise _refuse(f"LoRA serving beside {what} is not modelled (llmsim models vLLM's LoRA scheduling "
                          f"on its continuous, paged scheduler alone)", where, source)
    if cm.ops is not None:
        raise _refuse(f"LoRA serving is modelled for dense transformers; {cm.model.name}'s layout (MoE, MLA, "
                      f"sliding windows, or dp/ep ranks) has LoRA layers llmsim does not price", where, source)


def lora_setup(spec, cm: CostModel, mem: MemoryPlan, gpu: HardwareProfile, where: str, source=None
               ) -> tuple[LoraPlan, MemoryPlan]:
    """A LoRA pool's engine plan and memory; gives ``cm`` its LoRA kernels.
    ``spec`` is the pool's PoolSpec."""
    lo: LoraSpec = spec.lora
    _check_modelled(spec, cm, where, source)
    model, tp = cm.model, cm.tp
    host = lo.host_gb_per_s if lo.host_gb_per_s is not None else gpu.host_link_gb_s
    disk = lo.disk_gb_per_s if lo.disk_gb_per_s is not None else gpu.nvme_read_gb_s_per_gpu
    if disk is None:
        raise _refuse(f"the GPU profile {gpu.name} states no nvme_read_gb_s_per_gpu, the speed adapters are read "
                      f"from storage at; give lora.disk_gb_per_s", where, source, "lora.disk_gb_per_s")
    rank = lo.rank or lo.max_lora_rank
    whole = adapter_bytes(model, rank)
    if gpu.host_memory_gb_per_gpu is not None and lo.cpu_loras * whole > gpu.host_memory_gb_per_gpu * 1e9:
        raise _refuse(f"max_cpu_loras {lo.cpu_loras} adapters of {whole / 1e6:.0f} MB each (every worker holds "
                      f"its own copy) exceed the {gpu.host_memory_gb_per_gpu:g} GB of host memory per "
                      f"{gpu.name} in its profile", where, source, "lora.max_cpu_loras")
    slots = lo.max_loras * adapter_shard_bytes(model, lo.max_lora_rank, tp) * tp
    kv_cap = mem.kv_capacity_bytes - slots
    if kv_cap < mem.kv_bytes_per_token * mem.block_size:
        raise _refuse(f"{lo.max_loras} LoRA slots of rank {lo.max_lora_rank} ({slots / 1e9:.1f} GB) leave no KV "
                      f"memory beside {model.name} on {tp}× {gpu.name}", where, source, "lora.max_loras")
    cm.lora = LoraCost(cm, lo.max_lora_rank)
    plan = LoraPlan(lo.max_loras, lo.cpu_loras, adapter_shard_bytes(model, rank, tp) / (host * 1e9),
                    whole / (disk * 1e9))
    mem = replace(mem, weights_bytes=mem.weights_bytes + slots, kv_capacity_bytes=kv_cap,
                  num_blocks=pool_blocks(kv_cap, mem.kv_bytes_per_token * mem.block_size, mem.dp))
    return plan, mem


def _lora_fields() -> dict:
    settings = of_model(LoraSpec)
    settings["max_cpu_loras"] = leaf("count", "adapters kept in host memory (max_cpu_loras, else max_loras)")
    return {**settings, "admissions": leaf("count", "admissions that needed an adapter"),
            "gpu_slot_hit_rate": leaf("fraction", "admissions whose adapter was in a GPU slot"),
            "host_loads": leaf("count", "adapters loaded from host memory"),
            "disk_loads": leaf("count", "adapters loaded from disk"),
            "load_s": leaf("s", "time spent loading adapters, summed over replicas")}


def lora_block(spec: LoraSpec, stats: list[dict]) -> dict:
    """results.json's ``llmsim.pools.<pool>.lora``: the settings, and how
    admissions found their adapter (in a GPU slot, in host memory, on disk)."""
    totals = {k: sum(s["lora"][k] for s in stats) for k in ("hits", "host_loads", "disk_loads", "load_s")}
    admitted = totals["hits"] + totals["host_loads"] + totals["disk_loads"]
    return {**spec.model_dump(exclude_none=True), "max_cpu_loras": spec.cpu_loras, "admissions": admitted,
            "gpu_slot_hit_rate": totals["hits"] / admitted if admitted else None,
            "host_loads": totals["host_loads"], "disk_loads": totals["disk_loads"],
            "load_s": totals["load_s"]}


#: What :func:`lora_block` writes: the pool's lora settings as given, and how admissions found their adapter.
LORA_FIELDS = _lora_fields()
