"""Measured against predicted: signed errors per row, and their spread.

Errors are signed, (llmsim − measured) / measured in percent, so a reader
sees which way a stack is mispredicted, not only by how much. Summaries
give the median and 90th percentile of the absolute error per metric and
stack, the figures a capacity plan's margin should be read against.
"""
from __future__ import annotations

import math
from concurrent.futures import ProcessPoolExecutor
from typing import Iterable, Optional, Sequence

import numpy as np
import pandas as pd

from .replay import ReplaySettings, predict
from .rows import Row

LABELS = {"ttft_mean_ms": "TTFT mean (ms)", "tpot_mean_ms": "TPOT mean (ms)",
          "throughput_output_tok_s": "output tok/s", "ttft_p50_ms": "TTFT p50 (ms)",
          "tpot_p50_ms": "TPOT p50 (ms)", "itl_p50_ms": "ITL p50 (ms)", "e2e_p50_ms": "E2E p50 (ms)",
          "throughput_req_s": "requests/s"}


def _predict_one(args: tuple[Row, ReplaySettings]) -> dict[str, float]:
    return predict(*args)


def predict_all(rows: Sequence[Row], settings: ReplaySettings | Sequence[ReplaySettings],
                workers: int = 1) -> list[dict[str, float]]:
    """Each row's prediction; ``settings`` per row or one for all. Rows are
    independent simulations, so ``workers`` > 1 runs them in processes."""
    per_row = list(settings) if not isinstance(settings, ReplaySettings) else [settings] * len(rows)
    jobs = list(zip(rows, per_row))
    if workers <= 1 or len(jobs) < 4:
        return [_predict_one(j) for j in jobs]
    with ProcessPoolExecutor(min(workers, len(jobs))) as ex:      # never more processes than replays
        return list(ex.map(_predict_one, jobs, chunksize=max(1, len(jobs) // (8 * workers))))


def error_table(rows: Sequence[Row], preds: Sequence[dict[str, float]]) -> pd.DataFrame:
    """One line per (row, metric): measured, predicted, signed error %."""
    out = []
    for r, p in zip(rows, preds):
        for col, meas in r.measured.items():
            if col not in p or meas <= 0:
                continue
            out.append({"row": r.id, "group": r.group, "stack": r.stack, "model": r.model, "gpu": r.gpu,
                        "tp": r.tp, "layout": r.layout, "isl": r.isl, "osl": r.osl, "concurrency": r.concurrency,
                        "rate": r.rate,
                        "metric": col, "measured": meas, "predicted": p[col],
                        "error_pct": 100.0 * (p[col] - meas) / meas})
    return pd.DataFrame(out)


def summary(errors: pd.DataFrame, by: Iterable[str] = ("metric", "stack")) -> pd.DataFrame:
    """Median and p90 absolute error (and the signed median) per group."""
    if errors.empty:
        return pd.DataFrame(columns=[*by, "rows", "median_abs_pct", "p90_abs_pct", "median_signed_pct"])
    g = errors.assign(abs_pct=errors.error_pct.abs()).groupby(list(by))
    s = g.agg(rows=("abs_pct", "size"), median_abs_pct=("abs_pct", "median"),
              p90_abs_pct=("abs_pct", lambda x: float(np.percentile(x, 90))),
              median_signed_pct=("error_pct", "median"))
    return s.reset_index()


def markdown(table: pd.DataFrame, floatfmt: str = "{:.1f}", label: Optional[dict] = None) -> str:
    """A pandas frame as a GitHub table (no tabulate dependency)."""
    label = label or {}
    cols = list(table.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for rec in table.to_dict("records"):
        cells = []
        for c in cols:
            v = rec[c]
            if c == "metric":
                v = LABELS.get(v, v)
            if isinstance(v, float):
                cells.append("–" if math.isnan(v) else floatfmt.format(v))   # no such rows: no number
            else:
                cells.append(str(label.get(v, v)))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
