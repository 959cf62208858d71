"""SGLang's hybrid sliding-window pool, against vLLM's windows held per running sequence.

SGLang sizes one byte budget and splits it so that each sliding-window layer
holds ``swa_full_tokens_ratio`` (0.8) tokens per full-attention token (0.5.9
``set_num_tokens_hybrid_swa``; 0.5.13+ ``HybridSWAPoolConfigurator``: a token
costs ``F·n_full + ratio·S·n_swa`` bytes). gpt-oss-120b has 18 of each, so
its full-attention tokens are the budget over 1.8 full-layer tokens; releases
before 0.5.8 kept every layer's KV for every token (over 2).
"""
from __future__ import annotations

import pytest
import yaml

from simulator.hybrid_kv import sliding_groups
from simulator.kv_memory import GpuShare, KvMemory, kv_budget
from simulator.memory import activation_bytes_per_token, plan_memory
from simulator.parallelism import Parallelism, weight_bytes_per_gpu
from simulator.profiles import load_hardware, load_model
from simulator.profiles.backend import apply_backend


def _sglang_plan(gpu: str, ratio: float | None = None, tp: int = 1):
    m, g = load_model("gpt-oss-120b"), load_hardware(gpu)
    kv = KvMemory(rule="sglang", swa_full_tokens_ratio=ratio)
    return m, g, kv, plan_memory(m, g, tp, "mxfp4", max_num_batched_tokens=8192, max_num_seqs=1024,
                                 block_size=1, kv_memory=kv)


def _budget(m, g, kv, tp: int = 1) -> float:
    rest, experts = weight_bytes_per_gpu(m, Parallelism(tp), "mxfp4")
    share = GpuShare(g.hbm_bytes, rest + experts, 8192 * activation_bytes_per_token(m, tp), tp, 1, 8192, 1024,
                     vocab=m.vocab_size, cuda=g.cuda_total_bytes)
    return kv_budget(share, kv).kv_bytes


@pytest.mark.parametrize("ratio,cost", [(None, 1.8), (0.8, 1.8), (1.0, 2.0), (0.25, 1.25)])
def test_full_attention_tokens_are_the_budget_over_the_ratios_cost(ratio, cost):
    m, g, kv, mem = _sglang_plan("h200", ratio)
    full_token = mem.kv_bytes_per_token          # the 18 full-attention layers of one token
    assert mem.kv_capacity_tokens == pytest.approx(_budget(m, g, kv) / (cost * full_token), abs=1)
    # the sliding-window layers hold ratio × that many tokens, in the rest of the budget
    assert mem.kv_window_bytes == pytest.approx(_budget(m, g, kv) * (cost - 1) / cost, rel=1e-9)


def test_sglang_starts_gpt_oss_on_one_h100():
    """SGLang's ratio split needs nothing up front: 54 requests of 1,100 tokens fit one H100."""
    _, _, _, mem = _sglang_plan("h100-sxm")
    assert mem.kv_capacity_tokens > 54 * 1100


@pytest.mark.parametrize("block_size, held", [(16, 144), (64, 192), (1, 128)])
def test_vllm_keeps_its_windows_per_sequence_in_whole_blocks(block_size, held):
    """gpt-oss slides over 128 tokens: a decoding sequence keeps the blocks of its last 127 tokens and
    the one it writes, freeing only blocks wholly below them (vLLM's SlidingWindowManager
    remove_skipped_blocks), cdiv(127, block_size) + 1 blocks: 144 tokens in vLLM's 16-token blocks,
    192 in 0.34.0's 64-token ones. They come out of the one pool every group shares, nothing set
    aside: with 18 layers of each kind a window's blocks are pool blocks one for one."""
    m, g = load_model("gpt-oss-120b"), load_hardware("h200")
    mem = plan_memory(m, g, 1, "mxfp4", max_num_seqs=256, block_size=block_size, kv_memory=KvMemory(rule="vllm"))
    assert mem.kv_window_bytes == 0.0 and mem.window_blocks == held // block_size
    assert mem.num_blocks == int(mem.kv_capacity_bytes // (mem.kv_bytes_per_token * block_size))
    assert mem.describe()["window_blocks_per_sequence"] == held // block_size
    assert m.kv_window_bytes("bf16", block_size) == pytest.approx(m.kv_window_bytes("bf16") * held / 128)


@pytest.mark.parametrize("sliding, full, blocks", [(18, 18, 9), (30, 6, 45), (20, 16, 12), (12, 13, 9)])
def test_vllms_groups_set_a_windows_blocks_in_the_pool(sliding, full, blocks):
    """vLLM groups layers so every group holds as many (kv_cache_utils.py
    _get_kv_cache_groups_uniform_page_size: the smaller count per kind, or the larger where it is less
    than 1.5 times the smaller, a kind's last group padded); each sliding-window group holds
    cdiv(127, 16) + 1 = 9 blocks a request, which llmsim counts in blocks of the full-attention
    layers: 5 groups of 6 against 6 full layers hold 45; one padded group of 20 against 16, 12."""
    base = load_model("gpt-oss-120b")
    m = base.model_copy(update={"num_hidden_layers": sliding + full,
                                "layer_types": ("sliding_attention",) * sliding + ("full_attention",) * full})
    assert sliding_groups(m, 16).steady == blocks


def test_releases_before_0_5_8_keep_every_layer_for_every_token():
    """server_args.py to 0.5.7 turns the hybrid pool off for gpt-oss whatever its attention; 0.5.8
    only for trtllm_mha (Blackwell's default) or a draft, so Hopper's fa3 runs the hybrid pool."""
    old = apply_backend({"backend": "sglang", "backend_version": "0.5.6"}, "h200")
    assert old["kv_memory"] == {"rule": "sglang", "swa_full_tokens_ratio": 1.0, "piecewise_cuda_graph": False,
                                "draft_reserve_gib": 2, "role_reserve": False, "gpu_tiers": "0.5",
                                "graphs_to_running_requests": False, "decode_activation_to_running_requests": False,
                                "prefill_graphs_off": ["speculative", "dp_attention", "pp", "disaggregated",
                                                       "listed_architecture", "multimodal"],
                                "mla_prefill_graph_tokens": 2048, "mla_prefill_graphs_need_chunk": False}
    assert apply_backend({"backend": "sglang", "backend_version": "0.5.7"}, "h200")["kv_memory"][
        "swa_full_tokens_ratio"] == 1.0
    for version in ("0.5.8", "0.5.8.post1", "0.5.11"):
        assert "swa_full_tokens_ratio" not in apply_backend({"backend": "sglang", "backend_version": version},
                                                            "h200")["kv_memory"]
    mine = apply_backend({"backend": "sglang", "backend_version": "0.5.6",
                          "kv_memory": {"swa_full_tokens_ratio": 0.5}}, "h200")
    assert mine["kv_memory"]["swa_full_tokens_ratio"] == 0.5


def test_a_model_without_sliding_windows_is_untouched():
    m, g = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    a = plan_memory(m, g, 1, "bf16", kv_memory=KvMemory(rule="sglang"))
    b = plan_memory(m, g, 1, "bf16", kv_memory=KvMemory(rule="sglang", swa_full_tokens_ratio=0.3))
    assert a.kv_capacity_bytes == b.kv_capacity_bytes and a.kv_window_bytes == 0


def test_the_windows_are_their_own_line_not_the_reserve():
    """estimate printed SGLang's 30.9 GB of sliding-window KV as 'reserve' (memory neither weights nor KV)."""
    _, _, _, mem = _sglang_plan("h200")
    assert mem.kv_window_bytes > 25e9
    assert mem.reserve_bytes == pytest.approx(mem.total_bytes - mem.weights_bytes - mem.kv_capacity_bytes
                                              - mem.kv_window_bytes)
    assert mem.describe()["kv_window_gb"] == pytest.approx(mem.kv_window_bytes / 1e9)


MISTRAL = """\
name: mistral-7b-sw
model_type: mistral
num_hidden_layers: 32
hidden_size: 4096
num_attention_heads: 32
num_key_value_heads: 8
intermediate_size: 14336
vocab_size: 32000
tie_word_embeddings: false
max_position_embeddings: 32768
sliding_window: 4096
hidden_act: silu
"""


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_a_model_whose_every_layer_slides_is_refused_clearly(cli, tmp_path, backend):
    """No full-attention layer: the pool's token count had no bound (vLLM divided by zero, SGLang gave the
    windows the whole pool and called it 'does not fit')."""
    path = tmp_path / "mistral.yaml"
    path.write_text(MISTRAL)
    r = cli("estimate", "request", "--gpu", "h100-sxm", "--model", path, "--input", "1000", "--output", "100",
            "--backend", backend)
    assert r.code == 2 and "every layer of mistral-7b-sw is sliding-window attention" in r.err
    assert "Traceback" not in r.err


def test_tensorrt_llm_keeps_every_layers_kv_for_every_token():
    """TensorRT-LLM 1.0 to 1.3 sets one attention window (max_seq_len) for every layer unless the launch
    sets kv_cache_config.max_attention_window, so gpt-oss-120b's pool costs all 36 layers a token
    ("kv size is 73728" in a 1.1 start-up log); llmsim set 1,024 windows aside and counted 18 layers a
    token, about twice the tokens TensorRT-LLM has."""
    m, g = load_model("gpt-oss-120b"), load_hardware("h200")
    kv = KvMemory(rule="trtllm")
    mem = plan_memory(m, g, 1, "mxfp4", max_num_batched_tokens=8192, max_num_seqs=1024, block_size=1, kv_memory=kv)
    assert 2 * mem.kv_bytes_per_token == 73728            # bf16: 36 layers × 8 KV heads × 64 × 2 (K, V) × 2 B
    assert mem.kv_capacity_tokens == pytest.approx(_budget(m, g, kv) / 73728, abs=1)
    assert mem.kv_window_bytes == pytest.approx(mem.kv_capacity_bytes)    # the other 18 layers' share
    with pytest.raises(ValueError, match="swa_full_tokens_ratio is read only by rule sglang"):
        KvMemory(rule="trtllm", swa_full_tokens_ratio=0.5)



def _connected(pre: str, dec: str | None, offload: bool) -> dict:
    """A scenario of gpt-oss-120b on vLLM ``pre`` with KV offload, or prefilling for a pool on ``dec``."""
    def pool(name: str, version: str) -> dict:
        engine = {"backend": "vllm", "backend_version": version, "max_model_len": 16384,
                  **({"kv_memory": {"cuda_graph_gib": 0.5}} if version != "0.19.1" else {}),
                  **({"kv_offload": {"host_gb": 100}} if offload else {})}
        return {"name": name, "model": "gpt-oss-120b", "gpu": "h100-sxm", "tp": 2, "replicas": 1, "engine": engine}
    pools = [pool("pre", pre)]
    if dec is not None:
        pools[0]["disaggregation"] = {"decode_pool": "dec", "link": {"preset": "infiniband"}}
        pools.append(pool("dec", dec))
    return {"name": "goss", "classes": [{"name": "all", "pool": "pre"}], "pools": pools,
            "workload": {"arrival": {"type": "poisson", "rate_per_s": 1}, "duration_s": 2,
                         "input_tokens": {"dist": "fixed", "value": 1000},
                         "output_tokens": {"dist": "fixed", "value": 10}}}


@pytest.mark.parametrize("pre, dec, offload, key", [
    ("0.19.1", None, True, "pools[0].engine.kv_offload"),
    ("0.21.0", "0.22.0", False, "pools[0].disaggregation"),
    ("0.22.0", "0.21.0", False, "pools[1].engine.backend_version"),
    ("0.22.0", "0.22.0", False, None),
    ("0.34.0", None, True, None)])
def test_a_connector_that_turns_vllms_windows_off_is_refused(cli, tmp_path, pre, dec, offload, key):
    """vLLM before 0.22.0 turns its hybrid KV cache manager off for any KV connector (KV offload, a
    disaggregated pair's), each sliding-window layer then holding the whole context; llmsim's pool
    holds windows, so such a pool is refused, naming the key, and a pair runs from 0.22.0."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_connected(pre, dec, offload)))
    r = cli("run", path, "--no-plots", "-o", tmp_path / "out")
    if key is None:
        assert r.code == 0, r.err
    else:
        assert r.code == 2 and f"{key}:" in r.err and "hybrid KV cache manager off" in r.err, r.err
