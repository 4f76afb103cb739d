"""Tests for TensorStorage and ReplayBuffer: circular writes, backends, state round trips."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rlrun.buffers import ReplayBuffer, TensorStorage

SAMPLER_NAMES = ["uniform", "without_replacement", "prioritized"]


def batch(start: int, n: int, obs_dim: int = 3) -> TensorDict:
    """Rows whose every leaf encodes the row's global id, in TorchRL key layout."""
    ids = torch.arange(start, start + n)
    return TensorDict(
        {
            "observation": ids[:, None].float().expand(n, obs_dim).clone(),
            "action": ids[:, None].float() * 10,
            ("next", "observation"): ids[:, None].float().expand(n, obs_dim) + 0.5,
            ("next", "reward"): ids[:, None].float() * -1,
            ("next", "terminated"): (ids % 2 == 0)[:, None],
            ("collector", "traj_ids"): ids,
        },
        batch_size=[n],
    )


def ids_of(td: TensorDict) -> torch.Tensor:
    return td["collector", "traj_ids"]


# --- storage -----------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["ram", "memmap"])
def test_storage_wrap_around(backend, tmp_path):
    st = TensorStorage(5, backend=backend, scratch_dir=str(tmp_path))
    assert torch.equal(st.write(batch(0, 3)), torch.tensor([0, 1, 2]))
    assert (len(st), st.cursor) == (3, 3)
    assert torch.equal(st.write(batch(3, 4)), torch.tensor([3, 4, 0, 1]))
    assert (len(st), st.cursor) == (5, 2)
    rows = st.get(torch.arange(5))
    assert torch.equal(ids_of(rows), torch.tensor([5, 6, 2, 3, 4]))
    assert torch.equal(rows["next", "reward"][:, 0], -ids_of(rows).float())
    assert rows["next", "terminated"].dtype == torch.bool


def test_storage_memmap_files_under_scratch_dir_and_same_data_as_ram(tmp_path):
    ram = TensorStorage(6, backend="ram")
    mm = TensorStorage(6, backend="memmap", scratch_dir=str(tmp_path / "scratch"))
    for start, n in [(0, 4), (4, 4), (8, 5)]:
        assert torch.equal(ram.write(batch(start, n)), mm.write(batch(start, n)))
    assert mm.data is not None and mm.data.is_memmap()
    assert mm.path is not None and mm.path.is_relative_to(tmp_path / "scratch")
    files = [p for p in mm.path.rglob("*.memmap")]
    assert len(files) == 6
    assert (mm.cursor, len(mm)) == (ram.cursor, len(ram))
    idx = torch.tensor([5, 0, 3, 3])
    assert (mm.get(idx) == ram.get(idx)).all()
    assert mm.nbytes() == ram.nbytes() > 0
    mm.close()
    assert not files[0].exists() and list((tmp_path / "scratch").iterdir()) == []


def test_storage_batch_larger_than_capacity_raises():
    with pytest.raises(ValueError, match="capacity 4"):
        TensorStorage(4).write(batch(0, 5))


def test_storage_rejects_mismatched_layout():
    st = TensorStorage(8)
    st.write(batch(0, 2))
    with pytest.raises(ValueError, match="observation"):
        st.write(batch(0, 2, obs_dim=4))
    bad = batch(0, 2)
    del bad["action"]
    with pytest.raises(ValueError, match="missing keys"):
        st.write(bad)


def test_storage_requires_one_batch_dim():
    data = batch(0, 6).reshape(2, 3)
    with pytest.raises(ValueError, match="one batch dim"):
        TensorStorage(8).write(data)


def test_memmap_dir_removed_when_buffer_deleted(tmp_path):
    rb = ReplayBuffer(8, 2, storage="memmap", scratch_dir=str(tmp_path))
    rb.extend(batch(0, 4))
    path = rb.storage.path
    assert path is not None and path.exists()
    del rb
    assert not path.exists()


# --- replay buffer -----------------------------------------------------------------------


def test_unknown_sampler_lists_valid_names():
    with pytest.raises(ValueError, match="uniform, without_replacement, prioritized"):
        ReplayBuffer(8, 2, sampler="per")


@pytest.mark.parametrize("sampler", SAMPLER_NAMES)
def test_sample_returns_stored_rows_and_index(sampler):
    rb = ReplayBuffer(10, 4, sampler=sampler, generator=torch.Generator().manual_seed(0))
    assert rb.capacity == 10 and len(rb) == 0 and rb.nbytes() == 0
    rb.extend(batch(0, 6))
    rb.extend(batch(6, 6))  # wraps: rows 0, 1 now hold ids 10, 11
    assert len(rb) == 10
    out = rb.sample()
    assert out.batch_size == torch.Size([4])
    assert out["index"].dtype == torch.int64
    expected_ids = torch.tensor([10, 11, 2, 3, 4, 5, 6, 7, 8, 9])[out["index"]]
    assert torch.equal(ids_of(out), expected_ids)
    assert torch.equal(out["observation"][:, 0], expected_ids.float())
    assert ("priority_weight" in out.keys()) == (sampler == "prioritized")
    if sampler == "prioritized":
        assert out["priority_weight"].dtype == torch.float32
        assert out["priority_weight"].shape == (4,)
    assert rb.sample(7).batch_size == torch.Size([7])


def test_ppo_minibatches_cover_every_row_once_per_epoch():
    rb = ReplayBuffer(64, 8, sampler="without_replacement")
    rb.extend(batch(100, 32))
    for _ in range(3):  # epochs
        seen = torch.cat([ids_of(rb.sample()) for _ in range(4)])
        assert torch.equal(torch.sort(seen).values, torch.arange(100, 132))


def test_update_priority_changes_sampling_and_is_noop_elsewhere():
    rb = ReplayBuffer(8, 256, sampler="prioritized", alpha=1.0)
    rb.extend(batch(0, 4))
    rb.update_priority(torch.arange(4), torch.tensor([0.0, 0.0, 0.0, 100.0]))
    counts = torch.bincount(rb.sample()["index"], minlength=4)
    assert counts[3] > 250
    with pytest.raises(IndexError):
        rb.update_priority(torch.tensor([5]), torch.tensor([1.0]))
    uniform = ReplayBuffer(8, 4)
    uniform.extend(batch(0, 4))
    uniform.update_priority(torch.arange(4), torch.ones(4))  # must not raise


@pytest.mark.parametrize("sampler", SAMPLER_NAMES)
def test_empty_resets_length_and_sampler(sampler):
    rb = ReplayBuffer(8, 2, sampler=sampler)
    rb.extend(batch(0, 6))
    rb.empty()
    assert len(rb) == 0
    with pytest.raises(RuntimeError, match="empty"):
        rb.sample()
    rb.extend(batch(50, 2))
    assert set(ids_of(rb.sample(2)).tolist()) <= {50, 51}


def extend_and_use(rb: ReplayBuffer) -> None:
    rb.extend(batch(0, 7))
    rb.extend(batch(7, 7))  # wraps around capacity 10
    for _ in range(2):
        out = rb.sample()
        rb.update_priority(out["index"], out["index"].float() + 1)


@pytest.mark.parametrize("backend", ["ram", "memmap"])
@pytest.mark.parametrize("sampler", SAMPLER_NAMES)
def test_state_dict_round_trip_continues_identically(sampler, backend, tmp_path):
    kwargs = dict(capacity=10, batch_size=3, sampler=sampler, storage=backend)
    rb = ReplayBuffer(
        **kwargs, scratch_dir=str(tmp_path / "a"), generator=torch.Generator().manual_seed(0)
    )
    extend_and_use(rb)
    torch.save(rb.state_dict(), tmp_path / "rb.pt")
    expected = [rb.sample() for _ in range(5)]

    fresh = ReplayBuffer(
        **kwargs, scratch_dir=str(tmp_path / "b"), generator=torch.Generator().manual_seed(99)
    )
    fresh.load_state_dict(torch.load(tmp_path / "rb.pt", weights_only=True))
    assert (len(fresh), fresh.storage.cursor) == (len(rb), rb.storage.cursor) == (10, 4)
    if backend == "memmap":
        assert fresh.storage.data.is_memmap()
        assert fresh.storage.path.is_relative_to(tmp_path / "b")
    for want in expected:
        got = fresh.sample()
        assert set(got.keys(True, True)) == set(want.keys(True, True))
        assert (got == want).all()
    # Writes after the restore land at the same cursor and get the same priority.
    assert torch.equal(fresh.extend(batch(20, 3)), rb.extend(batch(20, 3)))
    assert (fresh.sample() == rb.sample()).all()


def test_state_dict_layout_is_plain_nested_dict():
    rb = ReplayBuffer(10, 2, sampler="prioritized")
    rb.extend(batch(0, 4))
    data = rb.state_dict()["storage"]["data"]
    assert type(data) is dict and type(data["next"]) is dict
    assert torch.equal(data["collector"]["traj_ids"], torch.arange(4))


def test_state_dict_without_data_restores_empty(tmp_path):
    rb = ReplayBuffer(10, 2, sampler="prioritized")
    rb.extend(batch(0, 4))
    state = rb.state_dict(include_data=False)
    assert state["storage"]["data"] is None
    torch.save(state, tmp_path / "s.pt")
    fresh = ReplayBuffer(10, 2, sampler="prioritized")
    fresh.extend(batch(0, 4))
    fresh.load_state_dict(torch.load(tmp_path / "s.pt", weights_only=True))
    assert len(fresh) == 0 and fresh.sampler.total == 0.0
