// The routed experts of one MoE layer (kernels/moe/moe_experts.h: grouping, gate/up with the gated activation,
// down, combine) with bf16, block-FP8 and MXFP4 weights, at the expert shapes of Qwen3-30B-A3B, gpt-oss-20b and
// DeepSeek-V4-Flash. Decode (1, 16 and 128 tokens): the routed experts' weight bytes over the time, as a share of a
// device-to-device copy measured in the same run, from a graph of 64 layers back to back (as a recorded step runs
// them), each routed to other experts so that they come from memory, not L2. Prefill (4,096 tokens): TFLOP/s of
// the expert GEMMs. Random data and routing, medians of CUDA-event-timed runs after warm-up.
// Usage: moe_experts_bench [bf16|fp8|mxfp4 ...] (the formats to run; all by default)
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_bench.cuh"
#include "moe/moe_experts.h"

using tern::bench::check;
using tern::bench::device_alloc;
using tern::bench::median_ms;

namespace {

// Random e2m1 code pairs: every byte is two valid codes.
__global__ void fill_random_bytes(uint8_t* out, size_t count, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count; i += size_t{gridDim.x} * blockDim.x) {
    out[i] = static_cast<uint8_t>((tern::bench::hashed_value(i, seed) + 1.0f) * 127.5f);
  }
}


enum class Format { bf16, fp8, mxfp4 };
const char* format_name(Format f) { return f == Format::bf16 ? "bf16" : f == Format::fp8 ? "fp8" : "mxfp4"; }

double bytes_per_weight(Format f) {
  return f == Format::bf16 ? 2.0 : f == Format::fp8 ? 1.0 + 4.0 / (128 * 128) : 0.5 + 1.0 / 32;
}

// One projection's experts [E, n, k] in `format`, set into MoeGemmParams as the CUDA backend does.
struct Experts {
  Format format;
  __nv_bfloat16* weight = nullptr;
  __nv_fp8_e4m3* fp8_codes = nullptr;
  float* fp8_scales = nullptr;
  int fp8_stride = 0;
  uint8_t* fp4_codes = nullptr;
  uint8_t* fp4_scales = nullptr;

  Experts(Format f, int64_t e, int64_t n, int64_t k, uint32_t seed) : format(f) {
    const size_t count = static_cast<size_t>(e * n * k);
    if (f == Format::bf16) {
      weight = device_alloc<__nv_bfloat16>(count);
      tern::bench::fill_random<<<4096, 256>>>(weight, count, seed);
    } else if (f == Format::fp8) {
      fp8_codes = device_alloc<__nv_fp8_e4m3>(count);
      tern::bench::fill_random_e4m3<<<4096, 256>>>(fp8_codes, count, seed);
      fp8_stride = static_cast<int>(((k + 127) / 128 + 3) / 4 * 4);
      const size_t scales = static_cast<size_t>(e * tern::kernels::expert_scale_rows(n) * fp8_stride);
      fp8_scales = device_alloc<float>(scales);
      tern::bench::fill_value<float><<<256, 256>>>(fp8_scales, scales, 1.0f / 4096);
    } else {
      fp4_codes = device_alloc<uint8_t>(count / 2);
      fill_random_bytes<<<4096, 256>>>(fp4_codes, count / 2, seed);
      fp4_scales = device_alloc<uint8_t>(count / 32);
      tern::bench::fill_value<uint8_t><<<1024, 256>>>(fp4_scales, count / 32, 120);  // 2^-7
    }
    check(cudaGetLastError(), "fill experts");
  }
  void set(tern::kernels::MoeGemmParams& p) const {
    p.weight = weight;
    p.fp8 = {fp8_codes, fp8_scales, fp8_stride};
    p.mxfp4 = {fp4_codes, fp4_scales};
  }
  void free() const {
    for (void* ptr : {static_cast<void*>(weight), static_cast<void*>(fp8_codes), static_cast<void*>(fp8_scales),
                      static_cast<void*>(fp4_codes), static_cast<void*>(fp4_scales)}) {
      if (ptr) check(cudaFree(ptr), "free");
    }
  }
};

struct Shape {
  const char* model;
  int64_t hidden, intermediate, experts, top_k;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<Format> formats;
  for (int i = 1; i < argc; ++i) {
    const std::string name = argv[i];
    const Format all[] = {Format::bf16, Format::fp8, Format::mxfp4};
    const auto named = std::find_if(std::begin(all), std::end(all), [&](Format f) { return name == format_name(f); });
    if (named == std::end(all)) {
      std::fprintf(stderr, "moe_experts_bench: unknown format \"%s\" (bf16, fp8 or mxfp4)\n", argv[i]);
      return 2;
    }
    formats.push_back(*named);
  }
  if (formats.empty()) formats = {Format::bf16, Format::fp8, Format::mxfp4};
  const double copy_tbs = tern::bench::print_device_and_copy_anchor();
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  const Shape shapes[] = {{"Qwen3-30B-A3B", 2048, 768, 128, 8},
                          {"gpt-oss-20b", 2880, 2880, 32, 4},
                          {"DeepSeek-V4-Flash", 4096, 2048, 256, 6}};
  constexpr int kRoutings = 64;
  std::printf("%-18s %-6s %6s %10s %12s %8s %8s %10s\n", "experts of", "format", "tokens", "time (us)", "weights MB",
              "TB/s", "of copy", "TFLOP/s");
  for (const Shape& s : shapes) {
    const int64_t max_tokens = 4096;
    __nv_bfloat16* x = tern::bench::random_bf16(static_cast<size_t>(max_tokens * s.hidden), 7);
    for (const Format format : formats) {
      const Experts gate_up(format, s.experts, 2 * s.intermediate, s.hidden, 11);
      const Experts down(format, s.experts, s.hidden, s.intermediate, 12);
      for (const int64_t tokens : {int64_t{1}, int64_t{16}, int64_t{128}, max_tokens}) {
        const int64_t pairs = tokens * s.top_k;
        const int64_t max_tiles = tern::kernels::moe_max_tiles(pairs, s.experts);
        const int64_t max_rows = max_tiles * tern::kernels::kMoeTileRows;
        // Routings: each token's top_k distinct experts, uniformly at random.
        std::mt19937 rng(static_cast<uint32_t>(tokens));
        std::vector<int32_t> ids(static_cast<size_t>(kRoutings * pairs));
        std::vector<int32_t> all(static_cast<size_t>(s.experts));
        std::iota(all.begin(), all.end(), 0);
        std::vector<int64_t> distinct(kRoutings);
        for (int r = 0; r < kRoutings; ++r) {
          std::vector<bool> used(static_cast<size_t>(s.experts));
          for (int64_t t = 0; t < tokens; ++t) {
            std::shuffle(all.begin(), all.end(), rng);
            for (int64_t j = 0; j < s.top_k; ++j) {
              ids[(r * tokens + t) * s.top_k + j] = all[j];
              used[all[j]] = true;
            }
          }
          distinct[r] = std::count(used.begin(), used.end(), true);
        }
        int32_t* device_ids = device_alloc<int32_t>(ids.size());
        check(cudaMemcpy(device_ids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice), "ids");
        std::vector<float> host_weights(static_cast<size_t>(pairs), 1.0f / s.top_k);
        float* weights = device_alloc<float>(pairs);
        check(cudaMemcpy(weights, host_weights.data(), pairs * 4, cudaMemcpyHostToDevice), "weights");
        const tern::kernels::MoeGrouping grouping{device_alloc<int32_t>(pairs), device_alloc<int32_t>(max_rows),
                                                  device_alloc<int32_t>(max_tiles),
                                                  device_alloc<int32_t>(s.experts + 1)};
        auto* gathered = device_alloc<__nv_bfloat16>(static_cast<size_t>(max_rows * s.hidden));
        const int64_t widest = std::max(s.hidden, s.intermediate);
        auto* row_codes = device_alloc<__nv_fp8_e4m3>(static_cast<size_t>(max_rows * widest));
        auto* row_scales = device_alloc<float>(static_cast<size_t>(max_rows * ((widest + 127) / 128)));
        auto* gate_up_out = device_alloc<__nv_bfloat16>(static_cast<size_t>(max_rows * 2 * s.intermediate));
        auto* activated = device_alloc<__nv_bfloat16>(static_cast<size_t>(max_rows * s.intermediate));
        auto* down_out = device_alloc<__nv_bfloat16>(static_cast<size_t>(max_rows * s.hidden));
        auto* out = device_alloc<__nv_bfloat16>(static_cast<size_t>(tokens * s.hidden));
        const bool few_rows = tern::kernels::moe_few_rows(pairs, s.experts);
        // One token as the CUDA backend runs it: pair tiles, gate/up then down with the combine (no grouping).
        const auto token_layer = [&](int r) {
          tern::kernels::MoeGemmParams up;
          up.input = x;
          up.gather_by_pair = true;
          up.top_k = static_cast<int>(s.top_k);
          up.pair_expert = device_ids + r * pairs;
          up.num_experts = static_cast<int>(s.experts);
          up.max_tiles = pairs;
          up.few_rows = true;
          up.fuse_gated_activation = true;
          gate_up.set(up);
          up.n = static_cast<int>(2 * s.intermediate);
          up.k = static_cast<int>(s.hidden);
          up.out = activated;
          tern::kernels::launch_moe_grouped_gemm(up, stream);
          tern::kernels::MoeGemmParams dn = up;
          dn.fuse_gated_activation = false;
          dn.input = activated;
          dn.gather_by_pair = false;
          dn.pair_weights = weights;
          dn.max_tiles = tokens;
          down.set(dn);
          dn.out = out;
          dn.n = static_cast<int>(s.hidden);
          dn.k = static_cast<int>(s.intermediate);
          tern::kernels::launch_moe_grouped_gemm(dn, stream);
        };
        const auto grouped_layer = [&](int r) {
          tern::kernels::launch_moe_group_pairs(device_ids + r * pairs, pairs, 0, static_cast<int>(s.experts),
                                                max_tiles, grouping, stream);
          tern::kernels::MoeGemmParams up;
          up.input = x;
          up.row_pair = grouping.row_pair;
          up.gather_by_pair = true;
          up.top_k = static_cast<int>(s.top_k);
          up.tile_expert = grouping.tile_expert;
          up.max_tiles = max_tiles;
          gate_up.set(up);
          up.n = static_cast<int>(2 * s.intermediate);
          up.k = static_cast<int>(s.hidden);
          up.few_rows = few_rows;
          up.fuse_gated_activation = few_rows;
          up.expert_rows = grouping.expert_rows;
          up.num_experts = static_cast<int>(s.experts);
          up.routed_rows = pairs;
          up.gathered = gathered;
          up.row_codes = row_codes;
          up.row_scales = row_scales;
          up.out = few_rows ? activated : gate_up_out;
          tern::kernels::launch_moe_grouped_gemm(up, stream);
          if (!few_rows) {
            tern::kernels::launch_moe_gated_activation(gate_up_out, activated, grouping, max_tiles,
                                                       static_cast<int>(s.intermediate), {}, stream);
          }
          tern::kernels::MoeGemmParams dn = up;
          dn.fuse_gated_activation = false;
          dn.input = activated;
          dn.gather_by_pair = false;
          down.set(dn);
          dn.out = down_out;
          dn.n = static_cast<int>(s.hidden);
          dn.k = static_cast<int>(s.intermediate);
          tern::kernels::launch_moe_grouped_gemm(dn, stream);
          tern::kernels::launch_moe_combine(down_out, grouping.pair_row, weights, out, tokens,
                                            static_cast<int>(s.top_k), static_cast<int>(s.hidden), stream);
        };
        const auto layer = [&](int r) { tokens == 1 ? token_layer(r) : grouped_layer(r); };
        // Decode as recorded steps run it (a graph of one layer per routing, back to back), prefill one call at a time.
        int call = 0;
        const double ms = tokens == max_tokens
                              ? median_ms([&] { layer(call++ % kRoutings); }, 3, 10, stream)
                              : tern::bench::graph_median_ms(layer, kRoutings, 3, 10, stream);
        const double mean_distinct =
            std::accumulate(distinct.begin(), distinct.end(), 0.0) / static_cast<double>(kRoutings);
        const double weight_bytes = mean_distinct * 3.0 * s.hidden * s.intermediate * bytes_per_weight(format);
        const double tbs = weight_bytes / (ms * 1e-3) / 1e12;
        const double tflops = 2.0 * pairs * 3.0 * s.hidden * s.intermediate / (ms * 1e-3) / 1e12;
        std::printf("%-18s %-6s %6lld %10.1f %12.1f %8.2f %7.0f%% %10.1f\n", s.model, format_name(format),
                    static_cast<long long>(tokens), ms * 1e3, weight_bytes / 1e6, tbs, 100 * tbs / copy_tbs, tflops);
        for (void* ptr : {static_cast<void*>(device_ids), static_cast<void*>(weights),
                          static_cast<void*>(grouping.pair_row), static_cast<void*>(grouping.row_pair),
                          static_cast<void*>(grouping.tile_expert), static_cast<void*>(grouping.expert_rows),
                          static_cast<void*>(gathered), static_cast<void*>(row_codes),
                          static_cast<void*>(row_scales), static_cast<void*>(gate_up_out),
                          static_cast<void*>(activated), static_cast<void*>(down_out),
                          static_cast<void*>(out)}) {
          check(cudaFree(ptr), "free");
        }
      }
      gate_up.free();
      down.free();
    }
    check(cudaFree(x), "free");
  }
  return 0;
}
