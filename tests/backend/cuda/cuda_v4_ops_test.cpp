// DeepSeek-V4's ops on the CUDA backend against the CPU reference on the same bf16 inputs: the mHC weights,
// collapse and expand, and the fused mix-and-collapse and normalized mix GEMV; rotation of a head's trailing dims (forward, inverse, at host positions); and one
// compressed layer's path over a paged cache with shuffled blocks: the compressors' state rows and entries, the
// Lightning Indexer's top-k and attention over the sliding window plus compressed entries (HCA, CSA and
// sliding-only), at the fixture's dims and at larger ones that take several rounds of each kernel's loops.
#include <array>
#include <cmath>
#include <optional>
#include <set>
#include <string>

#include "backend/attention_reference.h"
#include "cuda_test_util.h"

namespace tern {
namespace {

using testing::random_values;
using testing::relative_error;

class CudaV4OpsTest : public testing::CudaVsCpuTest {};

// hyper_mix's operands on a backend: random mixes [tokens, width] and base [width], and the scale of a head's
// weights (width = n streams) or of a layer's ((2 + n) * n).
std::array<Tensor, 3> mix_operands(Backend& b, int64_t n, int64_t width, int64_t tokens, uint32_t mixes_seed,
                                   uint32_t base_seed) {
  const std::vector<float> scale = width == n ? std::vector<float>{0.8f} : std::vector<float>{0.8f, 1.3f, 2.0f};
  return {b.from_host_f32(random_values(tokens * width, mixes_seed, 2.0f), {tokens, width}),
          b.from_host_f32(random_values(width, base_seed), {width}),
          b.from_host_f32(scale, {static_cast<int64_t>(scale.size())})};
}

TEST_F(CudaV4OpsTest, HyperMixMatchesCpu) {
  // The full weights of 4 streams (V4's) take the kernel with a lane per stream-mix element; the rest the general one.
  for (const int64_t n : {4, 3}) {
    for (const int64_t width : {n, (2 + n) * n}) {
      for (const int64_t tokens : {1, 7, 300}) {
        const HyperMixParams params{n, 20, 1e-6f};
        const auto run = [&](Backend& b) {
          const auto operands = mix_operands(b, n, width, tokens, static_cast<uint32_t>(11 + tokens), 12);
          return b.to_host_f32(b.hyper_mix(operands[0], operands[1], operands[2], params));
        };
        EXPECT_LE(relative_error(run(*gpu), run(*cpu)), 1e-5)
            << n << " streams, " << width << " mixes, " << tokens << " tokens";
      }
    }
  }
}

TEST_F(CudaV4OpsTest, HyperCollapseAndExpandMatchCpu) {
  const int64_t n = 4;
  for (const int64_t hidden : {64, 300}) {
    for (const int64_t tokens : {1, 9}) {
      const int64_t mix_width = (2 + n) * n;
      const auto streams = input(testing::random_bf16_values(tokens * n * hidden, 21), {tokens, n, hidden});
      const auto block_out = input(testing::random_bf16_values(tokens * hidden, 22), {tokens, hidden});
      const auto mix_values = random_values(tokens * mix_width, 23, 0.5f);
      const Tensor mix_cpu = cpu->from_host_f32(mix_values, {tokens, mix_width});
      const Tensor mix_gpu = gpu->from_host_f32(mix_values, {tokens, mix_width});
      EXPECT_LE(relative_error(gpu->to_host_f32(gpu->hyper_collapse(streams.gpu, mix_gpu)),
                               cpu->to_host_f32(cpu->hyper_collapse(streams.cpu, mix_cpu))),
                1e-2)
          << hidden << " hidden, " << tokens << " tokens";
      EXPECT_LE(relative_error(gpu->to_host_f32(gpu->hyper_expand(streams.gpu, block_out.gpu, mix_gpu)),
                               cpu->to_host_f32(cpu->hyper_expand(streams.cpu, block_out.cpu, mix_cpu))),
                1e-2)
          << hidden << " hidden, " << tokens << " tokens";
    }
  }
}

// The mix and collapse in one kernel: the mix row as hyper_mix writes it, the collapse as hyper_collapse of it, for
// V4's 4 streams (Sinkhorn on lanes), another count (one thread a token) and the head's collapse-only weights; the
// hidden sizes span one block and several, the last one partial.
TEST_F(CudaV4OpsTest, HyperMixCollapseMatchesCpuOpByOp) {
  for (const int64_t n : {4, 3}) {
    for (const int64_t width : {n, (2 + n) * n}) {
      for (const int64_t hidden : {64, 4096 + 40}) {
        for (const int64_t tokens : {1, 9}) {
          const auto streams = input(testing::random_bf16_values(tokens * n * hidden, 41), {tokens, n, hidden});
          const HyperMixParams params{n, 20, 1e-6f};
          const auto seed = static_cast<uint32_t>(42 + tokens);
          const auto g = mix_operands(*gpu, n, width, tokens, seed, 43);
          const auto c = mix_operands(*cpu, n, width, tokens, seed, 43);
          const HyperMixed fused = gpu->hyper_mix_collapse(streams.gpu, g[0], g[1], g[2], params);
          const Tensor mix = cpu->hyper_mix(c[0], c[1], c[2], params);
          const Tensor collapsed = cpu->hyper_collapse(streams.cpu, mix);
          const std::string what = std::to_string(n) + " streams, " + std::to_string(width) + " mixes, " +
                                   std::to_string(hidden) + " hidden, " + std::to_string(tokens) + " tokens";
          EXPECT_LE(relative_error(gpu->to_host_f32(fused.mix), cpu->to_host_f32(mix)), 1e-5) << what;
          EXPECT_LE(relative_error(gpu->to_host_f32(fused.collapsed), cpu->to_host_f32(collapsed)), 1e-2) << what;
          // Bit for bit what the two kernels give on the GPU.
          const Tensor gpu_mix = gpu->hyper_mix(g[0], g[1], g[2], params);
          EXPECT_EQ(gpu->to_host_f32(fused.mix), gpu->to_host_f32(gpu_mix)) << what;
          EXPECT_EQ(gpu->to_host_f32(fused.collapsed), gpu->to_host_f32(gpu->hyper_collapse(streams.gpu, gpu_mix)))
              << what;
        }
      }
    }
  }
}

// The mixes' normalized GEMV: one token in the kernel that normalizes as it reads (V4's 24 x 16,384), more through
// the ops one by one; against the CPU's float32 norm and product.
TEST_F(CudaV4OpsTest, RmsNormLinearF32MatchesCpu) {
  for (const int64_t tokens : {1, 3}) {
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{24, 16384}, {4, 16384}, {7, 2056}}) {
      const auto x = input(testing::random_bf16_values(tokens * k, 51, 3.0f), {tokens, k});
      const auto norm = weight(testing::random_bf16_values(k, 52, 1.0f), {k});
      const auto w = weight(testing::random_bf16_values(n * k, 53, 0.05f), {n, k});
      const auto ours = gpu->to_host_f32(gpu->rms_norm_linear_f32(x.gpu, norm.gpu, 1e-6f, w.gpu));
      const auto reference = cpu->to_host_f32(cpu->rms_norm_linear_f32(x.cpu, norm.cpu, 1e-6f, w.cpu));
      EXPECT_LE(relative_error(ours, reference), 1e-2) << tokens << " tokens, " << n << " x " << k;
    }
  }
}

RopeTable v4_rope(Backend& backend, int64_t rotary_dim, float theta) {
  const std::vector<float> inv_freq = testing::rope_inv_freq(static_cast<int>(rotary_dim), theta);
  RopeTable table;
  table.inv_freq = backend.from_host_f32(inv_freq, {rotary_dim / 2});
  table.rotary_dim = rotary_dim;
  table.interleaved = true;
  table.rotate_last_dims = true;
  return table;
}

TEST_F(CudaV4OpsTest, RotationOfTrailingDimsMatchesCpu) {
  const int64_t heads = 3, head_dim = 32, rotary_dim = 8;
  const RopeTable cpu_rope = v4_rope(*cpu, rotary_dim, 10000.0f), gpu_rope = v4_rope(*gpu, rotary_dim, 10000.0f);
  const testing::PagedSteps steps = testing::paged_steps({{5, 3}, {100, 1}, {0, 4}}, 4);
  const int64_t tokens = steps.step.num_tokens();
  const auto values = testing::random_bf16_values(tokens * heads * head_dim, 31);
  const auto cpu_step = cpu->begin_step(steps.step);
  const auto gpu_step = gpu->begin_step(steps.step);
  const std::vector<int32_t> positions = batch_positions(steps.step);
  const std::vector<int32_t> other_positions = {7, 0, 1000, 3, 65, 2, 9, 12};
  ASSERT_EQ(other_positions.size(), static_cast<size_t>(tokens));
  for (int variant = 0; variant < 4; ++variant) {
    auto x = input(values, {tokens, heads, head_dim});
    if (variant == 0) {
      cpu->rope(x.cpu, cpu_rope, *cpu_step);
      gpu->rope(x.gpu, gpu_rope, *gpu_step);
    } else if (variant == 1) {
      cpu->rope_inverse(x.cpu, cpu_rope, *cpu_step);
      gpu->rope_inverse(x.gpu, gpu_rope, *gpu_step);
    } else {
      cpu->rope_at(x.cpu, cpu_rope, other_positions, variant == 3);
      gpu->rope_at(x.gpu, gpu_rope, other_positions, variant == 3);
    }
    const auto ours = gpu->to_host_f32(x.gpu), reference = cpu->to_host_f32(x.cpu);
    EXPECT_LE(relative_error(ours, reference), 1e-2) << "variant " << variant;
    // The leading dims stay as they were, bit for bit.
    for (int64_t row = 0; row < tokens * heads; ++row) {
      for (int64_t d = 0; d < head_dim - rotary_dim; ++d) {
        ASSERT_EQ(ours[row * head_dim + d], values[row * head_dim + d]) << "variant " << variant << ", row " << row;
      }
    }
  }
  // rope then rope_inverse is the identity, up to bf16 rounding.
  auto x = input(values, {tokens, heads, head_dim});
  gpu->rope(x.gpu, gpu_rope, *gpu_step);
  gpu->rope_inverse(x.gpu, gpu_rope, *gpu_step);
  EXPECT_LE(relative_error(gpu->to_host_f32(x.gpu), values), 1e-2);
}

struct LayerCase {
  const char* name;
  int64_t heads, head_dim, rotary_dim, rate, window;
  bool sparse;  // CSA: overlapping compressor plus the indexer; else HCA
  int64_t index_heads, index_dim, top_k;
  std::vector<std::pair<int, int>> sequences;  // (cached, new) tokens
  int block_size;
  bool tied = false;  // every third token's head weights 0: all its scores tie
};

void PrintTo(const LayerCase& c, std::ostream* os) { *os << c.name; }

class CudaV4LayerTest : public testing::CudaVsCpuTest, public ::testing::WithParamInterface<LayerCase> {
 protected:
  // One compressor's parameters and weights on both backends.
  struct Compressor {
    CompressorParams params;
    Pair position_bias, norm;
  };
  Compressor compressor(int64_t entry_dim, bool overlapping, int64_t state_offset, uint32_t seed) {
    const LayerCase& c = GetParam();
    Compressor out;
    out.params.compress_rate = c.rate;
    out.params.entry_dim = entry_dim;
    out.params.overlapping = overlapping;
    out.params.state_offset = state_offset;
    const int64_t width = out.params.width();
    out.position_bias = weight(testing::random_bf16_values(c.rate * width, seed), {c.rate, width});
    auto norm = testing::random_bf16_values(entry_dim, seed + 1, 0.2f);
    for (float& v : norm) v = bf16_to_f32(f32_to_bf16(1.0f + v));
    out.norm = weight(norm, {entry_dim});
    return out;
  }

  // Runs a compressor on both backends for the step's new tokens.
  void compress(Compressor& comp, int64_t tokens, uint32_t seed) {
    const int64_t width = comp.params.width();
    const auto kv = input(testing::random_bf16_values(tokens * width, seed), {tokens, width});
    const auto gate = input(testing::random_bf16_values(tokens * width, seed + 1), {tokens, width});
    CompressorParams params = comp.params;
    params.position_bias = &comp.position_bias.cpu;
    params.norm_weight = &comp.norm.cpu;
    params.rope = &cpu_rope;
    cpu->compress_kv(cpu_cache, 0, kv.cpu, gate.cpu, params, *cpu_step);
    params.position_bias = &comp.position_bias.gpu;
    params.norm_weight = &comp.norm.gpu;
    params.rope = &gpu_rope;
    gpu->compress_kv(gpu_cache, 0, kv.gpu, gate.gpu, params, *gpu_step);
  }

  // Writes the batch's keys and compressor rows on both backends.
  void run_step(const ForwardBatch& batch, uint32_t seed) {
    const LayerCase& c = GetParam();
    cpu_step = cpu->begin_step(batch);
    gpu_step = gpu->begin_step(batch);
    const int64_t tokens = batch.num_tokens();
    const auto keys = input(testing::random_bf16_values(tokens * c.head_dim, seed), {tokens, 1, c.head_dim});
    cpu->store_kv(cpu_cache, 0, keys.cpu, keys.cpu, *cpu_step);
    gpu->store_kv(gpu_cache, 0, keys.gpu, keys.gpu, *gpu_step);
    compress(*attention, tokens, seed + 10);
    if (indexer) compress(*indexer, tokens, seed + 20);
  }

  // The compressors, the indexer's choice and attention on both backends, keys cached as `kv_dtype`.
  void expect_compressed_path_matches_cpu(KvCacheDtype kv_dtype);

  RopeTable cpu_rope, gpu_rope;
  KvCache cpu_cache, gpu_cache;
  std::unique_ptr<StepContext> cpu_step, gpu_step;
  std::optional<Compressor> attention, indexer;
};

void CudaV4LayerTest::expect_compressed_path_matches_cpu(KvCacheDtype kv_dtype) {
  const LayerCase& c = GetParam();
  cpu_rope = v4_rope(*cpu, c.rotary_dim, 160000.0f);
  gpu_rope = v4_rope(*gpu, c.rotary_dim, 160000.0f);
  attention = compressor(c.head_dim, c.sparse, 0, 41);
  if (c.sparse) indexer = compressor(c.index_dim, true, attention->params.state_dim(), 51);
  KvLayerSpec spec;
  spec.num_kv_heads = 1;
  spec.key_dim = c.head_dim;
  spec.kind = KvLayerKind::compressed;
  spec.sliding_window_tokens = c.window;
  spec.compress_rate = c.rate;
  spec.state_dim = attention->params.state_dim() + (indexer ? indexer->params.state_dim() : 0);
  spec.key_scale = 2.0f;  // read only by an FP8 cache
  const testing::PagedSteps steps = testing::paged_steps(c.sequences, c.block_size);
  cpu_cache = cpu->allocate_kv_cache({spec}, steps.num_blocks, c.block_size, kv_dtype);
  gpu_cache = gpu->allocate_kv_cache({spec}, steps.num_blocks, c.block_size, kv_dtype);

  // The cached tokens as one step, then the step under test: windows close in both, across the two.
  ForwardBatch prefix;
  for (const auto& seq : steps.step.sequences) {
    if (seq.num_cached_tokens == 0) continue;
    prefix.sequences.push_back({0, seq.num_cached_tokens, seq.block_tables});
    prefix.token_ids.insert(prefix.token_ids.end(), seq.num_cached_tokens, 0);
  }
  if (!prefix.sequences.empty()) run_step(prefix, 100);
  run_step(steps.step, 200);

  // State rows of every position the sequences hold.
  const auto cpu_states = cpu->to_host_f32(cpu_cache.states[0]), gpu_states = gpu->to_host_f32(gpu_cache.states[0]);
  std::vector<float> ours, reference;
  for (const auto& seq : steps.step.sequences) {
    for (int64_t pos = 0; pos < seq.num_cached_tokens + seq.num_new_tokens; ++pos) {
      const int64_t slot = seq.block_tables[0][pos / c.block_size] * c.block_size + pos % c.block_size;
      for (int64_t f = 0; f < spec.state_dim; ++f) {
        // Entry parts of slots that close no window are never written.
        if ((pos + 1) % c.rate != 0) {
          const bool in_entry = (f >= attention->params.entry_offset() && f < attention->params.state_dim()) ||
                                (indexer && f >= indexer->params.entry_offset());
          if (in_entry) continue;
        }
        ours.push_back(gpu_states[slot * spec.state_dim + f]);
        reference.push_back(cpu_states[slot * spec.state_dim + f]);
      }
    }
  }
  EXPECT_LE(relative_error(ours, reference), 1e-4) << "compressor state rows";

  const int64_t tokens = steps.step.num_tokens();
  const std::vector<int32_t> positions = batch_positions(steps.step);
  std::optional<Pair> selected;
  if (indexer) {
    const auto query = input(testing::random_bf16_values(tokens * c.index_heads * c.index_dim, 61),
                             {tokens, c.index_heads, c.index_dim});
    auto weight_values = testing::random_bf16_values(tokens * c.index_heads, 62);
    if (c.tied) {
      for (int64_t t = 1; t < tokens; t += 3) {
        std::fill_n(weight_values.begin() + t * c.index_heads, c.index_heads, 0.0f);
      }
    }
    const auto head_weights = input(weight_values, {tokens, c.index_heads});
    IndexerParams params;
    params.compress_rate = c.rate;
    params.top_k = c.top_k;
    params.entry_offset = indexer->params.entry_offset();
    params.softmax_scale = 1.0f / std::sqrt(static_cast<float>(c.index_dim));
    params.weights_scale = 1.0f / std::sqrt(static_cast<float>(c.index_heads));
    const auto ours_selected =
        gpu->to_host_i32(gpu->select_compressed(query.gpu, head_weights.gpu, gpu_cache, 0, params, *gpu_step));
    const auto reference_selected =
        cpu->to_host_i32(cpu->select_compressed(query.cpu, head_weights.cpu, cpu_cache, 0, params, *cpu_step));
    // Equal scores have no canonical order, so the choices are compared by the scores they keep, computed here
    // from the CPU's entries.
    const auto q = cpu->to_host_f32(query.cpu), w = cpu->to_host_f32(head_weights.cpu);
    int64_t token = 0;
    for (const auto& seq : steps.step.sequences) {
      for (int32_t i = 0; i < seq.num_new_tokens; ++i, ++token) {
        const int64_t visible = (positions[token] + 1) / c.rate;
        const auto score = [&](int32_t e) {
          const int64_t pos = (e + 1) * c.rate - 1;
          const int64_t slot = seq.block_tables[0][pos / c.block_size] * c.block_size + pos % c.block_size;
          const float* key = cpu_states.data() + slot * spec.state_dim + params.entry_offset;
          double total = 0.0;
          for (int64_t h = 0; h < c.index_heads; ++h) {
            double dot = 0.0;
            for (int64_t d = 0; d < c.index_dim; ++d) dot += q[(token * c.index_heads + h) * c.index_dim + d] * key[d];
            total += std::max(dot, 0.0) * params.softmax_scale * w[token * c.index_heads + h] * params.weights_scale;
          }
          return total;
        };
        if (c.tied && token % 3 == 1) {
          // Every score is 0: the entries in order, as equal scores go to the lower entry.
          for (int64_t k = 0; k < c.top_k; ++k) {
            ASSERT_EQ(ours_selected[token * c.top_k + k], k < visible ? k : -1)
                << "token " << token << ", choice " << k;
          }
        }
        std::vector<double> ours_scores, reference_scores;
        std::set<int32_t> seen;
        for (int64_t k = 0; k < c.top_k; ++k) {
          const int32_t e = ours_selected[token * c.top_k + k];
          if (e < 0) continue;
          ASSERT_LT(e, visible) << "token " << token;
          ASSERT_TRUE(seen.insert(e).second) << "token " << token << " chose entry " << e << " twice";
          ours_scores.push_back(score(e));
        }
        for (int64_t k = 0; k < c.top_k; ++k) {
          const int32_t e = reference_selected[token * c.top_k + k];
          if (e >= 0) reference_scores.push_back(score(e));
        }
        ASSERT_EQ(ours_scores.size(), reference_scores.size()) << "token " << token;
        std::sort(ours_scores.rbegin(), ours_scores.rend());
        std::sort(reference_scores.rbegin(), reference_scores.rend());
        for (size_t k = 0; k < ours_scores.size(); ++k) {
          EXPECT_NEAR(ours_scores[k], reference_scores[k], 1e-3 * (1.0 + std::abs(reference_scores[k])))
              << "token " << token << ", choice " << k;
        }
      }
    }
    // Attention reads the CPU's choice on both backends.
    selected = Pair{cpu->from_host_i32(reference_selected, {tokens, c.top_k}),
                    gpu->from_host_i32(reference_selected, {tokens, c.top_k})};
  }

  const auto query =
      input(testing::random_bf16_values(tokens * c.heads * c.head_dim, 71), {tokens, c.heads, c.head_dim});
  const auto sinks = weight(testing::random_bf16_values(c.heads, 72), {c.heads});
  for (const bool compressed : {true, false}) {
    CompressedAttentionParams params;
    params.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    params.sliding_window = c.window;
    if (compressed) {
      params.compress_rate = c.rate;
      params.entry_offset = attention->params.entry_offset();
    }
    params.sinks = &sinks.cpu;
    params.selected = compressed && selected ? &selected->cpu : nullptr;
    const auto reference = cpu->to_host_f32(cpu->compressed_attention(query.cpu, cpu_cache, 0, params, *cpu_step));
    params.sinks = &sinks.gpu;
    params.selected = compressed && selected ? &selected->gpu : nullptr;
    const auto ours = gpu->to_host_f32(gpu->compressed_attention(query.gpu, gpu_cache, 0, params, *gpu_step));
    EXPECT_LE(relative_error(ours, reference), 2e-2) << (compressed ? "compressed" : "sliding window only");
  }
}

TEST_P(CudaV4LayerTest, CompressedPathMatchesCpu) { expect_compressed_path_matches_cpu(KvCacheDtype::automatic); }

// The window's keys as FP8 codes on both backends (the compressed entries stay float32): both cache the codes of
// key / 2 and read code x 2, a bf16 value, so the GPU attends over the CPU's keys.
TEST_P(CudaV4LayerTest, Fp8CacheCompressedPathMatchesCpu) {
  if (GetParam().block_size % 16 != 0) GTEST_SKIP() << "FP8 caches take blocks of multiples of 16 tokens";
  expect_compressed_path_matches_cpu(KvCacheDtype::fp8_e4m3);
}

// The fixture's dims (config.json of fixtures/models/deepseek_v4), then larger heads, windows and top-k with
// sequences long enough for several chunks of candidates per token, then the indexer's long-context and prefill
// shapes.
INSTANTIATE_TEST_SUITE_P(
    Layers, CudaV4LayerTest,
    ::testing::Values(LayerCase{"FixtureHca", 4, 32, 8, 8, 8, false, 0, 0, 0, {{0, 21}, {19, 1}, {7, 6}, {40, 1}}, 4},
                      LayerCase{"FixtureCsa", 4, 32, 8, 4, 8, true, 2, 16, 4, {{0, 21}, {19, 1}, {7, 6}, {40, 1}}, 4},
                      LayerCase{"LargeCsa", 8, 128, 64, 4, 128, true, 4, 64, 64, {{600, 3}, {0, 150}, {311, 1}}, 16},
                      LayerCase{"LargeHca", 8, 512, 64, 16, 128, false, 0, 0, 0, {{600, 3}, {0, 150}, {311, 1}}, 16},
                      // V4's indexer (64 heads of 128, top 512) for a few decode tokens: each token's thousands of
                      // entries over many splits, the merge taking several rounds; one token sees fewer than top_k.
                      LayerCase{"LongCsa", 8, 128, 64, 4, 128, true, 64, 128, 512,
                                {{20000, 1}, {4093, 2}, {130, 1}}, 16},
                      // Prefill: enough tokens for one split each, pruned many times; one head, so about half the
                      // scores are exactly 0 and tie across the cut, and tokens whose scores all tie.
                      LayerCase{"PrefillCsaTies", 8, 128, 64, 4, 128, true, 1, 64, 96, {{0, 1200}, {1500, 300}}, 16,
                                true}),
    [](const ::testing::TestParamInfo<LayerCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tern
