"""One replica's LoRA adapters: which the running batch uses, and where the rest are.

vLLM's rules (v1 scheduler, vllm/lora/worker_manager.py,
vllm/lora/model_manager.py):

* **The batch.** The scheduler admits a waiting request whose adapter the
  batch does not hold only while the batch holds fewer than ``max_loras``
  distinct adapters; otherwise it *skips* it (it keeps its place in the
  queue) and goes on to the next one. Both engines apply this in
  :meth:`ReplicaBase._admit_whole` / ``_admit_chunked``.
* **Residency.** The GPU has ``max_loras`` adapter slots and the workers
  keep ``max_cpu_loras`` adapters in (pinned) host memory, both least
  recently used first out; an adapter in a slot is in the host cache too.
  The iteration that first runs an adapter not in a slot waits for it:
  its copy over the host link, and before that its read from disk when
  the host cache has dropped it (``LoraPlan``). Adapters the batch uses
  are in use every iteration, so they are never the least recently used;
  among the others, recency is the iteration that last ran them (ties,
  adapters leaving in the same iteration, by adapter id, so both engines
  order them alike). LRU is a stack algorithm: the host cache holds the
  ``max_cpu_loras`` most recent adapters and the slots the ``max_loras``
  most recent, so one recency order answers both.

Not modelled: vLLM applies a batch's adapters one after the other, and
loading one can evict another the same batch needs, which is then loaded
again; here a batch's adapters are never evicted.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LoraPlan", "AdapterSlots"]


@dataclass(frozen=True)
class LoraPlan:
    """A pool's adapter caches and what filling them costs, per replica."""

    max_loras: int          # GPU slots, and distinct adapters a batch may hold
    max_cpu_loras: int      # adapters kept in host memory (≥ max_loras)
    host_load_s: float      # one adapter from host memory into a GPU slot
    disk_load_s: float      # one adapter read from storage into host memory


class AdapterSlots:
    """The running batch's adapters and the recency of the idle ones."""

    __slots__ = ("plan", "running", "idle", "hits", "host_loads", "disk_loads", "load_s")

    def __init__(self, plan: LoraPlan) -> None:
        self.plan = plan
        self.running: dict[int, int] = {}   # adapter -> running sequences using it
        self.idle: dict[int, int] = {}      # adapter (in host memory, not in the batch) -> iteration it last ran
        self.hits = 0                       # admissions whose adapter was in a GPU slot
        self.host_loads = 0                 # ... copied from host memory
        self.disk_loads = 0                 # ... read from storage first
        self.load_s = 0.0                   # seconds iterations waited for loads

    @property
    def distinct(self) -> int:
        """Distinct adapters of the running batch (what the LoRA kernels read)."""
        return len(self.running)

    def blocked(self, adapter: int) -> bool:
        """Whether admitting a request of ``adapter`` would exceed ``max_loras``."""
        return adapter not in self.running and len(self.running) >= self.plan.max_loras

    def enter(self, adapter: int) -> float:
        """A sequence of ``adapter`` joins the batch: the seconds its load adds."""
        n = self.running.get(adapter)
        if n is not None:
            self.running[adapter] = n + 1
            self.hits += 1
            return 0.0
        plan = self.plan
        depth = len(self.running)    # the batch's adapters are the most recently used
        last = self.idle.pop(adapter, None)
        if last is not None:
            depth += sum(1 for a, t in self.idle.items() if (t, a) > (last, adapter))
        if last is not None and depth < plan.max_loras:
            cost = 0.0
            self.hits += 1
        elif last is not None and depth < plan.max_cpu_loras:
            cost = plan.host_load_s
            self.host_loads += 1
        else:
            cost = plan.disk_load_s + plan.host_load_s
            self.disk_loads += 1
        self.running[adapter] = 1
        # The host cache keeps the max_cpu_loras most recent: drop what fell out.
        while self.idle and len(self.idle) + len(self.running) > plan.max_cpu_loras:
            del self.idle[min(self.idle, key=lambda a: (self.idle[a], a))]
        self.load_s += cost
        return cost

    def leave(self, adapter: int, iteration: int) -> None:
        """A sequence of ``adapter`` left the batch after iteration ``iteration``."""
        n = self.running[adapter] - 1
        if n:
            self.running[adapter] = n
        else:
            del self.running[adapter]
            self.idle[adapter] = iteration

    def stats(self) -> dict:
        return {"hits": self.hits, "host_loads": self.host_loads, "disk_loads": self.disk_loads,
                "load_s": self.load_s}
