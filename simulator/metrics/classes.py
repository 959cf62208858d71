"""Per-class results: the ``llmsim.classes.<class>`` block.

Shedding is only visible per class: a fleet-wide p99 can look healthy while
the free tier is rejected wholesale. Each class gets its outcome counts,
its latency percentiles and its own SLO attainment (the class's ``slo``,
else the scenario's). ITL has no per-class figure: the engine pools
inter-token gaps per iteration, not per request, so an ITL target is
judged fleet-wide only.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from workloads.request import Request, Status
from .records import LATENCY, Records
from .load import refused_count
from .results import compute_results
from .slo import SloSpec
from .results import SLO_FIELDS, latency_fields
from ..fields import block, leaf

_KEYS = ("median_ttft_ms", "p95_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p95_tpot_ms", "p99_tpot_ms",
         "p99_e2el_ms", "request_throughput")


#: ``llmsim.classes.<class>``.
FIELDS = {
    "pool": leaf("text", "the pool the class routes to"), "priority": leaf("int", "its priority"),
    "requests": leaf("count", "its requests"), "completed": leaf("count", "finished"),
    "rejected": leaf("count", "refused by the fleet: shed by admission control, too long for its pool's server or its prompt budget, or never fitting a replica (llmsim.load counts each kind)"), "cancelled": leaf("count", "withdrawn by their clients"),
    "rejected_fraction": leaf("fraction", "rejected / requests"),
    "rate_limited": leaf("count", "answered 429 by the gateway", when="the class has a rate_limit"),
    "stranded": leaf("count", "preempted and never readmitted (llmsim.request_status.stranded)",
                     when="a request of the class was stranded"),
    "refused": leaf("count", "requests of the class the fleet refused as too long, over their budget or never "
                             "fitting, or stranded (not those its admission control shed): its SLO is missed "
                             "beside any, as the fleet's is", when="a request of the class was refused"),
    **{k: f for k, f in latency_fields(_KEYS, "the class's completed requests").items()},
    "request_throughput": leaf("req/s", "the class's completed requests / duration (the run's, as the top "
                                        "level's request_throughput: the classes' add up to it)"),
    "usd": leaf("USD", "the class's share of the window's GPU bill: each pool's bill shared over the requests it "
                       "completed by their input and output tokens alike (a disaggregated prefill pool's requests "
                       "share its decode pool's too; its own bill by their input tokens, the only ones it "
                       "computes), so the classes' add up to the bills of the pools that "
                       "completed any; what a tenant costs, rate limit or not (llmsim.gateway's usd per class)"),
    "slo": block("the class's own SLO (else the scenario's), judged", SLO_FIELDS,
                 when="an SLO applies and the class sent requests in the window"),
    "slo_declared": leaf("bool", "the class declares its own SLO, which the run is judged on (llmsim run's exit "
                                 "code, plan, sweep, check); false: its slo block holds the scenario's targets "
                                 "over its requests, for information; with no requests in the window neither is "
                                 "judged (no slo block)", when="an SLO applies"),
}


def class_block(requests: "Records | Sequence[Request]", classes: Sequence, class_slos: Mapping[str, SloSpec],
                default_slo: SloSpec, duration: float, routes: Mapping[str, str],
                usd: Mapping[str, float] | None = None) -> dict[str, Any]:
    """Each class's figures, judged by its own SLO (``class_slos``, parsed) or else the scenario's.

    ``duration``: the run's (:func:`simulator.report.fleet_report.benchmark_duration`), not the
    class's own span: its requests were offered on the fleet's clock.

    ``routes`` (class → pool, the compiled plan's) names the pool of a class
    that sent nothing in the window: its own ``pool`` key is unset where the
    scenario has one pool, or routes by prompt length.

    ``usd``: each class's share of the bill (:func:`simulator.metrics.metering.class_usd`)."""
    by = Records.of(requests).select(*LATENCY, "klass", "pool", "reject_reason").groups("klass", [c.name for c in classes])
    out: dict[str, Any] = {}
    specs = {c.name: c for c in classes}
    for name, reqs in by.items():
        c = specs.get(name)
        own = class_slos.get(name) if c is not None else None
        slo = (own if own else default_slo).without("itl")
        res = compute_results(reqs, None, slo=slo, duration=duration)
        n = {s: reqs.count(s) for s in Status}
        block: dict[str, Any] = {
            "pool": reqs.pool[0] if len(reqs) else routes.get(name),
            "priority": c.priority if c is not None else 0,
            "requests": len(reqs),
            "completed": n[Status.FINISHED],
            "rejected": n[Status.REJECTED],
            "cancelled": n[Status.CANCELLED],
            "rejected_fraction": n[Status.REJECTED] / len(reqs) if len(reqs) else None,
        }
        if c is not None and c.rate_limit is not None:
            block["rate_limited"] = n[Status.RATE_LIMITED]
        if n[Status.STRANDED]:     # admitted, so neither shed nor cancelled: counted nowhere else
            block["stranded"] = n[Status.STRANDED]
        if refused := refused_count(reqs):
            block["refused"] = refused
        block.update({k: res.get(k) for k in _KEYS})
        block["usd"] = (usd or {}).get(name, 0.0)
        if "slo" in res:
            if len(reqs):
                # a class that sent nothing in the window has nothing to judge: its targets read "no samples",
                # missed, and failed every fleet of a plan over a tenant quiet in a short window
                block["slo"] = res["slo"]
            block["slo_declared"] = bool(own)
        out[name] = block
    return out
