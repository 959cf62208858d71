"""Pipeline parallelism: a replica's layers split over ``pp`` stages of ``tp`` GPUs.

Each stage holds a contiguous run of decoder layers, their weights and
their KV, split ``tp`` ways inside the stage; the first stage also holds
the embedding, the last the final norm and the LM head (and the embedding
again when the two are tied). Layers are partitioned as vLLM's
``get_pp_indices`` does (vllm/distributed/utils.py; SGLang's ``make_layers``
calls a copy of it): ``L // pp`` each, the remainder added one layer at a
time to the stages before the last, from the second-to-last backwards (the
last stage already runs the LM head). Neither stack needs ``pp`` to divide
the layer count; a stage needs at least one layer.

A replica spans ``tp × pp`` GPUs, laid out stage after stage: a scale-up
domain (``interconnect.max_tp`` GPUs, an HGX node) holds ``max_tp // tp``
whole stages, so activations cross the scale-out network exactly at the
stage boundaries that are also domain boundaries (TP 8 × PP 2 on two 8-GPU
nodes: the one boundary crosses; TP 4 × PP 2: none does).

The KV pool: each stage sizes its KV from its own free memory, and vLLM
gives every worker the smallest block count of all (``get_kv_cache_configs``
makes the workers' ``num_blocks`` equal); a token's KV is split over the
stages, not copied, so the replica holds that many blocks of whole-model KV.
Splitting the weights over more stages frees memory on every GPU, so the
replica's KV tokens grow with ``pp`` (the property tests/test_pipeline.py
holds).

What llmsim does not model with ``pp > 1`` it refuses (:func:`refusal`):
data or expert parallelism inside the stages, MoE, MLA and sliding-window
layers (their per-stage weights and KV depend on which layers land where),
speculative decoding, disaggregated prefill/decode, KV offload tiers,
TensorRT-LLM (its PyExecutor's PP loop is not what llmsim read), and the
non-chunked or static schedulers of older stacks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .errors import LlmsimError
from .kv_memory import GpuShare, KvMemory, draft_in_reserve, kv_budget, rank_token_cap
from .memory import (DOES_NOT_FIT, MemoryPlan, activation_bytes_per_token, deployment_graph_blockers,
                     null_blocks, sglang_prefill_graph_kind)
from .parallelism import Parallelism, replica_kv_bytes_per_token, tp_whole_weight_bytes
from .profiles.hardware import HardwareProfile
from .profiles.model import ModelProfile

#: Tensors a stage hands the next per token: the hidden state and the
#: residual stream (vLLM's models build their IntermediateTensors from
#: ``make_empty_intermediate_tensors_factory(["hidden_states", "residual"])``;
#: SGLang's PPProxyTensors carry the same two), in the activation dtype.
STAGE_TENSORS = 2
ACTIVATION_BYTES = 2.0


def stage_layers(layers: int, pp: int) -> list[int]:
    """Decoder layers of each stage, as vLLM's ``get_pp_indices`` partitions them."""
    parts = [layers // pp] * pp
    for i in range(2, layers % pp + 2):
        parts[-i] += 1
    return parts


@dataclass(frozen=True)
class Pipeline:
    """The stages of one replica and where their boundaries cross the network."""

    pp: int
    tp: int
    layers: tuple[int, ...]          # decoder layers per stage
    domain: int                      # GPUs of one scale-up domain

    @classmethod
    def of(cls, model: ModelProfile, gpu: HardwareProfile, tp: int, pp: int) -> "Pipeline":
        return cls(pp, tp, tuple(stage_layers(model.num_hidden_layers, pp)), gpu.interconnect.max_tp)

    def crossings(self) -> int:
        """Stage boundaries that cross the scale-out network (the rest stay in a domain)."""
        per_domain = max(1, self.domain // self.tp)
        return sum(1 for k in range(1, self.pp) if k % per_domain == 0)

    @property
    def imbalance(self) -> float:
        """The busiest stage's share of the layers against an even split
        (1.0 when ``pp`` divides the layer count)."""
        return max(self.layers) * self.pp / sum(self.layers)


def plan_pipeline_memory(model: ModelProfile, gpu: HardwareProfile, tp: int, pp: int, weight_dtype: str = "bf16",
                         kv_dtype: str = "bf16", gpu_memory_utilization: float = 0.9,
                         max_num_batched_tokens: int = 8192, max_num_seqs: int = 256, block_size: int = 16,
                         kv_memory: Optional[KvMemory] = None, expert_storage: float = 1.0) -> MemoryPlan:
    """One replica's memory over its ``pp`` stages: each stage's GPUs hold
    their layers' weights (plus embedding or LM head) and size their KV by
    the stack's rule; the replica gets the smallest stage's block count.
    The profiling run's activations are per token and layer-independent,
    so every stage reserves the same; only the last samples (logits).
    ``expert_storage`` as in :func:`simulator.memory.plan_memory`."""
    pipe = Pipeline.of(model, gpu, tp, pp)
    L = model.num_hidden_layers
    embed = model.embedding_params * 2.0
    head = model.vocab_size * model.hidden_size * 2.0      # the LM head (a tied one is the embedding, copied)
    # a stage's experts are split tp ways by width, each shard with its whole down-projection bias
    body = (model.weight_bytes(weight_dtype) - embed - model.lm_head_params * 2.0
            - model.expert_weight_bytes(weight_dtype) + model.expert_weight_bytes(weight_dtype, tp) * expert_storage)
    counted, held = tp_whole_weight_bytes(model, tp, weight_dtype)
    whole = held - counted / tp     # per GPU beyond the tp-th: K/V heads fewer than tp
    per_token = activation_bytes_per_token(model, tp)
    kv_token = replica_kv_bytes_per_token(model, Parallelism(tp), kv_dtype)    # whole model, one tp group
    blocks, shares = None, []
    blockers = deployment_graph_blockers(model, pp=pp)
    for s, n in enumerate(pipe.layers):
        last = s == pp - 1
        weights = (body * n / L + (embed if s == 0 else 0.0) + (head if last else 0.0)) / tp + whole * n / L
        share = GpuShare(gpu.hbm_bytes, weights, max_num_batched_tokens * per_token, tp, 1, max_num_batched_tokens,
                         max_num_seqs, vocab=model.vocab_size if last else 0, stages=pp,
                         prefill_graphs=sglang_prefill_graph_kind(model), prefill_graph_blockers=blockers,
                         cuda=gpu.cuda_total_bytes)
        budget = kv_budget(share, kv_memory, gpu_memory_utilization)
        stage_token = kv_token * n / L                  # this stage's layers of one token, over its tp GPUs
        cap = budget.kv_bytes * tp
        cap_tokens = rank_token_cap(kv_memory)
        if cap_tokens is not None:
            cap = min(cap, cap_tokens * stage_token)
        nb = int(cap // (stage_token * block_size)) if cap > 0 else 0
        shares.append((share, budget))
        blocks = nb if blocks is None else min(blocks, nb)
    if not blocks:
        worst = min(range(pp), key=lambda s: shares[s][1].kv_bytes)
        g, b = shares[worst]
        raise LlmsimError(
            f"{model.name}{DOES_NOT_FIT}tp {tp} × pp {pp} {gpu.name}: stage {worst} holds {pipe.layers[worst]} "
            f"layers, {g.weights / 1e9:.1f} GB of weights ({weight_dtype}) per GPU and has no room for a KV block "
            f"under {b.knob} {b.fraction} of the {g.cuda_total / 1e9:.1f} GB CUDA reports; use more stages, a smaller "
            f"weight dtype or a larger GPU")
    gpus = tp * pp
    first = shares[0][1]
    weights = sum(s.weights for s, _ in shares) * tp
    return MemoryPlan(gpu.hbm_bytes * gpus, sum(b.usable for _, b in shares) * tp, weights,
                      sum(b.activation for _, b in shares) * tp, sum(s.runtime for s, _ in shares) * tp,
                      blocks * block_size * kv_token, kv_token, block_size, blocks, 0.0,
                      (kv_memory or KvMemory()).rule, first.fraction, first.knob, 1, draft_in_reserve(kv_memory),
                      null_blocks=null_blocks(kv_memory))

