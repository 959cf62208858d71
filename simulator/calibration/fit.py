"""Fitting each op family's parameters to the measured times of one GPU.

Least squares on log(model/measured): a relative error, so a 5 µs GEMV and
a 20 ms GEMM count alike, with a robust loss so that the few shapes a
smooth model cannot follow (wave quantisation, kernel-selection switches)
do not drag the parameters away from the bulk. The model evaluated is
:mod:`.evaluate`, i.e. the engine's own component functions.

Every efficiency is bounded to (0, 1] and every extra cost to ≥ 0, which
is what keeps a calibrated time at or above the pure roofline. Parameters
are rounded to four significant digits *before* the errors are measured, so
the numbers written to a profile reproduce the reported errors exactly.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Union

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from ..costmodel.moe import K_ALIGN
from ..profiles.hardware import AllReduceParams, HardwareProfile, MoeParams, RooflineParams
from . import evaluate
from .data import CUSTOM_AR_MAX_BYTES

Params = Union[RooflineParams, MoeParams, AllReduceParams]

# vLLM's custom all-reduce runs one-shot (every GPU reads its peers' whole
# buffers) below 256 KiB on 8 GPUs; the measured 2- and 4-GPU rows follow
# the same switch, so one threshold serves every group size.
ONESHOT_MAX_BYTES = 256 * 1024

# (loss, f_scale in log-time): soft-L1 is near least squares for errors
# under ~5% and near L1 beyond; Cauchy then discounts outliers further.
# The fit keeps whichever ends with the lower median error.
LOSSES = (("soft_l1", 0.05), ("cauchy", 0.02))


@dataclass(frozen=True)
class Space:
    """Names, start, bounds and the constructor of one family's parameters."""

    names: tuple[str, ...]
    start: tuple[float, ...]
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    build: Callable[[np.ndarray], Params]
    # Non-fitted fields the family's form sets (the GEMM wave form's switch).
    constants: tuple[tuple[str, object], ...] = ()
    # Unrounded parameters during the search, when not the family's default
    # construction (a space over a few fields of a fixed parameter set).
    raw: Callable[[np.ndarray], Params] | None = None


@dataclass(frozen=True)
class FamilyFit:
    family: str
    params: Params
    loss: str
    median_ape: float
    p90_ape: float
    n: int


def round_sig(x: float, digits: int = 4) -> float:
    """Four significant digits; values the optimiser left at ~1e-30 on a
    zero bound are written as 0 (the term is off)."""
    if abs(x) < 1e-9 or not math.isfinite(x):
        return 0.0 if math.isfinite(x) else float(x)
    return float(round(x, digits - 1 - int(math.floor(math.log10(abs(x))))))


def _roofline_space(names, start, lower, upper, cls: type[RooflineParams] = RooflineParams, **constants) -> Space:
    return Space(tuple(names), tuple(start), tuple(lower), tuple(upper),
                 lambda x: cls(**constants, **{k: round_sig(v) for k, v in zip(names, x)}),
                 tuple(constants.items()))


def _allreduce_space(group_sizes: list[int]) -> Space:
    names = (("custom_eta_bandwidth", "custom_latency_us", "latency_us", "ll_latency_us", "ll_latency_per_peer_us",
              "ll_eta_bandwidth") + tuple(f"eta@{n}" for n in group_sizes))
    build = lambda x: _allreduce_params([round_sig(v) for v in x], group_sizes)  # noqa: E731
    k = len(group_sizes)
    return Space(names, (0.7, 5.0, 20.0, 8.0, 2.0, 0.2) + (0.7,) * k, (0.02, 0.0, 0.0, 0.0, 0.0, 0.01) + (0.02,) * k,
                 (1.0, 100.0, 200.0, 100.0, 50.0, 1.0) + (1.0,) * k, build)


def _allreduce_params(x, group_sizes: list[int], construct: bool = False) -> AllReduceParams:
    etas = dict(zip(group_sizes, map(float, x[6:])))
    # Group sizes without a measurement (tp 3, 6) get the least efficient measured one.
    fields = dict(eta_bandwidth=min(etas.values()), latency_us=float(x[2]), ll_latency_us=float(x[3]),
                  ll_latency_per_peer_us=float(x[4]), ll_eta_bandwidth=float(x[5]),
                  eta_by_gpus=etas, custom_max_bytes=float(CUSTOM_AR_MAX_BYTES), custom_eta_bandwidth=float(x[0]),
                  custom_latency_us=float(x[1]), oneshot_max_bytes=float(ONESHOT_MAX_BYTES))
    return AllReduceParams.model_construct(**fields) if construct else AllReduceParams(**fields)


# GEMM forms. "waves" (shipped, components.gemm_wave_time): waves of output
# tiles over the SMs with a per-tile k overhead and a tile-reuse penalty,
# plus the weight-streaming roof's width ramp. "ramps": the smooth η_c ramps
# in m, n and k it replaced, kept so the two can be compared on held-out
# shapes (calibration.holdout, benchmarks/gemm_holdout.py).
GEMM_FORMS = {
    "waves": _roofline_space(
        ("eta_compute", "eta_memory", "sharpness", "fixed_us", "k_overhead", "tile_edge", "n_half_memory"),
        (0.8, 0.8, 4.0, 3.0, 64.0, 10.0, 100.0),
        (0.02, 0.02, 1.0, 0.0, 0.0, 0.0, 0.0),
        (1.0, 1.0, 64.0, 100.0, 16384.0, 512.0, 16384.0), waves=True),
    "ramps": _roofline_space(
        ("eta_compute", "eta_memory", "sharpness", "fixed_us", "m_half", "n_half", "k_half", "n_half_memory"),
        (0.8, 0.8, 4.0, 3.0, 10.0, 100.0, 100.0, 100.0),
        (0.02, 0.02, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0),
        (1.0, 1.0, 64.0, 100.0, 8192.0, 16384.0, 16384.0, 16384.0)),
}


MOE_NAMES = ("eta_compute", "eta_memory", "sharpness", "fixed_us", "m_half", "pair_ns", "pair_traffic",
             "layer_fixed_us", "tile_us", "expert_us", "token_traffic", "unaligned_compute", "unaligned_memory")
# Identified only by rows whose GEMMs have an unaligned reduction width; held at 0 (off) without them.
MOE_UNALIGNED = ("unaligned_compute", "unaligned_memory")
# Fitted only for row-padding kernels with expert-parallel rows: both for
# OpenAI's Triton matmul_ogs experts (MoeParams.ep_routing_us), the rank's
# pair traffic also for FlashInfer's TRT-LLM-gen ones, which gather and
# scatter the rank's pairs inside their GEMMs too.
MOE_OGS = ("ep_routing_us", "local_pair_traffic")
# The collector's kernel_source suffix of vLLM's Triton fused-MoE experts.
TRITON_MOE_KERNEL = "_triton_tritonexperts"
_MOE_START = dict(eta_compute=0.6, eta_memory=0.8, sharpness=4.0, fixed_us=5.0, m_half=16.0, pair_ns=1.0,
                  pair_traffic=0.5, layer_fixed_us=10.0, tile_us=0.5, expert_us=1.0, token_traffic=0.5,
                  unaligned_compute=0.5, unaligned_memory=0.5, ep_routing_us=10.0, local_pair_traffic=0.5,
                  pad_row_cost=1.0)
_MOE_LO = dict(eta_compute=0.02, eta_memory=0.02, sharpness=1.0)
_MOE_HI = dict(eta_compute=1.0, eta_memory=1.0, sharpness=64.0, fixed_us=200.0, m_half=4096.0, pair_ns=1000.0,
               pair_traffic=10.0, layer_fixed_us=500.0, tile_us=100.0, expert_us=100.0,
               token_traffic=20.0, unaligned_compute=20.0, unaligned_memory=20.0, ep_routing_us=500.0, local_pair_traffic=10.0,
               pad_row_cost=50.0)


# The collector's kernel_source part of FlashInfer's TRT-LLM MoE kernels.
TRTLLM_MOE_KERNEL = "_flashinfer_trtllm_"
# Their BlockMajorK weight layout holds the expert width in blocks of 128
# (vLLM pads each shard to it: align_moe_weights_for_fi(min_alignment=128)
# in vllm/model_executor/layers/fused_moe/oracle/unquantized.py).
TRTLLM_WIDTH_ALIGN = 128
# Their launchers' token tiles per format (the rows of an expert one CTA
# computes; MoeParams.token_tiles): 8..128 for bf16, per-tensor and block
# FP8; FP4 weights add 192 and 256 with FP4 or MXFP8 activations and stop
# at 64 with bf16 ones (getSupportedTileNums of each launcher in
# csrc/trtllm_fused_moe_kernel_launcher.cu).
# MXFP4 experts (vLLM's Mxfp4MoEMethod) on them pad both the expert width per
# GPU and the hidden size to 256 (create_weights in
# vllm/model_executor/layers/quantization/mxfp4.py, maybe_roundup_hidden_size
# in fused_moe/layer.py, for the SM100 FlashInfer MXFP4 backends).
MXFP4_FORMATS = ("w4a16_mxfp4", "w4a8")
MXFP4_ALIGN = 256
# Their tile's other side: 128 rows of an expert's weights (swapped operands).
TRTLLM_TILE_N = 128
TRTLLM_TOKEN_TILES = {
    "bf16": (8, 16, 32, 64, 128), "fp8": (8, 16, 32, 64, 128), "fp8_block": (8, 16, 32, 64, 128),
    "nvfp4": (8, 16, 32, 64, 128, 192, 256), "w4a8": (8, 16, 32, 64, 128, 192, 256),
    "w4a16_mxfp4": (8, 16, 32, 64),
}


# The collector's kernel_source part of OpenAI's Triton matmul_ogs MXFP4
# experts (vLLM's gpt-oss MXFP4 method on Hopper), which pad each expert's
# rows to their row block (MoeParams.row_padding).
OGS_MOE_KERNEL = "_oaitritonmxfp4experts"
# vLLM pads the expert width per GPU to a multiple of 64 for them on Hopper
# (Mxfp4MoEMethod.create_weights in vllm/model_executor/layers/quantization/mxfp4.py).
OGS_WIDTH_ALIGN = 64


# The collector's kernel_source part of FlashInfer's CUTLASS MoE kernels.
CUTLASS_MOE_KERNEL = "_flashinfer_cutlass_"
# Without a tuned tactic they run their first candidate configuration
# (setRunnerProfiles in flashinfer_cutlass_fused_moe_binding.cu:
# mAllProfiles.front()): a tile of 128 of an expert's rows (tokens, operand A)
# by a width that depends on the architecture — 16 on Hopper
# (get_candidate_tiles_sm90, grouped GEMMs: CtaShape128x16x128B; block FP8
# is pinned to the same tile), on Blackwell 64 for FP4 weights and 128
# otherwise (get_candidate_configs_sm100_dynamic_cluster_shape) — in
# cutlass_kernels/cutlass_heuristic.cpp.
CUTLASS_TOKEN_TILE = 128
# Fitted for the grouped GEMM of FlashInfer's CUTLASS kernels on Hopper
# (TMA warp-specialised, 128x16 tile): an expert's last, part-filled tile
# takes longer the emptier it is (MoeParams.pad_row_cost); held at 0
# elsewhere. Block FP8 is not that GEMM: its DeepSeek block-scale runner
# (CutlassFp8BlockScaleGemmRunner in cutlass_fused_moe_kernels.cuh) replaces
# it for both GEMMs.
MOE_PAD = ("pad_row_cost",)
CUTLASS_PAD_TILE_N = (16,)
CUTLASS_BLOCKSCALE_FORMATS = ("fp8_block",)
# By compute capability (the profile's ``sm_version``).
CUTLASS_TILE_N = {90: {"": 16}, 100: {"nvfp4": 64, "": 128}}


def _one(df: pd.DataFrame, column: str) -> str | None:
    vals = df[column].unique() if column in df else ()
    return str(vals[0]) if len(vals) == 1 else None


@lru_cache(maxsize=None)
def _sm_version(profile: str) -> int | None:
    """A built-in GPU's compute capability (its profile's ``sm_version``); None for any other name."""
    from ..profiles.hardware import builtin_hardware

    gpu = builtin_hardware().get(profile)
    return gpu.sm_version if gpu is not None else None


def moe_kernel_constants(df: pd.DataFrame) -> dict[str, int | bool | tuple[int, ...]]:
    """The kernel's fixed properties (MoeParams fields not fitted) when every
    row ran one kernel that has them: ``width_align`` and the token tiles of
    FlashInfer's TRT-LLM kernels (for one format), the 128-row tiles of its
    CUTLASS kernels (for one format on one measured GPU), ``row_padding`` of
    OpenAI's Triton ``matmul_ogs`` kernels."""
    if not len(df) or "kernel_source" not in df:
        return {}
    src = df["kernel_source"].astype(str)
    fmt, profile = _one(df, "moe_dtype"), _one(df, "profile")
    widths = CUTLASS_TILE_N.get(_sm_version(profile)) if profile else None
    if src.str.contains(CUTLASS_MOE_KERNEL, regex=False).all() and fmt and widths is not None:
        return dict(row_padding=True, token_tiles=(CUTLASS_TOKEN_TILE,), tile_n=widths.get(fmt, widths[""]))
    if src.str.contains(TRTLLM_MOE_KERNEL, regex=False).all():
        if fmt in TRTLLM_TOKEN_TILES:
            pad = dict(width_align=MXFP4_ALIGN, hidden_align=MXFP4_ALIGN) if fmt in MXFP4_FORMATS \
                else dict(width_align=TRTLLM_WIDTH_ALIGN)
            return dict(**pad, row_padding=True, token_tiles=TRTLLM_TOKEN_TILES[fmt], tile_n=TRTLLM_TILE_N)
        return dict(width_align=TRTLLM_WIDTH_ALIGN)
    if src.str.contains(OGS_MOE_KERNEL, regex=False).all():
        return dict(row_padding=True, width_align=OGS_WIDTH_ALIGN)
    return {}


def moe_unaligned_rows(df: pd.DataFrame) -> np.ndarray:
    """MoE rows that identify the unaligned-load slowdown: run by vLLM's Triton
    fused-MoE kernel (the kernel whose load path the alignment decides; other
    kernels' rows leave the term at 0) with a grouped GEMM whose reduction
    width (hidden for gate+up, the shard's expert width for down) is not a
    multiple of :data:`~simulator.costmodel.moe.K_ALIGN`."""
    if not len(df):
        return np.zeros(0, dtype=bool)
    inter = df["moe_intermediate_size"].to_numpy() // df["moe_tp"].to_numpy()
    mis = (df["hidden_size"].to_numpy() % K_ALIGN != 0) | (inter % K_ALIGN != 0)
    if "kernel_source" in df:
        mis &= df["kernel_source"].astype(str).str.endswith(TRITON_MOE_KERNEL).to_numpy()
    return mis


def space(family: str, df: pd.DataFrame, gemm_form: str = "waves") -> Space:
    if family == "gemm":
        return GEMM_FORMS[gemm_form]
    if family == "attention_prefill":
        return _roofline_space(("eta_compute", "eta_memory", "sharpness", "fixed_us"),
                               (0.6, 0.6, 4.0, 8.0), (0.02, 0.02, 1.0, 0.0), (1.0, 1.0, 64.0, 200.0))
    if family == "attention_decode":
        return _roofline_space(("eta_compute", "eta_memory", "sharpness", "per_seq_us", "fixed_us"),
                               (0.5, 0.8, 4.0, 0.05, 8.0), (0.01, 0.02, 1.0, 0.0, 0.0),
                               (1.0, 1.0, 64.0, 50.0, 200.0))
    if family == "allreduce":
        return _allreduce_space(sorted(int(n) for n in df["num_gpus"].unique()))
    if family == "moe":
        names = MOE_NAMES if moe_unaligned_rows(df).any() else tuple(n for n in MOE_NAMES if n not in MOE_UNALIGNED)
        constants = moe_kernel_constants(df)
        if constants.get("row_padding") and (df["moe_ep"] > 1).any():
            # TRT-LLM-gen routes every layout in one kernel: no extra kernels at ep > 1.
            names = names + tuple(n for n in MOE_OGS if not (constants.get("token_tiles") and n == "ep_routing_us"))
        if (constants.get("token_tiles") == (CUTLASS_TOKEN_TILE,) and constants.get("tile_n") in CUTLASS_PAD_TILE_N
                and _one(df, "moe_dtype") not in CUTLASS_BLOCKSCALE_FORMATS):
            names = names + MOE_PAD
        return _roofline_space(
            names, tuple(_MOE_START[n] for n in names), tuple(_MOE_LO.get(n, 0.0) for n in names),
            tuple(_MOE_HI[n] for n in names), MoeParams, **constants)
    if family == "mla_prefill":   # the module rows: the attention kernel plus per-token work
        return _roofline_space(("eta_compute", "eta_memory", "sharpness", "fixed_us", "token_traffic"),
                               (0.6, 0.6, 4.0, 8.0, 1.0), (0.02, 0.02, 1.0, 0.0, 0.0), (1.0, 1.0, 64.0, 200.0, 50.0))
    if family == "mla_decode":
        return space("attention_decode", df)
    if family == "mla_projection":
        return _roofline_space(("eta_compute", "eta_memory", "sharpness", "fixed_us", "m_half", "token_traffic"),
                               (0.7, 0.8, 4.0, 5.0, 10.0, 0.5), (0.02, 0.02, 1.0, 0.0, 0.0, 0.0),
                               (1.0, 1.0, 64.0, 100.0, 8192.0, 50.0))
    raise ValueError(f"unknown op family {family!r}")


def ape(pred: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """Absolute percentage error of the model against the measurement."""
    return np.abs(np.asarray(pred) / np.asarray(measured) - 1.0) * 100.0


def fit_family(family: str, df: pd.DataFrame, gpu: HardwareProfile, gemm_form: str = "waves",
               start: Params | None = None, free: tuple[str, ...] | None = None) -> FamilyFit:
    """Best parameters of one op family on one GPU's rows.

    ``free`` fits only those parameters and holds the rest at ``start``'s
    values (how a form's shape parameters are tested for transfer to
    another GPU: only its efficiencies and floor refitted)."""
    sp = space(family, df, gemm_form)
    if start is not None:
        sp = _pinned(sp, start, free or sp.names)
    return fit_params(family, sp, evaluate.evaluator(family, df, gpu), df["t_s"].to_numpy())


def fit_params(label: str, sp: Space, predict: Callable[[Params], np.ndarray], measured: np.ndarray,
               starts: tuple[tuple[float, ...], ...] = (), good_enough: float = 0.0,
               losses: tuple[tuple[str, float], ...] = LOSSES, max_nfev: int = 400) -> FamilyFit:
    """Robust log-time least squares of ``predict`` over the space ``sp``
    (from its start, then from each of ``starts`` while the best median
    error is above ``good_enough`` %; the lowest median error wins)."""
    lo, hi = np.array(sp.lower), np.array(sp.upper)

    def residuals(x: np.ndarray) -> np.ndarray:
        # Unrounded during the search (rounding would flatten the gradient).
        return np.log(predict(_unrounded(sp, x)) / measured)

    best: FamilyFit | None = None
    for start in (sp.start,) + tuple(starts):
        if best is not None and best.median_ape <= good_enough:
            break
        x = np.array(start, dtype=float)
        # Each loss starts where the previous one ended (soft-L1 then Cauchy).
        for loss, scale in losses:
            r = least_squares(residuals, np.clip(x, lo, hi), bounds=(lo, hi), loss=loss, f_scale=scale,
                              x_scale="jac", max_nfev=max_nfev)
            p = sp.build(r.x)
            err = ape(predict(p), measured)
            cand = FamilyFit(label, p, loss, float(np.median(err)), float(np.percentile(err, 90)), len(measured))
            if best is None or cand.median_ape < best.median_ape:
                best = cand
            x = r.x
    assert best is not None
    return best


#: How far (in log time, on any fitted row) a new fit may price from the stored parameters and still be
#: the same fit: 0.1 %.
SAME_PRICE = 1e-3


def settled(stored: Params | None, fit: FamilyFit, predict: Callable[[Params], np.ndarray],
            measured: np.ndarray) -> FamilyFit:
    """``fit`` with ``stored``'s parameters where they price every fitted row within
    :data:`SAME_PRICE` of the fit's (scored again on ``measured``), else ``fit``.

    A fit's unidentified directions (decode attention's compute efficiency,
    whose bound lies far below the memory bound on every row) land wherever
    a machine's floating point takes the search: the same rows gave an η_c
    of 0.9987 on one machine and 0.2004 on another, pricing every row the
    same to the last digit. Rewriting such a parameter changes no price but
    makes a profile differ from what ``llmsim calibrate`` writes elsewhere."""
    if stored is None or type(stored) is not type(fit.params):
        return fit
    a, b = predict(stored), predict(fit.params)
    if a.shape != b.shape or not np.all(np.isfinite(a)) or np.any(np.abs(np.log(a / b)) > SAME_PRICE):
        return fit
    err = ape(a, measured)
    return FamilyFit(fit.family, stored, fit.loss, float(np.median(err)), float(np.percentile(err, 90)), fit.n)


def fields_space(base: Params, names: tuple[str, ...], lower: tuple[float, ...], upper: tuple[float, ...]) -> Space:
    """A space over ``names`` only, every other field held at ``base``'s value."""
    start = tuple(min(max(float(getattr(base, n)), lo), hi) for n, lo, hi in zip(names, lower, upper))
    return Space(names, start, lower, upper,
                 lambda x: base.model_copy(update={n: round_sig(v) for n, v in zip(names, x)}),
                 raw=lambda x: base.model_copy(update={n: float(v) for n, v in zip(names, x)}))


def _pinned(sp: Space, start: Params, free: tuple[str, ...]) -> Space:
    """``sp`` restricted to the ``free`` names, the others fixed at ``start``."""
    held = {n: getattr(start, n) for n in sp.names if n not in free}
    idx = [i for i, n in enumerate(sp.names) if n in free]
    names = tuple(sp.names[i] for i in idx)
    x0 = tuple(min(max(getattr(start, n), sp.lower[i]), sp.upper[i]) for n, i in zip(names, idx))
    return _roofline_space(names, x0, tuple(sp.lower[i] for i in idx), tuple(sp.upper[i] for i in idx),
                           **dict(sp.constants), **held)


def _unrounded(sp: Space, x: np.ndarray) -> Params:
    if sp.raw is not None:
        return sp.raw(x)
    if sp.names[0] == "custom_eta_bandwidth":
        return _allreduce_params(x, [int(n.split("@")[1]) for n in sp.names[6:]], construct=True)
    cls = MoeParams if "pair_ns" in sp.names else RooflineParams
    fields = {**cls().model_dump(), **dict(sp.constants), **dict(zip(sp.names, map(float, x)))}
    return cls.model_construct(**fields)
