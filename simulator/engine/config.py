"""Engine settings of one replica, with vLLM's names and defaults."""
from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..errors import KeyRefusal
from ..expert_layout import ExpertLayout
from ..kv_memory import RULES, KvMemory

if TYPE_CHECKING:
    from ..profiles.model import ModelProfile


class KvOffload(BaseModel):
    """Host-DRAM and NVMe KV tiers below the GPU prefix cache (as LMCache keeps them)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    host_gb: Optional[float] = Field(
        default=None, ge=0, description="KV capacity in host DRAM per replica, GB (1e9); default: the GPU profile's "
                                        "host_memory_gb_per_gpu × the replica's GPUs (a whole DGX share: set less "
                                        "to leave the OS its part); 0: no host tier")
    disk_gb: float = Field(
        default=0.0, ge=0, description="KV capacity on local NVMe per replica, GB; 0 (default): no disk tier; at "
                                       "most the GPU profile's nvme_gb_per_gpu × the replica's GPUs")
    host_gb_per_s: Optional[float] = Field(
        default=None, gt=0, description="host-to-GPU copy bandwidth of each GPU's link, GB/s; default: the GPU "
                                        "profile's host_link_gb_s (PCIe)")
    disk_gb_per_s: Optional[float] = Field(
        default=None, gt=0, description="NVMe read bandwidth per GPU, GB/s; default: the GPU profile's "
                                        "nvme_read_gb_s_per_gpu")

    @model_validator(mode="after")
    def _some_tier(self) -> "KvOffload":
        if self.host_gb == 0 and self.disk_gb == 0:
            raise ValueError("kv_offload with host_gb: 0 and disk_gb: 0 has no tier to offload to; remove "
                             "kv_offload or give one a capacity")
        return self


#: The engine keys of SGLang's expected-output admission beside ``kv_admission`` itself.
EXPECTED_OUTPUT_KEYS = ("new_token_ratio_init", "new_token_ratio_min_factor", "new_token_ratio_decay_steps",
                        "output_estimate_clip", "retract_decode_steps")


class EngineConfig(BaseModel):
    """How a replica schedules and stores KV (vLLM's flags where they exist)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    backend: Optional[str] = Field(
        default=None, description="serving stack whose defaults and overheads apply: vllm, sglang, trtllm or a "
                                  "backend profile file (`llmsim validate --fit` writes one); keys set beside it "
                                  "override its values; none: llmsim's generic engine")
    backend_version: Optional[str] = Field(
        default=None, description="the serving stack's release (such as 0.19.0, or a nightly dated YYYYMMDD): its "
                                  "defaults that changed between releases apply (the backend profile's by_version "
                                  "rules: vLLM schedules asynchronously from 0.14), a release before or after those "
                                  "the profile describes refused, and any release on a profile file that describes "
                                  "none; none: the profile's own versions")
    max_num_seqs: int = Field(default=256, ge=1, description="max sequences in a batch (of each attention-DP "
                                                              "rank where dp > 1)")
    max_num_batched_tokens: int = Field(default=8192, ge=1, description="token budget of one iteration (of each "
                                                                        "attention-DP rank where dp > 1, see "
                                                                        "dp_limits)")
    draft_budget_slots: int = Field(
        default=0, ge=0, le=64,
        description="token-budget slots per sequence the scheduler leaves to a separate draft model (a speculative "
                    "draft_model other than mtp), taken as draft_budget_per says (vLLM from 0.17: 1); 0: the whole "
                    "budget. Other pools ignore it")
    draft_budget_per: Literal["max_num_seqs", "scheduled_request"] = Field(
        default="max_num_seqs",
        description="how draft_budget_slots come out of the token budget. max_num_seqs: once, the scheduler fills "
                    "max_num_batched_tokens − slots × max_num_seqs (vLLM 0.17–0.27); scheduled_request: each "
                    "request an iteration schedules, decode or prompt chunk, takes its tokens plus the slots, so a "
                    "batch of few requests keeps nearly the whole budget (vLLM from 0.28)")
    draft_tokens_in_budget: bool = Field(
        default=False,
        description="a speculative decode takes its k draft tokens from the token budget beside its own, 1 + k "
                    "tokens, so fewer prompt tokens join an iteration of speculative decodes (vLLM V1's scheduler: "
                    "num_tokens_with_spec − num_computed_tokens; TensorRT-LLM's micro-batch scheduler: beam width "
                    "+ draft tokens; MTP and draft models alike; the vllm and trtllm backends set it); where decodes "
                    "share an iteration with prompts and the running decodes outgrow the budget, those past it wait "
                    "for the next iteration (budget_boundary says how) and no prompt tokens run in that one; a "
                    "budget below one decode's tokens is refused. false: a decode takes one token. Pools without "
                    "speculative ignore it")
    budget_boundary: Literal["trim_draft", "stop"] = Field(
        default="trim_draft",
        description="an iteration whose running decodes take more of the token budget than it holds schedules "
                    "them oldest first, the rest waiting in place for the next iteration; trim_draft: the decode "
                    "at the boundary runs with the draft tokens the budget has left (vLLM V1's Scheduler.schedule "
                    "gives each running request min(its tokens, the budget left) and drops the draft tokens cut); "
                    "stop: it waits too (TensorRT-LLM's micro-batch scheduler stops at the first request that "
                    "does not fit max_num_tokens; the trtllm backend sets it)")
    mixed_step_drafts: bool = Field(
        default=True,
        description="in an iteration that prefills prompt chunks beside the decodes (mixed_prefill), the "
                    "speculative decodes draft and verify as in any other; false: each takes one plain token there, "
                    "the draft only extending over the iteration's tokens (the prompt chunks and one per decode) to "
                    "propose in the next decode-only iteration, and no draft token comes out of the budget (SGLang "
                    "from 0.5.19 with an MTP/EAGLE draft and --enable-mixed-chunk: scheduler.py "
                    "get_new_batch_prefill, schedule_batch.py mix_with_running; the sglang backend sets it). Pools "
                    "without speculative or without mixed iterations ignore it")
    mixed_beside_draft: bool = Field(
        default=True,
        description="false: the stack turns mixed chunks off beside a draft whatever the launch asks (SGLang to "
                    "0.5.18 for every draft, and for a separate draft model in every release: "
                    "arg_groups/speculative_hook.py; the sglang backend sets it), so a pool that sets "
                    "mixed_prefill: true beside speculative is refused rather than run as the stack never runs it. "
                    "Pools without speculative ignore it")
    connector_keeps_windows: bool = Field(
        default=True,
        description="false: a KV connector (kv_offload, disaggregation) turns vLLM's hybrid KV cache manager "
                    "off, so every sliding-window layer holds a request's whole context like a full-attention "
                    "one, which llmsim does not model: a pool of a sliding-window model that sets either is "
                    "refused. vLLM 0.19-0.21 turn it off for any connector unless launched with "
                    "--no-disable-hybrid-kv-cache-manager (vllm/config/vllm.py VllmConfig.__post_init__, "
                    "'turn HMA off for connector unless specifically enabled'); from 0.22 only for one that "
                    "does not subclass SupportsHMA (NixlConnector and the native OffloadingConnector do; the "
                    "in-tree LMCacheConnectorV1 does not). The vllm backend sets it")
    swa_handoff_across_tp: bool = Field(
        default=True,
        description="false: the prefill server sends a hybrid sliding-window pool's window (SGLang's SWA state, "
                    "kv_memory.swa_full_tokens_ratio below 1) only to a decode server of its own tp and fails the "
                    "transfer otherwise, so a disaggregated pair of such a pool at different tp is refused. SGLang "
                    "0.5.8-0.5.21 (disaggregation/mooncake/conn.py and nixl/conn.py: 'PD Disaggregation does NOT "
                    "support PD different TP sizes for non-MLA SWA hybrid models yet'; 0.5.22 slices the heads, "
                    "_send_swa_state_slice); the sglang backend sets it. Pools without such a pool ignore it")
    dp_limits: Literal["per_rank", "split"] = Field(
        default="per_rank",
        description="how the two limits above apply to a replica of dp > 1 attention data-parallel ranks, each of "
                    "which schedules its own batch: per_rank, each rank has both (vLLM's DP engine cores, "
                    "TensorRT-LLM's attention DP: the replica runs dp times each); split, each rank has "
                    "max_num_seqs and 1/dp of the token budget (SGLang divides chunked_prefill_size by dp)")
    dp_placement: Literal["round_robin", "bootstrap_room", "queue_score", "queue_score_rotating",
                          "kv_weighted_load", "active_tokens"] = Field(
        default="round_robin",
        description="which rank of a replica of dp > 1 attention data-parallel ranks an arriving request runs on; "
                    "each rank keeps its own prefix cache, so a request hits only what requests placed on its rank "
                    "cached. round_robin: in turn (SGLang's default load_balance_method, "
                    "DataParallelController.round_robin_scheduler; an SGLang prefill pool of a disaggregated pair "
                    "runs bootstrap_room instead); bootstrap_room: the rank bootstrap_room % dp of a room the "
                    "router draws at random for each request (follow_bootstrap_room_scheduler); queue_score: the "
                    "rank of least 4 x waiting + running requests, the lowest on a tie (vLLM to 0.24, "
                    "DPLBAsyncMPClient.get_core_engine_for_request); queue_score_rotating: the same, ties in turn "
                    "(vLLM 0.25, 0.26); kv_weighted_load: least waiting + running + 6 x waiting x max(0, KV usage "
                    "- 0.5), ties in turn (vLLM from 0.27); active_tokens: TensorRT-LLM's, which places "
                    "none on arrival: requests wait in the replica's one queue, each iteration's fetch takes at most "
                    "dp x max_num_seqs less the requests the ranks hold, and hands them out longest first, each to "
                    "the rank whose requests hold the fewest prompt tokens, then the fewest requests, among those "
                    "below an even share (executor_request_queue.py, DefaultADPRouter). None looks at the ranks' "
                    "caches")
    chunked_prefill: bool = Field(
        default=True, description="split prompts at the token budget: a prompt longer than it runs over several "
                                  "iterations, and the last prompt of an iteration is cut where the budget ends; "
                                  "false: whole prompts only (one alone may exceed the budget, unless the "
                                  "stack refuses it: unchunked_budget, rejects_prompt_over_budget)")
    chunks_whole_blocks: bool = Field(
        default=False,
        description="true: a prompt chunk the token budget cuts short ends on a whole KV block, its size rounded "
                    "down to a multiple of block_size (the prompt's last chunk is not rounded). A waiting prompt "
                    "whose chunk rounds to no whole block of what the budget has left runs none in the iteration "
                    "but keeps its place, and its sequence slot and KV blocks in the admission tests of the "
                    "prompts after it, which still join where their rest fits the budget whole. "
                    "TensorRT-LLM's FCFS context chunking (microBatchScheduler.cpp setCtxRequestsChunkSize "
                    "kFIRST_COME_FIRST_SERVED, chunk unit tokens_per_block). The trtllm backend sets it")
    prefix_reuse_credit: Literal["blocks_and_tokens", "blocks", "none"] = Field(
        default="blocks_and_tokens",
        description="what a prompt's prefix-cache hit spares it at admission. blocks_and_tokens: the token budget "
                    "is charged its uncached tokens alone, and the KV test asks only for the blocks other "
                    "requests do not already hold (vLLM, SGLang; TensorRT-LLM from its capacity scheduler's "
                    "getRemainingBlocksToCompletion, from 1.3.0rc5, and micro-batch scheduler's "
                    "estimatedReusableTokens, taken as from 1.3.0rc7); blocks: the KV test as that, but the token "
                    "budget charged the whole prompt (TensorRT-LLM between the two); none: the whole prompt on the budget and every "
                    "block of it in the KV test, as if nothing were cached (TensorRT-LLM before both: "
                    "microBatchScheduler.cpp getNumTokens(0), capacityScheduler.cpp GuaranteedNoEvictScheduler). "
                    "The cached part is still not computed. The trtllm backend sets it by release")
    defers_shared_context: bool = Field(
        default=False,
        description="true: a waiting prompt whose first block not yet in its rank's prefix cache is the first new "
                    "block of a prompt admitted before it in the same scheduling pass waits for the next pass, its "
                    "place kept and the prompts after it still tried, and then finds those blocks cached instead "
                    "of computing them beside it. TensorRT-LLM's capacity scheduler (capacityScheduler.cpp "
                    "GuaranteedNoEvictScheduler, beneficialToSkip), which its PyTorch executor runs by default; "
                    "not for a request whose KV a prefill pool handed over (a generation-only request: "
                    "isDisaggGenerationInitState), nor for a model of sliding-window and full-attention layers "
                    "(isVariableWindow). The trtllm backend sets it. Pools without the prefix cache, and under "
                    "static batching (TensorRT-LLM's StaticBatchScheduler holds none back), ignore it")
    defers_behind_chunks: bool = Field(
        default=False,
        description="with defers_shared_context: a prompt being chunked that has run a chunk also holds back, "
                    "each pass, a waiting prompt whose first block not in its rank's prefix cache is the block "
                    "that prompt's next chunk computes, until its last chunk has run (TensorRT-LLM's "
                    "prefillWithChunkedContextsAlreadyExecuting, its computed blocks stored for reuse as each "
                    "chunk ends: BlockManager::storeContextBlocks up to getContextCurrentPosition). The trtllm "
                    "backend sets it by release. Pools without defers_shared_context or chunked_prefill ignore it")
    unchunked_budget: Union[Literal["context"], int, None] = Field(
        default=None,
        description="the token budget the stack takes without chunked_prefill where the pool sets none. context: "
                    "max(max_model_len, its default), and a budget set below the longest request refused as the "
                    "server refuses to start ('This effectively limits the maximum sequence length to "
                    "max_num_batched_tokens'; vLLM: config/scheduler.py SchedulerConfig.verify_max_model_len, "
                    "engine/arg_utils.py _set_default_max_num_seqs_and_batched_tokens_args, 0.19.1-0.34.0); a "
                    "number: that many tokens (SGLang: its prefill batch is capped by --max-prefill-tokens, 16,384 "
                    "by default, not the chunk size, once --chunked-prefill-size is -1: PrefillAdder's "
                    "rem_input_tokens); unset: the budget as with chunking. The vllm and sglang backends set it")
    chunks_every_prompt: bool = Field(
        default=False,
        description="true: the stack chunks every prompt whatever the launch asks, so chunked_prefill: false is "
                    "refused (vLLM 0.10.0-0.11.0: engine/arg_utils.py _set_default_args sets "
                    "enable_chunked_prefill = True for a generation model, 'V1 always uses chunked prefills'). "
                    "The vllm backend sets it for those releases")
    rejects_prompt_over_budget: bool = Field(
        default=False,
        description="true: without chunked_prefill a request whose prompt is longer than one rank's token budget "
                    "is answered with an error on arrival, not run alone (TensorRT-LLM's PyTorch backend: "
                    "llmapi/llm.py _check_arguments, 'The sum of prompt length (...), query length (...) should "
                    "not exceed max_num_tokens', unless enable_chunked_prefill). The trtllm backend sets it")
    clips_output: Literal[False, "max_req_len", "max_seq_len"] = Field(
        default=False,
        description="whether a request longer than one rank's KV pool holds is served with its output cut to what "
                    "the pool holds, and by whose rule. max_req_len (SGLang: scheduler.py max_req_len = "
                    "min(context_len - 1, max_total_num_tokens - 1), max_new_tokens = min(max_new_tokens, "
                    "max_req_len - prompt - 1), and a prompt of max_req_len - 5 tokens or more is answered with an "
                    "error by validate_input_length); max_seq_len (TensorRT-LLM's PyTorch backend: the KV cache "
                    "manager lowers max_seq_len to the tokens its pool holds, _torch/pyexecutor/resource_manager.py "
                    "KVCacheManager._validate_and_adjust_attention_windows, and the executor worker cuts max_tokens "
                    "to max_seq_len - prompt, executor/base_worker.py _deduce_max_tokens, max_seq_len as the "
                    "executor runs it, + 1 under its overlap scheduler and + the draft tokens under speculative "
                    "decoding (py_executor_creator.py create_py_executor), so a request past max_model_len is "
                    "cut too, not rejected, and only a prompt of max_seq_len tokens or more is "
                    "answered with an error); false: such a request is rejected on arrival (exceeds_kv). The "
                    "sglang and trtllm backends set it")
    running_cap: Literal["as_set", "given", "server", "pool"] = Field(
        default="as_set",
        description="how each attention-DP rank's running-request cap follows its KV pool of T tokens. as_set: "
                    "max_num_seqs. pool (SGLang without --max-running-requests): min(clamp(T / context x 512, "
                    "2,048, 4,096), T / 2), max_num_seqs unread; given (SGLang with it): min(max_num_seqs, T / 2), "
                    "the clamp unread (it sizes the pool only without the flag); server (the 48 SGLang's "
                    "EAGLE-style drafts set as the server's flag): min(max_num_seqs // attention-DP ranks, "
                    "T / 2), at least 1 (model_runner.py / "
                    "model_runner_kv_cache_mixin.py init_memory_pool, max_running_requests // dp_size under DP "
                    "attention, _resolve_max_num_reqs from 0.5.10, pool_configurator.py from 0.5.18; read in "
                    "0.5.4-0.5.23; context: max_model_len, else the model's). The sglang backend sets pool, "
                    "server under a draft, and given where the pool sets max_num_seqs")
    flag_held_to_clamp: bool = Field(
        default=False,
        description="true: a running_cap given or server (the launch's --max-running-requests) is held to "
                    "clamp(T / context x 512, 2,048, 4,096), the bound the pool's own cap is sized by, not to "
                    "T / 2: min(max_num_seqs, that clamp) a rank, so a flag of 8,192 runs 4,096 (SGLang "
                    "0.5.10-0.5.13, model_runner_kv_cache_mixin.py _resolve_max_num_reqs: "
                    "min(max_running_requests // dp_size, estimated); 0.5.14 takes min(.., token_capacity // 2) "
                    "instead, and to 0.5.9 the request pool is the flag's size). The sglang backend sets it "
                    "for those releases")
    empty_share_refused: bool = Field(
        default=False,
        description="true: a running_cap server whose flag, split among the attention-DP ranks, leaves a rank no "
                    "request (max_num_seqs // dp = 0: the 48 SGLang sets beside a draft over more than 48 ranks) is "
                    "refused, as the server refuses to start ('max_running_request is zero': tp_worker.py "
                    "TpModelWorker, model_runner.py / _resolve_max_num_reqs / kv_cache_configurator.py "
                    "resolve_max_num_reqs taking max_running_requests // dp_size; read in 0.5.4-0.5.22); false: "
                    "each rank runs at least one (0.5.23's resolve_max_num_reqs: max(1, max_running_requests // "
                    "attn_dp_size)). The sglang backend sets it for the releases to 0.5.22")
    context_counts_drafts: bool = Field(
        default=False,
        description="true: the server holds a request to its context with the speculative draft's slots counted "
                    "into the prompt, k + 1 for a chain of k, as SGLang's tokenizer does because its EAGLE worker "
                    "keeps the draft tokens in the output's slots (tokenizer_manager.py _validate_one_request: "
                    "num_reserved_tokens = max(top-k x steps, draft tokens) for EAGLE, EAGLE3 and NEXTN/MTP from "
                    "0.5.8; to 0.5.7 reserve_input_token_num = speculative_num_draft_tokens for any draft, a "
                    "separate draft model's too): a request whose prompt, slots and output pass the context is "
                    "rejected (too_long); the scheduler's output cut (clips_output: max_req_len) does not count "
                    "them. The sglang backend sets it by release and draft")
    refuses_full_context: bool = Field(
        default=False,
        description="true: a request whose prompt (with its draft slots) and output come to the whole context is "
                    "rejected too, not only a longer one (SGLang to 0.5.10: tokenizer_manager.py "
                    "_validate_one_request, max_new_tokens + input >= context_len; from 0.5.11 >). The sglang "
                    "backend sets it by release")
    mixed_prefill: Optional[bool] = Field(
        default=None, description="prefills share iterations with decodes; default: as chunked_prefill (vLLM "
                                  "mixes chunks; SGLang runs its prefill batches alone, chunked unless "
                                  "--chunked-prefill-size -1: chunked_prefill true, mixed_prefill false; "
                                  "TensorRT-LLM without chunking mixes whole prompts in flight)")
    max_prefill_tokens: Optional[int] = Field(
        default=None, ge=1,
        description="SGLang's --max-prefill-tokens beside its chunk (the token budget): a waiting prompt joins an "
                    "iteration that already holds prompt tokens only if its uncached tokens are fewer than what "
                    "the iteration leaves of this cap, decodes sharing the iteration counted against it; the "
                    "first prompt always joins, cut at the budget (managers/schedule_policy.py PrefillAdder."
                    "add_one_req, rem_input_tokens). Per attention-DP rank. Default: no cap beside the budget")
    num_scheduler_steps: int = Field(
        default=1, ge=1, le=64,
        description="vLLM 0.5.5–0.6's multi-step scheduling: decodes run in blocks of this many iterations and "
                    "the scheduler admits waiting prompts only between blocks (1: every iteration)")
    block_size: int = Field(default=16, ge=1, le=1024, description="tokens per KV block")
    gpu_memory_utilization: float = Field(
        default=0.9, gt=0, le=1, description="vLLM's: the share of each GPU's whole memory weights, activations "
                                             "and KV cache may take (kv_memory rule vllm, the default)")
    kv_memory: Optional[KvMemory] = Field(
        default=None, description="whose accounting sizes the KV pool (rule vllm, sglang or trtllm) and its "
                                  "fraction; the backend sets it; none: vLLM's, with gpu_memory_utilization")
    weight_dtype: Optional[Literal["bf16", "fp16", "fp8", "int8", "int4", "nvfp4", "mxfp4"]] = Field(
        default=None, description="the weights the pool serves; default: the checkpoint's format, as the stacks load "
                                  "it (fp8 for DeepSeek-V3's and the Qwen3 -FP8 releases' block fp8, mxfp4 for "
                                  "gpt-oss, bf16 for a 16-bit checkpoint: `llmsim profiles list` shows it as "
                                  "`serves`); fp8 of a 16-bit checkpoint is the stack's online per-tensor fp8 "
                                  "(vLLM, SGLang); any other format than a checkpoint's config declares is refused")
    kv_dtype: Literal["bf16", "fp16", "fp8"] = "bf16"
    mxfp4_activation: Optional[Literal["bf16", "mxfp8"]] = Field(
        default=None, description="activations of MXFP4 experts on GPUs with FP4 tensor cores: bf16 (W4A16, "
                                  "vLLM's FlashInfer MXFP4×BF16 kernels without VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8) or "
                                  "mxfp8 (W4A8, TensorRT-LLM's, and vLLM's with that variable as its gpt-oss recipe sets it); "
                                  "default: mxfp8, the vllm backend bf16. Without FP4 units MXFP4 experts always compute in bf16; "
                                  "a pool stating another value than its backend's without MXFP4 experts or FP4 units, "
                                  "where it does nothing, is refused")
    mxfp4_expert_layout: Optional[ExpertLayout] = Field(
        default=None, description="how the stack holds MXFP4 experts on the GPU, which its weights count: the "
                                  "padding its quant method creates them with, the tiles its kernel re-lays weights "
                                  "and scales into, and whether it keeps the loaded scales beside them; the vllm "
                                  "and sglang backends set the kernel a release runs on the GPU (Marlin, Triton "
                                  "matmul_ogs, FlashInfer); none: the padding of the GPU's calibrated MXFP4 MoE "
                                  "kernel")
    kernels: Optional[str] = Field(
        default=None, description="whose kernels the GPU runs: a stack name (vllm, sglang, trtllm) selecting the "
                                  "hardware profile's per-stack overrides (calibration.stacks) where it has them; "
                                  "none or a stack without overrides: the profile's own (vLLM's) kernels")
    moe_backend: Optional[str] = Field(
        default=None, description="TensorRT-LLM's MoE backend (the extra LLM API options' moe_config.backend, "
                                  "lower case; the trtllm backend sets the release's default: cutlass to "
                                  "1.3.0rc1, auto from 1.3.0rc2). auto: what TensorRT-LLM picks as the model "
                                  "loads, trtllm for gpt-oss on compute capability 10.x, triton for gpt-oss on "
                                  "Hopper and cutlass for every other model. cutlass: the stack's own "
                                  "expert kernels; trtllm: the TRT-LLM-gen kernels on compute capability 10.x, priced "
                                  "by the GPU profile's own MoE parameters (fitted on the same kernels in vLLM) "
                                  "for block fp8, nvfp4 and mxfp4 experts, other formats running CUTLASS as the "
                                  "stack does; deepgemm: block fp8 on 10.x; triton: gpt-oss's MXFP4 experts on "
                                  "Hopper, priced by the profile's own parameters (fitted on vLLM's rows of the same "
                                  "triton_kernels matmul_ogs). wideep, cutedsl and vanilla are refused (no kernel "
                                  "rows of them), as is the key on any other stack")
    scheduler: Literal["continuous", "static"] = Field(
        default="continuous",
        description="continuous: iteration-level batching (vLLM); static: a batch runs to completion (old TGI/FT)")
    priority_scheduling: bool = Field(
        default=True,
        description="the replica serves its waiting requests by class priority, the larger first and first come, "
                    "first served among equals, and preempts the lowest first (vLLM's --scheduling-policy "
                    "priority, SGLang's --enable-priority-scheduling); false: first come, first served, as every "
                    "stack is launched by default (the vllm, sglang and trtllm backends set it), and classes of "
                    "different priorities sharing the pool are refused rather than served in an order they did "
                    "not ask for. true is refused on trtllm, on a backend_version before the first release read (vLLM 0.11.0, "
                    "SGLang 0.5.4), and on sglang where the pool's class priorities differ by more than 10; none: "
                    "llmsim's generic engine keeps true")
    kv_allocation: Literal["paged", "contiguous"] = Field(
        default="paged",
        description="paged: KV blocks allocated as a sequence grows (vLLM's PagedAttention); contiguous: each "
                    "admitted request reserves its maximum length (prompt + max_new_tokens, else max_model_len) "
                    "until it ends, as servers before paging did (TGI, FasterTransformer)")
    kv_admission: Literal["on_demand", "reserve_output", "expected_output", "decode_reservation"] = Field(
        default="on_demand",
        description="paged KV when memory runs short. on_demand (vLLM V1; TensorRT-LLM's MAX_UTILIZATION): a "
                    "request is admitted on its prompt's blocks and decodes allocate as they grow; when the next "
                    "tokens do not fit, the newest running request of the lowest class priority is preempted (its "
                    "KV freed, recomputed later). reserve_output (TensorRT-LLM's default GUARANTEED_NO_EVICT): a "
                    "request is admitted only if its prompt and whole output fit beside the remaining output of "
                    "every running request, so nothing is ever preempted; the rest wait. expected_output (SGLang's "
                    "PrefillAdder with its radix cache): a request is admitted only while its uncached prompt plus "
                    "min(its remaining output, output_estimate_clip) is less than the free and evictable KV less, "
                    "for each decoding request, min(its remaining output, clip) × new_token_ratio, and less each "
                    "prompt admitted in the same pass with min(its output, clip); the ratio starts at "
                    "new_token_ratio_init, falls by (init − min) / new_token_ratio_decay_steps each decode-only "
                    "iteration to init × new_token_ratio_min_factor, is back at init whenever the replica goes "
                    "idle, and after a preemption is (Σ decoded + retract_decode_steps × n) / (Σ outputs + 1), "
                    "at most 1, over the n requests still decoding. With dp > 1 attention ranks each rank tests "
                    "its own pool and decoding requests with its own ratio, which falls in the iterations the "
                    "rank decodes without a prompt chunk and is set by the rank's own preemptions over its own "
                    "decoding requests. When decodes do not fit, the decoding request "
                    "with the fewest output tokens (the longest prompt among equals, then the newest) is preempted "
                    "first, whatever its class, and goes to the back of its class's queue. A request's output "
                    "length stands for its max_new_tokens (a benchmark client sending max_tokens = its output "
                    "length, as reserve_output assumes too); requests carry no ignore_eos flag, whose own path "
                    "SGLang takes only without the radix cache. A disaggregated decode pool of expected_output "
                    "runs decode_reservation. decode_reservation (SGLang's decode server, disaggregation/decode.py "
                    "DecodePreallocQueue; only on a pool that decodes for a prefill pool): a handed-over request "
                    "is admitted only while its prompt's KV plus reserved_decode_tokens fits the free KV less "
                    "reserved_decode_tokens for every running request (those admitted in the same pass "
                    "included) and, if more, what the running requests need beyond the KV they hold for the "
                    "largest to finish (its prompt + min(output, output_estimate_clip) less Σ prompt + output so "
                    "far of the running), and while its prompt + min(output, clip) less that sum fits too. When "
                    "decodes do not fit, the request with the fewest output tokens (the longest prompt, then the "
                    "newest) is retracted; retracted requests wait ahead of every handed-over one, which waits "
                    "while any does, and one resumes when its KV but its last token's plus reserved_decode_tokens "
                    "fits the free KV less the running requests' reserve; it keeps that KV (SGLang copies it to "
                    "host memory and back) and recomputes its last token only. Not modelled: SGLang allocates "
                    "before the prefill runs, and the prefill server sends a request on only once its decode KV "
                    "is allocated, so there a request waits before its prefill, here after its transfer (the "
                    "prefill pool is not held back); the host copies' time. With dp > 1 attention ranks each rank "
                    "tests its own pool and running requests")
    full_until_leave: bool = Field(
        default=False,
        description="with kv_admission: expected_output, once a waiting request fails the KV test an "
                    "attention-DP rank admits nothing new until one of its running requests leaves (finishes, "
                    "is retracted or cancelled), an iteration leaves a prompt part-way, or it runs nothing: "
                    "SGLang's batch_is_full, set on NO_TOKEN (scheduler.py get_new_batch_prefill, "
                    "schedule_policy.py PrefillAdder.add_one_req) and cleared as its running batch shrinks "
                    "(update_running_batch; get_next_batch_to_run's filter of the last prefill batch, which "
                    "drops the chunked request), 0.5.4-0.5.23; so the head is not tried again as "
                    "new_token_ratio decays. false: the head is tried at every plan, as under SGLang's "
                    "--enable-priority-scheduling, which clears the flag at every plan to try preemption (so "
                    "priority_scheduling: true beside it is refused on sglang). The backend sglang sets it; "
                    "read with kv_admission: expected_output alone (SGLang's decode server, decode_reservation, "
                    "admits from its own queue, disaggregation/decode.py DecodePreallocQueue). "
                    "Not modelled: to 0.5.22 the flag is cleared only in a decode plan, so the head is tried "
                    "one iteration after a request leaves, not at once (0.5.23 filters the running batch at "
                    "every plan); the flag an admitted request sets when it leaves no KV budget with no request "
                    "behind it (budget_state)")
    full_cleared_beside_swa: bool = Field(
        default=False,
        description="with full_until_leave, a pool whose KV splits into full-attention and sliding-window "
                    "parts (SGLang's hybrid SWA pool: kv_memory.swa_full_tokens_ratio below 1) clears the "
                    "flag at every plan, as priority scheduling does, so it runs as full_until_leave: false "
                    "(scheduler.py get_new_batch_prefill: 'if self.enable_priority_preemption or "
                    "self.is_hybrid_swa', from 0.5.12; 0.5.10 and 0.5.11 clear it for priority preemption "
                    "alone; model_config.py is_hybrid_swa: a hybrid-SWA architecture without "
                    "--disable-hybrid-swa-memory). The backend sglang sets it by release")
    prompt_kv: Literal["whole", "per_chunk"] = Field(
        default="whole",
        description="when a chunked prompt's KV blocks are allocated. whole: all of them at admission. per_chunk "
                    "(vLLM V1 from 0.19, v1/core/sched/scheduler.py Scheduler.schedule and "
                    "v1/core/kv_cache_manager.py allocate_slots): a waiting prompt is still admitted only if its "
                    "whole prompt's blocks, less its prefix-cache hits, fit the free blocks "
                    "(scheduler_reserve_full_isl), but each iteration allocates only the blocks of the tokens it "
                    "schedules, and entered in the prefix cache as they are allocated; a prompt part-way through "
                    "its prefill is a running request whose next chunk, when its blocks do not fit, preempts the "
                    "newest running request of the lowest class priority (possibly itself), as a decode does, and "
                    "no prompt is admitted in that iteration. So decodes grow into the blocks a prompt part-way "
                    "has yet to take, and it preempts after computing some of its chunks (under one token budget "
                    "no prompt joins before the last chunk of the one being chunked, so with one class that "
                    "prompt is the newest running request and preempts itself). Only with kv_admission: "
                    "on_demand, paged KV and continuous batching; a prompt not chunked (chunked_prefill: false) "
                    "takes its blocks whole, its only chunk. The vllm backend sets it. SGLang keeps whole: "
                    "PrefillAdder.add_one_req charges a prompt's whole uncached length against rem_total_tokens "
                    "and, while one chunked request takes the chunk budget (add_chunked_req), admits no other "
                    "prompt before its last chunk; TensorRT-LLM allocates a prompt's context blocks at once "
                    "(kvCacheManager.cpp KVCacheManager::addSequence; its capacity scheduler charges a first "
                    "context chunk the whole prompt, getNeededBlocksOneStep)")
    sliding_window_kv: Literal["prompt", "capped", "processed"] = Field(
        default="prompt",
        description="what vLLM's admission gate (prompt_kv: per_chunk) asks of a model's sliding-window "
                    "layers, which share its KV pool (their windows' blocks beside each running request's own). "
                    "prompt (0.19): every sliding-window group's blocks of the whole prompt past the window of "
                    "its cached tokens, as many again as its full-attention layers' for a fresh prompt "
                    "(v1/core/kv_cache_manager.py can_fit_full_sequence). capped (from 0.20): no more than a "
                    "request holds in a group, cdiv(min(window - 1 + max_num_batched_tokens, max_model_len), "
                    "block_size) + 1 blocks less those its hit covers (single_type_kv_cache_manager.py "
                    "get_num_blocks_to_allocate, apply_admission_cap: SlidingWindowSpec."
                    "max_admission_blocks_per_request), and the prompt's first chunk must fit too "
                    "(allocate_slots' own test). processed (from 0.26): capped, and the blocks below the window "
                    "go back only once the tokens before them are processed (allocate_slots: remove_skipped_blocks"
                    "(num_computed_tokens - num_in_flight_tokens)): with async scheduling the next iteration is "
                    "scheduled while one runs, so a chunk keeps the window behind the previous chunk and that "
                    "chunk's blocks, a completed prompt its last chunk's through its first decode, and the cap "
                    "counts two budgets in flight (VllmConfig.max_in_flight_tokens). Every mode holds a prompt's "
                    "chunk and the window behind it in every group while it runs. No effect on a model without "
                    "sliding-window layers or a pool split by a ratio (SGLang, TensorRT-LLM)")
    new_token_ratio_init: Optional[float] = Field(
        default=None, gt=0, le=1,
        description="expected_output: the share of running requests' remaining output admission expects them "
                    "to write, when the replica starts or goes idle (SGLang: SGLANG_INIT_NEW_TOKEN_RATIO 0.7 × "
                    "--schedule-conservativeness, at most 1); default 0.7, and 0.21 on a pool of dp > 1 "
                    "attention ranks (SGLang's DP attention multiplies schedule_conservativeness by 0.3)")
    new_token_ratio_min_factor: float = Field(
        default=0.14, ge=0, le=1,
        description="expected_output: the ratio's floor as a share of its start (SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR)")
    new_token_ratio_decay_steps: int = Field(
        default=600, ge=1, le=10_000_000,
        description="expected_output: decode-only iterations the ratio takes from its start to its floor "
                    "(SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS)")
    output_estimate_clip: int = Field(
        default=4096, ge=1, le=10_000_000,
        description="expected_output and decode_reservation: the most output tokens a request is expected to "
                    "still write (SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION)")
    retract_decode_steps: int = Field(
        default=20, ge=0, le=1_000_000,
        description="expected_output: decode steps per request the ratio set after a preemption allows for "
                    "(SGLANG_RETRACT_DECODE_STEPS)")
    retraction_order: Literal["fewest_output", "newest"] = Field(
        default="fewest_output",
        description="which decoding request SGLang's admission (kv_admission: expected_output or "
                    "decode_reservation) retracts first when the next decodes do not fit: fewest_output, "
                    "retract_decode's length order (the fewest output tokens, then the longest prompt, then the "
                    "newest); newest, the batch's last request, as 0.5.9-0.5.16 retract under speculative "
                    "decoding (schedule_batch.py: the policy sort only without a speculative algorithm). The other "
                    "admissions preempt as vLLM does (the lowest class priority, the newest among equals)")
    resume_without_last_token: bool = Field(
        default=True,
        description="decode_reservation: a retracted request's resumption is tested on its KV but its last "
                    "token's, prompt + output − 1, that token's KV written by its next decode (SGLang from 0.5.12: "
                    "disaggregation/decode.py resume_retracted_reqs over _prealloc_required_tokens / "
                    "_pre_alloc_fill_len); false: on prompt + output (SGLang to 0.5.11: required_tokens_for_request "
                    "= len(origin_input_ids) + len(output_ids) + num_reserved_decode_tokens); the sglang backend "
                    "sets it by release")
    reserved_decode_tokens: int = Field(
        default=512, ge=0, le=1_000_000,
        description="decode_reservation: decode tokens of KV kept free for each running request when a "
                    "handed-over or retracted request is admitted (SGLang's --num-reserved-decode-tokens, 512 in "
                    "0.5.9-0.5.23)")
    max_model_len: Optional[int] = Field(
        default=None, ge=1,
        description="the longest request the server takes, prompt and output together (vLLM's --max-model-len, "
                    "SGLang's --context-length, TensorRT-LLM's max_seq_len): a longer one is rejected, contiguous "
                    "KV reserves it, and vLLM refuses to start when one request of it does not fit the KV pool "
                    "of an attention rank; at most the model's context; default: the model's context "
                    "(max_position_embeddings), as the stacks take it")
    max_new_tokens: Optional[int] = Field(
        default=None, ge=1, description="contiguous KV: output tokens reserved beyond each prompt (TGI's "
                                        "max_new_tokens); a request asking for more is rejected; default: "
                                        "reserve max_model_len")
    iteration_overhead_ms: Optional[float] = Field(
        default=None, ge=0, le=1000, description="per-iteration CPU/launch overhead; default from the GPU profile")
    iteration_us_per_seq: float = Field(
        default=0.0, ge=0, le=10000, description="scheduler/sampler CPU time per sequence per iteration")
    eager_launch_us: float = Field(
        default=0.0, ge=0, le=1000,
        description="CPU time per kernel launch of an iteration run without a CUDA graph (one holding prompt "
                    "tokens, more than graph_max_tokens): such an iteration lasts at least its launches, the "
                    "model's per-layer kernels counted from the stacks' modules (simulator/costmodel/eager.py)")
    graph_max_tokens: Optional[int] = Field(
        default=None, ge=0, le=1_000_000,
        description="iterations of up to this many tokens replay a captured CUDA graph even with prompt tokens "
                    "in them (vLLM's piecewise graphs, max_cudagraph_capture_size: 512 by default); 0: only "
                    "decode batches do (TensorRT-LLM); unset: SGLang's piecewise prefill graphs where its release "
                    "captures them for the pool (kv_memory.piecewise_cuda_graph, prefill_graphs_off: up to its "
                    "prefill chunk, an MLA model's kv_memory.mla_prefill_graph_tokens), else 0")
    async_scheduling: bool = Field(
        default=False,
        description="the CPU prepares the next iteration while the GPU runs this one (vLLM's --async-scheduling, "
                    "its default from 0.14): the per-iteration and per-sequence CPU time shows only where it "
                    "outlasts the GPU's; false: it adds to every iteration (vLLM before 0.14)")
    pp_async: Literal["unsupported", "one_batch", "run_ahead"] = Field(
        default="unsupported",
        description="what async_scheduling does with pp > 1. unsupported: the pipeline schedules in turn; its "
                    "default turns async scheduling off and async_scheduling: true is refused (vLLM before 0.15.0, "
                    "SGLang's event_loop_pp). one_batch: async scheduling runs, but a request is in one in-flight "
                    "batch at a time and is scheduled again only once its token is back, so a round costs what it "
                    "does in turn (vLLM 0.15). run_ahead: every running request is in every batch, the last stage "
                    "hands the sampled tokens to the first over the GPUs and the CPU prepares the next batches "
                    "while the GPUs run: a round is one walk of the whole batch, with the CPU time showing only "
                    "where it outlasts the walk (vLLM 0.16.0 and later, mp executor). A pool stating another value "
                    "than its backend's where it does nothing is refused: at pp 1, and one_batch or run_ahead "
                    "under async_scheduling: false")
    schedule_ahead: Optional[bool] = Field(
        default=None,
        description="the scheduler plans iteration N+1 while the GPU runs N and only then takes in new requests, "
                    "so a request arriving during N first runs in N+2 (vLLM's batch queue under async scheduling, "
                    "vllm/v1/engine/core.py step_with_batch_queue; SGLang's overlap event loop, scheduler.py "
                    "event_loop_overlap; TensorRT-LLM's overlap scheduler, py_executor.py "
                    "_executor_loop_overlap); an idle server starts it at once. Default: as async_scheduling")
    first_token_from_prefill: bool = Field(
        default=False,
        description="on a disaggregated decode pool, the prefill replica's sampled token is the client's first, "
                    "streamed once the KV has landed and the request joins the decode batch, with no forward "
                    "pass of its own (SGLang's prebuilt batch: disaggregation/decode.py process_prebuilt); "
                    "false: the decode replica computes the last prompt token and samples the first (vLLM's "
                    "P/D connectors recompute it)")
    decode_prefix_reuse: bool = Field(
        default=True,
        description="on a disaggregated decode pool with prefix_cache, a transferred prompt is looked up in the "
                    "decode replica's own cache: the blocks it holds are shared and not sent, only the rest "
                    "crosses the link, and the prompt is cached there for the next turn (vLLM's NIXL connector: "
                    "get_num_new_matched_tokens counts the local hit); false: the replica holds the whole "
                    "prompt's KV as its own (SGLang's decode server runs a chunk cache, no radix tree)")
    output_after_next_launch: bool = Field(
        default=False,
        description="an iteration's sampled tokens reach the client only once the next iteration is launched, "
                    "and an iteration holding prompt tokens runs eagerly (no CUDA graph), so its launch lasts "
                    "until it has run: a prompt prefilled just before another prefill iteration gets its first "
                    "token after that one too, and a request ending just before it ends after it (SGLang's "
                    "overlap scheduler from 0.3.6 without SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP, "
                    "github.com/sgl-project/sglang/issues/10514; the sglang backend's default); decode iterations "
                    "launch as one graph and delay nothing")
    request_ms: float = Field(
        default=0.0, ge=0, le=10000, description="front-end time per request (HTTP, hand-off), one request at a time")
    tokenize_us_per_token: float = Field(
        default=0.0, ge=0, le=1000, description="front-end tokenisation per prompt token, one request at a time")
    response_ms: float = Field(
        default=0.0, ge=0, le=10000, description="engine to client per streamed token (detokenise, HTTP)")
    num_gpu_blocks_override: Optional[int] = Field(
        default=None, ge=1, description="force the KV capacity in blocks, of each attention-DP rank (vLLM's DP engine "
                                        "cores each apply it to their own pool)")
    override_checked: bool = Field(
        default=False,
        description="true: vLLM's start-up check that one request of max_model_len fits runs on the pool "
                    "num_gpu_blocks_override gives, so a small override with a long max_model_len does not start "
                    "and a large one starts a pool too short as measured; false: on the pool it measured, the "
                    "override applied after it (vLLM to 0.20.0). From 0.20.1 get_kv_cache_configs "
                    "(v1/core/kv_cache_utils.py, kv_cache_planning.py from 0.33.0) turns the override into the "
                    "available memory before _check_enough_kv_cache_memory. The vllm backend sets it; pools "
                    "without num_gpu_blocks_override ignore it")
    prefix_cache: bool = Field(
        default=True, description="reuse cached KV of a shared prompt prefix (vLLM v1's default); needs "
                                  "requests with block ids (sessions, system prompts, Mooncake traces)")
    cache_preempted_output: bool = Field(
        default=False,
        description="with prefix_cache, a preempted request's full blocks of output stay cached beside its "
                    "prompt's, evictable, and its recompute skips the ones not evicted meanwhile (vLLM V1 hashes "
                    "blocks as they fill, kv_cache_manager.py allocate_slots cache_blocks, frees a preempted "
                    "request's blocks with their hashes kept and looks them up again on resumption, "
                    "get_computed_blocks; the vllm backend sets it); needs block ids over the output (sessions, "
                    "system prompts); false: only its prompt's blocks stay cached (SGLang's "
                    "release_kv_cache(..., is_insert=False))")
    prompt_cached: Literal["allocated", "computed", "released"] = Field(
        default="allocated",
        description="with prefix_cache, when a prompt's blocks become a hit for other requests. allocated: as "
                    "they are allocated, so a prompt admitted after another in the same iteration shares the "
                    "blocks the first is computing (vLLM V1 caches a request's full blocks in allocate_slots, "
                    "cache_blocks, as it schedules them). computed (SGLang 0.5.4-0.5.23): only once the "
                    "iteration computing them has run, the part of a prompt still being chunked before the next "
                    "plan (scheduler.py get_next_batch_to_run, stash_chunked_request) and a completed prompt "
                    "when its iteration's result is processed (process_batch_result_prefill, "
                    "cache_unfinished_req, checkpoint_kv_cache from 0.5.22), which under schedule_ahead comes "
                    "after the next iteration is planned (event_loop_overlap); so prompts sharing a prefix "
                    "admitted together, or under schedule_ahead in the next iteration, each compute it, and "
                    "the copies are freed as they enter the cache (radix_cache.py cache_unfinished_req). Only "
                    "with prompt_kv: whole. released (TensorRT-LLM before 1.1.0rc0): only as the request ends, "
                    "whatever it computed (kvCacheManager.cpp removeSequence -> releaseBlocks stores the "
                    "sequence's blocks for reuse; none stored after the context phase), so a prompt "
                    "sharing a prefix with a running one computes it too")
    prefix_cache_capacity_tokens: Union[int, Literal["unbounded"], None] = Field(
        default=None, description="cap on cached tokens no running request uses; default: whatever KV memory "
                                  "running requests leave free; 'unbounded': an idealised cache beyond GPU memory")
    kv_offload: Optional[KvOffload] = Field(
        default=None, description="offload tiers below the prefix cache (host DRAM, NVMe): evicted entries move "
                                  "there and a hit reloads them (bytes / bandwidth before the first prefill "
                                  "chunk); default: none, evicted KV is gone")

    def longest_request(self, model: "ModelProfile") -> int:
        """The longest request, prompt and output, this engine's server takes: ``max_model_len``, else the
        model's context, as the stacks default to it."""
        return self.max_model_len or model.max_position_embeddings

    def rank_running_requests(self, tokens: int, context: int, dp: int = 1) -> int:
        """How many requests an attention rank of ``dp`` runs at once (``max_num_seqs``) as ``running_cap``
        sizes it from the rank's pool of ``tokens`` KV tokens and the server's ``context``: SGLang's
        model runner sizes its request pool after its KV pool, clamp(tokens / context x 512, 2,048,
        4,096), so a large pool runs up to 4,096 requests a rank, without --max-running-requests no
        more than half the pool's tokens, and a server-wide flag is split among the ranks. A flag the
        launch gives is not held to that clamp, which sizes the pool only where no flag does (0.5.14
        _resolve_max_num_reqs: min(flag // dp_size, tokens // 2); to 0.5.9 the request pool is the
        flag's size): --max-running-requests 8,192 runs 8,192 a rank on a large pool. Releases 0.5.10 to
        0.5.13 hold it to the clamp (``flag_held_to_clamp``: min(flag // dp_size, clamp)), where 8,192
        ran 4,096."""
        if self.running_cap == "as_set":
            return self.max_num_seqs
        clamp = max(min(int(tokens / context * 512), 4096), 2048)
        if self.running_cap == "pool":
            return max(min(clamp, tokens // 2), 1)
        # 0.5.10-0.5.13 held the flag to the clamp instead (flag_held_to_clamp)
        bound = clamp if self.flag_held_to_clamp else tokens // 2
        return max(min(self.max_num_seqs // (dp if self.running_cap == "server" else 1), bound), 1)

    def longest_prompt(self, dp: int = 1) -> Optional[int]:
        """The longest prompt the server takes below its context, where it answers a longer one with an
        error (``rejects_prompt_over_budget`` without chunked prefill: one rank's budget); None: no such cap."""
        return self.prompt_cap(self.rank_tokens(dp))

    def prompt_cap(self, rank_tokens: int) -> Optional[int]:
        """:meth:`longest_prompt` for a rank whose budget is ``rank_tokens``: a replica's engine asks with
        its own rank's, since the config it runs carries the replica's budget, dp ranks' worth
        (:func:`~simulator.fleet.setup.rank_limits`), from which ``rank_tokens(dp)`` would not recover it."""
        if self.chunked_prefill or not self.rejects_prompt_over_budget:
            return None
        return rank_tokens

    def rank_tokens(self, dp: int) -> int:
        """One attention-DP rank's token budget in a replica of ``dp`` ranks: the
        stack's whole flag (``dp_limits: per_rank``) or 1/dp of it (``split``:
        SGLang's ``_handle_data_parallelism`` divides ``chunked_prefill_size`` by dp). Unchunked,
        the budget is SGLang's ``max_prefill_tokens``, which it leaves whole on every rank."""
        if dp <= 1 or self.dp_limits == "per_rank" or not self.chunked_prefill:
            return self.max_num_batched_tokens
        return max(1, self.max_num_batched_tokens // dp)

    @property
    def stack_label(self) -> str:
        """The backend and release a refusal names ("sglang 0.5.20"; "" for llmsim's generic engine)."""
        return " ".join(x for x in (self.backend, self.backend_version) if x)

    @property
    def draft_slots_per_request(self) -> int:
        """Budget tokens each scheduled request costs beside its own: the draft
        model's slots where the scheduler charges them request by request, else
        none (taken off the budget once, before the scheduler sees it)."""
        return self.draft_budget_slots if self.draft_budget_per == "scheduled_request" else 0

    @property
    def mixes_prefill(self) -> bool:
        """Whether a prefill shares its iteration with the running decodes."""
        return self.chunked_prefill if self.mixed_prefill is None else self.mixed_prefill

    @property
    def plans_ahead(self) -> bool:
        """Whether new requests join the iteration after next (see ``schedule_ahead``)."""
        return self.async_scheduling if self.schedule_ahead is None else self.schedule_ahead

    @property
    def front_end_busy(self) -> bool:
        """Whether requests pass through a serial front end before the scheduler."""
        return self.request_ms > 0 or self.tokenize_us_per_token > 0

    @property
    def cache_unbounded(self) -> bool:
        return self.prefix_cache_capacity_tokens == "unbounded"

    @model_validator(mode="after")
    def _one_memory_knob(self) -> "EngineConfig":
        rule = self.kv_memory.rule if self.kv_memory else KvMemory().rule
        if RULES[rule].engine_knob != "gpu_memory_utilization" and "gpu_memory_utilization" in self.model_fields_set:
            raise ValueError(f"gpu_memory_utilization is vLLM's; this engine sizes its KV cache as {rule} does "
                             "(kv_memory.rule): set kv_memory.fraction instead (SGLang's mem_fraction_static, "
                             "TensorRT-LLM's free_gpu_memory_fraction)")
        if RULES[rule].engine_knob == "gpu_memory_utilization" and "gpu_memory_utilization" in self.model_fields_set \
                and self.kv_memory is not None and self.kv_memory.fraction is not None:
            raise ValueError(f"gpu_memory_utilization and kv_memory.fraction both set vLLM's gpu_memory_utilization "
                             f"({self.gpu_memory_utilization} and {self.kv_memory.fraction}): set one of the two")
        return self

    @field_validator("backend_version", mode="before")
    @classmethod
    def _version_as_text(cls, v: object) -> object:
        # YAML reads an unquoted 0.10 as the number 0.1: a release written so is not the release meant.
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            raise ValueError(f"expected the release as text, quoted (backend_version: \"0.10.0\"): unquoted, "
                             f"YAML reads it as the number {v!r}")
        return v

    @model_validator(mode="after")
    def _version_of_a_backend(self) -> "EngineConfig":
        if self.backend_version is None:
            return self
        # The one check llmsim estimate's and validate's --backend-version take too: a spelling one
        # of them accepted would otherwise be refused, or read another way, by another.
        from ..profiles.backend import check_backend_version
        try:
            check_backend_version(self.backend_version)
        except ValueError as e:
            raise KeyRefusal("backend_version", str(e)) from None
        # Without a backend the pool runs llmsim's generic engine, which no release's defaults change.
        if self.backend is None:
            raise KeyRefusal("backend_version", f"{self.backend_version!r} names a release of a serving stack; set "
                             "backend too (vllm, sglang, trtllm or a profile file), whose release it is")
        from ..errors import LlmsimError
        from ..profiles.backend import load_backend
        try:
            prof = load_backend(self.backend)
        except (LlmsimError, OSError):
            return self        # the backend itself is refused where it is loaded, naming its fault
        if not prof.describes_releases:
            raise KeyRefusal("backend_version", f"{self.backend_version!r} names a release, and the backend profile "
                             f"{self.backend!r} describes none (no newest_release, oldest_release, default_release "
                             f"or by_version rule): its keys are the one set of defaults it runs, whatever release "
                             f"is named; leave backend_version out, or state in the profile the release its keys "
                             f"were read from (newest_release)")
        if prof.older_than_described(self.backend_version):
            raise KeyRefusal("backend_version", f"{self.backend_version!r} is older than the {prof.name} releases "
                             f"llmsim describes (from {prof.oldest_release}): its defaults are unknown; name "
                             f"{prof.oldest_release} or a later release")
        if prof.newer_than_described(self.backend_version):
            default = prof.default_release or prof.newest_release
            raise KeyRefusal("backend_version", f"{self.backend_version!r} is newer than the {prof.name} releases "
                             f"llmsim has read (to {prof.newest_release}, which the backend profile describes): its "
                             f"memory reserve and scheduling defaults are unknown; leave backend_version out to run "
                             f"{default}'s, or name " + ("that release" if default == prof.newest_release
                                                          else f"{prof.newest_release} or an earlier release"))
        return self

    @model_validator(mode="after")
    def _graphs_stated(self) -> "EngineConfig":
        # A backend's release (not a profile's rule checked on its own) that sizes its pool after
        # an estimate llmsim cannot derive needs the pool to state it, unless num_gpu_blocks_override
        # replaces that pool before anything reads it (override_checked: the start-up check too).
        from ..kv_memory import GraphsUnstated, graphs_unstated

        measured_unused = bool(self.num_gpu_blocks_override) and self.override_checked
        why = graphs_unstated(self.kv_memory) if self.backend is not None and not measured_unused else None
        if why:
            raise GraphsUnstated(why)
        return self

    @model_validator(mode="after")
    def _capacity_positive(self) -> "EngineConfig":
        c = self.prefix_cache_capacity_tokens
        if isinstance(c, int) and c < 0:
            raise ValueError(f"prefix_cache_capacity_tokens must be ≥ 0 or 'unbounded', got {c}")
        if c is not None and not self.prefix_cache:
            # a size of a cache that is off would read as counted while nothing reads it
            raise ValueError(f"prefix_cache_capacity_tokens ({c}) sizes the prefix cache, which prefix_cache: "
                             "false turns off; remove one of the two")
        return self

    @model_validator(mode="after")
    def _kernels_known(self) -> "EngineConfig":
        if self.kernels is None:
            return self
        from ..profiles.backend import check_serving_stack

        try:
            check_serving_stack(self.kernels)
        except ValueError as e:
            raise KeyRefusal("kernels", str(e)) from None
        return self

    @model_validator(mode="after")
    def _moe_backend_priced(self) -> "EngineConfig":
        if self.moe_backend is None:
            return self
        from ..profiles.moe_backend import check_moe_backend

        try:
            check_moe_backend(self.moe_backend, self.kernels)
        except ValueError as e:
            raise KeyRefusal("moe_backend", str(e)) from None
        return self._auto_in_release()

    def _auto_in_release(self) -> "EngineConfig":
        # AUTO came with the default it is (#11074): a release whose own default is another backend
        # has no AUTO, and its MoeConfig refuses the value at launch.
        from ..profiles.moe_backend import AUTO, AUTO_SINCE
        if self.moe_backend != AUTO or self.backend is None or self.backend_version is None:
            return self
        from ..errors import LlmsimError
        from ..profiles.backend import load_backend
        try:
            prof = load_backend(self.backend)
        except (LlmsimError, OSError):
            return self        # the backend itself is refused where it is loaded, naming its fault
        default = {**prof.engine, **(prof.version_keys(self.backend_version) or {})}.get("moe_backend")
        if default not in (None, AUTO):
            raise KeyRefusal("moe_backend", f"'auto' is no moe_config.backend of {self.stack_label}, whose "
                             f"MoeConfig.backend takes AUTO from {AUTO_SINCE} (llm_args.py) and defaults to "
                             f"{default}: set {default}, or name a backend_version from {AUTO_SINCE}")
        return self

    @model_validator(mode="after")
    def _offload_modelled(self) -> "EngineConfig":
        if self.kv_offload is None:
            return self
        if not self.prefix_cache:
            raise ValueError("kv_offload keeps what the prefix cache evicts; it needs prefix_cache: true")
        if self.cache_unbounded:
            raise ValueError("kv_offload needs a bounded prefix cache (prefix_cache_capacity_tokens: unbounded "
                             "never evicts, so nothing would reach the tiers)")
        return self

    @property
    def contiguous(self) -> bool:
        """Whether each request reserves its maximum KV at admission."""
        return self.kv_allocation == "contiguous"

    @model_validator(mode="after")
    def _contiguous_modelled(self) -> "EngineConfig":
        if self.max_new_tokens is not None and not self.contiguous:
            raise ValueError("max_new_tokens sets the KV a contiguous allocation reserves; it needs "
                             "kv_allocation: contiguous (paged KV grows with each request's own output)")
        if self.contiguous and self.prefix_cache:
            raise ValueError("kv_allocation: contiguous cannot share KV between requests (prefix caching needs "
                             "paged blocks); set prefix_cache: false")
        return self

    @property
    def reserves_output(self) -> bool:
        """Whether admission reserves each request's whole output (no preemption)."""
        return self.kv_admission == "reserve_output"

    @property
    def expects_output(self) -> bool:
        """Whether admission weighs running requests' expected output (SGLang's)."""
        return self.kv_admission == "expected_output"

    def tunes(self, key: str) -> bool:
        """Whether ``key`` is set to other than its default (a config dumped whole and read back
        sets every key, to its default where nobody chose it)."""
        return key in self.model_fields_set and getattr(self, key) != type(self).model_fields[key].default

    @property
    def reserves_decode(self) -> bool:
        """Whether admission is SGLang's decode server's reservation (a disaggregated decode pool)."""
        return self.kv_admission == "decode_reservation"

    @model_validator(mode="after")
    def _admission_modelled(self) -> "EngineConfig":
        if self.kv_admission != "on_demand" and (self.contiguous or self.scheduler == "static"):
            raise ValueError(f"kv_admission: {self.kv_admission} applies to paged KV with continuous batching; "
                             "kv_allocation: contiguous and scheduler: static already reserve each request's "
                             "maximum at admission (leave kv_admission unset)")
        if (self.expects_output or self.reserves_decode) and self.num_scheduler_steps > 1:
            raise ValueError(f"kv_admission: {self.kv_admission} is SGLang's, which has no multi-step scheduling; "
                             "set num_scheduler_steps: 1 or another kv_admission")
        # Parameters of a rule that is off would read as applied while nothing reads them (a default
        # value, as a dumped config repeats it, tunes nothing).
        stray = sorted(k for k in EXPECTED_OUTPUT_KEYS if self.tunes(k)
                       and not (k == "output_estimate_clip" and self.reserves_decode))
        if stray and not self.expects_output:
            raise ValueError(f"{', '.join(stray)} tune kv_admission: expected_output (SGLang's), not "
                             f"{self.kv_admission}; remove them or set kv_admission: expected_output")
        return self

    @property
    def per_chunk_kv(self) -> bool:
        """Whether a chunked prompt's blocks are allocated chunk by chunk (``prompt_kv: per_chunk``)."""
        return self.prompt_kv == "per_chunk" and self.chunked_prefill

    @model_validator(mode="after")
    def _prompt_kv_modelled(self) -> "EngineConfig":
        if self.prompt_kv == "per_chunk" and (self.contiguous or self.scheduler == "static"
                                              or self.kv_admission != "on_demand"):
            held = ("kv_allocation: contiguous" if self.contiguous else "scheduler: static"
                    if self.scheduler == "static" else f"kv_admission: {self.kv_admission}")
            raise KeyRefusal("prompt_kv", f"per_chunk (vLLM V1's allocation) needs paged KV, continuous batching "
                             f"and kv_admission: on_demand; {held} reserves a prompt's KV whole at admission "
                             "(set prompt_kv: whole)")
        if self.per_chunk_kv and self.prompt_cached != "allocated":
            raise KeyRefusal("prompt_cached", f"{self.prompt_cached} (SGLang's radix cache, TensorRT-LLM's reuse "
                             "tree) holds a prompt's KV whole from admission; prompt_kv: per_chunk (vLLM V1) caches "
                             "each chunk's blocks as it allocates them (set prompt_cached: allocated)")
        return self

    @model_validator(mode="after")
    def _chunk_holds_a_block(self) -> "EngineConfig":
        """Chunks cut to whole blocks under a budget below one block would never give a prompt longer
        than the budget a chunk (setCtxRequestsChunkSize rounds it to 0 every iteration): refused."""
        if self.chunks_whole_blocks and self.chunked_prefill and self.max_num_batched_tokens < self.block_size:
            raise KeyRefusal("max_num_batched_tokens",
                             f"{self.max_num_batched_tokens} is below one KV block ({self.block_size} tokens): "
                             "chunks are cut to whole blocks, so a longer prompt would never be given a chunk")
        return self

    @model_validator(mode="after")
    def _prefill_cap_modelled(self) -> "EngineConfig":
        if self.max_prefill_tokens is not None and (not self.chunked_prefill or self.scheduler != "continuous"):
            raise ValueError("max_prefill_tokens caps the prompts joining a chunked prefill batch; without chunked "
                             "prefill the token budget itself is SGLang's max_prefill_tokens (set "
                             "max_num_batched_tokens instead)")
        return self

    @model_validator(mode="after")
    def _multi_step_modelled(self) -> "EngineConfig":
        if self.num_scheduler_steps > 1 and (self.scheduler != "continuous" or self.chunked_prefill
                                            or self.mixes_prefill):
            raise ValueError("num_scheduler_steps > 1 is modelled as vLLM 0.6.0 ran it: continuous scheduling "
                             "with prefill-only steps between decode blocks; set chunked_prefill: false (and "
                             "mixed_prefill unset or false)")
        return self

    @model_validator(mode="after")
    def _budget_holds_a_batch(self) -> "EngineConfig":
        """A token budget below the running requests is refused where decodes share it and llmsim
        cannot run it as the stack does. SGLang without mixed chunks runs its decodes in batches of
        their own, outside the prefill token budget: its decode batch (scheduler.py
        update_running_batch) takes every running request, the chunk caps only the prefill batch
        (schedule_policy.py PrefillAdder), and server_args.py holds --chunked-prefill-size to no
        --max-running-requests (0.5.4-0.5.23). TensorRT-LLM's llm_args.py holds max_num_tokens to no
        max_batch_size either (1.0 to main), and its micro-batch scheduler leaves the generation
        requests past max_num_tokens for a later iteration (microBatchScheduler.cpp operator(): break;
        ``budget_boundary: stop``). vLLM refuses such a launch (SchedulerConfig), as does llmsim's
        generic engine. SGLang with mixed chunks launches it too, but takes the running batch off the
        chunk (PrefillAdder: rem_chunk_tokens -= the running requests) and decodes them all, prompt or
        none, where llmsim's mixed iteration holds its decodes to the budget: refused, saying so."""
        if self.max_num_batched_tokens >= self.max_num_seqs or self.scheduler != "continuous":
            return self
        stack = self._stack()
        if stack == "trtllm" or (stack == "sglang" and not self.mixes_prefill):
            return self
        why = ("llmsim holds a mixed iteration's decodes to the chunk, where SGLang decodes every running request "
               "and runs no prompt once they pass it (schedule_policy.py PrefillAdder); set mixed_prefill: false, "
               "or max_num_seqs at most the chunk" if stack == "sglang"
               else "every running sequence needs one token per iteration")
        raise ValueError(f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be ≥ max_num_seqs "
                         f"({self.max_num_seqs}): {why}")

    def _stack(self) -> Optional[str]:
        """The serving stack the backend profile models; None for llmsim's generic engine, or a profile
        that does not load (refused where it is loaded, naming its fault)."""
        if self.backend is None:
            return None
        from ..errors import LlmsimError
        from ..profiles.backend import load_backend
        try:
            return load_backend(self.backend).stack
        except (LlmsimError, OSError):
            return None
