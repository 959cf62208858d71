"""FLOPs, bytes and time of each op family for one replica shard.

Every function here is per GPU of a tensor-parallel group and works on
floats or numpy arrays, so the calibration fit can evaluate thousands of
measured shapes in one call and the engine can evaluate one step cheaply.
"""
from __future__ import annotations

import math

import numpy as np

from ..profiles.hardware import AllReduceParams, RooflineParams
from .roofline import blend

_US = 1e-6


def gemm_flops_bytes(m, n, k, weight_bytes: float = 2.0, act_bytes: float = 2.0, out_bytes: float = 2.0):
    """y[m,n] = x[m,k] @ W[k,n]: 2mnk FLOPs; reads x and W once, writes y."""
    flops = 2.0 * m * n * k
    nbytes = m * k * act_bytes + k * n * weight_bytes + m * n * out_bytes
    return flops, nbytes


# Output tiles (Tm, Tn) the wave form lets a GEMM library choose from: the
# CTA shapes CUTLASS's default bf16 tensor-op configurations use on Ampere
# and Hopper. Taking the cheapest per shape stands for the library's
# heuristic without following any one library's choices. (64×64 tiles made
# the held-out A100 error worse: libraries do not run them at full speed.)
GEMM_TILES = ((64, 128), (128, 64), (128, 128), (128, 256), (256, 128), (64, 256), (256, 64))
# Split-K never makes a CTA's slice of k shorter than this many elements.
SPLIT_K_MIN = 256.0


def gemm_wave_time(m, n, k, peak_flops: float, num_sms: int, p: RooflineParams):
    """Compute time of ``y[m,n] = x[m,k]·W[k,n]`` run as waves of output tiles.

    A Tm×Tn tile takes one SM for 2·Tm·Tn·(k + k_overhead) FLOPs at
    ``peak/num_sms·η_c``, slowed by ``1 + tile_edge·(1/Tm + 1/Tn)`` (smaller
    tiles reuse each loaded operand less). ``ceil(m/Tm)·ceil(n/Tn)`` tiles
    run in ``ceil(tiles/num_sms)`` waves; when one wave leaves SMs idle the
    k loop is split over them (split-K, slices ≥ SPLIT_K_MIN). The time is
    the cheapest candidate tile's, nondecreasing in m, n and k, and never
    below 2mnk/peak.
    """
    sms = float(num_sms)
    per_sm = peak_flops * p.eta_compute / sms
    if not isinstance(m, np.ndarray) and not isinstance(n, np.ndarray) and not isinstance(k, np.ndarray):
        return _gemm_wave_time_float(float(m), float(n), float(k), sms, per_sm, p.k_overhead, p.tile_edge)
    best = None
    for tm, tn in GEMM_TILES:
        tiles = np.ceil(m / tm) * np.ceil(n / tn)
        waves = np.ceil(tiles / sms)
        # One wave: k split over floor(sms/tiles) CTAs per tile, never below
        # SPLIT_K_MIN a slice (a short k is not split). From two waves on
        # floor(sms/tiles) = 0, so the slice is all of k.
        k_slice = np.maximum(k / np.maximum(np.floor(sms / tiles), 1.0), np.minimum(k, SPLIT_K_MIN))
        t = waves * (k_slice + p.k_overhead) * (2.0 * tm * tn * (1.0 + p.tile_edge * (1.0 / tm + 1.0 / tn))) / per_sm
        best = t if best is None else np.minimum(best, t)
    return best


def _gemm_wave_time_float(m: float, n: float, k: float, sms: float, per_sm: float, k_overhead: float,
                          tile_edge: float) -> float:
    """:func:`gemm_wave_time` on plain numbers (the engine's case), operation
    for operation, without numpy's per-scalar overhead."""
    best = math.inf
    for tm, tn in GEMM_TILES:
        tiles = math.ceil(m / tm) * math.ceil(n / tn)
        waves = math.ceil(tiles / sms)
        k_slice = max(k / max(math.floor(sms / tiles), 1.0), min(k, SPLIT_K_MIN))
        t = waves * (k_slice + k_overhead) * (2.0 * tm * tn * (1.0 + tile_edge * (1.0 / tm + 1.0 / tn))) / per_sm
        if t < best:
            best = t
    return best


def gemm_roofs(m, n, k, peak_flops: float, hbm_bw: float, p: RooflineParams,
               weight_bytes: float = 2.0, act_bytes: float = 2.0, num_sms: int | None = None,
               ramp_rows: float = 0.0):
    """(compute, memory) seconds of a GEMM before the blend: the compute roof
    (ramps on η_c, or waves of tiles with ``p.waves``) and the memory roof
    (weights, activations and output once, η_m ramped by the output width:
    too few columns cannot occupy every SM). ``ramp_rows``: the ramp counts
    output tiles of that many rows instead, ``n · max(m / ramp_rows, 1)``
    columns' worth — a GEMM narrower than any the dense fit saw (a MoE
    router, n = experts) fills the SMs with row tiles once its m is large
    (measured bf16 GEMMs with n 128–512 on H100, H200, B200: median |error|
    15 % this way, 25 % with the width alone, 2–5× too slow at m ≥ 4096)."""
    flops, nbytes = gemm_flops_bytes(m, n, k, weight_bytes, act_bytes)
    if p.waves:
        if not num_sms:
            raise ValueError("the wave form of gemm_time needs num_sms")
        t_compute = gemm_wave_time(m, n, k, peak_flops, num_sms, p)
    else:
        eta_c = p.eta_compute
        if p.m_half > 0:
            eta_c = eta_c * m / (m + p.m_half)
        if p.n_half > 0:
            eta_c = eta_c * n / (n + p.n_half)
        if p.k_half > 0:
            eta_c = eta_c * k / (k + p.k_half)
        t_compute = flops / (peak_flops * eta_c)
    eta_m = p.eta_memory
    if p.n_half_memory > 0:
        width = n * np.maximum(m / ramp_rows, 1.0) if ramp_rows > 0 else n
        eta_m = eta_m * width / (width + p.n_half_memory)
    return t_compute, nbytes / (hbm_bw * eta_m)


def gemm_time(m, n, k, peak_flops: float, hbm_bw: float, p: RooflineParams,
              weight_bytes: float = 2.0, act_bytes: float = 2.0, num_sms: int | None = None,
              ramp_rows: float = 0.0):
    """Blend of the two roofs of :func:`gemm_roofs`, plus the fixed cost."""
    t = blend(*gemm_roofs(m, n, k, peak_flops, hbm_bw, p, weight_bytes, act_bytes, num_sms, ramp_rows),
              p.sharpness) \
        + p.fixed_us * _US
    return t if isinstance(t, np.ndarray) else float(t)


def prefill_attention_flops_bytes(new_tokens, cached_tokens, heads, kv_heads, head_dim, kv_bytes: float = 2.0):
    """Causal attention of ``new_tokens`` queries over ``cached + new`` keys.

    QKᵀ and AV are 2 FLOPs per multiply-add each: 4·heads·d per query-key
    pair; the causal triangle over the new tokens has P(P+1)/2 pairs.
    Bytes: Q and O in bf16, the whole K/V span read once, new K/V written.
    """
    pairs = new_tokens * cached_tokens + new_tokens * (new_tokens + 1) / 2.0
    flops = 4.0 * heads * head_dim * pairs
    nbytes = (2.0 * new_tokens * heads * head_dim * 2.0
              + (cached_tokens + new_tokens) * 2.0 * kv_heads * head_dim * kv_bytes
              + new_tokens * 2.0 * kv_heads * head_dim * kv_bytes)
    return flops, nbytes


def prefill_attention_time(new_tokens, cached_tokens, heads, kv_heads, head_dim, peak_flops, hbm_bw,
                           p: RooflineParams, kv_bytes: float = 2.0):
    flops, nbytes = prefill_attention_flops_bytes(new_tokens, cached_tokens, heads, kv_heads, head_dim, kv_bytes)
    return blend(flops / (peak_flops * p.eta_compute), nbytes / (hbm_bw * p.eta_memory), p.sharpness) + p.fixed_us * _US


def decode_attention_per_context(heads, kv_heads, head_dim, peak_flops, hbm_bw, p: RooflineParams,
                                 kv_bytes: float = 2.0) -> float:
    """Seconds per cached context token of one decode-attention layer.

    Both roofs are proportional to the total context of the batch, and the
    blend is homogeneous, so decode attention is exactly
    ``rate · Σcontext + per_seq · batch + fixed`` — the affine form the fast
    engine integrates in closed form.
    """
    flops = 4.0 * heads * head_dim
    nbytes = 2.0 * kv_heads * head_dim * kv_bytes
    return float(blend(flops / (peak_flops * p.eta_compute), nbytes / (hbm_bw * p.eta_memory), p.sharpness))


def decode_attention_time(batch, total_context, heads, kv_heads, head_dim, peak_flops, hbm_bw,
                          p: RooflineParams, kv_bytes: float = 2.0):
    rate = decode_attention_per_context(heads, kv_heads, head_dim, peak_flops, hbm_bw, p, kv_bytes)
    busy = np.asarray(batch) > 0 if isinstance(batch, np.ndarray) else batch > 0
    return (rate * total_context + p.per_seq_us * _US * batch + p.fixed_us * _US) * busy


# What a serving stack runs for a tensor-parallel all-reduce, as parameter
# regimes of one fitted AllReduceParams. "custom": vLLM's (and SGLang's,
# which ports it) CUDA-graph custom all-reduce below custom_max_bytes, NCCL
# above; TensorRT-LLM's one-/two-shot kernels take the same regime. "nccl":
# NCCL for every size (no NVLink peer access, e.g. PCIe hosts, or the custom
# kernel disabled).
ALLREDUCE_REGIMES = ("custom", "nccl")


def allreduce_regime(p: AllReduceParams, regime: str) -> AllReduceParams:
    """``p`` as the named regime runs it (see ALLREDUCE_REGIMES)."""
    if regime == "custom":
        return p
    if regime == "nccl":
        return p.model_copy(update={"custom_max_bytes": 0.0})
    raise ValueError(f"unknown all-reduce regime {regime!r}; expected one of {ALLREDUCE_REGIMES}")


def allreduce_time(message_bytes, num_gpus: int, link_bw: float, p: AllReduceParams):
    """Ring all-reduce: each GPU sends and receives 2(n−1)/n of the message.

    With ``p.custom_max_bytes`` set, messages below it take vLLM's custom
    kernel instead: one-shot (each GPU reads the n−1 peer buffers) up to
    ``oneshot_max_bytes``, two-shot (ring traffic) above, never less traffic
    than the one-shot limit. From ``custom_max_bytes`` on NCCL runs, never
    faster than the custom kernel at its limit — so the time is
    nondecreasing in the message size, as the engine assumes.
    """
    if num_gpus <= 1:
        return 0.0 * message_bytes
    ring = 2.0 * (num_gpus - 1) / num_gpus
    eta = p.eta_by_gpus.get(num_gpus, p.eta_bandwidth)
    t_nccl = p.latency_us * _US + ring * message_bytes / (link_bw * eta)
    if p.ll_eta_bandwidth > 0:   # NCCL's tuner takes the faster protocol: LL for small messages
        t_ll = ((p.ll_latency_us + p.ll_latency_per_peer_us * (num_gpus - 1)) * _US
                + ring * message_bytes / (link_bw * p.ll_eta_bandwidth))
        t_nccl = np.minimum(t_nccl, t_ll) if isinstance(message_bytes, np.ndarray) else min(t_nccl, t_ll)
    if p.custom_max_bytes <= 0:
        return t_nccl

    if not isinstance(message_bytes, np.ndarray):   # the engine's case: the same arithmetic on floats
        def custom_f(msg: float) -> float:
            one_shot = (num_gpus - 1) * min(msg, p.oneshot_max_bytes)
            return p.custom_latency_us * _US + max(one_shot, ring * msg) / (link_bw * p.custom_eta_bandwidth)
        if message_bytes < p.custom_max_bytes:
            return custom_f(message_bytes)
        return max(t_nccl, custom_f(p.custom_max_bytes))

    def custom(msg):
        one_shot = (num_gpus - 1) * np.minimum(msg, p.oneshot_max_bytes)
        return p.custom_latency_us * _US + np.maximum(one_shot, ring * msg) / (link_bw * p.custom_eta_bandwidth)

    small = message_bytes < p.custom_max_bytes
    t = np.where(small, custom(np.minimum(message_bytes, p.custom_max_bytes)),
                 np.maximum(t_nccl, custom(p.custom_max_bytes)))
    return t
