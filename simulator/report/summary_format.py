"""Number formatting and verdict marks shared by the terminal tables."""
from __future__ import annotations

import math
from typing import Any, Mapping

from ..dtypes import WEIGHT_DTYPES, falls_back

OK, FAIL = "[green]✓[/]", "[red]✗[/]"

#: Why requests failed (``llmsim.request_status`` keys), shown under the failed count: vLLM lumps them
#: together, a capacity plan must not (shed is capacity, 429 a rate limit, unfinished a short window).
FAILED_PARTS = (("rejected", "rejected (shed or never fits)"), ("rate_limited", "rate-limited (429 at the gateway)"),
                ("pending", "unfinished at the end"), ("stranded", "stranded (preempted, never readmitted)"))


def gpu_hours(gh: float) -> str:
    """GPU-hours to three significant digits without an exponent ("0.0361", "74.9"), whole and thousands
    separated from 1,000 ("2,496", where ",.3g" printed "2.5e+03")."""
    if gh == 0 or abs(gh) >= 1000:
        return f"{gh:,.0f}"
    return f"{gh:,.{max(0, 2 - math.floor(math.log10(abs(gh))))}f}"


def gpus_text(v: Any) -> str:
    """A GPU count in a sentence, as the terminal's plan answer words it: "1 GPU", "104 GPUs" (the run's
    headline and the plan's page once read "1 GPUs")."""
    return f"{'—' if v is None else f'{v:,.0f}'} GPU{'' if v == 1 else 's'}"


def usd(v: Any) -> str:
    """Dollars to four significant digits (cents and fractions of a cent
    alike), without exponents: a request's $0.00008361, not 8.361e-05."""
    if v is None:
        return "—"
    v = float(v)
    if v == 0 or abs(v) >= 100:
        return f"{v:,.2f}"
    return f"{v:,.{max(0, 3 - math.floor(math.log10(abs(v))))}f}"


def num(v: Any, kind: str = "float") -> str:
    if v is None:
        return "—"
    if kind == "int":
        return f"{int(v):,}"
    return f"{float(v):,.2f}"


def weights_served(pool: Mapping[str, Any], plain: str = "{weights}", noted: str = "{weights} ({note})") -> str:
    """A pool's weights' format, with the widths it computes at where the GPU
    has no unit for it (fp8 on an A100 runs W8A16): the format alone would
    suggest the 8-bit peak the bill and the latencies do not get. The two
    templates place them where the caller's line has room."""
    weights = pool.get("weight_dtype") or "—"
    scheme = pool.get("gemm_scheme")
    if scheme and weights in WEIGHT_DTYPES and falls_back(weights, scheme):
        why = f"{scheme}: no {weights} tensor cores on {pool.get('gpu', 'this GPU')}"
        return noted.format(weights=weights, note=why)
    return plain.format(weights=weights)


def stack_served(pool: Mapping[str, Any]) -> str:
    """The serving stack and release a pool ran (``vllm 0.19.1 (its default release)``), "" for
    llmsim's generic engine: the release decides defaults (async scheduling, the memory reserve)
    a reader must know were assumed when the scenario named none."""
    backend = pool.get("backend")
    if not backend:
        return ""
    release = pool.get("backend_release")
    if release is None:
        return backend
    return f"{backend} {release}" + ("" if pool.get("backend_release_given") else " (its default release)")


def replica_layout(pool: Mapping[str, Any]) -> str:
    """How a pool's replica is split (``tp8``, ``tp1·dp8·ep8``, ``tp4·pp2``): a replica of eight
    attention-DP ranks read ``tp1`` alone, as if it were one GPU, beside a GPU count eight times that."""
    parts = [("tp", pool.get("tp")), ("dp", pool.get("dp")), ("ep", pool.get("ep")), ("pp", pool.get("pp"))]
    return "·".join(f"{name}{n}" for name, n in parts if n is not None and (name == "tp" or n > 1))


def handoff_text(h: Mapping[str, Any] | None) -> str:
    """A prefill pool's KV hand-off (``llmsim.pools.<pool>.handoff``) in words, "" for another pool: the
    link and what one prompt token puts on it, which the TTFT budget's transfer time hangs on and the
    scenario's preset alone does not show."""
    if not h:
        return ""
    link, mean, wait = h["link"], h.get("mean_ms"), h.get("wait_mean_ms")
    took = f", {mean:,.1f} ms a hand-off on average" if mean is not None else ""
    if wait:        # hand-offs took turns on the links: how much of that was the queue
        took += f" ({wait:,.1f} ms of it waiting for the links)"
    return (f"hands its KV to {h['decode_pool']} over {link['preset']} ({link['gb_per_s']:g} GB/s a GPU, "
            f"{link['latency_ms']:g} ms): {h['bytes_per_token']:,.0f} bytes a prompt token on the busiest link"
            + took)


def class_verdict(c: Mapping[str, Any], ok: str = OK, fail: str = FAIL) -> str:
    """A class's SLO mark: its own targets' verdict, or, for a class the run is not judged on (its slo
    block the scenario's targets over its requests, ``slo_declared`` false), that verdict in
    parentheses, for information (a bare ✗ beside "SLO met" read as a miss the run ignored). A class
    whose requests the fleet refused misses it (its ``refused``), as the fleet's verdict does: its
    targets are measured over the requests served."""
    slo = c.get("slo")
    if not slo:
        return "—" if c.get("slo_declared") else ""     # targets of its own, and no request to judge them on
    mark = ok if slo.get("met") and not c.get("refused") else fail
    return mark if c.get("slo_declared", True) else f"({mark})"


#: A class's counts that take a column only where some class carries one: a rate limit's 429s (each class
#: with a rate limit has ``rate_limited``) and stranded requests (``stranded``, written only when non-zero).
#: Neither is shed nor cancelled, so without its column the class's row would not add up to its requests.
#: (key, the page's header, the terminal's header)
RARE_CLASS_COUNTS = (("rate_limited", "rate-limited (429)", "429"), ("stranded", "stranded", "stranded"))


def rare_counts_shown(classes: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """The :data:`RARE_CLASS_COUNTS` a class table carries: those some class of ``classes`` has."""
    return [count for count in RARE_CLASS_COUNTS if any(count[0] in c for c in classes.values())]
