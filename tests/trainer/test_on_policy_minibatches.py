"""OnPolicyMinibatches stores a batch once and indexes it every epoch, with the draws of a refill."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from tensordict import TensorDict

from rlrun.buffers.factory import make_replay_buffer
from rlrun.trainer.hooks import Hook, OnPolicyMinibatches


def _batch(seed: int) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    return TensorDict({"observation": torch.randn(4, 8, 3, generator=g),
                       "next": {"reward": torch.randn(4, 8, 1, generator=g)}}, [4, 8])


def _epochs(hook_epoch, batches=2, epochs=3, minibatches=4):
    """Minibatches served over ``batches`` x ``epochs``, with GAE-like re-estimates per epoch."""
    buffer = make_replay_buffer(32, 8, sampler="without_replacement", seed=3)
    trainer = SimpleNamespace(buffer=buffer, batches=0)
    hook, served = OnPolicyMinibatches(("observation",)), []
    for b in range(batches):
        batch, trainer.batches = _batch(b), b + 1
        for e in range(epochs):
            batch.set("advantage", torch.full((4, 8), float(10 * b + e)) + batch["observation"][..., 0])
            hook_epoch(hook, trainer, batch)
            served += [hook.process_optim_batch(trainer, batch) for _ in range(minibatches)]
    return served, buffer


def _refill(hook, trainer, batch):  # the former pre_epoch: empty and re-store the whole batch
    trainer.buffer.empty()
    trainer.buffer.extend(batch.reshape(-1))


def test_same_minibatches_as_refilling_each_epoch():
    new, buf_new = _epochs(lambda h, t, b: h.pre_epoch(t, b))
    old, buf_old = _epochs(_refill)
    assert len(new) == len(old) == 24
    for a, b in zip(new, old):
        assert (a == b).all(), "a minibatch differs from the refilling hook's"
    assert torch.equal(buf_new.sampler.state_dict()["perm"], buf_old.sampler.state_dict()["perm"])
    # the latest epoch's advantages are what the buffer holds (checkpoints save it)
    assert (buf_new.storage.data[:32] == buf_old.storage.data[:32]).all()


def test_the_batch_is_stored_once_per_batch():
    writes = []
    buffer = make_replay_buffer(32, 8, sampler="without_replacement")
    original = buffer.extend
    buffer.extend = lambda data: writes.append(data.batch_size) or original(data)
    trainer = SimpleNamespace(buffer=buffer, batches=1)
    hook, batch = OnPolicyMinibatches(("observation",)), _batch(0)
    for epoch in range(4):
        batch.set("advantage", torch.full((4, 8), float(epoch)))
        hook.pre_epoch(trainer, batch)
        assert (hook.process_optim_batch(trainer, batch)["advantage"] == epoch).all()
    assert len(writes) == 1
    trainer.batches = 2  # the next collected batch is stored again
    hook.pre_epoch(trainer, _batch(1).set("advantage", torch.zeros(4, 8)))
    assert len(writes) == 2


class _Reads(Hook):  # a Hook that declares a minibatch read
    def io(self):
        return {"post_loss": (("next.reward",), ())}

    def post_loss(self, trainer, sub, losses):
        pass


class _Undeclared(Hook):
    def post_loss(self, trainer, sub, losses):
        pass


def _minibatches(hooks: dict, n: int = 6) -> list[TensorDict]:
    buffer = make_replay_buffer(32, 8, sampler="without_replacement", seed=3)
    hook = OnPolicyMinibatches(("observation", "advantage"))
    trainer = SimpleNamespace(buffer=buffer, batches=1, hooks={"buffer": hook, **hooks})
    batch = _batch(0)
    batch.set("advantage", torch.randn(4, 8, generator=torch.Generator().manual_seed(1)))
    hook.pre_epoch(trainer, batch)
    return [hook.process_optim_batch(trainer, batch) for _ in range(n)]


def test_minibatches_hold_what_is_read_from_the_rows_the_buffer_samples():
    """Issue #27: the loss's columns only (and declared reads), the buffer's own rows and draws."""
    from rlrun.trainer.builtins import DivergenceGuard
    from rlrun.trainer.hooks import TrainStats

    whole = _minibatches({"undeclared": _Undeclared()})
    assert {"observation", "advantage", "index", ("next", "reward")} <= set(whole[0].keys(True, True))
    lean = _minibatches({"stats": TrainStats(), "guard": DivergenceGuard(torch.nn.Linear(1, 1))})
    assert set(lean[0].keys(True, True)) == {"observation", "advantage", "index"}
    for a, b in zip(lean, whole, strict=True):
        assert (a == b.select(*a.keys())).all()
    declared = _minibatches({"reads": _Reads()})
    assert set(declared[0].keys(True, True)) == {"observation", "advantage", "index", ("next", "reward")}
