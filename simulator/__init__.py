"""llmsim: a discrete-event capacity planner for LLM inference fleets.

Notebook entry points are re-exported here (``from simulator import ...``).
"""
import importlib

from .errors import LlmsimError

__version__ = "0.1.0"

# Every name below is imported on first use, so that `import simulator` (every CLI
# command, `llmsim --help` included) stays light: the cost model pulls in scipy.
_LAZY = {"CostModel": "costmodel", "StepBreakdown": "costmodel", "MemoryPlan": "memory", "plan_memory": "memory",
         "HardwareProfile": "profiles", "ModelProfile": "profiles", "load_hardware": "profiles",
         "load_model": "profiles", "run": "notebook", "ladder": "notebook", "plan": "notebook",
         "LadderRun": "notebook"}


def __getattr__(name: str):
    if name == "notebook":
        return importlib.import_module(f"{__name__}.notebook")
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'simulator' has no attribute {name!r}")


__all__ = ["CostModel", "StepBreakdown", "LlmsimError", "MemoryPlan", "plan_memory", "HardwareProfile",
           "ModelProfile", "load_hardware", "load_model", "notebook", "run", "ladder", "plan", "LadderRun",
           "__version__"]
