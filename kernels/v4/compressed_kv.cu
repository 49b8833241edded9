#include <stdexcept>
#include <string>

#include "common/dependent_launch.cuh"
#include "common/device_math.cuh"
#include "v4/compressed_kv.h"
#include "v4/v4_tokens.cuh"

namespace tern::kernels {

namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;

// The block's sum (Max = false) or maximum of one value per thread; every thread gets it. `scratch` holds kWarps.
template <bool Max>
__device__ float block_reduce(float v, float* scratch) {
  v = Max ? warp_max(v) : warp_sum(v);
  __syncthreads();  // the scratch may still be read from the previous reduction
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float total = scratch[0];
  for (int w = 1; w < kWarps; ++w) total = Max ? fmaxf(total, scratch[w]) : total + scratch[w];
  return total;
}

// ---- compress_kv ----

// One block per token: its kv and its gate plus the position bias of its place in the window.
__global__ void __launch_bounds__(kThreads) compress_rows_kernel(CompressKvParams p) {
  wait_for_prior_grids();
  allow_dependent_grids();
  const int t = blockIdx.x;
  const int position = p.tokens.positions[t];
  const int width = p.overlapping ? 2 * p.entry_dim : p.entry_dim;
  float* row = p.states + v4::token_slot(p.tokens, t, position) * p.state_dim + p.state_offset;
  const __nv_bfloat16* kv = p.kv + static_cast<int64_t>(t) * width;
  const __nv_bfloat16* gate = p.gate + static_cast<int64_t>(t) * width;
  const __nv_bfloat16* bias = p.position_bias + static_cast<int64_t>(position % p.compress_rate) * width;
  for (int f = threadIdx.x; f < width; f += blockDim.x) {
    row[f] = __bfloat162float(kv[f]);
    row[width + f] = __bfloat162float(gate[f]) + __bfloat162float(bias[f]);
  }
}

// One block per token; a token that closes a window writes its entry: per feature, the sources' kv under a softmax
// of their gates, then RMS norm and rotation at the window's first position. Reads rows of this step's other tokens,
// so it runs after compress_rows_kernel.
__global__ void __launch_bounds__(kThreads) compress_entries_kernel(CompressKvParams p) {
  extern __shared__ float entry[];  // [entry_dim]
  __shared__ float scratch[kWarps];
  wait_for_prior_grids();
  allow_dependent_grids();
  const int t = blockIdx.x;
  const int position = p.tokens.positions[t];
  if ((position + 1) % p.compress_rate != 0) return;
  const int rate = p.compress_rate, dim = p.entry_dim;
  const int width = p.overlapping ? 2 * dim : dim;
  const int start = position + 1 - rate;
  const int num_sources = v4::num_pool_sources(start, rate, p.overlapping);
  const auto source_row = [&](int s, int& feature_offset) {
    const v4::PoolSource source = v4::pool_source(start, s, rate, dim, p.overlapping);
    feature_offset = source.feature_offset;
    return p.states + v4::token_slot(p.tokens, t, source.position) * p.state_dim + p.state_offset;
  };
  float sum_squares = 0.0f;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) {
    int offset = 0;
    float max_gate = -INFINITY;
    for (int s = 0; s < num_sources; ++s) {
      const float* row = source_row(s, offset);
      max_gate = fmaxf(max_gate, row[width + offset + d]);
    }
    float sum = 0.0f;
    for (int s = 0; s < num_sources; ++s) {
      const float* row = source_row(s, offset);
      sum += expf(row[width + offset + d] - max_gate);
    }
    float pooled = 0.0f;
    for (int s = 0; s < num_sources; ++s) {
      const float* row = source_row(s, offset);
      pooled += row[offset + d] * (expf(row[width + offset + d] - max_gate) / sum);
    }
    entry[d] = pooled;
    sum_squares += pooled * pooled;
  }
  sum_squares = block_reduce<false>(sum_squares, scratch);
  const float inv_rms = 1.0f / sqrtf(sum_squares / dim + p.norm_eps);
  for (int d = threadIdx.x; d < dim; d += blockDim.x) {
    entry[d] = __bfloat162float(p.norm_weight[d]) * (entry[d] * inv_rms);
  }
  __syncthreads();
  for (int pair = threadIdx.x; pair < p.rope.rotary_dim / 2; pair += blockDim.x) {
    v4::rotate_pair(entry + p.rope.first_dim, pair, p.rope, static_cast<float>(start), false);
  }
  __syncthreads();
  float* out = p.states + v4::token_slot(p.tokens, t, position) * p.state_dim + p.state_offset + 2 * width;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) out[d] = entry[d];
}

}  // namespace

void launch_compress_kv(const CompressKvParams& p, cudaStream_t stream) {
  v4::check_tokens(p.tokens, "compress_kv");
  const int width = p.overlapping ? 2 * p.entry_dim : p.entry_dim;
  if (p.compress_rate <= 0 || p.entry_dim <= 0) {
    throw std::invalid_argument("compress_kv: compress rate and entry dim must be positive");
  }
  if (p.state_offset < 0 || p.state_offset + 2 * width + p.entry_dim > p.state_dim) {
    throw std::invalid_argument("compress_kv: the compressor's region lies outside the state row");
  }
  if (p.rope.rotary_dim < 0 || p.rope.rotary_dim % 2 != 0 || p.rope.first_dim < 0 ||
      p.rope.first_dim + p.rope.rotary_dim > p.entry_dim) {
    throw std::invalid_argument("compress_kv: the rotated dims lie outside the entry");
  }
  if (p.tokens.num_tokens == 0) return;
  launch_dependent("compress_kv", compress_rows_kernel, p.tokens.num_tokens, kThreads, 0, stream, p);
  launch_dependent("compress_kv", compress_entries_kernel, p.tokens.num_tokens, kThreads, p.entry_dim * sizeof(float),
                   stream, p);
}

}  // namespace tern::kernels
