#!/usr/bin/env python3
"""Per-step profile of a kernel trace written by bench/kernel_trace.cpp.

The trace is cut into steps after each sampling kernel (argmax or sample: the last kernel of a model step). The
steps kept are the last --steps of those with the most common kernel count (the steady decode steps of a
`tern bench` run), or with --all-steps (a prefill run) every step that took at least a quarter of the longest
one's busy time, past the first (which holds the weights' upload). For them it prints the GPU span of a step, the
time kernels were busy, and per kernel (name and grid) and per op family the time and launches per step, each
record's time counted from the end of the records before it (exclusive_times), so that the times add up to the
busy time also where kernels overlap as programmatic dependents.

  python3 scripts/gpu/kernel_trace_summary.py trace.tsv [--steps 100 | --all-steps] [--layers N] [--json out.json]
"""
import argparse
import collections
import json
import re
import statistics
import sys

SAMPLING = re.compile(r"\b(argmax_kernel|argmax_split_kernel|sample_kernel)\b")

# Op families by kernel name; the first match wins. Kernels shared by several ops (the GEMVs and GEMMs) are told
# apart by their grid in the per-kernel table.
FAMILIES = [
    ("experts (grouped GEMM, warp per column)", r"grouped_gemm_kernel|skinny_gemm_kernel"),
    ("routing (router top-k, grouping)", r"route_experts_kernel|group_pairs_kernel"),
    ("expert gather/combine", r"gather_inputs_kernel|combine_kernel|add_rows_kernel"),
    ("indexer top-k", r"score_entries_kernel|row_topk_kernel"),
    ("sparse/compressed attention", r"compressed_attention_kernel|compressed_attention_merge_kernel"),
    ("compressor", r"compress_rows_kernel|compress_entries_kernel"),
    ("mHC (hyper-connections)", r"hyper_mix|hyper_collapse_kernel|hyper_expand_kernel"),
    ("attention", r"attention|chunk_kernel|tile_kernel|merge_shares|merge_attention|all_heads_kernel|"
                  r"context_shard"),
    ("dense GEMV/GEMM (projections, lm_head)", r"gemv_kernel|skinny_gemv|gemm|nvjet|cutlass|xmma|cublas|dot_kernel|"
                                               r"splitKreduce"),
    ("norms", r"rms_norm"),
    ("rope and cache write", r"rope|kv_write"),
    ("activations", r"silu_mul|gated_activation"),
    ("sampling", r"argmax|sample_kernel"),
    ("copies and casts", r"copy|bf16_to_f32|f32_to_bf16|gather_rows|host_copy|memcpy|memset|add_kernel"),
]


def short_name(name):
    """The kernel's function name without namespaces, parameters or template arguments."""
    depth = 0
    cut = []
    for ch in name:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0:
            cut.append(ch)
    base = "".join(cut).strip().split(" ")[-1]
    return base.split("::")[-1] or name[:60]


def family_of(name):
    for family, pattern in FAMILIES:
        if re.search(pattern, name):
            return family
    return "other"


def read_trace(path):
    records = []
    with open(path) as f:
        next(f)
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 7:
                continue
            start, end, stream, kind, grid, block, name = parts[:7]
            records.append((int(start), int(end), kind, grid, name))
    records.sort()
    return records


def split_steps(records):
    steps, current, ended = [], [], False
    for record in records:
        is_sampling = record[2] == "kernel" and SAMPLING.search(record[4])
        if ended and not is_sampling:
            steps.append(current)
            current, ended = [], False
        current.append(record)
        ended = ended or bool(is_sampling)
    if current and ended:
        steps.append(current)
    return steps


def busy_ns(step):
    """Time at least one kernel or copy ran (overlapping records counted once)."""
    total, reach = 0, 0
    for start, end, *_ in step:
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total


def exclusive_times(step):
    """Each record with the part of its time that no earlier record covered: from the later of its start and the
    end of everything before it, to its end. A kernel launched as a programmatic dependent starts while its
    predecessor runs and waits for it, so its own span would count the predecessor's time again; the exclusive
    times add up to the busy time, each the time the step spent waiting on that kernel."""
    reach = 0
    for start, end, kind, grid, name in step:
        yield start, end, kind, grid, name, max(0, end - max(start, reach))
        reach = max(reach, end)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace")
    parser.add_argument("--steps", type=int, default=100, help="the last N steady steps (default 100)")
    parser.add_argument("--all-steps", action="store_true", help="every long step (prefill runs)")
    parser.add_argument("--layers", type=int, default=0, help="decoder layers, for launches per layer")
    parser.add_argument("--top", type=int, default=40, help="kernels listed (default 40)")
    parser.add_argument("--json", help="also write the summary as JSON here")
    args = parser.parse_args()

    steps = split_steps(read_trace(args.trace))
    if not steps:
        sys.exit(f"{args.trace}: no step (no sampling kernel) in the trace")
    if args.all_steps:
        # The first step holds the weights' upload; warm-up steps are short.
        longest = max(busy_ns(s) for s in steps[1:]) if len(steps) > 1 else 0
        kept = [s for s in steps[1:] if busy_ns(s) >= longest / 4]
    else:
        counts = collections.Counter(len(s) for s in steps[len(steps) // 2:])
        modal = counts.most_common(1)[0][0]
        kept = [s for s in steps if len(s) == modal][-args.steps:]
    n = len(kept)
    spans = [s[-1][1] - s[0][0] for s in kept]
    busy = [busy_ns(s) for s in kept]
    launches = sum(1 for s in kept for r in s if r[2] == "kernel") / n

    per_kernel = collections.defaultdict(lambda: [0, 0])
    per_family = collections.defaultdict(lambda: [0, 0])
    for step in kept:
        for start, end, kind, grid, name, exclusive in exclusive_times(step):
            key = (short_name(name) if kind == "kernel" else kind, grid)
            per_kernel[key][0] += exclusive
            per_kernel[key][1] += 1
            family = family_of(name if kind == "kernel" else kind)
            per_family[family][0] += exclusive
            per_family[family][1] += 1

    span_us = statistics.median(spans) / 1e3
    print(f"steps: {len(steps)} in the trace, {n} kept; per step: span {span_us:.1f} us (median), "
          f"busy {statistics.median(busy) / 1e3:.1f} us, {launches:.1f} kernels"
          + (f" ({launches / args.layers:.1f} per layer)" if args.layers else ""))
    print()
    print(f"{'op family':<42} {'us/step':>9} {'share':>6} {'launches':>9}")
    total = sum(v[0] for v in per_family.values()) / n
    families = sorted(per_family.items(), key=lambda kv: -kv[1][0])
    for family, (ns, count) in families:
        print(f"{family:<42} {ns / n / 1e3:9.1f} {ns / n / total:6.1%} {count / n:9.1f}")
    print()
    print(f"{'kernel':<40} {'grid':<14} {'us/step':>9} {'launches':>9} {'us each':>8}")
    kernels = sorted(per_kernel.items(), key=lambda kv: -kv[1][0])
    for (name, grid), (ns, count) in kernels[:args.top]:
        print(f"{name[:40]:<40} {grid:<14} {ns / n / 1e3:9.1f} {count / n:9.1f} {ns / count / 1e3:8.2f}")

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"steps_in_trace": len(steps), "steps_kept": n, "span_us": span_us,
                       "busy_us": statistics.median(busy) / 1e3, "kernels_per_step": launches,
                       "families": {k: {"us_per_step": v[0] / n / 1e3, "launches_per_step": v[1] / n}
                                    for k, v in families},
                       "kernels": [{"name": k[0], "grid": k[1], "us_per_step": v[0] / n / 1e3,
                                    "launches_per_step": v[1] / n} for k, v in kernels]}, f, indent=1)


if __name__ == "__main__":
    main()
