"""``fp8_gemm_efficiency`` and ``fp4_gemm_efficiency`` from measured GEMMs.

The engine prices a dense fp8 (NVFP4) linear layer with the bf16 GEMM fit
at the fp8 (FP4) peak, its compute efficiency scaled by the profile's
``fp8_gemm_efficiency`` (``fp4_gemm_efficiency``). That factor touches
only the compute roof, so it is fitted on the compute-bound rows (above
:data:`COMPUTE_BOUND_FLOP`), where it is what decides the time; below that
the measured GEMM also pays an activation-quantisation pass the form has
no term for, and the error on all rows says how much that costs. The rows
are per-tensor fp8 GEMMs and NVFP4 GEMMs (FP4 weights and activations,
16-element blocks with their scales, the activations quantised by the
kernel's caller) as each stack's linear layers run them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import minimize_scalar

from ..costmodel import components as C
from ..profiles.hardware import FitError, HardwareProfile, RooflineParams
from .fit import ape, round_sig

COMPUTE_BOUND_FLOP = 1e12
# soft-L1 scale in log-time, as the family fits use
_SCALE = 0.05


@dataclass(frozen=True)
class EfficiencyFit:
    efficiency: float
    all_rows: FitError
    compute_bound: FitError


def predict(df: pd.DataFrame, gpu: HardwareProfile, gemm: RooflineParams, efficiency: float,
            compute_dtype: str = "fp8") -> np.ndarray:
    """Seconds per row, as CostModel prices a linear layer computing in ``compute_dtype`` (fp8 or fp4)."""
    return np.asarray(C.gemm_time(df["m"].to_numpy(), df["n"].to_numpy(), df["k"].to_numpy(),
                                  gpu.peak_flops(compute_dtype) * efficiency, gpu.hbm_bandwidth, gemm, 1.0, 1.0,
                                  gpu.num_sms))


def compute_bound(df: pd.DataFrame) -> np.ndarray:
    return (2.0 * df["m"] * df["n"] * df["k"]).to_numpy() > COMPUTE_BOUND_FLOP


def _error(e: np.ndarray) -> FitError:
    return FitError(median_ape=round(float(np.median(e)), 2), p90_ape=round(float(np.percentile(e, 90)), 2), n=len(e))


def fit(df: pd.DataFrame, gpu: HardwareProfile, gemm: RooflineParams,
        compute_dtype: str = "fp8") -> EfficiencyFit | None:
    """The efficiency (three significant digits) minimising the robust log error
    on ``df``'s compute-bound rows; None without such rows."""
    big = compute_bound(df)
    if not big.any():
        return None
    rows, t = df[big], df["t_s"].to_numpy()[big]

    def loss(eff: float) -> float:
        r = np.log(predict(rows, gpu, gemm, eff, compute_dtype) / t) / _SCALE
        return float(np.sum(np.sqrt(1.0 + r * r) - 1.0))

    eff = round_sig(minimize_scalar(loss, bounds=(0.05, 1.0), method="bounded",
                                    options={"xatol": 1e-4}).x, 3)
    e = ape(predict(df, gpu, gemm, eff, compute_dtype), df["t_s"].to_numpy())
    return EfficiencyFit(eff, _error(e), _error(e[big]))
