"""The scenario compile step: a plan resolved once, and a run wired from that plan alone."""
from __future__ import annotations

import numpy as np

import simulator.scenario.compile as compile_module
from helpers_case_studies import at_check_settings, path_of
from simulator.runner import simulate
from simulator.scenario.compile import compile_scenario
from simulator.scenario.load import load_scenario


def test_the_plan_resolves_routes_pairs_budgets_and_admission():
    sc = at_check_settings("ttft-program")   # the check settings: a prefill pool feeding a decode pool
    plan = compile_scenario(sc, path_of("ttft-program"))
    assert [p.name for p in plan.pools] == ["chat", "decode"]
    assert plan.routes == {"chat": "chat"}
    (pair,) = plan.pairs
    chat = plan.pools[0]
    # the hand-off's busiest link carries a TP-4 decode GPU's share: TP 8 prefill into TP 4 decode
    decode = plan.pools[1]
    assert (pair.prefill, pair.decode) == ("chat", "decode")
    assert (chat.setup.spec.tp, decode.setup.spec.tp) == (8, 4)
    assert pair.link_bytes.full == chat.setup.cm.model.kv_bytes_per_token("fp8") / 4
    assert pair.link_bytes.window == 0.0 and pair.link_bytes.window_tokens == 0   # no sliding-window layers
    assert chat.admission["chat"].max_wait_s == 1.0 and plan.pools[1].admission == {}
    assert plan.slo.thresholds == {"ttft": 500.0}

    sc, path = load_scenario(path_of("chatbot"), ["classes.free.kv_budget_fraction=0.05"])
    plan = compile_scenario(sc, path)
    by_name = {p.name: p for p in plan.pools}
    free = by_name[plan.routes["free"]]
    assert free.kv_budgets == {"free": max(1, int(0.05 * free.setup.memory.num_blocks))}
    assert free.cold_start_s == free.spec.autoscaling.cold_start_s(free.setup.memory.weights_bytes)
    assert set(plan.class_slos) == {"free", "paid"}


def test_a_router_factory_gives_a_fresh_router_per_stream():
    sc, path = load_scenario(path_of("dau-10m"))
    p = compile_scenario(sc, path).pools[0]
    a, b = p.router(np.random.default_rng(1)), p.router(np.random.default_rng(1))
    assert a is not b and type(a) is type(b)


def test_a_run_builds_each_pool_once(monkeypatch):
    """simulate resolves the scenario once: one setup per pool, the class
    routes once, no router built only to be thrown away."""
    calls = {"setup": 0, "routes": 0, "router": 0}

    def counting(name, fn):
        def wrapped(*a, **k):
            calls[name] += 1
            return fn(*a, **k)
        return wrapped

    monkeypatch.setattr(compile_module, "setup_pool", counting("setup", compile_module.setup_pool))
    monkeypatch.setattr(compile_module, "class_routes", counting("routes", compile_module.class_routes))
    monkeypatch.setattr(compile_module, "make_router", counting("router", compile_module.make_router))
    out = simulate(at_check_settings("ttft-program"), source=path_of("ttft-program"))
    assert calls == {"setup": 2, "routes": 1, "router": 2}
    assert out.plan is not None and out.setups == out.plan.setups
