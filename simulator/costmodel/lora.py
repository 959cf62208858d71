"""LoRA adapters' share of an iteration, of GPU memory and of a load, from the model's shapes.

What vLLM runs (``--enable-lora``; vllm/lora/layers/base_linear.py,
vllm/lora/ops/triton_ops): every linear layer of the dense transformer is
wrapped, so an adapter may target any of q, k, v, o, gate, up and down.
For each wrapped layer each GPU holds stacked buffers of ``max_loras``
slots at ``max_lora_rank`` (``lora_a``: rank × input, ``lora_b``: output ×
rank, in the model's 16-bit dtype), allocated when the model loads, so they
come out of the KV budget. The packed layers keep one A and one B per
projection they pack (qkv_proj: 3, gate_up_proj: 2). Tensor parallelism
splits them as the base layer: a column-parallel layer (qkv, gate_up)
keeps A whole and splits B's output; a row-parallel one (o, down) splits
A's input and keeps B whole (its partial sums join the base layer's
all-reduce, so LoRA adds no communication).

Per iteration the punica kernels (SGMV: tokens grouped by adapter) add
two GEMMs per wrapped layer over the iteration's tokens: *shrink*
``x[m, in] · A[in, slices·r]`` and *expand* ``y[m, r] · B[r, out]``,
accumulated into the base layer's output (read once more). Both run at
``max_lora_rank``, since an adapter of lower rank sits zero-padded in its
slot; each adapter in the batch has its A and B read once. They are priced
with the GPU's calibrated GEMM efficiencies, knee and per-kernel floor,
but without the cuBLAS fit's narrow-output ramp and wave quantisation:
the LoRA kernels split the long input dimension across SMs (shrink) and
tile the wide output (expand), which is what they are built for. Not
priced: the fp32 intermediate ``y`` (m × r, small beside the rest) and the
CPU's per-step LoRA metadata.

Sizes follow the brief's rule: for each targeted projection, rank ×
(in + out) × 2 bytes × layers; an adapter is assumed to target all seven
projections (PEFT's ``all-linear``), the most vLLM's slots can hold.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..profiles.model import ModelProfile
from .roofline import blend

if TYPE_CHECKING:
    from .step import CostModel

__all__ = ["RANKS", "LORA_BYTES", "adapter_bytes", "adapter_shard_bytes", "LoraCost"]

#: The ranks vLLM accepts for max_lora_rank (vllm/config/lora.py, MaxLoRARanks).
RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
#: Bytes per LoRA weight: vLLM's lora_dtype "auto" is the model's 16-bit dtype.
LORA_BYTES = 2.0
_US = 1e-6


def _layers(model: ModelProfile, tp: int) -> list[tuple[int, int, int, int]]:
    """Per wrapped linear layer on one GPU of ``tp``: (A's input width, slices,
    B's output width, the full output width): qkv_proj, o_proj, gate_up_proj,
    down_proj."""
    h, q, kv, ffn = model.hidden_size, model.q_dim, model.kv_dim, model.intermediate_size
    gate = 2 if model.is_gated else 1
    return [
        # column parallel: A whole, B's output split (a KV head per GPU at least, as the stacks replicate them)
        (h, 3, q // tp + 2 * max(1, model.kv_heads // tp) * model.dim_head, q + 2 * kv),
        (q // tp, 1, h, h),                      # row parallel: A's input split, B whole
        (h, gate, gate * ffn // tp, gate * ffn),
        (ffn // tp, 1, h, h),
    ]


def adapter_shard_bytes(model: ModelProfile, rank: int, tp: int = 1) -> float:
    """Bytes of one adapter of ``rank`` one GPU of ``tp`` holds (and copies into its slot)."""
    per_layer = sum(k * s * rank + rank * n for k, s, n, _ in _layers(model, tp))
    return per_layer * model.num_hidden_layers * LORA_BYTES


def adapter_bytes(model: ModelProfile, rank: int) -> float:
    """Bytes of one whole adapter of ``rank`` (its file; each worker reads all of it)."""
    return adapter_shard_bytes(model, rank, 1)


class LoraCost:
    """Seconds the LoRA kernels add to an iteration of ``tokens`` tokens whose
    sequences use ``adapters`` distinct adapters (memoised per pair)."""

    def __init__(self, cm: "CostModel", max_rank: int):
        gpu, p = cm.gpu, cm.cal.gemm
        self.rank = max_rank
        self.layers = cm.layers
        # The LoRA GEMMs run in 16-bit whatever the base layer's format.
        self.peak = gpu.peak_flops("bf16") * p.eta_compute
        self.bw = cm.hbm_bw * p.eta_memory
        self.sharpness = p.sharpness
        self.fixed = 0.0 if cm.roofline else p.fixed_us * _US
        if cm.roofline:
            self.peak, self.bw, self.sharpness = gpu.peak_flops("bf16"), cm.hbm_bw, float("inf")
        r = max_rank
        # (n, k, out) of each GEMM on one GPU: shrink to slices·r, expand to the layer's output.
        self.gemms: list[tuple[int, int, int]] = []
        for k_in, slices, n_out, _ in _layers(cm.model, cm.tp):
            self.gemms.append((slices * r, k_in, 0))
            self.gemms.append((n_out, r, n_out))
        self._memo: dict[tuple[int, int], float] = {}

    def _gemm(self, m: int, n: int, k: int, adapters: int, accumulate: int) -> float:
        flops = 2.0 * m * n * k
        nbytes = LORA_BYTES * (m * k + adapters * k * n + m * n + m * accumulate)
        return float(blend(flops / self.peak, nbytes / self.bw, self.sharpness)) + self.fixed

    def time(self, tokens: int, adapters: int) -> float:
        if tokens <= 0 or adapters <= 0:
            return 0.0
        key = (tokens, adapters)
        t = self._memo.get(key)
        if t is None:
            t = self.layers * sum(self._gemm(tokens, n, k, adapters, acc) for n, k, acc in self.gemms)
            self._memo[key] = t
        return t
