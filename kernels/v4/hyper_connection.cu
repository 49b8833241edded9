#include <stdexcept>
#include <string>

#include "common/dependent_launch.cuh"
#include "v4/hyper_connection.h"
#include "v4/v4_math.h"

namespace tern::kernels {

namespace {

constexpr int kMixThreads = 64;
constexpr int kStreamThreads = 256;
constexpr int kMaxStreams = 16;  // the expand kernel keeps a token's mix weights in shared memory

__global__ void hyper_mix_kernel(HyperMixParams p) {
  wait_for_prior_grids();
  allow_dependent_grids();
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= p.num_tokens) return;
  const int64_t row = static_cast<int64_t>(t) * p.width;
  v4::hyper_mix_row(p.mixes + row, p.base, p.scale, p.num_streams, p.width, p.sinkhorn_iters, p.eps, p.out + row);
}

// The full weights of V4's 4 streams with a lane per element of the 4 x 4 stream mix (16 lanes a token): Sinkhorn's
// rounds are a chain of dependent divisions, which one thread per token runs 16 times slower (21 us a call on the
// H200 with the row in registers, 54 us in global memory). Row sums meet over lanes 1 and 2 apart, column sums over
// lanes 4 and 8 apart; the CPU reference adds the same four numbers in another order.
constexpr int kWarpStreams = 4;
constexpr int kLanesPerToken = kWarpStreams * kWarpStreams;

__device__ __forceinline__ float sum_over_lanes(float v, int first_mask, int second_mask) {
  v += __shfl_xor_sync(0xffffffffu, v, first_mask);
  return v + __shfl_xor_sync(0xffffffffu, v, second_mask);
}

// Token t's weights on lane `lane` of its 16 (every lane of the warp takes part in the shuffles; write only where
// t is a token).
__device__ void hyper_mix_lanes(const HyperMixParams& p, int t, int lane, bool write) {
  constexpr int n = kWarpStreams;
  constexpr int width = (2 + n) * n;
  const int64_t row = static_cast<int64_t>(t) * width;
  if (lane < 2 * n) {
    const float x = p.mixes[row + lane];
    const float w = lane < n ? v4::hyper_collapse_weight(x, p.scale[0], p.base[lane], p.eps)
                             : 2.0f * v4::sigmoid(x * p.scale[1] + p.base[lane]);
    if (write) p.out[row + lane] = w;
  }
  float m = p.mixes[row + 2 * n + lane] * p.scale[2] + p.base[2 * n + lane];
  float row_max = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
  row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 2));
  m = expf(m - row_max);
  m = m / sum_over_lanes(m, 1, 2) + p.eps;
  m /= sum_over_lanes(m, 4, 8) + p.eps;
  for (int i = 1; i < p.sinkhorn_iters; ++i) {
    m /= sum_over_lanes(m, 1, 2) + p.eps;
    m /= sum_over_lanes(m, 4, 8) + p.eps;
  }
  if (write) p.out[row + 2 * n + lane] = m;
}

bool mixes_on_lanes(const HyperMixParams& p) {
  return p.num_streams == kWarpStreams && p.width == (2 + kWarpStreams) * kWarpStreams;
}

__global__ void hyper_mix_lanes_kernel(HyperMixParams p) {
  wait_for_prior_grids();
  allow_dependent_grids();
  const int t = (blockIdx.x * blockDim.x + threadIdx.x) / kLanesPerToken;
  // Lanes past the last token compute on its row and write nothing.
  hyper_mix_lanes(p, min(t, p.num_tokens - 1), threadIdx.x % kLanesPerToken, t < p.num_tokens);
}

// Token t's collapse at this thread's hidden dim (grid (hidden / threads, tokens)): the streams summed in float32 by
// the token's collapse weights.
__device__ __forceinline__ void collapse_dim(const __nv_bfloat16* streams, const float* weights, __nv_bfloat16* out,
                                             int t, int num_streams, int hidden) {
  const int d = blockIdx.x * blockDim.x + threadIdx.x;
  if (d >= hidden) return;
  const __nv_bfloat16* x = streams + static_cast<int64_t>(t) * num_streams * hidden;
  float sum = 0.0f;
  for (int i = 0; i < num_streams; ++i) sum += weights[i] * __bfloat162float(x[static_cast<int64_t>(i) * hidden + d]);
  out[static_cast<int64_t>(t) * hidden + d] = __float2bfloat16(sum);
}

// hyper_mix and hyper_collapse in one launch, grid (hidden / threads, tokens): every block computes its token's
// collapse weights from the raw mixes (Sinkhorn's rounds touch only the stream mix), and the first block of each
// token also writes the token's whole mix row for hyper_expand.
__global__ void hyper_mix_collapse_kernel(HyperMixParams p, bool on_lanes, const __nv_bfloat16* streams,
                                          __nv_bfloat16* out, int hidden) {
  wait_for_prior_grids();
  allow_dependent_grids();
  __shared__ float weights[kMaxStreams];
  const int t = blockIdx.y;
  const float* mixes = p.mixes + static_cast<int64_t>(t) * p.width;
  if (threadIdx.x < p.num_streams) {
    weights[threadIdx.x] = v4::hyper_collapse_weight(mixes[threadIdx.x], p.scale[0], p.base[threadIdx.x], p.eps);
  }
  if (blockIdx.x == 0) {
    if (on_lanes) {
      if (threadIdx.x < 32) hyper_mix_lanes(p, t, threadIdx.x % kLanesPerToken, threadIdx.x < kLanesPerToken);
    } else if (threadIdx.x == 0) {
      v4::hyper_mix_row(mixes, p.base, p.scale, p.num_streams, p.width, p.sinkhorn_iters, p.eps,
                        p.out + static_cast<int64_t>(t) * p.width);
    }
  }
  __syncthreads();
  collapse_dim(streams, weights, out, t, p.num_streams, hidden);
}

// Grid (hidden / threads, tokens): a thread per hidden dim of a token.
__global__ void hyper_collapse_kernel(const __nv_bfloat16* streams, const float* mix, __nv_bfloat16* out,
                                      int num_streams, int hidden, int mix_width) {
  wait_for_prior_grids();
  allow_dependent_grids();
  collapse_dim(streams, mix + static_cast<int64_t>(blockIdx.y) * mix_width, out, blockIdx.y, num_streams, hidden);
}

__global__ void hyper_expand_kernel(const __nv_bfloat16* streams, const __nv_bfloat16* block_out, const float* mix,
                                    __nv_bfloat16* out, int num_streams, int hidden) {
  wait_for_prior_grids();
  allow_dependent_grids();
  __shared__ float weights[(2 + kMaxStreams) * kMaxStreams];
  const int t = blockIdx.y;
  const int mix_width = (2 + num_streams) * num_streams;
  for (int i = threadIdx.x; i < mix_width; i += blockDim.x) weights[i] = mix[static_cast<int64_t>(t) * mix_width + i];
  __syncthreads();
  const int d = blockIdx.x * blockDim.x + threadIdx.x;
  if (d >= hidden) return;
  const float* post = weights + num_streams;
  const float* comb = post + num_streams;  // comb[j * n + k]: weight of input stream j in output stream k
  const int64_t token_base = static_cast<int64_t>(t) * num_streams * hidden;
  float x[kMaxStreams];
  for (int j = 0; j < num_streams; ++j) {
    x[j] = __bfloat162float(streams[token_base + static_cast<int64_t>(j) * hidden + d]);
  }
  const float y = __bfloat162float(block_out[static_cast<int64_t>(t) * hidden + d]);
  for (int k = 0; k < num_streams; ++k) {
    float mixed = 0.0f;
    for (int j = 0; j < num_streams; ++j) mixed += comb[j * num_streams + k] * x[j];
    out[token_base + static_cast<int64_t>(k) * hidden + d] = __float2bfloat16(post[k] * y + mixed);
  }
}

void check_streams(int num_tokens, int num_streams, int hidden, const char* what) {
  if (num_tokens < 0 || num_tokens > 65535 || num_streams <= 0 || num_streams > kMaxStreams || hidden <= 0) {
    throw std::invalid_argument(std::string(what) + ": needs up to 65535 tokens of 1 to " +
                                std::to_string(kMaxStreams) + " streams of a positive hidden size");
  }
}

dim3 stream_grid(int num_tokens, int hidden) {
  return dim3((hidden + kStreamThreads - 1) / kStreamThreads, num_tokens);
}

void check_mix_params(const HyperMixParams& p, const char* what) {
  const int n = p.num_streams;
  if (n <= 0 || (p.width != n && p.width != (2 + n) * n) || p.sinkhorn_iters < 0) {
    throw std::invalid_argument(std::string(what) + ": width must be num_streams or (2 + num_streams) * num_streams");
  }
}

}  // namespace

void launch_hyper_mix(const HyperMixParams& p, cudaStream_t stream) {
  check_mix_params(p, "hyper_mix");
  if (p.num_tokens <= 0) return;
  if (mixes_on_lanes(p)) {
    const int64_t threads = static_cast<int64_t>(p.num_tokens) * kLanesPerToken;
    launch_dependent("hyper_mix", hyper_mix_lanes_kernel, (threads + kMixThreads - 1) / kMixThreads, kMixThreads, 0,
                     stream, p);
    return;
  }
  launch_dependent("hyper_mix", hyper_mix_kernel, (p.num_tokens + kMixThreads - 1) / kMixThreads, kMixThreads, 0,
                   stream, p);
}

void launch_hyper_collapse(const __nv_bfloat16* streams, const float* mix, __nv_bfloat16* out, int num_tokens,
                           int num_streams, int hidden, int mix_width, cudaStream_t stream) {
  check_streams(num_tokens, num_streams, hidden, "hyper_collapse");
  if (mix_width < num_streams) throw std::invalid_argument("hyper_collapse: fewer mix weights than streams");
  if (num_tokens == 0) return;
  launch_dependent("hyper_collapse", hyper_collapse_kernel, stream_grid(num_tokens, hidden), kStreamThreads, 0, stream,
                   streams, mix, out, num_streams, hidden, mix_width);
}

void launch_hyper_mix_collapse(const HyperMixParams& p, const __nv_bfloat16* streams, __nv_bfloat16* out, int hidden,
                               cudaStream_t stream) {
  check_mix_params(p, "hyper_mix_collapse");
  check_streams(p.num_tokens, p.num_streams, hidden, "hyper_mix_collapse");
  if (p.num_tokens == 0) return;
  launch_dependent("hyper_mix_collapse", hyper_mix_collapse_kernel, stream_grid(p.num_tokens, hidden), kStreamThreads,
                   0, stream, p, mixes_on_lanes(p), streams, out, hidden);
}

void launch_hyper_expand(const __nv_bfloat16* streams, const __nv_bfloat16* block_out, const float* mix,
                         __nv_bfloat16* out, int num_tokens, int num_streams, int hidden, cudaStream_t stream) {
  check_streams(num_tokens, num_streams, hidden, "hyper_expand");
  if (num_tokens == 0) return;
  launch_dependent("hyper_expand", hyper_expand_kernel, stream_grid(num_tokens, hidden), kStreamThreads, 0, stream,
                   streams, block_out, mix, out, num_streams, hidden);
}

}  // namespace tern::kernels
