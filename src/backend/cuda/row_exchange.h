#pragma once
// The ops of the data-parallel MoE token exchange on one rank of a CUDA group (Backend::all_to_all_rows,
// select_rows, add_rows; docs/parallelism.md): rows move between the ranks with grouped ncclSend/ncclRecv after a
// count exchange, and are gathered and scatter-added by host-given row indices. Each op copies its indices or
// reads the counts through the host, so none may be recorded in a CUDA graph: they fail by name while the stream
// is capturing (the backend runs data-parallel steps eagerly).
#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cuda/device_allocator.h"
#include "backend/cuda/nccl_library.h"
#include "backend/tensor.h"

namespace tern::cuda {

// What the ops launch work with: the rank's allocator, its pinned upload ring and its stream.
struct RankStream {
  DeviceAllocator& allocator;
  PinnedStaging& staging;
  cudaStream_t stream;
};

// Backend::all_to_all_rows for rank `rank` of `group`. The ranks' send counts and row sizes travel first (an
// all-gather read back to the host, which waits for the stream), then the rows as one NCCL group of sends and
// receives; the rank's rows for itself are a device copy. Every rank must send rows of one size in bytes.
Tensor all_to_all_rows(const RankStream& on, const NcclGroup& group, int rank, const Tensor& x,
                       std::span<const int64_t> send_counts, std::vector<int64_t>& received_counts);
// Backend::select_rows: x [T, ...] of any dtype -> [rows.size(), ...].
Tensor select_rows(const RankStream& on, const Tensor& x, std::span<const int32_t> rows);
// Backend::select_rows_into.
void select_rows_into(const RankStream& on, const Tensor& x, std::span<const int32_t> rows, Tensor& out);
// Backend::add_rows: out[targets[i]] += x[i] in index order, summed in float32 (kernels/moe/add_rows.h); out and x
// are float32 or bf16. A float32 out gets exactly the CPU backend's sums; a bf16 out is rounded once per row.
void add_rows(const RankStream& on, Tensor& out, const Tensor& x, std::span<const int32_t> targets);

}  // namespace tern::cuda
