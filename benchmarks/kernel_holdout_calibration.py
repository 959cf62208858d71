"""Every measured GPU's op families scored on shapes their fit did not see (docs/calibration.md).

    python benchmarks/kernel_holdout_calibration.py                 # every measured GPU (~6 min, one core)
    python benchmarks/kernel_holdout_calibration.py --gpu h200      # one GPU (~1 min)

Per GPU and op family (the default stack's rows, as `llmsim calibrate`
fits them): the in-sample error, the pooled leave-one-group-out error
(simulator/calibration/holdout.py FAMILY_GROUPS: one k out for GEMMs, one
head configuration out for attention, one message size out for the
all-reduce), and, where the kernel table measures more shapes than the fit
grid, the shipped fit's error on those other shapes.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from simulator.calibration import data, evaluate, holdout  # noqa: E402
from simulator.calibration.fit import ape, fit_family  # noqa: E402
from simulator.profiles import load_hardware  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", action="append", help="profile (repeatable; default: every measured GPU)")
    ap.add_argument("--data", default=None)
    args = ap.parse_args()
    kd = data.load(args.data)
    names = args.gpu or kd.profiles
    print("| GPU | op family | rows | in-sample median / p90 | held out by | groups | leave one group out "
          "median / p90 | other shapes: rows | median / p90 |")
    print("|---|---|---:|---|---|---:|---|---:|---|")
    for name in names:
        gpu = load_hardware(name)
        for fam in data.FAMILIES:
            df = kd.family(fam, name)
            if not len(df):
                continue
            fit = fit_family(fam, df, gpu)
            s = holdout.family_leave_one_group_out(fam, df, gpu)
            other = kd.held_out.get(fam)
            other = other[other["profile"] == name] if other is not None else other
            if other is not None and len(other):
                e = ape(evaluate.PREDICT[fam](other, gpu, fit.params), other["t_s"].to_numpy())
                tail = f"{len(other)} | {np.median(e):.1f}% / {np.percentile(e, 90):.1f}%"
            else:
                tail = "– | –"
            print(f"| {name} | {fam} | {fit.n} | {fit.median_ape:.1f}% / {fit.p90_ape:.1f}% | {s.grouping} | "
                  f"{s.groups} | {s.median_ape:.1f}% / {s.p90_ape:.1f}% | {tail} |", flush=True)


if __name__ == "__main__":
    main()
