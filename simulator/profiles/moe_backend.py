"""TensorRT-LLM's MoE backend (``moe_config.backend``) and which measured kernel prices it.

TensorRT-LLM picks the routed experts' kernel at launch: ``MoeConfig.backend``
in tensorrt_llm/llmapi/llm_args.py takes CUTLASS, CUTEDSL, WIDEEP, TRTLLM,
DEEPGEMM, VANILLA and TRITON, and
tensorrt_llm/_torch/modules/fused_moe/create_moe.py ``get_moe_cls`` maps
each to its module. CUTLASS was the default through 1.3.0rc1; pull request
#11074 (merged 2026-01-30, so from 1.3.0rc2) added AUTO and made it the
default, which _torch/model_config.py ``ModelConfig.resolve_moe_backend``
turns into a backend per model and GPU as the model loads
(:func:`auto_backend`). llmsim can price a backend only where kernel rows
time it (``kernels/moe.csv.gz``, ``kernels/moe_more.csv.gz``):

* ``cutlass``: the stack's own parameters (``calibration.stacks.trtllm``,
  fitted on the CUTLASS rows, and DeepGEMM's for Blackwell block fp8:
  :mod:`simulator.calibration.moe_stacks`).
* ``trtllm``: TRTLLMGenFusedMoE, the TRT-LLM-gen kernels, on the SM100
  family only (``is_sm_100f``). ``get_moe_cls`` gives it block fp8, NVFP4
  and the MXFP4 formats and falls back to CutlassFusedMoE for any other
  ("TRTLLMGenFusedMoE only supports ... Using CutlassFusedMoE instead"), so
  those keep the CUTLASS price. The same kernels are vLLM 0.24's FlashInfer
  TRT-LLM MoE on Blackwell, the family a Blackwell profile's own ``moe``
  sets are fitted on for these formats (``kernel_source``
  ``vllm_*_flashinfer_trtllm_*``: every fp8_block, nvfp4, gpt-oss MXFP4
  and MXFP4×MXFP8 row's majority family), so those sets price it. The
  table's ``moe_torch_flow_min_latency`` rows are TRTLLMGenFusedMoE too,
  but AIConfigurator's collector (collector/trtllm/collect_moe.py) times
  them in min-latency mode, ``do_finalize=False`` (without the finalize the
  default forward runs) and with DeepSeek's grouped router, NVFP4 only: not
  the layer a default TRTLLM launch runs.
* ``deepgemm``: DeepGemmFusedMoE, block fp8 on the SM100 family: the rows
  the stack's own fp8_block set is fitted on there.
* ``triton``: TritonFusedMoE, OpenAI's triton_kernels ``matmul_ogs``, the
  kernel vLLM runs gpt-oss's MXFP4 experts with on Hopper (``kernel_source``
  ``vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic``, the rows
  the Hopper profiles' own ``w4a16_mxfp4`` sets are fitted on), so those
  sets price it there: the pick AUTO makes for gpt-oss on Hopper. Other
  formats and GPUs have no rows of it; refused.
* ``wideep``, ``cutedsl``, ``vanilla``: no row in the shared kernel tables
  times them; refused, and so is ``auto`` where it picks one.
"""
from __future__ import annotations

from typing import Optional

#: ``moe_config.backend`` AUTO: TensorRT-LLM picks the backend as the model loads (:func:`auto_backend`).
AUTO = "auto"
#: The first release with AUTO, its default (the trtllm backend profile's rule ends CUTLASS there).
AUTO_SINCE = "1.3.0rc2"
#: The values of ``moe_config.backend`` (llm_args.py MoeConfig), as ``engine.moe_backend`` spells them.
TRTLLM_MOE_BACKENDS = (AUTO, "cutlass", "trtllm", "deepgemm", "wideep", "cutedsl", "triton", "vanilla")
#: Formats TRTLLMGenFusedMoE runs (create_moe.py get_moe_cls), named as the calibration's MoE keys.
TRTLLM_GEN_FORMATS = frozenset({"fp8_block", "nvfp4", "w4a16_mxfp4", "w4a8"})
#: Formats TritonFusedMoE runs whose kernel rows llmsim has: gpt-oss's MXFP4 experts on Hopper (``matmul_ogs``,
#: which vLLM's Hopper rows time).
TRITON_FORMATS = frozenset({"w4a16_mxfp4"})
#: What the shared data lacks for each backend llmsim cannot price.
UNPRICED = {
    "wideep": "WideEPMoE (its own all-to-all and load balancer): no kernel rows of it in the shared data "
              "(kernels/moe_more.csv.gz times CUTLASS, DeepGEMM and TRT-LLM-gen min-latency only)",
    "cutedsl": "CuteDslFusedMoE: no kernel rows of it in the shared data",
    "vanilla": "VanillaMoE (one GEMM per expert): no kernel rows of it in the shared data",
}


def hopper(sm_version: Optional[int]) -> bool:
    """Compute capability 9.x, where AUTO gives gpt-oss to TritonFusedMoE (``resolve_moe_backend``)."""
    return sm_version is not None and 90 <= sm_version < 100


def sm100_family(sm_version: Optional[int]) -> bool:
    """TensorRT-LLM's ``is_sm_100f``: compute capability 10.0 or 10.3, where the TRT-LLM-gen and DeepGEMM MoE run."""
    return sm_version in (100, 103)


def check_moe_backend(value: str, kernels: Optional[str]) -> None:
    """Refuse ``engine.moe_backend`` off TensorRT-LLM, an unknown value, or one no kernel rows price."""
    if kernels != "trtllm":
        who = f"the {kernels} stack's" if kernels else "the profile's own (vLLM's)"
        raise ValueError(f"{value!r} selects TensorRT-LLM's MoE backend (moe_config.backend); llmsim prices "
                         f"{who} default MoE runner (SGLang's --moe-runner-backend and vLLM's MoE backends are "
                         "not keys): remove moe_backend, or set backend: trtllm")
    if value not in TRTLLM_MOE_BACKENDS:
        raise ValueError(f"{value!r} is not a TensorRT-LLM MoE backend; expected one of "
                         f"{', '.join(TRTLLM_MOE_BACKENDS)} (llm_args.py MoeConfig.backend, lower case)")
    if value in UNPRICED:
        raise ValueError(f"{value!r}: llmsim cannot price {UNPRICED[value]}; use cutlass, trtllm, deepgemm or "
                         "triton")


def auto_backend(model_type: str, sm_version: Optional[int]) -> str:
    """The backend AUTO runs, as ``ModelConfig.resolve_moe_backend`` reads the architecture and the
    compute capability (#11074, as every release llmsim describes has it, to 1.3.0rc15): gpt-oss
    (GptOssForCausalLM) on TRT-LLM-gen from 10.0 to 11.x and on Triton on Hopper, its fastest
    kernels there, and every other model on CUTLASS, the old default."""
    if model_type == "gpt_oss" and sm_version is not None:
        if 100 <= sm_version < 120:
            return "trtllm"
        if hopper(sm_version):
            return "triton"
    return "cutlass"


def resolved_backend(backend: Optional[str], model_type: str, gpu_name: str, sm_version: Optional[int]) -> Optional[str]:
    """``backend`` with ``auto`` replaced by what TensorRT-LLM runs for the model on this GPU; a
    ValueError where that is a backend llmsim cannot price, which a launch would run unasked."""
    if backend != AUTO:
        return backend
    picked = auto_backend(model_type, sm_version)
    if picked in UNPRICED:
        raise ValueError(f"{_auto_runs(picked, model_type, gpu_name, sm_version)}, and llmsim cannot price "
                         f"{UNPRICED[picked]}: {_AUTO_REMEDY}")
    return picked


#: What to do where the backend AUTO picks cannot be priced: the user never named it, so "use cutlass" alone
#: left them without the key (and without the release that runs no AUTO).
_AUTO_REMEDY = (f"set engine.moe_backend to cutlass (moe_config.backend: CUTLASS in the launch), or name a "
                f"backend_version before {AUTO_SINCE}")


def _auto_runs(picked: str, model_type: Optional[str], gpu_name: str, sm_version: Optional[int]) -> str:
    """What AUTO ran, for a refusal of it: the backend the user never named, and why the stack picked it."""
    return (f"moe_backend auto (TensorRT-LLM's moe_config.backend default from {AUTO_SINCE}) runs "
            f"{picked.upper()} for {model_type} on {gpu_name}, compute capability {sm_version} "
            f"(_torch/model_config.py resolve_moe_backend)")


def expert_kernel_refusal(backend: Optional[str], fmt: str, gpu_name: str, sm_version: Optional[int],
                          setting: Optional[str] = None, model_type: Optional[str] = None) -> Optional[str]:
    """Why ``backend`` cannot run or be priced for experts of format ``fmt`` on this GPU; None where it can.
    ``setting``: what the pool set, ``auto`` where the stack picked ``backend`` (then said, as the pool
    never named it: gpt-oss's bf16 experts on Hopper, which AUTO gives TRITON), for ``model_type``."""
    gap = _kernel_gap(backend, fmt, gpu_name, sm_version)
    if gap is None or backend is None:
        return None
    if setting == AUTO:
        return f"{_auto_runs(backend, model_type, gpu_name, sm_version)}, and {gap}: {_AUTO_REMEDY}"
    return f"{gap}: use cutlass"


def _kernel_gap(backend: Optional[str], fmt: str, gpu_name: str, sm_version: Optional[int]) -> Optional[str]:
    """What the shared data or the stack lacks for ``backend`` on experts of ``fmt`` on this GPU."""
    if backend == "trtllm" and fmt in TRTLLM_GEN_FORMATS and not sm100_family(sm_version):
        return (f"moe_backend trtllm runs TRTLLMGenFusedMoE for {fmt} experts, whose kernels TensorRT-LLM builds "
                f"for compute capability 10.0 and 10.3 only (is_sm_100f); {gpu_name} is {sm_version}")
    if backend == "triton" and (fmt not in TRITON_FORMATS or not hopper(sm_version)):
        return (f"moe_backend triton: TritonFusedMoE (triton_kernels matmul_ogs) is timed only for gpt-oss's "
                f"MXFP4 experts on Hopper, by vLLM's rows of the same kernel; {fmt} experts on {gpu_name} have "
                "none")
    if backend == "deepgemm" and (fmt != "fp8_block" or not sm100_family(sm_version)):
        return (f"moe_backend deepgemm: DeepGemmFusedMoE runs block-fp8 experts on compute capability 10.x, the "
                f"only rows of it in the shared data; {fmt} experts on {gpu_name} have none")
    return None


def expert_backend(backend: str, fmt: str) -> str:
    """The backend the routed experts of format ``fmt`` run under ``backend`` (``auto`` resolved):
    ``get_moe_cls`` gives TRTLLM's other formats to CutlassFusedMoE, so a launch naming it runs CUTLASS
    there, which a reader of the pool must be told rather than see the backend it named."""
    return "cutlass" if backend == "trtllm" and fmt not in TRTLLM_GEN_FORMATS else backend


def backend_text(setting: str, runs: str) -> str:
    """How a pool's MoE backend reads: what runs, and the setting that chose it where that is another
    word (``trtllm (auto)``: the release's default picked it for the model and GPU)."""
    if setting == AUTO:
        return f"{runs} (auto)"
    if setting != runs:
        return f"{runs} ({setting} falls back to it for these experts)"
    return runs


def own_sets_replace(backend: Optional[str], fmt: str) -> bool:
    """Does the stack's own MoE set of ``fmt`` price ``backend``? False where the
    profile's own set was fitted on the kernel the backend runs: ``trtllm`` on its
    formats (vLLM's FlashInfer TRT-LLM rows), ``triton`` on gpt-oss's MXFP4
    (vLLM's Hopper ``matmul_ogs`` rows)."""
    return not ((backend == "trtllm" and fmt in TRTLLM_GEN_FORMATS) or (backend == "triton" and fmt in TRITON_FORMATS))
