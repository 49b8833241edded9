// Paged attention on the GPU against the CPU reference: mixed prefill/decode batches in one step, prefix-cached
// context, GQA, sliding windows, sinks, long contexts split over several KV shares with partial key tiles, random
// batches, and every head size (the tiled prefill kernel for 64/128, on wgmma; split-KV on tensor cores for 64/128
// with groups up to 16, per KV head or, for steps of more tokens x KV heads than SMs, all KV heads in one block, or
// at short contexts one share per KV head holding the whole context; on CUDA cores for every other head size up to
// 512 and wider groups), with KV blocks of 16 tokens and of sizes that do not divide the kernels' 64- and 128-key
// tiles or exceed them (the per-KV-head decode kernel copies pages of 16 keys from blocks of multiples of 16, rows
// otherwise); the same kernels over FP8 caches.
#include <numeric>

#include "backend/cuda/cuda_step.h"
#include "core/error.h"
#include "cuda_test_util.h"

namespace tern {
namespace {

using testing::random_bf16_values;
using testing::relative_error;

struct AttentionCase {
  int heads, kv_heads, head_dim;
  int sliding_window;
  bool sinks;
  std::vector<std::pair<int, int>> sequences;  // (cached tokens, new tokens)
  int block_size = 16;                          // tokens per KV block
};

// Short decodes for the whole-context plan (kernels::kDecodeWholeContextKeys): every key of each (token, KV head)
// in one share, the longest exactly at the limit, a decode chunk of three tokens.
const std::vector<std::pair<int, int>> kShortDecodes = {{383, 1}, {0, 1}, {100, 1}, {255, 1}, {16, 1}, {200, 3}};

class CudaAttentionTest : public testing::CudaVsCpuTest, public ::testing::WithParamInterface<AttentionCase> {
 protected:
  // Random keys and values (bf16 values up to the magnitudes given) of every token of the fill batch, into both
  // caches.
  void fill(KvCache& cpu_cache, KvCache& gpu_cache, const testing::PagedSteps& steps, float key_magnitude,
            float value_magnitude) {
    const AttentionCase& c = GetParam();
    const int64_t tokens = steps.fill.num_tokens();
    const std::vector<int64_t> shape = {tokens, c.kv_heads, c.head_dim};
    const auto k = input(random_bf16_values(tokens * c.kv_heads * c.head_dim, 1, key_magnitude), shape);
    const auto v = input(random_bf16_values(tokens * c.kv_heads * c.head_dim, 2, value_magnitude), shape);
    const auto cpu_fill = cpu->begin_step(steps.fill);
    const auto gpu_fill = gpu->begin_step(steps.fill);
    cpu->store_kv(cpu_cache, 0, k.cpu, v.cpu, *cpu_fill);
    gpu->store_kv(gpu_cache, 0, k.gpu, v.gpu, *gpu_fill);
  }

  // The step's attention on both backends: within 2e-2 of the CPU's, and 5e-2 row by row, so that a wrong row of
  // small values cannot hide behind the global maximum.
  void expect_step_matches_cpu(const KvCache& cpu_cache, const KvCache& gpu_cache, const testing::PagedSteps& steps) {
    const AttentionCase& c = GetParam();
    const int64_t tokens = steps.step.num_tokens();
    // Queries scaled so that softmax is peaked enough for errors in the weights to show.
    const auto q = input(random_bf16_values(tokens * c.heads * c.head_dim, 3, 2.0f), {tokens, c.heads, c.head_dim});
    const auto sinks = weight(random_bf16_values(c.heads, 4, 2.0f), {c.heads});
    AttentionParams cpu_params, gpu_params;
    cpu_params.scale = gpu_params.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    cpu_params.sliding_window = gpu_params.sliding_window = c.sliding_window;
    if (c.sinks) {
      cpu_params.sinks = &sinks.cpu;
      gpu_params.sinks = &sinks.gpu;
    }
    const auto cpu_step = cpu->begin_step(steps.step);
    const auto gpu_step = gpu->begin_step(steps.step);
    const auto expected = cpu->to_host_f32(cpu->attention(q.cpu, cpu_cache, 0, cpu_params, *cpu_step));
    const auto actual = gpu->to_host_f32(gpu->attention(q.gpu, gpu_cache, 0, gpu_params, *gpu_step));
    ASSERT_EQ(actual.size(), expected.size());
    EXPECT_LE(relative_error(actual, expected), 2e-2);
    const int64_t row = c.head_dim;
    for (int64_t r = 0; r < tokens * c.heads; ++r) {
      const std::vector<float> a(actual.begin() + r * row, actual.begin() + (r + 1) * row);
      const std::vector<float> b(expected.begin() + r * row, expected.begin() + (r + 1) * row);
      ASSERT_LE(relative_error(a, b), 5e-2) << "token " << r / c.heads << " head " << r % c.heads;
    }
  }
};

// --kv-cache-dtype fp8_e4m3 on CUDA: dense, sliding-window, MLA latent and DeepSeek-V4 compressed layers in blocks
// of 16-token multiples hold e4m3 codes; other caches (values narrower than keys, blocks of 7) are refused at
// allocation, and so at the engine's start, naming the flag.
TEST(CudaKvCacheDtypeTest, Fp8CachesTheKernelsCannotReadAreRefusedNamingTheFlag) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  auto gpu = make_cuda_backend(0);
  const std::vector<KvLayerSpec> dense = {{2, 64, 64}, {2, 128, 128, KvLayerKind::sliding_window, 64}};
  const KvCache cache = gpu->allocate_kv_cache(dense, 4, 16, KvCacheDtype::fp8_e4m3);
  EXPECT_EQ(cache.dtype, KvCacheDtype::fp8_e4m3);
  EXPECT_EQ(cache.keys[1].dtype, DType::F8_E4M3);
  EXPECT_EQ(cache.values[0].dtype, DType::F8_E4M3);
  KvLayerSpec latent{1, 576, 0, KvLayerKind::mla_latent};
  KvLayerSpec compressed{1, 512, 0, KvLayerKind::compressed, 128, 4};
  for (const KvLayerSpec& keys_only : {latent, compressed}) {
    EXPECT_EQ(gpu->allocate_kv_cache({keys_only}, 4, 16, KvCacheDtype::fp8_e4m3).keys[0].dtype, DType::F8_E4M3);
  }
  const std::vector<std::vector<KvLayerSpec>> refused = {{{2, 128, 64}}};
  for (const auto& layers : refused) {
    try {
      gpu->allocate_kv_cache(layers, 4, 16, KvCacheDtype::fp8_e4m3);
      ADD_FAILURE() << "an FP8 KV cache of key_dim " << layers[0].key_dim << " was allocated";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--kv-cache-dtype fp8_e4m3"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(gpu->allocate_kv_cache(dense, 4, 7, KvCacheDtype::fp8_e4m3), Error);
  EXPECT_EQ(gpu->allocate_kv_cache(dense, 4, 16).keys[0].dtype, DType::BF16);
}

TEST_P(CudaAttentionTest, MatchesCpu) {
  const AttentionCase& c = GetParam();
  const testing::PagedSteps steps = testing::paged_steps(c.sequences, c.block_size);
  const std::vector<KvLayerSpec> layers = {{c.kv_heads, c.head_dim, c.head_dim}};
  KvCache cpu_cache = cpu->allocate_kv_cache(layers, steps.num_blocks, c.block_size);
  KvCache gpu_cache = gpu->allocate_kv_cache(layers, steps.num_blocks, c.block_size);
  fill(cpu_cache, gpu_cache, steps, 1.0f, 1.0f);
  if (c.sequences == kShortDecodes) {
    // The plan the short decodes are for: its kernel only where the blocks are whole pages (every case's head_dim
    // takes tensor cores).
    const auto gpu_step = gpu->begin_step(steps.step);
    const auto& plan = dynamic_cast<const cuda::CudaStepContext&>(*gpu_step).attention_plan(true);
    EXPECT_EQ(plan.whole_context, c.block_size % kernels::kDecodePageKeys == 0);
  }
  expect_step_matches_cpu(cpu_cache, gpu_cache, steps);
}

// Mixed batches: a long prefill, a prefill over cached context, decodes with short and long contexts (several
// KV chunks), a short chunk that takes the decode path.
const std::vector<std::pair<int, int>> kMixed = {{0, 200}, {100, 37}, {300, 1}, {700, 1}, {5, 3}, {0, 1}};

// Long decodes: contexts of several shares, ends that cut key tiles and warp slices anywhere, and a first token.
const std::vector<std::pair<int, int>> kLongDecodes = {{4000, 1}, {1234, 1}, {63, 1}, {64, 1}, {0, 1}, {2047, 1}};

// Decodes for the all-heads kernel (kernels::plan_decode_attention): more tokens than the H200's 132 SMs whatever
// the KV heads, their keys at least 128 an SM; contexts of one key to several shares, ends anywhere in a 16-key
// tile, shares past a short context's keys.
std::vector<std::pair<int, int>> all_heads_decodes() {
  std::vector<std::pair<int, int>> sequences = {{0, 1}, {63, 1}, {64, 1}, {2047, 1}, {4000, 1}};
  for (int i = 0; sequences.size() < 140; ++i) sequences.emplace_back(i * 97 % 700, 1);
  return sequences;
}

// Prefills for the 128-row x 128-key tiles of the prefill kernel: a long one, cached context that starts mid-tile,
// exactly one tile, one row short of a tile, a chunk just long enough for the prefill path (a tile whose second
// 64-row half is empty), a chunk over a long cached context.
const std::vector<std::pair<int, int>> kPrefills = {{0, 1000}, {300, 129}, {128, 128}, {5, 127}, {0, 9}, {2000, 300}};

// A random batch: mostly decodes over contexts up to 3000 tokens, some prefills with or without cached context.
std::vector<std::pair<int, int>> random_sequences(uint32_t seed, int count) {
  std::mt19937 rng(seed);
  std::vector<std::pair<int, int>> sequences;
  for (int i = 0; i < count; ++i) {
    const int cached = std::uniform_int_distribution<int>(0, 3000)(rng);
    const bool prefill = std::uniform_int_distribution<int>(0, 3)(rng) == 0;
    sequences.emplace_back(cached, prefill ? std::uniform_int_distribution<int>(2, 300)(rng) : 1);
  }
  return sequences;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaAttentionTest,
    ::testing::Values(AttentionCase{4, 2, 16, 0, false, kMixed},       // the fixture models' shape
                      AttentionCase{8, 4, 32, 0, false, kMixed},       // tern-py-13m's shape
                      AttentionCase{8, 8, 64, 0, false, kMixed},       // MHA
                      AttentionCase{32, 8, 128, 0, false, kMixed},     // Llama-3-8B
                      AttentionCase{16, 2, 128, 0, false, kMixed},     // group of 8
                      AttentionCase{16, 1, 64, 0, false, kMixed},      // group of 16 (MQA)
                      AttentionCase{8, 2, 256, 0, false, kMixed},      // Gemma-sized heads
                      AttentionCase{8, 2, 64, 50, true, kMixed},       // gpt-oss: window and sinks
                      AttentionCase{8, 2, 128, 130, false, kMixed},    // window over tile boundaries
                      AttentionCase{4, 2, 16, 7, true, kMixed},
                      AttentionCase{4, 1, 128, 0, false, {{0, 300}}},  // prefill only, tiles of two sizes
                      AttentionCase{4, 2, 128, 0, false, {{1000, 1}, {2000, 1}, {17, 1}}},  // decode only
                      AttentionCase{32, 8, 128, 0, true, kLongDecodes},     // group of 4, sinks
                      AttentionCase{8, 8, 128, 0, false, kLongDecodes},     // group of 1
                      AttentionCase{16, 2, 64, 1000, false, kLongDecodes},  // group of 8, window over shares
                      AttentionCase{16, 1, 128, 0, true, kLongDecodes},     // group of 16
                      // The all-heads kernel, the same shapes and blocks of 7.
                      AttentionCase{32, 8, 128, 0, true, all_heads_decodes()},
                      AttentionCase{8, 8, 128, 0, false, all_heads_decodes()},
                      AttentionCase{16, 2, 64, 300, false, all_heads_decodes()},
                      AttentionCase{16, 1, 128, 0, true, all_heads_decodes()},
                      AttentionCase{8, 4, 128, 0, false, all_heads_decodes(), 7},
                      AttentionCase{32, 8, 128, 0, false, random_sequences(11, 12)},
                      AttentionCase{16, 2, 64, 300, true, random_sequences(12, 12)},
                      AttentionCase{8, 1, 128, 700, false, random_sequences(13, 12)},
                      AttentionCase{8, 2, 128, 0, false, kPrefills},         // group of 4
                      AttentionCase{8, 8, 64, 0, false, kPrefills, 32},      // MHA, blocks of 32
                      AttentionCase{16, 2, 128, 0, true, kPrefills, 256},    // blocks longer than a key tile
                      AttentionCase{8, 2, 64, 200, true, kPrefills, 5},      // window and sinks, blocks of 5
                      AttentionCase{8, 1, 128, 300, true, kPrefills, 48},    // MQA, window over key tiles
                      AttentionCase{8, 4, 128, 0, false, kMixed, 7},         // odd block size in a mixed batch
                      // The whole-context kernel: group of 4, head_dim 64 with sinks (merged), a window inside
                      // the context, group of 16 in blocks of 32.
                      AttentionCase{32, 8, 128, 0, false, kShortDecodes},
                      AttentionCase{16, 2, 64, 0, true, kShortDecodes},
                      AttentionCase{8, 2, 128, 100, false, kShortDecodes},
                      AttentionCase{16, 1, 128, 0, false, kShortDecodes, 32}));

// An FP8 cache (--kv-cache-dtype fp8_e4m3) on both backends, with per-tensor scales: every CUDA kernel on the codes
// (prefill tiles, split-KV on tensor and CUDA cores, whole-context) against the CPU's attention over the same codes
// times their scales.
class CudaFp8AttentionTest : public CudaAttentionTest {};

TEST_P(CudaFp8AttentionTest, MatchesCpuOnTheSameCodes) {
  const AttentionCase& c = GetParam();
  const testing::PagedSteps steps = testing::paged_steps(c.sequences, c.block_size);
  KvLayerSpec layer{c.kv_heads, c.head_dim, c.head_dim};
  layer.key_scale = 0.01f;  // keys up to 2, codes up to 200 of the 448 e4m3 reaches
  layer.value_scale = 0.004f;
  const std::vector<KvLayerSpec> layers = {layer};
  KvCache cpu_cache = cpu->allocate_kv_cache(layers, steps.num_blocks, c.block_size, KvCacheDtype::fp8_e4m3);
  KvCache gpu_cache = gpu->allocate_kv_cache(layers, steps.num_blocks, c.block_size, KvCacheDtype::fp8_e4m3);
  fill(cpu_cache, gpu_cache, steps, 2.0f, 0.5f);
  // The codes themselves, in the slots the fill wrote (the CPU's other slots are uninitialized): the same on both
  // backends (nearest, saturating, of value / scale).
  const std::vector<float> cpu_keys = cpu->to_host_f32(cpu_cache.keys[0]);
  const std::vector<float> gpu_keys = gpu->to_host_f32(gpu_cache.keys[0]);
  const std::vector<float> cpu_values = cpu->to_host_f32(cpu_cache.values[0]);
  const std::vector<float> gpu_values = gpu->to_host_f32(gpu_cache.values[0]);
  const int64_t row = int64_t{c.kv_heads} * c.head_dim;
  int64_t differing = 0;
  for (const SequenceChunk& seq : steps.fill.sequences) {
    for (int64_t pos = 0; pos < seq.num_new_tokens; ++pos) {
      const int64_t slot = int64_t{seq.block_tables[0][pos / c.block_size]} * c.block_size + pos % c.block_size;
      for (int64_t i = slot * row; i < (slot + 1) * row; ++i) {
        differing += cpu_keys[i] != gpu_keys[i] || cpu_values[i] != gpu_values[i];
      }
    }
  }
  EXPECT_EQ(differing, 0) << "cached elements whose codes differ";
  expect_step_matches_cpu(cpu_cache, gpu_cache, steps);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaFp8AttentionTest,
    ::testing::Values(AttentionCase{32, 8, 128, 0, false, kMixed},     // Llama-3-8B, prefill tokens split-KV
                      AttentionCase{8, 8, 64, 0, false, kMixed},       // MHA
                      AttentionCase{16, 1, 64, 0, false, kMixed},      // group of 16 (MQA)
                      AttentionCase{8, 2, 64, 50, true, kMixed},       // gpt-oss: window and sinks
                      AttentionCase{8, 2, 128, 130, false, kMixed, 32},
                      AttentionCase{32, 8, 128, 0, true, kLongDecodes},
                      AttentionCase{16, 2, 64, 1000, false, kLongDecodes},
                      AttentionCase{32, 8, 128, 0, false, all_heads_decodes()},  // the per-KV-head plan instead
                      AttentionCase{32, 8, 128, 0, false, kShortDecodes},        // the whole-context kernel
                      AttentionCase{16, 2, 64, 0, true, kShortDecodes},
                      AttentionCase{8, 1, 128, 700, false, random_sequences(13, 12)},
                      AttentionCase{16, 2, 128, 0, true, kPrefills, 256},
                      // The CUDA-core kernel, prefill tokens included: the fixtures' 16, tern-py-13m's 32, 96 with
                      // a window, 256, and a group of 20.
                      AttentionCase{4, 2, 16, 7, true, kMixed},
                      AttentionCase{8, 4, 32, 0, false, kMixed},
                      AttentionCase{48, 1, 96, 100, false, kMixed},
                      AttentionCase{8, 2, 256, 0, false, kLongDecodes},
                      AttentionCase{40, 2, 128, 0, false, kMixed}));

// Every head size a model may have (a multiple of 8 up to 512: Phi's 80 and 96, 112, 192, ...): those without a
// tensor-core kernel take the CUDA-core one, prefill chunks included; GQA groups of 1 to 5 across the sizes.
std::vector<AttentionCase> every_head_dim() {
  std::vector<AttentionCase> cases;
  for (int head_dim = 8; head_dim <= 512; head_dim += 8) {
    const int group = 1 + head_dim / 8 % 5;
    cases.push_back(AttentionCase{2 * group, 2, head_dim, head_dim % 24 == 0 ? 40 : 0, head_dim % 32 == 0, kMixed});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AnyHeadDim, CudaAttentionTest, ::testing::ValuesIn(every_head_dim()));

// Groups wider than the tensor-core kernels' 16 query rows, on head sizes that have them: each block attends a
// slice of 16 query heads; the all-heads and whole-context plans still hold for the layer.
INSTANTIATE_TEST_SUITE_P(
    WideGroups, CudaAttentionTest,
    ::testing::Values(AttentionCase{40, 2, 128, 0, false, kMixed},           // group of 20
                      AttentionCase{64, 2, 64, 0, true, kLongDecodes},       // group of 32, sinks
                      AttentionCase{48, 1, 96, 100, false, kMixed},          // group of 48, window
                      AttentionCase{40, 2, 128, 0, false, all_heads_decodes()},
                      AttentionCase{64, 2, 64, 0, false, kShortDecodes}));

}  // namespace
}  // namespace tern
