"""Intervals on a run's figures: the replicates' spread and llmsim's own error, combined.

A figure of one run is uncertain twice over. The run is one draw of the
traffic (arrivals, lengths, routing): ``--replicates N`` draws N. And
llmsim itself misses measured stacks by a signed, regime-dependent factor
(:mod:`simulator.validation.error_model`). The measured value a fleet
would show is modelled as one replicate's value times ``exp(r)``, ``r``
from the error model's cell for the metric and the run's regime; the
interval at confidence ``c`` is the central ``c`` of that mixture (every
replicate equally likely, ``r`` taken on a fixed grid of probabilities,
so the same inputs give the same interval). Without a cell for a metric
the interval is the replicates' spread alone, and says so (``model``
null).

An SLO *holds at confidence c* when the target's one-sided bound does: the
``c``-quantile of the mixture for a latency (a throughput floor: its
``1 − c``-quantile) meets the target. At 0.5 that is the bias-corrected
median; it is the pessimistic end of the two-sided interval of
confidence ``2c − 1``.
"""
from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from ..errors import LlmsimError
from ..validation.error_model import ErrorModel, Lookup, Regime, isl_band, residual_metric
from ..fields import block, leaf
from .verdict import owner, slo_blocks, slo_met

__all__ = ["check_confidence", "mixture", "interval", "upper_bound", "interval_entry", "interval_keys",
           "intervals_block", "slo_key", "targets_at_confidence", "slo_intervals_block",
           "spread_block"]

#: Probabilities at which a cell's residual distribution is sampled (midpoints: no 0 or 1).
_GRID = (np.arange(400) + 0.5) / 400
_KEY = re.compile(r"(mean|median|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms")
_RATES = ("request_throughput", "output_throughput", "total_token_throughput")


_FIGURE = "<figure>"   # a vLLM-keyed latency statistic or rate: p99_ttft_ms, request_throughput...

#: One figure's interval (:func:`interval_entry`).
_INTERVAL = {
    "lo": leaf("as the figure", "the interval's low end"), "hi": leaf("as the figure", "its high end"),
    "confidence": leaf("fraction", "the interval's confidence (--confidence)"),
    "bound": leaf("as the figure", "the one-sided bound the real value stays under with that confidence: what "
                                   "check and plan --confidence judge a latency target by (hi is the two-sided "
                                   "interval's, a stricter bound)", when="the figure is a latency (…_ms)"),
    "model": leaf("text", "the error model's metric the interval was drawn from; null without one"),
}

#: ``llmsim.intervals``: per figure, the range llmsim's measured error puts the real value in.
INTERVAL_FIELDS = {_FIGURE: block("one figure of the top level (a latency statistic, a rate, an SLO's statistic)",
                                  _INTERVAL)}

#: ``llmsim.slo_intervals``: the same for the targets of each class and prompt-length bucket that declares its own.
SLO_INTERVAL_FIELDS = {"<owner>": block("a class (its name) or a prompt-length bucket (input <bucket>) that "
                                        "declares its own slo", {
    "<target>": block("one of its targets (ttft_p99_ms), judged as check --confidence judges it; a bucket's in "
                      "the band of its own mean prompt", {
        **_INTERVAL, "target_ms": leaf("ms", "the target, as declared: a class a run's first seed sent no request "
                                             "has no slo block there, and is shown from this entry"),
        "replicates_met": leaf("count", "seeds whose run met the target",
                                            when="`llmsim run --replicates N`, N > 1"),
        "replicates_judged": leaf("count", "seeds whose run judged the target: a class's, those that sent it a "
                                           "request (a seed that sent it none neither meets nor misses it)",
                                  when="`llmsim run --replicates N`, N > 1")})})}

#: ``llmsim.error_model``: which measured residuals judged the run.
ERROR_MODEL_FIELDS = {
    "regime": block("the run's regime (null in a dimension: unknown or mixed)", {
        d: leaf("text", what) for d, what in (("stack", "serving stack"), ("family", "GPU family"),
                                              ("moe", "dense or moe"), ("load", "concurrency band"),
                                              ("isl", "input-length band"))}),
    "source": leaf("text", "the error model's file; null without one"),
    "metrics": block("per error-model metric (throughput, ttft, tpot, e2el); null when none applies", {
        "<metric>": block("the cell used", {
            "cell": leaf("text", "the cell's key: the regime dimensions it matched"),
            "residuals": leaf("count", "held-out residuals in the cell"),
            "groups": leaf("count", "the benchmark groups they come from"),
            "widened": leaf("list of text", "regime dimensions dropped for want of residuals"),
        })}),
    "replicates": leaf("count", "seeds the intervals cover"),
}

#: ``llmsim.replicates``: the run-to-run spread over seeds.
REPLICATE_FIELDS = {
    "count": leaf("count", "seeds run (--replicates)"), "seeds": leaf("list", "the seeds"),
    "spread": block("per figure", {_FIGURE: block("one figure over the seeds", {
        "mean": leaf("as the figure", "mean"), "std": leaf("as the figure", "standard deviation (ddof 1)"),
        "min": leaf("as the figure", "lowest"), "max": leaf("as the figure", "highest")})}),
    "slo_met": leaf("count", "seeds whose run met every SLO it is judged on (llmsim.slo_met)",
                    when="the scenario declares an SLO"),
    "slo_targets_met": block("per SLO target, the seeds that met it", {"<target>": leaf("count", "seeds")},
                             when="the scenario declares an slo"),
}


def check_confidence(c: float, option: str = "--confidence", gate: bool = False) -> float:
    """``c`` as a probability; ``gate``: the one-sided level an SLO must hold at (``plan``, ``check``),
    which below one half would pass a target llmsim's own estimate misses, looser than no margin at all."""
    if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) or not 0.0 < c < 1.0:
        span = "at least 0.5 and below 1" if gate else "strictly between 0 and 1"
        raise LlmsimError(f"must be a probability {span}, such as 0.9 (got {c!r})", key_path=option)
    if gate and c < 0.5:
        raise LlmsimError(f"must be at least 0.5, such as 0.9 (got {c!r}): an SLO is judged by the bound it holds "
                          f"under with this probability, and below one half that bound lies under llmsim's own "
                          f"estimate, passing targets the simulated fleet misses", key_path=option)
    return float(c)


def mixture(values: Sequence[float], lookup: Optional[Lookup]) -> np.ndarray:
    """Every replicate's value times every grid draw of exp(r): the measured value's distribution."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if lookup is None or v.size == 0:
        return v
    return (v[:, None] * np.exp(lookup.cell.log_ratio(_GRID))[None, :]).ravel()


def interval(values: Sequence[float], lookup: Optional[Lookup], confidence: float) -> Optional[tuple[float, float]]:
    s = mixture(values, lookup)
    if s.size == 0:
        return None
    lo, hi = np.quantile(s, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(lo), float(hi)


def upper_bound(values: Sequence[float], lookup: Optional[Lookup], confidence: float,
                higher_is_worse: bool = True) -> Optional[float]:
    """The value the metric stays on the good side of with probability ``confidence``."""
    s = mixture(values, lookup)
    if s.size == 0:
        return None
    return float(np.quantile(s, confidence if higher_is_worse else 1 - confidence))


def interval_entry(values: Sequence[float], lookup: Optional[Lookup], confidence: float,
                   latency: bool = True) -> Optional[dict[str, Any]]:
    """One figure's ``llmsim.intervals`` entry: :func:`interval`, and for a latency :func:`upper_bound`,
    the bound a target is judged by. The fleet's figures and every class's and bucket's targets take
    theirs from here, so a table of one never disagrees with check's verdict on the other."""
    iv = interval(values, lookup, confidence)
    if iv is None:
        return None
    return {"lo": iv[0], "hi": iv[1], "confidence": confidence,
            **({"bound": upper_bound(values, lookup, confidence)} if latency else {}),
            "model": lookup.metric if lookup is not None else None}


def slo_key(metric: str, percentile: float) -> str:
    """The results.json key of an SLO target's statistic (``ttft``, 99 -> ``p99_ttft_ms``)."""
    return f"median_{metric}_ms" if percentile == 50 else f"p{percentile:g}_{metric}_ms"


def interval_keys(results: Mapping[str, Any]) -> list[str]:
    """vLLM-keyed latency statistics and rates the run reports, and every SLO target's statistic."""
    keys = [k for k in results if _KEY.fullmatch(k) or k in _RATES]
    for t in ((results.get("slo") or {}).get("targets") or {}).values():
        k = slo_key(t["metric"], t["percentile"])
        if k not in keys:
            keys.append(k)
    return keys


def _values(replicates: Sequence[Mapping[str, Any]], key: str) -> list[float]:
    out = []
    for r in replicates:
        v = r.get(key)
        if v is None:     # an SLO percentile vLLM's keys do not list: the target block has it
            m = _KEY.fullmatch(key)
            for t in ((r.get("slo") or {}).get("targets") or {}).values():
                if m and slo_key(t["metric"], t["percentile"]) == key:
                    v = t.get("measured_ms")
        if v is not None:
            out.append(float(v))
    return out


def intervals_block(replicates: Sequence[Mapping[str, Any]], regime: Regime, model: Optional[ErrorModel],
                    confidence: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """``llmsim.intervals`` (key -> lo, hi, confidence) and ``llmsim.error_model`` (which cell judged
    each metric, and what was widened to find one) for the replicates' results."""
    lookups: dict[str, Optional[Lookup]] = {}
    out: dict[str, Any] = {}
    for key in interval_keys(replicates[0]):
        metric = residual_metric(key)
        if metric is not None and metric not in lookups:
            lookups[metric] = model.lookup(metric, regime) if model is not None else None
        lk = lookups.get(metric) if metric else None
        entry = interval_entry(_values(replicates, key), lk, confidence, latency=key.endswith("_ms"))
        if entry is not None:
            out[key] = entry
    used = {"regime": {d: getattr(regime, d) for d in ("stack", "family", "moe", "load", "isl")},
            "source": model.source if model is not None else None,
            "metrics": {m: (lk.as_dict() if lk is not None else None) for m, lk in lookups.items()},
            "replicates": len(replicates)}
    return out, used


def targets_at_confidence(blocks: Sequence[Sequence[tuple[str, Mapping[str, Any]]]], regime: Regime,
                          model: Optional[ErrorModel], confidence: float) -> list[dict[str, Any]]:
    """Each SLO target judged at ``confidence`` over the replicates: ``blocks[i]`` is replicate i's
    (label, slo block) list. A target holds when its one-sided bound meets it; a target some
    replicate could not measure does not hold (and has no ``interval``). A block is matched across
    replicates by its label, not its place: a class that sent no request in one seed has no block
    there (that seed's run does not judge it), and is judged over the seeds that do, where matching
    by place read another class's values for it, or ran off the end of the list. A prompt-length
    bucket's block (one carrying ``mean_input_tokens``) is judged in the band of its own mean prompt,
    the regime's other dimensions kept."""
    by_label = [dict(b) for b in blocks]
    out = []
    for label in dict.fromkeys(label for b in blocks for label, _ in b):
        slos = [d[label] for d in by_label if label in d]
        where = regime
        if "mean_input_tokens" in slos[0]:    # a prompt-length bucket's targets: judged in its own band
            means = [s.get("mean_input_tokens") for s in slos]
            where = replace(regime, isl=None if any(m is None for m in means) else isl_band(float(np.mean(means))))
        for key, t in (slos[0].get("targets") or {}).items():
            vals = [s["targets"][key].get("measured_ms") for s in slos]
            metric = residual_metric(slo_key(t["metric"], t["percentile"]))
            lk = model.lookup(metric, where) if model is not None and metric else None
            entry = None if any(v is None for v in vals) else interval_entry(vals, lk, confidence)
            bound = entry["bound"] if entry is not None else None
            out.append({"label": label, "key": key, "target_ms": t["target_ms"], "bound_ms": bound,
                        "met": bound is not None and bound <= t["target_ms"], "interval": entry,
                        "replicates_met": sum(1 for s in slos if s["targets"][key].get("met")),
                        "replicates_judged": len(slos)})
    return out


def slo_intervals_block(replicates: Sequence[Mapping[str, Any]], regime: Regime, model: Optional[ErrorModel],
                        confidence: float) -> dict[str, Any]:
    """``llmsim.slo_intervals``: each class's and prompt-length bucket's own targets with their
    interval, judged by :func:`targets_at_confidence` as check and plan --confidence judge them (the
    fleet's targets are figures of the top level, in ``llmsim.intervals``)."""
    judged = targets_at_confidence([slo_blocks(r) for r in replicates], regime, model, confidence)
    out: dict[str, Any] = {}
    for t in judged:
        if t["label"] != "SLO" and t["interval"] is not None:
            seeds = {k: t[k] for k in ("replicates_met", "replicates_judged")} if len(replicates) > 1 else {}
            out.setdefault(owner(t["label"], ""), {})[t["key"]] = {**t["interval"], "target_ms": t["target_ms"], **seeds}
    return out


def spread_block(replicates: Sequence[Mapping[str, Any]], seeds: Sequence[int]) -> dict[str, Any]:
    """``llmsim.replicates``: each figure's spread over the seeds."""
    spread = {}
    for key in interval_keys(replicates[0]):
        v = np.asarray(_values(replicates, key), dtype=float)
        if v.size:
            spread[key] = {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if v.size > 1 else 0.0,
                           "min": float(v.min()), "max": float(v.max())}
    out: dict[str, Any] = {"count": len(replicates), "seeds": list(seeds), "spread": spread}
    slos = [r.get("slo") for r in replicates]
    verdicts = [slo_met(r) for r in replicates]
    if all(v is not None for v in verdicts):
        out["slo_met"] = sum(1 for v in verdicts if v)
    if all(s is not None for s in slos):
        out["slo_targets_met"] = {k: sum(1 for s in slos if s["targets"].get(k, {}).get("met"))
                                  for k in slos[0].get("targets", {})}
    return out
