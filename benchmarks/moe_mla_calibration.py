"""MoE expert and MLA module calibration: in-sample and leave-one-shape-out errors.

    python benchmarks/moe_mla_calibration.py [--jobs 2] [--gpu h100-sxm] [--format bf16]

For each GPU × MoE format: fit the MoE parameters (the fit ``llmsim
calibrate`` runs) on the rows, then for each model shape (hidden, expert
width, experts, top-k) refit without it and predict it. Errors are APE =
|model/measured − 1| over rows, split by router distribution (each
leave-one-out refit starts from the all-rows fit with its loss and at most
100 evaluations: the search is local, and this keeps the run in minutes). Every fit
sees at most 3000 seeded-random rows of its slice (``moe_mla.FIT_ROWS``,
as ``llmsim calibrate``); errors are always measured on every row;
``--stride N`` also keeps only every N-th token count for the fits. MLA: the
module fit per GPU (in-sample, per table and linear format) and the
kernel-only functions fitted to the kernel tables where they exist.
Prints markdown tables (the ones in docs/calibration.md).
"""
from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.calibration import moe_mla as X  # noqa: E402
from simulator.calibration.data import default_data_dir  # noqa: E402
from simulator.calibration.fit import ape  # noqa: E402
from simulator.profiles import load_hardware  # noqa: E402

PROFILES = ("h100-sxm", "h200", "b200")


def _stats(e: np.ndarray) -> str:
    e = e[~np.isnan(e)]
    return f"{np.median(e):.1f}% / {np.percentile(e, 90):.1f}%" if len(e) else "n/a"


def moe_slice(args: tuple) -> dict:
    profile, fmt, rows, stride, pool = args
    t0 = time.time()
    gpu = load_hardware(profile)
    rows = rows.reset_index(drop=True)
    if pool:
        fit = X.fit_moe(X.thin_tokens(rows, stride), gpu)
        e_in = ape(X.predict_moe(rows, gpu, fit.params), rows["t_s"].to_numpy())
        e_out = X.leave_one_shape_out(rows, gpu, fit, stride)
        fits = {"all kernels": fit}
    else:
        e_in, e_out, fits = X.leave_one_shape_out_per_kernel(rows, gpu, stride)
    shapes = rows["shape"].to_numpy()
    bal = (rows["distribution"] == "balanced").to_numpy()
    return dict(gpu=profile, fmt=fmt, rows=len(rows), shapes=len(np.unique(shapes)), e_in=e_in, e_out=e_out,
                bal=bal, kernel=rows["kernel"].to_numpy(), shape=shapes, one=(rows["num_tokens"] == 1).to_numpy(),
                params={k: f.params for k, f in fits.items()}, seconds=time.time() - t0)


def mla_gpu(profile: str, data: X.MoeMlaData) -> list[str]:
    gpu = load_hardware(profile)
    lines = []
    fit = X.fit_mla(data, profile, gpu)
    if fit is not None:
        cal = gpu.calibration.model_copy(update=dict(mla_prefill=fit.prefill, mla_decode=fit.decode,
                                                     mla_projection=fit.projection))
        for r in X.error_rows(data, profile, gpu.model_copy(update={"calibration": cal})):
            if r["family"].startswith("mla"):
                lines.append(f"| {profile} | {r['family']} | {r['n']} | {r['median_ape']:.1f}% | {r['p90_ape']:.1f}% |")
    kern = X.fit_mla_kernels(data, profile, gpu)
    if kern is not None:
        for table, fn, p in (("context_mla_perf", X.predict_mla_prefill, kern[0]),
                             ("generation_mla_perf", X.predict_mla_decode, kern[1])):
            d = data.mla_rows(profile, table)
            e = ape(fn(d, gpu, p), d["t_s"].to_numpy())
            lines.append(f"| {profile} | {table} (kernel only) | {len(d)} | {np.median(e):.1f}% | "
                         f"{np.percentile(e, 90):.1f}% |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=None, help="shared data folder (default: found as llmsim calibrate finds it)")
    ap.add_argument("--stride", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--gpu", action="append", choices=PROFILES)
    ap.add_argument("--format", action="append", help="MoE formats (default all)")
    ap.add_argument("--no-mla", action="store_true")
    ap.add_argument("--pool-kernels", action="store_true",
                    help="one fit per format over all its kernel families (default: one per family)")
    a = ap.parse_args()
    t0 = time.time()
    profiles = a.gpu or list(PROFILES)
    data = X.load(a.data or default_data_dir(), {p: load_hardware(p) for p in profiles})
    tasks = [(p, fmt, rows, a.stride, a.pool_kernels) for p in profiles for fmt, rows in data.moe_rows(p).groupby("moe_dtype")
             if not a.format or fmt in a.format]
    tasks.sort(key=lambda t: -len(t[2]))
    res = []
    with ProcessPoolExecutor(a.jobs) as pool:
        for r in pool.map(moe_slice, tasks):   # progress on stderr as slices finish
            res.append(r)
            print(f"{r['gpu']} {r['fmt']}: in {_stats(r['e_in'])}, LOSO {_stats(r['e_out'])} ({r['seconds']:.0f} s)",
                  file=sys.stderr, flush=True)
    res.sort(key=lambda r: (PROFILES.index(r["gpu"]), r["fmt"]))
    print(f"MoE routed experts: APE median / p90 (fits on ≤ {X.FIT_ROWS} random rows, token-count stride {a.stride}; "
          "errors on every row; "
          f"rows faster than the weight-read floor excluded: {data.excluded})\n")
    print("| GPU | format | rows | shapes | in-sample | leave-one-shape-out | LOSO balanced | LOSO power-law "
          "| LOSO 1 token | LOSO ≥ 2 tokens |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in res:
        print(f"| {r['gpu']} | {r['fmt']} | {r['rows']} | {r['shapes']} | {_stats(r['e_in'])} | {_stats(r['e_out'])} | "
              f"{_stats(r['e_out'][r['bal']])} | {_stats(r['e_out'][~r['bal']])} | {_stats(r['e_out'][r['one']])} | "
              f"{_stats(r['e_out'][~r['one']])} |")
    print("\nShapes holding most of each slice's held-out tail (rows above its LOSO p90):\n")
    for r in res:
        e = r["e_out"]
        if np.isnan(e).all():
            continue
        tail = e > np.nanpercentile(e, 90)
        worst = sorted(((int(tail[r["shape"] == s].sum()), s) for s in np.unique(r["shape"])), reverse=True)[:3]
        print(f"- {r['gpu']} {r['fmt']}: " + ", ".join(
            f"{s} {n} of {int((r['shape'] == s).sum())} rows" for n, s in worst))
    split = [r for r in res if len(np.unique(r["kernel"])) > 1]
    if split and not a.pool_kernels:
        print("\nFormats run by more than one kernel family, per family (held out, a family measured on one "
              "shape is predicted by the fit over the format's other kernel families):\n")
        print("| GPU | format | kernel | rows | shapes | in-sample | leave-one-shape-out |")
        print("|---|---|---|---:|---:|---:|---:|")
        for r in split:
            for fam in np.unique(r["kernel"]):
                sel = r["kernel"] == fam
                print(f"| {r['gpu']} | {r['fmt']} | {fam} | {int(sel.sum())} | {len(np.unique(r['shape'][sel]))} | "
                      f"{_stats(r['e_in'][sel])} | {_stats(r['e_out'][sel])} |")
    print("\nFitted parameters (all rows of the slice's kernel family):\n")
    for r in res:
        for fam, p in r["params"].items():
            print(f"- {r['gpu']} {r['fmt']} {fam}: {p.model_dump(exclude_defaults=True)}")
        print(f"  ({r['seconds']:.0f} s)")
    if not a.no_mla:
        print("\nMLA (in-sample): APE median / p90\n")
        print("| GPU | table | rows | median | p90 |")
        print("|---|---|---:|---:|---:|")
        for p in profiles:
            for line in mla_gpu(p, data):
                print(line)
    print(f"\n{time.time() - t0:.0f} s wall")


if __name__ == "__main__":
    main()
