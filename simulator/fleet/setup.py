"""One pool's building blocks from its spec: profiles, cost model, memory plan.

Kept apart from the run so that checks, planners and notebooks can size a
pool (KV blocks, cold-start bytes, step times) without simulating it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from ..costmodel import CostModel
from ..costmodel.speculative import speculative_setup
from ..engine.kv_tiers import OffloadPlan
from ..engine.lora import LoraPlan
from ..errors import LlmsimError
from ..memory import MemoryPlan, plan_memory
from ..profiles import load_hardware, load_model
from ..scenario.schema import PoolSpec
from .lora import lora_setup
from .offload import plan_offload


@dataclass
class PoolSetup:
    spec: PoolSpec
    cm: CostModel
    memory: MemoryPlan
    offload: Optional[OffloadPlan] = None   # KV offload tiers per replica (engine.kv_offload)
    lora: Optional[LoraPlan] = None         # LoRA adapter slots and caches per replica (pools[].lora)


def setup_pool(spec: PoolSpec, index: int, source: str | Path | None = None) -> PoolSetup:
    where = f"pools[{index}]"

    def at(key: str, fn):
        try:
            return fn()
        except LlmsimError as e:
            if e.source and e.key_path:
                # The fault is inside the profile file: name it and its key, then who named the profile.
                raise LlmsimError(f"{e.message} (the {key} of {where} in {source or 'the scenario'})",
                                  source=e.source, key_path=e.key_path) from None
            msg = f"{e.source}: {e.message}" if e.source and e.source != str(source) else e.message
            raise LlmsimError(msg, source=source, key_path=f"{where}.{key}") from None

    model = at("model", lambda: load_model(spec.model))
    gpu = at("gpu", lambda: load_hardware(spec.gpu))
    e = spec.engine
    try:
        cm = CostModel(model, gpu, spec.tp, e.weight_dtype, e.kv_dtype, iteration_overhead_ms=e.iteration_overhead_ms,
                       iteration_us_per_seq=e.iteration_us_per_seq, dp=spec.dp, ep=spec.ep,
                       mxfp4_activation=e.mxfp4_activation, async_scheduling=e.async_scheduling,
                       kernels=e.kernels)
    except LlmsimError as err:   # the pool key the rule concerns (tp, dp, ep, engine.weight_dtype), else tp
        key = err.key_path if err.key_path in ("tp", "dp", "ep", "engine.weight_dtype") else "tp"
        raise LlmsimError(err.message, source=source, key_path=f"{where}.{key}") from None
    mem = at("engine", lambda: plan_memory(model, gpu, spec.tp, e.weight_dtype, e.kv_dtype,
                                           e.gpu_memory_utilization, e.max_num_batched_tokens, e.max_num_seqs,
                                           e.block_size, dp=spec.dp, ep=spec.ep, kv_memory=e.kv_memory,
                                           speculative=spec.speculative is not None))
    if spec.speculative:  # the draft's share of each token's time and of the GPU memory
        cm, mem = at("speculative.draft_model", lambda: speculative_setup(cm, mem, spec.speculative))
    lora = None
    if spec.lora:   # the adapters' GPU slots come out of the KV cache
        lora, mem = lora_setup(spec, cm, mem, gpu, where, source)
    if e.num_gpu_blocks_override:
        mem = replace(mem, num_blocks=e.num_gpu_blocks_override)
    return PoolSetup(spec, cm, mem, plan_offload(e, gpu, mem, spec.tp, spec.tp * spec.dp, where, source), lora)
