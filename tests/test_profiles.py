"""Model and GPU profiles: derived numbers, loading, and bad input."""
from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import LlmsimError, ModelProfile, load_hardware, load_model
from simulator.profiles import list_builtin
from simulator.profiles.loader import builtin_dir

KIB = 1024

# Total parameters on each built-in model's card, in billions (MoE: every
# expert; tests/test_moe_models.py checks their active counts).
CARD_BILLIONS = {
    "llama-2-7b": 6.74, "llama-2-13b": 13.0, "llama-2-70b": 69.0, "llama-3-8b": 8.03, "llama-3.1-8b": 8.03,
    "llama-3-70b": 70.6, "llama-3.1-70b": 70.6, "llama-3.2-1b": 1.24, "llama-3.1-405b": 405.0,
    "tinyllama-1.1b": 1.10,  # 1,100,048,384 on the model card
    "qwen3-32b": 32.8, "mixtral-8x7b": 46.7, "qwen3-30b-a3b": 30.5, "qwen3-235b-a22b": 235.0,
    "qwen3-235b-a22b-fp8": 235.0, "deepseek-v3": 671.0, "gpt-oss-120b": 116.83,
}


@pytest.mark.parametrize("name", list_builtin("model_profiles"))
def test_every_builtin_model_loads_with_its_card_parameter_count(name):
    """Every shipped model is counted as its model card counts it (the
    weights' memory and the GEMMs follow from the same shapes), so a new one
    cannot ship without that check."""
    assert name in CARD_BILLIONS, f"{name}: add its model card's parameter count to CARD_BILLIONS"
    m = load_model(name)
    assert m.name == name
    assert m.num_params / 1e9 == pytest.approx(CARD_BILLIONS[name], rel=0.005)


@pytest.mark.parametrize("name", list_builtin("hardware_profiles"))
def test_every_builtin_gpu_loads(name):
    g = load_hardware(name)
    assert g.name == name
    assert g.hbm_bytes > 0 and g.hbm_bandwidth > 0 and g.peak_flops("bf16") > 0
    assert g.calibration.status in ("calibrated", "transferred", "roofline")
    if g.calibration.status == "transferred":
        assert g.calibration.transferred_from, f"{name}: a transferred calibration must say from where"


# --- KV cache bytes -------------------------------------------------------------

@pytest.mark.parametrize("name, kib", [
    ("llama-3-8b", 128), ("llama-3.1-8b", 128),
    ("llama-2-70b", 320), ("llama-3-70b", 320), ("llama-3.1-70b", 320), ("llama-3.1-405b", 504),
    ("llama-2-7b", 512), ("llama-2-13b", 800), ("llama-3.2-1b", 32), ("tinyllama-1.1b", 22),
])
def test_kv_bytes_per_token(name, kib):
    m = load_model(name)
    assert m.kv_bytes_per_token() == kib * KIB
    assert m.kv_bytes_per_token("bf16") == m.kv_bytes_per_token("fp16") == kib * KIB
    assert m.kv_bytes_per_token("fp8") == kib * KIB / 2


@st.composite
def shapes(draw):
    kv = draw(st.integers(1, 16))
    group = draw(st.integers(1, 8))
    d = draw(st.sampled_from([32, 64, 80, 96, 128, 256]))
    explicit_head_dim = draw(st.booleans())
    heads = kv * group
    return dict(
        num_hidden_layers=draw(st.integers(1, 128)),
        num_attention_heads=heads,
        num_key_value_heads=kv,
        # With no head_dim key the head dim is hidden / heads (as transformers does).
        hidden_size=heads * d if not explicit_head_dim else draw(st.integers(1, 64)) * 64,
        head_dim=d if explicit_head_dim else None,
        intermediate_size=draw(st.integers(1, 64)) * 256,
        vocab_size=draw(st.integers(1000, 200_000)),
    ), d


@settings(max_examples=60, deadline=None)
@given(shape=shapes(), dtype=st.sampled_from(["bf16", "fp16", "fp8"]))
def test_kv_bytes_scale_with_layers_kv_heads_head_dim(shape, dtype):
    kw, d = shape
    m = ModelProfile(**kw)
    elem = {"bf16": 2, "fp16": 2, "fp8": 1}[dtype]
    L, kv = kw["num_hidden_layers"], kw["num_key_value_heads"]
    assert m.dim_head == d
    assert m.kv_bytes_per_token(dtype) == 2 * L * kv * d * elem
    # Exactly linear in each factor: double one, the bytes double.
    assert ModelProfile(**{**kw, "num_hidden_layers": 2 * L}).kv_bytes_per_token(dtype) == 2 * m.kv_bytes_per_token(dtype)
    twice_kv = {**kw, "num_key_value_heads": 2 * kv, "num_attention_heads": 2 * kw["num_attention_heads"]}
    if kw["head_dim"] is None:
        twice_kv["head_dim"] = d
    assert ModelProfile(**twice_kv).kv_bytes_per_token(dtype) == 2 * m.kv_bytes_per_token(dtype)
    assert ModelProfile(**{**kw, "head_dim": 2 * d}).kv_bytes_per_token(dtype) == 2 * m.kv_bytes_per_token(dtype)
    # The query heads, hidden and FFN sizes do not enter.
    assert ModelProfile(**{**kw, "intermediate_size": kw["intermediate_size"] * 3, "head_dim": d}
                        ).kv_bytes_per_token(dtype) == m.kv_bytes_per_token(dtype)


def test_mha_model_defaults_kv_heads_to_heads():
    m = ModelProfile(num_hidden_layers=2, hidden_size=256, num_attention_heads=4,
                     intermediate_size=512, vocab_size=1000)
    assert m.kv_heads == 4 and m.dim_head == 64
    assert m.kv_bytes_per_token() == 2 * 2 * 4 * 64 * 2


# --- parameter counts -------------------------------------------------------------

def test_weight_bytes_by_dtype():
    m = load_model("llama-3-8b")
    assert m.weight_bytes("bf16") == 2 * m.num_params
    linear = m.num_hidden_layers * m.linear_params_per_layer
    # Quantisation applies to the transformer's linear layers only.
    assert m.weight_bytes("fp8") == m.weight_bytes("int8") == m.weight_bytes("bf16") - linear
    assert m.weight_bytes("int4") == m.weight_bytes("bf16") - 1.5 * linear


def test_tied_embeddings_count_once():
    m = load_model("llama-3.2-1b")
    assert m.tie_word_embeddings and m.lm_head_params == 0
    untied = m.model_copy(update={"tie_word_embeddings": False})
    assert untied.num_params == m.num_params + m.vocab_size * m.hidden_size


def test_what_if_copy_recomputes_derived_numbers():
    """A notebook what-if (``model_copy(update=...)``) must not keep the
    original's derived numbers."""
    m = load_model("llama-3-8b")
    _ = m.num_params, m.weight_bytes(), m.kv_bytes_per_token()
    deeper = m.model_copy(update={"num_hidden_layers": 64})
    assert deeper.kv_bytes_per_token() == 2 * m.kv_bytes_per_token()
    assert deeper.num_params == m.num_params + 32 * (m.linear_params_per_layer + 2 * m.hidden_size)
    assert deeper.weight_bytes() > m.weight_bytes()


# --- Hugging Face config.json ------------------------------------------------------

def test_hf_config_json_loads_as_is(tmp_path, hf_llama3_8b_config):
    d = tmp_path / "Meta-Llama-3-8B"
    d.mkdir()
    cfg = d / "config.json"
    cfg.write_text(json.dumps({**hf_llama3_8b_config,
                               "rope_scaling": {"factor": 8.0, "rope_type": "llama3",
                                                "low_freq_factor": 1.0, "high_freq_factor": 4.0}}))
    m = load_model(str(cfg))
    ref = load_model("llama-3-8b")
    assert m.name == "Meta-Llama-3-8B"
    assert m.num_params == ref.num_params
    assert m.kv_bytes_per_token() == ref.kv_bytes_per_token() == 131072
    assert m.max_position_embeddings == 8192


def test_hf_config_with_no_kv_heads(tmp_path, hf_llama3_8b_config):
    cfg = {k: v for k, v in hf_llama3_8b_config.items() if k != "num_key_value_heads"}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    m = load_model(str(p))
    assert m.model_type == "llama" and m.kv_heads == 32


@pytest.mark.parametrize("text_config", [False, True])
@pytest.mark.parametrize("model_type", ["absent", None])
def test_a_config_json_without_model_type_is_refused_not_run_as_llama(tmp_path, hf_llama3_8b_config, model_type,
                                                                     text_config):
    """A config.json without model_type (or with null) ran as Llama, its family's MLP, router and stack defaults
    taken unsaid; transformers' AutoConfig, which vLLM's get_config calls, refuses it."""
    cfg = {k: v for k, v in hf_llama3_8b_config.items() if k != "model_type"}
    if model_type is None:
        cfg["model_type"] = None
    if text_config:
        cfg = {"architectures": ["LlavaForConditionalGeneration"], "model_type": "llava", "text_config": cfg}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    with pytest.raises(LlmsimError) as e:
        load_model(str(p))
    assert e.value.source == str(p) and e.value.key_path == ("text_config." if text_config else "") + "model_type"
    assert e.value.message.startswith("missing: a checkpoint's config.json names its family"), e.value.message


@pytest.mark.parametrize("family, says", [
    ("mamba", "state-space or recurrent"), ("rwkv", "state-space or recurrent"), ("t5", "encoder-decoder"),
    ("whisper", "encoder-decoder"), ("bert", "an encoder"), ("nonsense_xyz", "not a decoder-only transformer family"),
])
def test_a_model_type_that_is_not_a_decoder_family_is_refused_not_run_as_llama(tmp_path, hf_llama3_8b_config,
                                                                             family, says):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**hf_llama3_8b_config, "model_type": family}))
    with pytest.raises(LlmsimError) as e:
        load_model(str(p))
    assert e.value.key_path == "model_type" and says in e.value.message
    p.write_text(json.dumps({**hf_llama3_8b_config, "model_type": "mistral"}))
    assert load_model(str(p)).model_type == "mistral"


def test_an_unknown_activation_is_refused_not_taken_as_gated(tmp_path, hf_llama3_8b_config):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**hf_llama3_8b_config, "hidden_act": "swish_banana"}))
    with pytest.raises(LlmsimError) as e:
        load_model(str(p))
    assert e.value.key_path == "hidden_act" and "gated" in e.value.message
    for act, gated in (("silu", True), ("gelu", False), ("relu2", False)):
        p.write_text(json.dumps({**hf_llama3_8b_config, "hidden_act": act}))
        assert load_model(str(p)).is_gated is gated


def test_hf_config_bad_value_names_file_and_key(tmp_path, hf_llama3_8b_config):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**hf_llama3_8b_config, "num_hidden_layers": -1}))
    with pytest.raises(LlmsimError) as e:
        load_model(str(p))
    assert str(p) in str(e.value) and "num_hidden_layers" in str(e.value)


@pytest.mark.parametrize("block, dtype", [([128, 128], "fp8_block"), ([1, 64], "fp8_block"), (None, "fp8")])
def test_an_fp8_config_is_block_scaled_exactly_when_it_gives_a_block(tmp_path, hf_llama3_8b_config, block, dtype):
    """A null weight_block_size is HF's per-tensor fp8; a list of two sizes, its block-scaled fp8."""
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**hf_llama3_8b_config,
                             "quantization_config": {"quant_method": "fp8", "weight_block_size": block}}))
    assert load_model(str(p)).checkpoint_dtype == dtype


@pytest.mark.parametrize("inner", [None, {"quant_method": "fp8", "weight_block_size": [128, 128]}])
def test_a_multimodal_checkpoints_top_level_format_quantises_its_language_model(tmp_path, hf_llama3_8b_config, inner):
    """Llama-4's FP8 checkpoints write quantization_config beside text_config, not in it."""
    text = dict(hf_llama3_8b_config)
    if inner is not None:
        text["quantization_config"] = inner
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
                             "text_config": text, "vision_config": {"hidden_size": 1408}}))
    m = load_model(str(p))
    assert m.checkpoint_dtype == "fp8_block" and m.hidden_size == hf_llama3_8b_config["hidden_size"]


def test_hf_config_invalid_json(tmp_path):
    p = tmp_path / "config.json"
    p.write_text('{"hidden_size": 4096,,}')
    with pytest.raises(LlmsimError, match="invalid JSON at line 1") as e:
        load_model(str(p))
    assert str(p) in str(e.value)


def test_hf_checkpoint_folder_resolves_to_its_config(tmp_path, hf_llama3_8b_config):
    """``--model path/to/checkpoint`` (a folder as downloaded) reads its config.json."""
    d = tmp_path / "ckpt"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(hf_llama3_8b_config))
    assert load_model(str(d)).num_params == load_model("llama-3-8b").num_params


# --- names and files -----------------------------------------------------------------

def test_unknown_gpu_lists_valid_names():
    with pytest.raises(LlmsimError) as e:
        load_hardware("h100-sxm5-typo")
    msg = str(e.value)
    assert "unknown GPU 'h100-sxm5-typo'" in msg
    for n in list_builtin("hardware_profiles"):
        assert n in msg


def test_unknown_model_lists_valid_names():
    with pytest.raises(LlmsimError) as e:
        load_model("llama-4-400b")
    msg = str(e.value)
    assert "unknown model 'llama-4-400b'" in msg
    for n in CARD_BILLIONS:
        assert n in msg


def test_names_are_case_insensitive():
    assert load_model("Llama-3-8B").name == "llama-3-8b"
    assert load_hardware("H100-SXM").name == "h100-sxm"


def test_missing_file_names_it(tmp_path):
    p = tmp_path / "nope.yaml"
    with pytest.raises(LlmsimError, match="file not found") as e:
        load_model(str(p))
    assert str(p) in str(e.value)


def test_a_scenario_pool_file_kept_beside_it_says_where_it_was_looked_for(tmp_path, monkeypatch):
    """A pool's GPU file is read from the current directory (a trace from the scenario's folder): run from
    elsewhere, 'l4.yaml: file not found' alone left the user looking beside the scenario, where it is."""
    from simulator.scenario.compile import compile_scenario
    from simulator.scenario.load import load_scenario

    (tmp_path / "sc").mkdir()
    (tmp_path / "sc" / "l4.yaml").write_text(_builtin_yaml("hardware_profiles", "l40s").replace("name: l40s", "name: l4"))
    (tmp_path / "sc" / "s.yaml").write_text(yaml.safe_dump({
        "name": "s", "workload": {"num_requests": 5, "arrival": {"type": "poisson", "rate_per_s": 1},
                                 "input_tokens": {"dist": "fixed", "value": 8},
                                 "output_tokens": {"dist": "fixed", "value": 8}},
        "pools": [{"model": "llama-3.2-1b", "gpu": "l4.yaml"}]}))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LlmsimError) as e:
        compile_scenario(*load_scenario("sc/s.yaml"))
    said = e.value.render()
    assert "pools[0].gpu: l4.yaml: file not found" in said and f"(read from the current directory, {tmp_path})" in said
    monkeypatch.chdir(tmp_path / "sc")
    assert load_hardware("l4.yaml").name == "l4"          # from the scenario's folder it is found
    with pytest.raises(LlmsimError) as e:        # an absolute path names itself: nothing to add
        load_hardware(str(tmp_path / "nope.yaml"))
    assert "current directory" not in e.value.render()


@pytest.mark.parametrize("kind, name, slip, shown_by", [
    ("hardware_profiles", "l40s", ("num_sms:", "num_sm:"), "`llmsim profiles show NAME` for a GPU"),
    ("backend_profiles", "vllm", ("\noverheads:", "\noverhead:"), "`llmsim profiles show vllm --kind backend`")])
def test_an_unknown_key_in_a_profile_points_at_a_file_that_lists_its_keys(tmp_path, kind, name, slip, shown_by):
    """`llmsim schema` prints a scenario's keys, none of a GPU's or a backend profile's own: sent there, a
    newcomer with a misspelt profile key found nothing."""
    from simulator.profiles.backend import load_backend

    text = _builtin_yaml(kind, name)
    assert slip[0] in text
    p = tmp_path / "mine.yaml"
    p.write_text(text.replace(slip[0], slip[1], 1))
    with pytest.raises(LlmsimError) as e:
        (load_hardware if kind == "hardware_profiles" else load_backend)(str(p))
    assert "unknown key" in (said := e.value.render()) and shown_by in said and "llmsim schema" not in said, said


def _builtin_yaml(kind: str, name: str) -> str:
    return (builtin_dir(kind) / f"{name}.yaml").read_text()


def test_malformed_yaml_names_file_and_line(tmp_path):
    p = tmp_path / "broken.yaml"
    p.write_text("name: broken\nnum_hidden_layers: [32, 64\nhidden_size: 4096\n")
    with pytest.raises(LlmsimError) as e:
        load_model(str(p))
    msg = str(e.value)
    assert str(p) in msg and "invalid YAML" in msg and "line" in msg
    assert e.value.source == str(p)


def test_malformed_hardware_yaml(tmp_path):
    p = tmp_path / "gpu.yaml"
    p.write_text("name: x\npeak_tflops: {bf16: 989\n")
    with pytest.raises(LlmsimError, match="invalid YAML") as e:
        load_hardware(str(p))
    assert str(p) in str(e.value)


def test_wrong_typed_key_names_file_and_key(tmp_path):
    p = tmp_path / "model.yaml"
    p.write_text(_builtin_yaml("model_profiles", "llama-3-8b").replace("hidden_size: 4096", 'hidden_size: "big"'))
    with pytest.raises(LlmsimError) as e:
        load_model(str(p))
    msg = str(e.value)
    assert str(p) in msg and "hidden_size" in msg and "'big'" in msg
    assert e.value.key_path == "hidden_size"


def test_typo_key_names_file_and_key(tmp_path):
    p = tmp_path / "model.yaml"
    p.write_text(_builtin_yaml("model_profiles", "llama-3-8b").replace("intermediate_size:", "intermediate_sise:"))
    with pytest.raises(LlmsimError) as e:
        load_model(str(p))
    msg = str(e.value)
    assert str(p) in msg and "intermediate_sise" in msg and "unknown key" in msg


def test_nested_hardware_key_path(tmp_path):
    data = yaml.safe_load(_builtin_yaml("hardware_profiles", "h100-sxm"))
    data["interconnect"]["bandwith_gb_s"] = data["interconnect"].pop("bandwidth_gb_s")
    data["peak_tflops"]["bf16"] = "fast"
    p = tmp_path / "gpu.yaml"
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(LlmsimError) as e:
        load_hardware(str(p))
    msg = str(e.value)
    assert str(p) in msg
    assert "interconnect.bandwith_gb_s" in msg and "peak_tflops.bf16" in msg


def test_wrong_typed_hardware_key(tmp_path):
    data = yaml.safe_load(_builtin_yaml("hardware_profiles", "h100-sxm"))
    data["hbm_bandwidth_tb_s"] = -3.35
    p = tmp_path / "gpu.yaml"
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(LlmsimError) as e:
        load_hardware(str(p))
    assert e.value.key_path == "hbm_bandwidth_tb_s" and str(p) in str(e.value)


def test_heads_not_multiple_of_kv_heads(tmp_path):
    p = tmp_path / "m.yaml"
    p.write_text(_builtin_yaml("model_profiles", "llama-3-8b").replace("num_key_value_heads: 8", "num_key_value_heads: 5"))
    with pytest.raises(LlmsimError, match="num_key_value_heads: 5 does not divide num_attention_heads 32") as e:
        load_model(str(p))
    assert str(p) in str(e.value)


@pytest.mark.parametrize("text", ["", "- a\n- b\n", "just a string\n"])
def test_non_mapping_profile(tmp_path, text):
    p = tmp_path / "m.yaml"
    p.write_text(text)
    with pytest.raises(LlmsimError, match="mapping") as e:
        load_model(str(p))
    assert str(p) in str(e.value)


def test_user_yaml_profile_round_trip(tmp_path):
    p = tmp_path / "my-gpu.yaml"
    p.write_text(_builtin_yaml("hardware_profiles", "h100-sxm").replace("name: h100-sxm", "name: my-gpu"))
    assert load_hardware(str(p)).name == "my-gpu"
    q = tmp_path / "tiny.yml"
    q.write_text("num_hidden_layers: 2\nhidden_size: 256\nnum_attention_heads: 4\n"
                 "intermediate_size: 512\nvocab_size: 1000\n")
    assert load_model(str(q)).name == "tiny"


# --- working directory ------------------------------------------------------------------

def test_profiles_resolve_from_another_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_model("llama-3-8b").kv_bytes_per_token() == 131072
    assert load_hardware("h100-sxm").peak_flops("bf16") == 989e12
    assert {"h100-sxm", "a100-sxm-80gb"} <= set(list_builtin("hardware_profiles"))
    assert list_builtin("model_profiles") == sorted(CARD_BILLIONS)


def test_relative_path_from_another_directory(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "m.yaml").write_text(_builtin_yaml("model_profiles", "llama-2-7b"))
    monkeypatch.chdir(tmp_path)
    assert load_model("sub/m.yaml").num_params == load_model("llama-2-7b").num_params


def test_folder_named_like_a_builtin_does_not_shadow_it(tmp_path, monkeypatch):
    """A folder in the working directory that happens to share a built-in's
    name (an unrelated checkout, an output folder) must not hide the profile."""
    (tmp_path / "h100-sxm").mkdir()
    (tmp_path / "llama-3-8b").mkdir()
    monkeypatch.chdir(tmp_path)
    assert load_hardware("h100-sxm").name == "h100-sxm"
    assert load_model("llama-3-8b").name == "llama-3-8b"


# --- against the shared datasheet table ---------------------------------------------------

DATASHEET_ROWS = {
    "h100-sxm": "H100 SXM5 80GB", "h100-pcie": "H100 PCIe 80GB", "a100-sxm-40gb": "A100 SXM4 40GB",
    "a100-sxm-80gb": "A100 SXM4 80GB", "h200": "H200 SXM 141GB", "b200": "B200 (HGX B200)", "l40s": "L40S 48GB",
}


def test_profiles_name_their_datasheet_rows():
    from simulator.profiles.hardware import data_name_map

    assert {p: row for row, p in data_name_map("datasheet").items()} == DATASHEET_ROWS


@pytest.mark.shared_data
@pytest.mark.parametrize("name", sorted(DATASHEET_ROWS))
def test_gpu_peaks_match_datasheet_table(shared_data, name):
    import pandas as pd

    table = pd.read_csv(shared_data / "hardware_datasheets.csv").set_index("gpu")
    row = table.loc[DATASHEET_ROWS[name]]
    g = load_hardware(name)
    assert g.hbm_bandwidth_tb_s == pytest.approx(row["hbm_bandwidth_tb_s"])
    assert g.peak_tflops["bf16"] == pytest.approx(row["bf16_fp16_dense_tflops"])
    for dtype, col in (("fp8", "fp8_dense_tflops"), ("int8", "int8_dense_tops")):
        if pd.isna(row[col]):
            assert dtype not in g.peak_tflops
        else:
            assert g.peak_tflops[dtype] == pytest.approx(row[col])
    # Capacities are quoted in marketing GB; the profile holds what the device reports (GiB).
    assert g.hbm_gib == pytest.approx(row["hbm_capacity_gb"], rel=0.08)


def test_a_folder_s_profile_names_follow_files_added_and_removed(tmp_path):
    """The built-in names are listed once per folder modification: a file added or removed shows at
    once, a folder changed within the last two seconds is listed afresh, an older one from the cache."""
    import os
    from simulator.profiles.loader import _listing, _yaml_stems

    (tmp_path / "a.yaml").write_text("x: 1\n")
    assert _yaml_stems(tmp_path) == ("a",)
    (tmp_path / "b.yaml").write_text("x: 1\n")      # the same clock tick would share the folder's time
    (tmp_path / "notes.txt").write_text("")
    assert _yaml_stems(tmp_path) == ("a", "b")
    old = 1_000_000_000_000_000_000
    os.utime(tmp_path, ns=(old, old))
    assert _yaml_stems(tmp_path) == ("a", "b")
    assert _listing.cache_info().currsize >= 1 and _listing(tmp_path, old) == ("a", "b")
    (tmp_path / "a.yaml").unlink()
    assert _yaml_stems(tmp_path) == ("b",)
    assert _yaml_stems(tmp_path / "missing") == ()
