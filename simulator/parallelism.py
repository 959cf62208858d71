"""How one replica spreads a model over its GPUs: tp, dp and ep.

A replica runs ``dp`` attention data-parallel ranks of ``tp`` GPUs each, as
vLLM's data-parallel + expert-parallel deployment does: every rank holds
the attention, the dense MLPs, the shared experts, embeddings and LM head
split ``tp`` ways and attends only its own sequences; the MoE layers' routed
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
        if min(tp, dp, ep) < 1:
            raise LlmsimError(f"tp, dp and ep must be ≥ 1 (got tp={tp}, dp={dp}, ep={ep})", key_path="tp")
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


def weight_bytes_per_gpu(model: ModelProfile, par: Parallelism, weight_dtype: str) -> tuple[float, float]:
    """(replicated part, expert part) of one GPU's weights.

    The replicated part — everything but the routed experts — is split tp
    ways and held by every one of the dp ranks; the routed experts are
    split over all tp·dp GPUs (ep by expert, moe_tp by width).
    """
    experts = model.expert_weight_bytes(weight_dtype)
    rest = model.weight_bytes(weight_dtype) - experts
    return rest / par.tp, experts / par.gpus


def replica_weight_bytes(model: ModelProfile, par: Parallelism, weight_dtype: str) -> float:
    """Weights held by the whole replica, replication across dp ranks included."""
    if par.dp == 1:
        return model.weight_bytes(weight_dtype)
    rest, experts = weight_bytes_per_gpu(model, par, weight_dtype)
    return (rest + experts) * par.gpus


def kv_copies(model: ModelProfile, tp: int) -> float:
    """How many times one attention rank stores each token's KV, against
    one copy of all its heads. MLA's latent has no heads to split: every
    GPU of the rank keeps the whole of it (tp copies; vLLM, SGLang and
    TensorRT-LLM alike). GQA heads are split over the tp GPUs, and a GPU
    holds at least one: with fewer KV heads than GPUs each head is
    replicated (vLLM's ``max(1, num_kv_heads // tp)`` per GPU; SGLang's
    ``get_num_kv_heads(tp)``), so Qwen3-235B's 4 KV heads at tp 8 take
    twice their share."""
    if model.is_mla:
        return float(tp)
    heads = model.kv_heads
    return max(1, -(-heads // tp)) * tp / heads


def replica_kv_bytes_per_token(model: ModelProfile, par: Parallelism, kv_dtype: str) -> float:
    """KV bytes a token takes on its replica: a sequence lives on one dp
    rank, whose tp GPUs hold :func:`kv_copies` copies of its KV."""
    return model.kv_bytes_per_token(kv_dtype) * kv_copies(model, par.tp)
