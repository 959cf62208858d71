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
from simulator.calibration import evaluate, pipeline, report
from simulator.calibration import write as cwrite
from simulator.errors import LlmsimError
from simulator.calibration.fit import FamilyFit, settled
from simulator.calibration.write import MARKER, render, rendered_profile, replace_block, write_profiles
from simulator.costmodel import components as C
from simulator.profiles import list_builtin, load_hardware
from simulator.profiles.hardware import AllReduceParams, Calibration, RooflineParams

MEASURED = ["a100-sxm-80gb", "b200", "gb200-nvl72", "h100-sxm", "h200"]
# The fresh fit the module shares: one GPU of each kernel table (~15 s).
FRESH = ["a100-sxm-80gb", "h100-sxm", "h200"]
ROOFLINE = Calibration(status="roofline")

# The bounds docs/calibration.md states for the median APE of each family on
# the measured GPUs (the < 5% aim is met for all-reduce and for gemm on
# H100 and H200; the other families are limited by the engine's functional
# forms, see the doc's "Where the model misses").
MEDIAN_BOUND = {"gemm": 6.5, "attention_prefill": 13.0, "attention_decode": 11.5, "allreduce": 5.0}
DOC_TOLERANCE_PP = 0.5


@pytest.fixture(scope="module")
def kernels(kernel_tables):
    return kernel_tables


@pytest.fixture(scope="module")
def fresh(shared_data):
    """A dry calibration run of the measured GPUs (nothing written)."""
    return pipeline.run(shared_data, FRESH, moe_mla=False)


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
    assert set(fresh.errors["gpu"]) == set(FRESH)
    assert len(fresh.errors) == len(FRESH) * len(cdata.FAMILIES)


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
    through a transferred intermediary if there is one."""
    seen = set()
    while name not in MEASURED and name not in seen:
        seen.add(name)
        name = gpus[name].transfer.sibling if gpus[name].transfer else gpus[name].calibration.transferred_from
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
    for name in FRESH:
        for fam, err in fresh.profiles[name].calibration.error.items():
            assert committed[name].calibration.error[fam].median_ape == pytest.approx(err.median_ape, abs=0.5)


def test_a_rerun_writes_nothing(fresh, repo_root):
    """docs/calibration.md: re-running calibrate on the same data writes nothing, on any machine: a
    refit that prices every row as the stored parameters do keeps them (fit.settled), though its
    unidentified directions (decode attention's compute efficiency) land elsewhere on another CPU."""
    for name in FRESH:
        path = repo_root / "hardware_profiles" / f"{name}.yaml"
        assert rendered_profile(path, fresh.profiles[name].calibration, fresh.fp8_lines.get(name)) is None, name


def test_settled_keeps_stored_parameters_only_where_they_price_the_same():
    """A memory-bound row set cannot tell two compute efficiencies apart: the stored one stays;
    a stored memory efficiency that prices the rows differently is replaced, and the kept fit is
    scored on its own prices."""
    measured = np.array([1.0, 2.0, 4.0])

    def predict(p):
        return measured / p.eta_memory          # memory-bound: eta_compute moves no price

    new = FamilyFit("attention_decode", RooflineParams(eta_compute=0.2, eta_memory=0.8), "cauchy", 25.0, 25.0, 3)
    same = RooflineParams(eta_compute=0.99, eta_memory=0.8)
    kept = settled(same, new, predict, measured)
    assert kept.params is same and kept.median_ape == pytest.approx(25.0)
    assert settled(RooflineParams(eta_compute=0.2, eta_memory=0.7), new, predict, measured) is new
    assert settled(None, new, predict, measured) is new


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
                       attention_prefill=RooflineParams(eta_compute=0.7), other=RooflineParams(eta_memory=0.9),
                       attention_decode=RooflineParams(sharpness=math.inf), iteration_overhead_ms=1.0,
                       error={"gemm": {"median_ape": 3.6, "p90_ape": 12.1, "n": 10}})


def test_block_writer_preserves_the_rest_of_the_file_and_is_idempotent(tmp_path, repo_root):
    src = repo_root / "hardware_profiles" / "h100-sxm.yaml"
    path = tmp_path / "h100-sxm.yaml"
    original = src.read_text()
    head = original.split(MARKER)[0]
    path.write_text(head)
    cal = _a_calibration()
    write_profiles({path: rendered_profile(path, cal)})
    text = path.read_text()
    assert text.startswith(head) and text.count("\ncalibration:") == 1 and text.count(MARKER) == 1
    assert load_hardware(str(path)).calibration == cal
    assert rendered_profile(path, cal) is None  # unchanged second time
    # A key after the block survives a rewrite, and so does its comment.
    path.write_text(text + "# trailing comment\nextra_key: 1\n")
    out = replace_block(path.read_text(), render(Calibration(status="roofline")))
    assert out.startswith(head) and out.endswith("# trailing comment\nextra_key: 1\n")
    assert out.count(MARKER) == 1


def test_profiles_are_written_all_or_none_keeping_mode_and_links(tmp_path, repo_root, monkeypatch):
    """A calibration rewrote profiles one by one through a .tmp file of its own: a failure halfway left
    some rewritten and a .tmp behind, a 0600 profile came back 0644, and a linked profile was replaced
    by a plain file, its shared target never updated."""
    head = (repo_root / "hardware_profiles" / "h100-sxm.yaml").read_text().split(MARKER)[0]
    shared, mine = tmp_path / "shared.yaml", tmp_path / "mine.yaml"
    for p in (shared, mine):
        p.write_text(head)
    mine.chmod(0o600)
    link = tmp_path / "link.yaml"
    link.symlink_to(shared)
    cal = _a_calibration()
    write_profiles({link: rendered_profile(link, cal), mine: rendered_profile(mine, cal)})
    assert link.is_symlink() and load_hardware(str(shared)).calibration == cal
    assert mine.stat().st_mode & 0o777 == 0o600
    # the second write fails: the first is put back, nothing else is left in the folder
    for p in (shared, mine):
        p.write_text(head)
    real = cwrite.replace_text
    calls = []

    def failing(path, text):
        calls.append(path)
        if len(calls) == 2:
            raise LlmsimError("cannot write (No space left on device)", source=path)
        real(path, text)
    monkeypatch.setattr(cwrite, "replace_text", failing)
    with pytest.raises(LlmsimError, match="No space"):
        write_profiles({shared: rendered_profile(shared, cal), mine: rendered_profile(mine, cal)})
    assert shared.read_text() == head and mine.read_text() == head
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.yaml", "mine.yaml", "shared.yaml"]


@pytest.mark.shared_data
def test_gpu_writes_only_the_profiles_asked_for(shared_data):
    """--gpu b300 fits b200 to copy it from, and wrote b200.yaml too."""
    assert sorted(pipeline.run(shared_data, ["b300"], moe_mla=False).profiles) == ["b300"]


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


# --- per-stack kernels, fp8, progress --------------------------------------

def test_stacks_differ_where_the_data_says_and_agree_on_gemms(fresh):
    """bf16 GEMMs of SGLang and TensorRT-LLM run within 10 % of vLLM's at the
    median; their custom all-reduce runs ~30 % faster (measured ratio < 0.8),
    so each gets its own all-reduce block and the GEMM keeps vLLM's."""
    got = {(c.gpu, c.stack, c.family): c for c in fresh.stacks}
    for gpu in ("h100-sxm", "h200"):
        for stack in ("sglang", "trtllm"):
            assert not got[(gpu, stack, "gemm")].material
            assert got[(gpu, stack, "allreduce")].median_ratio < 0.8
            over = fresh.profiles[gpu].calibration.stacks[stack]
            assert over.gemm is None and over.allreduce is not None
            assert over.allreduce.custom_latency_us < fresh.profiles[gpu].calibration.allreduce.custom_latency_us
    assert not fresh.profiles["a100-sxm-80gb"].calibration.stacks      # no other stack measured there


def test_a_backend_selects_its_stack_kernels(committed):
    from simulator.costmodel import CostModel
    from simulator.profiles import load_model
    from simulator.profiles.backend import load_backend

    h200 = committed["h200"]
    model = load_model("llama-3.1-8b")
    base = CostModel(model, h200, 2)
    for stack in ("sglang", "trtllm"):
        assert load_backend(stack).engine["kernels"] == stack
        over = h200.calibration.stacks[stack]
        cm = CostModel(model, h200, 2, kernels=stack)
        assert cm.gpu.calibration.allreduce == over.allreduce
        assert cm.comm_time(64) < base.comm_time(64)
        assert cm.prefill_attention_time([(4096, 0)]) != base.prefill_attention_time([(4096, 0)])
    # A name no backend profile has is refused, not priced as vLLM.
    from pydantic import ValidationError

    from simulator.engine.config import EngineConfig
    with pytest.raises(ValidationError, match="names no serving stack"):
        EngineConfig(kernels="sglnag")
    # A stack with no overrides (or none named) prices the profile's own kernels.
    assert CostModel(model, h200, 2, kernels="vllm").comm_time(64) == base.comm_time(64)
    assert CostModel(model, committed["a100-sxm-80gb"], 2, kernels="trtllm").comm_time(64) == \
        CostModel(model, committed["a100-sxm-80gb"], 2).comm_time(64)


def test_fp8_efficiency_is_fitted_on_measured_fp8_gemms(fresh, committed):
    f = fresh.fp8["h200"]
    assert 0.3 < f.efficiency <= 1.0 and f.compute_bound.n > 100
    assert f.compute_bound.median_ape < 10.0
    assert committed["h200"].fp8_gemm_efficiency == pytest.approx(f.efficiency)


def test_held_out_shapes_are_scored(fresh):
    held = fresh.slices[fresh.slices["family"].str.endswith("(held out)")]
    assert set(held["gpu"]) == {"h200"} and (held["n"] > 10_000).all()
    assert (held["median_ape"] < 20.0).all()


def test_progress_lines_count_steps_and_estimate_what_is_left():
    import io

    from simulator.calibration.progress import Progress

    t = iter([0.0, 0.0, 2.0, 4.0, 6.0, 6.0])
    out = io.StringIO()
    p = Progress(["read", "fit", "fit", "fit"], out, clock=lambda: next(t))
    for what in ("a", "b", "c", "d"):
        p.step(what)
    p.finish()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("calibrate: [1/4] a; 0 s elapsed, about 7 s left")
    # 2 s spent on a step expected to take 1 s: the rest (3 fits of 2 s) is scaled by 2.
    assert lines[1] == "calibrate: [2/4] b; 2 s elapsed, about 12 s left"
    assert lines[-1] == "calibrate: done in 6 s"


def test_calibrate_reports_progress_on_stderr(cli, shared_data):
    r = cli("calibrate", "--data", shared_data, "--dry-run", "--gpu", "a100-sxm-80gb")
    assert r.code == 0, r.err
    lines = [ln for ln in r.err.splitlines() if ln.startswith("calibrate: [")]
    assert lines and all("elapsed, about" in ln for ln in lines)
    n = int(lines[-1].split("[")[1].split("/")[1].split("]")[0])
    assert len(lines) == n                                  # every planned step announced once
    assert "dry run" in r.out


def test_kernel_tables_are_cached_by_content(tmp_path, monkeypatch):
    from simulator.calibration import tables
    from simulator.errors import LlmsimError

    monkeypatch.setenv("LLMSIM_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "t.csv"
    src.write_text("a,b,c\n1,2,3\n4,5,6\n")
    assert not tables.is_cached(src, ["a", "c"])
    first = tables.read_columns(src, ["a", "c"])
    assert tables.is_cached(src, ["a", "c"]) and list(first.columns) == ["a", "c"]
    assert tables.read_columns(src, ["a", "c"]).equals(first)
    src.write_text("a,b,c\n7,8,9\n")                        # a changed file is parsed again
    assert tables.read_columns(src, ["a", "c"])["a"].tolist() == [7]
    with pytest.raises(LlmsimError, match="missing columns d"):
        tables.read_columns(src, ["a", "d"])


def test_prefill_attention_holds_on_unseen_head_configurations(kernels, committed):
    """Leave one head configuration out (docs/calibration.md's held-out table): H200 prefill stays
    within the in-sample bound on shards the fit never saw."""
    from simulator.calibration import holdout

    s = holdout.family_leave_one_group_out("attention_prefill", kernels.family("attention_prefill", "h200"),
                                           committed["h200"])
    assert s.groups >= 8 and s.median_ape < MEDIAN_BOUND["attention_prefill"]
