"""What the fixture makers (make_fp8_fixtures.py, make_mxfp4_fixture.py) share: a random model from transformers,
the prompts, the goldens (logits and greedy tokens of the float64 reference, the yardstick's logits, golden.json),
the relative error the tests use, and the check of `tern logits` against a fixture's reference."""
import json, os, subprocess, tempfile

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM


def random_model(config, seed):
    """A random model of `config` in bf16 on the GPU, its norms away from 1 so that a skipped weight shows."""
    torch.manual_seed(seed)
    with torch.device('cuda'):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith('norm.weight'):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
    return model.to(torch.bfloat16)


def logits(model, prompts):
    """logits_i [T, vocab] float32 of each prompt, every position."""
    result = {}
    with torch.no_grad():
        for i, prompt in enumerate(prompts):
            ids = torch.tensor([prompt], device='cuda')
            result[f'logits_{i}'] = model(input_ids=ids).logits[0].float().cpu().contiguous()
    return result


def greedy_24(model, prompts):
    """The 24 greedy tokens after each prompt."""
    greedy = []
    with torch.no_grad():
        for prompt in prompts:
            ids = torch.tensor([prompt], device='cuda')
            generated = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, do_sample=False,
                                       pad_token_id=0, eos_token_id=None)
            greedy.append(generated[0, len(prompt):].tolist())
    return greedy


def fixture_prompts(vocab, seed):
    """A fixture's three prompts: token 1 alone, then 7 and 40 random ids."""
    generator = torch.Generator().manual_seed(seed)
    return [[1], torch.randint(3, vocab, (7,), generator=generator).tolist(),
            torch.randint(3, vocab, (40,), generator=generator).tolist()]


def write_goldens(target, model_type, prompts, reference_model, reference, yardstick_logits, yardstick_file,
                  yardstick, error_key):
    """Into `target`: golden_logits.safetensors (reference_model's logits of the prompts), the yardstick's logits
    as yardstick_file and golden.json (the prompts, the reference's greedy tokens, what made the reference and the
    yardstick, the yardstick's error as error_key). Prints what it wrote; returns the reference logits and the
    yardstick's error."""
    reference_logits = logits(reference_model, prompts)
    greedy = greedy_24(reference_model, prompts)
    save_file(reference_logits, os.path.join(target, 'golden_logits.safetensors'))
    save_file(yardstick_logits, os.path.join(target, yardstick_file))
    error = relative_error(yardstick_logits, reference_logits)
    json.dump({'model_type': model_type, 'prompts': prompts, 'greedy_24': greedy,
               'reference': f'transformers {transformers.__version__}, {reference}', 'yardstick': yardstick,
               error_key: error},
              open(os.path.join(target, 'golden.json'), 'w'), indent=1)
    files = ', '.join(f'{f} {os.path.getsize(os.path.join(target, f))} B' for f in sorted(os.listdir(target)))
    print(f'{model_type}: wrote {target} ({files}); {yardstick} vs float64 reference: {error:.3e}')
    return reference_logits, error


def relative_error(a, b):
    """max |a - b| / max |b|, the largest over the prompts."""
    return max(float((a[k] - b[k]).abs().max() / b[k].abs().max()) for k in b)


def check_tern(tern, label, target, prompts, reference, cuda_bound):
    """`tern logits` of the checkpoint in `target` on the CPU (within 1e-5 of the reference) and on CUDA (within
    cuda_bound); prints both and returns whether both are within."""
    ok = True
    for backend, bound in (('cpu', 1e-5), ('cuda', cuda_bound)):
        ours = {}
        for i, prompt in enumerate(prompts):
            path = os.path.join(tempfile.gettempdir(), f'tern_{label}_{backend}_{i}.safetensors')
            subprocess.run([tern, 'logits', '--model', target, '--backend', backend, '--prompt-ids',
                            ','.join(map(str, prompt)), '--out', path], check=True, capture_output=True)
            ours[f'logits_{i}'] = load_file(path)['logits']
        error = relative_error(ours, reference)
        verdict = 'ok' if error <= bound else 'OVER'
        print(f'{label}: tern {backend} vs float64 reference {error:.3e} (bound {bound:.3e}: {verdict})')
        ok = ok and error <= bound
    return ok
