"""Model architectures, written with Hugging Face ``config.json`` key names.

A user can point ``--model`` at a built-in name, at their own YAML, or at a
model's ``config.json`` as downloaded. Everything the simulator needs
(parameter count, weight and KV bytes) is derived here, never typed in, so a
profile cannot contradict itself.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from ..dtypes import BYTES, EXPERT_ONLY_DTYPES, WEIGHT_DTYPES, checkpoint_weight_dtype
from ..errors import KeyRefusal, LlmsimError
from .hf_config import ALIASES, model_type_fault, normalize
from .layout import check_layout, is_moe_layer, layout_text, mla_params
from .loader import read_structured, refuse_other_kind, resolve

#: Physical bounds on a decoder's shape, each far beyond any published model
#: (the deepest has ~130 layers, the widest a hidden size of ~25,000, the
#: largest vocabulary ~260,000 tokens, the most experts ~500, the longest
#: context 10M tokens). A typo past them (``num_hidden_layers: 1000000000``)
#: would otherwise make every per-layer sum loop for minutes.
MAX_LAYERS = 1024
MAX_WIDTH = 1 << 18          # hidden, FFN, head and latent widths
MAX_HEADS = 4096
MAX_VOCAB = 1 << 24
MAX_CONTEXT = 1 << 27        # tokens
MAX_EXPERTS = 4096

#: A weight format a checkpoint's name announces, as Hugging Face repositories
#: spell it (Qwen3-235B-A22B-FP8, DeepSeek-V3.1-NVFP4, Llama-3-8B-AWQ, ...).
_NAMED_FORMAT = re.compile(r"(?<![a-z0-9])(nvfp4|mxfp4|fp8|fp4|awq|gptq|int4|int8|w4a16|w4a8|w8a8)(?![a-z0-9])",
                           re.IGNORECASE)

_NON_GATED_ACTS = {"gelu", "gelu_new", "gelu_fast", "relu", "relu2", "gelu_pytorch_tanh", "quick_gelu"}
# Activations of a gated MLP (SwiGLU); with _NON_GATED_ACTS every hidden_act llmsim knows: another
# is refused, not taken as gated (an MLP's weights count on it).
_GATED_ACTS = {"silu", "swish", "swiglu"}
_GATED_GELU_FAMILIES = {"gemma", "gemma2", "gemma3"}
# Families whose serving code departs from the plain decoder block in what a
# step runs (vLLM's model files). MiniMax-M2: the router is an fp32 GEMM
# (MiniMaxM2MoE.gate is a ReplicatedLinear with params_dtype float32, fed
# hidden_states.to(float32)), and the q/k RMSNorm spans every head of the
# layer, not one head, so with the heads split over TP ranks each layer
# all-reduces the per-token variances of q and k
# (MiniMaxText01RMSNormTP.forward_qk: one all-reduce of both, fp32; SGLang's
# MiniMaxM2QKRMSNorm all-reduces the two sums of squares the same way).
_FP32_ROUTER_FAMILIES = {"minimax_m2"}
# Families whose routed experts add a bias to each projection's output, which no config key states:
# gpt-oss (transformers' GptOssExperts gate_up_proj_bias and down_proj_bias, bf16 beside the MXFP4
# blocks in the checkpoint; 116.83B parameters with them, as its model card counts).
_EXPERT_BIAS_FAMILIES = {"gpt_oss"}
_TP_QK_NORM_FAMILIES = {"minimax_m2"}



def window_span_blocks(window: int, block_size: int) -> int:
    """The ``block_size``-token blocks a decoding sequence's ``window`` spans: cdiv(window − 1,
    block_size) + 1, the window's last window − 1 tokens and the one it writes, a block more where
    the window does not start on a block boundary (the window itself in blocks of one token)."""
    return -(-(window - 1) // block_size) + 1


class ModelProfile(BaseModel):
    """A decoder-only transformer: dense (Llama family and look-alikes), with
    mixture-of-experts MLPs, multi-head latent attention (MLA) and
    sliding-window layers where its config declares them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "custom"
    description: str = ""
    source: str = ""
    model_type: str = "llama"
    num_hidden_layers: int = Field(gt=0, le=MAX_LAYERS)
    hidden_size: int = Field(gt=0, le=MAX_WIDTH)
    num_attention_heads: int = Field(gt=0, le=MAX_HEADS)
    num_key_value_heads: Optional[int] = Field(default=None, gt=0, le=MAX_HEADS)
    head_dim: Optional[int] = Field(default=None, gt=0, le=MAX_WIDTH)
    intermediate_size: int = Field(gt=0, le=MAX_WIDTH)
    vocab_size: int = Field(gt=0, le=MAX_VOCAB)
    tie_word_embeddings: bool = False
    max_position_embeddings: int = Field(default=4096, gt=0, le=MAX_CONTEXT)
    hidden_act: str = "silu"
    attention_bias: bool = False
    # llmsim key: whether the MLP has a gate projection (SwiGLU/GeGLU). Left
    # unset it follows hidden_act and model_type, as transformers does.
    gated_mlp: Optional[bool] = None
    # --- mixture of experts (no num_experts: dense) ----------------------
    num_experts: Optional[int] = Field(default=None, ge=0, le=MAX_EXPERTS)
    num_experts_per_tok: Optional[int] = Field(default=None, ge=1, le=MAX_EXPERTS)
    moe_intermediate_size: Optional[int] = Field(default=None, gt=0, le=MAX_WIDTH)
    n_shared_experts: int = Field(default=0, ge=0, le=MAX_EXPERTS)
    shared_expert_intermediate_size: Optional[int] = Field(default=None, ge=0, le=MAX_WIDTH)
    first_k_dense_replace: int = Field(default=0, ge=0, le=MAX_LAYERS)
    moe_layer_freq: int = Field(default=1, ge=1, le=MAX_LAYERS)
    decoder_sparse_step: int = Field(default=1, ge=1, le=MAX_LAYERS)
    interleave_moe_layer_step: int = Field(default=1, ge=1, le=MAX_LAYERS)
    mlp_only_layers: tuple[int, ...] = Field(default=(), max_length=MAX_LAYERS)
    intermediate_size_mlp: Optional[int] = Field(default=None, gt=0, le=MAX_WIDTH)
    # --- multi-head latent attention (DeepSeek-V2/V3) --------------------
    kv_lora_rank: Optional[int] = Field(default=None, gt=0, le=MAX_WIDTH)
    q_lora_rank: Optional[int] = Field(default=None, gt=0, le=MAX_WIDTH)
    qk_rope_head_dim: Optional[int] = Field(default=None, gt=0, le=MAX_WIDTH)
    qk_nope_head_dim: Optional[int] = Field(default=None, gt=0, le=MAX_WIDTH)
    v_head_dim: Optional[int] = Field(default=None, gt=0, le=MAX_WIDTH)
    num_nextn_predict_layers: int = Field(default=0, ge=0, le=MAX_LAYERS)
    # --- attention layout -------------------------------------------------
    sliding_window: Optional[int] = Field(default=None, gt=0, le=MAX_CONTEXT)
    layer_types: Optional[tuple[Literal["full_attention", "sliding_attention"], ...]] = Field(
        default=None, max_length=MAX_LAYERS)
    # The weight format the checkpoint declares (quantization_config); a
    # pool's engine.weight_dtype says what it runs.
    checkpoint_dtype: Optional[str] = None
    # Whether the description is a checkpoint's own config.json (or a copy of one), set by
    # load_model: there no quantization_config means 16-bit weights, not an unstated format.
    _from_checkpoint_config: bool = PrivateAttr(default=False)

    @field_validator("hidden_act")
    @classmethod
    def _a_known_activation(cls, v: str) -> str:
        if v not in _GATED_ACTS | _NON_GATED_ACTS:
            raise ValueError(f"{v!r} is no activation llmsim knows ({', '.join(sorted(_GATED_ACTS | _NON_GATED_ACTS))}): "
                             "whether the MLP is gated, and so its weights, hang on it; give gated_mlp and the "
                             "nearest activation")
        return v

    @field_validator("model_type")
    @classmethod
    def _a_decoder_family(cls, v: str) -> str:
        why = model_type_fault(v)
        if why is not None:
            raise ValueError(why)
        return v

    @model_validator(mode="after")
    def _check_shape(self) -> "ModelProfile":
        if self.num_attention_heads % self.kv_heads != 0:
            raise KeyRefusal("num_key_value_heads", f"{self.kv_heads} does not divide num_attention_heads "
                             f"{self.num_attention_heads}: each KV head serves an equal group of query heads")
        if self.head_dim is None and not self.is_mla and self.hidden_size % self.num_attention_heads != 0:
            raise KeyRefusal("hidden_size", f"{self.hidden_size} is not a multiple of num_attention_heads "
                             f"{self.num_attention_heads}: give head_dim (each head's width)")
        check_layout(self)
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

    @property
    def is_moe(self) -> bool:
        return bool(self.num_experts)

    @property
    def router_weight_bytes(self) -> float:
        """Bytes per weight of the router GEMM (hidden × experts) each MoE layer
        runs before its experts: bf16, fp32 where the family keeps it in fp32."""
        return 4.0 if self.model_type in _FP32_ROUTER_FAMILIES else 2.0

    @property
    def tp_qk_norm(self) -> bool:
        """Whether the q/k RMSNorm normalises over all heads, so that tensor
        parallelism adds one all-reduce of two fp32 values per token and layer."""
        return self.model_type in _TP_QK_NORM_FAMILIES

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def topk(self) -> int:
        return self.num_experts_per_tok or 0

    @property
    def num_moe_layers(self) -> int:
        return sum(is_moe_layer(self, i) for i in range(self.num_hidden_layers))

    @property
    def num_dense_layers(self) -> int:
        return self.num_hidden_layers - self.num_moe_layers

    @property
    def expert_ffn(self) -> int:
        """One routed expert's FFN width (HF: moe_intermediate_size, else
        intermediate_size, as Mixtral and gpt-oss name it)."""
        return self.moe_intermediate_size or self.intermediate_size

    @property
    def dense_ffn(self) -> int:
        """The FFN width of a dense layer (Llama 4: intermediate_size_mlp)."""
        return self.intermediate_size_mlp or self.intermediate_size

    @property
    def shared_ffn(self) -> int:
        """Width of the MoE layers' always-on shared expert(s), 0 if none."""
        if self.shared_expert_intermediate_size is not None:
            return self.shared_expert_intermediate_size
        return self.n_shared_experts * self.expert_ffn

    @property
    def num_sliding_layers(self) -> int:
        if self.layer_types is not None:
            return sum(t == "sliding_attention" for t in self.layer_types)
        return self.num_hidden_layers if self.sliding_window else 0

    @property
    def num_full_attention_layers(self) -> int:
        return self.num_hidden_layers - self.num_sliding_layers

    # --- parameters ----------------------------------------------------
    # Plain properties, not cached_property: pydantic's model_copy(update=...)
    # copies the instance __dict__, cached values included, so a what-if copy
    # with more layers would keep the original's parameter count.
    @property
    def attention_params_per_layer(self) -> int:
        h = self.hidden_size
        if self.is_mla:
            return mla_params(self)
        bias = self.q_dim + 2 * self.kv_dim + h if self.attention_bias else 0
        return h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h + bias

    def mlp_params(self, ffn: int) -> int:
        """One (gated) MLP of width ``ffn``."""
        return (3 if self.is_gated else 2) * self.hidden_size * ffn

    @property
    def expert_params(self) -> int:
        """One routed expert."""
        return self.mlp_params(self.expert_ffn)

    @property
    def expert_bias_params(self) -> int:
        """One routed expert's biases, a value per output of its gate and up projections and of its
        down projection, in the families that have them (``_EXPERT_BIAS_FAMILIES``), else 0. They
        stay 16-bit whatever format quantises the weights, and go with their expert wherever it is
        held, so they are counted apart from :attr:`expert_params`."""
        if self.model_type not in _EXPERT_BIAS_FAMILIES:
            return 0
        return (2 if self.is_gated else 1) * self.expert_ffn + self.expert_down_bias_params

    @property
    def expert_down_bias_params(self) -> int:
        """Of :attr:`expert_bias_params`, the down projection's: one value per hidden unit, which a
        width split cannot divide, so every width shard of the expert keeps all of it."""
        return self.hidden_size if self.model_type in _EXPERT_BIAS_FAMILIES else 0

    @property
    def routed_experts(self) -> int:
        """Routed experts over all MoE layers, each layer's its own (0 for a dense model)."""
        return self.num_moe_layers * (self.num_experts or 0)

    @property
    def expert_matrix_params(self) -> int:
        """Every routed expert's weight matrices, all MoE layers: what an expert format quantises."""
        return self.routed_experts * self.expert_params

    @property
    def expert_biases(self) -> int:
        """Every routed expert's biases, all MoE layers."""
        return self.routed_experts * self.expert_bias_params

    @property
    def moe_layer_params(self) -> int:
        """Routed experts (their biases too), shared expert(s) and router of one MoE layer (a
        single expert needs no router: every token goes to it)."""
        experts = self.num_experts or 0
        return (experts * (self.expert_params + self.expert_bias_params) + self.mlp_params(self.shared_ffn)
                + self.router_params_per_layer)

    @property
    def router_params_per_layer(self) -> int:
        """One MoE layer's router (gate): hidden × experts, none for a single
        expert (every token goes to it)."""
        experts = self.num_experts or 0
        return self.hidden_size * experts if experts > 1 else 0

    @property
    def mla_down_params_per_layer(self) -> int:
        """MLA's down-projections from the hidden state, one layer: the query
        latent (``q_a_proj``, hidden × q_lora_rank, when the query is
        compressed) and the KV latent with its rotary key
        (``kv_a_proj_with_mqa``). They have no heads to split, so the
        serving stacks keep them whole on every GPU of a tensor-parallel
        group (:func:`simulator.parallelism.tp_whole_weight_bytes`); 0 for
        other attention."""
        if not self.is_mla:
            return 0
        q_a = self.hidden_size * (self.q_lora_rank or 0)
        return q_a + self.hidden_size * ((self.kv_lora_rank or 0) + (self.qk_rope_head_dim or 0))

    @property
    def kv_projection_params_per_layer(self) -> int:
        """The K and V projections of one GQA layer (biases included), the
        part of attention a GPU holds per KV head; 0 for MLA."""
        if self.is_mla:
            return 0
        return 2 * self.hidden_size * self.kv_dim + (2 * self.kv_dim if self.attention_bias else 0)

    @property
    def router_params(self) -> int:
        """The routers (gates) of all MoE layers."""
        return self.num_moe_layers * self.router_params_per_layer

    @property
    def linear_params_per_layer(self) -> int:
        """Attention plus a dense MLP: every layer of a dense model."""
        return self.attention_params_per_layer + self.mlp_params(self.dense_ffn)

    @property
    def linear_params(self) -> int:
        """All linear weights of the decoder layers (MoE layers with every expert)."""
        return (self.num_hidden_layers * self.attention_params_per_layer
                + self.num_dense_layers * self.mlp_params(self.dense_ffn)
                + self.num_moe_layers * self.moe_layer_params)

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    @property
    def norm_params(self) -> int:
        latent = (self.kv_lora_rank or 0) + (self.q_lora_rank or 0)
        return (2 * self.num_hidden_layers + 1) * self.hidden_size + self.num_hidden_layers * latent

    @property
    def num_params(self) -> int:
        """All parameters, as a model card counts them (6.74B for Llama-2-7B,
        671B for DeepSeek-V3: its next-token-prediction module is apart, see
        :attr:`mtp_params`)."""
        return self.linear_params + self.embedding_params + self.lm_head_params + self.norm_params

    @property
    def idle_expert_params(self) -> int:
        """Routed-expert weights a token does not use: (experts − top-k) per MoE layer."""
        idle = max(0, (self.num_experts or 0) - self.topk)
        return self.num_moe_layers * idle * (self.expert_params + self.expert_bias_params)

    @property
    def active_params(self) -> int:
        """Parameters one token uses: all of them but the routed experts it
        is not sent to (embedding table included, as Mistral and DeepSeek
        count; OpenAI's gpt-oss figures leave the embedding out)."""
        return self.num_params - self.idle_expert_params

    @property
    def mtp_params(self) -> int:
        """The next-token-prediction module(s) (DeepSeek ``num_nextn_predict_layers``):
        one decoder layer each plus the projection of [embedding; hidden]
        (2h × h) and three norms; embedding and LM head are shared."""
        h = self.hidden_size
        mlp = self.moe_layer_params if self.is_moe else self.mlp_params(self.dense_ffn)
        one = self.attention_params_per_layer + mlp + 2 * h * h + 5 * h
        return self.num_nextn_predict_layers * one

    def mtp_draft(self) -> "ModelProfile":
        """The next-token-prediction module(s) as a draft model: the decoder
        layer(s) of :attr:`mtp_params`, sharing this model's embedding and LM
        head (the [embedding; hidden] projection is left out of its cost)."""
        if not self.num_nextn_predict_layers:
            raise LlmsimError(f"{self.name} has no next-token-prediction layers (num_nextn_predict_layers) "
                              "for draft_model: mtp")
        return self.model_copy(update={
            "name": f"{self.name}-mtp", "num_hidden_layers": self.num_nextn_predict_layers,
            "first_k_dense_replace": 0, "mlp_only_layers": (), "layer_types": None, "num_nextn_predict_layers": 0})

    @property
    def published_format(self) -> Optional[str]:
        """The checkpoint's weight format as far as its files tell: its
        ``quantization_config``'s. A checkpoint whose name announces a format
        its config does not declare (AIConfigurator's copy of
        nvidia/DeepSeek-V3.1-NVFP4; a ModelOpt export read without the
        hf_quant_config.json beside it) gets that contradiction, a format no
        rule serves, so it is refused rather than served in 16 bits."""
        if self.checkpoint_dtype is None and (named := _NAMED_FORMAT.search(self.name)):
            return f"none declared, though its name says {named.group(1)}"
        return self.checkpoint_dtype

    @property
    def checkpoint_weights(self) -> Optional[str]:
        """The weights the checkpoint's files hold, where its description says: the format its
        quantization_config declares, or 16 bits for a checkpoint's own config.json declaring none.
        None where it does not say (a hand-written profile without checkpoint_dtype stands for the
        checkpoint in whichever weights a pool names) or declares a format llmsim does not model."""
        if self.checkpoint_dtype is None and not self._from_checkpoint_config:
            return None
        return checkpoint_weight_dtype(self.published_format)

    def served_weight_dtype(self) -> str:
        """The weights a pool serves this model in when it names none: the
        checkpoint's format, as the stacks load it (:func:`checkpoint_weight_dtype`).
        A format llmsim does not model is refused, not read as 16-bit."""
        wd = checkpoint_weight_dtype(self.published_format)
        if wd is not None:
            return wd
        formats = ", ".join(WEIGHT_DTYPES)
        if self.checkpoint_dtype is None:
            raise LlmsimError(f"{self.name}'s config declares no quantization_config, though its name says "
                              f"{_NAMED_FORMAT.search(self.name).group(1)} (a ModelOpt checkpoint keeps its format "
                              f"in hf_quant_config.json, which llmsim reads beside config.json); name the weights "
                              f"the pool serves ({formats})", key_path="engine.weight_dtype")
        raise LlmsimError(f"{self.name}'s quantization_config declares {self.checkpoint_dtype!r}, which is not "
                          f"one of the weight formats llmsim models; name the weights the pool serves ({formats})",
                          key_path="engine.weight_dtype")

    def weight_bytes(self, weight_dtype: str = "bf16") -> float:
        """Bytes of all weights. Quantisation applies to the transformer's
        linear layers; embeddings, LM head and norms stay 16-bit, as in vLLM's
        fp8/int8/AWQ checkpoints. An experts-only format (MXFP4) quantises the
        routed experts alone. The experts' biases stay 16-bit (:attr:`expert_bias_params`)."""
        if weight_dtype in EXPERT_ONLY_DTYPES:
            experts = self.expert_matrix_params
            return experts * BYTES[weight_dtype] + (self.num_params - experts) * 2.0
        quantized = self.linear_params - self.expert_biases
        rest = self.num_params - quantized
        return quantized * BYTES[weight_dtype] + rest * 2.0

    def expert_weight_bytes(self, weight_dtype: str = "bf16", moe_tp: int = 1) -> float:
        """Bytes of the routed experts (all MoE layers), the part expert parallelism splits:
        their weights in ``weight_dtype``, their 16-bit biases. Split ``moe_tp`` ways by width,
        each shard holds its expert's whole down-projection bias (SGLang's and vLLM's
        ``Mxfp4MoEMethod.create_weights`` make w2's bias experts x hidden on every GPU, and
        gpt_oss.py's weight loaders zero it beyond the first width rank rather than split it), so
        the replica holds ``moe_tp`` copies of it."""
        copies = self.routed_experts * self.expert_down_bias_params * (moe_tp - 1)
        return self.expert_matrix_params * BYTES[weight_dtype] + (self.expert_biases + copies) * 2.0

    @property
    def kv_elements_per_layer(self) -> int:
        """Elements one token caches in one attention layer: K and V of every KV
        head, or MLA's compressed latent plus its shared rotary key."""
        if self.is_mla:
            return (self.kv_lora_rank or 0) + (self.qk_rope_head_dim or 0)
        return 2 * self.kv_dim

    def kv_bytes_per_token(self, kv_dtype: str = "bf16") -> float:
        """KV bytes each token of a sequence adds: its full-attention layers'
        (2 · kv_heads · head_dim per layer; MLA: kv_lora_rank + qk_rope_head_dim).
        Sliding-window layers hold at most the window: :meth:`kv_window_bytes`."""
        return float(self.num_full_attention_layers * self.kv_elements_per_layer) * BYTES[kv_dtype]

    def kv_window_bytes(self, kv_dtype: str = "bf16", block_size: int = 1) -> float:
        """The most KV one sequence holds in its sliding-window layers: a full
        window, in the whole ``block_size``-token blocks that cover it. A
        decoding sequence keeps the blocks of its last window − 1 tokens and
        the one it writes, freeing only blocks wholly below them, so a window
        that does not start on a block boundary spans one block more:
        cdiv(window − 1, block_size) + 1 blocks (vLLM's
        single_type_kv_cache_manager.py SlidingWindowManager.remove_skipped_blocks;
        kv_cache_interface.py SlidingWindowSpec counts cdiv(tokens, block_size) + 1)."""
        if not self.num_sliding_layers:
            return 0.0
        held = self.window_blocks_held(block_size) * block_size
        return float(self.num_sliding_layers * self.kv_elements_per_layer * held) * BYTES[kv_dtype]

    @property
    def window_tokens(self) -> int:
        """The tokens a sliding-window layer attends to: its window, or the whole context where that is shorter."""
        return min(self.sliding_window or self.max_position_embeddings, self.max_position_embeddings)

    def window_blocks_held(self, block_size: int) -> int:
        """The ``block_size``-token blocks one decoding sequence's window spans in a sliding-window
        layer (:func:`window_span_blocks`)."""
        return window_span_blocks(self.window_tokens, block_size)

    def summary(self) -> dict:
        out = {
            "name": self.name,
            "params_b": round(self.num_params / 1e9, 3),
            "active_params_b": round(self.active_params / 1e9, 3),
            "layers": self.num_hidden_layers,
            "hidden": self.hidden_size,
            "heads": self.num_attention_heads,
            "kv_heads": self.kv_heads,
            "kv_kib_per_token_bf16": self.kv_bytes_per_token("bf16") / 1024,
            "max_context": self.max_position_embeddings,
            # the weights a pool naming none serves (None: the checkpoint's format is one llmsim does not model)
            "serves": checkpoint_weight_dtype(self.published_format),
            "layout": layout_text(self),
        }
        return out


def _language_model(data: dict, path) -> dict:
    """A multimodal checkpoint's language model: its ``text_config``, with
    the top-level ``quantization_config`` that quantises it (Llama-4's FP8
    and NVFP4 checkpoints write it there, beside the vision tower's config).
    Two different formats, one at each level, are refused rather than one of
    them dropped."""
    text = dict(data["text_config"])
    top = data.get("quantization_config")
    if top is not None:
        if text.get("quantization_config", top) != top:
            raise LlmsimError("the checkpoint declares one quantization_config at the top level and another in "
                              "text_config; expected one weight format for the language model", source=path,
                              key_path="text_config.quantization_config")
        text["quantization_config"] = top
    if data.get("name"):
        text["name"] = data["name"]
    return text


def load_model(name_or_path: str) -> ModelProfile:
    """Load a built-in model, a model YAML, or a Hugging Face config.json."""
    path = resolve("model_profiles", name_or_path)
    data = read_structured(path)
    if not isinstance(data, dict):
        raise LlmsimError("expected a mapping of model keys", source=path)
    if "text_config" not in data:       # a multimodal checkpoint's keys are under it
        refuse_other_kind("model_profiles", data, path)
    if "text_config" in data and not isinstance(data["text_config"], dict):
        raise LlmsimError("expected a mapping (a multimodal checkpoint's language model)", source=path,
                          key_path="text_config")
    is_json = path.suffix == ".json"
    if is_json and "quantization_config" not in data:
        modelopt = _modelopt_quantization(path.parent / "hf_quant_config.json")
        if modelopt is not None:
            data = {**data, "quantization_config": modelopt}
    inner = "text_config." if "text_config" in data else ""
    if inner:
        data = _language_model(data, path)
    spelled = {ALIASES[k]: k for k in data if k in ALIASES}     # profile field -> the key the file wrote
    # A downloaded config.json carries many keys llmsim does not need
    # (rope_scaling, torch_dtype, ...); hf_config says which are dropped
    # and refuses those that change the architecture.
    checkpoint_config = is_json or "model" in data    # a config.json, or the shared corpus's copy of one
    data = normalize(data, path, set(ModelProfile.model_fields), strict=not checkpoint_config)
    if is_json:
        data.setdefault("name", path.parent.name or path.stem)
    else:
        data.setdefault("name", path.stem)
    if data.get("model_type") is None:
        if checkpoint_config:
            # transformers' AutoConfig (which vLLM's get_config calls) refuses a config.json without one; run as
            # Llama, its MLP gating, router precision and a stack's per-family defaults would be Llama's unsaid
            raise LlmsimError("missing: a checkpoint's config.json names its family (llama, mixtral, "
                              "qwen3_moe, ...), which sets how llmsim and the serving stacks read its other keys; "
                              "give the model_type of the checkpoint it was copied from", source=path,
                              key_path=inner + "model_type")
        data.pop("model_type", None)
    from ..scenario.strict import validate_strict

    try:
        profile = validate_strict(ModelProfile, data, path)
    except LlmsimError as e:
        field, dot, rest = (e.key_path or "").partition(".")
        if field not in spelled:
            raise
        raise LlmsimError(e.message, source=path, key_path=spelled[field] + dot + rest) from None
    profile._from_checkpoint_config = checkpoint_config
    return profile


def _modelopt_quantization(path: Path) -> Optional[dict]:
    """The ``quantization_config`` of a ModelOpt export, which writes its
    format to hf_quant_config.json beside config.json rather than into it
    (``{"quantization": {"quant_algo": "NVFP4", ...}}``; vLLM's
    ModelOptNvFp4Config reads the same file). None where there is none."""
    if not path.is_file():
        return None
    data = read_structured(path)
    q = data.get("quantization") if isinstance(data, dict) else None
    algo = q.get("quant_algo") if isinstance(q, dict) else None
    if not isinstance(algo, str) or not algo:
        raise LlmsimError("expected a ModelOpt quantisation record with a quant_algo (such as NVFP4 or FP8)",
                          source=path, key_path="quantization.quant_algo")
    return {"quant_method": "modelopt", "quant_algo": algo}


def model_path_for(name_or_path: str) -> Path:
    return resolve("model_profiles", name_or_path)
