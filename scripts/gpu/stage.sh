#!/usr/bin/env bash
# Runs HERE (the build machine): builds the CUDA tests and benchmarks with third-party libraries linked
# statically, and packs what the GPU machine needs into .device/stage.tar.xz (ignored by git) for the device tool's
# `carry` (64 MiB with the tracked files): bin (executables, stripped), lib (libgomp), tools (make_model.py),
# fixtures (the dense, MoE and DeepSeek-V3/V4 fixture models), configs (model configs for the end-to-end benchmark).
# The GPU scripts unpack it on first use (device_env.sh). TERN_STAGE_TARGETS replaces the list of executables (e.g.
# "cuda_backend_test moe_experts_bench"), TERN_STAGE_MODELS the fixture models.
# Then, on the GPU machine: scripts/gpu/run_all.sh, e2e_bench.sh and verify_step_check.sh (carry: .device), and on a
# multi-GPU kind scripts/gpu/tp_check.sh.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${BUILD_DIR:-$root/build-cuda}"
fixtures="${TERN_FIXTURES:-$root/../shared/fixtures}"

# TERN_STAGE_REUSE_BUILD=1 takes the binaries of an existing CUDA build (BUILD_DIR, e.g. build/) as they are linked,
# and stages the Debian libraries they load that the GPU machine lacks: no second build of the whole tree.
if [ -z "${TERN_STAGE_REUSE_BUILD:-}" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTERN_CUDA=ON -DTERN_STATIC=ON >/dev/null
fi
# tern-engine-bench is `tern bench` without the server layers (quick to build); TERN_STAGE_TERN=1 adds `tern`.
targets=(${TERN_STAGE_TARGETS:-cuda_backend_test cuda_tensor_parallel_test attention_bench linear_bench
          fp8_linear_bench moe_experts_bench tern_engine_bench verify_step_bench})
[ -n "${TERN_STAGE_TERN:-}" ] && targets+=(tern)
cmake --build "$build" -j2 --target "${targets[@]}"

rm -rf "$root/.device"
mkdir -p "$root/.device/bin" "$root/.device/lib" "$root/.device/fixtures/models" "$root/.device/configs" \
  "$root/.device/tools"
for target in "${targets[@]}"; do
  find "$build" -type f -name "$target" -perm -u+x -not -path "*/CMakeFiles/*" -exec cp {} "$root/.device/bin/" \;
done
strip "$root/.device/bin/"*
cp "$fixtures/configs/llama-3.1-8b.json" "$fixtures/configs/deepseek-v4-flash-8layer.json" \
  "$root/bench/configs/gpt-oss-20b.json" "$root/.device/configs/"
# Qwen3-30B-A3B cut to 24 layers, the MoE speed issue's shape.
python3 - "$fixtures/configs/qwen3-30b-a3b.json" "$root/.device/configs/qwen3-30b-a3b-24-layers.json" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
config["num_hidden_layers"] = 24
json.dump(config, open(sys.argv[2], "w"), indent=2)
PY
cp "$(g++ -print-file-name=libgomp.so.1)" "$root/.device/lib/"
if [ -n "${TERN_STAGE_REUSE_BUILD:-}" ]; then
  for binary in "$root/.device/bin/"*; do
    ldd "$binary" | awk '/=> \// {print $3}' | grep -E "utf8proc|pcre2|fmt|icu" || true
  done | sort -u | xargs -r cp -L -t "$root/.device/lib/"
fi
cp "$fixtures/../tools/make_model.py" "$root/.device/tools/"
for model in ${TERN_STAGE_MODELS:-llama llama3_rope qwen2 qwen3 qwen3-chat-tiny qwen3_moe mixtral gpt_oss deepseek_v3 \
               deepseek_v4 tern-py-13m}; do
  cp -r "$fixtures/models/$model" "$root/.device/fixtures/models/"
done
chmod -R u+w "$root/.device"
echo "shared libraries the executables need (cuBLASLt comes from the GPU machine's CUDA):"
ldd "$root/.device/bin/"* | grep "=>" | grep -v -E "linux-vdso|ld-linux" | awk '{print $1}' | sort -u | tr '\n' ' '
echo
tar -C "$root/.device" -cf - bin lib fixtures tools configs | xz -T0 -6 >"$root/.device/stage.tar.xz"
rm -rf "$root/.device/bin" "$root/.device/lib" "$root/.device/fixtures" "$root/.device/tools" "$root/.device/configs"
du -h "$root/.device/stage.tar.xz"
