"""Two gloo ranks each on half of every batch train the weights one process trains on the whole
batch (issue 39), for the PPO, SAC, DQN, IQL and MAPPO losses, 50 updates each.

Tolerance: the ranks' mean gradient is (mean of 8 + mean of 8) / 2 where one process sums 16
terms in another order, so each gradient differs in its last float32 bits (~1e-7 relative);
Adam divides by the root of its second moment, which carries such a difference into the step
at the same relative size. Measured after 50 steps: at most 6.0e-8 apart (IQL; PPO, DQN and
MAPPO 3.0e-8, SAC 0). The check allows 1e-5 absolute / 1e-4 relative, far below what a rank
training on its own half gives (the negative control below: gradients not averaged, weights
1.5e-2 to 2.8e-2 apart).

SAC samples actions: its noise is drawn per rank (seeded by update and rank), and the one
process draws the same per-half noise over the whole batch (``ddp_cases._losses``), so the only
difference left is where the gradients are summed.
"""

from __future__ import annotations

import multiprocessing

import ddp_cases
import pytest
import torch

WORLD = 2
ATOL, RTOL = 1e-5, 1e-4


def _run(tmp_path, average: bool) -> list[dict]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    ctx = multiprocessing.get_context("spawn")
    args = (WORLD, str(tmp_path / "rdv"), str(tmp_path), average)
    procs = [ctx.Process(target=ddp_cases.worker, args=(r, *args)) for r in range(WORLD)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0] * WORLD
    return [torch.load(tmp_path / f"{r}.pt", weights_only=True) for r in range(WORLD)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("ddp")
    return {"first": _run(base / "first", True), "again": _run(base / "again", True),
            "unaveraged": _run(base / "unaveraged", False)}


def _close(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.allclose(x, y, atol=ATOL, rtol=RTOL) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("family", ddp_cases.FAMILIES)
def test_two_ranks_on_half_batches_equal_one_process_on_the_whole(runs, family):
    torch.set_num_threads(1)
    alone = ddp_cases.train(family, shares=WORLD)
    ranks = [r[family] for r in runs["first"]]
    assert all(torch.equal(x, y) for x, y in zip(ranks[0], ranks[1], strict=True))  # every rank alike
    worst = max((x - y).abs().max().item() for x, y in zip(ranks[0], alone, strict=True))
    assert _close(ranks[0], alone), f"{family}: weights differ by {worst:.3g}"


@pytest.mark.parametrize("family", ddp_cases.FAMILIES)
def test_without_gradient_averaging_the_weights_differ(runs, family):
    alone = ddp_cases.train(family, shares=WORLD)
    ranks = [r[family] for r in runs["unaveraged"]]
    assert not _close(ranks[0], alone) and not _close(ranks[1], alone)


@pytest.mark.parametrize("family", ddp_cases.FAMILIES)
def test_a_repeated_two_rank_run_is_bit_identical(runs, family):
    for first, again in zip(runs["first"], runs["again"], strict=True):
        assert all(torch.equal(x, y) for x, y in zip(first[family], again[family], strict=True))
