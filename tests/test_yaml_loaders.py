"""The LibYAML-backed loader reads what the pure-Python one reads, and refuses nothing differently."""
from __future__ import annotations

import pytest
import yaml

from conftest import REPO_ROOT
from simulator import structured as S

pytestmark = pytest.mark.skipif(S._CParser is None, reason="PyYAML built without LibYAML")

SHIPPED = sorted(p for d in ("scenarios", "hardware_profiles", "model_profiles", "backend_profiles", "workloads")
                 for p in (REPO_ROOT / d).rglob("*.yaml"))


def test_every_shipped_file_reads_the_same_through_both_loaders():
    assert len(SHIPPED) > 30
    for path in SHIPPED:
        text = path.read_text()
        assert repr(S._load(S._FastStrictLoader(text))) == repr(S._load(S._StrictLoader(text))), path


@pytest.mark.parametrize("text", ["a: 1\nb: x \t y\n", "k:\t1\n", "a: [1 ? 2]\n", "a: {b: 1 ? c}\n"])
def test_what_libyaml_alone_accepts_is_read_by_the_pure_python_loader(text):
    """A tab in a plain scalar or after a key, ``?`` inside a flow item: LibYAML reads them, PyYAML
    refuses them, and so does llmsim, as before."""
    try:
        want = ("ok", S._load(S._StrictLoader(text)))
    except (yaml.YAMLError, ValueError) as e:
        want = ("refused", str(e))
    try:
        got = ("ok", S._parse_yaml(text))
    except (yaml.YAMLError, ValueError) as e:
        got = ("refused", str(e))
    assert got == want and want[0] == "refused"


def test_a_bad_document_is_worded_by_the_pure_python_loader():
    text = "a: 1\n  b: 2\n"
    with pytest.raises(yaml.YAMLError) as fast:
        S._parse_yaml(text)
    with pytest.raises(yaml.YAMLError) as slow:
        S._load(S._StrictLoader(text))
    assert str(fast.value) == str(slow.value)


@pytest.mark.parametrize("text", ["n: 010\n", "t: 1:30\n", "t: 1:30.5\n", "[1, 017]\n"])
def test_both_loaders_refuse_a_number_yaml_readers_read_apart(text):
    for loader in (S._FastStrictLoader, S._StrictLoader):
        with pytest.raises(S.AmbiguousNumber):
            S._load(loader(text))
    assert S._parse_yaml("[007, 0, -0, 0x10, 1_000]\n") == [7, 0, 0, 16, 1000]     # one reading only
