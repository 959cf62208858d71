"""Per-stack kernels: where SGLang or TensorRT-LLM run the op differently from vLLM.

A hardware profile's own parameters describe vLLM's kernels (the backend
profiles' default). The newer kernel tables time SGLang's and
TensorRT-LLM's kernels on the same shapes, so whether a stack needs its own
parameters is a measured question: on the fit-grid shapes both stacks ran,
the median ratio of the stack's time to the default stack's. Beyond
:data:`MATERIAL` the family is refitted on the stack's rows and written as
``calibration.stacks.<stack>.<family>`` (a backend profile selects it with
``engine.kernels``); within it, the stacks are said to agree and share the
profile's parameters. The all-reduce override refits only the custom
kernel's bandwidth and latency (the NCCL regime is the same library), and
the fp8 GEMM override only ``fp8_gemm_efficiency``.

MLA decode (``mla_decode``) is compared on module rows, not kernel rows:
the profile's MLA parameters are fitted on vLLM's generation modules
(:mod:`.moe_mla`), so a stack's own module rows are compared with what
those parameters price them at, and refitted with the profile's
projection GEMMs kept (:func:`compare_mla`; the stacks with module rows
are :data:`.moe_mla.STACK_MODULE_VERSIONS`, which says why SGLang is not
one).

MoE experts (``moe`` / ``moe_ep``, per format) are compared the same way:
the profile's sets are fitted on vLLM's kernel rows, so each stack's own
rows (:mod:`.moe_stacks`, which says which kernel each stack runs) are
compared with what those sets price them at through the engine's function,
per format and expert-parallel regime (:func:`compare_moe`), and a material
one is refitted on the stack's rows of that regime with the fit the
profile's sets come from (:func:`.moe_mla.fit_moe`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..costmodel.moe import moe_dtype
from ..profiles.hardware import AllReduceParams, FitError, HardwareProfile, RooflineParams, StackKernels
from . import evaluate, moe_mla, moe_stacks, quantised_gemm
from .data import ATTENTION_SHAPE, DEFAULT_STACK, FP8_GEMM, KernelData, kernel_stacks
from .fit import ape, fields_space, fit_family, fit_params, settled, space

# A stack's kernels get their own parameters when its median time on the
# shared shapes differs from the default stack's by more than this.
MATERIAL = 0.10

FAMILIES = ("gemm", FP8_GEMM, "attention_prefill", "attention_decode", "allreduce")
_KEYS = {"gemm": ["m", "n", "k"], FP8_GEMM: ["m", "n", "k"], "attention_prefill": ATTENTION_SHAPE,
         "attention_decode": ATTENTION_SHAPE, "allreduce": ["num_gpus", "message_bytes"]}
_CUSTOM_AR = ("custom_eta_bandwidth", "custom_latency_us")
MLA_DECODE = "mla_decode"
# The module rows an MLA decode override is compared and fitted on: the bf16
# projections (each format's projection GEMMs are the profile's own).
_MLA_FORMAT = "bf16"


@dataclass(frozen=True)
class Comparison:
    """One stack against the default on one GPU and family."""

    gpu: str
    stack: str
    family: str
    n: int                  # shapes both ran (fit grid; compute-bound only for fp8 GEMMs)
    median_ratio: float     # stack time / default-stack time
    p10_ratio: float
    p90_ratio: float

    @property
    def material(self) -> bool:
        return abs(self.median_ratio - 1.0) > MATERIAL


def _comparison(gpu: str, stack: str, family: str, r: np.ndarray) -> Comparison:
    """One comparison from the stack's time over the default's, one ratio a shape or row."""
    return Comparison(gpu, stack, family, len(r), float(np.median(r)), float(np.percentile(r, 10)),
                      float(np.percentile(r, 90)))


def grid_rows(kd: KernelData, stack: str, family: str, profile: str) -> pd.DataFrame:
    """``stack``'s rows of ``family`` on ``profile`` that the stacks are compared on: the fit grid
    (the custom all-reduce only; compute-bound rows only for fp8 GEMMs)."""
    df = kd.stack(stack, family, profile)
    if "on_grid" in df:
        df = df[df["on_grid"]]
    if family == "allreduce" and len(df):
        df = df[df["impl"] != "nccl"]
    if family == FP8_GEMM and len(df):
        df = df[quantised_gemm.compute_bound(df)]
    return df


def compare(kd: KernelData, profile: str) -> list[Comparison]:
    """Every other stack against the default on ``profile``'s shared shapes."""
    out = []
    for family in FAMILIES:
        base = grid_rows(kd, DEFAULT_STACK, family, profile)
        if not len(base):
            continue
        keys = _KEYS[family]
        base = base.groupby(keys)["t_s"].mean().rename("base")
        for stack in kernel_stacks():
            if stack == DEFAULT_STACK:
                continue
            other = grid_rows(kd, stack, family, profile)
            if not len(other):
                continue
            j = pd.concat([other.groupby(keys)["t_s"].mean().rename("other"), base], axis=1, join="inner")
            if not len(j):
                continue
            out.append(_comparison(profile, stack, family, (j["other"] / j["base"]).to_numpy()))
    return out


def _mla_rows(rows: pd.DataFrame, gpu: HardwareProfile) -> pd.DataFrame:
    return rows[(rows["profile"] == gpu.name) & (rows["gemm_type"] == "bfloat16")]


def _mla_predict(rows: pd.DataFrame, gpu: HardwareProfile, decode: RooflineParams, fmt: str = _MLA_FORMAT
                 ) -> np.ndarray:
    cal = gpu.calibration
    return moe_mla.predict_module(rows, gpu, cal.mla_prefill, decode, cal.mla_projection[fmt])


def compare_mla(rows: pd.DataFrame, gpu: HardwareProfile, stack: str) -> list[Comparison]:
    """``stack``'s MLA generation modules on ``gpu`` (:func:`.moe_mla.stack_generation_modules`)
    against the profile's parameters: the default stack's time is what they price (they are
    fitted on its module rows), so the ratio is the stack's measured time over that. Empty
    where ``gpu`` has no MLA calibration or no such rows."""
    rows = _mla_rows(rows, gpu)
    if not len(rows) or _MLA_FORMAT not in gpu.calibration.mla_projection:
        return []
    return [_comparison(gpu.name, stack, MLA_DECODE,
                        rows["t_s"].to_numpy() / _mla_predict(rows, gpu, gpu.calibration.mla_decode))]


def compare_moe(rows: pd.DataFrame, gpu: HardwareProfile, stack: str) -> list[Comparison]:
    """``stack``'s MoE rows on ``gpu`` (:func:`.moe_stacks.stack_rows`) against what the profile's
    sets price them at (:func:`.moe_mla.predict_priced`, the layout's set as a replica runs it),
    one comparison per format the profile calibrates and regime (family ``moe <fmt>`` without
    expert parallelism, ``moe_ep <fmt>`` with it; ``n``: rows)."""
    out = []
    for fmt, d in rows[rows["profile"] == gpu.name].groupby("moe_dtype"):
        if str(fmt) not in gpu.calibration.moe:
            continue
        d = d.reset_index(drop=True)
        r = d["t_s"].to_numpy() / moe_mla.predict_priced(d, gpu)
        for regime in moe_stacks.REGIMES:
            sel = (d["regime"] == regime).to_numpy()
            if sel.any():
                out.append(_comparison(gpu.name, stack, f"{regime} {fmt}", r[sel]))
    return out


def _fit_mla_decode(rows: pd.DataFrame, gpu: HardwareProfile) -> tuple[RooflineParams, dict[str, FitError]]:
    """The decode kernel refitted on the stack's bf16 modules (prefill and projections kept), and its
    error on each projection format's rows."""
    sub = moe_mla.fit_subset(_mla_rows(rows, gpu))
    p = fit_params(MLA_DECODE, space(MLA_DECODE, sub), lambda q: _mla_predict(sub, gpu, q),
                   sub["t_s"].to_numpy()).params
    errors = {}
    for gt, d in rows[rows["profile"] == gpu.name].groupby("gemm_type"):
        fmt = moe_dtype(str(gt))
        if fmt in gpu.calibration.mla_projection:
            errors[f"mla_generation_module {fmt}"] = _error(_mla_predict(d, gpu, p, fmt), d["t_s"].to_numpy())
    return p, errors


def _error(pred: np.ndarray, t: np.ndarray) -> FitError:
    e = ape(pred, t)
    return FitError(median_ape=round(float(np.median(e)), 2), p90_ape=round(float(np.percentile(e, 90)), 2), n=len(e))


def _fit_allreduce(rows: pd.DataFrame, gpu: HardwareProfile, base: AllReduceParams) -> AllReduceParams:
    sp = fields_space(base, _CUSTOM_AR, (0.02, 0.0), (1.0, 100.0))
    fit = fit_params("allreduce", sp, lambda p: evaluate.allreduce(rows, gpu, p), rows["t_s"].to_numpy())
    return AllReduceParams.model_validate(fit.params.model_dump())


def overrides(kd: KernelData, gpu: HardwareProfile, comparisons: list[Comparison],
              mla: dict[str, pd.DataFrame] | None = None,
              moe: dict[str, pd.DataFrame] | None = None,
              stored: dict[str, StackKernels] | None = None) -> dict[str, StackKernels]:
    """The ``calibration.stacks`` block of ``gpu`` (already calibrated on the
    default stack): one entry per stack with at least one material family.
    ``mla``: each stack's MLA generation-module rows, which a material
    ``mla_decode`` comparison is refitted on; ``moe``: each stack's MoE rows
    (:func:`compare_moe`), which a material format and regime is refitted on; ``stored``: the
    overrides the profile held (default: ``gpu``'s), kept where a refit prices the same
    (:func:`.fit.settled`)."""
    cal = gpu.calibration
    stored = cal.stacks if stored is None else stored
    out: dict[str, StackKernels] = {}
    for stack in kernel_stacks():
        material = [c for c in comparisons if c.stack == stack and c.material]
        if not material:
            continue
        fields: dict = {}
        errors: dict[str, FitError] = {}
        notes = []
        for c in material:
            if c.family == MLA_DECODE:
                rows = (mla or {})[stack]
            elif moe_stacks.is_moe_family(c.family):
                rows = moe_stacks.family_rows((moe or {})[stack], gpu.name, c.family)
            else:
                rows = grid_rows(kd, stack, c.family, gpu.name)
            t = rows["t_s"].to_numpy()
            if c.family == FP8_GEMM:
                all_rows = kd.stack(stack, FP8_GEMM, gpu.name)
                f = quantised_gemm.fit(all_rows, gpu, cal.gemm)
                if f is None:
                    continue
                fields["fp8_gemm_efficiency"] = f.efficiency
                errors[FP8_GEMM] = f.all_rows
                errors[f"{FP8_GEMM} compute-bound"] = f.compute_bound
            elif c.family == MLA_DECODE:
                fields[MLA_DECODE], mla_errors = _fit_mla_decode(rows, gpu)
                errors.update(mla_errors)
            elif moe_stacks.is_moe_family(c.family):
                regime, fmt = c.family.split()
                p = moe_mla.fit_moe(rows, gpu).params
                fields.setdefault(regime, {})[fmt] = p
                errors[c.family] = _error(moe_mla.predict_moe(rows, gpu, p), t)
            elif c.family == "allreduce":
                fields["allreduce"] = _fit_allreduce(rows, gpu, cal.allreduce)
                errors["allreduce custom"] = _error(evaluate.allreduce(rows, gpu, fields["allreduce"]), t)
            else:
                held = stored[stack] if stack in stored else None
                fields[c.family] = settled(getattr(held, c.family, None), fit_family(c.family, rows, gpu),
                                           evaluate.evaluator(c.family, rows, gpu), t).params
                errors[c.family] = _error(evaluate.PREDICT[c.family](rows, gpu, fields[c.family]), t)
            notes.append(f"{c.family} × {c.median_ratio:.3f}")
        if fields:
            rule = (f"{stack}'s own kernels where its measured time on the shapes both stacks ran differs from "
                    f"{DEFAULT_STACK}'s by more than {MATERIAL:.0%} at the median ({', '.join(notes)}); refitted "
                    f"on its fit-grid rows" + (" (all-reduce: custom-kernel bandwidth and latency only)"
                                                if "allreduce" in fields else "")
                    + (" (fp8: the efficiency only, compute-bound rows)" if "fp8_gemm_efficiency" in fields else "")
                    + (" (mla_decode: its generation-module rows against the profile's MLA parameters, the decode "
                       "kernel refitted with the projections kept)" if MLA_DECODE in fields else "")
                    + (" (moe, moe_ep: its default kernel's rows, kernels/moe_more.csv.gz, against the profile's "
                       "sets as the engine prices them, each format and regime refitted on its own)"
                       if "moe" in fields or "moe_ep" in fields else ""))
            out[stack] = StackKernels(rule=rule, error=errors, **fields)
    return out


def _error_row(gpu: HardwareProfile, stack: str, family: str, base: np.ndarray, own: np.ndarray,
               t: np.ndarray) -> dict:
    """One :func:`error_rows` row: the profile's own (``base``) and the stack's own (``own``) prices of
    the stack's rows ``t`` against them."""
    e1 = ape(own, t)
    return dict(gpu=gpu.name, stack=stack, family=family, n=len(t), default_median=float(np.median(ape(base, t))),
                default_signed=float(np.median(base / t - 1) * 100), own_median=float(np.median(e1)),
                own_p90=float(np.percentile(e1, 90)))


def mla_error_rows(gpu: HardwareProfile, mla: dict[str, pd.DataFrame]) -> list[dict]:
    """:func:`error_rows` of ``gpu``'s ``mla_decode`` overrides, on each stack's bf16 MLA
    generation-module rows (``mla``)."""
    cal, out = gpu.calibration, []
    for stack, over in cal.stacks.items():
        if over.mla_decode is None or stack not in mla:
            continue
        rows = _mla_rows(mla[stack], gpu)
        out.append(_error_row(gpu, stack, f"{MLA_DECODE} (bf16 modules)", _mla_predict(rows, gpu, cal.mla_decode),
                              _mla_predict(rows, gpu, over.mla_decode), rows["t_s"].to_numpy()))
    return out


def moe_error_rows(gpu: HardwareProfile, moe: dict[str, pd.DataFrame]) -> list[dict]:
    """:func:`error_rows` of ``gpu``'s MoE overrides, on each stack's rows of the format and regime
    (``moe``: :func:`.moe_stacks.stack_rows`)."""
    cal, out = gpu.calibration, []
    for stack, over in cal.stacks.items():
        if stack not in moe:
            continue
        for regime in moe_stacks.REGIMES:
            for fmt, own in getattr(over, regime).items():
                family = f"{regime} {fmt}"
                rows = moe_stacks.family_rows(moe[stack], gpu.name, family)
                out.append(_error_row(gpu, stack, family, moe_mla.predict_priced(rows, gpu),
                                      moe_mla.predict_moe(rows, gpu, own), rows["t_s"].to_numpy()))
    return out


def error_rows(kd: KernelData, gpu: HardwareProfile) -> list[dict]:
    """Per stack override of ``gpu``: the error on the stack's rows of the
    profile's own (vLLM's) parameters and of the stack's own."""
    cal, out = gpu.calibration, []
    for stack, over in cal.stacks.items():
        for family in ("gemm", "attention_prefill", "attention_decode", "allreduce"):
            own = getattr(over, family)
            if own is None:
                continue
            rows = grid_rows(kd, stack, family, gpu.name)
            predict = evaluate.PREDICT[family]
            out.append(_error_row(gpu, stack, family, predict(rows, gpu, getattr(cal, family)),
                                  predict(rows, gpu, own), rows["t_s"].to_numpy()))
        if over.fp8_gemm_efficiency is not None:
            rows = kd.stack(stack, FP8_GEMM, gpu.name)
            rows = rows[quantised_gemm.compute_bound(rows)]
            out.append(_error_row(gpu, stack, f"{FP8_GEMM} (compute-bound)",
                                  quantised_gemm.predict(rows, gpu, cal.gemm, gpu.fp8_gemm_efficiency),
                                  quantised_gemm.predict(rows, gpu, cal.gemm, over.fp8_gemm_efficiency),
                                  rows["t_s"].to_numpy()))
    return out
