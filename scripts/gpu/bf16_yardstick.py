#!/usr/bin/env python3
"""Runs ON THE GPU MACHINE: tern's CUDA logits against the fair yardstick, transformers' own bf16 forward.

For every fixture architecture, at several widths, seeds and head sizes, makes a random-weight checkpoint with
reference logits (make_model.py --golden: float64, float32 for MoE), runs transformers in bf16 on the same weights
on the GPU, and `tern logits --backend cuda` on each prompt. tern's error against the reference must be at most
twice transformers' bf16 error (relative error: largest absolute difference over the largest reference logit, as
the C++ tests compute it). Writes a JSON report and exits non-zero if a case fails.

  python3 scripts/gpu/bf16_yardstick.py --tern .device/bin/tern --fixtures .device/fixtures/models \
      --make-model .device/tools/make_model.py --out $OUT/bf16_yardstick.json [--only qwen3,mixtral]
"""
import argparse, importlib.util, json, os, subprocess, sys, tempfile, time

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

ARCHS = ('llama', 'llama3_rope', 'qwen2', 'qwen3', 'qwen3_moe', 'mixtral', 'deepseek_v3', 'gpt_oss', 'deepseek_v4')
# Width fields doubled by the "wide" variant where the architecture has them.
WIDTH_FIELDS = ('hidden_size', 'intermediate_size', 'moe_intermediate_size')


def variants(arch, config):
    """(name, seed, overrides) for an architecture: the fixture's shape at two seeds, twice as wide, and for the
    dense models with an explicit head_dim field (qwen3) head sizes without a tensor-core kernel."""
    out = [('seed11', 11, {}), ('seed12', 12, {})]
    if arch != 'deepseek_v4':  # V4's dims are tied to each other in ways a plain doubling breaks
        out.append(('wide', 13, {k: 2 * config[k] for k in WIDTH_FIELDS if isinstance(config.get(k), int)}))
    if arch == 'qwen3':
        out += [(f'head_dim{d}', 20 + d, {'head_dim': d}) for d in (24, 80, 96, 192)]
    return out


def relative_error(actual, expected):
    diff = (actual.double() - expected.double()).abs().max().item()
    ref = expected.double().abs().max().item()
    if torch.isnan(actual).any():
        return float('inf')
    return diff / ref if ref > 0 else diff


def tern_logits(tern, model_dir, prompt):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, 'logits.safetensors')
        run = subprocess.run([tern, 'logits', '--model', model_dir, '--backend', 'cuda', '--prompt-ids',
                              ','.join(map(str, prompt)), '--out', out], capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError(f'tern logits failed: {run.stderr.strip()[-500:]}')
        return load_file(out)['logits']


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--tern', required=True)
    ap.add_argument('--fixtures', required=True, help='folder of the fixture models (their config.json)')
    ap.add_argument('--make-model', required=True, help='path to make_model.py')
    ap.add_argument('--out', required=True)
    ap.add_argument('--only', default='', help='comma-separated architectures')
    a = ap.parse_args()
    spec = importlib.util.spec_from_file_location('make_model', a.make_model)
    make_model = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_model)
    archs = [x for x in a.only.split(',') if x] or ARCHS
    cases, failures = [], 0
    for arch in archs:
        config_path = os.path.join(a.fixtures, arch, 'config.json')
        config = json.load(open(config_path))
        for name, seed, overrides in variants(arch, config):
            model_dir = os.path.join(tempfile.gettempdir(), f'yardstick_{arch}_{name}')
            start = time.time()
            sys.argv = ['make_model.py', '--config', config_path, '--out', model_dir, '--golden', '--seed', str(seed),
                        '--override'] + [f'{k}={json.dumps(v)}' for k, v in overrides.items()]
            case = {'arch': arch, 'variant': name, 'seed': seed, 'overrides': overrides}
            try:
                make_model.main()
                golden = json.load(open(os.path.join(model_dir, 'golden.json')))
                reference = load_file(os.path.join(model_dir, 'golden_logits.safetensors'))
                hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).cuda().eval()
                hf_errors, tern_errors = [], []
                for i, prompt in enumerate(golden['prompts']):
                    with torch.no_grad():
                        hf_logits = hf(input_ids=torch.tensor([prompt], device='cuda')).logits[0].float().cpu()
                    hf_errors.append(relative_error(hf_logits, reference[f'logits_{i}']))
                    tern_errors.append(relative_error(tern_logits(a.tern, model_dir, prompt), reference[f'logits_{i}']))
                del hf
                torch.cuda.empty_cache()
                case.update(hf_bf16_error=hf_errors, tern_cuda_error=tern_errors,
                            ok=all(t <= 2 * h for t, h in zip(tern_errors, hf_errors)))
            except Exception as e:  # a case that cannot run is a failure, and the others still run
                case.update(ok=False, error=str(e)[-800:])
            case['seconds'] = round(time.time() - start, 1)
            failures += not case['ok']
            cases.append(case)
            worst = max((t / h if h > 0 else float('inf')) for t, h in
                        zip(case.get('tern_cuda_error', [0]), case.get('hf_bf16_error', [1])))
            print(f"{arch:12s} {name:11s} {'ok  ' if case['ok'] else 'FAIL'} "
                  f"tern {['%.2e' % e for e in case.get('tern_cuda_error', [])]} "
                  f"hf {['%.2e' % e for e in case.get('hf_bf16_error', [])]} worst ratio {worst:.2f} "
                  f"{case.get('error', '')}", flush=True)
    json.dump({'cases': cases, 'failures': failures}, open(a.out, 'w'), indent=1)
    print(f'{len(cases) - failures}/{len(cases)} cases within twice transformers\' bf16 error')
    sys.exit(1 if failures else 0)


if __name__ == '__main__':
    main()
