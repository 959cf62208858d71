"""How long a request each stack takes, counted as the stack counts it.

A deployment's length limit (vLLM's ``--max-model-len``, SGLang's ``--context-length``,
TensorRT-LLM's ``max_seq_len``: ``engine.max_model_len``, else the model's context) is not
always compared with the prompt and output alone: under speculative decoding SGLang's
tokenizer counts an EAGLE-style draft's slots into the prompt, and some releases refuse a
request of the whole context; TensorRT-LLM's executor lengthens ``max_seq_len`` by the draft
tokens (and by one for its overlap scheduler) before its worker cuts an output to it. The
replica's arrival check and output cut and the scenario's workload check all ask here, so that
they count alike."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..costmodel.speculative import MTP, SpeculativeSpec, draft_kind
from .config import EngineConfig


def draft_slots(cfg: EngineConfig, spec: Optional[SpeculativeSpec]) -> int:
    """Tokens SGLang's tokenizer adds to a prompt before it holds the request to the context,
    because its EAGLE worker keeps the draft tokens in the output's slots: max(top-k x steps,
    draft tokens), k + 1 for llmsim's chain of k (top-k 1, k + 1 draft tokens; tokenizer_manager.py
    num_reserved_tokens). ``engine.context_counts_drafts`` says whether the release counts them for
    the pool's draft."""
    return spec.k + 1 if spec is not None and cfg.context_counts_drafts else 0


def longest_total(cfg: EngineConfig, spec: Optional[SpeculativeSpec], limit: int) -> int:
    """The most prompt + output tokens a stack that refuses a longer request takes below
    ``limit``: the limit, less SGLang's draft slots, and a token less where the stack refuses a
    request that fills the limit exactly (``engine.refuses_full_context``)."""
    return limit - draft_slots(cfg, spec) - (1 if cfg.refuses_full_context else 0)


def what_shortens(cfg: EngineConfig, spec: Optional[SpeculativeSpec]) -> str:
    """Why :func:`longest_total` is below the limit, for a message ("" where it is not)."""
    slots = draft_slots(cfg, spec)
    said = [f"the draft's {slots} slots counted with the prompt"] if slots else []
    return "; ".join(said + (["a request of the whole context refused"] if cfg.refuses_full_context else []))


def executor_seq_len(cfg: EngineConfig, spec: Optional[SpeculativeSpec], limit: int) -> int:
    """The max_seq_len TensorRT-LLM's executor runs for a launch's ``limit``, which its worker cuts
    an output to (before its KV cache manager lowers it to a rank's pool): one more under the
    overlap scheduler (``plans_ahead``), and under speculative decoding the k draft tokens, again
    under the overlap scheduler, and an MTP chain's k - 1 extra KV tokens
    (_torch/pyexecutor/py_executor_creator.py create_py_executor: max_seq_len + 1 + max_draft_len
    with the overlap scheduler, + get_num_extra_kv_tokens + max_draft_len with a draft)."""
    k = spec.k if spec is not None else 0
    overlap = 1 + k if cfg.plans_ahead else 0
    extra = k - 1 if spec is not None and draft_kind(spec.draft_model) == MTP else 0
    return limit + overlap + extra + k


#: SGLang answers a prompt of its max_req_len less this many tokens, or more, with an error, whatever
#: the output (managers/utils.py validate_input_length: len(origin_input_ids) >= max_req_input_len;
#: tp_worker.py get_worker_info: max_req_input_len = max_req_len - 5; 0.5.4 to 0.5.23).
PROMPT_MARGIN = 5


@dataclass(frozen=True)
class LengthLimit:
    """What the workload check holds a request to on a pool, counted as its stack counts it, so that
    a single request and a session's turns are held alike: ``tokens`` of prompt and ``counted`` output.
    Where the stack cuts the output to the limit (``cuts_output``: TensorRT-LLM, to its executor's
    max_seq_len) a prompt is refused only when it leaves no output token, so one output token counts.
    Where it cuts the output to its max_req_len (``max_req_len``: SGLang, the limit less one) it also
    refuses a prompt that comes within :data:`PROMPT_MARGIN` tokens of it, however short the output."""

    tokens: int
    cuts_output: bool
    limit: int      # the launch's: max_model_len, else the model's context
    why: str        # why ``tokens`` differs from ``limit``, for a message ("" where it does not)
    max_req_len: int = 0    # SGLang's before its KV pool is sized: min(context_len - 1, pool - 1); 0: no such rule

    def counted(self, output: int) -> int:
        """The output tokens held to ``tokens`` beside the prompt."""
        return 1 if self.cuts_output else output

    def longest_prompt(self, max_req_len: Optional[int] = None) -> Optional[int]:
        """The longest prompt SGLang's input check passes (None: no such check), against ``max_req_len``
        where a rank's pool has lowered it (the replica's), else against the launch's."""
        cap = (max_req_len or self.max_req_len) if self.max_req_len else 0
        return cap - PROMPT_MARGIN - 1 if cap else None

    def prompt_refused(self, prompt: float, max_req_len: Optional[int] = None) -> bool:
        longest = self.longest_prompt(max_req_len)
        return longest is not None and prompt > longest

    def exceeded(self, prompt: float, output: int) -> bool:
        return prompt + self.counted(output) > self.tokens or self.prompt_refused(prompt)

    @property
    def said(self) -> str:
        """Appended to a message naming ``limit``."""
        longest = self.longest_prompt()
        prompts = (f"; a prompt of more than {longest:,} tokens is refused (SGLang's max_req_len {self.max_req_len:,} "
                   f"less {PROMPT_MARGIN})" if longest is not None else "")
        if not self.why:
            return prompts
        return (f" ({self.why})" if self.cuts_output
                else f", of which a request takes {self.tokens} ({self.why})") + prompts


def too_long(lim: LengthLimit, prompt: int, output: int, whose: str, where: str = "") -> Optional[tuple[str, str]]:
    """Why a request of ``prompt`` and ``output`` tokens is refused against ``lim`` (``whose``: what
    sets the limit, ``where``: the pool, after the limit's figure), and whether the input or the output
    is to blame; None where it is served. A scenario's longest lengths and ``estimate request``'s
    flags are refused in these words, as the replica refuses such a request in a run."""
    if lim.cuts_output and lim.exceeded(prompt, 1):
        return (f"input ({prompt}) tokens can reach {whose} of {lim.limit} tokens{where}{lim.said}, "
                f"leaving no output token", "input")
    if not lim.cuts_output and lim.exceeded(prompt, output):
        return (f"input ({prompt}) + output ({output}) tokens can exceed {whose} of {lim.limit} tokens{where}"
                f"{lim.said}", "output" if output > lim.tokens else "input")
    return None


def over_budget(what: str, cap: int, where: str, stack: str, remedy: str) -> str:
    """Why a prompt (``what``) longer than the token budget ``cap`` a stack without chunked prefill takes
    is refused: the stack answers it with an error (``where``: the budget's key; ``remedy``: how to serve it)."""
    return (f"{what} tokens can exceed the token budget of {cap} {where}, and {stack or 'its stack'} without "
            f"chunked prefill answers a longer prompt with an error; {remedy}")


def length_limit(cfg: EngineConfig, spec: Optional[SpeculativeSpec], limit: int) -> LengthLimit:
    """:class:`LengthLimit` of a pool whose launch sets ``limit``: TensorRT-LLM's executor max_seq_len
    (:func:`executor_seq_len`) where it cuts the output (``engine.clips_output: max_seq_len``), else
    :func:`longest_total`, as the replica's arrival check (``ReplicaBase.can_ever_serve``) reads them."""
    if cfg.clips_output == "max_seq_len":
        seq = executor_seq_len(cfg, spec, limit)
        return LengthLimit(seq, True, limit, f"the executor's max_seq_len {seq}" if seq != limit else "")
    return LengthLimit(longest_total(cfg, spec, limit), False, limit, what_shortens(cfg, spec),
                       limit - 1 if cfg.clips_output == "max_req_len" else 0)
