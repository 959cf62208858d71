"""How long a request each stack takes, counted as the stack counts it.

A deployment's length limit (vLLM's ``--max-model-len``, SGLang's ``--context-length``,
TensorRT-LLM's ``max_seq_len``: ``engine.max_model_len``, else the model's context) is not
always compared with the prompt and output alone: under speculative decoding SGLang's
tokenizer counts an EAGLE-style draft's slots into the prompt, and some releases refuse a
request of the whole context. The replica's arrival check and the scenario's workload check
both ask here, so that they count alike."""

from __future__ import annotations

from typing import Optional

from ..costmodel.speculative import SpeculativeSpec
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
