#!/usr/bin/env bash
# Runs ON THE GPU MACHINE in the repository root, after scripts/gpu/stage.sh (TERN_STAGE_TERN=1) ran on the build
# machine (device tool: carry [".device"]). What a user who passes no engine flags gets: `tern bench` on the
# Llama-3.1-8B-shaped checkpoint with no memory flag against the same run with --kv-cache-fraction 0.9 (the two must
# agree within noise), `tern serve --model DIR` with no --backend picking the GPU, and serve on the CPU backend with no
# memory flag under each CPU kernel variant (this machine has AVX-512). Logs go to $OUT.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${OUT:-$root/gpu-logs}"
mkdir -p "$out"
tern="$root/.device/bin/tern"
source "$root/scripts/gpu/device_env.sh"
status=0
# DEFAULTS_SKIP_BENCH=1 runs only the serve checks.
if [ -z "${DEFAULTS_SKIP_BENCH:-}" ]; then
  model_dir="/dev/shm/llama-3.1-8b"
  python3 "$root/.device/tools/make_model.py" --config "$root/.device/configs/llama-3.1-8b.json" --out "$model_dir" \
    2>&1 | grep -v -i warn | tail -1
  workload=(--num-prompts 512 --input-len 512 --output-len 128 --temperature 0)
  for name in defaults fraction_0.9; do
    flags=()
    [ "$name" = fraction_0.9 ] && flags=(--kv-cache-fraction 0.9)
    echo "== tern bench --model $model_dir ${workload[*]} ${flags[*]}"
    timeout 240 "$tern" bench --model "$model_dir" "${workload[@]}" "${flags[@]}" >"$out/bench_$name.json" \
      2>"$out/bench_$name.err" || status=1
    grep -E "tern: (backend|KV cache)" "$out/bench_$name.err"
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print({k: r.get(k) for k in \
      ('output_tokens_per_s','input_tokens_per_s','steps','itl_ms')})" "$out/bench_$name.json" || status=1
  done
fi

# serve MODEL_DIR NAME [flags]: starts `tern serve`, asks one completion, stops it; its start-up lines stay in $out.
serve() {
  local dir="$1" name="$2"; shift 2
  echo "== tern serve --model $dir $*"
  "$tern" serve --model "$dir" --port 8123 "$@" >"$out/serve_$name.out" 2>"$out/serve_$name.err" &
  local pid=$!
  python3 - "$out/serve_$name.json" <<'PY' || status=1
import json, sys, time, urllib.request
for _ in range(240):
    try:
        urllib.request.urlopen('http://localhost:8123/health', timeout=2)
        break
    except Exception:
        time.sleep(0.5)
body = json.dumps({'prompt': [1, 2, 3], 'max_tokens': 4, 'temperature': 0}).encode()
request = urllib.request.Request('http://localhost:8123/v1/completions', body, {'Content-Type': 'application/json'})
reply = urllib.request.urlopen(request, timeout=60).read().decode()
open(sys.argv[1], 'w').write(reply)
print(reply)
PY
  kill -TERM "$pid"; wait "$pid"
  grep -E "tern: (backend|KV cache)" "$out/serve_$name.err" || status=1
}
# The chat fixture: a model directory with its tokenizer, as serve needs.
serve "$root/.device/fixtures/models/qwen3-chat-tiny" auto
grep -q "tern: backend cuda" "$out/serve_auto.err" || { echo "serve did not pick the GPU"; status=1; }
# This machine's CPU has AVX-512: the CPU backend with no memory flag, under each kernel variant.
for isa in avx512 avx2; do
  TERN_CPU_ISA=$isa serve "$root/.device/fixtures/models/qwen3-chat-tiny" "cpu_$isa" --backend cpu
  grep -q "tern: backend cpu-$isa" "$out/serve_cpu_$isa.err" || { echo "serve did not run cpu-$isa"; status=1; }
done
exit $status
