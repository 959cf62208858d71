"""vLLM's hybrid KV cache: sliding-window and full-attention layers in one shared block pool.

vLLM V1 does not set memory aside for a model's sliding-window layers. It groups
the layers so every group holds the same number of them (kv_cache_utils.py,
from 0.33 kv_cache_planning.py, ``_get_kv_cache_groups_uniform_page_size``: the
smaller layer count per attention type, or the larger one where it is less than
1.5 times the smaller, the last group of a type padded), sizes one pool of
``available_memory // (page_size × group_size)`` blocks (``get_kv_cache_config_from_groups``)
and lets every group draw its block ids from it (kv_cache_coordinator.py
``HybridKVCacheCoordinator``). A full-attention group holds a request's every
``block_size`` tokens; a sliding-window group only the blocks its window still
reads: single_type_kv_cache_manager.py ``SlidingWindowManager.remove_skipped_blocks``
frees (back to the shared pool) the blocks wholly below the last ``window − 1``
tokens before each allocation, so a decoding request holds cdiv(window − 1,
block_size) + 1 of them per group, the same for every request past its window
(0.19–0.34 alike).

llmsim counts its pool in blocks of the full-attention layers' tokens; the
windows of each running request are charged in those blocks on top of its own
(:func:`window_blocks`), from admission to its end.
"""
from __future__ import annotations

from .profiles.model import ModelProfile


def window_blocks(model: ModelProfile, block_size: int) -> int:
    """Pool blocks (of the full-attention layers' ``block_size`` tokens) that one
    running request's sliding-window layers hold in vLLM's shared pool: its
    sliding-window groups' cdiv(window − 1, block_size) + 1 blocks each, padded
    layers included, at the full-attention layers' bytes per block (0 for a model
    without both kinds of layer)."""
    sliding, full = model.num_sliding_layers, model.num_full_attention_layers
    if not sliding or not full:
        return 0
    group = min(sliding, full)
    if max(sliding, full) < group * 1.5:
        group = max(sliding, full)
    per_group = model.window_blocks_held(block_size)
    groups = -(-sliding // group)
    return -(-groups * group * per_group // full)
