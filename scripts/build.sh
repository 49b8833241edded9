#!/usr/bin/env bash
# Installs the dependencies and builds tern into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
cuda_flag=-DTERN_CUDA=OFF
# TERN_BUILD_CUDA=1 also builds the CUDA backend (needs nvcc; scripts/gpu/ builds the GPU machine's binary).
if [ "${TERN_BUILD_CUDA:-0}" = 1 ]; then
  export PATH="$PATH:/usr/local/cuda/bin"
  cuda_flag=-DTERN_CUDA=ON
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$cuda_flag"
cmake --build build -j"${TERN_BUILD_JOBS:-2}"
