"""``llmsim calibrate``: the fit, the shipped profiles and the docs agree.

The data-driven checks need ../shared/data (the measured kernel tables) and
skip without it; the rest (roofline defaults, the YAML block writer, the
missing-data error) run anywhere. One fit of the two measured GPUs is shared
by the whole module (~10 s).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from simulator.calibration import data as cdata
from simulator.calibration import evaluate, pipeline, report, transfer
from simulator.calibration.write import MARKER, render, replace_block, write_profile
from simulator.costmodel import components as C
from simulator.profiles import list_builtin, load_hardware
from simulator.profiles.hardware import AllReduceParams, Calibration, RooflineParams

MEASURED = ["a100-sxm-80gb", "h100-sxm"]
ROOFLINE = Calibration(status="roofline")

# The bounds docs/calibration.md states for the median APE of each family on
# both measured GPUs (the < 5% aim is met for gemm on H100 and for
# all-reduce; the other families are limited by the engine's functional
# forms, see the doc's "Where the model misses").
MEDIAN_BOUND = {"gemm": 6.0, "attention_prefill": 10.5, "attention_decode": 10.5, "allreduce": 5.0}
DOC_TOLERANCE_PP = 0.5


@pytest.fixture(scope="module")
def kernels(shared_data):
    return cdata.load(shared_data)


@pytest.fixture(scope="module")
def fresh(shared_data):
    """A dry calibration run of the measured GPUs (nothing written)."""
    return pipeline.run(shared_data, MEASURED, moe_mla=False)


@pytest.fixture(scope="module")
def committed():
    return {n: load_hardware(n) for n in list_builtin("hardware_profiles")}


def _doc_table(repo_root: Path) -> dict[tuple[str, str], tuple[float, float]]:
    text = (repo_root / "docs" / "calibration.md").read_text()
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[1] in cdata.FAMILIES and cells[0] in MEASURED:
            out[(cells[0], cells[1])] = (float(cells[3].rstrip("%")), float(cells[4].rstrip("%")))
    return out


# --- the fit ---------------------------------------------------------------

def test_fit_reaches_the_documented_bounds(fresh):
    for r in fresh.errors.itertuples():
        assert r.median_ape < MEDIAN_BOUND[r.family], f"{r.gpu} {r.family}: median {r.median_ape:.2f}%"
        # Calibration must be a large improvement over the pure roofline.
        assert r.median_ape < 0.5 * r.roofline_median_ape
    assert set(fresh.errors["gpu"]) == set(MEASURED)
    assert len(fresh.errors) == len(MEASURED) * len(cdata.FAMILIES)


def test_fitted_efficiencies_are_physical(fresh):
    for name, prof in fresh.profiles.items():
        cal = prof.calibration
        assert cal.status == "calibrated"
        for fam in ("gemm", "attention_prefill", "attention_decode", "other"):
            p = getattr(cal, fam)
            assert 0 < p.eta_compute <= 1 and 0 < p.eta_memory <= 1, (name, fam)
        etas = [cal.allreduce.eta_bandwidth, cal.allreduce.custom_eta_bandwidth, *cal.allreduce.eta_by_gpus.values()]
        assert all(0 < e <= 1 for e in etas)


def _measured_sibling(gpus: dict, name: str) -> str:
    """The measured profile whose fit a profile's parameters come from,
    through a transferred intermediary (gb200-nvl72 copies b200's, which are
    transferred from h100-sxm)."""
    seen = set()
    while name not in MEASURED and name not in seen:
        seen.add(name)
        name = transfer.SOURCES.get(name) or gpus[name].calibration.transferred_from
    return name


@pytest.mark.parametrize("source", ["fresh", "committed"])
def test_calibrated_never_faster_than_roofline_on_measured_shapes(source, fresh, committed, kernels):
    gpus = fresh.profiles if source == "fresh" else committed
    for name, gpu in gpus.items():
        # Transferred profiles are checked on their measured sibling's shapes.
        shapes = _measured_sibling(gpus, name)
        for fam in cdata.FAMILIES:
            df = kernels.family(fam, shapes)
            cal = evaluate.predict(fam, df, gpu, gpu.calibration)
            roof = evaluate.predict(fam, df, gpu, ROOFLINE)
            assert np.all(cal >= roof * (1 - 1e-12)), f"{name} {fam}: faster than the roofline"


def test_allreduce_time_is_nondecreasing_in_message_size(committed):
    sizes = np.logspace(2, 31, 400, base=2.0)
    for name, gpu in committed.items():
        for n in (2, 4, 8):
            t = C.allreduce_time(sizes, n, gpu.interconnect.bandwidth_gb_s * 1e9, gpu.calibration.allreduce)
            assert np.all(np.diff(t) >= -1e-15), f"{name} tp={n}"


# --- the shipped profiles and the docs -------------------------------------

def test_committed_profiles_reproduce_their_error_blocks_and_the_docs(committed, kernels, repo_root):
    table = report.error_table(kernels, {n: committed[n] for n in MEASURED})
    doc = _doc_table(repo_root)
    assert len(doc) == len(MEASURED) * len(cdata.FAMILIES), "docs/calibration.md error table not found"
    for r in table.itertuples():
        stored = committed[r.gpu].calibration.error[r.family]
        assert stored.n == r.n
        assert stored.median_ape == pytest.approx(r.median_ape, abs=0.01)
        assert stored.p90_ape == pytest.approx(r.p90_ape, abs=0.01)
        med, p90 = doc[(r.gpu, r.family)]
        assert abs(med - r.median_ape) <= DOC_TOLERANCE_PP, (r.gpu, r.family, med, r.median_ape)
        assert abs(p90 - r.p90_ape) <= DOC_TOLERANCE_PP, (r.gpu, r.family, p90, r.p90_ape)
        assert r.median_ape < MEDIAN_BOUND[r.family]


def test_committed_profiles_are_what_a_fresh_fit_gives(committed, fresh):
    """Stale profiles (data or code changed, calibrate not re-run) show up here."""
    for name in MEASURED:
        for fam, err in fresh.profiles[name].calibration.error.items():
            assert committed[name].calibration.error[fam].median_ape == pytest.approx(err.median_ape, abs=0.5)


def test_every_other_profile_is_transferred_from_a_measured_sibling(committed):
    for name, gpu in committed.items():
        cal = gpu.calibration
        if name in MEASURED:
            assert cal.status == "calibrated" and cal.error
            continue
        assert cal.status == "transferred", name
        assert _measured_sibling(committed, name) in MEASURED and cal.rule
        assert cal.iteration_overhead_ms > 0
        for fam in ("gemm", "attention_prefill", "attention_decode", "other"):
            p = getattr(cal, fam)
            assert p.eta_compute <= 1 and p.eta_memory <= 1
    # PCIe parts cannot run vLLM's custom all-reduce.
    for name in ("h100-pcie", "l40s"):
        assert committed[name].calibration.allreduce.custom_max_bytes == 0


# --- pieces that need no data ----------------------------------------------

def test_default_parameters_are_the_pure_roofline():
    m, n, k = np.array([1.0, 64, 8192]), np.array([1024.0, 4096, 16384]), np.array([4096.0, 1024, 8192])
    f, b = C.gemm_flops_bytes(m, n, k)
    assert np.allclose(C.gemm_time(m, n, k, 1e15, 3e12, RooflineParams()), np.maximum(f / 1e15, b / 3e12))
    msg = np.array([1e3, 1e6, 1e9])
    ring = 2 * 7 / 8 * msg / 450e9
    assert np.allclose(C.allreduce_time(msg, 8, 450e9, AllReduceParams()), ring)
    assert C.allreduce_time(1e6, 8, 450e9, AllReduceParams()) == pytest.approx(ring[1])


def _a_calibration() -> Calibration:
    return Calibration(status="calibrated", source="test \"quoted\" — ünïcode", rule="r: x, y",
                       gemm=RooflineParams(eta_compute=0.8, eta_memory=0.9, sharpness=4.0, k_half=100.0),
                       allreduce=AllReduceParams(eta_bandwidth=0.7, eta_by_gpus={2: 0.7, 8: 0.95},
                                                 custom_max_bytes=8.0 * 2**20, custom_eta_bandwidth=0.6,
                                                 oneshot_max_bytes=262144.0),
                       attention_decode=RooflineParams(sharpness=math.inf), iteration_overhead_ms=1.0,
                       error={"gemm": {"median_ape": 3.6, "p90_ape": 12.1, "n": 10}})


def test_block_writer_preserves_the_rest_of_the_file_and_is_idempotent(tmp_path, repo_root):
    src = repo_root / "hardware_profiles" / "h100-sxm.yaml"
    path = tmp_path / "h100-sxm.yaml"
    original = src.read_text()
    head = original.split(MARKER)[0]
    path.write_text(head)
    cal = _a_calibration()
    assert write_profile(path, cal)
    text = path.read_text()
    assert text.startswith(head) and text.count("\ncalibration:") == 1 and text.count(MARKER) == 1
    assert load_hardware(str(path)).calibration == cal
    assert not write_profile(path, cal)  # unchanged second time
    # A key after the block survives a rewrite, and so does its comment.
    path.write_text(text + "# trailing comment\nextra_key: 1\n")
    out = replace_block(path.read_text(), render(Calibration(status="roofline")))
    assert out.startswith(head) and out.endswith("# trailing comment\nextra_key: 1\n")
    assert out.count(MARKER) == 1


def test_missing_data_dir_is_a_clear_user_error(cli, tmp_path):
    r = cli("calibrate", "--data", tmp_path / "nope", "--dry-run")
    assert r.code == 2
    assert "data directory" in r.err and "--data" in r.err


def test_unknown_gpu_is_a_clear_user_error(cli, shared_data):
    r = cli("calibrate", "--data", shared_data, "--gpu", "h100-sxmm", "--dry-run")
    assert r.code == 2 and "h100-sxmm" in r.err and "h100-sxm" in r.err


def test_data_dir_without_kernel_tables(cli, tmp_path):
    (tmp_path / "kernels").mkdir()
    r = cli("calibrate", "--data", tmp_path, "--dry-run")
    assert r.code == 2 and "gemm.csv" in r.err
