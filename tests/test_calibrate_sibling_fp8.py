"""A profile that takes its calibration from a sibling takes the sibling's fitted fp8_gemm_efficiency with it.

``llmsim calibrate`` fits ``fp8_gemm_efficiency`` on a GPU's measured fp8
GEMMs and writes it beside the GPU's calibration block. A profile without
rows of its own (b300, gb300-nvl72, the MI3xx parts) took the sibling's
block but kept its own top-level line, which went stale at the sibling's
next refit. The value is a fraction of the bf16 GEMM fit's compute η: a
``copy`` copies it as every η; a ``scaled`` transfer keeps it, the rule
scaling that η itself.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from conftest import REPO_ROOT
from simulator.calibration import pipeline, quantised_gemm
from simulator.calibration.write import replace_fp8
from simulator.profiles import load_hardware
from simulator.profiles.hardware import FitError, builtin_hardware

STALE = 0.9


def _user_copy(folder: Path, builtin: str, name: str) -> Path:
    """``builtin``'s profile under ``name`` with a stale fp8 line, without its data_names (so a GPU of its own,
    calibrated by its transfer rule)."""
    text = (REPO_ROOT / "hardware_profiles" / f"{builtin}.yaml").read_text()
    data = yaml.safe_load(text.split("# --- calibration")[0])
    data.pop("data_names", None)
    data.update(name=name, fp8_gemm_efficiency=STALE)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return path


@pytest.fixture(scope="module")
def written(tmp_path_factory, shared_data):
    """b300 (rule copy) and mi355x (rule scaled), both of b200, as the user's files, calibrated beside b200
    and written (only they: b200.yaml is the repository's)."""
    folder = tmp_path_factory.mktemp("siblings")
    paths = {"copy": _user_copy(folder, "b300", "my-b300"), "scaled": _user_copy(folder, "mi355x", "my-mi355x")}
    result = pipeline.run(shared_data, [*map(str, paths.values()), "b200"])
    mine = replace(result, profiles={p.stem: result.profiles[p.stem] for p in paths.values()})
    assert pipeline.write(mine) == list(paths.values())
    return paths, result, mine


@pytest.mark.shared_data
@pytest.mark.parametrize("rule", ["copy", "scaled"])
def test_a_transferred_profile_is_written_with_its_sibling_s_fp8_efficiency(written, rule):
    paths, result, mine = written
    gpu = load_hardware(str(paths[rule]))
    assert gpu.calibration == result.profiles[gpu.name].calibration and gpu.calibration.transferred_from == "b200"
    fitted = result.fp8["b200"].efficiency
    assert gpu.fp8_gemm_efficiency == fitted != STALE
    assert result.profiles["b200"].fp8_gemm_efficiency == fitted == result.fp8_lines["b200"][0]
    line = next(ln for ln in paths[rule].read_text().splitlines() if ln.startswith("fp8_gemm_efficiency:"))
    assert "b200's, fitted by `llmsim calibrate`" in line and f"(transfer rule {rule}:" in line
    # written again from the same run: nothing changes
    assert pipeline.write(mine) == []


def test_which_profiles_take_which_line():
    """Own fit first (a renamed copy's original's), then the sibling's under either rule; not without fp8
    units, nor from a sibling without an fp8 fit."""
    gpus = builtin_hardware()
    err = FitError(median_ape=1, p90_ape=2, n=3)
    fit = quantised_gemm.EfficiencyFit(0.6, err, err)
    profiles = {n: gpus[n] for n in ("b200", "b300", "mi355x", "h100-pcie", "a100-sxm-40gb")}
    profiles["mine"] = gpus["b300"].model_copy(update={"name": "mine", "transfer": None})
    lines = pipeline._fp8_lines(profiles, {"b200": fit}, {"mine": "b300"}, {"b300": "b200"},
                                {"mi355x": "b200", "h100-pcie": "h100-sxm", "a100-sxm-40gb": "a100-sxm-80gb"})
    assert sorted(lines) == ["b200", "b300", "mi355x", "mine"]
    assert lines["b200"][1].startswith("fitted by `llmsim calibrate` on 3 measured")
    assert "(transfer rule copy:" in lines["b300"][1] and lines["mine"] == lines["b300"]
    assert "(transfer rule scaled:" in lines["mi355x"][1] and {v for v, _ in lines.values()} == {0.6}
    no_fp8 = gpus["mi355x"].model_copy(update={"peak_tflops": {"bf16": 2516.6}})
    assert pipeline._fp8_lines({"mi355x": no_fp8}, {"b200": fit}, {}, {}, {"mi355x": "b200"}) == {}


def test_a_rewritten_fp8_line_takes_its_comment_s_continuation_lines_with_it():
    text = "a: 1\nfp8_gemm_efficiency: 0.7  # one\n                          # two\nnum_sms: 1\nprice: 1\n"
    assert replace_fp8(text, 0.6, "new") == "a: 1\nfp8_gemm_efficiency: 0.6  # new\nnum_sms: 1\nprice: 1\n"
