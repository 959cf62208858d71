"""Drivers: how each kind of workload meets the simulation clock.

The runner sees one protocol, :class:`Source`, whatever the traffic: it
calls ``start`` once with the fleet's ``submit`` and ``cancel``, and calls
``on_done`` whenever a request ends. A source decides what to send and
when; the fleet decides what happens to it.

Events are cheap on purpose: a driver keeps at most one pending SimPy event
per open-loop stream and per live session (never one per future request),
scheduled as URGENT callbacks rather than generator processes. An arrival
delivered as an URGENT event at time t is seen after the replica has planned
the iteration starting at t: it joins at the next iteration boundary, like a
real client whose request crossed the network.

Request ids are given in creation order (open-loop and trace requests are
all created up front in arrival order; closed-loop and session requests
when they are sent), and ``requests`` lists them by id.
"""
from __future__ import annotations

from bisect import bisect_left
from pathlib import Path
from typing import Callable, Iterable, Optional, Protocol, TypeVar, Union

import numpy as np
import simpy
from simpy.events import URGENT

from simulator.engine.wake import AtTimes, call_later

from .agentic import AgenticPlan, AgenticPlanner, AgenticSessionSpec, SubagentPlan
from .autocomplete import AutocompletePlan, draw_autocomplete_plans
from .block_ids import SESSION, SUBAGENT, Document, id_base
from .chat import ChatPlan, ChatSessionSpec, draw_chat_plans
from .plans import Plans
from .request import Request, Status
from .spec import LoneRows, Streams, WorkloadSpec, spawn_streams
from .system_prompts import Apps
from .traces import TraceSpec, read_trace

__all__ = ["Source", "OpenLoop", "ClosedLoop", "ChatSessions", "AutocompleteSessions", "AgenticSessions",
           "make_source"]

Submit = Callable[[Request], None]


class Subset(Protocol):
    """A shard's part of the workload: masks over session ids and lone
    request ids, and its lone requests' draws when they were made for it
    (``rows``, None: draw the fleet's and keep those ``requests`` masks)."""

    rows: Optional[LoneRows]

    def sessions(self, sids: np.ndarray) -> np.ndarray: ...

    def requests(self, ids: np.ndarray) -> np.ndarray: ...


T = TypeVar("T")


class Source(Protocol):
    """What the runner drives: a workload turned into requests on the simulation clock."""

    requests: list[Request]        # every request created so far, ids 0.. in creation order (final after the run)
    expected_total: Optional[int]  # for a progress bar; None if unknown
    block_tokens: Optional[int]    # tokens per id in Request.blocks, None when no request has ids

    def start(self, env: simpy.Environment, submit: Submit, cancel: Submit) -> None:
        """Schedule the first arrivals; called once, before the simulation runs."""

    def on_done(self, req: Request) -> None:
        """The fleet calls this when ``req`` ends, whatever its status (finished, rejected, cancelled,
        rate-limited or stranded): where a closed loop or a session sends its next request."""


def sent_before_window(requests: list[Request]) -> int:
    """How many of ``requests`` a warm start's lead-in sent (``workload.lead_in_s``: before t = 0): served,
    not counted. Ids follow sending order, so they are the first ones, as a closed loop's warm-up is."""
    return bisect_left(requests, 0.0, key=lambda r: r.arrival)


def fire(env: simpy.Environment, delay: float, callback) -> None:
    """Run ``callback`` after ``delay`` as a client event (URGENT, like arrivals):
    no timeout object, and it precedes an iteration boundary at the same time."""
    call_later(env, delay, URGENT, callback)


def _at_times(env: simpy.Environment, items: Iterable[T], when: Callable[[T], float],
              act: Callable[[T], None]) -> None:
    """``act(item)`` at time ``when(item)`` for items in time order, keeping
    one event pending (compiled with the engine: once per arrival)."""
    AtTimes(env, items, when, act, URGENT).start()


class OpenLoop:
    """Requests fixed in advance (poisson, gamma, a trace): each submitted at its arrival time.

    With ``attach``, the requests come without block ids and ``attach(i,
    request)`` gives request i its ids when it arrives (the runner drops
    them when it ends). Ids are most of a request's memory (a 3K-token
    prompt has ~190, ~1.5 KB of tuple; its own ids past the first are shared
    placeholders, :func:`workloads.block_ids.own_ids`), and only the requests in
    flight need them: a 13-node 10M-DAU shard's hour holds ~280,000
    requests, of which a few thousand are in flight at any time.
    """

    def __init__(self, requests: list[Request], block_tokens: Optional[int] = None,
                 attach: Optional[Callable[[int, Request], None]] = None, window_s: Optional[float] = None):
        self.requests = requests
        self.expected_total: Optional[int] = len(requests)
        self.block_tokens = block_tokens
        self.attach = attach
        # the time the traffic was offered over where neither the workload's duration nor the requests
        # tell it: a trace's replay window, which its quiet stretches run past its last arrival
        self.window_s = window_s

    def start(self, env: simpy.Environment, submit: Submit, cancel: Submit) -> None:
        reqs, attach = self.requests, self.attach
        if attach is None:
            _at_times(env, reqs, lambda r: r.arrival, submit)
            return

        def arrive(i: int) -> None:
            attach(i, reqs[i])
            submit(reqs[i])
        _at_times(env, range(len(reqs)), lambda i: reqs[i].arrival, arrive)

    @property
    def warmup(self) -> int:
        return sent_before_window(self.requests)

    def on_done(self, req: Request) -> None:
        pass


class ClosedLoop:
    """``concurrency`` users, each sending its next request when the last ends.

    A follow-up is created at the finish time and delivered as an URGENT
    event with delay 0, i.e. after the replica has planned the iteration
    starting then: it joins at the next iteration boundary, like a real
    client whose reply crossed the network.
    """

    def __init__(self, concurrency: int, total: int, make: Callable[[int, float], Request],
                 block_tokens: Optional[int] = None, ramp_up_s: float = 0.0, warmup: int = 0,
                 turnaround: Optional[list[float]] = None, drain: bool = False):
        """``make(i, now)`` builds request i sent at ``now``; client j starts
        at ``j · ramp_up_s / concurrency``; the first ``warmup`` of the
        ``total`` requests are a benchmark's warm-up (:attr:`warmup`);
        ``turnaround[i]`` is how long after request i ends its client sends
        the next one. With ``drain`` the warm-up is a phase of its own: its
        clients idle once all warm-up requests are sent, and when the last
        one ends the counted requests start as one burst, so the counted
        phase begins from an empty server, in phase, as AIPerf runs it."""
        self.concurrency = concurrency
        self.total = total
        self.make = make
        self.requests: list[Request] = []
        self.expected_total: Optional[int] = total
        self.block_tokens = block_tokens
        self.ramp_up_s = ramp_up_s
        self.warmup = warmup
        self.turnaround = turnaround
        # Requests the current phase may send: the warm-up alone while it drains.
        self._phase_end = warmup if drain and warmup > 0 else total
        self._finished = 0

    def start(self, env: simpy.Environment, submit: Submit, cancel: Submit) -> None:
        self.env = env
        self.submit = submit
        n = min(self.concurrency, self._phase_end)
        if self.ramp_up_s <= 0:
            for _ in range(n):
                self._issue()
            return
        for j in range(n):
            fire(env, j * self.ramp_up_s / self.concurrency, lambda ev: self._issue())

    def _issue(self) -> None:
        if len(self.requests) >= self._phase_end:   # a ramp's late client when early ones sent the rest
            return
        req = self.make(len(self.requests), self.env.now)
        self.requests.append(req)
        fire(self.env, 0.0, lambda ev: self.submit(req))

    def on_done(self, req: Request) -> None:
        self._finished += 1
        if self._finished == self._phase_end < self.total:     # the warm-up has drained
            self._phase_end = self.total
            for _ in range(min(self.concurrency, self.total - len(self.requests))):
                self._issue()
            return
        if len(self.requests) < self._phase_end:
            if self.turnaround is None:
                self._issue()
            else:
                fire(self.env, self.turnaround[req.id], lambda ev: self._issue())


class _Sessions:
    """Session starts on the arrival process's clock; what a session does is its subclass's."""

    def __init__(self, starts: np.ndarray, block_tokens: int, apps: Optional[Apps]):
        self.requests: list[Request] = []
        self.expected_total: Optional[int] = None  # sessions end early when a request fails
        self.block_tokens: Optional[int] = block_tokens
        self.starts: list[float] = starts.tolist()
        self.sids: Iterable[int] = range(len(self.starts))   # the sessions to run (a shard's subset)
        self.apps = apps
        self.live: dict = {}  # session id -> its state, while it may still send or has a request out

    def start(self, env: simpy.Environment, submit: Submit, cancel: Submit) -> None:
        self.env = env
        self.submit = submit
        self.cancel = cancel
        _at_times(env, self.sids, self.starts.__getitem__, self._begin)

    @property
    def warmup(self) -> int:
        return sent_before_window(self.requests)

    def _document(self, sid: int, app: int) -> tuple[Document, int]:
        """The session's token stream, starting with its app's system prompt; and that prompt's length."""
        if app < 0:
            return Document(id_base(SESSION, sid), self.block_tokens), 0
        return Document(id_base(SESSION, sid), self.block_tokens, self.apps.block_ids[app]), self.apps.tokens[app]

    def _send(self, sid: int, prompt: int, output: int, blocks: tuple[int, ...]) -> Request:
        req = Request(len(self.requests), self.env.now, prompt, output, session=sid, blocks=blocks)
        self.requests.append(req)
        return req

    def _begin(self, sid: int) -> None:
        raise NotImplementedError


class _Chat:
    __slots__ = ("sid", "plan", "doc", "turn", "context")

    def __init__(self, sid: int, plan: ChatPlan, doc: Document, context: int):
        self.sid, self.plan, self.doc, self.turn, self.context = sid, plan, doc, 0, context


class ChatSessions(_Sessions):
    """Multi-turn chats (:mod:`workloads.chat`): each turn sent a think time after the
    previous response finished; a rejected or cancelled turn ends the session."""

    def __init__(self, spec: ChatSessionSpec, plans: Plans[ChatPlan], starts: np.ndarray, block_tokens: int,
                 apps: Optional[Apps]):
        super().__init__(starts, block_tokens, apps)
        self.max_context = spec.max_context_tokens
        self.plans = plans

    def _begin(self, sid: int) -> None:
        plan = self.plans(sid)
        doc, head = self._document(sid, plan.app)
        chat = _Chat(sid, plan, doc, head)
        self.live[sid] = chat
        self._turn(chat)

    def _turn(self, chat: _Chat) -> None:
        k = chat.turn
        prompt = chat.context + chat.plan.messages[k]
        output = chat.plan.responses[k]
        if k and self.max_context is not None and prompt + output > self.max_context:
            del self.live[chat.sid]
            return
        chat.context = prompt + output
        cut = None if self.apps is None else self.apps.changes_at(chat.plan.app)
        if k and cut is not None:
            chat.doc.edit(cut)   # this turn's dynamic content differs from the last one's
        req = self._send(chat.sid, prompt, output, chat.doc.blocks(chat.context // self.block_tokens))
        self.submit(req)

    def on_done(self, req: Request) -> None:
        chat = self.live.get(req.session)
        if chat is None:
            return
        chat.turn += 1
        if req.status != Status.FINISHED or chat.turn >= len(chat.plan.messages):
            del self.live[chat.sid]
            return
        fire(self.env, chat.plan.thinks[chat.turn - 1], lambda ev: self._turn(chat))


class _Editing:
    __slots__ = ("sid", "plan", "doc", "head", "t0", "next", "inflight")

    def __init__(self, sid: int, plan: AutocompletePlan, doc: Document, head: int, t0: float):
        self.sid, self.plan, self.doc, self.head, self.t0 = sid, plan, doc, head, t0
        self.next = 0
        self.inflight: Optional[Request] = None


class AutocompleteSessions(_Sessions):
    """Editing sessions (:mod:`workloads.autocomplete`): a request at each typing pause,
    cancelling the session's previous one if it is still in flight. A rejected
    request does not end the session: the developer keeps typing."""

    def __init__(self, plans: Plans[AutocompletePlan], starts: np.ndarray, block_tokens: int,
                 apps: Optional[Apps], cancel_stale: bool = True):
        super().__init__(starts, block_tokens, apps)
        self.plans = plans
        self.cancel_stale = cancel_stale

    def _begin(self, sid: int) -> None:
        plan = self.plans(sid)  # never empty: every burst has a keystroke, the last one fires
        doc, head = self._document(sid, plan.app)
        ed = _Editing(sid, plan, doc, head, self.env.now)
        self.live[sid] = ed
        self._schedule(ed)

    def _schedule(self, ed: _Editing) -> None:
        fire(self.env, max(ed.t0 + ed.plan.times[ed.next] - self.env.now, 0.0), lambda ev: self._request(ed))

    def _request(self, ed: _Editing) -> None:
        stale = ed.inflight
        if stale is not None:
            ed.inflight = None
            if self.cancel_stale:
                self.cancel(stale)
        i = ed.next
        ed.next += 1
        plan, B = ed.plan, self.block_tokens
        prompt = ed.head + plan.cursors[i]
        output = plan.outputs[i]
        edit = ed.head + plan.edits[i]
        cut = None if self.apps is None else self.apps.changes_at(plan.app)
        if cut is not None:
            edit = min(edit, cut)   # the system prompt itself changed per request
        ed.doc.edit(edit)
        blocks = ed.doc.blocks(prompt // B) + tuple(ed.doc.fresh((prompt + output) // B - prompt // B))
        req = self._send(ed.sid, prompt, output, blocks)
        ed.inflight = req
        if ed.next < len(plan.times):
            self._schedule(ed)
        self.submit(req)

    def on_done(self, req: Request) -> None:
        ed = self.live.get(req.session)
        if ed is None:
            return
        if ed.inflight is req:
            ed.inflight = None
        if ed.inflight is None and ed.next >= len(ed.plan.times):
            del self.live[ed.sid]


class _Agent:
    """A main agent or one of its sub-agents: the calls it has left, and what it waits for."""

    __slots__ = ("sid", "app", "doc", "head", "context", "turn", "outputs", "tools", "pauses", "parent",
                 "children", "waiting")

    def __init__(self, sid: int, app: int, doc: Document, head: int, context: int, outputs: list[int],
                 tools: list[int], pauses: list[float], parent: Optional["_Agent"],
                 children: Optional[list[list[SubagentPlan]]]):
        self.sid, self.app, self.doc, self.head, self.context = sid, app, doc, head, context
        self.outputs, self.tools, self.pauses = outputs, tools, pauses
        self.parent, self.children = parent, children
        self.turn = 0
        self.waiting = 0   # sub-agents still running (a main agent's)


class AgenticSessions(_Sessions):
    """Agent loops (:mod:`workloads.agentic`): each call sent a pause after the previous one
    ended, with that call's output and a tool result added to the context; a call may
    spawn sub-agents that share the parent's prefix, and the parent waits for them."""

    def __init__(self, spec: AgenticSessionSpec, plans: Plans[AgenticPlan], starts: np.ndarray, block_tokens: int,
                 apps: Optional[Apps]):
        super().__init__(starts, block_tokens, apps)
        self.max_context = spec.max_context_tokens
        self.fork = spec.subagents is None or spec.subagents.shares == "context"
        self.plans = plans
        self.calls: dict[int, _Agent] = {}   # request id -> the agent that sent it, while in flight

    def _begin(self, sid: int) -> None:
        plan = self.plans(sid)
        doc, head = self._document(sid, plan.app)
        main = _Agent(sid, plan.app, doc, head, head + plan.task, plan.outputs, plan.tools, plan.pauses, None,
                      plan.children)
        self.live[sid] = main
        self._call(main)

    def _call(self, a: _Agent) -> None:
        prompt, output = a.context, a.outputs[a.turn]
        if self.max_context is not None and prompt + output > self.max_context and (a.turn or a.parent):
            self._end(a)
            return
        a.context = prompt + output
        cut = self._changes_at(a.app)
        if a.turn and cut is not None:
            a.doc.edit(cut)   # this call's system prompt differs from the last one's
        req = self._send(a.sid, prompt, output, a.doc.blocks(a.context // self.block_tokens))
        self.calls[req.id] = a
        self.submit(req)

    def on_done(self, req: Request) -> None:
        a = self.calls.pop(req.id, None)
        if a is None:
            return
        k = a.turn
        a.turn += 1
        if req.status != Status.FINISHED or a.turn >= len(a.outputs):
            self._end(a)
            return
        fork = a.context
        a.context += a.tools[k]
        kids = a.children[k] if a.children is not None else ()
        if kids:
            a.waiting = len(kids)
            fire(self.env, a.pauses[k], lambda ev: self._spawn(a, kids, fork))
        else:
            fire(self.env, a.pauses[k], lambda ev: self._call(a))

    def _spawn(self, parent: _Agent, kids: list[SubagentPlan], fork: int) -> None:
        """Start ``kids``, each on the parent's first ``fork`` tokens (or its system prompt alone)."""
        shared = fork if self.fork else parent.head
        cut = self._changes_at(parent.app)
        head = parent.doc.blocks((shared if cut is None else min(shared, cut)) // self.block_tokens)
        for c in kids:
            doc = Document(id_base(SUBAGENT, c.owner), self.block_tokens, head)
            self._call(_Agent(parent.sid, parent.app, doc, shared, shared + c.task, c.outputs, c.tools, c.pauses,
                              parent, None))

    def _changes_at(self, app: int) -> Optional[int]:
        """Where each request of ``app`` starts to differ from the last (per-request dynamic system-prompt
        content), else None."""
        return None if self.apps is None else self.apps.changes_at(app)

    def _end(self, a: _Agent) -> None:
        p = a.parent
        if p is None:
            del self.live[a.sid]
            return
        p.waiting -= 1
        if p.waiting == 0:   # the last report is in: the parent's next call goes out with them
            fire(self.env, 0.0, lambda ev: self._call(p))


def make_source(workload: WorkloadSpec, seed: Union[int, np.random.SeedSequence, np.random.Generator],
                base_dir: Optional[Union[str, Path]] = None, subset: Optional[Subset] = None) -> Source:
    """The driver for ``workload``; ``base_dir`` (the scenario's folder) resolves a relative trace path.
    ``subset`` keeps a shard's sessions and lone requests (all are drawn, so
    each keeps the values it has in the whole workload; not for a closed loop).

    Same seed, same requests: open-loop requests equal ``workload.generate(seed)``
    and closed-loop lengths ``workload.lengths(seed, n)``.
    """
    s = spawn_streams(seed)
    if isinstance(workload.arrival, TraceSpec):
        return _trace_source(workload, s, base_dir, subset)
    B = workload.id_block_tokens(base_dir)
    session = workload.session
    if session is None:
        if workload.closed_loop:
            return _closed_loop(workload, s, B)
        reqs, attach = workload._bare(s, subset and subset.requests, subset and subset.rows)
        return OpenLoop(reqs, B, attach)
    apps = workload.draw_apps(s)
    starts = workload._times(s)
    if isinstance(session, ChatSessionSpec):
        inp, out = workload.input_tokens, workload.output_tokens
        src: _Sessions = ChatSessions(session, Plans(lambda n: draw_chat_plans(session, inp, out, s, apps, n)),
                                      starts, B, apps)
    elif isinstance(session, AgenticSessionSpec):
        planner = AgenticPlanner(session, workload.input_tokens, workload.output_tokens, s, apps)
        src = AgenticSessions(session, Plans(planner), starts, B, apps)
    else:
        plans = Plans(lambda n: draw_autocomplete_plans(session, workload.output_tokens, s, apps, n))
        src = AutocompleteSessions(plans, starts, B, apps, session.cancel_stale)
    if subset is not None:
        src.sids = np.flatnonzero(subset.sessions(np.arange(len(starts)))).tolist()
    return src


def _closed_loop(workload: WorkloadSpec, s: Streams, block_tokens: Optional[int]) -> ClosedLoop:
    arrival = workload.arrival
    n = workload.closed_loop_total
    inp, out = workload._lengths(s, n)
    apps = workload.draw_apps(s)
    if apps is None:
        def make(i: int, now: float) -> Request:
            return Request(i, now, int(inp[i]), int(out[i]))
    else:
        chosen = apps.choose(n).tolist()

        def make(i: int, now: float) -> Request:
            return apps.request(i, now, int(inp[i]), int(out[i]), chosen[i])
    turnaround = None
    if arrival.turnaround_ms > 0:
        turnaround = s.think.exponential(arrival.turnaround_ms * 1e-3, n).tolist()
    return ClosedLoop(arrival.concurrency, n, make, block_tokens, arrival.ramp_up_s, arrival.warmup_requests,
                      turnaround, arrival.warmup_drain)


def _trace_source(workload: WorkloadSpec, s: Streams, base_dir, subset: Optional[Subset] = None) -> OpenLoop:
    """A trace replayed open loop, cut short by ``duration_s`` and ``num_requests`` when given."""
    trace = read_trace(workload.arrival, base_dir, s.arrivals)
    requests, window = trace.requests, trace.window_s
    if workload.duration_s is not None:
        requests = [r for r in requests if r.arrival < workload.duration_s]
        window = min(window, workload.duration_s)
    if workload.num_requests is not None and len(requests) > workload.num_requests:
        requests = requests[: workload.num_requests]
        window = requests[-1].arrival
    if subset is not None and requests:
        sid = np.fromiter((r.session for r in requests), dtype=np.int64, count=len(requests))
        rid = np.fromiter((r.id for r in requests), dtype=np.int64, count=len(requests))
        keep = np.where(sid >= 0, subset.sessions(np.maximum(sid, 0)), subset.requests(rid))
        requests = [r for r, k in zip(requests, keep.tolist()) if k]
    return OpenLoop(requests, trace.block_size, window_s=window)
