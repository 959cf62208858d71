"""MXFP4 experts take the memory of the layout the stack holds them in.

vLLM picks the MoE kernel by release and GPU (backend_profiles/vllm.yaml
``mxfp4_expert_layouts``): on Hopper Marlin to 0.11 (its wheels bring no
triton_kernels), whose padded parameters gpt-oss-120b loads as "Model loading
took 65.9651 GiB" (0.10.1, vllm-project/vllm#23278); then the Triton
matmul_ogs kernels, which keep the loaded scales beside the swizzled ones
("64.38 GiB" at 0.14.1, vllm-project/vllm#33155). The experts' biases come
with them, at their padded width: fp32 under the Triton kernels (0.15 GiB),
the checkpoint's bf16 under Marlin; llmsim sits within 0.1 GiB under the logs.

SGLang picks its own (backend_profiles/sglang.yaml ``mxfp4_expert_layouts``):
the triton_kernels its sgl-kernel wheel brings on Hopper, whose layout moved
with the pinned Triton tree, FlashInfer's on Blackwell, and below Hopper the
checkpoint's shape but for the width's padding.
"""
from __future__ import annotations

import pytest

from simulator.costmodel.step import CostModel
from simulator.engine.config import EngineConfig
from simulator.parallelism import Parallelism, weight_bytes_per_gpu
from simulator.profiles import load_hardware, load_model
from simulator.profiles.backend import apply_backend

GIB = 2**30


def _engine(gpu: str, version: str | None = None, backend: str = "vllm", **keys) -> EngineConfig:
    raw = {"backend": backend, **({"backend_version": version} if version else {}), **keys}
    return EngineConfig(**apply_backend(raw, gpu, model=load_model("gpt-oss-120b")))


def _weights_gib(gpu: str, e: EngineConfig) -> float:
    m = load_model("gpt-oss-120b")
    cm = CostModel(m, load_hardware(gpu), 1, "mxfp4", mxfp4_expert_layout=e.mxfp4_expert_layout)
    return sum(weight_bytes_per_gpu(m, Parallelism(1), "mxfp4", cm.expert_storage)) / GIB


@pytest.mark.parametrize("version,logged", [("0.10.1", 65.9651), ("0.14.1", 64.38)])
def test_the_weights_vllm_logged_on_one_h100(version: str, logged: float) -> None:
    held = _weights_gib("h100-sxm", _engine("h100-sxm", version))
    assert logged - 0.1 < held < logged


@pytest.mark.parametrize("version,kernel,copies", [
    ("0.11.0", "MARLIN", 1), ("0.12.0", "TRITON", 2), ("0.19.1", "TRITON", 2), ("0.24.0", "TRITON", 2),
    ("0.25.0", "TRITON", 1), ("0.34.0", "TRITON", 1)])
def test_the_kernel_each_release_holds_them_in_on_hopper(version: str, kernel: str, copies: int) -> None:
    graphs = {"kv_memory": {"cuda_graph_gib": 1.0}} if version >= "0.20" else {}
    layout = _engine("h200", version, **graphs).mxfp4_expert_layout
    assert layout is not None and (layout.kernel, layout.scale_copies) == (kernel, copies)


TRTLLM = "FLASHINFER_TRTLLM_MXFP4_BF16"


@pytest.mark.parametrize("version,gpu,kernel,width_align", [
    (None, "b200", TRTLLM, 256), (None, "gb300-nvl72", TRTLLM, 256), ("0.10.1", "b300", "MARLIN", 128),
    ("0.10.2", "b200", "MARLIN", 128), ("0.11.0", "b200", "MARLIN", 128), ("0.11.2", "b200", TRTLLM, 256), ("0.11.2", "b300", "MARLIN", 128),
    ("0.12.0", "b300", None, 0), ("0.13.0", "b300", TRTLLM, 256), ("0.26.0", "b200", TRTLLM, 256),
    ("0.27.0", "gb200-nvl72", TRTLLM, 128), ("0.34.0", "b200", TRTLLM, 128)])
def test_the_kernel_each_release_holds_them_in_on_blackwell(version: str | None, gpu: str, kernel: str | None,
                                                            width_align: int) -> None:
    """FlashInfer's TRT-LLM kernel wherever FlashInfer is installed (a requirement from 0.11.1) and the
    GPU is one it tests for (10.0 alone to 0.12.0, the 10.x family from 0.13.0), created 256 x 256
    to 0.26.0 and 128 wide from 0.27.0, with fp32 biases; Marlin without it where the wheel brings
    no triton_kernels (to 0.11.2; on a B200 from 0.10.2, whose get_mxfp4_backend first falls back to
    it there); a 10.3 GPU under 0.12.0 runs triton_kernels' Blackwell layouts,
    which llmsim has not read, and keeps the calibrated padding."""
    graphs = {"kv_memory": {"cuda_graph_gib": 1.0}} if version and version >= "0.20" else {}
    layout = _engine(gpu, version, **graphs).mxfp4_expert_layout
    if kernel is None:
        assert layout is None
        return
    assert (layout.kernel, layout.intermediate_align, layout.hidden_align, layout.bias_bytes) == \
        (kernel, width_align, 256, 4.0 if kernel == TRTLLM else 2.0)


def test_the_default_release_on_hopper_holds_more_than_the_checkpoint() -> None:
    """The checkpoint counts the experts' bf16 biases: 116,829,156,672 parameters in
    openai/gpt-oss-120b's safetensors, less its routers' biases and attention sinks (128 and 64 a
    layer), which llmsim leaves out."""
    m = load_model("gpt-oss-120b")
    assert m.num_params == 116_829_156_672 - 36 * (128 + 64)
    checkpoint = m.weight_bytes("mxfp4") / GIB
    assert _weights_gib("h100-sxm", _engine("h100-sxm")) == pytest.approx(checkpoint + 4.72, abs=0.01)


def test_only_mxfp4_pools_and_ampere_to_hopper_get_a_layout() -> None:
    assert _engine("h100-sxm", weight_dtype="bf16").mxfp4_expert_layout is None
    assert _engine("b300", "0.12.0").mxfp4_expert_layout is None   # not read: the calibrated padding holds
    assert _engine("a100-sxm-80gb").mxfp4_expert_layout.kernel == "MARLIN"


def test_a_pool_sets_the_layout_it_runs() -> None:
    """VLLM_MXFP4_USE_MARLIN=1 on a Triton release: the pool states Marlin's layout, key by key."""
    e = _engine("h100-sxm", mxfp4_expert_layout={"kernel": "MARLIN", "intermediate_align": 128, "hidden_align": 256,
                                                 "value_rows_align": 1, "value_cols_align": 1, "scale_rows_align": 1,
                                                 "scale_cols_align": 32, "scale_copies": 1, "bias_bytes": 2})
    assert _weights_gib("h100-sxm", e) == pytest.approx(_weights_gib("h100-sxm", _engine("h100-sxm", "0.11.0")))


def test_a_bad_layout_is_refused() -> None:
    with pytest.raises(ValueError, match="scale_copies"):
        _engine("h100-sxm", mxfp4_expert_layout={"scale_copies": 3})


@pytest.mark.parametrize("version,gpu,kernel,value_rows,scale_cols,copies", [
    ("0.5.9", "h100-sxm", "triton_kernel", 16, 64, 2), ("0.5.12", "h200", "triton_kernel", 64, 64, 2),
    ("0.5.19", "h200", "triton_kernel", 64, 128, 2), ("0.5.23", "h100-sxm", "triton_kernel", 256, 128, 2),
    ("0.5.16", "b200", "flashinfer_mxfp4", 1, 32, 1), ("0.5.23", "gb300-nvl72", "flashinfer_mxfp4", 1, 32, 1),
    ("0.5.20", "a100-sxm-80gb", "triton_kernel", 1, 32, 2), ("0.5.23", "l40s", "triton_kernel", 1, 32, 1)])
def test_the_layout_each_sglang_release_holds_them_in(version: str, gpu: str, kernel: str, value_rows: int,
                                                       scale_cols: int, copies: int) -> None:
    layout = _engine(gpu, version, backend="sglang").mxfp4_expert_layout
    assert layout is not None
    assert (layout.kernel, layout.value_rows_align, layout.scale_cols_align, layout.scale_copies) == \
        (kernel, value_rows, scale_cols, copies)


@pytest.mark.parametrize("gpu,version,held_gib", [
    ("h100-sxm", "0.5.9", 64.30), ("h200", "0.5.12", 65.49), ("h200", "0.5.19", 65.57), ("h100-sxm", None, 67.59),
    ("b200", "0.5.16", 68.67), ("b200", None, 65.97), ("a100-sxm-80gb", "0.5.20", 64.18),
    ("a100-sxm-80gb", None, 60.84)])
def test_the_weights_sglang_holds_for_gpt_oss_120b_on_one_gpu(gpu: str, version: str | None, held_gib: float) -> None:
    """Hopper pays the swizzled tiles and a second copy of the scales; the 0.5.23 tiles of 256 rows
    hold 6.82 GiB over the checkpoint (60.77 GiB), so one H100 at SGLang's default fraction has no
    room left for KV."""
    assert _weights_gib(gpu, _engine(gpu, version, backend="sglang")) == pytest.approx(held_gib, abs=0.01)


@pytest.mark.parametrize("backend,gpu,fp32", [("sglang", "h200", True), ("sglang", "b200", True),
                                               ("vllm", "h200", True), ("vllm", "b200", True),
                                               ("vllm", "a100-sxm-80gb", False)])
def test_the_experts_biases_are_held_at_the_padded_width(backend: str, gpu: str, fp32: bool) -> None:
    """gpt-oss's expert biases, created at the experts' padded width (mxfp4.py create_weights:
    w13_weight_bias 2 x width, w2_weight_bias hidden), turned to fp32 by SGLang's triton_kernel and
    flashinfer_mxfp4 runners and vLLM's TRITON one (process_weights_after_loading,
    convert_to_mxfp4_moe_kernel_format), kept bf16 by Marlin (prepare_moe_fp4_layer_for_marlin)."""
    e = _engine(gpu, backend=backend)
    m, layout = load_model("gpt-oss-120b"), e.mxfp4_expert_layout
    width, h = -(-m.expert_ffn // layout.intermediate_align) * layout.intermediate_align, \
        -(-m.hidden_size // layout.hidden_align) * layout.hidden_align
    per_expert = layout.stored_bytes(m.hidden_size, m.expert_ffn, True, True) - \
        layout.stored_bytes(m.hidden_size, m.expert_ffn, True)
    assert per_expert == (2 * width + h) * (4 if fp32 else 2)
    biases = m.num_moe_layers * m.num_experts * per_expert / GIB
    m0 = m.model_copy(update={"model_type": "gpt_oss_without_biases"})
    cm = CostModel(m0, load_hardware(gpu), 1, "mxfp4", mxfp4_expert_layout=layout)
    without = sum(weight_bytes_per_gpu(m0, Parallelism(1), "mxfp4", cm.expert_storage)) / GIB
    assert _weights_gib(gpu, e) == pytest.approx(without + biases, rel=1e-9)


@pytest.mark.parametrize("backend,gpu", [("sglang", "h200"), ("sglang", "b200"), ("vllm", "h200"),
                                         ("vllm", "b200"), ("vllm", "a100-sxm-80gb")])
@pytest.mark.parametrize("tp,ep", [(8, 1), (4, 1), (2, 1), (8, 8), (8, 2)])
def test_each_width_shard_holds_its_experts_whole_down_bias(backend: str, gpu: str, tp: int, ep: int) -> None:
    """Split by width (moe_tp = tp / ep), every GPU holds its experts' shards of the weights and the
    gate_up bias, and the whole hidden-sized down-projection bias (mxfp4.py create_weights: w2's bias
    num_local_experts x hidden_size, zeroed beyond the first width rank by gpt_oss.py's loaders):
    a GPU's experts take their count times the shard's stored bytes, the bias whole in it."""
    m, layout = load_model("gpt-oss-120b"), _engine(gpu, backend=backend).mxfp4_expert_layout
    par = Parallelism(tp, 1, ep)
    width = m.expert_ffn // par.moe_tp
    _, experts = weight_bytes_per_gpu(m, par, "mxfp4", layout.storage_scale(m.hidden_size, width, True, True))
    held = m.num_moe_layers * m.num_experts // ep * layout.stored_bytes(m.hidden_size, width, True, True)
    assert experts == pytest.approx(held, rel=1e-12)


def test_sglang_gives_other_formats_no_layout() -> None:
    assert _engine("h100-sxm", backend="sglang", weight_dtype="bf16").mxfp4_expert_layout is None


def _check_gpt_oss_pool(gpu: str, ep: int, engine: dict, refusal: str | None, key: str) -> None:
    """gpt-oss-120b on 8 ``gpu`` at ``ep``: refused naming ``key`` with a message that says
    ``refusal``, or (None) held in a layout above the checkpoint's."""
    from simulator.errors import LlmsimError
    from simulator.fleet.setup import setup_pool
    from simulator.scenario.schema import PoolSpec

    pool = PoolSpec.model_validate({"model": "gpt-oss-120b", "gpu": gpu, "tp": 8, "ep": ep, "engine": engine})
    if refusal is None:
        assert setup_pool(pool, 0).cm.expert_storage > 1.0
        return
    with pytest.raises(LlmsimError, match=refusal) as err:
        setup_pool(pool, 0)
    assert err.value.key_path == f"pools[0].{key}"


@pytest.mark.parametrize("gpu,ep,refused", [("h200", 8, True), ("a100-sxm-80gb", 8, True), ("h200", 1, False),
                                            ("b200", 8, False)])
def test_sglang_upcasts_the_experts_with_ep_on_its_triton_kernel_gpus(gpu: str, ep: int, refused: bool) -> None:
    """gpt-oss's override picks SGLang's triton_kernel MoE runner only where ep_size is 1; with --ep above
    it the quant method upcasts the experts to bf16, which no layout describes: such a pool is refused,
    naming ep, not priced in the layout it would not hold (Blackwell's FlashInfer runner holds at any ep)."""
    _check_gpt_oss_pool(gpu, ep, {"backend": "sglang"}, "bf16" if refused else None, "ep")


@pytest.mark.parametrize("version,gpu,ep,refused", [
    ("0.10.1", "b200", 1, True), ("0.10.1", "gb200-nvl72", 8, True), ("0.10.0", "b200", 1, True),
    ("0.10.1", "b300", 1, False), ("0.10.1", "h200", 8, False), ("0.10.2", "b200", 8, False),
    ("0.11.2", "b200", 8, False), ("0.19.1", "b200", 8, False)])
def test_vllm_0_10_1_does_not_start_gpt_oss_on_a_b200(version: str, gpu: str, ep: int, refused: bool) -> None:
    """vLLM 0.10.1 on compute capability 10.0 takes neither Marlin nor, without the flashinfer extra,
    FlashInfer, and its Triton path imports triton_kernels, which the wheel lacks; with the extra its
    TRT-LLM path asserts no expert parallelism. Such a pool is refused naming backend_version, at any
    ep; 0.10.2 (Marlin) and FlashInfer's kernel from 0.11 (local_expert_offset) run with ep."""
    _check_gpt_oss_pool(gpu, ep, {"backend": "vllm", "backend_version": version},
                        "triton_kernels" if refused else None, "engine.backend_version")
