"""Offline datasets in Minari's on-disk format (the HDF5 layout of minari 0.5).

Layout, as ``minari.load_dataset`` and TorchRL's ``MinariExperienceReplay`` read it::

    <root>/<namespace>/namespace_metadata.json      (one per namespace level)
    <root>/<namespace>/<name>-v<k>/data/metadata.json
    <root>/<namespace>/<name>-v<k>/data/main_data.hdf5
        episode_<i>/  attrs: id, total_steps[, seed]
            observations [T + 1, ...]   (the final observation included)
            actions [T, ...], rewards [T], terminations [T], truncations [T][, infos/]

Episodes are written and read with h5py directly: ``minari.DataCollector`` needs jax,
and reading a whole dataset in one pass into contiguous arrays is what an offline
learner wants, not minari's per-episode objects. Minari itself is needed only to
check interoperability (the ``offline`` extra installs it).

``metadata.json`` holds minari's keys (spaces, env spec, algorithm, reference
scores, counts) plus rlrun's receipts under ``"rlrun"``: seed, git commit, env and
library versions, the source run, and the SHA-256 of ``main_data.hdf5``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from rlrun.core import formats, runfiles, saved
from rlrun.core.errors import ConfigError

MAIN_FILE = "main_data.hdf5"
METADATA_FILE = "metadata.json"
NAMESPACE_METADATA_FILE = "namespace_metadata.json"
# The minari release whose layout this module writes; minari refuses versions it does not know.
MINARI_FORMAT_VERSION = "0.5.3"
# minari's dataset id grammar: (namespace/)name-v<version>
_ID_RE = re.compile(r"^(?:(?P<namespace>[-_\w][-_\w/]*[-_\w]+)/)?(?P<name>[-_\w]+?)-v(?P<version>\d+)$")


def _h5py():
    try:
        import h5py
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ConfigError("offline datasets need h5py", key="dataset",
                          fix="pip install 'rlrun[offline]'") from e
    return h5py


@dataclass
class Episode:
    """One episode as stored: ``observations`` has one more row than the other arrays."""

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    seed: int | None = None
    infos: dict[str, np.ndarray] | None = None

    def __post_init__(self):
        n = len(self.rewards)
        for name in ("actions", "terminations", "truncations"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"episode {name} has {len(getattr(self, name))} rows, rewards {n}")
        if len(self.observations) != n + 1:
            raise ValueError(f"episode has {len(self.observations)} observations for {n} steps; "
                             "store the final observation too (T + 1 rows)")
        if n == 0:
            raise ValueError("an episode needs at least one step")


@dataclass
class OfflineData:
    """A whole dataset as flat transitions plus episode boundaries.

    Transition ``i`` is ``(observation[i], action[i], reward[i], next_observation[i],
    terminated[i], truncated[i])``; episode ``e`` covers rows
    ``episode_start[e] : episode_start[e] + episode_length[e]``.
    """

    dataset_id: str
    observation: Tensor
    action: Tensor
    reward: Tensor
    next_observation: Tensor
    terminated: Tensor
    truncated: Tensor
    episode_start: Tensor
    episode_length: Tensor
    observation_space: gym.Space
    action_space: gym.Space
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def num_steps(self) -> int:
        return int(self.reward.shape[0])

    @property
    def num_episodes(self) -> int:
        return int(self.episode_start.shape[0])

    def episode_returns(self) -> Tensor:
        """Undiscounted return of each episode (float64)."""
        ids = torch.repeat_interleave(torch.arange(self.num_episodes), self.episode_length)
        return torch.zeros(self.num_episodes, dtype=torch.float64).index_add_(
            0, ids, self.reward.double())


@dataclass
class DatasetInfo:
    """One line of ``list_datasets``."""

    dataset_id: str
    episodes: int
    steps: int
    mean_return: float
    min_return: float
    max_return: float
    source: str
    path: Path


def dataset_root(root: str | os.PathLike | None = None) -> Path:
    """The datasets root: ``root`` if given, else ``$MINARI_DATASETS_PATH``, else minari's default."""
    if root is not None:
        return Path(root).expanduser()
    env = os.environ.get("MINARI_DATASETS_PATH")
    return Path(env) if env else Path.home() / ".minari" / "datasets"


def parse_dataset_id(dataset_id: str) -> tuple[str | None, str, int]:
    """``(namespace, name, version)`` of a minari dataset id ``(namespace/)name-v<k>``."""
    m = _ID_RE.fullmatch(dataset_id)
    if m is None:
        raise ConfigError(f"malformed dataset id {dataset_id!r}", key="dataset",
                          fix="use the form namespace/name-v<version>, e.g. rlrun/pendulum/medium-v0")
    return m["namespace"], m["name"], int(m["version"])


def dataset_path(dataset_id: str, root: str | os.PathLike | None = None) -> Path:
    """The directory of a dataset (the one holding ``data/``)."""
    parse_dataset_id(dataset_id)
    return dataset_root(root) / dataset_id


# -- spaces (minari's JSON serialisation, Box and Discrete) --------------------------------------

def serialize_space(space: gym.Space) -> str:
    """A space as minari serialises it (``minari.serialization.serialize_space``)."""
    if isinstance(space, gym.spaces.Box):
        return json.dumps({"type": "Box", "dtype": str(space.dtype), "shape": list(space.shape),
                           "low": space.low.tolist(), "high": space.high.tolist()})
    if isinstance(space, gym.spaces.Discrete):
        return json.dumps({"type": "Discrete", "dtype": "int64", "start": int(space.start),
                           "n": int(space.n)})
    raise ConfigError(f"offline datasets support Box and Discrete spaces, not {type(space).__name__}",
                      key="dataset", fix="flatten the observations (gymnasium.wrappers.FlattenObservation)")


# What a metadata.json may declare: a space larger than this (elements of one observation or
# action), or a count larger than MAX_COUNT, is not a dataset rlrun could hold.
MAX_SPACE_ELEMENTS = 10**7
MAX_COUNT = 10**12
_DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
           "uint32", "uint64", "bool")


def _bad_metadata(what: str, source: str) -> ConfigError:
    return ConfigError(f"{source}: {what}", key="dataset",
                       fix="remake the dataset (`rlrun dataset make`) or download it again")


def deserialize_space(text: str, source: str = "metadata.json") -> gym.Space:
    """Inverse of ``serialize_space``; every field is checked as data (type, dtype, size) first.

    Raises:
        ConfigError: naming ``source`` and the field, for anything but a sane Box or Discrete.
    """
    try:
        d = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        d = None
    if not isinstance(d, dict) or not isinstance(d.get("type"), str):
        raise _bad_metadata(f"a space is not minari's JSON of a Box or Discrete ({str(text)[:60]!r})", source)
    if d["type"] == "Box":
        shape, dtype = d.get("shape"), d.get("dtype")
        if (not isinstance(shape, list) or not all(type(n) is int and 0 <= n for n in shape)
                or len(shape) > 8 or math.prod(shape) > MAX_SPACE_ELEMENTS):
            raise _bad_metadata(f"Box shape {str(shape)[:60]} is not a list of at most 8 sizes with "
                                f"<= {MAX_SPACE_ELEMENTS} elements in all", source)
        if dtype not in _DTYPES:
            raise _bad_metadata(f"Box dtype {str(dtype)[:40]!r} is not one of {', '.join(_DTYPES)}", source)
        try:
            low, high = (np.asarray(d[k], dtype) for k in ("low", "high"))
            if low.size > MAX_SPACE_ELEMENTS or high.size > MAX_SPACE_ELEMENTS:
                raise ValueError("too many bounds")
            return gym.spaces.Box(np.broadcast_to(low, shape).copy(), np.broadcast_to(high, shape).copy(),
                                  tuple(shape), np.dtype(dtype))
        except (KeyError, TypeError, ValueError, OverflowError) as err:
            raise _bad_metadata(f"Box bounds do not fit shape {shape} and dtype {dtype} ({err})", source
                                ) from None
    if d["type"] == "Discrete":
        n, start = d.get("n"), d.get("start", 0)
        if type(n) is not int or not 0 < n <= 2**31 or type(start) is not int or abs(start) > 2**31:
            raise _bad_metadata(f"Discrete n={str(n)[:20]}, start={str(start)[:20]} are not integers "
                                f"(0 < n <= 2^31)", source)
        return gym.spaces.Discrete(n, start=start)
    raise ConfigError(f"dataset space of type {d['type'][:40]} is not supported", key="dataset",
                      fix="use a dataset with Box or Discrete observation and action spaces")


# The fields rlrun reads from metadata.json and what each must be; the rest is kept unread.
# ``env_spec`` is kept as text and only its ``id`` is read (``sources.recorded_env_id``): its
# entry point names a module that rlrun never imports (the run's own env config builds the env).
_FIELDS: dict[str, tuple[type, ...]] = {
    "total_episodes": (int,), "total_steps": (int,), "data_format": (str,), "dataset_id": (str,),
    "observation_space": (str,), "action_space": (str,), "env_spec": (str, type(None)),
    "algorithm_name": (str, type(None)), "author": (list, str, type(None)),
    "ref_min_score": (int, float, type(None)), "ref_max_score": (int, float, type(None)),
    "rlrun": (dict,),
}


def check_metadata(meta: Any, source: str) -> dict[str, Any]:
    """``metadata.json``'s content as validated data: the fields rlrun reads have their types and
    sane sizes, and both spaces deserialise; anything else is one ``ConfigError`` naming it."""
    if not isinstance(meta, dict):
        raise _bad_metadata("is not a JSON object", source)
    for name in ("total_episodes", "total_steps", "observation_space", "action_space"):
        if name not in meta:
            raise _bad_metadata(f"has no {name}", source)
    for name, types in _FIELDS.items():
        if name in meta and (not isinstance(meta[name], types) or isinstance(meta[name], bool)):
            raise _bad_metadata(f"{name} is {type(meta[name]).__name__} {str(meta[name])[:40]!r}, "
                                f"not {' or '.join(t.__name__ for t in types)}", source)
    for name in ("total_episodes", "total_steps"):
        if not 0 <= meta[name] <= MAX_COUNT:
            raise _bad_metadata(f"{name}={meta[name]} is not in 0..{MAX_COUNT}", source)
    for name in ("ref_min_score", "ref_max_score"):
        if meta.get(name) is not None and not math.isfinite(meta[name]):
            raise _bad_metadata(f"{name}={meta[name]} is not a finite number", source)
    if isinstance(meta.get("author"), list) and not all(isinstance(a, str) for a in meta["author"]):
        raise _bad_metadata("author is not a list of strings", source)
    for name in ("source", "sha256"):
        if meta.get("rlrun", {}).get(name) is not None and not isinstance(meta["rlrun"][name], str):
            raise _bad_metadata(f"rlrun.{name} is not a string", source)
    for name in ("observation_space", "action_space"):
        deserialize_space(meta[name], f"{source}: {name}")
    return meta


# -- writing -------------------------------------------------------------------------------------

def episodes_from_transitions(observation: np.ndarray, action: np.ndarray, reward: np.ndarray,
                              next_observation: np.ndarray, terminated: np.ndarray,
                              truncated: np.ndarray) -> list[Episode]:
    """Splits one env's time-ordered transitions (a replay buffer) into episodes.

    An episode ends at each ``terminated | truncated``; its final observation is that
    step's ``next_observation``. A trailing unfinished episode is kept, ending in
    neither flag (its last transition still has its next observation, so it
    bootstraps). Several envs' interleaved streams must be split per env first.

    Raises:
        ValueError: if ``next_observation[t] != observation[t + 1]`` inside an episode
            (the stream is not one env's, or not in time order).
    """
    reward = np.asarray(reward).reshape(-1)
    terminated = np.asarray(terminated, bool).reshape(-1)
    truncated = np.asarray(truncated, bool).reshape(-1)
    done = terminated | truncated
    if len(reward) > 1 and not np.allclose(next_observation[:-1][~done[:-1]],
                                           observation[1:][~done[:-1]]):
        raise ValueError("next_observation[t] != observation[t + 1] inside an episode: "
                         "pass one env's transitions in time order")
    ends = np.flatnonzero(done) + 1
    if len(ends) == 0 or ends[-1] != len(reward):
        ends = np.append(ends, len(reward))
    starts = np.concatenate([[0], ends[:-1]])
    return [Episode(np.concatenate([observation[s:e], next_observation[e - 1:e]]), action[s:e],
                    reward[s:e], terminated[s:e], truncated[s:e]) for s, e in zip(starts, ends)]


def _env_spec_json(env_spec: gym.envs.registration.EnvSpec | str | None) -> str | None:
    if env_spec is None:
        return None
    if isinstance(env_spec, str):
        env_spec = gym.spec(env_spec)
    try:
        return env_spec.to_json()
    except (TypeError, ValueError):  # callable entry points or kwargs: not recoverable, like minari
        return None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _ensure_namespaces(root: Path, namespace: str | None) -> None:
    # minari lists a namespace (and each parent) by its namespace_metadata.json
    if namespace is None:
        return
    parts = namespace.split("/")
    for i in range(1, len(parts) + 1):
        d = root.joinpath(*parts[:i])
        d.mkdir(parents=True, exist_ok=True)
        if not (d / NAMESPACE_METADATA_FILE).exists():
            with runfiles.open_write(d / NAMESPACE_METADATA_FILE, "w", key="root") as f:
                f.write("{}")


def _write_episode(group, ep: Episode, i: int, obs_dtype: np.dtype, act_dtype: np.dtype) -> None:
    group.attrs["id"] = i
    group.attrs["total_steps"] = len(ep.rewards)
    if ep.seed is not None:
        group.attrs["seed"] = int(ep.seed)
    # chunked and resizable along time, as minari creates them
    for key, data in (("observations", np.asarray(ep.observations, obs_dtype)),
                      ("actions", np.asarray(ep.actions, act_dtype)),
                      ("rewards", np.asarray(ep.rewards, np.float64).reshape(-1)),
                      ("terminations", np.asarray(ep.terminations, bool).reshape(-1)),
                      ("truncations", np.asarray(ep.truncations, bool).reshape(-1))):
        group.create_dataset(key, data=data, chunks=True, maxshape=(None, *data.shape[1:]))
    if ep.infos:
        info = group.create_group("infos")
        for key, value in ep.infos.items():
            value = np.asarray(value)
            info.create_dataset(key, data=value, chunks=True, maxshape=(None, *value.shape[1:]))


def write_dataset(dataset_id: str, episodes: Sequence[Episode], observation_space: gym.Space,
                  action_space: gym.Space, *, env_spec: gym.envs.registration.EnvSpec | str | None = None,
                  root: str | os.PathLike | None = None, algorithm_name: str | None = None,
                  ref_min_score: float | None = None, ref_max_score: float | None = None,
                  description: str | None = None, author: str = "rlrun",
                  receipts: dict[str, Any] | None = None, overwrite: bool = False) -> Path:
    """Writes episodes as a minari dataset and returns its directory.

    The dataset is written into a hidden sibling directory and renamed into place,
    so an interrupted write never leaves a half dataset under ``dataset_id``.

    Args:
        dataset_id: ``namespace/name-v<k>``.
        episodes: The episodes, in order.
        observation_space: Space of one observation (Box or Discrete).
        action_space: Space of one action (Box or Discrete).
        env_spec: The env that produced the data (spec or id), for ``recover_environment``.
        root: Datasets root (default ``$MINARI_DATASETS_PATH`` or ``~/.minari/datasets``).
        algorithm_name: What collected the data.
        ref_min_score: Return of a random policy (D4RL normalisation); stored with ``ref_max_score``.
        ref_max_score: Return of an expert policy.
        description: Free text.
        author: Stored as minari's ``author``.
        receipts: rlrun's provenance (seed, git commit, env version, source run); the
            data file's SHA-256 and library versions are added here.
        overwrite: Replace an existing dataset with this id.
    """
    h5py = _h5py()
    namespace, _, _ = parse_dataset_id(dataset_id)
    if not episodes:
        raise ValueError("a dataset needs at least one episode")
    root = dataset_root(root)
    final = root / dataset_id
    runfiles.check_tree(root / (namespace or ""), key="root")  # a link would be written through
    if final.is_symlink():
        runfiles.check_file(final, key="root")
    if final.exists() and not overwrite:
        raise ConfigError(f"dataset {dataset_id} already exists at {final}", key="dataset",
                          fix="bump the version (-v<k+1>) or pass overwrite")
    _ensure_namespaces(root, namespace)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        data = tmp / "data"
        data.mkdir()
        obs_dtype = observation_space.dtype if isinstance(observation_space, gym.spaces.Box) else np.int64
        act_dtype = action_space.dtype if isinstance(action_space, gym.spaces.Box) else np.int64
        with h5py.File(data / MAIN_FILE, "w", track_order=True) as f:
            for i, ep in enumerate(episodes):
                _write_episode(f.create_group(f"episode_{i}"), ep, i, obs_dtype, act_dtype)
        total_steps = int(sum(len(ep.rewards) for ep in episodes))
        meta: dict[str, Any] = {
            "total_episodes": len(episodes), "total_steps": total_steps, "data_format": "hdf5",
            "observation_space": serialize_space(observation_space),
            "action_space": serialize_space(action_space),
            "dataset_id": dataset_id, "author": [author], "minari_version": MINARI_FORMAT_VERSION,
        }
        spec_json = _env_spec_json(env_spec)
        if spec_json is not None:
            meta["env_spec"] = spec_json
        if algorithm_name is not None:
            meta["algorithm_name"] = algorithm_name
        if description is not None:
            meta["description"] = description
        if ref_min_score is not None and ref_max_score is not None:
            meta["ref_min_score"], meta["ref_max_score"] = float(ref_min_score), float(ref_max_score)
        meta["dataset_size"] = round((data / MAIN_FILE).stat().st_size / 1e6, 1)
        meta["rlrun"] = {**(receipts or {}), "sha256": _sha256(data / MAIN_FILE),
                         "gymnasium_version": gym.__version__, "h5py_version": h5py.__version__}
        formats.stamp("dataset", meta)
        (data / METADATA_FILE).write_text(json.dumps(meta))
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


# -- reading -------------------------------------------------------------------------------------

def read_metadata(dataset_id: str, root: str | os.PathLike | None = None) -> dict[str, Any]:
    """``metadata.json`` of a dataset; a missing id names the ones that exist."""
    path = dataset_path(dataset_id, root) / "data" / METADATA_FILE
    if not path.exists():
        known = [d.dataset_id for d in list_datasets(root, stats=False)]
        raise ConfigError(
            f"no dataset {dataset_id!r} under {dataset_root(root)}"
            + (f" (found: {', '.join(known)})" if known else " (none found)"),
            key="dataset", fix="pick one of those, set MINARI_DATASETS_PATH, or run `rlrun dataset make`")
    return _load_metadata(path)


def _load_metadata(path: Path) -> dict[str, Any]:
    """A ``metadata.json`` read and checked as data (``check_metadata``)."""
    try:
        if path.stat().st_size > 64 * 2**20:  # minari's are kilobytes; a huge one is not metadata
            raise _bad_metadata("is larger than 64 MB", str(path))
        meta = saved.load_json(path)
    except saved.SavedFileError as err:  # unreadable, not UTF-8, not JSON, NaN
        why = err.message.splitlines()[0][:160]
        raise _bad_metadata(f"cannot be read as JSON ({why})", str(path)) from None
    meta = check_metadata(meta, str(path))
    try:  # one written before datasets held a version reads as format 0
        return formats.upgrade("dataset", meta, path, key="dataset")
    except formats.FormatError as err:
        raise ConfigError(err.message, key="dataset", fix=err.fix) from None


def _unreadable(path: Path, err: BaseException) -> ConfigError:
    """A main_data.hdf5 that h5py cannot read (truncated, not HDF5, missing arrays), as one line."""
    first = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
    return ConfigError(f"{path} cannot be read ({type(err).__name__}: {first})", key="dataset",
                       fix="the file is damaged or incomplete: remake the dataset (`rlrun dataset make`) "
                       "or download it again")


def _episode_keys(f) -> list[str]:
    return sorted((k for k in f.keys() if k.startswith("episode_")), key=lambda k: int(k[8:]))


def read_dataset(dataset_id: str, root: str | os.PathLike | None = None,
                 device: str | torch.device = "cpu") -> OfflineData:
    """Reads a whole dataset (rlrun's or any minari hdf5 one) as flat transitions.

    Observations become float32, continuous actions float32, discrete actions int64,
    rewards float32; ``terminated``/``truncated`` stay apart, so learners bootstrap
    through truncations and not through terminations.
    """
    h5py = _h5py()
    meta = read_metadata(dataset_id, root)
    if meta.get("data_format", "hdf5") != "hdf5":
        raise ConfigError(f"dataset {dataset_id} is stored as {meta['data_format']}, not hdf5",
                          key="dataset", fix="convert it to minari's hdf5 format")
    obs_space = deserialize_space(meta["observation_space"], "observation_space")
    act_space = deserialize_space(meta["action_space"], "action_space")
    obs, nxt, act, rew, term, trunc, lengths = [], [], [], [], [], [], []
    path = dataset_path(dataset_id, root) / "data" / MAIN_FILE
    try:
        with h5py.File(path, "r") as f:
            for key in _episode_keys(f):
                g = f[key]
                o = g["observations"][()]
                obs.append(o[:-1])
                nxt.append(o[1:])
                act.append(g["actions"][()])
                rew.append(g["rewards"][()].reshape(-1))
                term.append(g["terminations"][()].reshape(-1))
                trunc.append(g["truncations"][()].reshape(-1))
                lengths.append(len(rew[-1]))
                if not len(o) - 1 == lengths[-1] == len(act[-1]) == len(term[-1]) == len(trunc[-1]):
                    raise ValueError(f"{key}'s arrays disagree in length")
                if o.shape[1:] != obs_space.shape or act[-1].shape[1:] != act_space.shape:
                    raise ValueError(f"{key}'s observations {o.shape[1:]} or actions {act[-1].shape[1:]} "
                                     f"are not of the spaces in {METADATA_FILE}")
    except (OSError, KeyError, ValueError, TypeError) as err:  # truncated, not HDF5, wrong arrays
        raise _unreadable(path, err) from None
    if not lengths:
        raise _unreadable(path, ValueError("no episode_<i> groups"))
    discrete = isinstance(act_space, gym.spaces.Discrete)
    length = torch.tensor(lengths, dtype=torch.int64)
    start = torch.cumsum(length, 0) - length

    def cat(arrays, dtype):
        return torch.as_tensor(np.concatenate(arrays)).to(device=device, dtype=dtype)

    return OfflineData(
        dataset_id, cat(obs, torch.float32), cat(act, torch.int64 if discrete else torch.float32),
        cat(rew, torch.float32), cat(nxt, torch.float32), cat(term, torch.bool), cat(trunc, torch.bool),
        start.to(device), length.to(device), obs_space, act_space, meta)


def list_datasets(root: str | os.PathLike | None = None, stats: bool = True) -> list[DatasetInfo]:
    """The datasets under a root, sorted by id, with episode, step and return figures.

    Args:
        root: Datasets root (see ``dataset_root``).
        stats: Read the rewards to report returns (NaN otherwise).
    """
    root = dataset_root(root)
    out: list[DatasetInfo] = []
    if not root.is_dir():
        return out
    for meta_path in sorted(root.rglob(f"data/{METADATA_FILE}")):
        directory = meta_path.parent.parent
        if any(part.startswith(".") for part in directory.relative_to(root).parts):
            continue  # a write in progress
        meta = _load_metadata(meta_path)
        returns = np.full(1, np.nan)
        if stats:
            try:
                with _h5py().File(meta_path.parent / MAIN_FILE, "r") as f:
                    returns = np.array([f[k]["rewards"][()].sum() for k in _episode_keys(f)] or [np.nan])
            except (OSError, KeyError, ValueError, TypeError) as err:
                raise _unreadable(meta_path.parent / MAIN_FILE, err) from None
        receipts = meta.get("rlrun", {})
        source = receipts.get("source") or meta.get("algorithm_name") or ", ".join(meta.get("author", []))
        out.append(DatasetInfo(meta.get("dataset_id", directory.relative_to(root).as_posix()),
                               int(meta["total_episodes"]), int(meta["total_steps"]),
                               float(returns.mean()), float(returns.min()), float(returns.max()),
                               str(source), directory))
    return sorted(out, key=lambda d: d.dataset_id)
