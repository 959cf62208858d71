"""The serving stacks' own names for llmsim's engine keys.

A platform engineer writes a pool's engine from the launch they know:
TensorRT-LLM's ``free_gpu_memory_fraction``, SGLang's
``max_running_requests``. Spelt nothing like llmsim's keys, those were
answered with whichever key a letter's distance picked
(``free_gpu_memory_fraction``: did you mean ``gpu_memory_utilization``?,
vLLM's, which a TensorRT-LLM pool then refuses). An unknown key that is
a stack's name for one of llmsim's is answered with that key instead.
"""
from __future__ import annotations

from typing import Optional, Sequence

#: A stack's name -> (llmsim's engine key, whose name it is).
STACK_NAMES: dict[str, tuple[str, str]] = {
    "free_gpu_memory_fraction": ("kv_memory.fraction", "TensorRT-LLM's kv_cache_config.free_gpu_memory_fraction"),
    "mem_fraction_static": ("kv_memory.fraction", "SGLang's --mem-fraction-static"),
    "max_num_tokens": ("max_num_batched_tokens", "TensorRT-LLM's max_num_tokens"),
    "max_batch_size": ("max_num_seqs", "TensorRT-LLM's max_batch_size"),
    "max_running_requests": ("max_num_seqs", "SGLang's --max-running-requests"),
    "chunked_prefill_size": ("max_num_batched_tokens", "SGLang's --chunked-prefill-size"),
    "enable_chunked_prefill": ("chunked_prefill", "vLLM's and TensorRT-LLM's enable_chunked_prefill"),
    "enable_mixed_chunk": ("mixed_prefill", "SGLang's --enable-mixed-chunk"),
    "enable_prefix_caching": ("prefix_cache", "vLLM's --enable-prefix-caching"),
    "enable_block_reuse": ("prefix_cache", "TensorRT-LLM's kv_cache_config.enable_block_reuse"),
    "tokens_per_block": ("block_size", "TensorRT-LLM's kv_cache_config.tokens_per_block"),
    "page_size": ("block_size", "SGLang's --page-size"),
    "kv_cache_dtype": ("kv_dtype", "vLLM's and SGLang's --kv-cache-dtype"),
}


#: The engine keys the stacks' names stand for: a mapping holding every one of them is an engine's.
ENGINE_KEYS = frozenset(llmsim.partition(".")[0] for llmsim, _ in STACK_NAMES.values())


def stack_name(key: str, keys: Sequence[str]) -> Optional[tuple[str, str]]:
    """(llmsim's key, whose name ``key`` is) where ``key`` is a stack's name for an engine key and the
    mapping whose keys are ``keys`` is an engine's (it holds every key of :data:`ENGINE_KEYS`); None
    otherwise. Another mapping may hold a key of the same spelling meaning something else (a trace's
    ``block_size``, its hash blocks' tokens), which no stack's ``page_size`` stands for."""
    hit = STACK_NAMES.get(key)
    return hit if hit is not None and ENGINE_KEYS <= set(keys) and key not in keys else None
