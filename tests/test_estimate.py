"""``llmsim estimate`` and ``llmsim profiles``: the case studies' worked
numbers, through the command line, and what bad input gets back.

The MFU figures are the case studies' own arithmetic (2·params·tokens /
(peak·tp·MFU)), so they hold whatever the calibration; the cost-model
numbers (TTFT, step times) are only checked against physical bounds.
"""
from __future__ import annotations

import json
import re

import pytest

from simulator.cli.output import fmt
from simulator.profiles import list_builtin, load_hardware, load_model

REQUEST_KEYS = {"ttft_ms", "tpot_ms", "prefill_tokens_per_s", "kv_bytes_per_token", "kv_bytes_per_request",
                "weights_bytes", "kv_capacity_bytes", "max_concurrent_requests"}
STEP_KEYS = {"total_ms", "linear_ms", "attention_ms", "comm_ms", "other_ms", "bound", "flops", "bytes"}


def request(cli, *args):
    return cli("estimate", "request", "--json", *args).json()


def step(cli, *args):
    return cli("estimate", "step", "--json", *args).json()


def table_rows(text: str) -> dict[str, str]:
    """A two-column table as printed: {label: value}."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if len(cells) == 2 and cells[0]:
            rows[cells[0]] = cells[1]
    return rows


# --- estimate request ----------------------------------------------------------

def test_request_json_keys(cli):
    out = request(cli, "--gpu", "h100-sxm", "--model", "llama-3-8b", "--input", "1000", "--output", "100")
    assert REQUEST_KEYS <= out.keys()
    assert "mfu_prefill_ms" not in out
    out = request(cli, "--gpu", "h100-sxm", "--model", "llama-3-8b", "--input", "1000", "--output", "100",
                  "--mfu", "0.4")
    assert REQUEST_KEYS | {"mfu_prefill_ms", "mfu_prefill_tokens_per_s"} <= out.keys()
    assert out["ttft_ms"] > 0 and out["tpot_ms"] > 0
    assert out["e2e_ms"] == pytest.approx(out["ttft_ms"] + 99 * out["tpot_ms"])
    assert out["kv_bytes_per_request"] == 1100 * out["kv_bytes_per_token"]


def test_7b_on_one_h100_at_40pct_mfu(cli):
    """Case study: a 7B model at 40% MFU on one H100 prefills ~28,000 tokens/s,
    so a 6,000-token prompt takes ~212 ms. (The case study counts 7.0B
    parameters; Llama-2-7B has 6.74B, hence ~4% faster here.) Priced at
    4,000 tokens, within Llama-2-7B's 4,096-token context (a 6,000-token
    request is refused, as a run refuses it); the arithmetic is linear in
    the prompt, so 6,000 tokens take 1.5 times as long."""
    out = request(cli, "--gpu", "h100-sxm", "--model", "llama-2-7b", "--input", "4000", "--output", "1",
                  "--mfu", "0.4")
    assert out["mfu_prefill_tokens_per_s"] == pytest.approx(28_000, rel=0.06)
    assert out["mfu_prefill_ms"] * 6000 / 4000 == pytest.approx(212, rel=0.06)
    # The cost model's own TTFT is not the MFU arithmetic, but it must imply
    # a physical MFU (no faster than 100%, not absurdly slow).
    implied_mfu = out["mfu_prefill_ms"] * 0.4 / out["ttft_ms"]
    assert 0.2 <= implied_mfu <= 1.0


def test_70b_on_tp4_h100_at_40pct_mfu(cli):
    """Case study: 70B at 40% MFU on TP-4 H100 → ~11,300 tokens/s, ~354 ms for 4,000 tokens."""
    out = request(cli, "--gpu", "h100-sxm", "--model", "llama-2-70b", "--tp", "4", "--input", "4000",
                  "--output", "1", "--mfu", "0.4")
    assert out["mfu_prefill_tokens_per_s"] == pytest.approx(11_300, rel=0.03)
    assert out["mfu_prefill_ms"] == pytest.approx(354, rel=0.03)
    implied_mfu = out["mfu_prefill_ms"] * 0.4 / out["ttft_ms"]
    assert 0.2 <= implied_mfu <= 1.0


def test_6k_context_llama3_8b_kv(cli):
    """Case study: a 6K-token Llama-3-8B context holds ~0.77 GB of KV.

    Exactly: 6,000 × 131,072 B = 0.786 GB (1e9). The case study's 0.77 is
    6,000 × 128 KiB = 768,000 KiB read as "0.77 GB"; 0.786 is 2.1% above it,
    so a ±3% band around 0.77 holds the honest figure."""
    out = request(cli, "--gpu", "h100-sxm", "--model", "llama-3-8b", "--input", "6000", "--output", "1")
    assert out["kv_bytes_per_token"] == 131072
    six_k = 6000 * out["kv_bytes_per_token"]
    assert six_k == 786_432_000
    assert six_k / 1e9 == pytest.approx(0.77, rel=0.03)
    assert out["kv_bytes_per_request"] == 6001 * 131072
    fp8 = request(cli, "--gpu", "h100-sxm", "--model", "llama-3-8b", "--input", "6000", "--output", "1",
                  "--kv-dtype", "fp8")
    assert fp8["kv_bytes_per_token"] == 65536
    assert fp8["max_concurrent_requests"] >= 2 * out["max_concurrent_requests"] - 1


@pytest.mark.parametrize("model", ["llama-2-70b", "llama-3-70b"])
def test_8xh100_node_holds_300_to_340_4k_requests(cli, model):
    """Case study: an 8×H100 node serving 70B bf16 holds 300–340 concurrent 4K-token requests."""
    out = request(cli, "--gpu", "h100-sxm", "--model", model, "--tp", "8", "--input", "4000", "--output", "96")
    assert 300 <= out["kv_concurrent_requests"] <= 340
    assert out["max_concurrent_requests"] == 256 and out["concurrency_bound"] == "scheduler"    # max_num_seqs
    assert out["weights_bytes"] / 1e9 == pytest.approx(2 * (69.0 if model == "llama-2-70b" else 70.6), rel=0.01)
    total = out["total_memory_bytes"]
    assert out["weights_bytes"] + out["kv_capacity_bytes"] + out["reserve_bytes"] == pytest.approx(total)
    assert out["kv_capacity_tokens"] * out["kv_bytes_per_token"] <= out["kv_capacity_bytes"]


def test_a_request_past_the_context_is_refused_without_a_backend_as_a_run_refuses_it(cli, tmp_path):
    """Without --backend a request past the model's context was priced with a warning and exit 0, while
    `llmsim run` refuses it on a pool naming no backend: both refuse it now, in the same words."""
    said = "input (6000) + output (100) tokens can exceed llama-2-7b's context of 4096 tokens"
    r = cli("estimate", "request", "--json", "--gpu", "h100-sxm", "--model", "llama-2-7b",
            "--input", "6000", "--output", "100")
    assert r.code == 2 and r.out == "" and "Traceback" not in r.err, r.err
    assert " ".join(r.err.split()) == f"error: --input: {said}"
    scenario = tmp_path / "long.yaml"
    scenario.write_text("name: long\nworkload: {num_requests: 5, arrival: {type: poisson, rate_per_s: 1},\n"
                        "  input_tokens: {dist: fixed, value: 6000}, output_tokens: {dist: fixed, value: 100}}\n"
                        "pools: [{name: p, model: llama-2-7b, gpu: h100-sxm}]\n")
    run = cli("run", scenario, "-o", tmp_path / "out")
    assert run.code == 2 and said in " ".join(run.err.split()), run.err
    # at the context, it is priced
    assert cli("estimate", "request", "--json", "--gpu", "h100-sxm", "--model", "llama-2-7b",
               "--input", "3996", "--output", "100").code == 0


def test_a_request_whose_output_trtllm_cuts_is_priced_saying_so(cli):
    """TensorRT-LLM cuts the output at its executor's max_seq_len rather than refuse the request: the
    estimate prices the output asked for and says the run's stops there."""
    r = cli("estimate", "request", "--json", "--gpu", "h100-sxm", "--model", "llama-3-8b",
            "--input", "8000", "--output", "500", "--backend", "trtllm")
    assert r.code == 0, r.err
    assert r.json()["warnings"][0] == ("input + output = 8,500 tokens exceeds llama-3-8b's context of 8,192 (the "
                                       "executor's max_seq_len 8193): trtllm cuts the output there in a run, and "
                                       "this estimate prices all 500 output tokens asked for")
    assert "warnings" not in request(cli, "--gpu", "h100-sxm", "--model", "llama-3-8b", "--input", "8000",
                                     "--output", "193", "--backend", "trtllm")


def test_request_from_hf_config_json(cli, tmp_path, hf_llama3_8b_config):
    d = tmp_path / "Meta-Llama-3-8B"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(hf_llama3_8b_config))
    args = ("--gpu", "h100-sxm", "--input", "2000", "--output", "50")
    via_json = request(cli, "--model", str(d / "config.json"), *args)
    via_dir = request(cli, "--model", str(d), *args)
    builtin = request(cli, "--model", "llama-3-8b", *args)
    assert via_json["model"] == via_dir["model"] == "Meta-Llama-3-8B"
    for k in ("ttft_ms", "tpot_ms", "kv_bytes_per_token", "weights_bytes", "max_concurrent_requests"):
        assert via_json[k] == via_dir[k] == builtin[k]


def _backend_with_override(tmp_path, blocks: int):
    """The vllm backend as a file whose engine sets num_gpu_blocks_override."""
    from simulator.profiles.loader import resolve

    p = tmp_path / "mine.yaml"
    p.write_text(resolve("backend_profiles", "vllm").read_text().replace(
        "\nengine:\n", f"\nengine:\n  num_gpu_blocks_override: {blocks}\n", 1))
    return p


def test_request_holds_the_pool_a_backends_num_gpu_blocks_override_gives_as_a_run_does(cli, tmp_path):
    """The pool of 1,000 blocks of 16 tokens a run of Llama-3.1-8B on one H100 holds, not the
    424,720 tokens vLLM's memory would give without the override."""
    backend = _backend_with_override(tmp_path, 1000)
    est = request(cli, "--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--input", "1000", "--output", "100",
                  "--backend", backend)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(f"""\
name: override
workload:
  arrival: {{type: poisson, rate_per_s: 2}}
  duration_s: 5
  input_tokens: {{dist: fixed, value: 1000}}
  output_tokens: {{dist: fixed, value: 100}}
pools:
  - {{name: main, model: llama-3.1-8b, gpu: h100-sxm, tp: 1, replicas: 1, engine: {{backend: '{backend}'}}}}
""")
    r = cli("run", scenario, "--no-plots", "-o", tmp_path / "out")
    assert r.code == 0, r.err
    ran = json.loads((tmp_path / "out" / "results.json").read_text())["llmsim"]["pools"]["main"]
    assert est["kv_capacity_tokens"] == ran["kv_tokens_per_replica"] == 16_000
    assert est["max_concurrent_requests"] == 1000 // 69     # 1,100 tokens in 69 blocks
    # the pool's bytes are the override's blocks (128 KiB a token), not the memory vLLM measured
    assert est["kv_capacity_bytes"] == ran["kv_memory"]["kv_gb"] * 1e9 == pytest.approx(16_000 * 131_072)


@pytest.mark.parametrize("release, refused", [("0.20.0", False), ("0.20.1", True)])
def test_request_checks_the_pool_its_release_checks(cli, tmp_path, release, refused):
    """vLLM from 0.20.1 checks Llama-3.1-8B's 131,072-token context against the override's 16,000
    tokens (EngineConfig.override_checked); 0.20.0 against the 424,720 it measured."""
    out = request(cli, "--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--input", "1000", "--output", "100",
                  "--backend", _backend_with_override(tmp_path, 1000), "--backend-version", release,
                  "--cuda-graph-gib", "1")
    said = " ".join(out.get("warnings", []))
    assert ("at most 16,000, or raise engine.num_gpu_blocks_override" in said) == refused, said


@pytest.mark.parametrize("release, needs_graphs", [("0.20.0", True), ("0.20.1", False)])
def test_an_override_the_start_up_check_reads_needs_no_cuda_graph_figure(cli, tmp_path, release, needs_graphs):
    """From vLLM 0.20.1 num_gpu_blocks_override replaces the measured pool before the start-up check
    reads it, so the CUDA graphs' figure that pool needs sizes nothing; 0.20.0 checks the measured pool."""
    r = cli("estimate", "request", "--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--input", "1000",
            "--output", "100", "--backend", _backend_with_override(tmp_path, 1000), "--backend-version", release,
            "--json")
    assert (r.code == 2 and "--cuda-graph-gib" in r.err) == needs_graphs, r.err
    if not needs_graphs:
        assert json.loads(r.out)["kv_capacity_tokens"] == 16_000


def test_request_refuses_an_override_past_the_gpus_as_a_run_does(cli, tmp_path):
    r = cli("estimate", "request", "--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--input", "1000",
            "--output", "100", "--backend", _backend_with_override(tmp_path, 10_000_000))
    said = " ".join(r.err.split())
    assert r.code == 2 and "--backend" in said and "engine.num_gpu_blocks_override" in said
    assert "at most 33,122 blocks" in said


def test_roofline_request_is_no_slower(cli):
    args = ("--gpu", "h100-sxm", "--model", "llama-3-70b", "--tp", "4", "--input", "3000", "--output", "200")
    cal = request(cli, *args)
    roof = request(cli, *args, "--roofline")
    assert roof["mode"] == "roofline"
    assert roof["ttft_ms"] <= cal["ttft_ms"] * (1 + 1e-12)
    assert roof["tpot_ms"] <= cal["tpot_ms"] * (1 + 1e-12)


def test_request_table_shows_the_json_figures(cli):
    args = ("--gpu", "h100-sxm", "--model", "llama-3-8b", "--input", "6000", "--output", "25", "--mfu", "0.4")
    out = request(cli, *args)
    r = cli("estimate", "request", *args)
    assert r.code == 0, r.err
    rows = table_rows(r.out)
    for label, key in [("TTFT (ms)", "ttft_ms"), ("TPOT (ms)", "tpot_ms"), ("prefill tokens/s", "prefill_tokens_per_s"),
                       ("prefill at 40% MFU (ms)", "mfu_prefill_ms"), ("KV capacity (tokens)", "kv_capacity_tokens")]:
        assert rows[label] == fmt(out[key]), label
    assert rows["concurrent requests that fit"] == f"{out['max_concurrent_requests']:,}: the KV binds"
    assert rows["scheduler's cap (requests)"] == "256 (max_num_seqs)"
    assert rows["KV per token"] == "128 KiB"
    assert rows["KV capacity"] == f"{out['kv_capacity_bytes'] / 1e9:.2f} GB"


# --- estimate step -----------------------------------------------------------------

def test_step_json_keys_and_breakdown(cli):
    out = step(cli, "--gpu", "h100-sxm", "--model", "llama-3-70b", "--tp", "4", "--decode-batch", "64",
               "--decode-context", "3000")
    assert STEP_KEYS <= out.keys()
    parts = out["linear_ms"] + out["attention_ms"] + out["comm_ms"] + out["other_ms"] + out.get("overhead_ms", 0.0)
    assert parts == pytest.approx(out["total_ms"], rel=1e-9)
    assert out["comm_ms"] > 0  # TP-4 all-reduces


def test_prefill_is_compute_bound(cli):
    out = step(cli, "--gpu", "h100-sxm", "--model", "llama-3-8b", "--prefill-tokens", "6000")
    assert out["bound"] == "compute"
    assert out["flops"] >= 2 * 8.0e9 * 6000 * 0.95


def test_batch1_decode_is_memory_bound(cli):
    out = step(cli, "--gpu", "h100-sxm", "--model", "llama-3-8b", "--decode-batch", "1", "--decode-context", "1000")
    assert out["bound"] == "memory"
    assert out["bytes"] >= 14e9  # the linear weights stream once


@pytest.mark.parametrize("args", [
    ("--gpu", "h100-sxm", "--model", "llama-3-8b", "--prefill-tokens", "6000"),
    ("--gpu", "h100-sxm", "--model", "llama-3-8b", "--decode-batch", "1", "--decode-context", "1000"),
    ("--gpu", "a100-sxm-80gb", "--model", "llama-3-70b", "--tp", "8", "--prefill-tokens", "512",
     "--prefill-context", "2048", "--decode-batch", "128", "--decode-context", "2000"),
    ("--gpu", "l40s", "--model", "llama-3.1-8b", "--tp", "2", "--weight-dtype", "fp8", "--kv-dtype", "fp8",
     "--decode-batch", "32", "--decode-context", "4000"),
])
def test_step_roofline_is_no_slower(cli, args):
    cal = step(cli, *args)
    roof = step(cli, *args, "--roofline")
    assert roof["mode"] == "roofline"
    assert roof["total_ms"] <= cal["total_ms"] * (1 + 1e-12)
    # FLOPs and bytes are properties of the work, not of the calibration.
    assert roof["flops"] == cal["flops"] and roof["bytes"] == cal["bytes"]


@pytest.mark.parametrize("gpu", ["h100-sxm", "h200", "mi300x"])
def test_step_table_shows_the_json_figures(cli, gpu):
    """The table is the --json object row by row, each figure labelled with
    its unit (the title names the GPU, model and TP); a GPU whose calibration is
    not its own (mi300x: transferred from h200) is flagged under it."""
    args = ("--gpu", gpu, "--model", "llama-3-70b", "--tp", "4", "--prefill-tokens", "512",
            "--decode-batch", "8", "--decode-context", "2000")
    out = step(cli, *args)
    r = cli("estimate", "step", *args)
    assert r.code == 0, r.err
    assert r.out.splitlines()[0].strip() == f"llama-3-70b on 4× {gpu}: one iteration"
    assert table_rows(r.out) == {
        "prefill chunk": "512 tokens", "decoding": "8 sequences at 2,000 tokens of context",
        "mode": out["mode"], "weight format": out["weight_dtype"], "KV cache format": out["kv_dtype"],
        "parameters (B)": fmt(out["params_b"]), "active per token (B)": fmt(out["active_params_b"]),
        "layout": out["layout"], "KV per token": "320 KiB",
        "iteration (ms)": fmt(out["total_ms"]), "linear layers (ms)": fmt(out["linear_ms"]),
        "attention (ms)": fmt(out["attention_ms"]), "communication (ms)": fmt(out["comm_ms"]),
        "elementwise (ms)": fmt(out["other_ms"]), "CPU and launch overhead (ms)": fmt(out["overhead_ms"]),
        "compute": f"{out['flops'] / 1e12:.4g} TFLOP", "memory traffic": f"{out['bytes'] / 1e9:.2f} GB",
        "roofline bound": out["bound"]}
    text = " ".join(r.out.split())      # the note wraps at the terminal's width
    assert ("not fitted to its own measurements" in text) == (out["mode"] != "calibrated")
    if out["mode"] == "transferred":
        assert "transferred from h200" in text


# --- bad input ----------------------------------------------------------------------

def test_unknown_gpu_subprocess(cli_subprocess):
    r = cli_subprocess("estimate", "request", "--gpu", "h100-sxm5", "--model", "llama-3-8b",
                       "--input", "100", "--output", "10")
    assert r.code == 2
    assert "Traceback" not in r.err
    assert "unknown GPU 'h100-sxm5'" in r.err
    for n in list_builtin("hardware_profiles"):
        assert n in r.err
    assert r.out == ""


def test_model_does_not_fit_subprocess(cli_subprocess):
    r = cli_subprocess("estimate", "request", "--gpu", "a100-sxm-40gb", "--model", "llama-3-70b",
                       "--input", "1000", "--output", "100")
    assert r.code == 2
    assert "Traceback" not in r.err
    m = re.search(r"weights ([\d.]+) GB.*usable ([\d.]+) GB", r.err, re.S)
    assert m, r.err
    weights, usable = map(float, m.groups())
    assert weights == pytest.approx(141.1, rel=0.01)
    assert weights > usable


@pytest.mark.parametrize("args, match", [
    (("estimate", "step", "--gpu", "nope", "--model", "llama-3-8b", "--decode-batch", "1"), "unknown GPU 'nope'"),
    (("estimate", "step", "--gpu", "h100-sxm", "--model", "gpt-5", "--decode-batch", "1"), "unknown model 'gpt-5'"),
    (("estimate", "step", "--gpu", "h100-sxm", "--model", "llama-3-8b", "--decode-batch", "-1"), "--decode-batch"),
    (("estimate", "step", "--gpu", "h100-sxm", "--model", "llama-3-8b", "--decode-batch=-4"), "--decode-batch"),
    (("estimate", "step", "--gpu", "h100-sxm", "--model", "llama-3-8b", "--prefill-tokens", "-5"), "--prefill-tokens"),
    (("estimate", "step", "--gpu", "h100-sxm", "--model", "llama-3-8b"), "empty step"),
    (("estimate", "step", "--gpu", "h100-sxm", "--model", "llama-3-8b", "--tp", "3", "--decode-batch", "1"), "tp=3"),
    (("estimate", "step", "--gpu", "h100-sxm", "--model", "llama-3-8b", "--weight-dtype", "fp4",
      "--decode-batch", "1"), "weight dtype"),
    (("estimate", "step", "--gpu", "h100-sxm", "--model", "llama-3-8b", "--decode-batch", "many"), "--decode-batch"),
    (("estimate", "step", "--model", "llama-3-8b", "--decode-batch", "1"), "--gpu"),  # missing option
    (("estimate", "step", "--gpu", "h100-sxm", "--model", "llama-3-8b", "--batch", "1"), "--batch"),  # unknown option
    (("estimate", "request", "--gpu", "h100-sxm", "--model", "llama-3-8b", "--input", "0", "--output", "1"), "--input"),
    (("estimate", "request", "--gpu", "h100-sxm", "--model", "llama-3-8b", "--input", "10", "--output", "1",
      "--mfu", "1.5"), "--mfu"),
    (("estimate", "request", "--gpu", "h100-sxm", "--model", "llama-3-8b", "--input", "10", "--output", "1",
      "--gpu-memory-utilization", "0"), "gpu-memory-utilization"),
    (("estimate", "request", "--gpu", "a100-sxm-40gb", "--model", "llama-3-70b", "--tp", "8", "--input", "10",
      "--output", "1", "--gpu-memory-utilization", "0.3"), "does not fit"),
    # read by nothing under another stack's rule: 0.5 and 0.9 gave the same 456,448 KV tokens
    (("estimate", "request", "--gpu", "h100-sxm", "--model", "llama-3-8b", "--input", "10", "--output", "1",
      "--backend", "trtllm", "--gpu-memory-utilization", "0.5"), "sizes its KV pool by its own rule (trtllm"),
])
def test_bad_input_exit_2(cli, args, match):
    """In-process: an exception escaping ``main`` (what would be a traceback
    at a terminal) fails the test outright."""
    r = cli(*args)
    assert r.code == 2, (r.code, r.out, r.err)
    assert match in r.err
    assert "Traceback" not in r.err


def test_bad_model_file_via_cli(cli, tmp_path):
    p = tmp_path / "m.yaml"
    p.write_text("num_hidden_layers: 32\nhidden_size: big\n")
    r = cli("estimate", "step", "--gpu", "h100-sxm", "--model", str(p), "--decode-batch", "1")
    assert r.code == 2
    assert str(p) in r.err and "hidden_size" in r.err


# --- profiles list ---------------------------------------------------------------------

def test_profiles_list_json(cli):
    out = cli("profiles", "list", "--json").json()
    assert [g["name"] for g in out["gpus"]] == list_builtin("hardware_profiles")
    assert [m["name"] for m in out["models"]] == list_builtin("model_profiles")
    by_name = {m["name"]: m for m in out["models"]}
    assert by_name["llama-3-8b"]["kv_kib_per_token_bf16"] == 128
    assert by_name["llama-2-70b"]["kv_kib_per_token_bf16"] == 320
    assert all(g["calibration"] in ("calibrated", "transferred", "roofline") for g in out["gpus"])
    # the release a pool naming no backend_version runs, for every stack (vLLM's alone was in its text)
    releases = {b["name"]: b["default_release"] for b in out["backends"]}
    assert releases == {"sglang": "0.5.23", "trtllm": "1.3.0rc15", "vllm": "0.19.1"}


def test_profiles_list_table(cli):
    """On an 80-column terminal every name is printed whole (it is what a
    user types next)."""
    r = cli("profiles", "list")
    assert r.code == 0, r.err
    for n in list_builtin("hardware_profiles") + list_builtin("model_profiles"):
        assert n in r.out


def test_cli_works_from_another_directory(cli_subprocess, tmp_path):
    r = cli_subprocess("profiles", "list", "--json", cwd=tmp_path)
    assert r.code == 0, r.err
    assert {g["name"] for g in json.loads(r.out)["gpus"]} >= {"h100-sxm", "a100-sxm-80gb"}


def test_step_prices_a_stacks_own_kernels(cli):
    """--kernels runs the GPU as that stack's kernels do: SGLang's Hopper MLA prefill is the slower one,
    and a stack llmsim does not know is refused naming the flag."""
    args = ("--gpu", "h200", "--model", "deepseek-v3", "--tp", "8", "--weight-dtype", "fp8", "--prefill-tokens", "8192")
    vllm, sglang = step(cli, *args, "--kernels", "vllm"), step(cli, *args, "--kernels", "sglang")
    assert sglang["kernels"] == "sglang"
    assert sglang["attention_ms"] > 1.5 * vllm["attention_ms"]
    r = cli("estimate", "step", *args, "--kernels", "sglng")
    assert r.code == 2 and "--kernels" in r.err and "sglng" in r.err and "Traceback" not in r.err


# --- estimate as a serving backend runs it ------------------------------------------------------

LONE = """\
name: lone
seed: 1
workload:
  num_requests: 1
  arrival: {{type: poisson, rate_per_s: 1}}
  input_tokens: {{dist: fixed, value: {input}}}
  output_tokens: {{dist: fixed, value: {output}}}
pools:
  - name: main
    model: {model}
    gpu: {gpu}
    tp: {tp}
    replicas: 1
    engine: {{backend: {backend}, weight_dtype: {wd}}}
"""


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_backend_request_is_a_lone_request_of_a_run(cli, tmp_path, backend):
    """With --backend the estimate prices a request as a run of that backend meets it alone: its TTFT
    (front end, the prefill with the stack's overheads and eager launches, the first token's way
    back) and its decode step are those of a one-request simulation."""
    from simulator.runner import simulate

    shape = dict(model="llama-3.1-70b", gpu="b200", tp=8, wd="fp8", input=1024, output=64)
    p = tmp_path / "lone.yaml"
    p.write_text(LONE.format(backend=backend, **shape))
    run = simulate(p).results
    est = request(cli, "--gpu", shape["gpu"], "--model", shape["model"], "--tp", "8", "--weight-dtype", "fp8",
                  "--input", "1024", "--output", "64", "--backend", backend)
    assert est["backend"] == backend
    assert est["ttft_ms"] == pytest.approx(run["mean_ttft_ms"], rel=0.02)
    assert est["ttft_ms"] == pytest.approx(est["prefill_ms"] + est["front_end_ms"])
    assert est["tpot_ms"] == pytest.approx(run["mean_tpot_ms"], rel=0.05)


@pytest.mark.parametrize("backend", ["sglang", "trtllm"])
def test_backend_request_is_cut_at_its_ranks_budget(cli, tmp_path, backend):
    """On attention-DP ranks a lone prompt is chunked at its rank's budget, as a run schedules it:
    SGLang's chunk divided by dp (an 8K prompt in four 2K chunks on eight ranks), TensorRT-LLM's
    whole flag per rank."""
    from simulator.runner import simulate

    p = tmp_path / "lone.yaml"
    p.write_text(LONE.format(backend=backend, model="deepseek-v3", gpu="b200", tp=1, wd="fp8", input=8192, output=16)
                 .replace("    replicas: 1\n", "    replicas: 1\n    dp: 8\n    ep: 8\n"))
    run = simulate(p).results
    est = request(cli, "--gpu", "b200", "--model", "deepseek-v3", "--tp", "1", "--dp", "8", "--ep", "8",
                  "--input", "8192", "--output", "16", "--backend", backend)
    assert est["ttft_ms"] == pytest.approx(run["mean_ttft_ms"], rel=0.02)


def test_backend_prefill_waits_out_the_eager_launches(cli):
    """vLLM runs a 1K-token prefill past its 512-token graphs eagerly: the estimate's step lasts the
    backend's launches at least, where the kernels alone are faster; a prefill its graphs hold does not."""
    from simulator.costmodel.eager import launches_per_forward
    from simulator.profiles.backend import load_backend

    args = ("--gpu", "b200", "--model", "llama-3.1-70b", "--tp", "8", "--weight-dtype", "fp8",
            "--prefill-tokens", "1024")
    bare, vllm = step(cli, *args), step(cli, *args, "--backend", "vllm")
    floor = load_backend("vllm").overheads.eager_launch_us * 1e-3 * launches_per_forward(
        load_model("llama-3.1-70b"), 8, 1, True)
    assert bare["total_ms"] < floor <= vllm["total_ms"]
    assert vllm["backend"] == "vllm" and vllm["kernels"] == "vllm"
    short = step(cli, *args[:-1], "256", "--backend", "vllm")   # within the captured graphs: no floor
    assert short["total_ms"] < floor


@pytest.mark.parametrize("args, match", [
    (("--backend", "vlm"), "--backend"),
    (("--backend-version", "0.14.0"), "--backend-version"),
    (("--backend", "vllm", "--backend-version", "zero"), "--backend-version"),
    (("--backend", "vllm", "--roofline"), "--roofline"),
])
def test_bad_backend_flags_exit_2(cli, args, match):
    r = cli("estimate", "request", "--gpu", "h100-sxm", "--model", "llama-3-8b", "--input", "10", "--output", "2",
            *args)
    assert r.code == 2, (r.code, r.out, r.err)
    assert match in r.err and "Traceback" not in r.err


@pytest.mark.parametrize("command", ["request", "step"])
def test_a_release_past_the_profile_is_refused_under_the_flag_that_named_it(cli, command):
    """The scenario's message names its key, backend_version; given as --backend-version, the line names
    that flag (not --backend, which the user got right) and tells to leave the flag out."""
    sizes = ("--input", "10", "--output", "2") if command == "request" else ("--decode-batch", "8")
    r = cli("estimate", command, "--gpu", "h100-sxm", "--model", "llama-3-8b", *sizes, "--backend", "vllm",
            "--backend-version", "9.9")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, (r.code, r.err)
    assert r.err.startswith("error: --backend-version: '9.9' is newer than the vllm releases"), r.err
    assert "leave --backend-version out to run 0.19.1's" in r.err and "--backend:" not in r.err


def test_a_step_no_replica_could_run_is_priced_with_a_warning(cli):
    """A step past the model's context: arithmetic still answers, and says the step cannot run."""
    args = ["estimate", "step", "--gpu", "h100-sxm", "--model", "llama-3-8b", "--decode-context", "1000", "--json"]
    fits, huge = cli(*args, "--decode-batch", "8"), cli(*args, "--decode-batch", "100000")
    assert fits.code == huge.code == 0 and "warnings" not in fits.json()
    assert "no replica runs this step" in huge.json()["warnings"][0] and "warning:" in huge.err
    heavy = cli("estimate", "step", "--gpu", "h100-sxm", "--model", "llama-3-70b", "--decode-batch", "1")
    assert heavy.code == 0 and "does not fit on 1× h100-sxm" in heavy.err


def test_an_mla_models_kv_figures_are_on_one_basis(cli):
    """MLA's latent is whole on each of the tp GPUs: the request's KV was one copy's (0.29 GB) beside the
    capacity of all eight (378.88 GB), which 164 requests filled."""
    out = cli("estimate", "request", "--gpu", "h200", "--model", "deepseek-v3", "--tp", "8", "--weight-dtype", "fp8",
              "--input", "4000", "--output", "96", "--json").json()
    assert out["kv_copies"] == 8 and out["kv_bytes_per_token"] == 8 * 70272
    fits = out["kv_capacity_bytes"] / out["kv_bytes_per_request"]
    assert out["max_concurrent_requests"] <= fits < out["max_concurrent_requests"] + 1


def test_a_step_gives_the_kv_per_token_a_request_does(cli):
    """`estimate step` gave DeepSeek-V3's KV per token as one copy (69 KiB) where `estimate request` gives the
    replica's eight (549 KiB); Qwen3-235B's 4 KV heads at tp 8 take twice their share."""
    for model, copies, label in (("deepseek-v3", 8, "8 copies: MLA's latent on each GPU"),
                                 ("qwen3-235b-a22b", 2, "2× its share: fewer KV heads than GPUs")):
        args = ("--gpu", "h200", "--model", model, "--tp", "8", "--weight-dtype", "fp8")
        step = cli("estimate", "step", *args, "--decode-batch", "8", "--decode-context", "2000", "--json").json()
        req = cli("estimate", "request", *args, "--input", "2000", "--output", "10", "--json").json()
        assert step["kv_copies"] == req["kv_copies"] == copies
        assert step["kv_bytes_per_token"] == req["kv_bytes_per_token"]
        table = cli("estimate", "step", *args, "--decode-batch", "8", "--decode-context", "2000").out
        words = [w for w in table.split() if w not in "│┃"]      # the label wraps inside its cell at 80 columns
        assert all(w in words for w in f"KV per token ({label})".split()) and "kv_copies" not in table


def test_a_sliding_window_models_request_kv_is_on_its_capacitys_basis(cli):
    """gpt-oss's pool counts full-attention tokens: "KV per request" is its tokens' (it counted the window
    too, 0.05 GB, beside 1,459 "concurrent requests that fit" 59.39 GB, which it did not divide into), and
    under vLLM each request's windows come out of the same pool, so they count against what fits."""
    r = cli("estimate", "request", "--gpu", "h200", "--model", "gpt-oss-120b", "--backend", "vllm",
            "--input", "1000", "--output", "100", "--json")
    out = r.json()
    assert out["kv_bytes_per_request"] == 1100 * out["kv_bytes_per_token"]
    # 18 of 36 layers slide over 128 tokens, held in 16-token blocks: cdiv(127, 16) + 1 = 9 of them
    assert out["kv_window_bytes_per_request"] == 144 * out["kv_bytes_per_token"]
    fits = out["kv_capacity_bytes"] / (out["kv_bytes_per_request"] + out["kv_window_bytes_per_request"])
    assert out["kv_concurrent_requests"] <= fits < out["kv_concurrent_requests"] + 16   # blocks of 16 tokens
    table = cli("estimate", "request", "--gpu", "h200", "--model", "gpt-oss-120b", "--backend", "vllm",
                "--input", "1000", "--output", "100")
    said = _words(table.out)
    assert "KV per request 0.05 GB (full-attention layers 0.04 GB + sliding-window layers 0.01 GB)" in said, said
    assert f"KV capacity {out['kv_capacity_bytes'] / 1e9:.2f} GB KV capacity (tokens)" in said   # one pool holds both


def _words(table: str) -> str:
    """A table's text without its borders, one space apart: a cell wrapped onto a second line at 80
    columns reads on, its label's column empty there."""
    return " ".join(w for w in table.split() if w not in "│┃")


def test_a_pool_split_for_the_windows_shows_its_whole_and_both_parts(cli):
    """TensorRT-LLM keeps gpt-oss's sliding-window layers in a pool of their own, as large as the
    full-attention one: the table read "KV capacity 51.77 GB" beside "sliding-window KV 51.77 GB" of a
    103.5 GB pool, and "KV per request" was the full-attention layers' alone."""
    args = ("--gpu", "b200", "--model", "gpt-oss-120b", "--backend", "trtllm", "--input", "2000", "--output", "200")
    out = request(cli, *args)
    said = _words(cli("estimate", "request", *args).out)
    assert "KV capacity 103.54 GB (full-attention layers 51.77 GB + sliding-window layers 51.77 GB)" in said, said
    assert "KV per request 0.16 GB (full-attention layers 0.08 GB + sliding-window layers 0.08 GB)" in said
    assert "KV per token (full-attention layers) 36 KiB" in said and "sliding-window KV 51.77" not in said
    # weights, reserve and both pools are the GPU
    assert out["weights_bytes"] + out["reserve_bytes"] + out["kv_capacity_bytes"] + out["kv_window_bytes"] \
        == pytest.approx(out["total_memory_bytes"])


def test_a_short_requests_windows_are_what_its_vllm_pool_charges(cli):
    """A request shorter than gpt-oss's 128-token window: the pool (and a run) charges every running request
    its nine window blocks whatever its length, so the figure beside the concurrency is those blocks, not
    50/128 of a window (0.002 GB against 0.005: the two figures read 13,350 requests, not the 7,718 that fit)."""
    out = cli("estimate", "request", "--gpu", "h200", "--model", "gpt-oss-120b", "--backend", "vllm",
              "--input", "40", "--output", "10", "--json").json()
    window = out["kv_window_bytes_per_request"] / out["kv_bytes_per_token"]
    assert window == 144
    assert out["kv_concurrent_requests"] == out["kv_capacity_tokens"] // (64 + window)   # 50 tokens in 4 blocks


def test_a_vllm_release_that_sizes_its_pool_after_its_graphs_takes_them_as_a_flag(cli):
    """vLLM 0.20.0 and later take an estimate of their CUDA graphs out of the KV pool (at 92 % of
    the GPU), which llmsim cannot derive: `estimate request` with such a --backend-version needs
    --cuda-graph-gib, the figure the server logs, and refuses in one line naming it otherwise."""
    base = ["estimate", "request", "--gpu", "h100-sxm", "--model", "llama-3-8b", "--input", "1000", "--output",
            "100", "--backend", "vllm", "--json"]
    r = cli(*base, "--backend-version", "0.25.0")
    assert r.code == 2 and "--cuda-graph-gib" in r.err and len(r.err.strip().splitlines()) == 1, r.err
    # the other way out is the flag this command takes, not the scenario key its user has not got
    assert r.err.rstrip().endswith("or give an earlier --backend-version") and "backend_version" not in r.err, r.err
    stated = json.loads(cli(*base, "--backend-version", "0.25.0", "--cuda-graph-gib", "1.5").out)
    v19 = json.loads(cli(*base, "--backend-version", "0.19.1").out)
    # and 0.25 samples the model's 1,024 dummy requests on the V2 runner, 6.012 bytes an entry, not 14
    v2_sampler = 1024 * load_model("llama-3-8b").vocab_size * (14 - 6.012)
    assert stated["kv_capacity_bytes"] == pytest.approx(
        v19["kv_capacity_bytes"] + 0.02 * load_hardware("h100-sxm").cuda_total_bytes - 1.5 * 2**30 + v2_sampler)


@pytest.mark.parametrize("sizes", [("--decode-batch", "4", "--decode-context", "100000"),
                                   ("--prefill-tokens", "4096", "--prefill-context", "6000")])
def test_a_step_past_the_models_context_is_priced_with_a_warning(cli, sizes):
    """A sequence longer than llama-3-8b's 8,192-token context, which no run holds: priced, with a warning."""
    r = cli("estimate", "step", "--gpu", "h100-sxm", "--model", "llama-3-8b", *sizes, "--json")
    assert r.code == 0 and "exceeds llama-3-8b's context of 8,192" in r.json()["warnings"][0], r.err
    inside = cli("estimate", "step", "--gpu", "h100-sxm", "--model", "llama-3-8b", "--decode-batch", "4",
                 "--decode-context", "8191", "--json")
    assert inside.code == 0 and "warnings" not in inside.json()


@pytest.mark.parametrize("flag", ["--tp", "--dp", "--ep"])
def test_a_layout_flag_below_one_is_named_as_the_flag_given(cli, flag):
    """--dp 0 or --ep 0 was blamed on --tp, which the user had left at 1."""
    for what in (["request", "--input", "100", "--output", "10"], ["step", "--decode-batch", "4"]):
        r = cli("estimate", *what, "--gpu", "h200", "--model", "deepseek-v3", flag, "0")
        assert r.code == 2 and "Traceback" not in r.err and r.err.startswith(f"error: {flag}: "), r.err


@pytest.mark.parametrize("backend,flag,per_rank", [("vllm", "max_num_seqs", 1024), ("sglang", "max_running_requests", 2048),
                                                   ("trtllm", "max_batch_size", 2048)])
def test_concurrency_is_held_to_the_schedulers_cap_of_every_rank(cli, backend, flag, per_rank):
    """DeepSeek-V3 at dp 8 read 11,368 concurrent short requests on vLLM, what the KV pools hold, past the
    8 × 1,024 its DP engine cores run at once: the figure is the smaller of the two, and says which binds."""
    args = ("estimate", "request", "--gpu", "h200", "--model", "deepseek-v3", "--tp", "1", "--dp", "8", "--ep", "8",
            "--weight-dtype", "fp8", "--backend", backend, "--input", "16", "--output", "16")
    out = cli(*args, "--json").json()
    assert out["scheduler_concurrent_requests"] == 8 * per_rank and out["scheduler_cap_flag"] == flag
    assert out["kv_concurrent_requests"] > 8 * per_rank
    assert out["max_concurrent_requests"] == 8 * per_rank and out["concurrency_bound"] == "scheduler"
    rows = table_rows(cli(*args).out)
    assert rows["concurrent requests the KV holds"] == f"{out['kv_concurrent_requests']:,}"
    assert rows["scheduler's cap (requests)"] == f"8 × {per_rank:,} ({flag})"
    assert rows["concurrent requests that fit"] == f"{8 * per_rank:,}: the scheduler's cap binds"


@pytest.mark.parametrize("length, said", [
    # TensorRT-LLM cuts the output to its executor's max_seq_len: only a prompt leaving no output token is refused
    (("--input", "200000", "--output", "10", "--backend", "trtllm"),
     "error: --input: input (200000) tokens can reach llama-3.1-8b's context of 131072 tokens (the executor's "
     "max_seq_len 131073), leaving no output token"),
    (("--input", "131000", "--output", "1000", "--backend", "vllm"),
     "error: --input: input (131000) + output (1000) tokens can exceed llama-3.1-8b's context of 131072 tokens"),
    (("--input", "30k", "--output", "10"), "error: --input: '30k' is not a whole number of tokens; write 30000"),
    (("--input", "100", "--output", "1.5M"), "error: --output: '1.5M' is not a whole number of tokens; write 1500000"),
])
def test_a_request_a_run_refuses_is_refused_in_its_words(cli, length, said):
    """Priced, a request past the context gave a TTFT the server never reaches; a count written 30k got
    the option parser's words."""
    r = cli("estimate", "request", "--gpu", "h100-sxm", "--model", "llama-3.1-8b", *length, "--json")
    assert r.code == 2 and r.out == "" and "Traceback" not in r.err, r.err
    assert " ".join(r.err.split()) == said
