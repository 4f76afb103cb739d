"""The replay buffer: a :class:`TensorStorage` plus a sampler."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import NestedKey, TensorDictBase

from rlrun.buffers.samplers import (
    PrioritizedSampler,
    Sampler,
    UniformSampler,
    WithoutReplacementSampler,
)
from rlrun.buffers.storage import TensorStorage

SAMPLERS = ("uniform", "without_replacement", "prioritized")


class ReplayBuffer:
    """A fixed-capacity buffer of TensorDict rows with uniform, epoch or prioritized sampling.

    Data comes in as a TensorDict with one batch dim ``[B]``; keys, shapes and
    dtypes are fixed by the first :meth:`extend`. Sampled batches carry the row
    indices under ``"index"`` and, for the prioritized sampler, the importance
    weights under ``"priority_weight"``.

    Args:
        capacity: Maximum number of rows; the oldest are overwritten first.
        batch_size: Default number of rows per :meth:`sample`.
        sampler: ``"uniform"`` (with replacement), ``"without_replacement"``
            (epochs over a random permutation, e.g. PPO minibatches) or
            ``"prioritized"`` (proportional PER).
        storage: ``"ram"`` or ``"memmap"`` (files under ``scratch_dir``).
        scratch_dir: Folder for memmap files; the system temp folder if None.
        alpha: Priority exponent of the prioritized sampler.
        beta: Importance-weight exponent of the prioritized sampler.
        device: Device of sampled batches (and of ram storage).
        generator: Random generator for sampling; the global one if None.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> rb = ReplayBuffer(capacity=1000, batch_size=32, sampler="prioritized")
        >>> data = TensorDict({"observation": torch.randn(64, 4),
        ...                    ("next", "reward"): torch.randn(64, 1)}, batch_size=[64])
        >>> rb.extend(data).shape
        torch.Size([64])
        >>> batch = rb.sample()
        >>> batch["index"].shape, batch["priority_weight"].dtype
        (torch.Size([32]), torch.float32)
        >>> rb.update_priority(batch["index"], torch.rand(32))
    """

    def __init__(
        self,
        capacity: int,
        batch_size: int,
        sampler: str = "uniform",
        storage: str = "ram",
        scratch_dir: str | None = None,
        alpha: float = 0.6,
        beta: float = 0.4,
        device: torch.device | str = "cpu",
        generator: torch.Generator | None = None,
    ) -> None:
        if sampler not in SAMPLERS:
            raise ValueError(f"unknown sampler {sampler!r}; valid samplers: {', '.join(SAMPLERS)}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size}")
        self.batch_size = int(batch_size)
        self.device = torch.device(device)
        self.generator = generator
        self._storage = TensorStorage(capacity, storage, scratch_dir, device)
        self._sampler: Sampler
        if sampler == "uniform":
            self._sampler = UniformSampler()
        elif sampler == "without_replacement":
            self._sampler = WithoutReplacementSampler()
        else:
            self._sampler = PrioritizedSampler(alpha=alpha, beta=beta)
        self._sampler.setup(self._storage.capacity)

    @property
    def capacity(self) -> int:
        return self._storage.capacity

    @property
    def storage(self) -> TensorStorage:
        return self._storage

    @property
    def sampler(self) -> Sampler:
        return self._sampler

    def __len__(self) -> int:
        return len(self._storage)

    def extend(self, data: TensorDictBase) -> torch.Tensor:
        """Appends the rows of ``data`` (batch size ``[B]``, ``B <= capacity``).

        Returns:
            The int64 indices the rows were written at.
        """
        index = self._storage.write(data)
        self._sampler.on_extend(index)
        return index

    def sample(self, batch_size: int | None = None,
               keys: Sequence[NestedKey] | None = None) -> TensorDictBase:
        """Draws a batch of rows onto ``device``.

        Args:
            batch_size: Rows to draw; the constructor's ``batch_size`` if None.
            keys: Only these stored keys (the same rows and draws); every stored key if None.

        Returns:
            A TensorDict ``[batch_size]`` with the stored keys, ``"index"``
            (int64) and, for the prioritized sampler, ``"priority_weight"`` (float32).
        """
        batch_size = self.batch_size if batch_size is None else int(batch_size)
        out = self._sampler.sample(len(self), batch_size, self.generator)
        index, weight = out if isinstance(out, tuple) else (out, None)
        batch = self._storage.get(index, keys).to(self.device)
        batch.set("index", index.to(self.device))
        if weight is not None:
            batch.set("priority_weight", weight.to(self.device))
        return batch

    def update_priority(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        """Sets the priorities (e.g. ``|td_error|``) of rows ``index``; no-op unless prioritized."""
        if not isinstance(self._sampler, PrioritizedSampler):
            return
        index = torch.as_tensor(index).reshape(-1)
        if index.numel() and int(index.max()) >= len(self):
            raise IndexError(f"priority index {int(index.max())} >= buffer length {len(self)}")
        self._sampler.update_priority(index, priority)

    def empty(self) -> None:
        """Forgets all rows (keeping the allocation) and resets the sampler."""
        self._storage.empty()
        self._sampler.on_empty()

    def close(self) -> None:
        """Empties the buffer, frees its storage and removes any memmap files."""
        self.empty()
        self._storage.close()

    def nbytes(self) -> int:
        """Bytes of allocated storage (0 before the first extend)."""
        return self._storage.nbytes()

    def saved_nbytes(self) -> int:
        """Bytes a checkpoint of the stored rows takes (``state_dict`` writes only those)."""
        return self.nbytes() * len(self) // self.capacity if self.capacity else 0

    def state_dict(self, include_data: bool = True) -> dict[str, Any]:
        """Returns the buffer state as plain containers (``weights_only``-loadable).

        Layout: ``{"storage": {"cursor", "length", "data"}, "sampler": {...},
        "generator": uint8 tensor or None}``; ``data`` is the nested dict of
        the valid rows ``0 .. length-1`` in storage order (``TensorDict.to_dict()``),
        or None when ``include_data`` is False.
        """
        return {
            "storage": self._storage.state_dict(include_data),
            "sampler": self._sampler.state_dict(),
            "generator": None if self.generator is None else self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict` output into a buffer built with the same arguments.

        A state without data leaves the buffer empty (with a fresh sampler).
        """
        self._storage.load_state_dict(state["storage"])
        if state["storage"].get("data") is None:
            self._sampler.on_empty()
        else:
            self._sampler.load_state_dict(state["sampler"])
        if self.generator is not None and state.get("generator") is not None:
            self.generator.set_state(state["generator"])
