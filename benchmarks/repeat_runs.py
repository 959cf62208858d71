"""How far AIConfigurator's silicon sample disagrees with itself: one configuration, measured twice.

    python benchmarks/repeat_runs.py PATH/silicon_sample.csv --max-concurrency 128 \
        --markdown docs/accuracy-holdout-reading.md

A replay sees only what a row states: model, GPU, stack and its version,
precision, parallel layout, prompt and output lengths, concurrency. Where
the sample holds two runs that state all of that identically and measure
differently, the difference is something the row does not say (a
speculative decoder, a launch flag, a client's phase, a busy host), and
no replay of the stated configuration can match both: the closer it comes
to one run, the further it lies from the other. This script finds those
repeats and says how far apart they are, per stack and for the
configurations that disagree most. It reads the measurements only; it runs
nothing and fits nothing. A second table holds the configurations run
under more than one version of their stack, which a version's own
kernels and defaults may explain.

Runs copied between the sample's source files (the same measured values
under two ids) are one run, not a repeat.

Without the file the script prints why and exits 0.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import generated_section  # noqa: E402
from simulator.validation.deployment import measured_day  # noqa: E402

ME = "benchmarks/repeat_runs.py"
BEGIN, END = generated_section.markers("repeat-runs", ME)
TITLE = "Accuracy: reading the held-out errors"  # heads a page --markdown creates
STACKS = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}
# What a row states about its run: two rows alike in all of these are the same configuration.
CONFIG = ["backend", "backend_version", "model_path", "system", "precision", "gemm_quant_mode", "moe_quant_mode",
          "tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size", "isl", "osl", "batch_size"]
METRICS = {"silicon_tpot_ms": "TPOT", "silicon_ttft_ms": "TTFT"}
# Repeats further apart than this (largest over smallest) are listed.
FLAG = 1.3


def repeats(raw, max_concurrency: int = 128, across_versions: bool = False):
    """One row per configuration measured more than once (aggregated rows, concurrency ≤
    ``max_concurrency``): its runs, and each metric's largest over smallest measurement.
    ``across_versions``: the stack's version is left out of the configuration, and only
    configurations run under more than one version are kept."""
    import pandas as pd

    d = raw[(raw["mode"] == "agg") & (pd.to_numeric(raw["batch_size"], errors="coerce") <= max_concurrency)].copy()
    d[CONFIG] = d[CONFIG].astype("string").fillna("-")     # a missing field is part of the key, not a dropped row
    d = d.drop_duplicates(CONFIG + list(METRICS))
    d["day"] = d["silicon_data_source"].astype("string").fillna("").map(measured_day).fillna("undated")
    key = [k for k in CONFIG if k != "backend_version"] if across_versions else CONFIG
    out = d.groupby(key).agg(runs=("id", "size"), versions=("backend_version", "nunique"),
                             version_list=("backend_version", lambda v: " / ".join(sorted(set(v)))),
                             days=("day", lambda v: ", ".join(sorted(set(v)))),
                             **{METRICS[m]: (m, lambda v: v.max() / v.min()) for m in METRICS})
    keep = out["versions"] > 1 if across_versions else out["runs"] > 1
    out = out[keep].reset_index()
    if across_versions:
        out["backend_version"] = out["version_list"]
    return out.drop(columns="version_list")


def by_stack(rep):
    """Per stack: configurations run more than once, the median spread of each metric, and how many
    spread further than ``FLAG``."""
    rows = []
    for stack, g in rep.groupby("backend"):
        row = {"stack": STACKS.get(stack, stack), "configurations": len(g)}
        for m in METRICS.values():
            row[f"{m} median"] = g[m].median()
            row[f"{m} > {FLAG}x"] = int((g[m] > FLAG).sum())
        rows.append(row)
    return rows


def flagged(rep):
    """The configurations whose repeats differ by more than ``FLAG`` in either metric, per stack,
    model, GPU and version: how many, their median spreads and the days they were measured."""
    import pandas as pd

    far = rep[(rep["TPOT"] > FLAG) | (rep["TTFT"] > FLAG)]
    if far.empty:
        return pd.DataFrame()
    return (far.groupby(["backend", "model_path", "system", "backend_version"])
            .agg(configurations=("runs", "size"), TPOT=("TPOT", "median"), TTFT=("TTFT", "median"),
                 days=("days", lambda v: ", ".join(sorted({x for s in v for x in s.split(", ")}))))
            .reset_index().sort_values(["configurations", "TPOT"], ascending=False))


def _flagged_lines(far) -> list[str]:
    lines = ["| stack | model | GPU | version | configurations | TPOT | TTFT | measured |",
             "|---|---|---|---|---|---|---|---|"]
    for _, r in far.iterrows():
        lines.append(f"| {STACKS.get(r['backend'], r['backend'])} | {r['model_path']} | {r['system']} "
                     f"| {r['backend_version']} | {r['configurations']} | {r['TPOT']:.2f}× | {r['TTFT']:.2f}× "
                     f"| {r['days']} |")
    return lines


def markdown(rep, cmd: str, versions=None) -> str:
    lines = [f"Generated by `{cmd}`; measurements only.", "",
             "Configurations the sample measured more than once, every stated field alike (runs copied "
             "between its source files counted once), and how far their runs lie apart (largest over "
             "smallest measured mean):", "",
             f"| stack | configurations | TPOT, median | TPOT > {FLAG}× | TTFT, median | TTFT > {FLAG}× |",
             "|---|---|---|---|---|---|"]
    for r in by_stack(rep):
        lines.append(f"| {r['stack']} | {r['configurations']} | {r['TPOT median']:.2f}× | {r[f'TPOT > {FLAG}x']} "
                     f"| {r['TTFT median']:.2f}× | {r[f'TTFT > {FLAG}x']} |")
    far = flagged(rep)
    if not far.empty:
        lines += ["", f"Those more than {FLAG}× apart in either metric:", ""] + _flagged_lines(far)
    if versions is not None and not versions.empty:
        far = flagged(versions)
        lines += ["", f"The same configurations run under more than one version of their stack: {len(versions)}; "
                  f"{int((versions['TPOT'] > FLAG).sum())} differ by more than {FLAG}× in TPOT and "
                  f"{int((versions['TTFT'] > FLAG).sum())} in TTFT"
                  + (":" if not far.empty else "."), ""]
        if not far.empty:
            lines += _flagged_lines(far)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", nargs="?", help="AIConfigurator's silicon_sample.csv")
    ap.add_argument("--max-concurrency", type=int, default=128)
    ap.add_argument("--markdown", metavar="PATH", help="rewrite this file's repeat-runs section")
    args = ap.parse_args(argv)
    if not args.path or not Path(args.path).is_file():
        print(f"repeat_runs: needs AIConfigurator's silicon sample (got {args.path or 'no path'}); skipped")
        return 0
    import pandas as pd

    cmd = generated_section.command(ME, "silicon_sample.csv", options=[
        ("--max-concurrency", args.max_concurrency), ("--markdown", args.markdown or "PATH")])
    raw = pd.read_csv(args.path)
    text = markdown(repeats(raw, args.max_concurrency), cmd, repeats(raw, args.max_concurrency, across_versions=True))
    print(text)
    generated_section.write(args.markdown, text, BEGIN, END, TITLE)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
