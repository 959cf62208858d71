"""Mixture-of-experts and MLA models: profiles, replica parallelism, memory, step cost.

Published figures are the model cards'; the corpus is the shared data's
``models/moe`` configs, read in place.
"""
from __future__ import annotations

import json
import math

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from simulator.costmodel import CostModel, moe
from simulator.dtypes import BYTES
from simulator.errors import LlmsimError
from simulator.memory import plan_memory
from simulator.parallelism import Parallelism, replica_weight_bytes, tp_whole_weight_bytes, weight_bytes_per_gpu
from simulator.profiles import load_hardware, load_model
from simulator.profiles.model import ModelProfile

PROPS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
H100, B200, GB200 = load_hardware("h100-sxm"), load_hardware("b200"), load_hardware("gb200-nvl72")
MOE = ["mixtral-8x7b", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3", "gpt-oss-120b"]
DENSE = ["llama-2-7b", "llama-3-8b", "llama-3.2-1b", "tinyllama-1.1b", "qwen3-32b"]


# --- parameter counts against the model cards -------------------------------------

# (model, published total, published active, whether the publisher's active
# count leaves the input embedding out: DeepSeek and OpenAI do, Mistral and
# Qwen do not; tolerance on the active count: 1 %, or the card's rounding
# where it is coarser: DeepSeek's "37B" is whole billions (±0.5B), Qwen3-30B-A3B's
# "3.3B" is 3.35B cut to one decimal)
PUBLISHED = [
    ("mixtral-8x7b", 46.7e9, 12.9e9, False, 0.01),
    ("qwen3-235b-a22b", 235e9, 22e9, False, 0.01),
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, False, 0.02),
    ("deepseek-v3", 671e9, 37e9, True, 0.5 / 37),
    ("gpt-oss-120b", 116.83e9, 5.13e9, True, 0.01),
]


@pytest.mark.parametrize("name,total,active,no_embedding,tol", PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_parameter_counts_match_the_model_cards(name, total, active, no_embedding, tol):
    m = load_model(name)
    got_active = m.active_params - (m.embedding_params if no_embedding else 0)
    assert m.num_params == pytest.approx(total, rel=0.01)
    assert got_active == pytest.approx(active, rel=tol)


def test_qwen3_32b_is_the_dense_model_the_card_describes():
    m = load_model("qwen3-32b")
    assert not m.is_moe and m.num_params == m.active_params
    assert m.num_params == pytest.approx(32.8e9, rel=0.01)
    assert m.kv_bytes_per_token() == 2 * 64 * 8 * 128 * 2


def test_mixtral_is_no_longer_priced_as_dense():
    """A Mixtral config used to load as a 14.5 GB dense model that fits one H100."""
    m = load_model("mixtral-8x7b")
    assert m.weight_bytes("bf16") == pytest.approx(93.4e9, rel=0.005)
    with pytest.raises(LlmsimError, match="does not fit"):
        plan_memory(m, H100, 1)


# --- the corpus ------------------------------------------------------------------------

REFUSED = {  # file stem → the key the refusal names
    "Qwen--Qwen3.5-397B-A17B": "layer_types_counts",
    "zai-org--GLM-5": "index_n_heads",
    "zai-org--GLM-5-FP8": "index_n_heads",
}


def test_every_corpus_config_loads_or_is_refused_with_its_key(shared_data):
    files = sorted((shared_data / "models" / "moe").glob("*.yaml"))
    assert len(files) == 19
    for f in files:
        if f.stem in REFUSED:
            with pytest.raises(LlmsimError, match="cannot model") as e:
                load_model(str(f))
            assert REFUSED[f.stem] in str(e.value) and str(f) in str(e.value)
            continue
        m = load_model(str(f))
        assert m.is_moe, f.name
        assert 0 < m.active_params < m.num_params
        assert m.kv_bytes_per_token() > 0


def test_fp8_and_bf16_corpus_twins_describe_the_same_network(shared_data):
    d = shared_data / "models" / "moe"
    for base in ("Qwen--Qwen3-30B-A3B", "Qwen--Qwen3-235B-A22B"):
        a, b = load_model(str(d / f"{base}.yaml")), load_model(str(d / f"{base}-FP8.yaml"))
        assert a.num_params == b.num_params and b.checkpoint_dtype == "fp8_block" and a.checkpoint_dtype is None


def test_builtins_match_their_corpus_configs(shared_data):
    d = shared_data / "models" / "moe"
    pairs = {"mixtral-8x7b": "mistralai--Mixtral-8x7B-v0.1", "qwen3-30b-a3b": "Qwen--Qwen3-30B-A3B",
             "qwen3-235b-a22b": "Qwen--Qwen3-235B-A22B", "deepseek-v3": "deepseek-ai--DeepSeek-V3",
             "gpt-oss-120b": "openai--gpt-oss-120b"}
    for builtin, corpus in pairs.items():
        a, b = load_model(builtin), load_model(str(d / f"{corpus}.yaml"))
        # gpt-oss-120b's built-in adds the attention biases the corpus copy omits.
        assert a.num_params == pytest.approx(b.num_params, rel=1e-4), builtin
        assert a.kv_bytes_per_token() == b.kv_bytes_per_token() and a.kv_window_bytes() == b.kv_window_bytes()


# --- HF keys: modelled, ignored, refused -------------------------------------------------

def _config(tmp_path, **keys):
    base = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 1024,
            "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 2048,
            "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2, "router_aux_loss_coef": 0.02,
            "rope_theta": 1e6, "torch_dtype": "bfloat16", "output_router_logits": False}
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**base, **keys}))
    return p


def test_a_config_json_moe_key_is_read_not_dropped(tmp_path):
    m = load_model(str(_config(tmp_path)))
    assert m.is_moe and m.num_experts == 8 and m.topk == 2


@pytest.mark.parametrize("key,value", [("index_topk", 2048), ("attention_chunk_size", 8192),
                                       ("linear_num_value_heads", 32), ("num_expert_groups_x", 4)])
def test_an_architecture_key_llmsim_does_not_model_is_refused(tmp_path, key, value):
    p = _config(tmp_path, **{key: value})
    with pytest.raises(LlmsimError) as e:
        load_model(str(p))
    assert key in str(e.value) and str(p) in str(e.value)


def test_sliding_windows_are_read_only_where_the_config_says_which_layers_slide(tmp_path):
    dense = {"num_local_experts": None, "num_experts_per_tok": None, "model_type": "qwen2", "sliding_window": 4096,
             "max_window_layers": 28}
    assert load_model(str(_config(tmp_path, **dense, use_sliding_window=False))).num_sliding_layers == 0
    for keys, named in (({**dense, "use_sliding_window": True}, "max_window_layers"),
                        ({**dense, "model_type": "gemma2", "max_window_layers": None}, "sliding_window")):
        with pytest.raises(LlmsimError, match="cannot model") as e:
            load_model(str(_config(tmp_path, **keys)))
        assert named in str(e.value)


def test_two_spellings_must_agree(tmp_path):
    with pytest.raises(LlmsimError, match="contradicts"):
        load_model(str(_config(tmp_path, n_routed_experts=16)))


def test_layout_keys_say_which_layers_are_moe():
    base = dict(num_hidden_layers=12, hidden_size=64, num_attention_heads=4, intermediate_size=256,
                vocab_size=100, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32)
    assert ModelProfile(**base, first_k_dense_replace=3).num_moe_layers == 9
    assert ModelProfile(**base, first_k_dense_replace=2, moe_layer_freq=2).num_moe_layers == 5
    assert ModelProfile(**base, decoder_sparse_step=3).num_moe_layers == 4
    assert ModelProfile(**base, mlp_only_layers=(0, 11)).num_moe_layers == 10
    assert ModelProfile(**base, interleave_moe_layer_step=2).num_moe_layers == 6
    with pytest.raises(ValueError, match="num_experts 8 needs it"):
        ModelProfile(**{**base, "num_experts_per_tok": None})


# --- one expert, top-1: the dense model, op for op ------------------------------------------

def _one_expert(m: ModelProfile) -> ModelProfile:
    return ModelProfile.model_validate({**m.model_dump(), "name": f"{m.name}-moe1", "num_experts": 1,
                                        "num_experts_per_tok": 1})


steps = st.tuples(st.lists(st.tuples(st.integers(1, 4096), st.integers(0, 8192)), max_size=3),
                  st.integers(0, 256), st.integers(1, 4096))


@PROPS
@given(name=st.sampled_from(DENSE), tp=st.sampled_from([1, 2, 4, 8]), step=steps,
       wd=st.sampled_from(["bf16", "fp8"]))
def test_one_expert_top1_is_the_dense_model(name, tp, step, wd):
    dense = load_model(name)
    if dense.num_attention_heads % tp or dense.kv_heads % tp and tp > dense.kv_heads:
        tp = 1
    moe = _one_expert(dense)
    assert moe.is_moe and moe.num_params == dense.num_params and moe.active_params == dense.active_params
    assert moe.weight_bytes(wd) == dense.weight_bytes(wd)
    assert moe.kv_bytes_per_token() == dense.kv_bytes_per_token()
    # Without a MoE kernel calibration the routed experts are priced with the
    # dense GEMM calibration: only then is one expert the dense MLP, op for op.
    gpu = H100.model_copy(update={"calibration": H100.calibration.model_copy(update={"moe": {}})})
    a, b = CostModel(dense, gpu, tp, wd), CostModel(moe, gpu, tp, wd)
    assert b.ops is not None and a.ops is None   # two code paths, one answer
    chunks, batch, ctx = step
    t_dense = a.step_time(chunks, batch, float(batch * ctx))
    assert b.step_time(chunks, batch, float(batch * ctx)) == pytest.approx(t_dense, rel=1e-9, abs=1e-15)
    assert b.decode_coefficients(max(batch, 1)) == pytest.approx(a.decode_coefficients(max(batch, 1)), rel=1e-9)
    ma, mb = plan_memory(dense, gpu, 8, wd), plan_memory(moe, gpu, 8, wd)
    assert mb.num_blocks == ma.num_blocks


# --- routed experts: weights read per step -------------------------------------------------

def _same_row_block(p, shape, lo: int, hi: int) -> bool:
    """Whether a row-padding kernel runs ``lo`` and ``hi`` tokens in one row block (always, without row padding)."""
    if not getattr(p, "row_padding", False):
        return True
    blocks = [float(moe.row_block(t * shape.topk, shape.local_experts, p.token_tiles)) for t in (lo, hi)]
    return blocks[0] == blocks[1]


@PROPS
@given(name=st.sampled_from(MOE), t1=st.integers(1, 20000), t2=st.integers(1, 20000))
@example(name="deepseek-v3", t1=315, t2=513)   # B200's token tile switches from 8 to 16 rows between them
@example(name="deepseek-v3", t1=520, t2=700)   # one tile: time must grow
def test_expert_weights_read_grow_with_tokens_and_saturate(name, t1, t2):
    m = load_model(name)
    tp = 8 if name in ("deepseek-v3", "qwen3-235b-a22b") else 2
    ops = CostModel(m, B200, tp, "fp8").ops
    lo, hi = sorted((t1, t2))
    assert ops.flops_bytes(lo)[1] <= ops.flops_bytes(hi)[1] * (1 + 1e-12)
    # Time grows with tokens while the kernel runs the same row block. A
    # kernel that picks a taller token tile for more tokens (FlashInfer's
    # TRT-LLM-gen on B200) may get faster across the switch, as the measured
    # kernels do (moe.csv.gz: B200 DeepSeek-V3 layer, moe_tp 1, 2.08 ms at
    # 512 tokens, 1.93 ms at 768), so across blocks only the bytes must grow.
    p, shape = ops.moe_params, ops.moe
    if _same_row_block(p, shape, lo, hi):
        assert ops.routed_time(lo) <= ops.routed_time(hi) * (1 + 1e-12)
    # the experts' weights, their biases apart (gpt-oss's: neither read nor priced)
    matrices = m.num_moe_layers * (m.num_experts or 0) * m.expert_params
    experts = matrices * BYTES["fp8"] / tp
    rest = (m.linear_params - matrices - m.expert_biases) / tp
    saturated = ops.flops_bytes(10**7)[1]
    assert saturated == pytest.approx(rest + experts, rel=1e-6)
    assert ops.flops_bytes(hi)[1] <= saturated * (1 + 1e-12)


# --- ep and dp conserve memory ----------------------------------------------------------------

def _layouts(m: ModelProfile, domain: int):
    out = []
    for tp in (1, 2, 4, 8):
        for dp in (1, 2, 4, 8, 16):
            for ep in (1, 2, 4, 8, 16, 32, 64):
                par = Parallelism(tp, dp, ep)
                try:
                    par.check(m, GB200 if domain == 72 else H100)
                except LlmsimError:
                    continue
                out.append(par)
    return out


@PROPS
@given(data=st.data(), name=st.sampled_from(MOE), wd=st.sampled_from(["bf16", "fp8", "nvfp4"]))
def test_ep_and_dp_conserve_weights(data, name, wd):
    m = load_model(name)
    par = data.draw(st.sampled_from(_layouts(m, 72)))
    rest, experts = weight_bytes_per_gpu(m, par, wd)
    # Summed over the replica: every expert once (a down-projection bias once per width shard), the
    # split rest once per dp rank, and what a GPU keeps whole (routers, MLA down-projections) once per GPU.
    total = (rest + experts) * par.gpus
    counted, held = tp_whole_weight_bytes(m, par.tp, wd)
    split = m.weight_bytes(wd) - m.expert_weight_bytes(wd) - counted
    expected = par.dp * split + par.gpus * held + m.expert_weight_bytes(wd, par.moe_tp)
    assert total == pytest.approx(expected, rel=1e-12)
    assert replica_weight_bytes(m, par, wd) == pytest.approx(expected, rel=1e-12)
    # ep only moves experts between GPUs, and keeps fewer copies of their down-projection biases.
    flat = Parallelism(par.tp, par.dp, 1)
    if flat.moe_tp <= 72 and m.expert_ffn % flat.moe_tp == 0:
        copies = m.expert_weight_bytes(wd, flat.moe_tp) - m.expert_weight_bytes(wd, par.moe_tp)
        assert copies == 2.0 * m.num_moe_layers * m.num_experts * m.expert_down_bias_params * (flat.moe_tp - par.moe_tp)
        assert replica_weight_bytes(m, flat, wd) == pytest.approx(total + copies, rel=1e-12)


@PROPS
@given(dp=st.sampled_from([1, 2, 4, 8]), tp=st.sampled_from([1, 2, 4, 8]))
def test_mla_kv_is_replicated_over_tp_and_split_by_dp(dp, tp):
    m = load_model("deepseek-v3")
    if tp * dp != 8:   # fewer B200s do not hold DeepSeek-V3 in nvfp4
        return
    ep = tp * dp
    a = plan_memory(m, load_hardware("b200"), tp, "nvfp4", dp=dp, ep=ep, max_num_seqs=64)
    assert a.kv_bytes_per_token == tp * m.kv_bytes_per_token()
    assert a.total_bytes == pytest.approx(tp * dp * B200.hbm_bytes)


@PROPS
@given(L=st.integers(1, 80), r=st.integers(1, 1024), rope=st.integers(1, 128), heads=st.sampled_from([8, 16, 128]),
       kv=st.sampled_from(["bf16", "fp8"]))
def test_mla_kv_bytes_are_the_latent_and_rotary_key(L, r, rope, heads, kv):
    m = ModelProfile(num_hidden_layers=L, hidden_size=1024, num_attention_heads=heads, intermediate_size=2048,
                     vocab_size=1000, kv_lora_rank=r, qk_rope_head_dim=rope, qk_nope_head_dim=64, v_head_dim=64)
    assert m.kv_bytes_per_token(kv) == L * (r + rope) * (2 if kv == "bf16" else 1)


def test_deepseek_v3_kv_per_token():
    assert load_model("deepseek-v3").kv_bytes_per_token("bf16") == 61 * (512 + 64) * 2 == 70272


def test_sliding_window_layers_hold_at_most_the_window():
    m = load_model("gpt-oss-120b")
    assert m.num_sliding_layers == 18
    assert m.kv_bytes_per_token() == 18 * 2 * 8 * 64 * 2
    assert m.kv_window_bytes() == 18 * 2 * 8 * 64 * 2 * 128
    cm = CostModel(m, B200, 1, "mxfp4")
    # Decode attention grows only with the 18 full layers' context.
    full = CostModel(m.model_copy(update={"layer_types": None, "sliding_window": None}), B200, 1, "mxfp4")
    assert cm.decode_coefficients(8)[1] == pytest.approx(full.decode_coefficients(8)[1] * 18 / 36, rel=1e-12)
    assert cm.step_time([(4096, 60000)]) < full.step_time([(4096, 60000)])


# --- replica parallelism in the step cost -------------------------------------------------------

def test_dp_attention_splits_the_decode_batch():
    m = load_model("mixtral-8x7b")
    one, dp2 = CostModel(m, H100, 2, "bf16"), CostModel(m, H100, 2, "bf16", dp=2, ep=2)
    assert dp2.decode_coefficients(64)[1] == pytest.approx(one.decode_coefficients(64)[1] / 2, rel=1e-12)
    # The busiest rank sets the step: 3 sequences on 2 ranks are 2 on one.
    assert dp2.decode_attention_time(3, 3000.0) == pytest.approx(one.decode_attention_time(2, 2000.0), rel=1e-12)
    assert dp2.gpus == 4 and dp2.par.moe_tp == 2
    # MLA: every TP rank reads the whole latent, a DP rank only its own sequences'.
    ds = load_model("deepseek-v3")
    tp8, dp8 = CostModel(ds, B200, 8, "nvfp4"), CostModel(ds, B200, 1, "nvfp4", dp=8, ep=8)
    assert dp8.decode_coefficients(64)[1] < tp8.decode_coefficients(64)[1] / 2


def test_expert_alltoall_crosses_the_scale_out_link_beyond_a_domain():
    m = load_model("deepseek-v3")
    inside = CostModel(m, GB200, 1, "nvfp4", dp=32, ep=32).ops
    across = CostModel(m, H100, 1, "fp8", dp=32, ep=32).ops
    assert across.alltoall(4096) > inside.alltoall(4096) > 0


def test_mtp_draft_speeds_up_low_batch_decode():
    from simulator.costmodel.speculative import SpeculativeSpec, speculative_setup
    m = load_model("deepseek-v3")
    h200 = load_hardware("h200")
    cm = CostModel(m, h200, 8, "fp8")
    mem = plan_memory(m, h200, 8, "fp8")
    scm, mem2 = speculative_setup(cm, mem, SpeculativeSpec(draft_model="mtp", k=1, acceptance_rate=0.85))
    assert scm.step_time((), 1, 2048.0) < cm.step_time((), 1, 2048.0)
    assert mem2.weights_bytes - mem.weights_bytes == pytest.approx(m.mtp_params * 1.0, rel=0.02)
    with pytest.raises(LlmsimError, match="next-token-prediction"):
        speculative_setup(CostModel(load_model("mixtral-8x7b"), h200, 2), plan_memory(load_model("mixtral-8x7b"),
                          h200, 2), SpeculativeSpec(draft_model="mtp", k=1, acceptance_rate=0.8))


_DSV3_H200 = None


def _dsv3_h200():
    """DeepSeek-V3 fp8 on 8 H200 with MTP (k = 1, α = 0.85), built once."""
    global _DSV3_H200
    if _DSV3_H200 is None:
        from simulator.costmodel.speculative import SpeculativeSpec, speculative_cost_model
        cm = CostModel(load_model("deepseek-v3"), load_hardware("h200"), 8, "fp8")
        _DSV3_H200 = cm, speculative_cost_model(cm, SpeculativeSpec(draft_model="mtp", k=1, acceptance_rate=0.85))
    return _DSV3_H200


def test_mla_verification_of_one_query_is_a_decode():
    """Verification runs on the absorbed decode kernel: one query per sequence
    prices exactly as a decode's attention (the latent read once per sequence)."""
    cm, _ = _dsv3_h200()
    assert cm.ops.extend_parts(1) == pytest.approx(cm.ops.decode_parts(), rel=1e-12)
    rate2, per_seq2, fixed2 = cm.ops.extend_parts(2)
    rate = cm.ops.decode_parts()[0]     # two queries: twice the FLOPs, the same bytes
    assert rate <= rate2 <= 2.0 * rate and (per_seq2, fixed2) == pytest.approx(cm.ops.decode_parts()[1:])


@settings(max_examples=25, deadline=None)
@given(batch=st.integers(1, 512), context=st.integers(16, 32_768))
def test_mtp_verification_costs_less_than_two_decode_steps(batch, context):
    """k + 1 = 2 tokens per sequence in one pass cost less than two plain decode
    steps (the weights and the latent cache are read once), so at DeepSeek's
    published α ≈ 0.85 a token costs less than without MTP at every load."""
    cm, scm = _dsv3_h200()
    s = float(batch * context)
    plain = cm.step_time((), batch, s)
    assert scm.verify_time(batch, s) < 2.0 * plain
    assert scm.step_time((), batch, s) < plain


# --- bad input through the CLI: one line, exit 2 --------------------------------------------------

def _scenario(tmp_path, model="mixtral-8x7b", gpu="h100-sxm", tp=2, dp=1, ep=1, wd="bf16"):
    pool = {"name": "main", "model": model, "gpu": gpu, "tp": tp, "dp": dp, "ep": ep,
            "engine": {"max_num_seqs": 32, "max_num_batched_tokens": 1024, "weight_dtype": wd}}
    workload = {"num_requests": 50, "arrival": {"type": "poisson", "rate_per_s": 5},
                "input_tokens": {"dist": "uniform", "min": 16, "max": 500},
                "output_tokens": {"dist": "uniform", "min": 1, "max": 50}}
    p = tmp_path / "moe.yaml"
    p.write_text(yaml.safe_dump({"name": "moe", "workload": workload, "pools": [pool]}))
    return p


def _one_error(r, *fragments):
    assert r.code == 2, r.out + r.err
    assert "Traceback" not in r.err
    lines = [x for x in r.err.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), r.err
    for f in fragments:
        assert f in r.err, (f, r.err)


def test_ep_not_dividing_tp_dp_is_one_error(tmp_path, cli):
    p = _scenario(tmp_path, tp=2, dp=1, ep=4)
    _one_error(cli("check", p), "pools[0].ep", "ep=4 must divide", str(p))


def test_ep_on_a_dense_model_is_one_error(tmp_path, cli):
    p = _scenario(tmp_path, model="llama-3-8b", tp=1, dp=2, ep=2)
    _one_error(cli("check", p), "pools[0].ep", "dense")


def test_replica_beyond_the_nvlink_domain_is_one_error(tmp_path, cli):
    p = _scenario(tmp_path, tp=8, dp=2, ep=1)
    _one_error(cli("check", p), "pools[0].ep", "NVLink domain")


def test_fp4_on_a_gpu_without_it_is_one_error(tmp_path, cli):
    p = _scenario(tmp_path, wd="nvfp4")
    _one_error(cli("check", p), "pools[0].engine.weight_dtype", "FP4 tensor cores", "h100-sxm")
    _one_error(cli("estimate", "request", "--gpu", "a100-sxm-80gb", "--model", "gpt-oss-120b", "--tp", "4",
                   "--weight-dtype", "nvfp4", "--input", "10", "--output", "10"), "FP4 tensor cores")


def test_mxfp4_without_fp4_units_runs_weight_only():
    """gpt-oss's MXFP4 experts on Hopper run W4A16 (bf16 compute, the
    measured Hopper kernels); on Blackwell W4A8 unless the stack keeps bf16
    activations (vLLM's default). Its other linear layers stay bf16."""
    from simulator.profiles import load_hardware

    h100 = CostModel(load_model("gpt-oss-120b"), load_hardware("h100-sxm"), 1, "mxfp4")
    assert h100.ops.fmt == "w4a16_mxfp4" and h100.peak_linear == load_hardware("h100-sxm").peak_flops("bf16")
    b200 = CostModel(load_model("gpt-oss-120b"), B200, 1, "mxfp4")
    assert b200.ops.fmt == "w4a8" and b200.peak_linear == B200.peak_flops("bf16")
    assert CostModel(load_model("gpt-oss-120b"), B200, 1, "mxfp4", mxfp4_activation="bf16").ops.fmt == "w4a16_mxfp4"
    bf16 = CostModel(load_model("gpt-oss-120b"), load_hardware("h100-sxm"), 2, "bf16")
    assert h100.step_time([(1, 1000)]) < bf16.step_time([(1, 1000)]) * 2   # a quarter of the bytes on half the GPUs


def test_each_backend_runs_the_mxfp4_kernel_its_stack_picks_on_blackwell():
    """vLLM keeps BF16 activations for MXFP4 experts on SM100 unless an
    environment variable asks for MXFP8 (get_mxfp4_backend); TensorRT-LLM
    runs W4A8. A key set beside the backend still wins."""
    from simulator.profiles.backend import apply_backend

    assert apply_backend({"backend": "vllm"}, "b200")["mxfp4_activation"] == "bf16"
    assert apply_backend({"backend": "trtllm"}, "b200")["mxfp4_activation"] == "mxfp8"
    assert apply_backend({"backend": "vllm", "mxfp4_activation": "mxfp8"}, "b200")["mxfp4_activation"] == "mxfp8"


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 20000), st.sampled_from(["h100-sxm", "b200"]), st.sampled_from([1, 2, 4, 8]))
def test_mxfp4_pool_differs_from_bf16_only_in_its_experts(tokens, gpu_name, tp):
    """For any token count, GPU and TP, an mxfp4 pool's linear layers other
    than the routed experts cost exactly what a bf16 pool's do."""
    from simulator.profiles import load_hardware

    m, gpu = load_model("gpt-oss-120b"), load_hardware(gpu_name)
    four, sixteen = CostModel(m, gpu, tp, "mxfp4"), CostModel(m, gpu, tp, "bf16")
    rest = [cm.linear_time(tokens) - cm.ops.routed_time(tokens) for cm in (four, sixteen)]
    assert rest[0] == pytest.approx(rest[1], rel=1e-12)
    assert four.lm_head_time(tokens) == sixteen.lm_head_time(tokens)
    # The experts themselves run another kernel: at a few tokens its fixed costs, not the
    # quarter of the bytes, can make it the slower one (B200's W4A8 fit at one token).
    assert four.ops.routed_time(tokens) != sixteen.ops.routed_time(tokens)


def test_mxfp4_quantises_the_experts_only():
    """MXFP4 is a fused-MoE format: attention projections, embeddings and LM
    head keep 16-bit weights, so they cost what they cost in a bf16 pool,
    and only the routed experts' bytes shrink."""
    m = load_model("gpt-oss-120b")
    four, sixteen = CostModel(m, B200, 1, "mxfp4"), CostModel(m, B200, 1, "bf16")
    assert four.w_bytes == sixteen.w_bytes == 2.0 and four.a_bytes == sixteen.a_bytes
    assert four.ops._gemms(64, four.ops.attn_gemms) == sixteen.ops._gemms(64, sixteen.ops.attn_gemms)
    experts = m.num_moe_layers * m.num_experts * m.expert_params
    assert m.weight_bytes("bf16") - m.weight_bytes("mxfp4") == pytest.approx(experts * (2.0 - 0.5 - 1 / 32))
    with pytest.raises(LlmsimError, match="experts"):
        CostModel(load_model("llama-3.1-8b"), B200, 1, "mxfp4")


def test_unknown_moe_layout_key_is_one_error(tmp_path, cli):
    p = tmp_path / "typo.yaml"
    p.write_text(load_model("mixtral-8x7b").model_dump_json().replace('"num_experts"', '"num_expert"'))
    p = p.rename(tmp_path / "typo.json")
    _one_error(cli("estimate", "request", "--gpu", "h100-sxm", "--model", p, "--input", "10", "--output", "10"),
               "num_expert", str(p))
    y = tmp_path / "own.yaml"
    y.write_text((load_model("qwen3-30b-a3b").model_dump_json()).replace('"decoder_sparse_step"',
                                                                          '"decoder_sparse_stride"'))
    _one_error(cli("estimate", "step", "--gpu", "h100-sxm", "--model", y, "--decode-batch", "1"),
               "decoder_sparse_stride")


def test_unmodelled_architecture_is_one_error(shared_data, cli):
    f = shared_data / "models" / "moe" / "zai-org--GLM-5.yaml"
    _one_error(cli("estimate", "request", "--gpu", "b200", "--model", f, "--input", "10", "--output", "10"),
               "index_n_heads", "cannot model")


def test_estimate_shows_total_and_active_params(cli):
    r = cli("estimate", "request", "--gpu", "b200", "--model", "deepseek-v3", "--tp", "1", "--dp", "8", "--ep", "8",
            "--input", "1000", "--output", "100", "--json")      # its checkpoint's fp8 (no stack makes it nvfp4)
    out = r.json()
    assert out["params_b"] == pytest.approx(671.03, abs=0.01) and out["active_params_b"] == pytest.approx(37.55, abs=0.01)
    assert out["kv_bytes_per_token"] == 70272 and out["gpus"] == 8 and "MLA" in out["layout"]
    assert math.isfinite(out["tpot_ms"]) and out["tpot_ms"] > 0


@PROPS
@given(chunks=st.lists(st.tuples(st.integers(1, 8192), st.integers(0, 100_000)), min_size=1, max_size=4),
       tp=st.sampled_from([1, 8]))
def test_mla_prefill_prices_the_kernels_flops_and_bytes(chunks, tp):
    """The step's MLA prefill reads mla_prefill_flops_bytes' coefficients once;
    it must price any chunks as that function does."""
    from simulator.costmodel.mla import mla_prefill_flops_bytes
    from simulator.costmodel.roofline import blend
    cm = CostModel(load_model("deepseek-v3"), B200, tp, "nvfp4")
    ops, p = cm.ops, cm.ops.mla_prefill
    f = sum(mla_prefill_flops_bytes(n, c, ops.mla, cm.kv_bytes)[0] for n, c in chunks)
    b = sum(mla_prefill_flops_bytes(n, c, ops.mla, cm.kv_bytes)[1] for n, c in chunks)
    span = sum(n + c for n, c in chunks)
    heads = ops.mla.num_heads
    kv_up = cm._gemm(span, heads * (ops.mla.qk_nope_head_dim + ops.mla.v_head_dim), ops.mla.kv_lora_rank, cm.w_bytes)
    expected = blend(f / (cm.peak_attn * p.eta_compute), b / (cm.hbm_bw * p.eta_memory), p.sharpness)
    assert ops._mla_prefill(chunks) == pytest.approx(expected + p.fixed_us * 1e-6 + kv_up, rel=1e-9)


def test_fp8_of_a_block_fp8_checkpoint_runs_the_block_kernels(shared_data):
    """DeepSeek-V3 and Qwen3-FP8 ship block-scaled fp8 (weight_block_size):
    weight_dtype fp8 runs vLLM's block-fp8 expert kernels; the same pool on a
    16-bit checkpoint quantises online, per tensor, a measured-slower kernel."""
    from simulator.costmodel.layout import gemm_format

    fp8 = load_model(str(shared_data / "models" / "moe" / "Qwen--Qwen3-235B-A22B-FP8.yaml"))
    bf16 = load_model(str(shared_data / "models" / "moe" / "Qwen--Qwen3-235B-A22B.yaml"))
    assert fp8.checkpoint_dtype == "fp8_block" and bf16.checkpoint_dtype is None
    assert load_model("deepseek-v3").checkpoint_dtype == "fp8_block"
    assert gemm_format("fp8", fp8.checkpoint_dtype) == "fp8_block" and gemm_format("fp8", None) == "fp8"
    assert gemm_format("bf16", fp8.checkpoint_dtype) == "bf16"
    block = CostModel(fp8, H100, 8, "fp8", ep=8)
    tensor = CostModel(bf16, H100, 8, "fp8", ep=8)
    assert block.ops.fmt == "fp8_block" and tensor.ops.fmt == "fp8"
    assert block.step_time((), 64, 64 * 2000.0) != tensor.step_time((), 64, 64 * 2000.0)
