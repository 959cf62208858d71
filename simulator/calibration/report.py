"""How far the model is from the measurements, calibrated and uncalibrated.

The pure roofline column is there so a reader sees what calibration buys
and how optimistic the physical limit is; both are the same component
functions, evaluated with the fitted parameters and with the defaults.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from rich.table import Table

from ..profiles.hardware import Calibration, FitError, HardwareProfile
from . import evaluate, sustained
from .data import FAMILIES, KernelData
from .fit import ape

ROOFLINE = Calibration(status="roofline")

# n and k of the GEMMs a dense model's TP shard runs (and the fit grid spans).
SHARD_WIDTHS = (512, 16384)

COLUMNS = ["gpu", "family", "n", "median_ape", "p90_ape", "roofline_median_ape", "roofline_p90_ape"]


def _row(gpu_name: str, label: str, df: pd.DataFrame, gpu: HardwareProfile, cal: Calibration, family: str) -> dict:
    t = df["t_s"].to_numpy()
    e = ape(evaluate.predict(family, df, gpu, cal), t)
    r = ape(evaluate.predict(family, df, gpu, ROOFLINE), t)
    return dict(gpu=gpu_name, family=label, n=len(df), median_ape=float(np.median(e)),
                p90_ape=float(np.percentile(e, 90)), roofline_median_ape=float(np.median(r)),
                roofline_p90_ape=float(np.percentile(r, 90)))


def error_table(kd: KernelData, gpus: dict[str, HardwareProfile]) -> pd.DataFrame:
    """Per measured GPU and op family, each evaluated with ``gpus[name].calibration``."""
    rows = [_row(name, fam, kd.family(fam, name), gpu, gpu.calibration, fam)
            for name, gpu in gpus.items() for fam in FAMILIES if len(kd.family(fam, name))]
    return pd.DataFrame(rows, columns=COLUMNS)


def slice_table(kd: KernelData, gpus: dict[str, HardwareProfile]) -> pd.DataFrame:
    """The same errors split where one parameter set serves different
    kernels: attention by KV dtype, all-reduce by implementation, GEMMs by
    which roof binds — where the misses concentrate."""
    rows = []
    for name, gpu in gpus.items():
        g = kd.family("gemm", name)
        if len(g):
            f = 2.0 * g["m"] * g["n"] * g["k"] / gpu.peak_flops("bf16")
            b = 2.0 * (g["m"] * g["k"] + g["k"] * g["n"] + g["m"] * g["n"]) / gpu.hbm_bandwidth
            for label, sel in (("gemm m ≤ 64 (memory-bound)", g["m"] <= 64),
                               ("gemm m > 64, near the ridge", (g["m"] > 64) & (f / b < 4)),
                               ("gemm m > 64, compute-bound", (g["m"] > 64) & (f / b >= 4))):
                if sel.any():
                    rows.append(_row(name, label, g[sel], gpu, gpu.calibration, "gemm"))
        for fam in ("attention_prefill", "attention_decode"):
            a = kd.family(fam, name)
            for kvb, grp in a.groupby("kv_bytes"):
                short = fam.replace("attention_", "")
                rows.append(_row(name, f"{short}, {'fp8' if kvb == 1 else 'bf16'} KV", grp, gpu, gpu.calibration, fam))
            if fam == "attention_decode" and len(a):
                long = a[a["context_len"] >= 127]
                rows.append(_row(name, "decode, context ≥ 127", long, gpu, gpu.calibration, fam))
        ar = kd.family("allreduce", name)
        for impl, grp in ar.groupby("impl"):
            rows.append(_row(name, f"allreduce, {impl}", grp, gpu, gpu.calibration, "allreduce"))
        for fam, held in kd.held_out.items():
            h = held[held["profile"] == name]
            if len(h):
                rows.append(_row(name, f"{fam}, other shapes (held out)", h, gpu, gpu.calibration, fam))
            if fam == "gemm" and len(h):
                # the widths serving models' TP shards have (the grid's n and k range)
                lo, hi = SHARD_WIDTHS
                shard = h[h["n"].between(lo, hi) & h["k"].between(lo, hi)]
                rows.append(_row(name, f"gemm, other shapes with {lo} ≤ n, k ≤ {hi:,} (held out)", shard, gpu,
                                 gpu.calibration, "gemm"))
    return pd.DataFrame(rows, columns=COLUMNS)


def fit_errors(table: pd.DataFrame, gpu_name: str) -> dict[str, FitError]:
    """The ``error:`` block of a profile, from its rows of the error table."""
    out = {}
    for r in table[table["gpu"] == gpu_name].itertuples():
        out[r.family] = FitError(median_ape=round(r.median_ape, 2), p90_ape=round(r.p90_ape, 2), n=int(r.n))
    return out


def rich_table(table: pd.DataFrame, title: str) -> Table:
    t = Table(title=title, title_justify="left")
    t.add_column("GPU", no_wrap=True)
    t.add_column("op family", no_wrap=True)
    for c in ("rows", "median APE", "p90 APE", "roofline median", "roofline p90"):
        t.add_column(c, justify="right")
    for r in table.itertuples():
        t.add_row(r.gpu, r.family, str(r.n), f"{r.median_ape:.1f}%", f"{r.p90_ape:.1f}%",
                  f"{r.roofline_median_ape:.1f}%", f"{r.roofline_p90_ape:.1f}%")
    return t


def markdown_table(table: pd.DataFrame) -> str:
    lines = ["| GPU | op family | rows | calibrated median APE | calibrated p90 APE | "
             "roofline median APE | roofline p90 APE |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in table.itertuples():
        lines.append(f"| {r.gpu} | {r.family} | {r.n} | {r.median_ape:.1f}% | {r.p90_ape:.1f}% | "
                     f"{r.roofline_median_ape:.1f}% | {r.roofline_p90_ape:.1f}% |")
    return "\n".join(lines) + "\n"


def ceilings_markdown(rows: dict[str, list[dict]]) -> str:
    lines = ["| GPU | quantity | measured | calibrated model, same rows | fitted asymptote (η·peak) | datasheet peak |",
             "|---|---|---:|---:|---:|---:|"]
    for gpu, items in rows.items():
        for c in items:
            lines.append(f"| {gpu} | {c['quantity']} | {c['measured']:.3g} | {c['model']:.3g} | "
                         f"{c['asymptote']:.3g} | {c['peak']:.4g} |")
    return "\n".join(lines) + "\n"


def ceilings_rich(rows: dict[str, list[dict]]) -> Table:
    t = Table(title="measured ceilings vs the fit", title_justify="left")
    t.add_column("GPU", no_wrap=True)
    t.add_column("quantity")
    for c in ("measured", "model, same rows", "asymptote η·peak", "peak"):
        t.add_column(c, justify="right")
    for gpu, items in rows.items():
        for c in items:
            t.add_row(gpu, c["quantity"], f"{c['measured']:.3g}", f"{c['model']:.3g}", f"{c['asymptote']:.3g}",
                      f"{c['peak']:.4g}")
    return t


def markdown_report(errors: pd.DataFrame, slices: pd.DataFrame, ceilings: dict[str, list[dict]],
                    command: str, kernels: pd.DataFrame | None = None, fp8: pd.DataFrame | None = None,
                    stacks: list | None = None, material: float = 0.1,
                    stack_errors: pd.DataFrame | None = None, sustained_rows: list | None = None,
                    sustained_factors: dict[str, float] | None = None) -> str:
    """The generated part of docs/calibration.md (the prose around it is hand-written)."""
    return (f"Reproduce with `{command}`.\n\n"
            "### Error per GPU and op family\n\n"
            "APE = |model/measured − 1|; *calibrated* is the fitted profile, *roofline* the same "
            "components with η = 1 and no fixed costs.\n\n"
            + markdown_table(errors)
            + "\n### Where the misses are\n\n" + markdown_table(slices)
            + "\n### Measured ceilings vs the fit\n\n" + ceilings_markdown(ceilings)
            + ("\n### fp8 GEMMs\n\n" + fp8_markdown(fp8) if fp8 is not None and len(fp8) else "")
            + ("\n### Per-stack kernels\n\n" + stacks_markdown(stacks, material) if stacks else "")
            + ("\n### Per-stack overrides on their stack's rows\n\n" + stack_errors_markdown(stack_errors)
               if stack_errors is not None and len(stack_errors) else "")
            + ("\n### GEMMs under sustained load\n\n" + sustained.markdown(sustained_rows, sustained_factors or {})
               if sustained_rows else "")
            + ("\n### MoE experts and MLA modules (in-sample)\n\n" + kernels_markdown(kernels)
               if kernels is not None and len(kernels) else ""))


def kernels_markdown(table: pd.DataFrame) -> str:
    lines = ["| GPU | MoE format / MLA module | rows | median APE | p90 APE |", "|---|---|---:|---:|---:|"]
    for r in table.itertuples():
        lines.append(f"| {r.gpu} | {r.family} | {r.n} | {r.median_ape:.1f}% | {r.p90_ape:.1f}% |")
    return "\n".join(lines) + "\n"


def kernels_rich(table: pd.DataFrame) -> Table:
    t = Table(title="MoE experts and MLA modules vs measured (in-sample)", title_justify="left")
    for c in ("GPU", "format / module"):
        t.add_column(c, no_wrap=True)
    for c in ("rows", "median APE", "p90 APE"):
        t.add_column(c, justify="right")
    for r in table.itertuples():
        t.add_row(r.gpu, r.family, str(r.n), f"{r.median_ape:.1f}%", f"{r.p90_ape:.1f}%")
    return t


def fp8_table(fits: dict) -> pd.DataFrame:
    """fp8_gemm_efficiency per GPU and its errors (all fit-grid rows, compute-bound ones)."""
    return pd.DataFrame([dict(gpu=g, efficiency=f.efficiency, n=f.all_rows.n, median_ape=f.all_rows.median_ape,
                              p90_ape=f.all_rows.p90_ape, n_compute=f.compute_bound.n,
                              compute_median_ape=f.compute_bound.median_ape, compute_p90_ape=f.compute_bound.p90_ape)
                         for g, f in fits.items()])


def _markdown(header: list[str], right: list[bool], rows: list[list[str]]) -> str:
    """A markdown table, right-aligned where ``right`` says (numbers)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if r else "---" for r in right) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def fp8_markdown(table: pd.DataFrame) -> str:
    return _markdown(["GPU", "fp8_gemm_efficiency", "rows", "median APE", "p90 APE", "compute-bound rows (> 1 TFLOP)",
                      "median APE", "p90 APE"], [False] + [True] * 7,
                     [[r.gpu, f"{r.efficiency:g}", str(r.n), f"{r.median_ape:.1f}%", f"{r.p90_ape:.1f}%",
                       str(r.n_compute), f"{r.compute_median_ape:.1f}%", f"{r.compute_p90_ape:.1f}%"]
                      for r in table.itertuples()])


def stacks_markdown(comparisons: list, material: float) -> str:
    text = _markdown(["GPU", "stack", "op family", "shapes both ran", "median time ratio to vLLM", "p10–p90",
                      "own parameters"], [False, False, False, True, True, False, False],
                     [[c.gpu, c.stack, c.family, str(c.n), f"{c.median_ratio:.3f}",
                       f"{c.p10_ratio:.2f}–{c.p90_ratio:.2f}", "yes" if c.material else "no"] for c in comparisons])
    agree = [abs(c.median_ratio - 1) for c in comparisons if not c.material]
    if agree:
        text += (f"\nWhere no override is written the stacks agree within {max(agree):.1%} at the median "
                 f"(threshold {material:.0%}).\n")
    return text


def stack_errors_markdown(table: pd.DataFrame) -> str:
    return _markdown(["GPU", "stack", "op family", "rows", "vLLM's parameters: median APE (signed)",
                      "own parameters: median / p90 APE"], [False, False, False, True, True, True],
                     [[r.gpu, r.stack, r.family, str(r.n), f"{r.default_median:.1f}% ({r.default_signed:+.1f}%)",
                       f"{r.own_median:.1f}% / {r.own_p90:.1f}%"] for r in table.itertuples()])


def stacks_rich(comparisons: list) -> Table:
    t = Table(title="other stacks' kernels against vLLM's, same shapes (time ratio)", title_justify="left")
    for c in ("GPU", "stack", "op family"):
        t.add_column(c, no_wrap=True)
    for c in ("shapes", "median", "p10–p90", "own params"):
        t.add_column(c, justify="right")
    for c in comparisons:
        t.add_row(c.gpu, c.stack, c.family, str(c.n), f"{c.median_ratio:.3f}",
                  f"{c.p10_ratio:.2f}–{c.p90_ratio:.2f}", "yes" if c.material else "no")
    return t


def fp8_rich(table: pd.DataFrame) -> Table:
    t = Table(title="fp8 GEMMs: fitted fp8_gemm_efficiency and errors", title_justify="left")
    t.add_column("GPU", no_wrap=True)
    for c in ("efficiency", "rows", "median APE", "compute-bound rows", "median APE"):
        t.add_column(c, justify="right")
    for r in table.itertuples():
        t.add_row(r.gpu, f"{r.efficiency:g}", str(r.n), f"{r.median_ape:.1f}%", str(r.n_compute),
                  f"{r.compute_median_ape:.1f}%")
    return t
