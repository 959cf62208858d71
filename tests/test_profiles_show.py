"""``llmsim profiles show``: a built-in profile's file, to start one's own from after ``pip install``."""
from __future__ import annotations

import pytest
import yaml

from simulator.profiles import load_hardware
from simulator.profiles.loader import builtin_dir, list_builtin


@pytest.mark.parametrize("kind, folder", [("gpu", "hardware_profiles"), ("model", "model_profiles"),
                                          ("backend", "backend_profiles")])
def test_every_built_in_profile_is_printed_as_shipped(cli, kind, folder):
    for name in list_builtin(folder):
        r = cli("profiles", "show", name, "--kind", kind)
        assert r.code == 0, r.err
        assert r.out == (builtin_dir(folder) / f"{name}.yaml").read_text()


def test_a_printed_gpu_made_ones_own_loads(cli, tmp_path):
    """The add-a-gpu guide's first step: the copy, renamed and without data_names, is a profile."""
    r = cli("profiles", "show", "h100-sxm")
    data = yaml.safe_load(r.out)
    data.pop("data_names", None)
    data.update(name="my-gpu", hbm_gib=96, cuda_total_gib=95.5, hbm_bandwidth_tb_s=4.0)
    path = tmp_path / "my-gpu.yaml"
    path.write_text(yaml.safe_dump(data))
    gpu = load_hardware(str(path))
    assert gpu.name == "my-gpu" and gpu.hbm_gib == 96


@pytest.mark.parametrize("args, words", [
    (("nope",), "no GPU, model or backend profile named 'nope'"),
    (("h100-sxm", "--kind", "model"), "no model profile named 'h100-sxm'"),
    (("h100-sxm", "--kind", "cpu"), "--kind: expected one of gpu, model, backend (got 'cpu')"),
])
def test_a_name_no_profile_has_is_refused_in_one_line(cli, args, words):
    r = cli("profiles", "show", *args)
    assert r.code == 2 and not r.out and r.err.count("\n") == 1 and words in r.err, (r.code, r.out, r.err)


def test_a_file_of_that_name_in_the_current_folder_is_not_what_is_shown(cli, tmp_path, monkeypatch):
    """`llmsim profiles show h100-sxm > h100-sxm`: the shell makes the file, empty, before llmsim runs."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "h100-sxm").write_text("")
    (tmp_path / "vllm").write_text("bogus: 1\n")
    assert cli("profiles", "show", "h100-sxm").out == (builtin_dir("hardware_profiles") / "h100-sxm.yaml").read_text()
    assert cli("profiles", "show", "vllm").out == (builtin_dir("backend_profiles") / "vllm.yaml").read_text()


@pytest.mark.parametrize("key, value", [("gpu", "../model_profiles/llama-3-8b"),
                                        ("model", "../hardware_profiles/h100-sxm")])
def test_a_name_reaching_another_kinds_folder_is_not_a_profile(cli, tmp_path, key, value):
    """A profile is named, or given by its file's path: a name with a folder in it is not resolved through
    the built-in folder (a GPU of ../model_profiles/llama-3-8b loaded the model's file as a GPU)."""
    from test_sweep import write_tiny_scenario

    sc = write_tiny_scenario(tmp_path)
    r = cli("run", sc, "--set", f"pools.chat.{key}={value}", "-o", tmp_path / "out")
    noun = {"gpu": "GPU", "model": "model"}[key]
    assert r.code == 2 and f"unknown {noun} '{value}'" in r.err and "Traceback" not in r.err, r.err


def test_the_group_names_every_kind_it_lists_and_shows(cli):
    """`llmsim profiles --help` said "hardware and model profiles" above a `list` and a `show` of GPUs, models
    and serving backends."""
    r = cli("profiles", "--help")
    assert r.code == 0 and "GPU, model and serving-backend profiles" in r.out, r.out
