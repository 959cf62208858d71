"""The names a scenario gives itself, its pools, classes and regions.

Other keys find a pool, class or region by its name (``classes[].pool``,
``network.regions``, ``--set pools.NAME...``), results key their blocks by
it, and ``llmsim check`` files a scenario's baseline under its own, so a
name of nothing, or of spaces only, is one no key can name and no reader can
see: refused where it is given, not met later as a routing error about some
other key or a baseline named ``.json``.
"""
from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator


def _named(v: str) -> str:
    if not v.strip():
        raise ValueError("names nothing: expected at least one visible character, as keys, results "
                         "and reports refer to it by its name")
    return v


#: A scenario's, pool's, class's or region's name.
Name = Annotated[str, AfterValidator(_named)]
