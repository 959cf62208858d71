"""Router policies, registered by name (see :mod:`.registry` for how to add one).

Importing the package registers the built-in policies.
"""
from .registry import ROUTERS, Router, RouterParams, RouterSpec, make_router, register_router, router_params
from . import load as _load  # noqa: F401  (registers round_robin, random, least_*)
from .affinity import SessionAffinityParams, splitmix64
from .prefix_aware import PrefixAwareParams

__all__ = ["Router", "RouterParams", "RouterSpec", "ROUTERS", "register_router", "router_params", "make_router",
           "SessionAffinityParams", "PrefixAwareParams", "splitmix64"]
