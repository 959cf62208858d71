"""The reference engine: one event per iteration, every request touched.

Deliberately simple and slow. It is the oracle the fast engine is tested
against (same per-request timestamps within float tolerance); when the two
disagree, this one is right. Keep it free of cleverness.
"""
from __future__ import annotations

from collections import Counter
from typing import Optional

from .base import ReplicaBase
from .blocks import ceil_div
from .sequence import DECODE, PREFILL, Seq


class ReferenceReplica(ReplicaBase):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.running: list[Seq] = []      # admission order
        self.own = 0                      # blocks sequences hold privately
        self.rank_own = [0] * self.dp     # the same by attention-DP rank
        self.block_left = 0               # multi-step: decode iterations left in the current block

    @property
    def free(self) -> int:
        """Blocks neither held by a sequence (its own, its windows) nor pinned in
        the cache for one (unreferenced cache entries count as free: they are
        evicted on demand)."""
        return (self.num_blocks - self.own - self.window_blocks * len(self.running) - self.window_extra
                - (self.cache.pinned if self.cache is not None else 0) - self.handing_blocks)

    def _rank_free(self, r: int) -> int:
        """The blocks of attention-DP rank ``r``'s pool neither held by its sequences nor pinned for them."""
        return (self.rank_pool - self.rank_own[r] - self.window_blocks * self._rank_len(r)
                - self.rank_window_extra[r] - self.rank_pinned[r] - self.rank_handing[r])

    def _frees(self) -> list[int]:
        return [self._rank_free(r) for r in range(self.dp)]

    def _free_blocks(self, decoding_next: bool) -> int:
        return self.free    # (the decodes' blocks were given first)

    def _own(self, s: Seq, blocks: int) -> None:
        self.own += blocks
        self.rank_own[s.rank] += blocks
        s.blocks += blocks

    def kv_used_now(self, now: float) -> int:
        return self.num_blocks - self.free

    def _rank_used_now(self, now: float) -> list[int]:
        return [self.rank_pool - self._rank_free(r) for r in range(self.dp)]

    def _batch_len(self) -> int:
        return len(self.running)

    # --- planning one iteration ----------------------------------------------
    def _remove_running(self, v: Seq) -> None:
        self.running.remove(v)
        self._own(v, -v.blocks)

    def _preempt_victim(self, rank: int) -> Seq:
        mine = [s for s in self.running if s.rank == rank]
        if self.retracts:   # SGLang retracts decoding requests alone, by its own order
            return self._preempt(min((s for s in mine if s.state == DECODE),
                                     key=lambda s: self._retraction_key(s.generated, s)))
        # The lowest class priority, the newest among equals (min keeps the first of equals).
        return self._preempt(min(reversed(mine), key=lambda s: s.req.priority))

    def _outputs_left(self, rank: int) -> int:
        clip = self.clip
        return sum(min(s.req.output_tokens - s.generated, clip) for s in self.running
                   if s.state == DECODE and s.rank == rank)

    def _retractable(self, rank: int) -> tuple[int, int]:
        clip = self.clip
        mine = [s for s in self.running if s.rank == rank]
        held = sum(s.req.input_tokens + s.generated for s in mine)
        top = max((s.req.input_tokens + min(s.req.output_tokens, clip) for s in mine), default=0)
        return held, top

    def _decoder_totals(self, rank: int) -> tuple[int, int, int]:
        decoding = [s for s in self.running if s.state == DECODE and s.rank == rank]
        return len(decoding), sum(s.generated for s in decoding), sum(s.req.output_tokens for s in decoding)

    def _allocate_decodes(self, limit: Optional[list[int]] = None) -> tuple[list[Seq], list[Seq]]:
        """Blocks for the next token of the running decodes, on each attention-DP rank r the
        first ``limit[r]`` of its decodes (None: all; -1: none of that rank's), preempting from
        the tail of the rank where they do not fit its pool."""
        decodes, victims = [], []
        seen = [0] * self.dp
        for s in [s for s in self.running if s.state == DECODE]:
            r = s.rank
            seen[r] += 1
            if limit is not None and seen[r] > limit[r]:
                continue
            if s not in self.running:
                continue
            # (none when a contiguous reservation already holds the token)
            need = max(0, ceil_div(s.kv + 1 - s.pin_blocks * self.bs, self.bs) - s.blocks)
            preempted_self = False
            while need > self._rank_free(r):
                v = self._preempt_victim(r)
                victims.append(v)
                if v is s:
                    preempted_self = True
                    break
                if v in decodes:    # a lower class already given its token (vLLM unschedules it too)
                    decodes.remove(v)
            if preempted_self:
                continue
            self._own(s, need)
            decodes.append(s)
        self._requeue(victims)
        return decodes, victims

    def _hold(self, s: Seq, blocks: int) -> None:
        self._own(s, blocks)

    def _shared(self, s: Seq, blocks: int) -> None:
        self._own(s, -blocks)

    def _free_for_chunk(self, decoding: bool, rank: int) -> int:
        return self._rank_free(rank)    # (the decodes' blocks were given first)

    def _admit(self, s: Seq, total: int, m, now: float) -> int:
        self.waiting.popleft()
        taken = self._attach(s, total, m)
        self.own += s.blocks
        self.rank_own[s.rank] += s.blocks
        s.state = PREFILL
        self._admit_stamp(s, now)
        self.running.append(s)
        return taken

    def _plan(self, now: float):
        cfg = self.cfg
        chunks: list[tuple[Seq, int]] = []
        decodes: list[Seq] = []
        self._start_plan()
        if cfg.scheduler == "static":
            if not self.running:
                chunks = self._admit_whole(now, self._frees(), reserve_output=True)
            else:
                # Blocks for the whole sequence were reserved at admission.
                decodes = [s for s in self.running if s.state == DECODE]
            return chunks, decodes
        if not cfg.chunked_prefill and cfg.mixes_prefill:
            # Whole prompts in flight with the decodes (TensorRT-LLM without chunking).
            decodes, victims, deferred = self._decodes_within_budget()
            self._trim_cache(self.free)
            chunks = self._admit_whole(now, self._frees(), False, self._by_rank(decodes),
                                       self._stopped(victims, deferred))
            return chunks, decodes
        if not cfg.chunked_prefill:
            # vLLM v0 without chunking: a prefill-only iteration whenever a
            # waiting prompt can be admitted; decodes stall meanwhile. With
            # multi-step scheduling only between blocks of decode iterations.
            if self.block_left == 0 or not any(s.state == DECODE for s in self.running):
                self.block_left = 0
                chunks = self._admit_whole(now, self._frees(), reserve_output=False)
                if chunks:
                    return chunks, self._decodes_beside(chunks)
            decodes, _ = self._allocate_decodes()
            self._trim_cache(self.free)
            if decodes:
                self.block_left = (self.block_left or cfg.num_scheduler_steps) - 1
            return [], decodes
        if not cfg.mixes_prefill:
            # Chunks in prefill-only iterations (SGLang without --enable-mixed-chunk).
            self._trim_cache(self.free)
            late: list[Seq] = []
            budget = [self.rank_budget] * self.dp
            closed = [False] * self.dp
            self._continue_prefills(budget, chunks, late, False, closed)
            self._admit_chunked(now, self._frees(), budget, chunks, self._stopped(late, closed))
            if chunks:
                return chunks, self._decodes_beside(chunks)
            decodes, _ = self._allocate_decodes()
            self._trim_cache(self.free)
            return [], decodes
        decodes, victims, deferred = self._decodes_within_budget()
        self._trim_cache(self.free)
        late = []
        closed = list(deferred)     # (a rank whose budget left decodes waiting schedules no prompt tokens)
        budget = [self._after_decodes(n) for n in self._by_rank(decodes)]
        self._continue_prefills(budget, chunks, late, True, closed)
        if late:    # a prompt's chunk preempted: the decodes it took lose their tokens
            decodes = [s for s in decodes if s.state == DECODE]
        self._admit_chunked(now, self._frees(), budget, chunks, self._stopped(victims + late, closed))
        return chunks, decodes

    def _decodes_beside(self, chunks: list[tuple[Seq, int]]) -> list[Seq]:
        """In a prefill-only iteration, the decodes of the attention-DP ranks that hold no prompt chunk,
        given their blocks on their own rank's pool (``own_modes``; none where the ranks step alike).
        A chunk of no tokens (a decode server's handed-over prompt, its KV arrived whole) computes
        nothing, so its rank decodes."""
        if not self.own_modes:
            return []
        limit = [-1 if n else len(self.running) for n in self._prefilling(chunks)]
        decodes, _ = self._allocate_decodes(limit)
        self._trim_cache(self.free)
        return decodes

    def _decodes_within_budget(self) -> tuple[list[Seq], list[Seq], list[bool]]:
        """(decodes the iteration runs, preempted, by attention-DP rank whether its budget
        left decodes for the next iteration): on each rank the oldest its budget holds
        (``_decodes_in_budget``), given their blocks; if preemption took every one of a
        rank's, its budget is dealt again over the decodes it has left (vLLM's priority
        policy hands a preempted request's tokens back to the walk)."""
        victims: list[Seq] = []
        decodes: list[Seq] = []
        dp = self.dp
        todo = [True] * dp
        deferred = [False] * dp
        while True:
            decoding = self._by_rank([s for s in self.running if s.state == DECODE])
            limit = [self._decodes_in_budget(decoding[r]) if todo[r] else -1 for r in range(dp)]
            d, v = self._allocate_decodes(limit)
            decodes += d
            victims += v
            got = self._by_rank(d)
            left = self._by_rank([s for s in self.running if s.state == DECODE])
            redo = False
            for r in range(dp):
                if todo[r]:
                    deferred[r] = limit[r] < decoding[r]
                    todo[r] = not got[r] and limit[r] != decoding[r] and left[r] > 0
                    redo = redo or todo[r]
            if not redo:
                return decodes, victims, deferred

    def _continue_prefills(self, budget: list[int], chunks: list, late: list[Seq], decoding: bool,
                           closed: list[bool]) -> None:
        """Add the next chunk of each partly prefilled prompt to ``chunks`` while its
        attention-DP rank's ``budget`` lasts, with its blocks chunk by chunk (``_chunk_kv``,
        whose preemptions go to ``late``; a rank that cannot give a chunk its blocks stops
        there, ``closed``)."""
        for s in [s for s in self.running if s.state == PREFILL]:
            r = s.rank
            if s.state == PREFILL and not closed[r] and budget[r] > self.draft_slots:
                c = self._chunk(s, budget[r])
                if c == 0 < s.prompt - s.done:
                    continue    # (the budget left holds no whole block of it)
                if self.per_chunk and not self._chunk_kv(s, c, chunks, late, decoding):
                    closed[r] = True
                    continue
                self._reserve_output(s, c)
                chunks.append((s, c))
                budget[r] -= c + self.draft_slots

    # --- the iteration loop ----------------------------------------------------
    def _boundary(self, _ev=None) -> None:
        now = self.env.now
        self._take_back_read()
        if not self.plans_ahead:
            self._enter_completed()
        chunks, decodes = self._plan(now)
        self._enter_completed()
        if not chunks and not decodes and self.held:
            self._take_in(now)      # nothing in flight to plan ahead of
            chunks, decodes = self._plan(now)
        per_rank = self._by_rank(decodes)
        if self.expects_output:
            self._track_ratio(chunks, per_rank)
        self.queue_len.set(now, self.queued())
        self.in_flight = bool(chunks or decodes)
        if not chunks and not decodes:
            self.busy = False
            self.batch_size.set(now, len(self.running))
            self._release_outputs(0.0)
            return
        self.batch_size.set(now, len(self.running))
        computed = self._computed(chunks)
        prefill = [(c, s.done) for s, c in computed]
        sampling = len(decodes) + sum(1 for s, c in chunks if s.done + c == s.prompt)
        ctx = sum(s.kv + 1 for s in decodes)
        load = self._step_load(computed, per_rank)
        if self.lora is not None:
            dt = self._lora_step_time(prefill, len(decodes), ctx, sampling, load)
        elif self.class_tokens_per_step is None:
            dt = self.cm.step_time(prefill, len(decodes), ctx, sampling, load=load)
        else:   # per-class α: the step over the decoding sequences' mean E
            e = self._mean_tokens_per_step(Counter(map(self._tokens_per_step, decodes)))
            dt = self.cm.step_time(prefill, len(decodes), ctx, sampling, tokens_per_step=e, load=load)
        dt += self._take_reload()
        self._release_outputs(dt if chunks else 0.0)
        held = self.num_blocks - self.free
        filled = self._filled(decodes) if self.contiguous else 0
        self._step_started(now, held, filled)
        self._schedule(dt, lambda ev: self._end(chunks, decodes, dt, held, filled))
        if self.held:
            self._take_in(now)

    def _filled(self, decodes: list[Seq]) -> int:
        """Blocks the running sequences' tokens fill during the iteration
        (what paging would hold): a decoder's next token included, a prompt
        whole from admission."""
        bs = self.bs
        stepping = set(map(id, decodes))
        return sum(ceil_div(s.kv + (id(s) in stepping), bs) if s.state == DECODE else ceil_div(s.prompt, bs)
                   for s in self.running)

    def _end(self, chunks, decodes, dt: float, held: int, filled: int) -> None:
        now = self.env.now
        self.iterations += 1
        if self.window_extra or self.window_lag:
            self._chunks_ended(chunks)
        for s in decodes:
            self.gaps.add(now - s.last_token, now - s.last_token, 1)
            s.last_token = now
            s.kv += 1
            s.generated += 1
            if s.generated >= s.req.output_tokens:
                self._retire(s, now)
        for s, c in chunks:
            if self._prefill_chunk_done(s, c, now):
                s.state = DECODE
                if s.generated >= s.req.output_tokens:
                    self._retire(s, now)
        self._chunks_computed(chunks)
        self._drop_cancelled(now)
        self._account(dt, dt * held, held, len(decodes) + sum(c for _, c in chunks))
        if self.contiguous:
            self._account_filled(dt * filled, filled)
        self._boundary()

    def _retire(self, s: Seq, now: float) -> None:
        self._remove_running(s)
        self._finish_request(s, now)
