"""vLLM's hybrid KV cache: sliding-window and full-attention layers in one shared block pool.

vLLM V1 does not set memory aside for a model's sliding-window layers. It groups
the layers so every group holds the same number of them (kv_cache_utils.py,
from 0.33 kv_cache_planning.py, ``_get_kv_cache_groups_uniform_page_size``: the
smaller layer count per attention type, or the larger one where it is less than
1.5 times the smaller, the last group of a type padded), sizes one pool of
``available_memory // (page_size × group_size)`` blocks (``get_kv_cache_config_from_groups``)
and lets every group draw its block ids from it (kv_cache_coordinator.py
``HybridKVCacheCoordinator``, whose ``get_num_blocks_to_allocate`` sums its groups'). A
full-attention group holds a request's every ``block_size`` tokens; a sliding-window
group only the blocks from the window of the tokens computed so far on:
single_type_kv_cache_manager.py ``SlidingWindowManager.get_num_skipped_tokens`` (the
tokens before the last ``window − 1``) and ``remove_skipped_blocks``, which frees the
whole blocks below them back to the shared pool when the request is next allocated
(kv_cache_manager.py ``allocate_slots``, before its new slots). So a decoding request
holds cdiv(window − 1, block_size) + 1 blocks per group, the same for every request
past its window, while a prompt chunk of c tokens holds the window behind it and the
chunk, cdiv(window − 1 + c, block_size) or so, until the request's next allocation;
and ``SingleTypeKVCacheManager.get_num_blocks_to_allocate``, which
``SlidingWindowManager`` does not override, asks a group for every block of the tokens
asked for past those skipped, so the whole-prompt admission gate
(``can_fit_full_sequence``) asks every sliding-window group for the prompt's blocks
past the window of its cached tokens (0.19–0.34 alike).

llmsim counts its pool in blocks of the full-attention layers' tokens:
:class:`SlidingGroups` turns a group's blocks into those, and the engines charge
each running request its :attr:`~SlidingGroups.steady` windows from admission to its
end, a prompt's chunks what they hold beyond them while they run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from .profiles.model import ModelProfile, window_span_blocks

if TYPE_CHECKING:
    from .engine.config import EngineConfig


@dataclass(frozen=True)
class SlidingGroups:
    """A model's sliding-window groups in vLLM's shared pool: ``layers`` sliding-window
    layers (the groups' padding included) of a ``window``-token window beside ``full``
    full-attention layers, in ``block_size``-token blocks. A pool block is
    ``block_size`` tokens of every full-attention layer, so ``n`` blocks in every
    sliding-window group take ``cdiv(layers × n, full)`` of them."""

    window: int
    block_size: int
    layers: int
    full: int

    def pool_blocks(self, per_group: int) -> int:
        """Pool blocks that ``per_group`` blocks in every sliding-window group take."""
        return -(-self.layers * per_group // self.full)

    def skipped(self, computed: int) -> int:
        """Blocks a group frees once ``computed`` tokens are computed: the whole
        blocks below the window of the next token (``get_num_skipped_tokens``,
        max(0, computed − window + 1), in whole blocks)."""
        return max(0, computed - self.window + 1) // self.block_size

    @property
    def steady(self) -> int:
        """Pool blocks a decoding request's windows hold: cdiv(window − 1, block_size) + 1
        a group, where the window straddles a block more than it fills."""
        return self.pool_blocks(window_span_blocks(self.window, self.block_size))

    def held(self, computed: int, upto: int) -> int:
        """Pool blocks the groups hold for a request allocated slots up to token
        ``upto`` once ``computed`` tokens were computed: ``remove_skipped_blocks``
        frees those below the window, then ``allocate_slots`` fills the group to
        cdiv(upto, block_size). At admission ``computed`` is the prefix-cache hit
        (its blocks inside the window are the request's to keep), so with ``upto``
        the prompt it is what ``can_fit_full_sequence`` asks of the groups."""
        return self.pool_blocks(-(-upto // self.block_size) - self.skipped(computed))

    def request_bound(self, in_flight: int, max_model_len: int) -> int:
        """The most blocks a request holds in one group, with ``in_flight`` tokens allocated
        beyond those computed: its window, the tokens in flight and a block the window
        straddles, cdiv(min(window − 1 + in_flight, max_model_len), block_size) + 1
        (kv_cache_interface.py ``SlidingWindowSpec.max_memory_usage_bytes``, from 0.20
        ``max_admission_blocks_per_request``)."""
        return -(-min(self.window - 1 + in_flight, max_model_len) // self.block_size) + 1

    @property
    def handoff_tokens(self) -> int:
        """The most tokens of each sliding-window layer a P/D hand-off moves: the last
        cdiv(window, block_size) + 1 blocks of the group (vLLM's NIXL connector with the hybrid
        manager, 0.22-0.26 nixl/scheduler.py, base_scheduler.py from 0.26,
        ``get_sw_clipped_blocks`` over ``blocks_per_sw``), whatever the prompt's length."""
        return (-(-self.window // self.block_size) + 1) * self.block_size

    def reloaded(self, local: int, cached: int) -> int:
        """Blocks per group a reload from the offload tiers copies for a prompt whose first
        ``local`` tokens the GPU cache holds and the tiers the rest up to ``cached``: the
        group's blocks within the window of ``cached`` (those below it are null placeholders)
        past the local hit's (vLLM's OffloadingConnector, offloading/scheduler.py
        ``update_state_after_alloc``: a group's pending blocks start at the first non-null
        block without a hash, 0.22-0.34). ``cached`` is the hit as capped: ``_lookup`` stops
        a model with sliding-window groups at the prompt's last token but one."""
        return max(0, -(-cached // self.block_size) - max(local // self.block_size, self.skipped(cached)))

    @property
    def stored_share(self) -> float:
        """What an offload tier stores of a token's sliding-window layers per byte of its
        full-attention ones: every group's chunk of a stored block, each a group of
        ``layers / groups`` layers however many it holds (the padding too). vLLM's
        OffloadingConnector keys a chunk by its hash and group (offloading/scheduler.py
        ``_build_store_jobs``) and skips only the null blocks below the window, which a chunk
        just computed has none of; ``alignment_chunk_count`` (0.26) and 0.34's
        ``SlidingWindowManager.reachable_block_mask`` drop none where the groups' block sizes
        match; and every key takes one host block of the pool's bytes per block
        (offloading/config.py: the KV tensors' bytes over ``num_blocks``, one layer of each
        group per tensor; kv_offload/cpu/spec.py ``CPUOffloadingSpec``)."""
        return self.layers / self.full

    def admission(self, prompt: int, computed: int, cap: int = 0) -> int:
        """Pool blocks the groups must have free to admit a prompt of ``prompt`` tokens whose
        first ``computed`` are cached (``can_fit_full_sequence``, from 0.22 ``allocate_slots``'
        ``full_sequence_must_fit``): in each group ``get_num_blocks_to_allocate``'s count of
        the prompt's blocks, capped at ``cap`` where given (from 0.20: :meth:`request_bound`),
        less those the hit covers, and the hit's blocks inside the window, which the request
        takes; at least the window it holds once it decodes, which llmsim charges a running
        request whatever its length. Uncapped, the prompt's blocks past the window
        (:meth:`held`)."""
        required = -(-prompt // self.block_size)
        if cap:
            required = min(required, cap)
        hit, skipped = computed // self.block_size, self.skipped(computed)
        return max(self.steady, self.pool_blocks(max(required - hit, 0) + hit - skipped))


def sliding_groups(model: ModelProfile, block_size: int) -> Optional[SlidingGroups]:
    """``model``'s sliding-window groups as vLLM forms them (None for a model
    without both kinds of layer)."""
    sliding, full = model.num_sliding_layers, model.num_full_attention_layers
    if not sliding or not full:
        return None
    group = min(sliding, full)
    if max(sliding, full) < group * 1.5:
        group = max(sliding, full)
    return SlidingGroups(model.window_tokens, block_size, -(-sliding // group) * group, full)


def window_share(model: ModelProfile) -> float:
    """KV bytes a token adds to a model's sliding-window layers per byte it adds to its
    full-attention ones (each layer's K and V alike): what a connector moves of the window
    beside the full-attention bytes llmsim's pool and links count."""
    return model.num_sliding_layers / model.num_full_attention_layers if model.num_sliding_layers else 0.0


def frees_when_processed(cfg: EngineConfig) -> bool:
    """Whether a request's blocks below the window go back only once the tokens before them
    are processed, not when they are scheduled (``sliding_window_kv: processed``, from
    0.26: ``allocate_slots`` frees up to ``num_computed_tokens - num_in_flight_tokens``),
    which differs where the next iteration is scheduled while one runs (async scheduling:
    its batch queue holds the previous step, whose tokens are in flight)."""
    return cfg.sliding_window_kv == "processed" and cfg.plans_ahead


def admission_cap(groups: SlidingGroups, cfg: EngineConfig, max_model_len: int, rank_tokens: int = 0) -> int:
    """The blocks per group vLLM's whole-prompt gate asks at most under ``cfg``
    (``sliding_window_kv: capped``, from 0.20: :meth:`SlidingGroups.request_bound` with a
    budget of tokens in flight; from 0.26 one a batch in flight, two under async
    scheduling: ``VllmConfig.max_in_flight_tokens``); 0 where it asks for the whole prompt
    or admits no prompt on its whole length (``prompt_kv: whole``). ``rank_tokens`` as in
    :func:`in_flight_tokens`."""
    if not cfg.per_chunk_kv or cfg.sliding_window_kv == "prompt":
        return 0
    return groups.request_bound(in_flight_tokens(cfg, rank_tokens), max_model_len)


def in_flight_tokens(cfg: EngineConfig, rank_tokens: int = 0) -> int:
    """The tokens a request may have allocated past its window: a budget's, two from 0.26
    under async scheduling (``VllmConfig.max_in_flight_tokens``), where
    :meth:`SlidingGroups.request_bound` reads them. The budget is one attention-DP rank's,
    ``rank_tokens`` where given: a replica of dp ranks runs on their summed budget
    (``fleet.setup.rank_limits``), but each rank's engine core sizes its groups from its own
    ``max_num_batched_tokens``."""
    return (2 if frees_when_processed(cfg) else 1) * (rank_tokens or cfg.max_num_batched_tokens)
