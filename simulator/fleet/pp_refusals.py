"""Which pools with ``pp > 1`` llmsim refuses, and why: what the pipeline-parallel
model (:mod:`simulator.pipeline`, :mod:`simulator.costmodel.pipeline`) does not cover
is refused, not approximated. Checks on a pool's spec, so they live with the fleet
that is built from it, not with the stage arithmetic below."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from ..errors import LlmsimError
from ..profiles.backend import load_backend
from ..profiles.model import ModelProfile

if TYPE_CHECKING:
    from ..scenario.schema import PoolSpec


def refusal(spec: "PoolSpec", model: ModelProfile) -> Optional[tuple[str, str]]:
    """(key under the pool, message) for a pool with ``pp > 1`` that llmsim
    cannot model, else None."""
    pp, e = spec.pp, spec.engine
    if pp > model.num_hidden_layers:
        return "pp", f"pp={pp} exceeds the {model.num_hidden_layers} decoder layers of {model.name}: a stage needs one"
    what = {"dp": spec.dp > 1, "ep": spec.ep > 1, "speculative": spec.speculative is not None,
            "disaggregation": spec.disaggregation is not None, "engine.kv_offload": e.kv_offload is not None,
            "lora": spec.lora is not None}
    for key, on in what.items():
        if on:
            return key, (f"{key} with pp={pp} is not modelled: llmsim prices pipeline stages of plain tensor "
                         f"parallelism; remove {key} or set pp: 1")
    if model.is_moe or model.is_mla or model.num_sliding_layers:
        kind = "mixture-of-experts" if model.is_moe else "MLA" if model.is_mla else "sliding-window"
        return "pp", (f"pp={pp} with {model.name}'s {kind} layers is not modelled (stages are priced for uniform "
                      "dense layers); use pp: 1")
    # the stacks the engine runs as: its backend's profile, and the stacks its kernels and KV rule name
    stacks = [n for n in (e.backend, e.kernels, e.kv_memory.rule if e.kv_memory else None) if n is not None]
    if any(not load_backend(n).pp_modelled for n in stacks):
        return "engine.backend", (f"pp={pp} with TensorRT-LLM is not modelled (llmsim follows vLLM V1's and "
                                  "SGLang's micro-batch scheduling); use backend vllm or sglang, or pp: 1")
    whole_in_flight = e.mixes_prefill and not e.chunked_prefill      # TensorRT-LLM's whole prompts beside decodes
    if e.scheduler != "continuous" or e.num_scheduler_steps > 1 or e.contiguous or whole_in_flight:
        return "pp", (f"pp={pp} needs continuous batching with chunked prefill on paged KV, as vLLM V1 and SGLang "
                      "schedule micro-batches; this pool's engine schedules otherwise")
    if e.async_scheduling and e.pp_async == "unsupported":
        return "engine.async_scheduling", (
            f"async_scheduling with pp={pp} is refused: this engine runs its pipeline in turn (engine.pp_async: "
            "unsupported; vLLM before 0.15.0 raises 'Async scheduling is not yet compatible with "
            "pipeline_parallel_size > 1'); set async_scheduling: false, or on vLLM backend_version 0.15.0 or later")
    if e.max_prefill_tokens is not None:
        return "engine.max_prefill_tokens", (f"pp={pp} with max_prefill_tokens is not modelled (a round's "
                                             "micro-batches share one token budget); remove it or set pp: 1")
    if not e.mixes_prefill:
        return "engine.mixed_prefill", (
            f"pp={pp} with prefill batches that run alone (SGLang's default) is not modelled: SGLang's PP loop runs a "
            "prefill micro-batch beside decoding ones, which llmsim's rounds do not; set engine.mixed_prefill: true "
            "(SGLang's --enable-mixed-chunk) or pp: 1")
    return None


def check_pp_pairs(pools: Sequence["PoolSpec"], source: str | Path | None) -> None:
    """A decode pool fed by a prefill pool cannot run ``pp > 1`` (disaggregation is not modelled with it)."""
    names = {p.name: i for i, p in enumerate(pools)}
    for p in pools:
        d = p.disaggregation
        if d is not None and d.decode_pool in names and pools[names[d.decode_pool]].pp > 1:
            j = names[d.decode_pool]
            raise LlmsimError(f"pool {d.decode_pool!r} decodes for a disaggregated prefill pool; pp={pools[j].pp} "
                              "with disaggregation is not modelled", source=source, key_path=f"pools[{j}].pp")
