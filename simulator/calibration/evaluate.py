"""The cost model's prediction for each measured row.

Every prediction goes through :mod:`simulator.costmodel.components` (and the
same composition :class:`~simulator.costmodel.CostModel` uses), so the fitted
numbers are exactly what the engine will run; nothing here re-derives a
FLOP or byte count.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from ..costmodel import components as C
from ..costmodel import moe as M
from ..costmodel.roofline import blend
from ..profiles.hardware import AllReduceParams, Calibration, HardwareProfile, RooflineParams
from . import moe_routing

# The kernel tables time bf16 GEMMs and attention with bf16 queries.
_BF16 = 2.0


def gemm(df: pd.DataFrame, gpu: HardwareProfile, p: RooflineParams) -> np.ndarray:
    return np.asarray(C.gemm_time(df["m"].to_numpy(), df["n"].to_numpy(), df["k"].to_numpy(),
                                  gpu.peak_flops("bf16"), gpu.hbm_bandwidth, p, _BF16, _BF16, gpu.num_sms))


def attention_prefill(df: pd.DataFrame, gpu: HardwareProfile, p: RooflineParams) -> np.ndarray:
    """``batch`` sequences of ``context_len`` new tokens and no prefix, summed
    into one blend as :meth:`CostModel.prefill_attention_time` does."""
    b = df["batch_size"].to_numpy()
    f, nbytes = C.prefill_attention_flops_bytes(df["context_len"].to_numpy(), 0.0, df["num_heads"].to_numpy(),
                                                df["num_kv_heads"].to_numpy(), df["head_dim"].to_numpy(),
                                                df["kv_bytes"].to_numpy())
    t = blend(b * f / (gpu.peak_flops("bf16") * p.eta_compute), b * nbytes / (gpu.hbm_bandwidth * p.eta_memory),
              p.sharpness)
    return np.asarray(t) + p.fixed_us * 1e-6


def decode_context(df: pd.DataFrame) -> np.ndarray:
    """Σ context the batch attends to: ``context_len`` cached tokens plus the
    new token's own K/V, per sequence (the engine's ``decode_context``)."""
    return df["batch_size"].to_numpy() * (df["context_len"].to_numpy() + 1.0)


def attention_decode(df: pd.DataFrame, gpu: HardwareProfile, p: RooflineParams) -> np.ndarray:
    """Affine in Σcontext for a fixed batch — the form the fast engine integrates."""
    return decode_evaluator(df, gpu)(p)


def decode_evaluator(df: pd.DataFrame, gpu: HardwareProfile) -> Callable[[RooflineParams], np.ndarray]:
    """:func:`attention_decode` of ``df`` as a function of the parameters,
    the rows' distinct head shapes found once (a fit evaluates it thousands
    of times)."""
    shapes = df[["num_heads", "num_kv_heads", "head_dim", "kv_bytes"]].to_numpy()
    uniq, inv = np.unique(shapes, axis=0, return_inverse=True)
    inv = inv.ravel()
    context, b = decode_context(df), df["batch_size"].to_numpy()
    peak, bw = gpu.peak_flops("bf16"), gpu.hbm_bandwidth

    def times(p: RooflineParams) -> np.ndarray:
        # decode_attention_per_context returns a float per head shape; evaluated
        # per distinct shape so the fit uses the engine's own function.
        rates = np.array([C.decode_attention_per_context(h, kvh, d, peak, bw, p, kb) for h, kvh, d, kb in uniq])
        return rates[inv] * context + p.per_seq_us * 1e-6 * b + p.fixed_us * 1e-6

    return times


def allreduce(df: pd.DataFrame, gpu: HardwareProfile, p: AllReduceParams) -> np.ndarray:
    """Custom-kernel rows under the "custom" regime, NCCL rows under "nccl"."""
    out = np.empty(len(df))
    n = df["num_gpus"].to_numpy().astype(int)
    msg = df["message_bytes"].to_numpy()
    nccl = (df["impl"] == "nccl").to_numpy() if "impl" in df else np.zeros(len(df), bool)
    link = gpu.interconnect.bandwidth_gb_s * 1e9
    for g in np.unique(n):
        for is_nccl, regime in ((False, "custom"), (True, "nccl")):
            sel = (n == g) & (nccl == is_nccl)
            if sel.any():
                out[sel] = C.allreduce_time(msg[sel], int(g), link, C.allreduce_regime(p, regime))
    return out


def moe(df: pd.DataFrame, gpu: HardwareProfile, p: RooflineParams) -> np.ndarray:
    """One MoE format's rows at the routing rank 0 really had (``local_pairs``,
    ``local_active``, the padded rows at each block: :mod:`.moe_routing`), with the activation they ran
    (column ``gated``; gated when absent)."""
    return moe_evaluator(df, gpu)(p)


def moe_evaluator(df: pd.DataFrame, gpu: HardwareProfile) -> Callable[[RooflineParams], np.ndarray]:
    """:func:`moe` of ``df`` as a function of the parameters, the rows' columns
    read once and rank 0's padded rows looked up once per ladder of token tiles:
    a fit evaluates it thousands of times with one ladder, and reading the
    columns and the padded rows took two thirds of each evaluation."""
    fmts = df["moe_dtype"].unique()
    if len(fmts) != 1:
        raise ValueError(f"MoE rows of one format expected, got {list(fmts)}")
    name = str(fmts[0])
    pairs_all = df["num_tokens"].to_numpy() * df["topk"].to_numpy()
    local_experts = df["num_experts"].to_numpy() / df["moe_ep"].to_numpy()
    cols = dict(local_pairs=df["local_pairs"].to_numpy(), local_active=df["local_active"].to_numpy(),
                hidden=df["hidden_size"].to_numpy(),
                width=df["moe_intermediate_size"].to_numpy() / df["moe_tp"].to_numpy(),
                gated=df["gated"].to_numpy() if "gated" in df else True, num_experts=df["num_experts"].to_numpy(),
                tokens=df["num_tokens"].to_numpy(), ep=df["moe_ep"].to_numpy())
    info, peak = M.dtype_info(name), M.peak_flops(name, gpu)
    padded: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}

    def times(p: RooflineParams) -> np.ndarray:
        rows = block = None
        if getattr(p, "row_padding", False):
            tiles = tuple(p.token_tiles)
            if tiles not in padded:
                blocks = M.row_block(pairs_all, local_experts, p.token_tiles)
                padded[tiles] = (blocks, moe_routing.padded_rows_at(df, blocks))
            block, rows = padded[tiles]
        return np.asarray(M.rank_time(pairs_all, cols["local_pairs"], cols["local_active"], cols["hidden"],
                                      cols["width"], info, peak, gpu.hbm_bandwidth, p, gated=cols["gated"],
                                      num_sms=gpu.num_sms, num_experts=cols["num_experts"], tokens=cols["tokens"],
                                      rows_local=rows, row_blocks=block, ep=cols["ep"]))

    return times


PREDICT = {
    "gemm": gemm,
    "attention_prefill": attention_prefill,
    "attention_decode": attention_decode,
    "allreduce": allreduce,
    "moe": moe,
}


def evaluator(family: str, df: pd.DataFrame, gpu: HardwareProfile) -> Callable[[object], np.ndarray]:
    """Seconds per row of ``df`` as a function of the family's parameters (what a fit calls)."""
    if family == "attention_decode":
        return decode_evaluator(df, gpu)
    if family == "moe":
        return moe_evaluator(df, gpu)
    fn = PREDICT[family]
    return lambda p: fn(df, gpu, p)


def predict(family: str, df: pd.DataFrame, gpu: HardwareProfile, cal: Calibration) -> np.ndarray:
    """Seconds per row under ``cal`` (a ``status: roofline`` Calibration gives the pure roofline)."""
    return PREDICT[family](df, gpu, getattr(cal, family))
