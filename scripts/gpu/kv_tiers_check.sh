#!/usr/bin/env bash
# The KV cache's host and disk tiers on the GPU machine (issue: hierarchical KV cache). Expects the staged binaries,
# libraries, fixtures and the 8B config under .device/tier (bin/, bin/lib/, fixtures/models/, configs/):
# 1. cuda_kv_tiers_test: host-tier copies keep their bytes; conversations loaded from the host give the tokens of the
#    same conversations kept on the device, per fixture architecture.
# 2. A Llama-3.1-8B-shaped checkpoint with random bf16 weights (transformers, scripts/gpu/hf_bench.py), and
#    `tern bench --dataset-name multi-turn` (64 conversations x 8 turns, the device KV limited to 4 GiB) without a
#    host tier, with one, and with a small host tier over a disk tier. Results go to $OUT.
#   [TIER_RUNS="off host write_through disk"] [CONCURRENCY="16"] [INPUT_LEN=384] [SKIP_TESTS=1] \
#     [TIER_FLAGS="--kv-cache-dtype fp8_e4m3"] bash scripts/gpu/kv_tiers_check.sh
# (TIER_FLAGS go to every run, the anchor's included.)
set -uo pipefail
root=$(pwd)
source scripts/gpu/device_env.sh
export LD_LIBRARY_PATH="$root/.device/tier/bin/lib:$LD_LIBRARY_PATH"
export TERN_FIXTURES="$root/.device/tier/fixtures"
out=${OUT:-/tmp}
status=0
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,memory.total --format=csv,noheader
free -g | head -2

if [ -z "${SKIP_TESTS:-}" ]; then
  .device/tier/bin/cuda_kv_tiers_test 2>&1 | tail -15 | tee "$out/cuda_kv_tiers_test.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

model_dir=/dev/shm/llama-3.1-8b
[ -f "$model_dir/config.json" ] || timeout 300 python3 scripts/gpu/hf_bench.py --config .device/tier/configs/llama-3.1-8b.json --out "$model_dir" \
  --skip-bench 2>&1 | grep -v -i warn | tail -3
workload=(--dataset-name multi-turn --num-prompts 64 --num-turns 8 --input-len "${INPUT_LEN:-384}" --output-len 64
          --prompt-seed 1)
# shellcheck disable=SC2206
common=(--model "$model_dir" --backend cuda --temperature 0 --kv-cache-memory 4GiB --max-num-batched-tokens 8192
        ${TIER_FLAGS:-})
declare -A tiers=(
  [off]=''
  [host]='--host-kv-cache-memory 48GiB'
  [write_through]='--host-kv-cache-memory 48GiB --kv-write-policy write_through'
  [disk]="--host-kv-cache-memory 8GiB --kv-cache-dir /tmp/tern-kv-disk --kv-cache-dir-size 48GiB"
)
rm -rf /tmp/tern-kv-disk
for concurrency in ${CONCURRENCY:-16}; do
for name in ${TIER_RUNS:-off host disk}; do
  run="${name}_c${concurrency}_in${INPUT_LEN:-384}${TIER_FLAGS:+_$(echo "$TIER_FLAGS" | tr -c 'a-z0-9' _)}"
  echo "== tern bench multi-turn, --max-concurrency $concurrency, tiers: $name ${tiers[$name]}"
  rm -rf /tmp/tern-kv-disk
  start=$(date +%s)
  # shellcheck disable=SC2086
  timeout "${BENCH_TIMEOUT_S:-240}" .device/tier/bin/tern bench "${common[@]}" "${workload[@]}" \
    --max-concurrency "$concurrency" ${tiers[$name]} > "$out/multi_turn_$run.json" 2> "$out/multi_turn_$run.err"
  rc=$?
  echo "rc $rc, $(( $(date +%s) - start )) s"
  [ "$rc" -eq 0 ] || { tail -5 "$out/multi_turn_$run.err"; status=1; continue; }
  python3 - "$out/multi_turn_$run.json" "$run" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
m = r["multi_turn"]
print(sys.argv[2], "TTFT turns>=2 ms:", {k: round(v, 1) for k, v in m["ttft_ms_turns_2_on"].items()},
      "per turn p50:", [round(x) for x in m["per_turn"]["ttft_ms_p50"]])
print(sys.argv[2], "duration_s", round(r["duration_s"], 2), "output tok/s", round(r["output_tokens_per_s"], 1),
      "input tok/s", round(r["input_tokens_per_s"], 1), "hit rate", round(m["prefix_cache"]["hit_rate"], 3),
      "scheduler ms/step p50/p99", round(r["scheduler_ms_per_step"]["p50"], 3), round(r["scheduler_ms_per_step"]["p99"], 2))
print(sys.argv[2], "tiers:", json.dumps(r.get("kv_tiers")))
PY
done
done
exit $status
