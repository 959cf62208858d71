"""Parsing a scenario's SLO mapping (``slo:``, a class's, an input-length bucket's) into
the :class:`~simulator.metrics.slo.SloSpec` the figures are judged by.

A scenario states its SLO as percentile targets (``ttft_p99_ms: 500``) and/or
vLLM-style per-request thresholds (``ttft_ms``) that only feed goodput; see
:mod:`simulator.metrics.slo` for what each means.
"""
from __future__ import annotations

import math
import re
from typing import Any, Mapping

from ..errors import LlmsimError, unit_slip
from ..metrics.slo import PER_REQUEST_METRICS, SloSpec
from ..runsize import MAX_SPAN_S

__all__ = ["parse_slo", "MAX_TARGET_MS"]

#: The longest target accepted: a run's whole span (runsize.MAX_SPAN_S); 1e308 also drew a plot axis of
#: 300 decades, which overflowed.
MAX_TARGET_MS = MAX_SPAN_S * 1000.0

_TARGET = re.compile(r"^(ttft|tpot|itl|e2el)_p(\d+(?:\.\d+)?)_ms$")
_PLAIN = re.compile(r"^(ttft|tpot|e2el)_ms$")


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        text = "the text " if isinstance(value, str) else ""
        slip = unit_slip(value, str(key)) if isinstance(value, str) else None
        raise LlmsimError(f"expected a number of milliseconds, got {text}{value!r}{': ' + slip if slip else ''}",
                          key_path=f"slo.{key}")
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise LlmsimError(f"expected a finite, positive number of milliseconds, got {value!r} (no request takes "
                          f"0 ms: a target of 0 fails every run)" if v == 0 else
                          f"expected a finite, positive number of milliseconds, got {value!r}", key_path=f"slo.{key}")
    if v > MAX_TARGET_MS:
        raise LlmsimError(f"{v:g} ms is longer than any run llmsim simulates ({MAX_TARGET_MS:g} ms, ~3 years): "
                          "no request can take it, so the target binds nothing; leave the key out instead",
                          key_path=f"slo.{key}")
    return v


def _meant(key: str) -> str | None:
    """The target a near miss meant: results.json's and vLLM's order (``p99_ttft_ms``), the unit or the
    ``p`` left out (``ttft_p99``, ``ttft_99_ms``), capitals; None when it is none of these."""
    k = key.strip().lower().replace("-", "_")
    k = re.sub(r"^p(\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)", r"\2_p\1", k)
    k = re.sub(r"^(ttft|tpot|itl|e2el)_(\d)", r"\1_p\2", k)
    k = k if k.endswith("_ms") else k + "_ms"
    return k if k != key and _TARGET.match(k) else None


def parse_slo(slo: Mapping[str, Any] | None) -> SloSpec:
    """Validate an SLO mapping; unknown keys are user errors, not ignored,
    since a misspelt target would otherwise pass every check silently."""
    spec = SloSpec()
    if not slo:
        return spec
    plain: dict[str, float] = {}
    from_targets: dict[str, tuple[float, float]] = {}
    for key, value in slo.items():
        m = _TARGET.match(str(key))
        if m:
            metric, pct = m.group(1), float(m.group(2))
            if not 0.0 < pct <= 100.0:
                raise LlmsimError("the percentile in a target must be in (0, 100]", key_path=f"slo.{key}")
            ms = _number(key, value)
            spec.targets.append((str(key), metric, pct, ms))
            if metric in PER_REQUEST_METRICS and pct >= from_targets.get(metric, (-1.0, 0.0))[0]:
                from_targets[metric] = (pct, ms)
            continue
        m = _PLAIN.match(str(key))
        if m:
            plain[m.group(1)] = _number(key, value)
            continue
        meant = _meant(str(key))
        raise LlmsimError(f"unknown SLO key{f' (did you mean {meant}?)' if meant else ''}; expected "
                          "<metric>_p<percentile>_ms (metric one of ttft, tpot, itl, e2el; e.g. ttft_p99_ms) or a "
                          "per-request threshold ttft_ms / tpot_ms / e2el_ms", key_path=f"slo.{key}")
    _refuse_inverted(spec.targets)
    for metric in PER_REQUEST_METRICS:
        if metric in plain:
            spec.thresholds[metric] = plain[metric]
        elif metric in from_targets:
            spec.thresholds[metric] = from_targets[metric][1]
    return spec


def _refuse_inverted(targets: list[tuple[str, str, float, float]]) -> None:
    """A higher percentile of one metric is never below a lower one, so a
    target that asks it to be (``ttft_p50_ms: 1000`` with ``ttft_p99_ms: 100``)
    is a typo: the lower target could never bind, and the SLO would be
    judged on something the user did not mean."""
    for key, metric, pct, ms in targets:
        for key2, metric2, pct2, ms2 in targets:
            if metric2 == metric and pct2 > pct and ms2 < ms:
                raise LlmsimError(f"{ms:g} ms is above the {key2} target of {ms2:g} ms: a p{pct:g} can never "
                                  f"exceed the p{pct2:g}, so one of the two is a typo", key_path=f"slo.{key}")
