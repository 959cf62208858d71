"""llmsim: a discrete-event capacity planner for LLM inference fleets.

Notebook entry points are re-exported here (``from simulator import ...``).
"""
import importlib

from .costmodel import CostModel, StepBreakdown
from .errors import LlmsimError
from .memory import MemoryPlan, plan_memory
from .profiles import HardwareProfile, ModelProfile, load_hardware, load_model

__version__ = "0.1.0"

# The notebook entry points (simulator.notebook) load the scenario schema and the
# runner: imported on first use, so that `import simulator` (every CLI command) stays light.
_NOTEBOOK = ("run", "ladder", "plan", "LadderRun")


def __getattr__(name: str):
    if name == "notebook" or name in _NOTEBOOK:
        notebook = importlib.import_module(f"{__name__}.notebook")
        return notebook if name == "notebook" else getattr(notebook, name)
    raise AttributeError(f"module 'simulator' has no attribute {name!r}")


__all__ = ["CostModel", "StepBreakdown", "LlmsimError", "MemoryPlan", "plan_memory", "HardwareProfile",
           "ModelProfile", "load_hardware", "load_model", "notebook", "run", "ladder", "plan", "LadderRun",
           "__version__"]
