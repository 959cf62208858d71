"""Fit each serving stack's first-token path, and check that it transfers.

    python benchmarks/first_token.py ../shared/data/e2e/aic_silicon_sample.csv.gz --jobs 2 \\
        --write-profiles --markdown docs/accuracy-first-token.md

What a client waits for before its first token, beyond what the engine
simulates (the wait for the iteration in flight, the iteration the
scheduler has already planned ahead, the prefill iterations, SGLang's
output after the next launch): the stack's front end, which parses and
tokenises each request one at a time before the scheduler sees it, and
the path back (hand-offs between the API server and the engine process,
detokenising, streaming, the client's own handling). Two terms per stack,
each with its place in the simulated path (``simulator.profiles.backend.
Overheads``): ``tokenize_us_per_token`` (serial, per prompt token) and
``response_ms`` (per request, in parallel). Neither depends on the model,
the GPU or the TP size, so a fit on some configurations predicts others.

How: every closed-loop aggregated row of AIConfigurator's silicon sample
llmsim can replay (C ≤ 128) is replayed with both terms at zero, once at
each launch cost of ``EAGER_GRID`` (below); a
term shifts a row's mean TTFT by ``response_ms + tokenize_us · ISL``, so
each stack's pair is the one minimising the median absolute log error of
TTFT over its rows, on a grid within physical bounds (``BOUNDS``).

The tokeniser's rate is held at zero, not fitted: at C ≤ 32 it adds a
cost per prompt token that the prefill's own cost per token aliases, so
the sample does not determine it (vLLM's dense rows: 16.5 % median |log
error| at 0 µs a token, 16.0 % at 2.75; TensorRT-LLM's best sits on the
bound, where it stands in for prefill the kernel model misses). A fitted
rate there would set the serial front end's capacity from a prefill
error, and a fleet serving hundreds of requests a second per replica
would queue at a front end for it. ``response_ms`` alone is fitted;
``engine.tokenize_us_per_token`` stays for a user who has measured their
front end.

A third term is the cost model's, not the front end's: ``eager_launch_us``,
what one kernel launch of an iteration run without a CUDA graph costs the
CPU (``simulator/costmodel/eager.py``: such an iteration lasts at least
its launches, counted from the block structure the stacks' decoder layers
share). It shows as a
floor under short prefills of deep models with many kernels per layer,
so every row, mixture-of-experts ones included, takes part in its fit:
each value of ``EAGER_GRID`` is replayed, ``response_ms`` is fitted on the
dense rows at each, and the stack takes the value whose whole fit has the
least median absolute log error over all its rows at C ≤ 32. It takes one
at all only where that transfers: where leaving out each model family,
and each GPU, predicts the left-out rows better with a launch cost fitted
on the rest than with none, its dense rows and its mixture-of-experts
rows alike (``launch_cost_transfers``): the cost of a launch is the
stack's whatever the model, so one that only one kind of model asks for
is the launch count's error. A stack whose kernels per layer differ from
model to model more than the count says fails that test and keeps none.

Which rows ``response_ms`` is fitted on: those of dense models. A mixture-of-experts row's TTFT is
short by a gap that grows with its prompt and differs from model to model
and GPU to GPU (about 0.4 to 5 ms per MoE layer and prompt at low load):
the MoE prefill kernels those stack versions ran are not the ones the
kernel data measured, a cost-model gap, not a front-end one. Fitted on
them, the two terms would carry it into every dense deployment. The MoE
rows are predicted with the dense fit and reported apart. And rows at
concurrency up to ``FIT_MAX_CONCURRENCY``: beyond it the API server's work
for the tokens it streams competes with new requests (vLLM's dense rows at
C = 64-128 read 40-115 ms more than at C <= 32), a contention the serial
front end carries only in part; those rows are predicted, not fitted.

Leave one group out: each model family, each GPU and each stack is
predicted by a fit made without it (a stack from the other two stacks'
rows), and that is the error reported; the in-sample figure is printed
beside it only to show how much the fit gains from seeing a group.
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generated_section  # noqa: E402
import holdout_silicon  # noqa: E402
from accuracy import ROOT  # noqa: E402

ME = "benchmarks/first_token.py"
BEGIN, END = generated_section.markers("first-token", ME)
TITLE = "Accuracy: the first token"  # heads a page --markdown creates
#: Physical bounds of the terms: a request's hand-offs and streaming take
#: milliseconds, not a tenth of a second; the tokeniser's rate is not
#: identifiable from these rows (module docstring) and is held at zero.
BOUNDS = {"response_ms": (0.0, 60.0), "tokenize_us_per_token": (0.0, 0.0)}
_GRID = (np.arange(0.0, BOUNDS["response_ms"][1] + 1e-9, 0.25),
         np.arange(0.0, BOUNDS["tokenize_us_per_token"][1] + 1e-9, 0.05))
ZERO = {"response_ms": 0.0, "tokenize_us_per_token": 0.0, "request_ms": 0.0}
#: CPU µs per kernel launch replayed (a Python framework's dispatch and the
#: driver's launch: some µs to about a tenth of a millisecond).
EAGER_GRID = (0.0, 25.0, 50.0, 60.0, 75.0, 90.0, 110.0, 130.0, 150.0)
FIT_MAX_CONCURRENCY = 32
LONG_PROMPT = 4096  # the sample's prompts are 1K-2K or 4K-8K tokens


def _fit_rows(frame):
    """The rows a fit sees: C <= FIT_MAX_CONCURRENCY (of the rows it is given)."""
    return frame[frame.concurrency <= FIT_MAX_CONCURRENCY]


def family(model: str) -> str:
    """A model's family (its name up to the first dash: llama, qwen3, deepseek, gpt, ...)."""
    return re.split(r"[-_]", Path(model).stem.lower())[0]


def fit_pair(base: np.ndarray, isl: np.ndarray, measured: np.ndarray) -> tuple[float, float]:
    """(response_ms, tokenize_us_per_token) minimising the median |log(predicted / measured)|."""
    a, b = _GRID
    pred = base[None, None, :] + a[:, None, None] + b[None, :, None] * isl[None, None, :] * 1e-3
    loss = np.median(np.abs(np.log(pred / measured[None, None, :])), axis=2)
    i, j = np.unravel_index(np.argmin(loss), loss.shape)
    return float(a[i]), float(b[j])


def base(h, g: float):
    """Rows ``h``'s replayed TTFT with the front-end terms at zero and ``g`` µs per eager launch."""
    return h[f"base@{g:g}"]


def fit_stack(pool, eager: bool = True) -> tuple[float, float, float]:
    """(eager_launch_us, response_ms, tokenize_us_per_token) of one stack from rows ``pool``: at each
    launch cost the pair fitted on the dense rows, and the launch cost whose fit has the least median
    |log error| over every row (mixture-of-experts ones too) at C <= FIT_MAX_CONCURRENCY; without
    ``eager``, the pair at no launch cost."""
    pool = _fit_rows(pool)
    dense = pool[~pool["moe"].astype(bool)]
    best = None
    for g in EAGER_GRID if eager else (0.0,):
        if dense.empty:   # a fold holding out every dense row: the front end stays at zero
            a, b = 0.0, 0.0
        else:
            a, b = fit_pair(base(dense, g).values, dense.isl.values, dense.measured.values)
        loss = float(np.median(np.abs(np.log((base(pool, g) + a + b * pool.isl * 1e-3) / pool.measured))))
        if best is None or loss < best[0] - 1e-12:
            best = (loss, g, a, b)
    return best[1], best[2], best[3]


def folds(frame, eager: dict[str, bool], splits=("family", "gpu", "stack")):
    """Every leave-one-group-out fold of ``frame``: (split, held-out group, stack, its rows, and the
    terms fitted without them: the other stacks' rows when a stack is held out; a launch cost for
    the stacks ``eager`` names)."""
    for split in splits:
        for held, g in frame.groupby(split):
            rest = frame[frame[split] != held]
            for stack, h in g.groupby("stack"):
                pool = rest[rest["stack"] == stack] if split != "stack" else rest
                if not _fit_rows(pool).empty:
                    yield split, held, stack, h, fit_stack(pool, eager.get(stack, True))


def launch_cost_transfers(rows) -> dict:
    """Whether a stack's rows carry a launch cost that transfers: the median |error| of its dense
    and of its mixture-of-experts rows, leaving out each model family and each GPU, with the launch
    cost fitted in every fold and with none. The cost of a launch is the stack's, whatever the
    model, so a stack takes it only where it predicts both kinds of rows better in both splits
    (those with more than one group); a cost only one kind of model asks for is the launch count's
    error, not the launch's. ``{split}_{kind}_{label}_pct`` is the median, ``..._p90`` the 90th
    percentile, which the test does not read: it shows where a kind's median stays put while its
    tail moves (SGLang's dense rows)."""
    out = {}
    for split in ("family", "gpu"):
        for label, eager in (("fitted", True), ("none", False)):
            found = [(h["moe"].astype(bool).values, _shifted(h, *fit).abs().values)
                     for _, _, _, h, fit in folds(rows, {rows["stack"].iloc[0]: eager}, (split,))]
            moe = np.concatenate([m for m, _ in found]) if found else np.zeros(0, bool)
            err = np.concatenate([e for _, e in found]) if found else np.zeros(0)
            for kind, mask in (("dense", ~moe), ("moe", moe)):
                out[f"{split}_{kind}_{label}_pct"] = 100 * float(np.median(err[mask])) if mask.any() else np.nan
                out[f"{split}_{kind}_{label}_p90"] = 100 * float(np.quantile(err[mask], 0.9)) if mask.any() else np.nan
    cells = [(out[f"{s}_{k}_fitted_pct"], out[f"{s}_{k}_none_pct"]) for s in ("family", "gpu") for k in ("dense", "moe")]
    tested = [(f, n) for f, n in cells if not np.isnan(f)]
    # both kinds of rows must be there to test, in at least one split with more than one group
    kinds = {k for s in ("family", "gpu") for k in ("dense", "moe") if not np.isnan(out[f"{s}_{k}_fitted_pct"])}
    out["takes_it"] = kinds == {"dense", "moe"} and all(f < n for f, n in tested)
    return out


def transfer_rows(transfer: dict[str, dict]) -> list[dict]:
    """The transfer test of each stack, one row per split and kind of rows (median and p90 |error|
    with the launch cost fitted in every fold and with none), for the page."""
    return [{"stack": stack, "split": split, "rows_of": kind,
             "fitted_median_pct": t[f"{split}_{kind}_fitted_pct"], "none_median_pct": t[f"{split}_{kind}_none_pct"],
             "fitted_p90_pct": t[f"{split}_{kind}_fitted_p90"], "none_p90_pct": t[f"{split}_{kind}_none_p90"],
             "takes_it": t["takes_it"]}
            for stack, t in transfer.items() for split in ("family", "gpu") for kind in ("dense", "moe")]


def _shifted(h, g: float, a: float, b: float):
    """Relative TTFT error of rows ``h`` replayed at ``g`` µs per launch with the pair (a, b) added."""
    return (base(h, g) + a + b * h.isl * 1e-3) / h.measured - 1


def table(frame) -> dict:
    """Per stack: the fit on every row; per leave-one-group-out fold the held-out group's error with
    the fold's fit, with the full fit (in sample) and with every term at zero; and each row's error
    under each split."""
    import pandas as pd

    transfer = {stack: launch_cost_transfers(g) for stack, g in frame.groupby("stack")}
    eager = {stack: t["takes_it"] for stack, t in transfer.items()}
    fits = {stack: fit_stack(g, eager[stack]) for stack, g in frame.groupby("stack")}
    rows, per_row = [], []
    for split, held, stack, h, (g, a, b) in folds(frame, eager):
        logo = _shifted(h, g, a, b)
        per_row.append(h.assign(split=split, err=logo))
        rows.append({"split": split, "held_out": held, "stack": stack, "rows": len(h), "eager_launch_us": g,
                     "response_ms": a, "tokenize_us": b, "logo_median_abs_pct": 100 * logo.abs().median(),
                     "logo_signed_pct": 100 * logo.median(),
                     "in_sample_median_abs_pct": 100 * _shifted(h, *fits[stack]).abs().median(),
                     "unfitted_median_abs_pct": 100 * _shifted(h, 0.0, 0.0, 0.0).abs().median()})
    return {"fits": fits, "rows": pd.DataFrame(rows), "per_row": pd.concat(per_row) if per_row else None,
            "transfer": pd.DataFrame(transfer_rows(transfer))}


def markdown(frame, res: dict, cmd: str, wall: float) -> str:
    import pandas as pd

    from simulator.validation.report import markdown as md

    fits = pd.DataFrame([{"stack": s, "eager_launch_us": g, "response_ms": a, "tokenize_us_per_token": b}
                         for s, (g, a, b) in res["fits"].items()])
    per_row = res["per_row"]
    per_row = per_row.assign(rows_of=np.where(per_row["moe"].astype(bool), "moe", "dense"))
    summ = (per_row.assign(a=per_row.err.abs() * 100, s=per_row.err * 100)
            .groupby(["stack", "rows_of", "split"]).agg(rows=("a", "size"), median_abs_pct=("a", "median"),
                                                        p90_abs_pct=("a", lambda x: x.quantile(0.9)),
                                                        median_signed_pct=("s", "median")).reset_index())
    unf = (frame.assign(rows_of=np.where(frame["moe"].astype(bool), "moe", "dense"),
                        a=(base(frame, 0.0) / frame.measured - 1).abs() * 100)
           .groupby(["stack", "rows_of"]).a.median())
    summ["without_the_terms_pct"] = [unf.get((st, k)) for st, k in zip(summ["stack"], summ["rows_of"])]
    moe = frame[frame["moe"].astype(bool)]
    moe = pd.concat([h.assign(err=_shifted(h, *res["fits"][st])) for st, h in moe.groupby("stack")])
    moe = moe.assign(a=moe.err.abs() * 100, s=moe.err * 100, z=(base(moe, 0.0) / moe.measured - 1) * 100)
    moe_tab = (moe.groupby(["stack", "group"]).agg(rows=("a", "size"), median_abs_pct=("a", "median"),
                                                   median_signed_pct=("s", "median"),
                                                   signed_without_pct=("z", "median")).reset_index())
    # Where in the prompt range the miss sits: a gap that shrinks at long prompts is a floor under
    # short prefill iterations, one that grows is prefill compute, one that stays is per request.
    by_prompt = (moe.assign(long=moe["isl"] >= LONG_PROMPT)
                 .pivot_table(index=["stack", "group"], columns="long", values="s", aggfunc="median")
                 .reindex(columns=[False, True]).set_axis(["signed_short_pct", "signed_long_pct"], axis=1))
    moe_tab = moe_tab.merge(by_prompt, left_on=["stack", "group"], right_index=True, how="left")
    worst = res["rows"][res["rows"]["split"] != "stack"].sort_values("logo_median_abs_pct", ascending=False).head(12)
    took = f" ({wall / 60:.0f} min wall)" if wall else ""
    lines = [f"Generated {time.strftime('%Y-%m-%d')} by `{cmd}`{took}, "
             f"{len(frame)} closed-loop rows of AIConfigurator's silicon sample (C ≤ 128).", "",
             f"The terms per stack, fitted on the rows at C ≤ {FIT_MAX_CONCURRENCY} (what the backend profiles "
             "ship): `eager_launch_us` on every row, the front end's two on the dense rows:", "",
             md(fits, floatfmt="{:.2f}"), "",
             "Whether a launch cost transfers: each stack's dense and mixture-of-experts rows (all C) "
             "predicted leaving out each model family and each GPU, with the launch cost fitted in every fold "
             "and with none (median and p90 of |error|); a stack takes it only where it predicts both kinds of "
             "rows better in both splits (median):", "",
             md(res["transfer"], floatfmt="{:.1f}"), "",
             "Mean TTFT, each row predicted by the fit made without its model family, its GPU or its stack, "
             "dense and mixture-of-experts rows apart (median and p90 of |error|, median signed error; "
             "`without_the_terms_pct`: every term at zero):", "",
             md(summ, floatfmt="{:.1f}"), "",
             "Mixture-of-experts rows by group with the fit on every row, and with every term at zero "
             f"(`signed_without_pct`); the signed error with the fit apart for prompts under {LONG_PROMPT:,} tokens "
             "(`signed_short_pct`) and from there on (`signed_long_pct`):", "", md(moe_tab, floatfmt="{:.1f}"), "",
             "The held-out groups the terms predict worst (median |error| of the group's rows, with the fit "
             "made without it, and at zero):", "",
             md(worst[["split", "held_out", "stack", "rows", "eager_launch_us", "response_ms",
                       "logo_median_abs_pct", "logo_signed_pct", "unfitted_median_abs_pct"]], floatfmt="{:.1f}")]
    return "\n".join(lines)


def write_profiles(fits: dict[str, tuple[float, float, float]], rows: int) -> None:
    """Set the three terms (and a zero request_ms: the serial front end is the tokenizer's) in each stack's profile."""
    import yaml

    for stack, (g, a, b) in sorted(fits.items()):
        path = ROOT / "backend_profiles" / f"{stack}.yaml"
        text = path.read_text()
        for key, value in (("eager_launch_us", g), ("response_ms", a), ("tokenize_us_per_token", b),
                           ("request_ms", 0.0)):
            text, n = re.subn(rf"(?m)^(  {key}: ).*$", rf"\g<1>{yaml.safe_dump(round(value, 4)).split()[0]}", text)
            assert n == 1, f"{path}: no overheads.{key} line"
        text = re.sub(r"(?m)^first_token_fitted_on: .*\n(?:  .*\n)*", "", text)
        text += (f"first_token_fitted_on: 'eager_launch_us on all, response_ms and tokenize_us_per_token on "
                 f"the dense rows of {rows} closed-loop rows of AIConfigurator''s silicon sample (leave-one-group-out "
                 f"error in docs/accuracy.md)'\n")
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)}: eager_launch_us {g:g}, response_ms {a:g}, "
              f"tokenize_us_per_token {b:g}")


def main(argv: list[str] | None = None) -> int:
    import pandas as pd

    from simulator.profiles import load_model
    from simulator.validation.replay import ReplaySettings

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", nargs="?", help="AIConfigurator's silicon_sample.csv (.gz)")
    ap.add_argument("--max-concurrency", type=int, default=128)
    ap.add_argument("--per-group", type=int, help="replay at most this many rows of each model/GPU/stack group")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--write-profiles", action="store_true", help="write the fitted terms to backend_profiles/")
    ap.add_argument("--markdown", metavar="PATH", help="rewrite this file's first-token section")
    ap.add_argument("--csv", metavar="PATH", help="write each row's TTFT with the terms at zero")
    ap.add_argument("--replayed", metavar="PATH", help="fit on a --csv file of an earlier run instead of replaying")
    args = ap.parse_args(argv)
    if not args.path or not Path(args.path).is_file():
        print(f"first_token: skipped: {args.path or 'no file given'} is not a file (expected AIConfigurator's "
              f"silicon_sample.csv: {holdout_silicon.URL})")
        return 0
    t = time.perf_counter()
    if args.replayed:
        frame = pd.read_csv(args.replayed)
        if "moe" not in frame:
            frame["moe"] = [load_model(m).is_moe for m in frame.model] if "model" in frame else False
        print(f"{len(frame)} rows as replayed in {args.replayed}")
    else:
        rows, _, _, _, _ = holdout_silicon.select(Path(args.path), args.max_concurrency, args.per_group)
        print(f"replaying {len(rows)} rows with the front-end terms at zero at {len(EAGER_GRID)} launch costs, "
              f"{args.jobs} job(s)")
        recs = {r.id: {"row": r.id, "model": r.model, "stack": r.stack, "family": family(r.model), "gpu": r.gpu,
                       "group": r.group, "moe": load_model(r.model).is_moe, "isl": r.isl,
                       "concurrency": r.concurrency, "measured": r.measured["ttft_mean_ms"]} for r in rows}
        for g in EAGER_GRID:
            preds = holdout_silicon.replay(rows, args.jobs, ReplaySettings(engine={**ZERO, "eager_launch_us": g}))
            for r, p in zip(rows, preds):
                ok = not isinstance(p, str) and "ttft_mean_ms" in p[0]
                recs[r.id][f"base@{g:g}"] = p[0]["ttft_mean_ms"] if ok else np.nan
        frame = pd.DataFrame(list(recs.values())).dropna()
        print(f"{len(frame)} rows replayed ({len(rows) - len(frame)} failed) in {(time.perf_counter() - t) / 60:.1f} min")
    wall = 0.0 if args.replayed else time.perf_counter() - t
    if args.csv:
        frame.to_csv(args.csv, index=False)
    res = table(frame)
    cmd = generated_section.command(ME, "../shared/data/e2e/aic_silicon_sample.csv.gz", options=[
        ("--per-group", args.per_group), ("--jobs", args.jobs), ("--write-profiles", args.write_profiles),
        ("--markdown", args.markdown or "PATH")])
    text = markdown(frame, res, cmd, wall)
    print(text)
    if args.write_profiles:
        write_profiles(res["fits"], len(frame))
    generated_section.write(args.markdown, text, BEGIN, END, TITLE)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
