"""A normal or lognormal length whose ``mean`` clipping to ``[min, max]`` would not keep is refused.

Draws are clipped, not re-centred, so ``mean: 20000`` under ``max: 8000``
once drew 8,000 every time, without a word. The scenario now fails to load,
naming the key path, what clipping leaves and what to change; within the
tolerance (10 % of the mean, rounding aside) ``mean`` keeps its meaning of
the shape before truncation.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from pydantic import TypeAdapter, ValidationError

from simulator.scenario.load import load_scenario
from test_sweep import write_tiny_scenario
from workloads.lengths import (MAX_CLIP_SHIFT, MAX_CLIPPED_SHARE, LengthDist, LognormalLength, NormalLength,
                               sharegpt_input)

LENGTH = TypeAdapter(LengthDist)
KINDS = ["normal", "lognormal"]


def refusal(**law) -> str:
    with pytest.raises(ValidationError) as e:
        LENGTH.validate_python(law)
    (problem,) = e.value.errors()
    return problem["msg"].removeprefix("Value error, ")


@pytest.mark.parametrize("dist", KINDS)
def test_a_mean_outside_the_bounds_is_refused(dist):
    assert refusal(dist=dist, mean=20000, std=1000, max=8000) == "mean 20000 is above max 8000; raise max or lower mean"
    assert refusal(dist=dist, mean=50, std=10, min=64, max=8000) == "mean 50 is below min 64; lower min or raise mean"
    assert refusal(dist=dist, mean=0.5, std=1) == "mean 0.5 is below 1, the shortest length; raise mean"
    assert "the longest length llmsim draws" in refusal(dist=dist, mean=1e12, std=1)


@pytest.mark.parametrize("law, fragments", [
    ({"dist": "lognormal", "mean": 1000, "std": 100_000, "max": 5000},
     ["clipping at max 5000 moves the mean from 1000 to 263 (-74%)", "raise max or lower std"]),
    ({"dist": "lognormal", "mean": 2000, "std": 6000, "max": 8000},
     ["clipping at max 8000 moves the mean from 2000 to 1,501 (-25%)"]),
    ({"dist": "normal", "mean": 3, "std": 10, "max": 20},
     ["clipping at min 1 moves the mean from 3 to 5.89 (+96%)", ": lower std"]),
    ({"dist": "normal", "mean": 100, "std": 200, "min": 50, "max": 400}, ["at min 50", "lower min or std"]),
])
def test_a_mean_clipping_moves_past_the_tolerance_is_refused(law, fragments):
    msg = refusal(**law)
    for f in fragments:
        assert f in msg, (f, msg)
    assert "more than the 10% llmsim accepts" in msg and "not re-centred" in msg


def test_within_the_tolerance_mean_is_the_shape_before_truncation():
    """The ShareGPT prompt preset is such a fit: 234 before the cut at 1,024, 220 drawn."""
    d = LENGTH.validate_python({"dist": "lognormal", "mean": 234, "std": 306, "min": 4, "max": 1024})
    assert d.mean() == pytest.approx(sharegpt_input().mean()) == pytest.approx(220.24, abs=0.01)


def test_rounding_alone_is_not_counted():
    """normal(1.4, 0) draws 1 every time (-29 %): rounding, which moves any mean by at most ½."""
    assert NormalLength(mean=1.4, std=0).mean() == 1.0
    assert NormalLength(mean=1.6, std=0.01, max=2).mean() == 2.0


@st.composite
def laws(draw):
    kind = draw(st.sampled_from(KINDS))
    mean = draw(st.floats(0.5, 1e5))
    std = mean * draw(st.floats(0, 20))
    lo = draw(st.integers(1, 1000))
    hi = draw(st.none() | st.integers(lo, lo + 100_000))
    return {"dist": kind, "mean": mean, "std": std, "min": lo, "max": hi}


@settings(max_examples=300, deadline=None, derandomize=True)
@given(law=laws())
def test_what_loads_draws_its_mean_and_what_is_refused_would_not(law):
    """The exact mean of the rounded and clipped draws (an independent sum
    over the survival function) is within the tolerance, plus ½ for rounding,
    of every mean that loads, and outside it, less ½, for every mean refused
    for clipping."""
    cls = NormalLength if law["dist"] == "normal" else LognormalLength
    drawn = cls.model_construct(**{k: v for k, v in law.items() if k != "dist"}).mean()
    lo, hi = law["min"], law["max"] if law["max"] is not None else 2**31 - 1
    try:
        LENGTH.validate_python(law)
    except ValidationError as e:
        msg = e.errors()[0]["msg"]
        if "of the draws on a bound" in msg:     # the share clipped, by the scipy survival function
            d = cls.model_construct(**{k: v for k, v in law.items() if k != "dist"})
            if d.std == 0:
                raise AssertionError(msg)
            share = 1 - float(d._sf(np.array([float(lo)]))[0]) + (float(d._sf(np.array([float(hi)]))[0])
                                                                   if law["max"] is not None else 0.0)
            assert share > MAX_CLIPPED_SHARE - 1e-9, msg
        elif "clipping" in msg:
            assert abs(drawn - law["mean"]) > MAX_CLIP_SHIFT * law["mean"] - 0.5, msg
        else:
            assert not lo <= law["mean"] <= hi, msg
        return
    assert lo <= law["mean"] <= hi
    assert abs(drawn - law["mean"]) <= MAX_CLIP_SHIFT * law["mean"] + 0.5 + 1e-9 * law["mean"]


def test_a_clip_that_keeps_the_mean_but_not_the_shape_is_refused():
    """normal(1000, 5000) in [1, 2000]: its mean survives (a symmetric clip) but 84 % of the draws are min or
    max, not the shape described; refused, naming the share."""
    with pytest.raises(ValidationError, match="puts 84% of the draws on a bound, more than the 50%"):
        LENGTH.validate_python({"dist": "normal", "mean": 1000, "std": 5000, "min": 1, "max": 2000})
    LENGTH.validate_python({"dist": "normal", "mean": 1000, "std": 1000, "min": 1, "max": 2000})   # 32 %


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_the_built_in_scenarios_still_load(path):
    load_scenario(path)


@pytest.mark.parametrize("scenario, key, value, fragment", [
    ("chatbot", "workload.input_tokens.mean", "20000", "workload.input_tokens: mean 20000 is above max 2000"),
    ("chatbot", "workload.output_tokens.std", "5000", "workload.output_tokens: clipping at max 1200 moves the mean "
                                                      "from 300 to 130 (-57%)"),
    ("chatbot", "workload.system_prompt.tokens", "{dist: normal, mean: 500, std: 10, max: 450}",
     "workload.system_prompt.tokens: mean 500 is above max 450"),
    ("chatbot", "workload.session.turns", "{dist: lognormal, mean: 30, std: 20, max: 8}",
     "workload.session.turns: mean 30 is above max 8"),
    ("coding-agent", "workload.session.tool_result_tokens.mean", "20000",
     "workload.session.tool_result_tokens: mean 20000 is above max 12000"),
    ("coding-agent", "workload.session.subagents.task_tokens.min", "400",
     "workload.session.subagents.task_tokens: mean 300 is below min 400"),
])
def test_the_refusal_names_the_key_wherever_a_length_is(tmp_path, cli, repo_root, scenario, key, value, fragment):
    out = tmp_path / "out"
    r = cli("run", repo_root / "scenarios" / f"{scenario}.yaml", "--set", f"{key}={value}", "-o", out)
    assert r.code == 2 and r.out == "" and "Traceback" not in r.err
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and f"(with --set {key}={value})" in lines[0]
    assert fragment in lines[0], lines[0]
    assert not out.exists()


def test_a_file_with_such_a_mean_is_refused_as_it_loads(tmp_path, cli):
    path = write_tiny_scenario(tmp_path, workload={
        "num_requests": 10, "arrival": {"type": "poisson", "rate_per_s": 1},
        "input_tokens": {"dist": "lognormal", "mean": 20000, "std": 600, "max": 8000},
        "output_tokens": {"dist": "fixed", "value": 10}})
    r = cli("run", path)
    assert r.code == 2
    assert r.err.strip() == (f"error: {path}: workload.input_tokens: mean 20000 is above max 8000; "
                             "raise max or lower mean")


def test_the_check_needs_no_scipy():
    """The load-time check is closed form on the standard library's erfc: it agrees with scipy's ndtr."""
    from scipy.special import ndtr

    from workloads.lengths import _ndtr1

    for x in (-40.0, -8.5, -1.0, 0.0, 0.3, 7.0, 40.0, math.inf, -math.inf):
        assert _ndtr1(x) == pytest.approx(float(ndtr(x)), rel=1e-12, abs=1e-300)
