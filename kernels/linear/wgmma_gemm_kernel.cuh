#pragma once
// The GEMM on TMA and wgmma behind the block-FP8 GEMM (fp8_gemm.h: e4m3 operands, scales per 128-deep slice) and
// the bf16 one (bf16_gemm.h), dense and grouped (MoE experts). A slice of K is 128 bytes in both (128 e4m3 codes or
// 64 bf16 values), so the tiles, the TMA boxes, the swizzle and the wgmma descriptors are the same bytes; only the
// instruction (m64n128k32 e4m3 or m64n128k16 bf16, each 32 bytes of K) and what happens between slices differ.
//
// DeepGEMM's structure (deepseek-ai/DeepGEMM, fp8_gemm.cuh), written from its description:
// - Warp specialization: a producer warpgroup, of which one thread issues TMA copies of x's and the weight's slice
//   tiles into a ring of stages (full / empty mbarriers), and one or two consumer warpgroups of 64 rows each that run
//   the wgmmas. The consumers never wait for a copy they issued.
// - Block FP8, promotion: per slice a consumer issues four wgmmas into a fresh partial sum and adds the partial sum
//   times its row's x scale and its block's weight scale into float32 accumulators: the scales change every 128
//   columns of K, so they cannot be applied after the sum. Two partial sums take the slices in turn, so that one
//   slice's promotion on the CUDA cores runs while the next slice's wgmmas run (DeepGEMM waits for each slice's
//   wgmmas before promoting them, and its two consumers' drift hides part of the wait: on 128 x 256 tiles that
//   reached half the tensor pipe, docs/BENCHMARKS.md). The producer warp's lanes copy a slice's scales into its
//   stage with cp.async (DeepGEMM brings x's by TMA), and each lane's arrival on the stage waits for its copies:
//   loaded by the consumers beside the slice's wgmmas, the scales held up the promotion of the slice before for
//   longer than the wgmmas ran, and a producer that waited for them handed out stages too slowly (Nsight Compute's
//   samples, 8192^3).
// - bf16: the wgmmas accumulate straight into the accumulators, and a slice's stage is released once the next
//   slice's wgmmas are issued (one group in flight), so the tensor cores never wait on the loop.
// - Persistent blocks, one an SM: each takes the units (wgmma_gemm_schedule.h) gridDim.x apart, so that the
//   producer fetches the next tile's slices while the consumers store the last one's outputs.
// - Split-K for few output tiles (block FP8 only: bf16 products of few rows go to cuBLAS): a unit is then a tile and
//   a range of K slices, written in float32 to a workspace; reduce_splits adds the ranges up.
// - Grouped products (group_rows): every group's tiles in one launch; the blocks count each group's m tiles from
//   its rows once, into shared memory, and skip the units past them.
// - A consumer warpgroup whose 64 rows of a tile lie past its group's (a group's last tile, half used) issues no
//   wgmmas: it only hands the stages back, and the tensor cores run the other's alone.
// Tiles are 128 weight rows (n; bf16 also 256, wgmma_gemm_schedule.h says where) by 64 x consumers rows of x (m);
// TMA's zero fill covers partial tiles and slices.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <cub/block/block_scan.cuh>

#include "attention/smem_swizzle.h"
#include "common/dependent_launch.cuh"
#include "common/device_math.cuh"
#include "common/tensor_map.h"
#include "common/wgmma.cuh"
#include "linear/bf16_gemm.h"
#include "linear/fp8_gemm.h"
#include "linear/wgmma_gemm_schedule.h"

namespace tern::kernels::wgmma_gemm {

constexpr int kWarpgroupThreads = 128;
// 65,536 registers an SM: 128 x 40 for the producer, 256 x 232 for two consumers. (setmaxnreg.inc waits for the
// registers the producer frees: a producer that kept more than 40 would leave the consumers waiting for ever.)
constexpr int kProducerRegisters = 40;
constexpr int kConsumerRegisters = 232;

template <int Consumers, int TileN>
struct Config {
  static constexpr int kTileM = 64 * Consumers;
  static constexpr int kTileN = TileN;
  static constexpr int kAccumulators = TileN / 2;  // a thread's floats of its warpgroup's 64 x TileN outputs
  static constexpr int kThreads = (Consumers + 1) * kWarpgroupThreads;
  static constexpr uint32_t kXBytes = kTileM * kTileK;
  static constexpr uint32_t kWBytes = TileN * kTileK;
  static constexpr uint32_t kStageBytes = kXBytes + kWBytes;
  static constexpr int kStages = 192 * 1024 / kStageBytes;  // 4 to 8 stages
  // Block FP8: a stage's scales after all stages' tiles, x's of the tile's rows then the weight's block's.
  static constexpr int kScaleFloats = kTileM + 1;
  static constexpr size_t kSmemBytes =
      swizzle128::kAtomBytes + kStages * kStageBytes + kStages * kScaleFloats * sizeof(float);
};

template <typename Params>
constexpr bool kBlockScaled = std::is_same_v<Params, Fp8GemmParams>;
// Whether a product may take kWideTileN weight rows a tile (wgmma_gemm_schedule.h): bf16 only, block FP8's registers
// hold a second partial sum instead. fp8_gemm_workspace_floats sizes split-K by the same schedule.
template <typename Params>
constexpr bool kWideTiles = !kBlockScaled<Params>;

// v plus the bias of output column `column` of group `group`'s weight (none without a bias).
template <typename Params>
__device__ __forceinline__ float with_bias(const Params& p, int group, int column, float v) {
  if (!p.bias) return v;
  const int64_t at = static_cast<int64_t>(group) * p.n + column;
  return v + (p.f32_out ? static_cast<const float*>(p.bias)[at]
                        : __bfloat162float(static_cast<const __nv_bfloat16*>(p.bias)[at]));
}

__device__ __forceinline__ void store(float* dst, float v) { *dst = v; }
__device__ __forceinline__ void store(__nv_bfloat16* dst, float v) { *dst = __float2bfloat16(v); }
// Two adjacent outputs at dst: one aligned store where `pair` (every row even), else one or (`second`) two.
__device__ __forceinline__ void store_two(float* dst, float v0, float v1, bool pair, bool second) {
  if (pair) {
    *reinterpret_cast<float2*>(dst) = make_float2(v0, v1);
  } else {
    store(dst, v0);
    if (second) store(dst + 1, v1);
  }
}
__device__ __forceinline__ void store_two(__nv_bfloat16* dst, float v0, float v1, bool pair, bool second) {
  if (pair) {
    *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(v0, v1);
  } else {
    store(dst, v0);
    if (second) store(dst + 1, v1);
  }
}

// Waits for iteration's stage and issues its slice's four wgmmas (32 bytes of K each) into d as one group: e4m3
// into a fresh partial sum (Fp8), bf16 added to d. Returns the stage.
template <typename C, bool Fp8, int N>
__device__ __forceinline__ int issue_slice(uint32_t base, uint64_t* full, int iteration, float (&d)[N]) {
  static_assert(N == C::kAccumulators, "the tile's columns");
  static_assert(!Fp8 || C::kTileN == 128, "a block-FP8 slice's partial sum is one block of 128 weight rows");
  const int stage = iteration % C::kStages;
  mbarrier_wait_parity(&full[stage], (iteration / C::kStages) & 1);
  const uint32_t x_tile = base + stage * C::kStageBytes;
  const uint32_t w_tile = x_tile + C::kXBytes;
  const int warpgroup = threadIdx.x / kWarpgroupThreads;
  wgmma_fence();
#pragma unroll
  for (int step = 0; step < kTileK / 32; ++step) {
    const uint64_t x_desc = swizzle128::k_major_descriptor(x_tile, C::kTileM, 64 * warpgroup, step);
    const uint64_t w_desc = swizzle128::k_major_descriptor(w_tile, C::kTileN, 0, step);
    if constexpr (Fp8) {
      wgmma_m64n128k32_e4m3_ss(d, x_desc, w_desc, step > 0);
    } else if constexpr (C::kTileN == 256) {
      wgmma_m64n256k16_ss(d, x_desc, w_desc, 1);
    } else {
      wgmma_m64n128k16_ss(d, x_desc, w_desc, 1);
    }
  }
  wgmma_commit();
  return stage;
}

// The slices of a unit whose rows for this warpgroup are all past its group's: each stage goes back once it has
// landed (every warp's arrival completes a stage's phase; arriving before the copy could count in an earlier one).
template <typename C>
__device__ __forceinline__ void pass_slices(const UnitTile& tile, uint64_t* full, uint64_t* empty, int& iteration) {
  for (int slice = tile.first_slice; slice < tile.end_slice; ++slice, ++iteration) {
    const int stage = iteration % C::kStages;
    mbarrier_wait_parity(&full[stage], (iteration / C::kStages) & 1);
    if (threadIdx.x % 32 == 0) mbarrier_arrive(&empty[stage]);
  }
}

// Block FP8: the scales of a unit's slice, copied into its stage's by the producer warp's lanes: x's of the tile's
// rows (0 past its group's) and the weight's of its block of 128 rows. The copies are asynchronous and each lane's
// arrival on the stage's full barrier waits for its own: a producer that waited for the loads from global memory
// would hand out a stage no faster than their latency, longer than a slice's wgmmas run.
template <typename C>
__device__ __forceinline__ void copy_stage_scales(const Fp8GemmParams& p, const Schedule& schedule,
                                                  const UnitTile& tile, int slice, int lane, float* scales,
                                                  uint64_t* full) {
  // The tile's rows' scales: x_scales[row] from `x_scales` (each group's own [slices, rows] layout).
  const int64_t x_scale_stride = p.group_rows ? tile.row_end - tile.group_row0 : p.x_scale_stride;
  const float* x_scales = p.x_scales + static_cast<int64_t>(tile.group_row0) * schedule.slices +
                          slice * x_scale_stride - tile.group_row0;
  for (int i = lane; i < C::kTileM; i += 32) {
    const int row = tile.m0 + i;
    const bool inside = row < tile.row_end;
    cp_async_4(scales + i, x_scales + (inside ? row : tile.m0), inside ? 4 : 0);
  }
  if (lane == 0) {
    cp_async_4(scales + C::kTileM, p.weight.scales + tile.group * p.group_weight_scales +
                                       static_cast<int64_t>(tile.n0 / 128) * p.weight.scale_stride + slice);
  }
  cp_async_mbarrier_arrive_noinc(full);
}

// A block-FP8 unit's slices (a tile of 128 weight rows: one block of the weight's scales), into two partial sums in
// turn: slice s + 1's wgmmas run while slice s's partial sum is promoted with its row's x scale and its block's
// weight scale into the accumulators, so that the tensor cores never wait for the promotion. (A 256-row tile would
// have no registers for a second partial sum beside its 128 accumulators.) The loop is written out for both
// partial sums: registers cannot be indexed by a variable, and ptxas serializes the wgmmas (C7514) where it cannot
// tell which partial sum is in flight.
template <typename C>
__device__ __forceinline__ void scaled_slices(const UnitTile& tile, int row, uint32_t base, const float* stage_scales,
                                              uint64_t* full, uint64_t* empty, int& iteration,
                                              float (&acc)[C::kAccumulators]) {
  const int lane = threadIdx.x % 32;
  // A slice's scales, read from its stage (the producer warp copied them: a load from global memory here would
  // stall the promotion of the slice before for longer than a slice's wgmmas run).
  const auto scales = [&](int stage, float& lo, float& hi) {
    const float* scales = stage_scales + stage * C::kScaleFloats;
    lo = scales[row - tile.m0] * scales[C::kTileM];
    hi = scales[row + 8 - tile.m0] * scales[C::kTileM];
  };
  const auto promote = [&](float (&partial)[64], int stage, float lo, float hi) {
    wgmma_fence_operands(partial);
    if (lane == 0) mbarrier_arrive(&empty[stage]);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      acc[4 * j] += partial[4 * j] * lo;
      acc[4 * j + 1] += partial[4 * j + 1] * lo;
      acc[4 * j + 2] += partial[4 * j + 2] * hi;
      acc[4 * j + 3] += partial[4 * j + 3] * hi;
    }
  };
  float partial0[64], partial1[64];
  float lo0, hi0, lo1, hi1;
  int slice = tile.first_slice;
  int stage0 = issue_slice<C, true>(base, full, iteration++, partial0);
  scales(stage0, lo0, hi0);
  ++slice;
  while (true) {
    if (slice == tile.end_slice) {
      wgmma_wait<0>();
      promote(partial0, stage0, lo0, hi0);
      return;
    }
    const int stage1 = issue_slice<C, true>(base, full, iteration++, partial1);
    scales(stage1, lo1, hi1);
    ++slice;
    wgmma_wait<1>();
    promote(partial0, stage0, lo0, hi0);
    if (slice == tile.end_slice) {
      wgmma_wait<0>();
      promote(partial1, stage1, lo1, hi1);
      return;
    }
    stage0 = issue_slice<C, true>(base, full, iteration++, partial0);
    scales(stage0, lo0, hi0);
    ++slice;
    wgmma_wait<1>();
    promote(partial1, stage1, lo1, hi1);
  }
}

// A bf16 unit's slices, accumulated in place: slice s's stage goes back to the producer once slice s + 1's wgmmas
// are issued and slice s's have completed.
template <typename C>
__device__ __forceinline__ void plain_slices(const UnitTile& tile, uint32_t base, uint64_t* full, uint64_t* empty,
                                             int& iteration, float (&acc)[C::kAccumulators]) {
  const int lane = threadIdx.x % 32;
  int held = -1;  // the stage whose wgmmas may still be running
  for (int slice = tile.first_slice; slice < tile.end_slice; ++slice, ++iteration) {
    const int stage = issue_slice<C, false>(base, full, iteration, acc);
    wgmma_wait<1>();
    if (held >= 0 && lane == 0) mbarrier_arrive(&empty[held]);
    held = stage;
  }
  wgmma_wait<0>();
  wgmma_fence_operands(acc);
  if (held >= 0 && lane == 0) mbarrier_arrive(&empty[held]);
}

template <int Consumers, int TileN, typename Params>
__global__ void __launch_bounds__(Config<Consumers, TileN>::kThreads, 1)
    gemm_kernel(const __grid_constant__ CUtensorMap x_map, const __grid_constant__ CUtensorMap w_map,
                const Params p, const Schedule schedule, float* split_workspace) {
  using C = Config<Consumers, TileN>;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  // The producer's threads: block FP8's a warp (its lanes copy the scales), bf16's one.
  constexpr int kProducerLanes = kBlockScaled<Params> ? 32 : 1;
  // A phase completes when the stage's tiles have landed, the first producer lane has announced their bytes and,
  // for block FP8, every lane's scales have landed.
  constexpr int kFullArrivals = kBlockScaled<Params> ? kProducerLanes + 1 : 1;
  __shared__ uint64_t full[C::kStages];
  __shared__ uint64_t empty[C::kStages];  // a phase completes when every consumer warp is done with the stage
  __shared__ int cumulative_tiles[kMaxGroups + 1];  // grouped: m tiles before each group
  // Swizzle atoms must be 1024-byte aligned; the dynamic shared memory base is only promised 16 bytes.
  const uint32_t raw_address = smem_address(smem_raw);
  const uint32_t base = (raw_address + swizzle128::kAtomBytes - 1) & ~(swizzle128::kAtomBytes - 1);
  uint8_t* smem = smem_raw + (base - raw_address);
  float* stage_scales = reinterpret_cast<float*>(smem + C::kStages * C::kStageBytes);
  if (threadIdx.x == 0) {
    for (int stage = 0; stage < C::kStages; ++stage) {
      mbarrier_init(&full[stage], kFullArrivals);
      mbarrier_init(&empty[stage], Consumers * 4);
    }
    mbarrier_init_fence();
  }
  wait_for_prior_grids();  // x, its scales and the groups' rows come from the kernels before
  if (p.group_rows) {
    // Each thread counts the tiles of a run of consecutive groups, and a block-wide scan places the runs: a decode
    // step's GEMM starts after this, so it must not be one thread walking 128 or more groups.
    using Scan = cub::BlockScan<int, C::kThreads>;
    __shared__ typename Scan::TempStorage scan_storage;
    const int per_thread = (p.num_groups + C::kThreads - 1) / C::kThreads;
    const int first = threadIdx.x * per_thread;
    const int end = min(first + per_thread, p.num_groups);
    int tiles = 0;
    for (int g = first; g < end; ++g) tiles += group_m_tiles(p.group_rows[g + 1] - p.group_rows[g], C::kTileM);
    int before = 0;
    Scan(scan_storage).ExclusiveSum(tiles, before);
    if (threadIdx.x == 0) cumulative_tiles[0] = 0;
    for (int g = first; g < end; ++g) {
      before += group_m_tiles(p.group_rows[g + 1] - p.group_rows[g], C::kTileM);
      cumulative_tiles[g + 1] = before;
    }
  }
  __syncthreads();
  allow_dependent_grids();
  const auto unit_tile = [&](int unit) {
    return p.group_rows ? grouped_unit(schedule, unit, cumulative_tiles, p.num_groups, p.group_rows)
                        : plain_unit(schedule.tile(unit), p.m);
  };

  const int warpgroup = threadIdx.x / kWarpgroupThreads;
  if (warpgroup == Consumers) {
    setmaxnreg_dec<kProducerRegisters>();
    const int lane = threadIdx.x % 32;
    if (threadIdx.x / 32 == Consumers * 4 && lane < kProducerLanes) {  // lanes of the warpgroup's first warp
      int iteration = 0;
      for (int unit = blockIdx.x; unit < schedule.units(); unit += gridDim.x) {
        const UnitTile tile = unit_tile(unit);
        if (!tile.valid) continue;
        const int w_row = tile.group * p.n + tile.n0;
        for (int slice = tile.first_slice; slice < tile.end_slice; ++slice, ++iteration) {
          const int stage = iteration % C::kStages;
          mbarrier_wait_parity(&empty[stage], ((iteration / C::kStages) & 1) ^ 1);
          if constexpr (kBlockScaled<Params>) {
            copy_stage_scales<C>(p, schedule, tile, slice, lane, stage_scales + stage * C::kScaleFloats,
                                 &full[stage]);
            if (lane != 0) continue;
          }
          uint8_t* x_tile = smem + stage * C::kStageBytes;
          mbarrier_arrive_expect_tx(&full[stage], C::kStageBytes);
          tensor_copy_2d_g2s(x_tile, &x_map, slice * kTileK, tile.m0, &full[stage]);
          tensor_copy_2d_g2s(x_tile + C::kXBytes, &w_map, slice * kTileK, w_row, &full[stage]);
        }
      }
      if constexpr (kBlockScaled<Params>) {
        cp_async_commit();  // a lane leaves with none of its scale copies in flight
        cp_async_wait<0>();
      }
    }
    return;
  }
  setmaxnreg_inc<kConsumerRegisters>();

  const int warp = (threadIdx.x % kWarpgroupThreads) / 32;
  const int lane = threadIdx.x % 32;
  int iteration = 0;
  for (int unit = blockIdx.x; unit < schedule.units(); unit += gridDim.x) {
    const UnitTile tile = unit_tile(unit);
    if (!tile.valid) continue;
    if (tile.m0 + 64 * warpgroup >= tile.row_end) {  // nothing of this warpgroup's to compute or store
      pass_slices<C>(tile, full, empty, iteration);
      continue;
    }
    // This thread's accumulator rows (wgmma.cuh's fragment layout): row and row + 8.
    const int row = tile.m0 + 64 * warpgroup + 16 * warp + lane / 4;
    float acc[C::kAccumulators] = {};
    if constexpr (kBlockScaled<Params>) {
      scaled_slices<C>(tile, row, base, stage_scales, full, empty, iteration, acc);
    } else {
      plain_slices<C>(tile, base, full, empty, iteration, acc);
    }

    const bool pairs = p.n % 2 == 0;  // two adjacent outputs make one aligned store
    float* split_out =
        split_workspace ? split_workspace + static_cast<int64_t>(tile.split) * p.m * p.n : nullptr;
#pragma unroll
    for (int j = 0; j < C::kAccumulators / 4; ++j) {
      const int column = tile.n0 + 8 * j + 2 * (lane % 4);
      if (column >= p.n) continue;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = row + 8 * h;
        if (r >= tile.row_end) continue;
        float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
        const int64_t at = static_cast<int64_t>(r) * p.n + column;
        const bool second = column + 1 < p.n;
        if (split_out) {  // the bias comes with the sum of the splits
          store_two(split_out + at, v0, v1, pairs, second);
          continue;
        }
        v0 = with_bias(p, tile.group, column, v0);
        if (second) v1 = with_bias(p, tile.group, column + 1, v1);
        if (p.f32_out) {
          store_two(static_cast<float*>(p.out) + at, v0, v1, pairs, second);
        } else {
          store_two(static_cast<__nv_bfloat16*>(p.out) + at, v0, v1, pairs, second);
        }
      }
    }
  }
}

// out = the splits' partial products added up (+ bias).
template <typename Params>
__global__ void reduce_splits_kernel(const Params p, const float* split_workspace, int splits) {
  wait_for_prior_grids();
  allow_dependent_grids();
  const int64_t total = static_cast<int64_t>(p.m) * p.n;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v = 0.0f;
    for (int split = 0; split < splits; ++split) v += split_workspace[split * total + i];
    v = with_bias(p, 0, static_cast<int>(i % p.n), v);
    if (p.f32_out) {
      store(static_cast<float*>(p.out) + i, v);
    } else {
      store(static_cast<__nv_bfloat16*>(p.out) + i, v);
    }
  }
}

// The device's SMs, asked once.
inline int device_sms() {
  static const int sms = [] {
    int device = 0, count = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || count <= 0) {
      throw std::runtime_error("wgmma_gemm: cannot query the device's SMs");
    }
    return count;
  }();
  return sms;
}

template <int Consumers, int TileN, typename Params>
void launch_tiles(const char* name, const Params& p, const void* x, const void* weight, uint64_t row_bytes,
                  const Schedule& schedule, float* split_workspace, cudaStream_t stream) {
  using C = Config<Consumers, TileN>;
  static const bool attributes_set = [name] {
    const cudaError_t err = cudaFuncSetAttribute(gemm_kernel<Consumers, TileN, Params>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
    if (err != cudaSuccess) throw std::runtime_error(std::string(name) + ": " + cudaGetErrorString(err));
    return true;
  }();
  (void)attributes_set;
  const uint64_t weight_rows = static_cast<uint64_t>(p.n) * (p.group_rows ? p.num_groups : 1);
  const CUtensorMap x_map = byte_tensor_map_2d_swizzled(x, row_bytes, p.m, row_bytes, kTileK, C::kTileM);
  const CUtensorMap w_map = byte_tensor_map_2d_swizzled(weight, row_bytes, weight_rows, row_bytes, kTileK, TileN);
  const dim3 grid(static_cast<unsigned>(std::min(schedule.units(), device_sms())));
  launch_dependent(name, gemm_kernel<Consumers, TileN, Params>, grid, C::kThreads, C::kSmemBytes, stream, x_map,
                   w_map, p, schedule, split_workspace);
}

// out = x times weight transposed (+ bias); x and weight have rows of row_bytes. A grouped product (p.group_rows)
// is tiled by its routed rows' mean a group (p.routed_rows, else m); a plain one splits K where split_workspace is
// given and the tiles leave SMs idle: the float32 parts go there and a second kernel adds them up.
template <typename Params>
void launch_gemm(const char* name, const Params& p, const void* x, const void* weight, int row_bytes,
                 float* split_workspace, cudaStream_t stream) {
  if (p.group_rows && (p.num_groups <= 0 || p.num_groups > kMaxGroups)) {
    throw std::invalid_argument(std::string(name) + ": " + std::to_string(p.num_groups) + " groups (1 to " +
                                std::to_string(kMaxGroups) + ")");
  }
  if (p.m == 0 || p.n == 0) return;
  const Schedule schedule =
      p.group_rows ? grouped_schedule(p.m, p.n, row_bytes, p.num_groups, p.routed_rows > 0 ? p.routed_rows : p.m,
                                      kWideTiles<Params>)
                   : make_schedule(p.m, p.n, row_bytes, device_sms(), split_workspace != nullptr, kWideTiles<Params>);
  if (schedule.splits == 1) split_workspace = nullptr;
  const auto bytes = static_cast<uint64_t>(row_bytes);
  if (schedule.tile_m == 64) {
    launch_tiles<1, kTileN>(name, p, x, weight, bytes, schedule, split_workspace, stream);
  } else if (schedule.tile_n == kTileN) {
    launch_tiles<2, kTileN>(name, p, x, weight, bytes, schedule, split_workspace, stream);
  } else if constexpr (kWideTiles<Params>) {
    launch_tiles<2, kWideTileN>(name, p, x, weight, bytes, schedule, split_workspace, stream);
  }
  if (split_workspace) {
    const int64_t total = static_cast<int64_t>(p.m) * p.n;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 1024));
    launch_dependent(name, reduce_splits_kernel<Params>, dim3(blocks), 256, 0, stream, p,
                     static_cast<const float*>(split_workspace), schedule.splits);
  }
}

}  // namespace tern::kernels::wgmma_gemm
