#!/usr/bin/env python3
"""The transformers baseline for scripts/gpu/e2e_bench.sh, and the checkpoint both engines use.

    python3 scripts/gpu/hf_bench.py --config CONFIG.json --out MODEL_DIR [--json RESULT.json]

Builds the architecture of CONFIG.json on the GPU with random bf16 weights (transformers' own initializer,
seeded), writes it to MODEL_DIR as a Hugging Face checkpoint (for tern), then measures the in-memory model with
eager attention on the same three workloads as `tern bench`: batch-1 decode (128 prompt + 256 new tokens),
prefill of 8 prompts of 2,048 tokens, and 128 requests of 512 prompt + 128 new tokens (one generate call).
Prompts are random token ids (seed 0); generation is greedy with EOS ignored. Needs torch and transformers.
"""
import argparse
import json
import os
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM


def timed(fn):
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, time.perf_counter() - start


def generate(model, prompts, new_tokens):
    return model.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=new_tokens,
                          min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--json", default=None)
    ap.add_argument("--skip-bench", action="store_true", help="only write the checkpoint")
    a = ap.parse_args()
    fields = {k: v for k, v in json.load(open(a.config)).items() if not k.startswith("_")}
    model_type = fields.pop("model_type")
    for key in ("architectures", "torch_dtype"):
        fields.pop(key, None)
    config = AutoConfig.for_model(model_type, **fields)
    torch.manual_seed(0)
    start = time.perf_counter()
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="eager")
    model.eval()
    init_s = time.perf_counter() - start
    start = time.perf_counter()
    model.save_pretrained(a.out, safe_serialization=True, max_shard_size="5GB")
    save_s = time.perf_counter() - start
    result = {"engine": "transformers (eager attention)", "torch": torch.__version__,
              "device": torch.cuda.get_device_name(), "init_s": init_s, "save_s": save_s}
    print(json.dumps(result), flush=True)
    if a.skip_bench:
        return
    vocab = config.vocab_size
    gen = torch.Generator(device="cuda").manual_seed(0)
    rand = lambda b, n: torch.randint(0, vocab, (b, n), device="cuda", generator=gen)
    with torch.inference_mode():
        generate(model, rand(1, 16), 8)  # warm-up
        _, s = timed(lambda: generate(model, rand(1, 128), 256))
        result["decode_batch1"] = {"input_len": 128, "output_len": 256, "duration_s": s,
                                   "output_tokens_per_s": 256 / s}
        print(json.dumps(result["decode_batch1"]), flush=True)
        prompts = rand(8, 2048)
        model(prompts[:1, :256], logits_to_keep=1)  # warm-up
        _, s = timed(lambda: model(prompts, logits_to_keep=1))
        result["prefill_8x2048"] = {"duration_s": s, "input_tokens_per_s": 8 * 2048 / s}
        print(json.dumps(result["prefill_8x2048"]), flush=True)
        _, s = timed(lambda: generate(model, rand(128, 512), 128))
        result["throughput_128x512x128"] = {"duration_s": s, "output_tokens_per_s": 128 * 128 / s,
                                            "total_tokens_per_s": 128 * 640 / s}
        print(json.dumps(result["throughput_128x512x128"]), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
