"""Speculative decoding as a transformation of a pool's cost model.

Why a cost-model transformation and not an engine change: both replica
engines advance every decoding sequence an iteration runs by exactly one token,
which keeps KV growth, block allocation and batch composition exact and
keeps the fast engine's closed form (decode time affine in the batch's total
context, :meth:`CostModel.decode_coefficients`). Speculation changes how
long a token takes, not what the scheduler does, so it is folded into the
time of an iteration: a decode-only iteration of batch ``b`` at total
context ``S`` (Σ over the batch of cached tokens + 1) takes

    (k · t_draft(b, S) + t_verify(b, S)) / E,    E = (1 − α^(k+1)) / (1 − α),

the expected time per emitted token of one speculative step. A step runs the
draft model ``k`` times (its own cost model: same GPU kind, TP and dtypes as
the target; draft step ``j`` attends to ``j`` more tokens) and the target
once over ``k + 1`` tokens per sequence (its linear layers, all-reduces and
LM head on ``b·(k+1)`` tokens, and an "extend" attention of ``k + 1`` new
tokens over each sequence's cached context, with the target's prefill
calibration; MLA's absorbed decode kernel for an MLA target). Both parts
are affine in ``S`` for a fixed batch, so the quotient is too: the fast and
the reference engine stay exact against each other.

What is approximate, and why:

* **Expected value.** E counts the accepted draft tokens plus the target's
  bonus token with every draft token accepted independently with
  probability α. The simulator emits exactly one token per sequence per
  (amortised) iteration, so per-request TPOT, throughput and KV are right in
  expectation (renewal: N tokens take ≈ N / E steps); the burstiness of real
  inter-token gaps (several tokens at once, then a pause) and the variance
  of a request's latency are not modelled, and ITL percentiles are the
  amortised gap.
* **α per class: the batch's mean E.** A class may set its own
  ``speculative_acceptance_rate`` (code completions accept more draft tokens
  than chat). In a real batch every sequence runs the same draft + verify
  step and sequence i advances E_i tokens. The engines advance every
  sequence one token per iteration (that is what keeps KV growth, block
  demand and the fast engine's one ``a + b·S`` per decode stretch exact),
  so a batch of mixed classes is charged the step over the *mean* E of its
  decoding sequences, Ē = Σ E_i / B, recomputed whenever the decoding set
  changes (every scheduling boundary; within a fast-engine stretch the set
  is fixed). Tokens per second of the whole batch are then exact (B tokens
  per step / Ē = Σ E_i per step), but inside a mixed batch every class gets
  the same TPOT: a class with E_i streams at Ē / E_i of its true speed (α 0.9
  beside 0.6 at k = 5, half each: E 4.69 and 2.38, Ē 3.54, so the first
  streams 25 % too slow and the second 48 % too fast; section d of
  docs/speculative.md measures −20 % / +40 %). A batch of one class, or a
  sequence alone, is exact. A higher-α
  class therefore gets a lower TPOT only in proportion to how much of its
  batches it fills. The exact alternative (per-sequence token rates)
  would need fractional KV growth per class in both engines; not done.
* **Verification attention.** The extend attention is split into a part
  proportional to the cached context and a per-sequence part (the k + 1
  queries' causal triangle, Q/O and new K/V), each put through the roofline
  blend separately. With the calibrated GPUs' ``sharpness: 1`` this equals
  :meth:`CostModel.prefill_attention_time` over the ``(k+1, cached)`` chunks
  exactly; with a sharper knee (``--roofline``, s = ∞) it is an upper
  bound (the s-norm's triangle inequality) that stays affine, as the fast
  engine needs. An MLA target verifies on its absorbed decode kernel
  instead (k + 1 queries per sequence over the latent cache, read once, and
  the absorbed batched GEMMs per query token), as the stacks run MTP
  verification: the prefill path would up-project every cached token per
  head, and priced that way verification cost several plain decode steps.
* **Mixed iterations** (prefill chunks beside decodes): the decode part is
  replaced by its speculative cost — plain iteration time − plain
  decode-only time + speculative decode time — and the draft also prefills
  the chunks (it needs the prompt's KV to propose). Rejection sampling, the
  draft's bonus-token catch-up, and the k lookahead KV slots a sequence
  holds during verification are not charged.
  Where the stack does not draft in such an iteration
  (``EngineConfig.mixed_step_drafts`` false: SGLang from 0.5.19, whose
  running requests take a plain one-token decode inside a mixed step,
  scheduler.py get_new_batch_prefill and schedule_batch.py
  mix_with_running), it costs the plain iteration plus the draft's pass
  over the same tokens (eagle_worker_v2.py forward_batch_generation: the
  extend branch, then _draft_extend_for_prefill over the whole batch, one
  token per decode), which seeds the next iteration's proposal.
* **Load threshold.** Above ``disable_above_batch`` decoding sequences an
  iteration costs exactly what the plain model says (vLLM v0's
  ``speculative_disable_by_batch_size``, which then skips the draft
  entirely, prefill included). A sequence that was prefilled above the
  threshold speculates later when the load drops (vLLM v0 would not).
* **Memory.** The draft's weights (in the pool's weight dtype) come off the
  KV budget and each block holds target and draft KV (the pool's KV dtype),
  as vLLM splits blocks between scorer and proposer; the draft's activation
  peak is not added (it runs after the target's, which the reserve sizes).
* **Overhead.** Every draft step pays the pool's per-iteration overhead, as
  the target's iterations do (vLLM launches each draft step separately).
"""
from __future__ import annotations

import copy
from dataclasses import replace
from typing import Optional, Sequence

from pydantic import BaseModel, ConfigDict, Field

from ..dtypes import linear_dtype
from ..errors import LlmsimError
from ..memory import MemoryPlan, pool_blocks
from ..parallelism import replica_kv_bytes_per_token, replica_weight_bytes
from ..profiles.model import ModelProfile, load_model
from . import components as C
from .rank_load import RankLoad
from .roofline import blend
from .step import CostModel

__all__ = ["SpeculativeSpec", "SpeculativeCostModel", "expected_tokens_per_step", "speculative_cost_model",
           "speculative_memory", "speculative_setup", "draft_kind"]

_US = 1e-6
MTP = "mtp"   # draft_model naming the target's own next-token-prediction layers


def draft_kind(draft_model: object) -> str:
    """What decodes beside a pool's model, as the stacks tell drafts apart in their scheduling and
    memory: "" nothing (no draft), "mtp" the model's own MTP layers (an EAGLE-style head), "draft" a
    separate draft model."""
    if draft_model is None:
        return ""
    return "draft" if isinstance(draft_model, str) and draft_model != MTP else "mtp"


class SpeculativeSpec(BaseModel):
    """A pool's draft-model speculative decoding (``pools[].speculative``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    draft_model: str = Field(description="draft model: built-in name, model YAML or config.json path; it must "
                                         "share the target's vocabulary and runs on the pool's GPUs, TP and dtypes; "
                                         "or `mtp`: the target's own next-token-prediction layers (DeepSeek "
                                         "num_nextn_predict_layers), as vLLM's MTP speculative method")
    k: int = Field(ge=1, le=64, description="draft tokens proposed per step (at most 64: deployed drafts propose 1-8)")
    acceptance_rate: float = Field(gt=0, lt=1, allow_inf_nan=False,
                                   description="α: probability that the target accepts a draft token")
    disable_above_batch: Optional[int] = Field(
        default=None, ge=1, description="plain decoding while more sequences than this decode (throughput at peak; "
                                                  "TensorRT-LLM's max_concurrency; refused under the vllm and sglang "
                                                  "backends, whose stacks have no such setting)")


def expected_tokens_per_step(k: int, alpha: float) -> float:
    """E = (1 − α^(k+1)) / (1 − α): accepted draft tokens plus the target's own."""
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


class SpeculativeCostModel:
    """A target :class:`CostModel` whose decode tokens cost a speculative step / E.

    It answers :meth:`step_time` and :meth:`decode_coefficients` as the
    engines need them and carries the target's identity (model, GPU, TP,
    dtypes). There is no ``step`` breakdown: a per-component breakdown of an
    amortised step would mix two models and mean little.
    """

    def __init__(self, target: CostModel, draft: CostModel, spec: SpeculativeSpec):
        self.target, self.draft, self.spec = target, draft, spec
        self.model, self.gpu, self.tp, self.gpus = target.model, target.gpu, target.tp, target.gpus
        self.weight_dtype, self.kv_dtype, self.roofline = target.weight_dtype, target.kv_dtype, target.roofline
        self.cal, self.overhead_s, self.overhead_per_seq_s = target.cal, target.overhead_s, target.overhead_per_seq_s
        self.k = spec.k
        self.tokens_per_step = expected_tokens_per_step(spec.k, spec.acceptance_rate)
        # Per-class α overrides (class -> α, and class -> E as the engines read it).
        self.class_acceptance: dict[str, float] = {}
        self.class_tokens_per_step: dict[str, float] = {}
        # Extend attention of k+1 queries: flops/bytes are affine in the cached
        # context, so split them into a per-cached-token and a per-sequence part.
        t, p, q = target, target.cal.attention_prefill, spec.k + 1
        if t.ops is not None:   # MoE/MLA/sliding-window/dp: the same split, layer kind by layer kind
            self._verify_rate, self._verify_per_seq, self._verify_fixed = t.ops.extend_parts(q)
        else:
            shape = (t.heads, t.kv_heads, t.head_dim, t.kv_bytes)
            f0, b0 = C.prefill_attention_flops_bytes(q, 0, *shape)
            f1, b1 = C.prefill_attention_flops_bytes(q, 1, *shape)

            def roof(flops: float, nbytes: float) -> float:
                return t.layers * blend(flops / (t.peak_attn * p.eta_compute), nbytes / (t.hbm_bw * p.eta_memory),
                                        p.sharpness)

            self._verify_rate = roof(f1 - f0, b1 - b0)
            self._verify_per_seq = roof(f0, b0)
            self._verify_fixed = t.layers * p.fixed_us * _US
        self._coef: dict[int, tuple[float, float]] = {}
        self._step_coef: dict[int, tuple[float, float]] = {}
        # Whether decodes draft in an iteration that prefills beside them (EngineConfig.mixed_step_drafts).
        self.mixed_step_drafts = True

    def with_class_rates(self, acceptance: dict[str, float]) -> "SpeculativeCostModel":
        """This model with per-class acceptance rates (class → α) overriding
        the pool's for those classes' sequences (see "α per class" above)."""
        out = copy.copy(self)
        out.class_acceptance = dict(acceptance)
        out.class_tokens_per_step = {c: expected_tokens_per_step(self.k, a) for c, a in acceptance.items()}
        return out

    def with_mixed_step_drafts(self, drafts: bool) -> "SpeculativeCostModel":
        """This model with the decodes of a mixed iteration drafting or not
        (``EngineConfig.mixed_step_drafts``; see "Mixed iterations" above)."""
        if drafts == self.mixed_step_drafts:
            return self
        out = copy.copy(self)
        out.mixed_step_drafts = drafts
        return out

    def speculates(self, batch: int, prefilling: bool = False) -> bool:
        """Whether an iteration with ``batch`` decoding sequences, and prompt
        chunks beside them where ``prefilling``, has them draft."""
        limit = self.spec.disable_above_batch
        return (limit is None or batch <= limit) and (self.mixed_step_drafts or not prefilling)

    def draft_tokens(self, batch: int, prefilling: bool = False) -> int:
        """Draft tokens each decode of an iteration with ``batch`` decoding
        sequences (beside prompt chunks where ``prefilling``) carries for the
        target to verify: a stack whose scheduler counts them
        (``draft_tokens_in_budget``) takes them from its budget."""
        return self.k if self.speculates(batch, prefilling) else 0

    # --- the two halves of a step (seconds, for a whole step, not amortised) --
    def draft_time(self, batch: int, context: float) -> float:
        """k draft decode iterations; iteration j attends to j more tokens per sequence."""
        a, r = self.draft.decode_coefficients(batch)
        k = self.k
        return k * a + r * (k * context + batch * k * (k - 1) / 2.0)

    def verify_time(self, batch: int, context: float) -> float:
        """The target's pass over k+1 tokens per sequence (``context`` counts
        each sequence's cached tokens + 1, as for a plain decode)."""
        t, n = self.target, batch * (self.k + 1)
        attention = self._verify_rate * (context - batch) + self._verify_per_seq * batch + self._verify_fixed
        # MLA's absorbed batched GEMMs run per query token, as in a decode of n tokens.
        tokens = t.token_time(n) + t.lm_head_time(n) + (t.ops.decode_extra(t.ops.rank(n)) if t.ops is not None else 0.0)
        if not t.async_scheduling:
            return tokens + attention + t.overhead_s + t.overhead_per_seq_s * batch
        fixed = tokens + self._verify_per_seq * batch + self._verify_fixed
        return fixed + self._verify_rate * (context - batch) + t.exposed_cpu(fixed, batch)

    # --- what the engines call ---------------------------------------------------
    def step_coefficients(self, batch: int) -> tuple[float, float]:
        """(a, r) with one whole speculative step (k drafts + verify, not
        amortised) of ``batch`` sequences taking a + r·S."""
        c = self._step_coef.get(batch)
        if c is None:
            # Both halves are affine in S: read the coefficients off S = 0 and 1.
            a = self.draft_time(batch, 0.0) + self.verify_time(batch, 0.0)
            r = self.draft_time(batch, 1.0) + self.verify_time(batch, 1.0) - a
            c = self._step_coef[batch] = (a, r)
        return c

    def decode_coefficients(self, batch: int, tokens_per_step: float | None = None,
                            busiest: int = 0) -> tuple[float, float]:
        """(a, r) with a decode-only iteration taking a + r·S, S the total
        context: a step over E tokens per sequence (the pool's E, or the
        batch's mean ``tokens_per_step`` with per-class α). ``busiest``: the
        most decodes one attention-DP rank runs, read where the draft does not
        run (a drafting step's halves split the batch evenly over the ranks)."""
        if batch <= 0 or not self.speculates(batch):
            return self.target.decode_coefficients(batch, busiest=busiest)
        if tokens_per_step is not None and tokens_per_step != self.tokens_per_step:
            a, r = self.step_coefficients(batch)
            return a / tokens_per_step, r / tokens_per_step
        c = self._coef.get(batch)
        if c is None:
            a, r = self.step_coefficients(batch)
            c = self._coef[batch] = (a / self.tokens_per_step, r / self.tokens_per_step)
        return c

    def step_time(self, prefill_chunks: Sequence[tuple[int, int]] = (), decode_batch: int = 0,
                  decode_context: float = 0.0, sampling_seqs: int | None = None,
                  tokens_per_step: float | None = None, load: RankLoad | None = None) -> float:
        """Seconds for one iteration, decode tokens at their amortised
        speculative cost (``tokens_per_step``: as in :meth:`decode_coefficients`);
        ``load``: the attention-DP rank each chunk and decode runs on (None: spread
        evenly), read by the target's and the draft's passes over the prompt chunks
        and by the target's decodes where the draft does not run."""
        t, b = self.target, decode_batch
        if not self.speculates(b, bool(prefill_chunks) and b > 0):
            plain = t.step_time(prefill_chunks, b, decode_context, sampling_seqs, load=load)
            if not self.speculates(b):   # above disable_above_batch the draft does not run at all
                return plain
            # A mixed iteration whose decodes do not draft: the draft extends over its tokens all the same.
            return plain + self.draft.step_time(prefill_chunks, b, decode_context, sampling_seqs, load=load)
        if sampling_seqs is None:
            sampling_seqs = b + len(prefill_chunks)
        total = 0.0
        if b > 0:
            a, r = self.decode_coefficients(b, tokens_per_step)
            total = a + r * decode_context
        if prefill_chunks:
            plain_decode = t.step_time((), b, decode_context, b, load=load) if b > 0 else 0.0
            total += t.step_time(prefill_chunks, b, decode_context, sampling_seqs, load=load) - plain_decode
            total += self.draft.step_time(prefill_chunks, 0, 0.0, sampling_seqs - b,
                                          load=None if load is None else load.prompts_only())
        return total

    def describe(self) -> dict:
        s = self.spec
        out = {"draft_model": self.draft.model.name, "k": s.k, "acceptance_rate": s.acceptance_rate,
               "tokens_per_step": self.tokens_per_step, "disable_above_batch": s.disable_above_batch}
        if self.class_acceptance:
            out["classes"] = self.class_figures()
        return {**self.target.describe(), "speculative": out}

    def class_figures(self) -> dict[str, dict[str, float]]:
        """Per-class α and E for the classes that set their own."""
        return {c: {"acceptance_rate": a, "tokens_per_step": self.class_tokens_per_step[c]}
                for c, a in self.class_acceptance.items()}


def speculative_cost_model(cm: CostModel, spec: SpeculativeSpec, draft: ModelProfile | None = None
                           ) -> SpeculativeCostModel:
    """Wrap a pool's cost model; ``draft`` overrides loading ``spec.draft_model``.

    The draft inherits the target's GPU, TP, dtypes, per-iteration overhead,
    launch cost and roofline mode, so quantising a pool quantises both models
    alike, and the draft's prefill past the captured graphs waits out its own
    launches as the target's does (its decode steps replay graphs).
    """
    if draft is None:
        draft = cm.model.mtp_draft() if spec.draft_model == MTP else load_model(spec.draft_model)
    if draft.vocab_size != cm.model.vocab_size:
        raise LlmsimError(f"draft model {draft.name} has a {draft.vocab_size:,}-token vocabulary but the target "
                          f"{cm.model.name} has {cm.model.vocab_size:,}: a draft must share the target's tokenizer")
    # A dense draft of a target in an experts-only format (MXFP4) keeps its linear layers' format.
    wd = cm.weight_dtype if draft.is_moe else linear_dtype(cm.weight_dtype)
    draft_cm = CostModel(draft, cm.gpu, cm.tp, wd, cm.kv_dtype, roofline=cm.roofline,
                         iteration_overhead_ms=cm.overhead_s * 1e3, iteration_us_per_seq=cm.overhead_per_seq_s * 1e6,
                         dp=cm.dp, ep=cm.ep if draft.is_moe else 1, mxfp4_activation=cm.mxfp4_activation,
                         async_scheduling=cm.async_scheduling, eager_launch_us=cm.eager_launch_us,
                         graph_max_tokens=cm.graph_max_tokens, mxfp4_expert_layout=cm.mxfp4_expert_layout)
    if not cm.vllm_kernels:   # the draft runs the target's stack (its GPU has that stack's kernels already)
        draft_cm.block_linear = None
    return SpeculativeCostModel(cm, draft_cm, spec)


def speculative_memory(mem: MemoryPlan, scm: SpeculativeCostModel) -> MemoryPlan:
    """The target's memory plan with the draft's weights and KV added."""
    draft, par = scm.draft.model, scm.draft.par
    weights = replica_weight_bytes(draft, par, scm.weight_dtype, scm.draft.expert_storage)   # padded as the target's
    if scm.spec.draft_model == MTP:   # embedding and LM head are the target's own
        weights -= par.dp * (draft.embedding_params + draft.lm_head_params) * 2.0
    per_token = mem.kv_bytes_per_token + replica_kv_bytes_per_token(draft, par, scm.kv_dtype)
    if mem.draft_in_reserve:
        # the draft's weights and its pool of as many tokens come out of the reserve (SGLang to 0.5.13)
        return replace(mem, weights_bytes=mem.weights_bytes + weights, kv_bytes_per_token=per_token)
    kv_cap = mem.kv_capacity_bytes - weights
    if kv_cap <= per_token * mem.block_size:
        raise LlmsimError(f"the draft model {draft.name} ({weights / 1e9:.1f} GB of weights) leaves no KV memory "
                          f"beside {scm.model.name} on {scm.tp}× {scm.gpu.name}")
    return replace(mem, weights_bytes=mem.weights_bytes + weights, kv_capacity_bytes=kv_cap,
                   kv_bytes_per_token=per_token, num_blocks=pool_blocks(kv_cap, per_token * mem.block_size, mem.dp))


def speculative_setup(cm: CostModel, mem: MemoryPlan, spec: SpeculativeSpec, mixed_step_drafts: bool = True
                      ) -> tuple[SpeculativeCostModel, MemoryPlan]:
    """What a pool with ``speculative:`` runs on: the wrapped cost model and its memory
    (``mixed_step_drafts``: the pool's engine key of that name)."""
    scm = speculative_cost_model(cm, spec).with_mixed_step_drafts(mixed_step_drafts)
    return scm, speculative_memory(mem, scm)
