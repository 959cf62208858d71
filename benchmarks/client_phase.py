"""How much of a closed loop's TTFT is its client's phase, not its server.

    python benchmarks/client_phase.py PATH/silicon_sample.csv --max-concurrency 128 \
        --markdown docs/accuracy-holdout-reading.md

A closed loop of identical requests can run in phase (every client's
request ends in the same iteration as others', so the next ones arrive
together and queue behind each other's prefills) or out of phase (arrivals
spread over the loop's cycle). At the same server and concurrency the two
states differ in mean TTFT by up to several times, and the measured means
of AIConfigurator's silicon sample do not say which one a run was in.
This script shows how large that unknown is on the rows
``benchmarks/holdout_silicon.py`` replays with AIPerf's client (the
``phases`` replay: one burst round, then out of phase): each is replayed
again with every round in lockstep (``--client burst`` of ``llmsim
validate``), and the table counts where the measured TTFT falls against
the two. A second table places each measurement between them (0 on the
out-of-phase replay, 1 on the lockstep one) by how the rows were served
(each stack's own server, or the engine behind Dynamo's frontend) and by
concurrency: whether a loop keeps its phase depends on both.

It also checks the measurements against themselves: TTFT at low
concurrency does not depend on the output length on any server llmsim
models (the prefill meets the same queue and the same batch), so runs
that differ only in output length (1,024 vs 8,192 tokens after 1,024-token
prompts, C ≤ 32) should read about the same TTFT. Campaigns whose 1K/1K
runs read far above their 1K/8K twins ran their loops in a different phase,
which no server model reproduces.

Nothing is fitted. Without the file, or without the shared data, the
script prints why and exits 0.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generated_section  # noqa: E402
from holdout_silicon import FITTED, fitted_ids, replay, select  # noqa: E402

from simulator.validation.deployment import measured_day  # noqa: E402

ME = "benchmarks/client_phase.py"
BEGIN, END = generated_section.markers("client-phase", ME)
TITLE = "Accuracy: reading the held-out errors"  # heads a page --markdown creates
STACKS = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}
# How the AIPerf rows were served (validation.deployment): the evaluation pipeline ran each stack's
# own OpenAI server, the generator's deployments run the stack's engine behind Dynamo's frontend
# (its run.sh templates launch dynamo.frontend and dynamo.<stack> workers).
SERVED = {"aic-eval": "the stack's own server", "aiconfigurator": "Dynamo's frontend"}
# Concurrency bins of the position table.
C_BINS = ((1, 4), (5, 16), (17, 48), (49, 128))
# A campaign's 1K/1K runs reading this far above their 1K/8K twins are flagged.
TWIN_FLAG = 1.5


def bracket(df):
    """Per stack: rows, median |error| of the two replays, and the share of rows whose measured
    TTFT lies between them, below both or above both. ``df`` has columns stack, measured,
    lockstep, out_of_phase (mean TTFT, ms)."""
    import numpy as np
    import pandas as pd

    lo = np.minimum(df["lockstep"], df["out_of_phase"])
    hi = np.maximum(df["lockstep"], df["out_of_phase"])
    d = df.assign(inside=(df["measured"] >= lo) & (df["measured"] <= hi), below=df["measured"] < lo,
                  above=df["measured"] > hi,
                  err_lock=(df["lockstep"] / df["measured"] - 1).abs() * 100,
                  err_phase=(df["out_of_phase"] / df["measured"] - 1).abs() * 100)
    out = d.groupby("stack").agg(rows=("measured", "size"), err_phase=("err_phase", "median"),
                                 err_lock=("err_lock", "median"), inside=("inside", "mean"),
                                 below=("below", "mean"), above=("above", "mean"))
    return out.reindex([s for s in STACKS if s in out.index]) if len(out) else pd.DataFrame(out)


def position(df):
    """Per stack and deployment, and per concurrency bin (:data:`C_BINS`): the median position of the
    measured TTFT between the two replays, (measured − out of phase) / (lockstep − out of phase): 0 on
    the out-of-phase replay, 1 on the lockstep one, above 1 beyond it. Rows whose two replays agree
    within 1 % of the measurement say nothing about the phase and are left out. ``df`` has columns
    stack, deployment, concurrency, measured, lockstep, out_of_phase."""
    import pandas as pd

    gap = df["lockstep"] - df["out_of_phase"]
    d = df[gap.abs() > 0.01 * df["measured"]]
    d = d.assign(pos=(d["measured"] - d["out_of_phase"]) / gap[d.index],
                 bin=[next((f"{lo}–{hi}" for lo, hi in C_BINS if lo <= c <= hi), None) for c in d["concurrency"]])
    d = d[d["bin"].notna()]
    cols = [f"{lo}–{hi}" for lo, hi in C_BINS]
    if not len(d):
        return pd.DataFrame(columns=["rows", *cols])
    out = d.pivot_table(index=["stack", "deployment"], columns="bin", values="pos", aggfunc="median")
    out = out.reindex(columns=[c for c in cols if c in out.columns])
    out.insert(0, "rows", d.groupby(["stack", "deployment"]).size())
    order = [(s, dep) for s in STACKS for dep in SERVED if (s, dep) in out.index]
    return out.reindex(order + [i for i in out.index if i not in order])


def osl_twins(raw, max_concurrency: int = 32):
    """Per measurement campaign (stack, model, GPU, measured day): how many configurations were
    run after 1,024-token prompts with both 1,024 and 8,192 output tokens at C ≤ ``max_concurrency``,
    and the median ratio of their TTFTs (1K/1K over 1K/8K). ``raw`` is the silicon sample."""
    import pandas as pd

    d = raw[(raw["mode"] == "agg") & (raw["isl"] == 1024) & raw["osl"].isin([1024, 8192])].copy()
    notes = d["silicon_data_source"].astype(str)
    d["c"] = pd.to_numeric(notes.str.extract(r"silicon_concurrency=(\d+)")[0], errors="coerce")
    d["day"] = notes.map(measured_day).fillna("undated")
    d = d[d["c"] <= max_concurrency]
    keys = ["backend", "backend_version", "model_path", "system", "precision", "tp_size",
            "attention_dp_size", "moe_ep_size", "c", "day"]
    d[keys] = d[keys].astype("string").fillna("-")     # a missing version is a key too, not a dropped row
    pairs = d.groupby(keys + ["osl"])["silicon_ttft_ms"].median().unstack("osl")
    if 1024 not in pairs or 8192 not in pairs:
        return pd.DataFrame(columns=["configurations", "ratio"])
    pairs = pairs.dropna(subset=[1024, 8192])
    pairs = pairs.assign(ratio=pairs[1024] / pairs[8192]).reset_index()
    return (pairs.groupby(["backend", "model_path", "system", "day"])
            .agg(configurations=("ratio", "size"), ratio=("ratio", "median")))


def _pct(x: float) -> str:
    return f"{x * 100:.0f} %"


def markdown(phase, twins, cmd: str, failed: int = 0, where=None) -> str:
    lines = [f"Generated by `{cmd}`; nothing fitted.", "",
             "Where the measured mean TTFT of the AIPerf rows (those replayed with one burst round, then out "
             "of phase) falls against the same rows replayed with every round in lockstep:", "",
             "| stack | rows | TTFT \\|err\\| as replayed | in lockstep | between the two | below both "
             "| above both |", "|---|---|---|---|---|---|---|"]
    for stack, r in phase.iterrows():
        lines.append(f"| {STACKS[stack]} | {int(r['rows'])} | {r['err_phase']:.1f} % | {r['err_lock']:.1f} % "
                     f"| {_pct(r['inside'])} | {_pct(r['below'])} | {_pct(r['above'])} |")
    if failed:
        lines += ["", f"{failed} rows are refused by llmsim (or fail) in a replay and are left out."]
    if where is not None and len(where):
        bins = [c for c in where.columns if c != "rows"]
        lines += ["", "Where between the two replays the measurement lies, by how the rows were served and by "
                  "concurrency (median of (measured − out of phase) / (in lockstep − out of phase): 0 on the "
                  "out-of-phase replay, 1 on the lockstep one):", "",
                  "| stack | served by | rows | " + " | ".join(f"C = {b}" for b in bins) + " |",
                  "|---|---|---|" + "---|" * len(bins)]
        for (stack, dep), r in where.iterrows():
            cells = " | ".join("–" if r[b] != r[b] else f"{r[b]:.2f}" for b in bins)
            lines.append(f"| {STACKS.get(stack, stack)} | {SERVED.get(dep, dep)} | {int(r['rows'])} | {cells} |")
    lines += ["", "Campaigns that ran the same configurations with 1,024 and 8,192 output tokens after "
              "1,024-token prompts at C ≤ 32: "
              + (f"{len(twins)}, with {int(twins['configurations'].sum())} such pairs; the median TTFT ratio "
                 f"(1K/1K over 1K/8K) of a campaign is {twins['ratio'].min():.2f}–{twins['ratio'].max():.2f}."
                 if len(twins) else "none."), ""]
    flagged = twins[twins["ratio"] > TWIN_FLAG] if len(twins) else twins
    if len(flagged):
        lines += [f"Campaigns above {TWIN_FLAG}×:", "", "| stack | model | GPU | measured | pairs | ratio |",
                  "|---|---|---|---|---|---|"]
        for (stack, model, gpu, day), r in flagged.iterrows():
            lines.append(f"| {STACKS.get(stack, stack)} | {model} | {gpu} | {day} | {int(r['configurations'])} "
                         f"| {r['ratio']:.2f} |")
        rest = twins.drop(flagged.index)
        if len(rest):
            lines += ["", f"The other {len(rest)} campaigns: {rest['ratio'].median():.2f} median "
                      f"({rest['ratio'].min():.2f}–{rest['ratio'].max():.2f})."]
    return "\n".join(lines)


def run(path: Path, max_concurrency: int, jobs: int, per_group: Optional[int]):
    import pandas as pd
    from simulator.validation.replay import ReplaySettings, client_mode

    rows, *_ = select(path, max_concurrency, per_group, leave_out=frozenset(fitted_ids()))
    rows = [r for r in rows if r.concurrency is not None and client_mode(r, ReplaySettings()) == "phases"]
    as_replayed = replay(rows, jobs)
    lockstep = replay(rows, jobs, ReplaySettings(client="burst"))
    kept = [dict(stack=r.stack, deployment=r.deployment, concurrency=r.concurrency,
                 measured=r.measured["ttft_mean_ms"], out_of_phase=a[0]["ttft_mean_ms"], lockstep=b[0]["ttft_mean_ms"])
            for r, a, b in zip(rows, as_replayed, lockstep) if not isinstance(a, str) and not isinstance(b, str)]
    failed = len(rows) - len(kept)
    df = pd.DataFrame(kept)
    return bracket(df), position(df), failed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", nargs="?", help="AIConfigurator's silicon_sample.csv")
    ap.add_argument("--max-concurrency", type=int, default=128)
    ap.add_argument("--jobs", type=int, default=2, help="processes replaying rows")
    ap.add_argument("--per-group", type=int, help="replay at most this many rows of each model/GPU/stack group")
    ap.add_argument("--markdown", metavar="PATH", help="rewrite this file's client-phase section")
    args = ap.parse_args(argv)
    if not args.path or not Path(args.path).is_file() or not FITTED.is_file():
        print("client_phase: needs AIConfigurator's silicon sample (give its path) and the shared data "
              f"({FITTED}); skipped")
        return 0
    import pandas as pd

    phase, where, failed = run(Path(args.path), args.max_concurrency, args.jobs, args.per_group)
    twins = osl_twins(pd.read_csv(args.path))
    cmd = generated_section.command(ME, "silicon_sample.csv", options=[
        ("--max-concurrency", args.max_concurrency), ("--per-group", args.per_group),
        ("--markdown", args.markdown or "PATH")])
    text = markdown(phase, twins, cmd, failed, where)
    print(text)
    generated_section.write(args.markdown, text, BEGIN, END, TITLE)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
