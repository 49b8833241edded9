#!/usr/bin/env bash
# The KV cache's host and disk tiers on the GPU machine (issue: hierarchical KV cache). Expects the staged binaries,
# libraries, fixtures and the 8B config under .device/tier (bin/, bin/lib/, fixtures/models/, configs/):
# 1. cuda_kv_tiers_test: host-tier copies keep their bytes; conversations loaded from the host give the tokens of the
#    same conversations kept on the device, per fixture architecture.
# 2. A Llama-3.1-8B-shaped checkpoint with random bf16 weights (transformers, scripts/gpu/hf_bench.py), and
#    `tern bench --dataset-name multi-turn` (64 conversations x 8 turns, the device KV limited to 4 GiB) without a
#    host tier, with one, and with a small host tier over a disk tier. Results go to $OUT.
#   [TIER_RUNS="off host disk"] bash scripts/gpu/kv_tiers_check.sh
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
timeout 300 python3 scripts/gpu/hf_bench.py --config .device/tier/configs/llama-3.1-8b.json --out "$model_dir" \
  --skip-bench 2>&1 | grep -v -i warn | tail -3
workload=(--dataset-name multi-turn --num-prompts 64 --num-turns 8 --input-len 384 --output-len 64
          --max-concurrency 16 --prompt-seed 1)
common=(--model "$model_dir" --backend cuda --temperature 0 --kv-cache-memory 4GiB --max-num-batched-tokens 8192)
declare -A tiers=(
  [off]=''
  [host]='--host-kv-cache-memory 48GiB'
  [disk]="--host-kv-cache-memory 8GiB --kv-cache-dir /tmp/tern-kv-disk --kv-cache-dir-size 48GiB"
)
rm -rf /tmp/tern-kv-disk
for name in ${TIER_RUNS:-off host disk}; do
  echo "== tern bench multi-turn, tiers: $name ${tiers[$name]}"
  start=$(date +%s)
  # shellcheck disable=SC2086
  timeout "${BENCH_TIMEOUT_S:-240}" .device/tier/bin/tern bench "${common[@]}" "${workload[@]}" ${tiers[$name]} \
    > "$out/multi_turn_$name.json" 2> "$out/multi_turn_$name.err"
  rc=$?
  echo "rc $rc, $(( $(date +%s) - start )) s"
  grep "tern:" "$out/multi_turn_$name.err" | head -4
  [ "$rc" -eq 0 ] || { tail -5 "$out/multi_turn_$name.err"; status=1; continue; }
  python3 - "$out/multi_turn_$name.json" "$name" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
m = r.get("multi_turn", {})
keep = {k: m.get(k) for k in m if any(s in k for s in ("ttft", "throughput", "hit", "cached", "duration", "requests"))}
print(sys.argv[2], json.dumps(keep)[:1500])
print(sys.argv[2], "tiers:", json.dumps(r.get("kv_tiers")), "ttft_ms:", json.dumps(r.get("ttft_ms")), "duration_s:", r.get("duration_s"), "output tok/s:", r.get("output_tokens_per_s"))
PY
done
exit $status
