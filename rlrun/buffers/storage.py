"""Fixed-capacity circular storage of TensorDict rows, in RAM or memory-mapped on disk."""

from __future__ import annotations

import shutil
import tempfile
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tensordict import NestedKey, TensorDict, TensorDictBase

BACKENDS = ("ram", "memmap")

Schema = dict[Any, tuple[torch.Size, torch.dtype]]


def _schema(td: TensorDictBase) -> Schema:
    """Maps every leaf key to its per-row shape and dtype."""
    nb = td.batch_dims
    return {
        key: (value.shape[nb:], value.dtype)
        for key, value in td.items(include_nested=True, leaves_only=True)
    }


def _key_str(key: Any) -> str:
    return ".".join(key) if isinstance(key, tuple) else str(key)


class TensorStorage:
    """A ring of ``capacity`` rows, allocated lazily from the first data written.

    Rows ``0 .. len-1`` are always the valid ones: the cursor only wraps once the
    ring is full, so samplers can draw from ``range(len(storage))``.

    Args:
        capacity: Number of rows kept; older rows are overwritten first.
        backend: ``"ram"`` (preallocated tensors on ``device``) or ``"memmap"``
            (memory-mapped files, always on CPU).
        scratch_dir: Folder under which the memmap backend creates its own
            subfolder; the system temp folder if None. The subfolder is removed
            by :meth:`close` or when the storage is garbage-collected.
        device: Device of the ram backend.
    """

    def __init__(
        self,
        capacity: int,
        backend: str = "ram",
        scratch_dir: str | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be a positive int, got {capacity}")
        if backend not in BACKENDS:
            raise ValueError(f"unknown storage backend {backend!r}; valid: {', '.join(BACKENDS)}")
        self.capacity = int(capacity)
        self.backend = backend
        self.scratch_dir = scratch_dir
        self.device = torch.device("cpu") if backend == "memmap" else torch.device(device)
        self._data: TensorDictBase | None = None
        self._selection: tuple | None = None  # (keys, their columns) of the last get(keys=)
        self._schema: Schema | None = None
        self._dir: Path | None = None
        self._finalizer: weakref.finalize | None = None
        self._cursor = 0
        self._len = 0

    def __len__(self) -> int:
        return self._len

    @property
    def cursor(self) -> int:
        """Row that the next write starts at."""
        return self._cursor

    @property
    def data(self) -> TensorDictBase | None:
        """The whole ``[capacity]`` TensorDict (valid rows first), None before any write."""
        return self._data

    @property
    def path(self) -> Path | None:
        """Folder holding the memmap files, None for ram or before allocation."""
        return self._dir

    def _allocate(self, data: TensorDictBase) -> None:
        self._selection = None  # columns of the previous allocation
        # expand() is a view, so neither branch materialises a template of capacity rows.
        template = data[0].expand(self.capacity)
        if self.backend == "ram":
            self._data = template.apply(
                lambda x: torch.zeros(x.shape, dtype=x.dtype, device=self.device)
            )
        else:
            if self.scratch_dir is not None:
                Path(self.scratch_dir).mkdir(parents=True, exist_ok=True)
            self._dir = Path(tempfile.mkdtemp(prefix="rlrun-buffer-", dir=self.scratch_dir))
            self._finalizer = weakref.finalize(self, shutil.rmtree, str(self._dir), True)
            self._data = template.memmap_like(prefix=str(self._dir))
        self._schema = _schema(data)

    def _check(self, data: TensorDictBase) -> None:
        if data.batch_dims != 1:
            raise ValueError(
                f"storage expects data with one batch dim [B], got batch_size {data.batch_size}; "
                "flatten [num_envs, T] batches with data.reshape(-1) first"
            )
        if data.batch_size[0] > self.capacity:
            raise ValueError(
                f"cannot write {data.batch_size[0]} rows into a buffer of capacity "
                f"{self.capacity}; raise the capacity to at least the batch size"
            )
        if self._schema is None:
            return
        schema = _schema(data)
        if schema != self._schema:
            missing = [_key_str(k) for k in self._schema if k not in schema]
            extra = [_key_str(k) for k in schema if k not in self._schema]
            wrong = [
                f"{_key_str(k)}: got {tuple(s)} {d}, expected "
                f"{tuple(self._schema[k][0])} {self._schema[k][1]}"
                for k, (s, d) in schema.items()
                if k in self._schema and (s, d) != self._schema[k]
            ]
            raise ValueError(
                "data does not match the buffer's layout (set by the first extend): "
                f"missing keys {missing}, extra keys {extra}, mismatched {wrong}"
            )

    def write(self, data: TensorDictBase) -> torch.Tensor:
        """Writes the rows of ``data`` at the cursor, wrapping around.

        Args:
            data: TensorDict with batch size ``[B]``, ``B <= capacity``.

        Returns:
            The int64 row indices written, on CPU.

        Raises:
            ValueError: If ``B > capacity`` or the keys, shapes or dtypes differ
                from the first write.
        """
        self._check(data)
        n = data.batch_size[0]
        if self._data is None:
            self._allocate(data)
        index = (self._cursor + torch.arange(n)) % self.capacity
        if n:
            assert self._data is not None
            self._data[index.to(self.device)] = data.to(self.device)
        self._cursor = (self._cursor + n) % self.capacity
        self._len = min(self._len + n, self.capacity)
        return index

    def get(self, index: torch.Tensor, keys: Sequence[NestedKey] | None = None) -> TensorDictBase:
        """Gathers rows ``index`` (of only ``keys``, when given) into a new TensorDict of plain tensors."""
        if self._data is None:
            raise RuntimeError("storage is empty: nothing has been written yet")
        data = self._data if keys is None else self._columns(tuple(keys))
        return data[index.to(self.device)]

    def _columns(self, keys: tuple) -> TensorDictBase:
        """The rows' ``keys`` columns: a TensorDict of the same tensors, made once per allocation
        and key list (on-policy minibatches ask for the same columns every step)."""
        if self._selection is None or self._selection[0] != keys:
            self._selection = (keys, self._data.select(*keys))
        return self._selection[1]

    def empty(self) -> None:
        """Forgets every row; the allocation is kept for reuse."""
        self._cursor = 0
        self._len = 0

    def close(self) -> None:
        """Frees the allocation and removes the memmap folder."""
        self.empty()
        self._data = self._selection = None  # the selection holds the old tensors too
        self._schema = None
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        self._dir = None

    def nbytes(self) -> int:
        """Bytes allocated for the rows (on disk for memmap), 0 before the first write."""
        if self._data is None:
            return 0
        return sum(
            v.numel() * v.element_size()
            for v in self._data.values(include_nested=True, leaves_only=True)
        )

    def state_dict(self, include_data: bool = True) -> dict[str, Any]:
        """Cursor, length and (optionally) the valid rows as a nested dict of tensors."""
        data = None
        if include_data and self._len:
            rows = self.get(torch.arange(self._len))
            data = rows.to("cpu").to_dict()
        return {"cursor": self._cursor, "length": self._len, "data": data}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict` output; without data the storage is left empty."""
        self.empty()
        if state.get("data") is None:
            return
        length = int(state["length"])
        rows = TensorDict(state["data"], batch_size=[length])
        self._cursor = 0
        self.write(rows)
        self._cursor = int(state["cursor"])
        self._len = length
