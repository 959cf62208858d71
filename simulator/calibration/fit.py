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
from typing import Callable, Union

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

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


def _roofline_space(names, start, lower, upper, cls: type[RooflineParams] = RooflineParams) -> Space:
    return Space(tuple(names), tuple(start), tuple(lower), tuple(upper),
                 lambda x: cls(**{k: round_sig(v) for k, v in zip(names, x)}))


def _allreduce_space(group_sizes: list[int]) -> Space:
    names = ("custom_eta_bandwidth", "custom_latency_us", "latency_us") + tuple(f"eta@{n}" for n in group_sizes)

    def build(x: np.ndarray) -> AllReduceParams:
        x = [round_sig(v) for v in x]
        etas = dict(zip(group_sizes, x[3:]))
        # Group sizes without a measurement (tp 3, 6) get the least efficient measured one.
        return AllReduceParams(eta_bandwidth=min(etas.values()), latency_us=x[2], eta_by_gpus=etas,
                               custom_max_bytes=float(CUSTOM_AR_MAX_BYTES), custom_eta_bandwidth=x[0],
                               custom_latency_us=x[1], oneshot_max_bytes=float(ONESHOT_MAX_BYTES))

    k = len(group_sizes)
    return Space(names, (0.7, 5.0, 10.0) + (0.7,) * k, (0.02, 0.0, 0.0) + (0.02,) * k,
                 (1.0, 100.0, 200.0) + (1.0,) * k, build)


MOE_NAMES = ("eta_compute", "eta_memory", "sharpness", "fixed_us", "m_half", "pair_ns", "pair_traffic",
             "layer_fixed_us")
_MOE_START = dict(eta_compute=0.6, eta_memory=0.8, sharpness=4.0, fixed_us=5.0, m_half=16.0, pair_ns=1.0,
                  pair_traffic=0.5, layer_fixed_us=10.0)
_MOE_LO = dict(eta_compute=0.02, eta_memory=0.02, sharpness=1.0)
_MOE_HI = dict(eta_compute=1.0, eta_memory=1.0, sharpness=64.0, fixed_us=200.0, m_half=4096.0, pair_ns=1000.0,
               pair_traffic=10.0, layer_fixed_us=500.0)


def space(family: str, df: pd.DataFrame) -> Space:
    if family == "gemm":
        return _roofline_space(
            ("eta_compute", "eta_memory", "sharpness", "fixed_us", "m_half", "n_half", "k_half", "n_half_memory"),
            (0.8, 0.8, 4.0, 3.0, 10.0, 100.0, 100.0, 100.0),
            (0.02, 0.02, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0),
            (1.0, 1.0, 64.0, 100.0, 8192.0, 16384.0, 16384.0, 16384.0))
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
        return _roofline_space(
            MOE_NAMES, tuple(_MOE_START[n] for n in MOE_NAMES), tuple(_MOE_LO.get(n, 0.0) for n in MOE_NAMES),
            tuple(_MOE_HI[n] for n in MOE_NAMES), MoeParams)
    if family == "mla_prefill":
        return space("attention_prefill", df)
    if family == "mla_decode":
        return space("attention_decode", df)
    if family == "mla_projection":
        return _roofline_space(("eta_compute", "eta_memory", "sharpness", "fixed_us", "m_half"),
                               (0.7, 0.8, 4.0, 5.0, 10.0), (0.02, 0.02, 1.0, 0.0, 0.0),
                               (1.0, 1.0, 64.0, 100.0, 8192.0))
    raise ValueError(f"unknown op family {family!r}")


def ape(pred: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """Absolute percentage error of the model against the measurement."""
    return np.abs(np.asarray(pred) / np.asarray(measured) - 1.0) * 100.0


def fit_family(family: str, df: pd.DataFrame, gpu: HardwareProfile) -> FamilyFit:
    """Best parameters of one op family on one GPU's rows."""
    predict = evaluate.PREDICT[family]
    return fit_params(family, space(family, df), lambda p: predict(df, gpu, p), df["t_s"].to_numpy())


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


def _unrounded(sp: Space, x: np.ndarray) -> Params:
    if sp.names[0] == "custom_eta_bandwidth":
        sizes = [int(n.split("@")[1]) for n in sp.names[3:]]
        etas = dict(zip(sizes, map(float, x[3:])))
        return AllReduceParams.model_construct(
            eta_bandwidth=min(etas.values()), latency_us=float(x[2]), eta_by_gpus=etas,
            custom_max_bytes=float(CUSTOM_AR_MAX_BYTES), custom_eta_bandwidth=float(x[0]),
            custom_latency_us=float(x[1]), oneshot_max_bytes=float(ONESHOT_MAX_BYTES))
    cls = MoeParams if "pair_ns" in sp.names else RooflineParams
    fields = {**cls().model_dump(), **dict(zip(sp.names, map(float, x)))}
    return cls.model_construct(**fields)
