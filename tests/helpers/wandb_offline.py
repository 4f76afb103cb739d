"""Reads what W&B wrote offline: the records of ``wandb/offline-run-*/run-<id>.wandb``.

The file is W&B's transaction log: a 7-byte header (``:W&B``, magic 0xBEE1, version),
then 32 KiB blocks of chunks, each a 7-byte header (CRC32, little-endian length, type:
1 full, 2 first, 3 middle, 4 last) and a piece of one serialised ``Record`` protobuf;
a block's last < 7 bytes are padding. This reads it without any network or W&B service.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

BLOCK, HEADER = 32768, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def chunks(path: Path):
    """The serialised records of one transaction log, in order."""
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B transaction log"
    pos, parts = HEADER, b""
    while pos + HEADER <= len(data):
        room = BLOCK - pos % BLOCK
        if room < HEADER:  # padding at the end of a block
            pos += room
            continue
        _, length, kind = struct.unpack_from("<IHB", data, pos)
        if kind == 0:  # zero fill: the rest of the block is empty
            pos += room
            continue
        body = data[pos + HEADER:pos + HEADER + length]
        pos += HEADER + length
        if kind == FULL:
            yield body
        elif kind == FIRST:
            parts = body
        elif kind == MIDDLE:
            parts += body
        elif kind == LAST:
            yield parts + body
            parts = b""


@dataclass
class OfflineRun:
    """What one offline run folder holds."""

    folder: Path
    run_id: str = ""
    group: str = ""
    labels: list[str] = field(default_factory=list)
    config: dict = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)  # one row per step: {"_step": n, key: value}
    files: list[str] = field(default_factory=list)
    exit_code: int | None = None

    def points(self) -> set[tuple[str, int]]:
        """Every (metric, step) logged, W&B's own keys (``_step``, ``_runtime``, ...) left out."""
        return {(k, int(row["_step"])) for row in self.history for k in row if not k.startswith("_")}


def read_offline_run(folder: Path) -> OfflineRun:
    from wandb.proto import wandb_internal_pb2 as pb

    folder = Path(folder)
    (log,) = folder.glob("run-*.wandb")
    out = OfflineRun(folder)
    for body in chunks(log):
        record = pb.Record()
        record.ParseFromString(body)
        kind = record.WhichOneof("record_type")
        if kind == "run":  # the first record; a later one repeats it at the end
            out.run_id, out.group = record.run.run_id, record.run.run_group
            out.labels = list(record.run.tags)
            out.config.update({u.key: json.loads(u.value_json) for u in record.run.config.update})
        elif kind == "config":
            out.config.update({u.key: json.loads(u.value_json) for u in record.config.update})
        elif kind == "history":  # media are nested: ("eval/video", "_type"), ...
            row: dict = {}
            for item in record.history.item:
                *parents, leaf = list(item.nested_key) or [item.key]
                node = row
                for p in parents:
                    node = node.setdefault(p, {})
                node[leaf] = json.loads(item.value_json)
            out.history.append(row)
        elif kind == "files":
            out.files += [f.path for f in record.files.files]
        elif kind == "exit":
            out.exit_code = record.exit.exit_code
    return out


def offline_runs(wandb_dir: Path) -> list[OfflineRun]:
    """Every offline run under ``wandb_dir`` (a folder holding ``wandb/``), oldest first.

    W&B's service process writes the logs; ending it (as the end of a process does) flushes them.
    """
    import wandb

    wandb.teardown()
    return [read_offline_run(f) for f in sorted(Path(wandb_dir).glob("**/wandb/offline-run-*"))]
