#pragma once
// Copies whole KV cache blocks between a layer's device tensors and their twins in page-locked host memory (the
// host tier), in one launch per layer for any number of scattered blocks: each thread block moves one block of one
// tensor, reading or writing the host side through its mapped address (cudaMallocHost memory is device-accessible
// under unified addressing). One cudaMemcpyAsync per run of consecutive blocks moved 10 GB/s on the H200 when the
// host tier's blocks were scattered (docs/BENCHMARKS.md, "KV cache tiers").
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace tern::kernels {

// A layer's tensors (keys, values, layer state) on both sides: block b of a tensor is its bytes
// [b * block_bytes, (b + 1) * block_bytes). A tensor of block_bytes 0 is skipped.
struct KvLayerCopy {
  static constexpr int kTensors = 3;
  const void* src[kTensors] = {};
  void* dst[kTensors] = {};
  size_t block_bytes[kTensors] = {};
};

// Block src_blocks[i] to block dst_blocks[i] of every tensor of `layer`, for i < num_blocks, in stream order.
void launch_kv_block_copy(const KvLayerCopy& layer, const int32_t* src_blocks, const int32_t* dst_blocks,
                          int num_blocks, cudaStream_t stream);

}  // namespace tern::kernels
