#!/usr/bin/env bash
# Runs ON THE GPU MACHINE in the repository root, after scripts/gpu/stage.sh ran on the build machine (device
# tool: carry [".device"]). End to end on a model with random bf16 weights, Llama-3.1-8B-shaped unless E2E_CONFIG
# names another config in .device/configs (e.g. qwen3-30b-a3b.json): makes the checkpoint and measures transformers
# (scripts/gpu/hf_bench.py), then `tern bench --backend cuda` on the same checkpoint and workloads. Logs and JSON
# results go to $OUT (or ./gpu-logs). E2E_WORKLOADS picks tern's runs (default: the three transformers also runs);
# decode_batch16 is 16 prompts of 128 tokens decoding 256 each (the few-rows linears), decode_32k one
# 32,768-token prompt and 128 new tokens, long_131k one of 131,072, long_131k_b8 eight of them.
# E2E_FLAGS are added to every tern run (e.g. "--quantization fp8"). With --skip-hf a checkpoint an earlier call
# wrote is used again.
#   [E2E_CONFIG=name.json] [E2E_WORKLOADS="decode_batch1 long_131k"] [E2E_FLAGS=...] bash scripts/gpu/e2e_bench.sh [--skip-hf]
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${OUT:-$root/gpu-logs}"
mkdir -p "$out"
bin="$root/.device/bin"
source "$root/scripts/gpu/device_env.sh"
# `tern bench`, or the same command from tern-engine-bench when only that was staged.
tern="$bin/tern"
[ -x "$tern" ] || tern="$bin/tern_engine_bench"

config="${E2E_CONFIG:-llama-3.1-8b.json}"
# The checkpoint (16 GB for the 8B model; keep others under ~35 GB) goes to memory-backed storage when there is room.
model_dir="/tmp/${config%.json}"
if [ "$(df --output=avail -B1G /dev/shm 2>/dev/null | tail -1)" -gt 40 ] 2>/dev/null; then model_dir="/dev/shm/${config%.json}"; fi
echo "== checkpoint in $model_dir"
hf_flags=""
[ "${1:-}" = "--skip-hf" ] && hf_flags="--skip-bench"
if [ -n "$hf_flags" ] && [ -f "$model_dir/config.json" ]; then
  echo "(written by an earlier call)"
else
  timeout "${HF_TIMEOUT_S:-300}" python3 "$root/scripts/gpu/hf_bench.py" --config "$root/.device/configs/$config" \
    --out "$model_dir" --json "$out/hf.json" $hf_flags 2>&1 | grep -v -i "warn" | tee "$out/hf.txt"
fi

status=0
common=(--model "$model_dir" --backend cuda --temperature 0 --kv-cache-fraction 0.9 --max-num-batched-tokens 8192
        ${E2E_FLAGS:-})
run() {  # name, then bench flags
  local name="$1"; shift
  echo "== tern bench $name: $*"
  local start=$(date +%s%N)
  timeout "${TERN_TIMEOUT_S:-150}" "$tern" bench "${common[@]}" "$@" >"$out/tern_$name.json" 2>"$out/tern_$name.err"
  local rc=$?
  local elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))  # the GPU machine has no bc
  echo "process wall time: $((elapsed_ms / 1000)).$(printf %03d $((elapsed_ms % 1000))) s (rc $rc)" | tee -a "$out/tern_$name.err"
  tail -5 "$out/tern_$name.err"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print({k: r.get(k) for k in \
    ('load_s','ready_s','duration_s','input_tokens_per_s','output_tokens_per_s','itl_ms','ttft_ms','steps')})" \
    "$out/tern_$name.json" 2>/dev/null || cat "$out/tern_$name.json"
  [ "$rc" -eq 0 ] || status=1
}
for workload in ${E2E_WORKLOADS:-decode_batch1 prefill_8x2048 throughput_128x512x128}; do
  case "$workload" in
    decode_batch1) run decode_batch1 --num-prompts 1 --input-len 128 --output-len 256 ;;
    decode_batch16) run decode_batch16 --num-prompts 16 --input-len 128 --output-len 256 ;;
    prefill_8x2048) run prefill_8x2048 --num-prompts 8 --input-len 2048 --output-len 1 ;;
    throughput_128x512x128) run throughput_128x512x128 --num-prompts 128 --input-len 512 --output-len 128 ;;
    decode_32k) run decode_32k --num-prompts 1 --input-len 32768 --output-len 128 ;;
    long_131k) run long_131k --num-prompts 1 --input-len 131072 --output-len 128 ;;
    long_131k_b8) run long_131k_b8 --num-prompts 8 --input-len 131072 --output-len 128 ;;
    *) echo "unknown workload $workload"; status=1 ;;
  esac
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv | tee "$out/smi_after.txt"
exit $status
