"""Trajectory slices: hand-computed returns-to-go, left padding and masks, length-proportional draws."""

from __future__ import annotations

import math

import pytest
import torch

from rlrun.datasets.slices import TrajectorySliceSampler, returns_to_go

# three episodes of lengths 2, 5, 3; rewards chosen so every partial sum is distinct
REWARDS = [[1.0, 2.0], [10.0, 20.0, 30.0, 40.0, 50.0], [100.0, 200.0, 300.0]]


def storage():
    lengths = torch.tensor([len(r) for r in REWARDS])
    start = torch.tensor([0, 2, 7])
    reward = torch.tensor(sum(REWARDS, []))
    n = len(reward)
    obs = torch.arange(n, dtype=torch.float32)[:, None].repeat(1, 2) + torch.tensor([0.0, 0.5])
    action = -torch.arange(n, dtype=torch.float32)[:, None] - 1.0
    return obs, action, reward, start, lengths


def test_returns_to_go_by_hand():
    _, _, reward, start, lengths = storage()
    expected = [3, 2, 150, 140, 120, 90, 50, 600, 500, 300]
    assert returns_to_go(reward, start, lengths).tolist() == expected


def test_slice_contents_padding_mask_and_scaled_rtg():
    obs, action, reward, start, lengths = storage()
    s = TrajectorySliceSampler(obs, action, reward, start, lengths, slice_len=4, rtg_scale=10.0)
    # episode 1 from step 0 (full), episode 1 from step 3 (2 valid), episode 0 from step 1 (1 valid)
    td = s.gather(torch.tensor([1, 1, 0]), torch.tensor([0, 3, 1]))
    assert td.batch_size == torch.Size([3, 4])
    assert td["mask"].tolist() == [[True] * 4, [False, False, True, True], [False, False, False, True]]
    # rows: episode 1 starts at flat row 2, episode 0 at 0
    rows = [[2, 3, 4, 5], [None, None, 5, 6], [None, None, None, 1]]
    rtg_flat = [3, 2, 150, 140, 120, 90, 50, 600, 500, 300]
    for b, rr in enumerate(rows):
        for k, r in enumerate(rr):
            if r is None:
                assert td["observation"][b, k].tolist() == [0.0, 0.0]
                assert td["action"][b, k].item() == 0.0 and td["return_to_go"][b, k].item() == 0.0
                assert td["timestep"][b, k].item() == 0 and td["reward"][b, k].item() == 0.0
            else:
                assert td["observation"][b, k].tolist() == [r, r + 0.5]
                assert td["action"][b, k].item() == -r - 1.0
                assert td["reward"][b, k].item() == reward[r].item()
                assert td["return_to_go"][b, k].item() == pytest.approx(rtg_flat[r] / 10.0)
                assert td["timestep"][b, k].item() == r - int(start[[1, 1, 0][b]])
    assert td["return_to_go"].shape == (3, 4, 1) and td["reward"].shape == (3, 4, 1)


def test_slice_longer_than_episode_is_padded_to_k():
    obs, action, reward, start, lengths = storage()
    s = TrajectorySliceSampler(obs, action, reward, start, lengths, slice_len=7)
    td = s.gather(torch.tensor([2]), torch.tensor([0]))
    assert td["mask"][0].tolist() == [False] * 4 + [True] * 3
    assert td["timestep"][0].tolist() == [0] * 4 + [0, 1, 2]
    assert td["return_to_go"][0, :, 0].tolist() == [0] * 4 + [600, 500, 300]


def test_episodes_drawn_in_proportion_to_length_and_starts_uniform():
    obs, action, reward, start, lengths = storage()
    s = TrajectorySliceSampler(obs, action, reward, start, lengths, slice_len=3, seed=123)
    n = 200_000
    episode, first = s.sample_starts(n)
    p = lengths.double() / lengths.sum()
    freq = torch.bincount(episode, minlength=3).double() / n
    # 5 standard errors of a binomial proportion: a wrong law (e.g. uniform over episodes,
    # 1/3 each) misses by far more; the fixed seed makes the check deterministic
    se = torch.sqrt(p * (1 - p) / n)
    assert (freq - p).abs().max() < 5 * se.max()
    assert bool((first < lengths[episode]).all()) and bool((first >= 0).all())
    # within episode 1 (length 5), each start step has probability 1/5
    sel = first[episode == 1]
    f = torch.bincount(sel, minlength=5).double() / len(sel)
    assert (f - 0.2).abs().max() < 5 * math.sqrt(0.2 * 0.8 / len(sel))


def test_sample_is_seeded_and_state_round_trips():
    obs, action, reward, start, lengths = storage()
    a = TrajectorySliceSampler(obs, action, reward, start, lengths, slice_len=3, seed=5)
    b = TrajectorySliceSampler(obs, action, reward, start, lengths, slice_len=3, seed=5)
    state = a.state_dict()
    x = a.sample(8)
    assert (x == b.sample(8)).all()
    a.load_state_dict(state)
    assert (a.sample(8) == x).all()
    # every sampled valid step lies inside the episode its timestep claims
    valid = x["mask"]
    assert bool((x["timestep"][valid] >= 0).all())


def test_trajectory_buffer_keeps_top_returns_then_replaces_oldest_with_hindsight_rtg():
    from rlrun.datasets.slices import TrajectoryBuffer
    obs, action, reward, start, lengths = storage()  # returns 3, 150, 600
    buf = TrajectoryBuffer(capacity=2, slice_len=3, seed=0)
    buf.seed_with(obs, action, reward, start, lengths)
    assert [float(r.sum()) for _, _, r in buf.episodes] == [150.0, 600.0]  # the best two, ascending
    # one collected episode of 2 steps with rewards 7, 1: overwrites slot 0 (oldest), rtg 8, 1
    buf.add(torch.full((2, 2), 9.0), torch.zeros(2, 1), torch.tensor([7.0, 1.0]))
    assert [float(r.sum()) for _, _, r in buf.episodes] == [8.0, 600.0]
    td = buf.sampler().gather(torch.tensor([0]), torch.tensor([0]))
    assert td["return_to_go"][0, :, 0].tolist() == [0.0, 8.0, 1.0]
    assert td["mask"][0].tolist() == [False, True, True]
    buf.add(torch.zeros(1, 2), torch.zeros(1, 1), torch.tensor([5.0]))  # next oldest: slot 1
    assert [float(r.sum()) for _, _, r in buf.episodes] == [8.0, 5.0]
    assert buf.sample(16)["observation"].shape == (16, 3, 2)
