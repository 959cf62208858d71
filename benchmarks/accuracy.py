"""End-to-end accuracy: llmsim against measured serving stacks, one command.

    python benchmarks/accuracy.py --markdown docs/accuracy.md                    # regenerate both pages' tables
    python benchmarks/accuracy.py --write-profiles --markdown docs/accuracy.md   # also refit the backends' overheads
    python benchmarks/accuracy.py --write-profiles --stack sglang --markdown docs/accuracy.md   # only SGLang's

Two parts, each a generated section: the closed loop's of docs/accuracy.md
(``--markdown``), the Poisson and offline rows' of docs/accuracy-poisson.md
(``--e2e-markdown``, by default that name beside ``--markdown``'s file):

* Closed loop (``../shared/data/e2e/closed_loop_silicon.csv``, rows at
  concurrency ≤ 128): every row replayed with its stack's backend profile
  as shipped (what a user gets) on the deployment its provenance documents
  (``simulator.validation.deployment``), again on every stack's default
  flags, and leave-one-group-out: each of the four
  model/GPU/stack groups predicted with overheads fitted on the other three
  (pooled, since a held-out stack may have no other group). With
  ``--write-profiles`` each stack's overheads are first refitted on its own
  rows and written into ``backend_profiles/<stack>.yaml``.
* Poisson and offline (``published_serving_results.csv``):
  ``benchmarks/e2e_validation.py``, whose engine mapping now carries each
  stack's fitted overheads.

Without ``../shared/data`` it prints why and exits 0.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import generated_section  # noqa: E402

ME = "benchmarks/accuracy.py"
DATA = ROOT.parent / "shared" / "data"
CLOSED = DATA / "e2e" / "closed_loop_silicon.csv"
BEGIN, END = generated_section.markers("closed-loop-table", ME)
TITLE = "Accuracy: llmsim against measured serving stacks"  # heads a page --markdown creates
MAX_CONCURRENCY = 128
MARK = "# --- overheads: fitted by `python benchmarks/accuracy.py --write-profiles`; edits below are overwritten ---"


#: The overheads this fit sets: the per-iteration CPU time. The first-token terms
#: (front end and response path) are benchmarks/first_token.py's, kept as the profile has them.
ITERATION = ("iteration_overhead_ms", "iteration_us_per_seq")


def write_overheads(stack: str, overheads, rows: int, groups: list[str]) -> Path:
    """Replace the iteration terms and ``fitted_on`` in the overheads block of
    backend_profiles/<stack>.yaml, keeping its other terms and what follows."""
    import yaml

    path = ROOT / "backend_profiles" / f"{stack}.yaml"
    text = path.read_text()
    head, tail = (text[: text.index(MARK)].rstrip("\n"), text[text.index(MARK):]) if MARK in text else (text, "")
    old = yaml.safe_load(tail) or {} if tail else {}
    keep = {k: v for k, v in old.items() if k not in ("overheads", "fitted_on")}
    merged = {**old.get("overheads", {}), **{k: getattr(overheads, k) for k in ITERATION}}
    block = yaml.safe_dump({"overheads": merged,
                            "fitted_on": f"closed_loop_silicon.csv (shared data), {rows} rows at concurrency <= "
                                         f"{MAX_CONCURRENCY}: {', '.join(groups)}"}, sort_keys=False)
    rest = yaml.safe_dump(keep, sort_keys=False, width=120) if keep else ""
    path.write_text(f"{head}\n{MARK}\n{block}{rest}")
    return path


def closed_loop(workers: int, write_profiles: bool, log=print, stacks: tuple[str, ...] = ()) -> dict:
    from simulator.validation.fit import fit
    from simulator.validation.replay import ReplaySettings
    from simulator.validation.report import error_table, predict_all, summary
    from simulator.validation.rows import rows_from_csv

    every = rows_from_csv(CLOSED)
    rows = [r for r in every if not r.skip and (r.concurrency or 0) <= MAX_CONCURRENCY]
    skipped = [r for r in every if r.skip]
    beyond = [r for r in every if not r.skip and (r.concurrency or 0) > MAX_CONCURRENCY]
    out: dict = {"rows": len(rows), "skipped": skipped}
    if write_profiles:
        present = {r.stack for r in rows}
        for stack in sorted(present & set(stacks) if stacks else present):
            mine = [r for r in rows if r.stack == stack]
            log(f"fitting {stack} on {len(mine)} rows")
            res = fit(mine, ReplaySettings(engine=_zero()), workers=workers, logo=False, progress=log,
                      names=ITERATION)
            out.setdefault("fitted", {})[stack] = res.overheads
            write_overheads(stack, res.overheads, len(mine), sorted({r.group for r in mine}))
        from simulator.profiles.backend import _load
        _load.cache_clear()
    log("replaying every row with the shipped backend profiles")
    shipped = error_table(rows, predict_all(rows, ReplaySettings(), workers))
    log(f"replaying the {len(beyond)} rows above concurrency {MAX_CONCURRENCY} (no fit sees them)")
    out["beyond_summary"] = summary(error_table(beyond, predict_all(beyond, ReplaySettings(), workers)))
    out["beyond_rows"] = len(beyond)
    log("replaying every row on the stacks' default launch flags (--deployment defaults)")
    defaults = error_table(rows, predict_all(rows, ReplaySettings(deployment="defaults"), workers))
    out["defaults_summary"] = summary(defaults)
    log("replaying every row out of phase (--client spread)")
    spread = error_table(rows, predict_all(rows, ReplaySettings(client="spread"), workers))
    out["spread_summary"] = summary(spread)
    log("replaying every round in the phase its start gives it (--client burst)")
    out["burst_summary"] = summary(error_table(rows, predict_all(rows, ReplaySettings(client="burst"), workers)))
    log("leave one group out")
    res = fit(rows, ReplaySettings(engine=_zero()), workers=workers, logo=True, progress=log, names=ITERATION)
    out.update(shipped=shipped, shipped_summary=summary(shipped),
               logo=error_table(rows, res.held_out), logo_summary=summary(error_table(rows, res.held_out)),
               folds=res.fold_overheads, pooled=res.overheads)
    return out


def _zero() -> dict:
    """Fit from the stack's scheduling defaults with no iteration overheads of its own."""
    return {k: 0.0 for k in ITERATION}


def markdown(res: dict, wall: float, cmd: str) -> str:
    from simulator.validation.report import markdown as md

    today = _dt.date.today().isoformat()
    lines = [f"Generated {today} by `{cmd}` ({wall / 60:.0f} min wall, {res['rows']} rows at concurrency ≤ "
             f"{MAX_CONCURRENCY}). Error = (llmsim − measured) / measured; |error| statistics per metric and stack.",
             "", "**As shipped** (each row with its stack's backend profile):", "",
             md(res["shipped_summary"]), "",
             "**Every row on its stack's default launch flags** (`llmsim validate --deployment defaults`: what "
             "the rows' documented deployment, where they have one, is worth):", "", md(res["defaults_summary"]), "",
             f"**Beyond the fitted range** (the {res['beyond_rows']} rows at concurrency above {MAX_CONCURRENCY}, "
             "batches up to 512: no fit sees them, so they test how the per-sequence costs fitted on smaller "
             "batches extrapolate):", "", md(res["beyond_summary"]), "",
             "**Out of phase** (the same profiles, `llmsim validate --client spread`: clients' phases spread evenly "
             "over the loop's cycle, one round of warm-up left out):", "", md(res["spread_summary"]), "",
             "**In lockstep** (the same profiles, `llmsim validate --client burst`: every round in the phase "
             "the start of the loop gives it, also for the AIPerf rows):", "", md(res["burst_summary"]), "",
             "**Leave one group out** (each model/GPU/stack group predicted with overheads fitted on the other "
             "three, pooled):", "", md(res["logo_summary"]), "", "Overheads of each fold:", "",
             "| held-out group | iteration ms | µs per seq | request ms | response ms |", "|---|---:|---:|---:|---:|"]
    for g, o in res["folds"].items():
        lines.append(f"| {g} | {o.iteration_overhead_ms:g} | {o.iteration_us_per_seq:g} | {o.request_ms:g} | "
                     f"{o.response_ms:g} |")
    by = res["shipped"].assign(abs_err=res["shipped"].error_pct.abs())
    worst = by[by.metric == "ttft_mean_ms"].sort_values("abs_err", ascending=False).head(8)
    lines += ["", "Largest TTFT misses (as shipped):", "",
              md(worst[["row", "stack", "tp", "isl", "osl", "concurrency", "measured", "predicted", "error_pct"]])]
    if res["skipped"]:
        lines += ["", "Not replayed: " + "; ".join(sorted({f"{r.skip} ({sum(1 for s in res['skipped'] if s.skip == r.skip)} rows)" for r in res["skipped"]}))]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--markdown", metavar="PATH", help="rewrite the closed-loop section of this file")
    ap.add_argument("--e2e-markdown", metavar="PATH",
                    help="rewrite the Poisson/offline section of this file (default: accuracy-poisson.md beside "
                         "--markdown's file)")
    ap.add_argument("--write-profiles", action="store_true", help="refit each stack's overheads first")
    from simulator.profiles import list_builtin
    ap.add_argument("--stack", action="append", default=[], choices=list_builtin("backend_profiles"),
                    help="with --write-profiles, refit only this stack (repeatable; default: every stack)")
    ap.add_argument("--workers", type=int, default=max(1, min(4, os.cpu_count() or 1)))
    args = ap.parse_args(argv)
    if args.stack and not args.write_profiles:
        ap.error("--stack names the stacks --write-profiles refits; without it nothing is refitted")
    if not CLOSED.exists():
        print(f"accuracy: skipped: {CLOSED} not found (the shared data directory is absent; it is expected at "
              "../shared/data next to the repository).")
        return 0
    t = time.perf_counter()
    res = closed_loop(args.workers, args.write_profiles, stacks=tuple(args.stack))
    wall = time.perf_counter() - t
    from simulator.validation.report import markdown as md
    print(md(res["shipped_summary"]))
    print(md(res["logo_summary"]))
    if args.markdown:
        # --stack without --write-profiles was refused above.
        cmd = generated_section.command(ME, options=[("--write-profiles", args.write_profiles),
                                                     *(("--stack", n) for n in args.stack),
                                                     ("--markdown", args.markdown)])
        generated_section.write(args.markdown, markdown(res, wall, cmd), BEGIN, END, TITLE)
        import e2e_validation
        e2e_page = args.e2e_markdown or str(Path(args.markdown).with_name("accuracy-poisson.md"))
        e2e_validation.main(["--markdown", e2e_page])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
