#!/usr/bin/env python3
"""Writes a Llama-architecture Hugging Face checkpoint with random bf16 weights (for speed measurements only).

    python3 bench/make_random_llama.py OUT_DIR [--hidden 768 --layers 12 --heads 12 --kv-heads 4
                                                --intermediate 2048 --vocab 32000 --seed 0]

The defaults give about 100M parameters. Needs numpy.
"""
import argparse
import json
import os
import struct

import numpy as np


def bf16_bytes(array):
    bits = array.astype(np.float32).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return rounded.tobytes()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--intermediate", type=int, default=2048)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    head_dim = args.hidden // args.heads
    shapes = {"model.embed_tokens.weight": (args.vocab, args.hidden), "model.norm.weight": (args.hidden,)}
    for i in range(args.layers):
        p = f"model.layers.{i}"
        shapes.update({
            f"{p}.input_layernorm.weight": (args.hidden,),
            f"{p}.post_attention_layernorm.weight": (args.hidden,),
            f"{p}.self_attn.q_proj.weight": (args.heads * head_dim, args.hidden),
            f"{p}.self_attn.k_proj.weight": (args.kv_heads * head_dim, args.hidden),
            f"{p}.self_attn.v_proj.weight": (args.kv_heads * head_dim, args.hidden),
            f"{p}.self_attn.o_proj.weight": (args.hidden, args.heads * head_dim),
            f"{p}.mlp.gate_proj.weight": (args.intermediate, args.hidden),
            f"{p}.mlp.up_proj.weight": (args.intermediate, args.hidden),
            f"{p}.mlp.down_proj.weight": (args.hidden, args.intermediate),
        })
    header, blobs, offset = {}, [], 0
    for name, shape in shapes.items():
        if name.endswith("norm.weight"):
            values = 1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)
        else:
            values = rng.standard_normal(shape, dtype=np.float32) * (1.0 / np.sqrt(shape[-1]))
        blob = bf16_bytes(values)
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    os.makedirs(args.out_dir, exist_ok=True)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(os.path.join(args.out_dir, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": args.vocab,
        "hidden_size": args.hidden, "intermediate_size": args.intermediate, "num_hidden_layers": args.layers,
        "num_attention_heads": args.heads, "num_key_value_heads": args.kv_heads, "head_dim": head_dim,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True,
        "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
    }
    with open(os.path.join(args.out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    params = sum(int(np.prod(s)) for s in shapes.values())
    print(f"wrote {args.out_dir}: {params / 1e6:.1f}M parameters")


if __name__ == "__main__":
    main()
