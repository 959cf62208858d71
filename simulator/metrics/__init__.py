"""Metrics: request records and gap logs -> vLLM-compatible results.

``compute_results`` builds the results.json dict, ``write_requests`` the
per-request table. Nothing here knows pools or scenarios: the fleet's
``llmsim`` block and the terminal tables are in :mod:`simulator.report`.
"""
from .gaps import GapGrid, GapLog
from .percentiles import DEFAULT_PERCENTILES, UniformMixture, percentile_key, sample_percentile, sample_stats
from .results import compute_results, jsonable, write_results
from .slo import SloSpec
from .table import request_table, write_requests

__all__ = ["GapGrid", "GapLog", "DEFAULT_PERCENTILES", "UniformMixture", "percentile_key", "sample_percentile",
           "sample_stats", "compute_results", "jsonable", "write_results", "SloSpec",
           "request_table", "write_requests"]
