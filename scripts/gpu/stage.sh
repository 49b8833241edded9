#!/usr/bin/env bash
# Runs HERE (the build machine): builds the CUDA tests and benchmarks with third-party libraries linked
# statically, and copies what the GPU machine needs into .device/ (ignored by git) for the device tool's `carry`:
# .device/bin (executables), .device/lib (libgomp), .device/fixtures (the dense fixture models).
# Then, on the GPU machine: scripts/gpu/run_all.sh (carry: .device).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${BUILD_DIR:-$root/build-cuda}"
fixtures="${TERN_FIXTURES:-$root/../shared/fixtures}"

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTERN_CUDA=ON -DTERN_STATIC=ON >/dev/null
cmake --build "$build" -j2 --target cuda_backend_test attention_bench

rm -rf "$root/.device"
mkdir -p "$root/.device/bin" "$root/.device/lib" "$root/.device/fixtures/models"
cp "$build/tests/backend/cuda/cuda_backend_test" "$build/bench/attention_bench" "$root/.device/bin/"
cp "$(g++ -print-file-name=libgomp.so.1)" "$root/.device/lib/"
for model in llama llama3_rope qwen2 qwen3; do
  cp -r "$fixtures/models/$model" "$root/.device/fixtures/models/"
done
chmod -R u+w "$root/.device"
echo "shared libraries the test needs (cuBLASLt comes from the GPU machine's CUDA):"
ldd "$root/.device/bin/cuda_backend_test" | grep -v -E "linux-vdso|ld-linux"
du -sh "$root/.device"
