"""Whether a class may send its requests straight to a pool that decodes for a prefill pool.

llmsim lets such a pool serve a class of its own, prefilling those prompts
itself beside the hand-offs it decodes: what a vLLM decode instance does,
whose KV connector (``kv_role: kv_both``) serves an ordinary request as any
server would. SGLang's servers launched with ``--disaggregation-mode``
(prefill or decode) refuse a request that carries no bootstrap room, the id
its router gives each request it sends to a prefill and a decode server
together ("Invalid request: Disaggregated request received without bootstrap
room id": ``managers/scheduler.py`` Scheduler.handle_generate_request, read
in 0.5.4, 0.5.14, 0.5.19, 0.5.22 and 0.5.23), so under SGLang such a class
would be answered with errors, not served: it is refused.
"""
from __future__ import annotations

from ..errors import LlmsimError
from ..profiles.backend import load_backend
from .schema import Scenario


def check_direct_decode_routes(sc: Scenario, decodes_on: dict[str, str], source) -> None:
    """Refuse a class routed (``pool`` or a ``pool_by_input_length`` step) to an SGLang pool that decodes
    for a prefill pool. ``decodes_on``: each prefill pool's decode pool."""
    prefills_for = {d: p for p, d in decodes_on.items()}
    pools = {p.name: p for p in sc.pools}
    for i, c in enumerate(sc.classes):
        steps = [(f"classes[{i}].pool", c.pool)] + [(f"classes[{i}].pool_by_input_length[{j}].pool", st.pool)
                                                    for j, st in enumerate(c.pool_by_input_length or [])]
        for key, name in steps:
            if name not in prefills_for:
                continue
            backend = pools[name].engine.backend
            if backend is None or load_backend(backend).stack != "sglang":
                continue
            raise LlmsimError(f"class {c.name!r} is routed to pool {name!r}, which decodes for pool "
                              f"{prefills_for[name]!r}: SGLang's disaggregated decode server refuses a request "
                              f"no prefill server bootstraps ('Disaggregated request received without bootstrap "
                              f"room id'); route the class to {prefills_for[name]!r}, or to a pool of its own",
                              source=source, key_path=key)
