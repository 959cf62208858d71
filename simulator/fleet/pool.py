"""A pool of identical replicas behind a router, with a replica lifecycle.

A replica is *starting* (paid for, loading weights, serving nothing),
*ready* (routed to), *draining* (finishing what it holds, routed nothing
new), *warm* (a paid standby that is ready within seconds), *warming* (a
paid standby still loading, which will join the warm pool, not serve) or
*stopped*. Only starting replicas count toward the capacity an autoscaler
has committed: a warming standby replaces one taken from the warm pool
and serves nothing when it is up, so counting it would hold back a scale-up
and a scale-in could cancel it instead of a replica meant to serve.
The pool keeps a log of how many replicas it pays for over time, which the
bill (:mod:`simulator.metrics.cost`) integrates; an autoscaler
(:mod:`simulator.fleet.autoscaler`) moves replicas between the states.

Workload drivers (through the front end) call ``submit`` and ``cancel``;
replicas call back when a request ends.
"""
from __future__ import annotations

from enum import Enum
from typing import Callable, Optional

import simpy

from ..costmodel import CostModel
from ..dtypes import compute_dtype
from ..engine.blocks import kv_usage
from ..engine.config import EngineConfig
from ..engine.kv_tiers import OffloadPlan
from ..engine.lora import LoraPlan
from ..engine.reference import ReferenceReplica
from ..engine.replica import FastReplica
from ..hybrid_kv import SlidingGroups
from .routing import Router
from ..metrics.gaps import GapLog
from .ingest import FrontEnd
from .window import since_window
from workloads.rejection import Rejection
from workloads.request import Request, Status

ENGINES = {"fast": FastReplica, "reference": ReferenceReplica}


class State(str, Enum):
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"
    WARM = "warm"
    WARMING = "warming"
    STOPPED = "stopped"


BILLED = (State.STARTING, State.READY, State.DRAINING, State.WARM, State.WARMING)


class Admission:
    """Per-class admission control: reject a request on arrival when the
    replica it would join already has ``max_queue`` requests that would be
    served before it, or when their prompts would keep it waiting longer
    than ``max_wait_s`` at the replica's prefill rate. Those requests are
    every queued one of equal or higher priority: in the replica's waiting
    queue, held there for the next plan by async scheduling, or still in its
    front end. Because only requests of equal or higher priority count, and
    limits may not shrink as priority grows (checked with the scenario), a
    lower class is always shed at a load where a higher one is still admitted."""

    __slots__ = ("max_queue", "max_wait_s")

    def __init__(self, max_queue: Optional[int], max_wait_s: Optional[float]) -> None:
        self.max_queue = max_queue
        self.max_wait_s = max_wait_s

    def rejects(self, req: Request, replica, front_end: Optional[FrontEnd],
                prefill_tokens_per_s: float) -> Optional[Rejection]:
        """Which limit sheds ``req`` (None: it is admitted)."""
        p = req.priority
        if self.max_queue is not None:    # counted, not listed: this runs on every arrival
            entering = front_end.count_ahead(p) if front_end is not None else 0
            if replica.queued_count_ahead(p) + entering >= self.max_queue:
                return Rejection.QUEUE_FULL
        if self.max_wait_s is not None:
            entering_tokens = sum(r.input_tokens for r in front_end.ahead(p)) if front_end is not None else 0
            ahead = sum(s.prompt - s.done for s in replica.queued_ahead(p)) + entering_tokens
            if ahead / prefill_tokens_per_s > self.max_wait_s:
                return Rejection.WAIT_TOO_LONG
        return None


def _step(log: list[tuple[float, int]], now: float, n: int) -> None:
    """Append to a step-function log, merging same-time and no-change steps."""
    if log and log[-1][0] == now:
        log[-1] = (now, n)
        if len(log) > 1 and log[-2][1] == n:
            log.pop()
    elif not log or log[-1][1] != n:
        log.append((now, n))


class Pool:
    def __init__(self, env: simpy.Environment, cm: CostModel, cfg: EngineConfig, num_blocks: int, replicas: int,
                 router: Router, gaps: GapLog, engine: str = "fast",
                 on_done: Optional[Callable[[Request], None]] = None, max_model_len: int | None = None,
                 id_block_tokens: int | None = None, *, name: str = "main",
                 kv_budgets: Optional[dict[str, int]] = None,
                 admission: Optional[dict[str, Admission]] = None, warm: int = 0,
                 offload: Optional[OffloadPlan] = None, lora: Optional[LoraPlan] = None,
                 adapters: Optional[Callable[[Request], None]] = None, rank_tokens: Optional[int] = None,
                 windows: Optional[SlidingGroups] = None, rank_blocks: Optional[int] = None, dp: int = 1) -> None:
        self.env = env
        self.name = name
        self.router = router
        self.cm = cm
        self.rank_tokens = rank_tokens
        self._make = lambda i: ENGINES[engine](env, i, cm, cfg, num_blocks, gaps, self._ended, max_model_len,
                                               id_block_tokens, kv_budgets, offload, lora, rank_tokens,
                                               windows, rank_blocks, dp)
        self.adapters = adapters     # gives a request its LoRA adapter (fleet/lora.py LoraPool.assign)
        self.on_done = on_done
        self.num_blocks = num_blocks
        self.admission = admission or {}
        self._prefill_rate: Optional[float] = None
        self.cfg = cfg
        self.replicas: list = []            # every replica ever created, by index
        self.state: list[State] = []
        self.ready: list = []               # routed to, in creation order
        self.billing: list[tuple[float, int]] = []   # (time, replicas paid for from then on)
        self.serving: list[tuple[float, int]] = []   # (time, ready replicas from then on)
        self.working: list[tuple[float, int]] = []   # (time, ready + draining: replicas that may iterate)
        self.t_rejected = 0.0
        self.window_start = env.now         # where the reported window opens (fleet/window.py: a warm start's 0)
        self.at_window: dict[int, dict] = {}   # replica index -> its stats there
        self.stopped_before_window = 0      # replicas a warm start's lead-in started and stopped
        self.arrivals = 0                   # requests submitted (for rate metrics)
        self.rejected = 0
        self.warm: list[int] = []
        self.on_ready: Optional[Callable[[], None]] = None
        self.front_ends: dict[int, FrontEnd] = {}   # replica index -> its serial front end (serving backends)
        self.holds_handoffs = False     # a disaggregated pair's prefill pool: prompts' KV kept for their hand-offs
        for _ in range(replicas):
            self._new(State.READY)
        for _ in range(warm):
            self.warm.append(self._new(State.WARM).index)
        self._bill()

    # --- lifecycle -----------------------------------------------------------
    def _new(self, state: State):
        r = self._make(len(self.replicas))
        r.holds_handoffs = self.holds_handoffs
        self.replicas.append(r)
        self.state.append(state)
        if state is State.READY:
            self.ready.append(r)
        return r

    def count(self, state: State) -> int:
        return sum(1 for s in self.state if s is state)

    @property
    def billed(self) -> int:
        return sum(1 for s in self.state if s in BILLED)

    def _bill(self) -> None:
        now = self.env.now
        _step(self.billing, now, self.billed)
        _step(self.serving, now, len(self.ready))
        _step(self.working, now, len(self.ready) + self.count(State.DRAINING))

    def start(self, delay: float, warm: bool = False) -> None:
        """Start a replica that serves after ``delay`` seconds (a cold start,
        or a warm standby's activation when ``warm``); it is paid from now."""
        if warm and self.warm:
            i = self.warm.pop()
            self.state[i] = State.STARTING
        else:
            i = self._new(State.STARTING).index
        self._bill()
        ev = self.env.timeout(delay)
        ev.callbacks.append(lambda _ev: self._become_ready(i))

    def start_warm(self, delay: float) -> None:
        """Refill the warm pool: a standby that is paid from now and usable
        after its cold start."""
        i = self._new(State.WARMING).index
        self._bill()
        ev = self.env.timeout(delay)
        ev.callbacks.append(lambda _ev: self._become_warm(i))

    def _become_warm(self, i: int) -> None:
        if self.state[i] is State.WARMING:
            self.state[i] = State.WARM
            self.warm.append(i)
            self._bill()

    def _become_ready(self, i: int) -> None:
        if self.state[i] is not State.STARTING:      # cancelled while starting
            return
        self.state[i] = State.READY
        self.ready.append(self.replicas[i])
        self._bill()
        if self.on_ready is not None:
            self.on_ready()

    def cancel_start(self) -> bool:
        """Stop the newest starting replica (a scale-in before it served)."""
        for i in range(len(self.state) - 1, -1, -1):
            if self.state[i] is State.STARTING:
                self.state[i] = State.STOPPED
                self._bill()
                return True
        return False

    def drain(self) -> None:
        """Take the ready replica with the least outstanding work out of
        routing; it stops (and stops being paid for) once it is empty, so
        scale-in never loses a request."""
        r = min(reversed(self.ready), key=lambda r: r.outstanding)
        self.ready.remove(r)
        self.state[r.index] = State.DRAINING
        self._stop_if_drained(r)
        self._bill()

    def hold_handoffs(self) -> None:
        """Make this a pair's prefill pool: each replica keeps a finished prompt's KV until
        :meth:`release_handoff` (the engine's ``holds_handoffs``)."""
        self.holds_handoffs = True
        for r in self.replicas:
            r.holds_handoffs = True

    def release_handoff(self, req: Request) -> None:
        """``req``'s KV left the replica that prefilled it (or is no longer wanted): its blocks go back,
        and a draining replica that only held them stops."""
        r = self.replicas[req.replica]
        r.release_handoff(req.id)
        self._stop_if_drained(r)

    def _stop_if_drained(self, r) -> None:
        if self.state[r.index] is State.DRAINING and r.outstanding == 0 and not r.handing:
            self.state[r.index] = State.STOPPED
            self._bill()

    # --- requests -------------------------------------------------------------
    def route(self, req: Request):
        """The ready replica the router sends ``req`` to (None: none is ready)."""
        return self.ready[self.router.choose(req, self.ready)] if self.ready else None

    def expect(self, replica, req: Request) -> None:
        """``req`` was sent to ``replica`` ahead of its arrival (a hand-off's KV on its way there):
        it counts in the replica's load from now, as one inside its front end does, or every hand-off
        of a burst would be routed to the replica that looked idlest before the first of them landed."""
        replica.outstanding += 1
        replica.outstanding_tokens += req.input_tokens

    def landed(self, replica, req: Request) -> None:
        """``req``, expected on ``replica``, arrived (or was cancelled on its way): :meth:`submit` counts it
        from here; a draining replica it alone kept busy stops."""
        replica.outstanding -= 1
        replica.outstanding_tokens -= req.input_tokens
        self._stop_if_drained(replica)

    def submit(self, req: Request, replica=None) -> None:
        """Take ``req`` in on ``replica`` when it was chosen beforehand (:meth:`route`) and still
        serves, else on the replica the router chooses now."""
        self.arrivals += 1
        if self.adapters is not None:
            self.adapters(req)
        r = replica if replica is not None and replica in self.ready else self.ready[self.router.choose(req, self.ready)]
        if replica is not None and r is not replica:
            replica.unplace(req)          # placed on a rank of it ahead (place_ahead), sent elsewhere
        adm = self.admission.get(req.klass)
        shed = None if adm is None else adm.rejects(req, r, self.front_ends.get(r.index), self.prefill_tokens_per_s())
        if shed is not None:
            r.unplace(req)
            # one the replica could never serve is recorded as such: no capacity would have served it
            self.reject(req, r.can_ever_serve(req) or shed)
            return
        if self.cfg.front_end_busy:
            fe = self.front_ends.get(r.index)
            if fe is None:
                fe = self.front_ends[r.index] = FrontEnd(self.env, r, self.cfg.request_ms,
                                                         self.cfg.tokenize_us_per_token)
            fe.enter(req, r.submit)
            return
        r.submit(req)

    def can_hold(self, req: Request) -> bool:
        """Whether a replica of this pool could serve ``req`` at all (its
        context and KV capacity, its class's KV cap), asked by a router choosing among pools."""
        return not self.replicas or self.replicas[0].can_ever_serve(req) is None

    def reject(self, req: Request, why: Rejection) -> None:
        """Shed ``req`` on arrival: it ends REJECTED, once, and is reported."""
        self.rejected += 1
        req.reject(why, self.env.now)
        self.t_rejected = self.env.now
        if self.on_done:
            self.on_done(req)

    def prefill_tokens_per_s(self) -> float:
        """A replica's prefill rate with a full token budget (for predicted waits)."""
        if self._prefill_rate is None:      # with attention DP, each rank a chunk of its own budget
            n = self.cfg.max_num_batched_tokens
            r = self.rank_tokens or n
            chunks = [(r, 0)] * max(1, n // r)
            self._prefill_rate = r * len(chunks) / self.cm.step_time(prefill_chunks=chunks)
        return self._prefill_rate

    def _ended(self, req: Request) -> None:
        self._stop_if_drained(self.replicas[req.replica])
        if self.on_done:
            self.on_done(req)

    def cancel(self, req: Request) -> None:
        if req.status is not Status.PENDING:
            return
        if req.replica >= 0:
            self.replicas[req.replica].cancel(req)
            return
        for fe in self.front_ends.values():     # still in a front end: it ends here
            if fe.holds(req):
                fe.drop(req)
                fe.replica.unplace(req)
                self._stop_if_drained(fe.replica)
                req.status = Status.CANCELLED
                req.finish = self.env.now
                if self.on_done:
                    self.on_done(req)
                return

    def replica_stats(self, replica, now: float) -> dict:
        """``replica.stats(now)`` over the reported window (all of the run but a warm start's lead-in)."""
        return since_window(replica.stats(now), self.at_window.get(replica.index), now, replica.t0,
                            self.window_start)

    def end_time(self) -> float:
        """When the last request ended: the end of the simulated span. The
        clock may have run past it on a fast-engine timer made stale by a cut."""
        return max(self.t_rejected, max(r.t_end for r in self.replicas))

    # --- state for autoscalers and the timeline --------------------------------
    def queue_depth(self) -> int:
        return sum(r.queued() for r in self.replicas if self.state[r.index] is not State.STOPPED)

    def kv_utilization(self) -> float:
        """Mean fraction of KV blocks in use over the ready replicas, now."""
        if not self.ready:
            return 0.0
        now = self.env.now
        return kv_usage(sum(r.kv_used_now(now) for r in self.ready), len(self.ready) * self.num_blocks)

    def busy_time(self) -> float:
        return sum(r.busy_time for r in self.replicas)

    def tokens_processed(self) -> int:
        return sum(r.tokens_processed for r in self.replicas)

    def flops_per_token(self) -> float:
        """Model FLOPs per token (2 × the parameters a token uses; all of a
        dense model's): the numerator of MFU."""
        return 2.0 * self.cm.model.active_params

    def peak_flops(self) -> float:
        """A replica's peak dense FLOP/s in its weight dtype (all tp × dp GPUs)."""
        return self.cm.gpu.peak_flops(compute_dtype(self.cfg.weight_dtype, self.cm.gpu.units)) * self.cm.gpus
