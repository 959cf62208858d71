"""Metrics: request records and gap logs -> vLLM-compatible results.

``compute_results`` builds the results.json dict, ``write_requests`` the
per-request table, ``summary_table`` the terminal view of a results dict.
"""
from .gaps import GapGrid, GapLog
from .percentiles import DEFAULT_PERCENTILES, UniformMixture, percentile_key, sample_percentile, sample_stats
from .results import compute_results, jsonable, write_results
from .slo import SloSpec, parse_slo
from .summary import summary_table
from .table import request_table, write_requests

__all__ = ["GapGrid", "GapLog", "DEFAULT_PERCENTILES", "UniformMixture", "percentile_key", "sample_percentile",
           "sample_stats", "compute_results", "jsonable", "write_results", "SloSpec", "parse_slo",
           "summary_table", "request_table", "write_requests"]
