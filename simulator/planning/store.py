"""Finished points on disk, one small JSON file each, named by the point's key.

One file per point (not one growing table) is what makes a sweep
resumable and safe to interrupt: a point is either wholly written (write
to a temporary name, then rename) or absent, whatever killed the run.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Optional

from ..atomic_write import write_atomic
from ..metrics.results import jsonable

__all__ = ["PointStore"]


class PointStore:
    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def get(self, key: str) -> Optional[dict[str, Any]]:
        """The stored row, or None (also for a file a crash left unreadable)."""
        try:
            return json.loads(self._path(key).read_text())["row"]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put(self, key: str, overrides: Mapping[str, Any], row: Mapping[str, Any]) -> None:
        text = json.dumps(jsonable({"key": key, "overrides": dict(overrides), "row": dict(row)}), indent=1)
        write_atomic(self._path(key), lambda tmp: tmp.write_text(text))
