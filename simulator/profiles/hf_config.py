"""Which Hugging Face config keys llmsim models, ignores or refuses.

A model file is read with Hugging Face's key names. Every key falls in one of
three sets, so nothing that shapes the network is dropped silently:

* **modelled** — a :class:`~.model.ModelProfile` field, possibly under
  another spelling (``num_local_experts``, ``n_routed_experts`` and
  ``num_experts`` all name the routed experts of a layer);
* **known-irrelevant** — numerics, tokenizer ids, training-only settings,
  router details that do not change how many weights a token reads or how
  much KV it stores (``rope_theta``, ``router_aux_loss_coef``, ``n_group``);
* **refused** — architecture llmsim cannot model (sparse-attention
  indexers, linear-attention layers, chunked attention, state-space
  layers): loading stops with one line naming the key.

A downloaded ``config.json`` may carry other keys; one whose name says it
shapes the network (``expert``, ``layer``, ``head``, ``attention``...) is
refused, the rest are metadata and dropped. A hand-written YAML profile is
stricter: every key must be known, so a typo is an error.
"""
from __future__ import annotations

import re
from typing import Any

from ..errors import LlmsimError, nearest

# Other spellings of the profile's fields.
ALIASES: dict[str, str] = {
    "num_local_experts": "num_experts",
    "n_routed_experts": "num_experts",
    "experts_per_token": "num_experts_per_tok",
}

# Present in real configs, with no effect on parameter counts, weight or KV
# bytes, or the FLOPs of a step.
IGNORED: frozenset[str] = frozenset({
    # provenance of the shared corpus and of config.json
    "model", "source_repo", "source_path", "source_commit", "note", "architectures", "transformers_version",
    "_name_or_path", "auto_map", "torch_dtype", "dtype",
    # tokenizer and generation
    "bos_token_id", "eos_token_id", "pad_token_id", "use_cache", "output_router_logits", "return_dict",
    # numerics and initialisation
    "rms_norm_eps", "layer_norm_eps", "norm_eps", "initializer_range", "attention_dropout", "hidden_dropout",
    "dropout", "pretraining_tp", "rope_theta", "rope_scaling", "rope_parameters", "rope_interleave",
    "partial_rotary_factor", "rotary_dim", "no_rope_layers", "use_qk_norm", "qk_norm", "qk_layernorm",
    "swiglu_limit", "initial_context_length", "attn_logit_softcapping", "final_logit_softcapping",
    "attn_temperature_tuning", "floor_scale", "attn_scale", "query_pre_attn_scalar", "hidden_activation",
    "cache_implementation",
    # training-only router losses and routing details (which experts, not how many)
    "router_aux_loss_coef", "router_jitter_noise", "aux_loss_alpha", "seq_aux", "norm_topk_prob",
    "routed_scaling_factor", "scoring_func", "topk_method", "n_group", "topk_group", "ep_size",
    "router_z_loss_coef", "moe_router_bias", "use_sliding_window",
    # Qwen2-style: inert while use_sliding_window is false, refused otherwise (below)
    "max_window_layers",
})

# Families whose sliding-window layers alternate with full ones: without
# layer_types their config does not say which layers slide.
_INTERLEAVED_WINDOWS = ("gemma2", "gemma3", "gemma3_text", "cohere2", "gpt_oss")

# Architecture llmsim does not model, and why: refused with this reason.
REFUSED: dict[str, str] = {
    "index_n_heads": "DeepSeek sparse attention (an indexer picks index_topk cached tokens per query)",
    "index_head_dim": "DeepSeek sparse attention (an indexer picks index_topk cached tokens per query)",
    "index_topk": "DeepSeek sparse attention (an indexer picks index_topk cached tokens per query)",
    "linear_num_value_heads": "linear-attention layers (a recurrent state, not a KV cache)",
    "linear_num_key_heads": "linear-attention layers (a recurrent state, not a KV cache)",
    "linear_key_head_dim": "linear-attention layers (a recurrent state, not a KV cache)",
    "linear_value_head_dim": "linear-attention layers (a recurrent state, not a KV cache)",
    "linear_conv_kernel_dim": "linear-attention layers (a recurrent state, not a KV cache)",
    "full_attention_interval": "hybrid linear/full attention layers",
    "attention_chunk_size": "chunked local attention",
    "attn_type_list": "per-layer attention kinds other than full and sliding-window attention",
}

# Hugging Face model_type values of decoder-only transformer families: a stack of attention and
# MLP (or MoE) blocks, which a profile describes whatever its family's naming. A family outside it
# is refused, not run as Llama (a state-space, recurrent or encoder-decoder model reads weights and
# keeps state another way); a look-alike of one of these may say so with its model_type.
DECODER_FAMILIES: frozenset[str] = frozenset({
    "llama", "llama4_text", "mistral", "mixtral", "ministral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
    "qwen3_next", "qwen3_5_moe_text", "deepseek", "deepseek_v2", "deepseek_v3", "kimi_k2", "gpt_oss",
    "gemma", "gemma2", "gemma3", "gemma3_text", "cohere", "cohere2", "phi", "phi3", "phimoe", "minimax_m2",
    "glm", "glm4", "glm4_moe", "glm_moe_dsa", "granite", "granitemoe", "olmo", "olmo2", "olmoe",
    "starcoder2", "gpt_bigcode", "gpt_neox", "internlm2", "baichuan", "exaone", "ernie4_5", "ernie4_5_moe",
    "hunyuan_v1_dense", "hunyuan_v1_moe", "smollm3", "dbrx", "arcee", "seed_oss", "nemotron", "falcon",
    "opt", "gpt2", "codegen", "gptj", "stablelm", "persimmon", "yi", "solar", "apertus",
})
# Families that are not decoder-only transformers, and what they are instead.
_NOT_DECODERS = (
    (re.compile(r"mamba|rwkv|jamba|zamba|xlstm|recurrent|griffin|hyena|retnet|ssm"), "state-space or recurrent layers"),
    (re.compile(r"^(t5|mt5|umt5|bart|mbart|pegasus|marian|whisper|led|longt5|switch_transformers|encoder_decoder|"
                r"speech_to_text|seamless)"), "an encoder-decoder model"),
    (re.compile(r"^(bert|roberta|xlm|deberta|electra|albert|distilbert|modernbert|mpnet|e5)"), "an encoder"),
)


def model_type_fault(model_type: str) -> str | None:
    """Why llmsim refuses ``model_type`` (None: a decoder-only transformer family it models)."""
    if model_type in DECODER_FAMILIES:
        return None
    what = next((w for rx, w in _NOT_DECODERS if rx.search(model_type)), None)
    if what is not None:
        return f"{model_type!r} is {what}, not a decoder-only transformer; llmsim cannot model this architecture"
    return (f"{model_type!r} is not a decoder-only transformer family llmsim knows ({', '.join(sorted(DECODER_FAMILIES))}); "
            "a model built as one of them (attention and MLP or MoE blocks) may give that family's model_type")


# Words in a key's name that mean it likely shapes the network.
_ARCHITECTURE_WORDS = re.compile(
    r"expert|moe|lora|layer|head|window|sparse|linear|attention|attn|intermediate|rank|dense|shared|chunk|"
    r"nextn|mtp|index|conv|ssm|mamba|state|router|topk|block|kv|mlp|ffn|hidden|vocab|embed", re.I)

LAYER_TYPES = ("full_attention", "sliding_attention")


def _refuse(path, key: str, why: str) -> LlmsimError:
    return LlmsimError(f"{why}; llmsim cannot model this architecture", source=path, key_path=key)


def normalize(data: dict[str, Any], path, fields: set[str], strict: bool) -> dict[str, Any]:
    """HF keys → profile fields; refuse what cannot be modelled.

    ``strict`` (hand-written YAML) leaves unknown keys to the profile's
    validation, which names them; otherwise (config.json) unknown keys that
    do not look architectural are dropped.
    """
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = ALIASES.get(key, key)
        if key in REFUSED:
            raise _refuse(path, key, REFUSED[key])
        if key.endswith("_note") or key in IGNORED and name not in fields:
            continue
        if key == "layer_types_counts":   # the shared corpus's summary of layer_types
            name, value = "layer_types", _expand_counts(value, path)
        if key == "quantization_config":
            name = "checkpoint_dtype"
            value = checkpoint_dtype(value, path)
        if name in fields:
            if name in out and out[name] != value:
                raise LlmsimError(f"{key}: {value!r} contradicts another spelling of {name} ({out[name]!r})",
                                  source=path, key_path=key)
            out[name] = value
        elif strict:
            out[key] = value   # the profile's validation names the unknown key
        elif _ARCHITECTURE_WORDS.search(key) and value not in (None, False, [], {}):
            # a slip of a key llmsim reads (num_hidden_layer) is named as one, not as unknown architecture
            near = nearest(key, sorted(fields | set(ALIASES)))
            raise LlmsimError(f"unknown key {key!r}{near} may change the architecture and llmsim does not model "
                              "it (it reads the keys listed in docs/scenarios.md, 'MoE and MLA models')",
                              source=path, key_path=key)
    if data.get("use_sliding_window") is False:   # Qwen2-style: the window is switched off
        out.pop("sliding_window", None)
    elif data.get("max_window_layers") is not None and out.get("sliding_window"):
        raise _refuse(path, "max_window_layers", "sliding windows on only some layers (max_window_layers)")
    if out.get("sliding_window") and out.get("layer_types") is None \
            and str(out.get("model_type", "")) in _INTERLEAVED_WINDOWS:
        raise _refuse(path, "sliding_window", f"{out['model_type']} interleaves sliding-window and full layers "
                                              "without layer_types saying which are which")
    for i, t in enumerate(out.get("layer_types") or []):
        if t not in LAYER_TYPES:
            raise _refuse(path, f"layer_types[{i}]", f"layer type {t!r} (llmsim models {', '.join(LAYER_TYPES)})")
    if str(out.get("model_type", "")).startswith("llama4") and "n_shared_experts" not in out \
            and out.get("num_experts"):
        # transformers' Llama4TextMoe always adds one shared expert of intermediate_size.
        out["n_shared_experts"] = 1
    return out


def _expand_counts(counts: Any, path) -> list[str]:
    if not isinstance(counts, dict):
        raise LlmsimError("expected a mapping of layer type to count", source=path, key_path="layer_types_counts")
    from .model import MAX_LAYERS

    out: list[str] = []
    for t, n in counts.items():
        if t not in LAYER_TYPES:
            raise _refuse(path, "layer_types_counts", f"layer type {t!r} (llmsim models {', '.join(LAYER_TYPES)})")
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_LAYERS:
            raise LlmsimError(f"expected a count of layers from 0 to {MAX_LAYERS}, got {n!r}", source=path,
                              key_path=f"layer_types_counts.{t}")
        out += [t] * n
    return out


# quant_method → the checkpoint's weight format, as llmsim names dtypes.
_QUANT_METHODS = {"fp8": "fp8", "mxfp4": "mxfp4", "fbgemm_fp8": "fp8"}


def _weight_block_size(block: Any, path) -> list[int] | None:
    """An fp8 checkpoint's block of weights sharing one scale, as HF and vLLM
    write it (``[128, 128]``); absent or null means one scale per tensor.
    Anything else is refused rather than read as either, so a mangled value
    cannot silently pick the per-tensor kernels or the block ones."""
    if block is None:
        return None
    key = "quantization_config.weight_block_size"
    expected = "expected a list of two positive integers (the rows and columns of weights sharing one scale, " \
               "such as [128, 128])"
    if not isinstance(block, list) or len(block) != 2:
        raise LlmsimError(f"{expected}, got {block!r}", source=path, key_path=key)
    for i, n in enumerate(block):
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise LlmsimError(f"{expected}, got {n!r} in {block!r}", source=path, key_path=f"{key}[{i}]")
    return block


def checkpoint_dtype(q: Any, path) -> str | None:
    """The weight format a ``quantization_config`` declares (informational:
    a pool's ``engine.weight_dtype`` says what it runs)."""
    if q is None:
        return None
    if isinstance(q, str):
        return q
    if not isinstance(q, dict):
        raise LlmsimError("expected a mapping", source=path, key_path="quantization_config")
    method = str(q.get("quant_method", "")).lower()
    if method == "fp8" and _weight_block_size(q.get("weight_block_size"), path):
        return "fp8_block"      # DeepSeek / Qwen3-FP8 checkpoints: one scale per 128×128 block
    if method in _QUANT_METHODS:
        return _QUANT_METHODS[method]
    if method == "modelopt":
        algo = str(q.get("quant_algo", "")).lower()
        return {"nvfp4": "nvfp4", "fp8": "fp8"}.get(algo, f"modelopt {algo}")
    if method in ("awq", "gptq"):
        bits = q.get("bits", 4)
        if isinstance(bits, bool) or bits not in (2, 3, 4, 8):
            raise LlmsimError(f"expected 2, 3, 4 or 8 bits, got {bits!r}", source=path,
                              key_path="quantization_config.bits")
        # weight-only: llmsim's int4 is (W4A16, Marlin), its int8 is W8A8 (SmoothQuant), which an 8-bit
        # GPTQ/AWQ checkpoint is not; named apart, so that a pool serving it must say what it runs
        return f"int{bits}" if bits != 8 else f"{method} int8 weight-only (W8A16)"
    if method == "compressed-tensors":
        for group in (q.get("config_groups") or {}).values():
            w = (group or {}).get("weights") or {}
            if w.get("num_bits"):
                fmt = f"{w.get('type', 'int')}{w['num_bits']}".replace("float8", "fp8").replace("float", "fp")
                if w["num_bits"] == 8 and not (group or {}).get("input_activations"):
                    # 8-bit weights with 16-bit activations (W8A16): not llmsim's int8/fp8, which are W8A8
                    return f"compressed-tensors {fmt} weight-only (W8A16)"
                return fmt
        return "compressed-tensors"
    raise LlmsimError(f"quant_method {method!r} is not a weight format llmsim knows (fp8, mxfp4, modelopt nvfp4, "
                      "awq, gptq, compressed-tensors)", source=path, key_path="quantization_config.quant_method")
