"""Held-out check: the shipped model against AIConfigurator's silicon samples.

    python benchmarks/holdout_silicon.py PATH/silicon_sample.csv --markdown docs/accuracy-holdout.md \
        --disagg-markdown docs/accuracy-holdout-disagg.md

NVIDIA AIConfigurator's ``silicon_sample.csv`` holds thousands of
end-to-end closed-loop measurements on models, GPUs and stacks llmsim was
never fitted on. This replays every aggregated row llmsim can express,
with the backend profiles as shipped and each row's documented deployment
(as ``llmsim validate`` does), leaving out the rows of
``../shared/data/e2e/closed_loop_silicon.csv`` (the ones the backend
overheads are fitted on, matched by id), so every figure is out of
sample. Nothing here fits or changes a parameter: the rows check the
frozen model and are reported apart, in their own generated section of
docs/accuracy-holdout.md.

Disaggregated rows that state their prefill and decode worker counts and
layouts are replayed on a prefill pool and a decode pool
(:mod:`simulator.validation.replay`) and reported in a section of their
own (``--disagg-markdown``); ``--mode agg`` or ``--mode disagg`` replays
one kind only (the disaggregated rows take about 15 s with two jobs). Other scripts
that share the row selection (first_token.py, transfer_check.py,
error_model.py) see the aggregated rows only.

The file is not part of the repository; without it, or without the shared
data (which names the rows to leave out), the script prints why and exits 0.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import functools
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Optional, Union

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generated_section  # noqa: E402
# accuracy.py puts the repository on sys.path; its closed-loop file holds the rows llmsim is fitted on.
from accuracy import CLOSED as FITTED  # noqa: E402
from accuracy import DATA  # noqa: E402

MODEL_CONFIGS = DATA / "models" / "moe"
URL = ("https://github.com/ai-dynamo/aiconfigurator/blob/095f58a51c4ca8e61b66ec108d86f223f8d559ce/"
       "aic-core/src/aiconfigurator_core/systems/silicon_sample.csv")
ME = "benchmarks/holdout_silicon.py"
BEGIN, END = generated_section.markers("holdout-silicon", ME)
BEGIN_DISAGG, END_DISAGG = generated_section.markers("holdout-silicon-disagg", ME)
# The headings of pages --markdown and --disagg-markdown create.
TITLE = "Accuracy: held out, AIConfigurator's silicon samples"
TITLE_DISAGG = "Accuracy: held out, disaggregated serving"
METRICS = ("ttft_mean_ms", "tpot_mean_ms", "throughput_output_tok_s")
_REPEAT = "the same measurement as another row (configuration and values), under another id"
SHORT = {"ttft_mean_ms": "TTFT", "tpot_mean_ms": "TPOT", "throughput_output_tok_s": "tok/s"}


def fitted_ids(path: Path = FITTED) -> set[str]:
    """AIConfigurator ids of the rows llmsim's overheads are fitted on."""
    import pandas as pd

    ids = pd.read_csv(path)["source_repo_path"].astype(str).str.extract(r"id=(\S+)$")[0]
    return set(ids.dropna())


def _predict(row, settings=None) -> Union[tuple[dict, float], str]:
    """A row's prediction and its prefill share, or the error it raised (a refusal or crash is a
    finding, not a stop)."""
    from simulator.validation.replay import ReplaySettings, predict, prefill_share

    try:
        return predict(row, settings or ReplaySettings()), prefill_share(row)
    except Exception as e:          # noqa: BLE001 - every failure is reported per row
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def replay(rows: list, jobs: int, settings=None) -> list[Union[tuple[dict, float], str]]:
    predict = functools.partial(_predict, settings=settings)
    if jobs <= 1:
        return [predict(r) for r in rows]
    with ProcessPoolExecutor(jobs) as ex:
        return list(ex.map(predict, rows, chunksize=8))


MODES = ("agg", "disagg", "all")


def select(path: Path, max_concurrency: int, per_group: Optional[int], leave_out: frozenset = frozenset(),
           mode: str = "agg"):
    """The rows of ``mode`` (agg, disagg or all) llmsim can replay (each measurement once), those
    of that mode left out by reason, how many ``per_group`` capped, and how many the file holds."""
    from simulator.validation.rows import rows_from_csv

    every = rows_from_csv(path, model_configs=MODEL_CONFIGS if MODEL_CONFIGS.is_dir() else None)
    held = [r for r in every if r.id not in leave_out]
    mine = [r for r in held if mode == "all" or r.mode == mode]
    not_replayed: dict[str, int] = {}
    for r in mine:
        why = r.skip or (f"concurrency above {max_concurrency}" if (r.concurrency or 0) > max_concurrency else "")
        if why:
            not_replayed[why] = not_replayed.get(why, 0) + 1
    rows, seen = [], set()
    for r in mine:
        if r.skip or (r.concurrency or 0) > max_concurrency:
            continue
        # The file repeats some measurements under a second id (two exports of one run): count each once.
        key = (r.group, r.tp, r.dp, r.ep, r.weight_dtype, r.isl, r.osl, r.concurrency,
               r.measured["ttft_mean_ms"], r.measured["tpot_mean_ms"], r.prefill, r.decode)
        if key in seen:
            not_replayed[_REPEAT] = not_replayed.get(_REPEAT, 0) + 1
            continue
        seen.add(key)
        rows.append(r)
    capped = 0
    if per_group:
        by: dict[str, list] = {}
        for r in rows:
            by.setdefault(r.group, []).append(r)
        kept = [r for g in by.values()
                for r in (g if len(g) <= per_group else [g[i * len(g) // per_group] for i in range(per_group)])]
        capped, rows = len(rows) - len(kept), kept
    return rows, not_replayed, capped, every, held


def run(path: Path, max_concurrency: int, jobs: int, per_group: Optional[int], log=print,
        mode: str = "agg") -> dict:
    """The aggregated rows' replay (``mode`` agg or all) at the top level, as other scripts read it,
    and the disaggregated rows' (``mode`` disagg or all) under ``"disagg"``; a kind not asked for
    is None (its top-level keys empty)."""
    res = _run_part(path, max_concurrency, jobs, per_group, log, "agg") if mode in ("agg", "all") else None
    dis = _run_part(path, max_concurrency, jobs, per_group, log, "disagg") if mode in ("disagg", "all") else None
    base = res or {**(dis or {}), "replayed": 0, "failed": [], "not_replayed": {}, "capped": 0, "wall": 0.0,
                   "errors": _empty_errors()}
    return {**base, "mode": mode, "agg": res, "disagg": dis}


def _empty_errors():
    import pandas as pd

    return pd.DataFrame(columns=["row", "group", "stack", "metric", "measured", "predicted", "error_pct"])


def _run_part(path: Path, max_concurrency: int, jobs: int, per_group: Optional[int], log, mode: str) -> dict:
    from simulator.validation.report import error_table

    rows, not_replayed, capped, every, held = select(path, max_concurrency, per_group, frozenset(fitted_ids()),
                                                     mode)
    log(f"{len(every)} rows; {len(every) - len(held)} fitted on (left out); replaying {len(rows)} {mode} rows "
        f"with {jobs} job(s)")
    t = time.perf_counter()
    preds = replay(rows, jobs)
    wall = time.perf_counter() - t
    failed = [(r, p) for r, p in zip(rows, preds) if isinstance(p, str)]
    ok = [(r, p) for r, p in zip(rows, preds) if not isinstance(p, str)]
    errors = error_table([r for r, _ in ok], [p for _, (p, _) in ok])
    deployment = {r.id: r.deployment for r in rows}
    share = {r.id: sh for r, (_, sh) in ok}
    if not errors.empty:
        errors["deployment"] = errors.row.map(deployment)
        errors["prefill_share"] = errors.row.map(share)
    return {"total": len(every), "fitted": len(every) - len(held), "held": len(held), "replayed": len(ok),
            "failed": failed, "not_replayed": not_replayed, "capped": capped, "errors": errors, "wall": wall}


def _bands(errors):
    import pandas as pd

    c = pd.cut(errors.concurrency, [0, 8, 32, 128, float("inf")], labels=["1-8", "9-32", "33-128", ">128"])
    isl = pd.cut(errors.isl, [0, 1024, 4096, float("inf")], labels=["<=1k", "1k-4k", ">4k"])
    return errors.assign(c_band=c.astype(str), isl_band=isl.astype(str))


def signed_pivot(errors, by: str):
    """Rows, median signed error of each metric, and median |error| of TTFT and TPOT per ``by``."""
    import numpy as np
    import pandas as pd

    e = errors[errors.metric.isin(METRICS)]
    piv = e.pivot_table(index=by, columns="metric", values="error_pct", aggfunc="median")
    absp = e.assign(a=e.error_pct.abs()).pivot_table(index=by, columns="metric", values="a", aggfunc="median")
    out = pd.DataFrame({"rows": e[e.metric == "ttft_mean_ms"].groupby(by).size()})
    for m in METRICS:
        out[f"{SHORT[m]} signed %"] = piv.get(m, np.nan)
    for m in METRICS[:2]:
        out[f"{SHORT[m]} |err| %"] = absp.get(m, np.nan)
    return out.reset_index().sort_values("rows", ascending=False)


def low_load(errors, most: int = 4):
    """TTFT where no queue forms (C ≤ ``most``): median measured and predicted ms, and their gap."""
    e = errors[(errors.metric == "ttft_mean_ms") & (errors.concurrency <= most)]
    g = e.assign(gap=e.measured - e.predicted).groupby(["group", "deployment"])
    out = g.agg(rows=("row", "size"), measured_ms=("measured", "median"), llmsim_ms=("predicted", "median"),
                gap_ms=("gap", "median"), signed_pct=("error_pct", "median"))
    return out.reset_index().sort_values("rows", ascending=False)


def work_check(errors):
    """Per group, how much of the measured round C distinct prompts' prefills would fill
    (:func:`simulator.validation.replay.prefill_share`); above 1 the measurement cannot
    have prefilled them all, whatever the scheduling."""
    e = errors[errors.metric == "ttft_mean_ms"]
    g = e.groupby(["group", "deployment"]).prefill_share
    out = g.agg(rows="size", median_share="median", max_share="max")
    out["rows_above_1"] = g.apply(lambda s: int((s > 1).sum()))
    return out.reset_index().sort_values("max_share", ascending=False).head(8)


def before_after(errors):
    """Configurations measured both before and after 2026-02-11 (AIConfigurator's evaluation runs,
    then its generated deployments): how the measurement moved, and llmsim's error on each."""
    import pandas as pd

    key = ["group", "metric", "tp", "isl", "osl", "concurrency"]
    e = errors[errors.metric.isin(METRICS[:2])]
    m = e[e.deployment == "aic-eval"].merge(e[e.deployment == "aiconfigurator"], on=key, suffixes=("_a", "_b"))
    if m.empty:
        return pd.DataFrame(columns=["group", "metric", "pairs"])
    m = m.assign(ratio=m.measured_b / m.measured_a)
    return m.groupby(["group", "metric"]).agg(
        pairs=("ratio", "size"), later_over_earlier=("ratio", "median"), signed_pct_earlier=("error_pct_a", "median"),
        signed_pct_later=("error_pct_b", "median")).reset_index()


def sections(res: dict, cmd: str) -> dict[str, str]:
    """The generated sections of the kinds ``res`` holds: ``agg`` (the aggregated rows' tables) and
    ``disagg`` (the disaggregated rows'), each opening with the command that made it."""
    out = {}
    if res.get("agg", res) is not None:
        out["agg"] = _agg_lines(res, cmd)
    if res.get("disagg") is not None:
        out["disagg"] = _disagg_lines(res, cmd)
    # Paths of the shared data as a reader of the page finds them from the repository.
    return {k: "\n".join(v).replace(str(DATA), "../shared/data") for k, v in out.items()}


def markdown(res: dict, cmd: str) -> str:
    """Every generated section of ``res``, aggregated rows first."""
    return "\n\n".join(sections(res, cmd).values())


def abs_signed(errors, by):
    """Rows, and the median |error| and median signed error of TTFT, TPOT and throughput, per ``by``."""
    import numpy as np
    import pandas as pd

    e = errors[errors.metric.isin(METRICS)] if "metric" in errors else errors
    if e.empty:                        # nothing replayed
        return pd.DataFrame(columns=[*([by] if isinstance(by, str) else by), "rows"])
    a = e.assign(a=e.error_pct.abs())
    absp = a.pivot_table(index=by, columns="metric", values="a", aggfunc="median")
    piv = e.pivot_table(index=by, columns="metric", values="error_pct", aggfunc="median")
    out = pd.DataFrame({"rows": e[e.metric == "ttft_mean_ms"].groupby(by).size()})
    for m in METRICS:
        out[f"{SHORT[m]} |err| %"] = absp.get(m, np.nan)
        out[f"{SHORT[m]} signed %"] = piv.get(m, np.nan)
    return out.reset_index().sort_values("rows", ascending=False)


def _refusals(not_replayed: dict[str, int]):
    import pandas as pd

    skipped = sorted(not_replayed.items(), key=lambda kv: -kv[1])
    return pd.DataFrame([(re.sub(r"\s+", " ", w).replace("|", "/"), n) for w, n in skipped], columns=["reason", "rows"])


def _failures(failed) -> dict[str, int]:
    fails: dict[str, int] = {}
    for r, why in failed:
        # One line per kind of failure: the same message but for its figures.
        kind = f"{r.group}: {why}"
        first = next((k for k in fails if re.sub(r"[\d.]+", "", k) == re.sub(r"[\d.]+", "", kind)), kind)
        fails[first] = fails.get(first, 0) + 1
    return fails


def _disagg_lines(res: dict, cmd: str) -> list[str]:
    """The disaggregated rows' tables: per stack and per group, median |error| and signed median."""
    from simulator.validation.report import markdown as md

    dis = res["disagg"]
    errors = dis["errors"]
    lines = [_source(res, cmd, f"{dis['wall'] / 60:.1f} min wall for these rows")
             + f" {dis['replayed']} disaggregated rows replayed on a prefill pool and a "
             "decode pool of the row's stated worker counts and layouts, with the client and launch of an "
             "aggregated row of the same deployment and the prefill workers' `prefill_batch_size`; error = "
             "(llmsim − measured) / measured. Median |error| and median signed error, per stack:", "",
             md(abs_signed(errors, "stack")), "", "Per model/GPU/stack group:", "",
             md(abs_signed(errors, "group")), "", "By provenance:", "",
             md(abs_signed(errors, ["stack", "deployment"])), ""]
    return lines + _left_out(dis, "disaggregated rows", "Disaggregated rows")


def _source(res: dict, cmd: str, wall: str) -> str:
    """The opening sentence of a generated section: when, by what command, from which rows."""
    today = _dt.date.today().isoformat()
    return (f"Generated {today} by `{cmd}` ({wall}). Source: [silicon_sample.csv]({URL}) ({res['total']} rows; "
            f"the {res['fitted']} rows the backend overheads are fitted on are left out).")


def _agg_lines(res: dict, cmd: str) -> list[str]:
    from simulator.validation.report import markdown as md
    from simulator.validation.report import summary

    errors = _bands(res["errors"])
    lines = [_source(res, cmd, f"{res['wall'] / 60:.0f} min wall")
             + f" {res['replayed']} rows replayed with the shipped profiles "
             "on each row's documented deployment; error = (llmsim − measured) / measured. Nothing here is tuned on "
             "these rows but the first-token terms of each stack, which benchmarks/first_token.py fits on "
             "them (the response time on the file's dense rows, the launch cost on all, where it transfers; "
             "their leave-one-group-out error is in its own section).", "",
             "Per stack (median and p90 of |error|, and the median signed error):", "",
             md(summary(errors[errors.metric.isin(METRICS)])), "",
             "Per model/GPU/stack group (median signed error per metric, median |error| of TTFT and TPOT):", "",
             md(signed_pivot(errors, "group")), "",
             "By provenance (`aic-genai-perf`: AIConfigurator's evaluation runs with genai-perf, on a stack "
             "released before 2025-10-14; `aic-eval`: the same runs with AIPerf, measured before 2026-02-11; "
             "`aiconfigurator`: measured from then on, AIConfigurator's generated deployment; `defaults`: no "
             "date known):", "", md(signed_pivot(errors, ["stack", "deployment"])), "",
             "By concurrency and by input length:", "",
             md(signed_pivot(errors, ["stack", "c_band"])), "", md(signed_pivot(errors, ["stack", "isl_band"])), "",
             "TTFT at low load (C ≤ 4, no queue to speak of; median ms):", "", md(low_load(errors)), "",
             "Prefill work against the measured round (C distinct prompts prefilled at llmsim's kernel speeds in "
             "as few iterations as the row's token budget allows, over TTFT + (OSL − 1)·TPOT measured; the "
             "eight groups of highest share). Above 1 "
             "the run cannot have prefilled C distinct prompts per round: its prompts were reused (prefix-cache "
             "hits), which a replay of distinct prompts does not reproduce:", "",
             md(work_check(errors), floatfmt="{:.2f}"), "",
             "The same configuration measured before and after 2026-02-11 (median ratio of the measurements, "
             "llmsim's median signed error on each):", "", md(before_after(errors), floatfmt="{:.2f}"), ""]
    for m in ("ttft_mean_ms", "tpot_mean_ms"):
        e = errors[errors.metric == m]
        worst = e.reindex(e.error_pct.abs().sort_values(ascending=False).index).head(10)
        lines += [f"Largest {SHORT[m]} misses:", "",
                  md(worst[["row", "group", "tp", "isl", "osl", "concurrency", "deployment", "measured",
                            "predicted", "error_pct"]]), ""]
    return lines + _left_out(res, "rows", "Rows")


def _left_out(res: dict, noun: str, title: str) -> list[str]:
    """The closing tables of a section: rows whose replay failed, rows refused, rows capped."""
    import pandas as pd

    from simulator.validation.report import markdown as md

    lines = []
    if res["failed"]:
        fails = _failures(res["failed"])
        lines += [f"{title} whose replay failed:", "",
                  md(pd.DataFrame(sorted(fails.items(), key=lambda kv: -kv[1]), columns=["error", "rows"])), ""]
    lines += [f"{title} not replayed, by reason:", "", md(_refusals(res["not_replayed"]))]
    if res["capped"]:
        lines += ["", f"{res['capped']} further {noun} left out by --per-group."]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", nargs="?", help="AIConfigurator's silicon_sample.csv")
    ap.add_argument("--max-concurrency", type=int, default=128)
    ap.add_argument("--markdown", metavar="PATH", help="rewrite this file's holdout-silicon section")
    ap.add_argument("--csv", metavar="PATH", help="write measured vs predicted per row")
    ap.add_argument("--jobs", type=int, default=2, help="processes replaying rows")
    ap.add_argument("--per-group", type=int, help="replay at most this many rows of each model/GPU/stack group")
    ap.add_argument("--mode", choices=MODES, default="all",
                    help="aggregated rows, disaggregated rows (prefill and decode pools), or both (default)")
    ap.add_argument("--disagg-markdown", metavar="PATH",
                    help="rewrite this file's holdout-silicon-disagg section (the disaggregated rows' tables)")
    args = ap.parse_args(argv)
    if not args.path or not Path(args.path).is_file():
        what = f"{args.path} is not a file" if args.path else "no file given"
        print(f"holdout_silicon: skipped: {what} (expected AIConfigurator's silicon_sample.csv: {URL})")
        return 0
    if not FITTED.exists():
        print(f"holdout_silicon: skipped: {FITTED} not found, so the rows llmsim is fitted on cannot be left "
              "out (the shared data directory is expected at ../shared/data next to the repository)")
        return 0
    res = run(Path(args.path), args.max_concurrency, args.jobs, args.per_group, mode=args.mode)
    cmd = generated_section.command(ME, "silicon_sample.csv", options=[
        ("--max-concurrency", args.max_concurrency), ("--per-group", args.per_group), ("--jobs", args.jobs),
        ("--mode", None if args.mode == "all" else args.mode), ("--markdown", args.markdown or "PATH"),
        ("--disagg-markdown", args.disagg_markdown)])
    parts = sections(res, cmd)
    print("\n\n".join(parts.values()))
    if args.csv:
        import pandas as pd

        frames = [p["errors"].assign(mode=kind) for kind in ("agg", "disagg") if (p := res[kind]) is not None]
        pd.concat(frames, ignore_index=True).to_csv(args.csv, index=False)
    targets = {"agg": (args.markdown, BEGIN, END, TITLE),
               "disagg": (args.disagg_markdown, BEGIN_DISAGG, END_DISAGG, TITLE_DISAGG)}
    for kind, text in parts.items():
        page, begin, end, title = targets[kind]
        generated_section.write(page, text, begin, end, title)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
