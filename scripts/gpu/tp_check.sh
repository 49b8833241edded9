#!/usr/bin/env bash
# Runs ON A MULTI-GPU MACHINE (device tool kind nvidia-h200-x2 or larger) in the repository root, after
# scripts/gpu/stage.sh ran with TERN_STAGE_TERN=1 (carry: .device). Tensor parallelism against one GPU:
#   1. cuda_tensor_parallel_test (NCCL collectives; dense fixtures' greedy tokens on 2 GPUs vs 1);
#   2. a Llama-3.1-8B-shaped random checkpoint: greedy tokens over 64 steps with --tensor-parallel-size 1 and 2
#      (and 4, 8 where the machine has the GPUs), then `tern bench` batch-1 decode and 128 x 512/128 throughput
#      for each size.
# TP_SKIP_BENCH=1 stops after the correctness checks. NVLink multicast stays off (NCCL_NVLS_ENABLE=0; tern sets it too). Logs and JSON go to $OUT (or ./gpu-logs).
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${OUT:-$root/gpu-logs}"
mkdir -p "$out"
exec > >(tee -a "$out/tp_check.txt") 2>&1
bin="$root/.device/bin"
export TERN_FIXTURES="$root/.device/fixtures"
export NCCL_NVLS_ENABLE=0
source "$root/scripts/gpu/device_env.sh"
# NCCL comes with PyTorch's wheels on the GPU machine.
export TERN_NCCL_LIBRARY="${TERN_NCCL_LIBRARY:-$(ls "$site"/nvidia/nccl/lib/libnccl.so.2 "$site"/nvidia/cu13/lib/libnccl.so.2 2>/dev/null | head -1)}"
num_gpus=$(nvidia-smi -L | wc -l)
echo "GPUs: $num_gpus; NCCL: $TERN_NCCL_LIBRARY"
nvidia-smi topo -m 2>&1 | head -12

status=0
echo "== cuda_tensor_parallel_test"
timeout 300 "$bin/cuda_tensor_parallel_test" >"$out/tp_test.txt" 2>&1 || status=1
tail -30 "$out/tp_test.txt"

echo "== tern serve on 1 and 2 GPUs: the same greedy chat completion"
serve_answer() {  # tensor parallel size -> the completion's text
  local log="$out/serve_tp$1.err"
  "$bin/tern" serve --model "$TERN_FIXTURES/models/qwen3-chat-tiny" --backend cuda --tensor-parallel-size "$1" \
    --port 0 --kv-cache-memory 1GiB --served-model-name tiny 2>"$log" &
  local pid=$! port=""
  for _ in $(seq 1 300); do
    port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$log" | grep -o '[0-9]*$')
    [ -n "$port" ] && curl_ok=$(python3 -c "import urllib.request,sys; print(urllib.request.urlopen('http://127.0.0.1:$port/health').status)" 2>/dev/null) && [ "$curl_ok" = 200 ] && break
    sleep 0.2
  done
  python3 -c "
import json, sys, urllib.request
body = json.dumps({'model': 'tiny', 'messages': [{'role': 'user', 'content': 'Name three colors.'}], 'max_tokens': 32,
                   'temperature': 0}).encode()
request = urllib.request.Request('http://127.0.0.1:$port/v1/chat/completions', body, {'content-type': 'application/json'})
print(json.load(urllib.request.urlopen(request))['choices'][0]['message']['content'].replace(chr(10), ' '))"
  kill -TERM "$pid"; wait "$pid"
}
one=$(serve_answer 1); two=$(serve_answer 2)
echo "tp1: $one"; echo "tp2: $two"
[ -n "$one" ] && [ "$one" = "$two" ] && echo "serve: tp2 answers as tp1" || { echo "serve: answers differ"; status=1; }

model_dir=/tmp/llama8b
if [ "$(df --output=avail -B1G /dev/shm 2>/dev/null | tail -1)" -gt 40 ] 2>/dev/null; then model_dir=/dev/shm/llama8b; fi
if [ ! -f "$model_dir/config.json" ]; then
  timeout 300 python3 "$root/scripts/gpu/hf_bench.py" --config "$root/.device/configs/llama-3.1-8b.json" \
    --out "$model_dir" --skip-bench 2>&1 | grep -v -i warn | tail -3
fi

sizes="1 2"
[ "$num_gpus" -ge 4 ] && sizes="$sizes 4"
[ "$num_gpus" -ge 8 ] && sizes="$sizes 8"
prompt=$(python3 -c "import random; r=random.Random(7); print(','.join(str(r.randrange(128000)) for _ in range(48)))")
for tp in $sizes; do
  echo "== greedy 64 tokens, tensor parallel size $tp"
  timeout 200 "$bin/tern" generate --model "$model_dir" --backend cuda --tensor-parallel-size "$tp" \
    --prompt-ids "$prompt" --max-tokens 64 --kv-cache-memory 4GiB >"$out/greedy_tp$tp.json" 2>"$out/greedy_tp$tp.err"
  echo "rc $?"; tail -2 "$out/greedy_tp$tp.err"
  if [ "$tp" != 1 ]; then
    python3 -c "import json,sys; a,b=(json.load(open(f)) for f in sys.argv[1:]); n=next((i for i,(x,y) in enumerate(zip(a,b)) if x!=y), len(a)); print(f'tp$tp: the first {n} of {len(a)} greedy tokens equal tp1\'s')" \
      "$out/greedy_tp1.json" "$out/greedy_tp$tp.json"
  fi
done

# Greedy sequences of a random-weight model meet near-ties (the top two logits of 128K nearly equal), where bf16
# rounding in another summation order may pick the other token. So the logits are compared too, teacher-forced
# on tp1's sequence, with transformers' float32 forward as the truth.
sequence=$(python3 -c "import json,sys; p=sys.argv[1].split(','); t=json.load(open(sys.argv[2])); print(','.join(p + [str(x) for x in t[:-1]]))" \
  "$prompt" "$out/greedy_tp1.json")
for tp in $sizes; do
  timeout 200 "$bin/tern" logits --model "$model_dir" --backend cuda --tensor-parallel-size "$tp" \
    --prompt-ids "$sequence" --out "/tmp/logits_tp$tp.safetensors" 2>>"$out/logits.err" || status=1
done
python3 - "$sizes" "$(echo "$prompt" | tr ',' ' ' | wc -w)" "$model_dir" "$sequence" <<'PY' || status=1
# Each size against transformers in float32 on the same checkpoint and sequence, and against tp1: a sharded model
# should be as close to the float32 truth as one GPU is.
import sys, torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM
sizes, prompt_len, model_dir = sys.argv[1].split(), int(sys.argv[2]), sys.argv[3]
ids = torch.tensor([[int(t) for t in sys.argv[4].split(",")]], device="cuda")
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).cuda().eval()
with torch.no_grad():
    truth = model(ids).logits[0, prompt_len - 1:].double().cpu()
    # transformers in bf16: the rounding noise any bf16 engine has on this model.
    model = model.to(torch.bfloat16)
    hf_bf16 = model(ids).logits[0, prompt_len - 1:].double().cpu()
del model
def compare(name, got, ref):
    rel = ((got - ref).abs().max() / ref.abs().max()).item()
    top2 = ref.topk(2, dim=-1).values
    gap = top2[:, 0] - top2[:, 1]
    agree = got.argmax(-1) == ref.argmax(-1)
    print(f"{name}: max |diff| / max |ref| = {rel:.2e}, argmax equal at {int(agree.sum())}/{len(ref)}, "
          f"top-2 gap of the reference where they differ: {[round(g, 4) for g in gap[~agree].tolist()]} "
          f"(median gap {gap.median().item():.4f})")
    return rel
logits = {tp: load_file(f"/tmp/logits_tp{tp}.safetensors")["logits"][prompt_len - 1:].double() for tp in sizes}
print(f"over {len(truth)} positions of tp1's greedy sequence (teacher-forced):")
compare("transformers bf16 vs transformers float32", hf_bf16, truth)
errors = {tp: compare(f"tp{tp} vs transformers float32", logits[tp], truth) for tp in sizes}
for tp in sizes[1:]:
    compare(f"tp{tp} vs tp1", logits[tp], logits["1"])
    # As close to the truth as one GPU, within a factor for bf16 noise.
    if errors[tp] > 2 * errors["1"] + 1e-3: sys.exit(1)
PY
[ -n "${TP_SKIP_BENCH:-}" ] && exit $status
common=(--model "$model_dir" --backend cuda --temperature 0 --kv-cache-fraction 0.9 --max-num-batched-tokens 8192)
for tp in $sizes; do
  for run in "decode_batch1 --num-prompts 1 --input-len 128 --output-len 256" \
             "throughput_128x512x128 --num-prompts 128 --input-len 512 --output-len 128"; do
    set -- $run
    name=$1; shift
    echo "== tern bench $name tp$tp"
    timeout 200 "$bin/tern" bench "${common[@]}" --tensor-parallel-size "$tp" "$@" >"$out/bench_${name}_tp$tp.json" \
      2>"$out/bench_${name}_tp$tp.err" || { status=1; tail -3 "$out/bench_${name}_tp$tp.err"; }
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print({k: r.get(k) for k in \
      ('tensor_parallel_size','load_s','ready_s','duration_s','output_tokens_per_s','itl_ms')})" \
      "$out/bench_${name}_tp$tp.json" 2>/dev/null
  done
done
exit $status
