"""The device check (``python -m rlrun.benchmarks device``): it cannot pass vacuously, and it runs on CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rlrun.algos.ppo_kl import PPOKLLoss
from rlrun.benchmarks.device import FAMILIES, DeviceProbe, checkpoint_misplaced, misplaced, storage_misplaced
from rlrun.core.policy import Policy

META = torch.device("meta")


def test_the_checker_flags_cpu_tensors_when_the_device_is_meta():
    td = TensorDict({"observation": torch.zeros(2, 3), ("next", "reward"): torch.zeros(2)}, [2])
    assert misplaced(td, torch.device("cpu"), "x") == []
    found = misplaced(td, META, "x")
    assert sorted(found) == ["x.next.reward: on cpu, expected meta", "x.observation: on cpu, expected meta"]
    # nested dicts and lists too, and only the misplaced ones
    assert misplaced({"a": [torch.zeros(1, device="meta"), torch.zeros(1)]}, META, "y") == [
        "y.a.1: on cpu, expected meta"]


def test_the_probe_flags_loss_inputs_outputs_batches_and_storage_off_the_device():
    probe = DeviceProbe(META)
    sub = TensorDict({"observation": torch.zeros(2, 3)}, [2])
    probe.pre_steps_log(None, sub)
    probe.post_loss(None, sub, {"loss": torch.zeros((), device="meta"), "kl_coef": torch.tensor(1.0)})
    assert probe.updates == 1
    assert set(probe.violations) == {"collected batch.observation: on cpu, expected meta",
                                     "loss input.observation: on cpu, expected meta",
                                     "loss output.kl_coef: on cpu, expected meta"}
    ram = SimpleNamespace(_storage=SimpleNamespace(device=torch.device("cpu"), backend="ram", _data=sub))
    assert storage_misplaced(ram, META) == ["buffer storage.observation: on cpu, expected meta"]
    memmap = SimpleNamespace(_storage=SimpleNamespace(device=torch.device("cpu"), backend="memmap",
                                                      _data=sub))
    assert storage_misplaced(memmap, META) == []  # memmap storage is CPU files by design


def test_the_checkpoint_check_reads_the_saved_devices(tmp_path):
    path = tmp_path / "checkpoint.pt"
    torch.save({"loss": {"w": torch.zeros(2)}, "optimizer": {"state": {0: {"step": torch.tensor(3.0),
                                                                         "exp_avg": torch.zeros(2)}}},
                "rng": torch.zeros(3, dtype=torch.uint8)}, path)
    assert checkpoint_misplaced(path, torch.device("cpu")) == []
    # the 0-dim step counter may stay on CPU (torch's default); weights and moments may not
    assert sorted(checkpoint_misplaced(path, META)) == [
        "checkpoint loss.w: on cpu, expected meta",
        "checkpoint optimizer.state.0.exp_avg: on cpu, expected meta"]


class _Actor(nn.Module):
    head = "categorical"

    def __init__(self):
        super().__init__()
        self.net = nn.Linear(3, 2)

    def dist(self, obs):
        return torch.distributions.Categorical(logits=self.net(obs), validate_args=False)


def test_ppo_kl_reports_its_coefficient_on_the_losss_device():
    # TrainStats stacks every scalar output: a CPU kl_coef beside CUDA losses fails there
    loss = PPOKLLoss(Policy(_Actor(), nn.Linear(3, 1)), init_kl_coef=0.5).to(META)
    td = TensorDict({"observation": torch.zeros(4, 3), "action": torch.zeros(4, dtype=torch.long),
                     "sample_log_prob": torch.zeros(4), "advantage": torch.zeros(4),
                     "value_target": torch.zeros(4, 1)}, [4], device=META)
    out = loss(td)
    assert {k: v.device for k, v in out.items()} == {k: META for k in out}


def test_the_device_check_runs_on_cpu_and_passes():
    # every family, --quick: 46 s on the shared 2-core machine (13 families x 2 runs; timeout 240 s)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "rlrun.benchmarks", "device", "--device", "cpu", "--quick"],
                          capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if "device=cpu" in line]
    assert len(lines) == len(FAMILIES) and all("placement/match: OK" in line for line in lines), done.stdout


@pytest.mark.slow
def test_the_device_check_runs_compiled_families_too():
    # PPO --quick with --compile: eager on cpu twice, then compiled (a cold compile: minutes)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "rlrun.benchmarks", "device", "--device", "cpu", "--quick",
                           "--families", "ppo", "--compile"], capture_output=True, text=True, env=env,
                          timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    line = next(ln for ln in done.stdout.splitlines() if "compile=true" in ln)
    assert "placement/match: OK" in line and "device check: 2/2 runs OK" in done.stdout, done.stdout


def test_the_comparison_is_exact_on_cpu_and_catches_breakage_elsewhere():
    from rlrun.benchmarks.device import Outcome, compare

    a = Outcome("cpu", eval_return=-500.0, first_losses={"l": 1.0}, last_losses={"l": 0.5})
    assert compare("x", a, Outcome("cpu", eval_return=-500.0, first_losses={"l": 1.0},
                                   last_losses={"l": 0.5}), exact=True) == []
    assert compare("x", a, Outcome("cpu", eval_return=-500.0, first_losses={"l": 1.0},
                                   last_losses={"l": 0.5000001}), exact=True)
    assert compare("x", Outcome("cuda", eval_return=-700.0, last_losses={"l": 0.4}), a, exact=False) == []
    assert compare("x", Outcome("cuda", eval_return=float("nan")), a, exact=False)
    assert compare("x", Outcome("cuda", eval_return=-1000.0), a, exact=False)  # > 0.5 * 500 + 50
    assert compare("x", Outcome("cuda", eval_return=-500.0, last_losses={"l": float("inf")}), a, exact=False)
