"""results.json: request records -> ``vllm bench serve``-compatible results.

Every quantity vLLM also reports uses vLLM's key and vLLM's definition, so a
simulated run can be diffed against a real benchmark of the same traffic
with the same script. Choices where the simulator has to interpret vLLM:

* ``duration``: vLLM measures wall time from benchmark start to the last
  response. Here the benchmark starts at simulation time 0 and ends at the
  latest stamp of any request (a finish, or the arrival of a request that was
  rejected on the spot); the caller may pass the run's horizon instead.
* ``completed`` are FINISHED requests; ``failed`` those the fleet did not
  serve: rejected (shed on admission, or too long to ever fit; vLLM's bench
  counts a refused request as failed), answered 429 by the gateway's rate
  limit (a failed request to vLLM's bench too), or still in flight when the
  run stopped. ``cancelled`` (llmsim's key: vLLM's bench never cancels) are
  those the client withdrew, as the workload says it does (autocomplete's
  next keystroke), which are neither served nor a failure; completed +
  failed + cancelled = requests. The breakdown is in ``llmsim.request_status``.
* token totals and all latency statistics cover completed requests only.
* ITL is pooled over the engine's gap log, summarised on a 1 µs grid (see
  ``gaps.GapGrid`` and ``percentiles.UniformMixture``).
* a statistic over no values is null (vLLM would print 0).
* ``request_goodput`` is null without per-request thresholds, as in vLLM.

Key order follows vLLM's printout; the ``slo`` and ``llmsim`` blocks come
last. Everything is plain ``int``/``float``/``bool``/``None``/``str``.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from workloads.request import Request, Status

from ..fields import Field, block, leaf
from .derive import RequestArrays
from .gaps import GapGrid, GapLog
from .percentiles import DEFAULT_PERCENTILES, UniformMixture, percentile_key, sample_percentile, sample_stats
from .slo import LATENCY_METRICS, SloSpec
from .tail_samples import few_samples

__all__ = ["compute_results", "jsonable", "write_results", "FIELDS", "SLO_FIELDS", "latency_fields"]


#: What vLLM's bench would count as a failed request: refused (400, or 429 at a rate limit) or never answered.
_FAILED = [int(Status.REJECTED), int(Status.RATE_LIMITED), int(Status.PENDING), int(Status.STRANDED)]
#: The unserved requests goodput counts against the fleet: all it failed but the gateway's quota (a product's choice).
_UNSERVED = [s for s in _FAILED if s != int(Status.RATE_LIMITED)]


def _ratio(num: float, den: float | None) -> float | None:
    return float(num) / float(den) if den else None


def _fraction(mask: np.ndarray) -> float | None:
    return float(np.count_nonzero(mask)) / mask.size if mask.size else None


def _duration(arrays: RequestArrays, duration: float | None) -> float:
    if duration is None:
        return arrays.last_stamp()
    d = float(duration)
    if not math.isfinite(d) or d < 0:
        raise ValueError(f"duration must be a finite, non-negative number of seconds, got {duration!r}")
    return d


def _slo_block(spec: SloSpec, samples: Mapping[str, np.ndarray], itl: UniformMixture,
               good: np.ndarray | None, tpot_or_zero: np.ndarray, offered: int = 0) -> dict[str, Any]:
    """Per-target attainment and pass/fail; a target that cannot be measured
    (no samples) is not met: CI must not pass a run that proved nothing."""
    targets: dict[str, Any] = {}
    for key, metric, pct, target in spec.targets:
        if metric == "itl":
            measured = itl.percentiles([pct])[0]
            attainment = itl.cdf(target)
            count = int(itl.total)
        else:
            measured = sample_percentile(samples[metric], pct)
            values = tpot_or_zero if metric == "tpot" else samples[metric]
            attainment = _fraction(values <= target)
            count = samples[metric].size
        targets[key] = {"metric": metric, "percentile": pct, "target_ms": target, "measured_ms": measured,
                        "attainment": attainment, "met": measured is not None and measured <= target}
        few = few_samples(count, pct)
        if few:     # a percentile past the sample's slowest values: said, not passed off as a tail
            targets[key]["few_samples"] = few
    block: dict[str, Any] = {"met": all(t["met"] for t in targets.values()), "targets": targets}
    if good is not None:
        block["goodput"] = {
            "thresholds_ms": dict(spec.thresholds),
            "attainment": {m: _fraction((tpot_or_zero if m == "tpot" else samples[m]) <= thr)
                           for m, thr in spec.thresholds.items()},
            "good_requests": int(np.count_nonzero(good)),
            # over every request the fleet was asked to serve: one it refused or never finished was not
            # served within the SLO (a fraction of the completed alone read 100 % beside a third refused)
            "offered_requests": offered,
            "good_fraction": int(np.count_nonzero(good)) / offered if offered else None,
        }
    return block


_METRIC = {"ttft": "TTFT (arrival to the first token)", "tpot": "TPOT ((E2E − TTFT) / (output tokens − 1))",
           "itl": "ITL (the gaps between output tokens, pooled over requests)",
           "e2el": "E2E latency (arrival to the last token)"}
_STAT = {"mean": "mean", "median": "median", "std": "standard deviation (ddof 0)"}


def latency_fields(keys: Sequence[str] | None = None, over: str = "completed requests") -> dict[str, Field]:
    """The ``{stat}_{metric}_ms`` keys (``keys``: those a block keeps, else all of them)."""
    out = {}
    for metric in LATENCY_METRICS:
        stats = {**_STAT, **{percentile_key(p): f"{percentile_key(p)[1:]}th percentile" for p in DEFAULT_PERCENTILES}}
        for stat, what in stats.items():
            key = f"{stat}_{metric}_ms"
            if keys is None or key in keys:
                out[key] = leaf("ms", f"{what} of {_METRIC[metric]} over {over}; null over none")
    return out


#: ``slo``: what :func:`_slo_block` writes, for the scenario's SLO and for each class's or bucket's own.
SLO_FIELDS = {
    "met": leaf("bool", "every target met"),
    "targets": block("one entry per target, keyed as written in the scenario (ttft_p99_ms)", {
        "<target>": block("one percentile target", {
            "metric": leaf("text", "ttft, tpot, itl or e2el"),
            "percentile": leaf("percent", "the percentile the target is set at"),
            "target_ms": leaf("ms", "the target"),
            "measured_ms": leaf("ms", "the run's value at that percentile; null when nothing was measured"),
            "attainment": leaf("fraction", "share of the values at or under the target"),
            "met": leaf("bool", "measured_ms ≤ target_ms (a target with nothing measured is not met)"),
            "few_samples": block("too few samples for the percentile to have one above it: measured_ms is "
                                 "about the slowest sample's value, not a measured tail", {
                "samples": leaf("count", "the values the percentile was taken over"),
                "needed": leaf("count", "the fewest that put one above it (100 for a p99)"),
            }, when="the percentile rests on fewer samples than that"),
        })}),
    "goodput": block("vLLM's goodput: requests within every per-request threshold", {
        "thresholds_ms": block("the per-request thresholds", {"<metric>": leaf("ms", "the metric's threshold")}),
        "attainment": block("per metric, the share of completed requests within its threshold",
                            {"<metric>": leaf("fraction", "the share within the metric's threshold")}),
        "good_requests": leaf("count", "completed requests within every threshold"),
        "offered_requests": leaf("count", "the requests the fleet was asked to serve: completed, rejected (shed, "
                                 "too long, never fitting), stranded or unfinished; not those their clients "
                                 "cancelled or the gateway rate-limited"),
        "good_fraction": leaf("fraction", "good_requests / offered_requests; null over none"),
    }, when="the SLO sets per-request thresholds (ttft_ms, tpot_ms...)"),
}

_STATUS = {"pending": "still in flight when the run stopped", "finished": "served to their last token",
           "rejected": "shed on admission, or too long ever to fit", "cancelled": "withdrawn by their client",
           "rate_limited": "answered 429 by the gateway's rate limit",
           "stranded": "preempted after streaming and never readmitted, the KV admission gate never fitting "
                       "them again: the server would have held them forever"}

#: results.json's top level (the ``llmsim`` block is the fleet report's: ``fleet_report.FIELDS``).
FIELDS = {
    "completed": leaf("count", "requests served to their last token (vLLM's completed)"),
    "failed": leaf("count", "requests the fleet did not serve, by their llmsim.request_status: "
                   + "; ".join(f"{Status(s).name.lower()} ({_STATUS[Status(s).name.lower()]})" for s in _FAILED)),
    "cancelled": leaf("count", "requests their clients withdrew (llmsim's key; vLLM never cancels)"),
    "duration": leaf("s", "benchmark time: simulation start (after a closed loop's warm-up, its first counted "
                          "request; after a warm start's lead-in, t = 0) to the latest finish or rejection, not "
                          "to the end of a quiet workload.duration_s, which the run lasts and the bill reads: a "
                          "benchmark stops once its requests are answered"),
    "total_input_tokens": leaf("tokens", "prompt tokens of completed requests"),
    "total_output_tokens": leaf("tokens", "output tokens of completed requests"),
    "request_throughput": leaf("req/s", "completed / duration"),
    "request_goodput": leaf("req/s", "requests within every per-request SLO threshold / duration; "
                            "null without thresholds, as in vLLM"),
    "output_throughput": leaf("tok/s", "total_output_tokens / duration"),
    "total_token_throughput": leaf("tok/s", "(input + output tokens) / duration"),
    **latency_fields(),
    "slo": block("the scenario's SLO, judged", SLO_FIELDS, when="the scenario declares an slo"),
}

#: ``llmsim.request_status``: every request once, by how it ended (a status with no meaning here fails on import).
#: The statuses written only when some request ended so (only a gateway with rate limits answers 429;
#: only a pool whose readmission asks more than its admission strands a request), and when that is.
_WHEN = {Status.RATE_LIMITED: "a class has a rate_limit", Status.STRANDED: "a request was stranded"}
STATUS_FIELDS = {s.name.lower(): leaf("count", f"requests {_STATUS[s.name.lower()]}", when=_WHEN.get(s))
                 for s in Status}


def compute_results(requests: Iterable[Request], gaps: GapLog | GapGrid | None, *, slo: SloSpec | None = None,
                    llmsim: Mapping[str, Any] | None = None, duration: float | None = None,
                    percentiles: Sequence[float] = DEFAULT_PERCENTILES) -> dict[str, Any]:
    """Summarise one run as vLLM would; see the module docstring for the
    definitions. ``slo``: the percentile targets and per-request thresholds,
    parsed by the scenario layer (:func:`simulator.scenario.slo.parse_slo`). ``llmsim``
    is the engine's own figures, merged into the ``llmsim`` block as given."""
    spec = slo if slo is not None else SloSpec()
    a = RequestArrays(requests)
    dur = _duration(a, duration)
    done = a.finished
    completed = int(np.count_nonzero(done))
    total_in = int(a.input_tokens.sum(where=done))
    total_out = int(a.output_tokens.sum(where=done))

    every = completed == done.size   # then the arrays are the samples: no copies of 18M values

    def of_done(x: np.ndarray) -> np.ndarray:
        return x if every else x[done]

    samples = {"ttft": of_done(a.ttft_ms), "e2el": of_done(a.e2el_ms)}
    tpot_all = of_done(a.tpot_ms)
    samples["tpot"] = tpot_all[np.isfinite(tpot_all)]
    del tpot_all
    tpot_or_zero = of_done(a.tpot_or_zero_ms)
    itl = GapGrid.of(gaps).mixture()

    good = None
    if spec.thresholds:
        good = np.ones(completed, dtype=bool)
        for metric, thr in spec.thresholds.items():
            good &= (tpot_or_zero if metric == "tpot" else samples[metric]) <= thr

    res: dict[str, Any] = {
        "completed": completed,
        "failed": int(np.count_nonzero(np.isin(a.status, _FAILED))),
        "cancelled": int(np.count_nonzero(a.status == int(Status.CANCELLED))),
        "duration": dur,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": _ratio(completed, dur),
        "request_goodput": _ratio(int(np.count_nonzero(good)), dur) if good is not None else None,
        "output_throughput": _ratio(total_out, dur),
        "total_token_throughput": _ratio(total_in + total_out, dur),
    }
    for metric in LATENCY_METRICS:
        stats = itl.stats(percentiles) if metric == "itl" else sample_stats(samples[metric], percentiles)
        for stat, value in stats.items():
            res[f"{stat}_{metric}_ms"] = value
    if spec:
        offered = completed + int(np.count_nonzero(np.isin(a.status, _UNSERVED)))
        res["slo"] = _slo_block(spec, samples, itl, good, tpot_or_zero, offered)

    status = {s.name.lower(): int(np.count_nonzero(a.status == int(s))) for s in Status}
    for rare in _WHEN:
        if not status[rare.name.lower()]:
            del status[rare.name.lower()]
    block = dict(llmsim or {})
    block.setdefault("request_status", status)
    res["llmsim"] = block
    if llmsim is not None:
        from .verdict import slo_met    # here: the verdict reads blocks whose modules import this one

        verdict = slo_met(res)
        if verdict is not None:     # the answer's second half, after the load verdict
            at = list(block).index("load") + 1 if "load" in block else len(block)
            items = list(block.items())
            res["llmsim"] = dict([*items[:at], ("slo_met", verdict), *items[at:]])
    return jsonable(res)


def jsonable(obj: Any) -> Any:
    """Plain-Python copy of ``obj`` that ``json.dumps(allow_nan=False)`` accepts:
    numpy scalars and arrays unwrapped, NaN/±inf -> None, tuples -> lists."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [jsonable(v) for v in obj.tolist()]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, bool):
        return obj
    if isinstance(obj, int):
        return int(obj)  # IntEnum and friends become plain ints
    if isinstance(obj, str):
        return str(obj)
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot put {type(obj).__name__} into results.json")


def write_results(results: Mapping[str, Any], path: str | Path) -> Path:
    """Write results.json (strict JSON: no NaN)."""
    p = Path(path)
    p.write_text(json.dumps(jsonable(dict(results)), indent=2, allow_nan=False) + "\n")
    return p
