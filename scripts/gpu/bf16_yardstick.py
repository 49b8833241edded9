#!/usr/bin/env python3
"""Runs ON THE GPU MACHINE: tern's CUDA logits against the fair yardstick, transformers' own bf16 forward.

For every fixture architecture, at several widths, seeds and head sizes, makes a random-weight checkpoint with
reference logits (make_model.py --golden: float64, float32 for MoE), runs transformers in bf16 on the same weights
on the GPU, and `tern logits --backend cuda` on each prompt. tern's error against the reference must be at most
twice transformers' bf16 error (relative error: largest absolute difference over the largest reference logit, as
the C++ tests compute it); an MoE case past the bound passes only where the first position past it holds or follows
a measured routing near-tie in the reference precision (listed in the report). Writes a JSON report and exits non-zero if
a case fails.

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


def relative_error(actual, expected, positions=None):
    """Largest absolute difference over the largest reference logit (of the whole prompt); over `positions` (rows)
    only if given."""
    if torch.isnan(actual).any():
        return float('inf')
    ref = expected.double().abs().max().item()
    diff = (actual.double() - expected.double()).abs()
    if positions is not None:
        diff = diff[positions]
    diff = diff.max().item() if diff.numel() else 0.0
    return diff / ref if ref > 0 else diff


def num_experts(config):
    for key in ('num_local_experts', 'num_experts', 'n_routed_experts'):
        if isinstance(getattr(config, key, None), int):
            return getattr(config, key)
    return None


def router_margins(model_dir, prompts, reference_dtype):
    """For an MoE model, each prompt position's smallest routing margin over the layers, in the reference
    precision: the gap between the k-th and (k+1)-th largest router logit over the largest of them in magnitude.
    Where it is small, a bf16 rounding can pick another expert (a near-tie), and that position's logits differ by
    far more than the arithmetic error in any bf16 implementation. None for dense models."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=reference_dtype).cuda().eval()
    experts = num_experts(model.config)
    top_k = getattr(model.config, 'num_experts_per_tok', None) or getattr(model.config, 'num_experts_per_token', None)
    if not experts or not top_k:
        return None
    captured = []

    def capture(module, inputs, output):
        for tensor in (output if isinstance(output, (tuple, list)) else (output,)):
            if torch.is_tensor(tensor) and tensor.is_floating_point() and tensor.shape[-1] == experts:
                captured.append(tensor.detach().reshape(-1, experts).double())
                return

    hooks = [m.register_forward_hook(capture) for name, m in model.named_modules()
             if name.endswith(('.gate', '.router')) or type(m).__name__.endswith('Router')]
    margins = []
    with torch.no_grad():
        for prompt in prompts:
            captured.clear()
            model(input_ids=torch.tensor([prompt], device='cuda'))
            per_layer = []
            for logits in captured:
                if logits.shape[0] != len(prompt):
                    continue
                ranked = logits.sort(dim=-1, descending=True).values
                scale = ranked.abs().max(dim=-1).values.clamp_min(1e-30)
                per_layer.append(((ranked[:, top_k - 1] - ranked[:, top_k]) / scale).cpu())
            margins.append(torch.stack(per_layer).min(dim=0).values if per_layer else None)
    for hook in hooks:
        hook.remove()
    del model
    torch.cuda.empty_cache()
    return margins


# A routing margin below this share of the router logits' scale is a near-tie at bf16's precision (8 bits of
# mantissa, rounding errors accumulated over the layers before the router).
NEAR_TIE_MARGIN = 0.02


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
                hf_logits, tern_all = [], []
                for i, prompt in enumerate(golden['prompts']):
                    ids = torch.tensor([prompt], device='cuda')
                    with torch.no_grad():
                        try:
                            logits = hf(input_ids=ids).logits
                        except RuntimeError:
                            # transformers keeps some modules of a few architectures (DeepSeek-V4) in float32 and
                            # then multiplies them with bf16 activations; autocast runs those products in bf16.
                            with torch.autocast('cuda', dtype=torch.bfloat16):
                                logits = hf(input_ids=ids).logits
                    hf_logits.append(logits[0].float().cpu())
                    tern_all.append(tern_logits(a.tern, model_dir, prompt))
                del hf
                torch.cuda.empty_cache()
                refs = [reference[f'logits_{i}'] for i in range(len(golden['prompts']))]
                hf_errors = [relative_error(h, r) for h, r in zip(hf_logits, refs)]
                tern_errors = [relative_error(t, r) for t, r in zip(tern_all, refs)]
                case.update(hf_bf16_error=hf_errors, tern_cuda_error=tern_errors,
                            ok=all(t <= 2 * h for t, h in zip(tern_errors, hf_errors)))
                if not case['ok']:
                    # Explained only by a measured near-tie: in prefill, an expert choice that flips at position p
                    # changes p's keys and values in the later layers, so every position from p on may differ. The
                    # first position where tern's error passes the bound must then hold or follow a position
                    # whose routing is a near-tie in the reference precision.
                    margins = router_margins(model_dir, golden['prompts'], torch.float32)
                    explained = margins is not None
                    case['divergences'] = []
                    for i, (t, h, r) in enumerate(zip(tern_all, hf_logits, refs)):
                        bound = 2 * relative_error(h, r)
                        per_position = [relative_error(t, r, [p]) for p in range(r.shape[0])]
                        first_bad = next((p for p, e in enumerate(per_position) if e > bound), None)
                        if first_bad is None:
                            continue
                        ties = [] if margins is None else \
                            [p for p in range(first_bad + 1) if margins[i][p].item() < NEAR_TIE_MARGIN]
                        case['divergences'].append({
                            'prompt': i, 'first_position_over_bound': first_bad,
                            'near_ties_up_to_it': [{'position': p, 'margin': round(margins[i][p].item(), 5)}
                                                   for p in ties]})
                        explained = explained and bool(ties)
                    case.update(ok=explained, explained_by_near_ties=explained)
            except Exception as e:  # a case that cannot run is a failure, and the others still run
                case.update(ok=False, error=str(e)[-800:])
            case['seconds'] = round(time.time() - start, 1)
            failures += not case['ok']
            cases.append(case)
            worst = max((t / h if h > 0 else float('inf')) for t, h in
                        zip(case.get('tern_cuda_error', [0]), case.get('hf_bf16_error', [1])))
            verdict = ('ok, a near-tie' if case.get('explained_by_near_ties') else 'ok') if case['ok'] else 'FAIL'
            print(f"{arch:12s} {name:11s} {verdict} "
                  f"tern {['%.2e' % e for e in case.get('tern_cuda_error', [])]} "
                  f"hf {['%.2e' % e for e in case.get('hf_bf16_error', [])]} worst ratio {worst:.2f} "
                  f"{case.get('error', '')}", flush=True)
    json.dump({'cases': cases, 'failures': failures}, open(a.out, 'w'), indent=1)
    print(f'{len(cases) - failures}/{len(cases)} cases within twice transformers\' bf16 error or past it from a '
          f'measured routing near-tie on')
    sys.exit(1 if failures else 0)


if __name__ == '__main__':
    main()
