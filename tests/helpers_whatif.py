"""The scenario the ladder, compare, check and plot tests run: the CLI
tests' small one (a few hundred requests, well under a second), with
what-if variants to hang off it."""
from __future__ import annotations

from pathlib import Path

from test_scenarios_cli import SCENARIO

#: Its name, the key of its baseline file, and its SLO target on TTFT p99 (ms).
NAME = "small"
TTFT_P99_TARGET = 2000
assert f"name: {NAME}\n" in SCENARIO and f"ttft_p99_ms: {TTFT_P99_TARGET}," in SCENARIO

# Each lever changes something a test can see in results.json.
VARIANTS = """\
variants:
  - name: two-replicas
    description: a second replica
    set: {pools.main.replicas: 2}
  - name: tp2
    description: tensor parallel over two GPUs
    set: {pools.0.tp: 2}
"""


def write_scenario(folder: Path, extra: str = "", *, name: str = "small.yaml", text: str = SCENARIO) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / name
    p.write_text(text + extra)
    return p


def with_ttft_target(ms: float, *, name: str = NAME) -> str:
    """The scenario with another TTFT p99 target (and name)."""
    return SCENARIO.replace(f"ttft_p99_ms: {TTFT_P99_TARGET},", f"ttft_p99_ms: {ms},").replace(
        f"name: {NAME}\n", f"name: {name}\n")
