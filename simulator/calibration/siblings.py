"""How much faster a GPU runs the same kernels as its measured sibling, measured.

A GPU without dense GEMM or attention timings may still have rows in the MoE
and MLA tables (``kernels/moe.csv.gz``, ``kernels/mla.csv.gz``), which time
the *same* shapes with the same vLLM version on several GPUs (H100, H200 and
B200). Their speed ratios, split by regime, say what an η transferred from
the sibling should be:

* memory-bound rows: bf16 MoE layers that stream their expert weights at
  ≥ 60% of the sibling's HBM peak and take ≥ 100 µs there (no fixed-cost
  floor). η_m(target) / η_m(sibling) = median speed-up / HBM bandwidth ratio.
* compute-bound rows: bf16 MoE layers at ≥ 50% of the sibling's bf16 peak,
  ≥ 100 µs; where a target has none (B200 shares no such bf16 MoE shape with
  H100), the MLA context module (projections + attention) with ≥ 4096 tokens.
  η_c(target) / η_c(sibling) = median speed-up / bf16 peak ratio.

Both GPUs are found in the tables by their profiles' ``data_names.system``.
``error`` scores the rule on those rows: the target's time predicted as the
sibling's time / (roof ratio × η ratio), against the measured one — for the
ratio measured here and for the datasheet-ceiling ratio it replaces.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..profiles.hardware import HardwareProfile

MIN_TIME_MS = 0.1
MEMORY_FRACTION = 0.6
COMPUTE_FRACTION = 0.5
MLA_MIN_TOKENS = 4096
_MOE_KEYS = ["framework_version", "op_name", "kernel_source", "moe_dtype", "num_tokens", "hidden_size",
             "moe_intermediate_size", "num_experts", "topk", "moe_tp", "moe_ep", "distribution"]
_MLA_KEYS = ["framework_version", "table", "gemm_type", "kv_cache_dtype", "num_heads_per_gpu", "batch_size", "isl"]


@dataclass(frozen=True)
class Regime:
    """One regime's measured η ratio (target over sibling) and the rows behind it."""

    eta_ratio: float
    rows: int
    what: str
    # median/p90 APE of the transferred time on those rows, this ratio vs a given other one
    error: dict[str, tuple[float, float]] = field(default_factory=dict)


def _pairs(df: pd.DataFrame, keys: list[str], source: str, target: str) -> pd.DataFrame:
    g = {k: v.groupby(keys, dropna=False)["latency_ms"].mean() for k, v in df.groupby("gpu")}
    if source not in g or target not in g:
        return pd.DataFrame()
    return pd.concat([g[source].rename("src"), g[target].rename("dst")], axis=1, join="inner").reset_index()


def _moe(data_dir: Path, target: str, src: HardwareProfile) -> tuple[pd.DataFrame, pd.DataFrame]:
    path = data_dir / "kernels" / "moe.csv.gz"
    if not path.is_file():
        return pd.DataFrame(), pd.DataFrame()
    df = pd.read_csv(path)
    j = _pairs(df[(df["framework"] == "vllm") & (df["moe_dtype"] == "bfloat16")], _MOE_KEYS,
               str(src.data_names.system), target)
    if j.empty:
        return j, j
    inter = j["moe_intermediate_size"] / j["moe_tp"]
    local = j["num_experts"] / j["moe_ep"]
    # Expected number of local experts at least one of the routed tokens hits (balanced router).
    hit = local * (1.0 - (1.0 - 1.0 / j["num_experts"]) ** (j["num_tokens"] * j["topk"]))
    weight_bytes = hit * 3.0 * j["hidden_size"] * inter * 2.0
    flops = 2.0 * j["num_tokens"] * j["topk"] * 3.0 * j["hidden_size"] * inter / j["moe_ep"]
    t = j["src"] * 1e-3
    slow = j["src"] >= MIN_TIME_MS
    mem = j[slow & (weight_bytes / t >= MEMORY_FRACTION * src.hbm_bandwidth)]
    comp = j[slow & (flops / t >= COMPUTE_FRACTION * src.peak_flops("bf16"))]
    return mem, comp


def _mla_compute(data_dir: Path, source: str, target: str) -> pd.DataFrame:
    path = data_dir / "kernels" / "mla.csv.gz"
    if not path.is_file():
        return pd.DataFrame()
    df = pd.read_csv(path, low_memory=False)
    df = df[(df["table"] == "mla_context_module_perf") & (df["gemm_type"] == "bfloat16")
            & (df["batch_size"] * df["isl"] >= MLA_MIN_TOKENS)]
    return _pairs(df, _MLA_KEYS, source, target)


def _regime(rows: pd.DataFrame, roof: float, what: str, compare: dict[str, float]) -> Regime:
    speedup = (rows["src"] / rows["dst"]).to_numpy()
    ratio = float(np.median(speedup)) / roof
    err = {}
    for name, r in {"measured": ratio, **compare}.items():
        ape = np.abs(speedup / (roof * r) - 1.0) * 100.0   # predicted dst = src/(roof·r)
        err[name] = (float(np.median(ape)), float(np.percentile(ape, 90)))
    return Regime(ratio, len(rows), what, err)


def measure(data_dir: Path, src: HardwareProfile, target: HardwareProfile,
            datasheet: dict[str, float | None] | None = None) -> dict[str, Regime]:
    """``{"compute": Regime, "memory": Regime}`` for ``target``, each only where rows exist.

    ``datasheet`` holds the ratios of the datasheet-ceiling rule
    (``{"compute": r, "memory": r}``) to score alongside."""
    table, src_table = target.data_names.system, src.data_names.system
    if table is None or src_table is None or table == src_table:
        return {}
    datasheet = {k: (1.0 if v is None else v) for k, v in (datasheet or {}).items()}
    mem, comp = _moe(data_dir, table, src)
    out = {}
    bw = target.hbm_bandwidth / src.hbm_bandwidth
    pk = target.peak_flops("bf16") / src.peak_flops("bf16")
    if len(mem):
        out["memory"] = _regime(mem, bw, f"bf16 MoE layers streaming weights at ≥ 60% of {src.name} HBM, ≥ 100 µs",
                                {"datasheet": datasheet["memory"]} if "memory" in datasheet else {})
    what = f"bf16 MoE layers at ≥ 50% of {src.name} bf16 peak, ≥ 100 µs"
    if not len(comp):
        comp, what = _mla_compute(data_dir, src_table, table), f"bf16 MLA context modules, ≥ {MLA_MIN_TOKENS} tokens"
    if len(comp):
        out["compute"] = _regime(comp, pk, what, {"datasheet": datasheet["compute"]} if "compute" in datasheet else {})
    return out
