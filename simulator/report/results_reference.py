"""Generate the results.json field reference (docs/reference/results-fields.md) from the writers' declarations.

Every block of results.json is written by one function, and the module that
holds it declares the block's keys (``FIELDS`` and friends, built with
:mod:`simulator.fields`) beside it. This module only puts the blocks
together in the file's shape (:data:`RESULTS`) and renders them, one
section per block; the suite regenerates the page and checks real runs'
files against :data:`RESULTS` both ways (tests/test_results_fields.py).

``python -m simulator.report.results_reference`` rewrites the page's generated block.
"""
from __future__ import annotations

from ..fields import AS_GIVEN, Field, Fields, block
from ..metrics import results
from ..scenario.reference_doc import rewrite_between
from ..sharding import split
from . import fleet_report

__all__ = ["RESULTS", "generate", "update", "PAGE"]

#: The whole file: vLLM's keys, then ``slo`` and ``llmsim``.
RESULTS: Fields = {
    **results.FIELDS,
    "llmsim": block("what llmsim adds to vLLM's keys: the fleet, its pools, the bill, energy, intervals", {
        **fleet_report.FIELDS,
        "shards": block("how a sharded run was split", split.FIELDS, when="`llmsim run --shards N`"),
    }),
}

BEGIN = "<!-- BEGIN GENERATED FIELDS -->"
END = "<!-- END GENERATED FIELDS -->"
PAGE = "docs/reference/results-fields.md"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _meaning(f: Field, same_as: str | None) -> str:
    out = f.meaning
    if f.unit == AS_GIVEN:
        out += " (keys as in the scenario: see [Scenario keys](scenario-keys.md))"
    if same_as:
        out += f"; keys as in `{same_as}`"
    elif f.keys is not None:
        out += "; keys below"
    if f.when:
        out += f". Only when {f.when}"
    return _cell(out)


def _section(path: str, meaning: str, keys: Fields, seen: dict[int, str]) -> list[str]:
    lines = [f"### `{path}`" if path else "### Top level", "", _cell(meaning[:1].upper() + meaning[1:]) + ".", "",
             "| key | unit | meaning |", "|---|---|---|"]
    later = []
    copies = [k for k, f in keys.items() if f.copy_of]
    for k, f in keys.items():
        if f.copy_of:
            if k == copies[0]:      # the repeated keys in one row: their definitions are where they come from
                origin = f.copy_of.rpartition(".")[0]
                lines.append(f"| {', '.join(f'`{c}`' for c in copies)} | as there | `{origin}`'s figures, repeated "
                             "here when the fleet has one pool (each only when it is there) |")
            continue
        same_as = seen.get(id(f.keys)) if f.keys is not None else None
        lines.append(f"| `{k}` | {_cell(f.unit)} | {_meaning(f, same_as)} |")
        if f.keys is not None and same_as is None:
            sub = (f"{path}.{k}" if path else k) + ("[]" if f.unit.startswith("list") else "")
            seen[id(f.keys)] = sub
            later.append((sub, f))
    for sub, f in later:
        lines += ["", *_section(sub, f.meaning, f.keys or {}, seen)]
    return lines


def generate() -> str:
    """The page's generated block: one section per block, parents first."""
    seen: dict[int, str] = {}
    body = _section("", "the top level: vLLM's keys and definitions (``vllm bench serve``), then "
                    "``slo`` and ``llmsim``", RESULTS, seen)
    return "\n".join([BEGIN, "", *body, "", END])


def update(path: str = PAGE) -> None:
    """Rewrite the generated block of ``path`` in place."""
    rewrite_between(path, BEGIN, END, generate())


if __name__ == "__main__":
    update()
