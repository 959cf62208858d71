"""Iteration time of a pipeline-parallel replica: ``pp`` micro-batches in flight.

What the stacks do. vLLM V1 keeps a batch queue of
``max_concurrent_batches`` = ``pp`` scheduled batches
(vllm/v1/engine/core.py ``EngineCore.step_with_batch_queue``: it schedules
a new batch whenever the queue has room and blocks on the oldest only when
it is full). A decoding request cannot sit in two batches at once: once
scheduled its ``num_computed_tokens`` runs ahead of its tokens until the
sampled token comes back, so ``schedule()`` skips it ("PP>1 and we have
already scheduled all prompt tokens but they are not finished yet",
vllm/v1/core/sched/scheduler.py); the prompt tokens of a long prefill do
flow into successive batches, a chunk of up to ``max_num_batched_tokens``
each. SGLang's ``event_loop_pp`` (managers/scheduler_pp_mixin.py, "a
non-overlap scheduler loop") keeps ``pp_size`` running batches, one per
micro-batch, and launches them round robin. SGLang's loop and vLLM's
before 0.15.0 run the pipeline without overlap scheduling (vLLM 0.14's
``VllmConfig.__post_init__``, vllm/config/vllm.py, turns async scheduling
off when pipeline_parallel_size > 1). vLLM 0.15 schedules asynchronously
with pp > 1 but keeps a request out of the next batch while its token is
in flight (``Scheduler.schedule``: "do not schedule another step for the
same request while it still has output placeholders for PP", PR #32359),
so each token still waits for its output to be processed and scheduled:
the rounds below, priced in turn (``engine.pp_async: one_batch``).

The formulation. The engines' iteration is one *round* of the pipeline, in
which every running sequence advances once: its decodes and prefill chunks
are split into ``m = min(pp, pieces)`` micro-batches (a decode is one piece;
a prefill chunk is one per ``max_num_batched_tokens`` of it, the stacks'
per-batch budget), as even in tokens as the pieces allow. Micro-batch j
spends ``τ_j`` on each stage; with balanced micro-batches the first stage is
busy ``m·τ`` per round while one micro-batch's walk through all stages takes
``pp·τ + (pp − 1)·δ`` (δ: handing its activations to the next stage), and
a sequence's next token needs its previous one, so the round lasts one
walk: the whole model's time on ``1/m`` of the round's tokens (never less
than the largest piece: a prompt chunk is not halved; that micro-batch
carries its share of the attention in proportion to its tokens), plus the
transfers, plus the CPU time to schedule that micro-batch. That is the
bubble: with fewer micro-batches than stages (one request at low load)
stages idle ``(pp − m)/pp`` of the round and a token pays every stage in
sequence plus the transfers; with ``pp`` micro-batches every stage is busy
and the replica decodes ``pp`` times the tokens of one walk. Where ``pp``
does not divide the layers, the busiest stage's share of the ``m``
micro-batches (:attr:`Pipeline.imbalance`) stretches the layers' time when
it exceeds one walk.

Scheduling ahead (``engine.pp_async: run_ahead``: vLLM 0.16.0 and later,
PR #32618, with async scheduling on the mp executor). The scheduler puts a
request in the next batch before its token is back and the last stage
broadcasts the sampled tokens to the other stages over the GPUs
(vllm/v1/worker/gpu_model_runner.py ``_pp_broadcast_prev_sampled_token_ids``,
received in ``sample_tokens`` before the next batch's inputs are built). So
every batch holds every running sequence, and a batch's decodes cannot enter
the first stage before the previous batch's tokens leave the last: the
batches walk one after another, and the CPU, which schedules up to ``pp``
batches ahead (``max_concurrent_batches`` = pp), shows only where its time
for a batch outlasts the walk (:meth:`CostModel.exposed_cpu`). A round is
then one micro-batch of the whole batch (``m = 1``, the stack's budget of
``max_num_batched_tokens``), its walk through every stage, the hand-offs,
and the tokens' way back from the last stage to the first. Decoding, that
trades the in-turn round's CPU time for the attention of the micro-batches
that no longer overlap; a prompt chunk no longer shares the round with the
others' budgets.

What it leaves out: micro-batches are taken as balanced (SGLang admits
into each running batch in turn; in vLLM arrivals join whichever batch is
scheduled next, which under steady load balances them, but a burst admitted
together stays in one micro-batch), the fill of a lone long prompt whose
chunks pipeline across batches (one stage time, ``walk/pp``, per prompt),
and an arrival joins at the end of the round rather than at the next
micro-batch slot (a wait of at most one round instead of one stage time).
Scheduling ahead, a new request joins the batch after next (the engine's
``schedule_ahead``), which is vLLM's batch queue at ``pp = 2``; with more
stages it waits behind up to ``pp − 1`` queued batches, and the prompt
chunks of a batch without decodes, which could enter the first stage
before the previous batch has left, walk one batch at a time too.
"""
from __future__ import annotations

from typing import Sequence

from ..errors import LlmsimError
from ..pipeline import ACTIVATION_BYTES, STAGE_TENSORS, Pipeline
from .rank_load import RankLoad
from .step import CostModel

_US = 1e-6


class PipelineCostModel(CostModel):
    """A :class:`CostModel` of one stage's ``tp`` GPUs walked ``pp`` times.

    A subclass, not a wrapper: the (compiled) engines type their cost model
    as a CostModel. It shares the stage model's memoised components (the
    whole model's layers on ``tp`` GPUs: a walk through all stages runs every
    layer once) and answers :meth:`step_time` and
    :meth:`decode_coefficients` for a round of micro-batches. A stage model
    with ``async_scheduling`` prices the pipeline scheduled ahead (one batch
    per round, its CPU time overlapped), as vLLM from 0.16.0 runs it."""

    def __init__(self, stage: CostModel, pipe: Pipeline, micro_batch_tokens: int):
        self.__dict__.update(stage.__dict__)
        if stage.ops is not None:
            raise LlmsimError("pipeline stages are priced for uniform dense layers only", key_path="pp")
        self.pipe, self.pp = pipe, pipe.pp
        self.gpus = stage.gpus * pipe.pp
        self.micro_batch_tokens = micro_batch_tokens
        ic, ar = self.gpu.interconnect, self.cal.allreduce
        self._cross = pipe.crossings()
        if self._cross and ic.scale_out_gb_s is None:
            raise LlmsimError(f"tp {pipe.tp} × pp {pipe.pp} spans more than one {ic.max_tp}-GPU domain of "
                              f"{self.gpu.name}, whose profile has no interconnect.scale_out_gb_s for the "
                              "activations between stages", key_path="pp")
        self._near = (ar.latency_us * _US, self.group_bw(2))
        self._far = (ic.scale_out_latency_us * _US, (ic.scale_out_gb_s or 0.0) * 1e9)
        self._gather = (ar.latency_us * _US, self.group_bw(self.tp) * ar.eta_by_gpus.get(self.tp, ar.eta_bandwidth))
        self._transfer_cache: dict[int, float] = {}
        # The busiest stage's share of one eager forward's launches (costmodel/eager.py).
        self._stage_eager_s = self.eager_s * max(pipe.layers) / sum(pipe.layers)

    def transfer_time(self, tokens: int) -> float:
        """The ``pp − 1`` hand-offs of one micro-batch of ``tokens`` tokens.

        Each of the stage's ``tp`` GPUs sends its ``1/tp`` slice of the hidden
        state and residual to its peer in the next stage, which all-gathers
        them inside its NVLink group (vLLM's ``send_tensor_dict`` with
        ``all_gather_group``); a boundary between scale-up domains crosses
        the scale-out network (one NIC per GPU), the others NVLink."""
        t = self._transfer_cache.get(tokens)
        if t is None:
            msg = STAGE_TENSORS * tokens * self.model.hidden_size * ACTIVATION_BYTES
            part = msg / self.tp
            near = self._near[0] + part / self._near[1]
            far = self._far[0] + part / self._far[1] if self._cross else 0.0
            gather = self._gather[0] + (self.tp - 1) / self.tp * msg / self._gather[1] if self.tp > 1 else 0.0
            t = self._cross * far + (self.pp - 1 - self._cross) * near + (self.pp - 1) * gather
            self._transfer_cache[tokens] = t
        return t

    def token_return_time(self) -> float:
        """Scheduled ahead, the sampled tokens' way from the last stage back
        to the first (a broadcast of 4 bytes per sequence over the stages:
        the links' latency, crossing the boundaries the activations cross).
        In turn they go back through the CPU, inside its time per round."""
        return self._cross * self._far[0] + (self.pp - 1 - self._cross) * self._near[0]

    def micro_batches(self, prefill_chunks: Sequence[tuple[int, int]], decode_batch: int) -> int:
        """How many micro-batches a round's work fills (at most ``pp``;
        scheduled ahead, one: every batch holds every running sequence)."""
        if self.async_scheduling:
            return 1
        b = self.micro_batch_tokens
        pieces = decode_batch + sum(-(-c // b) for c, _ in prefill_chunks)
        return max(1, min(self.pp, pieces))

    def _slowest(self, prefill_chunks: Sequence[tuple[int, int]], tokens: int, m: int) -> int:
        """Tokens of the round's largest micro-batch: an even share, but never
        less than its largest piece (a prompt chunk runs in one micro-batch)."""
        b = self.micro_batch_tokens
        piece = max((-(-c // -(-c // b)) for c, _ in prefill_chunks), default=1)
        return max(-(-tokens // m), piece)

    def _stretch(self, tokens: int, n: int) -> float:
        """Layer time of a round against the walk of its largest micro-batch
        (``n`` of ``tokens``): the busiest stage runs its share of every
        micro-batch back to back, which outlasts one walk only where the
        layers split unevenly."""
        return max(1.0, self.pipe.imbalance * tokens / (self.pp * n))

    def launch_floor(self, prefill_chunks: Sequence[tuple[int, int]], n: int, m: int) -> float:
        """The least a round of ``m`` micro-batches of up to ``n`` tokens lasts on its stages' kernel
        launches: a micro-batch holding prompt tokens beyond the captured graphs runs eagerly, each
        stage's CPU launching its own layers' kernels, concurrently with the other stages' but one
        micro-batch after another, so the round waits for the busiest stage's launches of all ``m``."""
        if not prefill_chunks or n <= self.graph_max_tokens:
            return 0.0
        return m * self._stage_eager_s

    def step_time(self, prefill_chunks: Sequence[tuple[int, int]] = (), decode_batch: int = 0,
                  decode_context: float = 0.0, sampling_seqs: int | None = None, adapters: int = 0,
                  load: RankLoad | None = None) -> float:
        """Seconds of one round: the walk of its largest micro-batch, which
        carries ``n/tokens`` of the round's attention work (one attention rank
        and no adapters: a pipeline's set-up refuses dp and LoRA, so ``load``
        and ``adapters`` are never given)."""
        tokens = decode_batch + sum(c[0] for c in prefill_chunks)
        if tokens == 0:
            return 0.0
        seqs = decode_batch + len(prefill_chunks)
        if sampling_seqs is None:
            sampling_seqs = seqs
        m = self.micro_batches(prefill_chunks, decode_batch)
        n = self._slowest(prefill_chunks, tokens, m)
        share = n / tokens
        layers = self.token_time(n) + self.prefill_attention_time(prefill_chunks) * share
        if decode_batch:
            layers += (self.decode_rate * (decode_context * share)
                       + self.decode_per_seq * -(-(decode_batch * n) // tokens) + self.decode_fixed)
        gpu = self._stretch(tokens, n) * layers + self.lm_head_time(-(-sampling_seqs // m)) + self.transfer_time(n)
        gpu = max(gpu, self.launch_floor(prefill_chunks, n, m))
        if not self.async_scheduling:
            return gpu + self.overhead_s + self.overhead_per_seq_s * seqs / m
        gpu += self.token_return_time()
        return gpu + self.exposed_cpu(gpu - self._decode_context_time(decode_batch, decode_context), seqs)

    def decode_coefficients(self, batch: int, adapters: int = 0, busiest: int = 0) -> tuple[float, float]:
        """(a, b) with step_time(decode only, batch, S) == a + b·S (one rank, no adapters: ``step_time``)."""
        m = self.micro_batches((), batch)
        n = -(-batch // m)
        f = self._stretch(batch, n)
        gpu = (f * (self.token_time(n) + self.decode_per_seq * n + self.decode_fixed) + self.lm_head_time(n)
               + self.transfer_time(n))
        if not self.async_scheduling:
            return gpu + self.overhead_s + self.overhead_per_seq_s * batch / m, f * self.decode_rate * (n / batch)
        gpu += self.token_return_time()
        return gpu + self.exposed_cpu(gpu, batch), f * self.decode_rate

    def step(self, *args, **kwargs):
        raise LlmsimError("no per-component breakdown for a pipeline-parallel round (a round mixes micro-batches "
                          "on different stages)", key_path="pp")

    def describe(self) -> dict:
        out = super().describe()
        out.update(pp=self.pp, stage_layers=list(self.pipe.layers), scale_out_boundaries=self._cross,
                   pp_scheduling="ahead" if self.async_scheduling else "in turn")
        return out

