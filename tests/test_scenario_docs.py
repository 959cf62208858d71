"""docs/reference/scenario-keys.md lists every scenario key: it must match the schema."""
from pathlib import Path

from simulator.scenario.reference_doc import PAGE, generate

ROOT = Path(__file__).resolve().parents[1]


def test_scenario_reference_is_current():
    text = (ROOT / PAGE).read_text()
    assert generate() in text, f"{PAGE} is stale: run `python -m simulator.scenario.reference_doc`"


def test_every_engine_key_is_documented():
    from simulator.engine.config import EngineConfig

    text = (ROOT / PAGE).read_text()
    for key in EngineConfig.model_fields:
        assert f"`pools[].engine.{key}`" in text
