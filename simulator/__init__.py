"""llmsim: a discrete-event capacity planner for LLM inference fleets.

Notebook entry points are re-exported here (``from simulator import ...``).
"""
from .costmodel import CostModel, StepBreakdown
from .errors import LlmsimError
from .memory import MemoryPlan, plan_memory
from .profiles import HardwareProfile, ModelProfile, load_hardware, load_model

__version__ = "0.1.0"

__all__ = ["CostModel", "StepBreakdown", "LlmsimError", "MemoryPlan", "plan_memory", "HardwareProfile",
           "ModelProfile", "load_hardware", "load_model", "__version__"]
