"""Who a process is among the ranks, and the worlds refused in one line (issue 39)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from rlrun.core.errors import ConfigError
from rlrun.distributed.checkpoint import write_manifest
from rlrun.distributed.launch import check_world_file, rank_config, refuse_unshardable
from rlrun.distributed.world import World, rank_seed, shard, world_from_env

TORCHRUN = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}


def test_alone_is_no_world():
    assert world_from_env("cpu", {}) is None
    assert world_from_env("cpu", {"WORLD_SIZE": "1", "RANK": "0"}) is None


def test_torchrun_environment_and_not_slurms_own():
    assert world_from_env("cpu", TORCHRUN, cpus=2) == World(1, 2, 1, "gloo")
    multi_node = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    assert world_from_env("cuda", multi_node, gpus=2) == World(3, 4, 1, "nccl")
    # slurm_ray's N-task allocation runs one rlrun: SLURM's task count alone is no world
    assert world_from_env("cpu", {"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}, cpus=2) is None


@pytest.mark.parametrize("device, machine, key", [
    ("cpu", {"cpus": 1}, "nproc-per-node"),   # more ranks than cores
    ("cuda", {"gpus": 1}, "nproc-per-node"),  # more ranks than GPUs
    ("cuda", {"gpus": 0}, "device"),          # NCCL without a GPU
])
def test_worlds_the_machine_cannot_hold_are_one_config_error(device, machine, key):
    with pytest.raises(ConfigError) as err:
        world_from_env(device, TORCHRUN, **machine)
    assert err.value.key == key and err.value.fix and err.value.exit_code == 2


def test_a_batch_that_does_not_divide_names_its_key():
    world = World(0, 2, 0, "gloo")
    assert shard(64, world, "buffer.batch_size") == 32
    with pytest.raises(ConfigError) as err:
        shard(65, world, "buffer.batch_size")
    assert err.value.key == "buffer.batch_size"


def test_each_rank_gets_its_share_its_seed_and_rank_0_the_face():
    cfg = OmegaConf.create({"seed": 3, "total_frames": 8192, "progress": "auto", "logger": {"name": "mlflow"},
                            "collector": {"name": "sync", "frames_per_batch": 1024, "init_random_frames": 0},
                            "buffer": {"batch_size": 256}, "trainer": {"updates_per_frame": 0.25},
                            "eval": {"interval_frames": 100, "video": False}})
    zero, one = rank_config(cfg, World(0, 2, 0, "gloo")), rank_config(cfg, World(1, 2, 1, "gloo"))
    assert (zero.total_frames, zero.collector.frames_per_batch, zero.buffer.batch_size) == (4096, 512, 128)
    assert zero.trainer.updates_per_frame == 0.5  # one process's updates per global frame
    assert zero.seed == 3 and one.seed == rank_seed(3, 1) != 3
    assert zero.logger.name == "mlflow" and one.logger.name == "none" and one.progress is False


@pytest.mark.parametrize("override, key", [({"collector": {"name": "multi_async"}}, "collector"),
                                           ({"eval": {"target_return": 400}}, "eval.target_return"),
                                           ({"dataset": "rlrun/pendulum/medium-replay-v0"}, "dataset"),
                                           ({"resume": "runs/other/checkpoint.pt"}, "resume")])
def test_what_cannot_run_data_parallel_says_why(override, key):
    with pytest.raises(ConfigError) as err:
        refuse_unshardable(OmegaConf.create(override))
    assert err.value.key == key


def test_a_resume_under_another_world_size_is_refused(tmp_path):
    write_manifest(tmp_path, 2, 1024)
    check_world_file(tmp_path, 2, "auto")
    check_world_file(tmp_path, 4, False)  # a fresh start may change it
    with pytest.raises(ConfigError, match="trained on 2 ranks, this run has 4"):
        check_world_file(tmp_path, 4, "auto")
