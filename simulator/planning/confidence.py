"""Judging a fleet's SLO at a confidence, from the rows of its runs (one per seed).

A row (:func:`simulator.planning.point.summarize`) carries each SLO
target's simulated value (``slo_targets``) and the run's regime
(``regime``); the seeds of one probe are its replicates. A target holds at
confidence ``c`` when the ``c``-quantile of the measured value's
distribution (the seeds' values times llmsim's error in that regime,
:mod:`simulator.metrics.intervals`) meets it. At 0.5 this is the
bias-corrected median, which is not the plain simulated value: a stack
llmsim under-predicts needs a larger fleet at 0.5 already.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Mapping, Optional, Sequence

from ..metrics.intervals import targets_at_confidence
from ..metrics.verdict import load_failure, ms_past, slo_blocks, target_name
from ..report.intervals import bounds_text, traffic_text
from ..validation.error_model import ErrorModel, Regime
from .pareto import month_with_power

__all__ = ["slo_targets_text", "judge_at_confidence"]


def slo_targets_text(results: Mapping[str, Any]) -> Optional[str]:
    """The SLO blocks the run is judged on (:func:`~simulator.metrics.verdict.slo_blocks`: the
    fleet's, each class's own, each prompt-length bucket's) as a JSON text column."""
    blocks = slo_blocks(results)
    if not blocks:
        return None
    # few_samples only where flagged (metrics.tail_samples): a plan says which answers rest on a thin tail
    return json.dumps([[label, {"targets": {k: {f: t.get(f) for f in ("metric", "percentile", "target_ms",
                                                                       "measured_ms", "met", "few_samples")
                                                if f in t or f != "few_samples"}
                                            for k, t in (b.get("targets") or {}).items()},
                                **({"mean_input_tokens": b["mean_input_tokens"]} if "mean_input_tokens" in b else {})}]
                       for label, b in blocks], sort_keys=True)


def judge_at_confidence(rows: Sequence[Mapping[str, Any]], confidence: float,
                        model: Optional[ErrorModel]) -> tuple[bool, Optional[str], dict[str, Optional[float]]]:
    """Whether every SLO target holds at ``confidence`` over the rows (seeds); why not; each target's bound."""
    errors = [r["error"] for r in rows if r.get("error")]
    if errors:
        return False, "; ".join(errors), {}
    # a fleet that does not keep up fails whatever its latencies read (llmsim run exits 1 on it)
    overloaded = [why for why in map(load_failure, rows) if why]
    if overloaded:
        return False, "; ".join(overloaded), {}
    if any(r.get("slo_targets") is None for r in rows):
        return False, "no SLO targets in the run's results", {}
    blocks = [json.loads(r["slo_targets"]) for r in rows]
    judged = targets_at_confidence(blocks, Regime.parse(rows[0].get("regime")), model, confidence)
    bounds = {target_name(t["label"], t["key"]): t["bound_ms"] for t in judged}
    misses = [f"{target_name(t['label'], t['key'])} "
              f"{'unmeasured' if t['bound_ms'] is None else ms_past(t['bound_ms'], t['target_ms'], grouped=False)} at "
              f"{100 * confidence:g} % > {t['target_ms']:g} ms" for t in judged if not t["met"]]
    return not misses, "; ".join(misses) or None, bounds


def by_confidence(plans: Mapping[float, Any]) -> dict[str, Any]:
    """plan.json's ``by_confidence``: the best fleet and bill at each confidence planned (0.5 and the
    asked one), and what the higher confidence costs a month over 0.5; for a sliced scenario the
    product's figures too, the ones its answer leads with."""
    levels = {}
    for c, plan in sorted(plans.items()):
        b = plan.best
        levels[f"{c:g}"] = {"confidence": c, "met": b is not None, "overrides": b["overrides"] if b else None,
                            **{k: b.get(k) if b else None for k in _BILL},
                            "slo_bounds_ms": b.get("slo_bounds_ms") if b else None}
    lo, hi = levels[f"{min(plans):g}"], levels[f"{max(plans):g}"]

    def more(product: bool) -> Optional[float]:
        # the month plans rank by: the GPU bill, plus the power where energy is priced apart
        a, b = month_with_power(hi, product), month_with_power(lo, product)
        return a - b if a is not None and b is not None else None
    return {"levels": levels, "monthly_difference_usd": more(False),
            "product_monthly_difference_usd": more(True)}


#: A fleet's bill as a plan row gives it: the simulated fleet's, then the product's (a slice x its slices),
#: each with its power where the scenario prices energy apart.
_BILL = ("gpus", "monthly_usd", "power_monthly_usd", "product_gpus", "product_monthly_usd",
         "product_power_monthly_usd")


def confidence_text(block: Mapping[str, Any], answer: Callable[[Mapping[str, Any]], str], seeds: int) -> str:
    """The printed answer: each confidence's fleet and bill, and the difference. ``answer`` words a
    fleet's bill as the command's ``best:`` line does, so a sliced scenario's lines lead with the
    product there too, not with a slice's figures a reader would take for the fleet's. ``seeds``: how
    many traffic draws each bound spans, which the first line says beside what a level means."""
    def one(level: Mapping[str, Any]) -> str:
        if not level["met"]:
            return f"at {100 * level['confidence']:g} %: no fleet in the range meets the SLO"
        fleet = ", ".join(f"{k}={v}" for k, v in level["overrides"].items())
        bounds = bounds_text(level.get("slo_bounds_ms"))
        return f"at {100 * level['confidence']:g} %: {fleet}  ({answer(level)})" + (f"; {bounds}" if bounds else "")
    # A plan's confidence is one-sided (each target at or under its bound with that probability), where a
    # run's interval is two-sided: said once, so a reader does not take one 90 % for the other. Each target
    # is judged on its own (targets_at_confidence): "every target holds" with that probability claimed a
    # joint probability the plan never computes, which is lower where several targets bind.
    lines = [f"confidence: the probability that each SLO target holds, judged one target at a time (not all "
             f"together), from llmsim's error model {traffic_text(seeds)}; one-sided bounds, 50 % being the "
             f"bias-corrected prediction"]
    lines += [one(level) for level in block["levels"].values()]
    diff, whole = block["monthly_difference_usd"], block.get("product_monthly_difference_usd")
    if diff is not None and len(block["levels"]) > 1:
        if whole is not None and whole != diff:
            lines.append(f"the higher confidence costs the product ${whole:,.0f}/month more "
                         f"(the simulated slice ${diff:,.0f}/month)")
        else:
            lines.append(f"the higher confidence costs ${diff:,.0f}/month more")
    return "\n".join(lines)
