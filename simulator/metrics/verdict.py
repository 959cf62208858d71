"""Pass or fail for a run, as a script needs it: the rule ``llmsim check`` and ``llmsim run`` share.

A run fails when its fleet is overloaded (``llmsim.load``: its percentiles
then measure a backlog, not the fleet), when its load cannot be judged (no
request finished within the window: whatever its latencies read, nothing
said the fleet keeps up, and an exit code of 0 would vouch for it) or when an SLO the scenario
declares is missed: the scenario's over all traffic, each class that
declares its own, each prompt-length bucket that declares its own. A class
without targets of its own is held to the scenario's only over all
traffic, as declared (its ``slo`` block in results.json is informative).
A request the fleet refused (too long, never fitting, stranded) was served
within no SLO: a run that declares one does not meet it beside such a request
(shedding is a class's declared ``admission`` policy, which the load judges).
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

from .by_input_length import bucket_slo_blocks
from .load import CANNOT_TELL, SHORT_WINDOW, undetermined

__all__ = ["EXIT_MISSED", "slo_blocks", "slo_met", "refused", "refused_line", "fleet_met", "load_columns", "load_failure", "load_gate", "mark",
           "owner", "target_name", "failures", "past", "ms_past", "measured", "class_p99"]

#: Exit code of ``llmsim run`` and ``llmsim check`` for a result that fails
#: (bad input stays 2): CI can tell "the fleet got worse" from "the check is broken".
EXIT_MISSED = 1


def past(value_ms: float, target_ms: float, digits: int = 1, grouped: bool = True) -> str:
    """A latency past its target, with ``digits`` decimals or the more it takes to show it past ("25.01",
    not "25.0" beside "≤ 25", which reads as a target met and called missed); ``grouped``: thousands separated."""
    sep = "," if grouped else ""
    for d in range(digits, 5):
        shown = f"{value_ms:{sep}.{d}f}"
        if float(shown.replace(",", "")) != target_ms:
            return shown
    return f"{value_ms:{sep}.4f}"


def ms_past(value_ms: float, target_ms: float, grouped: bool = True) -> str:
    """:func:`past` in ms, with its unit."""
    return f"{past(value_ms, target_ms, grouped=grouped)} ms"


def measured(target: Mapping[str, Any], digits: int) -> str:
    """An SLO target's measured value (a ``targets`` entry) to ``digits`` decimals, or the more a missed
    one takes not to read as its target; "—" when nothing was measured."""
    v = target.get("measured_ms")
    if v is None:
        return "—"
    if target.get("met") is False and target.get("target_ms") is not None:
        return past(v, target["target_ms"], digits)
    return f"{v:,.{digits}f}"


def class_p99(klass: Mapping[str, Any], metric: str, digits: int) -> str:
    """A class's p99 ``metric`` (ttft, tpot) for its table, as :func:`measured` shows it against the class's
    target for it, when it has one."""
    target = ((klass.get("slo") or {}).get("targets") or {}).get(f"{metric}_p99_ms") or {}
    return measured({**target, "measured_ms": klass.get(f"p99_{metric}_ms")}, digits)


def slo_blocks(results: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(label, slo block) of every declared SLO the run is judged on: the
    scenario's (``SLO``), each class that declares its own (``SLO <class>``,
    ``slo_declared``), each prompt-length bucket that does."""
    blocks: list[tuple[str, Mapping[str, Any]]] = [("SLO", results["slo"])] if results.get("slo") else []
    measured = (results.get("llmsim") or {}).get("classes") or {}
    blocks += [(f"SLO {name}", c["slo"]) for name, c in measured.items() if c.get("slo_declared") and c.get("slo")]
    return blocks + list(bucket_slo_blocks(results))


def owner(label: str, sep: str = " ") -> str:
    """Whose targets a :func:`slo_blocks` label holds, as a prefix for a target's name: "" for the
    scenario's (``SLO``), else the class or bucket followed by ``sep`` ("paid ", "paid: ")."""
    return "" if label == "SLO" else label.removeprefix("SLO ") + sep


def target_name(label: str, key: str) -> str:
    """A declared SLO target's name wherever one is shown or keyed (run's tables and exit line, check's rows,
    a plan's misses and bounds): the fleet's by its key (``ttft_p99_ms``), a class's or prompt-length
    bucket's after its owner and a colon (``paid: ttft_p99_ms``, ``input 32000-64000: ttft_p99_ms``), the
    colon ending a name that has spaces of its own. Each command once spelt it its own way."""
    return owner(label, ": ") + key


def refused(results: Mapping[str, Any]) -> int:
    """Requests the fleet refused or stranded that no scenario key accepts (``llmsim.request_status``'s
    rejected, less those its admission control shed, and stranded): too long for the stack or its prompt
    budget, never fitting a replica. None was served within any SLO, so an SLO is not met beside one.
    Shedding is the policy a class's ``admission`` declares, held to :data:`~.load.SHED_FRACTION` by the
    load's verdict; rate-limited and cancelled requests are the product's and the clients' choices."""
    llmsim = results.get("llmsim") or {}
    status, load = llmsim.get("request_status") or {}, llmsim.get("load") or {}
    return (int(status.get("rejected") or 0) - int(load.get("shed") or 0)) + int(status.get("stranded") or 0)


def refused_line(results: Mapping[str, Any]) -> Optional[str]:
    """Why the SLO fails on refused requests, in the words ``run``, ``check`` and the pages give; None
    when none was refused."""
    n = refused(results)
    if not n:
        return None
    rate_limited = int(((results.get("llmsim") or {}).get("request_status") or {}).get("rate_limited") or 0)
    # over the requests the fleet was asked to serve, as goodput's offered_requests counts them: those the
    # clients withdrew or the gateway's quota answered 429 were never the fleet's to refuse
    offered = int(results.get("completed") or 0) + int(results.get("failed") or 0) - rate_limited
    share = f" ({100 * n / offered:.1f} % of {offered:,})" if offered else ""
    return (f"SLO missed: {n:,} request{'' if n == 1 else 's'}{share} refused by the fleet (too long for the stack "
            f"or its prompt budget, never fitting a replica, or stranded: llmsim.load says which), none served "
            f"within the SLO")


def slo_met(results: Mapping[str, Any]) -> Optional[bool]:
    """Whether every SLO the run is judged on holds (:func:`slo_blocks`) and no request was refused
    (:func:`refused`: the targets are measured over the requests served, and a fleet refusing a third of
    its requests met them); None when it declares none. The one verdict ``run``, ``plan``, ``sweep``,
    ``check`` and the pages give: the scenario's ``slo.met`` alone passed a fleet whose paid class
    missed its own target."""
    blocks = slo_blocks(results)
    return all(bool(b.get("met")) for _, b in blocks) and not refused(results) if blocks else None


def fleet_met(results: Mapping[str, Any]) -> Optional[bool]:
    """Whether a fleet passes as ``llmsim run`` judges it, for choosing among fleets (plans, sweeps,
    ladders): every SLO it is judged on holds and it keeps up with its load. A fleet that sheds or
    falls behind meets its latency targets on the requests it serves, and run exits 1 on it, so a
    plan must not buy it; None when the run declares no SLO. A load that cannot be judged, on which
    run exits 1 too (:func:`load_gate`), is not a failure here: every fleet of a plan runs the same
    window, which would fail them all alike, and the plan warns of it instead (:func:`load_unsure`)."""
    met = slo_met(results)
    if met and ((results.get("llmsim") or {}).get("load") or {}).get("overloaded"):
        return False
    return met


def load_columns(results: Mapping[str, Any]) -> dict[str, Any]:
    """``overloaded`` and ``load`` (the verdict's words) of a run, as columns of a table of fleets: a
    scenario without an SLO has no ``slo_met`` to carry a fleet that does not keep up."""
    load = (results.get("llmsim") or {}).get("load") or {}
    return {"overloaded": bool(load.get("overloaded")), "load": load.get("verdict")}


def load_failure(row: Mapping[str, Any]) -> Optional[str]:
    """The load's reason for failing a fleet ("load OVERLOADED: …"), or None when it keeps up; ``row``
    holds :func:`load_columns`."""
    return f"load {row['load']}" if row.get("overloaded") else None


def load_gate(load: Mapping[str, Any], sized_by: str = "") -> Optional[str]:
    """Why a run's load fails it (``llmsim.load``), for ``run``'s exit code and ``check``'s load row
    alike: an overloaded fleet, or one whose load could not be judged (:func:`~simulator.metrics.load.undetermined`:
    nothing finished within the window), which a script reading exit 0 would take for one that keeps
    up; None otherwise. ``sized_by``: what sizes the window, said after the reason. A fleet that keeps
    up on a short window passes: requests finished and the queue's trend was read, and the verdict's
    words say how far to trust it (plans and sweeps warn on them, :func:`load_unsure`)."""
    if load.get("overloaded"):
        return f"load {load['verdict']}"
    if undetermined(load):
        return f"load {load['verdict']}; a fleet whose load could not be judged does not pass{sized_by}"
    return None


def load_unsure(row: Mapping[str, Any]) -> bool:
    """Whether a row's fleet was judged on a window its requests outlast (:func:`load_columns`): nothing
    finished within it, or most of its requests were still in flight at its end. Its latencies are then
    those of a fleet still filling up, not of one serving the load for long, and pass a fleet too small."""
    return not row.get("overloaded") and str(row.get("load") or "").startswith((CANNOT_TELL, SHORT_WINDOW))


def mark(row: Mapping[str, Any]) -> str:
    """A fleet's verdict in one cell of a table (``slo_met`` and :func:`load_columns` of ``row``):
    "✗ overloaded" for a fleet that does not keep up, SLO or none (``llmsim run`` exits 1 on it), else
    ✓ or ✗ by its SLOs, "—" when none is declared."""
    if row.get("overloaded"):
        return "✗ overloaded"
    return "—" if row.get("slo_met") is None else "✓" if row["slo_met"] else "✗"


def failures(results: Mapping[str, Any]) -> list[str]:
    """Why the run fails, one line per reason; empty when it passes."""
    load = load_gate((results.get("llmsim") or {}).get("load") or {})
    out = [load] if load else []
    for label, block in slo_blocks(results):
        for key, target in (block.get("targets") or {}).items():
            if not target.get("met"):
                measured = target.get("measured_ms")
                got = "no samples" if measured is None else ms_past(measured, target["target_ms"])
                out.append(f"SLO {target_name(label, key)} missed: simulated {got}, target ≤ {target['target_ms']:,g} ms")
    line = refused_line(results) if slo_blocks(results) else None
    if line:
        out.append(line)
    # --replicates: the figures are the first seed's, but a fleet passes only if every seed does, as
    # plan --seeds judges it (one seed's pass alone exited 0 on a fleet three seeds in four missed with)
    reps = (results.get("llmsim") or {}).get("replicates") or {}
    seeds, met = reps.get("seeds") or [], reps.get("slo_met")
    if met is not None and met < len(seeds):
        out.append(f"SLO met by {met} of {len(seeds)} seeds ({', '.join(map(str, seeds))}): a fleet passes only "
                   f"if every seed meets it")
    return out
