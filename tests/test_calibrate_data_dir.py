"""`llmsim calibrate` finds the shared data from a checkout or from any directory, and says where it comes from."""
from __future__ import annotations

import pytest

from simulator.calibration import data
from simulator.errors import LlmsimError


def test_the_data_is_found_beside_the_working_directory_or_a_parent(tmp_path, monkeypatch):
    (tmp_path / "shared" / "data" / "kernels").mkdir(parents=True)
    deep = tmp_path / "project" / "src"
    deep.mkdir(parents=True)
    # as an installed package: nothing beside the module's own location
    monkeypatch.setattr(data, "__file__", str(tmp_path / "venv" / "lib" / "python3" / "site-packages" / "simulator"
                                              / "calibration" / "data.py"))
    assert data.default_data_dir(deep) == tmp_path / "shared" / "data"
    assert data.default_data_dir(tmp_path / "shared") == tmp_path / "shared" / "data"


def test_no_data_anywhere_is_one_message_naming_the_flag_and_the_origin(tmp_path, monkeypatch, cli):
    monkeypatch.setattr(data, "__file__", str(tmp_path / "site-packages" / "simulator" / "calibration" / "data.py"))
    with pytest.raises(LlmsimError) as e:
        data.default_data_dir(tmp_path)
    msg = str(e.value)
    assert "--data" in msg and "AIConfigurator" in msg and str(tmp_path / "shared" / "data") in msg
    monkeypatch.chdir(tmp_path)
    r = cli("calibrate", "--dry-run")
    assert r.code == 2 and "no shared data folder found" in r.err and "Traceback" not in r.err


@pytest.mark.parametrize("where, fragment", [
    (lambda d: d / "afile.txt" / "report.md", "a part of the path is a file"),
    (lambda d: d, "is a folder"),
    (lambda d: "/dev/null", "not a regular file"),
    (lambda d: "/proc/no-such-folder/report.md", "cannot write"),      # refused as root too
], ids=["through-a-file", "a-folder", "a-device", "proc"])
def test_an_unwritable_report_is_refused_before_the_fit(tmp_path, monkeypatch, cli, where, fragment):
    """The fit takes a minute (25 with --moe-mla): a report it could not write afterwards would lose it."""
    from simulator.calibration import pipeline

    fitted = []
    monkeypatch.setattr(pipeline, "run", lambda *a, **k: fitted.append(1))
    (tmp_path / "afile.txt").write_text("keep")
    r = cli("calibrate", "--data", tmp_path, "--dry-run", "--quiet", "--report-md", where(tmp_path))
    assert r.code == 2 and "Traceback" not in r.err and len(r.err.strip().splitlines()) == 1, r.err
    assert f"{where(tmp_path)}: --report-md: " in r.err and fragment in r.err
    assert fitted == [] and sorted(p.name for p in tmp_path.iterdir()) == ["afile.txt"]
