#!/usr/bin/env python3
"""An MXFP4 gpt-oss fixture whose reference is transformers' own reading of the format (issue: real checkpoints), on
the GPU machine.

A small random gpt-oss (the shared gpt_oss fixture's shape: hidden and intermediate 64, so whole groups of 32) made
by transformers and saved in bf16; its experts then written in gpt-oss's MXFP4 layout as openai/gpt-oss-20b ships
it (`gate_up_proj_blocks` U8 [E, 2I, H / 32, 16], two e2m1 codes a byte, the low nibble first; `gate_up_proj_scales`
U8 e8m0 [E, 2I, H / 32]; down_proj likewise; biases, attention, router, embeddings and lm_head as they were;
quantization_config {"quant_method": "mxfp4"} in config.json). transformers' MXFP4 quantizer needs triton kernels
that a machine without network lacks, so the codes are chosen here (each group's scale the smallest power of two
that brings its largest value within 6, each code the nearest e2m1 value); what makes this a fixture of
transformers' format is that transformers then loads it (Mxfp4Config(dequantize=True), its
integrations/mxfp4.py reading blocks and scales) and its dequantized experts must equal this script's exactly, or
it stops. Beside the checkpoint:

  golden.json                   prompts, greedy_24 (from the float64 reference), reference, yardstick,
                                bf16_relative_error (the yardstick's)
  golden_logits.safetensors     logits_i [T, vocab] float32: transformers' float64 forward over the weights it
                                dequantized, the reference (tern's CPU backend, W4A16 in float32: within 1e-5)
  hf_bf16_logits.safetensors    logits_i: transformers' bf16 forward over the same weights, the yardstick: tern's
                                CUDA logits should land within twice its error against the reference

  python3 scripts/gpu/make_mxfp4_fixture.py --out DIR [--tern BINARY]

With --tern, also `tern logits` of the checkpoint on the CPU and on CUDA against those bounds; exits 1 where one is
not met. Needs CUDA.
"""
import argparse, json, os, shutil, tempfile

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModelForCausalLM, Mxfp4Config

from transformers_fixtures import check_tern, fixture_prompts, logits, random_model, write_goldens

CONFIG = dict(vocab_size=512, hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=8,
              layer_types=['sliding_attention', 'full_attention'], max_position_embeddings=512,
              tie_word_embeddings=False)
GROUP = 32
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)
# openai/gpt-oss-20b's config.json.
QUANTIZATION = {'quant_method': 'mxfp4',
                'modules_to_not_convert': ['model.layers.*.self_attn', 'model.layers.*.mlp.router',
                                           'model.embed_tokens', 'lm_head']}


def quantize(weight):
    """weight [E, in, out] (transformers' layout) -> blocks [E, out, in / 32, 16] U8, scales [E, out, in / 32] U8,
    and the dequantized values in transformers' layout, float64."""
    w = weight.double().transpose(1, 2).contiguous()  # [E, out, in]
    experts, rows, columns = w.shape
    groups = w.reshape(experts, rows, columns // GROUP, GROUP)
    amax = groups.abs().amax(dim=-1)
    exponent = torch.where(amax > 0, torch.ceil(torch.log2(amax / 6.0)), torch.full_like(amax, -127.0))
    exponent = exponent.clamp(-127, 127)
    scale = torch.pow(2.0, exponent).unsqueeze(-1)
    magnitude = (groups.abs() / scale).unsqueeze(-1)
    codes = (magnitude - E2M1).abs().argmin(dim=-1)  # nearest e2m1 magnitude (the lower one at a tie)
    codes = codes | ((groups < 0) & (codes > 0)).long() << 3
    values = E2M1[codes & 7] * torch.where(codes >= 8, -1.0, 1.0) * scale
    packed = (codes[..., 0::2] | codes[..., 1::2] << 4).to(torch.uint8)
    dequantized = values.reshape(experts, rows, columns).transpose(1, 2).contiguous()
    return packed, (exponent + 127).to(torch.uint8), dequantized


def make(out, seed):
    config = AutoConfig.for_model('gpt_oss', **CONFIG)
    bf16_dir = tempfile.mkdtemp(prefix='tern_mxfp4_gpt_oss_')
    random_model(config, seed).save_pretrained(bf16_dir, safe_serialization=True)
    tensors = load_file(os.path.join(bf16_dir, 'model.safetensors'))
    expected = {}
    for name in [n for n in tensors if n.endswith(('experts.gate_up_proj', 'experts.down_proj'))]:
        blocks, scales, expected[name] = quantize(tensors.pop(name))
        tensors[name + '_blocks'] = blocks
        tensors[name + '_scales'] = scales
    target = os.path.join(out, 'gpt_oss_mxfp4')
    shutil.rmtree(target, ignore_errors=True)
    os.makedirs(target)
    save_file(tensors, os.path.join(target, 'model.safetensors'), metadata={'format': 'pt'})
    saved = json.load(open(os.path.join(bf16_dir, 'config.json')))
    saved['quantization_config'] = QUANTIZATION
    json.dump(saved, open(os.path.join(target, 'config.json'), 'w'), indent=2)
    shutil.rmtree(bf16_dir)

    # transformers' reading of the format: its dequantized experts must be this script's values.
    # The experts' loop (experts_implementation 'eager'): torch's grouped_mm has no float64.
    model = AutoModelForCausalLM.from_pretrained(target, quantization_config=Mxfp4Config(dequantize=True),
                                                 dtype=torch.bfloat16, device_map='cuda',
                                                 experts_implementation='eager')
    state = model.state_dict()
    for name, values in expected.items():
        theirs = state[name].double().cpu()
        if theirs.shape != values.shape or not torch.equal(theirs, values):
            raise SystemExit(f'{name}: transformers dequantized {tuple(theirs.shape)} values that differ from the '
                             f'codes written (max |diff| {float((theirs - values).abs().max()):.3e})')
    print(f'transformers read the {len(expected)} MXFP4 expert tensors as written')

    prompts = fixture_prompts(config.vocab_size, seed + 1)
    yardstick = logits(model, prompts)
    reference, error = write_goldens(
        target, 'gpt_oss', prompts, model.to(torch.float64),
        'float64 forward over the experts it dequantized from model.safetensors (Mxfp4Config(dequantize=True))',
        yardstick, 'hf_bf16_logits.safetensors', 'transformers bf16 forward over the same dequantized weights',
        'bf16_relative_error')
    return target, prompts, reference, error


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--out', required=True)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--tern', help='a tern binary whose logits to check against the fixture')
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    target, prompts, reference, error = make(args.out, args.seed)
    ok = check_tern(args.tern, 'gpt_oss_mxfp4', target, prompts, reference, 2 * error) if args.tern else True
    raise SystemExit(0 if ok else 1)


if __name__ == '__main__':
    main()
