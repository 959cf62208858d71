"""The fast engine: O(log n) per request event, not per token.

Between events a decoding batch is fixed, so iteration k of a decode-only
stretch takes ``a + b·(C + B·(G0 + k))`` seconds (the cost model is affine
in total context for a fixed batch, see CostModel.decode_coefficients) and
the end of the stretch has a closed form. The engine jumps there in one
event. It stops early at the next of:

* a request finishing (heap of finish iterations),
* the KV cache running out (first iteration whose block demand exceeds the
  capacity, found by bisection over the residue histogram in BlockDemand),
* an arrival that could be admitted (the stretch is cut at the iteration
  in flight when the request arrives).

Scheduling decisions are exactly the reference engine's
(:mod:`simulator.engine.reference`); the property tests hold them equal.
"""
from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from typing import Callable, Optional

import simpy
from mypy_extensions import mypyc_attr

from ..costmodel import CostModel
from ..costmodel.speculative import SpeculativeCostModel
from ..hybrid_kv import SlidingGroups
from ..metrics.gaps import GapLog
from .base import ReplicaBase, StepCost
from .blocks import BlockDemand, ceil_div
from .config import EngineConfig
from .kv_tiers import OffloadPlan
from .lora import LoraPlan
from .prefix_cache import Match
from .sequence import DECODE, PREFILL, Seq
from workloads.request import Request

#: A decode stretch in flight: (start, iterations, K, b, B), see ``_elapsed``.
Stretch = tuple[float, int, float, float, int]


@mypyc_attr(allow_interpreted_subclasses=True)   # test probes subclass it
class FastReplica(ReplicaBase):
    def __init__(self, env: simpy.Environment, index: int, cm: StepCost, cfg: EngineConfig, num_blocks: int,
                 gaps: GapLog, on_done: Optional[Callable[[Request], None]] = None,
                 max_model_len: Optional[int] = None, id_block_tokens: Optional[int] = None,
                 kv_budgets: Optional[dict[str, int]] = None, offload: Optional[OffloadPlan] = None,
                 lora: Optional[LoraPlan] = None, rank_tokens: Optional[int] = None,
                 windows: Optional[SlidingGroups] = None, rank_blocks: Optional[int] = None, dp: int = 1) -> None:
        super().__init__(env, index, cm, cfg, num_blocks, gaps, on_done, max_model_len, id_block_tokens,
                         kv_budgets, offload, lora, rank_tokens, windows, rank_blocks, dp)
        self.running: dict[Seq, None] = {}   # admission order; newest last
        self.prefilling: dict[Seq, None] = {}
        # Decoders the token budget leaves out of the iteration being planned, in running
        # order (``_park``): out of the decoding batch's aggregates, their blocks held as fixed.
        self.parked: dict[Seq, None] = {}
        # Whether a decoder's blocks stay reserved for its whole sequence while it decodes (contiguous
        # KV, and static batching, which reserves prompt + output at admission): they stay among the
        # fixed, and the decoders' growing token counts take no blocks of their own.
        self.reserves = self.contiguous or cfg.scheduler == "static"
        self.fixed_blocks = 0                # held by sequences not decoding (reserved KV: by all)
        self.fixed_filled = 0                # contiguous KV: blocks prefilling sequences' prompts fill
        self.demand = BlockDemand(self.bs)   # decoding sequences' blocks
        # The same two by attention-DP rank (one entry with one rank): each rank's pool admits, grows
        # and preempts its own requests (``_rank_used``).
        self.rank_fixed: list[int] = [0] * dp
        self.rank_demand: list[BlockDemand] = [BlockDemand(self.bs) for _ in range(dp)]
        self.G = 0                           # decode iterations so far
        # The decode counter the blocks of the mixed iteration in flight are held at (G + 1 where it
        # decodes: each decoder's next token's block is taken as it is planned, as the reference does).
        self.mixed_g = 0
        # Multi-step scheduling: decisions only at G ≡ anchor (mod steps);
        # the anchor moves when the decoding batch empties.
        self.block_anchor = 0
        self.C = 0                           # Σ c_i over decoding sequences
        # Decoding sequences by attention-DP rank (one entry with one rank): the busiest rank's
        # decodes price an iteration (ReplicaBase._step_load).
        self.rank_decoding: list[int] = [0] * dp
        self.heap: list[tuple[int, int, int, Seq]] = []
        self.rates: dict[float, int] = {}    # decoding sequences by speculative E (per-class α only)
        # Stall clock: total time of iterations in which decoders sat idle
        # (prefill-only iterations without chunking); cohorts of decoders by
        # the stall clock at their last token give their next gap.
        self.Z: float = 0.0
        self.z_last_decode: float = 0.0
        self.t_last_decode: float = -math.inf
        self.cohorts: dict[float, int] = {}
        # The stretch in flight.
        self.gen = 0
        self.seg: Optional[Stretch] = None   # a decode stretch in flight, else None
        self.seg_cuttable = False
        self.seg_evicts = False

    # --- helpers -----------------------------------------------------------
    @property
    def B(self) -> int:
        return self.demand.count

    def used_blocks(self, g: int | None = None) -> int:
        """Blocks held at decode counter g: :meth:`_held_fixed` and the decoders' own (reserved KV,
        contiguous or static: the reservations, whatever g)."""
        used = self._held_fixed()
        if not self.reserves:
            used += self.demand.at(self.G if g is None else g)
        return used

    def _held_fixed(self) -> int:
        """Blocks held whatever the decode counter: the sequences' that are not decoding (reserved KV: all of
        theirs), their windows, finished prompts' awaiting their hand-off and the cache entries pinned."""
        used = self.fixed_blocks + self._windows() + self.handing_blocks
        return used if self.cache is None else used + self.cache.pinned

    def _windows(self) -> int:
        """Blocks the running sequences' sliding-window layers hold: a window each, fixed while
        they run, and what prompt chunks hold beyond it (none through a decode stretch)."""
        return self.window_blocks * len(self.running) + self.window_extra

    def _rank_used(self, r: int, g: int) -> int:
        """Blocks of attention-DP rank ``r``'s pool held at decode counter ``g``, as :meth:`used_blocks`
        counts the replica's: its sequences' own and their windows, and the cache entries they pin."""
        used = self.rank_fixed[r] + self.window_blocks * self._rank_len(r) + self.rank_window_extra[r] \
            + self.rank_pinned[r] + self.rank_handing[r]
        if not self.reserves:
            used += self.rank_demand[r].at(g)
        return used

    def _rank_over(self, g: int) -> bool:
        """Whether some attention-DP rank's sequences hold more than its pool at decode counter ``g``."""
        for r in range(self.dp):
            if self._rank_used(r, g) > self.rank_pool:
                return True
        return False

    def _fix(self, s: Seq, blocks: int) -> None:
        """``blocks`` more (or fewer) held as fixed by ``s``, on the replica and on its rank."""
        self.fixed_blocks += blocks
        self.rank_fixed[s.rank] += blocks

    def kv_used_now(self, now: float) -> int:
        return self.used_blocks(self._g_now(now))

    def _rank_used_now(self, now: float) -> list[int]:
        g = self._g_now(now)
        return [self._rank_used(r, g) for r in range(self.dp)]

    def _g_now(self, now: float) -> int:
        """The decode counter whose blocks are held at ``now``: the iteration in flight's."""
        if self.seg is not None:
            return self.G + self._inflight(now)
        return self.mixed_g if self.in_flight else self.G

    def _join_decode(self, s: Seq) -> None:
        s.state = DECODE
        s.z = self.Z
        s.zg = self.G
        if self.contiguous:      # the reservation stays put; its tokens now grow with the decoders'
            self.fixed_filled -= ceil_div(s.prompt, self.bs)
        elif not self.reserves:
            self._fix(s, -s.blocks)
        self._enter_batch(s)

    def _enter_batch(self, s: Seq) -> None:
        """Add a decoder of ``kv`` tokens and ``generated`` outputs to the decoding batch's aggregates."""
        s.c = s.kv - self.G
        s.gf = self.G + s.req.output_tokens - s.generated
        self.demand.add(s.c - s.pin_blocks * self.bs)
        self.rank_demand[s.rank].add(s.c - s.pin_blocks * self.bs)
        self.C += s.c
        self.rank_decoding[s.rank] += 1
        key = self._cohort(s)
        self.cohorts[key] = self.cohorts.get(key, 0) + 1
        heapq.heappush(self.heap, (s.gf, s.order, s.epoch, s))
        if self.class_tokens_per_step is not None:
            e = self._tokens_per_step(s)
            self.rates[e] = self.rates.get(e, 0) + 1

    def _cohort(self, s: Seq) -> float:
        """The stall-clock cohort of a decoder: where it (re)joined, until the batch's
        next decode iteration, after which every decoder's is that iteration's."""
        return s.z if s.zg == self.G else self.z_last_decode

    def _leave_decode(self, s: Seq) -> None:
        self.demand.remove(s.c - s.pin_blocks * self.bs)
        self.rank_demand[s.rank].remove(s.c - s.pin_blocks * self.bs)
        if self.reserves:
            self._fix(s, -s.blocks)
        self.C -= s.c
        self.rank_decoding[s.rank] -= 1
        key = self._cohort(s)
        n = self.cohorts[key] - 1
        if n:
            self.cohorts[key] = n
        else:
            del self.cohorts[key]
        if self.class_tokens_per_step is not None:
            e = self._tokens_per_step(s)
            if self.rates[e] == 1:
                del self.rates[e]
            else:
                self.rates[e] -= 1

    def _remove_running(self, v: Seq) -> None:
        del self.running[v]
        if v in self.parked:
            del self.parked[v]
            self._drop_parked(v)
        elif v.state == DECODE:
            v.generated = v.req.output_tokens - (v.gf - self.G)
            if v.zg != self.G:      # it decoded since it joined
                v.last_token = max(v.last_token, self.t_last_decode)
            self._leave_decode(v)
        else:
            del self.prefilling[v]
            self._drop_prefilling(v)

    def _drop_prefilling(self, s: Seq) -> None:
        """A sequence that has not decoded gives back its blocks."""
        self._fix(s, -s.blocks)
        if self.contiguous:
            self.fixed_filled -= ceil_div(s.prompt, self.bs)

    def _victim(self, rank: int) -> Seq:
        """The running sequence KV pressure preempts: the lowest class
        priority, the newest among equals. The waiting queue serves classes
        as vLLM's ``--scheduling-policy priority`` does, and that policy's
        victim is the least important running request (vLLM V1
        ``Scheduler.schedule``: ``max(running, key=(priority, arrival))``,
        vLLM's smaller value being the more important); with one class it is
        the newest, FCFS's ``running.pop()``. The scan stops at the first
        sequence of the lowest priority queued, so with one class (or the
        newest running one of the lowest) it costs one step.

        Among equals the newest admitted goes, where vLLM's priority policy
        takes the latest arrival: they differ only for a preempted request
        readmitted behind later arrivals. Only a sequence of attention-DP rank
        ``rank``, whose pool is short, is taken."""
        lowest = self.waiting.lowest_priority()
        best: Optional[Seq] = None
        for s in reversed(self.running):
            if s.rank != rank:
                continue
            p = s.req.priority
            if p == lowest:
                return s
            if best is None or p < best.req.priority:
                best = s
        assert best is not None, "preemption with nothing running"
        return best

    def _preempt_victim(self, rank: int) -> Seq:
        return self._preempt(self._retraction_victim(rank) if self.retracts else self._victim(rank))

    def _retraction_victim(self, rank: int) -> Seq:
        """SGLang's next decoding request of attention-DP rank ``rank`` to retract (see ``_retraction_key``)."""
        G = self.G
        best: Optional[Seq] = None
        best_key = (0, 0, 0)
        for s in self.running:
            if s.state != DECODE or s.rank != rank:
                continue
            key = self._retraction_key(s.req.output_tokens - (s.gf - G), s)
            if best is None or key < best_key:
                best, best_key = s, key
        assert best is not None, "preemption with nothing decoding"
        return best

    def _outputs_left(self, rank: int) -> int:
        G, clip = self.G, self.clip
        return sum(min(s.gf - G, clip) for s in self.running if s.state == DECODE and s.rank == rank)

    def _retractable(self, rank: int) -> tuple[int, int]:
        return self._retractable_at(self.G, rank)

    def _retractable_at(self, g: int, rank: int = 0) -> tuple[int, int]:
        """``_retractable`` at decode counter ``g`` of the stretch being planned."""
        clip = self.clip
        held = top = 0
        for s in self.running:
            if s.rank != rank:
                continue
            inp = s.req.input_tokens
            held += inp + (s.req.output_tokens - (s.gf - g) if s.state == DECODE else s.generated)
            top = max(top, inp + min(s.req.output_tokens, clip))
        return held, top

    def _decoder_totals(self, rank: int) -> tuple[int, int, int]:
        G = self.G
        decoded = outputs = 0
        for s in self.running:
            if s.state == DECODE and s.rank == rank:
                decoded += s.req.output_tokens - (s.gf - G)
                outputs += s.req.output_tokens
        # (parked: while the plan is made)
        return self.rank_decoding[rank] + sum(1 for s in self.parked if s.rank == rank), decoded, outputs

    # --- decodes past the token budget -------------------------------------------
    def _decodes_within_budget(self) -> tuple[list[Seq], list[bool]]:
        """(preempted, by attention-DP rank whether its budget left decodes for the next
        iteration): the reference engine's ``_decodes_within_budget``. The decoders past
        their rank's budget are parked for the iteration, so this one runs alone (no stretch)."""
        victims: list[Seq] = []
        dp = self.dp
        todo = [True] * dp
        deferred = [False] * dp
        while True:
            decoding = list(self.rank_decoding)
            limit = [self._decodes_in_budget(decoding[r]) for r in range(dp)]
            seen = [0] * dp
            for s in list(self.running):
                r = s.rank
                if s.state == DECODE and todo[r] and limit[r] < decoding[r]:
                    seen[r] += 1
                    if seen[r] > limit[r]:
                        self._park(s)
            victims += self._make_room_for_decodes()
            redo = False
            for r in range(dp):
                if todo[r]:
                    deferred[r] = limit[r] < decoding[r]
                    # preemption took every decode the budget held: deal the budget again
                    todo[r] = not self.rank_decoding[r] and deferred[r] and any(p.rank == r for p in self.parked)
                    if todo[r]:
                        self._unpark(self.env.now, False, r)
                        redo = True
            if not redo:
                return victims, deferred

    def _park(self, s: Seq) -> None:
        """Take decoder ``s`` out of the batch's aggregates for one iteration: its
        counts and last token brought up to date, its blocks held as fixed."""
        G = self.G
        s.generated = s.req.output_tokens - (s.gf - G)
        s.kv = s.c + G
        if s.zg != G:
            s.last_token = max(s.last_token, self.t_last_decode)
        self._leave_decode(s)
        s.epoch += 1     # its finish on the heap moves
        if self.reserves:
            self._fix(s, s.blocks)
            if self.contiguous:
                self.fixed_filled += ceil_div(s.kv, self.bs)
        else:
            s.blocks = ceil_div(s.kv - s.pin_blocks * self.bs, self.bs)
            self._fix(s, s.blocks)
        self.parked[s] = None

    def _drop_parked(self, s: Seq) -> None:
        """A parked decoder leaves: its fixed blocks go."""
        self._fix(s, -s.blocks)
        if self.contiguous:
            self.fixed_filled -= ceil_div(s.kv, self.bs)

    def _unpark(self, now: float, waited: bool, rank: int = -1) -> None:
        """The parked decoders (of attention-DP rank ``rank``; -1: all) back in the batch:
        after the iteration they ``waited`` through, as if they had joined now with their
        last token's gap running (cohort Z − the time since it); else (re-planned) as they were."""
        for s in [s for s in self.parked if rank < 0 or s.rank == rank]:
            self._drop_parked(s)
            if self.reserves:
                self._fix(s, s.blocks)     # a decoder's reservation stays among the fixed
            if waited:
                s.z = self.Z - (now - s.last_token)
                s.zg = self.G
            self._enter_batch(s)
            del self.parked[s]

    def _make_room_for_decodes(self) -> list[Seq]:
        """Preempt on each attention-DP rank until its decodes' next blocks fit its pool."""
        victims = []
        for r in range(self.dp):
            while self.rank_decoding[r] and self._rank_used(r, self.G + 1) > self.rank_pool:
                victims.append(self._preempt_victim(r))
        self._requeue(victims)
        return victims

    def _batch_len(self) -> int:
        return len(self.running)

    def _admit(self, s: Seq, total: int, m: Optional[Match], now: float) -> int:
        self.waiting.popleft()
        taken = self._attach(s, total, m)
        self._fix(s, s.blocks)
        if self.contiguous:
            self.fixed_filled += ceil_div(s.prompt, self.bs)
        s.state = PREFILL
        self._admit_stamp(s, now)
        self.running[s] = None
        self.prefilling[s] = None
        return taken

    def _hold(self, s: Seq, blocks: int) -> None:
        s.blocks += blocks
        self._fix(s, blocks)

    def _shared(self, s: Seq, blocks: int) -> None:
        if s.state != DECODE or s in self.parked:
            self._hold(s, -blocks)
            return
        # a decoder's own blocks are its demand's: its tokens less those on its cache path
        bs = self.bs
        old, new = s.c - (s.pin_blocks - blocks) * bs, s.c - s.pin_blocks * bs
        for d in (self.demand, self.rank_demand[s.rank]):
            d.remove(old)
            d.add(new)
        if self.reserves:
            self._hold(s, -blocks)

    def _free_for_chunk(self, decoding: bool, rank: int) -> int:
        return self.rank_pool - self._rank_used(rank, self.G + 1 if decoding else self.G)

    def _free_blocks(self, decoding_next: bool) -> int:
        return self.num_blocks - self.used_blocks(self.G + 1 if decoding_next else self.G)

    def _frees(self, decoding_next: bool) -> list[int]:
        """Each attention-DP rank's free blocks, the decodes' next ones taken where ``decoding_next``."""
        g = self.G + 1 if decoding_next else self.G
        return [self.rank_pool - self._rank_used(r, g) for r in range(self.dp)]

    # --- planning ----------------------------------------------------------
    def _plan(self, now: float):
        """Returns (chunks, decoding?, preempted?) with the reference engine's decisions."""
        cfg = self.cfg
        chunks: list[tuple[Seq, int]] = []
        self._start_plan()
        if cfg.scheduler == "static":
            if not self.running:
                return self._admit_whole(now, self._frees(False), reserve_output=True), False, False
            return chunks, self.B > 0, False
        if not cfg.chunked_prefill and cfg.mixes_prefill:
            # Whole prompts in flight with the decodes (TensorRT-LLM without chunking).
            victims, deferred = self._decodes_within_budget()
            self._trim_cache(self._free_blocks(self.B > 0))
            chunks = self._admit_whole(now, self._frees(self.B > 0), False, list(self.rank_decoding),
                                       self._stopped(victims, deferred))
            return chunks, self.B > 0, bool(victims)
        if not cfg.chunked_prefill:
            if self.B == 0:
                self.block_anchor = self.G
            if (self.G - self.block_anchor) % cfg.num_scheduler_steps == 0:
                chunks = self._admit_whole(now, self._frees(False), reserve_output=False)
                if chunks:
                    return self._decodes_beside(chunks)
            # A victim's blocks may let a request of a higher class, ahead of it in the queue,
            # in at the next boundary: the stretch ends there (preempted).
            victims = self._make_room_for_decodes()
            self._trim_cache(self._free_blocks(self.B > 0))
            return [], self.B > 0, bool(victims)
        if not cfg.mixes_prefill:
            # Chunks in prefill-only iterations (SGLang without --enable-mixed-chunk): the
            # prompt being chunked goes first, then waiting prompts while the budget lasts;
            # the decodes wait for a prefill batch on their own rank (``_decodes_beside``).
            self._trim_cache(self._free_blocks(False))
            late: list[Seq] = []
            budget = [self.rank_budget] * self.dp
            closed = [False] * self.dp
            self._continue_prefills(budget, chunks, late, False, closed)
            self._admit_chunked(now, self._frees(False), budget, chunks, self._stopped(late, closed))
            if chunks:
                return self._decodes_beside(chunks)
            victims = self._make_room_for_decodes()   # (as without chunking: the stretch ends after one)
            self._trim_cache(self._free_blocks(self.B > 0))
            return [], self.B > 0, bool(victims or late)
        victims, deferred = self._decodes_within_budget()
        self._trim_cache(self._free_blocks(self.B > 0))
        late = []
        closed = list(deferred)     # (a rank whose budget left decodes waiting schedules no prompt tokens)
        budget = [self._after_decodes(d) for d in self.rank_decoding]
        self._continue_prefills(budget, chunks, late, True, closed)
        self._admit_chunked(now, self._frees(self.B > 0), budget, chunks, self._stopped(victims + late, closed))
        return chunks, self.B > 0, bool(victims or late)

    def _decodes_beside(self, chunks: list[tuple[Seq, int]]) -> tuple[list[tuple[Seq, int]], bool, bool]:
        """A prefill-only iteration's plan: the reference engine's ``_decodes_beside``, the decoders of
        the attention-DP ranks that hold a chunk parked for the iteration (``_park``) and those of the
        others given their next blocks on their own rank's pool."""
        if not self.own_modes:
            return chunks, False, False
        prefilling = self._prefilling(chunks)
        if not any(self.rank_decoding[r] and not prefilling[r] for r in range(self.dp)):
            return chunks, False, False     # every rank with decodes prefills
        for s in list(self.running):
            if s.state == DECODE and prefilling[s.rank]:
                self._park(s)
        victims = self._make_room_for_decodes()
        self._trim_cache(self._free_blocks(self.B > 0))
        return chunks, self.B > 0, bool(victims)

    def _continue_prefills(self, budget: list[int], chunks: list, late: list[Seq], decoding: bool,
                           closed: list[bool]) -> None:
        """Add the next chunk of each partly prefilled prompt to ``chunks`` while its
        attention-DP rank's ``budget`` lasts, with its blocks chunk by chunk (``_chunk_kv``,
        whose preemptions go to ``late``; a rank that cannot give a chunk its blocks stops
        there, ``closed``)."""
        for s in list(self.prefilling):
            if s.state != PREFILL:
                continue    # preempted by an earlier prompt's chunk
            r = s.rank
            if closed[r] or budget[r] <= self.draft_slots:
                continue
            c = self._chunk(s, budget[r])
            if c == 0 < s.prompt - s.done:
                continue    # (the budget left holds no whole block of it)
            if self.per_chunk and not self._chunk_kv(s, c, chunks, late, decoding):
                closed[r] = True
                continue
            self._reserve_output(s, c)
            chunks.append((s, c))
            budget[r] -= c + self.draft_slots

    # --- the loop ----------------------------------------------------------
    def _boundary(self, _ev: object = None) -> None:
        now = self.env.now
        self._take_back_read()
        if not self.plans_ahead:
            self._enter_completed()
        chunks, decoding, preempted = self._plan(now)
        entered = self._enter_completed()
        if not chunks and not decoding and self.held:
            self._take_in(now)      # nothing in flight to plan ahead of
            chunks, decoding, preempted = self._plan(now)
        if self.expects_output:
            self._track_ratio(chunks, self.rank_decoding if decoding else [0] * self.dp)
        self.queue_len.set(now, self.queued())
        self.batch_size.set(now, len(self.running))
        self.in_flight = bool(chunks) or decoding
        if not chunks and not decoding:
            self.busy = False
            self.seg = None
            self._release_outputs(0.0)
            return
        B = self.B
        if chunks or self.parked:    # one iteration: prompt chunks, or decodes past the budget waiting
            computed = self._computed(chunks)
            prefill = [(c, s.done) for s, c in computed]
            sampling = (B if decoding else 0) + sum(1 for s, c in chunks if s.done + c == s.prompt)
            ctx = (self.C + B * (self.G + 1)) if decoding else 0
            cm = self.cm
            load = self._step_load(computed, self.rank_decoding if decoding else [0] * len(self.rank_decoding))
            if self.lora is not None:
                dt = self._lora_step_time(prefill, B if decoding else 0, ctx, sampling, load)
            elif self.class_tokens_per_step is None:
                dt = cm.step_time(prefill, B if decoding else 0, ctx, sampling, load=load)
            else:
                assert isinstance(cm, SpeculativeCostModel)   # per-class α is speculative decoding's
                dt = cm.step_time(prefill, B if decoding else 0, ctx, sampling,
                                  tokens_per_step=self._mean_tokens_per_step(self.rates), load=load)
            dt += self._take_reload()   # (a base-class float read here crashes mypyc 1.13's codegen)
            self._release_outputs(dt if chunks else 0.0)
            self.seg = None
            self.gen += 1
            gen = self.gen
            g = self.mixed_g = self.G + 1 if decoding else self.G
            held = self.used_blocks(g)
            filled = self.fixed_filled + self.demand.at(g) if self.contiguous else 0
            self._step_started(now, held, filled)

            def end_mixed(_ev: object) -> None:
                if gen == self.gen:
                    self._end_mixed(chunks, decoding, dt, held, filled)
            self._schedule(dt, end_mixed)
            if self.held:
                self._take_in(now)
            return
        # A decode-only stretch: how many iterations until something changes?
        cm = self.cm
        # the busiest attention-DP rank's decodes (0: one rank), fixed through the stretch
        busiest = max(self.rank_decoding) if self.placement is not None else 0
        if self.lora is not None:   # the LoRA kernels over the batch's adapters (fixed through the stretch)
            assert isinstance(cm, CostModel)
            a, b = cm.decode_coefficients(B, self.lora.distinct, busiest)
        elif self.class_tokens_per_step is None:
            a, b = cm.decode_coefficients(B, busiest=busiest)
        else:   # one E for the stretch: its decoding set is fixed
            assert isinstance(cm, SpeculativeCostModel)
            a, b = cm.decode_coefficients(B, self._mean_tokens_per_step(self.rates), busiest)
        G0 = self.G
        gf = self._next_finish()
        assert gf is not None   # decoding sequences are on the heap
        n = gf - G0
        if preempted or self.lingering or (entered and self.waiting):
            n = 1     # (a chunk's windows go back after the first iteration; prompts entered after the plan)
        elif self.dp > 1 and (self.waiting or self._fetchable()):
            n = 1     # each attention-DP rank's scheduler tries its own waiting requests at every boundary
        elif n > 1 and self.cfg.num_scheduler_steps > 1 and self.waiting and self._head_admissible():
            n = min(n, self._block_boundary(G0 + 1) - G0)    # the head joins at the next decision
        if n > 1 and self._rank_over(G0 + n):
            # every rank's used(G0+1) fits, some rank's used(G0+n) does not: the stretch ends before the
            # first overflow (each rank's usage only grows through it)
            n = self._first_true(lambda j: self._rank_over(G0 + j), 1, n) - 1
        if n > 1 and (self.expects_output or self.reserves_decode) and self.waiting and not preempted:
            n = self._first_admissible(1, n)   # the head may pass as the ratio decays and outputs shrink
        K = a + b * (self.C + B * G0)
        dt = self._elapsed(n, K, b, B)
        self._release_outputs(0.0)
        self.gen += 1
        gen = self.gen
        self.seg = (now, n, K, b, B)
        # An arrival can only change the plan if it could be admitted at a
        # boundary (the base calls the hook only for a new head of the queue), or, in the replica's
        # queue, be fetched to a rank there (by the counts then, static batching or not).
        self.seg_cuttable = self.cfg.scheduler != "static" or self._fetches
        # Will decode growth evict cache entries before the stretch ends? If
        # not, a router's mid-stretch lookup needs no catching up.
        c = self.cache
        self.seg_evicts = (c is not None and not c.unbounded and self.cfg.scheduler != "static"
                           and c.evictable > self.num_blocks - self.used_blocks(G0 + n))
        self._schedule_decode_end(dt, gen, n)
        if self.held:
            self._take_in(now)

    @staticmethod
    def _elapsed(k: int, K: float, b: float, B: int) -> float:
        """Time of the first k iterations: Σ_{j=1..k} (K + b·B·j)."""
        return k * K + b * B * k * (k + 1) / 2.0

    def _next_finish(self) -> int | None:
        """Decode counter of the next finish, dropping stale heap entries
        (sequences preempted since they were pushed)."""
        h = self.heap
        while h and (h[0][3].state != DECODE or h[0][2] != h[0][3].epoch):
            heapq.heappop(h)
        return h[0][0] if h else None

    def _head_admissible(self) -> bool:
        """Whether the head of the queue could join at the next boundary.

        Admission needs a free sequence slot, token budget and blocks; the
        first two are constant and the last only shrinks over a stretch
        (decodes grow, cache entries are only evicted; blocks reserved for
        running outputs change only at admissions and finishes), so if any
        is missing now it stays missing until a finish."""
        cfg = self.cfg
        head = self._first_candidate()   # (a waiting LoRA request may be skipped for its adapter)
        if (head is None or len(self.running) >= cfg.max_num_seqs
                or (cfg.chunked_prefill and cfg.mixes_prefill and self._after_decodes(self.B) <= self.draft_slots)
                or self._over_budget(head) or self.kv_full[max(head.rank, 0)]):
            return False    # (a rank held full stays so until one of its requests leaves: a finish)
        if self.expects_output or self.reserves_decode:
            return True     # its KV test is _first_admissible's, iteration by iteration
        # (its first chunk's budget: what the stretch's decodes leave; no prompt is part-way)
        budget = self._after_decodes(self.B) if cfg.mixes_prefill else cfg.max_num_batched_tokens
        need, total, _ = self._admission(head, budget=budget if self.per_chunk else 0)
        return not self._no_room(head, need, total, self.num_blocks - self.used_blocks(self.G + 1))

    def _block_boundary(self, g: int) -> int:
        """The first decode counter ≥ g at which the scheduler decides (every
        one without multi-step scheduling)."""
        return g + (self.block_anchor - g) % self.cfg.num_scheduler_steps

    def _first_admissible(self, k: int, n: int) -> int:
        """The first k' in [k, n) after whose iteration of the decode stretch
        (decode counter G + k') the head of the queue passes the expected-output
        test; n if none. Not monotone: the free KV shrinks as decodes grow while
        the ratio decays and the running outputs shrink, so the test can pass
        mid-stretch, then fail again once the ratio is at its floor.

        The free tokens F(k') and ratio(k') × left(k') both only fall, so where
        ratio × left ≥ F(k) − cost no k' before its first fall below can pass:
        the search jumps there by bisection and tests again, a few steps per
        pass rather than one per iteration."""
        if not self._head_admissible():
            return n        # a slot, the budget or its class cap is missing until a finish
        if self.full_until_leave:
            return k        # tried once, at the next plan: it joins, or holds its rank full until a leave
        if self.reserves_decode:
            return self._first_reservable(k, n)
        head = self._first_candidate()
        assert head is not None
        need, _, _ = self._admission(head)
        cost = need * self.bs + self._output_estimate(head)
        G0, clip, bs = self.G, self.clip, self.bs
        after = 1 if self.cfg.mixes_prefill else 0    # mixed, the decodes' next blocks are taken first
        rs = sorted([s.gf - G0 for s in self.running if s.state == DECODE])
        sums = [0]
        for r in rs:
            sums.append(sums[-1] + r)
        B = len(rs)
        rank = max(head.rank, 0)
        steps = self.ratio_steps[rank] - 1    # decays planned before the stretch's first iteration

        def left(j: int) -> int:
            m = bisect_left(rs, j + clip)
            return sums[m] - m * j + clip * (B - m)

        def weighted(j: int) -> float:
            return self._ratio(rank, steps + j) * left(j)

        while k < n:
            free = bs * (self.num_blocks - self.used_blocks(G0 + k + after))
            target = free - cost
            if target <= 0:
                return n
            if weighted(k) < target:
                if self._expected_fits(cost, free, self._ratio(rank, steps + k), left(k), 0):
                    return k
                k += 1
                continue
            if weighted(n - 1) >= target:
                return n
            # weighted(k) ≥ target > weighted(n − 1): on to its first fall below
            k = self._first_true(lambda j: weighted(j) < target, k, n - 1)
        return n

    def _first_reservable(self, k: int, n: int) -> int:
        """``_first_admissible`` under SGLang's decode-server reservation: the first
        k' in [k, n) after whose iteration the head passes ``_reservation_fits``; n
        if none. Over a stretch the free tokens F only fall and the running
        requests' Σ prompt + output so far grows by B an iteration, so the test
        kv + reserve ≤ F − reserve × active only turns false (bisection finds its
        last pass, beyond which none can pass); a retracted head has no other. At
        one token a block F falls by exactly B an iteration: the other three
        comparisons are then constant or turn true once, and the whole test is
        monotone up to that last pass (bisection again); with larger blocks F
        falls by steps, and the iterations up to it are tried in turn."""
        head = self._first_candidate()
        assert head is not None
        need, total, _ = self._admission(head)
        kv = self._decode_kv(head, need, total)
        est = self._decode_estimate(head)
        G0, bs, R = self.G, self.bs, self.reserve_tokens
        after = 1 if self.cfg.mixes_prefill else 0    # mixed, the decodes' next blocks are taken first
        active = len(self.running)
        held0, top = self._retractable_at(G0)
        B = self.B

        def free(j: int) -> int:
            return bs * (self.num_blocks - self.used_blocks(G0 + j + after))

        def reserve_fits(j: int) -> bool:   # (and the blocks a resume allocates: _no_room)
            return kv + R <= free(j) - R * active and need * bs <= free(j)

        def fits(j: int) -> bool:
            return self._reservation_fits(kv, est, free(j), R, active, held0 + B * j, top)

        if not reserve_fits(k):
            return n
        if est < 0:
            return k
        last = n - 1
        if not reserve_fits(last):
            last = self._first_true(lambda j: not reserve_fits(j), k, last) - 1
        if bs != 1:
            for j in range(k, last + 1):
                if fits(j):
                    return j
            return n
        if fits(k):
            return k
        if not fits(last):
            return n
        return self._first_true(fits, k, last)

    @staticmethod
    def _first_true(test: Callable[[int], bool], lo: int, hi: int) -> int:
        """The first j in (lo, hi] where ``test`` turns true, given it is false at lo
        and true at hi and turns true once between (bisection)."""
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if test(mid):
                hi = mid
            else:
                lo = mid
        return hi

    def _on_arrival_while_busy(self, now: float) -> None:
        if self.seg is None or not self.seg_cuttable or self.seg[1] <= 1:
            return
        if self._fetches:   # the ranks fetch it from the replica's queue as the iteration in flight ends,
            self._cut(now)  # within a multi-step block too (_start_plan: _fetch), not at the block's end
            return
        if self.dp > 1:     # its rank's scheduler tries it at the first decision after the iteration in flight
            self._end_stretch_after(self._block_boundary(self.G + self._inflight(now)) - self.G, now)
            return
        if self.expects_output or self.reserves_decode:
            self._end_stretch_after(self._first_admissible(self._inflight(now), self.seg[1]), now)
            return
        if not self._head_admissible():
            return
        # The head joins at the first decision after the iteration in flight
        # (that iteration's end without multi-step scheduling).
        self._end_stretch_after(self._block_boundary(self.G + self._inflight(now)) - self.G, now)

    def _inflight(self, now: float) -> int:
        """The iteration of the decode stretch in flight at ``now`` (1-based):
        the smallest k with elapsed(k) ≥ now − t0, so an event exactly at a
        boundary belongs to the iteration ending there."""
        assert self.seg is not None
        t0, n, K, b, B = self.seg
        dt = now - t0
        # smallest k ≥ 1 with elapsed(k) ≥ dt (the iteration in flight)
        qa = b * B / 2.0
        qb = K + qa
        if qa > 0:
            k = math.ceil((-qb + math.sqrt(qb * qb + 4 * qa * dt)) / (2 * qa))
        else:
            k = math.ceil(dt / qb) if qb > 0 else 1
        k = max(1, min(k, n))
        while k > 1 and self._elapsed(k - 1, K, b, B) >= dt:
            k -= 1
        while k < n and self._elapsed(k, K, b, B) < dt:
            k += 1
        return k

    def done_before(self, now: float) -> dict:
        """As the base's, and of a decode stretch in flight its iterations ended by ``now`` and the KV they
        held (``_end_decode`` accounts the stretch whole at its end), as the reference engine counts them."""
        if self.seg is None:
            return ReplicaBase.done_before(self, now)
        t0, _, K, b, B = self.seg
        k = self._inflight(now)
        done = k - 1
        part = now - t0 - self._elapsed(done, K, b, B)     # of the k-th iteration, in flight
        out: dict = {"iterations": done, "tokens_processed": done * B, "busy_time": now - t0}
        if self.reserves:
            out["kv_used_area"] = self.used_blocks() * (now - t0)
        else:
            fixed = self._held_fixed()
            out["kv_used_area"] = self._stretch_kv_area(done, K, b, B, fixed) + part * (fixed + self.demand.at(self.G + k))
        if self.contiguous:
            out["kv_filled_area"] = (self._stretch_kv_area(done, K, b, B, self.fixed_filled)
                                     + part * (self.fixed_filled + self.demand.at(self.G + k)))
        return out

    def _cut(self, now: float) -> None:
        """End the decode stretch in flight at the end of its current iteration."""
        if self.seg is None or self.seg[1] <= 1:
            return
        self._end_stretch_after(self._inflight(now), now)

    def _end_stretch_after(self, k: int, now: float) -> None:
        """End the decode stretch in flight after its k-th iteration (if sooner than planned)."""
        assert self.seg is not None
        t0, n, K, b, B = self.seg
        if k >= n:
            return
        self.gen += 1
        gen = self.gen
        self.seg = (t0, k, K, b, B)
        delay = t0 + self._elapsed(k, K, b, B) - now
        self._schedule_decode_end(max(delay, 0.0), gen, k)

    def _schedule_decode_end(self, delay: float, gen: int, n: int) -> None:
        """End the stretch after its n-th iteration, unless a cut replaced it (``gen`` moved on)."""
        def end_decode(_ev: object) -> None:
            if gen == self.gen:
                self._end_decode(n)
        self._schedule(delay, end_decode)

    def _sync_cache(self, now: float) -> None:
        if self.seg is not None and self.seg_evicts:
            self._trim_cache(self.num_blocks - self.used_blocks(self.G + self._inflight(now)))

    def _stretch_kv_area(self, n: int, K: float, b: float, B: int, fixed: int) -> float:
        """Σ_{k=1..n} step_k · (fixed + demand(G0+k)) for a decode stretch, in
        O(bs): ``fixed`` blocks are held throughout (sequences not decoding,
        cache entries they pin), the decoders' grow.

        demand(m) = q + B·(m // bs) + S(m % bs) with S(h) = #{r ≥ bs − h}.
        Writing m // bs = (m − m % bs)/bs splits it into a part linear in k
        (summed in closed form against the linear step time) and a part that
        depends only on m % bs (summed per residue class).
        """
        G0, bs, d = self.G, self.bs, self.demand
        c0 = fixed + d.q_sum
        if n <= bs:
            return sum((K + b * B * k) * (fixed + d.at(G0 + k)) for k in range(1, n + 1))
        bB = b * B
        a0 = c0 + B * G0 / bs
        a1 = B / bs
        s1 = n * (n + 1) / 2.0
        s2 = n * (n + 1) * (2 * n + 1) / 6.0
        total = K * a0 * n + (K * a1 + bB * a0) * s1 + bB * a1 * s2
        hist = d.hist
        suffix = 0
        for h in range(bs):
            if h:
                suffix += hist[bs - h]
            f = suffix - B * h / bs
            if f == 0.0:
                continue
            k1 = (h - G0 - 1) % bs + 1
            if k1 > n:
                continue
            cnt = (n - k1) // bs + 1
            sk = cnt * k1 + bs * cnt * (cnt - 1) / 2.0
            total += f * (K * cnt + bB * sk)
        return total

    # --- applying what an iteration or stretch did ---------------------------
    def _decode_gaps(self, n: int, first_step: float, last_step: float, second_step: float) -> None:
        """Log the gaps of n decode iterations for every decoding sequence."""
        B = self.B
        for z, cnt in self.cohorts.items():
            extra = self.Z - z
            self.gaps.add(first_step + extra, first_step + extra, cnt)
        if n > 1:
            self.gaps.add(second_step, last_step, B * (n - 1))
        c = self.cohorts
        if len(c) == 1 and self.Z in c:
            c[self.Z] = B
        else:
            self.cohorts = {self.Z: B}
        self.z_last_decode = self.Z

    def _end_decode(self, n: int) -> None:
        now = self.env.now
        assert self.seg is not None
        t0, _, K, b, B = self.seg
        self.iterations += n
        if self.reserves:    # reservations are fixed through the stretch; their tokens grow
            kv_area = self.used_blocks() * (now - t0)
            if self.contiguous:
                self._account_filled(self._stretch_kv_area(n, K, b, B, self.fixed_filled),
                                     self.fixed_filled + self.demand.at(self.G + n))
        else:
            kv_area = self._stretch_kv_area(n, K, b, B, self._held_fixed())
        kv_peak = self.used_blocks(self.G + n)
        if self.lingering:
            self._chunks_ended([])
        self._decode_gaps(n, K + b * B, K + b * B * n, K + 2 * b * B)
        if self.expects_output:
            for r in range(self.dp):     # the first was counted when the stretch was planned
                if self.rank_decoding[r]:
                    self.ratio_steps[r] += n - 1
        self.G += n
        self.t_last_decode = now
        if self.cfg.scheduler != "static":
            self._trim_cache(self.num_blocks - kv_peak)   # the evictions its iterations made
        self._retire_finished(now)
        if self.cancelled:
            self._drop_cancelled(now)
        self._account(now - t0, kv_area, kv_peak, n * B)
        self.seg = None
        self._boundary()

    def _end_mixed(self, chunks, decoding: bool, dt: float, held: int, filled: int) -> None:
        now = self.env.now
        if self.window_extra or self.window_lag:
            self._chunks_ended(chunks)
        tokens = sum(c for _, c in chunks) + (self.B if decoding else 0)
        self.iterations += 1
        if decoding:
            self._decode_gaps(1, dt, dt, dt)
            self.G += 1
            self.t_last_decode = now
            self._retire_finished(now)
        elif self.B:
            self.Z += dt      # decoders idled through a prefill-only iteration
        if self.parked:
            self._unpark(now, True)
        for s, c in chunks:
            if self._prefill_chunk_done(s, c, now):
                del self.prefilling[s]
                if s.generated >= s.req.output_tokens:
                    del self.running[s]
                    self._drop_prefilling(s)
                    s.blocks = 0
                    self._finish_request(s, now)
                else:
                    self._join_decode(s)
        self._chunks_computed(chunks)
        if self.cancelled:
            self._drop_cancelled(now)
        self._account(dt, dt * held, held, tokens)
        if self.contiguous:
            self._account_filled(dt * filled, filled)
        self._boundary()

    def _retire_finished(self, now: float) -> None:
        while (gf := self._next_finish()) is not None and gf <= self.G:
            s = heapq.heappop(self.heap)[3]
            s.generated = s.req.output_tokens
            self._leave_decode(s)
            del self.running[s]
            s.blocks = 0
            self._finish_request(s, now)
