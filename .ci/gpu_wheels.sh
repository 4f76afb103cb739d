#!/usr/bin/env bash
# Downloads rlrun's dependencies that a bare CUDA image lacks (its python3 holds torch, numpy, scipy,
# numba, h5py, matplotlib, opencv) as wheels for that machine's Python into .whl/, and builds
# rlrun's own wheel there, for .ci/gpu_check.sh to install without network access.
#   bash .ci/gpu_wheels.sh [PYTHON_VERSION]      # default 3.12
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-3.12}
rm -rf .whl && mkdir -p .whl
PLAT="--only-binary=:all: --python-version $PY --implementation cp --platform manylinux_2_28_x86_64
      --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
for pkg in "tensordict>=0.15,<0.16" pyvers==0.2.3 "gymnasium>=1.1,<2" farama-notifications \
           hydra-core==1.3.8 "omegaconf>=2.3,<2.4" submitit hydra-submitit-launcher==1.2.0 \
           mujoco==4.0.1 mujoco-core==4.0.1 glfw pyopengl ale-py==0.12.1 pyglet==1.5.27 gym-notices==0.0.8; do
  python3 -m pip download -q --no-deps $PLAT -d .whl "$pkg"
done
# sdists only on PyPI (pure Python): built here
python3 -m pip wheel -q --no-deps -w .whl vmas==1.5.2 gym==0.26.2 antlr4-python3-runtime==4.9.3 .
du -sh .whl
