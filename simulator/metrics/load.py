"""Does the fleet keep up? ``llmsim.load``: offered against served, and the queue's trend.

Percentiles alone cannot say it: a fleet offered twice what it serves still
prints a latency table, its TTFT the time requests spent queueing behind a
backlog that grew all run. Over the arrival window [0, T] (``workload.duration_s``,
else the last arrival; for a trace, whose ``duration_s`` only cuts the replay, the window it
replays, which its last arrival may end well before: ``workloads.traces._replay_window``):

* ``offered_rps``: requests that arrived by T, per second of T;
* ``completed_rps``: requests finished by T, per second of T;
* ``queued_at_mid`` / ``queued_at_end``: requests that had arrived but were
  not yet scheduled (admitted) nor ended at T/2 and at T;
* ``running_at_end``: admitted, not yet ended at T;
* ``queue_growth_rps``: (queued at T − queued at T/2) / (T/2);
* ``unfinished``: requests that never ended (still pending when the run stopped);
* ``drain_s``: from T to the last request's end;
* ``shed`` / ``rate_limited`` / ``cancelled``: requests the fleet turned
  away for load (its admission control), the gateway answered 429, and
  their clients gave up on, counted over the whole run; each with its
  fraction of all requests (``shed_fraction``...);
* ``never_fit``: requests no replica of their pool could hold even alone
  (its attention rank's KV pool, vLLM's sliding-window gate, their
  class's KV share), rejected on arrival: more replicas of the same
  layout would not serve them, more KV per replica would.

``overloaded`` when the queue grew over the window's second half by more
than chance allows a fleet that keeps up (a fleet that keeps up holds its
queue level: arrivals beyond what it serves are what accumulate): more
than two standard deviations of the random walk the second half's
arrivals make against a fleet serving exactly its load (2·√(arrivals),
counting those that arrived to be served: requests their clients
cancelled or the gateway refused are not counted, or an editor's
superseded completions, 96 % of an autocomplete fleet's arrivals, would
hide a queue that doubled) and more than three of a queue of that size's
noise (3·√(queued at T/2 + 1)); so a longer window tells a smaller
shortfall. Also when requests never ended (or were stranded: preempted,
their readmission could never fit again), or when the fleet shed
more than 5 % of its requests: a fleet that turns load away does not keep
up with it, however short its queue. Rate-limited requests are the
gateway's quota, a product decision rather than a shortfall of GPUs, and
cancelled ones are the clients' (an editor superseding a completion):
neither makes a fleet overloaded, but the verdict counts both, so that
"keeps up" is never read beside a large share of offered load unserved;
nor beside none of it served: a window in which no request finished (each
outlasts it) cannot tell, and the verdict says so. Nor can a window whose
sessions' load was still rising: sessions started from none (a cold start, or
a lead-in shorter than they last) offer the window only part of the rate they
settle at, and a fleet that keeps up with that part may not keep up with the
whole. Sessions run to their end past T, so the requests of the sessions
begun in the window, after T too, are what the window's starts offer at their
steady rate; where fewer than half of them arrived by T (``offered_share``),
the verdict cannot tell, and points at ``workload.lead_in_s``.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from workloads.rejection import Rejection
from workloads.request import Status
from .records import Records, session_spans
from ..fields import leaf

__all__ = ["SHED_FRACTION", "load_block", "refused_count", "unserved_text"]

SHED_FRACTION = 0.05
#: Rejections that are the request's error, as the stack answers bad input (more GPUs would not serve them).
_INVALID = np.array([int(Rejection.TOO_LONG), int(Rejection.OUTPUT_OVER_LIMIT)])
#: Rejections of a request no replica of its pool could hold even alone (its configuration, not its load).
_NEVER_FIT = np.array([int(Rejection.EXCEEDS_KV), int(Rejection.WINDOW_GATE), int(Rejection.OVER_CLASS_KV_CAP)])


def _refusals(status: np.ndarray, reason: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Masks of the requests refused as too long, over their budget and never fitting: the refusals
    no scenario key accepts, as against those a class's admission control shed."""
    refused = status == int(Status.REJECTED)
    return (refused & np.isin(reason, _INVALID), refused & (reason == int(Rejection.OVER_BUDGET)),
            refused & np.isin(reason, _NEVER_FIT))


def refused_count(rec: Records) -> int:
    """Requests refused as too long, over their budget or never fitting, and those stranded: the ones
    no scenario key accepts (:func:`simulator.metrics.verdict.refused` reads the fleet's from this
    block), counted for a part of the requests, a class's, whose own verdict must not read met beside
    them. Shedding is a class's declared admission policy, judged by the load's rule instead."""
    invalid, over, unfit = _refusals(rec.status, rec.reject_reason)
    return int(np.count_nonzero(invalid | over | unfit | (rec.status == int(Status.STRANDED))))


#: ``llmsim.load`` (definitions in the module docstring).
FIELDS = {
    "overloaded": leaf("bool", "the fleet did not keep up: its queue grew, requests never ended or were stranded, "
                               "it shed over 5 %, its stack answered prompts over its unchunked token budget "
                               "with an error (over_budget), or a replica could never hold some (never_fit)"),
    "window_s": leaf("s", "the arrival window T: workload.duration_s, else the last arrival; for a trace its replay "
                          "window (arrival.start_s to end_s, ended early by the file's last row, by duration_s or, "
                          "where max_requests or num_requests cut it, by the last request kept); after a closed loop's "
                          "warm-up, from its first counted request to the last"),
    "offered_rps": leaf("req/s", "requests that arrived by T, per second of T"),
    "completed_rps": leaf("req/s", "requests finished by T, per second of T"),
    "served_fraction": leaf("fraction", "requests finished by T / requests arrived by T"),
    "queued_at_mid": leaf("count", "requests arrived but neither admitted nor ended at the window's middle (T/2)"),
    "queued_at_end": leaf("count", "requests arrived but neither admitted nor ended at T"),
    "running_at_end": leaf("count", "requests admitted and not yet ended at T"),
    "queue_growth_rps": leaf("req/s", "(queued_at_end − queued_at_mid) / (window_s / 2)"),
    "unfinished": leaf("count", "requests still pending when the run stopped"),
    "stranded": leaf("count", "requests preempted after streaming whose readmission could never fit the KV pool "
                              "again: the server would have held them, and those queued behind them, forever"),
    "shed": leaf("count", "requests the fleet's admission control turned away for load (queue_full, "
                          "wait_too_long)"),
    "never_fit": leaf("count", "requests no replica of their pool could hold even alone (exceeds_kv, window_gate, "
                               "over_class_kv_cap), rejected on arrival: more KV per replica, not more replicas, "
                               "serves them; fails the fleet as stranded requests do"),
    "never_fit_fraction": leaf("fraction", "never_fit / all requests"),
    "too_long": leaf("count", "requests longer than their pool's server takes (engine.max_model_len; a contiguous "
                              "pool's max_new_tokens), rejected as the stack rejects bad input: not shed, since more "
                              "GPUs would not serve them"),
    "over_budget": leaf("count", "requests whose prompt is longer than the token budget their pool's stack takes "
                                 "without chunked prefill (engine.rejects_prompt_over_budget), answered with an error: "
                                 "the configuration refuses them, which fails the fleet as stranded requests do"),
    "over_budget_fraction": leaf("fraction", "over_budget / all requests"),
    "too_long_fraction": leaf("fraction", "too_long / all requests"),
    "shed_fraction": leaf("fraction", "shed / all requests"),
    "rate_limited": leaf("count", "requests the gateway answered 429"),
    "rate_limited_fraction": leaf("fraction", "rate_limited / all requests"),
    "cancelled": leaf("count", "requests their clients gave up on"),
    "cancelled_fraction": leaf("fraction", "cancelled / all requests"),
    "drain_s": leaf("s", "from T to the last request's end"),
    "offered_share": leaf("fraction", "requests arrived by T / the window's requests at its sessions' steady rate: "
                                      "those arrived by T outside sessions begun in it, and every request of the "
                                      "sessions begun in it, after T too (a warm start's lead-in sessions are not "
                                      "begun in it); under 0.5 their load was still rising, and the verdict cannot "
                                      "tell", when="it is under 0.5"),
    "verdict": leaf("text", "the above in one sentence: keeps up (on a short window when most of the window's "
                                "requests were still in flight at its end), OVERLOADED and why, or cannot tell "
                                "(nothing finished within the window, or its sessions' load was still rising)"),
}


def growth_noise(arrived: int, queued_at_mid: int) -> float:
    """How much a queue may grow over the window's second half by chance, for a fleet that keeps up.
    Two bounds, the larger: the arrivals' own randomness against a fleet serving exactly what it is
    offered (a random walk: 2·√(arrivals), two standard deviations of a Poisson count), and the
    fluctuation of a queue of the size it had at T/2 (3·√(queued + 1)). A fixed share of the arrivals
    (5 %) stood here before: a fleet 4 % short of its load, its queue and TTFT growing all run (0.8 s
    to 13 s over 8 minutes), read "keeps up" however long the window."""
    return max(2.0 * math.sqrt(arrived + 1.0), 3.0 * math.sqrt(queued_at_mid + 1.0))


def _queued(rec: Records, end: np.ndarray, t: float) -> int:
    waiting = (rec.arrival <= t) & ~(rec.admitted <= t) & ~(end <= t)
    return int(np.count_nonzero(waiting))


def _session_ramp(rec: Records, t: float, offered: int, began_before: Sequence[int]) -> tuple[float, int, int, float]:
    """(offered_share, the sessions begun by ``t``, their requests after it, the 90th percentile of their
    length, first request to last end, in s) of a
    window whose ``offered`` requests arrived by ``t``; ``began_before``: the sessions a warm start's lead-in
    began, whose requests in the window are the steady load's, not a start's (module docstring)."""
    session = getattr(rec, "session", None)       # records built without the column have no sessions
    if session is None or not (session >= 0).any():
        return 1.0, 0, 0, 0.0
    own = session >= 0
    if len(began_before):
        own &= ~np.isin(session, np.asarray(began_before))
    arrival, finish = rec.arrival[own], rec.finish[own]
    _, _, which, first, last = session_spans(session[own], arrival, np.where(np.isfinite(finish), finish, arrival))
    begun = first <= t
    after = int(np.count_nonzero(begun[which] & (arrival > t)))
    share = offered / (offered + after) if offered + after else 1.0
    length = float(np.percentile(last[begun] - first[begun], 90)) if begun.any() else 0.0
    return share, int(np.count_nonzero(begun)), after, length


def load_block(rec: Records, window_s: Optional[float], opens_s: float = 0.0,
               began_before: Sequence[int] = ()) -> dict[str, Any]:
    """The ``llmsim.load`` verdict (definitions in the module docstring) over the window from ``opens_s``
    (a closed loop's first counted request: its warm-up's time, whose requests are not in ``rec``, halved
    every rate and read the queue's middle at the warm-up's end) to T. Of the rejected requests (their
    ``reject_reason``, stamped by whoever refused them), those longer than their pool's server takes
    (``engine.max_model_len``; a contiguous pool's ``max_new_tokens``) are the client's input error, not
    load turned away: more GPUs would not serve them. Those whose prompt their stack refuses without
    chunked prefill (over its budget), and those no replica could ever hold (its KV pool, vLLM's
    sliding-window gate, their class's KV share), are the pool's configuration turning them away, a
    failure of the fleet (as a stranded request is), though not one more replicas would mend. Only
    admission control's rejections are load shed. ``began_before``: the sessions a warm start's lead-in
    began (:func:`_session_ramp`)."""
    rec = Records.of(rec)
    arrival = rec.arrival
    if not len(rec):
        return {"overloaded": False, "window_s": 0.0, "verdict": "no requests"}
    t = float(window_s) if window_s else float(np.max(arrival))
    span = t - opens_s
    status = rec.status
    end = np.where(np.isfinite(rec.finish), rec.finish, np.inf)
    arrived = arrival <= t
    finished = (status == int(Status.FINISHED)) & (end <= t)
    offered = int(np.count_nonzero(arrived))
    mid = opens_s + span / 2.0
    q_mid, q_end = _queued(rec, end, mid), _queued(rec, end, t)
    running = int(np.count_nonzero(arrived & (rec.admitted <= t) & ~(end <= t)))
    withdrawn = (status == int(Status.CANCELLED)) | (status == int(Status.RATE_LIMITED))
    second_half = int(np.count_nonzero(arrived & (arrival > mid) & ~withdrawn))
    growth = q_end - q_mid
    unfinished = int(np.count_nonzero(status == int(Status.PENDING)))
    stranded = int(np.count_nonzero(status == int(Status.STRANDED)))
    refused = status == int(Status.REJECTED)
    invalid, over, unfit = _refusals(status, rec.reject_reason)
    n_over, n_unfit = int(np.count_nonzero(over)), int(np.count_nonzero(unfit))
    rejected = int(np.count_nonzero(refused & ~invalid & ~over & ~unfit))
    limited = int(np.count_nonzero(status == int(Status.RATE_LIMITED)))
    cancelled = int(np.count_nonzero(status == int(Status.CANCELLED)))
    growing = growth > growth_noise(second_half, q_mid)
    shedding = rejected > SHED_FRACTION * len(rec)
    overloaded = bool(growing or unfinished or stranded or shedding or n_over or n_unfit)
    per_s = (lambda n: n / span) if span > 0 else (lambda n: None)
    ended = end[np.isfinite(end)]
    out = {
        "overloaded": overloaded,
        "window_s": span,
        "offered_rps": per_s(offered),
        "completed_rps": per_s(int(np.count_nonzero(finished))),
        "served_fraction": int(np.count_nonzero(finished)) / offered if offered else None,
        "queued_at_mid": q_mid,
        "queued_at_end": q_end,
        "running_at_end": running,
        "queue_growth_rps": growth / (span / 2.0) if span > 0 else None,
        "unfinished": unfinished,
        "stranded": stranded,
        "shed": rejected,
        "shed_fraction": rejected / len(rec),
        "too_long": int(np.count_nonzero(invalid)),
        "too_long_fraction": int(np.count_nonzero(invalid)) / len(rec),
        "over_budget": n_over,
        "over_budget_fraction": n_over / len(rec),
        "never_fit": n_unfit,
        "never_fit_fraction": n_unfit / len(rec),
        "rate_limited": limited,
        "rate_limited_fraction": limited / len(rec),
        "cancelled": cancelled,
        "cancelled_fraction": cancelled / len(rec),
        "drain_s": max(0.0, float(ended.max()) - t) if ended.size else None,
    }
    share, sessions, after, length = _session_ramp(rec, t, offered, began_before)
    ramp = None
    if share < RAMP_SHARE and not overloaded:
        out["offered_share"] = share
        ramp = (f"its sessions' load was still rising: the {sessions:,} sessions begun in the window sent "
                f"{after:,} requests after it, against the {offered:,} that arrived within it; one in ten lasts "
                f"over {window_text(length)}")
    out["verdict"] = _verdict(out, ramp)
    return out


#: Above this share of the window's arrivals still in flight (queued or running) at its end, "keeps up" is
#: said to rest on a window shorter than the requests: the completed rate then reads far below the offered
#: one however well the fleet serves (cancelled, shed and rate-limited requests are not in flight).
STEADY_SHARE = 0.5

#: Below this share of its sessions' steady load arrived within the window (``offered_share``), the verdict
#: cannot tell whether the fleet keeps up: most of the load the window's sessions offer came after it.
RAMP_SHARE = 0.5

#: How a verdict that cannot tell whether the fleet keeps up begins (:func:`undetermined`), and one that
#: says it does on a window most requests outlast: readers of a row that holds the verdict alone (a plan's
#: probes, a sweep's points) recognise them by these words.
CANNOT_TELL = "cannot tell"
SHORT_WINDOW = "keeps up, on a short window"


def window_text(seconds: float) -> str:
    """A simulated window's length as the verdicts write it: whole seconds, or two significant figures
    under ten (a 0.3 s window of a short test read "over the 0 s arrival window")."""
    return f"{seconds:,.0f} s" if seconds >= 9.5 else f"{seconds:.2g} s"


def _rps(x: float) -> str:
    """A rate as the verdict writes it: to the cent, or in powers of ten past a billion (requests that all
    arrive in one instant make a rate of 10³⁰⁰, 300 digits written out)."""
    return f"{x:,.2f}" if abs(x) < 1e9 else f"{x:.3g}"


def _refused_share(b: Mapping[str, Any]) -> float:
    return (b["shed_fraction"] + b["too_long_fraction"] + b["never_fit_fraction"]
            + b["rate_limited_fraction"] + b["cancelled_fraction"])


def undetermined(b: Mapping[str, Any]) -> bool:
    """Whether the block cannot tell whether the fleet keeps up: it is not overloaded and nothing
    finished within the window, because every request ended unserved or every one outlasts the
    window. Every reader of the block (run's summary, ``check``'s load row) says "cannot tell" then,
    never "keeps up" beside "completed 0 req/s"; nor where its sessions' load was still rising
    (``offered_share``, present under :data:`RAMP_SHARE`)."""
    if b.get("overloaded") or "completed_rps" not in b:
        return False
    if b.get("offered_share") is not None:
        return True
    if b["completed_rps"]:
        return False
    return _refused_share(b) >= 1.0 - 1e-9 or bool(b["offered_rps"])


def _verdict(b: dict[str, Any], ramp: Optional[str] = None) -> str:
    """The block's verdict; ``ramp``: why its sessions' load was still rising, where it was."""
    rates = (f"offered {_rps(b['offered_rps'])} req/s, completed {_rps(b['completed_rps'])} req/s over the "
             f"{window_text(b['window_s'])} arrival window" if b["offered_rps"] is not None else "no arrival window")
    queue = (f"queue {b['queued_at_mid']:,} at its middle, {b['queued_at_end']:,} at its end "
             f"({b['running_at_end']:,} running)")
    unserved = unserved_text(b)
    offered = rates
    if unserved:
        rates += f" ({unserved})"
    if undetermined(b) and _refused_share(b) >= 1.0 - 1e-9:
        # nothing reached a GPU: a longer window would not help; the limits that ended every request would
        return (f"{CANNOT_TELL}: every request ended unserved ({unserved}), so the fleet carried no load; "
                f"{offered}")
    if ramp is not None:
        # the queue held level under part of the load the window's sessions settle at
        return (f"{CANNOT_TELL}: {ramp} ({rates}; {queue}); a warm start about as long as the sessions "
                f"(workload.lead_in_s) opens the window on their steady load")
    if undetermined(b):
        # nothing finished by T: a queue that held level says nothing of a fleet whose every request outlasts T
        return (f"{CANNOT_TELL}: no request finished within the arrival window ({rates}; {queue}); simulate a "
                f"window longer than a request takes (workload.duration_s, num_requests)")
    if not b["overloaded"]:
        in_flight = b["queued_at_end"] + b["running_at_end"]
        if b["offered_rps"] and in_flight > STEADY_SHARE * b["offered_rps"] * b["window_s"]:
            # most of the window's requests were still in flight at its end: it is shorter than they are
            return (f"{SHORT_WINDOW}: {rates}; {queue}; most requests outlast the window, so a "
                    f"longer one (workload.duration_s, num_requests) makes the verdict surer")
        return f"keeps up: {rates}; {queue}"
    why = [f"the queue grew by {_rps(b['queue_growth_rps'])} req/s"] if b["queued_at_end"] > b["queued_at_mid"] else []
    if b["unfinished"]:
        why.append(f"{b['unfinished']:,} requests never finished")
    if b["stranded"]:
        n = b["stranded"]
        why.append(f"{n:,} request{' was' if n == 1 else 's were'} preempted and could never be readmitted (the "
                   f"server would have held {'it' if n == 1 else 'them'} forever)")
    if b.get("over_budget"):
        n = b["over_budget"]
        why.append(f"{n:,} request{'' if n == 1 else 's'} ({100 * b['over_budget_fraction']:.1f} %) answered with an "
                   "error: a prompt longer than the token budget its stack takes without chunked prefill "
                   "(engine.chunked_prefill: true, or a larger max_num_batched_tokens, serves "
                   f"{'it' if n == 1 else 'them'})")
    if b["never_fit"]:
        n = b["never_fit"]
        why.append(f"{n:,} request{'' if n == 1 else 's'} ({100 * b['never_fit_fraction']:.1f} %) could never fit a "
                   "replica's KV pool (larger or more GPUs a replica, an fp8 KV cache or a larger KV share would "
                   f"hold {'it' if n == 1 else 'them'}; more replicas would not)")
    if b["shed_fraction"] > SHED_FRACTION:
        why.append(f"it shed {100 * b['shed_fraction']:.1f} % of the requests")
    tail = f"; the backlog took {b['drain_s']:,.0f} s to drain" if b["drain_s"] else ""
    return f"OVERLOADED: {'; '.join(why)}; {rates}; {queue}{tail}"


def unserved_text(b: Mapping[str, Any]) -> str:
    """The requests that ended without an answer, each with its cause and share: what makes "completed
    130 of 438 req/s" read as a fleet that keeps up (clients cancelling) rather than one falling behind."""
    # a window no request reached has none of these counts ("no requests"): nothing went unanswered
    return ", ".join(f"{b[key]:,} requests ({100 * b[key + '_fraction']:.1f} %) {what}" for key, what in _UNSERVED
                     if b.get(key))


#: The causes of an unanswered request, by their count's key in the load block.
_UNSERVED = (("shed", "shed by the fleet"), ("too_long", "longer than the server takes (max_model_len)"),
             ("never_fit", "never fitting a replica's KV pool"), ("rate_limited", "rate-limited (429) by the gateway"),
             ("cancelled", "cancelled by their clients"))
