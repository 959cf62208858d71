"""The reference engine: one event per iteration, every request touched.

Deliberately simple and slow. It is the oracle the fast engine is tested
against (same per-request timestamps within float tolerance); when the two
disagree, this one is right. Keep it free of cleverness.
"""
from __future__ import annotations

from collections import Counter

from .base import ReplicaBase
from .blocks import ceil_div
from .sequence import DECODE, PREFILL, Seq


class ReferenceReplica(ReplicaBase):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.running: list[Seq] = []      # admission order
        self.own = 0                      # blocks sequences hold privately
        self.block_left = 0               # multi-step: decode iterations left in the current block

    @property
    def free(self) -> int:
        """Blocks neither held by a sequence (its own, its windows) nor pinned in
        the cache for one (unreferenced cache entries count as free: they are
        evicted on demand)."""
        return (self.num_blocks - self.own - self.window_blocks * len(self.running) - self.window_extra
                - (self.cache.pinned if self.cache is not None else 0))

    def kv_used_now(self, now: float) -> int:
        return self.num_blocks - self.free

    def _batch_len(self) -> int:
        return len(self.running)

    # --- planning one iteration ----------------------------------------------
    def _remove_running(self, v: Seq) -> None:
        self.running.remove(v)
        self.own -= v.blocks
        v.blocks = 0

    def _preempt_victim(self) -> Seq:
        if self.retracts:   # SGLang retracts decoding requests alone, by its own order
            return self._preempt(min((s for s in self.running if s.state == DECODE),
                                     key=lambda s: self._retraction_key(s.generated, s)))
        # The lowest class priority, the newest among equals (min keeps the first of equals).
        return self._preempt(min(reversed(self.running), key=lambda s: s.req.priority))

    def _outputs_left(self) -> int:
        clip = self.clip
        return sum(min(s.req.output_tokens - s.generated, clip) for s in self.running if s.state == DECODE)

    def _retractable(self) -> tuple[int, int]:
        clip = self.clip
        held = sum(s.req.input_tokens + s.generated for s in self.running)
        top = max((s.req.input_tokens + min(s.req.output_tokens, clip) for s in self.running), default=0)
        return held, top

    def _decoder_totals(self) -> tuple[int, int, int]:
        decoding = [s for s in self.running if s.state == DECODE]
        return len(decoding), sum(s.generated for s in decoding), sum(s.req.output_tokens for s in decoding)

    def _allocate_decodes(self, limit: int = -1) -> tuple[list[Seq], list[Seq]]:
        """Blocks for the next token of the running decodes, the first ``limit``
        of them (-1: all), preempting from the tail where they do not fit."""
        decodes, victims = [], []
        stepping = [s for s in self.running if s.state == DECODE]
        for s in stepping if limit < 0 else stepping[:limit]:
            if s not in self.running:
                continue
            # (none when a contiguous reservation already holds the token)
            need = max(0, ceil_div(s.kv + 1 - s.pin_blocks * self.bs, self.bs) - s.blocks)
            preempted_self = False
            while need > self.free:
                v = self._preempt_victim()
                victims.append(v)
                if v is s:
                    preempted_self = True
                    break
                if v in decodes:    # a lower class already given its token (vLLM unschedules it too)
                    decodes.remove(v)
            if preempted_self:
                continue
            self.own += need
            s.blocks += need
            decodes.append(s)
        self._requeue(victims)
        return decodes, victims

    def _hold(self, s: Seq, blocks: int) -> None:
        s.blocks += blocks
        self.own += blocks

    def _free_for_chunk(self, decoding: bool) -> int:
        return self.free    # (the decodes' blocks were given first)

    def _admit(self, s: Seq, total: int, m, now: float) -> int:
        self.waiting.popleft()
        taken = self._attach(s, total, m)
        self.own += s.blocks
        s.state = PREFILL
        self._admit_stamp(s, now)
        self.running.append(s)
        return taken

    def _plan(self, now: float):
        cfg = self.cfg
        budget = cfg.max_num_batched_tokens
        chunks: list[tuple[Seq, int]] = []
        decodes: list[Seq] = []
        self._start_plan()
        if cfg.scheduler == "static":
            if not self.running:
                chunks = self._admit_whole(now, self.free, reserve_output=True)
            else:
                # Blocks for the whole sequence were reserved at admission.
                decodes = [s for s in self.running if s.state == DECODE]
            return chunks, decodes
        if not cfg.chunked_prefill and cfg.mixes_prefill:
            # Whole prompts in flight with the decodes (TensorRT-LLM without chunking).
            decodes, victims, deferred = self._decodes_within_budget()
            self._trim_cache(self.free)
            if not victims and not deferred:
                chunks = self._admit_whole(now, self.free, False, len(decodes))
            return chunks, decodes
        if not cfg.chunked_prefill:
            # vLLM v0 without chunking: a prefill-only iteration whenever a
            # waiting prompt can be admitted; decodes stall meanwhile. With
            # multi-step scheduling only between blocks of decode iterations.
            if self.block_left == 0 or not any(s.state == DECODE for s in self.running):
                self.block_left = 0
                chunks = self._admit_whole(now, self.free, reserve_output=False)
                if chunks:
                    return chunks, []
            decodes, _ = self._allocate_decodes()
            self._trim_cache(self.free)
            if decodes:
                self.block_left = (self.block_left or cfg.num_scheduler_steps) - 1
            return [], decodes
        if not cfg.mixes_prefill:
            # Chunks in prefill-only iterations (SGLang without --enable-mixed-chunk).
            self._trim_cache(self.free)
            late: list[Seq] = []
            budget = self._continue_prefills(budget, chunks, late, False)
            if not late:
                self._admit_chunked(now, self.free, budget, chunks)
            if chunks:
                return chunks, []
            decodes, _ = self._allocate_decodes()
            self._trim_cache(self.free)
            return [], decodes
        decodes, victims, deferred = self._decodes_within_budget()
        self._trim_cache(self.free)
        if deferred:
            return chunks, decodes
        late = []
        budget = self._continue_prefills(self._after_decodes(len(decodes)), chunks, late, True)
        if late:    # a prompt's chunk preempted: the decodes it took lose their tokens
            decodes = [s for s in decodes if s.state == DECODE]
        elif not victims:
            self._admit_chunked(now, self.free, budget, chunks)
        return chunks, decodes

    def _decodes_within_budget(self) -> tuple[list[Seq], list[Seq], bool]:
        """(decodes the iteration runs, preempted, whether the budget left decodes
        for the next iteration): the oldest the budget holds (``_decodes_in_budget``),
        given their blocks; if preemption took every one of them, the budget is
        dealt again over the decodes left (vLLM's priority policy hands a
        preempted request's tokens back to the walk)."""
        victims: list[Seq] = []
        while True:
            decoding = sum(1 for s in self.running if s.state == DECODE)
            limit = self._decodes_in_budget(decoding)
            decodes, v = self._allocate_decodes(limit)
            victims += v
            if decodes or limit == decoding or not any(s.state == DECODE for s in self.running):
                return decodes, victims, limit < decoding

    def _continue_prefills(self, budget: int, chunks: list, late: list[Seq], decoding: bool) -> int:
        """Add the next chunk of each partly prefilled prompt to ``chunks`` while
        ``budget`` lasts, with its blocks chunk by chunk (``_chunk_kv``, whose
        preemptions go to ``late``); the budget left."""
        for s in [s for s in self.running if s.state == PREFILL]:
            if s.state == PREFILL and budget > self.draft_slots:
                c = self._chunk(s, budget)
                if self.per_chunk and not self._chunk_kv(s, c, chunks, late, decoding):
                    break
                self._reserve_output(s, c)
                chunks.append((s, c))
                budget -= c + self.draft_slots
        return budget

    # --- the iteration loop ----------------------------------------------------
    def _boundary(self, _ev=None) -> None:
        now = self.env.now
        chunks, decodes = self._plan(now)
        if not chunks and not decodes and self.held:
            self._take_in(now)      # nothing in flight to plan ahead of
            chunks, decodes = self._plan(now)
        if self.expects_output:
            self._track_ratio(bool(chunks), bool(decodes))
        self.queue_len.set(now, self.queued())
        self.in_flight = bool(chunks or decodes)
        if not chunks and not decodes:
            self.busy = False
            self.batch_size.set(now, len(self.running))
            self._release_outputs(0.0)
            return
        self.batch_size.set(now, len(self.running))
        prefill = [(c, s.done) for s, c in chunks]
        sampling = len(decodes) + sum(1 for s, c in chunks if s.done + c == s.prompt)
        ctx = sum(s.kv + 1 for s in decodes)
        per_rank = [0] * (1 if self.placement is None else self.placement.dp)
        for s in decodes:
            per_rank[s.rank] += 1
        load = self._step_load(chunks, per_rank)
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
        self._drop_cancelled(now)
        self._account(dt, dt * held, held, len(decodes) + sum(c for _, c in chunks))
        if self.contiguous:
            self._account_filled(dt * filled, filled)
        self._boundary()

    def _retire(self, s: Seq, now: float) -> None:
        self._remove_running(s)
        self._finish_request(s, now)
