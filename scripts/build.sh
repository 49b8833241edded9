#!/usr/bin/env bash
# Installs the dependencies and builds tern into build/, with the CUDA backend where nvcc is found (its GPU tests
# skip on machines without a GPU). TERN_BUILD_CUDA=0 builds the CPU backend only.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
cuda_flag=-DTERN_CUDA=OFF
if [ "${TERN_BUILD_CUDA:-1}" = 1 ] && { command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; }; then
  export PATH="$PATH:/usr/local/cuda/bin"
  cuda_flag=-DTERN_CUDA=ON
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$cuda_flag"
cmake --build build -j"${TERN_BUILD_JOBS:-2}"
