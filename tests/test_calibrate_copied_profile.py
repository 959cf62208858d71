"""A GPU profile copied from a measured one: `llmsim calibrate` uses the rows it names only when they measure it.

docs/how-to/add-a-gpu.md starts a new GPU from a copy of h100-sxm.yaml. The
copy keeps H100's ``data_names``, which name H100's rows of the shared data;
with a datasheet of its own it would be fitted on H100's kernel times
against its own peaks (its ``transfer`` rule ignored), so it is refused
before any table is read. A renamed copy with H100's figures is H100 under
another name: it gets H100's calibration, says so, and leaves H100's rows to
H100 (another GPU transferred from H100 in the same run still finds them).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import REPO_ROOT
from simulator.calibration import pipeline
from simulator.profiles import load_hardware
from simulator.profiles.hardware import (FIT_FIGURES, HardwareProfile, builtin_hardware, fit_figure_differences,
                                         shared_data_names)

H100 = REPO_ROOT / "hardware_profiles" / "h100-sxm.yaml"


def _copy(tmp_path: Path, name: str, **changes) -> Path:
    """h100-sxm.yaml as the guide's step 1 leaves it, renamed, without its calibration, with ``changes``."""
    text = H100.read_text().split("# --- calibration")[0]
    data = yaml.safe_load(text)
    data["name"] = name
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


TRANSFER = {"sibling": "h100-sxm", "rule": "scaled", "why": "the nearest measured part"}
FASTER = {"hbm_bandwidth_tb_s": 4.0, "peak_tflops": {"bf16": 1200, "fp8": 2400, "int8": 2400}}


def test_the_guide_followed_with_h100_s_data_names_kept_is_refused(cli, tmp_path, shared_data):
    """The audit's case: new datasheet, a transfer rule, H100's data_names left in."""
    path = _copy(tmp_path, "my-gpu", transfer=TRANSFER, **FASTER)
    before = path.read_text()
    r = cli("calibrate", "--data", shared_data, "--gpu", path, "--dry-run", "--quiet")
    assert r.code == 2 and "Traceback" not in r.err and len(r.err.strip().splitlines()) == 1, r.err
    err = r.err.strip()
    assert err.startswith(f"error: {path}: data_names: ")
    assert "h100-sxm's measured rows" in err and "kernels 'H100-SXM5-80GB'" in err
    assert "hbm_bandwidth_tb_s 4 (h100-sxm: 3.35)" in err and "peak_tflops.bf16 1200 (h100-sxm: 989)" in err
    assert "delete them" in err and "transfer rule (scaled from h100-sxm)" in err
    assert "calibrated" not in r.out
    # without --dry-run nothing is written either
    r = cli("calibrate", "--data", shared_data, "--gpu", path, "--quiet")
    assert r.code == 2 and path.read_text() == before


def test_without_a_transfer_rule_the_refusal_says_what_to_add(cli, tmp_path, shared_data):
    path = _copy(tmp_path, "my-gpu", **FASTER)
    r = cli("calibrate", "--data", shared_data, "--gpu", path, "--dry-run", "--quiet")
    assert r.code == 2 and "`transfer: {sibling: h100-sxm, rule: scaled}`" in r.err, r.err


def test_the_guide_followed_with_data_names_deleted_is_transferred(cli, tmp_path, shared_data):
    path = _copy(tmp_path, "my-gpu", transfer=TRANSFER, data_names=None, **FASTER)
    r = cli("calibrate", "--data", shared_data, "--gpu", path, "--dry-run", "--quiet")
    assert r.code == 0, r.err
    assert "my-gpu: transferred from h100-sxm\n" in r.out


@pytest.fixture(scope="module")
def renamed_run(tmp_path_factory, shared_data):
    """One dry run of a renamed copy of h100-sxm (another name and price, and
    the transfer rule the guide once asked for) beside h100-pcie, which is
    transferred from h100-sxm."""
    path = _copy(tmp_path_factory.mktemp("renamed"), "my-h100", transfer=TRANSFER,
                 price={"usd_per_gpu_hour": 1.5, "source": "quote"})
    return path, pipeline.run(shared_data, [str(path), "h100-pcie"])


def test_a_renamed_copy_is_calibrated_as_its_original(renamed_run):
    """H100's calibration; h100-pcie still finds H100's rows; h100-sxm, which
    stood in for the copy, is not in the result (so not written)."""
    path, result = renamed_run
    assert list(result.profiles) == ["h100-pcie", "my-h100"]
    assert result.renamed == {"my-h100": "h100-sxm"}
    mine, pcie = result.profiles["my-h100"], result.profiles["h100-pcie"]
    assert mine.calibration.status == "calibrated" and mine.calibration.transferred_from is None
    assert mine.price.usd_per_gpu_hour == 1.5 and mine.data_names == load_hardware(str(path)).data_names
    assert pcie.calibration.transferred_from == "h100-sxm"
    assert set(result.errors["gpu"]) == {"h100-sxm"}                  # the rows' own name in the tables
    # written, it is the block `llmsim calibrate` writes into h100-sxm.yaml (test_calibration: a fresh fit's)
    pipeline.write(replace(result, profiles={"my-h100": mine}))
    assert load_hardware(str(path)).calibration == load_hardware("h100-sxm").calibration


def test_a_renamed_copy_says_so_and_that_its_transfer_rule_was_not_used(renamed_run, cli, monkeypatch):
    path, result = renamed_run
    monkeypatch.setattr(pipeline, "run", lambda *a, **k: result)
    r = cli("calibrate", "--gpu", path, "--gpu", "h100-pcie", "--dry-run", "--quiet")
    assert r.code == 0, r.err
    line = " ".join(r.out.split())
    assert ("my-h100: calibrated, as h100-sxm is: a renamed copy of it (the same data_names and datasheet "
            "figures); its transfer rule (scaled from h100-sxm) is for a GPU without measured rows and was not "
            "used") in line
    assert "h100-pcie: transferred from h100-sxm my-h100: calibrated" in line


def test_rows_of_its_own_and_another_gpu_s_are_refused(cli, tmp_path, shared_data):
    path = _copy(tmp_path, "my-h100", data_names={"kernels": "MY-H100", "datasheet": "H100 SXM5 80GB"})
    r = cli("calibrate", "--data", shared_data, "--gpu", path, "--dry-run", "--quiet")
    assert r.code == 2 and "rows of its own (kernels 'MY-H100')" in r.err and "h100-sxm's" in r.err, r.err


def test_rows_of_two_gpus_are_refused(cli, tmp_path, shared_data):
    path = _copy(tmp_path, "mixed", data_names={"kernels": "H100-SXM5-80GB", "system": "h200_sxm"})
    r = cli("calibrate", "--data", shared_data, "--gpu", path, "--dry-run", "--quiet")
    assert r.code == 2 and "measured rows of 2 GPUs" in r.err and "h200's system 'h200_sxm'" in r.err, r.err


def test_a_copy_of_the_user_s_own_measured_gpu_is_checked_against_it(cli, tmp_path, shared_data):
    """Two files of the user's: the second, a copy of the first with another
    datasheet, names the first's rows (which no built-in has)."""
    first = _copy(tmp_path, "mine", data_names={"kernels": "MINE-1"})
    second = _copy(tmp_path, "mine-2", data_names={"kernels": "MINE-1"}, **FASTER)
    r = cli("calibrate", "--data", shared_data, "--gpu", first, "--gpu", second, "--dry-run", "--quiet")
    assert r.code == 2 and f"{second}: data_names: mine-2 names mine's measured rows" in r.err, r.err


def test_two_files_of_one_name_are_refused(cli, tmp_path, shared_data):
    a = _copy(tmp_path, "twin", data_names=None, transfer=TRANSFER)
    b = tmp_path / "other.yaml"
    b.write_text(a.read_text())
    r = cli("calibrate", "--data", shared_data, "--gpu", a, "--gpu", b, "--dry-run", "--quiet")
    assert r.code == 2 and f"{b}: name: 'twin' is the name of {a} too" in r.err, r.err


def test_a_measured_gpu_with_a_transfer_rule_says_which_was_used():
    """gb200-nvl72 has rows and a copy rule: the rows give its dense fit; the
    rule gives its MoE/MLA fit only where this run refits b200's and not its own."""
    gpus = builtin_hardware()
    names = ["gb200-nvl72", "h100-sxm", "b300"]
    notes = pipeline._source_notes(gpus, names, ["gb200-nvl72", "h100-sxm", "b200"], {}, [])
    assert notes == {"gb200-nvl72": "on its own measured rows; its transfer rule (copy from b200) is for a GPU "
                                    "without measured rows and was not used"}
    notes = pipeline._source_notes(gpus, names, ["gb200-nvl72", "h100-sxm", "b200"], {}, ["b200"])
    assert "gave only its MoE/MLA parameters, b200's fit of this run" in notes["gb200-nvl72"]


# --- the comparison the refusal rests on ---------------------------------------------------------------

BUILTIN = builtin_hardware()


def _with(gpu: HardwareProfile, key: str, value: object) -> HardwareProfile:
    if key.startswith("peak_tflops."):
        return gpu.model_copy(update={"peak_tflops": {**gpu.peak_tflops, key.split(".")[1]: value}})
    if key.startswith("interconnect."):
        return gpu.model_copy(update={"interconnect": gpu.interconnect.model_copy(update={key.split(".")[1]: value})})
    return gpu.model_copy(update={key: value})


FIGURES = [k for k in FIT_FIGURES if k != "peak_tflops"] + ["peak_tflops.bf16", "peak_tflops.fp8"]


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(BUILTIN)), key=st.sampled_from(FIGURES),
       factor=st.floats(1.01, 4.0))
def test_only_a_fit_figure_makes_a_copy_another_gpu(name, key, factor):
    """Name, display name, HBM capacity and price leave a copy the same GPU
    to a fit; each figure a fit divides by, changed alone, is named alone."""
    gpu = BUILTIN[name]
    renamed = gpu.model_copy(update={"name": "x", "display_name": "y", "hbm_gib": gpu.hbm_gib * factor,
                                     "price": gpu.price.model_copy(update={"usd_per_gpu_hour": factor})})
    assert fit_figure_differences(renamed, gpu) == [] == fit_figure_differences(gpu, renamed)
    assert shared_data_names(renamed, gpu) == {f: v for f, v in gpu.data_names.model_dump().items()
                                               if v and f != "benchmarks"}
    if key == "interconnect.kind":
        changed = _with(gpu, key, "pcie" if gpu.interconnect.kind != "pcie" else "nvlink")
    elif key == "interconnect.peer_links":
        changed = _with(gpu, key, (gpu.interconnect.peer_links or 7) + 1)
    elif key == "num_sms":
        changed = _with(gpu, key, int((gpu.num_sms or 100) * factor) + 1)
    else:
        value = _figure(gpu, key)
        changed = _with(gpu, key, (value or 100.0) * factor)
    diff = fit_figure_differences(changed, gpu)
    assert len(diff) == 1 and diff[0].startswith(f"{key} ") and f"({gpu.name}: " in diff[0]
    assert len(fit_figure_differences(gpu, changed)) == 1


def _figure(gpu: HardwareProfile, key: str) -> float | None:
    if key.startswith("peak_tflops."):
        return gpu.peak_tflops.get(key.split(".")[1])
    if key.startswith("interconnect."):
        return getattr(gpu.interconnect, key.split(".")[1])
    return getattr(gpu, key)


def test_no_two_built_in_profiles_name_the_same_rows():
    """The built-ins are each other's siblings, never copies: a row is one GPU's."""
    names = sorted(BUILTIN)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not shared_data_names(BUILTIN[a], BUILTIN[b]), (a, b)


@pytest.mark.parametrize("sibling, says", [
    ("my-gpu", "my-gpu cannot be transferred from itself: name a measured GPU (a100-sxm-80gb"),
    ("h999", "my-gpu is transferred from h999, which is no GPU profile"),
])
def test_a_transfer_rule_that_leads_nowhere_names_its_file(cli, tmp_path, shared_data, sibling, says):
    """A transfer fault is the profile file's: the one line names it, as every other profile fault does."""
    path = _copy(tmp_path, "my-gpu", data_names=None, transfer={**TRANSFER, "sibling": sibling})
    r = cli("calibrate", "--data", shared_data, "--gpu", path, "--dry-run", "--quiet")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    assert r.err.strip().startswith(f"error: {path}: transfer.sibling: {says}"), r.err
