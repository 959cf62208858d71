"""What-if variants: named overlays of scenario keys, and the ladder of runs they make.

A capacity plan is argued lever by lever ("INT8 saves this much, then
continuous batching that much"), so a scenario carries its levers beside
the baseline instead of in N copied files that drift apart. A variant is a
mapping of ``--set`` assignments (same key paths, list items by index or
``name``); applying it is exactly what the command line would do.

The ladder is the list of runs: the baseline, then one step per variant.
``cumulative`` (the default) stacks variants 0..i in step i, the usual
"and then we also..." story; ``independent`` applies each alone, to rank
levers against the same baseline.
"""
from __future__ import annotations


from dataclasses import dataclass
from typing import Annotated, Any, Literal, Mapping, Sequence

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from ..errors import LlmsimError, nearest

__all__ = ["BASELINE", "Variant", "Variants", "LadderMode", "Step", "ladder_steps", "select_variants",
           "overlay_assignments", "merge_overlays", "yaml_text"]

#: The name of the ladder's first step; no variant may take it.
BASELINE = "baseline"

Overlay = dict[str, Any]


class Variant(BaseModel):
    """One what-if lever: keys to change on top of the baseline."""

    model_config = ConfigDict(extra="forbid")

    # The name becomes a results folder (`-o DIR` writes DIR/<name>/), hence the characters.
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$",
                      description="names the ladder step and its results folder (letters, digits, _ . + -)")
    description: str = Field(default="", description="shown beside the step")
    set: Overlay = Field(default_factory=dict,
                         description="key.path: value overlays, addressed as with --set (pools.main.tp: 2)")


def _unique(variants: list[Variant]) -> list[Variant]:
    seen: set[str] = set()
    for v in variants:
        if v.name == BASELINE:
            raise ValueError(f"{BASELINE!r} names the ladder's first step; give the variant another name")
        if v.name in seen:
            raise ValueError(f"two variants are named {v.name!r}")
        seen.add(v.name)
    return variants


Variants = Annotated[list[Variant], AfterValidator(_unique)]
LadderMode = Literal["cumulative", "independent"]


@dataclass(frozen=True)
class Step:
    """One rung of the ladder: the variants applied on top of the baseline, in order."""

    name: str
    variants: tuple[Variant, ...] = ()

    @property
    def description(self) -> str:
        return self.variants[-1].description if self.variants else "the scenario as written"


def ladder_steps(variants: Sequence[Variant], mode: LadderMode = "cumulative") -> list[Step]:
    steps = [Step(BASELINE)]
    for i, v in enumerate(variants):
        steps.append(Step(v.name, tuple(variants[: i + 1]) if mode == "cumulative" else (v,)))
    return steps


def select_variants(variants: Sequence[Variant], names: Sequence[str], source: Any = None) -> tuple[Variant, ...]:
    """The variants named on the command line, in the order given."""
    by_name = {v.name: v for v in variants}
    out = []
    for n in names:
        if n not in by_name:
            known = ", ".join(by_name) or "(the scenario declares none)"
            raise LlmsimError(f"no variant named {n!r}{nearest(n, list(by_name))}; variants: {known}", source=source,
                              key_path="variants")
        if by_name[n] in out:     # applied twice it is applied once: the flag given twice is a pasting slip
            raise LlmsimError(f"{n} is given twice; give each variant once", source=source,
                              key_path="--variant")
        out.append(by_name[n])
    return tuple(out)


def merge_overlays(overlays: Sequence[Mapping[str, Any]]) -> Overlay:
    """Overlays applied one after the other, as one overlay: a key set again
    moves to where it was last set, so applying the result in order leaves
    the scenario as applying each overlay in turn would (a plain dict
    update would keep the key at its first place, before a parent key set
    in between, which then undoes it)."""
    out: Overlay = {}
    for overlay in overlays:
        for key, value in overlay.items():
            out.pop(key, None)
            out[key] = value
    return out


def overlay_assignments(overlay: Mapping[str, Any]) -> list[str]:
    """An overlay as ``--set`` assignments. Values go out as YAML flow text,
    which reads back to the same value, so the one override walker
    (``overrides.apply_override``) does all the addressing."""
    return [f"{key}={yaml_text(value)}" for key, value in overlay.items()]


def yaml_text(value: Any) -> str:
    """``value`` as a user writes it after ``--set key=``: one line of YAML that reads back to the same value,
    so an assignment built from it applies, and a message quoting it reads, as the command line would."""
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 30, allow_unicode=True)
    return text.removesuffix("...\n").strip()
