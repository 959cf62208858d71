"""GEMM forms scored on shapes they were not fitted on (docs/calibration.md).

    python benchmarks/gemm_holdout.py                  # both forms, every grouping (~4 min, one core)
    python benchmarks/gemm_holdout.py --form waves     # the shipped form only

For each measured GPU and GEMM form: in-sample median/p90 APE, the pooled
leave-one-group-out errors (groupings of simulator/calibration/holdout.py:
one model's shapes at TP 1-8, one k, one n), and the cross-GPU transfer of
the form's shape parameters (fit on one GPU, refit only η_c, η_m and the
floor on the other). Reads ../shared/data/kernels/gemm.csv.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from simulator.calibration import data, holdout  # noqa: E402
from simulator.calibration.fit import GEMM_FORMS, fit_family  # noqa: E402
from simulator.profiles import load_hardware  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--form", choices=sorted(GEMM_FORMS), action="append")
    ap.add_argument("--data", default=None)
    args = ap.parse_args()
    kd = data.load(args.data)
    gpus = {name: load_hardware(name) for name in sorted(set(kd.family("gemm")["profile"]))}
    print("| form | GPU | scored on | groups | rows | median APE | p90 APE |")
    print("|---|---|---|---:|---:|---:|---:|")
    for form in args.form or ["waves", "ramps"]:
        for name, gpu in gpus.items():
            df = kd.family("gemm", name)
            f = fit_family("gemm", df, gpu, form)
            print(f"| {form} | {name} | in-sample | – | {f.n} | {f.median_ape:.1f}% | {f.p90_ape:.1f}% |", flush=True)
            for g in holdout.GROUPINGS:
                s = holdout.leave_one_group_out(df, gpu, g, form)
                print(f"| {form} | {name} | leave one {g} out | {s.groups} | {s.rows} | {s.median_ape:.1f}% "
                      f"| {s.p90_ape:.1f}% |", flush=True)
        for src, dst in ((a, b) for a in gpus for b in gpus if a != b):
            s = holdout.cross_gpu(kd.family("gemm", src), gpus[src], kd.family("gemm", dst), gpus[dst], form)
            print(f"| {form} | {dst} | shape parameters from {src} | – | {s.rows} | {s.median_ape:.1f}% "
                  f"| {s.p90_ape:.1f}% |", flush=True)


if __name__ == "__main__":
    main()
