"""One learner on many processes: torch.distributed world set-up and the collectives rlrun uses.

Every rank runs the same program on the same config. Gradients are averaged over ranks once per
optimiser step (``sync.average_gradients``: one all-reduce over a flat buffer of every parameter
that has a gradient), so every rank holds the same weights after every step.
"""

from rlrun.distributed.sync import (
    active,
    average_gradients,
    gather_rows,
    global_mean_std,
    reduce_sum,
)
from rlrun.distributed.world import World, WorldError, rank_seed, world_from_env

__all__ = ["World", "WorldError", "active", "average_gradients", "gather_rows", "global_mean_std",
           "rank_seed", "reduce_sum", "world_from_env"]
