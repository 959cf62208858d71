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
                max_num_batched_tokens: int = 8192, max_num_seqs: int = 256, block_size: int = 16) -> MemoryPlan:
    """Divide ``tp`` GPUs' memory; raise a clear error when the model cannot fit."""
    total = gpu.hbm_bytes * tp
    usable = total * gpu_memory_utilization
    weights = model.weight_bytes(weight_dtype)
    h, ffn = model.hidden_size, model.intermediate_size
    per_token = (2 * ffn / tp + 4 * h + (model.q_dim + 2 * model.kv_dim) / tp) * 2.0
    logits = max_num_seqs * model.vocab_size / tp * 4.0
    activation = (max_num_batched_tokens * per_token + logits) * tp
    non_torch = NON_TORCH_BYTES_PER_GPU * tp
    kv_cap = usable - weights - activation - non_torch
    kv_per_token = model.kv_bytes_per_token(kv_dtype)
    if kv_cap <= kv_per_token * block_size:
        raise LlmsimError(
            f"{model.name} does not fit on {tp}× {gpu.name}: weights {weights / 1e9:.1f} GB "
            f"({weight_dtype}) + activations and runtime {(activation + non_torch) / 1e9:.1f} GB vs usable "
            f"{usable / 1e9:.1f} GB ({tp} × {gpu.hbm_bytes / 1e9:.1f} GB × gpu_memory_utilization "
            f"{gpu_memory_utilization}); use more GPUs (tp), a smaller weight dtype or a larger GPU")
    num_blocks = int(kv_cap // (kv_per_token * block_size))
    return MemoryPlan(total, usable, weights, activation, non_torch, kv_cap, kv_per_token, block_size, num_blocks)
