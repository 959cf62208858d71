"""Whether a pool serves its request classes by priority as its stack would be launched.

A replica's waiting queue (:mod:`simulator.engine.wait_queue`) serves the
larger ``classes[].priority`` first and preempts the lowest first. Every
stack llmsim models serves first come, first served unless launched
otherwise, so classes of different priorities sharing a pool whose
``engine.priority_scheduling`` is false are refused, not served first come,
first served: a scenario that gives its classes different priorities means
them to be served so, and serving it otherwise would drop what it asked for
without a word. With one priority per pool the queue is first come, first
served whatever the key says.

Each stack's own order, onto which llmsim's "larger first" maps:

* vLLM V1 (``--scheduling-policy priority``; 0.11.0 to 0.34.0,
  ``v1/core/sched/request_queue.py`` PriorityRequestQueue) serves the
  *smaller* request priority first, the earlier arrival among equals, and
  preempts ``max(running, key=(priority, arrival_time))``
  (``v1/core/sched/scheduler.py`` Scheduler.schedule): a class of priority
  p is a request sent with priority −p.
* SGLang (``--enable-priority-scheduling``; 0.5.4 to 0.5.23) serves the
  larger value first, as llmsim does, unless
  ``--schedule-low-priority-values-first`` (then send −p), sorting its
  queue by (priority, entry time) (``schedule_policy.py``
  _sort_by_priority_and_fcfs). It also preempts running requests for a
  waiting one more than ``--priority-scheduling-preemption-threshold``
  (10) above them (PrefillAdder.preempt_to_schedule), which llmsim does not
  model: a pool whose classes' priorities differ by more is refused (only
  their order counts here, so priorities within 10 say the same). To try
  that preemption it clears its batch_is_full at every plan (scheduler.py
  get_new_batch_prefill: ``try_preemption`` in 0.5.4 and 0.5.9,
  ``enable_priority_preemption`` in 0.5.14-0.5.23), so a request that failed
  the KV test is tried again at the next plan: ``full_until_leave: true``
  (the sglang backend's, a full batch held until a request leaves) is
  refused beside it, as is the launch that keeps it
  (``--disable-priority-preemption``, read from 0.5.14), not modelled.
* A ``backend_version`` before the oldest release read here (vLLM 0.11.0,
  SGLang 0.5.4) is refused with the key set: what it did is not known.
* TensorRT-LLM's PyTorch backend queues first come, first served
  (FCFSWaitingQueue ignores a request's priority); its priority queue is
  not modelled, so priority scheduling there is refused.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..errors import LlmsimError
from ..fleet.classes import DEFAULT, ClassSpec
from ..profiles.backend import load_backend
from .schema import Scenario


@dataclass(frozen=True)
class StackPriorities:
    """How a stack is launched to serve by priority, and what of it llmsim leaves out."""

    flag: str                           # the launch flag that turns priority scheduling on
    send: str                           # the request priority a class of priority p is sent with
    preemption_threshold: Optional[int]  # a waiting request more than this above a running one preempts it
    since: str                          # the oldest release whose priority scheduling was read
    clears_full: bool = False           # a full batch (EngineConfig.full_until_leave) is cleared at every plan


STACKS = {
    "vllm": StackPriorities("--scheduling-policy priority", "−p (vLLM serves the smaller value first)", None, "0.11.0"),
    "sglang": StackPriorities("--enable-priority-scheduling", "p (without --schedule-low-priority-values-first)", 10,
                              "0.5.4", clears_full=True),
}

#: Why a stack's priority scheduling is not modelled.
UNMODELLED = {
    "trtllm": "TensorRT-LLM's PyTorch backend queues first come, first served (scheduler_config."
              "waiting_queue_policy fcfs) and llmsim does not model its priority waiting queue",
}


def _reaching(sc: Scenario, pool: str, routes: dict[str, str], decodes_on: dict[str, str]
              ) -> list[tuple[int, ClassSpec]]:
    """The classes (with their index) whose requests ``pool`` queues: routed to it (``routes``,
    :func:`.compile.class_routes`), by prompt length to it among other pools, or to a pool it
    decodes for."""
    classes = sc.classes or [DEFAULT]
    out = []
    for j, c in enumerate(classes):
        entered = ([st.pool for st in c.pool_by_input_length] if c.pool_by_input_length
                   else [routes[c.name]])
        if pool in entered or pool in (decodes_on.get(p) for p in entered):
            out.append((j, c))
    return out


def _serves_by_priority(value: bool, stack: Optional[str], written: bool) -> bool:
    """The key's value, where the pool or its backend profile wrote it; a backend profile written
    before the key existed (a copy ``llmsim validate --fit`` made of a built-in) runs its stack's
    default launch, first come, first served, not the generic engine's true."""
    return value if written or stack is None else False


def check_priority_scheduling(sc: Scenario, routes: dict[str, str], decodes_on: dict[str, str],
                              source: str | Path | None) -> None:
    """Refuse a pool whose classes' priorities its engine would not serve as the scenario says
    (``routes``: each class's pool, :func:`.compile.class_routes`)."""
    for i, p in enumerate(sc.pools):
        e = p.engine
        stack = load_backend(e.backend).stack if e.backend is not None else None
        key = f"pools[{i}].engine.priority_scheduling"
        on = _serves_by_priority(e.priority_scheduling, stack, "priority_scheduling" in e.model_fields_set)
        if on and stack is not None and stack not in STACKS:
            why = UNMODELLED.get(stack, f"llmsim does not model {stack}'s priority scheduling")
            raise LlmsimError(f"pool {p.name!r}: {why}; set priority_scheduling: false and give the classes "
                              "sharing the pool one priority", source=source, key_path=key)
        s = STACKS.get(stack or "")
        if on and s and e.backend_version is not None and load_backend(e.backend or "").came_before(
                e.backend_version, s.since):
            raise LlmsimError(f"pool {p.name!r}: llmsim follows {stack}'s priority scheduling ({s.flag}) as "
                              f"releases from {s.since} run it, and backend_version {e.backend_version} is older; "
                              "set priority_scheduling: false (and one priority for the pool's classes), or a "
                              f"backend_version from {s.since}", source=source, key_path=key)
        if on and s and s.clears_full and e.full_until_leave and e.expects_output:
            raise LlmsimError(f"pool {p.name!r}: {stack} launched with {s.flag} clears batch_is_full at every "
                              "plan to try preempting for the head of its queue, so a request that failed the KV "
                              "test is tried again at the next plan (full_until_leave: true, which the backend "
                              "sets, holds the rank full until a request leaves: --disable-priority-preemption, "
                              "not modelled); set full_until_leave: false",
                              source=source, key_path=f"pools[{i}].engine.full_until_leave")
        classes = _reaching(sc, p.name, routes, decodes_on)
        low = min(classes, key=lambda jc: jc[1].priority)
        high = max(classes, key=lambda jc: jc[1].priority)
        spread = high[1].priority - low[1].priority
        if spread == 0:
            continue
        pair = (f"classes {low[1].name!r} (priority {low[1].priority}) and {high[1].name!r} "
                f"(priority {high[1].priority}) share pool {p.name!r}")
        if not on:
            launch = (f"{stack} serves first come, first served unless launched with {s.flag}" if s
                      else UNMODELLED.get(stack or "", "its engine serves first come, first served"))
            how = ("set priority_scheduling: true to model that launch, or " if s or stack is None
                   else "")
            raise LlmsimError(f"{pair}, but {launch}: {how}give the pool's classes one priority",
                              source=source, key_path=key)
        t = s.preemption_threshold if s else None
        if s and t is not None and spread > t:
            raise LlmsimError(f"{pair}, {spread} apart: {stack} launched with {s.flag} preempts "
                              f"running requests for a waiting one more than {t} above them "
                              "(--priority-scheduling-preemption-threshold), which llmsim does not model; only "
                              f"the order of priorities counts here, so give them priorities within {t} of each "
                              "other", source=source, key_path=f"classes[{high[0]}].priority")
