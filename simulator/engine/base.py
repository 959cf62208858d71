"""What every replica engine shares: identity, admission checks, bookkeeping.

Both engines implement the same scheduling semantics (see
docs/how-it-works.md, "Scheduling semantics"); only how they advance time
differs. Events: arrivals are scheduled URGENT, iteration boundaries NORMAL,
so every arrival at time t is visible to a boundary at time t.
"""
from __future__ import annotations

import math
from typing import Callable, Iterator, Optional, Union

import simpy
from mypy_extensions import mypyc_attr
from simpy.events import NORMAL

from ..costmodel import CostModel
from ..costmodel.rank_load import RankLoad
from ..costmodel.speculative import SpeculativeCostModel
from ..hybrid_kv import SlidingGroups, admission_cap, frees_when_processed
from ..metrics.gaps import GapLog
from .blocks import ceil_div, kv_usage
from .config import EngineConfig
from .dp_placement import RankPlacement, rank_ids
from .kv_tiers import OffloadPlan
from .lora import AdapterSlots, LoraPlan
from .prefix_cache import Match, PrefixCache
from .request_length import LengthLimit, length_limit
from .sequence import DECODE, DONE, PREFILL, WAITING, Seq, finish
from .wait_queue import WaitQueue
from .wake import call_later
from workloads.rejection import Rejection
from workloads.request import Request, Status


#: What a replica's iteration times come from (the speculative model wraps a plain one).
StepCost = Union[CostModel, SpeculativeCostModel]
#: A count or a float: kept as given (a compiled ``float`` would turn 3 into 3.0).
Number = Union[int, float]


class TimeAverage:
    """Time-weighted mean and max of a piecewise-constant quantity."""

    __slots__ = ("area", "last_t", "value", "max", "t0")

    def __init__(self, t0: float = 0.0) -> None:
        self.area: float = 0.0
        self.last_t: float = t0
        self.t0: float = t0
        self.value: Number = 0.0
        self.max: Number = 0.0

    def set(self, now: float, value: Number) -> None:
        self.area += (now - self.last_t) * self.value
        self.last_t = now
        self.value = value
        if value > self.max:
            self.max = value

    def mean(self, now: float) -> float:
        span = now - self.t0
        return (self.area + (now - self.last_t) * self.value) / span if span > 0 else 0.0


def decode_budget_tokens(cfg: EngineConfig, cm: StepCost, decoding: int) -> int:
    """Budget tokens ``decoding`` running decodes take from one iteration: each
    its token, the draft model's slots charged per request
    (``draft_slots_per_request``) and, where the scheduler counts them
    (``draft_tokens_in_budget``: vLLM V1, TensorRT-LLM), the draft tokens it
    carries for the target to verify beside the iteration's prompts (none
    where ``mixed_step_drafts`` is off). The engines charge it every iteration,
    leaving the decodes past the budget for the next (``_decodes_in_budget``),
    and a pool's set-up holds one decode to it, so the two agree."""
    drafts = (cm.draft_tokens(decoding, prefilling=True)
              if cfg.draft_tokens_in_budget and isinstance(cm, SpeculativeCostModel) else 0)
    return decoding * (1 + drafts + cfg.draft_slots_per_request)


@mypyc_attr(allow_interpreted_subclasses=True)   # the reference engine and test probes subclass it
class ReplicaBase:
    """One model replica: a queue, a running batch and a paged KV cache."""

    def __init__(self, env: simpy.Environment, index: int, cm: StepCost, cfg: EngineConfig, num_blocks: int,
                 gaps: GapLog, on_done: Optional[Callable[[Request], None]] = None, max_model_len: int | None = None,
                 id_block_tokens: int | None = None, kv_budgets: Optional[dict[str, int]] = None,
                 offload: Optional[OffloadPlan] = None, lora: Optional[LoraPlan] = None,
                 rank_tokens: Optional[int] = None, windows: Optional[SlidingGroups] = None,
                 rank_blocks: Optional[int] = None, dp: int = 1):
        self.env = env
        self.index = index
        # A speculative pool's mixed iterations draft as the engine's stack does (EngineConfig.mixed_step_drafts).
        self.cm: StepCost = cm.with_mixed_step_drafts(cfg.mixed_step_drafts) if isinstance(cm, SpeculativeCostModel) \
            else cm
        self.cfg = cfg
        # The most one sequence's prompt advances in an iteration: its attention-DP rank's token
        # budget (EngineConfig.rank_tokens), else the replica's.
        self.rank_tokens: int = rank_tokens or cfg.max_num_batched_tokens
        # The longest prompt the stack takes, where it answers a longer one with an error (TensorRT-LLM
        # without chunked prefill: its rank's budget); None: no such cap.
        self.longest_prompt: Optional[int] = cfg.prompt_cap(self.rank_tokens)
        # Budget tokens a separate draft model takes beside each request an iteration schedules
        # (vLLM from 0.28, EngineConfig.draft_budget_per); 0 where none is charged so.
        self.draft_slots: int = cfg.draft_slots_per_request
        self.bs = cfg.block_size
        self.num_blocks = num_blocks
        # The most one request can ever hold: its attention-DP rank's pool (PoolSetup.rank_blocks),
        # else the replica's. Each rank of vLLM, SGLang and TensorRT-LLM has its own KV pool and a
        # request stays on its rank, so the replica's other ranks never lend it blocks.
        # (0 is a bound: a rank whose only block is vLLM's null block holds nothing for a request)
        self.rank_blocks: int = rank_blocks if rank_blocks is not None else num_blocks // dp
        # Each attention-DP rank is a scheduler of its own (SGLang's DP schedulers, vLLM's DP engine
        # cores, TensorRT-LLM's attention-DP ranks) over its own share of the replica's blocks, its
        # pool: it admits, grows and preempts the requests placed on it against that pool alone,
        # under its own share of the sequence and token limits (fleet/setup.py rank_limits gives the
        # replica dp times a rank's). The blocks its requests pin in the prefix cache, hold in the
        # sliding-window groups beyond their windows and reserve for their outputs are counted by
        # rank; the rest of a rank's usage is the engine's (``_rank_free``).
        self.dp = dp
        self.rank_pool: int = num_blocks // dp
        self.rank_seqs: int = max(1, cfg.max_num_seqs // dp)
        self.rank_budget: int = cfg.max_num_batched_tokens // dp
        self.rank_prefill_cap: Optional[int] = None if cfg.max_prefill_tokens is None \
            else cfg.max_prefill_tokens // dp
        # Where prompts run in iterations of their own (SGLang without --enable-mixed-chunk), whether each
        # rank picks its own: a rank with a prompt to run prefills while the others decode, the ranks
        # joining only in the MoE layers (scheduler.py get_next_batch_to_run, then
        # prepare_mlp_sync_batch gathering every rank's tokens and forward mode; 0.5.4-0.5.23). Not
        # under speculative decoding, where a rank with no prompt runs an idle batch while any rank
        # prefills ("prefill and decode batches will not be mixed when spec and dp-attn is enabled"),
        # nor under multi-step scheduling, which decides for the replica between blocks of decodes.
        self.own_modes: bool = dp > 1 and not isinstance(cm, SpeculativeCostModel) and cfg.num_scheduler_steps == 1
        self.rank_pinned: list[int] = [0] * dp
        self.rank_window_extra: list[int] = [0] * dp
        # A disaggregated pair's prefill replica keeps a finished prompt's KV until the decode side has
        # read it (vLLM's NIXL connector: request_finished's delay_free_blocks, freed on the decode
        # side's notice; SGLang: disagg_prefill_inflight_queue, release_kv_cache on KVPoll.Success;
        # TensorRT-LLM: DISAGG_CONTEXT_TRANS_IN_PROGRESS until the transfer completes), so a hand-off
        # waiting for its link holds prefill memory: by request id, the sequence (its cache pin kept)
        # and the blocks it held of its own, given back by ``release_handoff``.
        self.holds_handoffs: bool = False
        self.handing: dict[int, tuple[Seq, int, int]] = {}
        self.rank_handing: list[int] = [0] * dp
        self.handing_blocks: int = 0
        # Hand-offs read while an iteration ran: their blocks come back as the scheduler next plans
        # (vLLM's update_from_output takes finished_sending then; SGLang's loop polls its inflight
        # queue once an iteration).
        self.read: list[int] = []
        # Blocks each running sequence's sliding-window layers hold of the shared pool beside its
        # own (vLLM's hybrid KV cache: simulator.hybrid_kv), taken at admission and given back when
        # it stops running: a window, recycled as it slides, the same for every sequence.
        self.window_blocks: int = 0 if windows is None else windows.steady
        # The groups those windows are in, where vLLM's allocator (paged, on demand) charges a
        # prompt's blocks in them too; None otherwise (the other admissions are other stacks',
        # whose pools hold no shared windows: a window a sequence).
        self.windows = windows if cfg.kv_admission == "on_demand" and not cfg.contiguous else None
        # What prompts hold in those groups beyond their windows (Σ Seq.window_extra): a chunk's
        # blocks and the window behind it while its iteration runs (prompt_kv: whole, the whole
        # prompt's until it completes).
        self.window_extra = 0
        self.max_model_len = max_model_len or cfg.longest_request(cm.model)
        # From vLLM 0.20 (sliding_window_kv: capped) the gate asks a group for no more blocks than a
        # request holds in it, and then tests the prompt's first chunk apart; 0: the whole prompt.
        self.window_cap = 0 if self.windows is None else admission_cap(self.windows, cfg, self.max_model_len,
                                                                        self.rank_tokens)
        # From vLLM 0.26 under async scheduling (sliding_window_kv: processed) a chunk's blocks below
        # the window go back one iteration later: those whose chunks ran in the iteration that ended,
        # kept through the next (Seq.window_from).
        self.window_lag = self.windows is not None and frees_when_processed(cfg)
        self.lingering: list[Seq] = []
        self.gaps = gaps
        self.on_done = on_done
        self.waiting = WaitQueue()
        self.busy = False
        self.next_order = 0
        self.outstanding = 0
        self.outstanding_tokens = 0
        self.preemptions = 0
        self.busy_time: float = 0.0
        self.tokens_processed = 0           # prompt + decode tokens run through the model (for MFU)
        self.iterations = 0
        self.queue_len = TimeAverage(env.now)     # a replica may start mid-run (autoscaling)
        self.batch_size = TimeAverage(env.now)
        self.t0 = env.now
        self.kv_used_area: float = 0.0
        self.kv_used_max = 0
        # Contiguous KV: blocks are reserved at admission (kv_used_*); what
        # the sequences' tokens fill of them (what paging would hold) apart.
        self.contiguous = cfg.contiguous
        self.kv_filled_area: float = 0.0
        self.kv_filled_max = 0
        self.t_end: float = 0.0                    # when its last request ended (stale timer events may follow)
        self.seqs: dict[int, Seq] = {}      # live sequences by request id (for cancel)
        self.cancelled: list[Seq] = []      # running ones leaving at the end of this iteration
        self.cache: Optional[PrefixCache] = None
        # Per-class caps on KV blocks; None = no class has a cap. A class
        # holds its running requests (each charged its whole final footprint
        # at admission, so a class can never outgrow its cap mid-decode) plus
        # the unreferenced cache entries it created (PrefixCache owners).
        self.kv_budgets = kv_budgets or None
        self.kv_charged: dict[str, int] = {}
        # Admission that reserves each request's whole output (TensorRT-LLM's
        # GUARANTEED_NO_EVICT): the blocks running sequences will hold of their
        # own when they finish. With the blocks they pin in the prefix cache it
        # never exceeds num_blocks, so decode growth always fits.
        self.no_evict = cfg.reserves_output
        self.reserved: list[int] = [0] * dp      # by attention-DP rank
        # vLLM V1's prompt KV (prompt_kv: per_chunk): admitted on its whole prompt's blocks, a chunked
        # prompt holds only those of the chunks scheduled so far (``_chunk_kv``).
        self.per_chunk = cfg.per_chunk_kv
        # SGLang's admission on the running requests' expected output
        # (kv_admission: expected_output): the ratio is ratio_base after
        # ratio_steps decode-only iterations, kept as the pair so that both
        # engines, one stepping and one skipping, compute the same float. By
        # attention-DP rank: each DP scheduler keeps its own (scheduler.py
        # new_token_ratio, 0.5.22 NewTokenRatioTracker), decayed by its own decode
        # batches and set by its own retractions.
        self.expects_output = cfg.expects_output
        self.ratio_init: float = 0.7 if cfg.new_token_ratio_init is None else cfg.new_token_ratio_init
        self.ratio_min: float = min(self.ratio_init * cfg.new_token_ratio_min_factor, 1.0)
        self.ratio_decay: float = (self.ratio_init - self.ratio_min) / cfg.new_token_ratio_decay_steps
        self.ratio_base: list[float] = [self.ratio_init] * dp
        self.ratio_steps: list[int] = [0] * dp
        self.clip = cfg.output_estimate_clip
        # By attention-DP rank: outputs of the prompts the plan being made completes (unscaled), and
        # Σ min(remaining output, clip) over the decoders this plan (-1: not yet summed).
        self.pass_reserved: list[int] = [0] * dp
        self.left_now: list[int] = [-1] * dp
        self.retracted: list[bool] = [False] * dp      # by attention-DP rank: the plan being made preempted there
        # By attention-DP rank: a waiting request failed the KV test since one of the rank's running
        # requests last left (SGLang's batch_is_full, EngineConfig.full_until_leave): it admits nothing new.
        self.full_until_leave = cfg.full_until_leave and cfg.expects_output
        self.kv_full: list[bool] = [False] * dp
        # SGLang's decode server (kv_admission: decode_reservation): reserve_tokens
        # of KV kept per running request; the running requests' Σ prompt + output
        # so far and largest prompt + expected output, summed once a plan (-1: not yet).
        self.reserves_decode = cfg.reserves_decode
        self.retracts = cfg.expects_output or cfg.reserves_decode    # SGLang's retraction order
        self.newest_first = cfg.retraction_order == "newest"
        self.reserve_tokens = cfg.reserved_decode_tokens
        # SGLang and TensorRT-LLM serve a request longer than its rank's pool with the output cut to it
        # (EngineConfig.clips_output): the longest request it serves (0: no cut), SGLang's max_req_len or
        # TensorRT-LLM's max_seq_len (seq_len) as its executor lengthens it for its overlap scheduler and
        # drafts and its KV cache manager lowers it to the pool, and how many outputs were cut. The
        # length a request is held to, counted as the stack counts it, is the scenario's workload
        # check's (engine/request_length.py: SGLang's draft slots, TensorRT-LLM's executor max_seq_len).
        drafts = cm.spec if isinstance(cm, SpeculativeCostModel) else None
        self.length: LengthLimit = length_limit(cfg, drafts, self.max_model_len)
        self.cuts_to_seq_len = self.length.cuts_output
        pool_tokens = self.rank_blocks * self.bs
        self.request_cap = (min(self.length.tokens, pool_tokens) if self.cuts_to_seq_len
                            else min(self.max_model_len - 1, pool_tokens - 1) if cfg.clips_output else 0)
        self.outputs_clipped = 0
        self.ret_now: list[int] = [-1] * dp      # by attention-DP rank
        self.top_now: list[int] = [0] * dp
        if cfg.prefix_cache and id_block_tokens:
            cap = cfg.prefix_cache_capacity_tokens
            self.cache = PrefixCache(id_block_tokens, self.bs, cap if isinstance(cap, int) else None,
                                     cfg.cache_unbounded)
            if self.kv_budgets is not None and not cfg.cache_unbounded:
                self.cache.track_owners()   # an unbounded cache lives outside KV memory: nothing to charge
            if offload is not None:
                self.cache.tiers = offload.make(id_block_tokens, self.bs)
        # TensorRT-LLM's capacity scheduler holds a prompt back a pass where it would compute the blocks
        # a prompt admitted before it in the pass is computing (EngineConfig.defers_shared_context); its
        # check is off for a model whose layers attend over more than one window (isVariableWindow).
        model = cm.model
        self.defers_shared: bool = (cfg.defers_shared_context and self.cache is not None
                                    and not (model.num_sliding_layers and model.num_full_attention_layers))
        self.defers_behind_chunks: bool = self.defers_shared and cfg.defers_behind_chunks
        # Where a prompt enters the prefix cache only once computed (prompt_cached: computed, SGLang's
        # radix tree), admission pins its hit alone and the rest stays its own until entered
        # (``_enter_computed``); the prompts the last iteration completed, entered once the next plan
        # is made where the stack plans ahead (``_enter_completed``).
        self.enters_computed: bool = self.cache is not None and cfg.prompt_cached == "computed"
        # Where it enters only as its request ends (prompt_cached: released, TensorRT-LLM before #6683), the
        # same pin, and what it computed is entered as its pin is released (``_release_cache``).
        self.enters_on_release: bool = self.cache is not None and cfg.prompt_cached == "released"
        self.completed: list[Seq] = []
        # With dp > 1 the stack's DP front end places each arrival on one attention-DP rank for its
        # whole life (engine/dp_placement.py), whose prefix cache it uses and whose prompt chunks and
        # decodes it runs, cache or none; None: one rank.
        self.placement: Optional[RankPlacement] = RankPlacement(cfg.dp_placement, dp) if dp > 1 else None
        # Where the front end does not place on arrival (TensorRT-LLM, ``placement.fetches``), the
        # requests no rank has fetched yet, in the replica's one queue (``_fetch``); their rank is -1.
        self.central = WaitQueue()
        self._fetches = self.placement is not None and self.placement.fetches
        # Ranks of the requests placed before they arrive (:meth:`place_ahead`), by id.
        self.ahead: dict[int, int] = {}
        # Seconds of KV reloads from the offload tiers that the next iteration
        # waits for (admissions add them, the iteration they start takes them).
        self.reload_s: float = 0.0
        # Speculative decoding with per-class acceptance rates: class -> tokens
        # per step (E) for the classes that override the pool's (see
        # costmodel/speculative.py); None = one E for the whole pool.
        self.class_tokens_per_step: Optional[dict[str, float]] = getattr(cm, "class_tokens_per_step", None) or None
        # Outputs the client has not seen yet (output_after_next_launch): a
        # first token (False) or a request's end (True), released when the
        # next iteration has been launched.
        self.unsent: list[tuple[Request, bool]] = []
        # Arrivals the scheduler has not taken in yet: with schedule_ahead the
        # iteration after the one in flight is already planned when they
        # arrive, so they wait for the next plan (see ``_take_in``).
        self.plans_ahead = cfg.plans_ahead
        self.held: list[Seq] = []
        self.in_flight = False      # an iteration (or decode stretch) is running
        # The one iteration in flight: its start, and the KV blocks it holds and (contiguous) fills, for
        # the share of it a warm start's lead-in keeps (``done_before``).
        self.step_t0 = 0.0
        self.step_held = 0
        self.step_filled = 0
        # LoRA adapters (engine/lora.py): the batch's, and the GPU and host caches.
        self.lora: Optional[AdapterSlots] = None if lora is None else AdapterSlots(lora)

    # --- arrivals ----------------------------------------------------------
    def can_ever_serve(self, req: Request) -> Optional[Rejection]:
        """Why a request could not complete even alone on this replica (None: it could), which
        is then rejected on arrival rather than left to starve the queue: alone on its
        attention rank, whose pool (``rank_blocks``) is all it can hold. The first reason
        found is the one given, those no capacity mends (the request's, the configuration's)
        first, and the pool's before its class's share of it."""
        if self.length.exceeded(req.input_tokens, req.output_tokens):
            return Rejection.TOO_LONG          # (TensorRT-LLM: no output token left below max_seq_len, an error)
        if self.length.prompt_refused(req.input_tokens, self.request_cap):
            return Rejection.TOO_LONG          # SGLang's validate_input_length answers with an error
        output = self.served_output(req)
        longest = self.longest_prompt     # a generation-only request, prefilled elsewhere, passes
        if longest is not None and not req.preloaded and req.input_tokens > longest:
            return Rejection.OVER_BUDGET       # TensorRT-LLM answers 400
        if self.contiguous:
            limit = self.cfg.max_new_tokens
            if limit is not None and output > limit:
                return Rejection.OUTPUT_OVER_LIMIT     # more than the server reserves (TGI answers 422)
            blocks = self._reserved_blocks(req)
        else:
            need = req.input_tokens + output - 1
            if self.cfg.scheduler == "static" or self.no_evict:
                need = req.input_tokens + output
            blocks = ceil_div(max(need, 1), self.bs)
            if self.retracts and output > self._retraction_room(req.input_tokens):
                return Rejection.EXCEEDS_KV
        if self.windows is not None:    # nor past the admission gate's windows: vLLM would wait forever
            own = blocks if self.cfg.scheduler == "static" or self.no_evict else ceil_div(req.input_tokens, self.bs)
            if self._gate_alone(req.input_tokens, own) > self.rank_blocks:
                return Rejection.WINDOW_GATE
        if blocks + self.window_blocks > self.rank_blocks:
            return Rejection.EXCEEDS_KV
        # nor past its class's KV cap, a share of the pool: asked last, as a request the pool
        # cannot hold passes its share too and no share would serve it
        if self.kv_budgets is not None:
            cap = self.kv_budgets.get(req.klass)
            if cap is not None and self._footprint(req, output) > cap:
                return Rejection.OVER_CLASS_KV_CAP
        return None

    def served_output(self, req: Request) -> int:
        """The output tokens ``req`` is served: all of them, but on a stack that cuts a request to its
        rank's pool (SGLang's max_new_tokens = min(max_new_tokens, max_req_len - prompt - 1),
        TensorRT-LLM's max_tokens = min(max_tokens, max_seq_len - prompt)) no more than the pool holds
        beside the prompt. Where llmsim's own bound for such a stack (its retraction's, a block's slack
        beside the decode reserve) is tighter, that bound: by at most a page of output. A prompt the
        cut leaves no output is given one token, so that the pool's check refuses it (exceeds_kv), as
        the stack answers it with an error."""
        if not self.request_cap:
            return req.output_tokens
        room = self.request_cap - req.input_tokens - (0 if self.cuts_to_seq_len else 1)
        if self.retracts:
            room = min(room, self._retraction_room(req.input_tokens))
        return max(1, min(req.output_tokens, room))

    def _retraction_room(self, prompt: int) -> int:
        """The most output a request of ``prompt`` tokens can reach alone on its rank where the stack
        retracts (SGLang): its prompt (or, readmitted, prompt and output so far, in whole blocks) and
        expected output must be less than the pool, on the decode server beside its reserve, so a
        block's slack more than the whole request bounds both."""
        reserve = self.reserve_tokens if self.reserves_decode else 0
        return (self.rank_blocks - self.window_blocks) * self.bs - reserve - self.bs - prompt

    def _gate_alone(self, prompt: int, own: int) -> int:
        """Blocks a prompt of ``prompt`` tokens, none cached, whose admission reserves ``own``
        blocks of its own asks of an empty pool with sliding-window groups: the gate's and,
        past a capped gate, its first chunk's (``_admission``). The prompt's: its readmission
        after a preemption asks more, but a request never preempted is served
        (``_never_readmitted``)."""
        assert self.windows is not None
        need = own + self._gate_windows(prompt, 0)
        if self.window_cap:
            need = max(need, self._first_chunk_need(prompt, 0, 0, self.cfg.max_num_batched_tokens))
        return need

    def _never_readmitted(self, s: Seq) -> bool:
        """Whether the waiting ``s``, preempted, can never pass the admission gate again: its
        prompt and output so far, with what its prefix cache still holds, ask more than the
        pool's blocks with nothing else running (they only shrink as others evict them). vLLM
        would wait for it at the head of its queue forever, the requests behind it too; it ends
        STRANDED instead, counted apart (``request_status.stranded``, the load verdict), and
        those behind it are served."""
        if self.windows is None or self._rank_len(s.rank) or not s.req.preemptions:
            return False
        return self._admission(s, budget=self.cfg.max_num_batched_tokens if self.per_chunk else 0)[0] \
            > self.rank_blocks

    def _reserved_blocks(self, req: Request) -> int:
        """Contiguous KV: the blocks ``req`` holds from admission to its end,
        for its prompt and the most it may generate."""
        limit = self.cfg.max_new_tokens
        tokens = self.max_model_len if limit is None else min(self.max_model_len, req.input_tokens + limit)
        return ceil_div(tokens, self.bs)

    def submit(self, req: Request) -> None:
        now = self.env.now
        req.replica = self.index
        why = self.can_ever_serve(req)
        if why is not None:
            self.unplace(req)
            req.reject(why, now)
            self.t_end = max(self.t_end, now)
            if self.on_done:
                self.on_done(req)
            return
        served = self.served_output(req)
        if served < req.output_tokens:
            req.output_tokens = served
            self.outputs_clipped += 1
        self.outstanding += 1
        self.outstanding_tokens += req.input_tokens
        seq = Seq(req)
        p = self.placement
        if p is not None:
            rank = self.ahead.pop(req.id, -1)
            if rank < 0 and not p.fetches:
                rank = p.place(req.id, req.input_tokens, self._kv_usage(now) if p.reads_usage else None)
            self._on_rank(seq, rank)
        self.seqs[req.id] = seq
        if self.in_flight and self.plans_ahead:
            self.held.append(seq)
            self.queue_len.set(now, self.queued())
            if len(self.held) == 1:
                self._cut(now)      # the scheduler takes it in at the end of the iteration in flight
            return
        self._enqueue(seq)
        self.queue_len.set(now, self.queued())
        if not self.busy:
            self.busy = True
            self._schedule(0.0, self._boundary)
        elif self.dp > 1 or self.waiting[0] is seq or self._unblocked(seq):
            # Only a new head of the queue can change the plan: behind a
            # waiting head nothing is admitted before it (unless the head
            # waits for its LoRA adapter, which the scheduler skips, or it
            # waits on another attention-DP rank, whose scheduler is another,
            # or for a rank to fetch it).
            self._on_arrival_while_busy(now)

    def _on_rank(self, seq: Seq, rank: int) -> None:
        """``seq`` is on attention-DP rank ``rank`` (-1: in the replica's queue, no rank yet):
        its block ids become the ones that rank's cache knows."""
        seq.rank = rank
        if rank >= 0 and seq.req.blocks and self.cache is not None:
            seq.ids = rank_ids(seq.req.blocks, rank, self.dp)

    def _enqueue(self, seq: Seq) -> None:
        """Queue an arrival: on its rank, or in the replica's queue until fetched (``_fetch``)."""
        (self.central if seq.rank < 0 else self.waiting).append(seq)

    def _fetch(self) -> None:
        """TensorRT-LLM's attention-DP fetch at the start of an iteration (executor_request_queue.py
        ``_fetch_new_requests_attention_dp`` / ``_fetch_and_process_requests``, py_executor.py
        ``_fetch_new_requests``): the replica's queue hands over, in its order, at most dp x
        max_num_active_requests less every rank's active requests (``fetch_limit``), and those
        are assigned to ranks together, longest first (``RankPlacement.assign``), each joining
        its rank's queue; the rest wait for a later iteration."""
        p, central = self.placement, self.central
        if p is None or not central:
            return
        n = min(len(central), p.fetch_limit(self.rank_seqs))
        if n <= 0:
            return
        fetched = [central.popleft() for _ in range(n)]
        for i, r in p.assign([s.req.input_tokens for s in fetched]):
            self._on_rank(fetched[i], r)
            self.waiting.append(fetched[i])

    def _fetchable(self) -> bool:
        """Whether the next iteration's fetch would take a request from the replica's queue."""
        p = self.placement
        return bool(self.central) and p is not None and p.fetch_limit(self.rank_seqs) > 0

    def _on_arrival_while_busy(self, now: float) -> None:
        """Hook for the fast engine to cut a skipped stretch short."""

    # --- LoRA adapters (engine/lora.py) -----------------------------------------
    def _unblocked(self, s: Seq) -> bool:
        """A LoRA request whose adapter the batch has room for (False without LoRA)."""
        return self.lora is not None and not self.lora.blocked(s.req.adapter)

    def _next_waiting(self, skipped: list[Seq], closed: list[bool]) -> Optional[Seq]:
        """The waiting sequence the scheduler tries next. vLLM skips one whose
        LoRA adapter would take the batch past ``max_loras``: it is moved to
        ``skipped`` and put back in its place by :meth:`_unskip`; so is one
        whose attention-DP rank admits nothing more this plan (``closed``: its
        own scheduler stopped at an earlier request of its, FCFS within a rank,
        while the other ranks' schedulers go on)."""
        w, lora = self.waiting, self.lora
        while w:
            s = w[0]
            if closed[s.rank]:
                skipped.append(w.popleft())
                continue
            if self._never_readmitted(s):
                w.popleft()
                self.queue_len.set(self.env.now, self.queued())
                self._end_request(s, self.env.now, Status.STRANDED)
                continue
            if lora is None or not lora.blocked(s.req.adapter):
                return s
            skipped.append(w.popleft())
        return None

    def _unskip(self, skipped: list[Seq]) -> None:
        for s in reversed(skipped):
            self.waiting.appendleft(s)

    def _first_candidate(self) -> Optional[Seq]:
        """The waiting sequence the next plan would try first (None: every one is skipped)."""
        if self.lora is None:
            return self.waiting[0]
        for s in self.waiting:
            if not self.lora.blocked(s.req.adapter):
                return s
        return None

    def _lora_step_time(self, prefill: list[tuple[int, int]], decode_batch: int, context: float,
                        sampling: int, load: Optional[RankLoad]) -> float:
        """An iteration's time with the LoRA kernels over the batch's adapters."""
        cm = self.cm
        assert isinstance(cm, CostModel) and self.lora is not None   # LoRA pools do not speculate
        return cm.step_time(prefill, decode_batch, context, sampling, adapters=self.lora.distinct, load=load)

    @staticmethod
    def _computed(chunks: list) -> list:
        """The prompt chunks an iteration prices: not one of no tokens, a decode server's handed-over
        prompt whose KV arrived whole (SGLang merges such a request into its running batch without a
        forward, ``process_prebuilt``): priced as a prefill over its whole context, it cost each
        iteration it joined a mixed step's price (a DeepSeek-R1 decode server's TPOT 44 → 53 ms)."""
        return [(s, c) for s, c in chunks if c]

    def _step_load(self, chunks: list, decodes: list[int]) -> Optional[RankLoad]:
        """Where an iteration's work sits among the attention-DP ranks, each prompt chunk on its
        request's rank and ``decodes[r]`` decodes on rank r, for the cost model to price the
        busiest rank (None: one rank). Each rank schedules only the requests placed on it: vLLM's
        DP engine cores, SGLang's DP schedulers (data_parallel_controller.py), TensorRT-LLM's
        attention-DP ranks (executor_request_queue.py), stepping together through the MoE layers."""
        if self.placement is None:
            return None
        return RankLoad([s.rank for s, _ in chunks], decodes)

    def queued(self) -> int:
        """Requests waiting for a batch slot, those not yet taken in included."""
        return len(self.waiting) + len(self.held) + len(self.central)

    def queued_ahead(self, priority: int) -> list[Seq]:
        """The queued requests a new arrival of ``priority`` would be served
        after (what admission control limits): those of its priority or higher,
        waiting or held for the next plan (async scheduling takes the held in
        at the end of the iteration in flight, before anything later)."""
        return [s for s in self.held if s.req.priority >= priority] + [
            s for s in self.waiting if s.req.priority >= priority] + [
            s for s in self.central if s.req.priority >= priority]

    def queued_count_ahead(self, priority: int) -> int:
        """``len(queued_ahead(priority))`` without listing the waiting queue."""
        return (self.waiting.count_at_least(priority) + self.central.count_at_least(priority)
                + sum(1 for s in self.held if s.req.priority >= priority))

    def _take_in(self, now: float) -> None:
        """Move the requests held while an iteration was in flight into the
        queue, once the next iteration has been planned without them (or
        when there is nothing to plan: an idle scheduler takes them at once).
        A new head of the queue may join at the end of the iteration just
        launched, so the fast engine may have to cut its stretch there."""
        head = self.waiting[0] if self.waiting else None
        held, self.held = self.held, []
        for s in held:
            self._enqueue(s)
        if self.dp > 1 or self.waiting[0] is not head or any(map(self._unblocked, held)):
            self._on_arrival_while_busy(now)

    def _boundary(self, _ev: object = None) -> None:
        """Engine-specific: plan and start the next iteration (or stretch) at an iteration boundary."""
        raise NotImplementedError

    def _admit(self, s: Seq, total: int, m: Optional[Match], now: float) -> int:
        """Engine-specific: move the head of the queue into the batch; returns the blocks taken."""
        raise NotImplementedError

    def _batch_len(self) -> int:
        """Engine-specific: sequences in the running batch."""
        raise NotImplementedError

    def _cut(self, now: float) -> None:
        """Hook: end the iteration in flight at its own end (the fast engine
        may be skipping several); called when the plan may change then."""

    def cancel(self, req: Request) -> None:
        """The client gave up on ``req`` (e.g. a stale autocomplete). A
        queued request leaves now; a running one at the end of the iteration
        in flight, freeing its batch slot and KV then. Either way it ends
        CANCELLED, once; a request already ended is left alone."""
        s = self.seqs.get(req.id)
        if s is None or s.state == DONE or s.cancel:
            return
        now = self.env.now
        if s.state == WAITING:
            if s in self.held:
                self.held.remove(s)
            elif s.rank < 0:
                self.central.remove(s)
            else:
                self.waiting.remove(s)
            self.queue_len.set(now, self.queued())
            self._end_request(s, now, Status.CANCELLED)
        else:
            s.cancel = True
            self.cancelled.append(s)
        self._cut(now)

    def _drop_cancelled(self, now: float) -> None:
        """End the running sequences cancelled during the iteration that just
        ended (one that finished in it stays finished); a prompt cancelled
        part-way stays cached only as far as it was computed, as a preempted one."""
        for s in self.cancelled:
            if s.state != DONE:
                self._remove_running(s)
                self._release_cache(s, self._computed_on_release(s))
                self._end_request(s, now, Status.CANCELLED)
        self.cancelled.clear()

    def kv_used_now(self, now: float) -> int:
        """KV blocks held by running sequences at ``now`` (what an autoscaler
        watching KV utilisation reads); unreferenced cache entries count as free."""
        raise NotImplementedError

    def _remove_running(self, s: Seq) -> None:
        """Engine-specific: take a running sequence out of the batch and free its own blocks."""
        raise NotImplementedError

    def _preempt_victim(self, rank: int) -> Seq:
        """Engine-specific: preempt the running sequence of attention-DP rank ``rank`` KV pressure on
        that rank's pool takes first (``_preempt``) and return it."""
        raise NotImplementedError

    def _preempt(self, v: Seq) -> Seq:
        """Recompute preemption: ``v`` gives back its KV (its cached prefix
        stays cached, evictable, but no further than it computed: a prompt
        preempted part-way holds ids it never filled) and will re-prefill
        input + generated."""
        self.retracted[v.rank] = self.expects_output
        self._remove_running(v)
        self._release_cache(v, self._computed_on_preemption(v))
        v.reset_for_recompute()
        if self.placement is not None:
            self.placement.preempted(v.rank)
        self.preemptions += 1
        return v

    def _computed_on_release(self, s: Seq) -> int:
        """Tokens of ``s``, stopping before it finished (cancelled or preempted), whose full blocks
        enter the prefix cache as it stops: where prompts enter only as their request ends
        (``enters_on_release``), what it computed (TensorRT-LLM's removeSequence -> releaseBlocks
        stores a removed sequence's blocks for reuse); 0 elsewhere, its prompt entered before."""
        return self._kv_tokens(s) if self.enters_on_release and self._enters_later(s) else 0

    def _computed_on_preemption(self, v: Seq) -> int:
        """Tokens of ``v`` whose KV its full blocks keep in the prefix cache
        when it is preempted (``cache_preempted_output``: vLLM keeps the
        hashes of every full block it computed, output included); otherwise
        what ``_computed_on_release`` enters."""
        return self._kv_tokens(v) if self.cfg.cache_preempted_output else self._computed_on_release(v)

    @staticmethod
    def _kv_tokens(s: Seq) -> int:
        """Tokens whose KV ``s`` has computed. Read after ``_remove_running``, which brings a
        decoder's count up to date."""
        return s.req.input_tokens + s.generated - 1 if s.state == DECODE else s.done

    # --- prefix cache --------------------------------------------------------
    def cached_prefix_tokens(self, req: Request) -> int:
        """Prompt tokens of ``req`` this replica would serve from its cache now
        (what a cache-aware router asks): with attention-DP ranks, from the
        cache of the rank its DP front end would place it on now, the hit it
        would get if sent here (a router sees the replica, not its ranks)."""
        p = self.placement
        if p is None or self.cache is None:
            return self._rank_hit(req, 0)
        return self._rank_hit(req, p.peek(req.id, self._kv_usage(self.env.now) if p.reads_usage else None))

    def place_ahead(self, req: Request) -> int:
        """Place ``req``, whose KV is on its way here (a disaggregated decode leg), on its rank
        now, and return the prompt tokens that rank's cache holds: the decode server's DP front
        end places a request as it arrives, before its KV is pulled, and the rank pulls only what
        its own cache lacks (vLLM's NIXL connector, ``get_num_new_matched_tokens``). Read at the
        arrival of the KV instead, the rank could be another, taken meanwhile, whose cache the
        hand-off never counted. :meth:`submit` keeps the rank; :meth:`unplace` forgets it."""
        p = self.placement
        if p is None:
            return self._rank_hit(req, 0)
        rank = self.ahead[req.id] = p.place(req.id, req.input_tokens,
                                            self._kv_usage(self.env.now) if p.reads_usage else None)
        return self._rank_hit(req, rank)

    def unplace(self, req: Request) -> None:
        """Forget a request placed ahead that will not be submitted here (cancelled on the link,
        rejected, or sent to another replica): its rank's counts drop it."""
        rank = self.ahead.pop(req.id, -1)
        if rank >= 0 and self.placement is not None:
            self.placement.ended(rank, req.input_tokens, True)
            if self._fetchable():
                self._cut(self.env.now)     # its room goes to the replica's queue at the next fetch

    def _rank_hit(self, req: Request, rank: int) -> int:
        """Prompt tokens of ``req`` the prefix cache of attention-DP rank ``rank`` serves now."""
        if self.cache is None or not req.blocks:
            return 0
        self._sync_cache(self.env.now)
        p = self.placement
        ids = req.blocks if p is None else rank_ids(req.blocks, rank, p.dp)
        return self.cache.cached_tokens(ids, req.input_tokens)

    def _kv_usage(self, now: float) -> list[float]:
        """The KV usage a DP front end reads of each attention-DP rank (vLLM's kv_cache_usage:
        blocks in use over the pool, cached ones no request holds counting as free): each
        engine core reports its own block pool's, so a full rank weighs its waiting requests
        while the replica's other ranks are idle."""
        return [kv_usage(used, self.rank_pool) for used in self._rank_used_now(now)]

    def _rank_used_now(self, now: float) -> list[int]:
        """Engine-specific: each attention-DP rank's blocks in use at ``now`` (``kv_used_now``'s, by rank)."""
        raise NotImplementedError

    @property
    def cache_block_tokens(self) -> Optional[int]:
        """Tokens per prompt block id in the prefix cache (None: no cache, or
        one with offload tiers: their flat maps of ids give a router's bound
        on cached prefixes no chains to rebuild from, so it asks every replica;
        nor one split among attention-DP ranks, whose tree holds rank-keyed
        ids a bound over the requests' own could not find)."""
        if self.cache is None or self.cache.tiers is not None or self.placement is not None:
            return None
        return self.cache.H

    @property
    def cache_tree(self) -> object:
        """The root of the prefix cache's radix tree (None: no cache): nodes
        with ``ids[:n]`` (a run of block ids) and ``children`` (by first id)."""
        return None if self.cache is None else self.cache.root

    def held_chains(self) -> Iterator[tuple[int, ...]]:
        """The ids of the requests queued or running here (the part other
        requests may share, ``Request.shared_ids``), which the cache
        will hold once they run (prompts at admission, outputs at finish).
        With :attr:`cache_tree`, what a router's bound on cached prefixes is
        rebuilt from."""
        if self.cache is None:
            return
        for s in self.seqs.values():
            b = s.req.blocks
            if b:
                n = s.req.shared_ids
                yield b if n is None else b[:n]

    def _sync_cache(self, now: float) -> None:
        """Hook: apply evictions that the iterations already run would have made."""

    def _trim_cache(self, free: int) -> None:
        c = self.cache
        if c is not None and not c.unbounded and (c.evictable > free or (c.cap is not None and c.evictable > c.cap)):
            c.trim(free)

    def _admission(self, s: Seq, reserve_output: bool = False, budget: int = 0) -> tuple[int, int, Optional[Match]]:
        """(blocks admitting ``s`` would take from free memory, its windows'
        included, blocks of its KV, cache match): a hit on entries other
        sequences already pin is free. ``budget``: the tokens left for its
        first chunk, whose own blocks a capped gate lets exceed it."""
        if self.contiguous:     # no prefix cache: paging is what lets requests share KV
            r = self._reserved_blocks(s.req)
            return r + self.window_blocks, r, None
        total = ceil_div(s.prompt + (s.req.output_tokens if reserve_output else 0), self.bs)
        ids = s.ids
        m = None if self.cache is None or not ids else self.cache.match(ids, s.prompt)
        shared = 0 if m is None or self.cfg.prefix_reuse_credit == "none" else m.pinned_blocks
        need = total - shared + self._prompt_windows(s, m)
        if budget and self.window_cap:
            need = max(need, self._first_chunk_need(s.prompt, s.prompt - self._uncached(s, m), shared, budget))
        return need, total, m

    def _prompt_windows(self, s: Seq, m: Optional[Match]) -> int:
        """Blocks admitting ``s`` with cache match ``m`` asks of the sliding-window groups
        (``_gate_windows``; a window's where the pool has none)."""
        if self.windows is None:
            return self.window_blocks
        return self._gate_windows(s.prompt, s.prompt - self._uncached(s, m))

    def _gate_windows(self, prompt: int, computed: int) -> int:
        """Blocks the sliding-window groups must have free to admit a prompt of ``prompt``
        tokens whose first ``computed`` are cached (``SlidingGroups.admission``): what
        vLLM's whole-prompt gate asks of them, and with ``prompt_kv: whole`` what the
        prompt then holds in them until it completes, as a prompt not chunked does."""
        assert self.windows is not None
        return self.windows.admission(prompt, computed, self.window_cap)

    def _first_chunk_need(self, prompt: int, computed: int, shared: int, budget: int) -> int:
        """Blocks the first chunk ``budget`` leaves a prompt of ``prompt`` tokens, the first
        ``computed`` cached (``shared`` of its blocks pinned by others), takes from free memory
        with its windows: past a capped gate ``allocate_slots`` still tests the chunk's slots in
        every group, which with a long hit ask more of the sliding-window groups than the
        gate (the window behind the hit and the chunk against a cap the hit exceeds)."""
        assert self.windows is not None
        upto = computed + self._chunk_of(prompt - computed, budget)
        return ceil_div(upto, self.bs) - shared + max(self.window_blocks, self.windows.held(computed, upto))

    def _window_change(self, s: Seq, upto: int) -> int:
        """Blocks ``s``'s sliding-window groups take (negative: give back) when its prompt's
        slots reach token ``upto``: what ``allocate_slots`` leaves them beyond the window
        held for it (``SlidingGroups.held`` from its computed tokens), less what they
        held beyond it already."""
        assert self.windows is not None
        computed = s.done if s.window_from < 0 else s.window_from
        return max(0, self.windows.held(computed, upto) - self.window_blocks) - s.window_extra

    def _hold_windows(self, s: Seq, upto: int) -> int:
        """Apply :meth:`_window_change`; returns the blocks taken from free memory."""
        change = self._window_change(s, upto)
        s.window_extra += change
        self.window_extra += change
        self.rank_window_extra[s.rank] += change
        return change

    def _drop_windows(self, s: Seq) -> None:
        """``s``'s sliding-window groups give back what they held beyond its window: the
        iteration of its chunk ended (the request's next allocation frees the blocks below
        the window, ``remove_skipped_blocks``), or it stopped running."""
        self.window_extra -= s.window_extra
        self.rank_window_extra[s.rank] -= s.window_extra
        s.window_extra = 0
        s.window_from = -1

    def _chunks_ended(self, chunks: list) -> None:
        """The iteration that ran ``chunks`` ended (before their ``done`` moves on): each
        chunk's windows back to a window, under ``prompt_kv: whole`` only a prompt's last;
        where they go back once processed (``window_lag``), those of the chunks before
        now, and these keep what the next allocation leaves them, from the window of
        the chunk's first token to its last (a completed prompt's first decode's slot too)."""
        if self.window_lag:
            for s in self.lingering:
                self._drop_windows(s)
            self.lingering.clear()
        for s, c in chunks:
            last = s.done + c == s.prompt
            if not (self.per_chunk or last):
                continue
            if s.window_extra:
                self._drop_windows(s)
            if self.window_lag:
                upto = s.done + c + (1 if last else 0)
                s.window_from = s.done
                self._hold_windows(s, upto)
                self.lingering.append(s)

    def _attach(self, s: Seq, total: int, m: Optional[Match]) -> int:
        """Give an admitted sequence its KV: the cached prefix (shared, its
        prefill skipped) plus ``blocks`` of its own. Returns the blocks taken
        from free memory. Call before stamping the admission."""
        if m is None:
            s.blocks = 0 if self.per_chunk else total
            s.done = self._preloaded(s)
            taken = s.blocks
        else:
            c = self.cache
            ids = s.ids
            assert c is not None and ids is not None   # a match needs both
            cached = m.usable(s.prompt)
            first = math.isnan(s.req.admitted)
            if first:
                s.req.cached_tokens = cached
                c.record(m, ids, s.prompt, cached)
            if m.lower is not None:   # copied back from the offload tiers before its first chunk runs
                assert c.tiers is not None   # a lower hit came from them
                end = m.tokens + m.lower.total
                window = 0 if self.windows is None else self.windows.reloaded(m.tokens, cached)
                self.reload_s += c.tiers.reload(m.lower, end - cached, first, window)
            s.done = max(cached, self._preloaded(s))
            p0 = c.pinned
            # (chunk by chunk, only the hit is pinned now: _take_chunk enters the rest as it is allocated)
            s.pin, s.pin_ids, s.pin_blocks = c.acquire(ids, m, s.req.input_tokens, s.req.klass,
                                                       m.ids if self.per_chunk or self._enters_later(s) else -1)
            s.blocks = 0 if self.per_chunk else total - s.pin_blocks
            taken = s.blocks + c.pinned - p0
            self.rank_pinned[s.rank] += c.pinned - p0
        if self.lora is not None:   # a cold adapter's load delays the iteration it joins
            self.reload_s += self.lora.enter(s.req.adapter)
        if self.kv_budgets is not None:
            self._charge(s)
        if self.no_evict:
            self.reserved[s.rank] += self._footprint(s.req) - s.pin_blocks
        if self.windows is not None and not self.per_chunk:
            taken += self._hold_windows(s, s.prompt)    # (chunk by chunk: _take_chunk)
        return taken + self.window_blocks

    def _no_room(self, s: Seq, need: int, total: int, free: int, kept: int = 0) -> bool:
        """Whether the waiting ``s`` cannot be admitted now: its ``need``
        blocks (of ``total`` for its prompt, see ``_admission``) exceed the
        ``free`` ones, or, reserving outputs, its whole final KV does not fit
        beside what the running sequences will hold when they finish, or,
        expecting outputs, its prompt and expected output are not less than
        what the running ones are expected to leave free. Never past one
        attention-DP rank's pool (``rank_blocks``), whatever the other ranks
        have free: a preempted request whose readmission gate outgrows it
        waits, and ends STRANDED once nothing runs (``_never_readmitted``). ``kept``: the blocks
        the pass's test already counts for the prompts it keeps without a chunk (``_kept_blocks``)."""
        if need > self.rank_blocks:
            return True
        free -= kept
        r = s.rank
        if self.reserves_decode:
            if self.ret_now[r] < 0:
                self.ret_now[r], self.top_now[r] = self._retractable(r)
            # (a retracted request's test leaves out its last token, which the resume allocates
            # with the rest: its blocks must be free too, else the pool would overflow by one)
            return need > free or not self._reservation_fits(
                self._decode_kv(s, need, total), self._decode_estimate(s), free * self.bs, self.reserve_tokens,
                self._rank_len(r), self.ret_now[r], self.top_now[r])
        if self.expects_output:
            if self.left_now[r] < 0:
                self.left_now[r] = self._outputs_left(r)
            return not self._expected_fits(need * self.bs + self._output_estimate(s), free * self.bs,
                                           self._ratio(r, self.ratio_steps[r]), self.left_now[r], self.pass_reserved[r])
        if not self.no_evict:
            return need > free
        return self._kept_blocks(s, need, total) > (self.rank_pool - self.rank_pinned[r] - self.rank_handing[r]
                                                    - self.reserved[r] - kept)

    def _kept_blocks(self, s: Seq, need: int, total: int) -> int:
        """The blocks the KV test charges ``s`` (``need`` of its ``total`` taken from free memory),
        which it goes on counting against the prompts after it in the pass where it passes the test
        but gets no chunk: TensorRT-LLM's capacity scheduler schedules it, decrementing its reserved
        blocks and counting it against max requests, before the micro-batch scheduler sizes chunks
        (capacityScheduler.cpp GuaranteedNoEvictScheduler::impl)."""
        if not self.no_evict:
            return need
        return need + self._footprint(s.req) - total - self.window_blocks    # (its windows in both)

    # --- SGLang's decode server (kv_admission: decode_reservation) ------------------
    @staticmethod
    def _reservation_fits(kv: int, estimate: int, free_tokens: int, reserve: int, active: int,
                          retractable: int, top: int) -> bool:
        """SGLang's decode-side admission (disaggregation/decode.py), in tokens: a
        handed-over request of ``kv`` prompt tokens and ``estimate`` = min(max_new_tokens,
        clip) is pre-allocated only if max(kv + reserve, kv + estimate − retractable) is
        at most the free KV less max(reserve × ``active`` requests, top − retractable)
        (``pop_preallocated``, ``_allocatable_tokens``: ``retractable`` is Σ prompt +
        output so far over the running requests, ``top`` the largest prompt + estimate
        among them); a retracted one (``estimate`` < 0) resumes if kv + reserve is at
        most the free KV less reserve × active (``resume_retracted_reqs``)."""
        if estimate < 0:
            return kv + reserve <= free_tokens - reserve * active
        return max(kv + reserve, kv + estimate - retractable) <= free_tokens - max(reserve * active,
                                                                                  top - retractable)

    def _decode_kv(self, s: Seq, need: int, total: int) -> int:
        """The KV tokens the decode server's test charges for ``s``, ``need`` of its ``total``
        blocks taken from free memory: a handed-over prompt's; a retracted request's less its
        last token, which SGLang resumes without (_prealloc_required_tokens over
        _pre_alloc_fill_len: prompt + output − 1, page-aligned from 0.5.18) and whose KV its
        next decode writes, here the one-token recompute, allocated with the rest."""
        if s.req.preemptions == 0 or not self.cfg.resume_without_last_token:   # (to 0.5.11: all of its KV)
            return need * self.bs
        return (need - total + ceil_div(s.prompt - 1, self.bs)) * self.bs

    def _decode_estimate(self, s: Seq) -> int:
        """What the decode server's admission expects ``s`` to write: min(max_new_tokens,
        clip), the whole output; -1 for a request retracted here, which resumes by its own test."""
        return -1 if s.req.preemptions > 0 else min(s.req.output_tokens, self.clip)

    def _retractable(self, rank: int) -> tuple[int, int]:
        """Engine-specific: over the sequences running on attention-DP rank ``rank``, (Σ prompt +
        output so far, the largest prompt + min(output, clip); 0 when none runs)."""
        raise NotImplementedError

    # --- SGLang's expected-output admission (kv_admission: expected_output) --------
    @staticmethod
    def _expected_fits(cost: int, free_tokens: int, ratio: float, left: int, reserved: int) -> bool:
        """SGLang's ``PrefillAdder.add_one_req`` test (NO_TOKEN when ``total_tokens >=
        rem_total_tokens``), one expression for every caller so that both engines
        compare the same float: ``cost`` tokens (uncached prompt + expected output)
        against the free and evictable ``free_tokens`` less ``ratio`` × the decoders'
        ``left`` output and the ``reserved`` outputs of prompts completing this pass."""
        return cost < free_tokens - ratio * left - reserved

    def _ratio(self, rank: int, steps: int) -> float:
        """Attention-DP rank ``rank``'s new_token_ratio after ``steps`` decays from its ``ratio_base``; a
        closed form rather than repeated subtraction, so a skipped stretch lands on the same float."""
        base = self.ratio_base[rank]
        if steps == 0:
            return base
        return max(base - steps * self.ratio_decay, self.ratio_min)

    def _output_estimate(self, s: Seq) -> int:
        """What admitting ``s`` expects it to still write (add_one_req's max_new)."""
        return min(max(s.req.output_tokens - s.generated, 0), self.clip)

    def _reserve_output(self, s: Seq, chunk: int) -> None:
        """A prompt the plan completes: SGLang's ``_update_prefill_budget`` charges
        min(max_new_tokens, clip) for it (whole, not less what it wrote before a
        preemption) to the rest of the pass; a prompt cut short is charged nothing."""
        if self.expects_output and s.done + chunk == s.prompt:
            self.pass_reserved[s.rank] += min(s.req.output_tokens, self.clip)

    def _start_plan(self) -> None:
        self._fetch()
        for r in range(self.dp):
            self.pass_reserved[r] = 0
            self.left_now[r] = -1
            self.ret_now[r] = -1

    def _track_ratio(self, chunks: list, decoding: list[int]) -> None:
        """Each attention-DP rank's ratio after the plan just made, ``chunks`` and ``decoding[r]``
        decodes on rank r: set from the rank's decoders left after a preemption
        (``estimate_new_token_ratio_after_retract`` over the batch retract_decode keeps), else one
        decay where the rank runs a decode batch (scheduler.py update_running_batch), back at its
        start when the replica idles (a rank idle beside busy ones runs an idle batch)."""
        prefilling = self._prefilling(chunks)
        idle = not chunks and not any(decoding)
        for r in range(self.dp):
            if self.retracted[r]:
                self.retracted[r] = False
                n, decoded, outputs = self._decoder_totals(r)
                self.ratio_base[r] = min(1.0, (decoded + self.cfg.retract_decode_steps * n) / (outputs + 1))
                self.ratio_steps[r] = 0
            elif decoding[r] and not prefilling[r]:
                self.ratio_steps[r] += 1
            elif idle:
                self.ratio_base[r] = self.ratio_init
                self.ratio_steps[r] = 0

    def _prefilling(self, chunks: list) -> list[int]:
        """By attention-DP rank, the prompt chunks of an iteration that compute something
        (:meth:`_computed`): a rank holding one prefills; one holding only a handed-over prompt
        whose KV arrived whole decodes."""
        return self._by_rank([s for s, _ in self._computed(chunks)])

    def _by_rank(self, seqs: list[Seq]) -> list[int]:
        """How many of ``seqs`` each attention-DP rank runs."""
        out = [0] * self.dp
        for s in seqs:
            out[s.rank] += 1
        return out

    def _outputs_left(self, rank: int) -> int:
        """Engine-specific: Σ min(remaining output, clip) over the sequences decoding on attention-DP rank ``rank``."""
        raise NotImplementedError

    def _decoder_totals(self, rank: int) -> tuple[int, int, int]:
        """Engine-specific: over the sequences decoding on attention-DP rank ``rank``, (their number,
        Σ their output so far, Σ their output lengths)."""
        raise NotImplementedError

    def _requeue(self, victims: list[Seq]) -> None:
        """Preempted sequences back in the queue: first in line among their priority
        (vLLM), or, expecting outputs, last, in the order retracted (SGLang's
        ``_add_request_to_queue(req, is_retracted=True)`` appends, and its FCFS
        queue is not re-sorted); on SGLang's decode server, ahead of every request
        never retracted and behind those retracted before (its ``retracted_queue``,
        served first)."""
        for v in victims:
            if self.reserves_decode:
                self.waiting.insert_retracted(v)
            elif self.expects_output:
                self.waiting.append(v)
            else:
                self.waiting.appendleft(v)

    def _retraction_key(self, generated: int, s: Seq) -> tuple[int, int, int]:
        """SGLang's retraction order (schedule_batch.py retract_decode), the smallest
        key first: by its 'length' policy the fewest output tokens, then the longest
        prompt, then the newest; under ``retraction_order: newest`` (speculative
        decoding to 0.5.16, whose batch drops requests from the back) the newest."""
        if self.newest_first:
            return 0, 0, -s.order
        return generated, -s.req.input_tokens, -s.order

    def _take_reload(self) -> float:
        """The offload reloads the iteration being planned waits for (see
        :mod:`.kv_tiers`: copied before its forward pass, not overlapped)."""
        r = self.reload_s
        self.reload_s = 0.0
        return r

    def _charge(self, s: Seq) -> None:
        """Charge ``s`` to its class and, if the class is capped, evict the
        class's own cached history (its least recently used unreferenced
        entries first) until running + cached fit the cap again.
        ``_over_budget`` already held that the running part alone fits, so
        this always succeeds; other classes' entries are not touched."""
        k = s.req.klass
        assert self.kv_budgets is not None   # only called with per-class caps
        self.kv_charged[k] = self.kv_charged.get(k, 0) + self._footprint(s.req)
        self._trim_to_cap(k)

    def _hold_caps(self) -> None:
        """A released sequence unreferences the cache entries it shared, and an
        entry belongs to the class that entered it: a paid request ending
        hands the free tier back the history they shared, which can take the
        free tier past its cap while it admitted nothing. Every capped class
        is trimmed then, as the admitted one is (:meth:`_charge`)."""
        assert self.kv_budgets is not None
        for k in self.kv_budgets:
            self._trim_to_cap(k)

    def _trim_to_cap(self, k: str) -> None:
        """Evict class ``k``'s own cached history, least recently used first,
        until its running charge plus what it caches fits its cap."""
        cap = self.kv_budgets.get(k) if self.kv_budgets is not None else None
        c = self.cache
        if cap is None or c is None or not c.tracks_owners:
            return
        room = max(0, cap - self.kv_charged.get(k, 0))
        if c.owned.get(k, 0) > room:
            c.evict_owned(k, room)

    def class_kv_held(self, klass: str) -> int:
        """KV blocks a class holds for its cap: its running requests' charged
        footprints plus the unreferenced cache entries it owns."""
        owned = self.cache.owned if self.cache is not None and self.cache.tracks_owners else None
        return self.kv_charged.get(klass, 0) + (owned.get(klass, 0) if owned is not None else 0)

    def _preloaded(self, s: Seq) -> int:
        """Prompt tokens whose KV arrived with the request (a disaggregated
        decode replica receives the prefill replica's KV): skipped like a
        cache hit at the first admission; after a recompute preemption the
        KV is gone and the whole prompt is prefilled here, but SGLang's
        decode server (decode_reservation) keeps a retracted request's KV
        but its last token's (schedule_batch.py ``offload_kv_cache``: to host
        memory, back at resumption), so only that token is recomputed."""
        if s.req.preemptions == 0:
            return s.req.preloaded
        return s.prompt - 1 if self.reserves_decode else 0

    def _tokens_per_step(self, s: Seq) -> float:
        """Speculative tokens per step E of ``s``'s class (per-class α only)."""
        assert self.class_tokens_per_step is not None and isinstance(self.cm, SpeculativeCostModel)
        return self.class_tokens_per_step.get(s.req.klass, self.cm.tokens_per_step)

    @staticmethod
    def _mean_tokens_per_step(counts: dict[float, int]) -> Optional[float]:
        """The mean E over decoding sequences, from counts by E (summed in
        sorted order, so both engines get the same float); one E is itself."""
        if len(counts) == 1:
            return next(iter(counts))
        if not counts:
            return None
        return sum(e * n for e, n in sorted(counts.items())) / sum(counts.values())

    def _footprint(self, req: Request, output: int = -1) -> int:
        """Blocks a request's class is charged while it runs: its final KV, or
        what a contiguous allocation reserves for it, and its windows; ``output``:
        the output it will be served, if not yet cut to it (:meth:`served_output`)."""
        if self.contiguous:
            return self._reserved_blocks(req) + self.window_blocks
        return ceil_div(req.input_tokens + (req.output_tokens if output < 0 else output), self.bs) + self.window_blocks

    def _over_budget(self, s: Seq) -> bool:
        """Would admitting ``s`` take its class past its KV cap even after
        evicting all of the class's cached history (its unreferenced
        entries, which ``_charge`` evicts as needed)? The queue then waits
        for the class's own requests to finish, as vLLM does for a sequence
        that does not fit."""
        b = self.kv_budgets
        if b is None:
            return False
        cap = b.get(s.req.klass)
        return cap is not None and self.kv_charged.get(s.req.klass, 0) + self._footprint(s.req) > cap

    def _release_cache(self, s: Seq, kv_tokens: int = 0) -> None:
        """Unreference a sequence's cached entries (a finished one also enters
        its output blocks), and give back its class's KV charge: every way a
        running sequence stops (finish, cancel, preemption) passes here. A
        prompt stopped part-way (preempted or cancelled mid-prefill) stays
        cached only as far as it was computed."""
        self._leave_batch(s)
        self._unpin(s, kv_tokens)

    def _leave_batch(self, s: Seq) -> None:
        """What a sequence gives back as it stops running: its adapter slot, its rank's full flag, its
        windows' extra blocks and its contiguous reservation."""
        if self.lora is not None:
            self.lora.leave(s.req.adapter, self.iterations)
        self.kv_full[s.rank] = False    # (its rank's batch shrank: SGLang's batch_is_full cleared)
        if s.window_extra:
            self._drop_windows(s)
        if self.no_evict:
            self.reserved[s.rank] -= self._footprint(s.req) - s.pin_blocks

    def _unpin(self, s: Seq, kv_tokens: int) -> None:
        """What a sequence gives back once its KV is no longer read: its class's KV charge and its
        cache pin (what it computed entered as the stack enters it)."""
        if self.kv_budgets is not None:
            self.kv_charged[s.req.klass] -= self._footprint(s.req)
        if s.pin is not None:
            assert self.cache is not None and s.ids is not None   # a pin came from both
            p0 = self.cache.pinned
            self.cache.release(s.pin, s.ids, s.pin_ids, kv_tokens, s.req.klass,
                               s.done // self.cache.H if s.state == PREFILL and s.done < s.prompt else -1)
            self.rank_pinned[s.rank] += self.cache.pinned - p0
            if self.kv_budgets is not None:
                self._hold_caps()
        s.pin = None
        s.pin_ids = 0
        s.pin_blocks = 0

    def _schedule(self, delay: float, callback) -> None:
        call_later(self.env, delay, NORMAL, callback)

    def _finish_request(self, seq: Seq, now: float) -> None:
        kv_tokens = seq.req.input_tokens + seq.req.output_tokens - 1
        if self.holds_handoffs:
            self._hold_for_handoff(seq, kv_tokens)
        else:
            self._release_cache(seq, kv_tokens)
        self._end_request(seq, now, Status.FINISHED)

    def _hold_for_handoff(self, seq: Seq, kv_tokens: int) -> None:
        """Keep a finished prompt's KV for its hand-off: the blocks it held of its own (its prompt's
        beyond its cache pin, its windows and their extra) stay taken on its rank and its pin stays,
        so its cached blocks are not evicted, until ``release_handoff``."""
        own = self._footprint(seq.req, 0) - seq.pin_blocks + seq.window_extra
        self._leave_batch(seq)
        self.handing[seq.req.id] = (seq, own, kv_tokens)
        self.rank_handing[seq.rank] += own
        self.handing_blocks += own

    def handoff_rank(self, req_id: int) -> int:
        """The attention-DP rank holding request ``req_id``'s KV for its hand-off (-1: none held)."""
        held = self.handing.get(req_id)
        return -1 if held is None else held[0].rank

    def release_handoff(self, req_id: int) -> None:
        """The decode side has read request ``req_id``'s KV (or the request ended before its hand-off):
        its blocks go back as the scheduler next plans (at the end of the iteration in flight, or now
        if none is), and a prompt waiting for them may then be admitted."""
        if req_id not in self.handing:
            return
        if self.in_flight:
            self.read.append(req_id)
            self._cut(self.env.now)
            return
        self._give_back(req_id)
        if (self.waiting or self.central or self.held) and not self.busy:
            self.busy = True
            self._schedule(0.0, self._boundary)

    def _take_back_read(self) -> None:
        """At an iteration boundary, before the plan: the blocks of the hand-offs read meanwhile."""
        if self.read:
            read, self.read = self.read, []
            for req_id in read:
                self._give_back(req_id)

    def _give_back(self, req_id: int) -> None:
        seq, own, kv_tokens = self.handing.pop(req_id)
        self.rank_handing[seq.rank] -= own
        self.handing_blocks -= own
        self._unpin(seq, kv_tokens)

    def _end_request(self, seq: Seq, now: float, status: Status) -> None:
        if self.placement is not None and seq.rank >= 0:
            self.placement.ended(seq.rank, seq.req.input_tokens, seq.state == WAITING)
        finish(seq, now, status)
        self.t_end = now
        del self.seqs[seq.req.id]
        self.outstanding -= 1
        self.outstanding_tokens -= seq.req.input_tokens
        if status is Status.FINISHED and self.cfg.output_after_next_launch:
            self.unsent.append((seq.req, True))
        elif self.on_done:
            self.on_done(seq.req)

    def _release_outputs(self, launch: float) -> None:
        """Hand the held outputs to the client once the iteration starting
        now has been launched, ``launch`` seconds from now (its whole run for
        an eager prefill iteration, nothing for a CUDA-graph decode or when
        the replica goes idle)."""
        if not self.unsent:
            return
        unsent, self.unsent = self.unsent, []
        if launch <= 0.0:
            self._deliver(unsent)
        else:
            self._schedule(launch, lambda _ev: self._deliver(unsent))

    def _deliver(self, unsent: list[tuple[Request, bool]]) -> None:
        now = self.env.now
        for req, ended in unsent:
            if not ended:
                req.first_token = now
                continue
            req.finish = now
            if self.on_done:
                self.on_done(req)

    def _admit_whole(self, now: float, free: list[int], reserve_output: bool,
                     decoding: Optional[list[int]] = None, closed: Optional[list[bool]] = None) -> list:
        """Admit waiting prompts whole, FCFS on each attention-DP rank, while its
        sequences, its token budget (a single prompt may exceed it when alone in its
        iteration) and its ``free`` blocks allow. ``decoding[r]`` sequences share
        rank r's iteration and budget (whole prompts in flight with decodes, as
        TensorRT-LLM schedules without chunking); ``closed`` ranks admit nothing.
        Static batching reserves blocks for the output too. Each engine's
        ``_admit`` does its own block bookkeeping."""
        chunks: list = []
        dp = self.dp
        budget = [self._after_decodes(0 if decoding is None else decoding[r]) for r in range(dp)]
        busy = [decoding is not None and decoding[r] > 0 for r in range(dp)]    # decodes or a prompt already
        closed = self._full_ranks([False] * dp if closed is None else closed)
        slots = self.draft_slots
        skipped: list[Seq] = []
        # (static batching: TensorRT-LLM's StaticBatchScheduler holds none back)
        firsts = self._pass_firsts([]) if not reserve_output else None
        while not all(closed):
            s = self._next_waiting(skipped, closed)
            if s is None:
                break
            r = s.rank
            if self._rank_len(r) >= self.rank_seqs or self._over_budget(s):
                self._close(r, closed, skipped)
                continue
            need, total, m = self._admission(s, reserve_output)
            if firsts is not None and self._defers(s, m, firsts):
                skipped.append(self.waiting.popleft())
                continue
            charged = self._budget_charge(s, self._uncached(s, m))
            if self._kv_refused(s, need, total, free[r]) or (busy[r] and charged > min(budget[r], self.rank_tokens)
                                                             - slots):
                self._close(r, closed, skipped)
                continue
            free[r] -= self._admit(s, total, m, now)
            self._trim_cache(sum(free))
            self._reserve_output(s, s.prompt - s.done)
            chunks.append((s, s.prompt - s.done))
            budget[r] -= charged + slots
            busy[r] = True
        self._unskip(skipped)
        return chunks

    def _kv_refused(self, s: Seq, need: int, total: int, free: int, kept: int = 0) -> bool:
        """``_no_room``, which on a stack that then holds its rank full (``full_until_leave``) marks it so."""
        if not self._no_room(s, need, total, free, kept):
            return False
        if self.full_until_leave:
            self.kv_full[s.rank] = True
        return True

    def _full_ranks(self, closed: list[bool]) -> list[bool]:
        """``closed`` and the attention-DP ranks held full since a request failed their KV test
        (``kv_full``): SGLang's batch_is_full, which a rank running nothing clears."""
        if not self.full_until_leave:
            return list(closed)
        out = list(closed)
        for r in range(self.dp):
            if self.kv_full[r] and self._rank_len(r) == 0:
                self.kv_full[r] = False
            out[r] = out[r] or self.kv_full[r]
        return out

    @staticmethod
    def _stopped(victims: list[Seq], closed: list[bool]) -> list[bool]:
        """``closed`` and the attention-DP ranks of ``victims`` closed too: a rank that preempted
        in this plan admits nothing new in it (its scheduler's own rule, vLLM's and SGLang's)."""
        out = list(closed)
        for v in victims:
            out[v.rank] = True
        return out

    def _pass_firsts(self, running: list) -> Optional[list[set[int]]]:
        """Per attention-DP rank, the first new block ids of the prompts a scheduling pass has
        checked so far, where it holds back the prompts that would compute one of them
        (``defers_shared``); None where it does not. With ``defers_behind_chunks`` it starts with
        those of the prompts ``running`` continues past a first chunk, the block past their
        computed tokens (TensorRT-LLM's prefillWithChunkedContextsAlreadyExecuting, its chunks'
        blocks stored as each ends)."""
        if not self.defers_shared:
            return None
        firsts: list[set[int]] = [set() for _ in range(self.dp)]
        if self.defers_behind_chunks:
            for s, _ in running:
                block = self._whole_block(s, s.done - s.done % self.bs) if s.done > 0 else None
                if block is not None:
                    firsts[s.rank].add(block)
        return firsts

    def _whole_block(self, s: Seq, start: int) -> Optional[int]:
        """The id of ``s``'s block from prompt token ``start`` where it is a whole KV block of its
        prompt, else None (TensorRT-LLM keys only whole blocks: findNewContextBlock)."""
        ids = s.ids
        cache = self.cache
        if ids is None or cache is None or start // cache.H >= len(ids) or start + self.bs > s.prompt:
            return None
        return ids[start // cache.H]

    def _defers(self, s: Seq, m: Optional[Match], firsts: list[set[int]]) -> bool:
        """Whether the pass holds ``s`` back, its cache match ``m``: its first block the prefix
        cache held before the pass is the first new block of a prompt admitted before it in the
        pass or still being chunked (TensorRT-LLM's beneficialToSkip: the blocks that prompt
        entered at admission are in ``m`` now, the ids agreeing up to there; where prompts enter
        the cache once computed, ``prompt_cached: computed``, that block is ``s``'s own first new
        one). Otherwise its own first new block joins ``firsts`` before the budget and KV tests, as
        in TensorRT-LLM (a prompt they refuse ends its rank's pass, as it ends both its schedulers'
        loops). Where the prompt's ids are coarser than KV blocks, two prompts that part inside a
        block of ids are not held back, as a KV-block key might be. A request whose prompt's KV
        arrived with it (a disaggregated decode server's) is neither held back nor registers a
        block: TensorRT-LLM takes its generation-only requests (isDisaggGenerationInitState) past
        beneficialToSkip."""
        ids = s.ids
        if m is None or ids is None or self._preloaded(s):
            return False
        seen = m.ids + (0 if m.lower is None else m.lower.ids)
        mine = firsts[s.rank]
        assert self.cache is not None   # a match came from it
        new = self._whole_block(s, seen * self.cache.H)
        if mine and (new in mine or not mine.isdisjoint(ids[:seen])):
            return True
        if new is not None:
            mine.add(new)
        return False

    def _close(self, rank: int, closed: list[bool], skipped: list[Seq]) -> None:
        """Attention-DP rank ``rank``'s scheduler stops at the head of the queue, one of its
        requests: the rank admits nothing more this plan, and the request keeps its place."""
        closed[rank] = True
        skipped.append(self.waiting.popleft())

    def _admit_chunked(self, now: float, free: list[int], budget: list[int], chunks: list,
                       closed: Optional[list[bool]] = None) -> None:
        """Admit waiting prompts FCFS on each attention-DP rank while a sequence
        slot, its token budget and its ``free`` blocks allow, each with a first
        chunk that fits the budget (``closed`` ranks admit nothing). Under a
        ``max_prefill_tokens`` cap (SGLang's rem_input_tokens) a prompt joins an
        iteration whose rank already holds prompt tokens only if its uncached
        tokens are fewer than what the iteration leaves of the rank's cap;
        whatever the budget already carries (decodes sharing the iteration,
        prompts being continued) counts against it. A prompt that passes the KV test but whose
        chunk rounds to no whole block (``chunks_whole_blocks``) keeps its place, its sequence slot
        and its blocks in the test of those after it, which are still tried: TensorRT-LLM sizes the
        chunks of every context its capacity scheduler took, in order, each taking what the budget
        has left, whole if its rest fits (setCtxRequestsChunkSize<kFIRST_COME_FIRST_SERVED>), and
        runs those given more than 0."""
        dp, slots = self.dp, self.draft_slots
        cap = self.rank_prefill_cap
        left = None if cap is None else [cap - (self.rank_budget - budget[r]) for r in range(dp)]
        prompts = [False] * dp
        for s, _ in chunks:
            prompts[s.rank] = True
        closed = self._full_ranks([budget[r] <= slots or (closed is not None and closed[r]) for r in range(dp)])
        skipped: list[Seq] = []
        firsts = self._pass_firsts(chunks)
        kept = [0] * dp         # prompts given no chunk (chunks_whole_blocks) and the KV blocks they hold
        kept_kv = [0] * dp
        while not all(closed):
            s = self._next_waiting(skipped, closed)
            if s is None:
                break
            r = s.rank
            if self._rank_len(r) + kept[r] >= self.rank_seqs or self._over_budget(s):
                self._close(r, closed, skipped)
                continue
            need, total, m = self._admission(s, budget=budget[r] if self.per_chunk else 0)
            if firsts is not None and self._defers(s, m, firsts):
                skipped.append(self.waiting.popleft())
                continue
            new = self._uncached(s, m)
            charged = self._chunk_of(self._budget_charge(s, new), budget[r])
            if (self._kv_refused(s, need, total, free[r], kept_kv[r])    # (SGLang: NO_TOKEN before rem_input_tokens)
                    or (left is not None and prompts[r] and new >= left[r])):
                self._close(r, closed, skipped)
                continue
            if charged == 0 < new:      # (no whole block of it left in the budget: chunks_whole_blocks)
                kept[r] += 1
                kept_kv[r] += self._kept_blocks(s, need, total)
                skipped.append(self.waiting.popleft())
                continue
            free[r] -= self._admit(s, total, m, now)
            self._trim_cache(sum(free))
            c = min(charged, s.prompt - s.done)
            if self.per_chunk:      # the gate above held its whole prompt's blocks free: its first chunk's fit
                free[r] -= self._take_chunk(s, c)
                self._trim_cache(sum(free))
            self._reserve_output(s, c)
            chunks.append((s, c))
            prompts[r] = True
            budget[r] -= charged + slots
            if left is not None:
                left[r] -= c
            if budget[r] <= slots:
                closed[r] = True
        self._unskip(skipped)

    def _chunk_kv(self, s: Seq, c: int, chunks: list, victims: list[Seq], decoding: bool) -> bool:
        """Blocks for the next ``c`` prompt tokens of ``s``, a prompt part-way
        through its prefill (``prompt_kv: per_chunk``): vLLM V1's running loop
        (``Scheduler.schedule``) calls ``allocate_slots`` for the tokens it
        schedules and, while they do not fit, preempts the newest running
        request of the lowest priority, which may be ``s`` itself (then False:
        the loop stops there). A victim that already has its tokens this
        iteration loses them; ``victims`` collects every one (no prompt is
        admitted after a preemption). ``decoding``: the iteration runs the
        decodes, whose next blocks are already taken."""
        need = ceil_div(s.done + c, self.bs) - s.blocks - s.pin_blocks
        if self.windows is not None:
            need += self._window_change(s, s.done + c)
        while need > self._free_for_chunk(decoding, s.rank):
            v = self._preempt_victim(s.rank)
            victims.append(v)
            for i in range(len(chunks)):
                if chunks[i][0] is v:
                    del chunks[i]
                    break
            self._requeue([v])
            if v is s:
                return False
        self._take_chunk(s, c)
        self._trim_cache(self._free_blocks(decoding))
        return True

    def _take_chunk(self, s: Seq, c: int) -> int:
        """Give ``s`` the blocks of its prompt up to its next ``c`` tokens, the
        cache entries they fill entered as allocated (``PrefixCache.extend``);
        returns the blocks taken from free memory (fewer than the chunk's where
        an entry it extends over was already held by another sequence)."""
        upto = s.done + c
        taken = 0
        cache = self.cache
        if s.pin is not None:
            assert cache is not None and s.ids is not None   # a pin came from both
            p0 = cache.pinned
            s.pin, s.pin_ids, s.pin_blocks = cache.extend(s.pin, s.pin_ids, s.pin_blocks, s.ids, upto,
                                                          s.req.input_tokens, s.req.klass)
            taken = cache.pinned - p0
            self.rank_pinned[s.rank] += taken
        grown = ceil_div(upto, self.bs) - s.pin_blocks - s.blocks
        self._hold(s, grown)
        if self.windows is not None:
            taken += self._hold_windows(s, upto)
        return taken + grown

    def _hold(self, s: Seq, blocks: int) -> None:
        """Engine-specific: ``blocks`` more (or fewer) of its own for the prefilling ``s``."""
        raise NotImplementedError

    def _chunks_computed(self, chunks: list) -> None:
        """After an iteration's ``chunks`` ran. A prompt left part-way clears its rank's ``kv_full``
        (SGLang's filter of the last prefill batch drops its chunked request, and a batch that shrank
        is no longer full). Where prompts enter the prefix cache once computed (``enters_computed``), a
        prompt still being chunked enters what it computed before the next plan (SGLang stashes its
        chunked request first thing, stash_chunked_request); a completed one waits for
        ``_enter_completed``. Those that ended meanwhile released their pins."""
        if self.full_until_leave:
            for s, _ in chunks:
                if s.state == PREFILL:
                    self.kv_full[s.rank] = False
        if not self.enters_computed:
            return
        for s, _ in chunks:
            if s.pin is None or not self._enters_later(s):
                continue
            if s.done < s.prompt:
                self._enter_computed(s, s.done)
            else:
                self.completed.append(s)

    def _enters_later(self, s: Seq) -> bool:
        """Whether ``s``'s prompt enters the prefix cache once computed or once its request ends rather
        than at admission: where the stack enters prompts so, all but a handed-over one on a decode
        server, whose prompt SGLang enters as it builds the batch that takes it in
        (disaggregation/decode_schedule_batch_mixin.py process_prebuilt, cache_unfinished_req /
        checkpoint_kv_cache)."""
        return (self.enters_computed or self.enters_on_release) and not s.req.preloaded

    def _enter_completed(self) -> bool:
        """The prompts the last iteration completed enter the prefix cache: SGLang inserts them as it
        processes that iteration's result, before planning the next one, or, planning ahead (its overlap
        loop), right after (call before and after the plan: one of them finds them). Returns whether
        one did, after which a waiting request may hit it or fit the blocks its copies gave back."""
        done, self.completed = self.completed, []
        entered = False
        for s in done:
            if s.pin is not None and s.state == DECODE:     # (not retracted, cancelled or finished since)
                self._enter_computed(s, s.prompt)
                entered = True
        return entered

    def _enter_computed(self, s: Seq, upto: int) -> None:
        """Enter the first ``upto`` computed tokens of ``s``'s prompt in the prefix cache: what it
        computed becomes an entry on its pinned path, and where another prompt entered the same blocks
        first, its own copies are given back (SGLang's cache_unfinished_req frees them)."""
        cache = self.cache
        assert cache is not None and s.ids is not None and s.pin is not None   # enters_computed: a pin
        p0, b0 = cache.pinned, s.pin_blocks
        s.pin, s.pin_ids, s.pin_blocks = cache.extend(s.pin, s.pin_ids, s.pin_blocks, s.ids, upto,
                                                      s.req.input_tokens, s.req.klass)
        self.rank_pinned[s.rank] += cache.pinned - p0
        if self.no_evict:
            self.reserved[s.rank] -= s.pin_blocks - b0
        self._shared(s, s.pin_blocks - b0)

    def _shared(self, s: Seq, blocks: int) -> None:
        """Engine-specific: ``blocks`` of the running ``s``'s own are on its cache path now (its
        ``pin_blocks`` already counts them)."""
        raise NotImplementedError

    def _free_for_chunk(self, decoding: bool, rank: int) -> int:
        """Engine-specific: the blocks of attention-DP rank ``rank``'s pool free while the plan
        gives prompt chunks theirs."""
        raise NotImplementedError

    def _free_blocks(self, decoding_next: bool) -> int:
        """Engine-specific: the replica's blocks free (every rank's), the decodes' next ones
        taken where ``decoding_next``: what the prefix cache's unreferenced entries must fit."""
        raise NotImplementedError

    def _rank_len(self, rank: int) -> int:
        """Sequences running on attention-DP rank ``rank`` (the batch, with one rank)."""
        p = self.placement
        return self._batch_len() if p is None else p.running[rank]

    def _after_decodes(self, decoding: int) -> int:
        """The token budget ``decoding`` sequences leave an attention-DP rank's iteration (vLLM's
        input_budget from 0.28): :func:`decode_budget_tokens`. Each rank's scheduler has its own
        budget (vLLM's DP engine cores and TensorRT-LLM's ranks the flag, SGLang's its dp-th share of
        its chunk: fleet/setup.py rank_limits)."""
        return self.rank_budget - decode_budget_tokens(self.cfg, self.cm, decoding)

    def _decodes_in_budget(self, decoding: int) -> int:
        """How many of ``decoding`` running decodes, oldest first, an iteration
        schedules where decodes share it with prompts: all while their
        :func:`decode_budget_tokens` fit the token budget. Past it the stacks
        leave the rest in place for the next iteration and schedule no prompt
        tokens in this one. vLLM V1 (``Scheduler.schedule``) gives each running
        request min(its 1 + k tokens, the budget left), cutting the boundary
        decode's draft, and walks on while more than a draft model's slots are
        left (``budget_boundary: trim_draft``); TensorRT-LLM's micro-batch
        scheduler breaks at the first that does not fit whole (``stop``). A
        pool's set-up refuses a budget below one decode's tokens, so at least
        one always runs."""
        cfg = self.cfg
        budget = self.rank_budget
        taken = decode_budget_tokens(cfg, self.cm, decoding)
        if taken <= budget:
            return decoding
        each = taken // decoding
        if cfg.budget_boundary == "trim_draft":
            return max(1, ceil_div(budget - self.draft_slots, each))
        return max(1, budget // each)

    def _chunk(self, s: Seq, budget: int) -> int:
        """The prompt tokens of ``s`` an iteration with ``budget`` tokens left takes (``_chunk_of``)."""
        return self._chunk_of(s.prompt - s.done, budget)

    def _chunk_of(self, left: int, budget: int) -> int:
        """The tokens of a prompt with ``left`` to prefill an iteration with ``budget``
        tokens left takes: at most its rank's budget, in both less the draft slots the
        request is charged beside them (vLLM's ``input_budget - draft_slots``). A chunk cut short
        ends on a whole block where ``chunks_whole_blocks`` (TensorRT-LLM), so its next chunk
        starts on one; 0 where the budget left holds none."""
        c = min(left, budget - self.draft_slots, self.rank_tokens - self.draft_slots)
        if c < left and self.cfg.chunks_whole_blocks:
            return c // self.bs * self.bs
        return c

    def _budget_charge(self, s: Seq, uncached: int) -> int:
        """The prompt tokens admitting ``s``, ``uncached`` of them to compute, charges the token
        budget: those alone, or where ``prefix_reuse_credit`` gives its hit no credit on the budget
        (TensorRT-LLM before its micro-batch scheduler read estimatedReusableTokens) every token
        it would compute uncached, the cached chunk's window shifting past the hit after
        scheduling (``setPrepopulatedPromptLen``)."""
        if self.cfg.prefix_reuse_credit == "blocks_and_tokens":
            return uncached
        return s.prompt - self._preloaded(s)

    def _uncached(self, s: Seq, m: Optional[Match]) -> int:
        """The prompt tokens of ``s`` admitting it with cache match ``m`` leaves to prefill."""
        return s.prompt - max(0 if m is None else m.usable(s.prompt), self._preloaded(s))

    def _prefill_chunk_done(self, s: Seq, chunk: int, now: float) -> bool:
        """Apply a prefill chunk; when it completes the prompt, emit the token
        it samples (the first token, or after a recompute the next one, whose
        gap spans the preemption). Returns whether the prompt is complete."""
        s.done += chunk
        if s.done != s.prompt:
            return False
        s.generated += 1
        if math.isnan(s.req.first_token):
            s.req.first_token = now
            if self.cfg.output_after_next_launch:
                self.unsent.append((s.req, False))
        else:
            self.gaps.add(now - s.last_token, now - s.last_token, 1)
        s.last_token = now
        s.kv = s.prompt
        return True

    def _admit_stamp(self, seq: Seq, now: float) -> None:
        if math.isnan(seq.req.admitted):
            seq.req.admitted = now
        if self.placement is not None:
            self.placement.admitted(seq.rank)
        seq.order = self.next_order
        self.next_order += 1

    def _account(self, duration: float, kv_area: float, kv_peak: int, tokens: int) -> None:
        """Busy time, tokens through the model and KV usage: ``kv_area`` is
        Σ blocks held during each iteration × its duration, ``kv_peak`` the
        most held in any of them."""
        self.busy_time += duration
        self.tokens_processed += tokens
        self.kv_used_area += kv_area
        if kv_peak > self.kv_used_max:
            self.kv_used_max = kv_peak

    def _account_filled(self, area: float, peak: int) -> None:
        """Contiguous KV: Σ blocks the tokens fill × duration, and the most
        filled in any iteration (paging would have held exactly these)."""
        self.kv_filled_area += area
        if peak > self.kv_filled_max:
            self.kv_filled_max = peak

    def _step_started(self, now: float, held: int, filled: int) -> None:
        """Keep the iteration now starting for :meth:`done_before`. Set here, in the class that declares the
        attributes: set from a subclass's method, mypyc 1.13's code generator fails on them under some hash
        seeds ("value is not in list" in emit_attr_bitmap_set), and the install falls back to plain Python."""
        self.step_t0 = now
        self.step_held = held
        self.step_filled = filled

    def done_before(self, now: float) -> dict:
        """The share of the work in flight at ``now`` that ran before it: the time iterating and the KV held
        meanwhile, and the iterations (and their tokens) that ended by then. A warm start's window opens at
        ``now`` (fleet/window.py), and the counters account an iteration only at its end, so without this
        the lead-in's part of it counted in the window (a saturated pool read busy more than all its time)."""
        if not self.in_flight:
            return {}
        d = now - self.step_t0
        out: dict = {"busy_time": d, "kv_used_area": d * self.step_held}
        if self.contiguous:
            out["kv_filled_area"] = d * self.step_filled
        return out

    def stats(self, now: float) -> dict:
        out = {
            "preemptions": self.preemptions,
            "outputs_clipped": self.outputs_clipped,
            "busy_time": self.busy_time,
            "tokens_processed": self.tokens_processed,
            "iterations": self.iterations,
            "kv_used_area": self.kv_used_area,
            "kv_used_max": self.kv_used_max,
            "num_blocks": self.num_blocks,
            "queue_mean": self.queue_len.mean(now),
            "queue_max": self.queue_len.max,
            "batch_mean": self.batch_size.mean(now),
            "batch_max": self.batch_size.max,
            "prefix_cache": None if self.cache is None else self.cache.stats(),
        }
        if self.lora is not None:
            out["lora"] = self.lora.stats()
        if self.contiguous:
            out["kv_filled_area"] = self.kv_filled_area
            out["kv_filled_max"] = self.kv_filled_max
        return out
