#include <stdexcept>
#include <string>

#include "attention/merge_shares.h"
#include "common/dependent_launch.cuh"
#include "common/device_math.cuh"

namespace tern::kernels {

namespace {

constexpr int kWarps = 4;
// Heads of up to 256 values: at most 40 registers (12 blocks of 128 threads an SM leave 40 a thread), so that five
// blocks fit on an SM beside two of decode attention (decode_attention.h), which has the merge's blocks start
// before it ends; its successor in turn starts only once every block of the merge has. At 60 registers, 512 blocks
// (batch 8 of 64 heads) did not all fit beside them, and attention_bench's decode took 0.320 ms against 0.271.
constexpr int kMinBlocksPerSm = 12;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// One block per (decode token, head): out = sum_c w_c * out_c / (sum_c w_c + sink weight), w_c = 2^(lse_c - max).
// Warp w takes shares w, w + 4, ..., kBatch at a time: a batch's log-sum-exps and the lane's 16-byte chunks of their
// outputs are all loaded before any is used, and the warp keeps a running maximum, rescaling its sums as it rises
// (as attention's online softmax does), so that a batch costs one round trip to L2. (Finding the maximum first and
// loading the outputs after it took two more: the merge of 32 shares at 4K keys, in attention_bench's chain, 2.9 us
// against 2.6; MLA decode at batch 1 and 128 shares 0.070 ms against 0.052.) The warps' sums are then rescaled to
// the block's maximum and added in shared memory. A share of weight 0 (no keys, log-sum-exp -inf) adds nothing,
// whatever its output holds.
// WithLse: the partial attention of decode context parallelism (float32 output and the log-sum-exp).
// ChunksPerLane: a lane's 16-byte chunks of a head (value_dim / 128 rounded up); a batch holds at most four per
// lane in registers where the block must fit in 40 of them, eight otherwise.
template <bool WithLse, int ChunksPerLane>
__global__ void __launch_bounds__(kWarps * 32, ChunksPerLane <= 2 ? kMinBlocksPerSm : 1)
    merge_shares_kernel(const MergeSharesParams p) {
  constexpr int kChunksInFlight = ChunksPerLane <= 2 ? 4 : 8;
  constexpr int kBatch = ChunksPerLane >= kChunksInFlight ? 1 : kChunksInFlight / ChunksPerLane;
  __shared__ float warp_running_max[kWarps];
  __shared__ float warp_denominator[kWarps];
  __shared__ __align__(16) float sums[kWarps][kMergeMaxValueDim];
  const int i = blockIdx.x;
  const int head = blockIdx.y;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int token = p.tokens[i];  // the split plan, step metadata: read before the wait
  const int begin = p.token_item_begin[i];
  const int count = p.token_item_begin[i + 1] - begin;
  wait_for_prior_grids();
  allow_dependent_grids();
  const int num_heads = p.num_heads;
  const int chunks = p.value_dim / 4;
  const float* lse = p.partial_lse + static_cast<int64_t>(begin) * num_heads + head;
  const float* partial = p.partial_out + (static_cast<int64_t>(begin) * num_heads + head) * p.value_dim;
  const int64_t item_stride = static_cast<int64_t>(num_heads) * p.value_dim;

  float running_max = -INFINITY;
  float denominator = 0.0f;
  float4 acc[ChunksPerLane];
#pragma unroll
  for (int k = 0; k < ChunksPerLane; ++k) acc[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int first = warp; first < count; first += kWarps * kBatch) {
    float share_lse[kBatch];
    float4 value[kBatch][ChunksPerLane];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int c = first + b * kWarps;
      share_lse[b] = c < count ? lse[c * num_heads] : -INFINITY;
#pragma unroll
      for (int k = 0; k < ChunksPerLane; ++k) {
        const int j = lane + 32 * k;
        value[b][k] = c < count && j < chunks ? *reinterpret_cast<const float4*>(partial + c * item_stride + 4 * j)
                                              : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }
    float batch_max = running_max;
#pragma unroll
    for (int b = 0; b < kBatch; ++b) batch_max = fmaxf(batch_max, share_lse[b]);
    if (batch_max == -INFINITY) continue;  // no keys in the batch, nor before it
    const float rescale = exp2f(running_max - batch_max);  // 0 while running_max is -inf
    running_max = batch_max;
    denominator *= rescale;
#pragma unroll
    for (int k = 0; k < ChunksPerLane; ++k) {
      acc[k].x *= rescale;
      acc[k].y *= rescale;
      acc[k].z *= rescale;
      acc[k].w *= rescale;
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (share_lse[b] == -INFINITY) continue;
      const float w = exp2f(share_lse[b] - batch_max);
      denominator += w;
#pragma unroll
      for (int k = 0; k < ChunksPerLane; ++k) {
        acc[k].x += w * value[b][k].x;
        acc[k].y += w * value[b][k].y;
        acc[k].z += w * value[b][k].z;
        acc[k].w += w * value[b][k].w;
      }
    }
  }
  if (lane == 0) {
    warp_running_max[warp] = running_max;
    warp_denominator[warp] = denominator;
  }
#pragma unroll
  for (int k = 0; k < ChunksPerLane; ++k) {
    const int j = lane + 32 * k;
    if (j < chunks) *reinterpret_cast<float4*>(&sums[warp][4 * j]) = acc[k];
  }
  __syncthreads();

  const float sink = p.sinks ? p.sinks[head] * kLog2e : -INFINITY;
  float block_max = sink;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) block_max = fmaxf(block_max, warp_running_max[w]);
  const float shift = block_max == -INFINITY ? 0.0f : block_max;
  float scale[kWarps];
  float total_denominator = p.sinks ? exp2f(sink - shift) : 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    scale[w] = exp2f(warp_running_max[w] - shift);  // 0 for a warp without keys
    total_denominator += scale[w] * warp_denominator[w];
  }
  const float inv = total_denominator > 0.0f ? 1.0f / total_denominator : 0.0f;
  if (WithLse && threadIdx.x == 0) {
    p.out_lse[static_cast<int64_t>(token) * num_heads + head] =
        total_denominator > 0.0f ? (shift + log2f(total_denominator)) * kLn2 : -INFINITY;
  }
  for (int d = threadIdx.x; d < p.value_dim; d += blockDim.x) {
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) total += scale[w] * sums[w][d];
    const int64_t at = (static_cast<int64_t>(token) * num_heads + head) * p.value_dim + d;
    if (WithLse) {
      p.out_f32[at] = total * inv;
    } else {
      p.out[at] = __float2bfloat16(total * inv);
    }
  }
}

}  // namespace

void launch_merge_shares(const MergeSharesParams& params, cudaStream_t stream) {
  if (params.value_dim <= 0 || params.value_dim % 4 != 0 || params.value_dim > kMergeMaxValueDim) {
    throw std::invalid_argument("merge of attention shares: value_dim " + std::to_string(params.value_dim) +
                                " is not a multiple of 4 up to " + std::to_string(kMergeMaxValueDim));
  }
  if ((params.out_f32 == nullptr) != (params.out_lse == nullptr)) {
    throw std::invalid_argument("merge of attention shares: the float32 output and the log-sum-exps come together");
  }
  if (params.num_decode_tokens == 0) return;
  const dim3 grid(params.num_decode_tokens, params.num_heads);
  const auto launch = [&](auto kernel) {
    launch_dependent("merge of attention shares", kernel, grid, kWarps * 32, 0, stream, params);
  };
  const int chunks_per_lane = (params.value_dim / 4 + 31) / 32;
  const bool with_lse = params.out_lse != nullptr;
  switch (chunks_per_lane) {
    case 1: with_lse ? launch(merge_shares_kernel<true, 1>) : launch(merge_shares_kernel<false, 1>); break;
    case 2: with_lse ? launch(merge_shares_kernel<true, 2>) : launch(merge_shares_kernel<false, 2>); break;
    case 3:
    case 4: with_lse ? launch(merge_shares_kernel<true, 4>) : launch(merge_shares_kernel<false, 4>); break;
    default: with_lse ? launch(merge_shares_kernel<true, 5>) : launch(merge_shares_kernel<false, 5>); break;
  }
}

}  // namespace tern::kernels
