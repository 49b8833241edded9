#pragma once
// Copies between device memory and page-locked host memory (cudaMallocHost, which unified addressing maps into the
// device's address space) done by a kernel rather than the copy engine. Between two recorded batch-1 decode steps
// on the H200 each copy-engine transfer on the stream took about 7 us (the step's few hundred bytes of metadata in,
// its sampled ids out: 14 us of a 4.1 ms step, docs/BENCHMARKS.md); a kernel that reads or writes the host memory
// directly costs its launch and one PCIe round trip, and as a programmatic dependent (dependent_launch.cuh) its
// launch overlaps the kernel before it.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace tern::kernels {

// Overlap scheduling launches a step before the host has read the previous step's sampled ids, so the step's
// tokens that are those ids travel in its metadata as -1 - r, r their row of `previous_ids`, and the copy puts
// previous_ids[r] in their place (one kernel fewer between steps than a separate fill).
struct DeferredIds {
  size_t begin = 0;  // where the token ids start in the copy, in int32 values
  size_t count = 0;  // how many token ids there are
  const int32_t* previous_ids = nullptr;  // device memory an earlier kernel writes; null: nothing to resolve
};

// `bytes` from src to dst, either of them page-locked host memory, in stream order. With `source_ready` (the
// source is host memory written before the launch, which no kernel writes), a thread reads its first word before
// waiting for the kernel before it, so that the PCIe round trip overlaps that kernel. Where both pointers are 16-byte
// aligned, the copy moves 16-byte words, and any last bytes one a thread (the first token of a 128-token prompt came
// 0.3 ms later when its step's metadata went a byte a thread, docs/BENCHMARKS.md); resolving deferred ids needs
// that, with the ids in whole words.
void launch_host_copy(void* dst, const void* src, size_t bytes, bool source_ready, cudaStream_t stream,
                      const DeferredIds& deferred = {});

}  // namespace tern::kernels
