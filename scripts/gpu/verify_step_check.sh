#!/usr/bin/env bash
# Runs ON THE GPU MACHINE in the repository root, after scripts/gpu/stage.sh ran on the build machine (device
# tool: carry [".device"]). The issue's target for speculative decoding: at Llama-3.1-8B shapes a verify step of
# k = 3 drafts costs <= 1.15x a plain decode step at batch 1-16. Writes a Llama-3.1-8B-shaped checkpoint with random
# bf16 weights (scripts/gpu/hf_bench.py --skip-bench, as e2e_bench.sh), then times both steps through the engine's
# ModelRunner (bench/verify_step_bench.cpp). JSON and logs go to $OUT (or ./gpu-logs); exits 1 where a ratio
# misses the target. Extra flags go to the bench:
#   bash scripts/gpu/verify_step_check.sh [--context 2048 --steps 200]
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${OUT:-$root/gpu-logs}"
mkdir -p "$out"
bin="$root/.device/bin"
source "$root/scripts/gpu/device_env.sh"

# The 16 GB checkpoint goes to memory-backed storage when there is room; a complete one is reused.
model_dir=/tmp/llama-3.1-8b
if [ "$(df --output=avail -B1G /dev/shm 2>/dev/null | tail -1)" -gt 40 ] 2>/dev/null; then model_dir=/dev/shm/llama-3.1-8b; fi
if [ ! -f "$model_dir/model.safetensors.index.json" ]; then
  python3 "$root/scripts/gpu/hf_bench.py" --config "$root/.device/configs/llama-3.1-8b.json" --out "$model_dir" \
    --skip-bench 2>&1 | grep -v -i "warn"
fi
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader

"$bin/verify_step_bench" --model "$model_dir" --backend cuda --batch-sizes 1,2,4,8,16 --num-drafts 3 "$@" \
  2>&1 >"$out/verify_step.json" | tee "$out/verify_step.err"
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
cat "$out/verify_step.json"
python3 - "$out/verify_step.json" <<'PY'
import json, sys
results = json.load(open(sys.argv[1]))["results"]
for r in results:
    print(f"batch {r['batch_size']:>2}: verify / plain = {r['ratio']:.3f} ({'ok' if r['ratio'] <= 1.15 else 'OVER 1.15'})")
sys.exit(0 if all(r["ratio"] <= 1.15 for r in results) else 1)
PY
