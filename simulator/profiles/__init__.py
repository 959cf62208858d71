"""Hardware and model profiles."""
from .hardware import HardwareProfile, load_hardware
from .loader import list_builtin
from .model import ModelProfile, load_model

__all__ = ["HardwareProfile", "ModelProfile", "load_hardware", "load_model", "list_builtin"]
