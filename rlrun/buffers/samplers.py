"""Index samplers for :class:`rlrun.buffers.ReplayBuffer`.

A sampler draws row indices from ``range(num_valid)``. Its state is made of
tensors and Python scalars only, so it round-trips through
``torch.load(..., weights_only=True)``.
"""

from __future__ import annotations

import math
from typing import Any

import torch


class Sampler:
    """Base sampler: hooks the buffer calls, all no-ops by default."""

    def setup(self, capacity: int) -> None:
        """Called once by the buffer with its capacity."""

    def on_extend(self, index: torch.Tensor) -> None:
        """Called with the row indices just written."""

    def on_empty(self) -> None:
        """Called when the buffer forgets all rows."""

    def update_priority(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        """Sets row priorities; ignored by samplers without priorities."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def _check_nonempty(num_valid: int) -> None:
    if num_valid < 1:
        raise RuntimeError("cannot sample from an empty buffer; extend it first")


class UniformSampler(Sampler):
    """Draws indices uniformly, with replacement."""

    def sample(
        self, num_valid: int, batch_size: int, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Returns ``batch_size`` int64 indices in ``[0, num_valid)``."""
        _check_nonempty(num_valid)
        return torch.randint(num_valid, (batch_size,), generator=generator)


class WithoutReplacementSampler(Sampler):
    """Walks through a random permutation of the rows, one batch per call.

    Each permutation is one epoch; a new one starts when it is used up, and
    whenever the buffer is extended or emptied.

    A buffer holding fewer rows than ``batch_size`` (the last batch of a run
    whose budget is not a multiple of the batch) gives all its rows each call.

    Args:
        drop_last: Skip the final short batch of an epoch (else return it).
    """

    def __init__(self, drop_last: bool = True) -> None:
        self.drop_last = drop_last
        self._perm: torch.Tensor | None = None
        self._pos = 0

    def on_extend(self, index: torch.Tensor) -> None:
        self.on_empty()

    def on_empty(self) -> None:
        self._perm = None
        self._pos = 0

    def sample(
        self, num_valid: int, batch_size: int, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Returns the next ``batch_size`` indices of the current permutation."""
        _check_nonempty(num_valid)
        # Fewer rows than one batch (a run's last, partial batch): all of them, as one batch.
        batch_size = min(batch_size, num_valid)
        remaining = 0 if self._perm is None else self._perm.numel() - self._pos
        stale = self._perm is not None and self._perm.numel() != num_valid
        if stale or remaining == 0 or (self.drop_last and remaining < batch_size):
            self._perm = torch.randperm(num_valid, generator=generator)
            self._pos = 0
        assert self._perm is not None
        index = self._perm[self._pos : self._pos + batch_size]
        self._pos += index.numel()
        return index

    def state_dict(self) -> dict[str, Any]:
        return {"drop_last": self.drop_last, "perm": self._perm, "pos": self._pos}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.drop_last = bool(state["drop_last"])
        self._perm = state["perm"]
        self._pos = int(state["pos"])


class PrioritizedSampler(Sampler):
    """Proportional prioritized replay (Schaul et al., 2016) on a vectorised sum-tree.

    Leaf ``i`` holds ``(|priority_i| + eps) ** alpha``; a row is drawn with
    probability ``p_i / sum_j p_j`` and weighted by
    ``w_i = (N * P(i)) ** -beta / max_j w_j``. The trees live in flat float64
    tensors (root at 1, leaves at ``size .. 2*size-1``, ``size`` a power of
    two) and every operation loops over tree levels only, never over samples.

    Args:
        alpha: Priority exponent; 0 is uniform sampling.
        beta: Importance-weight exponent; 1 fully corrects the sampling bias.
        eps: Added to priorities so no row gets probability 0.
        max_priority_init: Priority of new rows until a larger one is set.
        capacity: Number of rows; the buffer passes it via :meth:`setup` if None.
    """

    def __init__(
        self,
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-6,
        max_priority_init: float = 1.0,
        capacity: int | None = None,
    ) -> None:
        if alpha < 0 or beta < 0 or eps < 0:
            raise ValueError(f"alpha, beta, eps must be >= 0, got {alpha}, {beta}, {eps}")
        self.alpha, self.beta, self.eps = float(alpha), float(beta), float(eps)
        self.max_priority = float(max_priority_init)
        self.capacity = 0
        if capacity is not None:
            self.setup(capacity)

    def setup(self, capacity: int) -> None:
        self.capacity = int(capacity)
        self._size = 1 << max(0, math.ceil(math.log2(self.capacity)))
        self._depth = self._size.bit_length() - 1
        self.on_empty()

    def on_empty(self) -> None:
        self._sum = torch.zeros(2 * self._size, dtype=torch.float64)
        # +inf marks empty leaves so they never win the min.
        self._min = torch.full((2 * self._size,), math.inf, dtype=torch.float64)

    def _require_setup(self) -> None:
        if not self.capacity:
            raise RuntimeError("PrioritizedSampler needs a capacity: pass it or call setup()")

    def _set_leaves(self, index: torch.Tensor, value: torch.Tensor) -> None:
        """Writes leaf values (last write wins on repeats) and refreshes their ancestors."""
        index = index.reshape(-1).long().cpu()
        value = value.reshape(-1).to(torch.float64).cpu().expand(index.numel())
        if index.numel() == 0:
            return
        if int(index.min()) < 0 or int(index.max()) >= self.capacity:
            raise IndexError(f"priority index out of range [0, {self.capacity})")
        # Plain indexed assignment leaves the winner among duplicates unspecified.
        uniq, inverse = torch.unique(index, return_inverse=True)
        last = torch.full((uniq.numel(),), -1, dtype=torch.long)
        last.scatter_reduce_(0, inverse, torch.arange(index.numel()), reduce="amax")
        node = uniq + self._size
        self._sum[node] = value[last]
        self._min[node] = value[last]
        for _ in range(self._depth):
            node = torch.unique(node // 2)
            left, right = 2 * node, 2 * node + 1
            self._sum[node] = self._sum[left] + self._sum[right]
            self._min[node] = torch.minimum(self._min[left], self._min[right])

    def on_extend(self, index: torch.Tensor) -> None:
        self._require_setup()
        default = torch.tensor((self.max_priority + self.eps) ** self.alpha, dtype=torch.float64)
        self._set_leaves(index, default)

    def update_priority(self, index: torch.Tensor, priority: torch.Tensor | float) -> None:
        """Stores ``(|priority| + eps) ** alpha`` for rows ``index``.

        Args:
            index: Row indices, as returned in the sample's ``"index"`` key.
            priority: One value per index (or a scalar), e.g. absolute TD errors.
        """
        self._require_setup()
        priority = torch.as_tensor(priority).detach().to(torch.float64).abs().cpu()
        if not torch.isfinite(priority).all():
            raise ValueError("priorities must be finite")
        if priority.numel():
            self.max_priority = max(self.max_priority, float(priority.max()))
        self._set_leaves(torch.as_tensor(index), (priority + self.eps) ** self.alpha)

    @property
    def total(self) -> float:
        """Sum of all leaf priorities (the tree's root)."""
        return float(self._sum[1])

    def leaf_priorities(self) -> torch.Tensor:
        """The stored ``(priority + eps) ** alpha`` of every row, float64 [capacity]."""
        return self._sum[self._size : self._size + self.capacity].clone()

    def sample(
        self, num_valid: int, batch_size: int, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Draws stratified indices and their importance weights.

        Returns:
            ``(index, weight)``: int64 indices and float32 weights, both ``[batch_size]``.
        """
        _check_nonempty(num_valid)
        self._require_setup()
        total = self._sum[1]
        if not total > 0:
            raise RuntimeError("all priorities are zero; nothing can be sampled")
        # One uniform per equal segment of [0, total) lowers the variance of the batch.
        u = torch.rand(batch_size, dtype=torch.float64, generator=generator)
        u = (torch.arange(batch_size, dtype=torch.float64) + u) * (total / batch_size)
        node = torch.ones(batch_size, dtype=torch.long)
        for _ in range(self._depth):
            left = 2 * node
            left_sum = self._sum[left]
            # Rounding can push u past a subtree's sum; never step into an all-zero one.
            go_right = ((u >= left_sum) & (self._sum[left + 1] > 0)) | (left_sum <= 0)
            u = torch.where(go_right, u - left_sum, u)
            node = left + go_right.long()
        index = node - self._size
        p = self._sum[node]
        # max_j w_j belongs to the smallest priority: w_i / w_max = (p_i / p_min) ** -beta.
        weight = (p / self._min[1]) ** (-self.beta)
        return index, weight.to(torch.float32)

    def state_dict(self) -> dict[str, Any]:
        return {
            "alpha": self.alpha,
            "beta": self.beta,
            "eps": self.eps,
            "max_priority": self.max_priority,
            "capacity": self.capacity,
            "sum_tree": self._sum.clone() if self.capacity else None,
            "min_tree": self._min.clone() if self.capacity else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.alpha, self.beta, self.eps = state["alpha"], state["beta"], state["eps"]
        self.max_priority = float(state["max_priority"])
        if state["capacity"]:
            if self.capacity and int(state["capacity"]) != self.capacity:
                raise ValueError(
                    f"sampler state has capacity {state['capacity']}, this buffer {self.capacity}"
                )
            self.setup(int(state["capacity"]))
            self._sum = state["sum_tree"].to(torch.float64).clone()
            self._min = state["min_tree"].to(torch.float64).clone()
