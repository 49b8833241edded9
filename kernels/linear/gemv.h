#pragma once
// out [1, N] = x [1, K] * weight [N, K]^T (+ bias [N]) for batch-1 decode, bf16 in and out with float32 sums: a
// warp per weight row keeps every row's loads in flight at once, the block's warps share x from shared memory.
// Measured against cuBLASLt at M = 1 on the 8B decode shapes (bench/linear_bench, docs/BENCHMARKS.md) it was
// faster on each; at M = 4 slower, so it takes one row only.
// At batch 1 a kernel between two GEMVs costs a few microseconds, mostly waiting, so the GEMV also does the work of
// the small kernels around it: the block's pre-norm (residual add and RMSNorm) while it loads x, and in its
// epilogue the MLP's SiLU-and-mul or the attention's RoPE and KV-cache write. For those a block's 16 warps take 8
// pairs of rows that the epilogue combines: gate row i with up row i, or a head's rotary dims d and d + D / 2.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "elementwise/rope_kv.h"
#include "linear/block_fp8.h"

namespace tern::kernels {

enum class GemvOutput {
  plain,
  // weight is [gate; up] ([2I, K]) and out [I] = silu(gate row sums) * (up row sums), each sum rounded to bf16
  // first, as silu_mul computes from a bf16 gate_up.
  silu_mul,
  // weight is [q; k; v] (heads of rope.rotary_dim = kv.key_dim = kv.value_dim, rotate-half), one token: out holds
  // q and k rotated by RoPE at the token's position, and v; k and v also go to the token's cache slot (kv.slots,
  // kv.key_cache, kv.value_cache; kv.key and kv.value are not read), as rope_store_kv writes them.
  rope_kv,
};

struct GemvParams {
  const __nv_bfloat16* x = nullptr;       // [K]
  const __nv_bfloat16* weight = nullptr;  // [N, K], or null for a block-FP8 weight
  // A block-FP8 weight instead, [N, K] (W8A16: each code times its block's scale in float32, x as it is).
  BlockFp8Codes fp8;
  const __nv_bfloat16* bias = nullptr;    // [N] or null
  __nv_bfloat16* out = nullptr;           // [N], or [N / 2] for silu_mul
  int n = 0;
  int k = 0;
  // Pre-norm, when norm_weight is set: the product's input is rms_norm(x + addend) * norm_weight, where x + addend
  // is rounded to bf16 as the residual stream stores it (addend optional) and written to residual_out when an
  // addend is given.
  const __nv_bfloat16* addend = nullptr;       // [K] or null
  const __nv_bfloat16* norm_weight = nullptr;  // [K] or null
  __nv_bfloat16* residual_out = nullptr;       // [K]; not x (other blocks still read x)
  float eps = 1e-6f;
  GemvOutput output = GemvOutput::plain;
  RopeSpec rope;      // rope_kv
  KvWriteParams kv;   // rope_kv
  int num_q_rows = 0;  // rope_kv: q's rows of the weight, the rest is k then v
  // Lets the next kernel start only once every block has finished, not as soon as every block has started. Set it
  // on a GEMV of several waves that another GEMV follows: the follower started during the last wave ran several
  // microseconds slower (docs/BENCHMARKS.md).
  bool trigger_at_end = false;
};

// Whether a shape fits the kernel: M = 1, K a multiple of 8 whose x fits 48 KB of shared memory. Pointers must be
// 16-byte aligned. The paired outputs also need their own check below.
bool gemv_supports(int64_t m, int64_t n, int64_t k);
// The same for a block-FP8 weight, whose rows are read 16 codes at a time: K also a multiple of 16.
bool gemv_supports_fp8(int64_t m, int64_t n, int64_t k);
// silu_mul: N / 2 a multiple of 8.
bool gemv_supports_silu_mul(int64_t n);
// rope_kv: whole heads of a key dim that is a multiple of 16, values as wide as keys (N = q rows + 2 x KV heads x
// key dim) and rotate-half RoPE over the whole head.
bool gemv_supports_rope_kv(int64_t n, int64_t num_q_rows, int64_t num_kv_heads, int64_t key_dim, int64_t value_dim,
                           const RopeSpec& rope);

// Throws std::invalid_argument on shapes or an output the kernel does not support.
void launch_gemv(const GemvParams& params, cudaStream_t stream);

// out [1, N] in float32 = x [1, K] * weight [N, K]^T for few long rows: a block per weight row, its threads along K.
// A warp per row (launch_gemv) keeps most SMs idle when N is tens and K long, as in DeepSeek-V4's hyper-connection
// mixes (24 rows of 16,384) and routers (64 of 4,096), where cuBLAS splits K over two kernels.
// With norm_weight [K], x is RMS-normalized first: out = weight * (x * norm_weight) / sqrt(mean(x^2) + eps), in
// float32 throughout (the mixes of the streams' norm in DeepSeek-V4's hyper-connections).
bool skinny_gemv_f32_supports(int64_t m, int64_t n, int64_t k);
void launch_skinny_gemv_f32(const __nv_bfloat16* x, const __nv_bfloat16* weight, float* out, int n, int k,
                            cudaStream_t stream, const __nv_bfloat16* norm_weight = nullptr, float eps = 0.0f);

}  // namespace tern::kernels
