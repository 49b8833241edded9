#pragma once
// Prefill attention on Hopper's warpgroup MMA (wgmma.mma_async, sm_90a), FlashAttention-3's structure on the paged
// KV cache: causal with cached context, GQA, variable lengths, sliding window, sinks, the planned tile list;
// head_dim 64 and 128.
//
// One block of three warpgroups per (query tile of 128 rows, head):
// - warpgroup 2 produces: it gathers the keys and values of each 128-key tile through the block table with 16-byte
//   cp.async into a ring of stages (3 for head_dim 128: 3 x 64 KiB + 32 KiB of queries is what fits in 227 KiB;
//   4 for 64). Each producer thread makes one arrival on the stage's `kv_full` mbarrier through
//   cp.async.mbarrier.arrive.noinc, which fires when its copies have landed, so the producer never waits for its
//   own copies and keeps several tiles in flight; it waits only on `kv_empty` before refilling a stage. The block
//   table is read once per key and tile (lane l of warp w looks up key 32 w + l), and the row addresses are passed
//   by shuffles to the lanes that copy: 16 (8) lanes cover one 256-byte (128-byte) key row, so every request is
//   whole 32-byte sectors. It gives up registers (setmaxnreg) to the consumers.
// - warpgroups 0 and 1 consume, 64 query rows each (the m64 of wgmma). S = Q K^T is wgmma m64n128k16 with both
//   operands in shared memory (Q loaded once by the warpgroup itself; K as a K-major B); O += P V is m64nDk16 with
//   P from registers (the S accumulator converted to bf16 is the A fragment, see common/wgmma.cuh) and V as an
//   MN-major B (transpose bit). Shared tiles use the 128-byte swizzle (attention/smem_swizzle.h has the layout
//   and descriptor arithmetic, checked on the CPU by tests/kernels/attention/smem_swizzle_test.cpp).
// - Intra-warpgroup overlap (FlashAttention-3): in iteration i the warpgroup issues S_i = Q K_i^T, then
//   O += P_{i-1} V_{i-1}, waits for S_i only, and runs the masking and online softmax of tile i (log2 domain) on
//   the CUDA cores while the P V product of the previous tile still runs on the tensor cores; then it waits for
//   that, releases stage i-1, rescales O and packs P_i. The two consumer warpgroups run independently, which also
//   lets one's softmax overlap the other's GEMMs. A stage is held from S_i to the P V of tile i one iteration
//   later, hence three stages: tile i + 2 loads while tiles i and i + 1 are in use.
// - Memory ordering: cp.async writes go through the generic proxy, wgmma reads shared memory through the async
//   proxy; consumers run fence.proxy.async after acquiring a stage (and after loading Q) before their wgmmas.
// - 128-key tiles halve the per-key cost of the softmax reductions and barrier round trips against 64; a consumer
//   thread then holds S (64 floats), O (D / 2 floats) and P (32 registers), which fits without spills.
// - Not built: FlashAttention-3's inter-warpgroup "pingpong" (named barriers that order the two consumers' GEMMs so
//   that one's softmax always overlaps the other's GEMMs); 462 TFLOP/s at 8K tokens, head_dim 128, without it.
// - An FP8 cache (PagedKv::fp8): the producer brings a tile's e4m3 codes with cp.async into one of two staging
//   buffers (half a stage's bytes) while it converts the previous tile's into a bf16 stage (exactly: every e4m3
//   value is a bf16 value), so the consumers run unchanged; key_scale joins the score scale and value_scale
//   multiplies the output. The staging leaves room for two stages with head_dim 128 (three with 64), so a tile's
//   conversion can delay the consumers' next S by its own time.
// Rows past the sequence's end are computed on clamped positions and never stored.
#include <climits>
#include <cmath>
#include <stdexcept>
#include <string>

#include "attention/prefill_attention.h"
#include "attention/smem_swizzle.h"
#include "common/device_math.cuh"
#include "common/wgmma.cuh"

namespace tern::kernels {

namespace prefill_wgmma {

constexpr int kTileRows = kPrefillTileRows;
constexpr int kWarpgroupThreads = 128;
constexpr int kConsumers = 2;
constexpr int kRowsPerConsumer = kTileRows / kConsumers;  // 64: the M of one wgmma
constexpr int kThreads = (kConsumers + 1) * kWarpgroupThreads;
constexpr int kTileKeys = 128;
// 65,536 registers a block: 128 x 40 for the producer, 256 x 232 for the consumers (at most 64,512).
constexpr int kProducerRegisters = 40;
constexpr int kConsumerRegisters = 232;
constexpr float kLog2e = 1.4426950408889634f;
static_assert(kRowsPerConsumer == 64, "one m64 wgmma per consumer warpgroup");

template <int HeadDim, bool Fp8 = false>
struct Layout {
  static_assert(HeadDim == 64 || HeadDim == 128, "wgmma prefill is built for head_dim 64 and 128");
  static constexpr int kStages = (HeadDim == 128 ? 3 : 4) - (Fp8 ? 1 : 0);
  static constexpr uint32_t kQBytes = kTileRows * HeadDim * 2;
  static constexpr uint32_t kKvBytes = kTileKeys * HeadDim * 2;  // the keys (or the values) of one tile
  static constexpr uint32_t kStageBytes = 2 * kKvBytes;
  // FP8: a tile's codes, keys then values, rows of HeadDim bytes.
  static constexpr uint32_t kCodeBytes = Fp8 ? kTileKeys * HeadDim : 0;
  static constexpr uint32_t kStagingBytes = 2 * kCodeBytes;
  // Slack to round the dynamic shared memory base up to a swizzle atom.
  static constexpr size_t kSharedBytes =
      swizzle128::kAtomBytes + kQBytes + kStages * kStageBytes + 2 * kStagingBytes;
};

// Two e4m3 codes (the low byte first) as two bf16, exactly.
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(__nv_fp8x2_storage_t codes) {
  const float2 values = e4m3x2_to_float2(codes);
  return pack_bf16x2(values.x, values.y);
}

// O += P V over one tile: P_frag[kk] is the A fragment of keys 16 kk .. 16 kk + 15.
template <int HeadDim>
__device__ __forceinline__ void issue_pv(float (&o_acc)[HeadDim / 2], const uint32_t (&p_frag)[kTileKeys / 16][4],
                                         uint32_t v_address) {
#pragma unroll
  for (int kk = 0; kk < kTileKeys / 16; ++kk) {
    const uint64_t v_desc = swizzle128::mn_major_descriptor(v_address, kTileKeys, kk);
    if constexpr (HeadDim == 128) {
      wgmma_m64n128k16_rs(o_acc, p_frag[kk], v_desc);
    } else {
      wgmma_m64n64k16_rs(o_acc, p_frag[kk], v_desc);
    }
  }
}

template <int HeadDim, bool Fp8>
__global__ void __launch_bounds__(kThreads, 1) tile_kernel(const PrefillAttentionParams p) {
  using L = Layout<HeadDim, Fp8>;
  constexpr int kStages = L::kStages;
  constexpr int kChunksPerRow = HeadDim / 8;  // 16-byte chunks of a query or key row
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ uint64_t kv_full[kStages];   // a phase completes when the stage's keys and values have landed
  __shared__ uint64_t kv_empty[kStages];  // a phase completes when both consumers are done with the stage

  // Swizzle atoms must be 1024-byte aligned; the dynamic shared memory base is only promised 16 bytes.
  const uint32_t raw_address = smem_address(smem_raw);
  const uint32_t q_address = (raw_address + swizzle128::kAtomBytes - 1) & ~(swizzle128::kAtomBytes - 1);
  unsigned char* q_smem = smem_raw + (q_address - raw_address);  // [kTileRows x HeadDim], swizzled
  const uint32_t kv_address = q_address + L::kQBytes;  // stage s: keys at + s * kStageBytes, values kKvBytes on
  unsigned char* kv_smem = q_smem + L::kQBytes;
  unsigned char* staging = kv_smem + kStages * L::kStageBytes;  // FP8: buffer b at b * kStagingBytes

  const AttentionShape& s = p.shape;
  const int tile = blockIdx.x;
  const int head = blockIdx.y;
  const int kv_head = head / (s.num_heads / s.num_kv_heads);
  const int seq = p.tile_seq[tile];
  const int row0 = p.tile_row[tile];
  const int seq_first_token = p.batch.cu_seqlens[seq];
  const int num_new = p.batch.cu_seqlens[seq + 1] - seq_first_token;
  const int num_cached = p.batch.num_cached_tokens[seq];
  const int num_rows = min(kTileRows, num_new - row0);
  const int min_qpos = num_cached + row0;
  const int max_qpos = min_qpos + num_rows - 1;
  const int kv_end = max_qpos + 1;
  const int kv_begin = s.sliding_window > 0 ? max(0, min_qpos - s.sliding_window + 1) : 0;
  const int first_kv_tile = kv_begin / kTileKeys;
  const int num_kv_tiles = (kv_end + kTileKeys - 1) / kTileKeys - first_kv_tile;  // at least 1

  if (threadIdx.x == 0) {
    for (int stage = 0; stage < kStages; ++stage) {
      mbarrier_init(&kv_full[stage], kWarpgroupThreads);
      mbarrier_init(&kv_empty[stage], kConsumers * kWarpgroupThreads);
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / kWarpgroupThreads;
  const int warp = threadIdx.x % kWarpgroupThreads / 32;  // within the warpgroup
  const int lane = threadIdx.x % 32;

  if (Fp8 && warpgroup == kConsumers) {
    // FP8 producer: the codes of tile i + 1 come in (cp.async, a key row of HeadDim / 16 chunks) while tile i's are
    // converted into its stage; thread t converts the tile's 16-byte code chunks t, t + 128, ...
    setmaxnreg_dec<kProducerRegisters>();
    constexpr int kCodeChunks = HeadDim / 16;  // per key row
    constexpr int kRowsPerPass = 32 / kCodeChunks;
    const int chunk = lane % kCodeChunks;
    const int tid = threadIdx.x % kWarpgroupThreads;
    const auto fetch = [&](int i) {
      if (i < num_kv_tiles) {
        const int pos = (first_kv_tile + i) * kTileKeys + warp * 32 + lane;
        const bool valid = pos >= kv_begin && pos < kv_end;
        const int64_t key_row = valid ? p.kv.row(seq, pos, s.num_kv_heads, kv_head) * HeadDim : -1;
        unsigned char* k_codes = staging + (i % 2) * L::kStagingBytes;
#pragma unroll
        for (int pass = 0; pass < 32 / kRowsPerPass; ++pass) {
          const int key_in_warp = pass * kRowsPerPass + lane / kCodeChunks;
          const int64_t row = __shfl_sync(0xffffffffu, key_row, key_in_warp);
          const int offset = (warp * 32 + key_in_warp) * HeadDim + chunk * 16;
          const int64_t src = row < 0 ? 0 : row + chunk * 16;
          const int bytes = row < 0 ? 0 : 16;
          cp_async_16(k_codes + offset, p.kv.key_codes + src, bytes);
          cp_async_16(k_codes + L::kCodeBytes + offset, p.kv.value_codes + src, bytes);
        }
      }
      cp_async_commit();  // empty groups too, so that every iteration waits for the same count
    };
    fetch(0);
    for (int i = 0; i < num_kv_tiles; ++i) {
      named_barrier_sync(3, kWarpgroupThreads);  // tile i - 1's codes are converted: its buffer takes tile i + 1
      fetch(i + 1);
      cp_async_wait<1>();
      named_barrier_sync(3, kWarpgroupThreads);  // every thread's copies of tile i have landed
      const int stage = i % kStages;
      mbarrier_wait_parity(&kv_empty[stage], ((i / kStages) & 1) ^ 1);
      const unsigned char* codes = staging + (i % 2) * L::kStagingBytes;
      unsigned char* k_stage = kv_smem + stage * L::kStageBytes;
      for (int c = tid; c < 2 * kTileKeys * kCodeChunks; c += kWarpgroupThreads) {
        const bool values = c >= kTileKeys * kCodeChunks;
        const int in_tensor = values ? c - kTileKeys * kCodeChunks : c;
        const int key = in_tensor / kCodeChunks, code_chunk = in_tensor % kCodeChunks;
        const uint4 in = *reinterpret_cast<const uint4*>(codes + (values ? L::kCodeBytes : 0) + key * HeadDim +
                                                         code_chunk * 16);
        const uint32_t words[4] = {in.x, in.y, in.z, in.w};
        uint32_t out[8];
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          out[2 * w] = e4m3x2_to_bf16x2(static_cast<uint16_t>(words[w]));
          out[2 * w + 1] = e4m3x2_to_bf16x2(static_cast<uint16_t>(words[w] >> 16));
        }
        unsigned char* dst = k_stage + (values ? L::kKvBytes : 0);
        *reinterpret_cast<uint4*>(dst + swizzle128::chunk_offset(kTileKeys, key, 2 * code_chunk)) =
            make_uint4(out[0], out[1], out[2], out[3]);
        *reinterpret_cast<uint4*>(dst + swizzle128::chunk_offset(kTileKeys, key, 2 * code_chunk + 1)) =
            make_uint4(out[4], out[5], out[6], out[7]);
      }
      fence_proxy_async_shared();  // the stores before the consumers' wgmma reads
      mbarrier_arrive(&kv_full[stage]);
    }
    cp_async_wait<0>();
    return;
  }
  if (warpgroup == kConsumers) {
    // Producer. Lane l of warp w looks up key 32 w + l of each tile; a pass copies kRowsPerPass of the warp's 32
    // keys, kChunksPerRow lanes a row.
    setmaxnreg_dec<kProducerRegisters>();
    constexpr int kRowsPerPass = 32 / kChunksPerRow;
    const int chunk = lane % kChunksPerRow;
    for (int i = 0; i < num_kv_tiles; ++i) {
      const int stage = i % kStages;
      // Round r of a stage waits for the consumers' release of round r - 1 (parity 1 passes at once in round 0).
      mbarrier_wait_parity(&kv_empty[stage], ((i / kStages) & 1) ^ 1);
      const int pos = (first_kv_tile + i) * kTileKeys + warp * 32 + lane;
      // Keys outside [kv_begin, kv_end) are masked for every row, and a sliding-window group's table holds -1
      // for blocks it freed: they are zero-filled, never read.
      const bool valid = pos >= kv_begin && pos < kv_end;
      const int64_t key_row = valid ? p.kv.row(seq, pos, s.num_kv_heads, kv_head) * HeadDim : -1;
      unsigned char* k_stage = kv_smem + stage * L::kStageBytes;
      unsigned char* v_stage = k_stage + L::kKvBytes;
#pragma unroll
      for (int pass = 0; pass < 32 / kRowsPerPass; ++pass) {
        const int key_in_warp = pass * kRowsPerPass + lane / kChunksPerRow;
        const int64_t row = __shfl_sync(0xffffffffu, key_row, key_in_warp);
        const uint32_t offset = swizzle128::chunk_offset(kTileKeys, warp * 32 + key_in_warp, chunk);
        const int64_t src = row < 0 ? 0 : row + chunk * 8;
        const int bytes = row < 0 ? 0 : 16;
        cp_async_16(k_stage + offset, p.kv.keys + src, bytes);
        cp_async_16(v_stage + offset, p.kv.values + src, bytes);
      }
      cp_async_mbarrier_arrive_noinc(&kv_full[stage]);
    }
    cp_async_commit();
    cp_async_wait<0>();
    return;
  }

  // Consumer warpgroup: query rows [wg_row, wg_row + 64) of the tile.
  setmaxnreg_inc<kConsumerRegisters>();
  const int tid = threadIdx.x % kWarpgroupThreads;
  const int quad_row = lane / 4;
  const int quad_col = lane % 4;
  const int wg_row = warpgroup * kRowsPerConsumer;

  for (int i = tid; i < kRowsPerConsumer * kChunksPerRow; i += kWarpgroupThreads) {
    const int r = wg_row + i / kChunksPerRow;
    const int c = i % kChunksPerRow;
    const bool valid = r < num_rows;
    const __nv_bfloat16* src =
        valid ? p.query + (static_cast<int64_t>(seq_first_token + row0 + r) * s.num_heads + head) * HeadDim + c * 8
              : p.query;
    cp_async_16(q_smem + swizzle128::chunk_offset(kTileRows, r, c), src, valid ? 16 : 0);
  }
  cp_async_commit();
  cp_async_wait<0>();
  fence_proxy_async_shared();
  named_barrier_sync(1 + warpgroup, kWarpgroupThreads);

  const float score_scale = s.scale * kLog2e * (Fp8 ? p.kv.key_scale : 1.0f);
  // This thread's two rows of the accumulators (see common/wgmma.cuh); rows past the sequence reuse the last
  // row's position so that their softmax stays finite.
  const int row_in_tile[2] = {wg_row + warp * 16 + quad_row, wg_row + warp * 16 + quad_row + 8};
  const int qpos[2] = {min(min_qpos + row_in_tile[0], max_qpos), min(min_qpos + row_in_tile[1], max_qpos)};
  // The first key each row sees (sliding window), or any key.
  const int sliding_window = s.sliding_window;
  const int first_visible[2] = {sliding_window > 0 ? qpos[0] - sliding_window + 1 : INT_MIN,
                                sliding_window > 0 ? qpos[1] - sliding_window + 1 : INT_MIN};
  const int wg_min_qpos = min(min_qpos + wg_row, max_qpos);
  const int wg_max_qpos = min(min_qpos + wg_row + kRowsPerConsumer - 1, max_qpos);

  float o_acc[HeadDim / 2];
  float s_acc[kTileKeys / 2];
  uint32_t p_frag[kTileKeys / 16][4];
#pragma unroll
  for (int i = 0; i < HeadDim / 2; ++i) o_acc[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < kTileKeys / 2; ++i) s_acc[i] = 0.0f;
  float row_max[2], row_sum[2];
  const float sink = s.sinks ? s.sinks[head] * kLog2e : -INFINITY;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    row_max[h] = sink;
    row_sum[h] = (s.sinks && quad_col == 0) ? 1.0f : 0.0f;  // the sink's weight, counted once per row
  }

  // S = Q K^T of tile i into s_acc.
  auto issue_s = [&](int i) {
    const int stage = i % kStages;
    const uint32_t k_address = kv_address + stage * L::kStageBytes;
    mbarrier_wait_parity(&kv_full[stage], (i / kStages) & 1);
    fence_proxy_async_shared();
    __syncwarp();  // lanes may leave the wait loop apart; the .aligned wgmma instructions need the warp together
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < HeadDim / 16; ++kk) {
      wgmma_m64n128k16_ss(s_acc, swizzle128::k_major_descriptor(q_address, kTileRows, wg_row, kk),
                          swizzle128::k_major_descriptor(k_address, kTileKeys, 0, kk), kk > 0);
    }
    wgmma_commit();
  };
  auto issue_pv_of = [&](int i) {
    issue_pv<HeadDim>(o_acc, p_frag, kv_address + i % kStages * L::kStageBytes + L::kKvBytes);
    wgmma_commit();
  };
  // Masks tile i's scores, turns them into probabilities relative to the new row maxima, updates the row sums, and
  // sets `correction` to the factor that rescales the rows' earlier outputs.
  auto online_softmax = [&](int i, float (&correction)[2]) {
    const int first_key = (first_kv_tile + i) * kTileKeys;
    const bool needs_mask = first_key + kTileKeys - 1 > wg_min_qpos ||
                            (sliding_window > 0 && first_key <= wg_max_qpos - sliding_window);
    if (needs_mask) {
#pragma unroll
      for (int n = 0; n < kTileKeys / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = first_key + n * 8 + 2 * quad_col + (e & 1);
          const bool visible = key >= first_visible[e / 2] && key <= qpos[e / 2];
          s_acc[4 * n + e] = visible ? s_acc[4 * n + e] * score_scale : -INFINITY;
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < kTileKeys / 2; ++j) s_acc[j] *= score_scale;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = row_max[h];
#pragma unroll
      for (int n = 0; n < kTileKeys / 8; ++n) mx = fmaxf(mx, fmaxf(s_acc[4 * n + 2 * h], s_acc[4 * n + 2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float safe = mx == -INFINITY ? 0.0f : mx;
      correction[h] = fast_exp2(row_max[h] - safe);
      row_max[h] = mx;
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < kTileKeys / 8; ++n) {
        s_acc[4 * n + 2 * h] = fast_exp2(s_acc[4 * n + 2 * h] - safe);
        s_acc[4 * n + 2 * h + 1] = fast_exp2(s_acc[4 * n + 2 * h + 1] - safe);
        sum += s_acc[4 * n + 2 * h] + s_acc[4 * n + 2 * h + 1];
      }
      row_sum[h] = row_sum[h] * correction[h] + sum;
    }
  };
  auto pack_p = [&] {
#pragma unroll
    for (int kk = 0; kk < kTileKeys / 16; ++kk) {
      p_frag[kk][0] = pack_bf16x2(s_acc[8 * kk], s_acc[8 * kk + 1]);
      p_frag[kk][1] = pack_bf16x2(s_acc[8 * kk + 2], s_acc[8 * kk + 3]);
      p_frag[kk][2] = pack_bf16x2(s_acc[8 * kk + 4], s_acc[8 * kk + 5]);
      p_frag[kk][3] = pack_bf16x2(s_acc[8 * kk + 6], s_acc[8 * kk + 7]);
    }
  };

  // Tile 0: nothing to overlap with yet, and O is still zero.
  float correction[2];
  issue_s(0);
  wgmma_wait<0>();
  wgmma_fence_operands(s_acc);
  online_softmax(0, correction);
  pack_p();
  for (int i = 1; i < num_kv_tiles; ++i) {
    issue_s(i);
    issue_pv_of(i - 1);
    wgmma_wait<1>();  // S_i is done; P_{i-1} V_{i-1} may still run
    wgmma_fence_operands(s_acc);
    online_softmax(i, correction);
    wgmma_wait<0>();
    wgmma_fence_operands(o_acc);
    mbarrier_arrive(&kv_empty[(i - 1) % kStages]);
#pragma unroll
    for (int j = 0; j < HeadDim / 8; ++j) {
      o_acc[4 * j] *= correction[0];
      o_acc[4 * j + 1] *= correction[0];
      o_acc[4 * j + 2] *= correction[1];
      o_acc[4 * j + 3] *= correction[1];
    }
    pack_p();
  }
  // The last tile's P V; its stage needs no release.
  wgmma_fence();
  issue_pv_of(num_kv_tiles - 1);
  wgmma_wait<0>();
  wgmma_fence_operands(o_acc);

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);
    row_sum[h] = row_sum[h] > 0.0f ? (Fp8 ? p.kv.value_scale : 1.0f) / row_sum[h] : 0.0f;
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = row_in_tile[h];
    if (r >= num_rows) continue;
    __nv_bfloat16* out = p.out + (static_cast<int64_t>(seq_first_token + row0 + r) * s.num_heads + head) * HeadDim;
#pragma unroll
    for (int j = 0; j < HeadDim / 8; ++j) {
      *reinterpret_cast<__nv_bfloat162*>(out + j * 8 + 2 * quad_col) =
          __floats2bfloat162_rn(o_acc[4 * j + 2 * h] * row_sum[h], o_acc[4 * j + 2 * h + 1] * row_sum[h]);
    }
  }
}

}  // namespace prefill_wgmma

template <int HeadDim, bool Fp8>
void launch_prefill_attention_tiles(const PrefillAttentionParams& params, cudaStream_t stream) {
  constexpr size_t smem = prefill_wgmma::Layout<HeadDim, Fp8>::kSharedBytes;
  auto kernel = prefill_wgmma::tile_kernel<HeadDim, Fp8>;
  const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) throw std::runtime_error(std::string("prefill attention (wgmma): ") + cudaGetErrorString(err));
  const dim3 grid(params.num_tiles, params.shape.num_heads);
  kernel<<<grid, prefill_wgmma::kThreads, smem, stream>>>(params);
}

template <int HeadDim>
void launch_prefill_attention_wgmma(const PrefillAttentionParams& params, cudaStream_t stream) {
  if (params.kv.fp8()) {
    launch_prefill_attention_tiles<HeadDim, true>(params, stream);
  } else {
    launch_prefill_attention_tiles<HeadDim, false>(params, stream);
  }
}

}  // namespace tern::kernels
