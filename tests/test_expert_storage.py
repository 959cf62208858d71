"""MXFP4 experts take the memory of the kernel's padded layout, not the checkpoint's.

vLLM's and SGLang's MXFP4 quant method creates the experts' parameters at the
shape its kernel needs (``mxfp4.py`` ``create_weights``): on Blackwell's
FlashInfer TRT-LLM kernels the shard's intermediate width and the hidden size
are rounded up to 256, on Hopper's Triton kernels the intermediate width to 64.
gpt-oss-120b's 2,880 × 2,880 experts therefore hold 3,072 × 3,072 on a B200.
"""
from __future__ import annotations

import pytest

from simulator.costmodel.step import CostModel
from simulator.memory import plan_memory
from simulator.parallelism import Parallelism, weight_bytes_per_gpu
from simulator.profiles import load_hardware, load_model


def _experts_per_gpu(model: str, gpu: str, tp: int, weight_dtype: str) -> tuple[float, float]:
    """(as stored, at the checkpoint's shape) bytes of one GPU's routed experts."""
    m, g = load_model(model), load_hardware(gpu)
    cm = CostModel(m, g, tp, weight_dtype)
    par = Parallelism(tp)
    return (weight_bytes_per_gpu(m, par, weight_dtype, cm.expert_storage)[1],
            weight_bytes_per_gpu(m, par, weight_dtype)[1])


@pytest.mark.parametrize("gpu,tp,width,hidden", [
    ("b200", 1, 3072, 3072),    # 2,880 → 3,072 both ways
    ("b200", 8, 512, 3072),     # the shard's 360 columns → 512
    ("h200", 1, 2880, 2880),    # a multiple of 64 already
    ("h200", 2, 1472, 2880),    # 1,440 → 1,472; hidden unpadded on Hopper
])
def test_mxfp4_experts_hold_the_padded_shape(gpu: str, tp: int, width: int, hidden: int) -> None:
    stored, checkpoint = _experts_per_gpu("gpt-oss-120b", gpu, tp, "mxfp4")
    shard = 2880 // tp
    assert stored / checkpoint == pytest.approx(width * hidden / (shard * 2880))


def test_other_formats_keep_the_checkpoint_shape() -> None:
    # The bf16 quant method stores the checkpoint's shape even where its kernel computes padded blocks.
    stored, checkpoint = _experts_per_gpu("gpt-oss-120b", "b200", 8, "bf16")
    assert stored == checkpoint


def test_the_padding_shrinks_the_kv_pool_by_what_it_adds() -> None:
    m, g = load_model("gpt-oss-120b"), load_hardware("b200")
    storage = CostModel(m, g, 1, "mxfp4").expert_storage
    plain = plan_memory(m, g, 1, "mxfp4")
    padded = plan_memory(m, g, 1, "mxfp4", expert_storage=storage)
    extra = m.expert_weight_bytes("mxfp4") * (storage - 1.0)
    assert extra / 2**30 == pytest.approx(7.8, abs=0.1)   # about 7.8 GiB more on one B200
    assert padded.weights_bytes - plain.weights_bytes == pytest.approx(extra)
    assert plain.kv_capacity_bytes - padded.kv_capacity_bytes == pytest.approx(extra, rel=1e-6)


def test_a_pool_reports_the_padded_weights() -> None:
    from simulator.fleet.setup import setup_pool
    from simulator.scenario.schema import PoolSpec

    spec = PoolSpec.model_validate({"name": "p", "model": "gpt-oss-120b", "gpu": "b200", "tp": 2, "replicas": 1,
                                    "engine": {"weight_dtype": "mxfp4"}})
    setup = setup_pool(spec, 0)
    assert setup.cm.expert_storage == pytest.approx(1536 * 3072 / (1440 * 2880))
    m = load_model("gpt-oss-120b")
    rest, experts = weight_bytes_per_gpu(m, Parallelism(2), "mxfp4", setup.cm.expert_storage)
    assert setup.memory.weights_bytes == pytest.approx((rest + experts) * 2)


def test_an_mxfp4_moe_draft_holds_its_padded_experts_too() -> None:
    """A MoE draft in MXFP4 (a gpt-oss drafting for a gpt-oss) is loaded by the same quant method."""
    from simulator.costmodel.speculative import SpeculativeSpec, speculative_cost_model, speculative_memory

    m, g = load_model("gpt-oss-120b"), load_hardware("b200")
    cm = CostModel(m, g, 1, "mxfp4")
    mem = plan_memory(m, g, 1, "mxfp4", expert_storage=cm.expert_storage)
    scm = speculative_cost_model(cm, SpeculativeSpec(draft_model="gpt-oss-120b", k=2, acceptance_rate=0.6))
    drafted = speculative_memory(mem, scm)
    rest, experts = weight_bytes_per_gpu(m, Parallelism(1), "mxfp4", cm.expert_storage)
    assert scm.draft.expert_storage == cm.expert_storage > 1
    assert drafted.weights_bytes - mem.weights_bytes == pytest.approx(rest + experts)


def test_a_gpu_without_its_own_moe_rows_pads_as_its_compute_capability_does() -> None:
    """The stacks pick the MXFP4 kernel by compute capability: an H100 PCIe runs the H100 SXM's."""
    pcie = _experts_per_gpu("gpt-oss-120b", "h100-pcie", 4, "mxfp4")
    sxm = _experts_per_gpu("gpt-oss-120b", "h100-sxm", 4, "mxfp4")
    assert load_hardware("h100-pcie").calibration.moe_for("w4a16_mxfp4", 1) is None
    assert pcie == pytest.approx(sxm) and pcie[0] / pcie[1] == pytest.approx(768 / 720)
