#!/usr/bin/env python3
"""torch.topk on the GPU at the Lightning Indexer's shapes, the reference that bench/indexer_topk_bench.cu's
"select" rows are compared with (issue: V4 and MoE at the speed of the hardware): top 512 of float32 rows of 8K,
32K and 256K candidates at 1, 16 and 128 rows; median of 20 timed calls after 3 warm-ups (CUDA events).

  python3 scripts/gpu/topk_reference.py
"""
import torch


def median_us(fn, reps=20, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3)
    return sorted(times)[len(times) // 2]


def main():
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    for candidates in (8192, 32768, 262144):
        for rows in (1, 16, 128):
            scores = torch.randn(rows, candidates, device="cuda", dtype=torch.float32)
            us = median_us(lambda: torch.topk(scores, 512, dim=-1, sorted=True))
            print(f"torch.topk rows={rows:4d} candidates={candidates:7d} k=512: {us:9.1f} us, {us / rows:8.2f} us/row")


if __name__ == "__main__":
    main()
