"""How fast dense FP4 (NVFP4) GEMMs really run on Blackwell, fitted on the measured NVFP4 GEMMs.

    python benchmarks/fp4_efficiency.py            # fit per GPU and stack, print
    python benchmarks/fp4_efficiency.py --write    # also write fp4_gemm_efficiency into the FP4 profiles

A datasheet quadruples the tensor-core peak for FP4 (B200: 9,000 against
2,250 dense TFLOP/s), and the dense GEMM fit llmsim prices linear layers
with is a bf16 fit. ``fp4_gemm_efficiency`` is the fraction of that fit's
compute efficiency NVFP4 GEMMs reach at the FP4 peak, as
``fp8_gemm_efficiency`` is for fp8.

It is fitted as the fp8 one is (``simulator/calibration/quantised_gemm.py``):
on the compute-bound rows (above 1 TFLOP) of the measured NVFP4 GEMMs of
the fit grid's shapes (``kernels/gemm_h200_b200.csv.gz``: each stack's
NVFP4 linear kernel on B200 and GB200, FP4 weights and activations with
their block scales). Each stack's table is an independent collection on
its own machines, so the profile takes the median over the stacks' fits
(as ``gemm.sustained`` does), and the table shows each stack's error at
that value. B300 and GB300 take their measured sibling's value with the
calibration they copy, MI355X (OCP MXFP4 on FP4 units) B200's.

The projections of vLLM's MLA attention modules (``kernels/mla.csv.gz``,
DeepSeek-V3 shapes in bf16, block fp8 and NVFP4, each with its input's
quantisation, fitted per format on all their rows by ``llmsim calibrate``
as ``calibration.mla_projection``) give the same ratios another way; the
second table prints them for every GPU with such fits, as the ratio of the
fitted compute efficiencies and as that of whole projection times at
16,384 tokens for 128 and 16 heads per GPU, next to the value each profile
carries: a check, not a source.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accuracy import DATA  # noqa: E402  (also puts the repository on sys.path)
from fp8_efficiency import write  # noqa: E402

from simulator.calibration import data, quantised_gemm  # noqa: E402
from simulator.calibration.fit import ape  # noqa: E402
from simulator.calibration.moe_mla import _shape  # noqa: E402
from simulator.costmodel.mla import mla_projection_time  # noqa: E402
from simulator.profiles import load_hardware  # noqa: E402

MEASURED = ("b200", "gb200-nvl72")
MLA_GPUS = ("h100-sxm", "h200", "b200")
FORMATS = {"fp8_block": ("fp8", 2.0), "nvfp4": ("fp4", 4.0)}   # format -> (compute dtype, peak over bf16)
TOKENS = 16384
# profile -> the measured GPU whose value it takes (with the calibration it copies)
COPIES = {"b300": "b200", "gb300-nvl72": "gb200-nvl72", "mi355x": "b200"}


def fits(kd: data.KernelData) -> dict[str, dict[str, quantised_gemm.EfficiencyFit]]:
    """GPU -> stack -> the NVFP4 efficiency fitted on that stack's measured GEMMs."""
    out: dict[str, dict[str, quantised_gemm.EfficiencyFit]] = {}
    for name in MEASURED:
        gpu = load_hardware(name)
        for stack in data.kernel_stacks():
            rows = kd.stack(stack, data.FP4_GEMM, name)
            f = quantised_gemm.fit(rows, gpu, gpu.calibration.gemm, "fp4") if len(rows) else None
            if f is not None:
                out.setdefault(name, {})[stack] = f
    return out


def chosen(per_stack: dict[str, quantised_gemm.EfficiencyFit]) -> float:
    """The profile's value: the median over the stacks' fits, two digits."""
    return round(float(np.median([f.efficiency for f in per_stack.values()])), 2)


def at(kd: data.KernelData, name: str, stack: str, eff: float) -> float:
    """Median |error| (%) of ``stack``'s compute-bound NVFP4 GEMMs on ``name`` at efficiency ``eff``."""
    gpu = load_hardware(name)
    rows = kd.stack(stack, data.FP4_GEMM, name)
    rows = rows[quantised_gemm.compute_bound(rows)]
    pred = quantised_gemm.predict(rows, gpu, gpu.calibration.gemm, eff, "fp4")
    return float(np.median(ape(pred, rows["t_s"].to_numpy())))


def mla_ratios(gpu_name: str) -> dict[str, dict[str, float]]:
    """Per format of the GPU's MLA-projection fits: the compute-efficiency ratio
    to bf16, and the time-based one at 128 and 16 heads per GPU."""
    gpu = load_hardware(gpu_name)
    fits = gpu.calibration.mla_projection
    out: dict[str, dict[str, float]] = {}
    if "bf16" not in fits:
        return out
    for fmt, (cdt, peak_ratio) in FORMATS.items():
        if fmt not in fits:
            continue
        row = {"eta_ratio": fits[fmt].eta_compute / fits["bf16"].eta_compute,
               "profile": gpu.linear_efficiency(cdt)}
        for heads in (128, 16):
            s = _shape(heads)
            t16 = mla_projection_time(TOKENS, s, gpu, fits["bf16"], "bf16")
            tq = mla_projection_time(TOKENS, s, gpu, fits[fmt], fmt)
            row[f"time_{heads}"] = t16 / tq / peak_ratio
        out[fmt] = row
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="write the fitted values into the FP4 GPU profiles")
    args = ap.parse_args(argv)
    kd = data.load(DATA)
    table = fits(kd)
    print("| GPU | stack | rows | compute-bound rows | fitted efficiency | median APE, compute-bound | "
          "profile value (median of stacks) | median APE there |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, per_stack in table.items():
        eff = chosen(per_stack)
        for stack, f in per_stack.items():
            print(f"| {name} | {stack} | {f.all_rows.n} | {f.compute_bound.n} | {f.efficiency:.3f} | "
                  f"{f.compute_bound.median_ape:.1f} % | {eff:g} | {at(kd, name, stack, eff):.1f} % |")
    print()
    print(f"| GPU | format | MLA projections: efficiency ratio to bf16 | from projection times, {TOKENS} tokens, "
          "128 / 16 heads | profile carries |")
    print("|---|---|---:|---:|---:|")
    for g in MLA_GPUS:
        for fmt, r in mla_ratios(g).items():
            print(f"| {g} | {fmt} | {r['eta_ratio']:.3f} | {r['time_128']:.3f} / {r['time_16']:.3f} | "
                  f"{r['profile']:g} |")
    if args.write:
        for name, per_stack in table.items():
            n = sum(f.compute_bound.n for f in per_stack.values())
            write(chosen(per_stack), (name,),
                  f"median over {len(per_stack)} stacks' fits on {n} measured compute-bound NVFP4 GEMMs, by "
                  "`python benchmarks/fp4_efficiency.py --write` (docs/calibration-transfer.md)",
                  key="fp4_gemm_efficiency")
        for target, source in COPIES.items():
            if source in table:
                write(chosen(table[source]), (target,), f"{source}'s, with the calibration it copies, by "
                      "`python benchmarks/fp4_efficiency.py --write`", key="fp4_gemm_efficiency")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
