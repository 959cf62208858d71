"""How one replica spreads a model over its GPUs: tp, dp and ep.

A replica runs ``dp`` attention data-parallel ranks of ``tp`` GPUs each, as
vLLM's data-parallel + expert-parallel deployment does: every rank holds
the attention, the dense MLPs, the shared experts, embeddings and LM head
split ``tp`` ways (bar the parts each GPU keeps whole: MLA's
down-projections and their norms, MoE routers, and K/V heads when there are fewer
than ``tp``) and attends only its own sequences; the MoE layers' routed
experts are spread over all ``tp × dp`` GPUs, ``ep`` ways by expert and
``moe_tp = tp·dp / ep`` ways by width. With ``dp = ep = 1`` this is plain
tensor parallelism.

The attention and MoE tensor-parallel groups all-reduce over NVLink, so
each must fit in the GPU's NVLink domain (``interconnect.max_tp``); the
replica itself may span several domains only through expert parallelism,
whose all-to-all then crosses the scale-out network.
"""
from __future__ import annotations

from dataclasses import dataclass

from .dtypes import BYTES, linear_dtype
from .errors import LlmsimError
from .profiles.hardware import HardwareProfile
from .profiles.model import ModelProfile


@dataclass(frozen=True)
class Parallelism:
    tp: int = 1
    dp: int = 1
    ep: int = 1

    @property
    def gpus(self) -> int:
        """GPUs of one replica: tp × dp."""
        return self.tp * self.dp

    @property
    def moe_tp(self) -> int:
        """Width split of each routed expert: tp·dp / ep."""
        return self.gpus // self.ep

    def check(self, model: ModelProfile, gpu: HardwareProfile) -> None:
        """One clear error for a combination the replica cannot run."""
        tp, dp, ep, domain = self.tp, self.dp, self.ep, gpu.interconnect.max_tp
        low = next((k for k, v in (("tp", tp), ("dp", dp), ("ep", ep)) if v < 1), None)
        if low is not None:     # named by the key that is below one, as the user set it
            raise LlmsimError(f"tp, dp and ep must be ≥ 1 (got tp={tp}, dp={dp}, ep={ep})", key_path=low)
        if model.num_attention_heads % tp:
            raise LlmsimError(f"tp={tp} must divide the {model.num_attention_heads} attention heads of {model.name}",
                              key_path="tp")
        if tp > domain:
            raise LlmsimError(f"tp={tp} exceeds the {domain} GPUs {gpu.name} can join in one tensor-parallel group",
                              key_path="tp")
        if ep > 1 and not model.is_moe:
            raise LlmsimError(f"ep={ep} needs a mixture-of-experts model; {model.name} is dense", key_path="ep")
        if self.gpus % ep:
            raise LlmsimError(f"ep={ep} must divide the replica's tp × dp = {tp} × {dp} = {self.gpus} GPUs",
                              key_path="ep")
        if model.is_moe and (ep > (model.num_experts or 0) or (model.num_experts or 0) % ep):
            raise LlmsimError(f"ep={ep} must divide the {model.num_experts} experts of {model.name}", key_path="ep")
        if self.moe_tp > domain:
            need = "set ep so that tp·dp/ep fits" if model.is_moe else "a dense model's replica must fit"
            raise LlmsimError(f"tp × dp = {self.gpus} GPUs exceed the {domain}-GPU NVLink domain of {gpu.name} "
                              f"with moe_tp = {self.moe_tp} ({need} in one NVLink domain)",
                              key_path="ep" if model.is_moe else "dp")


def kv_heads_per_gpu(model: ModelProfile, tp: int) -> int:
    """GQA KV heads one GPU of a tp group serves: its share, and at least
    one, so that with fewer KV heads than GPUs every head is replicated
    (vLLM's ``QKVParallelLinear``: one head and ``num_kv_head_replicas =
    tp / kv_heads`` when ``tp >= kv_heads``; SGLang's ``QKVParallelLinear``
    the same; TensorRT-LLM's ``duplicate_kv_weight`` in
    ``_torch/models/modeling_utils.py`` repeats each head's K/V weights
    tp / kv_heads times)."""
    return max(1, -(-model.kv_heads // tp))


def tp_whole_weight_bytes(model: ModelProfile, tp: int, weight_dtype: str) -> tuple[float, float]:
    """(bytes as :meth:`ModelProfile.weight_bytes` counts them, bytes one
    GPU holds) of the weights a tensor-parallel group does not split tp
    ways. The second is what memory must set aside; the first is what the
    even split would otherwise have given each GPU a tp-th of.

    * MLA down-projections (:attr:`ModelProfile.mla_down_params_per_layer`):
      replicated on every GPU — vLLM ``deepseek_v2.py``: ``q_a_proj`` and
      ``kv_a_proj_with_mqa`` are ``ReplicatedLinear``, fused in 0.19 as
      ``DeepSeekV2FusedQkvAProjLinear`` (a ``MergedColumnParallelLinear``
      with ``disable_tp=True``); SGLang ``deepseek_v2.py``
      ``DeepseekV2AttentionMLA.fused_qkv_a_proj_with_mqa``, a
      ``ReplicatedLinear``; TensorRT-LLM ``_torch/modules/attention.py``
      ``MLA.kv_a_proj_with_mqa`` (q_a and kv_a fused), a ``Linear`` without
      a tensor-parallel mode. They take the checkpoint's linear format, as
      :meth:`ModelProfile.weight_bytes` counts them (DeepSeek's fp8
      checkpoint quantises them like every other projection).
    * MLA's latent norms (``q_a_layernorm``, ``kv_a_layernorm``): an
      RMSNorm weight is a plain parameter on every GPU; 16-bit. (So are the
      layers' own norms, but a hidden-wide vector per layer is a few MB on
      the largest model; they stay in the split part, which leaves dense
      models' results as they were.)
    * GQA K and V projections: each GPU holds :func:`kv_heads_per_gpu`
      heads' worth, so with fewer KV heads than GPUs they are replicated
      (Qwen3-235B's 4 KV heads at tp 8: one head, twice its eighth).
    * MoE routers (:attr:`ModelProfile.router_params`): a whole hidden ×
      experts matrix on every GPU, kept unquantised — vLLM ``GateLinear``
      (a ``ReplicatedLinear`` without ``quant_config``, DeepSeek and
      gpt-oss), ``ReplicatedLinear(quant_config=None)`` in Mixtral and
      MiniMax-M2 (``params_dtype=torch.float32``); SGLang ``MoEGate`` (a
      plain parameter, DeepSeek) and ``ReplicatedLinear(quant_config=None)``
      in qwen3_moe, mixtral, minimax_m2 (fp32) and gpt_oss; TensorRT-LLM
      ``modeling_deepseekv3.py`` ``DeepseekV3Gate.weight`` in the model's
      dtype. So a router takes :attr:`ModelProfile.router_weight_bytes`
      per weight (bf16; fp32 for MiniMax-M2) whatever the experts' format.
      (vLLM's qwen3_moe hands the gate the checkpoint's ``quant_config``;
      llmsim assumes the Qwen3 fp8 checkpoints leave it bf16, as SGLang
      loads it.)
    """
    linear = BYTES[linear_dtype(weight_dtype)]
    L = model.num_hidden_layers
    norms = L * ((model.kv_lora_rank or 0) + (model.q_lora_rank or 0)) * 2.0 if model.is_mla else 0.0
    mla = L * model.mla_down_params_per_layer * linear
    kv = L * model.kv_projection_params_per_layer * linear
    kv_held = kv * kv_heads_per_gpu(model, tp) / model.kv_heads
    routers = model.router_params
    counted = norms + mla + kv + routers * linear
    held = norms + mla + kv_held + routers * model.router_weight_bytes
    return counted, held


def weight_bytes_per_gpu(model: ModelProfile, par: Parallelism, weight_dtype: str,
                         expert_storage: float = 1.0) -> tuple[float, float]:
    """(attention-rank part, expert part) of one GPU's weights.

    Of everything but the routed experts, each GPU of a rank holds a tp-th
    — except the weights every GPU keeps whole or by the head
    (:func:`tp_whole_weight_bytes`) — and every one of the dp ranks holds
    the same; the routed experts are split over all tp·dp GPUs (ep by
    expert, moe_tp by width), each shard ``expert_storage`` times its
    checkpoint size where the stack stores it padded to its kernel's layout
    (:attr:`simulator.costmodel.step.CostModel.expert_storage`), every width
    shard with its expert's whole down-projection bias.
    """
    rest = model.weight_bytes(weight_dtype) - model.expert_weight_bytes(weight_dtype)
    experts = model.expert_weight_bytes(weight_dtype, par.moe_tp)
    counted, held = tp_whole_weight_bytes(model, par.tp, weight_dtype)
    return rest / par.tp + (held - counted / par.tp), experts * expert_storage / par.gpus


def replica_weight_bytes(model: ModelProfile, par: Parallelism, weight_dtype: str,
                         expert_storage: float = 1.0) -> float:
    """Weights held by the whole replica: every GPU's, so the parts a rank
    keeps whole are counted once per GPU and the rest once per dp rank."""
    rest, experts = weight_bytes_per_gpu(model, par, weight_dtype, expert_storage)
    return (rest + experts) * par.gpus


def unrounded_kv_share(model: ModelProfile, tp: int) -> float:
    """What a GPU's KV bytes per token come to when its tp group's KV heads are split without
    rounding up to whole heads (head_dim x kv_heads // tp elements of K and of V a layer), against
    the :func:`kv_heads_per_gpu` heads it holds: below one where heads are replicated (Qwen3-235B's
    4 KV heads at tp 8: a half). TensorRT-LLM's KV-size estimate divides so
    (_torch/pyexecutor/resource_manager.py KVCacheManager.get_cache_size_per_token); MLA's latent
    is not split."""
    if model.is_mla:
        return 1.0
    return model.dim_head * model.kv_heads // tp / (kv_heads_per_gpu(model, tp) * model.dim_head)


def kv_copies(model: ModelProfile, tp: int) -> float:
    """How many times one attention rank stores each token's KV, against
    one copy of all its heads. MLA's latent has no heads to split: every
    GPU of the rank keeps the whole of it (tp copies; vLLM, SGLang and
    TensorRT-LLM alike). GQA heads are split over the tp GPUs, and a GPU
    holds at least one (:func:`kv_heads_per_gpu`), so Qwen3-235B's 4 KV
    heads at tp 8 take twice their share."""
    if model.is_mla:
        return float(tp)
    return kv_heads_per_gpu(model, tp) * tp / model.kv_heads


def replica_kv_bytes_per_token(model: ModelProfile, par: Parallelism, kv_dtype: str) -> float:
    """KV bytes a token takes on its replica: a sequence lives on one dp
    rank, whose tp GPUs hold :func:`kv_copies` copies of its KV."""
    return model.kv_bytes_per_token(kv_dtype) * kv_copies(model, par.tp)
