#!/usr/bin/env bash
# The GPU check of issue 44, as one command on a machine with an NVIDIA GPU:
#
#   bash .ci/gpu_check.sh OUTDIR [BUDGET_S]
#
# Where no rlrun is installed (a bare CUDA image), `.ci/gpu_wheels.sh` on a machine with pip
# access first downloads rlrun's pure-Python dependencies for that machine's Python into .whl/,
# which this script installs into /tmp/site. Every part writes to OUTDIR as it goes and has its own
# time limit, so a part that fails or hangs leaves the others' results:
#   1. the device check (`python -m rlrun.benchmarks device --device cuda`), --quick then full,
#      in the background on half of the cores (it times nothing);
#   2. `python -m rlrun.benchmarks compiled --device cuda`: compile=true against eager, the
#      update alone (SAC, TD3, PPO, PPO Atari, DQN), then the whole loop (LeanRL's four), then
#      `+paper=table1/sac_halfcheetah` end to end, each part its own process.
#
# A dry run on CPU (the script itself, not the GPU): RLRUN_GPU_CHECK_DEVICE=cpu RLRUN_GPU_CHECK_QUICK=1.
set -u
OUTDIR=${1:?usage: gpu_check.sh OUTDIR [BUDGET_S]}
BUDGET=${2:-380}
DEVICE=${RLRUN_GPU_CHECK_DEVICE:-cuda}
QUICK=${RLRUN_GPU_CHECK_QUICK:+--quick}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
LOG="$OUTDIR/log.txt"
export PYTHONUNBUFFERED=1 MLFLOW_DISABLE_TELEMETRY=true
start=$SECONDS
say() { echo "[gpu_check $((SECONDS - start)) s] $*" | tee -a "$LOG"; }

REPO=$(pwd)
# from outside the checkout: its rlrun/ would shadow the installed package (conf/ ships as rlrun.conf)
mkdir -p /tmp/rlrun-gpu-check && cd /tmp/rlrun-gpu-check
if ! python3 -c "import rlrun.conf" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$REPO"/.whl/*.whl >>"$LOG" 2>&1 || { say "wheel install failed"; exit 1; }
  export PYTHONPATH=/tmp/site
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >>"$LOG" 2>&1
python3 -c "import torch, tensordict, rlrun, gymnasium, mujoco; print('torch', torch.__version__, \
'| cuda', torch.version.cuda, '|', torch.cuda.is_available() and torch.cuda.get_device_name(), '| tensordict', tensordict.__version__, \
'| gymnasium', gymnasium.__version__, '| mujoco', mujoco.__version__, '| python', __import__('sys').version.split()[0])" \
  >>"$LOG" 2>&1 || { say "import failed"; tail -20 "$LOG"; exit 1; }
say "imports ok"
ncpu=$(nproc --all)  # not OMP_NUM_THREADS, which nproc honours
half=$(( ncpu > 1 ? ncpu / 2 : 1 ))
BG="taskset -c $half-$((ncpu - 1)) nice -n 10"
FG="taskset -c 0-$((half - 1))"

# 1. placement checks in the background (no timings)
(
  timeout 150 $BG python3 -m rlrun.benchmarks device --device "$DEVICE" --quick >"$OUTDIR/device_quick.txt" 2>&1
  echo "rc $?" >>"$OUTDIR/device_quick.txt"
  left=$((BUDGET - 30 - (SECONDS - start)))
  if [ "$left" -gt 60 ]; then
    timeout "$left" $BG python3 -m rlrun.benchmarks device --device "$DEVICE" $QUICK >"$OUTDIR/device_full.txt" 2>&1
    echo "rc $?" >>"$OUTDIR/device_full.txt"
  fi
) &
BGPID=$!

# 2. compiled against eager, each part its own process and time limit
part() {  # name, limit, args...
  local name=$1 limit=$2
  shift 2
  say "part $name (limit $limit s)"
  timeout "$limit" $FG python3 -m rlrun.benchmarks compiled --device "$DEVICE" --parts "$name" \
    --json "$OUTDIR/$name.json" $QUICK "$@" >>"$LOG" 2>&1
  say "part $name rc $?"
}
part updates 150
part loop 130
part e2e 100 --e2e-seconds 60

say "waiting for the device check"
wait "$BGPID"
say "done"
