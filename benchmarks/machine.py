"""The machine a benchmark ran on, as its generated section states it: wall times are the machine's."""
from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what the platform reports."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def describe() -> str:
    """``nproc`` = N, CPU "MODEL", CPython X.Y.Z."""
    return f"`nproc` = {os.cpu_count()}, CPU \"{cpu_model()}\", CPython {platform.python_version()}"
