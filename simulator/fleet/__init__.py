"""The fleet: pools of replicas with a lifecycle, routers, autoscalers, request classes and the front end.

``engine`` simulates one replica; this package decides which replicas
exist, when they are paid for, and which requests reach them.
"""
