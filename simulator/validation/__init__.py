"""Checking llmsim against measured serving benchmarks, and fitting a stack's overheads to them."""
