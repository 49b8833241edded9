#pragma once
// The CUDA-core split-KV kernel, for the head sizes and groups the tensor-core one (decode_attention_mma_kernel.cuh)
// is not built for: any head_dim that is a multiple of 8 up to 512, any GQA group. One block per (work item, KV
// head, slice of up to 16 query heads of the group). The block streams its chunk of keys and values through shared
// memory in tiles of 32 tokens (cp.async, stages deep); warp w owns query heads [w * HeadsPerWarp, (w + 1) *
// HeadsPerWarp) of the slice, so every K/V byte is read from device memory once per slice (once per group up to 16
// heads). Lane i scores key i of the tile; for P.V each lane owns pairs of output dims. MaxDim, the smallest
// instantiated capacity that holds head_dim, sizes shared memory and registers; the head's own dims are a runtime
// value, so one instantiation serves every head size up to it. An FP8 cache (PagedKv::fp8) streams its codes,
// 8-byte copies of 8 dims, converted as they are read; key_scale joins the query scale, value_scale the output.
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "attention/decode_attention.h"
#include "attention/key_shares.h"
#include "common/dependent_launch.cuh"
#include "common/device_math.cuh"

namespace tern::kernels {

namespace decode {

constexpr int kTileTokens = 32;
constexpr int kNumWarps = 4;
constexpr int kMaxHeadsPerWarp = 4;
constexpr float kLog2e = 1.4426950408889634f;

template <int MaxDim>
struct Layout {
  static constexpr int kRowStride = MaxDim + 8;  // 16 bytes of padding keep the row reads conflict-free
  static constexpr int kTileElems = kTileTokens * kRowStride;
  static constexpr int kPairsPerLane = MaxDim >= 64 ? MaxDim / 64 : 1;
  // Two stages of 512-dim tiles already take 130 KB of shared memory; three would not fit beside the queries.
  static constexpr int kNumStages = MaxDim > 256 ? 2 : 3;
};

template <int MaxDim, int HeadsPerWarp, bool Fp8>
constexpr size_t shared_bytes() {
  using L = Layout<MaxDim>;
  return 2 * L::kNumStages * L::kTileElems * (Fp8 ? 1 : sizeof(__nv_bfloat16)) +
         kNumWarps * HeadsPerWarp * MaxDim * sizeof(float);
}

// A tile's elements, bf16 or e4m3 codes, as float32.
template <bool Fp8>
struct TileElements {
  using Element = std::conditional_t<Fp8, uint8_t, __nv_bfloat16>;
  static __device__ __forceinline__ void load8(const Element* src, float (&out)[8]) {
    if constexpr (Fp8) {
      const uint2 codes = *reinterpret_cast<const uint2*>(src);
      const auto* pairs = reinterpret_cast<const __nv_fp8x2_storage_t*>(&codes);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = e4m3x2_to_float2(pairs[i]);
        out[2 * i] = f.x;
        out[2 * i + 1] = f.y;
      }
    } else {
      load_f32x8(src, out);
    }
  }
  static __device__ __forceinline__ float2 load2(const Element* src) {
    if constexpr (Fp8) {
      return e4m3x2_to_float2(*reinterpret_cast<const __nv_fp8x2_storage_t*>(src));
    } else {
      return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(src));
    }
  }
};

template <int MaxDim, int HeadsPerWarp, bool Fp8>
__global__ void __launch_bounds__(kNumWarps * 32)
    chunk_kernel(const DecodeAttentionParams p) {
  using L = Layout<MaxDim>;
  using E = TileElements<Fp8>;
  using Element = typename E::Element;
  constexpr int kNumStages = L::kNumStages;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  wait_for_prior_grids();
  allow_dependent_grids();
  Element* k_tiles = reinterpret_cast<Element*>(smem_raw);
  Element* v_tiles = k_tiles + kNumStages * L::kTileElems;
  float* q_smem = reinterpret_cast<float*>(v_tiles + kNumStages * L::kTileElems);

  const int item = blockIdx.x;
  const int kv_head = blockIdx.y;
  const int first_local_head = blockIdx.z * kNumWarps * HeadsPerWarp;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const AttentionShape& s = p.shape;
  const int group = s.num_heads / s.num_kv_heads;
  const int head_dim = s.head_dim;
  const int chunks_per_row = head_dim / 8;

  const int token = p.item_token[item];
  const int chunk = p.item_chunk[item];
  const int seq = p.batch.token_seq[token];
  const int position = p.batch.positions[token];
  const int window_begin = s.sliding_window > 0 ? max(0, position - s.sliding_window + 1) : 0;
  const KeyShare share = key_share<kTileTokens>(window_begin, position + 1, chunk, p.num_splits);
  const int kv_begin = share.begin;
  const int kv_end = share.end;
  const int num_tiles = share.num_tiles;

  // Queries pre-scaled into the log2 domain, so that exp2 gives the softmax weights.
  const float q_scale = s.scale * kLog2e * (Fp8 ? p.kv.key_scale : 1.0f);
  for (int i = threadIdx.x; i < kNumWarps * HeadsPerWarp * MaxDim; i += blockDim.x) {
    const int local_head = first_local_head + i / MaxDim;
    const int d = i % MaxDim;
    float v = 0.0f;
    if (local_head < group && d < head_dim) {
      const int head = kv_head * group + local_head;
      v = __bfloat162float(p.query[(static_cast<int64_t>(token) * s.num_heads + head) * head_dim + d]) * q_scale;
    }
    q_smem[i] = v;
  }

  // Four threads per key row: the row's slot (a block-table lookup and a division) is computed once per tile
  // and thread, and each thread copies every fourth 16-byte chunk of the row's key and value.
  constexpr int kThreadsPerRow = kNumWarps * 32 / kTileTokens;
  auto load_tile = [&](int tile, int stage) {
    if (tile >= num_tiles) return;
    const int r = threadIdx.x / kThreadsPerRow;
    const int pos = kv_begin + tile * kTileTokens + r;
    const bool valid = pos < kv_end;
    const int64_t row = valid ? p.kv.row(seq, pos, s.num_kv_heads, kv_head) * head_dim : 0;
    const int dst = stage * L::kTileElems + r * L::kRowStride;
    for (int c = threadIdx.x % kThreadsPerRow; c < chunks_per_row; c += kThreadsPerRow) {
      if constexpr (Fp8) {
        cp_async_8(k_tiles + dst + c * 8, p.kv.key_codes + row + c * 8, valid ? 8 : 0);
        cp_async_8(v_tiles + dst + c * 8, p.kv.value_codes + row + c * 8, valid ? 8 : 0);
      } else {
        cp_async_16(k_tiles + dst + c * 8, p.kv.keys + row + c * 8, valid ? 16 : 0);
        cp_async_16(v_tiles + dst + c * 8, p.kv.values + row + c * 8, valid ? 16 : 0);
      }
    }
  };

  for (int t = 0; t < kNumStages - 1; ++t) {
    load_tile(t, t);
    cp_async_commit();
  }

  float m[HeadsPerWarp], l[HeadsPerWarp], acc[HeadsPerWarp][L::kPairsPerLane][2];
#pragma unroll
  for (int j = 0; j < HeadsPerWarp; ++j) {
    m[j] = -INFINITY;
    l[j] = 0.0f;
#pragma unroll
    for (int i = 0; i < L::kPairsPerLane; ++i) acc[j][i][0] = acc[j][i][1] = 0.0f;
  }
  const float* my_q = q_smem + warp * HeadsPerWarp * MaxDim;

  for (int tile = 0; tile < num_tiles; ++tile) {
    cp_async_wait<kNumStages - 2>();
    __syncthreads();
    load_tile(tile + kNumStages - 1, (tile + kNumStages - 1) % kNumStages);
    cp_async_commit();

    const int stage = tile % kNumStages;
    const Element* k_tile = k_tiles + stage * L::kTileElems;
    const Element* v_tile = v_tiles + stage * L::kTileElems;
    const bool key_valid = kv_begin + tile * kTileTokens + lane < kv_end;

    float score[HeadsPerWarp];
#pragma unroll
    for (int j = 0; j < HeadsPerWarp; ++j) score[j] = 0.0f;
#pragma unroll 4
    for (int c = 0; c < chunks_per_row; ++c) {
      float k[8];
      E::load8(k_tile + lane * L::kRowStride + c * 8, k);
#pragma unroll
      for (int j = 0; j < HeadsPerWarp; ++j) {
        const float4 q0 = *reinterpret_cast<const float4*>(my_q + j * MaxDim + c * 8);
        const float4 q1 = *reinterpret_cast<const float4*>(my_q + j * MaxDim + c * 8 + 4);
        score[j] += q0.x * k[0] + q0.y * k[1] + q0.z * k[2] + q0.w * k[3] + q1.x * k[4] + q1.y * k[5] +
                    q1.z * k[6] + q1.w * k[7];
      }
    }

    float prob[HeadsPerWarp];
#pragma unroll
    for (int j = 0; j < HeadsPerWarp; ++j) {
      const float sc = key_valid ? score[j] : -INFINITY;
      const float m_new = fmaxf(m[j], warp_max(sc));
      const float m_safe = m_new == -INFINITY ? 0.0f : m_new;
      const float correction = fast_exp2(m[j] - m_safe);
      prob[j] = fast_exp2(sc - m_safe);
      l[j] = l[j] * correction + warp_sum(prob[j]);
      m[j] = m_new;
#pragma unroll
      for (int i = 0; i < L::kPairsPerLane; ++i) {
        acc[j][i][0] *= correction;
        acc[j][i][1] *= correction;
      }
    }

#pragma unroll 8
    for (int r = 0; r < kTileTokens; ++r) {
      float2 v[L::kPairsPerLane];
#pragma unroll
      for (int i = 0; i < L::kPairsPerLane; ++i) {
        const int d = 2 * lane + 64 * i;
        v[i] = d < head_dim ? E::load2(v_tile + r * L::kRowStride + d) : make_float2(0.0f, 0.0f);
      }
#pragma unroll
      for (int j = 0; j < HeadsPerWarp; ++j) {
        const float pr = __shfl_sync(0xffffffffu, prob[j], r);
#pragma unroll
        for (int i = 0; i < L::kPairsPerLane; ++i) {
          acc[j][i][0] += pr * v[i].x;
          acc[j][i][1] += pr * v[i].y;
        }
      }
    }
  }
  cp_async_wait<0>();

#pragma unroll
  for (int j = 0; j < HeadsPerWarp; ++j) {
    const int local_head = first_local_head + warp * HeadsPerWarp + j;
    if (local_head >= group) continue;
    const int head = kv_head * group + local_head;
    const float inv_l = l[j] > 0.0f ? (Fp8 ? p.kv.value_scale : 1.0f) / l[j] : 0.0f;
    if (p.shares_are_outputs()) {
      __nv_bfloat16* out = p.out + (static_cast<int64_t>(token) * s.num_heads + head) * head_dim;
#pragma unroll
      for (int i = 0; i < L::kPairsPerLane; ++i) {
        const int d = 2 * lane + 64 * i;
        if (d < head_dim) {
          *reinterpret_cast<__nv_bfloat162*>(out + d) =
              __floats2bfloat162_rn(acc[j][i][0] * inv_l, acc[j][i][1] * inv_l);
        }
      }
      continue;
    }
    float* out = p.partial_out + (static_cast<int64_t>(item) * s.num_heads + head) * head_dim;
#pragma unroll
    for (int i = 0; i < L::kPairsPerLane; ++i) {
      const int d = 2 * lane + 64 * i;
      if (d < head_dim) *reinterpret_cast<float2*>(out + d) = make_float2(acc[j][i][0] * inv_l, acc[j][i][1] * inv_l);
    }
    if (lane == 0) p.partial_lse[item * s.num_heads + head] = l[j] > 0.0f ? m[j] + log2f(l[j]) : -INFINITY;
  }
}

template <int MaxDim, int HeadsPerWarp, bool Fp8>
void launch_chunks(const DecodeAttentionParams& params, cudaStream_t stream) {
  constexpr size_t smem = shared_bytes<MaxDim, HeadsPerWarp, Fp8>();
  auto kernel = chunk_kernel<MaxDim, HeadsPerWarp, Fp8>;
  if (smem > 48 * 1024) {
    const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) throw std::runtime_error(std::string("decode attention: ") + cudaGetErrorString(err));
  }
  const int group = params.shape.num_heads / params.shape.num_kv_heads;
  const int slices = (group + kNumWarps * HeadsPerWarp - 1) / (kNumWarps * HeadsPerWarp);
  const dim3 grid(params.num_items, params.shape.num_kv_heads, slices);
  launch_dependent("decode attention", kernel, grid, kNumWarps * 32, smem, stream, params);
}

template <int MaxDim, bool Fp8>
void launch_for_group(const DecodeAttentionParams& params, cudaStream_t stream) {
  const int group = params.shape.num_heads / params.shape.num_kv_heads;
  if (group <= kNumWarps) {
    launch_chunks<MaxDim, 1, Fp8>(params, stream);
  } else if (group <= 2 * kNumWarps) {
    launch_chunks<MaxDim, 2, Fp8>(params, stream);
  } else {
    launch_chunks<MaxDim, kMaxHeadsPerWarp, Fp8>(params, stream);
  }
}

}  // namespace decode

template <int MaxDim>
void launch_decode_attention_chunks(const DecodeAttentionParams& params, cudaStream_t stream) {
  if (params.kv.fp8()) {
    decode::launch_for_group<MaxDim, true>(params, stream);
  } else {
    decode::launch_for_group<MaxDim, false>(params, stream);
  }
}

}  // namespace tern::kernels
