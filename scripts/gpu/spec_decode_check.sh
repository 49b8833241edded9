#!/usr/bin/env bash
# Speculative decoding on the GPU machine (issue: speculative decoding): tern-py-13m with no speculation, n-gram
# prompt lookup and the tern-py-draft-10m draft model. Greedy outputs must be identical with and without
# speculation; `tern bench` prompts are windows of the repo's Python files (--dataset-name text). Expects the
# staged binary, libraries, models and prompts under .device/spec (bin/, bin/lib/, models/, prompts/).
set -uo pipefail
root=$(pwd)
source scripts/gpu/device_env.sh
export LD_LIBRARY_PATH="$root/.device/spec/bin/lib:$LD_LIBRARY_PATH"
tern=.device/spec/bin/tern
models=.device/spec/models
out=${OUT:-/tmp}
declare -A configs=(
  [off]=''
  [ngram3]='{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}'
  [draft4]="{\"model\": \"$models/tern-py-draft-10m\", \"num_speculative_tokens\": 4}"
)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader
status=0
for name in off ngram3 draft4; do
  args=(--model "$models/tern-py-13m" --backend cuda)
  [[ -n "${configs[$name]}" ]] && args+=(--speculative-config "${configs[$name]}")
  $tern generate "${args[@]}" --prompt 'def fibonacci(n):' --max-tokens 200 --temperature 0 --ignore-eos \
    > "$out/generate_$name.txt" 2> "$out/generate_$name.err" || { echo "generate $name failed"; cat "$out/generate_$name.err"; status=1; }
  if [[ $name != off ]]; then
    cmp -s "$out/generate_off.txt" "$out/generate_$name.txt" && echo "greedy $name: identical to off" \
      || { echo "greedy $name: DIFFERS from off"; status=1; }
  fi
  for batch in 1 8; do
    $tern bench "${args[@]}" --dataset-name text --dataset-path .device/spec/prompts --num-prompts $batch \
      --input-len 256 --output-len 256 > "$out/bench_${name}_b$batch.json" 2> "$out/bench_${name}_b$batch.err" \
      || { echo "bench $name b$batch failed"; tail -5 "$out/bench_${name}_b$batch.err"; status=1; }
    python3 - "$out/bench_${name}_b$batch.json" "$name" "$batch" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
spec = {k: v for k, v in r.items() if "accept" in k or "spec" in k}
print(f"bench {sys.argv[2]} batch {sys.argv[3]}: {r['output_tokens_per_s']:.1f} output tok/s, "
      f"ITL p50 {r['itl_ms']['p50']:.3f} ms, {spec}")
PY
  done
done
exit $status
