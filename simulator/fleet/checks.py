"""Everything that can be known wrong with a scenario before simulating it.

Schema errors come from pydantic; these checks need the profiles (the
model must fit, lengths must fit the context) or look across sections
(classes route to pools that exist; admission never sheds a higher class
first). Each ends in one LlmsimError naming the file and key path.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import LlmsimError
from ..metrics.monthly import check_monthly
from ..metrics.slo import parse_slo
from ..scenario.load import _max_length
from ..scenario.schema import Scenario
from .regions import check_regions
from .setup import PoolSetup, class_speculation, setup_pool


def check_scenario(sc: Scenario, source: str | Path | None = None) -> list[PoolSetup]:
    """Everything that can be known wrong before simulating."""
    def fail(msg: str, key: str):
        raise LlmsimError(msg, source=source, key_path=key)

    names = [p.name for p in sc.pools]
    for i, n in enumerate(names):
        if names.index(n) != i:
            fail(f"two pools are named {n!r}; pool names must differ (classes route to them by name)",
                 f"pools[{i}].name")
    setups = [setup_pool(p, i, source) for i, p in enumerate(sc.pools)]
    routes = class_routes(sc, source)
    served = {names.index(p) for p in routes.values()}
    mi, mo = _max_length(sc.workload.input_tokens), _max_length(sc.workload.output_tokens)
    for i in sorted(served):
        ctx = setups[i].cm.model.max_position_embeddings
        if mi is not None and mo is not None and mi + mo > ctx:
            fail(f"input ({mi}) + output ({mo}) tokens can exceed {setups[i].cm.model.name}'s context "
                 f"of {ctx} tokens (pool {names[i]!r})", "workload.input_tokens")
    ids = sc.workload.id_block_tokens(base_dir(source))
    for i, p in enumerate(sc.pools):
        bs = p.engine.block_size
        if ids and p.engine.prefix_cache and ids % bs:
            fail(f"the workload's prompt block ids stand for {ids} tokens, not a whole number of "
                 f"{bs}-token KV blocks: set a block_size dividing it, or prefix_cache: false",
                 f"pools[{i}].engine.block_size")
        a = p.autoscaling
        if a is not None and not a.min_replicas <= p.replicas <= a.max_replicas:
            fail(f"replicas ({p.replicas}) must lie within autoscaling's min_replicas..max_replicas "
                 f"({a.min_replicas}..{a.max_replicas})", f"pools[{i}].replicas")
    _check_disaggregation(sc, setups, source)
    _check_classes(sc, source)
    setups = class_speculation(setups, sc.classes, routes, source)
    check_regions(sc, source)
    check_monthly(sc, source)
    return setups


def _check_disaggregation(sc: Scenario, setups: list[PoolSetup], source) -> None:
    names = [p.name for p in sc.pools]
    for i, p in enumerate(sc.pools):
        d = p.disaggregation
        if d is None:
            continue
        key = f"pools[{i}].disaggregation.decode_pool"
        if d.decode_pool not in names or d.decode_pool == p.name:
            raise LlmsimError(f"decode_pool must name another pool (pools: {', '.join(names)})",
                              source=source, key_path=key)
        j = names.index(d.decode_pool)
        q = sc.pools[j]
        if q.disaggregation is not None:
            raise LlmsimError(f"pool {q.name!r} prefills for another pool itself; a decode pool must decode",
                              source=source, key_path=key)
        a, b = setups[i].cm, setups[j].cm
        if a.model.name != b.model.name or p.engine.kv_dtype != q.engine.kv_dtype:
            raise LlmsimError(f"the KV of {a.model.name} ({p.engine.kv_dtype}) cannot be decoded by pool "
                              f"{q.name!r} ({b.model.name}, {q.engine.kv_dtype}): both pools need the same model "
                              f"and kv_dtype", source=source, key_path=key)


def _length_routes(sc: Scenario, i: int, c, source) -> str:
    """Check a class's routing by prompt length; returns its last pool (the
    one that takes every prompt the others do not, and whose admission
    would apply)."""
    key = f"classes[{i}].pool_by_input_length"
    pools = {p.name: p for p in sc.pools}
    steps = c.pool_by_input_length
    if c.pool is not None:
        raise LlmsimError(f"class {c.name!r} sets both pool and pool_by_input_length; keep one", source=source,
                          key_path=f"classes[{i}].pool")
    for what in ("admission", "kv_budget_fraction", "speculative_acceptance_rate"):
        if getattr(c, what) is not None:
            raise LlmsimError(f"class {c.name!r} is routed by prompt length over several pools; its {what} "
                              "would hold on one of them only, which is not modelled", source=source,
                              key_path=f"classes[{i}].{what}")
    bounds = [s.below_tokens for s in steps]
    if bounds[-1] is not None or None in bounds[:-1] or any(b <= a for a, b in zip(bounds[:-2], bounds[1:-1])):
        raise LlmsimError("every step but the last needs below_tokens, increasing; the last takes the rest and "
                          f"has none (got {bounds})", source=source, key_path=key)
    for j, st in enumerate(steps):
        if st.pool not in pools:
            raise LlmsimError(f"pool {st.pool!r} does not exist (pools: {', '.join(pools)})", source=source,
                              key_path=f"{key}[{j}].pool")
        if pools[st.pool].disaggregation is not None:
            raise LlmsimError(f"pool {st.pool!r} prefills for another pool; routing by prompt length to a "
                              "disaggregated pair is not modelled", source=source, key_path=f"{key}[{j}].pool")
    return steps[-1].pool


def class_routes(sc: Scenario, source: str | Path | None = None) -> dict[str, str]:
    """Class name → pool name; every class must reach exactly one pool."""
    names = [p.name for p in sc.pools]
    if not sc.classes:
        if len(names) > 1:
            raise LlmsimError(f"{len(names)} pools but no classes: declare classes and route each to a pool "
                              f"(classes: [{{name: ..., pool: {names[0]}}}, ...])", source=source, key_path="classes")
        return {"default": names[0]}
    routes = {}
    for i, c in enumerate(sc.classes):
        if c.name in routes:
            raise LlmsimError(f"two classes are named {c.name!r}", source=source, key_path=f"classes[{i}].name")
        if c.pool_by_input_length is not None:
            routes[c.name] = _length_routes(sc, i, c, source)
            continue
        if c.pool is None:
            if len(names) > 1:
                raise LlmsimError(f"class {c.name!r} is routed to no pool: set its pool to one of "
                                  f"{', '.join(names)}", source=source, key_path=f"classes[{i}].pool")
            routes[c.name] = names[0]
        elif c.pool not in names:
            raise LlmsimError(f"class {c.name!r} is routed to pool {c.pool!r}, which does not exist "
                              f"(pools: {', '.join(names)})", source=source, key_path=f"classes[{i}].pool")
        else:
            routes[c.name] = c.pool
    return routes


def _check_classes(sc: Scenario, source) -> None:
    """Class SLOs parse, and admission never sheds a higher class before a
    lower one sharing its pool: limits may not shrink as priority grows."""
    routes = class_routes(sc, source)
    for i, c in enumerate(sc.classes):
        try:
            parse_slo(c.slo)
        except LlmsimError as e:
            raise LlmsimError(e.message, source=source, key_path=f"classes[{i}].{e.key_path}") from None
    for label, slo in (sc.input_length_buckets.slo if sc.input_length_buckets else {}).items():
        try:
            parse_slo(slo)
        except LlmsimError as e:
            raise LlmsimError(e.message, source=source,
                              key_path=f"input_length_buckets.slo.{label}.{(e.key_path or '').removeprefix('slo.')}") from None
    for i, c in enumerate(sc.classes):
        for j, d in enumerate(sc.classes):
            if routes[d.name] != routes[c.name] or d.priority <= c.priority:
                continue
            lc = c.admission.limits() if c.admission else (float("inf"),) * 2
            ld = d.admission.limits() if d.admission else (float("inf"),) * 2
            if any(x < y for x, y in zip(ld, lc)):
                raise LlmsimError(f"class {d.name!r} (priority {d.priority}) would be shed before {c.name!r} "
                                  f"(priority {c.priority}): a higher class's admission limits must be at least "
                                  f"the lower one's", source=source, key_path=f"classes[{j}].admission")


def base_dir(source: str | Path | None) -> Path | None:
    """The scenario's folder, against which relative trace paths resolve."""
    return Path(source).parent if isinstance(source, Path) else None
