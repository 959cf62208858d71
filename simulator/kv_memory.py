"""How each serving stack sizes its KV pool from a GPU's memory.

The three stacks read "how much memory may the KV cache take" differently,
and on a model that nearly fills its GPUs (DeepSeek-R1 on four B200s) the
difference is the whole pool:

``vllm``
    ``gpu_memory_utilization`` of the whole GPU, minus the weights, the peak
    activation of the profiling run and the memory allocated outside torch
    (vllm/v1/worker/gpu_worker.py ``Worker.determine_available_memory``:
    ``requested_memory = total × gpu_memory_utilization``, the KV cache gets
    ``requested_memory − non_kv_cache_memory``). CUDA graphs are captured
    after the KV cache is allocated and live in the unrequested share up to
    0.19.1; from 0.20.0 the profiler estimates them first
    (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``, on by default), which
    ``cuda_graphs_in_pool`` says, and ``cuda_graph_gib`` must give. The
    profiling run's sampler differs between vLLM's two model runners
    (``sampler_logit_bytes``), and from 0.27.0 the profiler counts what the
    V2 runner keeps per request slot (``persistent_logit_bytes``). From 0.34.0
    an extensible KV cache (``extensible_margin_gib``) is sized from the memory
    free after warm-up and CUDA-graph capture, at utilization 1.0: the same
    terms, the pool capped by the whole GPU less a margin for the activation
    peak (:func:`vllm_extensible_margin`).
``sglang``
    ``mem_fraction_static`` is the share of the memory free at start-up that
    weights and KV cache may hold together (model_executor/model_runner.py
    ``ModelRunner.profile_max_num_token``: ``rest_memory =
    available_after_weights − free_at_start × (1 − mem_fraction_static)``);
    activations and CUDA graphs live in the rest. Its default is SGLang's
    own reserve for the GPU, the parallel size and the prefill chunk
    (server_args.py ``ServerArgs._handle_gpu_memory_settings``): the chunk
    is ``--chunked-prefill-size`` (the engine's token budget unless
    ``kv_memory.chunked_prefill_size`` says otherwise), never
    ``--max-prefill-tokens``, which counts only when chunked prefill is off.
    A model interleaving sliding-window and full-attention layers (gpt-oss)
    gets a hybrid pool: each sliding-window layer holds
    ``swa_full_tokens_ratio`` (0.8) tokens per full-attention token, freed
    once they leave the window (0.5.9 ``model_runner_kv_cache_mixin.py``
    ``set_num_tokens_hybrid_swa``; 0.5.13 and later
    ``pool_configurator.py`` ``HybridSWAPoolConfigurator``: one token costs
    ``F·n_full + ratio·S·n_swa`` bytes), not a window per running sequence
    drawn from one shared pool as vLLM's rule does (:mod:`simulator.hybrid_kv`).
``trtllm``
    ``KvCacheConfig.free_gpu_memory_fraction`` (0.9) of the memory still free
    after the weights and a profiling run of ``max_num_tokens``
    (_torch/pyexecutor/_util.py ``KvCacheCreator.configure_kv_cache_capacity``
    and ``_cal_max_memory``: ``(total − peak) × fraction``, peak counting
    torch and non-torch memory, NCCL and CUDA graphs), capped by
    ``KvCacheConfig.max_tokens`` when set. Sliding-window layers keep every
    token as full-attention ones do (1.0 to 1.3: ``KVCacheManager`` sets one
    window, ``max_attention_window_vec = [max_seq_len]``, unless the launch
    sets ``kv_cache_config.max_attention_window``, and nothing derives it
    from a gpt-oss config; its one pool's bytes per token count all 36
    layers, "kv size is 73728" in a 1.1 start-up log of gpt-oss-120b).
    With windows set, the pools split memory equally by window size (1.1
    on), which leaves gpt-oss's full-attention tokens where they were.

Every stack reads the GPU's memory from CUDA (``torch.cuda.mem_get_info``), which
reports less than nvidia-smi by what the driver keeps: vLLM's total
(utils/mem_utils.py ``MemorySnapshot``, v1/worker/utils.py ``request_memory``:
``total_memory × gpu_memory_utilization``), SGLang's free memory at start
(utils/common.py ``get_available_gpu_memory``), TensorRT-LLM's total
(``configure_kv_cache_capacity``). So every rule applies its fraction to
:attr:`GpuShare.cuda_total`; only SGLang's choice of its default fraction and
prefill chunk reads nvidia-smi's total (``get_nvgpu_memory_capacity``), which
is :attr:`GpuShare.hbm`.

Each rule gives one GPU's KV bytes; every GPU of an attention rank holds the
same share of its sequences (:func:`simulator.parallelism.kv_copies`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping, Optional, Union, get_args

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError, model_validator

from .errors import KeyRefusal
from .profiles.hardware import GIB

MIB = 2**20
# CUDA context, NCCL communicators and buffers, CUDA-graph pools: what a
# stack's process holds outside torch. SGLang logs it once torch.distributed
# is up ("Init torch distributed ends. mem usage=1.77-2.01 GB" on 8×H200,
# github.com/sgl-project/sglang/pull/11716); llmsim takes 2 GiB per GPU for
# every stack, an estimate.
RUNTIME_BYTES_PER_GPU = 2.0 * GIB

Rule = Literal["vllm", "sglang", "trtllm"]


@dataclass(frozen=True)
class GpuShare:
    """One GPU of a replica, as its stack sizes the KV pool."""

    hbm: float              # bytes nvidia-smi reports as total: what SGLang picks its defaults by
    weights: float          # this GPU's weights
    activation: float       # activations of the profiling run's tokens on this GPU, logits apart
    gpus: int               # GPUs of the serving process (SGLang's tp_size: tp × dp)
    dp: int                 # attention data-parallel ranks
    budget: int             # token budget of one iteration (SGLang's prefill chunk unless kv_memory sets it)
    max_seqs: int
    # what decodes beside the model: "" nothing, "mtp" the model's own MTP layers (an EAGLE-style
    # head), "draft" a separate draft model (True: an EAGLE-style draft)
    speculative: bool | str = False
    stages: int = 1         # pipeline stages of the serving process (SGLang's reserve counts tp × pp GPUs)
    # The piecewise CUDA graphs SGLang would capture for prefill batches of this model
    # (sglang_prefill_graph_mib): "" none, "mla" an MLA model, "mha" any other up to the
    # prefill chunk, "llama-2" a Llama-2 model (captured to 4,096 tokens) ...
    prefill_graphs: str = ""
    # ... unless the release turns them off for one of these (kv_memory.prefill_graphs_off):
    # what this deployment is among SGLANG_PREFILL_GRAPH_BLOCKERS.
    prefill_graph_blockers: frozenset[str] = frozenset()
    # "prefill" or "decode": the pool's side of a disaggregated pair, "" a pool that does both
    # (SGLang's --disaggregation-mode; its reserve follows it from 0.5.15: kv_memory.role_reserve).
    role: str = ""
    # False: prompts run whole, SGLang's --chunked-prefill-size -1 (engine.chunked_prefill), and
    # ``budget`` is its --max-prefill-tokens
    chunked: bool = True
    runtime: float = RUNTIME_BYTES_PER_GPU
    # Vocabulary entries of one sequence's logits on this GPU: the whole vocabulary, since the
    # stacks gather the vocabulary-parallel LM head's output before sampling (vLLM V1's
    # LogitsProcessor all-gathers, Platform.use_all_gather; so does SGLang's,
    # do_tensor_parallel_all_gather); 0 on a pipeline stage that does not sample.
    vocab: int = 0
    # Bytes CUDA reports as total (torch.cuda.mem_get_info), which every stack applies its fraction
    # to: nvidia-smi's less the driver's reservation (HardwareProfile.cuda_total_gib); None: ``hbm``.
    cuda: Optional[float] = None
    # The bytes per token TensorRT-LLM's KV-size estimate divides its budget by, against those the
    # pool's tokens take on this GPU (parallelism.unrounded_kv_share): below one where a tp group
    # replicates its KV heads.
    kv_estimate_share: float = 1.0

    @property
    def cuda_total(self) -> float:
        """The total the stacks' fractions apply to: CUDA's, nvidia-smi's where it is not known."""
        return self.hbm if self.cuda is None else self.cuda

    def peak(self, sequences: int, logit_bytes: float) -> float:
        """The profiling run's activation peak when it samples ``sequences`` at once, its sampler
        holding ``logit_bytes`` per vocabulary entry of each."""
        return self.activation + sequences * self.vocab * logit_bytes


@dataclass(frozen=True)
class KvBudget:
    """What a rule grants one GPU: KV bytes, and the terms that explain them."""

    kv_bytes: float
    fraction: float
    usable: float           # bytes the fraction puts within weights' and KV's reach
    reserve: float          # bytes set aside beyond weights within ``usable`` (activations, runtime, graphs)
    knob: str               # the stack's name for ``fraction``
    why: str = ""           # how a default fraction was chosen
    activation: float = 0.0  # the activation peak the stack measures before sizing the pool


FP32 = 4.0
# SGLang's default --swa-full-tokens-ratio (server_args.py, 0.5.x).
SGLANG_SWA_FULL_TOKENS_RATIO = 0.8
# TensorRT-LLM's: a sliding-window layer holds every token a full-attention layer holds (the module
# docstring), as SGLang's hybrid pool at a ratio of 1.
TRTLLM_SWA_TOKENS_RATIO = 1.0
# vLLM's profiling sampler from 0.17 (v1/sample/sampler.py Sampler.forward, ops/topk_topp_sampler.py
# forward_native with apply_top_k_top_p_triton in place): the gathered bf16 logits (2 B), their fp32
# copy (4), the softmax probabilities (4) and random_sample's exponential draws (4) per entry.
VLLM_SAMPLER_LOGIT_BYTES = 14.0


# vLLM's extensible KV cache (0.34.0, v1/worker/extensible_kv_cache.py): the margin it keeps free
# beyond the activation peak, max(floor, 0.75 x peak): KV_CACHE_MARGIN_FLOOR_BYTES (1 GiB, 3 on ROCm,
# kv_memory.extensible_margin_gib) and KV_CACHE_MARGIN_FRACTION.
VLLM_EXTENSIBLE_MARGIN_FRACTION = 0.75


def vllm_extensible_margin(peak: float, floor_gib: float) -> float:
    """Bytes vLLM's extensible KV cache leaves free beyond the activation peak ``peak``
    (extensible_kv_cache.py measure_kv_cache_bytes: ``max(margin_floor_bytes,
    margin_fraction x transient_peak_bytes)``)."""
    return max(floor_gib * GIB, VLLM_EXTENSIBLE_MARGIN_FRACTION * peak)


def _vllm(g: GpuShare, spec: KvMemory, utilization: float) -> KvBudget:
    # The profiling run samples min(max_num_seqs, max_num_batched_tokens) sequences at once
    # (v1/worker/gpu_model_runner.py profile_run -> _dummy_sampler_run).
    frac = spec.fraction if spec.fraction is not None else utilization
    usable = frac * g.cuda_total
    act = g.peak(min(g.max_seqs, g.budget), VLLM_SAMPLER_LOGIT_BYTES if spec.sampler_logit_bytes is None
                 else spec.sampler_logit_bytes)
    if spec.extensible_margin_gib is not None:
        # measure_kv_cache_bytes: min(requested - what the engine holds, free + committed - margin)
        # - the transient peak; what the engine holds is the reserve below in both terms
        usable = min(usable, g.cuda_total - vllm_extensible_margin(act, spec.extensible_margin_gib))
    # what the runner keeps per request slot (V2's sampler states), counted from 0.27.0
    # (utils/mem_utils.py memory_profiling: total_consumed)
    kept = g.max_seqs * g.vocab * spec.persistent_logit_bytes
    reserve = act + kept + g.runtime + spec.cuda_graph_gib * GIB
    return KvBudget(usable - g.weights - reserve, frac, usable, reserve, "gpu_memory_utilization", activation=act)


# SGLang's tables of GPU-memory defaults (kv_memory.gpu_tiers): "0.5" its 0.5.x releases' to 0.5.19
# (server_args.py _handle_gpu_memory_settings; arg_groups/memory_hook.py handle_gpu_memory_settings in
# 0.5.19), "0.5.20" 0.5.20's on, which give GPUs of 20-35 GiB a 4,096-token chunk (was 2,048) and decode
# CUDA graphs to batch 48 below tp 4, else 160 (was 24 / 80), the tiers above and below unchanged.
SglangGpuTiers = Literal["0.5", "0.5.20"]


def sglang_graph_max_bs(hbm_mib: float, gpus: int, tiers: SglangGpuTiers = "0.5") -> int:
    """SGLang's default ``cuda_graph_max_bs`` for the GPU and its tp_size
    (server_args.py ``_handle_gpu_memory_settings``, 0.5.x; ``tiers``: which
    release's table, :data:`SglangGpuTiers`)."""
    small = gpus < 4
    if hbm_mib < 20 * 1024:
        return 8
    if hbm_mib < 35 * 1024:
        if tiers == "0.5.20":
            return 48 if small else 160
        return 24 if small else 80
    if hbm_mib < 60 * 1024:
        return 32 if small else 160
    if hbm_mib < 160 * 1024:
        return 256 if small else 512
    return 512


def sglang_chunked_prefill_size(hbm_mib: float, tiers: SglangGpuTiers = "0.5") -> int:
    """SGLang's default ``chunked_prefill_size`` for the GPU (server_args.py
    ``_handle_gpu_memory_settings``, 0.5.x; ``tiers``: which release's table,
    :data:`SglangGpuTiers`): the prefill chunk its reserve is sized for when
    the launch does not set ``--chunked-prefill-size``."""
    if hbm_mib < (20 if tiers == "0.5.20" else 35) * 1024:
        return 2048
    if hbm_mib < 60 * 1024:
        return 4096
    if hbm_mib < 160 * 1024:
        return 8192
    return 16384


# SGLang's prefill (extend) batch sizes its piecewise CUDA graphs are captured for
# (server_args.py _generate_piecewise_cuda_graph_tokens, 0.5.10-0.5.13), up to the largest.
def sglang_prefill_graph_sizes(max_tokens: int) -> list[int]:
    """The token counts SGLang captures piecewise prefill graphs for, up to ``max_tokens``."""
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1025, 64)) + list(range(1280, 4097, 256)) + list(range(4608, max_tokens + 1, 512)))
    return [n for n in sizes if n <= max_tokens]


def sglang_prefill_graph_mib(kind: str, top: int) -> float:
    """What SGLang's default reserve sets aside for its piecewise prefill CUDA graphs
    (server_args.py ``_handle_gpu_memory_settings``, 0.5.10-0.5.13; arg_groups/memory_hook.py
    ``reserve_for_graph_mb`` from 0.5.19): 1.5 GiB with MLA attention ("the memory overhead is
    much higher than expected with fa3") whatever it captures, even no size at all, else 8 MiB
    of non-torch memory per size captured up to ``top`` tokens (:func:`sglang_prefill_graph_top`);
    nothing where ``kind`` is "" (the graphs off: :func:`sglang_prefill_graph_kind_on`)."""
    if not kind:
        return 0.0
    if kind == "mla":
        return 1.5 * 1024
    return 8.0 * len(sglang_prefill_graph_sizes(top)) if top > 0 else 0.0


# What can turn SGLang's prefill CUDA graphs off, for kv_memory.prefill_graphs_off to list those a
# release turns them off for: "speculative" a draft decodes beside the model, "dp_attention" more
# than one attention-DP rank, "pp" more than one pipeline stage, "disaggregated" a pool of a
# disaggregated pair, "mla" an MLA model, "mla_without_dsa" one without DeepSeek sparse attention
# (the indexer of DeepSeek-V3.2 and GLM-5), "listed_architecture" an architecture the
# torch.compile backend lists as unsupported (Qwen3-Next, GLM-5), "multimodal" an architecture
# served multimodal (Qwen3.5, Llama-4, Gemma-3), "multimodal_unlisted" one of those the breakable
# backend does not allow (all but Qwen3.5).
PrefillGraphBlocker = Literal["speculative", "dp_attention", "pp", "disaggregated", "mla", "mla_without_dsa",
                              "listed_architecture", "multimodal", "multimodal_unlisted"]
SGLANG_PREFILL_GRAPH_BLOCKERS: tuple[str, ...] = get_args(PrefillGraphBlocker)
# Those SGLang 0.5.10-0.5.14 turn its (torch.compile, tc_piecewise) prefill graphs off for
# (server_args.py _handle_piecewise_cuda_graph, 0.5.14's _disable_tc_piecewise_cudagraph_if_incompatible;
# "speculative" only 0.5.10's, which llmsim keeps for 0.5.10-0.5.14).
SGLANG_TC_PIECEWISE_GRAPHS_OFF = ("speculative", "dp_attention", "pp", "disaggregated", "listed_architecture",
                                  "multimodal")
# The drafts beside which an SGLang release captures its prefill graphs, and reserves for them, yet
# replays none for the target's prefills (kv_memory.prefill_graphs_eager_beside): "eagle" an
# EAGLE-style draft (EAGLE, NEXTN/MTP), "standalone" a separate draft model.
EagerBesideDraft = Literal["eagle", "standalone"]


# GiB SGLang's default reserve added for a draft beside the model to 0.5.13: an EAGLE-style head
# (EAGLE, NEXTN/MTP) 2 GiB to 0.5.9 and 4 GiB from 0.5.10 (kv_memory.draft_reserve_gib, which the
# sglang backend's releases set), a separate draft model (STANDALONE) 6 GiB. From 0.5.14 there is
# none: SGLang loads the draft before it sizes the target's pool, so the draft's weights and KV come
# out of the pool (model_runner_kv_cache_mixin.py _profile_available_bytes, "draft weights are now
# counted"; pool_configurator.py DefaultPoolConfigurator scales the cell size by
# 1 + draft layers / target layers; scheduler.py init_model_worker loads both, then
# init_memory_pools), and _handle_gpu_memory_settings reserves nothing for it (0.5.14-0.5.23).
SGLANG_DRAFT_MODEL_RESERVE_GIB = 6.0


def sglang_mem_fraction_static(hbm_mib: float, gpus: int, dp: int, chunked_prefill_size: int,
                               graph_max_bs: int, speculative: bool | str = False, prefill_graph_mib: float = 0.0,
                               draft_head_gib: Optional[float] = None, role: str = "",
                               running_requests: Optional[int] = None) -> tuple[float, float]:
    """SGLang's default ``mem_fraction_static`` and the reserve (MiB) it
    leaves: 512 MiB of metadata, 1.5 MiB per token of the prefill chunk
    (at least 2,048), 2 MiB per CUDA-graph batch slot, 1 GiB per 8 GPUs
    of the process (tp × pp: ``gpus``), with DP attention 3 MiB (and 1.5 more above 300 slots) per slot and
    rank, the piecewise prefill graphs' ``prefill_graph_mib`` (0.5.10 on:
    :func:`sglang_prefill_graph_mib`), at least 10 GiB on GPUs above 60 GiB
    (server_args.py ``ServerArgs._handle_gpu_memory_settings``, 0.5.4-0.5.14);
    to 0.5.13 (``draft_head_gib`` given) ``draft_head_gib`` more for an EAGLE or
    NEXTN (MTP) draft, 6 GiB for a separate draft model (``speculative="draft"``,
    SGLang's STANDALONE); from 0.5.14 (None) nothing for a draft, whose weights
    and KV come out of the pool instead. ``role`` (0.5.15 on, its
    --disaggregation-mode): a "decode" server sizes the activation term by its
    running requests, max(running × draft tokens, 2,048): the launch's
    --max-running-requests (``running_requests``) where it gives one, else
    graph_max_bs, by one draft token (--speculative-num-draft-tokens unset
    when the reserve is sized), and reserves no prefill graphs (the caller
    passes none); a "prefill" server reserves no decode graphs and no
    DP-attention padding."""
    activation_tokens = (max(running_requests or graph_max_bs, 2048) if role == "decode"
                         else max(chunked_prefill_size, 2048))
    reserved = 512 + activation_tokens * 1.5 + gpus / 8 * 1024
    if role != "prefill":
        reserved += graph_max_bs * 2
    if dp > 1 and role != "prefill":
        reserved += graph_max_bs * dp * 3
        if graph_max_bs > 300:
            reserved += graph_max_bs * dp * 1.5
    reserved += prefill_graph_mib
    if hbm_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    if speculative and draft_head_gib is not None:
        reserved += (SGLANG_DRAFT_MODEL_RESERVE_GIB if speculative == "draft" else draft_head_gib) * 1024
    return round((hbm_mib - reserved) / hbm_mib, 3), reserved


def _sglang(g: GpuShare, spec: KvMemory, utilization: float) -> KvBudget:
    why = ""
    if spec.fraction is not None:
        frac = spec.fraction
    else:
        mib = g.hbm / MIB
        bs = spec.cuda_graph_max_bs or sglang_graph_max_bs(mib, g.gpus, spec.gpu_tiers)
        if spec.graphs_to_running_requests and spec.cuda_graph_max_bs is None:
            # --max-running-requests counts every attention-DP rank's requests
            bs = min(bs, g.max_seqs * g.dp)
        chunk = _sglang_chunk(spec, g)
        role = g.role if spec.role_reserve else ""
        pieces = sglang_prefill_graph_mib(sglang_prefill_graph_kind_on(g, spec), _sglang_reserved_graph_top(g, spec))
        # --max-running-requests counts every attention-DP rank's requests
        running = g.max_seqs * g.dp if spec.decode_activation_to_running_requests else None
        frac, reserved = sglang_mem_fraction_static(mib, g.gpus * g.stages, g.dp, chunk, bs, g.speculative,
                                                    pieces, spec.draft_reserve_gib, role, running)
        why = (f"SGLang's default for a {g.hbm / GIB:.0f} GiB GPU: {reserved / 1024:.1f} GiB reserved for "
               + _sglang_reserve_terms(role, chunk, bs, running)
               + (", piecewise prefill graphs" if pieces else "")
               + f", {g.gpus * g.stages} GPU{'s' * (g.gpus * g.stages != 1)}"
               + (f" as a {role} server" if role else "")
               + (" and a draft" if g.speculative and spec.draft_reserve_gib is not None else ""))
    # free_at_start × fraction holds weights and KV; the runtime is taken before start-up is measured,
    # and free memory is CUDA's (get_available_gpu_memory), while the default fraction above follows
    # nvidia-smi's total (get_nvgpu_memory_capacity).
    usable = frac * (g.cuda_total - g.runtime)
    return KvBudget(usable - g.weights, frac, usable, 0.0, "mem_fraction_static", why)


def _sglang_reserve_terms(role: str, chunk: int, graph_max_bs: int, running: Optional[int]) -> str:
    """What SGLang's default reserve was sized for, as :func:`sglang_mem_fraction_static` sizes it for the
    server's role: a decode server's activations follow its running requests (or its CUDA-graph batch),
    not the prefill chunk it never runs, and a prefill server captures no decode graphs."""
    if role == "decode":
        whose = f"{running:,} running requests" if running else f"CUDA-graph batch of {graph_max_bs}"
        activations = f"{max(running or graph_max_bs, 2048):,} tokens of activations (its {whose}, at least 2,048)"
    else:
        activations = f"a {chunk:,}-token prefill chunk"
    return activations + ("" if role == "prefill" else f", CUDA graphs up to batch {graph_max_bs}")


def sglang_prefill_graph_kind_on(g: GpuShare, spec: KvMemory) -> str:
    """The kind of piecewise prefill graphs SGLang keeps on for this deployment
    (:attr:`GpuShare.prefill_graphs`), "" where its prefill graph backend is off: the release keeps
    them off (``piecewise_cuda_graph`` false, as to 0.5.9) or turns them off for this deployment
    (``prefill_graphs_off``), or the pool is a decode server. On, the backend is reserved for even
    where it captures no size (arg_groups/memory_hook.py ``reserve_for_graph_mb`` reads the
    backend, not the sizes)."""
    role = g.role if spec.role_reserve else ""
    if (not spec.piecewise_cuda_graph or role == "decode"
            or g.prefill_graph_blockers & set(spec.prefill_graphs_off)):
        return ""
    return g.prefill_graphs


def sglang_prefill_graph_top(g: GpuShare, spec: KvMemory) -> int:
    """The most tokens of a prefill batch SGLang captures a piecewise CUDA graph for (0: none): those
    its reserve made room for (:func:`_sglang_reserved_graph_top`), none where it turns the graphs off
    after sizing that reserve (``prefill_graphs_off_after_reserve``: arg_groups/cuda_graph_hook.py
    ``disable_prefill_cuda_graph_for_deepseek_trtllm_mla`` runs after handle_gpu_memory_settings, so
    the reserve stays). The prefills replayed (:func:`sglang_prefill_graph_tokens`) follow it."""
    return 0 if spec.prefill_graphs_off_after_reserve else _sglang_reserved_graph_top(g, spec)


def _sglang_reserved_graph_top(g: GpuShare, spec: KvMemory) -> int:
    """The most tokens of a prefill batch SGLang's default reserve makes room for a piecewise CUDA
    graph of (0: none): its prefill chunk, an MLA model's ``mla_prefill_graph_tokens`` below it,
    Llama-2's 4,096, a --max-total-tokens cap below either (server_args.py
    ``piecewise_cuda_graph_max_tokens``, 0.5.9-0.5.18; arg_groups/memory_hook.py's prefill ``max_bs``
    from 0.5.19). None where the graphs are off (:func:`sglang_prefill_graph_kind_on`), nor without a
    chunk (--chunked-prefill-size -1 is then the top, and no size is at most -1) but for an MLA model
    in a release whose MLA cap does not read the chunk (``mla_prefill_graphs_need_chunk`` false: 2,048
    to 0.5.22). The reserve for them (:func:`sglang_prefill_graph_mib`) follows it."""
    kind = sglang_prefill_graph_kind_on(g, spec)
    if not kind or (not g.chunked and (kind != "mla" or spec.mla_prefill_graphs_need_chunk)):
        return 0
    top = _sglang_chunk(spec, g)
    if kind == "mla":
        top = min(top, spec.mla_prefill_graph_tokens)
    elif kind == "llama-2":
        top = min(top, 4096)
    return top if spec.max_tokens is None else min(top, spec.max_tokens)


def sglang_prefill_graph_tokens(g: GpuShare, spec: KvMemory) -> int:
    """The most tokens of a prefill batch SGLang replays one of its piecewise CUDA graphs for (0: it
    runs every prefill eagerly): those it captures (:func:`sglang_prefill_graph_top`), none beside a
    draft whose target prefills they cannot serve (``prefill_graphs_eager_beside``, which still
    captures and reserves them)."""
    # SGLang's speculative algorithm: GpuShare.speculative's "draft" is its STANDALONE
    draft = "standalone" if g.speculative == "draft" else "eagle" if g.speculative else ""
    return 0 if draft in spec.prefill_graphs_eager_beside else sglang_prefill_graph_top(g, spec)


def _sglang_chunk(spec: KvMemory, g: GpuShare) -> int:
    """The prefill chunk SGLang's reserve is sized for: ``kv_memory.chunked_prefill_size``,
    its GPU default ('default'), or the engine's token budget."""
    if spec.chunked_prefill_size == "default":
        return sglang_chunked_prefill_size(g.hbm / MIB, spec.gpu_tiers)
    return spec.chunked_prefill_size or g.budget


def _trtllm(g: GpuShare, spec: KvMemory, utilization: float) -> KvBudget:
    # The profiling run is max_num_tokens of dummy prompts of max_seq_len - 1 tokens that
    # each return one token: one sequence's logits (_util.py _create_dummy_context_requests).
    frac = spec.fraction if spec.fraction is not None else 0.9
    act = g.peak(1, FP32 if spec.sampler_logit_bytes is None else spec.sampler_logit_bytes)
    reserve = act + g.runtime + spec.cuda_graph_gib * GIB
    free = g.cuda_total - g.weights - reserve
    kv = frac * free
    if g.kv_estimate_share < 1:
        # The estimate's token cap (KvCacheCreator.configure_kv_cache_capacity: the budget over
        # get_cache_size_per_token, which splits the KV heads tp ways unrounded) then exceeds what the
        # budget holds, and the pool is the KV cache manager's own cap: the fraction of the memory
        # free as it is built, the profiling run's activations released (torch.cuda.empty_cache)
        # (resource_manager.py KVCacheManager.calculate_max_num_blocks: min(max_tokens,
        # free_gpu_memory_fraction x free memory / the bytes a token takes)).
        kv = min(kv / g.kv_estimate_share, frac * (free + act))
    return KvBudget(kv, frac, g.weights + kv, 0.0, "free_gpu_memory_fraction", activation=act)


@dataclass(frozen=True)
class KvRule:
    """One stack's accounting, and what the other models ask of it."""

    budget: Callable[[GpuShare, KvMemory, float], KvBudget]
    # The engine key that is its fraction, if the rule reads one beside kv_memory.fraction
    # (vLLM's gpu_memory_utilization); a rule without one refuses the key.
    engine_knob: Optional[str] = None
    # A speculative draft's weights and KV can come out of the stack's reserve, not the KV pool:
    # SGLang to 0.5.13 sized the target's pool before it loaded the draft (model_runner.py
    # init_memory_pool: the draft worker takes draft_runner_cache_size, the target's token
    # count; its reserve grows for a draft: sglang_mem_fraction_static). Only where the
    # release reserves for it (kv_memory.draft_reserve_gib set: draft_in_reserve below).
    draft_in_reserve: bool = False
    # The KvMemory knobs the rule reads (KvMemory refuses the others): what the budget
    # functions above consume, and max_tokens, the stack's cap on a rank's tokens
    # (rank_token_cap) that memory.plan_memory and pipeline.plan_pipeline_memory apply.
    knobs: frozenset[str] = frozenset({"fraction", "max_tokens"})
    # Those of ``knobs`` that only derive the stack's default fraction, so unread beside kv_memory.fraction.
    default_knobs: frozenset[str] = frozenset()
    # The stack refuses to start unless one request of max_model_len fits an attention rank's pool
    # (vLLM: v1/core/kv_cache_utils.py check_enough_kv_cache_memory, "To serve at least one request
    # with the model's max seq len"). SGLang caps a prompt at its pool instead (scheduler.py:
    # max_req_input_len = min(context_len - 1, max_total_num_tokens - 1)), and TensorRT-LLM shortens
    # max_seq_len to the blocks it got; llmsim rejects such a request on arrival for both.
    needs_one_context: bool = False
    # Blocks of each attention rank's pool the stack keeps for itself, never a request's: vLLM's
    # BlockPool takes its null block (the placeholder of skipped sliding-window and padded slots)
    # off the free queue in every V1 release (v1/core/block_pool.py BlockPool.__init__:
    # 'self.null_block = self.free_block_queue.popleft()'), yet logs and counts it in the pool's
    # size. SGLang's slot 0 and TensorRT-LLM's pools are allocated beside the size they log.
    null_blocks: int = 0
    # The tokens a sliding-window layer holds per full-attention token where the stack shares one
    # pool between them by a ratio (swa_window_share: SGLang's hybrid pool, whose
    # swa_full_tokens_ratio knob replaces it; TensorRT-LLM's single pool, every layer every token);
    # None where each running sequence holds its windows in the shared pool (vLLM: simulator.hybrid_kv).
    swa_ratio: Optional[float] = None
    # Knobs that say what the stack does with a flag the launch gives, by the engine key that is the
    # flag: where the pool leaves that key to the backend (its default, its speculative cap), the
    # launch gives no flag and the knob is off (backend_defaults_beside).
    given_knobs: tuple[tuple[str, str], ...] = ()
    # Those of ``default_knobs`` that something else reads too, and why that reading adds nothing
    # beside kv_memory.fraction, which KvMemory's refusal then says instead of "nothing reads it".
    default_knobs_also_read: tuple[tuple[str, str], ...] = ()

    def reads(self, fraction_set: bool) -> frozenset[str]:
        """The knobs its accounting reads, with kv_memory.fraction set or not (the one place that
        says so: KvMemory refuses the others, the replay drops a launch's others)."""
        return self.knobs - self.default_knobs if fraction_set else self.knobs


# Each KV memory rule by the name engine.kv_memory.rule takes (the Rule type lists them).
RULES: dict[str, KvRule] = {
    "vllm": KvRule(_vllm, engine_knob="gpu_memory_utilization",
                   knobs=frozenset({"fraction", "cuda_graph_gib", "sampler_logit_bytes", "cuda_graphs_in_pool",
                                    "persistent_logit_bytes", "extensible_margin_gib", "null_block_held"}),
                   needs_one_context=True, null_blocks=1),
    "sglang": KvRule(_sglang, draft_in_reserve=True, swa_ratio=SGLANG_SWA_FULL_TOKENS_RATIO,
                     knobs=frozenset({"fraction", "max_tokens", "chunked_prefill_size", "cuda_graph_max_bs",
                                      "swa_full_tokens_ratio", "piecewise_cuda_graph", "draft_reserve_gib",
                                      "prefill_graphs_off", "role_reserve", "gpu_tiers",
                                      "graphs_to_running_requests", "decode_activation_to_running_requests",
                                      "mla_prefill_graph_tokens", "mla_prefill_graphs_need_chunk",
                                      "prefill_graphs_eager_beside", "prefill_graphs_off_after_reserve"}),
                     # (piecewise_cuda_graph and prefill_graphs_off size the reserve, and decide which
                     # prefills the cost model replays as graphs whatever the fraction)
                     default_knobs=frozenset({"chunked_prefill_size", "cuda_graph_max_bs", "role_reserve", "gpu_tiers",
                                              "graphs_to_running_requests", "decode_activation_to_running_requests"}),
                     given_knobs=(("graphs_to_running_requests", "max_num_seqs"),
                                  ("decode_activation_to_running_requests", "max_num_seqs")),
                     # sglang_prefill_graph_top reads the chunk; a prefill never outgrows the engine's
                     # budget, SGLang's chunk (per attention-DP rank), so a chunk at or above it replays
                     # the same prefills, and one below it is a launch the engine does not run
                     default_knobs_also_read=(("chunked_prefill_size", (
                         "the piecewise prefill graphs it also caps follow the engine's token budget "
                         "(max_num_batched_tokens), SGLang's chunk, without it")),)),
    "trtllm": KvRule(_trtllm, swa_ratio=TRTLLM_SWA_TOKENS_RATIO,
                     knobs=frozenset({"fraction", "max_tokens", "cuda_graph_gib", "sampler_logit_bytes"}))}


def _readers(knob: str) -> list[str]:
    """The rules whose accounting reads a ``KvMemory`` knob."""
    return [n for n, r in RULES.items() if knob in r.knobs]


def _read_by(knob: str, note: str = "") -> str:
    """Which rules read ``knob``, for its description: derived from ``RULES`` so the two cannot
    drift; ``note`` is said after it in parentheses."""
    readers = _readers(knob)
    others = [n for n in RULES if n not in readers]
    text = ("read by every rule" if not others else f"read by rule {readers[0]} alone" if len(readers) == 1
            else f"read by rules {' and '.join(readers)}")
    partial = [n for n in readers if knob in RULES[n].default_knobs]
    if partial:
        text += (", and only without kv_memory.fraction; refused otherwise" if partial == readers
                 else f" ({' and '.join(partial)} only without kv_memory.fraction); refused otherwise")
    elif others:
        text += f"; refused under {' and '.join(others)}"
    return text + (f" ({note})" if note else "")


class KvMemory(BaseModel):
    """``engine.kv_memory``: the stack whose accounting sizes the KV pool, and its knobs.

    Each knob is one stack's launch flag or measurement, and only the rules whose
    accounting has it read it (``KvRule.knobs``); one set under another rule would
    leave the pool as if unset while the user believes it counted, so it is refused."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    rule: Rule = Field(
        default="vllm", description="whose accounting: vllm (gpu_memory_utilization of the whole GPU), sglang "
                                    "(mem_fraction_static of the memory free at start), trtllm "
                                    "(free_gpu_memory_fraction of what weights and activations leave)")
    fraction: Optional[float] = Field(
        default=None, gt=0, le=1,
        description="the stack's own knob: vLLM's gpu_memory_utilization, SGLang's mem_fraction_static, "
                    "TensorRT-LLM's free_gpu_memory_fraction; "
                    + _read_by("fraction", "under vllm it is engine.gpu_memory_utilization itself: set one of the two")
                    + "; default: engine.gpu_memory_utilization (vllm), SGLang's default for the GPU (sglang), "
                      "0.9 (trtllm)")
    max_tokens: Optional[int] = Field(
        default=None, ge=1,
        description="cap on the KV tokens of one attention rank (TensorRT-LLM's KvCacheConfig.max_tokens, "
                    "SGLang's --max-total-tokens); "
                    + _read_by("max_tokens", "vLLM has no such flag: engine.num_gpu_blocks_override is its own")
                    + "; default: none")
    chunked_prefill_size: Optional[Union[PositiveInt, Literal["default"]]] = Field(
        default=None, description="SGLang's --chunked-prefill-size, the prefill chunk its default reserve grows "
                                  "with (1.5 MiB a token): a token count, or 'default' for SGLang's own for the "
                                  "GPU (2,048 below 35 GiB, from 0.5.20 below 20 (kv_memory.gpu_tiers), 4,096 below "
                                  "60, 8,192 below 160, 16,384 above), which "
                                  "a launch that sets only --max-prefill-tokens keeps; "
                                  + _read_by("chunked_prefill_size")
                                  + "; default: the engine's token budget (max_num_batched_tokens)")
    cuda_graph_max_bs: Optional[int] = Field(
        default=None, ge=1,
        description="SGLang's --cuda-graph-max-bs, which its default reserve grows with; "
                    + _read_by("cuda_graph_max_bs") + "; default: SGLang's for the GPU (up to 512)")
    cuda_graph_gib: float = Field(
        default=0.0, ge=0, le=1024, description="CUDA-graph memory per GPU the stack budgets before the KV cache (vLLM "
                                       "0.20.0-0.33 estimate it, their log says 'Estimated CUDA graph memory'; "
                                       "0.34.0 and later measure the graphs captured, 'Graph capturing finished in "
                                       "... took' so many GiB); "
                                       + _read_by("cuda_graph_gib", "its graphs live outside mem_fraction_static")
                                       + "; default 0: graphs live in the unbudgeted share")
    cuda_graphs_in_pool: bool = Field(
        default=False,
        description="the stack takes its CUDA graphs' memory out of the KV pool before sizing it, a figure it "
                    "measures at start-up by capturing graphs and llmsim cannot derive, so cuda_graph_gib must then "
                    "be given (vLLM 0.20.0 and later: VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS on by default, from "
                    "0.34.0 the graphs captured before the extensible KV cache is sized; the vllm backend's releases "
                    "set it); "
                    + _read_by("cuda_graphs_in_pool") + "; default: false")
    sampler_logit_bytes: Optional[float] = Field(
        default=None, ge=0, le=64,
        description="bytes the profiling run's sampler holds on each GPU per vocabulary entry of each dummy "
                    "sequence, all copies of the logits together: vLLM samples min(max_num_seqs, "
                    "max_num_batched_tokens) sequences over the gathered vocabulary, 14 from 0.17 (bf16 logits, "
                    "their fp32 copy, probabilities and random_sample's draws; its Triton top-k/top-p works in "
                    "place) or with VLLM_USE_FLASHINFER_SAMPLER=1, 28 on the PyTorch sort path 0.14-0.16 run by "
                    "default (and earlier releases without FlashInfer installed); "
                    + _read_by("sampler_logit_bytes", "its activations live outside mem_fraction_static")
                    + "; default: 14 (vllm), 4 (trtllm: one fp32 row of one sequence)")
    # vLLM 0.34.0's extensible KV cache: --enable-extensible-kv-cache, on by default on CUDA and ROCm
    extensible_margin_gib: Optional[float] = Field(default=None, ge=0, le=64, description=(
        "vLLM's extensible KV cache (on by default on CUDA and ROCm from 0.34.0 unless kv_cache_memory_bytes or "
        "num_gpu_blocks_override is set, or NIXL lacks an IMEX channel), by the least GiB it leaves free beyond "
        "the activation peak (KV_CACHE_MARGIN_FLOOR_BYTES: 1 on CUDA, 3 on ROCm). Sized after warm-up and "
        "CUDA-graph capture from the memory then free, at gpu_memory_utilization 1.0 by default, the pool is the "
        "estimate-based one (weights, activation peak, kept sampler states, non-torch memory, the graphs "
        "captured: kv_memory.cuda_graph_gib) capped by the whole GPU less max(this, 0.75 x the activation peak); "
        f"the vllm backend's releases set it; {_read_by('extensible_margin_gib')}; default: unset (sized from "
        "the profiling estimate)"))
    null_block_held: bool = Field(
        default=False,
        description="the start-up check that one request of max_model_len fits a rank's pool holds back the "
                    "block the block pool keeps as its null block, never a request's (v1/core/block_pool.py "
                    "BlockPool.__init__ takes it off the free queue in every release), so a max_model_len of the "
                    "pool's last block is refused: vLLM from 0.29.0 (get_kv_cache_configs and "
                    "check_enough_kv_cache_memory: 'Reserve the null block BlockPool permanently holds back', "
                    "kv_cache_utils.py, kv_cache_planning.py from 0.33.0), where 0.28.0 checks every block; the "
                    "vllm backend's releases set it; " + _read_by("null_block_held") + "; default: false")
    persistent_logit_bytes: float = Field(
        default=0.0, ge=0, le=64,
        description="bytes the model runner keeps on each sampling GPU for the server's life per vocabulary "
                    "entry of each of max_num_seqs requests, which the stack counts before sizing the pool: "
                    "vLLM's V2 model runner from 0.27.0 (its penalties' output_bin_counts and prompt_bin_mask, the "
                    "grammar bitmask: 4.25), which the vllm backend sets for the models that release runs on it; "
                    + _read_by("persistent_logit_bytes") + "; default 0")

    piecewise_cuda_graph: bool = Field(
        default=False,
        description="SGLang's piecewise CUDA graphs for prefill batches, which its default reserve makes room for "
                    "(1.5 GiB with MLA attention, else 8 MiB per captured batch size up to the prefill chunk, "
                    "none where prompts run whole: engine.chunked_prefill false, --chunked-prefill-size -1): on "
                    "by default from 0.5.10 (the sglang backend sets it; --disable-piecewise-cuda-graph is false), "
                    "save where SGLang turns them off (kv_memory.prefill_graphs_off), whatever this says; "
                    + _read_by("piecewise_cuda_graph") + "; default: false")
    mla_prefill_graph_tokens: int = Field(
        default=2048, ge=1, le=1_000_000,
        description="the most tokens of a prefill batch SGLang replays a piecewise CUDA graph for with an MLA "
                    "model, beside the prefill chunk that caps it: 2,048 in 0.5.9-0.5.22 ('the introduction of "
                    "piecewise cuda graph will influence the kernel dispatch' of MLA, server_args.py), 8,192 from "
                    "0.5.23 (arg_groups/memory_hook.py); a longer prefill runs eagerly (engine.eager_launch_us); "
                    + _read_by("mla_prefill_graph_tokens") + "; default: 2048")
    mla_prefill_graphs_need_chunk: bool = Field(
        default=False,
        description="SGLang caps an MLA model's piecewise prefill graphs by the prefill chunk as any other "
                    "model's, so captures none where prompts run whole (engine.chunked_prefill false, "
                    "--chunked-prefill-size -1), its flat 1.5 GiB reserved all the same: 0.5.23 "
                    "(arg_groups/memory_hook.py handle_gpu_memory_settings: min(8192, chunked_prefill_size)); "
                    "to 0.5.22 an MLA model's graphs went to 2,048 tokens whatever the chunk; the sglang "
                    "backend's releases set it; " + _read_by("mla_prefill_graphs_need_chunk") + "; default: false")
    prefill_graphs_off_after_reserve: bool = Field(
        default=False,
        description="SGLang turns its piecewise prefill CUDA graphs off once its default reserve has made room for "
                    "them, which stays: it captures and replays none (DeepSeek-V3 and Kimi K2, "
                    "DeepseekV3ForCausalLM, on the trtllm_mla attention it picks on compute capability 10.x, "
                    "0.5.18-0.5.23: cuda_graph_hook.py disable_prefill_cuda_graph_for_deepseek_trtllm_mla, run "
                    "after handle_gpu_memory_settings); the sglang backend's attention_kernels rules set it; "
                    + _read_by("prefill_graphs_off_after_reserve") + "; default: false")
    prefill_graphs_off: tuple[PrefillGraphBlocker, ...] = Field(
        default=SGLANG_TC_PIECEWISE_GRAPHS_OFF,
        description="what SGLang captures no prefill CUDA graphs for, and so reserves none: any of speculative (a "
                    "draft decodes beside the model), dp_attention, pp (pp > 1), disaggregated (a pool of a "
                    "disaggregated pair), mla, mla_without_dsa (MLA without DeepSeek sparse attention), "
                    "listed_architecture (Qwen3-Next, GLM-5), multimodal (Qwen3.5, Llama-4, Gemma-3 as served "
                    "multimodal), multimodal_unlisted (those but Qwen3.5). 0.5.10-0.5.14's torch.compile backend: "
                    f"{', '.join(SGLANG_TC_PIECEWISE_GRAPHS_OFF)} (server_args.py _handle_piecewise_cuda_graph); "
                    "from 0.5.15 the breakable backend's (_disable_breakable_cudagraph_if_incompatible): mla, "
                    "dp_attention, multimodal; 0.5.16 mla, dp_attention, multimodal_unlisted; 0.5.17 "
                    "mla_without_dsa, multimodal_unlisted; 0.5.18 multimodal_unlisted; 0.5.19 on pp, "
                    "multimodal_unlisted (arg_groups/cuda_graph_hook.py apply_cuda_graph_compatibility); the sglang "
                    "backend's releases set it; "
                    + _read_by("prefill_graphs_off") + f"; default: {', '.join(SGLANG_TC_PIECEWISE_GRAPHS_OFF)}")
    prefill_graphs_eager_beside: tuple[EagerBesideDraft, ...] = Field(
        default=(),
        description="the drafts beside which SGLang captures its piecewise prefill graphs, and reserves for them, "
                    "yet runs every prefill of the target eagerly: eagle (an EAGLE-style draft: EAGLE, NEXTN/MTP), "
                    "standalone (a separate draft model). 0.5.11-0.5.14's torch.compile graphs are captured "
                    "without the hidden states such a draft reads from the target's prefill, which "
                    "piecewise_cuda_graph_runner.py can_run then refuses (0.5.11 for every draft, 0.5.12 on for "
                    "eagle; 0.5.14's model_runner.py init_prefill_cuda_graph skips them for an EAGLE target); from "
                    "0.5.15 the breakable graphs are captured with them; the sglang backend's releases set it; "
                    + _read_by("prefill_graphs_eager_beside") + "; default: none")
    role_reserve: bool = Field(
        default=False,
        description="SGLang's default reserve follows a disaggregated pool's role (0.5.15 on, server_args.py "
                    "_handle_gpu_memory_settings): a decode server's activation term is max(its CUDA-graph batch, "
                    "or its explicit running requests under decode_activation_to_running_requests, 2,048) tokens "
                    "at 1.5 MiB, not its prefill chunk's, with no prefill graphs; a prefill server's "
                    "has no decode graphs and no DP-attention padding; the sglang backend sets it; "
                    + _read_by("role_reserve") + "; default: false (a disaggregated pool reserves as any other)")
    gpu_tiers: SglangGpuTiers = Field(
        default="0.5",
        description="which release's table of GPU-memory defaults SGLang sizes its default chunk and CUDA-graph "
                    "batch by, and so its reserve: 0.5 (0.5.x to 0.5.19: below 35 GiB a 2,048-token chunk, decode "
                    "graphs to batch 24 below tp 4, else 80) or 0.5.20 (20-35 GiB GPUs a 4,096-token chunk and "
                    "graphs to 48 / 160: arg_groups/memory_hook.py handle_gpu_memory_settings); the sglang "
                    "backend's releases set it (and the token budget of such a GPU with it); "
                    + _read_by("gpu_tiers") + "; default: 0.5")
    graphs_to_running_requests: bool = Field(
        default=False,
        description="SGLang's default decode CUDA-graph batch stops at the launch's --max-running-requests "
                    "(engine.max_num_seqs x attention-DP ranks) where that is smaller, and its reserve with it "
                    "(0.5.22 on: arg_groups/memory_hook.py handle_gpu_memory_settings, decode_max_bs_is_default); "
                    "only a flag the launch gives counts: the sglang backend sets it for those releases and turns "
                    "it off where the pool leaves max_num_seqs to the backend (its default, or the 48 it runs "
                    "under speculation, set after the memory settings); kv_memory.cuda_graph_max_bs set, it "
                    "does nothing; " + _read_by("graphs_to_running_requests") + "; default: false")
    decode_activation_to_running_requests: bool = Field(
        default=False,
        description="with role_reserve, a disaggregated decode server's activation term is the launch's "
                    "--max-running-requests (engine.max_num_seqs x attention-DP ranks) at 1.5 MiB a token, at "
                    "least 2,048, not its CUDA-graph batch (0.5.15 on: server_args.py _handle_gpu_memory_settings, "
                    "arg_groups/memory_hook.py from 0.5.19: max_running_requests or the graph batch, times "
                    "--speculative-num-draft-tokens, unset when the reserve is sized unless the launch gives it, "
                    "taken as 1); only a flag the launch gives counts: the sglang backend sets it for those "
                    "releases and turns it off where the pool leaves max_num_seqs to the backend; without "
                    "role_reserve it does nothing; "
                    + _read_by("decode_activation_to_running_requests") + "; default: false")
    draft_reserve_gib: Optional[float] = Field(
        default=None, ge=0, le=64,
        description="GiB SGLang's default reserve adds for an EAGLE-style draft (EAGLE, NEXTN/MTP) in the "
                    "releases that sized the target's pool before loading the draft, whose weights and KV then "
                    "live outside the pool whatever the fraction: 2 to 0.5.9, 4 in 0.5.10-0.5.13 (the sglang "
                    "backend's releases set it), a separate draft model's 6; unset, as from 0.5.14, nothing is "
                    "reserved and the draft's weights and KV come out of the pool; "
                    + _read_by("draft_reserve_gib") + "; default: unset")

    swa_full_tokens_ratio: Optional[float] = Field(
        default=None, gt=0, le=1,
        description="SGLang's --swa-full-tokens-ratio: the tokens each sliding-window layer holds per "
                    "full-attention token in its hybrid pool; 1 is also the pool of a release or launch that "
                    "keeps every layer's KV for every token (--disable-hybrid-swa-memory; gpt-oss before 0.5.8, "
                    "whose server_args forced it, and 0.5.8-0.5.10 on Blackwell's trtllm_mha attention); "
                    + _read_by("swa_full_tokens_ratio") + f"; default: {SGLANG_SWA_FULL_TOKENS_RATIO}")

    @model_validator(mode="after")
    def _every_knob_read(self) -> "KvMemory":
        # A knob its rule never reads would leave the pool as if it were unset while the user
        # believes it counted: refused, naming the rules that do read it.
        rule = RULES[self.rule]
        problems = []
        for name, field in type(self).model_fields.items():
            if name == "rule" or getattr(self, name) == field.default:
                continue
            if name not in rule.knobs:
                readers = _readers(name)
                problems.append(f"{name} is read only by rule{'s' if len(readers) > 1 else ''} "
                                f"{' and '.join(readers)}; rule {self.rule} sizes its KV pool without it: remove it")
            elif name not in rule.reads(self.fraction is not None):
                also = dict(rule.default_knobs_also_read).get(name)
                problems.append(f"{name} only sizes rule {self.rule}'s default fraction, which kv_memory.fraction "
                                f"replaces, {'and ' + also if also else 'so nothing reads it'}: remove one of the two")
        if problems:
            raise ValueError("; ".join(problems))
        return self


def swa_tokens_ratio(spec: Optional[KvMemory], sliding_layers: int) -> Optional[float]:
    """The tokens a sliding-window layer holds per full-attention token where the stack splits the
    pool by a ratio (``KvRule.swa_ratio``, or SGLang's ``swa_full_tokens_ratio`` knob where the rule
    reads it): 1 where every layer keeps every token (TensorRT-LLM's one pool, SGLang's
    --disable-hybrid-swa-memory); None where each running sequence holds its windows in the shared
    pool instead (vLLM: :mod:`simulator.hybrid_kv`), or the model has no sliding-window layers."""
    rule = RULES[spec.rule] if spec is not None else None
    if rule is None or rule.swa_ratio is None or not sliding_layers:
        return None
    # the knob where the rule reads it (SGLang's flag); TensorRT-LLM's ratio is no launch flag
    return (spec.swa_full_tokens_ratio if "swa_full_tokens_ratio" in rule.knobs else None) or rule.swa_ratio


def swa_window_share(spec: Optional[KvMemory], sliding_layers: int, full_layers: int) -> Optional[float]:
    """The share of a GPU's KV bytes its sliding-window layers take where the stack splits the pool
    by a ratio (:func:`swa_tokens_ratio`: a full-attention token costs ``full_layers`` layers, its
    sliding-window share ``ratio · sliding_layers``, every layer's token being the same size); None
    where it does not."""
    ratio = swa_tokens_ratio(spec, sliding_layers)
    return None if ratio is None else ratio * sliding_layers / (full_layers + ratio * sliding_layers)


def named_rule(kv_memory: Mapping[str, Any]) -> Optional[KvRule]:
    """The accounting a ``kv_memory`` mapping as written names (a profile's, a release's, a user's,
    before KvMemory reads it); None for a name no stack has, or no name at all (a list, a number),
    which KvMemory then refuses naming the key, where a lookup would stop on a traceback."""
    name = kv_memory.get("rule", KvMemory.model_fields["rule"].default)
    return RULES.get(name) if isinstance(name, str) else None


def backend_defaults_beside(defaults: Mapping[str, Any], engine: Mapping[str, Any]) -> dict[str, Any]:
    """A backend profile's engine defaults, less what the user's ``engine.kv_memory`` replaces
    whole rather than refines key by key. A profile's kv_memory knobs are its own stack's
    (TensorRT-LLM's free_gpu_memory_fraction 0.9, vLLM 0.14's sampler bytes): under a rule the
    user names instead they would mean something else, so none is kept. The user's
    kv_memory.fraction is the stack's own fraction knob, under the vllm rule
    gpu_memory_utilization itself, so the profile's value of that key gives way (EngineConfig
    refuses both) unless the user set it too. A knob of the profile's about a launch flag
    (:attr:`KvRule.given_knobs`: SGLang's decode graphs stop at an explicit
    --max-running-requests) is off where the user's engine does not set that flag's key."""
    out = dict(defaults)
    base, mine = out.get("kv_memory"), engine.get("kv_memory")
    if isinstance(base, dict):
        # a knob about a launch flag the pool does not give (KvRule.given_knobs) is off
        rule = named_rule(base)
        off = {k: False for k, key in (rule.given_knobs if rule else ()) if base.get(k) and key not in engine}
        if off:
            out["kv_memory"] = base = {**base, **off}
    if not isinstance(mine, dict):
        return out
    default_rule = KvMemory.model_fields["rule"].default
    if isinstance(base, dict) and mine.get("rule", base.get("rule", default_rule)) != base.get("rule", default_rule):
        out["kv_memory"] = {}
    if mine.get("fraction") is not None:
        for knob in {r.engine_knob for r in RULES.values() if r.engine_knob} - set(engine):
            out.pop(knob, None)
        # The profile's (or its release's) inputs to the stack's default fraction, which the user's
        # fraction replaces: nothing would read them (SGLang's GPU tiers, its role-aware reserve).
        if isinstance(out.get("kv_memory"), dict):
            out["kv_memory"] = without_default_inputs({**out["kv_memory"], "rule": mine.get(
                "rule", out["kv_memory"].get("rule", default_rule)), "fraction": mine["fraction"]}, keep=mine)
            out["kv_memory"].pop("fraction")
    return out


def without_default_inputs(kv_memory: Mapping[str, Any], keep: Mapping[str, Any] = {}) -> dict[str, Any]:
    """A stack's ``kv_memory`` mapping as a profile or release sets it, less the knobs that only
    derive the stack's default fraction (``KvRule.default_knobs``) where the mapping fixes the
    fraction: a release's defaults (SGLang's GPU tiers, its role-aware reserve) are moot beside a
    profile's or user's fraction, where KvMemory would refuse a knob the user set; its piecewise
    prefill graphs and draft reserve stay, read whatever the fraction. Those in ``keep`` (the
    user's own) stay, for KvMemory to refuse."""
    rule = named_rule(kv_memory)
    if rule is None or kv_memory.get("fraction") is None:   # a rule no stack has is refused by KvMemory
        return dict(kv_memory)
    return {k: v for k, v in kv_memory.items() if k not in rule.default_knobs or k in keep}


def rank_token_cap(spec: Optional[KvMemory]) -> Optional[int]:
    """The cap on one attention rank's KV tokens set by the stack's own flag, where its rule has
    one (TensorRT-LLM's KvCacheConfig.max_tokens, SGLang's --max-total-tokens)."""
    if spec is None or "max_tokens" not in RULES[spec.rule].knobs:
        return None
    return spec.max_tokens


#: The flag by which a command that builds such a pool itself (``llmsim estimate``, the rows ``llmsim
#: validate`` replays) takes the figure a scenario states as ``kv_memory.cuda_graph_gib``.
GRAPHS_FLAG = "--cuda-graph-gib"


class GraphsUnstated(KeyRefusal):
    """:func:`graphs_unstated`'s refusal of an engine, told apart from the others so that a command taking
    the figure as :data:`GRAPHS_FLAG` can ask for the flag, not the scenario key its user has not got."""

    def __init__(self, why: str):
        super().__init__("kv_memory.cuda_graph_gib", why)


def graphs_refused(err: ValidationError) -> bool:
    """Whether ``err`` holds :class:`GraphsUnstated`."""
    return any(isinstance((e.get("ctx") or {}).get("error"), GraphsUnstated) for e in err.errors())


def graphs_unstated(spec: Optional[KvMemory]) -> Optional[str]:
    """Why ``spec`` cannot size a pool, where the stack takes an estimate of its CUDA graphs out
    of it (``cuda_graphs_in_pool``) and the pool does not state the figure: the estimate is
    measured at start-up, llmsim has no physics for it, and without it the pool would be that
    much too large, in silence. None where nothing is missing."""
    if (spec is None or not spec.cuda_graphs_in_pool or "cuda_graphs_in_pool" not in RULES[spec.rule].knobs
            or "cuda_graph_gib" in spec.model_fields_set):
        return None
    return graphs_needed("set kv_memory.cuda_graph_gib to")


def graphs_needed(state: str, otherwise: str = "name an earlier backend_version") -> str:
    """:func:`graphs_unstated`'s answer, ``state`` saying how the figure is given (a scenario's
    key, a command's flag), ``otherwise`` what else would do ("": nothing, the release a
    measurement ran being what it was)."""
    return ("this release takes its CUDA graphs' memory out of the KV pool (vLLM 0.20.0 and later), which "
            f"llmsim cannot derive: {state} the 'Estimated CUDA graph memory' the server logs (from 0.34.0, "
            "whose extensible KV cache is sized after capture, the GiB of its 'Graph capturing finished in ... "
            f"took' line), per GPU{', or ' + otherwise if otherwise else ''}")


def draft_in_reserve(spec: Optional[KvMemory]) -> bool:
    """Whether a speculative draft's weights and KV live outside the KV pool under ``spec``: a rule
    that keeps them in its reserve (:attr:`KvRule.draft_in_reserve`), in a release that reserves for
    them (SGLang to 0.5.13, kv_memory.draft_reserve_gib set)."""
    return spec is not None and RULES[spec.rule].draft_in_reserve and spec.draft_reserve_gib is not None


def kv_budget(g: GpuShare, spec: Optional[KvMemory], gpu_memory_utilization: float = 0.9) -> KvBudget:
    """One GPU's KV bytes under ``spec``'s stack (vLLM's accounting without one)."""
    spec = spec or KvMemory()
    return RULES[spec.rule].budget(g, spec, gpu_memory_utilization)
