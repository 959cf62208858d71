"""``llmsim calibrate``: registered by the calibration module."""
