#pragma once
// Copies between device memory and page-locked host memory (cudaMallocHost, which unified addressing maps into the
// device's address space) done by a kernel rather than the copy engine. Between two recorded batch-1 decode steps
// on the H200 each copy-engine transfer on the stream took about 7 us (the step's few hundred bytes of metadata in,
// its sampled ids out: 14 us of a 4.1 ms step, docs/BENCHMARKS.md); a kernel that reads or writes the host memory
// directly costs its launch and one PCIe round trip, and as a programmatic dependent (dependent_launch.cuh) its
// launch overlaps the kernel before it.
#include <cuda_runtime.h>

#include <cstddef>

namespace tern::kernels {

// `bytes` from src to dst, either of them page-locked host memory, in stream order. With `source_ready` (the
// source is host memory written before the launch, which no kernel writes), a thread reads its first word before
// waiting for the kernel before it, so that the PCIe round trip overlaps that kernel.
void launch_host_copy(void* dst, const void* src, size_t bytes, bool source_ready, cudaStream_t stream);

}  // namespace tern::kernels
