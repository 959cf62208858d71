"""How one replica's GPU memory divides: weights, reserve, KV cache.

vLLM sizes its KV cache as ``total · gpu_memory_utilization − weights −
peak activations − non-torch memory``; llmsim follows the same recipe so a
scenario's ``gpu_memory_utilization`` means what it means in vLLM. The
activation peak and the non-torch allowance are estimates (stated below),
not measurements.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import LlmsimError
from .parallelism import Parallelism, replica_kv_bytes_per_token, replica_weight_bytes
from .profiles.hardware import GIB, HardwareProfile
from .profiles.model import ModelProfile

# CUDA context, NCCL buffers and CUDA-graph pools per GPU (vLLM's
# "non-torch memory" plus graph capture), an estimate.
NON_TORCH_BYTES_PER_GPU = 2.0 * GIB


@dataclass(frozen=True)
class MemoryPlan:
    total_bytes: float
    usable_bytes: float
    weights_bytes: float
    activation_bytes: float
    non_torch_bytes: float
    kv_capacity_bytes: float
    kv_bytes_per_token: float
    block_size: int
    num_blocks: int
    # Sliding-window layers' KV, set aside for max_num_seqs full windows.
    kv_window_bytes: float = 0.0

    @property
    def reserve_bytes(self) -> float:
        """Everything that is neither weights nor KV: the unused (1 − util)
        share, activations and non-torch memory."""
        return self.total_bytes - self.weights_bytes - self.kv_capacity_bytes

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def max_concurrent(self, tokens_per_request: int) -> int:
        blocks = math.ceil(tokens_per_request / self.block_size)
        return self.num_blocks // blocks if blocks else 0


def plan_memory(model: ModelProfile, gpu: HardwareProfile, tp: int = 1, weight_dtype: str = "bf16",
                kv_dtype: str = "bf16", gpu_memory_utilization: float = 0.9,
                max_num_batched_tokens: int = 8192, max_num_seqs: int = 256, block_size: int = 16,
                dp: int = 1, ep: int = 1) -> MemoryPlan:
    """Divide one replica's ``tp × dp`` GPUs' memory; raise a clear error when
    the model cannot fit.

    Each of the ``dp`` attention ranks holds the non-expert weights split
    ``tp`` ways and its own sequences' KV; the routed experts are split over
    all GPUs (:mod:`.parallelism`). The replica's KV capacity is the sum of
    its ranks'. Sliding-window layers keep at most a window per sequence:
    ``max_num_seqs`` windows are set aside, the rest is counted per token.
    """
    par = Parallelism(tp, dp, ep)
    gpus = par.gpus
    total = gpu.hbm_bytes * gpus
    usable = total * gpu_memory_utilization
    weights = replica_weight_bytes(model, par, weight_dtype)
    h, ffn = model.hidden_size, _mlp_width(model)
    per_token = (2 * ffn / tp + 4 * h + (model.q_dim + 2 * model.kv_dim) / tp) * 2.0
    logits = max_num_seqs * model.vocab_size / tp * 4.0
    activation = (max_num_batched_tokens * per_token + logits) * tp * dp
    non_torch = NON_TORCH_BYTES_PER_GPU * gpus
    window = max_num_seqs * model.kv_window_bytes(kv_dtype) * (tp if model.is_mla else 1)
    kv_cap = usable - weights - activation - non_torch - window
    kv_per_token = replica_kv_bytes_per_token(model, par, kv_dtype)
    if kv_cap <= kv_per_token * block_size:
        shape = f"{tp}×" if dp == 1 else f"{gpus} (tp {tp} × dp {dp})"
        raise LlmsimError(
            f"{model.name} does not fit on {shape} {gpu.name}: weights {weights / 1e9:.1f} GB "
            f"({weight_dtype}) + activations and runtime {(activation + non_torch + window) / 1e9:.1f} GB vs "
            f"usable {usable / 1e9:.1f} GB ({gpus} × {gpu.hbm_bytes / 1e9:.1f} GB × gpu_memory_utilization "
            f"{gpu_memory_utilization}); use more GPUs (tp, dp with ep), a smaller weight dtype or a larger GPU")
    num_blocks = int(kv_cap // (kv_per_token * block_size))
    return MemoryPlan(total, usable, weights, activation, non_torch, kv_cap, kv_per_token, block_size, num_blocks,
                      window)


def _mlp_width(model: ModelProfile) -> int:
    """Widest MLP activation per token: a dense layer's FFN, or an MoE
    layer's top-k experts plus its shared expert."""
    if not model.is_moe:
        return model.intermediate_size
    moe = model.topk * model.expert_ffn + model.shared_ffn
    return max(moe, model.dense_ffn) if model.num_dense_layers else moe
