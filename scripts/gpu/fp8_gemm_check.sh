#!/usr/bin/env bash
# Runs ON THE GPU MACHINE in the repository root (device tool: carry [".device"]): the block-FP8 GEMM's checks and
# timings in one call, for a change to its kernel (kernels/linear/wgmma_gemm_kernel.cuh). On the build machine first:
#   TERN_STAGE_TARGETS="fp8_gemm_test fp8_linear_bench cuda_backend_test" \
#     TERN_STAGE_MODELS="qwen3 qwen3_moe gpt_oss deepseek_v3 deepseek_v4" bash scripts/gpu/stage.sh
# and, to time the tree against another one on the same card, that tree's fp8_linear_bench stripped and xz'd into
# .device/baseline/fp8_linear_bench.xz (after staging: stage.sh empties .device).
# - fp8_gemm_test against the float64 product; a hang (setmaxnreg waiting for registers the producer keeps, a
#   barrier's count) ends the call there;
# - compute-sanitizer memcheck and racecheck on two of fp8_gemm_test's products (a partial row tile and a partial
#   weight tile; four slices, so that both partial sums end a tile);
# - fp8_linear_bench twice, alternating with the baseline's where there is one;
# - the backend's block-FP8, MoE, MXFP4 and DeepSeek-V4 tests;
# - Nsight Compute on the 8192^3 product: throughputs, and the SASS instructions its warps stalled on most
#   (scripts/gpu/ncu_stall_lines.py).
# Logs in $OUT (or ./gpu-logs), eight files (what the device tool brings back at most); exits non-zero if a test
# failed.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${OUT:-$root/gpu-logs}"
mkdir -p "$out"
source "$root/scripts/gpu/device_env.sh"
export PATH="/usr/local/cuda/bin:$PATH" TERN_FIXTURES="$root/.device/fixtures"
bin="$root/.device/bin"
baseline="$root/.device/baseline/fp8_linear_bench"
[ -f "$baseline.xz" ] && xz -d -f "$baseline.xz" && chmod +x "$baseline"
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee "$out/machine.txt"

status=0
timeout 120 "$bin/fp8_gemm_test" >"$out/fp8_gemm_test.txt" 2>&1
rc=$?
if [ $rc -eq 124 ]; then
  echo "fp8_gemm_test hangs"
  exit 1
fi
[ $rc -eq 0 ] || status=1

rm -f "$out/sanitizer.txt"
for tool in memcheck racecheck; do
  echo "== compute-sanitizer --tool $tool" >>"$out/sanitizer.txt"
  timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 3 "$bin/fp8_gemm_test" --gtest_brief=1 \
    --gtest_filter='*300x16448x272:*1024x2176x512' >>"$out/sanitizer.txt" 2>&1 || status=1
done

rm -f "$out/bench_baseline.txt" "$out/bench.txt"
for run in 1 2; do
  [ -x "$baseline" ] && timeout 120 "$baseline" >>"$out/bench_baseline.txt" 2>&1
  timeout 120 "$bin/fp8_linear_bench" >>"$out/bench.txt" 2>&1
done

timeout 300 "$bin/cuda_backend_test" --gtest_brief=1 --gtest_filter='*Fp8*:*Moe*:*Mxfp4*:*V4*:*Fixture*' \
  >"$out/backend.txt" 2>&1 || status=1

# The bench's first gemm_kernel launches are 8192^3's warm-up runs: the fourth is one of them.
sections="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats
          --section SourceCounters"
timeout 150 ncu --clock-control none --kernel-name gemm_kernel --launch-skip 3 --launch-count 1 --kill yes \
  $sections -o "$out/fp8_8192" "$bin/fp8_linear_bench" >/dev/null 2>&1
ncu -i "$out/fp8_8192.ncu-rep" $sections >"$out/ncu.txt" 2>&1
ncu -i "$out/fp8_8192.ncu-rep" --page source --csv --print-source sass 2>&1 | gzip >"$out/sass.csv.gz"
rm -f "$out/fp8_8192.ncu-rep"

echo "== fp8_gemm_test"; grep -E "^\[ +(OK|FAILED|PASSED|SKIPPED) " "$out/fp8_gemm_test.txt"
echo "== compute-sanitizer"; grep -E "^== |ERROR SUMMARY|RACECHECK SUMMARY" "$out/sanitizer.txt"
echo "== backend"; grep -E "^\[ +(FAILED|PASSED) |tests ran" "$out/backend.txt"
echo "== Nsight Compute, 8192^3"
grep -E "SM Frequency|Duration|L2 Cache Throughput|Issue Slots Busy|Eligible Warps Per" "$out/ncu.txt"
python3 "$root/scripts/gpu/ncu_stall_lines.py" "$out/sass.csv.gz" --top 12
# The large products' rows (TFLOP/s), not the decode shapes' table after them.
products='^(8192\^3|qkv|o_proj|gate_up|down) +[0-9]+ +[0-9]+x[0-9]+( +[0-9]+){3}$'
[ -f "$out/bench_baseline.txt" ] && { echo "== baseline, two runs"; grep -E "$products" "$out/bench_baseline.txt"; }
echo "== this tree, two runs"; grep -E "$products" "$out/bench.txt"
exit $status
