#!/usr/bin/env bash
# Runs ON THE GPU MACHINE in the repository root, after scripts/gpu/stage.sh ran with TERN_STAGE_TERN=1 (carry:
# .device). Prefill/decode disaggregation on GPUs:
#   1. correctness: `tern serve --role prefill` and `--role decode` on the cuda backend with --kv-transfer ipc
#      (CUDA IPC: the KV goes GPU to GPU; on a machine with two GPUs the decode instance runs on the second, so
#      the copy is a peer copy) and with tcp, each behind `tern gateway`: greedy completions of tern-py-13m equal
#      a single instance's, and the decode instance's prefix cache shows the KV arrived;
#   2. transfer cost: on a Llama-3.1-8B-shaped random checkpoint, an 8,192-token prompt answered by a prefill
#      instance with kv_transfer_params (prefill + transfer) against the same prompt without (prefill alone), for
#      ipc and tcp, 8- and 32-block chunks (PD_BENCH_SPECS="ipc:8 tcp:32 ..."). PD_SKIP_BENCH=1 stops after 1; PD_SKIP_CHECK=1 starts at 2; PD_CONFIG=config.json takes another
#      checkpoint shape for 2 (e.g. the 8B's attention with a narrower MLP: the same KV bytes, made faster).
# Logs go to $OUT (or ./gpu-logs).
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${OUT:-$root/gpu-logs}"
mkdir -p "$out"
exec > >(tee -a "$out/pd_check.txt") 2>&1
bin="$root/.device/bin"
fixtures="$root/.device/fixtures"
source "$root/scripts/gpu/device_env.sh"
num_gpus=$(nvidia-smi -L | wc -l)
decode_gpu=$((num_gpus > 1 ? 1 : 0))
echo "GPUs: $num_gpus; the decode instances run on GPU $decode_gpu"
status=0
pids=()
# Waits for its own processes only: a bare `wait` would also wait for the tee above.
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
}
trap cleanup EXIT

# start NAME GPU ARGS... : starts `tern` in the background, logging to $out/NAME.err; sets $url (and $kv for a
# decode instance, $gateway_url for a gateway) once it answers /health.
start() {
  local name=$1 gpu=$2; shift 2
  CUDA_VISIBLE_DEVICES=$gpu "$bin/tern" "$@" 2>"$out/$name.err" &
  pids+=($!)
  local port=""
  for _ in $(seq 1 600); do
    kill -0 "${pids[-1]}" 2>/dev/null || { echo "$name exited:"; tail -3 "$out/$name.err"; return 1; }
    port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$out/$name.err" | head -1 | grep -o '[0-9]*$')
    if [ -n "$port" ] && python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/health')" 2>/dev/null; then break; fi
    sleep 0.2
  done
  url="http://127.0.0.1:$port"
  kv=$(grep -o 'accepting KV transfers ([a-z]*) on [0-9.]*:[0-9]*' "$out/$name.err" | grep -o '[0-9.]*:[0-9]*$')
  echo "$name: $url ${kv:+(KV endpoint $kv)}"
}

serve_args=(serve --backend cuda --port 0 --kv-cache-memory 2GiB --served-model-name m)
model13="$fixtures/models/tern-py-13m"

if [ -z "${PD_SKIP_CHECK:-}" ]; then
echo "== 1. greedy completions through prefill -> decode equal one instance's"
start single 0 "${serve_args[@]}" --model "$model13"; single=$url
for transport in ipc tcp; do
  start "prefill_$transport" 0 "${serve_args[@]}" --model "$model13" --role prefill --kv-transfer "$transport" \
    --kv-transfer-chunk-blocks 2; prefill=$url
  start "decode_$transport" "$decode_gpu" "${serve_args[@]}" --model "$model13" --role decode \
    --kv-transfer "$transport" --kv-transfer-port 0; decode=$url; decode_kv=$kv
  start "gateway_$transport" 0 gateway --host 127.0.0.1 --port 0 --prefill "$prefill" --decode "$decode" \
    --decode-kv "$decode_kv"; gw=$url
  sleep 1.5  # the gateway's first health check
  python3 - "$single" "$gw" "$decode" "$transport" <<'PY' || status=1
import json, sys, urllib.request
single, gateway, decode, transport = sys.argv[1:]
def post(url, body):
    request = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(), {"content-type": "application/json"})
    return json.load(urllib.request.urlopen(request, timeout=120))
def hits():
    text = urllib.request.urlopen(decode + "/metrics").read().decode()
    return next((float(l.split()[-1]) for l in text.splitlines() if l.startswith("tern:prefix_cache_hits_total")), 0.0)
prompts = ["import os\nimport sys\n\n\ndef read_config(path):\n    with open(path) as handle:\n        return json.load(handle)\n\n\ndef main(" * 3,
           "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n        self.items.append(item)\n" * 4,
           "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n" * 6]
ok = True
for prompt in prompts:
    body = {"model": "m", "prompt": prompt, "max_tokens": 32, "temperature": 0}
    want = post(single, body)["choices"][0]["text"]
    before = hits()
    got = post(gateway, body)["choices"][0]["text"]
    grew = hits() - before
    same = got == want
    ok = ok and same and grew >= 32
    print(f"{transport}: prompt of {len(prompt)} chars: {'equal' if same else 'DIFFERENT'}; decode prefix hits +{grew:.0f} tokens")
sys.exit(0 if ok else 1)
PY
  grep -o 'KV of .* newly cached there' "$out/prefill_$transport.err" | tail -1
done
cleanup; pids=()
fi

[ -n "${PD_SKIP_BENCH:-}" ] && exit $status
config="${PD_CONFIG:-$root/.device/configs/llama-3.1-8b.json}"
echo "== 2. transfer cost of an 8,192-token prompt's KV, $(basename "$config")"
model_dir=/tmp/$(basename "$config" .json)
if [ "$(df --output=avail -B1G /dev/shm 2>/dev/null | tail -1)" -gt 40 ] 2>/dev/null; then model_dir=/dev/shm/$(basename "$config" .json); fi
if [ ! -f "$model_dir/.complete" ]; then
  rm -rf "$model_dir"
  timeout 400 python3 "$root/scripts/gpu/hf_bench.py" --config "$config" --out "$model_dir" --skip-bench 2>&1 |
    grep -v -i warn | tail -3 && touch "$model_dir/.complete"
fi
# Prompts are token ids; the server still wants a tokenizer beside the weights.
cp "$fixtures/models/tern-py-13m/tokenizer.json" "$fixtures/models/tern-py-13m/tokenizer_config.json" "$model_dir/"
# Prefill in chunks of 2,048 tokens (the default): the first chunks' KV travels while later ones compute.
big_args=(serve --backend cuda --port 0 --kv-cache-memory 12GiB --served-model-name m --model "$model_dir")
for spec in ${PD_BENCH_SPECS:-ipc:8 ipc:32 tcp:8 tcp:32}; do  # transport:blocks per chunk
  transport=${spec%:*} chunk=${spec#*:} name=${spec/:/_}
  start "bench_prefill_$name" 0 "${big_args[@]}" --role prefill --kv-transfer "$transport" \
    --kv-transfer-chunk-blocks "$chunk" || exit 1
  prefill=$url
  start "bench_decode_$name" "$decode_gpu" "${big_args[@]}" --role decode --kv-transfer "$transport" \
    --kv-transfer-port 0 || exit 1
  decode_kv=$kv
  python3 - "$prefill" "$decode_kv" "$transport, $chunk-block chunks" <<'PY' || status=1
import json, random, sys, time, urllib.request
prefill, decode_kv, transport = sys.argv[1:]
def post(body):
    request = urllib.request.Request(prefill + "/v1/completions", json.dumps(body).encode(), {"content-type": "application/json"})
    start = time.perf_counter()
    answer = json.load(urllib.request.urlopen(request, timeout=300))
    return time.perf_counter() - start, answer
rng = random.Random(11)
def prompt():
    return [rng.randrange(1000, 120000) for _ in range(8192)]
post({"model": "m", "prompt": prompt(), "max_tokens": 1})  # warm-up
alone, with_kv = [], []
for i in range(5):
    alone.append(post({"model": "m", "prompt": prompt(), "max_tokens": 1})[0])
    seconds, answer = post({"model": "m", "prompt": prompt(), "max_tokens": 1,
                            "kv_transfer_params": {"decode_url": decode_kv, "request_key": f"bench{i}"}})
    assert "error" not in answer, answer
    with_kv.append(seconds)
alone.sort(); with_kv.sort()
print(f"{transport}: 8192-token prompt, median of 5: prefill alone {alone[2]*1e3:.1f} ms, prefill + KV transfer "
      f"{with_kv[2]*1e3:.1f} ms (+{(with_kv[2]-alone[2])*1e3:.1f} ms for 511 blocks, 1.0 GiB)")
PY
  grep -o 'KV of .* newly cached there' "$out/bench_prefill_$name.err" | tail -1
  cleanup; pids=()
done
exit $status
