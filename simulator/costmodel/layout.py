"""A step's ops for models beyond the plain dense transformer, on one replica.

:class:`~.step.CostModel` prices a dense model with plain tensor
parallelism itself. A model with mixture-of-experts layers, MLA attention
or sliding-window layers, or a replica with attention data parallelism
(``dp``) or expert parallelism (``ep``), is priced here, layer kind by
layer kind, with the same memoised-per-token-count structure:

* **attention projections** — GQA: the fused QKV and output GEMMs; MLA:
  :func:`.mla.mla_projection_time` (down-projections, q up-projection,
  output), on each dp rank's tokens, split ``tp`` ways;
* **dense layers** (``first_k_dense_replace`` and the like) and **shared
  experts**: dense MLP GEMMs on each rank's tokens, split ``tp`` ways;
* **routed experts**: :func:`.moe.moe_layer_time` over the whole
  replica's tokens (every GPU holds experts all ranks route to), experts
  split ``ep`` ways and ``moe_tp`` ways by width; their gated activation is
  elementwise work like a dense MLP's;
* **communication**: the attention rank's all-reduces over ``tp``; an MoE
  layer's reduction over ``moe_tp``; for ``ep > 1`` the all-to-all dispatch
  and combine (:mod:`.alltoall`);
* **attention kernels**: each dp rank attends only its own sequences
  (the busiest rank sets the time: the most decodes any rank runs, with
  their share of the batch's context, and the prompt chunks of the rank
  whose chunks take longest, each chunk on the rank its request was placed
  on, :class:`.rank_load.RankLoad`; without a placement, ⌈B/dp⌉ decodes and
  chunks dealt round-robin); a sliding-window layer's query attends at most
  ``sliding_window`` keys, in a prompt's chunk as in decode (decode charges
  each sequence a full window, exact once its context exceeds it); MLA prefill
  up-projects the cached latent (:func:`.mla.mla_prefill_flops_bytes`),
  MLA decode attends the latent directly (:func:`.mla.mla_decode_per_context`)
  after two absorbed batched GEMMs per step.

dp ranks run in lock step (the MoE layers join them every layer), so the
step lasts as long as its busiest rank: a decode batch's share is rounded
up, ⌈B/dp⌉, and a prompt's chunk runs whole on the rank that holds its
request (each rank schedules its own requests: vLLM's DP engine cores,
SGLang's DP schedulers, TensorRT-LLM's attention-DP ranks), so the rank
with the most tokens carries them through every non-expert layer and sends
their routed copies (:meth:`LayoutOps.busiest_tokens`); an
even split ⌈tokens/dp⌉ priced one 8,192-token DeepSeek-V3 prompt on
8 ranks as 1,024 tokens a rank.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from ..dtypes import BYTES, EXPERT_ONLY_DTYPES, FP4_ONLY_DTYPES, linear_dtype
from ..errors import LlmsimError
from ..profiles.hardware import HardwareProfile, RooflineParams
from ..profiles.model import ModelProfile
from . import components as C
from . import scalar
from .alltoall import alltoall_time
from .rank_load import RankLoad
from .mla import (MlaShape, mla_decode_fixed, mla_decode_per_context, mla_decode_per_seq, mla_decode_time,
                  mla_module_decode_time, mla_prefill_flops_bytes, mla_token_time, mla_projection_time)
from .moe import MoeShape, dtype_info, expected_active_experts, moe_layer_time, running_max_layer_time
from .roofline import blend

if TYPE_CHECKING:
    from .step import CostModel

_US = 1e-6
_BF16 = 2.0
_OTHER_HIDDEN_RW = 10.0   # as in step.py: norms, residuals, rotary, per token per layer
_OTHER_FFN_RW = 3.0       # gated activation: read gate and up, write one
# Rows of a router GEMM's output tile, for the memory ramp of its narrow
# width (components.gemm_roofs ramp_rows): CUTLASS's 128-row tiles.
ROUTER_TILE_ROWS = 128.0

# A pool's weight_dtype → the quantised GEMM format of MoE experts and MLA
# projections (simulator.dtypes.QUANT_FORMATS). int8 (W8A8) is priced with the
# fp8 kernels: the same bytes, and the same tensor-core peak on Hopper and Blackwell.
_FORMATS = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "int8": "fp8", "int4": "int4_wo", "nvfp4": "nvfp4",
            "mxfp4": "w4a8"}


def needs_layout(model: ModelProfile, dp: int, ep: int) -> bool:
    """Whether a model/replica is outside what the plain dense path prices."""
    return model.is_moe or model.is_mla or model.num_sliding_layers > 0 or dp > 1 or ep > 1


def gemm_format(weight_dtype: str, checkpoint_dtype: str | None = None, fp4_units: bool = True,
                mxfp4_activation: str | None = None) -> str:
    """The kernel family a pool's experts and MLA projections run. fp8 weights
    of a block-scaled fp8 checkpoint run the block-fp8 kernels (what vLLM
    loads for DeepSeek and Qwen3-FP8); fp8 from a 16-bit checkpoint is vLLM's
    online per-tensor fp8, a different and (measured) slower kernel. MXFP4
    without FP4 tensor cores runs weight-only (W4A16, the Hopper kernels of
    the measured table); with them, the stack's choice of activation
    (``mxfp4_activation``): bf16 is W4A16 again (vLLM without
    VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8, ``get_mxfp4_backend`` in
    vllm/model_executor/layers/quantization/mxfp4.py), mxfp8 (the default)
    W4A8 (TensorRT-LLM's Blackwell path, and vLLM's gpt-oss recipe)."""
    if weight_dtype == "mxfp4" and (not fp4_units or mxfp4_activation == "bf16"):
        return "w4a16_mxfp4"
    fmt = _FORMATS.get(weight_dtype)
    if fmt is None:
        raise LlmsimError(f"weight_dtype {weight_dtype} is not modelled for MoE experts and MLA projections "
                          f"(expected one of {', '.join(_FORMATS)})")
    if fmt == "fp8" and checkpoint_dtype == "fp8_block":
        return "fp8_block"
    return fmt


def _or_default(p: RooflineParams, fallback: RooflineParams) -> RooflineParams:
    """A calibration entry, or ``fallback`` where it was never fitted (left at the roofline defaults)."""
    return fallback if p == RooflineParams() else p


def _same_capability_kernel(gpu: HardwareProfile, fmt: str, ep: int):
    """The MoE kernel parameters a built-in GPU of ``gpu``'s compute capability measured for
    ``fmt``; None where none did (or the GPU states no capability)."""
    from ..profiles.hardware import builtin_hardware

    if gpu.sm_version is None:
        return None
    return next((p for g in builtin_hardware().values() if g.sm_version == gpu.sm_version
                 and (p := g.calibration.moe_for(fmt, ep)) is not None), None)


class LayoutOps:
    """Per-token-count and attention costs of one replica (see module docstring)."""

    def __init__(self, cm: "CostModel"):
        m, par, gpu, cal = cm.model, cm.par, cm.gpu, cm.cal
        self.cm, self.model = cm, m
        self.tp, self.dp, self.ep, self.gpus, self.moe_tp = par.tp, par.dp, par.ep, par.gpus, par.moe_tp
        self.layers = L = m.num_hidden_layers
        self.n_moe, self.n_dense = m.num_moe_layers, m.num_dense_layers
        self.n_slide = m.num_sliding_layers
        self.n_full = L - self.n_slide
        self.window = m.sliding_window or 0
        h, tp = m.hidden_size, par.tp
        gate = 2 if m.is_gated else 1
        fp4 = gpu.has_unit("fp4")
        # Routed experts run the pool's format; MLA projections that of its other linear layers.
        self.fmt = (gemm_format(cm.weight_dtype, m.checkpoint_dtype, fp4, cm.mxfp4_activation)
                    if (m.is_moe or m.is_mla) else "")
        self.proj_fmt = gemm_format(linear_dtype(cm.weight_dtype), m.checkpoint_dtype, fp4) if m.is_mla else ""
        self.attn_gemms = [] if m.is_mla else cm.layer_gemms[:2]
        self.dense_gemms = [(gate * m.dense_ffn // tp, h), (h, m.dense_ffn // tp)] if self.n_dense else []
        self.shared_gemms = [(gate * m.shared_ffn // tp, h), (h, m.shared_ffn // tp)] if m.shared_ffn else []
        self.moe = (MoeShape(h, m.expert_ffn, m.num_experts or 1, m.topk, par.moe_tp, par.ep, m.is_gated)
                    if m.is_moe else None)
        # The router: a hidden × experts GEMM every MoE layer runs on every
        # token of its rank before the experts (replicated over TP). The
        # measured MoE rows start from given router logits, so it is priced
        # here, as a narrow GEMM (ROUTER_TILE_ROWS) at the bf16 rate (an
        # fp32 router's prefill FLOPs are understated: the shared data has
        # no fp32 peak).
        self.router = ((m.num_experts, h, m.router_weight_bytes)
                       if m.is_moe and (m.num_experts or 0) > 1 else None)
        # With its experts split across GPUs a stack may run another kernel
        # (calibration.moe_ep), as vLLM does for block-FP8 on Hopper.
        self.moe_params = cal.moe_for(self.fmt, par.ep) or _dense_gemm_for(self.fmt, cal.gemm, gpu)
        # An MXFP4 checkpoint's quant method creates the experts' parameters at
        # the kernel's padded shape and loads the checkpoint into them (vLLM and
        # SGLang mxfp4.py ``create_weights``: intermediate and hidden rounded up
        # to 256 for Blackwell's FlashInfer TRT-LLM kernels, the intermediate to
        # 64 for Hopper's Triton ones), so the GPU holds the padded experts.
        # Other formats' methods store the checkpoint's shape. The kernel is
        # the GPU's, read from its measured calibration even when this model
        # prices a roofline (the memory is the stack's, not the fit's), else
        # that of a GPU of the same compute capability, by which the stacks
        # pick it (an H100 PCIe runs the H100 SXM's). Where the engine states
        # the stack's own layout (engine.mxfp4_expert_layout: the kernel a
        # release runs, its re-laid tiles and kept scales), that decides.
        self.expert_storage = 1.0
        layout = cm.mxfp4_expert_layout
        if self.moe is not None and cm.weight_dtype == "mxfp4" and layout is not None:
            self.expert_storage = layout.storage_scale(h, self.moe.local_intermediate, m.is_gated,
                                                       bool(m.expert_bias_params))
        elif self.moe is not None and cm.weight_dtype in EXPERT_ONLY_DTYPES:
            stored = gpu.calibration.moe_for(self.fmt, par.ep) or _same_capability_kernel(gpu, self.fmt, par.ep)
            self.expert_storage = self.moe.stored_scale(stored) if stored is not None else 1.0
        self._routed_max = (running_max_layer_time(self.moe, self.fmt, gpu, self.moe_params)
                            if self.moe is not None and getattr(self.moe_params, "pad_row_cost", 0.0) else None)
        self.topk = m.topk
        # Elementwise bytes per rank token (norms, residuals, dense and shared
        # activations) and per routed pair landing on a GPU (expert
        # activation; unless a MoE calibration of this format prices it: its
        # rows time the fused kernels, activation included).
        ffn_sum = self.n_dense * m.dense_ffn + self.n_moe * m.shared_ffn
        self.other_rank = (L * _OTHER_HIDDEN_RW * h + _OTHER_FFN_RW * ffn_sum / tp) * _BF16
        priced = self.fmt in cal.moe
        self.other_pair = (self.n_moe * _OTHER_FFN_RW * m.expert_ffn / par.moe_tp * _BF16
                           if m.is_moe and not priced else 0.0)
        self.mla = None
        if m.is_mla:
            self.mla = MlaShape(m.num_attention_heads // tp, m.kv_lora_rank or 0, m.qk_rope_head_dim or 0,
                                m.qk_nope_head_dim or 0, m.v_head_dim or 0, m.q_lora_rank or 0, h)
            self.mla_proj = cal.mla_projection.get(self.proj_fmt) or _dense_gemm_for(self.proj_fmt, cal.gemm, gpu)
            self.mla_prefill = _or_default(cal.mla_prefill, cal.attention_prefill)
            self.mla_decode = _or_default(cal.mla_decode, cal.attention_decode)
            self.mla_rate_c = cm.peak_attn * self.mla_prefill.eta_compute
            self.mla_rate_m = cm.hbm_bw * self.mla_prefill.eta_memory
            # mla_prefill_flops_bytes is FLOPs ∝ query-key pairs and bytes affine
            # in new and cached tokens: read its coefficients once, so a step
            # prices its chunks with three multiply-adds each.
            f10, b10 = mla_prefill_flops_bytes(1, 0, self.mla, cm.kv_bytes)
            _, b11 = mla_prefill_flops_bytes(1, 1, self.mla, cm.kv_bytes)
            self.mla_flops_per_pair, self.mla_bytes_per_new, self.mla_bytes_per_cached = f10, b10, b11 - b10
        if par.ep > 1:   # fails here, not in the hot path, when the network is not described
            self.alltoall(1)
        self._decode_extra: dict[int, float] = {}
        self._kv_up: dict[int, float] = {}
        self.decode_rate, self.decode_per_seq, self.decode_fixed = self.decode_parts()

    def rank(self, count: int) -> int:
        """The busiest dp rank's share of ``count`` tokens or sequences spread evenly."""
        return -(-count // self.dp)

    def dealt(self, chunks: Sequence[tuple[int, int]], load: RankLoad | None = None
              ) -> list[Sequence[tuple[int, int]]]:
        """A step's prompt chunks by dp rank, each whole on one (the ranks that hold one; none for a
        step without chunks): on the rank ``load`` places it, else dealt round-robin (a step priced
        without the engine's placement). Every per-rank price of a step reads this one deal."""
        if load is not None:
            return list(load.chunks_by_rank(chunks))
        return [chunks[i::self.dp] for i in range(min(self.dp, len(chunks)))]

    def busiest_tokens(self, chunks: Sequence[tuple[int, int]], decode_batch: int,
                       load: RankLoad | None = None) -> int:
        """The tokens of the busiest dp rank of a step: with ``load``, the most any rank runs of its
        own chunks and decodes; else the chunks as :meth:`dealt` deals them plus ⌈B/dp⌉ decodes."""
        if load is not None:
            return load.busiest_tokens(chunks)
        prefill = max((sum(c[0] for c in rank) for rank in self.dealt(chunks)), default=0)
        return prefill + self.rank(decode_batch)

    # --- per token count (the CostModel memoises their sum) ------------------
    def _gemms(self, m: int, shapes) -> float:
        return sum(self.cm.linear_gemm(m, n, k) for n, k in shapes)

    def routed_time(self, tokens: int) -> float:
        """All MoE layers' routed experts for the replica's ``tokens``."""
        if self.moe is None or tokens <= 0:
            return 0.0
        if self._routed_max is not None:
            return self.n_moe * self._routed_max(tokens)
        return self.n_moe * float(moe_layer_time(tokens, self.moe, self.fmt, self.cm.gpu, self.moe_params))

    def linear_time(self, tokens: int, r: int | None = None) -> float:
        """The linear layers of a step of ``tokens`` on the replica, ``r`` of them on the busiest
        dp rank (default: an even split)."""
        if tokens <= 0:
            return 0.0
        r = self.rank(tokens) if r is None else r
        if self.mla is not None:
            attn = float(mla_projection_time(r, self.mla, self.cm.gpu, self.mla_proj, self.proj_fmt))
        else:
            attn = self._gemms(r, self.attn_gemms)
        return (self.layers * attn + self.n_dense * self._gemms(r, self.dense_gemms)
                + self.n_moe * (self._gemms(r, self.shared_gemms) + self.router_time(r)) + self.routed_time(tokens))

    def router_time(self, tokens: int) -> float:
        """One MoE layer's router GEMM over one rank's ``tokens``."""
        if self.router is None or tokens <= 0:
            return 0.0
        cm = self.cm
        n, k, wbytes = self.router
        t = C.gemm_time(tokens, n, k, cm.peak_attn, cm.hbm_bw, cm.cal.gemm, wbytes, wbytes, cm.gpu.num_sms,
                        ROUTER_TILE_ROWS)
        if tokens > ROUTER_TILE_ROWS:   # more rows of tiles never make the GEMM faster than one row of them
            t = max(t, self.router_time(int(ROUTER_TILE_ROWS)))
        return float(t)

    def alltoall(self, tokens: int) -> float:
        """Dispatch (activations in the GEMM input format) plus combine (bf16) of one MoE layer of
        ``tokens`` spread evenly over the replica (the busiest rank's tokens × dp for its sends)."""
        cm = self.cm
        p = cm.cal.allreduce
        args = (tokens, self.gpus, self.ep, self.topk, self.model.hidden_size)
        rest = (cm.gpu, p.custom_eta_bandwidth, p.custom_latency_us)
        return alltoall_time(*args, dtype_info(self.fmt).act_bytes, *rest) + alltoall_time(*args, _BF16, *rest)

    def comm_time(self, tokens: int, r: int | None = None) -> float:
        if tokens <= 0:
            return 0.0
        cm, h = self.cm, self.model.hidden_size
        r = self.rank(tokens) if r is None else r

        def allreduce(n_tokens: float, group: int) -> float:
            return float(C.allreduce_time(n_tokens * h * _BF16, group, cm.group_bw(group), cm.cal.allreduce))

        t = (self.layers + self.n_dense) * allreduce(r, self.tp)
        if self.model.tp_qk_norm and self.tp > 1:   # the q and k variances, fp32, per token and layer
            t += self.layers * float(C.allreduce_time(r * 2 * 4.0, self.tp, cm.group_bw(self.tp), cm.cal.allreduce))
        if self.n_moe:
            # Without ep the MoE group spans every rank's tokens; with it, a
            # GPU reduces only the pairs routed to it.
            moe_tokens = tokens if self.ep == 1 else tokens * self.topk / self.ep
            # the busiest rank's GPUs send its tokens' copies: the phase lasts as long as they do
            t += self.n_moe * (allreduce(moe_tokens, self.moe_tp) + self.alltoall(max(tokens, r * self.dp)))
        return t

    def other_time(self, tokens: int, r: int | None = None) -> float:
        if tokens <= 0:
            return 0.0
        p = self.cm.cal.other
        pairs = tokens * self.topk / self.ep
        nbytes = (self.rank(tokens) if r is None else r) * self.other_rank + pairs * self.other_pair
        return nbytes / (self.cm.hbm_bw * p.eta_memory) + self.layers * p.fixed_us * _US

    def lm_head_seqs(self, seqs: int) -> int:
        return self.rank(seqs)

    # --- attention ---------------------------------------------------------------
    def prefill_attention_time(self, chunks: Sequence[tuple[int, int]], load: RankLoad | None = None) -> float:
        if self.dp == 1 or len(chunks) == 1:
            return self._prefill_rank(chunks)
        return max(self._prefill_rank(rank) for rank in self.dealt(chunks, load))

    def rank_attention_time(self, chunks: Sequence[tuple[int, int]], batch: int, context: float,
                            load: RankLoad) -> float:
        """The attention kernels of a step whose ``batch`` decodes (``context`` attended in all) and
        prompt chunks ``load`` places by rank: the rank whose own chunks and decodes, with its share
        of the context, take longest. Each rank attends only its own sequences, so where one rank
        prefills while others decode (SGLang's prefill-only batches under attention DP) the step
        waits for the longer of the two, not for both."""
        groups: dict[int, list[tuple[int, int]]] = {}
        for c, r in zip(chunks, load.chunk_ranks):
            groups.setdefault(r, []).append(c)
        worst = 0.0
        for r, decodes in enumerate(load.decodes):
            t = self._prefill_rank(groups[r]) if r in groups else 0.0
            if decodes:
                rest, rate = self.decode_coefficients(batch, decodes)
                t += rest + rate * context
            worst = max(worst, t)
        return worst

    def _prefill_rank(self, chunks: Sequence[tuple[int, int]]) -> float:
        cm = self.cm
        if self.mla is not None:
            return self.layers * self._mla_prefill(chunks)
        p = cm.cal.attention_prefill
        rate_c, rate_m = cm.peak_attn * p.eta_compute, cm.hbm_bw * p.eta_memory
        shape = (cm.heads, cm.kv_heads, cm.head_dim, cm.kv_bytes)
        t = self.n_full * scalar.prefill_attention(chunks, *shape, rate_c, rate_m, p.sharpness) if self.n_full else 0.0
        if self.n_slide:
            capped = [(new, min(cached, self.window)) for new, cached in chunks]
            t += self.n_slide * scalar.prefill_attention(capped, *shape, rate_c, rate_m, p.sharpness, self.window)
        return t + self.layers * p.fixed_us * _US

    def _mla_prefill(self, chunks: Sequence[tuple[int, int]]) -> float:
        """One layer: the kernel over every chunk (FLOPs and bytes summed,
        one blend, as for GQA) and the up-projection of each chunk's whole
        span of latents to keys and values."""
        cm, s, p = self.cm, self.mla, self.mla_prefill
        assert s is not None
        pairs = new_sum = cached_sum = 0.0
        for new, cached in chunks:
            pairs += new * cached + new * (new + 1) / 2.0
            new_sum += new
            cached_sum += cached
        span = int(new_sum + cached_sum)
        flops = self.mla_flops_per_pair * pairs
        nbytes = self.mla_bytes_per_new * new_sum + self.mla_bytes_per_cached * cached_sum
        kernel = scalar.blend(flops / self.mla_rate_c, nbytes / self.mla_rate_m, p.sharpness)
        kv_up = self._kv_up.get(span)
        if kv_up is None:   # a GEMM at m = span: memoised per span like the token-count costs
            kv_up = self._kv_up[span] = cm.linear_gemm(span, s.num_heads * (s.qk_nope_head_dim + s.v_head_dim),
                                                       s.kv_lora_rank)
        return kernel + p.fixed_us * _US + kv_up + float(mla_token_time(new_sum, s, cm.gpu, p))

    def decode_parts(self) -> tuple[float, float, float]:
        """(rate per Σcontext token, per sequence, fixed) of decode attention
        over all layers, for a batch on one rank (see :meth:`decode_share`)."""
        cm, L = self.cm, self.layers
        if self.mla is not None:
            p = self.mla_decode
            rate = mla_decode_per_context(self.mla, cm.gpu, p, cm.kv_bytes)
            return L * rate, L * mla_decode_per_seq(p), L * mla_decode_fixed(p)
        p = cm.cal.attention_decode
        rate = C.decode_attention_per_context(cm.heads, cm.kv_heads, cm.head_dim, cm.peak_attn, cm.hbm_bw, p,
                                              cm.kv_bytes)
        per_seq = L * p.per_seq_us * _US + self.n_slide * rate * self.window
        return self.n_full * rate, per_seq, L * p.fixed_us * _US

    def decode_share(self, batch: int, busiest: int = 0) -> float:
        """The busiest dp rank's share of a decode batch (with that share of Σcontext): its
        ``busiest`` sequences, the most any rank decodes where the engine placed them; else
        ⌈B/dp⌉ of its B, 1/dp when dp divides B (a batch smaller than dp leaves one sequence
        per busy rank)."""
        if batch <= 0:
            return 1.0 / self.dp
        return (busiest or self.rank(batch)) / batch

    def decode_coefficients(self, batch: int, busiest: int = 0) -> tuple[float, float]:
        """(rest, rate): decode attention of ``batch`` sequences = rest + rate · Σcontext, ``busiest``
        of them on the busiest rank (0: ⌈B/dp⌉, :meth:`decode_share`)."""
        s = self.decode_share(batch, busiest)
        rate, per_seq, fixed = self.decode_rate, self.decode_per_seq, self.decode_fixed
        return s * per_seq * batch + fixed + self.decode_extra(busiest or self.rank(batch)), s * rate

    def decode_extra(self, b: int) -> float:
        """Per-step decode work that depends on the busiest rank's ``b`` decodes only: MLA's two
        absorbed batched GEMMs per layer (memoised)."""
        if self.mla is None or b <= 0:
            return 0.0
        t = self._decode_extra.get(b)
        if t is None:
            cm, s = self.cm, self.mla
            module = mla_module_decode_time(b, 0.0, s, cm.gpu, self.mla_decode, self.mla_proj, cm.kv_bytes,
                                            self.proj_fmt)
            parts = (mla_projection_time(b, s, cm.gpu, self.mla_proj, self.proj_fmt)
                     + mla_decode_time(b, 0.0, s, cm.gpu, self.mla_decode, cm.kv_bytes))
            t = self._decode_extra[b] = self.layers * float(module - parts)
        return t

    def extend_parts(self, queries: int) -> tuple[float, float, float]:
        """Speculative verification: ``queries`` new tokens per sequence over
        its cache, split as in :mod:`.speculative` into (per cached token,
        per sequence, fixed) over all layers, each part blended on its own."""
        cm = self.cm
        if self.mla is not None:
            # The absorbed decode kernel with ``queries`` tokens per sequence:
            # the latent cache is read once, not up-projected per head.
            p, L = self.mla_decode, self.layers
            rate = mla_decode_per_context(self.mla, cm.gpu, p, cm.kv_bytes, queries)
            return L * rate / self.dp, L * mla_decode_per_seq(p) / self.dp, L * mla_decode_fixed(p)
        p = cm.cal.attention_prefill
        shape = (cm.heads, cm.kv_heads, cm.head_dim, cm.kv_bytes)
        f0, b0 = C.prefill_attention_flops_bytes(queries, 0, *shape)
        f1, b1 = C.prefill_attention_flops_bytes(queries, 1, *shape)
        full, slide = self.n_full, self.n_slide

        def roof(flops: float, nbytes: float) -> float:
            return float(blend(flops / (cm.peak_attn * p.eta_compute), nbytes / (cm.hbm_bw * p.eta_memory),
                               p.sharpness))

        rate, base = roof(f1 - f0, b1 - b0), roof(f0, b0)
        per_seq = (full + slide) * base + slide * rate * self.window
        return full * rate / self.dp, per_seq / self.dp, self.layers * p.fixed_us * _US

    # --- the roofline's FLOPs and bytes, for the itemised step ---------------------
    def attention_flops_bytes(self, chunks: Sequence[tuple[int, int]], decode_batch: int,
                              decode_context: float) -> tuple[float, float]:
        """Attention-kernel FLOPs and bytes of one GPU of the busiest dp rank, all layers, in the
        shape each layer kind runs: MLA's up-projected prefill and its latent-reading decode,
        a sliding layer's window (a decode charged a full window a sequence, as its time is)."""
        cm = self.cm
        if self.dp > 1:   # the busiest rank's chunks (as dealt) and decodes
            chunks = max(self.dealt(chunks), key=lambda cs: sum(c[0] for c in cs), default=[])
            decode_context *= self.decode_share(decode_batch)
            decode_batch = self.rank(decode_batch)
        flops = nbytes = 0.0
        if self.mla is not None:
            s = self.mla
            for new, cached in chunks:
                f, b = mla_prefill_flops_bytes(new, cached, s, cm.kv_bytes)
                flops, nbytes = flops + f, nbytes + b
            flops += 2.0 * s.num_heads * (2 * s.kv_lora_rank + s.qk_rope_head_dim) * decode_context
            nbytes += s.latent_dim * cm.kv_bytes * decode_context
            return self.layers * flops, self.layers * nbytes
        shape = (cm.heads, cm.kv_heads, cm.head_dim, cm.kv_bytes)
        per_pair = 4.0 * cm.heads * cm.head_dim
        for new, cached in chunks:
            f, b = C.prefill_attention_flops_bytes(new, cached, *shape)
            capped = min(cached, self.window)
            _, bs = C.prefill_attention_flops_bytes(new, capped, *shape)
            flops += self.n_full * f + (self.n_slide * per_pair * scalar.window_pairs(new, capped, self.window)
                                        if self.n_slide else 0.0)
            nbytes += self.n_full * b + self.n_slide * bs
        attended = self.n_full * decode_context + self.n_slide * decode_batch * self.window
        flops += per_pair * attended
        nbytes += 2.0 * cm.kv_heads * cm.head_dim * cm.kv_bytes * attended
        return flops, nbytes

    def flops_bytes(self, tokens: int, r: int | None = None) -> tuple[float, float]:
        """Linear-layer FLOPs and weight bytes one GPU of the busiest rank (``r`` of the
        ``tokens``; default an even split) handles (attention kernels apart): every
        non-expert weight of its rank once, the routed experts the batch touches, 2 FLOPs
        per weight per token."""
        m, cm = self.model, self.cm
        r = self.rank(tokens) if r is None else r
        # the experts' biases apart (a few values per expert), neither read with the rest nor priced
        rest = m.linear_params - m.expert_matrix_params - m.expert_biases
        per_gpu_expert = m.expert_params / self.moe_tp
        active = float(expected_active_experts(tokens, m.num_experts, m.topk)) / self.ep if m.is_moe else 0.0
        flops = 2.0 * (r * rest / self.tp
                       + tokens * m.topk / self.ep * per_gpu_expert * m.num_moe_layers)
        nbytes = rest / self.tp * cm.w_bytes + self.n_moe * active * per_gpu_expert * BYTES[cm.weight_dtype]
        return flops, nbytes


def check_weight_dtype(weight_dtype: str, gpu) -> None:
    """NVFP4 weights need FP4 units that take NVFP4's scales (MXFP4 runs weight-only without FP4 units)."""
    if weight_dtype in FP4_ONLY_DTYPES and not (gpu.has_unit("fp4") and weight_dtype in gpu.fp4_formats):
        from ..profiles.hardware import builtin_hardware

        able = [n for n, g in builtin_hardware().items() if g.has_unit("fp4") and weight_dtype in g.fp4_formats]
        what = "none" if not gpu.has_unit("fp4") else f"FP4 units for {', '.join(gpu.fp4_formats)} only"
        raise LlmsimError(f"weight_dtype {weight_dtype} needs FP4 tensor cores that run it ({', '.join(able)}); "
                          f"{gpu.name} has {what}", key_path="engine.weight_dtype")


def _dense_gemm_for(fmt: str, gemm: RooflineParams, gpu: HardwareProfile) -> RooflineParams:
    """The dense GEMM fit standing in for a format without a kernel fit of its own: an
    fp8- or fp4-rate format reaches the GPU's GEMM efficiency at that rate, as the
    dense layers of that dtype do."""
    eff = gpu.linear_efficiency(dtype_info(fmt).peak) if fmt else 1.0
    if eff != 1.0:
        return gemm.model_copy(update={"eta_compute": gemm.eta_compute * eff})
    return gemm
