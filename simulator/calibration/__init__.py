"""Fitting the roofline cost model to measured kernel times (``llmsim calibrate``).

data → evaluate (the engine's component functions on measured shapes) →
fit (per op family and GPU) → transfer (GPUs without measurements) →
report (errors, ceilings) → write (the profiles' ``calibration:`` blocks).
:func:`pipeline.run` chains them; see docs/calibration.md for the method.
"""
