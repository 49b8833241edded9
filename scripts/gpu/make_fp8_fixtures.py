#!/usr/bin/env python3
"""Block-FP8 fixtures made by transformers (issue: real checkpoints), on the GPU machine.

For each architecture: a small random model whose linear dimensions are multiples of 128 (transformers'
FineGrainedFP8 quantizes whole 128x128 blocks), written in bf16, then loaded with
FineGrainedFP8Config(weight_block_size=[128, 128]) and saved again: the block-FP8 checkpoint exactly as transformers
writes one (F8_E4M3 weights with their `weight_scale_inv`, quantization_config in config.json). Beside it:

  golden.json                   prompts, greedy_24 (from the float64 reference), reference, yardstick,
                                fp8_relative_error (the yardstick's)
  golden_logits.safetensors     logits_i [T, vocab] float32: a float64 forward over the exactly dequantized weights
                                (each e4m3 code times its block's scale), the reference
  hf_fp8_logits.safetensors     logits_i: transformers' own FP8 forward (W8A8, bf16 activations), the yardstick:
                                tern's CUDA FP8 logits should land within twice its error against the reference.
                                Where transformers' FP8 kernels (the `kernels` package) are missing, the same
                                forward emulated in torch: each FP8 linear's input quantized per token and 128
                                columns as finegrained_fp8's act_quant does (scale amax / 448, e4m3 codes), times
                                the dequantized weight in float32, the output rounded to bf16 (golden.json's
                                yardstick says which)

  python3 scripts/gpu/make_fp8_fixtures.py --out DIR [--archs qwen3 qwen3_moe] [--tern BINARY]
  python3 scripts/gpu/make_fp8_fixtures.py --out DIR --yardstick-of FIXTURE   # FIXTURE's yardstick again, into DIR

Prints each model's FP8 error (max |diff| / max |reference|). With --tern, also `tern logits` of each checkpoint on
the CPU (W8A16 in float32: within 1e-5 of the reference) and on CUDA (W8A8: within twice transformers' FP8 error),
and exits 1 where one is not. Needs CUDA.
"""
import argparse, json, os, shutil, tempfile

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModelForCausalLM, FineGrainedFP8Config

from transformers_fixtures import check_tern, fixture_prompts, logits, random_model, relative_error, write_goldens

# Small shapes of each architecture, every linear dimension a multiple of 128.
CONFIGS = {
    'qwen3': dict(model_type='qwen3', vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=512,
                  tie_word_embeddings=False),
    'qwen3_moe': dict(model_type='qwen3_moe', vocab_size=512, hidden_size=256, intermediate_size=512,
                      moe_intermediate_size=128, num_experts=8, num_experts_per_tok=2, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=512,
                      tie_word_embeddings=False, norm_topk_prob=True),
}
BLOCK = 128


def dequantized_state(directory):
    """The checkpoint's tensors with every F8 weight replaced by code x block scale, in float64, and the names of
    those."""
    state = {}
    # The weights' files only: a fixture also holds its logits (golden_logits, hf_fp8_logits).
    for file in sorted(f for f in os.listdir(directory) if f.startswith('model') and f.endswith('.safetensors')):
        state.update(load_file(os.path.join(directory, file)))
    out, fp8_names = {}, set()
    for name, tensor in state.items():
        if name.endswith('_scale_inv'):
            continue
        scale = state.get(name + '_scale_inv')
        if tensor.dtype == torch.float8_e4m3fn:
            if scale is None:
                raise SystemExit(f'{directory}: {name} is F8 without {name}_scale_inv')
            rows, columns = tensor.shape[-2], tensor.shape[-1]
            # transformers 5.17 saves experts' scales without their dimension of one block ([2] for [256, 128]).
            scale = scale.reshape(*tensor.shape[:-2], -(-rows // BLOCK), -(-columns // BLOCK))
            expanded = scale.double().repeat_interleave(BLOCK, dim=-2)[..., :rows, :]
            expanded = expanded.repeat_interleave(BLOCK, dim=-1)[..., :columns]
            out[name] = tensor.double() * expanded
            fp8_names.add(name)
        else:
            out[name] = tensor.double()
    return out, fp8_names


def dequantized_model(config, dequantized, dtype):
    model = AutoModelForCausalLM.from_config(config, dtype=dtype).to('cuda').eval()
    missing, unexpected = model.load_state_dict({k: v.to(dtype) for k, v in dequantized.items()}, strict=False)
    if [m for m in missing if not m.endswith('rotary_emb.inv_freq')] or unexpected:
        raise SystemExit(f'the dequantized checkpoint does not fit the model: missing {missing}, '
                         f'unexpected {unexpected}')
    return model


def act_quant(x):
    """x (float32, last dim a multiple of 128) through e4m3 codes per 128 columns, as finegrained_fp8's act_quant."""
    blocks = x.reshape(*x.shape[:-1], -1, BLOCK)
    scale = blocks.abs().amax(dim=-1, keepdim=True) / 448.0
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    return ((blocks / scale).to(torch.float8_e4m3fn).float() * scale).reshape(x.shape)


def emulated_fp8_model(config, dequantized, fp8_names):
    """transformers' FP8 forward in torch: bf16 activations, each FP8 linear W8A8 (act_quant, a float32 product of
    the dequantized weight, the output in bf16). Expert weights (3-d) stay bf16 products."""
    model = dequantized_model(config, dequantized, torch.bfloat16)
    weights = {name[:-len('.weight')]: dequantized[name].float().cuda() for name in fp8_names
               if dequantized[name].dim() == 2}
    for name, module in model.named_modules():
        if name in weights and isinstance(module, torch.nn.Linear):
            weight = weights[name]
            bias = module.bias

            def forward(x, weight=weight, bias=bias):
                y = act_quant(x.float()) @ weight.t()
                return (y if bias is None else y + bias.float()).to(torch.bfloat16)
            module.forward = forward
    return model


def fp8_yardstick(arch, quantized, config, dequantized, fp8_names, prompts):
    """transformers' FP8 logits of the prompts and what made them."""
    try:
        if quantized is None:
            raise ImportError('no quantized model loaded')
        return logits(quantized, prompts), 'transformers FP8 forward (finegrained_fp8 kernels, W8A8)'
    except ImportError as e:
        # transformers' FP8 matmul comes from the `kernels` package, which a machine without network may lack.
        print(f'{arch}: {e}; the yardstick is transformers\' FP8 forward emulated in torch')
        return (logits(emulated_fp8_model(config, dequantized, fp8_names), prompts),
                'transformers FP8 forward emulated in torch (W8A8: act_quant per token and 128 columns, float32 '
                'products of the dequantized weights, bf16 activations; its FP8 kernels unavailable)')


def redo_yardstick(fixture, out):
    """An existing fixture's yardstick made again (hf_fp8_logits, golden.json), into a copy under out."""
    target = os.path.join(out, os.path.basename(os.path.normpath(fixture)))
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(fixture, target)
    golden = json.load(open(os.path.join(target, 'golden.json')))
    config = AutoConfig.from_pretrained(target)
    if hasattr(config, 'quantization_config'):
        del config.quantization_config  # the dequantized weights go into a plain model
    dequantized, fp8_names = dequantized_state(target)
    hf_fp8, yardstick = fp8_yardstick(golden['model_type'], None, config, dequantized, fp8_names, golden['prompts'])
    reference = load_file(os.path.join(target, 'golden_logits.safetensors'))
    golden['yardstick'] = yardstick
    golden['fp8_relative_error'] = relative_error(hf_fp8, reference)
    save_file(hf_fp8, os.path.join(target, 'hf_fp8_logits.safetensors'))
    json.dump(golden, open(os.path.join(target, 'golden.json'), 'w'), indent=1)
    print(f'{target}: {yardstick} vs float64 reference: {golden["fp8_relative_error"]:.3e}')


def make(arch, out, seed):
    spec = dict(CONFIGS[arch])
    model_type = spec.pop('model_type')
    config = AutoConfig.for_model(model_type, **spec)
    bf16_dir = tempfile.mkdtemp(prefix=f'tern_fp8_{arch}_')
    random_model(config, seed).save_pretrained(bf16_dir, safe_serialization=True)
    quantized = AutoModelForCausalLM.from_pretrained(
        bf16_dir, quantization_config=FineGrainedFP8Config(weight_block_size=[BLOCK, BLOCK]), dtype=torch.bfloat16,
        device_map='cuda')
    target = os.path.join(out, f'{arch}_fp8')
    shutil.rmtree(target, ignore_errors=True)
    quantized.save_pretrained(target, safe_serialization=True)

    prompts = fixture_prompts(config.vocab_size, seed + 1)
    dequantized, fp8_names = dequantized_state(target)
    hf_fp8, yardstick = fp8_yardstick(arch, quantized, config, dequantized, fp8_names, prompts)
    reference, error = write_goldens(
        target, model_type, prompts, dequantized_model(config, dequantized, torch.float64),
        'float64 forward over the exactly dequantized block-FP8 weights in model.safetensors', hf_fp8,
        'hf_fp8_logits.safetensors', yardstick, 'fp8_relative_error')
    shutil.rmtree(bf16_dir)
    return target, prompts, reference, error


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--out', required=True)
    parser.add_argument('--archs', nargs='*', default=list(CONFIGS))
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--tern', help='a tern binary whose logits to check against the fixtures')
    parser.add_argument('--yardstick-of', help='an existing fixture whose yardstick to make again')
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.yardstick_of:
        redo_yardstick(args.yardstick_of, args.out)
        return
    ok = True
    for arch in args.archs:
        target, prompts, reference, error = make(arch, args.out, args.seed)
        if args.tern:
            ok = check_tern(args.tern, arch, target, prompts, reference, 2 * error) and ok
    raise SystemExit(0 if ok else 1)


if __name__ == '__main__':
    main()
