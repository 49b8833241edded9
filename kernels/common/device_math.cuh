#pragma once
// Small device helpers shared by the kernels: bf16 vectors of 8 (one 16-byte access), e4m3, e2m1 and e8m0 codes to
// float32, warp reductions, and the PTX wrappers for asynchronous copies (cp.async, bulk copies on mbarriers),
// ldmatrix and the bf16 tensor-core mma.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cstdint>

namespace tern::kernels {

struct alignas(16) Bf16x8 {
  __nv_bfloat162 pair[4];
};

__device__ __forceinline__ void load_f32x8(const __nv_bfloat16* src, float (&out)[8]) {
  const Bf16x8 v = *reinterpret_cast<const Bf16x8*>(src);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(v.pair[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

__device__ __forceinline__ void store_f32x8(__nv_bfloat16* dst, const float (&in)[8]) {
  Bf16x8 v;
#pragma unroll
  for (int i = 0; i < 4; ++i) v.pair[i] = __floats2bfloat162_rn(in[2 * i], in[2 * i + 1]);
  *reinterpret_cast<Bf16x8*>(dst) = v;
}

// Two e4m3 codes (the low byte first) as two float16 in a register, exactly (every e4m3 value is a float16 value):
// one instruction on Hopper.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(__nv_fp8x2_storage_t codes) {
  const __half2_raw halves = __nv_cvt_fp8x2_to_halfraw2(codes, __NV_E4M3);
  return static_cast<uint32_t>(halves.x) | (static_cast<uint32_t>(halves.y) << 16);
}

// Two e4m3 codes as float32, through that float16 pair.
__device__ __forceinline__ float2 e4m3x2_to_float2(__nv_fp8x2_storage_t codes) {
  return __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(codes, __NV_E4M3)));
}

// 8 e4m3 codes (one 8-byte access) times `scale`, rounded to bf16 into dst[8] (16-byte aligned).
__device__ __forceinline__ void store_dequantized8(const uint2& codes, float scale, __nv_bfloat16* dst) {
  const auto* pairs = reinterpret_cast<const __nv_fp8x2_storage_t*>(&codes);
  float values[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = e4m3x2_to_float2(pairs[i]);
    values[2 * i] = f.x * scale;
    values[2 * i + 1] = f.y * scale;
  }
  store_f32x8(dst, values);
}

// 16 e4m3 codes (one 16-byte access) likewise into dst[16].
__device__ __forceinline__ void store_dequantized16(const uint4& codes, float scale, __nv_bfloat16* dst) {
  store_dequantized8(make_uint2(codes.x, codes.y), scale, dst);
  store_dequantized8(make_uint2(codes.z, codes.w), scale, dst + 8);
}

// An e8m0 scale (OCP MX: 2^(bits - 127), 0xff NaN) as float32; 2^-127 is a float32 subnormal.
__device__ __forceinline__ float e8m0_to_float(uint32_t bits) {
  if (bits == 0xffu) return __uint_as_float(0x7fffffffu);
  return __uint_as_float(bits == 0 ? 0x00400000u : bits << 23);
}

// Eight e2m1 codes (OCP MX FP4: +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}; element i in bits [4i, 4i + 4) of `codes`, the
// byte order of a packed row) times `scale`, as float32. The doubled magnitudes of codes 0-7 are whole numbers that
// fit a byte each, so one byte permute looks up four codes at once, without a table in memory.
__device__ __forceinline__ void e2m1x8_to_float8(uint32_t codes, float scale, float (&out)[8]) {
  constexpr uint32_t kDoubledLow = 0x03020100u;   // codes 0-3: 0, 1, 2, 3
  constexpr uint32_t kDoubledHigh = 0x0c080604u;  // codes 4-7: 4, 6, 8, 12
  const uint32_t doubled[2] = {__byte_perm(kDoubledLow, kDoubledHigh, codes & 0x7777u),
                               __byte_perm(kDoubledLow, kDoubledHigh, (codes >> 16) & 0x7777u)};
  const float half_scale = 0.5f * scale;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float magnitude = static_cast<float>((doubled[i / 4] >> (8 * (i % 4))) & 0xffu) * half_scale;
    out[i] = (codes >> (4 * i + 3)) & 1u ? -magnitude : magnitude;
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The sum of v over a block of Warps warps, on every thread. Once per kernel: the partials' shared memory is not
// fenced for a second call.
template <int Warps>
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[Warps];
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < Warps; ++w) total += partial[w];
  return total;
}

__device__ __forceinline__ float silu(float g) { return g / (1.0f + __expf(-g)); }

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// 16-byte global -> shared copy that bypasses registers; src_bytes 0 fills the destination with zeros.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, int src_bytes = 16) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes));
}
// The same for 8 and 4 bytes (through L1: cp.async.cg copies 16 only).
__device__ __forceinline__ void cp_async_8(void* smem, const void* gmem, int src_bytes = 8) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem, int src_bytes = 4) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// mbarriers: a phase completes when every expected arrival is in (and, for bulk copies, every announced byte has
// landed). Bulk copies (the copy engine, sm_90): a thread announces the bytes it will bring (arrive.expect_tx),
// the copy engine counts them in. try_wait.parity spins until the phase of the given parity is over.
__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_address(bar)), "r"(arrivals));
}
// Orders this thread's earlier generic-proxy shared-memory accesses (st.shared, cp.async) before later
// async-proxy ones (wgmma operand reads, bulk and tensor copies), and the reverse.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Makes initialized barriers visible to the copy engine; a __syncthreads must follow before their first use.
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  fence_proxy_async_shared();
}
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_address(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_address(bar)) : "memory");
}
// One arrival on `bar`, made when every cp.async this thread issued so far has landed (noinc: it counts against
// the arrivals the barrier was initialised with). The thread does not wait.
__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_address(bar)) : "memory");
}
__device__ __forceinline__ void mbarrier_wait_parity(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.b32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_address(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to shared memory, counted on `bar`.
__device__ __forceinline__ void bulk_copy_g2s(void* smem, const void* gmem, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          smem_address(smem)),
      "l"(gmem), "r"(bytes), "r"(smem_address(bar))
      : "memory");
}

// The box of a TMA tensor map (common/tensor_map.h; `map` a __grid_constant__ parameter's address) at element
// coordinates (x, y, z) into shared memory (1024-byte aligned for the 128-byte swizzle), counted on `bar`.
__device__ __forceinline__ void tensor_copy_3d_g2s(void* smem, const void* map, int x, int y, int z, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(smem_address(smem)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(z), "r"(smem_address(bar))
      : "memory");
}

// The same for a 2-d tensor map, the box at element coordinates (x, y).
__device__ __forceinline__ void tensor_copy_2d_g2s(void* smem, const void* map, int x, int y, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
      "[%4];\n" ::"r"(smem_address(smem)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(smem_address(bar))
      : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// D = A(16x16, row) * B(16x8, col) + D with bf16 inputs and float32 accumulators.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Two float16 in a register (lo in the low half), each the nearest value clamped to float16's finite range.
__device__ __forceinline__ uint32_t pack_f16x2_saturated(float lo, float hi) {
  constexpr float kMax = 65504.0f;
  const __half2 v = __floats2half2_rn(fminf(fmaxf(lo, -kMax), kMax), fminf(fmaxf(hi, -kMax), kMax));
  return *reinterpret_cast<const uint32_t*>(&v);
}

// D = A(16x16, row) * B(16x8, col) + D with float16 inputs and float32 accumulators.
__device__ __forceinline__ void mma_f16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace tern::kernels
