"""Which layers of a model are mixture-of-experts, and MLA's weight shapes.

Hugging Face configs say which decoder layers route tokens to experts in
several ways; each is read as transformers reads it, and they combine:

* ``first_k_dense_replace`` k, ``moe_layer_freq`` f (DeepSeek): layer i is
  MoE when i ≥ k and i mod f = 0;
* ``decoder_sparse_step`` s, ``mlp_only_layers`` (Qwen-MoE): layer i is MoE
  when (i + 1) mod s = 0 and i is not listed;
* ``interleave_moe_layer_step`` s (Llama 4): layer i is MoE when (i + 1) mod s = 0.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import KeyRefusal

if TYPE_CHECKING:
    from .model import ModelProfile


def is_moe_layer(m: "ModelProfile", i: int) -> bool:
    if not m.num_experts:
        return False
    return (i >= m.first_k_dense_replace and i % m.moe_layer_freq == 0
            and (i + 1) % m.decoder_sparse_step == 0 and (i + 1) % m.interleave_moe_layer_step == 0
            and i not in m.mlp_only_layers)


_MOE_ONLY = ("num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size",
             "intermediate_size_mlp")
_MLA_KEYS = ("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")


def check_layout(m: "ModelProfile") -> None:
    """Raise ValueError (reported with the file and key) for an MoE, MLA or
    sliding-window layout that does not hold together."""
    if m.num_experts:
        if not m.num_experts_per_tok:
            raise KeyRefusal("num_experts_per_tok", f"missing: num_experts {m.num_experts} needs it (the experts "
                             "each token uses)")
        if m.num_experts_per_tok > m.num_experts:
            raise KeyRefusal("num_experts_per_tok", f"{m.num_experts_per_tok} exceeds the {m.num_experts} experts "
                             "(num_experts): a token cannot use more experts than a layer has")
        if not m.num_moe_layers:
            raise ValueError("num_experts is set but the layer layout (first_k_dense_replace, moe_layer_freq, "
                             "decoder_sparse_step, mlp_only_layers) leaves no MoE layer")
    else:
        for key in _MOE_ONLY + ("n_shared_experts",):
            if getattr(m, key):
                raise KeyRefusal(key, "describes MoE layers but the model has no num_experts "
                                 "(num_local_experts / n_routed_experts)")
    bad = [i for i in m.mlp_only_layers if not 0 <= i < m.num_hidden_layers]
    if bad:
        raise KeyRefusal("mlp_only_layers", f"{bad} are not layers of a {m.num_hidden_layers}-layer model "
                         f"(0 to {m.num_hidden_layers - 1})")
    if m.kv_lora_rank is not None:
        missing = [k for k in _MLA_KEYS if getattr(m, k) is None]
        if missing:
            raise ValueError(f"kv_lora_rank (MLA) needs {', '.join(missing)}")
    elif m.q_lora_rank is not None:
        raise ValueError("q_lora_rank without kv_lora_rank: MLA needs kv_lora_rank")
    if m.layer_types is not None:
        if len(m.layer_types) != m.num_hidden_layers:
            raise KeyRefusal("layer_types", f"lists {len(m.layer_types)} layers, the model has {m.num_hidden_layers} "
                             "(num_hidden_layers)")
        if "sliding_attention" in m.layer_types and not m.sliding_window:
            raise KeyRefusal("sliding_window", "missing: layer_types has sliding_attention layers")
    if m.num_nextn_predict_layers and not m.is_mla:
        raise ValueError("num_nextn_predict_layers (MTP) is modelled for DeepSeek-style (MLA) models only")


def mla_params(m: "ModelProfile") -> int:
    """One MLA layer's projections (DeepSeek-V3): q (through a q_lora_rank
    latent when set), the shared KV latent and rotary key, its up-projection
    to every head's no-rope key and value, and the output."""
    h, heads = m.hidden_size, m.num_attention_heads
    rope, nope, v = m.qk_rope_head_dim or 0, m.qk_nope_head_dim or 0, m.v_head_dim or 0
    qk = heads * (nope + rope)
    q = h * m.q_lora_rank + m.q_lora_rank * qk if m.q_lora_rank else h * qk
    kv_a = h * ((m.kv_lora_rank or 0) + rope)
    kv_b = (m.kv_lora_rank or 0) * heads * (nope + v)
    return q + kv_a + kv_b + heads * v * h


def layout_text(m: "ModelProfile") -> str:
    """One line: dense / MoE layout, attention kind, checkpoint format."""
    parts = []
    if m.is_moe:
        moe = f"MoE {m.num_experts}×top-{m.topk} (expert FFN {m.expert_ffn}) on {m.num_moe_layers} layers"
        if m.num_dense_layers:
            moe += f", {m.num_dense_layers} dense"
        if m.shared_ffn:
            moe += f", shared FFN {m.shared_ffn}"
        parts.append(moe)
    else:
        parts.append("dense")
    if m.is_mla:
        parts.append(f"MLA (latent {m.kv_lora_rank}+{m.qk_rope_head_dim})")
    else:
        parts.append(f"GQA {m.num_attention_heads}/{m.kv_heads}")
    if m.num_sliding_layers:
        parts.append(f"{m.num_sliding_layers} sliding-window layers ({m.sliding_window})")
    if m.num_nextn_predict_layers:
        parts.append(f"MTP {m.num_nextn_predict_layers}")
    if m.checkpoint_dtype:
        parts.append(f"checkpoint {m.checkpoint_dtype}")
    return "; ".join(parts)
