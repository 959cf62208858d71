"""Traffic: arrival processes, length distributions, sessions and trace readers."""
from .agentic import AgenticSessionSpec, SubagentSpec
from .arrivals import ArrivalSpec, ConcurrencyArrival, GammaArrival, OpenLoopArrival, PoissonArrival
from .autocomplete import AutocompleteSessionSpec
from .chat import ChatSessionSpec
from .drivers import Source, make_source
from .durations import Duration, ExponentialDuration, FixedDuration, LognormalDuration, UniformDuration
from .lengths import (EmpiricalLength, FixedLength, LengthDist, LognormalLength, NormalLength, ShareGPTLength,
                      UniformLength, sharegpt_input, sharegpt_output)
from .rate_profiles import HourlyProfile, RateProfile, RateSchedule, SinusoidProfile, Spike
from .spec import SeedLike, SessionSpec, Streams, WorkloadSpec, spawn_streams
from .system_prompts import SystemPromptSpec, UniformPopularity, ZipfPopularity

__all__ = [
    "ArrivalSpec", "PoissonArrival", "GammaArrival", "ConcurrencyArrival", "OpenLoopArrival",
    "LengthDist", "FixedLength", "UniformLength", "NormalLength", "LognormalLength", "EmpiricalLength",
    "ShareGPTLength", "sharegpt_input", "sharegpt_output",
    "Duration", "FixedDuration", "ExponentialDuration", "LognormalDuration", "UniformDuration",
    "WorkloadSpec", "Streams", "SeedLike", "spawn_streams",
    "SessionSpec", "ChatSessionSpec", "AutocompleteSessionSpec", "SystemPromptSpec", "ZipfPopularity",
    "UniformPopularity", "Source", "make_source", "AgenticSessionSpec", "SubagentSpec",
    "RateProfile", "HourlyProfile", "SinusoidProfile", "Spike", "RateSchedule",
]
from .trace_stats import TraceStats, ideal_block_hit_rate, trace_stats  # noqa: E402,F401
from .traces import TRACE_FORMATS, Trace, TraceSpec, load_trace, parse_trace_spec, read_trace  # noqa: E402,F401
__all__ += ["TraceSpec", "Trace", "TRACE_FORMATS", "load_trace", "read_trace", "parse_trace_spec",
            "TraceStats", "trace_stats", "ideal_block_hit_rate"]
