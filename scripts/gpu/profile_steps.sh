#!/usr/bin/env bash
# Runs ON THE GPU MACHINE in the repository root: where a model's steps go (issue: V4 and MoE at the speed of the
# hardware). Expects .device/prof/{bin/tern, bin/lib/*.so (libtern_kernel_trace.so, libcupti.so.13, ...),
# configs/*.json}. For each config in PROFILE_CONFIGS, writes a random-weight checkpoint with transformers
# (scripts/gpu/hf_bench.py) to /dev/shm, runs `tern bench` under the CUPTI kernel trace for each workload
# (decode at batch 1, 16 and 128; prefill 8 x 2,048) and summarizes the steps with
# scripts/gpu/kernel_trace_summary.py. Results (bench JSON and summaries) go to $OUT/profile.tar.gz.
#   [PROFILE_CONFIGS="deepseek-v4-flash-8layer.json qwen3-30b-a3b-24-layers.json"] [WORKLOADS="b1 b16 b128 prefill"] \
#     [TERN_EXTRA="..."] bash scripts/gpu/profile_steps.sh
set -uo pipefail
root=$(pwd)
source scripts/gpu/device_env.sh
stage="$root/.device/prof"
export LD_LIBRARY_PATH="$stage/bin/lib:$LD_LIBRARY_PATH"
results=/tmp/profile
mkdir -p "$results"
out=$results
status=0
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,memory.total --format=csv,noheader

declare -A workload=(
  [b1]="--num-prompts 1 --input-len 128 --output-len 128"
  [b16]="--num-prompts 16 --input-len 128 --output-len 128"
  [b128]="--num-prompts 128 --input-len 128 --output-len 64"
  [prefill]="--num-prompts 8 --input-len 2048 --output-len 1"
)
for config in ${PROFILE_CONFIGS:-deepseek-v4-flash-8layer.json qwen3-30b-a3b-24-layers.json}; do
  name=${config%.json}
  layers=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['num_hidden_layers'])" "$stage/configs/$config")
  model_dir=/dev/shm/$name
  rm -rf /dev/shm/*/model.safetensors.index.json.partial 2>/dev/null
  # One checkpoint in memory at a time: /dev/shm holds about half the machine's memory.
  for other in /dev/shm/*/; do [ "$other" = "$model_dir/" ] || rm -rf "$other"; done
  [ -f "$model_dir/config.json" ] || timeout 400 python3 scripts/gpu/hf_bench.py --config "$stage/configs/$config" \
    --out "$model_dir" --skip-bench 2>&1 | grep -v -i warn | tail -2
  for w in ${WORKLOADS:-b1 b16 b128 prefill}; do
    trace=/tmp/trace_${name}_$w.tsv
    echo "== $name $w: ${workload[$w]} ${TERN_EXTRA:-}"
    CUDA_INJECTION64_PATH="$stage/bin/lib/libtern_kernel_trace.so" TERN_KERNEL_TRACE="$trace" \
      timeout 300 "$stage/bin/tern" bench --model "$model_dir" --backend cuda --temperature 0 \
      --kv-cache-fraction 0.85 --max-num-batched-tokens 8192 ${workload[$w]} ${TERN_EXTRA:-} \
      >"$out/bench_${name}_$w.json" 2>/tmp/bench_${name}_$w.err || { status=1; tail -5 /tmp/bench_${name}_$w.err; }
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print({k: r.get(k) for k in \
      ('input_tokens_per_s','output_tokens_per_s','itl_ms','steps')})" "$out/bench_${name}_$w.json" 2>/dev/null
    steps_flag=""
    [ "$w" = prefill ] && steps_flag="--all-steps"
    python3 scripts/gpu/kernel_trace_summary.py "$trace" $steps_flag --layers "$layers" --top 45 \
      --json "$out/profile_${name}_$w.json" >"$out/profile_${name}_$w.txt"
    head -24 "$out/profile_${name}_$w.txt"
  done
done
tar -C /tmp -czf "${OUT:-/tmp}/profile.tar.gz" profile
exit $status
