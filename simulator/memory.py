"""How one replica's GPU memory divides: weights, reserve, KV cache.

Each serving stack sizes its KV cache by its own accounting
(:mod:`.kv_memory`): vLLM's ``gpu_memory_utilization`` of the whole GPU,
SGLang's ``mem_fraction_static`` of the memory free at start-up,
TensorRT-LLM's ``free_gpu_memory_fraction`` of what weights and activations
leave. A pool's ``engine.kv_memory`` names the rule (its backend sets it);
without one llmsim sizes the pool as vLLM does, so a scenario's
``gpu_memory_utilization`` means what it means in vLLM. The activation
peak and the runtime allowance are estimates (stated below), not
measurements.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Optional

from .errors import LlmsimError
from .kv_memory import (RULES, RUNTIME_BYTES_PER_GPU, GpuShare, KvBudget, KvMemory, draft_in_reserve, kv_budget,
                        rank_token_cap, sglang_prefill_graph_tokens, swa_window_share)
from .hybrid_kv import SlidingGroups, sliding_groups
from .parallelism import Parallelism, replica_kv_bytes_per_token, unrounded_kv_share, weight_bytes_per_gpu
from .profiles.hardware import HardwareProfile
from .fields import leaf
from .profiles.model import ModelProfile

if TYPE_CHECKING:
    from .engine.config import EngineConfig

# The runtime (CUDA context, NCCL, CUDA-graph pools) per GPU: kv_memory's estimate.
NON_TORCH_BYTES_PER_GPU = RUNTIME_BYTES_PER_GPU

#: The words every "no room in GPU memory" refusal holds (here and in
#: simulator.pipeline): a plan reads them as an answer about the hardware,
#: not a fault in its input (simulator.planning.precheck).
DOES_NOT_FIT = " does not fit on "


def does_not_fit(error: LlmsimError | str) -> bool:
    """Whether ``error`` (or a run's row's error text) is a model not fitting
    its GPUs: an answer about the hardware (a plan's infeasible candidate, a
    ladder step's result), not a fault of the input that names it."""
    return DOES_NOT_FIT in (error if isinstance(error, str) else error.message)


#: What :meth:`MemoryPlan.describe` writes (``llmsim.pools.<pool>.kv_memory``).
KV_MEMORY_FIELDS = {
    "rule": leaf("text", "whose accounting sized the KV pool (a stack's name)"),
    "<knob>": leaf("fraction", "the fraction of GPU memory the rule applied, under the stack's own name for it "
                               "(vLLM's gpu_memory_utilization, SGLang's mem_fraction_static...)"),
    "kv_tokens_per_rank": leaf("tokens", "KV capacity of one attention rank, as its stack logs it (vLLM's "
                                         "counts the null block no request holds)"),
    "kv_bytes_per_token": leaf("bytes", "KV bytes per token per replica"),
    "weights_gb": leaf("GB", "weights per replica"), "kv_gb": leaf("GB", "KV pool per replica"),
    "total_gb": leaf("GB", "the replica's GPU memory"),
    "kv_window_gb": leaf("GB", "the sliding-window layers' KV per replica, apart from the pool's tokens: "
                               "SGLang's swa_full_tokens_ratio share of its pool, or under TensorRT-LLM every token of "
                               "theirs, as a full-attention layer's",
                         when="the model has sliding-window layers and the stack splits its pool for them"),
    "window_blocks_per_sequence": leaf("blocks", "what each running sequence's sliding-window layers hold of the "
                                                 "pool beside its own tokens' blocks (vLLM's shared pool: its window "
                                                 "in whole blocks, plus one, in every sliding-window group), so the "
                                                 "pool's tokens are full-attention tokens less these windows",
                                       when="the model has sliding-window layers and vLLM's accounting sized the pool"),
}


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
    # Sliding-window layers' KV where a stack splits its pool for them by a ratio (SGLang's hybrid
    # pool; TensorRT-LLM's, every token).
    kv_window_bytes: float = 0.0
    # Whose accounting sized the KV pool, and the fraction it applied (kv_memory.KvBudget).
    rule: str = "vllm"
    fraction: float = 0.9
    knob: str = "gpu_memory_utilization"
    dp: int = 1
    # A speculative draft's weights and KV live outside the pool (kv_memory.draft_in_reserve: SGLang to
    # 0.5.13), not taken from it (costmodel.speculative.speculative_memory).
    draft_in_reserve: bool = False
    # The sliding-window groups that draw their blocks from the pool beside the full-attention
    # layers (vLLM's shared pool: hybrid_kv); None where none or a ratio splits the pool.
    windows: Optional[SlidingGroups] = None
    # Blocks of each attention rank's pool its stack keeps back from requests (KvRule.null_blocks:
    # vLLM's null block), counted in num_blocks as the stack logs its pool.
    null_blocks: int = 0

    @property
    def usable_blocks(self) -> int:
        """The replica's blocks requests can hold: its pool less what each rank keeps back."""
        return self.num_blocks - self.dp * self.null_blocks

    @property
    def usable_rank_blocks(self) -> int:
        """The most one request can hold: its attention rank's pool less what the rank keeps back."""
        return self.rank_blocks - self.null_blocks

    @property
    def window_blocks(self) -> int:
        """Blocks each decoding sequence's sliding-window layers hold of the pool beside its own."""
        return 0 if self.windows is None else self.windows.steady

    @property
    def rank_blocks(self) -> int:
        """One attention-DP rank's blocks: each rank holds its own pool and a request stays on
        its rank, so this is the most one request can hold (``kv_tokens_per_rank`` in blocks)."""
        return self.num_blocks // self.dp

    @property
    def reserve_bytes(self) -> float:
        """Everything that is neither weights nor KV (the full-attention pool or the
        sliding-window layers'): the unused (1 − util) share, activations and non-torch memory."""
        return self.total_bytes - self.weights_bytes - self.kv_capacity_bytes - self.kv_window_bytes

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def rank_running_requests(self, engine: EngineConfig, model: ModelProfile) -> int:
        """How many requests each attention rank of this pool runs at once, as ``engine``'s stack sizes
        them from the rank's share of the pool and its longest request (SGLang's request pool:
        :meth:`EngineConfig.rank_running_requests`), so that a pool's setup and the estimate's scheduler
        cap read one figure."""
        return engine.rank_running_requests(self.kv_capacity_tokens // self.dp, engine.longest_request(model), self.dp)

    def max_concurrent(self, tokens_per_request: int, prompt_tokens: int = 0, cap: int = 0) -> int:
        """Requests of ``tokens_per_request`` tokens that run at once, each holding its blocks and
        windows: where sliding-window groups share the pool, the last is admitted only once its
        uncached prompt of ``prompt_tokens`` fits in every group (at most ``cap`` blocks a group
        where given) beside the others at their largest (vLLM's admission gate,
        :meth:`.hybrid_kv.SlidingGroups.admission`), as a run admits it. Each attention-DP rank
        holds its own requests in its own pool, so the replica runs dp times what one rank's
        usable blocks hold."""
        blocks = math.ceil(tokens_per_request / self.block_size) + self.window_blocks
        pool = self.usable_rank_blocks
        n = pool // blocks if blocks else 0
        if self.windows is not None and prompt_tokens:
            gate = math.ceil(prompt_tokens / self.block_size) + self.windows.admission(prompt_tokens, 0, cap)
            n = min(n, 0 if gate > pool else 1 + (pool - gate) // blocks)
        return n * self.dp

    def describe(self) -> dict:
        """How the pool was sized, as results.json states it beside ``kv_tokens_per_replica``:
        whose rule, the fraction it applied, tokens per attention rank, GB per replica."""
        return {"rule": self.rule, self.knob: self.fraction, "kv_tokens_per_rank": self.kv_capacity_tokens // self.dp,
                "kv_bytes_per_token": self.kv_bytes_per_token, "weights_gb": self.weights_bytes / 1e9,
                "kv_gb": self.kv_capacity_bytes / 1e9, "total_gb": self.total_bytes / 1e9,
                **({"kv_window_gb": self.kv_window_bytes / 1e9} if self.kv_window_bytes else {}),
                **({"window_blocks_per_sequence": self.window_blocks} if self.window_blocks else {})}


def gpu_share(model: ModelProfile, gpu: HardwareProfile, tp: int = 1, weight_dtype: str = "bf16",
              max_num_batched_tokens: int = 8192, max_num_seqs: int = 256, dp: int = 1, ep: int = 1,
              speculative: bool | str = False, expert_storage: float = 1.0, role: str = "",
              chunked_prefill: bool = True) -> GpuShare:
    """What one GPU of the replica holds before its KV, as every stack's accounting reads it
    (:func:`simulator.kv_memory.kv_budget`); :func:`plan_memory` sizes the pool from it, and
    a deployment the stack refuses keeps its (negative) room here."""
    par = Parallelism(tp, dp, ep)
    rest, experts = weight_bytes_per_gpu(model, par, weight_dtype, expert_storage)
    activations = max_num_batched_tokens * activation_bytes_per_token(model, tp)
    blockers = deployment_graph_blockers(model, speculative, dp, role)
    return GpuShare(gpu.hbm_bytes, rest + experts, activations, par.gpus, dp,
                    max_num_batched_tokens, max_num_seqs, speculative, vocab=model.vocab_size,
                    prefill_graphs=sglang_prefill_graph_kind(model), prefill_graph_blockers=blockers, role=role,
                    chunked=chunked_prefill, cuda=gpu.cuda_total_bytes,
                    # (under attention DP TensorRT-LLM's estimate splits no heads: tp_size 1 there)
                    kv_estimate_share=unrounded_kv_share(model, tp) if dp == 1 else 1.0)


def deployment_graph_blockers(model: ModelProfile, speculative: bool | str = False, dp: int = 1, role: str = "",
                              pp: int = 1) -> frozenset[str]:
    """What a deployment of ``model`` is among the conditions an SGLang release may turn its prefill
    graphs off for (:data:`simulator.kv_memory.SGLANG_PREFILL_GRAPH_BLOCKERS`): the model's own and
    the deployment's (a draft, DP attention, a disaggregated pool, pipeline stages)."""
    return sglang_prefill_graph_blockers(model) | {
        b for b, holds in (("speculative", speculative), ("dp_attention", dp > 1), ("disaggregated", role),
                           ("pp", pp > 1)) if holds}


def prefill_graph_tokens(model: ModelProfile, gpu: HardwareProfile, kv_memory: Optional[KvMemory],
                         max_num_batched_tokens: int, tp: int = 1, dp: int = 1, speculative: bool | str = False,
                         role: str = "", pp: int = 1, chunked_prefill: bool = True) -> int:
    """The most tokens of an iteration holding prompt tokens the stack replays a captured CUDA graph
    for, as its memory accounting decides (``engine.graph_max_tokens`` left unset): SGLang's piecewise
    prefill graphs where its release captures them for this deployment
    (:func:`simulator.kv_memory.sglang_prefill_graph_tokens`), else none (0)."""
    if kv_memory is None or kv_memory.rule != "sglang":
        return 0
    share = GpuShare(gpu.hbm_bytes, 0.0, 0.0, tp * dp, dp, max_num_batched_tokens, 0, speculative,
                     stages=pp, prefill_graphs=sglang_prefill_graph_kind(model),
                     prefill_graph_blockers=deployment_graph_blockers(model, speculative, dp, role, pp), role=role,
                     chunked=chunked_prefill)
    return sglang_prefill_graph_tokens(share, kv_memory)


def plan_memory(model: ModelProfile, gpu: HardwareProfile, tp: int = 1, weight_dtype: str = "bf16",
                kv_dtype: str = "bf16", gpu_memory_utilization: float = 0.9,
                max_num_batched_tokens: int = 8192, max_num_seqs: int = 256, block_size: int = 16,
                dp: int = 1, ep: int = 1, kv_memory: Optional[KvMemory] = None,
                speculative: bool | str = False, expert_storage: float = 1.0,
                role: str = "", chunked_prefill: bool = True) -> MemoryPlan:
    """Divide one replica's ``tp × dp`` GPUs' memory as its stack does
    (``kv_memory``; vLLM's accounting without one); raise a clear error when
    the model cannot fit. ``speculative``: a draft decodes beside the
    model, ``"mtp"`` its own MTP layers, ``"draft"`` a separate model
    (SGLang reserves for it, by kind; its weights and KV are taken later, by
    :func:`simulator.costmodel.speculative.speculative_memory`).
    ``expert_storage``: the routed experts' memory against the checkpoint's
    shape where the stack pads them (the cost model's ``expert_storage``).
    ``role``: "prefill" the pool prefills for another, "decode" it decodes
    another's prompts ("" neither): SGLang's reserve and prefill graphs
    follow it (:attr:`simulator.kv_memory.GpuShare.role`). ``chunked_prefill`` false: prompts run
    whole (SGLang's --chunked-prefill-size -1, which captures no prefill graphs).

    Each of the ``dp`` attention ranks holds the non-expert weights split
    ``tp`` ways, bar those every GPU keeps whole (MLA's down-projections
    and their norms, MoE routers, K/V heads fewer than ``tp``:
    :func:`.parallelism.tp_whole_weight_bytes`), and its own sequences' KV;
    the routed experts are split over all GPUs (:mod:`.parallelism`). Every GPU gets the same KV budget from
    the stack's rule; the replica's KV capacity is the sum of its GPUs'.
    Sliding-window layers keep at most a window per sequence: under vLLM's
    accounting they draw it from the same pool as the full-attention layers,
    nothing set aside, each running sequence holding
    :attr:`MemoryPlan.window_blocks` of it (:mod:`.hybrid_kv`); a stack that
    splits its pool by a ratio instead (SGLang's hybrid pool, TensorRT-LLM's
    one pool at a ratio of 1: :func:`.kv_memory.swa_window_share`) gives them
    that share of it.
    """
    has_full_attention(model)
    par = Parallelism(tp, dp, ep)
    gpus = par.gpus
    share = gpu_share(model, gpu, tp, weight_dtype, max_num_batched_tokens, max_num_seqs, dp, ep, speculative,
                      expert_storage, role, chunked_prefill)
    budget = kv_budget(share, kv_memory, gpu_memory_utilization)
    swa = swa_window_share(kv_memory, model.num_sliding_layers, model.num_full_attention_layers)
    window = 0.0 if swa is None else max(budget.kv_bytes, 0.0) * swa
    kv_per_token = replica_kv_bytes_per_token(model, par, kv_dtype)
    kv_cap = (budget.kv_bytes - window) * gpus
    cap_tokens = rank_token_cap(kv_memory)
    if cap_tokens is not None:
        kv_cap = min(kv_cap, cap_tokens * dp * kv_per_token)
    if kv_cap <= kv_per_token * block_size:
        raise LlmsimError(_no_room(model, gpu, par, weight_dtype, share, budget))
    num_blocks = pool_blocks(kv_cap, kv_per_token * block_size, dp)
    return MemoryPlan(gpu.hbm_bytes * gpus, budget.usable * gpus, share.weights * gpus, budget.activation * gpus,
                      share.runtime * gpus, kv_cap, kv_per_token, block_size, num_blocks, window * gpus,
                      (kv_memory or KvMemory()).rule, budget.fraction, budget.knob, dp, draft_in_reserve(kv_memory),
                      sliding_groups(model, block_size) if swa is None else None, null_blocks(kv_memory))


def pool_blocks(kv_bytes: float, block_bytes: float, dp: int) -> int:
    """A replica's KV blocks from its pool's bytes: each of its ``dp`` attention ranks cuts its own
    share into whole blocks (vLLM's engine cores, SGLang's and TensorRT-LLM's ranks each size their
    own pool), so the replica holds dp whole pools, not its summed bytes cut once (up to dp - 1
    blocks more)."""
    return dp * int(kv_bytes / dp // block_bytes)


def null_blocks(kv_memory: Optional[KvMemory]) -> int:
    """Blocks of each rank's pool the named stack keeps back (none for llmsim's generic engine,
    which sizes its pool as vLLM does but keeps no null block)."""
    return 0 if kv_memory is None else RULES[kv_memory.rule].null_blocks


# Model types of the architectures SGLang's torch.compile prefill graphs (0.5.10-0.5.14) list as
# unsupported (server_args.py _handle_piecewise_cuda_graph with model_config.py
# piecewise_cuda_graph_disabled_model_archs: Qwen3Next, GlmMoeDsa (GLM-5)) ...
SGLANG_LISTED_ARCH_TYPES = frozenset({"qwen3_next", "glm_moe_dsa"})
# ... and of the multimodal architectures the checkpoints of these types are served as
# (Qwen3_5MoeForConditionalGeneration, Llama4ForConditionalGeneration,
# Gemma3ForConditionalGeneration), which every release turns them off for bar those the breakable
# backend allows from 0.5.16 (model_config.py multimodal_breakable_cuda_graph_supported_model_archs:
# Qwen3.5, to 0.5.23). A text model of another type served through a multimodal wrapper
# (Kimi-K2.5) is not told apart.
SGLANG_MULTIMODAL_TYPES = frozenset({"qwen3_5_moe_text", "llama4_text", "gemma3"})
SGLANG_BREAKABLE_MULTIMODAL_TYPES = frozenset({"qwen3_5_moe_text"})
# Model types with DeepSeek sparse attention (an indexer: model_config.py is_deepseek_dsa, index_topk set),
# whose MLA the breakable backend of 0.5.17 keeps prefill graphs for.
SGLANG_DSA_TYPES = frozenset({"deepseek_v32", "glm_moe_dsa"})


def sglang_prefill_graph_kind(model: ModelProfile) -> str:
    """Which piecewise prefill graphs SGLang captures for ``model`` where it captures any
    (:attr:`simulator.kv_memory.GpuShare.prefill_graphs`): its reserve differs for MLA models
    and Llama-2 (whose graphs stop at 4,096 tokens: server_args.py reads "llama-2" in the
    model path)."""
    if model.is_mla:
        return "mla"
    return "llama-2" if "llama-2" in model.name.lower() else "mha"


def sglang_prefill_graph_blockers(model: ModelProfile) -> frozenset[str]:
    """What ``model`` is among the conditions an SGLang release may turn its prefill graphs off for
    (:data:`simulator.kv_memory.SGLANG_PREFILL_GRAPH_BLOCKERS`), the deployment's apart."""
    out = set()
    if model.is_mla:
        out |= {"mla"} | ({"mla_without_dsa"} if model.model_type not in SGLANG_DSA_TYPES else set())
    if model.model_type in SGLANG_LISTED_ARCH_TYPES:
        out.add("listed_architecture")
    if model.model_type in SGLANG_MULTIMODAL_TYPES:
        out |= {"multimodal"} | ({"multimodal_unlisted"} if model.model_type not in SGLANG_BREAKABLE_MULTIMODAL_TYPES
                                 else set())
    return frozenset(out)


def has_full_attention(model: ModelProfile) -> ModelProfile:
    """``model``, refused when every layer is sliding-window attention (Mistral-7B-v0.1's shape): llmsim
    counts a pool in the tokens its full-attention layers keep, windows apart, and a model without any
    would hold an unbounded number of them."""
    if model.num_hidden_layers and not model.num_full_attention_layers:
        raise LlmsimError(f"every layer of {model.name} is sliding-window attention ({model.sliding_window:,} "
                          f"tokens): llmsim sizes a KV pool by the tokens its full-attention layers keep and cannot "
                          f"model one without any", key_path="model")
    return model


def _no_room(model: ModelProfile, gpu: HardwareProfile, par: Parallelism, weight_dtype: str, g: GpuShare,
             b: KvBudget) -> str:
    """Why no KV block fits, in the stack's own terms, per replica."""
    n, tp, dp = par.gpus, par.tp, par.dp
    shape = f"{tp}×" if dp == 1 else f"{n} (tp {tp} × dp {dp})"
    rule = {"gpu_memory_utilization": "vLLM", "mem_fraction_static": "SGLang",
            "free_gpu_memory_fraction": "TensorRT-LLM"}[b.knob]
    weights = f"weights {g.weights * n / 1e9:.1f} GB ({weight_dtype})"
    if b.knob == "gpu_memory_utilization":
        what = (f"{weights} + activations and runtime {b.reserve * n / 1e9:.1f} GB vs usable "
                f"{b.usable * n / 1e9:.1f} GB ({n} × {g.cuda_total / 1e9:.1f} GB CUDA reports × "
                f"gpu_memory_utilization {b.fraction})")
    elif b.knob == "mem_fraction_static":
        what = (f"{weights} vs usable {b.usable * n / 1e9:.1f} GB for weights and KV under "
                f"mem_fraction_static {b.fraction} of the {(g.cuda_total - g.runtime) * n / 1e9:.1f} GB free at "
                f"start"
                + (f" ({b.why})" if b.why else ""))
    else:
        left = (g.cuda_total - g.weights - b.activation - g.runtime) * n
        what = (f"{weights} + activations and runtime {(b.activation + g.runtime) * n / 1e9:.1f} GB leave "
                f"{left / 1e9:.1f} GB of {n} × {g.cuda_total / 1e9:.1f} GB CUDA reports, of which "
                f"free_gpu_memory_fraction {b.fraction} goes to the KV cache")
    knob = "gpu_memory_utilization" if b.knob == "gpu_memory_utilization" else f"kv_memory.fraction ({b.knob})"
    # The profiling run's activations alone past the GPU: the token budget is the slip, not the fleet.
    budget = (f"; the {g.budget:,}-token budget's activations alone take {g.activation * n / 1e9:,.1f} GB: "
              f"lower engine.max_num_batched_tokens" if g.activation > g.cuda_total else "")
    return (f"{model.name}{DOES_NOT_FIT}{shape} {gpu.name} as {rule} sizes its KV cache: {what}; use more "
            f"GPUs (tp, dp with ep), a smaller weight dtype, a larger GPU or a larger engine.{knob}{budget}")


def blocks_override(mem: MemoryPlan, blocks: Optional[int]) -> MemoryPlan:
    """``num_gpu_blocks_override`` (vLLM's flag: the profiling run's block
    count replaced) as the pool's KV capacity, within what the GPUs hold
    beside the weights: vLLM allocates the blocks it is told, and more than
    the memory has fails at start-up, not as a larger cache. Each attention-DP
    rank's engine core applies it to its own pool (v1/engine/core.py
    ``_initialize_kv_caches``, kv_cache_utils.py ``may_override_num_blocks``) and the
    client sums the ranks' blocks (core_client.py), so a replica holds it × dp.
    The pool's bytes are the blocks' own: memory the override leaves unallocated
    is no KV (it joins :attr:`MemoryPlan.reserve_bytes`)."""
    if not blocks:
        return mem
    per_block = mem.block_size * mem.kv_bytes_per_token
    room = (mem.total_bytes - mem.weights_bytes) / mem.dp   # one rank's GPUs
    if blocks * per_block > room:
        each, whose = ((f" on each of the {mem.dp} attention-DP ranks", "a rank's") if mem.dp > 1
                       else ("", "the replica's"))
        raise LlmsimError(f"{blocks:,} blocks of {mem.block_size} tokens{each} hold {blocks * per_block / 1e9:,.1f} GB "
                          f"of KV, more than the {room / 1e9:,.1f} GB {whose} GPUs have beside its weights (at most "
                          f"{int(room // per_block):,} blocks)", key_path="engine.num_gpu_blocks_override")
    return replace(mem, num_blocks=blocks * mem.dp, kv_capacity_bytes=blocks * mem.dp * per_block)


def startup_pool(mem: MemoryPlan, blocks: Optional[int], override_checked: bool,
                 check: Callable[[MemoryPlan], None]) -> MemoryPlan:
    """The pool a run holds, from the measured pool ``mem`` and ``num_gpu_blocks_override``,
    with ``check`` (the start-up check, which may refuse) called on the pool the release
    checks and in its order: vLLM to 0.20.0 checks the pool it measured, then applies the
    override (kv_cache_utils.py ``get_kv_cache_configs``, then
    ``get_kv_cache_config_from_groups``), so a context too long is refused before an
    override too large; from 0.20.1 it checks the override's pool
    (:attr:`.EngineConfig.override_checked`). ``run`` and ``estimate`` both go through it."""
    if override_checked:
        mem = blocks_override(mem, blocks)
        check(mem)
        return mem
    check(mem)
    return blocks_override(mem, blocks)


def context_room(mem: MemoryPlan, kv_memory: Optional[KvMemory], model: ModelProfile, gpu: str, gpus: int,
                 max_model_len: int, in_flight: int, *, overridden: bool = False) -> Optional[str]:
    """Why the stack would not start because one request of ``max_model_len``
    tokens does not fit an attention rank's KV pool, in its terms, or None: a
    rule that starts anyway (:attr:`~.kv_memory.KvRule.needs_one_context`), or
    no ``kv_memory`` named (llmsim's generic engine sizes its pool as vLLM
    does but is no vLLM server that would refuse to start).
    vLLM checks it once the pool is sized, whatever the traffic: a deployment
    whose model's context does not fit sets ``--max-model-len``. The request's
    sliding-window layers take their blocks from the same pool, as many as it
    can hold in them with ``in_flight`` tokens allocated past the window
    (kv_cache_utils.py ``_max_memory_usage_bytes_from_groups`` over each group's
    ``max_memory_usage_bytes``: :meth:`.hybrid_kv.SlidingGroups.request_bound`).
    ``overridden``: the pool is ``num_gpu_blocks_override``'s (:attr:`.EngineConfig.override_checked`),
    which more GPUs or memory would not grow, so the message asks for more blocks instead.
    A release that holds the null block back (:attr:`.kv_memory.KvMemory.null_block_held`)
    checks one block fewer than the pool has."""
    if kv_memory is None or not RULES[kv_memory.rule].needs_one_context:
        return None
    rank_blocks = mem.rank_blocks - int(kv_memory.null_block_held)
    windows = mem.windows

    def blocks(tokens: int) -> int:
        own = math.ceil(tokens / mem.block_size)
        return own if windows is None else own + windows.pool_blocks(windows.request_bound(in_flight, tokens))

    need = blocks(max_model_len)
    if need <= rank_blocks:
        return None
    # the longest that fits, as vLLM's estimate_max_model_len searches for it
    lo, hi = 0, max_model_len
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if blocks(mid) <= rank_blocks else (lo, mid - 1)
    held = lo
    per_rank = "" if mem.dp == 1 else " per attention rank"
    gb = lambda tokens: f"{tokens * mem.kv_bytes_per_token / 1e9:,.2f} GB"  # noqa: E731
    beside = " beside what its sliding-window layers hold of it" if windows is not None else ""
    beside += " beside the null block vLLM holds back" if kv_memory.null_block_held else ""
    return (f"{model.name}'s {max_model_len:,}-token context{DOES_NOT_FIT}{gpus}× {gpu} as vLLM sizes its KV "
            f"cache: one request of max_model_len needs {gb(need * mem.block_size)} of KV{per_rank}, the pool "
            f"holds {held:,} tokens ({gb(held)}){beside}, "
            f"and vLLM refuses to start ('To serve at least one request with the model's max seq len'); set "
            f"engine.max_model_len (vLLM's --max-model-len) to at most {held:,}, or "
            + ("raise engine.num_gpu_blocks_override, the pool vLLM checks" if overridden else
               "use more GPUs, an fp8 engine.kv_dtype or a larger gpu_memory_utilization"))


def activation_bytes_per_token(model: ModelProfile, tp: int) -> float:
    """Activation memory per token of the profiling run on one GPU of a
    ``tp`` group (16-bit): the estimate every stack's rule reserves for a
    full token budget, the same for each stage of a pipeline."""
    h, ffn = model.hidden_size, _mlp_width(model)
    return (2 * ffn / tp + 4 * h + (model.q_dim + 2 * model.kv_dim) / tp) * 2.0


def _mlp_width(model: ModelProfile) -> int:
    """Widest MLP activation per token: a dense layer's FFN, or an MoE
    layer's top-k experts plus its shared expert."""
    if not model.is_moe:
        return model.intermediate_size
    moe = model.topk * model.expert_ffn + model.shared_ffn
    return max(moe, model.dense_ffn) if model.num_dense_layers else moe
