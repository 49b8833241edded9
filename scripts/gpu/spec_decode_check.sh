#!/usr/bin/env bash
# Speculative decoding on the GPU machine (issue: speculative decoding): tern-py-13m with no speculation, n-gram
# prompt lookup (k = 3 and 5) and the tern-py-draft-10m draft model. Greedy outputs must be identical with and
# without speculation. `tern bench` prompts come from the repo's Python files: windows of them (--dataset-name
# text) and edit prompts (--dataset-name edit: a window, a request to edit it, its start again; the answer mostly
# repeats the prompt). Expects the staged binary, libraries, models and prompts under .device/spec (bin/, bin/lib/,
# models/, prompts/).
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
  [ngram5]='{"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4, "prompt_lookup_min": 2}'
  [draft4]="{\"model\": \"$models/tern-py-draft-10m\", \"num_speculative_tokens\": 4}"
  [draft2]="{\"model\": \"$models/tern-py-draft-10m\", \"num_speculative_tokens\": 2}"
)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader
status=0
for name in off ngram3 ngram5 draft4 draft2; do
  args=(--model "$models/tern-py-13m" --backend cuda)
  [[ -n "${configs[$name]}" ]] && args+=(--speculative-config "${configs[$name]}")
  $tern generate "${args[@]}" --prompt 'def fibonacci(n):' --max-tokens 200 --temperature 0 --ignore-eos \
    > "$out/generate_$name.txt" 2> "$out/generate_$name.err" || { echo "generate $name failed"; cat "$out/generate_$name.err"; status=1; }
  if [[ $name != off ]]; then
    cmp -s "$out/generate_off.txt" "$out/generate_$name.txt" && echo "greedy $name: identical to off" \
      || { echo "greedy $name: DIFFERS from off"; status=1; }
  fi
  for dataset in text edit; do
    for batch in 1 8; do
      report="$out/bench_${name}_${dataset}_b$batch.json"
      $tern bench "${args[@]}" --dataset-name $dataset --dataset-path .device/spec/prompts --num-prompts $batch \
        --input-len 256 --output-len 256 > "$report" 2> "${report%.json}.err" \
        || { echo "bench $name $dataset b$batch failed"; tail -5 "${report%.json}.err"; status=1; continue; }
      python3 - "$report" "$name" "$dataset" "$batch" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
spec = r.get("speculative_decoding", {})
print(f"bench {sys.argv[2]:7s} {sys.argv[3]:4s} batch {sys.argv[4]}: {r['output_tokens_per_s']:9.1f} output tok/s, "
      f"decode step p50 {r['decode_step_ms']['p50']:.3f} ms, "
      f"acceptance length {spec.get('mean_acceptance_length', 1.0):.2f}")
PY
    done
  done
done
exit $status
