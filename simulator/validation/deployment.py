"""How a measured row's server was launched and its benchmark client run.

A closed loop's TTFT is set less by the kernels than by how many prompts
one iteration may hold: that decides whether the C clients' requests are
prefilled together (and then finish, and come back, together) or one after
another. A row can only be replayed faithfully with the launch flags and
client its measurement used, so each row carries a deployment:

``defaults``
    The stack as ``serve``/``launch_server``/``trtllm-serve`` start it
    (the backend profile's defaults), and a benchmark client that starts
    all C clients at once and counts every request
    (``vllm bench serve --max-concurrency``, SGLang's ``bench_serving``).

``aiconfigurator``
    Deployments generated and benchmarked by NVIDIA AIConfigurator's
    pipeline (github.com/ai-dynamo/aiconfigurator,
    ``src/aiconfigurator/generator/rule_plugin/benchmark/*.rule`` and
    ``config/backend_templates/benchmark/bench_run.sh.j2``):

    - vLLM and TensorRT-LLM: ``max_num_tokens = max_batch_size + ISL +
      1500`` (TensorRT-LLM rounds up to its 32-token blocks) and a batch
      of the benchmarked concurrency, so an iteration holds one prompt and
      a chunk of the next rather than eight;
    - SGLang: ``max_prefill_tokens = ISL + 1500`` with mixed chunks on;
    - AIPerf at concurrency C with ``ignore_eos``, ``2·C`` warm-up
      requests and ``50·C`` counted ones.

    A row is taken to come from that pipeline when its source names
    AIConfigurator and its provenance carries the pipeline's measurement
    record (``measured=`` in ``notes``); every other row is ``defaults``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Deployment = Literal["defaults", "aiconfigurator"]
DEPLOYMENTS: tuple[str, ...] = Deployment.__args__

# AIConfigurator's generator rules: the prompt headroom it adds to the token budget.
_AIC_HEADROOM = 1500
_TRT_BLOCK = 32


@dataclass(frozen=True)
class Client:
    """How the benchmark client ran the closed loop."""

    warmup_rounds: int          # warm-up requests = rounds × C, not counted
    counted_rounds: int         # counted requests = rounds × C (when the row gives no count)
    drain: bool = False         # the warm-up finishes before the counted requests start, as a new burst


DEFAULT_CLIENT = Client(warmup_rounds=0, counted_rounds=4)
# AIPerf runs warm-up and profiling as phases: the next phase starts when
# every credit of the last has returned (aiperf/timing/credit_issuing_strategy.py,
# ``_execute_phases``), and its concurrency semaphore then lets C go at once.
AIPERF_CLIENT = Client(warmup_rounds=2, counted_rounds=50, drain=True)


def engine_keys(deployment: str, stack: str, concurrency: int, isl: int) -> dict[str, Any]:
    """Engine keys the deployment sets on top of the stack's defaults."""
    if deployment == "defaults":
        return {}
    if deployment != "aiconfigurator":
        raise ValueError(f"unknown deployment {deployment!r}")
    if stack == "sglang":
        # max_prefill_tokens caps the prompt tokens of a batch; decodes ride
        # beside them (mixed chunk), one token each.
        return {"max_num_seqs": concurrency, "chunked_prefill": True, "mixed_prefill": True,
                "max_num_batched_tokens": concurrency + isl + _AIC_HEADROOM}
    budget = concurrency + isl + _AIC_HEADROOM
    if stack == "trtllm":
        budget = -(-budget // _TRT_BLOCK) * _TRT_BLOCK
    return {"max_num_seqs": concurrency, "max_num_batched_tokens": budget}


def client(deployment: str) -> Client:
    return AIPERF_CLIENT if deployment == "aiconfigurator" else DEFAULT_CLIENT


def of_source(source: str, notes: str) -> Deployment:
    """The deployment a CSV row's provenance documents."""
    if "aiconfigurator" in source.lower() and "measured=" in notes:
        return "aiconfigurator"
    return "defaults"
