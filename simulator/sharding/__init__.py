"""``llmsim run --shards N``: a fleet split into independent shards, run in
parallel on a planning executor and merged into one run's results.

:mod:`.split` decides which sessions and replicas each shard gets (and
refuses fleets that cannot be split), :mod:`.shard` simulates one shard and
reduces it to plain columns, :mod:`.merge` puts the shards back together
with the same metrics code an unsharded run uses.
"""
from .merge import run_sharded
from .split import EXACTNESS, ShardPlan, plan_shards

__all__ = ["EXACTNESS", "ShardPlan", "plan_shards", "run_sharded"]
