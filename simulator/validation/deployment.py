"""How a measured row's server was launched and its benchmark client run.

A closed loop's TTFT is set less by the kernels than by how many prompts
wait behind each other's prefills, and that depends on the launch flags
(how many prompts one iteration may hold) and on the client (how it starts
the loop and which requests it counts). A row can only be replayed
faithfully with the deployment its measurement used, so each row carries
one:

``defaults``
    The stack as ``serve``/``launch_server``/``trtllm-serve`` start it
    (the backend profile's defaults), and a benchmark client that starts
    all C clients at once and counts every request
    (``vllm bench serve --max-concurrency``, SGLang's ``bench_serving``).

``aiconfigurator``
    Deployments generated and benchmarked by NVIDIA AIConfigurator's
    generator (github.com/ai-dynamo/aiconfigurator,
    ``src/aiconfigurator/generator/rule_plugin/benchmark/*.rule`` and
    ``config/backend_templates/benchmark/bench_run.sh.j2``, from 2026-02):

    - vLLM and TensorRT-LLM: ``max_num_tokens = max_batch_size + ISL +
      1500`` (TensorRT-LLM rounds up to its 32-token blocks) and a batch
      of the benchmarked concurrency, so an iteration holds one prompt and
      a chunk of the next rather than eight;
    - SGLang: ``max_prefill_tokens = ISL + 1500`` with mixed chunks on,
      CUDA graphs for batches 1..C, and ``--chunked-prefill-size`` and
      ``--mem-fraction-static`` left at SGLang's defaults (the sglang
      templates, ``backend_templates/sglang/cli_args*.j2``, write them only
      when a worker parameter sets them, and no rule does), so its default
      memory reserve is sized for the GPU's default chunk (16,384 tokens on
      a B200), not for the prompt cap;
    - TensorRT-LLM: a MoE model's ``moe_config.backend`` written out as
      ``CUTLASS`` (``backend_templates/trtllm/extra_engine_args.*.yaml.j2``
      to the sample's 2026-04-27 dump), whatever the release's default;
    - a model with DeepSeek's next-token-prediction (MTP) layers decodes
      speculatively with one draft token (:func:`speculative`);
    - AIPerf at concurrency C with ``ignore_eos``, ``2·C`` warm-up
      requests and ``20·C`` counted ones (``BENCH_MULTI_ROUND``; the
      template counted ``50·C`` before 2026-04-29);
    - served by Dynamo, not by the stack's own OpenAI server: the
      generator's ``backend_templates/{vllm,sglang,trtllm}/run.sh.j2``
      start ``python3 -m dynamo.frontend`` on the benchmarked port
      (HTTP, chat template and tokenisation in its Rust process) and
      the engine as ``python3 -m dynamo.<stack>`` workers. The replay
      runs the stack's engine with the backend profile's front-end terms,
      fitted on rows served by the stacks' own servers; Dynamo's are not
      modelled (the held-out reading page shows how these rows' loops
      hold their phase).

``aic-eval``
    Rows measured by AIConfigurator's evaluation pipeline before its
    generator emitted benchmark commands (``src/aiconfigurator/eval``,
    2025-08 to 2026-03, ``benchmarks/genai_perf_runner.py``): AIPerf with
    ``--warmup-request-count 2·C``, ``--request-count 10·C``,
    ``--num-dataset-entries 12·C`` (every prompt distinct, so no prefix
    cache hits) and a fixed output length (``min_tokens = max_tokens``,
    ``ignore_eos``). vLLM and SGLang ran on their default launch flags;
    TensorRT-LLM, the one stack the generator then wrote engine configs for
    (``generator/backends/trtllm.py`` and
    ``templates/trtllm/extra_engine_args.*.yaml.j2`` as of 2025-10), on
    ``max_num_tokens = max_batch_size + ISL + 1500`` with a batch of the
    sweep's largest concurrency, block reuse off and, as in the generator's
    own deployments, ``moe_config.backend: CUTLASS`` (not the AUTO default of
    releases from 1.3.0rc2). The sweep's
    concurrencies are fractions of that batch, so the replay takes the
    row's own C, which changes the budget by less than a prompt's worth
    and the batch cap not at all in a closed loop of C. Without it an
    8,192-token prompt never fits TensorRT-LLM's default 8,192-token
    budget beside running decodes (no chunked context) and waits for the
    batch to drain.

``aic-genai-perf``
    The same evaluation pipeline before it moved to AIPerf (2025-10-14):
    TensorRT-LLM on the generator's engine configs, the other stacks on
    their defaults, and genai-perf's client. Its perf_analyzer sends each
    client's next request from the worker thread the last one ended on, so
    the loop keeps the phases its server gives it, and it ends the warm-up
    by joining those threads (``LoadManager::WaitForWarmupAndCleanup``):
    the 2·C warm-up requests drain and the 10·C counted ones start as a
    burst on an empty server.

A row is taken to come from AIConfigurator when its source names it. With
a measurement record (``measured=<date>`` in ``notes``), measured before
2026-02-11, when the generator began to emit benchmark commands, it is
``aic-eval``; from then on ``aiconfigurator``. Without one, the release
of the stack version it ran bounds its date from below (a run cannot
predate its version): a version released after the evaluation pipeline
moved from genai-perf to AIPerf (2025-10-14, commit 4361371a6 "feat: add
aiperf for eval") ran AIPerf, so ``aic-eval``, one released after
2026-02-11 ``aiconfigurator``, and an older one ``aic-genai-perf``; an
unknown version keeps ``defaults``. Release dates are the PyPI
upload dates of the versions AIConfigurator's files name
(pypi.org/pypi/{sglang,vllm,tensorrt-llm}/json), or the date a nightly
tag carries. Every other row is ``defaults``.

AIPerf runs warm-up and counted requests as phases (the next starts when
every request of the last has returned, then as one burst of C:
``aiperf/timing/credit_issuing_strategy.py``, ``_execute_phases``, in
github.com/ai-dynamo/aiperf), so its counted requests begin with one round
queued behind each other's prefills on an empty server. The replay
(:mod:`.replay`) keeps that round and runs the other rounds out of phase.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Mapping, Optional

if TYPE_CHECKING:
    from ..profiles.backend import BackendProfile, GeneratedLaunch

Deployment = Literal["defaults", "aiconfigurator", "aic-eval", "aic-genai-perf"]
DEPLOYMENTS: tuple[str, ...] = Deployment.__args__

# AIConfigurator's generator rules: the prompt headroom it adds to the token budget.
_AIC_HEADROOM = 1500
# Its TensorRT-LLM templates write kv_cache_config.free_gpu_memory_fraction
# default(0.80) (templates/trtllm/extra_engine_args.*.yaml.j2, 2025-10 and 2026),
# yet at 0.8 the measured Llama-3.1-70B fp8 loops (B200 tp 1 at C = 64, H200 tp 2
# at C = 128, 1K/8K tokens) could not have admitted every request under
# GUARANTEED_NO_EVICT, and they ran unqueued (347 and 656 ms TTFT); the replay keeps
# TensorRT-LLM's own 0.9.
# The day AIConfigurator's generator began to emit benchmark commands
# (commit f90534bc2, "generator will generate benchmark command").
_GENERATOR_BENCH_SINCE = "2026-02-11"
# The day its evaluation pipeline replaced genai-perf by AIPerf (commit 4361371a6).
_AIPERF_SINCE = "2025-10-14"
# The evaluation pipeline's deployments, before and after it moved to AIPerf.
_EVAL = ("aic-eval", "aic-genai-perf")


@dataclass(frozen=True)
class Client:
    """How the benchmark client ran the closed loop."""

    warmup_rounds: int          # warm-up requests = rounds × C, not counted
    counted_rounds: int         # counted requests = rounds × C (when the row gives no count)
    drain: bool = False         # the warm-up finishes before the counted requests start, as a new burst
    # Each client sends its next request the moment its last one ends, so the
    # loop keeps the phases the server gives it (threads of one process);
    # False: a hand-off between processes stands between them (AIPerf).
    lockstep: bool = True


DEFAULT_CLIENT = Client(warmup_rounds=0, counted_rounds=4)
AIPERF_GENERATOR_CLIENT = Client(warmup_rounds=2, counted_rounds=20, drain=True, lockstep=False)
AIPERF_EVAL_CLIENT = Client(warmup_rounds=2, counted_rounds=10, drain=True, lockstep=False)
# The evaluation pipeline's counts under genai-perf: perf_analyzer's worker
# threads send each next request at once, and its warm-up ends by joining
# them (LoadManager::WaitForWarmupAndCleanup), so the counted requests start
# as a new burst on an empty server.
GENAI_PERF_EVAL_CLIENT = Client(warmup_rounds=2, counted_rounds=10, drain=True)


def sized_by_concurrency(deployment: str, stack: str) -> bool:
    """Whether the deployment launches ``stack`` with keys of its own (:func:`engine_keys`), which it
    sizes by the client's concurrency (a batch of C, a budget of C + ISL + 1,500): a rate-driven row
    has none to size them by. The stacks' defaults, and a stack the evaluation pipeline left to them,
    set nothing."""
    if deployment not in DEPLOYMENTS:
        raise ValueError(f"unknown deployment {deployment!r}")
    return not (deployment == "defaults" or (deployment in _EVAL and not _launch(stack).in_evaluation))


def engine_keys(deployment: str, stack: str, concurrency: int, isl: int, dp: int = 1,
                prefill_chunk: Optional[int] = None, osl: Optional[int] = None) -> dict[str, Any]:
    """Engine keys the deployment sets on top of the stack's defaults; how the
    generator launches each stack is its backend profile's ``aiconfigurator``.
    Its batch is per attention-DP rank (``max_batch_size``, the file's
    ``batch_size``), as are the engine's limits (``engine.dp_limits``): C
    over ``dp`` ranks is a batch of ⌈C/dp⌉ each.

    Where the launch keeps the stack's default prefill chunk
    (``default_prefill_chunk``: SGLang, whose chunk for the GPU is
    ``prefill_chunk``), a rank's token budget is its share of that chunk
    (SGLang divides it by dp), decodes beside counted in it, and the
    generator's ``--max-prefill-tokens`` (ISL + 1,500) is the cap a second
    prompt must fit under to join a batch (``max_prefill_tokens``). A stack
    whose rule sets its longest request (``max_len_to_request``: vLLM) gets
    ISL + OSL + 1,500 as ``max_model_len`` where the row's ``osl`` is known."""
    if not sized_by_concurrency(deployment, stack):
        return {}
    launch = _launch(stack)
    batch = -(-concurrency // dp)
    budget = batch + isl + _AIC_HEADROOM
    keys: dict[str, Any] = {"max_num_seqs": batch,
                            "max_num_batched_tokens": -(-budget // launch.budget_block) * launch.budget_block}
    if deployment in _EVAL:
        return {**keys, **launch.engine, "prefix_cache": False}
    keys.update(launch.engine)
    if launch.max_len_to_request and osl is not None:
        keys["max_model_len"] = isl + osl + _AIC_HEADROOM
    memory: dict[str, Any] = {}
    if launch.graphs_to_concurrency:
        memory["cuda_graph_max_bs"] = batch
    if launch.default_prefill_chunk:
        memory["chunked_prefill_size"] = "default"
        if prefill_chunk:
            keys["max_num_batched_tokens"] = max(batch, prefill_chunk // dp)
            keys["max_prefill_tokens"] = isl + _AIC_HEADROOM
            keys["dp_limits"] = "per_rank"
    if memory:
        keys["kv_memory"] = memory
    return keys


def role_engine_keys(deployment: str, stack: str, concurrency: int, isl: int, batch: Optional[int], dp: int,
                     prefill: bool, prefill_chunk: Optional[int] = None) -> dict[str, Any]:
    """Engine keys of one pool of a disaggregated row: the keys an aggregated
    row of the same deployment gets (:func:`engine_keys`), with the role's
    batch the row states (``prefill_batch_size`` / ``decode_batch_size``,
    per attention-DP rank). AIConfigurator's generator launches each role
    with its own batch and captures CUDA graphs for batches 1..batch
    (``generator/rule_plugin/benchmark/{trtllm,sglang}.rule``: a prefill
    worker's batch is 1 unless told otherwise). The prefill pool takes that
    batch as each rank's cap; the decode pool keeps the cap ⌈C/dp⌉, which
    never binds in a closed loop of C. Each rank's token budget is an
    aggregated row's (⌈C/dp⌉ + ISL + 1,500, or SGLang's chunk with its
    ``max_prefill_tokens``): every attention-DP rank has
    one (``engine.dp_limits``), so a prefill worker of dp ranks prefills up
    to dp long prompts at once. A prefill worker also takes the launch's
    ``prefill_engine`` keys (TensorRT-LLM's runs without its overlap
    scheduler)."""
    keys = dict(engine_keys(deployment, stack, concurrency, isl, dp, prefill_chunk))
    if prefill and keys:
        keys.update(_launch(stack).prefill_engine)
    if batch is None:
        return keys
    if prefill:
        keys["max_num_seqs"] = batch
        if "max_num_batched_tokens" in keys:
            keys["max_num_batched_tokens"] = max(keys["max_num_batched_tokens"], keys["max_num_seqs"])
    if "kv_memory" in keys:
        keys["kv_memory"] = {**keys["kv_memory"], "cuda_graph_max_bs": batch}
    return keys


def _launch(stack: str) -> "GeneratedLaunch":
    from ..profiles.backend import GeneratedLaunch

    prof = stack_profile(stack)
    return GeneratedLaunch() if prof is None else prof.aiconfigurator


# AIConfigurator's quantisation profiles: the KV cache each precision runs
# (src/aiconfigurator/sdk/task_v1_compat.py _PROFILE_TO_QUANT; in 2025-10
# sdk/task.py _get_quant_mode and the fp8_default / nvfp4_default profiles):
# fp8 and nvfp4 keep KV in fp8, bfloat16 in bf16.
_AIC_KV = {"fp8": "fp8", "fp4": "fp8", "nvfp4": "fp8", "bf16": "bf16", "bfloat16": "bf16"}


def kv_dtype(deployment: str, stack: str, precision: str) -> str:
    """The KV cache a row of AIConfigurator's ``silicon_sample.csv`` ran
    (the file does not say): the generator passes its profile's KV dtype to
    the engine (``generator/module_bridge.py`` sets ``kv_cache_dtype`` from
    ``kvcache_quant_mode``; ``config/backend_config_mapping.yaml`` maps it to
    vLLM's and SGLang's ``--kv-cache-dtype`` and TensorRT-LLM's
    ``kv_cache_config.dtype``). The evaluation runs did so for TensorRT-LLM
    (``generator/backends/trtllm.py`` ``_apply_kv_cache_mode``, as of
    2025-10) and, by their measurements, for vLLM: its Llama-3.1-70B fp8 loops
    at 1K/8K tokens on one H200 ran unqueued at C = 32 (474 ms TTFT), when
    32 × 9,216 tokens of bf16 KV (94 GB) beside 70 GB of weights cannot fit
    in 141 GB, and their TPOT at C = 64 on one B200 or H200 is that of an fp8
    cache (+2.5 and +3 % replayed with fp8, +44 and +50 % with bf16). SGLang
    ran its default (the model's 16-bit type): with fp8 its Llama-3.1-8B fp8
    rows' TPOT reads 12 % fast against 2 % slow with bf16. A precision
    outside the profiles (int4) keeps the 16-bit cache."""
    if deployment == "aiconfigurator" or (deployment in _EVAL and _launch(stack).eval_kv_cache):
        return _AIC_KV.get(precision.lower(), "bf16")
    return "bf16"


# AIConfigurator's generated deployments decode DeepSeek-family models with
# their MTP layer: sdk/task.py sets ``nextn = 1`` (and assumes an acceptance of
# 0.85) for the DEEPSEEK family, and the benchmark rule plugins turn it into
# SGLang's NEXTN, TensorRT-LLM's MTP and vLLM's ``mtp`` speculative method
# (generator/rule_plugin/benchmark/{sglang,trtllm,vllm}.rule). 0.85 is also
# the low end of the second-token acceptance DeepSeek-V3's technical report
# measured (85-90 %).
_AIC_MTP = {"draft_model": "mtp", "k": 1, "acceptance_rate": 0.85}


def speculative(deployment: str, mtp_layers: int) -> Optional[dict[str, Any]]:
    """The pool's ``speculative`` block a row's deployment ran, if any: the
    generated deployments decode a model that has MTP layers with one MTP
    draft token; the stacks' defaults and the evaluation runs do not."""
    return dict(_AIC_MTP) if deployment == "aiconfigurator" and mtp_layers > 0 else None


def speculative_engine_keys(stack: str, version_keys: Mapping[str, Any]) -> dict[str, Any]:
    """Engine keys a stack changes when it decodes speculatively, in the release
    ``version_keys`` describes (the backend profile's ``speculative_engine``,
    SGLang's mixed chunks off and running requests capped, then the release's
    own: SGLang to 0.5.10 turned its overlap scheduler off too), read as a
    scenario's deployment reads them (:meth:`BackendProfile.speculative_keys`)."""
    prof = stack_profile(stack)
    return dict(version_keys.get("speculative_engine") or {}) if prof is None else prof.speculative_keys(version_keys)


def client(deployment: str) -> Client:
    return {"aiconfigurator": AIPERF_GENERATOR_CLIENT, "aic-eval": AIPERF_EVAL_CLIENT,
            "aic-genai-perf": GENAI_PERF_EVAL_CLIENT}.get(deployment, DEFAULT_CLIENT)


def released(stack: str, version: str) -> str | None:
    """The day a stack version was released (ISO date), where its backend
    profile knows it (``releases``), or the date a nightly carries."""
    prof = stack_profile(stack)
    return None if prof is None else prof.released(version)


def release_unread(stack: str, version: str) -> str:
    """Why a row naming ``version`` of ``stack`` cannot be replayed ("" when it can): a release
    outside those the stack's profile was read from has unknown defaults, which a scenario
    naming it as ``engine.backend_version`` is refused for; replayed, it would run the newest
    (or the oldest) release's defaults unannounced and its error be read as llmsim's."""
    prof = stack_profile(stack)
    if prof is None or not version:
        return ""
    if prof.newer_than_described(version):
        return (f"{stack} {version} is newer than the {stack} releases llmsim has read (to {prof.newest_release}): "
                "its defaults are unknown")
    if prof.older_than_described(version) and not candidate_of_oldest(prof.oldest_release, version):
        return (f"{stack} {version} is older than the {stack} releases llmsim has read (from "
                f"{prof.oldest_release}): its defaults are unknown")
    return ""


def candidate_of_oldest(oldest: Optional[str], version: str) -> bool:
    """Whether ``version`` is a release candidate (or dev build) of ``oldest``, the first release a
    profile was read from, which a replay runs with that release's keys though a scenario naming it
    is refused. AIConfigurator's TensorRT-LLM H100 campaigns (Llama-3.1-8B, Qwen3-32B,
    Qwen3-235B-FP8: 479 rows, among them the dense rows the first-token terms are fitted on) name
    1.0.0rc3, whose source could not be read here; left out, the held-out tables would lose
    TensorRT-LLM's only Hopper rows. docs/accuracy-holdout.md says so beside the tables."""
    from packaging.version import InvalidVersion, Version
    try:
        mine, first = Version(version), Version(oldest or "")
    except InvalidVersion:
        return False
    return mine.is_prerelease and mine.release == first.release and not first.is_prerelease


# The container a silicon row's notes name (``image=...`` or a bare ``registry/name:tag``).
_DYNAMO_RUNTIME = re.compile(r"ai-dynamo/[\w.-]+-runtime:([\w.+-]+)")


def stack_release(notes: str, version: str) -> str:
    """The stack release a silicon row's ``backend_version`` names ("" for none). AIConfigurator's
    rows served by NVIDIA Dynamo's runtime containers (``ai-dynamo/<stack>-runtime:<tag>``) give
    either the stack's release inside the container (tensorrtllm-runtime:0.8.1 beside 1.3.0rc5,
    sglang-runtime:0.8.0 beside 0.5.6.post2) or the container's own tag, Dynamo's release
    (tensorrtllm-runtime:0.8.1.post2 beside 0.8.1.post2, sglang-runtime:0.5.1-rc0.pre1 beside
    0.5.1-rc0.pre1): read as the stack's, Dynamo 0.5.1 would run SGLang 0.5.1's defaults and
    Dynamo 0.8.1 be a TensorRT-LLM release older than 1.0. Such a tag names no stack release, so
    the row is unversioned and its measurement day decides (:func:`version_keys`)."""
    image = _DYNAMO_RUNTIME.search(notes)
    return "" if image is not None and image.group(1) == version else version


def version_keys(stack: str, version: str, measured: Optional[str] = None) -> dict[str, Any]:
    """Engine keys the row's stack version ran by default where the backend
    profile differs (its ``by_version`` rules). An unknown version keeps the
    profile's settings, except where the row's measurement day ``measured``
    (ISO) decides a rule: a run measured before a release cannot have run it
    (:meth:`BackendProfile.version_keys`)."""
    prof = stack_profile(stack)
    return {} if prof is None else prof.version_keys(version, measured) or {}


# The last day on which AIConfigurator's silicon sample measured a row that names
# no stack version, per stack (aic_silicon_sample.csv.gz: every such row carries
# measured=; tests/test_async_scheduling.py checks these against the file).
# closed_loop_silicon.csv is a subset of that file without the measurement notes,
# so its unversioned rows are bounded by the same days.
AIC_UNVERSIONED_MEASURED_BY = {"vllm": "2025-12-05", "sglang": "2025-12-05", "trtllm": "2026-04-02"}


def measured_day(notes: str) -> Optional[str]:
    """The ISO day of a row's ``measured=`` note (AIConfigurator's silicon rows), if any."""
    m = re.search(r"measured=(\d{4}-\d{2}-\d{2})", notes)
    return m.group(1) if m else None


def stack_profile(stack: str) -> Optional["BackendProfile"]:
    """The built-in backend profile of a row's stack (None: the row names no stack llmsim has)."""
    from ..errors import LlmsimError
    from ..profiles.backend import load_backend

    try:
        return load_backend(stack) if stack else None
    except LlmsimError:
        return None


def of_source(source: str, notes: str, stack: str = "", version: str = "") -> Deployment:
    """The deployment a CSV row's provenance documents."""
    if "aiconfigurator" not in source.lower():
        return "defaults"
    measured = measured_day(notes)
    if measured is not None:
        return "aic-eval" if measured < _GENERATOR_BENCH_SINCE else "aiconfigurator"
    since = released(stack, version)
    if since is None:
        return "defaults"
    if since < _AIPERF_SINCE:
        return "aic-genai-perf"
    return "aic-eval" if since < _GENERATOR_BENCH_SINCE else "aiconfigurator"
