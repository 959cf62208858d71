"""A GPU is one file: its profile says everything llmsim knows about it.

A made-up GPU in a folder of its own runs a scenario and is calibrated by
the transfer rule it names, without any module knowing its name; the
shipped AMD and Blackwell Ultra profiles run, say where their calibration
came from, and refuse what llmsim cannot model on them.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from simulator.profiles import list_builtin, load_hardware
from simulator.profiles.hardware import builtin_hardware, match_benchmark_gpu
from simulator.validation.error_model import gpu_family

GPU = """\
name: acme-x1
display_name: a made-up GPU
hbm_gib: 96
hbm_bandwidth_tb_s: 4.0
peak_tflops: {bf16: 1200, fp8: 2400}
interconnect: {kind: nvlink, bandwidth_gb_s: 600, max_tp: 8}
host_link_gb_s: 64
num_sms: 120
price: {usd_per_gpu_hour: 3.5, source: "made up"}
architecture: acme1
transfer: {sibling: h100-sxm, rule: scaled, why: "the nearest measured part"}
"""

SCENARIO = """\
name: tiny
seed: 1
workload:
  num_requests: 40
  arrival: {{type: poisson, rate_per_s: 4}}
  input_tokens: {{dist: uniform, min: 16, max: 400}}
  output_tokens: {{dist: uniform, min: 1, max: 40}}
pools:
  - {{name: main, model: llama-3-8b, gpu: {gpu}, replicas: 1{engine}}}
"""

NEW = ["b300", "gb300-nvl72", "mi300x", "mi325x", "mi355x"]


def _scenario(tmp_path: Path, gpu: str, engine: str = "") -> Path:
    p = tmp_path / f"tiny-{Path(gpu).stem}.yaml"
    p.write_text(SCENARIO.format(gpu=gpu, engine=f", engine: {{{engine}}}" if engine else ""))
    return p


@pytest.fixture
def acme(tmp_path) -> Path:
    (tmp_path / "gpus").mkdir()
    path = tmp_path / "gpus" / "acme.yaml"
    path.write_text(GPU)
    return path


def test_a_new_gpu_is_one_file_it_runs_and_is_calibrated_by_its_rule(cli, acme, tmp_path, shared_data):
    r = cli("run", _scenario(tmp_path, str(acme)), "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["llmsim"]["calibration"] == {"gpu": "acme-x1", "status": "roofline",
                                                          "calibrated": False}
    before = acme.read_text()
    r = cli("calibrate", "--data", shared_data, "--gpu", acme, "--dry-run", "--quiet")
    assert r.code == 0, r.err
    assert "acme-x1: transferred from h100-sxm" in r.out and "no profile written" in r.out
    assert acme.read_text() == before
    assert cli("calibrate", "--data", shared_data, "--gpu", acme, "--quiet").code == 0
    gpu = load_hardware(str(acme))
    assert gpu.calibration.status == "transferred" and gpu.calibration.transferred_from == "h100-sxm"
    # fractions of its own peaks: the sibling's η's (no measured ceilings name this GPU)
    assert gpu.calibration.gemm.eta_memory == load_hardware("h100-sxm").calibration.gemm.eta_memory
    r = cli("run", _scenario(tmp_path, str(acme)), "--json")
    assert json.loads(r.out)["llmsim"]["calibration"]["transferred_from"] == "h100-sxm"
    assert gpu_family(str(acme)) == "acme1"
    assert "acme" not in list_builtin("hardware_profiles")


def test_a_gpu_without_a_rule_or_with_an_unmeasured_sibling_is_refused(cli, acme, shared_data):
    acme.write_text(GPU.replace("sibling: h100-sxm", "sibling: h100-pcie"))
    r = cli("calibrate", "--data", shared_data, "--gpu", acme, "--dry-run", "--quiet")
    assert r.code == 2 and "h100-pcie" in r.err and "transfer.sibling" in r.err and "Traceback" not in r.err
    acme.write_text(GPU.replace("num_sms: 120\n", ""))
    r = cli("calibrate", "--data", shared_data, "--gpu", acme, "--dry-run", "--quiet")
    assert r.code == 2 and "num_sms" in r.err and str(acme) in r.err
    acme.write_text(GPU.replace("transfer:", "# transfer:"))
    r = cli("calibrate", "--data", shared_data, "--gpu", acme, "--dry-run", "--quiet")
    assert r.code == 2 and "no transfer rule" in r.err


def test_an_unknown_sibling_is_refused_offering_the_measured_gpus_alone(tmp_path):
    """A sibling misspelt (b100) was answered with every profile as a valid name, the GPU itself and the
    unmeasured ones among them, which calibrate refuses as siblings in turn."""
    from simulator.calibration.pipeline import _sibling
    from simulator.errors import LlmsimError
    from simulator.profiles.hardware import Transfer

    profiles = builtin_hardware()
    gpu = profiles["h100-pcie"].model_copy(update={"transfer": Transfer(sibling="b100")})
    measured = ["a100-sxm-80gb", "b200", "h100-sxm"]
    with pytest.raises(LlmsimError) as e:
        _sibling("h100-pcie", gpu, profiles, measured, tmp_path, {"h100-pcie": tmp_path / "g.yaml"})
    assert e.value.key_path == "transfer.sibling" and e.value.source == str(tmp_path / "g.yaml")
    assert e.value.message == ("h100-pcie is transferred from b100, which is no GPU profile (did you mean b200?); "
                               "name a measured GPU (a100-sxm-80gb, b200, h100-sxm)")


def test_a_gpu_no_calibrate_has_run_on_says_it_runs_at_its_peaks_and_what_to_run(acme):
    """A new GPU's file run before `llmsim calibrate` (the how-to's step 3) ran at η = 1, far faster
    than its transfer would make it, under a note that only called it "roofline"."""
    from simulator.cli.output import provenance_notes

    roofline = load_hardware(str(acme))
    assert roofline.calibration.status == "roofline"
    note, = provenance_notes({"acme-x1": roofline.provenance()})
    assert note == ("acme-x1 cost model is roofline, not fitted to its own measurements: no calibration, so its "
                    "kernels run at the datasheet peaks (η = 1, no fixed costs), faster than any measured GPU; "
                    "`llmsim calibrate --gpu FILE` writes one")
    note, = provenance_notes({"mi300x": load_hardware("mi300x").provenance()})
    assert note == "mi300x cost model is transferred from h200, not fitted to its own measurements"


@pytest.mark.parametrize("name", NEW)
def test_new_profiles_run_and_say_they_are_transferred(cli, tmp_path, name):
    gpu = load_hardware(name)
    cal = gpu.calibration
    assert cal.status == "transferred" and cal.transferred_from == gpu.transfer.sibling and gpu.transfer.why
    assert gpu.price.source and gpu.source
    r = cli("run", _scenario(tmp_path, name), "--json")
    assert r.code == 0, r.err
    block = json.loads(r.out)["llmsim"]["calibration"]
    assert block["status"] == "transferred" and block["transferred_from"] == gpu.transfer.sibling
    r = cli("run", _scenario(tmp_path, name))
    assert f"transferred from {gpu.transfer.sibling}" in " ".join(r.out.split())


def test_profiles_list_shows_the_new_gpus_with_their_provenance(cli):
    r = cli("profiles", "list", "--json")
    gpus = {g["name"]: g for g in json.loads(r.out)["gpus"]}
    for name in NEW:
        assert gpus[name]["calibration"] == "transferred" and gpus[name]["transferred_from"]


@pytest.mark.parametrize("name", ["mi300x", "mi325x", "mi355x"])
def test_what_llmsim_cannot_model_on_amd_is_refused_in_one_line(cli, cli_subprocess, tmp_path, name):
    r = cli_subprocess("run", _scenario(tmp_path, name, "backend: trtllm"))
    assert r.code == 2 and "Traceback" not in r.err
    assert "trtllm" in r.err and name in r.err and len(r.err.strip().splitlines()) == 1
    for backend in ("vllm", "sglang"):     # what runs needs no process of its own to say so
        r = cli("run", _scenario(tmp_path, name, f"backend: {backend}"), "--json")
        assert r.code == 0, r.err


def test_nvfp4_needs_units_that_take_its_scales(cli, tmp_path):
    from simulator.costmodel.layout import check_weight_dtype
    from simulator.errors import LlmsimError

    check_weight_dtype("nvfp4", load_hardware("b300"))
    with pytest.raises(LlmsimError, match="mi355x has FP4 units for mxfp4 only"):
        check_weight_dtype("nvfp4", load_hardware("mi355x"))
    assert load_hardware("mi355x").has_unit("fp6")


# What rocm-smi reports as "VRAM Total Memory (B)" on each AMD part (MI300X bare metal:
# github.com/ROCm/legacy-rocm-build/issues/4750; MI355X: a public SGLang validation log),
# the memory torch.cuda.mem_get_info sees and the stacks size their KV pools from.
ROCM_SMI_BYTES = {"mi300x": 206_141_652_992, "mi355x": 309_220_868_096}


@pytest.mark.parametrize("name", sorted(ROCM_SMI_BYTES))
def test_amd_memory_is_what_rocm_reports_binary_not_decimal_gigabytes(name):
    # AMD's "192 GB" and "288 GB" are 192 and 288 GiB of HBM; read as 1e9 bytes they lose 7 %.
    assert load_hardware(name).hbm_bytes == pytest.approx(ROCM_SMI_BYTES[name], rel=1e-3)


def test_every_gpu_states_what_cuda_reports_at_most_nvidia_smis_total():
    # the stacks' fractions apply to CUDA's total, which the driver's reservation keeps below nvidia-smi's
    # (ROCm reports rocm-smi's own)
    for name, gpu in builtin_hardware().items():
        assert gpu.cuda_total_gib is not None, name
        gap = gpu.hbm_gib - gpu.cuda_total_gib
        assert (gap == 0) if gpu.interconnect.kind == "xgmi" else (0 < gap < 1), (name, gap)


def test_a_cuda_total_above_nvidia_smis_or_far_below_is_refused():
    gpu = load_hardware("h100-sxm")
    with pytest.raises(ValidationError, match="80.0 is above hbm_gib 79.65"):
        type(gpu).model_validate({**gpu.model_dump(), "cuda_total_gib": 80.0})
    # a copy given a larger hbm_gib and the old cuda_total_gib would size its pools from the old GPU's memory
    with pytest.raises(ValidationError, match="79.22 is far below hbm_gib 96.0.*set it with hbm_gib"):
        type(gpu).model_validate({**gpu.model_dump(), "hbm_gib": 96.0})
    assert type(gpu).model_validate({**gpu.model_dump(), "cuda_total_gib": None}).cuda_total_bytes == gpu.hbm_bytes


@pytest.mark.parametrize("edit, says", [
    # a figure in the base unit or the next one down ran a GPU a thousand (or 10^12) times too fast, without a word
    (("peak_tflops: {bf16: 1200", "peak_tflops: {bf16: 1200e12"),
     "peak_tflops.bf16: 1.2e+15 TFLOP/s is more than any GPU has (at most 100,000 TFLOP/s): the key is in TFLOP/s"),
    (("hbm_bandwidth_tb_s: 4.0", "hbm_bandwidth_tb_s: 4000"),
     "hbm_bandwidth_tb_s: more than any GPU has (at most 100 TB/s): the key is in TB/s (3.35, not 3350 or "
     "3.35e12) (got 4000)"),
    (("bandwidth_gb_s: 600", "bandwidth_gb_s: 600e9"), "interconnect.bandwidth_gb_s: more than any GPU has"),
    (("host_link_gb_s: 64", "host_link_gb_s: 64e9"), "host_link_gb_s: more than any GPU has (at most 10,000 GB/s)"),
    # said of the profile's "(top level)"
    (("hbm_gib: 96", "hbm_gib: 96\ncuda_total_gib: 100"), "acme-x1.yaml: cuda_total_gib: 100.0 is above hbm_gib 96.0"),
])
def test_a_gpu_figure_in_the_wrong_unit_is_refused_naming_the_unit(cli, tmp_path, edit, says):
    path = tmp_path / "acme-x1.yaml"
    assert edit[0] in GPU
    path.write_text(GPU.replace(*edit))
    r = cli("estimate", "request", "--gpu", path, "--model", "llama-3-8b", "--input", "100", "--output", "10")
    assert r.code == 2 and "Traceback" not in r.err and r.err.strip().startswith("error:"), r.err
    assert says in r.err.replace("\n", ""), r.err


@pytest.mark.parametrize("status", ["calibrated", "transferred"])
@pytest.mark.parametrize("cut, key", [
    ("  attention_decode:", "calibration.attention_decode: missing"),
    ("  other:", "calibration.other: missing"),
    ("  iteration_overhead_ms:", "calibration.iteration_overhead_ms: missing"),
    ("  gemm: {eta_compute: 0.871, ", "calibration.gemm.eta_compute: missing"),
], ids=["attention_decode", "other", "iteration_overhead_ms", "gemm.eta_compute"])
def test_a_fitted_calibration_missing_a_family_is_refused_not_run_at_the_roofline(cli, tmp_path, status, cut, key,
                                                                                  repo_root):
    """A family left out took RooflineParams()'s η = 1 while every report still said measured (a user's
    h100-sxm copy without attention_decode ran TPOT 6.97 ms against the profile's 7.28 under
    "mode calibrated")."""
    text = (repo_root / "hardware_profiles" / "h100-sxm.yaml").read_text()
    lines = text.splitlines(keepends=True)
    hit = [i for i, line in enumerate(lines) if line.startswith(cut)]
    assert len(hit) == 1, cut
    # a line cut, or a family whose η the line's head gave, given the rest of its parameters
    lines[hit[0]] = "" if cut.endswith(":") else lines[hit[0]].replace(cut, cut.split("{")[0] + "{")
    path = tmp_path / "my-h100.yaml"
    path.write_text("".join(lines).replace("name: h100-sxm", "name: my-h100")
                    .replace("status: calibrated", f"status: {status}"))
    r = cli("estimate", "request", "--gpu", path, "--model", "llama-3-8b", "--input", "100", "--output", "10")
    assert r.code == 2 and "Traceback" not in r.err and r.err.strip().startswith("error:"), r.err
    err = r.err.replace("\n", "")
    assert f"{path}: {key}: a calibration whose status is {status}" in err, r.err
    # the same file at roofline status says so and runs: the refusal is of the claim, not of the defaults
    path.write_text(path.read_text().replace(f"status: {status}", "status: roofline"))
    assert cli("estimate", "request", "--gpu", path, "--model", "llama-3-8b", "--input", "100",
               "--output", "10").code == 0


def test_every_shipped_gpu_is_within_the_unit_bounds():
    from simulator.profiles.hardware import UNIT_BOUNDS

    for name, gpu in builtin_hardware().items():
        for peak in gpu.peak_tflops.values():
            assert peak <= UNIT_BOUNDS["peak_tflops"][0] / 5, name      # headroom for the next generations
        assert gpu.hbm_bandwidth_tb_s <= UNIT_BOUNDS["hbm_bandwidth_tb_s"][0] / 5, name


def test_an_xgmi_mesh_gives_a_group_its_peer_links_only():
    mi, h = load_hardware("mi300x"), load_hardware("h200")
    links = mi.interconnect.peer_links
    assert mi.group_bandwidth_gb_s(8) == mi.interconnect.bandwidth_gb_s
    assert mi.group_bandwidth_gb_s(2) == pytest.approx(mi.interconnect.bandwidth_gb_s / links)
    assert h.group_bandwidth_gb_s(2) == h.group_bandwidth_gb_s(8) == h.interconnect.bandwidth_gb_s


def test_benchmark_gpu_names_find_their_profile_by_the_longest_match():
    gpus = builtin_hardware()
    expect = {"gb200": "gb200-nvl72", "b200_sxm": "b200", "b300_sxm": "b300", "gb300": "gb300-nvl72",
              "H100-SXM5-80GB": "h100-sxm", "H100 PCIe 80GB": "h100-pcie", "A100-SXM4-40GB": "a100-sxm-40gb",
              "A100-SXM4-80GB (README: '1 x A100 80G')": "a100-sxm-80gb", "AMD Instinct MI355X": "mi355x",
              "tpu-v5p": None}
    assert {t: match_benchmark_gpu(t, gpus) for t in expect} == expect


def test_no_simulator_module_names_a_gpu(repo_root):
    """GPU facts live in the profiles; names appear in docstrings, comments and examples only."""
    import ast
    import re

    names = re.compile(r"\b(h100|a100|l40s|h200|b200|gb200|b300|gb300|mi3\d\dx)\b", re.IGNORECASE)
    hits = []
    for path in sorted((repo_root / "simulator").rglob("*.py")):
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body
                and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                if names.search(node.value.replace("_h200_b200", "")) and "description" not in path.name:
                    hits.append(f"{path.relative_to(repo_root)}:{node.lineno}: {node.value[:60]!r}")
    allowed = ("fleet/classes.py", "planning/grid.py", "cli/examples.py")   # schema examples, --help examples
    assert [h for h in hits if not h.startswith(tuple(f"simulator/{a}" for a in allowed))] == []


def test_a_plan_says_which_gpus_it_ran_on_transferred_calibrations(cli, tmp_path):
    path = _scenario(tmp_path, "b200")
    path.write_text(path.read_text() + "slo: {ttft_p99_ms: 2000, tpot_p99_ms: 200}\n")
    r = cli("plan", path, "--vary", "pools.main.replicas=1..2", "--vary", "pools.main.gpu=b200,mi355x",
            "--workers", "1", "-o", tmp_path / "plan")
    assert r.code == 0, r.err
    text = " ".join(r.out.split())      # notes wrap at the terminal's width
    assert "note: mi355x cost model is transferred from b200" in text and "note: b200" not in text
    cal = json.loads((tmp_path / "plan" / "plan.json").read_text())["calibration"]
    assert cal == {"b200": {"status": "calibrated", "calibrated": True},
                   "mi355x": {"status": "transferred", "calibrated": False, "transferred_from": "b200"}}


@pytest.mark.parametrize("model", ["llama-3.1-70b", "qwen3-30b-a3b"])
def test_a_tp2_all_reduce_on_the_mesh_is_priced_on_one_link(model):
    """The same GPU as a switch would be faster at TP 2 and the same at TP 8."""
    from simulator.costmodel import CostModel
    from simulator.profiles import load_model

    mesh = load_hardware("mi300x")
    switch = mesh.model_copy(update={"interconnect": mesh.interconnect.model_copy(update={"peer_links": None})})
    m = load_model(model)
    for tp, slower in ((2, True), (8, False)):
        t_mesh, t_switch = (CostModel(m, g, tp=tp).comm_time(4096) for g in (mesh, switch))
        assert (t_mesh > t_switch) if slower else (t_mesh == pytest.approx(t_switch))


def test_a_json_gpu_file_is_calibrated_dry_but_not_written(cli, tmp_path, shared_data):
    import yaml

    path = tmp_path / "acme.json"
    path.write_text(json.dumps(yaml.safe_load(GPU)))
    r = cli("calibrate", "--data", shared_data, "--gpu", path, "--dry-run", "--quiet")
    assert r.code == 0 and "acme-x1: transferred from h100-sxm" in r.out
    r = cli("calibrate", "--data", shared_data, "--gpu", path, "--quiet")
    assert r.code == 2 and "YAML" in r.err and "Traceback" not in r.err
    assert json.loads(path.read_text()) == yaml.safe_load(GPU)


def test_a_json_gpu_file_is_refused_before_the_fit(cli, tmp_path, monkeypatch):
    """Written into as YAML, a JSON profile is refused before the minute-long fit, not after it."""
    import yaml

    from simulator.calibration import pipeline

    def fit(*args, **kwargs):
        raise AssertionError("the fit ran")

    monkeypatch.setattr(pipeline, "run", fit)
    path = tmp_path / "acme.json"
    path.write_text(json.dumps(yaml.safe_load(GPU)))
    r = cli("calibrate", "--gpu", path, "--quiet")
    assert r.code == 2 and "is JSON" in r.err and str(path) in r.err and "Traceback" not in r.err
