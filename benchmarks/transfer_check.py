"""The transfer rule, checked where end-to-end rows exist: transferred GPUs beside their siblings.

    python benchmarks/transfer_check.py ../shared/data/e2e/aic_silicon_sample.csv.gz --per-group 20
    python benchmarks/transfer_check.py ../shared/data/e2e/aic_silicon_sample.csv.gz --per-group 20 --markdown docs/calibration-transfer.md

AIConfigurator's silicon sample measures some GPUs the kernel tables do not
(B300 and GB300): their profiles are transferred (``transfer:`` in each
file), never fitted. This replays their rows (closed-loop, aggregated, as
``llmsim validate`` does) with the shipped profiles, and the rows of the
same model and stack on the measured sibling the rule copies from, so the
two errors compare like for like: a transferred profile as good as its
sibling is what the rule promises. Rows the backend overheads are fitted on
are left out (as in benchmarks/holdout_silicon.py). ``--per-group`` caps
the rows of each model/GPU/stack group (spread over its concurrencies);
``--markdown PAGE`` also writes the table into PAGE's ``transfer-check``
section.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generated_section  # noqa: E402
import holdout_silicon as H  # noqa: E402  (row selection and replay, shared)

ME = "benchmarks/transfer_check.py"
BEGIN, END = generated_section.markers("transfer-check", ME)


def check(path: Path, per_group: int | None, max_concurrency: int = 128, jobs: int = 1):
    """(per GPU/group/metric error summary, rows replayed, wall seconds, (row id, reason) of each row
    the replay gave no prediction for)."""
    import pandas as pd

    from simulator.profiles.hardware import builtin_hardware
    from simulator.validation.report import error_table, summary

    gpus = builtin_hardware()
    rows, *_ = H.select(path, max_concurrency, per_group, frozenset(H.fitted_ids()))
    pairs = {n: g.calibration.transferred_from for n, g in gpus.items()
             if g.calibration.status == "transferred" and g.calibration.transferred_from}
    have = {(r.gpu, r.stack, r.model) for r in rows}
    keep = {(t, s, m) for (t, s, m) in have if t in pairs and (pairs[t], s, m) in have}
    keep |= {(pairs[t], s, m) for (t, s, m) in keep}
    chosen = [r for r in rows if (r.gpu, r.stack, r.model) in keep]
    t0 = time.perf_counter()
    preds = H.replay(chosen, jobs)
    wall = time.perf_counter() - t0
    ok = [(r, p[0]) for r, p in zip(chosen, preds) if not isinstance(p, str)]
    failed = [(r.id, p) for r, p in zip(chosen, preds) if isinstance(p, str)]
    errors = error_table([r for r, _ in ok], [p for _, p in ok])
    if errors.empty:
        return pd.DataFrame(), len(chosen), wall, failed
    errors["model"] = errors["model"].map(lambda m: Path(str(m)).stem)
    errors["role"] = errors["gpu"].map(lambda g: f"transferred from {pairs[g]}" if g in pairs else "measured")
    table = summary(errors[errors.metric.isin(["ttft_mean_ms", "tpot_mean_ms"])],
                    by=("model", "stack", "metric", "gpu", "role"))
    return table, len(chosen), wall, failed


def main(argv: list[str] | None = None) -> int:
    from simulator.validation.report import markdown

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", nargs="?", help="AIConfigurator's silicon_sample.csv (../shared/data/e2e/aic_silicon_sample.csv.gz)")
    ap.add_argument("--per-group", type=int, default=20, help="rows of each model/GPU/stack group at most")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--markdown", metavar="PAGE", help="also write the table into this page's transfer-check section")
    args = ap.parse_args(argv)
    if not args.path or not Path(args.path).is_file():
        print(f"transfer_check: skipped: {args.path or 'no file given'} is not a file (expected {H.URL})")
        return 0
    table, n, wall, failed = check(Path(args.path), args.per_group, jobs=args.jobs)
    print(f"{n} rows replayed in {wall:.0f} s")
    for row_id, why in failed:
        print(f"no prediction for {row_id}: {why}")
    body = markdown(table) if len(table) else "no transferred GPU shares a model and stack with its sibling"
    print(body)
    if args.markdown:
        cmd = generated_section.command(ME, args.path, options=[("--per-group", args.per_group),
                                                                ("--markdown", args.markdown)])
        section = (f"Generated {_dt.date.today().isoformat()} by `{cmd}` ({n} rows replayed). "
                   "Error = (llmsim − measured) / measured; |error| statistics and the signed median per model, "
                   "stack, metric and GPU (`role`: the GPU's own kernel fit, `measured`, or its profile transferred from its sibling).\n\n"
                   + body
                   + "".join(f"\n\nNo prediction for `{row_id}`: {why}" for row_id, why in failed))
        generated_section.write(args.markdown, section, BEGIN, END)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
