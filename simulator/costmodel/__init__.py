"""Roofline cost model of one engine iteration, calibrated to measured kernels."""
from .step import CostModel, StepBreakdown

__all__ = ["CostModel", "StepBreakdown"]
