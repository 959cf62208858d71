"""The error model behind llmsim's intervals: build it, and measure how often its intervals hold.

    python benchmarks/error_model.py --write --markdown docs/accuracy-reading.md
    python benchmarks/error_model.py --residuals holdout.csv --write --markdown docs/accuracy-reading.md

Residuals are llmsim's out-of-sample errors on the shared measurements:

* the AIConfigurator silicon samples llmsim was never fitted on
  (``benchmarks/holdout_silicon.py``, the rows the backend overheads are
  fitted on left out), and
* the closed-loop rows the overheads are fitted on
  (``closed_loop_silicon.csv``), each model/GPU/stack group predicted with
  overheads fitted on the other groups (``benchmarks/accuracy.py``'s
  leave-one-group-out fit), so none is in sample.

The command replays both (the fit is the slow part: tens of minutes on two
cores; ``--no-closed-loop`` leaves it out) unless ``--residuals`` names CSVs
written earlier (``holdout_silicon.py --csv``, or this script's
``--save-residuals``). ``--write`` stores the model built from all of them
(``backend_profiles/error_model/quantiles.yaml``). Rerun it after any
change to the simulator's predictions: the intervals are only as right as
the residuals are current.

Coverage, leave one group out: for each model/GPU/stack group, the model
is rebuilt without that group's residuals, and each of the group's rows
gets the interval llmsim would give it (its prediction, its regime);
coverage is the share of measured values inside. Width is judged against
the point prediction's own miss: median half-width over median |error|.
The same check is run for the alternatives the shipped chain of cells was
chosen over (``ALTERNATIVES``: without its last dimension, the prompt-length
band; and with the stack as the widest split), so each choice's worth is
printed beside it.

Without the shared data it prints why and exits 0.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generated_section  # noqa: E402
from accuracy import DATA  # noqa: E402  (puts the repository on sys.path)

from simulator.validation.error_model import MODEL_DIMENSIONS, PRIOR_GROUPS  # noqa: E402

SILICON = DATA / "e2e" / "aic_silicon_sample.csv.gz"
ME = "benchmarks/error_model.py"
BEGIN, END = generated_section.markers("error-model-coverage", ME)
TITLE = "Accuracy: reading the errors, and intervals"  # heads a page --markdown creates
MAX_CONCURRENCY = 128
# The command whose --csv is a residual file of the held-out rows: what a model built from such a file
# states as its source (FILE, as the stated command's --residuals FILE), so anyone can rebuild it.
HOLDOUT_CSV = generated_section.command(
    "benchmarks/holdout_silicon.py", "../shared/data/e2e/aic_silicon_sample.csv.gz",
    options=[("--max-concurrency", MAX_CONCURRENCY), ("--jobs", 2), ("--csv", "FILE")])


def closed_loop_residuals(jobs: int, log=print):
    """The closed-loop rows, each group predicted with overheads fitted on the others (as
    benchmarks/accuracy.py's leave-one-group-out table)."""
    from accuracy import CLOSED, _zero

    from simulator.validation.fit import fit
    from simulator.validation.replay import ReplaySettings
    from simulator.validation.report import error_table
    from simulator.validation.rows import rows_from_csv

    rows = [r for r in rows_from_csv(CLOSED) if not r.skip and (r.concurrency or 0) <= MAX_CONCURRENCY]
    res = fit(rows, ReplaySettings(engine=_zero()), workers=jobs, logo=True, progress=log)
    return error_table(rows, res.held_out)


def residuals(paths: list[Path], jobs: int, closed_loop: bool, log=print):
    """The residual table and where it came from: read from ``paths``, or replayed now."""
    import pandas as pd

    if paths:
        frames = [pd.read_csv(p) for p in paths]
        source = "; ".join(_written_by(p, f) for p, f in zip(paths, frames))
        frame = pd.concat(frames, ignore_index=True)
        # holdout_silicon.py --csv also writes its disaggregated rows (mode disagg): the error
        # model reads aggregated replays, as the replay below gives it.
        if "mode" in frame:
            frame = frame[frame["mode"] != "disagg"].drop(columns="mode")
        return frame, source
    import holdout_silicon

    parts = [holdout_silicon.run(SILICON, MAX_CONCURRENCY, jobs, None, log=log)["errors"]]
    source = f"holdout_silicon.py on {SILICON.name}, concurrency <= {MAX_CONCURRENCY}"
    if closed_loop:
        parts.append(closed_loop_residuals(jobs, log))
        source += f"; closed_loop_silicon.csv leave-one-group-out, concurrency <= {MAX_CONCURRENCY}"
    return pd.concat(parts, ignore_index=True), source


def _written_by(path: Path, frame) -> str:
    """Where a residual file came from, as a command to rerun rather than a local file name: a file in
    holdout_silicon.py's --csv layout (its mode column) within the concurrency cap is what
    HOLDOUT_CSV writes; another (this script's --save-residuals) is named as given."""
    capped = "concurrency" not in frame or not (frame["concurrency"] > MAX_CONCURRENCY).any()
    if "mode" in frame and capped:
        return f"FILE, written by `{HOLDOUT_CSV}` (the held-out rows)"
    return f"{path.name} (a residual CSV written earlier)"


def coverage(errors, confidence: float = 0.9, prior_groups: float = PRIOR_GROUPS, dimensions=MODEL_DIMENSIONS):
    """Per held-out row and metric: its interval from a model built without its group (split along
    ``dimensions``), whether the measured value is inside, and how far the bias-corrected median
    (the prediction times exp(centre), what a plan at confidence 0.5 reads) is from it."""
    import numpy as np
    import pandas as pd

    from simulator.metrics.intervals import interval
    from simulator.validation.error_model import Regime, build, regimes, with_e2el

    table = regimes(with_e2el(errors))
    out = []
    for group, rows in table.groupby("group"):
        model = build(errors[errors.group != group], prior_groups, dimensions=dimensions)
        for rec in rows.itertuples():
            lk = model.lookup(rec.m, Regime(*(None if pd.isna(v) else v for v in
                                              (rec.stack, rec.family, rec.moe, rec.load, rec.isl))))
            lo, hi = interval([rec.predicted], lk, confidence)
            out.append({"group": group, "stack": rec.stack, "metric": rec.m, "measured": rec.measured,
                        "predicted": rec.predicted, "lo": lo, "hi": hi,
                        "inside": bool(lo <= rec.measured <= hi), "widened": len(lk.widened) if lk else None,
                        "half_width_pct": 100 * (hi - lo) / 2 / rec.measured,
                        "abs_error_pct": 100 * abs(rec.predicted - rec.measured) / rec.measured,
                        "centred_error_pct": (100 * abs(rec.predicted * np.exp(lk.cell.centre) - rec.measured)
                                              / rec.measured) if lk else np.nan})
    return pd.DataFrame(out).assign(covered=lambda d: d.inside.astype(float)) if out else pd.DataFrame()


def coverage_summary(cov, by=("metric",)):
    g = cov.groupby(list(by))
    s = g.agg(rows=("inside", "size"), groups=("group", "nunique"), covered_pct=("covered", "mean"),
              median_half_width_pct=("half_width_pct", "median"), median_abs_error_pct=("abs_error_pct", "median"))
    s["covered_pct"] *= 100
    s["width_over_error"] = s.median_half_width_pct / s.median_abs_error_pct
    return s.reset_index()


#: Chains of cells the shipped one (MODEL_DIMENSIONS) is compared with: without the prompt-length
#: band, and stack before model kind (a stack's few dense groups then borrow its MoE bias).
ALTERNATIVES = (MODEL_DIMENSIONS[:-1], ("stack", "moe", "isl"))


def split_comparison(covs):
    """Per metric and per chain of dimensions (``{"stack moe isl": cov, ...}``): coverage, half-width
    and the bias-corrected median's miss, each on groups the model was built without."""
    import pandas as pd

    parts = []
    for chain, cov in covs.items():
        s = coverage_summary(cov).assign(split_on=chain)
        s["median_centred_error_pct"] = cov.groupby("metric").centred_error_pct.median().reindex(s.metric).values
        parts.append(s[["metric", "split_on", "covered_pct", "median_half_width_pct", "median_centred_error_pct",
                        "median_abs_error_pct"]])
    return pd.concat(parts).sort_values("metric", kind="stable")  # per metric: the shipped chain first


def per_group(cov):
    """The group's share inside, per metric: where the intervals miss."""
    piv = cov.pivot_table(index="group", columns="metric", values="covered", aggfunc="mean") * 100
    piv.columns = [f"{c} covered %" for c in piv.columns]
    n = cov[cov.metric == "ttft"].groupby("group").size().rename("rows")
    return piv.join(n).reset_index().sort_values("rows", ascending=False)


def _took(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def markdown(cov, model, source: str, cmd: str, wall: float, comparison=None) -> str:
    from simulator.validation.report import markdown as md

    cells = {m: len(c) for m, c in model.cells.items()}
    lines = [f"Generated {_dt.date.today().isoformat()} by `{cmd}` ({_took(wall)} wall). Residuals: {source}; "
             f"{cov.group.nunique()} model/GPU/stack groups. Each group's intervals come from an error model built "
             f"without that group's residuals (a regime's own centre and spread weigh groups / (groups + "
             f"{model.prior_groups:g}) against the wider regime's). 90 % intervals; `width_over_error` = median "
             f"half-width / median |error| of llmsim's point prediction.", "",
             md(coverage_summary(cov)), "", "Per stack:", "", md(coverage_summary(cov, ("metric", "stack"))), "",
             "Per held-out group (share of its measured values inside its 90 % intervals):", "",
             md(per_group(cov), floatfmt="{:.0f}"), "",
             "Cells of the shipped model (built from every group): "
             + ", ".join(f"{m} {n}" for m, n in sorted(cells.items())) + "."]
    if comparison is not None:
        lines += ["", "The shipped chain of cells against the alternatives (the same held-out groups; "
                  "`median_centred_error_pct`: the bias-corrected median's miss, what a plan at confidence 0.5 "
                  "reads; `median_abs_error_pct`: the plain prediction's):", "", md(comparison)]
    return "\n".join(lines)


def write_model(model, source: str, cmd: str, rows: int) -> Path:
    import yaml

    from simulator.validation.error_model import default_path

    model.meta.update({"source": f"{source}; AIConfigurator silicon samples (github.com/ai-dynamo/aiconfigurator, "
                                 "Apache-2.0, commit 095f58a5), via ../shared/data", "command": cmd, "rows": rows,
                       "generated": _dt.date.today().isoformat()})
    path = default_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# Derived by benchmarks/error_model.py from the shared data's held-out residuals; do not edit.\n"
                    + yaml.safe_dump(model.to_dict(), sort_keys=False, width=140, default_flow_style=None))
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--residuals", metavar="CSV", type=Path, action="append", default=[],
                    help="residuals written earlier (holdout_silicon.py --csv, or --save-residuals); repeatable "
                         "(default: replay the rows now)")
    ap.add_argument("--no-closed-loop", action="store_true",
                    help="leave out the closed-loop rows' leave-one-group-out fit (the slow part)")
    ap.add_argument("--save-residuals", metavar="CSV", type=Path, help="write the residual table used")
    ap.add_argument("--write", action="store_true", help="store the model built from every residual")
    ap.add_argument("--markdown", metavar="PATH", help="rewrite this file's error-model-coverage section")
    ap.add_argument("--confidence", type=float, default=0.9)
    ap.add_argument("--prior-groups", type=float, default=PRIOR_GROUPS,
                    help="groups at which a regime's own estimate and the wider regime's weigh the same")
    ap.add_argument("--jobs", type=int, default=2, help="processes replaying rows")
    args = ap.parse_args(argv)
    if not args.residuals and not SILICON.exists():
        print(f"error_model: skipped: {SILICON} not found (the shared data directory is expected at "
              "../shared/data next to the repository)")
        return 0
    missing = [p for p in args.residuals if not p.is_file()]
    if missing:
        print(f"error_model: {missing[0]}: no such file (write it with {HOLDOUT_CSV})", file=sys.stderr)
        return 2
    if not args.prior_groups > 0:
        print(f"error_model: --prior-groups must be positive (got {args.prior_groups})", file=sys.stderr)
        return 2
    if not 0 < args.confidence < 1:
        print(f"error_model: --confidence must be strictly between 0 and 1 (got {args.confidence})", file=sys.stderr)
        return 2
    from simulator.validation.error_model import build

    t = time.perf_counter()
    errors, source = residuals(args.residuals, args.jobs, not args.no_closed_loop)
    if args.save_residuals:
        errors.to_csv(args.save_residuals, index=False)
    model = build(errors, args.prior_groups)
    cov = coverage(errors, args.confidence, args.prior_groups)
    comparison = split_comparison({" ".join(MODEL_DIMENSIONS): cov,
                                   **{" ".join(c): coverage(errors, args.confidence, args.prior_groups, c)
                                      for c in ALTERNATIVES}})
    wall = time.perf_counter() - t
    given = [("--residuals", "FILE")] * len(args.residuals) or [("--no-closed-loop", args.no_closed_loop)]
    prior = f"{args.prior_groups:g}" if args.prior_groups != PRIOR_GROUPS else None
    cmd = generated_section.command(ME, options=[*given, ("--prior-groups", prior), ("--write", args.write),
                                                 ("--markdown", args.markdown)])
    from simulator.validation.report import markdown as md

    print(md(coverage_summary(cov)))
    print(md(comparison))
    if args.write:
        print(f"wrote {write_model(model, source, cmd, int(errors.row.nunique()))}")
    if args.markdown:
        generated_section.write(args.markdown, markdown(cov, model, source, cmd, wall, comparison), BEGIN, END,
                                TITLE)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
