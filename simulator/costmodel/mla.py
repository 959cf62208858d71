"""DeepSeek multi-head latent attention (MLA) on one GPU of a TP group.

MLA caches one compressed latent per token — ``kv_lora_rank`` values plus
the ``qk_rope_head_dim`` rotary key, shared by every head — instead of a key
and a value per KV head. The two phases use it differently, as vLLM does:

* **prefill** up-projects the latent of every context token to per-head keys
  (``qk_nope + qk_rope`` wide) and values (``v_head_dim``) and runs ordinary
  causal attention over them: FLOPs like multi-head attention with
  ``num_heads`` heads;
* **decode** absorbs the key/value up-projections into the query and output
  (two small batched GEMMs), and attends every head directly over the
  latent: multi-query attention of head dim ``kv_lora_rank + qk_rope`` where
  the cache is read once per sequence, not once per head. Its time per cached
  token is one rate, so a decode batch costs exactly
  ``rate·Σcontext + per_seq·batch + fixed``, the affine form the fast engine
  integrates.

The module functions add the projections as GEMMs (the measured module rows
include them): fused q/kv down-projection (replicated across TP), q
up-projection, the key/value up-projection of prefill or the absorbed BMMs of
decode, and the output projection.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import LlmsimError
from ..profiles.hardware import HardwareProfile, RooflineParams
from . import moe
from .components import gemm_time
from .roofline import blend

_US = 1e-6
_BF16 = 2.0


@dataclass(frozen=True)
class MlaShape:
    """Per-GPU MLA dimensions: ``num_heads`` = attention heads / TP."""

    num_heads: int
    kv_lora_rank: int = 512
    qk_rope_head_dim: int = 64
    qk_nope_head_dim: int = 128
    v_head_dim: int = 128
    q_lora_rank: int = 1536   # 0: no query compression (q_proj straight from hidden)
    hidden_size: int = 7168

    def __post_init__(self) -> None:
        if min(self.num_heads, self.kv_lora_rank, self.qk_rope_head_dim, self.qk_nope_head_dim,
               self.v_head_dim, self.hidden_size) < 1 or self.q_lora_rank < 0:
            raise LlmsimError(f"MLA shape needs positive sizes (got {self})")

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def latent_dim(self) -> int:
        """Values cached per token and layer: the latent plus the rotary key."""
        return self.kv_lora_rank + self.qk_rope_head_dim


def latent_kv_bytes_per_token(shape: MlaShape, kv_bytes: float) -> float:
    """KV-cache bytes per token per layer (the same on every TP rank: the latent is not sharded)."""
    return shape.latent_dim * kv_bytes


def mla_prefill_flops_bytes(new_tokens, cached_tokens, shape: MlaShape, kv_bytes: float = 2.0):
    """Causal attention of ``new_tokens`` queries over ``cached + new`` up-projected keys.

    QKᵀ runs at the query/key width ``qk_nope + qk_rope``, AV at ``v_head_dim``:
    2·heads·(d_qk + d_v) FLOPs per query-key pair. Bytes: Q and O in bf16, the
    up-projected K/V of the whole span read once, the new latent written.
    """
    h = shape.num_heads
    pairs = new_tokens * cached_tokens + new_tokens * (new_tokens + 1) / 2.0
    flops = 2.0 * h * (shape.qk_head_dim + shape.v_head_dim) * pairs
    nbytes = (new_tokens * h * (shape.qk_head_dim + shape.v_head_dim) * _BF16
              + (cached_tokens + new_tokens) * h * (shape.qk_head_dim + shape.v_head_dim) * _BF16
              + new_tokens * shape.latent_dim * kv_bytes)
    return flops, nbytes


def mla_prefill_time(new_tokens, cached_tokens, shape: MlaShape, gpu: HardwareProfile, params: RooflineParams,
                     kv_bytes: float = 2.0):
    """Seconds of one layer's MLA prefill kernel for one chunk (arrays allowed)."""
    f, b = mla_prefill_flops_bytes(new_tokens, cached_tokens, shape, kv_bytes)
    return (blend(f / (gpu.peak_flops("bf16") * params.eta_compute), b / (gpu.hbm_bandwidth * params.eta_memory),
                  params.sharpness) + params.fixed_us * _US)


def mla_decode_per_context(shape: MlaShape, gpu: HardwareProfile, params: RooflineParams,
                           kv_bytes: float = 2.0, queries: int = 1) -> float:
    """Seconds per cached token of one decode layer (absorbed form).

    Per cached token: every head dots its (kv_lora + rope)-wide query with the
    latent and accumulates kv_lora values, 2·heads·(2·kv_lora + rope) FLOPs
    per query; the latent itself is read once for all heads and all
    ``queries``, latent_dim·kv_bytes. ``queries`` > 1 is speculative
    verification, which the serving stacks run on this kernel with several
    query tokens per sequence (FlashMLA's and TensorRT-LLM's generation MLA
    take q_len > 1), not on the prefill path that up-projects the cache.
    """
    flops = 2.0 * queries * shape.num_heads * (2 * shape.kv_lora_rank + shape.qk_rope_head_dim)
    nbytes = latent_kv_bytes_per_token(shape, kv_bytes)
    return float(blend(flops / (gpu.peak_flops("bf16") * params.eta_compute),
                       nbytes / (gpu.hbm_bandwidth * params.eta_memory), params.sharpness))


def mla_decode_per_seq(params: RooflineParams) -> float:
    """Seconds per sequence of a decode batch (query load, split-KV reduction)."""
    return params.per_seq_us * _US


def mla_decode_fixed(params: RooflineParams) -> float:
    """Seconds per decode-attention launch, whatever the batch."""
    return params.fixed_us * _US


def mla_decode_time(batch, total_context, shape: MlaShape, gpu: HardwareProfile, params: RooflineParams,
                    kv_bytes: float = 2.0):
    """One decode layer's MLA kernel: exactly rate·Σcontext + per_seq·batch + fixed (0 for an empty batch)."""
    rate = mla_decode_per_context(shape, gpu, params, kv_bytes)
    busy = np.asarray(batch) > 0 if isinstance(batch, np.ndarray) else batch > 0
    return (rate * total_context + mla_decode_per_seq(params) * batch + mla_decode_fixed(params)) * busy


def format_linear_time(m, n: int, k: int, gpu: HardwareProfile, p: RooflineParams, linear_dtype: str):
    """One linear layer ``y[m,n] = x[m,k]·W[n,k]ᵀ`` in a quantised format's kernel (its fit ``p``)."""
    d = moe.dtype_info(linear_dtype)
    return gemm_time(m, n, k, moe.peak_flops(linear_dtype, gpu), gpu.hbm_bandwidth, p, d.weight_bytes, d.act_bytes,
                     gpu.num_sms)


def _batched(m, n: int, k: int, batches: int, gpu: HardwareProfile, p: RooflineParams):
    """``batches`` bf16 GEMMs of one shape in one kernel (the absorbed BMMs)."""
    one = gemm_time(m, n, k, gpu.peak_flops("bf16"), gpu.hbm_bandwidth, p, _BF16, _BF16, gpu.num_sms) - p.fixed_us * _US
    return batches * one + p.fixed_us * _US


def mla_projection_time(tokens, shape: MlaShape, gpu: HardwareProfile, p: RooflineParams, linear_dtype: str):
    """Projections every token runs in both phases: down-projections (q and
    the kv latent fused, replicated across TP), q up-projection, output."""
    h = shape.num_heads
    if shape.q_lora_rank:
        t = (format_linear_time(tokens, shape.q_lora_rank + shape.latent_dim, shape.hidden_size, gpu, p, linear_dtype)
             + format_linear_time(tokens, h * shape.qk_head_dim, shape.q_lora_rank, gpu, p, linear_dtype))
    else:
        t = (format_linear_time(tokens, shape.latent_dim, shape.hidden_size, gpu, p, linear_dtype)
             + format_linear_time(tokens, h * shape.qk_head_dim, shape.hidden_size, gpu, p, linear_dtype))
    return (t + format_linear_time(tokens, shape.hidden_size, h * shape.v_head_dim, gpu, p, linear_dtype)
            + mla_token_time(tokens, shape, gpu, p))


def mla_token_time(tokens, shape: MlaShape, gpu: HardwareProfile, p: RooflineParams):
    """Per-token work whatever the heads per GPU: ``p.token_traffic`` bf16
    hidden rows read and written per token (0 = off). With the prefill
    kernel's parameters: norms, rotary embedding, the latent's cache write;
    with a linear format's projection parameters: quantising each
    projection's input, in both phases."""
    return p.token_traffic * tokens * 2.0 * _BF16 * shape.hidden_size / (gpu.hbm_bandwidth * p.eta_memory)


def mla_module_prefill_time(new_tokens, cached_tokens, shape: MlaShape, gpu: HardwareProfile,
                            attn: RooflineParams, proj: RooflineParams, kv_bytes: float = 2.0,
                            linear_dtype: str = "bf16", sequences=1):
    """The whole attention module for ``sequences`` chunks of ``new_tokens``
    over ``cached_tokens`` each: projections at m = all new tokens, the
    latent of every context token up-projected to keys and values, and the
    prefill kernel over the chunks (FLOPs and bytes summed, one blend)."""
    m = sequences * new_tokens
    span = sequences * (new_tokens + cached_tokens)
    h = shape.num_heads
    kv_up = format_linear_time(span, h * (shape.qk_nope_head_dim + shape.v_head_dim), shape.kv_lora_rank, gpu, proj,
                    linear_dtype)
    f, b = mla_prefill_flops_bytes(new_tokens, cached_tokens, shape, kv_bytes)
    kernel = (blend(sequences * f / (gpu.peak_flops("bf16") * attn.eta_compute),
                    sequences * b / (gpu.hbm_bandwidth * attn.eta_memory), attn.sharpness) + attn.fixed_us * _US)
    return (mla_projection_time(m, shape, gpu, proj, linear_dtype) + kv_up + kernel
            + mla_token_time(m, shape, gpu, attn))


def mla_module_decode_time(batch, total_context, shape: MlaShape, gpu: HardwareProfile, attn: RooflineParams,
                           proj: RooflineParams, kv_bytes: float = 2.0, linear_dtype: str = "bf16"):
    """The whole attention module of one decode step: projections at m = batch,
    the absorbed BMMs (q_nope → latent before, latent → v after, one per
    head), and the kernel; affine in Σcontext for a fixed batch."""
    h = shape.num_heads
    bmm = (_batched(batch, shape.kv_lora_rank, shape.qk_nope_head_dim, h, gpu, proj)
           + _batched(batch, shape.v_head_dim, shape.kv_lora_rank, h, gpu, proj))
    return (mla_projection_time(batch, shape, gpu, proj, linear_dtype) + bmm
            + mla_decode_time(batch, total_context, shape, gpu, attn, kv_bytes))


__all__ = ["MlaShape", "latent_kv_bytes_per_token", "mla_decode_fixed", "mla_decode_per_context",
           "mla_decode_per_seq", "mla_decode_time", "mla_module_decode_time", "mla_module_prefill_time",
           "mla_prefill_flops_bytes", "mla_prefill_time", "mla_token_time", "mla_projection_time"]
