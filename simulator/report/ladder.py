"""One row per ladder step: the figures a what-if story is told in.

The row is read from the step's results plus one figure results.json does
not carry: the decode speed a user watches stream, tokens/s per request,
taken per request (1000 / its TPOT) and averaged, since 1000 / mean TPOT
would let a few slow requests hide behind many fast ones. Each step's results
carry their intervals as a plain run's do (:func:`.intervals.annotate`), and
its row each SLO target's one-sided bound at the ladder's confidence
(``slo_bounds_ms``, named and judged as a plan at ``--confidence`` gives them),
so a step that meets its SLO only on llmsim's uncorrected estimate is seen to.
ladder.json keeps every row with its variants and the confidence; ladder.csv
the same flat, for a spreadsheet (the bounds as JSON text).
"""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence

import numpy as np

from ..atomic_write import write_atomic
from ..metrics.derive import RequestArrays
from ..metrics.results import jsonable
from ..metrics.verdict import fleet_met, load_columns
from ..scenario.overlays import blamed_on, load_with_variants, variant_overlays
from ..scenario.schema import Scenario
from ..scenario.variants import Step, ladder_steps
from .intervals import annotate, slo_bounds

if TYPE_CHECKING:
    from ..runner import RunOutput
    from ..validation.error_model import ErrorModel

__all__ = ["LADDER_COLUMNS", "ladder_runs", "ladder_row", "tokens_per_s_per_request", "ladder_document",
           "write_ladder"]


def ladder_runs(sc: Scenario, path: Path, sets: Sequence[str],
                simulate_step: Callable[[int, Step, Scenario], "RunOutput"], confidence: float,
                model: Optional["ErrorModel"]) -> Iterator[tuple[Step, "RunOutput", dict[str, Any]]]:
    """Each step of ``sc``'s ladder (``sc`` as loaded from ``path`` with
    ``sets``), run by ``simulate_step(i, step, scenario)`` and given its
    intervals at ``confidence`` under the error model ``model``, with its row.

    Every step is built, and so validated, before the first one runs, so a
    bad last step costs seconds; a user error from a run names the step's
    variants and the ``--set`` assignments beside the file. The CLI and the
    notebooks differ only in how a step is simulated (shown or not)."""
    steps = ladder_steps(sc.variants, sc.ladder)
    scenarios = [sc if not s.variants else load_with_variants(path, s.variants, sets) for s in steps]
    for i, (step, ssc) in enumerate(zip(steps, scenarios)):
        with blamed_on(path, variant_overlays(step.variants), sets):
            out = simulate_step(i, step, ssc)
        annotate(out.results, ssc, [out.results], confidence, model)
        yield step, out, ladder_row(step.name, [v.name for v in step.variants], out.results, out.requests)

#: (row key, where it comes from in results.json) for the figures copied as they are.
_FROM_RESULTS = (
    ("ttft_p50_ms", ("median_ttft_ms",)),
    ("ttft_p95_ms", ("p95_ttft_ms",)),
    ("ttft_p99_ms", ("p99_ttft_ms",)),
    ("tpot_p50_ms", ("median_tpot_ms",)),
    ("tpot_p99_ms", ("p99_tpot_ms",)),
    ("completed", ("completed",)),
    ("rejected", ("llmsim", "request_status", "rejected")),
    ("cancelled", ("llmsim", "request_status", "cancelled")),
    ("stranded", ("llmsim", "request_status", "stranded")),
    ("gpus", ("llmsim", "gpus")),
    ("usd_per_request", ("llmsim", "cost", "usd_per_request")),
    ("monthly_usd", ("llmsim", "cost", "monthly_usd")),
    ("product_gpus", ("llmsim", "product", "gpus")),
    ("product_monthly_usd", ("llmsim", "product", "monthly_usd")),
)
LADDER_COLUMNS = ("step", "variants", "ttft_p50_ms", "ttft_p95_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms",
                  "tokens_per_s_per_request", "max_batch_size", "completed", "rejected", "cancelled", "stranded",
                  "gpus", "usd_per_request", "monthly_usd", "slo_met", "overloaded", "load", "product_gpus",
                  "product_monthly_usd", "slo_bounds_ms")


def _get(results: Mapping[str, Any], path: Sequence[str]) -> Any:
    node: Any = results
    for part in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def tokens_per_s_per_request(requests: Iterable) -> Optional[float]:
    """Mean over finished requests with more than one output token of 1000 / TPOT (ms)."""
    tpot = RequestArrays(requests).tpot_ms
    tpot = tpot[np.isfinite(tpot) & (tpot > 0)]
    return float(np.mean(1000.0 / tpot)) if tpot.size else None


def ladder_row(step: str, variants: Sequence[str], results: Mapping[str, Any], requests: Iterable) -> dict[str, Any]:
    row: dict[str, Any] = {"step": step, "variants": list(variants)}
    row.update({key: _get(results, path) for key, path in _FROM_RESULTS})
    # written only when a request was stranded; the row counts it as it counts the rejected
    if row["stranded"] is None and _get(results, ("llmsim", "request_status")) is not None:
        row["stranded"] = 0
    # every SLO the step is judged on and its load kept up with, as llmsim run judges it
    row["slo_met"] = fleet_met(results)
    row["slo_bounds_ms"] = slo_bounds(results)      # at the ladder's confidence (ladder.json's)
    row.update(load_columns(results))
    row["tokens_per_s_per_request"] = tokens_per_s_per_request(requests)
    batches = [p.get("max_batch_size") for p in (_get(results, ("llmsim", "pools")) or {}).values()]
    row["max_batch_size"] = max((b for b in batches if b is not None), default=None)
    return {c: row[c] for c in LADDER_COLUMNS}


def ladder_document(rows: Sequence[Mapping[str, Any]], *, scenario: str, mode: str,
                    confidence: float) -> dict[str, Any]:
    """ladder.json's contents (``llmsim run --ladder --json`` prints the same): the rows, with the
    scenario, the ladder mode and the confidence of the rows' bounds."""
    return {"scenario": scenario, "ladder": mode, "confidence": confidence, "steps": list(rows)}


def write_ladder(rows: Sequence[Mapping[str, Any]], folder: Path, *, scenario: str, mode: str,
                 confidence: float) -> list[Path]:
    """ladder.json (:func:`ladder_document`) and ladder.csv."""
    folder = Path(folder)
    text = json.dumps(jsonable(ladder_document(rows, scenario=scenario, mode=mode, confidence=confidence)),
                      indent=2, allow_nan=False) + "\n"
    js = write_atomic(folder / "ladder.json", lambda tmp: tmp.write_text(text))

    def table(tmp: Path) -> None:
        with tmp.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=LADDER_COLUMNS)
            w.writeheader()
            for r in rows:
                bounds = r.get("slo_bounds_ms")
                w.writerow({**r, "variants": "+".join(r["variants"]),
                            "slo_bounds_ms": "" if bounds is None else json.dumps(bounds, sort_keys=True)})

    return [js, write_atomic(folder / "ladder.csv", table)]
