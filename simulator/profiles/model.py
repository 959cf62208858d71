"""Model architectures, written with Hugging Face ``config.json`` key names.

A user can point ``--model`` at a built-in name, at their own YAML, or at a
model's ``config.json`` as downloaded. Everything the simulator needs
(parameter count, weight and KV bytes) is derived here, never typed in, so a
profile cannot contradict itself.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..dtypes import BYTES
from ..errors import LlmsimError, from_validation_error
from .loader import read_structured, resolve

_NON_GATED_ACTS = {"gelu", "gelu_new", "gelu_fast", "relu", "gelu_pytorch_tanh", "quick_gelu"}
_GATED_GELU_FAMILIES = {"gemma", "gemma2", "gemma3"}


class ModelProfile(BaseModel):
    """A dense decoder-only transformer (Llama family and look-alikes)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "custom"
    description: str = ""
    source: str = ""
    model_type: str = "llama"
    num_hidden_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_key_value_heads: Optional[int] = Field(default=None, gt=0)
    head_dim: Optional[int] = Field(default=None, gt=0)
    intermediate_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    tie_word_embeddings: bool = False
    max_position_embeddings: int = Field(default=4096, gt=0)
    hidden_act: str = "silu"
    # llmsim key: whether the MLP has a gate projection (SwiGLU/GeGLU). Left
    # unset it follows hidden_act and model_type, as transformers does.
    gated_mlp: Optional[bool] = None

    @model_validator(mode="after")
    def _check_heads(self) -> "ModelProfile":
        if self.num_attention_heads % self.kv_heads != 0:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        return self

    # --- derived shape -------------------------------------------------
    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def dim_head(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def q_dim(self) -> int:
        return self.num_attention_heads * self.dim_head

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.dim_head

    @property
    def is_gated(self) -> bool:
        if self.gated_mlp is not None:
            return self.gated_mlp
        return self.hidden_act not in _NON_GATED_ACTS or self.model_type in _GATED_GELU_FAMILIES

    # --- parameters ----------------------------------------------------
    # Plain properties, not cached_property: pydantic's model_copy(update=...)
    # copies the instance __dict__, cached values included, so a what-if copy
    # with more layers would keep the original's parameter count.
    @property
    def linear_params_per_layer(self) -> int:
        h = self.hidden_size
        attn = h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h
        mlp = (3 if self.is_gated else 2) * h * self.intermediate_size
        return attn + mlp

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    @property
    def num_params(self) -> int:
        """All parameters, as a model card counts them (6.74B for Llama-2-7B)."""
        norms = (2 * self.num_hidden_layers + 1) * self.hidden_size
        return (self.num_hidden_layers * self.linear_params_per_layer + self.embedding_params
                + self.lm_head_params + norms)

    def weight_bytes(self, weight_dtype: str = "bf16") -> float:
        """Bytes of all weights. Quantisation applies to the transformer's
        linear layers; embeddings, LM head and norms stay 16-bit, as in vLLM's
        fp8/int8/AWQ checkpoints."""
        quantized = self.num_hidden_layers * self.linear_params_per_layer
        rest = self.num_params - quantized
        return quantized * BYTES[weight_dtype] + rest * 2.0

    def kv_bytes_per_token(self, kv_dtype: str = "bf16") -> float:
        """K and V for every layer: 2 · layers · kv_heads · head_dim · bytes."""
        return 2.0 * self.num_hidden_layers * self.kv_dim * BYTES[kv_dtype]

    def summary(self) -> dict:
        return {
            "name": self.name,
            "params_b": round(self.num_params / 1e9, 3),
            "layers": self.num_hidden_layers,
            "hidden": self.hidden_size,
            "heads": self.num_attention_heads,
            "kv_heads": self.kv_heads,
            "kv_kib_per_token_bf16": self.kv_bytes_per_token("bf16") / 1024,
            "max_context": self.max_position_embeddings,
        }


def load_model(name_or_path: str) -> ModelProfile:
    """Load a built-in model, a model YAML, or a Hugging Face config.json."""
    path = resolve("model_profiles", name_or_path)
    data = read_structured(path)
    if not isinstance(data, dict):
        raise LlmsimError("expected a mapping of model keys", source=path)
    if path.suffix == ".json":
        # A downloaded config.json carries many keys llmsim does not need
        # (architectures, rope_scaling, torch_dtype, ...): keep only ours.
        known = set(ModelProfile.model_fields)
        data = {k: v for k, v in data.items() if k in known}
        data.setdefault("name", path.parent.name or path.stem)
        if data.get("model_type") is None:
            data.pop("model_type", None)
    else:
        data.setdefault("name", path.stem)
    try:
        return ModelProfile.model_validate(data)
    except ValidationError as e:
        raise from_validation_error(e, path) from None


def model_path_for(name_or_path: str) -> Path:
    return resolve("model_profiles", name_or_path)
