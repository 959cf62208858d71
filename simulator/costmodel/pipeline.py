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
micro-batch, and launches them round robin. Both run the pipeline without
overlap scheduling (vLLM disables async scheduling when
pipeline_parallel_size > 1, vllm/config/vllm.py).

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

What it leaves out: micro-batches are taken as balanced (SGLang admits
into each running batch in turn; in vLLM arrivals join whichever batch is
scheduled next, which under steady load balances them, but a burst admitted
together stays in one micro-batch), the fill of a lone long prompt whose
chunks pipeline across batches (one stage time, ``walk/pp``, per prompt),
and an arrival joins at the end of the round rather than at the next
micro-batch slot (a wait of at most one round instead of one stage time).
"""
from __future__ import annotations

from typing import Sequence

from ..errors import LlmsimError
from ..pipeline import ACTIVATION_BYTES, STAGE_TENSORS, Pipeline
from .step import CostModel

_US = 1e-6


class PipelineCostModel(CostModel):
    """A :class:`CostModel` of one stage's ``tp`` GPUs walked ``pp`` times.

    A subclass, not a wrapper: the (compiled) engines type their cost model
    as a CostModel. It shares the stage model's memoised components (the
    whole model's layers on ``tp`` GPUs: a walk through all stages runs every
    layer once) and answers :meth:`step_time` and
    :meth:`decode_coefficients` for a round of micro-batches."""

    def __init__(self, stage: CostModel, pipe: Pipeline, micro_batch_tokens: int):
        self.__dict__.update(stage.__dict__)
        if stage.ops is not None:
            raise LlmsimError("pipeline stages are priced for uniform dense layers only", key_path="pp")
        if stage.async_scheduling:
            raise LlmsimError("pipeline parallelism runs without async scheduling (vLLM disables it with "
                              "pipeline_parallel_size > 1)", key_path="engine.async_scheduling")
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

    def micro_batches(self, prefill_chunks: Sequence[tuple[int, int]], decode_batch: int) -> int:
        """How many micro-batches a round's work fills (at most ``pp``)."""
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

    def step_time(self, prefill_chunks: Sequence[tuple[int, int]] = (), decode_batch: int = 0,
                  decode_context: float = 0.0, sampling_seqs: int | None = None) -> float:
        """Seconds of one round: the walk of its largest micro-batch, which
        carries ``n/tokens`` of the round's attention work."""
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
        return gpu + self.overhead_s + self.overhead_per_seq_s * seqs / m

    def decode_coefficients(self, batch: int) -> tuple[float, float]:
        """(a, b) with step_time(decode only, batch, S) == a + b·S."""
        m = max(1, min(self.pp, batch))
        n = -(-batch // m)
        f = self._stretch(batch, n)
        a = (f * (self.token_time(n) + self.decode_per_seq * n + self.decode_fixed) + self.lm_head_time(n)
             + self.transfer_time(n) + self.overhead_s + self.overhead_per_seq_s * batch / m)
        return a, f * self.decode_rate * (n / batch)

    def step(self, *args, **kwargs):
        raise LlmsimError("no per-component breakdown for a pipeline-parallel round (a round mixes micro-batches "
                          "on different stages)", key_path="pp")

    def describe(self) -> dict:
        out = super().describe()
        out.update(pp=self.pp, stage_layers=list(self.pipe.layers), scale_out_boundaries=self._cross)
        return out

