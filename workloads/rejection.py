"""Why a request was turned away on arrival (``Status.REJECTED``).

Whoever refuses a request stamps the reason on it at that moment (the replica
that could never serve it, or the pool's admission control), so a report
reads the reason from the per-request records instead of guessing it again
from the pool's settings afterwards, where a setting that changed meaning (a
replica's budget split over its attention-DP ranks, say) would make the two
disagree. The reasons differ in what mends them: some are the request's or the
configuration's (more GPUs would not serve them), others are load turned away.
"""
from __future__ import annotations

from enum import IntEnum

__all__ = ["Rejection", "REASON_NAMES"]


class Rejection(IntEnum):
    """A rejected request's reason; 0 is kept for "not rejected" in the records' code column."""

    #: prompt + output longer than the pool's server takes (``engine.max_model_len``, else the model's context)
    TOO_LONG = 1
    #: a prompt longer than the token budget a stack without chunked prefill takes (TensorRT-LLM's 400)
    OVER_BUDGET = 2
    #: asks for more output than a contiguous-KV server reserves a request (TGI's ``max_new_tokens``: 422)
    OUTPUT_OVER_LIMIT = 3
    #: its KV alone would not fit its attention rank's KV pool, even with nothing else running
    EXCEEDS_KV = 4
    #: its KV alone would pass its class's KV cap (``classes[].kv_budget_fraction``)
    OVER_CLASS_KV_CAP = 5
    #: its prompt would never pass vLLM's admission gate with the sliding-window layers' blocks
    WINDOW_GATE = 6
    #: admission control: ``max_queue_per_replica`` requests already waiting ahead of it
    QUEUE_FULL = 7
    #: admission control: the prompts waiting ahead of it would take longer than ``max_wait_s`` to prefill
    WAIT_TOO_LONG = 8


#: The records' code (0: not rejected) -> the name the per-request table writes ("" when not rejected).
REASON_NAMES: tuple[str, ...] = ("", *(r.name.lower() for r in sorted(Rejection)))

