#!/usr/bin/env python3
"""Adds a multi-token-prediction block (mtp.0.*) to a DeepSeek-V4 checkpoint that transformers wrote (it writes
none), so that the MTP drafter can be timed at a real shape: `tern bench --speculative-config
'{"method": "deepseek_mtp", ...}'`. Its drafts mean nothing: the block's decoder layer is a copy of the first layer
with compressed sparse attention and a non-hash MoE (the kind the MTP layer has), e_proj and h_proj are random, its
norms ones and its head's hyper-connection a copy of the model's. The tensors go to a shard of their own, listed in
model.safetensors.index.json; config.json gets num_nextn_predict_layers = 1 and the block's attention kind after the
layers' (as the released compress_ratios lists it). Standard library only.

    python3 scripts/gpu/add_v4_mtp_block.py --model DIR
"""
import argparse
import functools
import json
import os
import random
import struct

PREFIX = "mtp.0."
SHARD = "model-mtp.safetensors"


@functools.lru_cache(maxsize=None)  # a shard's header once, however many of its tensors are copied
def read_header(path):
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(length)), 8 + length


def read_tensor(path, name):
    header, data_start = read_header(path)
    info = header[name]
    begin, end = info["data_offsets"]
    with open(path, "rb") as f:
        f.seek(data_start + begin)
        return info["dtype"], info["shape"], f.read(end - begin)


def random_bf16(count, seed):
    """bf16 values of magnitude in [2^-7, 2^-6) with random signs and mantissas: a random projection's scale."""
    rng = random.Random(seed)
    raw = rng.randbytes(2 * count)
    low = raw[0::2].translate(bytes(b & 0x7F for b in range(256)))  # exponent's last bit 0, mantissa random
    high = raw[1::2].translate(bytes((b & 0x80) | 60 for b in range(256)))  # sign random, exponent 120
    out = bytearray(2 * count)
    out[0::2] = low
    out[1::2] = high
    return bytes(out)


def ones_bf16(count):
    return struct.pack("<H", 0x3F80) * count


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="checkpoint directory transformers wrote (DeepseekV4)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    config_path = os.path.join(args.model, "config.json")
    config = json.load(open(config_path))
    if config.get("model_type") != "deepseek_v4":
        raise SystemExit(f"{config_path}: model_type is {config.get('model_type')!r}, not 'deepseek_v4'")
    index_path = os.path.join(args.model, "model.safetensors.index.json")
    if os.path.exists(index_path):
        index = json.load(open(index_path))
    else:
        header, _ = read_header(os.path.join(args.model, "model.safetensors"))
        index = {"metadata": {}, "weight_map": {n: "model.safetensors" for n in header if n != "__metadata__"}}
    weight_map = index["weight_map"]
    if any(name.startswith(PREFIX) for name in weight_map):
        raise SystemExit(f"{args.model} holds {PREFIX}* tensors already")

    layers = config["num_hidden_layers"]
    attention = config["layer_types"][:layers]
    mlp = config.get("mlp_layer_types", ["moe"] * layers)
    sources = [i for i in range(layers) if attention[i] == "compressed_sparse_attention" and mlp[i] == "moe"]
    if not sources:
        raise SystemExit(f"{config_path}: no layer with compressed sparse attention and a non-hash MoE to copy")
    layer_prefix = f"model.layers.{sources[0]}."

    tensors = {}  # name -> (dtype, shape, bytes)
    for name, shard in sorted(weight_map.items()):
        if name.startswith(layer_prefix):
            tensors[PREFIX + name[len(layer_prefix):]] = read_tensor(os.path.join(args.model, shard), name)
    for leaf in ("hc_fn", "hc_base", "hc_scale"):
        name = f"model.hc_head.{leaf}"
        tensors[PREFIX + "hc_head_" + leaf[3:]] = read_tensor(os.path.join(args.model, weight_map[name]), name)
    hidden = config["hidden_size"]
    for i, leaf in enumerate(("e_proj", "h_proj")):
        tensors[PREFIX + leaf + ".weight"] = ("BF16", [hidden, hidden], random_bf16(hidden * hidden, args.seed + i))
    for leaf in ("enorm", "hnorm", "norm"):
        tensors[PREFIX + leaf + ".weight"] = ("BF16", [hidden], ones_bf16(hidden))

    header, offset = {}, 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(os.path.join(args.model, SHARD), "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for _, _, data in tensors.values():
            f.write(data)
    for name in tensors:
        weight_map[name] = SHARD
    json.dump(index, open(index_path, "w"), indent=2)
    config["num_nextn_predict_layers"] = 1
    config["layer_types"] = attention + ["compressed_sparse_attention"]
    json.dump(config, open(config_path, "w"), indent=2)
    print(f"{args.model}: {len(tensors)} tensors of {PREFIX}* ({offset / 1e9:.2f} GB, layer {sources[0]}'s copy) in {SHARD}")


if __name__ == "__main__":
    main()
