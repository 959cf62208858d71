"""TensorRT-LLM's MoE backend (``moe_config.backend``) and which measured kernel prices it.

TensorRT-LLM picks the routed experts' kernel at launch: ``MoeConfig.backend``
in tensorrt_llm/llmapi/llm_args.py takes CUTLASS (the default to 1.2),
CUTEDSL, WIDEEP, TRTLLM, DEEPGEMM, VANILLA and TRITON, and
tensorrt_llm/_torch/modules/fused_moe/create_moe.py ``get_moe_cls`` maps
each to its module. llmsim can price a backend only where kernel rows time
it (``kernels/moe.csv.gz``, ``kernels/moe_more.csv.gz``):

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
* ``wideep``, ``cutedsl``, ``triton``, ``vanilla``: no row in the shared
  kernel tables times them; refused.
"""
from __future__ import annotations

from typing import Optional

#: The values of ``moe_config.backend`` (llm_args.py MoeConfig), as ``engine.moe_backend`` spells them.
TRTLLM_MOE_BACKENDS = ("cutlass", "trtllm", "deepgemm", "wideep", "cutedsl", "triton", "vanilla")
#: Formats TRTLLMGenFusedMoE runs (create_moe.py get_moe_cls), named as the calibration's MoE keys.
TRTLLM_GEN_FORMATS = frozenset({"fp8_block", "nvfp4", "w4a16_mxfp4", "w4a8"})
#: What the shared data lacks for each backend llmsim cannot price.
UNPRICED = {
    "wideep": "WideEPMoE (its own all-to-all and load balancer): no kernel rows of it in the shared data "
              "(kernels/moe_more.csv.gz times CUTLASS, DeepGEMM and TRT-LLM-gen min-latency only)",
    "cutedsl": "CuteDslFusedMoE: no kernel rows of it in the shared data",
    "triton": "TritonFusedMoE: no kernel rows of it in the shared data (TensorRT-LLM's; vLLM's Triton rows "
              "are another kernel)",
    "vanilla": "VanillaMoE (one GEMM per expert): no kernel rows of it in the shared data",
}


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
        raise ValueError(f"{value!r}: llmsim cannot price {UNPRICED[value]}; use cutlass, trtllm or deepgemm")


def expert_kernel_refusal(backend: Optional[str], fmt: str, gpu_name: str, sm_version: Optional[int]) -> Optional[str]:
    """Why ``backend`` cannot run or be priced for experts of format ``fmt`` on this GPU; None where it can."""
    if backend == "trtllm" and fmt in TRTLLM_GEN_FORMATS and not sm100_family(sm_version):
        return (f"moe_backend trtllm runs TRTLLMGenFusedMoE for {fmt} experts, whose kernels TensorRT-LLM builds "
                f"for compute capability 10.0 and 10.3 only (is_sm_100f); {gpu_name} is {sm_version}: use cutlass")
    if backend == "deepgemm" and (fmt != "fp8_block" or not sm100_family(sm_version)):
        return (f"moe_backend deepgemm: DeepGemmFusedMoE runs block-fp8 experts on compute capability 10.x, the "
                f"only rows of it in the shared data; {fmt} experts on {gpu_name} have none: use cutlass")
    return None


def own_sets_replace(backend: Optional[str], fmt: str) -> bool:
    """Does the stack's own MoE set of ``fmt`` price ``backend``? False where the
    profile's own (vLLM's FlashInfer TRT-LLM) set does: ``trtllm`` on its formats."""
    return not (backend == "trtllm" and fmt in TRTLLM_GEN_FORMATS)
