#include <stdexcept>
#include <string>

#include "v4/hyper_connection.h"
#include "v4/v4_math.h"

namespace tern::kernels {

namespace {

constexpr int kMixThreads = 64;
constexpr int kStreamThreads = 256;
constexpr int kMaxStreams = 16;  // the expand kernel keeps a token's mix weights in shared memory

__global__ void hyper_mix_kernel(HyperMixParams p) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= p.num_tokens) return;
  const int64_t row = static_cast<int64_t>(t) * p.width;
  v4::hyper_mix_row(p.mixes + row, p.base, p.scale, p.num_streams, p.width, p.sinkhorn_iters, p.eps, p.out + row);
}

// Grid (hidden / threads, tokens): a thread per hidden dim of a token.
__global__ void hyper_collapse_kernel(const __nv_bfloat16* streams, const float* mix, __nv_bfloat16* out,
                                      int num_streams, int hidden, int mix_width) {
  const int d = blockIdx.x * blockDim.x + threadIdx.x;
  const int t = blockIdx.y;
  if (d >= hidden) return;
  const float* w = mix + static_cast<int64_t>(t) * mix_width;
  const __nv_bfloat16* x = streams + static_cast<int64_t>(t) * num_streams * hidden;
  float sum = 0.0f;
  for (int i = 0; i < num_streams; ++i) sum += w[i] * __bfloat162float(x[static_cast<int64_t>(i) * hidden + d]);
  out[static_cast<int64_t>(t) * hidden + d] = __float2bfloat16(sum);
}

__global__ void hyper_expand_kernel(const __nv_bfloat16* streams, const __nv_bfloat16* block_out, const float* mix,
                                    __nv_bfloat16* out, int num_streams, int hidden) {
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

}  // namespace

void launch_hyper_mix(const HyperMixParams& p, cudaStream_t stream) {
  const int n = p.num_streams;
  if (n <= 0 || (p.width != n && p.width != (2 + n) * n) || p.sinkhorn_iters < 0) {
    throw std::invalid_argument("hyper_mix: width must be num_streams or (2 + num_streams) * num_streams");
  }
  if (p.num_tokens <= 0) return;
  hyper_mix_kernel<<<(p.num_tokens + kMixThreads - 1) / kMixThreads, kMixThreads, 0, stream>>>(p);
}

void launch_hyper_collapse(const __nv_bfloat16* streams, const float* mix, __nv_bfloat16* out, int num_tokens,
                           int num_streams, int hidden, int mix_width, cudaStream_t stream) {
  check_streams(num_tokens, num_streams, hidden, "hyper_collapse");
  if (mix_width < num_streams) throw std::invalid_argument("hyper_collapse: fewer mix weights than streams");
  if (num_tokens == 0) return;
  hyper_collapse_kernel<<<stream_grid(num_tokens, hidden), kStreamThreads, 0, stream>>>(streams, mix, out,
                                                                                       num_streams, hidden, mix_width);
}

void launch_hyper_expand(const __nv_bfloat16* streams, const __nv_bfloat16* block_out, const float* mix,
                         __nv_bfloat16* out, int num_tokens, int num_streams, int hidden, cudaStream_t stream) {
  check_streams(num_tokens, num_streams, hidden, "hyper_expand");
  if (num_tokens == 0) return;
  hyper_expand_kernel<<<stream_grid(num_tokens, hidden), kStreamThreads, 0, stream>>>(streams, block_out, mix, out,
                                                                                     num_streams, hidden);
}

}  // namespace tern::kernels
