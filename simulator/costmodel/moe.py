"""Routed experts of one Mixture-of-Experts layer on one GPU.

A MoE layer is routing plus two *grouped* GEMMs (gate+up, then down) over
the experts the batch touches, plus the weighted sum back into each token.
What makes it unlike a dense MLP is that the work and the bytes scale
differently with the batch: FLOPs grow with the routed pairs
(tokens · top-k), but weights are read only for the distinct experts some
token chose — few tokens read few experts, a large batch reads them all.
That is why a MoE layer stays memory-bound far longer than a dense one.

A grouped GEMM over ``a`` active experts with ``m_e`` tokens each is, in
the roofline, ``a`` copies of :func:`.components.gemm_time` at ``m_e``
launched as one kernel: the blend is homogeneous of degree one, so it is
``a · (gemm_time(m_e, n, k) − fixed) + fixed``. With one expert and top-1
it is exactly the dense GEMM, so a MoE layer and a dense MLP share one set
of physics and differ only in the routing terms (:class:`MoeParams`).
Kernels that pad every expert's rows to whole tiles do not fit that
mould and are priced by their tile rule (``MoeParams.row_padding``:
:func:`row_block`, :func:`_row_block_gemm_time`): OpenAI's Triton
``matmul_ogs`` (gpt-oss's MXFP4 experts on Hopper) and FlashInfer's
TRT-LLM-gen kernels pick one row block per launch from the tokens per
expert they expect; FlashInfer's CUTLASS kernels run a fixed 128-row tile.

Everything works on floats and numpy arrays (the calibration evaluates
thousands of measured rows at once; the engine calls it with ints and
memoises per token count). No all-to-all here: dispatch/combine is
communication, priced with the parallel layout.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..dtypes import QUANT_FORMATS, QuantFormat, quant_format_name
from ..errors import LlmsimError
from ..profiles.hardware import HardwareProfile, MoeParams, RooflineParams
from .busiest_rank import expected_max_binomial
from .components import gemm_flops_bytes, gemm_time
from .roofline import blend

_US = 1e-6
# Nominal output tile of a grouped expert GEMM (rows × columns): the
# default block of vLLM's Triton fused-MoE kernel, and CUTLASS's smallest
# common one.
TILE_M, TILE_N = 64.0, 64.0
# vLLM's Triton fused-MoE kernel takes the reduction width K and the row
# strides of A and B (both K) as plain integer arguments, which Triton
# specialises on divisibility by 16: only then can it prove every row starts
# 16 elements aligned and issue wide (vectorised, pipelined) loads. A
# grouped GEMM whose K is not a multiple of this falls back to narrow loads
# and, its K loop stepping in whole BLOCK_SIZE_K tiles (64 in vLLM's default
# configuration for batches up to E tokens, the one a width without a tuned
# configuration file gets), moves the masked remainder of its last step too.
K_ALIGN = 16
UNALIGNED_K_STEP = 64.0
# OpenAI's Triton ``matmul_ogs`` kernels (vLLM's gpt-oss MXFP4 MoE method
# on Hopper) compute each expert's rows in whole blocks of BLOCK_M rows, one
# BLOCK_M for the whole launch: the next power of two of the tokens per
# expert it expects, within these bounds (make_default_opt_flags_nvidia in
# triton_kernels/matmul_ogs_details/opt_flags.py).
ROW_BLOCK_MIN, ROW_BLOCK_MAX = 16.0, 128.0
# Their output tile's width (columns of the expert's output, MoeParams.tile_n):
# 256 for every width above 128 with the weight-scale layout vLLM swizzles
# MXFP4 weights into on Hopper (8 warps; compute_block_n in opt_flags_nvidia.py).
# FlashInfer's TRT-LLM-gen MoE kernels (vLLM's FlashInfer TRT-LLM experts on
# Blackwell) compute in swapped-AB form: a CTA tile is 128 rows of an
# expert's weights (the output width, MoeParams.tile_n) by a *token tile* of
# the expert's pairs. The launcher's token tiles are a per-kernel ladder
# (MoeParams.token_tiles); it centres on the next power of two of the pairs
# per local expert it expects (every pair of the batch over the rank's
# experts), clamped to the ladder, and, without an autotuned tactic, runs
# the smallest candidate — the tile below the centre
# (computeSelectedTileN / selectDefaultTileN in
# csrc/trtllm_fused_moe_kernel_launcher.cu).


# One table for every quantised format: simulator/dtypes.py.
DTYPES = QUANT_FORMATS


def moe_dtype(name: str) -> str:
    """The canonical MoE dtype name; anything else is refused."""
    key = quant_format_name(name)
    if key is None:
        raise LlmsimError(f"unknown MoE dtype {name!r}; expected one of {', '.join(DTYPES)}")
    return key


def dtype_info(name: str) -> QuantFormat:
    return DTYPES[moe_dtype(name)]


def peak_flops(name: str, gpu: HardwareProfile) -> float:
    """Tensor-core peak the expert GEMMs run at; an FP4 format needs an FP4 unit."""
    d = dtype_info(name)
    if d.peak == "fp4" and not gpu.has_unit("fp4"):
        raise LlmsimError(f"MoE dtype {name} needs FP4 tensor cores, which {gpu.name} lacks "
                          "(its peak_tflops has no fp4 key)")
    return gpu.peak_flops(d.peak)


@dataclass(frozen=True)
class MoeShape:
    """One rank's shard: ``num_experts / ep`` experts, each ``moe_intermediate_size / moe_tp`` wide."""

    hidden_size: int
    moe_intermediate_size: int
    num_experts: int
    topk: int
    moe_tp: int = 1
    ep: int = 1
    gated: bool = True

    def __post_init__(self) -> None:
        if min(self.hidden_size, self.moe_intermediate_size, self.num_experts, self.topk,
               self.moe_tp, self.ep) < 1:
            raise LlmsimError(f"MoE shape needs positive sizes (got {self})")
        if self.topk > self.num_experts:
            raise LlmsimError(f"top-k {self.topk} exceeds the {self.num_experts} experts")
        if self.num_experts % self.ep:
            raise LlmsimError(f"ep={self.ep} must divide the {self.num_experts} experts")
        if self.moe_intermediate_size % self.moe_tp:
            raise LlmsimError(f"moe_tp={self.moe_tp} must divide moe_intermediate_size "
                              f"{self.moe_intermediate_size}")

    @property
    def local_intermediate(self) -> int:
        return self.moe_intermediate_size // self.moe_tp

    @property
    def local_experts(self) -> int:
        return self.num_experts // self.ep

    def expert_weights(self) -> int:
        """Weights of one local expert shard (gate, up and down projections)."""
        return (3 if self.gated else 2) * self.hidden_size * self.local_intermediate

    def stored_scale(self, params) -> float:
        """How much more memory an expert shard takes when its weights are
        stored in the kernel's padded layout (``params.width_align`` columns
        of the shard's width, ``params.hidden_align`` of hidden; every
        projection spans both, so all grow alike) than at the checkpoint's
        shape. 1.0 without padding."""
        width = _round_up(self.local_intermediate, getattr(params, "width_align", 1))
        hidden = _round_up(self.hidden_size, getattr(params, "hidden_align", 1))
        return width * hidden / (self.local_intermediate * self.hidden_size)


def _round_up(n: int, align: int) -> int:
    return -(-n // align) * align


def expected_active_experts(tokens, num_experts: int, topk: int):
    """Expected distinct experts a batch of ``tokens`` touches, uniform routing.

    Each token picks ``topk`` distinct experts of ``num_experts``; a given
    expert escapes one token with probability 1 − k/E, all of them with
    (1 − k/E)^tokens. Monotone in tokens, saturating at E.
    """
    miss = 1.0 - topk / num_experts
    t = np.maximum(tokens, 0) if isinstance(tokens, np.ndarray) else max(tokens, 0)
    return num_experts * (1.0 - miss ** t)


@lru_cache(maxsize=1 << 16)
def busiest_rank_load(tokens: float, num_experts: int, topk: int, ep: int) -> tuple[float, float]:
    """(routed pairs, distinct local experts) of the busiest of ``ep`` ranks.

    Pairs: each of the batch's ``tokens·topk`` pairs lands on a given rank
    with probability 1/ep. Experts: each of a rank's ``E/ep`` experts is
    touched with the probability :func:`expected_active_experts` gives any
    expert. The expected maximum over the ranks of each
    (:func:`.busiest_rank.expected_max_binomial`); at ``ep = 1`` both are
    the means. Cached: every cost model of a capacity search with this
    layer asks for the same token counts.
    """
    pairs = tokens * topk
    touched = expected_active_experts(tokens, num_experts, topk) / num_experts
    local = num_experts // ep
    if ep <= 1:
        return pairs, local * touched
    return expected_max_binomial(pairs, 1.0 / ep, ep), expected_max_binomial(local, touched, ep)


def row_block(pairs_all, local_experts, token_tiles=()):
    """The rows per expert a row-padding kernel computes in one block.

    ``matmul_ogs`` (``token_tiles`` empty): its BLOCK_M, the next power of
    two of the tokens per expert it expects, within [:data:`ROW_BLOCK_MIN`,
    :data:`ROW_BLOCK_MAX`]. It expects every routed pair of the batch (the
    gather's rows: remote experts' pairs are masked, not dropped, under
    expert parallelism) spread over the rank's experts, so at ep > 1 it
    picks a block ep times too tall for the rows an expert really gets.
    FlashInfer's TRT-LLM-gen kernels (``token_tiles``, their ladder of token
    tiles, ascending): the centre is the next power of two of the same
    expected pairs per expert (unfloored) clamped to the ladder, and the
    tile run is the ladder's entry below it (the smallest candidate, what
    the launcher runs without a tuned tactic; the ladder's first at its
    bottom)."""
    pairs = np.asarray(pairs_all, dtype=float)
    if len(token_tiles):
        ladder = np.asarray(token_tiles, dtype=float)
        avg = np.maximum(np.ceil(pairs / local_experts), 1.0)
        centre = np.clip(2.0 ** np.ceil(np.log2(avg)), ladder[0], ladder[-1])
        idx = np.searchsorted(ladder, centre)
        return ladder[np.maximum(idx - 1, 0)]
    tpe = np.maximum(np.floor(pairs / local_experts), 1.0)
    return np.clip(2.0 ** np.ceil(np.log2(tpe)), ROW_BLOCK_MIN, ROW_BLOCK_MAX)


def padded_rows(counts, block):
    """Rows a kernel computes for experts holding ``counts`` pairs each (last
    axis), every expert's run padded to whole blocks of ``block`` rows."""
    return np.sum(np.ceil(np.asarray(counts, dtype=float) / block), axis=-1) * block


def expected_padded_rows(tokens, num_experts: int, topk: int, ep: int, block):
    """:func:`padded_rows` of one rank's experts in expectation under a
    uniform router: each of its ``num_experts / ep`` experts gets
    X ~ Binomial(tokens, k/E) pairs, summed over X within 12 standard
    deviations and 12 pairs of its mean (the rest weighs under 1e-12)."""
    from scipy.special import gammaln     # on first use: scipy.special costs every command's start-up

    t = np.atleast_1d(np.asarray(tokens, dtype=float))
    b = np.broadcast_to(np.asarray(block, dtype=float), t.shape)
    q = topk / num_experts
    out = np.zeros(t.shape)
    for i, (n, bb) in enumerate(zip(t, b)):
        if n <= 0:
            continue
        sd = np.sqrt(n * q * (1.0 - q))
        x = np.arange(max(0.0, np.floor(n * q - 12.0 * sd - 12.0)), min(n, np.ceil(n * q + 12.0 * sd + 12.0)) + 1.0)
        log_pmf = (gammaln(n + 1.0) - gammaln(x + 1.0) - gammaln(n - x + 1.0) + x * np.log(q)
                   + (n - x) * np.log1p(-q)) if q < 1.0 else np.where(x == n, 0.0, -np.inf)
        out[i] = float(np.dot(np.exp(log_pmf), np.ceil(x / bb))) * bb * (num_experts // ep)
    return out if isinstance(tokens, np.ndarray) else float(out[0])


def _grouped_gemm_time(pairs, active, n, k, peak: float, bw: float, p: RooflineParams,
                       wbytes: float, abytes: float, num_sms: int | None = None):
    """``active`` experts' GEMMs of ``pairs/active`` tokens each, as one kernel.

    ``active · (gemm_time(m_e) − fixed) + fixed``: exact by homogeneity of the
    blend, and every GEMM ramp of ``p`` (m_half on tokens per expert, n/k
    ramps on the shard's width) applies per expert as in a dense GEMM. A
    reduction width ``k`` that is not a multiple of :data:`K_ALIGN` runs at
    η_c / (1 + ``unaligned_compute``) and η_m / (1 + ``unaligned_memory``)
    (:func:`unaligned_params`) over ``k`` rounded up to whole
    :data:`UNALIGNED_K_STEP` steps.
    """
    safe = np.where(active > 0, active, 1.0) if isinstance(active, np.ndarray) else (active or 1.0)
    m_e = pairs / safe
    one = gemm_time(m_e, n, k, peak, bw, p, wbytes, abytes, num_sms) - p.fixed_us * _US
    slow = unaligned_params(p)
    if slow is not None:
        mis = np.mod(k, K_ALIGN) != 0
        if np.any(mis):
            k_pad = np.ceil(k / UNALIGNED_K_STEP) * UNALIGNED_K_STEP
            one_slow = gemm_time(m_e, n, k_pad, peak, bw, slow, wbytes, abytes, num_sms) - p.fixed_us * _US
            one = np.where(mis, one_slow, one) if isinstance(mis, np.ndarray) else one_slow
    return active * one + p.fixed_us * _US


def _row_block_gemm_time(pairs, rows, active, block, n, k, peak: float, bw: float, p: RooflineParams,
                         wbytes: float, abytes: float, num_sms: int, bn: float):
    """A grouped GEMM that computes each expert's pairs in whole blocks of
    ``block`` rows (``matmul_ogs``, TRT-LLM-gen): ``rows`` padded rows in
    ``rows/block · ceil(n/bn)`` output tiles (``bn`` the tile's width of
    the output), run in waves over the SMs (never less than one). A tile's
    time grows with its rows plus ``m_half``, a cost per tile whatever its
    rows: on Hopper the MXFP4 weights have no tensor-core path and each
    ``matmul_ogs`` tile upconverts its whole weight slice to bf16 before its
    MMAs; a TRT-LLM-gen tile streams its 128-row weight slice and its scale
    factors through the pipeline however few tokens it holds. So a short
    block pays it for few rows. ``pad_row_cost``: each padding row of a
    tile (``rows`` beyond ``pairs``, spread over the tiles) adds that many
    rows of MMA time to the tile (FlashInfer's CUTLASS kernels on Hopper: an
    expert's last, part-filled tile takes longer the emptier it is).
    Memory: the touched experts' weights once, the real pairs' rows."""
    tiles = rows / block * np.ceil(n / bn)
    waves = np.maximum(np.ceil(tiles / num_sms), 1.0)
    tile_rows = block + p.m_half
    pad_cost = getattr(p, "pad_row_cost", 0.0)
    if pad_cost:
        safe_rows = np.where(rows > 0, rows, 1.0) if isinstance(rows, np.ndarray) else (rows or 1.0)
        tile_rows = tile_rows + pad_cost * block * np.maximum(rows - pairs, 0.0) / safe_rows
    t_c = waves * 2.0 * tile_rows * bn * k / (peak * p.eta_compute / num_sms)
    safe = np.where(active > 0, active, 1.0) if isinstance(active, np.ndarray) else (active or 1.0)
    _, nbytes = gemm_flops_bytes(pairs / safe, n, k, wbytes, abytes)
    return blend(t_c, active * nbytes / (bw * p.eta_memory), p.sharpness) + p.fixed_us * _US


@lru_cache(maxsize=256)
def unaligned_params(p: RooflineParams) -> RooflineParams | None:
    """The GEMM parameters of a grouped GEMM on the narrow-load path (reduction
    width not a multiple of :data:`K_ALIGN`), or None when ``p`` prices it as
    an aligned one (both slowdowns 0). Cached: the parameters are frozen, and
    every grouped GEMM the engine prices asks for them, where building the
    copy cost about a tenth of a cold cost-model fill."""
    s_c, s_m = getattr(p, "unaligned_compute", 0.0), getattr(p, "unaligned_memory", 0.0)
    if not (s_c or s_m):
        return None
    return p.model_copy(update=dict(eta_compute=p.eta_compute / (1.0 + s_c),
                                    eta_memory=p.eta_memory / (1.0 + s_m)))


def grid_tiles(pairs_all, num_experts, n_up, hidden):
    """Output tiles the two grouped GEMMs launch for a batch's routed pairs.

    The pairs are sorted by expert and each expert's run is padded to a
    whole TILE_M rows, so the row-tile grid is sized for every pair of the
    batch plus one partial tile per expert — never more than a tile per
    pair — and each row tile spans the layer's output width in TILE_N
    columns: ``ceil(n_up/TILE_N)`` for gate+up, ``ceil(hidden/TILE_N)``
    for down. A shard narrower than a tile still costs a whole tile; rows
    of experts held by other ranks are launched and leave at once.
    """
    rows = np.minimum(pairs_all, pairs_all / TILE_M + num_experts)
    return rows * (np.ceil(n_up / TILE_N) + np.ceil(hidden / TILE_N))


def rank_time(pairs_all, pairs_local, active_local, hidden, inter_local, fmt: QuantFormat, peak: float,
              bw: float, params: RooflineParams, gated: "bool | np.ndarray" = True, num_sms: int | None = None,
              num_experts=None, tokens=None, rows_local=None, row_blocks=None, ep=1):
    """Seconds of one rank's routed experts given its routing statistics.

    ``pairs_all``: routed (token, expert) pairs of the whole batch;
    ``pairs_local`` of them land on this rank's ``active_local`` distinct
    experts. Shapes may be arrays (the calibration evaluates every measured
    row in one call). Grouped gate+up GEMM + grouped down GEMM + routing,
    plus two floors the roofline cannot see: the launched tile grid
    (:func:`grid_tiles`, ``tile_us`` per tile and SM; ``num_experts`` is
    the model's, not this rank's) and ``expert_us`` per distinct local expert;
    and ``token_traffic`` per token of the batch (``tokens``), whichever
    experts it chose. ``gated`` may be a per-row array: a gated activation
    (SwiGLU) has a gate and an up projection, a non-gated one (ReLU², as
    Nemotron-H's experts) only the up projection. ``rows_local``: the rows
    the grouped GEMMs compute once each expert's pairs are padded to the
    kernel's row block ``row_blocks`` (:func:`row_block`,
    :func:`padded_rows`); used, and required, when ``params.row_padding``
    is set (:func:`_row_block_gemm_time` then prices the GEMMs). ``ep``:
    the layout's expert parallelism (``params.ep_routing_us`` at ep > 1).
    """
    align = getattr(params, "width_align", 1)
    if align > 1:   # the kernel's whole blocks of expert width (MoeParams.width_align)
        inter_local = np.ceil(np.asarray(inter_local, dtype=float) / align) * align
    h_align = getattr(params, "hidden_align", 1)
    if h_align > 1:   # the weights and activations padded to whole blocks of hidden (MoeParams.hidden_align)
        hidden = np.ceil(np.asarray(hidden, dtype=float) / h_align) * h_align
    n_up = (np.where(gated, 2, 1) if isinstance(gated, np.ndarray) else (2 if gated else 1)) * inter_local
    if getattr(params, "row_padding", False):
        if rows_local is None or row_blocks is None or not num_sms:
            raise ValueError("the MoE row-padding form needs the padded rows, their block and num_sms")
        gemms = sum(_row_block_gemm_time(pairs_local, rows_local, active_local, row_blocks, n, k, peak, bw, params,
                                         fmt.weight_bytes, fmt.act_bytes, num_sms, float(params.tile_n))
                    for n, k in ((n_up, hidden), (hidden, inter_local)))
    else:
        gemms = (_grouped_gemm_time(pairs_local, active_local, n_up, hidden, peak, bw, params, fmt.weight_bytes,
                                    fmt.act_bytes, num_sms)
                 + _grouped_gemm_time(pairs_local, active_local, hidden, inter_local, peak, bw, params,
                                      fmt.weight_bytes, fmt.act_bytes, num_sms))
    pair_ns = getattr(params, "pair_ns", 0.0)
    layer_fixed = getattr(params, "layer_fixed_us", 0.0)
    traffic = getattr(params, "pair_traffic", 0.0)
    route = pair_ns * 1e-9 * pairs_all + layer_fixed * _US
    local_traffic = getattr(params, "local_pair_traffic", 0.0)
    if traffic or local_traffic:
        # bf16 activations of one pair: the gathered input row, gate/up output,
        # activated intermediate, down output row.
        pair_bytes = 2.0 * (2 * hidden + n_up + inter_local)
        route = route + (traffic * pairs_all + local_traffic * pairs_local) * pair_bytes / (bw * params.eta_memory)
    tile_us = getattr(params, "tile_us", 0.0)
    if tile_us:
        if not num_sms or num_experts is None:
            raise ValueError("the MoE tile term needs num_sms and num_experts")
        route = route + tile_us * _US * grid_tiles(pairs_all, num_experts, n_up, hidden) / num_sms
    # Each expert a grouped GEMM visits is its own problem: its tile
    # schedule, operand descriptors and pipeline fill cost a floor however
    # few tokens it holds.
    route = route + getattr(params, "expert_us", 0.0) * _US * active_local
    # A kernel whose expert-parallel path routes through extra kernels
    # (MoeParams.ep_routing_us) pays them once per layer at ep > 1.
    ep_routing = getattr(params, "ep_routing_us", 0.0)
    if ep_routing:
        route = route + ep_routing * _US * (np.asarray(ep) > 1 if isinstance(ep, np.ndarray) else float(ep > 1))
    token_traffic = getattr(params, "token_traffic", 0.0)
    if token_traffic:
        if tokens is None:
            raise ValueError("the MoE token-traffic term needs the token count")
        # bf16 row of one token: its hidden state in, its combined output out.
        route = route + token_traffic * tokens * 2.0 * 2 * hidden / (bw * params.eta_memory)
    return gemms + route


def moe_layer_time(tokens, shape: MoeShape, dtype: str, gpu: HardwareProfile, params: RooflineParams,
                   active_experts=None):
    """Seconds of one MoE layer's routed experts on one GPU of the group.

    ``tokens``: tokens entering the layer on this rank (before routing).
    Without expert parallelism the rank holds every expert's shard: routed
    pairs tokens · k, distinct experts ``expected_active_experts``. With
    ``ep > 1`` the layer waits for its busiest rank: the pairs and distinct
    experts the busiest of the ``ep`` ranks draws from a uniform router
    (:func:`busiest_rank_load`), and a row-padding kernel
    (``params.row_padding``) pads that rank's rows as it pads the mean
    rank's, scaled by its load. ``active_experts`` (over the whole model):
    a caller that knows its router better (a skewed one) gives the distinct
    experts, and each rank is then priced at its mean share. Zero tokens
    cost nothing.
    """
    fmt = dtype_info(dtype)
    peak = peak_flops(dtype, gpu)
    t = np.asarray(tokens, dtype=float) if isinstance(tokens, np.ndarray) else float(tokens)
    if not isinstance(t, np.ndarray) and t <= 0:
        return 0.0
    pairs_all = t * shape.topk
    if active_experts is None and shape.ep > 1:
        load = [busiest_rank_load(float(x), shape.num_experts, shape.topk, shape.ep) for x in np.atleast_1d(t)]
        pairs_rank, active_rank = (np.array(v) if isinstance(t, np.ndarray) else v[0] for v in zip(*load))
    else:
        if active_experts is None:
            active_experts = expected_active_experts(t, shape.num_experts, shape.topk)
        pairs_rank, active_rank = pairs_all / shape.ep, active_experts / shape.ep
    rows = block = None
    if getattr(params, "row_padding", False):
        block = row_block(pairs_all, shape.local_experts, params.token_tiles)
        with np.errstate(invalid="ignore", divide="ignore"):
            rows = (expected_padded_rows(t, shape.num_experts, shape.topk, shape.ep, block)
                    * np.where(pairs_all > 0, pairs_rank / (pairs_all / shape.ep), 1.0))
    with np.errstate(invalid="ignore", divide="ignore"):
        total = rank_time(pairs_all, pairs_rank, active_rank, shape.hidden_size,
                          shape.local_intermediate, fmt, peak, gpu.hbm_bandwidth, params, shape.gated, gpu.num_sms,
                          shape.num_experts, t, rows, block, shape.ep)
    if isinstance(t, np.ndarray):
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(t > 0, total, 0.0)
    return float(total) if t > 0 else 0.0


class RunningMaxLayerTime:
    """:func:`moe_layer_time` as a running maximum over token counts, for a
    kernel whose padding rows cost more than real ones (``pad_row_cost``).

    Priced at a uniform router's expected fills, such a layer gets cheaper
    as a batch fills the experts' last tiles (Hopper per-tensor FP8 on
    Mixtral-8x7B: 2.4 ms at 16 tokens, 1.7 ms at 384). The balanced router's
    rows do that; a real router's uneven loads leave some tiles nearly
    empty at every batch, and its rows (the power-law ones) rise steadily.
    A step's time must not fall as the batch grows, so a simulation prices
    the most any smaller batch costs: one vectorised evaluation per token
    count, extended by doubling and kept per layout."""

    def __init__(self, shape: MoeShape, dtype: str, gpu: HardwareProfile, params: RooflineParams):
        self.shape, self.dtype, self.gpu, self.params = shape, dtype, gpu, params
        self._env = np.zeros(0)

    def __call__(self, tokens: int) -> float:
        if tokens <= 0:
            return 0.0
        if tokens > len(self._env):
            n = len(self._env)
            t = np.arange(n + 1, max(tokens, 2 * n, 256) + 1, dtype=float)
            raw = moe_layer_time(t, self.shape, self.dtype, self.gpu, self.params)
            floor = self._env[-1] if n else 0.0
            self._env = np.concatenate([self._env, np.maximum.accumulate(np.maximum(raw, floor))])
        return float(self._env[tokens - 1])


_RUNNING_MAX: dict[tuple, RunningMaxLayerTime] = {}


def running_max_layer_time(shape: MoeShape, dtype: str, gpu: HardwareProfile,
                           params: RooflineParams) -> RunningMaxLayerTime:
    """The :class:`RunningMaxLayerTime` of this layer, shared by every cost
    model that prices it (a capacity search builds many; the envelope of a
    long prefill takes a second or two to build)."""
    key = (shape, moe_dtype(dtype), gpu.model_dump_json(), params.model_dump_json())
    env = _RUNNING_MAX.get(key)
    if env is None:
        env = _RUNNING_MAX[key] = RunningMaxLayerTime(shape, dtype, gpu, params)
    return env


__all__ = ["DTYPES", "MoeParams", "MoeShape", "RunningMaxLayerTime", "busiest_rank_load", "dtype_info",
           "expected_active_experts", "expected_padded_rows", "moe_dtype", "moe_layer_time", "padded_rows",
           "peak_flops", "rank_time", "row_block", "running_max_layer_time"]
