#!/usr/bin/env bash
# Runs ON THE GPU MACHINE in the repository root, after scripts/gpu/stage.sh ran on the build machine
# (device tool: carry [".device"]). Runs the CUDA tests, compute-sanitizer (memcheck, racecheck) on the kernel
# tests, the attention benchmark and the decode-GEMM benchmark, writing logs to $OUT (or ./gpu-logs). Exits
# non-zero if a test failed.
#   bash scripts/gpu/run_all.sh [--quick]
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${OUT:-$root/gpu-logs}"
mkdir -p "$out"
quick="${1:-}"
bin="$root/.device/bin"
export TERN_FIXTURES="$root/.device/fixtures"

source "$root/scripts/gpu/device_env.sh"
export PATH="/usr/local/cuda/bin:$PATH"

status=0
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv
  nvcc --version | tail -1
  ldd "$bin/cuda_backend_test" | grep -E "not found|cublas|gomp"
} 2>&1 | tee "$out/machine.txt"

echo "== tests"
"$bin/cuda_backend_test" --gtest_brief=1 2>&1 | tee "$out/tests.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

if [ -n "${TERN_SKIP_SANITIZER:-}" ]; then
  echo "compute-sanitizer runs skipped (TERN_SKIP_SANITIZER)" | tee "$out/sanitizer_skipped.txt"
elif command -v compute-sanitizer >/dev/null; then
  # The op, MoE and attention tests exercise every kernel; the model tests add nothing the sanitizer would see.
  # cuBLAS's own split-K GEMM kernels report racecheck hazards (seen 2026-11, nvjet_sm90_*_splitK): the linear
  # and grouped-linear tests stay out of the sanitizer runs, which check our kernels.
  # Attention cases 16 and 18: the all-heads decode kernel (head_dim 128 with sinks; 64 with a window); 30 and 32:
  # the whole-context decode kernel (without and with a window).
  # The MLA cases: the fixture's dims (16-padding), odd heads with three value chunks, values of 560. The V4 cases:
  # every DeepSeek-V4 op at the fixture's dims and larger.
  filter='CudaOpsTest.*:CudaMoeTest.*:Shapes/CudaAttentionTest.MatchesCpu/0:Shapes/CudaAttentionTest.MatchesCpu/3:Shapes/CudaAttentionTest.MatchesCpu/7:Shapes/CudaAttentionTest.MatchesCpu/16:Shapes/CudaAttentionTest.MatchesCpu/18:Shapes/CudaAttentionTest.MatchesCpu/30:Shapes/CudaAttentionTest.MatchesCpu/32:Shapes/CudaMlaAttentionTest.MatchesCpu/0:Shapes/CudaMlaAttentionTest.MatchesCpu/7:Shapes/CudaMlaAttentionTest.MatchesCpu/10:CudaV4OpsTest.*:Layers/CudaV4LayerTest.*:-CudaOpsTest.LinearWithAndWithoutBias:CudaOpsTest.GroupedLinearMatchesCpu'
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer --tool $tool"
    compute-sanitizer --tool "$tool" --error-exitcode 3 "$bin/cuda_backend_test" --gtest_brief=1 \
      --gtest_filter="$filter" >"$out/sanitizer_$tool.txt" 2>&1
    rc=$?
    tail -4 "$out/sanitizer_$tool.txt"
    [ "$rc" -eq 0 ] || { echo "compute-sanitizer $tool: exit $rc"; status=1; }
  done
else
  echo "compute-sanitizer not found" | tee "$out/sanitizer_missing.txt"
fi

if [ -x "$bin/tern" ]; then
  echo "== bf16 yardstick: tern's CUDA logits against transformers' bf16 forward on fresh fixtures"
  python3 "$root/scripts/gpu/bf16_yardstick.py" --tern "$bin/tern" --fixtures "$TERN_FIXTURES/models" \
    --make-model "$root/.device/tools/make_model.py" --out "$out/bf16_yardstick.json" 2>&1 |
    grep -E "^[a-z0-9_]+ +[a-z0-9_]+ +(ok|FAIL)|cases within" | tee "$out/bf16_yardstick.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
else
  echo "bf16 yardstick skipped: stage with TERN_STAGE_TERN=1 for the tern binary" | tee "$out/bf16_yardstick_skipped.txt"
fi

echo "== attention benchmark"
"$bin/attention_bench" $quick 2>&1 | tee "$out/bench.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
echo "== decode GEMMs against the copy bandwidth"
"$bin/linear_bench" 2>&1 | tee "$out/linear_bench.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
exit $status
