"""The trace file a scenario replays (``workload.arrival.path``), checked with the scenario.

Left to the reader that opens it, a missing trace was refused as ``nofile.csv: file not found``: no
scenario, no key, and nothing saying that a relative path is read from the scenario's folder, not from
where the command ran. Checked here, before any run is built, the refusal names the scenario file and
the key, as every other refusal of a scenario's value does."""
from __future__ import annotations

from pathlib import Path

from workloads.traces import TraceSpec, existing_trace_file, resolve_trace_path

from ..errors import LlmsimError, did_you_mean
from ..profiles.loader import near_files
from .schema import Scenario

KEY = "workload.arrival.path"


def check_trace_path(sc: Scenario, source: str | Path | None, folder: Path | None) -> None:
    """Refuse a trace path that names no readable trace file; ``folder``: the scenario's, which a
    relative path is read from."""
    spec = sc.workload.arrival
    if not isinstance(spec, TraceSpec):
        return
    path = resolve_trace_path(spec, folder)
    try:
        existing_trace_file(path)
    except LlmsimError as e:
        relative = folder is not None and not Path(spec.path).expanduser().is_absolute()
        where = f" (read as {path}, relative to the scenario's folder)" if relative else ""
        expected = "; expected the path of a trace file to replay" if e.message == "file not found" else ""
        meant = did_you_mean([str(Path(spec.path).parent / n) for n in near_files(path)]
                             if e.message == "file not found" else [])
        raise LlmsimError(f"{spec.path}: {e.message}{meant}{where}{expected}", source=source, key_path=KEY) from None
