"""A run's result folder: results.json, the per-request table, timeline.csv and plots.

Everything is written into a temporary sibling folder and moved into place
at the end, so a failure (a full disk, a plotting error) never leaves a
half-written result folder that looks complete.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..errors import LlmsimError
from ..metrics.results import write_results
from ..metrics.table import write_requests
from ..runner import RunOutput

__all__ = ["check_output_dir", "staged", "write_run_dir"]


def check_output_dir(output: Path | None) -> None:
    if output is not None and output.exists() and not output.is_dir():
        raise LlmsimError("exists and is not a folder; -o names the folder results are written to", source=output)


@contextmanager
def staged(out_dir: Path) -> Iterator[Path]:
    """Yield an empty temporary folder; on success its files replace those
    of the same names in ``out_dir`` (others there are left alone)."""
    out_dir = Path(out_dir).resolve()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".llmsim-", dir=out_dir.parent))
    try:
        yield tmp
        out_dir.mkdir(exist_ok=True)
        for f in tmp.iterdir():
            dest = out_dir / f.name
            if dest.is_dir() and f.is_dir():
                shutil.rmtree(dest)
            os.replace(f, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_run_dir(out_dir: Path, out: RunOutput, *, plots: bool) -> None:
    # The fleet runner exposes a timeline; an older RunOutput has none.
    timeline = getattr(out, "timeline", None)
    with staged(out_dir) as tmp:
        write_results(out.results, tmp / "results.json")
        write_requests(out.requests, tmp / "requests")
        if timeline is not None:
            timeline.to_csv(tmp / "timeline.csv", index=False)
        if plots:
            from ..report.plots import write_run_plots  # matplotlib only when drawing

            write_run_plots(tmp, out.results, out.requests, timeline)
