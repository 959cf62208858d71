"""Measured ceilings: the best rates the kernels actually reach.

Two uses. (1) A sanity check on the fit: the model's effective GEMV
bandwidth on the large-weight rows, its GEMM throughput asymptote and its
NCCL bus bandwidth should sit next to what the measurements show (e.g. bf16
GEMV ≈ 2.8 TB/s on H100 SXM, not the 3.35 TB/s datasheet figure). (2) The
transfer rule: ``hardware_datasheets.csv`` lists measured ceilings for some
GPUs we have no kernel table for (L40S), which says how much
of its datasheet peak each reaches relative to its measured sibling.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import LlmsimError
from ..profiles.hardware import Calibration, HardwareProfile, data_name_map
from . import evaluate
from .data import KernelData

# Large GEMVs: few tokens, weights far beyond L2, so HBM streaming dominates.
GEMV_MAX_M = 8
GEMV_MIN_WEIGHT_BYTES = 256 * 2**20


def _gemv_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[(df["m"] <= GEMV_MAX_M) & (df["n"] * df["k"] * 2.0 >= GEMV_MIN_WEIGHT_BYTES)]


def _gemm_bytes(df: pd.DataFrame) -> np.ndarray:
    m, n, k = df["m"].to_numpy(), df["n"].to_numpy(), df["k"].to_numpy()
    return 2.0 * (m * k + k * n + m * n)


def _busbw(df: pd.DataFrame, t: np.ndarray) -> np.ndarray:
    n = df["num_gpus"].to_numpy()
    return 2.0 * (n - 1) / n * df["message_bytes"].to_numpy() / t


def compare(kd: KernelData, profile: str, gpu: HardwareProfile, cal: Calibration) -> list[dict]:
    """Measured ceiling vs the calibrated model on the same rows, and the
    model's asymptote (what η·peak allows), one dict per quantity."""
    rows = []
    g = _gemv_rows(kd.family("gemm", profile))
    if len(g):
        meas = np.median(_gemm_bytes(g) / g["t_s"].to_numpy()) / 1e12
        model = np.median(_gemm_bytes(g) / evaluate.gemm(g, gpu, cal.gemm)) / 1e12
        rows.append(dict(quantity=f"GEMV TB/s (median of {len(g)}: m ≤ {GEMV_MAX_M}, weights ≥ 256 MiB)",
                         measured=meas, model=model,
                         asymptote=gpu.hbm_bandwidth_tb_s * cal.gemm.eta_memory, peak=gpu.hbm_bandwidth_tb_s))
    df = kd.family("gemm", profile)
    flops = 2.0 * df["m"].to_numpy() * df["n"].to_numpy() * df["k"].to_numpy()
    big = df["m"].to_numpy() >= 4096
    if big.any():
        rows.append(dict(quantity=f"GEMM TFLOP/s (median of {int(big.sum())}: m ≥ 4096)",
                         measured=np.median(flops[big] / df["t_s"].to_numpy()[big]) / 1e12,
                         model=np.median(flops[big] / evaluate.gemm(df[big], gpu, cal.gemm)) / 1e12,
                         asymptote=gpu.peak_flops("bf16") * cal.gemm.eta_compute / 1e12,
                         peak=gpu.peak_flops("bf16") / 1e12))
    i = int(np.argmax(flops / df["t_s"].to_numpy()))
    row = df.iloc[[i]]
    rows.append(dict(quantity=f"GEMM TFLOP/s (best: {int(row.m.iloc[0])}×{int(row.n.iloc[0])}×{int(row.k.iloc[0])})",
                     measured=flops[i] / df["t_s"].iloc[i] / 1e12,
                     model=flops[i] / evaluate.gemm(row, gpu, cal.gemm)[0] / 1e12,
                     asymptote=gpu.peak_flops("bf16") * cal.gemm.eta_compute / 1e12,
                     peak=gpu.peak_flops("bf16") / 1e12))
    ar = kd.family("allreduce", profile)
    link = gpu.interconnect.bandwidth_gb_s
    for n, grp in ar[ar["impl"] == "nccl"].groupby("num_gpus"):
        meas = _busbw(grp, grp["t_s"].to_numpy())
        model = _busbw(grp, evaluate.allreduce(grp, gpu, cal.allreduce))
        j = int(np.argmax(meas))
        eta = cal.allreduce.eta_by_gpus.get(int(n), cal.allreduce.eta_bandwidth)
        rows.append(dict(quantity=f"NCCL busbw GB/s ({int(n)} GPUs, best size)",
                         measured=meas[j] / 1e9, model=model[j] / 1e9, asymptote=link * eta, peak=link))
    return rows


def _number_before(text: str, marker: str) -> float | None:
    m = re.search(r"([\d.]+)\s*" + re.escape(marker), text)
    return float(m.group(1)) if m else None


def datasheet(data_dir: Path, gpus: dict[str, HardwareProfile] | None = None) -> dict[str, dict]:
    """Measured ceilings per profile from hardware_datasheets.csv (the row each
    profile's ``data_names.datasheet`` names; ``gpus``: default the built-in
    profiles), as fractions of the same row's datasheet peaks (one
    methodology for all GPUs: TensorRT-LLM 8192³ bf16 GEMM, median large bf16
    GEMV, NCCL busbw)."""
    path = Path(data_dir) / "hardware_datasheets.csv"
    if not path.is_file():
        raise LlmsimError("hardware datasheet table not found (needed for the transfer rule)", source=path)
    df = pd.read_csv(path).set_index("gpu")
    out: dict[str, dict] = {}
    for row_name, profile in data_name_map("datasheet", gpus).items():
        if row_name not in df.index:
            continue
        r = df.loc[row_name]
        c: dict = {}
        tf, bw = str(r.get("measured_bf16_gemm_tflops", "")), str(r.get("measured_hbm_read_tb_s", ""))
        gemm = _number_before(tf, "at 8192^3")
        if gemm is not None and pd.notna(r["bf16_fp16_dense_tflops"]):
            c["gemm_fraction"] = gemm / float(r["bf16_fp16_dense_tflops"])
        gemv = re.search(r"median ([\d.]+)", bw)
        if gemv and pd.notna(r["hbm_bandwidth_tb_s"]):
            c["gemv_fraction"] = float(gemv.group(1)) / float(r["hbm_bandwidth_tb_s"])
        ar = str(r.get("measured_allreduce_busbw_gb_s", ""))
        busbw = {int(n): float(v) for v, n in re.findall(r"([\d.]+) \((\d+)(?: GPU)?\)", ar.split("max:")[-1])}
        c["busbw_gb_s"] = busbw
        out[profile] = c
    return out
