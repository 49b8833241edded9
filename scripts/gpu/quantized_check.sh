#!/usr/bin/env bash
# Runs ON THE GPU MACHINE in the repository root, after scripts/gpu/stage.sh ran on the build machine (device
# tool: carry [".device"]; TERN_STAGE_TERN=1 for the perplexity and fixture checks). Quantized weights on CUDA
# (block-FP8 linears and experts, MXFP4 experts; docs/quantization.md): tests/data/qwen3_fp8's W8A8 yardstick
# ($OUT/yardstick), the CUDA tests of both paths and of the FP8 KV cache,
# bench/fp8_linear_bench (TFLOP/s against cuBLASLt bf16, decode bandwidth against a copy), bench/moe_experts_bench
# (bf16, FP8 and MXFP4 experts at decode and prefill), block-FP8 fixtures written by transformers with tern's logits
# checked against them (scripts/gpu/make_fp8_fixtures.py; $OUT/fp8_fixtures.tar.gz holds the fixtures for tests/),
# tern-py-13m's perplexity on the repo's Python files with and without FP8, and the Llama-3.1-8B and Qwen3-30B-A3B
# (24 layers, where staged) shapes end to end under --quantization fp8 (scripts/gpu/e2e_bench.sh), and the 8B shape's
# 32K-context decode and 128-request runs with the KV cache in bf16 and in FP8 (--kv-cache-dtype). Logs go to $OUT
# (or ./gpu-logs). --skip-e2e leaves out the end-to-end runs, --only-e2e runs only them.
#   bash scripts/gpu/quantized_check.sh [--skip-e2e | --only-e2e]
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${OUT:-$root/gpu-logs}"
mkdir -p "$out"
bin="$root/.device/bin"
export TERN_FIXTURES="$root/.device/fixtures"
source "$root/scripts/gpu/device_env.sh"

status=0
mode="${1:-}"
if [ "$mode" != "--only-e2e" ]; then
  # tests/data/qwen3_fp8's yardstick as W8A8 (its golden.json, to copy back: tests/data/README.md).
  echo "== transformers' W8A8 yardstick of tests/data/qwen3_fp8"
  python3 "$root/scripts/gpu/make_fp8_fixtures.py" --out "$out/yardstick" --yardstick-of "$root/tests/data/qwen3_fp8" \
    2>&1 | grep -v -i "warn" | tail -3
  echo "== tests"
  "$bin/cuda_backend_test" \
    --gtest_filter='CudaBlockFp8Test.*:CudaTransformersFp8Test.*:Fixtures/CudaOnlineFp8ModelTest.*:CudaMxfp4Test.*:CudaMxfp4ModelTest.*:CudaTransformersMxfp4Test.*:CudaKvCacheDtypeTest.*:*CudaFp8AttentionTest.*:*Fp8KvCache*' 2>&1 |
    grep -E "^\[ *(OK|FAILED|PASSED|SKIPPED) |Failure|relative logit error|tern: |Which is|Expected|actual" |
    tee "$out/quantized_tests.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1

  echo "== fp8_linear_bench"
  "$bin/fp8_linear_bench" 2>&1 | tee "$out/fp8_linear_bench.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1

  echo "== moe_experts_bench"
  "$bin/moe_experts_bench" 2>&1 | tee "$out/moe_experts_bench.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1

  echo "== block-FP8 fixtures written by transformers, tern's logits against their float64 reference"
  tern_flag=()
  [ -x "$bin/tern" ] && tern_flag=(--tern "$bin/tern")
  python3 "$root/scripts/gpu/make_fp8_fixtures.py" --out "$out/fp8_fixtures" "${tern_flag[@]}" 2>&1 |
    grep -v -i "warn" | tee "$out/fp8_fixtures.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  tar -C "$out" -czf "$out/fp8_fixtures.tar.gz" fp8_fixtures && rm -rf "$out/fp8_fixtures"

  if [ -x "$bin/tern" ]; then
    echo "== perplexity, tern-py-13m on the repo's Python files"
    text="$out/python_text.txt"
    cat $(ls "$root"/scripts/gpu/*.py "$root"/bench/*.py; find "$root/tests" -name '*.py' | sort) >"$text"
    for quantization in none fp8; do
      "$bin/tern" perplexity --model "$TERN_FIXTURES/models/tern-py-13m" --text "$text" --context-length 512 \
        --backend cuda --quantization "$quantization" 2>&1 | tail -3 | tee -a "$out/fp8_perplexity.txt"
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    done
  fi
fi

if [ "$mode" != "--skip-e2e" ]; then
  echo "== Llama-3.1-8B shape, --quantization fp8"
  E2E_FLAGS="--quantization fp8" bash "$root/scripts/gpu/e2e_bench.sh" --skip-hf || status=1
  for kv_dtype in auto fp8; do
    echo "== Llama-3.1-8B shape, bf16 weights, --kv-cache-dtype $kv_dtype"
    OUT="$out/kv_$kv_dtype" E2E_FLAGS="--kv-cache-dtype $kv_dtype" E2E_WORKLOADS="decode_32k throughput_128x512x128" \
      bash "$root/scripts/gpu/e2e_bench.sh" --skip-hf || status=1
  done
  if [ -f "$root/.device/configs/qwen3-30b-a3b-24-layers.json" ]; then
    echo "== Qwen3-30B-A3B shape (24 layers), --quantization fp8"
    E2E_CONFIG=qwen3-30b-a3b-24-layers.json E2E_FLAGS="--quantization fp8" bash "$root/scripts/gpu/e2e_bench.sh" \
      --skip-hf || status=1
  fi
fi
exit $status
