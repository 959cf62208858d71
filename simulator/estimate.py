"""Back-of-envelope numbers the case studies start from, from the cost model.

A no-load request: TTFT is its prefill (chunked as the engine would), TPOT
the mean decode step of a batch of one over the request's growing context.
Priced as a named serving backend runs it, the stack's CPU terms join them
(iteration overheads, the eager launches of a prefill past its captured
graphs, the front end's time before and after), as they do in a run.
With ``mfu`` the case studies' own arithmetic ``2·params·I/(peak·GPUs·MFU)``
(params: those a token uses, all of a dense model's)
is reported beside it, so a reader can see both.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from .costmodel import CostModel
from .dtypes import compute_dtype, gemm_scheme
from .errors import LlmsimError
from .hybrid_kv import admission_cap, in_flight_tokens
from .kv_memory import swa_window_share
from .memory import MemoryPlan, context_room, plan_memory, startup_pool
from .parallelism import kv_copies

if TYPE_CHECKING:
    from .engine.config import EngineConfig
    from .profiles.model import ModelProfile


def _rank_budget(engine: EngineConfig | None, budget: int, dp: int) -> int:
    """The token budget a lone prompt is cut at: its attention-DP rank's, as a
    run schedules it (:meth:`EngineConfig.rank_tokens`: SGLang divides its chunk
    by dp, vLLM and TensorRT-LLM give every rank the whole flag)."""
    if engine is None:
        return budget
    return engine.model_copy(update={"max_num_batched_tokens": budget}).rank_tokens(dp)


#: Each stack's name for the most requests one attention-DP rank's scheduler runs at once, which
#: llmsim's engines read as ``max_num_seqs``.
SEQUENCE_CAP_FLAG = {"vllm": "max_num_seqs", "sglang": "max_running_requests", "trtllm": "max_batch_size"}


def scheduler_cap(engine: EngineConfig | None, mem: MemoryPlan, model: ModelProfile) -> tuple[int, str]:
    """The most requests a replica runs at once whatever its KV holds, and the flag that sets it: every
    attention-DP rank schedules its own batch of ``max_num_seqs`` (vLLM's DP engine cores, SGLang's DP
    schedulers, TensorRT-LLM's ranks: :func:`~simulator.fleet.setup.rank_limits`), so dp times it, as
    the stack sizes it from a rank's pool (SGLang: :meth:`EngineConfig.rank_running_requests`); without
    a backend, llmsim's own engine's default, as a run takes it."""
    from .engine.config import EngineConfig
    from .profiles.backend import load_backend

    if engine is None:
        return EngineConfig.model_fields["max_num_seqs"].default * mem.dp, "max_num_seqs"
    flag = SEQUENCE_CAP_FLAG.get(load_backend(engine.backend).stack, "max_num_seqs") if engine.backend \
        else "max_num_seqs"
    return mem.rank_running_requests(engine, model) * mem.dp, flag


def replica_memory(cm: CostModel, engine: EngineConfig | None = None, gpu_memory_utilization: float | None = None,
                   max_num_batched_tokens: int | None = None, block_size: int | None = None) -> MemoryPlan:
    """How one replica's GPUs divide between weights, reserves and KV: by
    ``engine``'s memory rule and limits where a backend is named, else by
    vLLM's rule; a flag given here wins over the engine's (or vLLM's
    default). Raises when the weights do not fit."""
    if engine is None:
        return plan_memory(cm.model, cm.gpu, cm.tp, cm.weight_dtype, cm.kv_dtype, gpu_memory_utilization or 0.9,
                           max_num_batched_tokens or 8192, block_size=block_size or 16, dp=cm.dp, ep=cm.ep,
                           expert_storage=cm.expert_storage)
    return plan_memory(cm.model, cm.gpu, cm.tp, cm.weight_dtype, cm.kv_dtype,
                       gpu_memory_utilization or engine.gpu_memory_utilization,
                       max_num_batched_tokens or engine.max_num_batched_tokens, engine.max_num_seqs,
                       block_size or engine.block_size, dp=cm.dp, ep=cm.ep, kv_memory=engine.kv_memory,
                       expert_storage=cm.expert_storage, chunked_prefill=engine.chunked_prefill)


def engine_pool(cm: CostModel, engine: EngineConfig | None, gpu_memory_utilization: float = 0.9,
                max_num_batched_tokens: int = 8192, block_size: int = 16,
                check: Callable[[MemoryPlan], None] = lambda pool: None) -> MemoryPlan:
    """The pool a run of ``engine`` holds: the measured pool with the engine's
    ``num_gpu_blocks_override`` applied as ``llmsim run`` applies it, ``check`` called on the
    pool the release's start-up check reads (:func:`simulator.memory.startup_pool`); a
    refusal names ``--backend``, the flag that brought the override."""
    measured = replica_memory(cm, engine, gpu_memory_utilization, max_num_batched_tokens, block_size)
    if engine is None:
        check(measured)
        return measured
    try:
        return startup_pool(measured, engine.num_gpu_blocks_override, engine.override_checked, check)
    except LlmsimError as e:
        raise LlmsimError(f"{engine.backend}: engine.num_gpu_blocks_override: {e.message}",
                          key_path="--backend") from None


def request_estimate(cm: CostModel, input_tokens: int, output_tokens: int, mfu: float | None = None,
                     max_num_batched_tokens: int = 8192, gpu_memory_utilization: float = 0.9,
                     block_size: int = 16, engine: EngineConfig | None = None) -> dict:
    """``engine``: the pool's engine when a serving backend is named; its
    front-end terms join the TTFT (the request's hand-off and tokenisation
    before the prefill, the first token's way back after it, as a lone
    request meets them in a run) and its memory rule divides the GPU, with its
    ``num_gpu_blocks_override`` applied as a run applies it (:func:`engine_pool`)."""
    prefill_s = 0.0
    done = 0
    budget = _rank_budget(engine, max_num_batched_tokens, cm.dp)
    if engine is not None and not engine.chunked_prefill:
        budget = max(budget, input_tokens)      # a stack that does not chunk prefills the prompt whole
    while done < input_tokens:
        chunk = min(budget, input_tokens - done)
        last = done + chunk >= input_tokens
        prefill_s += cm.step_time([(chunk, done)], 0, 0.0, sampling_seqs=1 if last else 0)
        done += chunk
    if output_tokens > 1:
        # Decode step i reads input + i tokens; the step is affine in context,
        # so the mean step is the step at the mean context.
        mean_ctx = input_tokens + output_tokens / 2.0
        a, b = cm.decode_coefficients(1)
        tpot_s = a + b * mean_ctx
    else:
        tpot_s = 0.0
    front_s = 0.0 if engine is None else \
        (engine.request_ms + engine.response_ms + engine.tokenize_us_per_token * input_tokens * 1e-3) * 1e-3
    checked: list[MemoryPlan] = []     # the pool the start-up check reads
    mem = engine_pool(cm, engine, gpu_memory_utilization, max_num_batched_tokens, block_size, checked.append)
    figures = model_figures(cm)
    kv_tok = figures["kv_bytes_per_token"]
    tokens = input_tokens + output_tokens
    m = cm.model
    share = None if engine is None else swa_window_share(engine.kv_memory, m.num_sliding_layers,
                                                          m.num_full_attention_layers)
    # a request's sliding-window KV as its pool counts it: the blocks each running request's windows hold
    # of the shared pool whatever its length (vLLM: MemoryPlan.window_blocks, what max_concurrent_requests
    # and a run charge), its tokens at the stack's ratio where one pool is shared by a ratio (TensorRT-LLM
    # keeps every token, SGLang 0.8 of them)
    window = (mem.window_blocks * mem.block_size * kv_tok if share is None
              else kv_tok * tokens * share / (1.0 - share))
    # the engine as it runs the request, its budget the one given
    eng = None if engine is None else engine.model_copy(update={"max_num_batched_tokens": max_num_batched_tokens})
    # the blocks a sliding-window group's admission asks at most, as the pool's engine caps them
    cap = 0 if mem.windows is None or eng is None else admission_cap(mem.windows, eng, eng.longest_request(m))
    kv_fit = mem.max_concurrent(input_tokens + output_tokens, input_tokens, cap)
    seqs, flag = scheduler_cap(engine, mem, cm.model)
    out = {
        "gpu": cm.gpu.name,
        "model": cm.model.name,
        "tp": cm.tp,
        **({"dp": cm.dp, "ep": cm.ep, "gpus": cm.gpus} if cm.gpus != cm.tp or cm.ep > 1 else {}),
        **figures,
        "weight_dtype": cm.weight_dtype,
        "gemm_scheme": gemm_scheme(cm.weight_dtype, cm.gpu.units),
        "kv_dtype": cm.kv_dtype,
        "mode": "roofline" if cm.roofline else cm.gpu.calibration.status,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        **({} if engine is None else {"backend": engine.backend, "prefill_ms": prefill_s * 1e3,
                                      "front_end_ms": front_s * 1e3}),
        **({"moe_backend": cm.moe_backend} if cm.moe_backend is not None else {}),
        "ttft_ms": (front_s + prefill_s) * 1e3,
        "tpot_ms": tpot_s * 1e3,
        "e2e_ms": (front_s + prefill_s + tpot_s * max(output_tokens - 1, 0)) * 1e3,
        "prefill_tokens_per_s": input_tokens / prefill_s if prefill_s else float("inf"),
        "decode_tokens_per_s": 1.0 / tpot_s if tpot_s else float("inf"),
        # on the capacity's basis (its full-attention layers' tokens), so capacity / it is the concurrency
        # below, with the windows a vLLM pool charges each request beside it (kv_window_bytes_per_request);
        # where a stack splits its pool by a ratio the sliding-window share is apart (kv_window_bytes)
        "kv_bytes_per_request": kv_tok * tokens,
        **({"kv_window_bytes_per_request": window} if window else {}),
        "weights_bytes": mem.weights_bytes,
        "reserve_bytes": mem.reserve_bytes,
        "kv_window_bytes": mem.kv_window_bytes,
        "kv_capacity_bytes": mem.kv_capacity_bytes,
        "kv_capacity_tokens": mem.kv_capacity_tokens,
        # what runs at once: what the KV pool holds, held to the scheduler's cap, and which of the two binds
        "max_concurrent_requests": min(kv_fit, seqs),
        "kv_concurrent_requests": kv_fit,
        "scheduler_concurrent_requests": seqs,
        "scheduler_cap_flag": flag,
        "concurrency_bound": "kv" if kv_fit <= seqs else "scheduler",
        "total_memory_bytes": mem.total_bytes,
    }
    if mfu is not None:
        peak = cm.gpu.peak_flops(compute_dtype(cm.weight_dtype, cm.gpu.units)) * cm.gpus
        out["mfu"] = mfu
        out["mfu_prefill_ms"] = 2.0 * cm.model.active_params * input_tokens / (peak * mfu) * 1e3
        out["mfu_prefill_tokens_per_s"] = peak * mfu / (2.0 * cm.model.active_params)
    # a pool its stack would not start (no request of the server's longest fits its KV): a run refuses it
    start = None if eng is None else context_room(checked[0], eng.kv_memory, cm.model, cm.gpu.name, cm.gpus,
                                                  eng.longest_request(cm.model), in_flight_tokens(eng),
                                                  overridden=bool(eng.num_gpu_blocks_override
                                                                  and eng.override_checked))
    warnings = [] if start is None else [start]
    if warnings:
        out["warnings"] = warnings
    return out


def model_figures(cm: CostModel) -> dict:
    """What the model is: total and per-token parameters, its layout, its KV
    per token. The KV is on the replica's basis, as its capacity is: MLA's
    latent is held whole on each of a rank's tp GPUs (one copy's bytes beside
    all copies' capacity read 0.29 GB a request against 378.88 GB and 164 that
    fit), and a GPU holds at least one KV head."""
    m = cm.model
    copies = kv_copies(m, cm.tp)
    return {"params_b": round(m.num_params / 1e9, 3), "active_params_b": round(m.active_params / 1e9, 3),
            "layout": m.summary()["layout"], "kv_bytes_per_token": m.kv_bytes_per_token(cm.kv_dtype) * copies,
            "kv_copies": copies}
