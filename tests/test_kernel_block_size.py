"""The KV block (page) size each stack runs where its default attention kernel forces one
(backend_profiles/*.yaml attention_kernels): vLLM's preferred kernel block, SGLang's page constraints
of trtllm_mla / trtllm_mha, TensorRT-LLM's FlashMLA; a pool's own size is kept unless the stack would
not run it, which is refused naming the key and the sizes it takes."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from simulator.errors import from_validation_error
from simulator.scenario.schema import PoolSpec, Scenario


def _block(backend: str, model: str, gpu: str, **engine) -> int:
    return PoolSpec.model_validate({"model": model, "gpu": gpu, "engine": {"backend": backend, **engine}}
                                   ).engine.block_size


FIXED_100 = {"dist": "fixed", "value": 100}
VLLM_034 = {"backend_version": "0.34.0", "kv_memory": {"cuda_graph_gib": 2.0}}


@pytest.mark.parametrize("backend, model, gpu, engine, block", [
    # vLLM: FLASH_ATTN_MLA on Hopper takes the default 16 (64 from 0.34.0); FLASHMLA with an fp8 cache
    ("vllm", "deepseek-v3", "h200", {}, 16),
    ("vllm", "deepseek-v3", "h200", {"backend_version": "0.33.0", "kv_memory": {"cuda_graph_gib": 2.0}}, 16),
    ("vllm", "deepseek-v3", "h200", VLLM_034, 64),
    ("vllm", "deepseek-v3", "h200", {"kv_dtype": "fp8"}, 64),
    # FLASHINFER_MLA on Blackwell: 32- or 64-token kernel blocks, so the smallest until 0.34.0's default 64
    ("vllm", "deepseek-v3", "b200", {}, 32),
    ("vllm", "deepseek-v3", "b200", {"backend_version": "0.19.0"}, 32),
    ("vllm", "deepseek-v3", "b300", {"backend_version": "0.33.0", "kv_memory": {"cuda_graph_gib": 2.0}}, 32),
    ("vllm", "deepseek-v3", "b200", VLLM_034, 64),
    ("vllm", "deepseek-v3", "a100-sxm-80gb", {}, 16),          # TRITON_MLA
    ("vllm", "llama-3.1-8b", "h100-sxm", {}, 16),
    ("vllm", "llama-3.1-8b", "h100-sxm", VLLM_034, 64),
    ("vllm", "llama-3.1-8b", "b200", {}, 16),
    # before 0.18.0 vLLM forced the block of the MLA kernel it meant to run (platforms/cuda.py)
    ("vllm", "deepseek-v3", "h200", {"backend_version": "0.10.0"}, 64),
    ("vllm", "deepseek-v3", "b200", {"backend_version": "0.10.0"}, 16),
    ("vllm", "deepseek-v3", "h100-sxm", {"backend_version": "0.12.0"}, 64),
    ("vllm", "deepseek-v3", "b200", {"backend_version": "0.11.0"}, 128),
    ("vllm", "deepseek-v3", "gb200-nvl72", {"backend_version": "0.12.0"}, 128),
    ("vllm", "deepseek-v3", "b300", {"backend_version": "0.14.0"}, 128),
    ("vllm", "deepseek-v3", "b200", {"backend_version": "0.15.1"}, 64),
    ("vllm", "deepseek-v3", "h200", {"backend_version": "0.17.0", "kv_dtype": "fp8"}, 64),
    ("vllm", "deepseek-v3", "h200", {"backend_version": "0.15.1", "block_size": 128}, 128),
    ("vllm", "deepseek-v3", "a100-sxm-80gb", {"backend_version": "0.14.0"}, 16),
    ("vllm", "deepseek-v3", "h200", {"backend_version": "0.18.0"}, 16),
    ("vllm", "deepseek-v3", "b200", {"backend_version": "0.18.0"}, 32),
    ("vllm", "llama-3.1-8b", "h100-sxm", {"backend_version": "0.12.0"}, 16),
    # SGLang: trtllm_mla for DeepSeek-V3 and trtllm_mha on Blackwell set page 64; fa3 on Hopper keeps 1
    ("sglang", "deepseek-v3", "b200", {}, 64),
    ("sglang", "deepseek-v3", "b200", {"backend_version": "0.5.13.post1"}, 64),
    ("sglang", "llama-3.1-8b", "b200", {}, 64),
    ("sglang", "llama-3.1-8b", "gb200-nvl72", {"backend_version": "0.5.16"}, 64),
    ("sglang", "gpt-oss-120b", "b200", {}, 64),
    ("sglang", "llama-3.1-8b", "h100-sxm", {}, 1),
    ("sglang", "deepseek-v3", "h200", {}, 1),
    ("sglang", "llama-3.1-8b", "a100-sxm-80gb", {}, 1),
    # before 0.5.6.post2 MHA models ran flashinfer (page 1) on Blackwell, gpt-oss its own trtllm_mha;
    # before 0.5.2 DeepSeek-V3 ran flashinfer's MLA kernel (page 1) too
    ("sglang", "llama-3.1-8b", "b200", {"backend_version": "0.5.5.post2"}, 1),
    ("sglang", "gpt-oss-120b", "b200", {"backend_version": "0.5.5.post2"}, 64),
    ("sglang", "deepseek-v3", "gb200-nvl72", {"backend_version": "0.5.5.post2"}, 64),
    ("sglang", "deepseek-v3", "b200", {"backend_version": "0.5.1.post1"}, 1),
    ("sglang", "llama-3.1-8b", "b200", {"backend_version": "0.5.8"}, 64),
    ("sglang", "deepseek-v3", "b200", {"backend_version": "0.5.8.post1"}, 64),
    # a pool's own size the kernel takes stays
    ("sglang", "llama-3.1-8b", "b200", {"block_size": 16}, 16),
    ("sglang", "deepseek-v3", "b200", {"block_size": 32}, 32),
    ("vllm", "deepseek-v3", "b200", {"block_size": 16}, 16),       # vLLM runs TRITON_MLA for it
    ("vllm", "llama-3.1-8b", "h100-sxm", {"block_size": 32}, 32),  # FLASH_ATTN takes a multiple of 16
    ("vllm", "llama-3.1-8b", "b200", {"block_size": 48}, 48),      # FLASHINFER too
    # TensorRT-LLM: FlashMLA on compute capability 9.0 only
    ("trtllm", "deepseek-v3", "h200", {}, 64),
    ("trtllm", "deepseek-v3", "b200", {}, 32),
    ("trtllm", "llama-3.1-8b", "h100-sxm", {}, 32),
])
def test_the_block_size_is_the_kernels(backend, model, gpu, engine, block):
    assert _block(backend, model, gpu, **engine) == block


@pytest.mark.parametrize("gpu, version, size", [
    ("h100-sxm", "0.11.1", 256), ("h100-sxm", "0.18.0", 48), ("h100-sxm", None, 48), ("mi300x", None, 32),
    ("mi355x", "0.14.0", 64), ("b200", "0.17.1", 128),
])
def test_a_size_the_release_and_its_kernel_take_is_kept(gpu, version, size):
    engine = {"block_size": size, **({"backend_version": version} if version else {})}
    assert _block("vllm", "llama-3.1-8b", gpu, **engine) == size


def test_sglang_without_trtllm_mha_under_a_draft_keeps_page_1():
    """A draft with no --speculative-eagle-topk makes SGLang pick flashinfer for an MHA model on Blackwell."""
    pool = PoolSpec.model_validate({"model": "llama-3.1-8b", "gpu": "b200", "engine": {"backend": "sglang"},
                                    "speculative": {"draft_model": "llama-3.2-1b", "k": 3,
                                                    "acceptance_rate": 0.7}})
    assert pool.engine.block_size == 1


@pytest.mark.parametrize("backend, model, gpu, engine, says", [
    ("sglang", "llama-3.1-8b", "b200", {"block_size": 8},
     "8 tokens: sglang's trtllm_mha attention, which it runs for llama-3.1-8b on b200, takes blocks of 16, 32, 64 "
     "or 128 tokens, and runs any other at 64; set 16, 32, 64 or 128, or leave block_size unset (64)"),
    ("sglang", "llama-3.1-8b", "b200", {"block_size": 128, "backend_version": "0.5.16"}, "takes blocks of 16, 32 or 64"),
    ("sglang", "deepseek-v3", "b200", {"block_size": 16}, "trtllm_mla attention"),
    ("vllm", "deepseek-v3", "b200", {"block_size": 8},
     "takes blocks of a multiple of 32 or 64 tokens, and another of its kernels a multiple of 16; set a multiple "
     "of 16, or leave block_size unset (32)"),
    ("vllm", "deepseek-v3", "h200", {"block_size": 24}, "FLASH_ATTN_MLA"),
    ("vllm", "deepseek-v3", "h200", {"block_size": 16, "backend_version": "0.16.0"},
     "16 tokens: vllm's FLASHMLA attention, which it runs for deepseek-v3 on h200, takes blocks of a multiple of "
     "64 tokens, and runs any other at 64; set a multiple of 64, or leave block_size unset (64)"),
    ("vllm", "deepseek-v3", "h200", {"block_size": 128, "backend_version": "0.11.0"}, "takes blocks of 64 tokens"),
    ("vllm", "deepseek-v3", "b200", {"block_size": 64, "backend_version": "0.14.0"}, "CUTLASS_MLA attention"),
    ("trtllm", "deepseek-v3", "h200", {"block_size": 32}, "FlashMLA attention"),
    # vLLM's GQA kernels take multiples of 16: another size falls to FLEX_ATTENTION, which llmsim does not price
    ("vllm", "llama-3.1-8b", "h100-sxm", {"block_size": 8},
     "8 tokens: vllm's FLASH_ATTN attention, which it runs for llama-3.1-8b on h100-sxm, takes blocks of a "
     "multiple of 16 tokens; set a multiple of 16, or leave block_size unset (16)"),
    ("vllm", "llama-3.1-8b", "b200", {"block_size": 24}, "FLASHINFER attention"),
    ("vllm", "llama-3.1-8b", "a100-sxm-80gb", {"block_size": 1, "backend_version": "0.12.0"}, "FLASH_ATTN attention"),
    # ROCm: ROCM_ATTN (TRITON_ATTN before 0.19.0) and TRITON_MLA take multiples of 16 too
    ("vllm", "llama-3.1-8b", "mi300x", {"block_size": 17},
     "17 tokens: vllm's ROCM_ATTN attention, which it runs for llama-3.1-8b on mi300x, takes blocks of a multiple "
     "of 16 tokens; set a multiple of 16, or leave block_size unset (16)"),
    ("vllm", "llama-3.1-8b", "mi355x", {"block_size": 24, "backend_version": "0.14.0"}, "TRITON_ATTN attention"),
    ("vllm", "deepseek-v3", "mi300x", {"block_size": 8}, "TRITON_MLA attention"),
    # before 0.18.0 the launch offers --block-size only from CacheConfig's BlockSize Literal
    ("vllm", "llama-3.1-8b", "h100-sxm", {"block_size": 48, "backend_version": "0.11.0"},
     "48 tokens: vllm 0.11.0's launch takes --block-size 1, 8, 16, 32, 64 or 128 only (its CacheConfig "
     "BlockSize), of which its FLASH_ATTN attention runs 16, 32, 64 or 128; set 16, 32, 64 or 128, or leave "
     "block_size unset (16)"),
    ("vllm", "llama-3.1-8b", "h100-sxm", {"block_size": 256, "backend_version": "0.10.2"}, "64 or 128 only"),
    ("vllm", "llama-3.1-8b", "mi300x", {"block_size": 80, "backend_version": "0.17.1"}, "64, 128 or 256 only"),
])
def test_a_size_the_stack_would_not_run_is_refused_naming_the_key(backend, model, gpu, engine, says):
    data = {"name": "s", "workload": {"arrival": {"type": "poisson", "rate_per_s": 1.0}, "duration_s": 10,
                                      "input_tokens": FIXED_100, "output_tokens": FIXED_100},
            "pools": [{"model": model, "gpu": gpu, "tp": 8, "engine": {"backend": backend, **engine}}]}
    with pytest.raises(ValidationError) as e:
        Scenario.model_validate(data)
    err = from_validation_error(e.value, "s.yaml", data)
    assert err.key_path == "pools[0].engine.block_size" and says in err.message
    assert "\n" not in err.message


def test_a_prefix_cached_workload_follows_the_page():
    """SGLang's 64-token pages on Blackwell ask the synthetic prompt blocks for a multiple of 64: unset,
    workload.block_tokens takes it (the scenario sets neither key, and runs); set to another, it is refused
    on that key, the one to change."""
    from simulator.errors import LlmsimError
    from simulator.scenario.compile import compile_scenario

    data = {"name": "s", "workload": {"arrival": {"type": "poisson", "rate_per_s": 1.0}, "duration_s": 10,
                                      "input_tokens": FIXED_100, "output_tokens": FIXED_100,
                                      "system_prompt": {"apps": 1, "tokens": {"dist": "fixed", "value": 512}}},
            "pools": [{"model": "llama-3.1-8b", "gpu": "b200", "engine": {"backend": "sglang"}}]}
    sc = Scenario.model_validate(data)
    assert sc.workload.block_tokens == 64 == sc.pools[0].engine.block_size
    compile_scenario(sc, "s.yaml")
    # still unset: read again on another GPU (1-token pages on H200), it is vLLM's 16 again
    again = sc.model_dump(mode="json", exclude_unset=True)
    assert "block_tokens" not in again["workload"]
    again["pools"][0] = {"model": "llama-3.1-8b", "gpu": "h200", "engine": {"backend": "sglang"}}
    assert Scenario.model_validate(again).workload.block_tokens == 16
    data["workload"]["block_tokens"] = 16
    with pytest.raises(LlmsimError) as e:
        compile_scenario(Scenario.model_validate(data), "s.yaml")
    assert e.value.key_path == "workload.block_tokens" and "set a multiple of 64" in e.value.message
    assert "leave block_tokens out" in e.value.message
    data["workload"]["block_tokens"] = 128
    compile_scenario(Scenario.model_validate(data), "s.yaml")


@pytest.mark.parametrize("pages, tokens", [((1,), 16), ((16,), 16), ((32,), 32), ((64, 16), 64), ((48,), 48),
                                           ((32, 64, 1), 64), ((100,), 16), ((64, 96), 192), ((128, 96), 16)])
def test_unset_block_tokens_take_the_least_multiple_of_16_and_every_page(pages, tokens):
    """Up to 256 tokens; past it (a 100-token block: 400) the key stays at 16 and the scenario is refused."""
    from workloads.spec import WorkloadSpec

    w = WorkloadSpec.model_validate({"arrival": {"type": "poisson", "rate_per_s": 1.0}, "duration_s": 10,
                                     "input_tokens": FIXED_100, "output_tokens": FIXED_100,
                                     "system_prompt": {"apps": 1, "tokens": {"dist": "fixed", "value": 512}}})
    assert w.paged_by(pages).block_tokens == tokens
    assert WorkloadSpec.model_validate({**w.model_dump(exclude_unset=True), "block_tokens": 16}).paged_by(
        pages).block_tokens == 16      # set: the user's, refused where it does not divide
    plain = WorkloadSpec.model_validate(w.model_dump(exclude_unset=True, exclude={"system_prompt"}))
    assert plain.paged_by(pages) is plain      # no ids, nothing follows


def test_a_page_past_what_block_tokens_follows_is_refused_on_the_pool():
    from simulator.errors import LlmsimError
    from simulator.scenario.compile import compile_scenario

    data = {"name": "s", "workload": {"arrival": {"type": "poisson", "rate_per_s": 1.0}, "duration_s": 10,
                                      "input_tokens": FIXED_100, "output_tokens": FIXED_100,
                                      "system_prompt": {"apps": 1, "tokens": {"dist": "fixed", "value": 512}}},
            "pools": [{"model": "llama-3.1-8b", "gpu": "h100-sxm", "engine": {"block_size": 100}}]}
    with pytest.raises(LlmsimError) as e:
        compile_scenario(Scenario.model_validate(data), "s.yaml")
    assert e.value.key_path == "pools[0].engine.block_size", e.value.render()
    assert "set workload.block_tokens to a multiple of 100" in e.value.message


def test_kimi_k2_runs_sglangs_deepseek_v3_kernel(tmp_path):
    """Kimi K2's config.json names DeepseekV3ForCausalLM under model_type kimi_k2, and SGLang's override
    for that architecture (model_overrides/deepseek_v2.py _deepseek_family_overrides; server_args.py to
    0.5.14) runs trtllm_mla on sm100 for it as for DeepSeek-V3: pages of 64, not flashinfer's 1."""
    from pathlib import Path

    text = (Path(__file__).parent.parent / "model_profiles" / "deepseek-v3.yaml").read_text()
    kimi = tmp_path / "kimi-k2.yaml"
    kimi.write_text(text.replace("name: deepseek-v3", "name: kimi-k2").replace("model_type: deepseek_v3",
                                                                               "model_type: kimi_k2"))
    assert _block("sglang", str(kimi), "b200") == 64
    assert _block("sglang", str(kimi), "h200") == 1


def _pair(prefill_gpu: str, decode_gpu: str, backend: str, **engine) -> dict:
    return {"name": "s", "workload": {"arrival": {"type": "poisson", "rate_per_s": 1.0}, "duration_s": 10,
                                      "input_tokens": FIXED_100, "output_tokens": FIXED_100},
            "classes": [{"name": "c", "pool": "p"}],
            "pools": [{"name": "p", "model": "llama-3.1-8b", "gpu": prefill_gpu, "disaggregation": {"decode_pool": "d"},
                       "engine": {"backend": backend, **engine}},
                      {"name": "d", "model": "llama-3.1-8b", "gpu": decode_gpu, "engine": {"backend": backend, **engine}}]}


def test_an_sglang_pair_pages_alike():
    """SGLang's decode server refuses a prefill server of another page size (disaggregation/common/conn.py,
    0.5.13.post1-0.5.23), and its default page is 1 on Hopper, 64 on Blackwell: an H200 prefill pool beside
    a B200 decode pool is refused unless both set one; vLLM's NIXL connector splits blocks of another size."""
    from simulator.errors import LlmsimError
    from simulator.scenario.compile import compile_scenario

    with pytest.raises(LlmsimError) as e:
        compile_scenario(Scenario.model_validate(_pair("h200", "b200", "sglang")), "s.yaml")
    assert e.value.key_path == "pools[0].disaggregation.decode_pool"
    assert "in 1-token pages" in e.value.message and "in 64-token pages" in e.value.message
    compile_scenario(Scenario.model_validate(_pair("h200", "b200", "sglang", block_size=64)), "s.yaml")
    compile_scenario(Scenario.model_validate(_pair("b200", "b200", "sglang")), "s.yaml")
    compile_scenario(Scenario.model_validate(_pair("h200", "h100-sxm", "vllm", block_size=32)), "s.yaml")


@pytest.mark.parametrize("model, prefill_gpu, decode_gpu, kernels", [
    ("llama-3.1-8b", "h200", "b200", ("FLASH_ATTN", "FLASHINFER")),
    ("llama-3.1-8b", "gb200-nvl72", "a100-sxm-80gb", ("FLASHINFER", "FLASH_ATTN")),
    ("deepseek-v3", "h200", "b200", ("FLASH_ATTN_MLA", "FLASHINFER_MLA")),
    ("deepseek-v3", "gb200-nvl72", "h200", ("FLASHINFER_MLA", "FLASH_ATTN_MLA")),
    ("llama-3.1-8b", "mi300x", "h200", ("ROCM_ATTN", "FLASH_ATTN")),
])
def test_a_vllm_pair_on_gpus_of_two_attention_kernels_is_refused(model, prefill_gpu, decode_gpu, kernels):
    """vLLM's NIXL handshake hashes the attention backend each side runs and refuses a peer whose hash
    differs ('NIXL compatibility hash mismatch', nixl_connector.py compute_nixl_compatibility_hash,
    0.13.0-0.34.0), and vLLM picks FlashInfer first on compute capability 10.x, FlashAttention elsewhere
    (platforms/cuda.py _get_backend_priorities; MLA: FLASHINFER_MLA, FLASH_ATTN_MLA on 9.x, TRITON_MLA on
    8.x): a Hopper prefill pool beside a Blackwell decode pool never connects. Ampere beside Hopper runs
    FLASH_ATTN on both (FlashAttention 2 and 3 alike)."""
    from simulator.errors import LlmsimError
    from simulator.scenario.compile import compile_scenario

    data = _pair(prefill_gpu, decode_gpu, "vllm")
    for pool in data["pools"]:
        pool.update(model=model, tp=8 if model == "deepseek-v3" else 1)
    with pytest.raises(LlmsimError) as e:
        compile_scenario(Scenario.model_validate(data), "s.yaml")
    assert e.value.key_path == "pools[0].disaggregation.decode_pool"
    assert all(k in e.value.message for k in kernels)
    older = _pair(prefill_gpu, decode_gpu, "vllm", backend_version="0.12.0")    # sends no hash
    for pool in older["pools"]:
        pool.update(model=model, tp=8 if model == "deepseek-v3" else 1)
    if model != "deepseek-v3":
        compile_scenario(Scenario.model_validate(older), "s.yaml")
    compile_scenario(Scenario.model_validate(_pair("a100-sxm-80gb", "h100-sxm", "vllm")), "s.yaml")


# A replayed row (llmsim validate, benchmarks/holdout_silicon.py) runs its release's kernel rules as a pool
# naming that release does: vLLM's forced MLA blocks before 0.18.0, SGLang's pages before 0.5.6 on Blackwell.
REPLAYED = [
    ("vllm", "0.16.0", "deepseek-v3", "h200", 64),        # FLASHMLA forced on 9.x
    ("vllm", "0.19.1", "deepseek-v3", "h200", 16),        # FLASH_ATTN_MLA's own
    ("vllm", "0.15.1", "deepseek-v3", "b200", 64),        # FLASHINFER_MLA forced to 64
    ("vllm", "0.17.0", "deepseek-v3", "b300", 64),
    ("vllm", "0.12.0", "deepseek-v3", "b200", 128),       # CUTLASS_MLA
    ("sglang", "0.5.16", "llama-3.1-8b", "b200", 64),     # trtllm_mha
    ("sglang", "0.5.16", "deepseek-v3", "b200", 64),      # trtllm_mla
    ("sglang", "0.5.5.post2", "llama-3.1-8b", "b200", 1),  # flashinfer
]


def _replayed(stack: str, version: str, model: str, gpu: str, **settings):
    from simulator.validation.deployment import version_keys
    from simulator.validation.replay import ReplaySettings, scenario_for
    from simulator.validation.rows import Row

    row = Row("r", stack, model, gpu, 8, "fp8" if model == "deepseek-v3" else "bf16", "bf16", 1024, 128,
              concurrency=4, measured={"ttft_mean_ms": 1.0}, version_keys=version_keys(stack, version))
    return scenario_for(row, ReplaySettings(**settings)).pools[0].engine


@pytest.mark.parametrize("stack, version, model, gpu, block", REPLAYED)
def test_a_replayed_row_runs_its_releases_block(stack, version, model, gpu, block):
    assert _replayed(stack, version, model, gpu).block_size == block


def test_a_replayed_rows_release_decides_the_sizes_it_takes():
    """The release's allowed sizes reach the replay too: 0.5.16's trtllm_mha takes no 128-token page,
    0.5.17's does."""
    from simulator.errors import LlmsimError

    assert _replayed("sglang", "0.5.17", "llama-3.1-8b", "b200", engine={"block_size": 128}).block_size == 128
    with pytest.raises(LlmsimError, match="takes blocks of 16, 32 or 64"):
        _replayed("sglang", "0.5.16", "llama-3.1-8b", "b200", engine={"block_size": 128})


@pytest.mark.parametrize("stack, version, model, gpu, block", REPLAYED)
def test_validate_and_run_agree_on_the_block(tmp_path, stack, version, model, gpu, block):
    """``llmsim validate --backend-version`` replays a benchmark result on the engine ``llmsim run`` builds for
    a pool naming that backend_version on the same GPU and model."""
    import json

    from simulator.validation.replay import ReplaySettings, scenario_for
    from simulator.validation.rows import rows_from_bench_json

    f = tmp_path / "run.json"
    f.write_text(json.dumps({"completed": 16, "total_input_tokens": 16 * 1024, "total_output_tokens": 16 * 128,
                             "max_concurrency": 4, "request_rate": "inf", "mean_ttft_ms": 100.0}))
    row, = rows_from_bench_json([f], stack, model, gpu, 8, version=version)
    validated = scenario_for(row, ReplaySettings()).pools[0].engine
    run = PoolSpec.model_validate({"model": model, "gpu": gpu, "tp": 8,
                                   "engine": {"backend": stack, "backend_version": version}}).engine
    assert validated.block_size == run.block_size == block
    assert validated.prefix_cache == run.prefix_cache
