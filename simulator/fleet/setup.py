"""One pool's building blocks from its spec: profiles, cost model, memory plan.

Kept apart from the run so that checks, planners and notebooks can size a
pool (KV blocks, cold-start bytes, step times) without simulating it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..costmodel import CostModel
from ..costmodel.pipeline import PipelineCostModel
from ..costmodel.speculative import MTP, SpeculativeCostModel, draft_kind, speculative_setup
from ..dtypes import WEIGHT_DTYPES
from ..engine.base import StepCost, decode_budget_tokens
from ..engine.config import EngineConfig
from ..engine.dp_placement import RankPlacement
from ..engine.kv_tiers import OffloadPlan
from ..engine.lora import LoraPlan
from ..errors import LlmsimError
from ..hybrid_kv import in_flight_tokens, window_share
from ..kv_memory import swa_tokens_ratio
from ..memory import MemoryPlan, context_room, has_full_attention, plan_memory, prefill_graph_tokens, startup_pool
from ..pipeline import Pipeline, plan_pipeline_memory
from .pp_refusals import refusal
from ..profiles import load_hardware, load_model
from ..profiles.backend import load_backend, version_number
from ..profiles.checkpoint_weights import check_checkpoint_weights
from ..profiles.hardware import HardwareProfile
from ..profiles.model import ModelProfile
from ..scenario.schema import PoolSpec
from .lora import lora_setup
from .offload import plan_offload


@dataclass
class PoolSetup:
    spec: PoolSpec
    cm: CostModel
    memory: MemoryPlan
    offload: Optional[OffloadPlan] = None   # KV offload tiers per replica (engine.kv_offload)
    engine: Optional[EngineConfig] = None   # what the replicas run, where it differs from spec.engine (pp, dp, draft)
    lora: Optional[LoraPlan] = None         # LoRA adapter slots and caches per replica (pools[].lora)

    @property
    def engine_config(self) -> EngineConfig:
        return self.engine or self.spec.engine

    @property
    def rank_tokens(self) -> Optional[int]:
        """One attention-DP rank's token budget (the replica's over its dp ranks, :func:`rank_limits`);
        None for a single rank."""
        return self.engine_config.max_num_batched_tokens // self.spec.dp if self.spec.dp > 1 else None

    @property
    def rank_blocks(self) -> Optional[int]:
        """One attention-DP rank's KV blocks requests can hold (the replica's pool over its dp
        ranks, as ``kv_tokens_per_rank`` states them, less the blocks the rank keeps back), the
        most one request can ever hold; None for a single rank. Each rank's scheduler admits its
        own requests against its own pool of these blocks (engine/base.py)."""
        return self.memory.usable_rank_blocks if self.memory.dp > 1 else None


#: The pool keys a cost model's refusal may name (its ``key_path``, pool-relative); any other is reported
#: against the layout key the pool's setup chose it for (tp, or pp for a pipeline).
COST_MODEL_KEYS = frozenset({"tp", "dp", "ep", "engine.weight_dtype", "engine.backend", "engine.backend_version",
                             "engine.moe_backend"})


def engine_cost_model(model: ModelProfile, gpu: HardwareProfile, tp: int, e: EngineConfig, dp: int = 1,
                      ep: int = 1, speculative: bool | str = False, role: str = "") -> CostModel:
    """The cost model a replica of engine ``e`` prices its iterations with: the
    stack's kernels and CPU terms (iteration overheads, scheduling overlap,
    eager launches), so ``llmsim estimate --backend`` prices what a pool runs.
    ``speculative`` and ``role`` (:func:`~simulator.memory.plan_memory`'s) decide,
    with the release, which prefills SGLang replays as CUDA graphs."""
    _weights_the_stack_runs(e, gpu)
    _experts_the_stack_splits(e, tp * dp, ep)
    graphs = e.graph_max_tokens
    if graphs is None:
        graphs = prefill_graph_tokens(model, gpu, e.kv_memory, e.max_num_batched_tokens, tp, dp, speculative, role,
                                      chunked_prefill=e.chunked_prefill)
    try:
        cm = CostModel(model, gpu, tp, e.weight_dtype, e.kv_dtype, iteration_overhead_ms=e.iteration_overhead_ms,
                       iteration_us_per_seq=e.iteration_us_per_seq, dp=dp, ep=ep,
                       mxfp4_activation=e.mxfp4_activation, async_scheduling=e.async_scheduling,
                       kernels=e.kernels, eager_launch_us=e.eager_launch_us, graph_max_tokens=graphs,
                       mxfp4_expert_layout=e.mxfp4_expert_layout, moe_backend=e.moe_backend)
    except LlmsimError as err:
        # The experts' kernel is chosen for weights the pool names; where the checkpoint holds none such (gpt-oss's
        # MXFP4 experts named bf16), no kernel would load them, and that is the refusal to read first.
        if err.key_path == "engine.moe_backend" and e.weight_dtype in WEIGHT_DTYPES:
            check_checkpoint_weights(model, e.weight_dtype, e.backend, e.stack_label)
        raise
    # after the GPU's refusals (no FP4 units...), which hold whatever the checkpoint
    check_checkpoint_weights(model, cm.weight_dtype, e.backend, e.stack_label)
    return cm


def _experts_the_stack_splits(e: EngineConfig, gpus: int, ep: int) -> None:
    """A stack whose expert parallelism spans the whole replica (``ep_spans_replica``: vLLM) has no
    launch that splits the experts ``ep`` ways and each by width over the rest: it would run ep = tp × dp
    with whole experts, another layout than the one llmsim would price."""
    if e.backend is None or ep in (1, gpus) or not load_backend(e.backend).ep_spans_replica:
        return
    raise LlmsimError(f"ep={ep}: {e.stack_label}'s expert parallelism spans the whole replica "
                      f"(--enable-expert-parallel makes ep = tp × dp = {gpus}, each GPU holding whole experts), "
                      f"so it has no launch with ep={ep}: set ep to 1 or {gpus}", key_path="ep")


def _weights_the_stack_runs(e: EngineConfig, gpu: HardwareProfile) -> None:
    """Weights the pool's stack would run otherwise than llmsim prices them are refused: fp8 on a GPU
    without fp8 tensor cores runs weight-only (W8A16) only where the stack has such a kernel
    (``fp8_weight_only``), and int8, which llmsim prices as W8A8, only where it runs int8 activations
    (``w8a8_int8``)."""
    if e.backend is None or e.weight_dtype not in ("fp8", "int8"):
        return
    prof = load_backend(e.backend)
    if e.weight_dtype == "fp8" and not gpu.has_unit("fp8") and not prof.fp8_weight_only:
        raise LlmsimError(f"{e.stack_label} runs fp8 weights with fp8 activations alone (no weight-only fp8 "
                          f"kernel), which {gpu.name} has no tensor cores for: serve 16-bit or int4 weights there, "
                          f"or use a GPU with fp8 units", key_path="engine.weight_dtype")
    if e.weight_dtype == "int8" and not prof.w8a8_int8:
        raise LlmsimError(f"int8 is W8A8 (SmoothQuant) to llmsim, which {e.stack_label} does not run (its int8 "
                          f"weights are weight-only); serve fp8, int4 or 16-bit weights", key_path="engine.weight_dtype")


def setup_pool(spec: PoolSpec, index: int, source: str | Path | None = None,
               decodes_for_another: bool = False) -> PoolSetup:
    """The pool's building blocks; its setup's ``spec`` is the pool as it runs,
    the weights a pool leaves unnamed filled in from the checkpoint.
    ``decodes_for_another``: another pool prefills this one's requests."""
    where = f"pools[{index}]"

    def at(key: str, fn):
        try:
            return fn()
        except LlmsimError as e:
            if e.source and e.key_path:
                # The fault is inside the profile file: name it and its key, then who named the profile.
                raise LlmsimError(f"{e.message} (the {key} of {where} in {source or 'the scenario'})",
                                  source=e.source, key_path=e.key_path) from None
            msg = f"{e.source}: {e.message}" if e.source and e.source != str(source) else e.message
            raise LlmsimError(msg, source=source, key_path=f"{where}.{key}") from None

    model = at("model", lambda: has_full_attention(load_model(spec.model)))
    gpu = at("gpu", lambda: load_hardware(spec.gpu))
    if spec.engine.weight_dtype is None:      # the checkpoint's format, as the stacks load it
        wd = at("engine.weight_dtype", model.served_weight_dtype)
        spec = spec.model_copy(update={"engine": spec.engine.model_copy(update={"weight_dtype": wd})})
    e = spec.engine
    _chunking_at_start(e, where, source)
    _budget_at_start(e, model, where, source)
    if spec.pp > 1:
        return _pipeline_setup(spec, model, gpu, where, source)
    draft = draft_kind(spec.speculative.draft_model if spec.speculative else None)
    role = "decode" if decodes_for_another else "prefill" if spec.disaggregation is not None else ""
    try:
        cm = engine_cost_model(model, gpu, spec.tp, e, spec.dp, spec.ep, draft, role)
    except LlmsimError as err:   # the pool key the rule concerns (tp, dp, ep, engine.*), else tp
        key = err.key_path if err.key_path in COST_MODEL_KEYS else "tp"
        raise LlmsimError(err.message, source=source, key_path=f"{where}.{key}") from None
    mem = at("engine", lambda: plan_memory(model, gpu, spec.tp, e.weight_dtype, e.kv_dtype,
                                           e.gpu_memory_utilization, e.max_num_batched_tokens, e.max_num_seqs,
                                           e.block_size, dp=spec.dp, ep=spec.ep, kv_memory=e.kv_memory,
                                           speculative=draft, expert_storage=cm.expert_storage, role=role,
                                           chunked_prefill=e.chunked_prefill))
    if spec.speculative and e.mixes_prefill and not e.mixed_beside_draft:
        stack = e.stack_label or "this engine"
        raise LlmsimError(f"mixed_prefill: true beside a draft: {stack} turns mixed chunks off under this draft "
                          "(engine.mixed_beside_draft: false), so none of its iterations prefills beside the decodes; "
                          "remove mixed_prefill, or use a release and draft that keep mixed chunks",
                          source=source, key_path=f"{where}.engine.mixed_prefill")
    _batch_limit_beside_stack(spec, where, source)
    _draft_model_beside_dp(spec, where, source)
    _rank_share_at_start(spec, where, source)
    _windows_beside_connector(spec, model, mem, role, where, source)
    if spec.speculative:  # the draft's share of each token's time and of the GPU memory
        cm, mem = at("speculative.draft_model", lambda: speculative_setup(cm, mem, spec.speculative,
                                                                          e.mixed_step_drafts))
    lora = None
    if spec.lora:   # the adapters' GPU slots come out of the KV cache
        lora, mem = lora_setup(spec, cm, mem, gpu, where, source)
    mem = _startup_pool(e, model, gpu, mem, spec.tp * spec.dp, where, source)
    try:
        admission = expected_output_admission(prefill_placement(e, spec.dp, spec.disaggregation is not None),
                                              spec.dp, decodes_for_another)
    except LlmsimError as err:
        raise LlmsimError(err.message, source=source, key_path=f"{where}.{err.key_path}") from None
    replica = rank_limits(drafting_budget(running_cap(full_batch_rule(admission, model), model, mem), cm, spec,
                                          where, source), spec.dp)
    if decodes_for_another and chunk_cache_on_decode(replica):
        replica = replica.model_copy(update={"prefix_cache": False})
    elif decodes_for_another:
        _decode_radix_cache(spec, where, source)
        _decode_reuse_beside_fetch(replica, spec.dp, where, source)
    offload = plan_offload(e, gpu, mem, spec.tp, spec.tp * spec.dp, where, source, window_share(model))
    return PoolSetup(spec, cm, mem, offload,
                     engine=None if replica is e else replica, lora=lora)


def chunk_cache_on_decode(e: EngineConfig) -> bool:
    """Whether a decode server of this engine runs no prefix cache whatever ``prefix_cache`` says:
    SGLang forces its decode server's KV to a chunk cache unless launched with
    --disaggregation-decode-enable-radix-cache (server_args.py _handle_pd_disaggregation, 0.5.4 to
    0.5.9: "KV cache is forced as chunk cache for decode server"; arg_groups/pd_disaggregation_hook.py
    handle_pd_disaggregation, 0.5.14 to 0.5.23), which ``decode_prefix_reuse: true`` stands for."""
    return e.prefix_cache and not e.decode_prefix_reuse and e.backend is not None \
        and load_backend(e.backend).stack == "sglang"


#: The first SGLang release known to take --disaggregation-decode-enable-radix-cache (read in 0.5.11,
#: 0.5.14 and 0.5.23 server_args.py; 0.5.9's has no such flag; 0.5.10's not read).
DECODE_RADIX_SINCE = (0, 5, 10)


def _decode_radix_cache(spec: PoolSpec, where: str, source) -> None:
    """An SGLang decode pool that keeps a radix cache (``decode_prefix_reuse: true`` with prefix_cache)
    is launched with --disaggregation-decode-enable-radix-cache: refused where the release has no such
    flag, and beside a draft, which the flag refuses ("incompatible with speculative decoding":
    server_args.py _handle_pd_disaggregation, 0.5.11; arg_groups/pd_disaggregation_hook.py, 0.5.14 to 0.5.23)."""
    e = spec.engine
    if not (e.prefix_cache and e.decode_prefix_reuse and e.backend is not None
            and load_backend(e.backend).stack == "sglang"):
        return
    number = version_number(e.backend_version) if e.backend_version else None
    if number is not None and number < DECODE_RADIX_SINCE:
        raise LlmsimError(f"SGLang {e.backend_version} has no --disaggregation-decode-enable-radix-cache: its decode "
                          f"server runs a chunk cache (server_args.py: 'KV cache is forced as chunk cache for "
                          f"decode server'); set decode_prefix_reuse: false, or a release from 0.5.10",
                          source=source, key_path=f"{where}.engine.decode_prefix_reuse")
    if spec.speculative is not None:
        raise LlmsimError("SGLang refuses --disaggregation-decode-enable-radix-cache with speculative decoding "
                          "(a decode radix cache beside a draft); set decode_prefix_reuse: false, or drop the draft",
                          source=source, key_path=f"{where}.engine.decode_prefix_reuse")


def _decode_reuse_beside_fetch(e: EngineConfig, dp: int, where: str, source) -> None:
    """A decode pool whose attention-DP ranks fetch requests from the replica's one queue
    (TensorRT-LLM's executor: dp_placement active_tokens) cannot read a decode cache hit at the hand-off.
    Its generation server takes a handed-over (generation-only) request in through that queue like any
    other, the rank chosen as the ranks fetch it (executor_request_queue.py
    _fetch_new_requests_attention_dp, _schedule_attention_dp_requests; trtllm-serve sets no
    attention_dp_rank); only then does that rank allocate its KV, reusing the blocks its cache holds
    (py_executor.py _prepare_disagg_gen_init -> KVCacheManager.prepare_resources -> add_sequence), and
    ask the context server for the rest (dataTransceiver.cpp sendRequestInfo sends the hashes of
    BlockRange::fromNewlyAllocatedBlockIds, cacheFormatter.cpp getBlockRangeForSending sends those:
    selective cache transfer, with one KV pool, unless TRTLLM_DISABLE_SELECTIVE_CACHE_TRANSFER). So the transfer follows the fetch, while
    llmsim sends the KV before it, sized by a rank ``decode_prefix_reuse`` picks as the transfer starts."""
    if dp > 1 and e.prefix_cache and e.decode_prefix_reuse and RankPlacement(e.dp_placement, dp).fetches:
        raise LlmsimError(f"decode_prefix_reuse: true beside {dp} attention-DP ranks that fetch their requests "
                          f"(dp_placement: {e.dp_placement}): the server gives a handed-over request its rank "
                          "as the ranks fetch it from its queue and only then has the blocks that rank's cache "
                          "lacks sent, while llmsim sends the KV before that fetch; set decode_prefix_reuse: "
                          "false (the trtllm backend's: the whole prompt sent, none reused), or dp: 1",
                          source=source, key_path=f"{where}.engine.decode_prefix_reuse")


def _batch_limit_beside_stack(spec: PoolSpec, where: str, source) -> None:
    """A speculation cut-off by batch size on a stack that has none to set (vLLM V1, SGLang) would be
    modelled as the stack never runs: refused (``speculation_batch_limit``)."""
    e = spec.engine
    if spec.speculative is None or spec.speculative.disable_above_batch is None or e.backend is None:
        return
    if not load_backend(e.backend).speculation_batch_limit:
        raise LlmsimError(f"{e.stack_label} has no setting that turns speculation off above a batch size (vLLM "
                          f"V1 takes speculative_config's disable_by_batch_size unread to 0.14 and refuses it by "
                          f"0.19; SGLang has none): every batch speculates there; remove disable_above_batch",
                          source=source, key_path=f"{where}.speculative.disable_above_batch")


def _draft_model_beside_dp(spec: PoolSpec, where: str, source) -> None:
    """A separate draft model beside attention DP on a stack that cannot launch it (SGLang refuses
    STANDALONE with --enable-dp-attention: ``draft_model_beside_dp``) would be modelled as a server
    that never starts: refused on ``dp``."""
    e = spec.engine
    if spec.speculative is None or spec.dp == 1 or e.backend is None \
            or draft_kind(spec.speculative.draft_model) != "draft" or load_backend(e.backend).draft_model_beside_dp:
        return
    raise LlmsimError(f"{e.stack_label} does not run a separate draft model ({spec.speculative.draft_model}) beside "
                      f"attention data parallelism (dp {spec.dp}): its launch is refused (\"standalone speculative "
                      f"decoding does not support dp attention\"); use dp 1 (more replicas or tp instead), or an "
                      f"MTP draft (draft_model: mtp) where the model has MTP layers",
                      source=source, key_path=f"{where}.dp")


def _rank_share_at_start(spec: PoolSpec, where: str, source: str | Path | None) -> None:
    """A server-wide running-request flag split among more attention-DP ranks than it holds requests
    (``running_cap: server``, SGLang's 48 beside a draft over more than 48 ranks) leaves each rank none;
    a release that refuses to start so (``engine.empty_share_refused``) is refused on ``dp`` rather
    than run with the one a rank a later release clamps to."""
    e = spec.engine
    if e.running_cap != "server" or not e.empty_share_refused or e.max_num_seqs // spec.dp > 0:
        return
    raise LlmsimError(f"{e.stack_label} splits its --max-running-requests {e.max_num_seqs} (set beside the draft) "
                      f"among the {spec.dp} attention-DP ranks, {e.max_num_seqs} // {spec.dp} = 0 a rank, and "
                      f"refuses to start ('max_running_request is zero'); use dp {e.max_num_seqs} or fewer, set "
                      f"engine.max_num_seqs (each rank's share of the flag), or backend_version 0.5.23 or later "
                      f"(at least one a rank)", source=source, key_path=f"{where}.dp")


def _windows_beside_connector(spec: PoolSpec, model: ModelProfile, mem: MemoryPlan, role: str, where: str,
                              source: str | Path | None) -> None:
    """Refuse sliding-window groups in a shared pool (:mod:`simulator.hybrid_kv`) beside a KV
    connector where the release turns vLLM's hybrid KV cache manager off for it
    (``engine.connector_keeps_windows: false``): every sliding-window layer would then hold the
    whole context, a pool llmsim does not model."""
    e = spec.engine
    if mem.windows is None or e.connector_keeps_windows or not (e.kv_offload is not None or role):
        return
    key = "engine.kv_offload" if e.kv_offload is not None else \
        "disaggregation" if role == "prefill" else "engine.backend_version"
    what = "kv_offload" if e.kv_offload is not None else "disaggregation (its prefill pool's decode_pool)" \
        if role == "decode" else "disaggregation"
    stack = e.stack_label
    raise LlmsimError(f"{what} with {model.name}'s sliding-window layers is not modelled on {stack}: its KV "
                      "connector turns vLLM's hybrid KV cache manager off (engine.connector_keeps_windows: "
                      "false, vLLM before 0.22.0), so each sliding-window layer holds the whole context where "
                      f"llmsim's pool holds a window; use backend_version 0.22.0 or later"
                      f"{'' if key == 'engine.backend_version' else ', or remove ' + key}",
                      source=source, key_path=f"{where}.{key}")


def prefill_placement(e: EngineConfig, dp: int, prefills_for_another: bool) -> EngineConfig:
    """The DP front end of a pool that prefills for another: SGLang's prefill server resolves
    ``--load-balance-method auto`` to follow_bootstrap_room, not round_robin (server_args.py
    ``_handle_load_balance_method`` in 0.5.9, which maps a prefill server's round_robin there too;
    arg_groups/serving_hook.py ``handle_load_balance_method`` in 0.5.20), so its ranks are the
    router's random rooms, ``dp_placement: bootstrap_room``. SGLang is the stack whose admission
    expects outputs (``kv_admission: expected_output``)."""
    if dp > 1 and prefills_for_another and e.expects_output and e.dp_placement == "round_robin":
        return e.model_copy(update={"dp_placement": "bootstrap_room"})
    return e


def expected_output_admission(e: EngineConfig, dp: int, decodes_for_another: bool) -> EngineConfig:
    """The admission a replica runs where SGLang's expected-output rule
    (``kv_admission: expected_output``) depends on the pool's role: its decode
    server admits by its own reservation (disaggregation/decode.py
    ``DecodePreallocQueue``: ``num_reserved_decode_tokens`` per active request,
    no new_token_ratio), ``kv_admission: decode_reservation``, which applies to
    a decode pool alone; and DP attention multiplies ``schedule_conservativeness``
    by 0.3 (server_args.py ``_handle_data_parallelism`` to 0.5.18, arg_groups/
    parallel_hook.py from 0.5.19), the ratio's start with it, unless the pool sets it."""
    if e.reserves_decode and not decodes_for_another:
        raise LlmsimError("kv_admission: decode_reservation is SGLang's decode server's admission of handed-over "
                          "requests; it applies to a pool another pool's disaggregation.decode_pool names",
                          key_path="engine.kv_admission")
    if e.tunes("reserved_decode_tokens") and not (e.reserves_decode or (
            e.expects_output and decodes_for_another)):
        raise LlmsimError("reserved_decode_tokens tunes SGLang's decode server (kv_admission: decode_reservation, "
                          "which an expected_output pool decoding for a prefill pool runs); this pool does not run it",
                          key_path="engine.reserved_decode_tokens")
    if not e.expects_output:
        return e
    if decodes_for_another:
        return e.model_copy(update={"kv_admission": "decode_reservation"})
    if dp > 1 and e.new_token_ratio_init is None:
        return e.model_copy(update={"new_token_ratio_init": 0.7 * 0.3})
    return e


def full_batch_rule(e: EngineConfig, model: ModelProfile) -> EngineConfig:
    """``full_until_leave`` as the pool runs it: SGLang from 0.5.12 clears ``batch_is_full`` at every plan
    in a hybrid-SWA pool (``full_cleared_beside_swa``) as under priority preemption ("to try preemption
    with a prefill adder", its comment says), so such a pool tries its head again each plan: the
    backend's flag alone would hold a gpt-oss pool full that the server does not."""
    if not (e.full_until_leave and e.full_cleared_beside_swa):
        return e
    ratio = swa_tokens_ratio(e.kv_memory, model.num_sliding_layers)
    return e.model_copy(update={"full_until_leave": False}) if ratio is not None and ratio < 1 else e


def _chunking_at_start(e: EngineConfig, where: str, source: str | Path | None) -> None:
    """``chunked_prefill: false`` on a release that chunks every prompt anyway
    (``engine.chunks_every_prompt``: vLLM 0.10.0-0.11.0 overwrite the launch's flag): that
    server neither runs a prompt whole nor refuses a budget below the context, so neither
    unchunked rule applies, and running it chunked would silently drop what the pool wrote."""
    if e.chunks_every_prompt and not e.chunked_prefill:
        raise LlmsimError(
            f"{e.stack_label or 'the stack'} chunks every prompt of a generation model whatever the launch asks "
            "(engine/arg_utils.py _set_default_args: 'V1 always uses chunked prefills', --no-enable-chunked-prefill "
            "is overwritten); set engine.chunked_prefill: true (what it runs), or a backend_version from 0.11.1",
            source=source, key_path=f"{where}.engine.chunked_prefill")


def _budget_at_start(e: EngineConfig, model: ModelProfile, where: str, source: str | Path | None) -> None:
    """A token budget the stack refuses to start with (``engine.unchunked_budget: context``: vLLM's
    ``SchedulerConfig.verify_max_model_len``): below the longest request without chunked prefill,
    where no longer prompt could ever be scheduled (its other check, a budget below ``max_num_seqs``,
    every engine refuses). A budget the pool leaves unset already covers the context there
    (:func:`simulator.profiles.backend.apply_backend`)."""
    budget, longest = e.max_num_batched_tokens, e.longest_request(model)
    if e.unchunked_budget != "context" or e.chunked_prefill or budget >= longest:
        return
    limit = "engine.max_model_len" if e.max_model_len else f"{model.name}'s context"
    stack = e.stack_label or "the stack"
    raise LlmsimError(
        f"{budget:,} tokens is less than the longest request the server takes ({longest:,}: {limit}) "
        f"without chunked prefill, and {stack} refuses to start so ('max_num_batched_tokens ({budget}) is "
        f"smaller than max_model_len ({longest})': no longer prompt could ever be scheduled); leave "
        f"max_num_batched_tokens unset (it then defaults to {longest:,}), raise it, set engine.max_model_len "
        f"to at most {budget:,}, or set engine.chunked_prefill: true",
        source=source, key_path=f"{where}.engine.max_num_batched_tokens")


def drafting_budget(e: EngineConfig, cm: StepCost, spec: PoolSpec, where: str,
                    source: str | Path | None) -> EngineConfig:
    """The engine whose token budget the scheduler fills: a separate draft
    model adds a slot per request to each batch it drafts for, which the
    stack keeps out of the scheduler's budget. vLLM 0.17–0.27
    (``VllmConfig._set_max_num_scheduled_tokens``) takes
    ``max_num_new_slots_for_drafting`` × ``max_num_seqs`` off it once
    (``draft_budget_per: max_num_seqs``); from 0.28 its scheduler charges
    each request it schedules its tokens plus the slots
    (``scheduled_request``, which the engines charge). MTP drafts and pools
    without a draft keep the whole budget; so does a stack that sets no
    slots. Where decodes share an iteration with prompts, those the budget
    cannot hold wait for the next iteration (``ReplicaBase._decodes_in_budget``),
    so the budget must hold one decode with what it carries
    (:func:`decode_budget_tokens`: the draft tokens where the budget counts
    them, ``draft_tokens_in_budget``, and the slots); vLLM would run it with
    its draft cut short, which the cost model does not price, and TensorRT-LLM
    never. Static batches and prefill-only iterations (SGLang's default) never
    put a prompt beside the decodes, so their decodes ask nothing of the
    budget: it need only leave a prompt a token."""
    draft = spec.speculative.draft_model if spec.speculative is not None else None
    slots = e.draft_budget_slots if draft is not None and draft != MTP else 0
    if not slots and e.draft_slots_per_request:
        e = e.model_copy(update={"draft_budget_slots": 0})
    if slots and e.draft_slots_per_request and e.max_prefill_tokens is not None:
        # SGLang's cap counts prompt tokens, not vLLM's draft slots
        raise LlmsimError("max_prefill_tokens (SGLang's) is not modelled beside draft slots charged per scheduled "
                          "request (vLLM's draft_budget_per: scheduled_request); remove one of the two",
                          source=source, key_path=f"{where}.engine.max_prefill_tokens")
    kept = slots * e.max_num_seqs if slots and not e.draft_slots_per_request else 0
    verified = cm if e.draft_tokens_in_budget and isinstance(cm, SpeculativeCostModel) and cm.mixed_step_drafts \
        else None
    shares = e.scheduler != "static" and e.mixes_prefill
    need = kept + (decode_budget_tokens(e, cm, 1) if shares else 1)
    if (slots or verified is not None) and e.max_num_batched_tokens < need:   # a plain pool: the validator's
        carried = ([f"{verified.k} draft token(s) for the target to verify"] if verified is not None else []) + (
            [f"the draft model's {slots} slot(s)"] if slots and e.draft_slots_per_request else [])
        what = (f"one decode with {' and '.join(carried)} beside its own token" if shares and carried
                else "a token" if not shares else "one decode")
        off = f" once {kept} slot(s) are kept for the draft model (max_num_seqs x {slots})" if kept else ""
        raise LlmsimError(f"max_num_batched_tokens {e.max_num_batched_tokens} cannot hold {what}{off}; raise it to "
                          f"at least {need}", source=source, key_path=f"{where}.engine.max_num_batched_tokens")
    return e.model_copy(update={"max_num_batched_tokens": e.max_num_batched_tokens - kept}) if kept else e


def _startup_pool(e: EngineConfig, model: ModelProfile, gpu: HardwareProfile, mem: MemoryPlan, gpus: int,
                  where: str, source: str | Path | None) -> MemoryPlan:
    """The pool the replica runs: ``num_gpu_blocks_override`` applied and the start-up
    check of :func:`_holds_one_context` made, in the release's order
    (:func:`simulator.memory.startup_pool`)."""
    try:
        return startup_pool(mem, e.num_gpu_blocks_override, e.override_checked,
                            lambda pool: _holds_one_context(e, model, gpu, pool, gpus, where, source))
    except LlmsimError as err:
        if err.key_path != "engine.num_gpu_blocks_override":      # the check's own refusal, already placed
            raise
        raise LlmsimError(err.message, source=source, key_path=f"{where}.{err.key_path}") from None


def _holds_one_context(e: EngineConfig, model: ModelProfile, gpu: HardwareProfile, mem: MemoryPlan, gpus: int,
                       where: str, source: str | Path | None) -> None:
    """Refuse ``engine.max_model_len`` past the model's context (the stacks
    refuse it too), and a pool whose stack would not start because one
    request of that length does not fit an attention rank's KV
    (:func:`simulator.memory.context_room`)."""
    ctx = model.max_position_embeddings
    if e.longest_request(model) > ctx:
        raise LlmsimError(f"max_model_len {e.max_model_len:,} exceeds {model.name}'s context of {ctx:,} tokens "
                          f"(the stacks refuse it unless told to ignore the model's limit)", source=source,
                          key_path=f"{where}.engine.max_model_len")
    why = context_room(mem, e.kv_memory, model, gpu.name, gpus, e.longest_request(model), in_flight_tokens(e),
                       overridden=bool(e.num_gpu_blocks_override and e.override_checked))
    if why is not None:
        raise LlmsimError(why, source=source, key_path=f"{where}.engine.max_model_len")


def rank_limits(e: EngineConfig, dp: int) -> EngineConfig:
    """What one replica of ``dp`` attention data-parallel ranks schedules
    (``e`` itself for a single rank); one rank's budget is 1/dp of its
    token budget (:attr:`PoolSetup.rank_tokens`). Every rank runs
    its own scheduler (TensorRT-LLM's ``ExecutorRequestQueue`` hands each
    new request to one rank and admits up to dp × ``max_batch_size``; each
    of vLLM's DP engine cores and SGLang's DP schedulers has its own limits),
    and a request stays on its rank: the replica holds dp × ``max_num_seqs``
    sequences, and one prompt's chunk in an iteration never exceeds its
    rank's budget. That budget is the stack's whole flag (``per_rank``) or
    1/dp of it (``split``: SGLang's ``_handle_data_parallelism`` divides
    ``chunked_prefill_size`` by dp). The KV pool and activation memory are
    sized per rank from the flags as given (:func:`plan_memory`)."""
    if dp <= 1:
        return e
    update = {"max_num_batched_tokens": e.rank_tokens(dp) * dp, "max_num_seqs": e.max_num_seqs * dp}
    if e.max_prefill_tokens is not None:        # every rank's scheduler has the whole cap
        update["max_prefill_tokens"] = e.max_prefill_tokens * dp
    return e.model_copy(update=update)


def _pipeline_setup(spec: PoolSpec, model: ModelProfile, gpu: HardwareProfile, where: str,
                    source: str | Path | None) -> PoolSetup:
    """A pool of ``pp``-stage replicas (:mod:`simulator.pipeline`). In turn
    its replicas run one round of ``pp`` micro-batches per iteration, each
    with the stack's token budget; scheduling ahead (``engine.pp_async:
    run_ahead`` with async scheduling, current vLLM) one batch of the
    stack's budget walks the stages per iteration while the CPU prepares
    the next (see :mod:`simulator.costmodel.pipeline`)."""
    bad = refusal(spec, model)
    if bad is not None:
        raise LlmsimError(bad[1], source=source, key_path=f"{where}.{bad[0]}")
    e = spec.engine
    ahead = e.async_scheduling and e.pp_async == "run_ahead"
    # A batch queue of pp batches: in turn it holds pp micro-batches of distinct requests (one round);
    # run ahead, the batches queued behind the one walking are what a new request waits behind.
    # SGLang's prefill graphs are sized by its chunk, not by a round of pp batches
    graphs = e.graph_max_tokens if e.graph_max_tokens is not None else prefill_graph_tokens(
        model, gpu, e.kv_memory, e.max_num_batched_tokens, spec.tp, pp=spec.pp)
    rounds = e.model_copy(update={"max_num_batched_tokens": e.max_num_batched_tokens * (1 if ahead else spec.pp),
                                  "async_scheduling": ahead, "schedule_ahead": ahead,
                                  "output_after_next_launch": False, "graph_max_tokens": graphs})
    try:
        stage = engine_cost_model(model, gpu, spec.tp, rounds)
        cm = PipelineCostModel(stage, Pipeline.of(model, gpu, spec.tp, spec.pp), e.max_num_batched_tokens)
        mem = plan_pipeline_memory(model, gpu, spec.tp, spec.pp, e.weight_dtype, e.kv_dtype, e.gpu_memory_utilization,
                                   e.max_num_batched_tokens, e.max_num_seqs, e.block_size, e.kv_memory,
                                   stage.expert_storage)
    except LlmsimError as err:
        key = err.key_path if err.key_path in COST_MODEL_KEYS | {"pp"} else "pp"
        raise LlmsimError(err.message, source=source, key_path=f"{where}.{key}") from None
    mem = _startup_pool(e, model, gpu, mem, spec.tp * spec.pp, where, source)
    return PoolSetup(spec, cm, mem, None, engine=running_cap(full_batch_rule(rounds, model), model, mem))


def running_cap(e: EngineConfig, model: ModelProfile, mem: MemoryPlan) -> EngineConfig:
    """``e`` with each attention rank's running requests as its stack sizes them from the rank's KV
    pool (SGLang's, ``engine.running_cap``: :meth:`EngineConfig.rank_running_requests`), a pipeline's
    too, whose stages hold the same requests' KV (SGLang takes the smallest stage's tokens): without
    it a pp pool ran SGLang's unread max_num_seqs default, 2,048, where the pool sizes 4,096."""
    seqs = mem.rank_running_requests(e, model)
    return e if seqs == e.max_num_seqs else e.model_copy(update={"max_num_seqs": seqs})

