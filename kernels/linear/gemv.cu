#include <stdexcept>
#include <string>

#include "common/dependent_launch.cuh"
#include "common/device_math.cuh"
#include "elementwise/rope_kv_device.cuh"
#include "linear/gemv.h"

namespace tern::kernels {

namespace {

constexpr int kWarps = 16;
constexpr int kPairs = kWarps / 2;  // row pairs of a block, for the paired outputs
constexpr int kUnroll = 4;  // 16-byte weight loads in flight per lane
constexpr size_t kMaxSharedBytes = 48 * 1024;  // no opt-in attribute needed (one per device and kernel)

// x_shared <- rms_norm(x + addend) * norm_weight, as the rms_norm kernel computes it; `first_weight` is this
// thread's first chunk of the norm weight, loaded before the wait.
__device__ void normalize_into(const GemvParams& p, uint4* x_shared, const float (&first_weight)[8]) {
  const int chunks = p.k / 8;
  float sum_sq = 0.0f;
  for (int i = threadIdx.x; i < chunks; i += blockDim.x) {
    float v[8];
    load_f32x8(p.x + 8 * i, v);
    if (p.addend) {
      float a[8];
      load_f32x8(p.addend + 8 * i, a);
      Bf16x8 stored;
#pragma unroll
      for (int j = 0; j < 4; ++j) stored.pair[j] = __floats2bfloat162_rn(a[2 * j] + v[2 * j], a[2 * j + 1] + v[2 * j + 1]);
      if (blockIdx.x == 0) *reinterpret_cast<Bf16x8*>(p.residual_out + 8 * i) = stored;
      load_f32x8(reinterpret_cast<const __nv_bfloat16*>(&stored), v);  // the residual as stored (bf16)
    }
    store_f32x8(reinterpret_cast<__nv_bfloat16*>(&x_shared[i]), v);
#pragma unroll
    for (int j = 0; j < 8; ++j) sum_sq += v[j] * v[j];
  }
  const float scale = rsqrtf(block_sum<kWarps>(sum_sq) / p.k + p.eps);
  for (int i = threadIdx.x; i < chunks; i += blockDim.x) {
    float v[8], w[8];
    load_f32x8(reinterpret_cast<const __nv_bfloat16*>(&x_shared[i]), v);
    if (i == threadIdx.x) {
#pragma unroll
      for (int j = 0; j < 8; ++j) w[j] = first_weight[j];
    } else {
      load_f32x8(p.norm_weight + 8 * i, w);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = v[j] * scale * w[j];
    store_f32x8(reinterpret_cast<__nv_bfloat16*>(&x_shared[i]), v);
  }
}

// The weight row warp `warp` of block `block` sums. Paired outputs put the pair's first rows in warps 0-7 and their
// partners in warps 8-15.
template <GemvOutput Out>
__device__ __forceinline__ int weight_row(const GemvParams& p, int block, int warp) {
  if constexpr (Out == GemvOutput::plain) {
    return min(block * kWarps + warp, p.n - 1);  // a past-the-end warp still loads x for its block
  } else if constexpr (Out == GemvOutput::silu_mul) {
    return (warp < kPairs ? 0 : p.n / 2) + block * kPairs + warp % kPairs;
  } else {
    const int first = block * kWarps;
    if (first >= p.num_q_rows + p.kv.num_kv_heads * p.kv.key_dim) return first + warp;  // values: not rotated
    const int head_dim = p.kv.key_dim;
    const int head_begin = first / head_dim * head_dim;
    const int pair_begin = (first - head_begin) / 2;  // the block's first rotary pair in its head
    return head_begin + (warp < kPairs ? 0 : head_dim / 2) + pair_begin + warp % kPairs;
  }
}

// Thread i < kPairs of a paired output: combines pair i's rounded sums, lo (first row) and hi (partner).
template <GemvOutput Out>
__device__ __forceinline__ void write_pair(const GemvParams& p, int lo_row, float lo, float hi, float2 angle,
                                           int64_t slot) {
  if constexpr (Out == GemvOutput::silu_mul) {
    p.out[lo_row] = __float2bfloat16(silu(lo) * hi);
  } else {
    const int head_dim = p.kv.key_dim;
    const int kv_rows = p.kv.num_kv_heads * head_dim;
    const int hi_row = lo_row + (lo_row < p.num_q_rows + kv_rows ? head_dim / 2 : kPairs);
    if (lo_row < p.num_q_rows + kv_rows) {  // q or k: rotate-half, as rope_kv_vec_kernel computes it
      const float rotated_lo = lo * angle.x - hi * angle.y;
      hi = hi * angle.x + lo * angle.y;
      lo = rotated_lo;
    }
    const __nv_bfloat16 lo_value = __float2bfloat16(lo), hi_value = __float2bfloat16(hi);
    p.out[lo_row] = lo_value;
    p.out[hi_row] = hi_value;
    if (lo_row < p.num_q_rows || slot < 0) return;
    const bool is_key = lo_row < p.num_q_rows + kv_rows;
    const int first = is_key ? p.num_q_rows : p.num_q_rows + kv_rows;
    write_kv(p.kv, is_key, slot * kv_rows + lo_row - first, __bfloat162float(lo_value));
    write_kv(p.kv, is_key, slot * kv_rows + hi_row - first, __bfloat162float(hi_value));
  }
}

// Weight row `row` times x as 16-byte loads of the weight: 8 bf16, or 16 FP8 codes of one 128x128 block (a load of
// 16 never straddles two blocks), each scaled by its block's scale after its products are summed.
template <bool Fp8>
struct WeightRow {
  static constexpr int kValuesPerLoad = Fp8 ? 16 : 8;
  const uint4* loads;
  const float* scales;  // Fp8: the row's block scales

  __device__ WeightRow(const GemvParams& p, int row) {
    if constexpr (Fp8) {
      loads = reinterpret_cast<const uint4*>(p.fp8.codes + static_cast<int64_t>(row) * p.k);
      scales = p.fp8.scales + static_cast<int64_t>(row / 128) * p.fp8.scale_stride;
    } else {
      loads = reinterpret_cast<const uint4*>(p.weight + static_cast<int64_t>(row) * p.k);
      scales = nullptr;
    }
  }

  // Adds load `c`'s products with x (chunks of 8 bf16 in shared memory) to acc.
  __device__ __forceinline__ void accumulate(float& acc, const uint4& loaded, const uint4* x_shared, int c) const {
    if constexpr (Fp8) {
      float sum = 0.0f;
      const __nv_fp8x2_storage_t* pairs = reinterpret_cast<const __nv_fp8x2_storage_t*>(&loaded);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float xf[8];
        load_f32x8(reinterpret_cast<const __nv_bfloat16*>(&x_shared[2 * c + half]), xf);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 w = e4m3x2_to_float2(pairs[4 * half + j]);
          sum += w.x * xf[2 * j] + w.y * xf[2 * j + 1];
        }
      }
      acc += sum * __ldg(scales + c * kValuesPerLoad / 128);
    } else {
      float wf[8], xf[8];
      load_f32x8(reinterpret_cast<const __nv_bfloat16*>(&loaded), wf);
      load_f32x8(reinterpret_cast<const __nv_bfloat16*>(&x_shared[c]), xf);
#pragma unroll
      for (int j = 0; j < 8; ++j) acc += wf[j] * xf[j];
    }
  }
};

// Launched as a programmatic dependent: each warp loads the first kUnroll chunks of its weight row (constants), and
// with Norm each thread its first chunk of the norm weight, before waiting for the kernel that writes x, so the
// start of the weight stream overlaps that kernel. The rope_kv epilogue's angles and cache slot are step metadata,
// also read before the wait.
template <bool Norm, GemvOutput Out, bool Fp8>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const GemvParams p) {
  extern __shared__ uint4 x_shared[];  // x as chunks of 8 bf16
  __shared__ float pair_sums[kWarps];
  const int chunks = p.k / 8;
  const int loads = p.k / WeightRow<Fp8>::kValuesPerLoad;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int row = weight_row<Out>(p, blockIdx.x, warp);
  const WeightRow<Fp8> w(p, row);
  uint4 loaded[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int c = lane + 32 * u;
    loaded[u] = c < loads ? __ldg(w.loads + c) : make_uint4(0, 0, 0, 0);
  }
  float first_norm_weight[8] = {};
  if constexpr (Norm) {
    if (static_cast<int>(threadIdx.x) < chunks) load_f32x8(p.norm_weight + 8 * threadIdx.x, first_norm_weight);
  }
  // In shared memory rather than registers, which the weight stream needs.
  __shared__ float2 pair_angles[kPairs];
  __shared__ int64_t slot;
  if constexpr (Out == GemvOutput::rope_kv) {
    if (threadIdx.x == 0) slot = slot_of(p.kv.slots, 0);
    if (threadIdx.x < kPairs) {
      const int pair_row = weight_row<Out>(p, blockIdx.x, threadIdx.x);
      pair_angles[threadIdx.x] =
          pair_row < p.num_q_rows + p.kv.num_kv_heads * p.kv.key_dim
              ? rotary_angle(static_cast<float>(p.kv.slots.positions[0]), p.rope, pair_row % p.kv.key_dim)
              : make_float2(1.0f, 0.0f);
    }
  }
  wait_for_prior_grids();
  if (!p.trigger_at_end) allow_dependent_grids();
  if constexpr (Norm) {
    normalize_into(p, x_shared, first_norm_weight);
  } else {
    for (int i = threadIdx.x; i < chunks; i += blockDim.x) x_shared[i] = reinterpret_cast<const uint4*>(p.x)[i];
  }
  __syncthreads();
  if (Out == GemvOutput::plain && blockIdx.x * kWarps + warp >= p.n) return;
  // Each chunk's register takes the load kUnroll chunks ahead as soon as the chunk is used: kUnroll loads stay in
  // flight with kUnroll registers of 16 bytes.
  float acc = 0.0f;
  for (int c0 = lane; c0 < loads; c0 += 32 * kUnroll) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + 32 * u;
      if (c >= loads) break;
      w.accumulate(acc, loaded[u], x_shared, c);
      const int ahead = c + 32 * kUnroll;
      loaded[u] = ahead < loads ? __ldg(w.loads + ahead) : make_uint4(0, 0, 0, 0);
    }
  }
  acc = warp_sum(acc) + (p.bias ? __bfloat162float(p.bias[row]) : 0.0f);
  if constexpr (Out == GemvOutput::plain) {
    if (lane == 0) p.out[row] = __float2bfloat16(acc);
  } else {
    if (lane == 0) pair_sums[warp] = __bfloat162float(__float2bfloat16(acc));  // the sum as a bf16 output holds it
    __syncthreads();
    if (threadIdx.x < kPairs) {
      const int lo_row = weight_row<Out>(p, blockIdx.x, threadIdx.x);
      write_pair<Out>(p, Out == GemvOutput::silu_mul ? blockIdx.x * kPairs + threadIdx.x : lo_row,
                      pair_sums[threadIdx.x], pair_sums[threadIdx.x + kPairs], pair_angles[threadIdx.x], slot);
    }
  }
  if (p.trigger_at_end) allow_dependent_grids();
}

constexpr int kSkinnyThreads = 256;
constexpr int kSkinnyUnroll = 4;  // 16-byte weight loads in flight per thread

// A block per weight row; the row's weight chunks (constants) are loaded before waiting for the kernel that writes
// x, as gemv_kernel does. With Norm the block also sums the squares of x as it reads it and multiplies x by the norm
// weight: the dot product of the normalized x is the block's sum times x's reciprocal RMS, applied once.
template <bool Norm>
__global__ void __launch_bounds__(kSkinnyThreads) skinny_gemv_f32_kernel(const __nv_bfloat16* x,
                                                                         const __nv_bfloat16* weight, float* out,
                                                                         int k, const __nv_bfloat16* norm_weight,
                                                                         float eps) {
  const int chunks = k / 8;
  const uint4* w = reinterpret_cast<const uint4*>(weight + static_cast<int64_t>(blockIdx.x) * k);
  uint4 loaded[kSkinnyUnroll];
#pragma unroll
  for (int u = 0; u < kSkinnyUnroll; ++u) {
    const int c = threadIdx.x + kSkinnyThreads * u;
    loaded[u] = c < chunks ? __ldg(w + c) : make_uint4(0, 0, 0, 0);
  }
  wait_for_prior_grids();
  allow_dependent_grids();
  float acc = 0.0f, squares = 0.0f;
  for (int c0 = threadIdx.x; c0 < chunks; c0 += kSkinnyThreads * kSkinnyUnroll) {
#pragma unroll
    for (int u = 0; u < kSkinnyUnroll; ++u) {
      const int c = c0 + kSkinnyThreads * u;
      if (c >= chunks) break;
      float wf[8], xf[8];
      load_f32x8(reinterpret_cast<const __nv_bfloat16*>(&loaded[u]), wf);
      load_f32x8(x + 8 * c, xf);
      if constexpr (Norm) {
        float gf[8];
        load_f32x8(norm_weight + 8 * c, gf);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          squares += xf[j] * xf[j];
          xf[j] *= gf[j];
        }
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) acc += wf[j] * xf[j];
      const int ahead = c + kSkinnyThreads * kSkinnyUnroll;
      loaded[u] = ahead < chunks ? __ldg(w + ahead) : make_uint4(0, 0, 0, 0);
    }
  }
  if constexpr (Norm) {
    // Two sums, so the partials go through a shared pair at once (block_sum's memory serves one call).
    __shared__ float2 partial[kSkinnyThreads / 32];
    const float2 mine = make_float2(warp_sum(acc), warp_sum(squares));
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = mine;
    __syncthreads();
    if (threadIdx.x == 0) {
      float dot = 0.0f, sum_squares = 0.0f;
#pragma unroll
      for (int i = 0; i < kSkinnyThreads / 32; ++i) {
        dot += partial[i].x;
        sum_squares += partial[i].y;
      }
      out[blockIdx.x] = dot * rsqrtf(sum_squares / static_cast<float>(k) + eps);
    }
  } else {
    acc = block_sum<kSkinnyThreads / 32>(acc);
    if (threadIdx.x == 0) out[blockIdx.x] = acc;
  }
}

template <bool Norm, bool Fp8>
void launch_with_output(const GemvParams& p, unsigned blocks, size_t shared_bytes, cudaStream_t stream) {
  switch (p.output) {
    case GemvOutput::plain:
      launch_dependent("gemv", gemv_kernel<Norm, GemvOutput::plain, Fp8>, blocks, kWarps * 32, shared_bytes, stream,
                       p);
      break;
    case GemvOutput::silu_mul:
      launch_dependent("gemv", gemv_kernel<Norm, GemvOutput::silu_mul, Fp8>, blocks, kWarps * 32, shared_bytes,
                       stream, p);
      break;
    case GemvOutput::rope_kv:
      launch_dependent("gemv", gemv_kernel<Norm, GemvOutput::rope_kv, Fp8>, blocks, kWarps * 32, shared_bytes,
                       stream, p);
      break;
  }
}

template <bool Fp8>
void launch_with_norm(const GemvParams& p, unsigned blocks, size_t shared_bytes, cudaStream_t stream) {
  if (p.norm_weight) {
    launch_with_output<true, Fp8>(p, blocks, shared_bytes, stream);
  } else {
    launch_with_output<false, Fp8>(p, blocks, shared_bytes, stream);
  }
}

}  // namespace

bool gemv_supports(int64_t m, int64_t n, int64_t k) {
  return m == 1 && n > 0 && n < (int64_t{1} << 31) && k > 0 && k % 8 == 0 &&
         static_cast<size_t>(k) * sizeof(__nv_bfloat16) <= kMaxSharedBytes;
}

bool gemv_supports_fp8(int64_t m, int64_t n, int64_t k) { return gemv_supports(m, n, k) && k % 16 == 0; }

bool gemv_supports_silu_mul(int64_t n) { return n % (2 * kPairs) == 0; }

bool gemv_supports_rope_kv(int64_t n, int64_t num_q_rows, int64_t num_kv_heads, int64_t key_dim, int64_t value_dim,
                           const RopeSpec& rope) {
  return key_dim > 0 && key_dim % (2 * kPairs) == 0 && value_dim == key_dim && rope.rotary_dim == key_dim &&
         !rope.interleaved && num_q_rows % key_dim == 0 && n == num_q_rows + 2 * num_kv_heads * key_dim;
}

void launch_gemv(const GemvParams& p, cudaStream_t stream) {
  const bool fp8 = p.fp8.codes != nullptr;
  if (fp8 ? !gemv_supports_fp8(1, p.n, p.k) : !gemv_supports(1, p.n, p.k)) {
    throw std::invalid_argument(std::string("gemv: [1, ") + std::to_string(p.k) + "] x [" + std::to_string(p.n) +
                                ", " + std::to_string(p.k) + "]^T" + (fp8 ? " (block FP8)" : "") +
                                " is outside the kernel's shapes");
  }
  if (fp8 == (p.weight != nullptr) || (fp8 && !p.fp8.covers(p.k))) {
    throw std::invalid_argument("gemv: needs either a bf16 weight or a block-FP8 one with its scales");
  }
  if (p.norm_weight && p.addend && !p.residual_out) throw std::invalid_argument("gemv: an addend needs residual_out");
  if (p.output == GemvOutput::silu_mul && !gemv_supports_silu_mul(p.n)) {
    throw std::invalid_argument("gemv: silu_mul needs N / 2 a multiple of 8, got N = " + std::to_string(p.n));
  }
  if (p.output == GemvOutput::rope_kv) {
    if (!gemv_supports_rope_kv(p.n, p.num_q_rows, p.kv.num_kv_heads, p.kv.key_dim, p.kv.value_dim, p.rope) ||
        p.kv.num_tokens != 1 || p.kv.slots.block_size <= 0) {
      throw std::invalid_argument("gemv: rope_kv needs one token, whole heads of a head dim that is a multiple of 16, "
                                  "values as wide as keys and rotate-half RoPE over the whole head");
    }
  }
  const unsigned blocks = p.output == GemvOutput::silu_mul ? p.n / (2 * kPairs) : (p.n + kWarps - 1) / kWarps;
  const size_t shared_bytes = p.k * sizeof(__nv_bfloat16);
  if (fp8) {
    launch_with_norm<true>(p, blocks, shared_bytes, stream);
  } else {
    launch_with_norm<false>(p, blocks, shared_bytes, stream);
  }
}

bool skinny_gemv_f32_supports(int64_t m, int64_t n, int64_t k) {
  return m == 1 && n > 0 && n <= 256 && k > 0 && k % 8 == 0 && k < (int64_t{1} << 31);
}

void launch_skinny_gemv_f32(const __nv_bfloat16* x, const __nv_bfloat16* weight, float* out, int n, int k,
                            cudaStream_t stream, const __nv_bfloat16* norm_weight, float eps) {
  if (!skinny_gemv_f32_supports(1, n, k)) {
    throw std::invalid_argument("skinny_gemv_f32: " + std::to_string(n) + " rows of " + std::to_string(k) +
                                " (up to 256 rows, a multiple of 8 long)");
  }
  if (norm_weight) {
    launch_dependent("skinny_gemv_f32", skinny_gemv_f32_kernel<true>, n, kSkinnyThreads, 0, stream, x, weight, out, k,
                     norm_weight, eps);
  } else {
    launch_dependent("skinny_gemv_f32", skinny_gemv_f32_kernel<false>, n, kSkinnyThreads, 0, stream, x, weight, out,
                     k, norm_weight, eps);
  }
}

}  // namespace tern::kernels
