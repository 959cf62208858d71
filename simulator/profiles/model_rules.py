"""Defaults a serving stack sets by the model a pool serves.

vLLM runs a model on one of two model runners, chosen per release by the
checkpoint's architecture, whether it routes experts and whether the
checkpoint is quantized (``VllmConfig.use_v2_model_runner``), and the two
size the KV pool and pipeline differently. A release rule's
``engine_by_model`` says which models get which keys, as ``engine_by_gpu``
does for GPUs; first match wins.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from pydantic import BaseModel, ConfigDict, Field

from ..dtypes import checkpoint_weight_dtype
from .model import ModelProfile


class ModelCondition(BaseModel):
    """What a model must be for a rule to hold; every condition given must.
    ``model_types`` stand for the architectures a stack lists (vLLM's
    ``LlamaForCausalLM`` is model_type ``llama``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_types: Optional[tuple[str, ...]] = Field(default=None, min_length=1)
    moe: Optional[bool] = None
    # the checkpoint declares a quantization_config (vLLM's ModelConfig.is_quantized), whatever the pool serves
    quantized: Optional[bool] = None
    # multi-head latent attention (kv_lora_rank set), which the stacks serve with their MLA kernels
    mla: Optional[bool] = None
    # an MLA model's cached width, kv_lora_rank + qk_rope_head_dim (576 for DeepSeek-V3)
    mla_latent: Optional[int] = Field(default=None, gt=0)
    # an MLA model's qk_nope_head_dim is one of these (a kernel's head sizes)
    qk_nope_head_dims: Optional[tuple[int, ...]] = Field(default=None, min_length=1)

    def holds(self, model: ModelProfile) -> bool:
        if self.model_types is not None and model.model_type not in self.model_types:
            return False
        if self.moe is not None and model.is_moe != self.moe:
            return False
        if self.mla is not None and model.is_mla != self.mla:
            return False
        if self.mla_latent is not None and (not model.is_mla or (model.kv_lora_rank or 0)
                                            + (model.qk_rope_head_dim or 0) != self.mla_latent):
            return False
        if self.qk_nope_head_dims is not None and model.qk_nope_head_dim not in self.qk_nope_head_dims:
            return False
        return self.quantized is None or quantized_checkpoint(model) == self.quantized


class ModelRule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    when: ModelCondition = ModelCondition()
    set: dict[str, Any]


def quantized_checkpoint(model: ModelProfile) -> bool:
    """Whether the checkpoint's files declare a quantized format, which a stack reads
    as a quantized model even where the pool serves it otherwise."""
    published = model.published_format
    return published is not None and checkpoint_weight_dtype(published) not in ("bf16", "fp16")


def model_rule_keys(rules: Sequence[ModelRule], model: ModelProfile) -> dict[str, Any]:
    """The engine keys of the first of ``rules`` that holds for ``model`` (none: no keys)."""
    return dict(next((r.set for r in rules if r.when.holds(model)), {}))
