// DeepSeek-V4 beyond the transformers goldens of moe_golden_test.cpp: chunked prefill then one-token decode gives
// the logits of one pass, and the KV cache's bytes per token and shareable prefix follow from the layer kinds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <unistd.h>

#include "fixtures.h"
#include "model/model.h"
#include "model/sequence_runner.h"

namespace tern {
namespace {

using testing::fixtures_dir;
using testing::read_json;

const std::filesystem::path& fixture() {
  static const std::filesystem::path dir = fixtures_dir() / "models" / "deepseek_v4";
  return dir;
}

// The fixture with config.json changed by `edit`, weights linked, in a fresh temporary directory.
std::filesystem::path edited_fixture(const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
  const auto dir = std::filesystem::temp_directory_path() / ("tern_" + name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  nlohmann::json config = read_json(fixture() / "config.json");
  edit(config);
  std::ofstream(dir / "config.json") << config.dump();
  std::filesystem::create_symlink(fixture() / "model.safetensors", dir / "model.safetensors");
  return dir;
}

float relative_error(const std::vector<float>& ours, const std::vector<float>& reference) {
  float max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(ours[i] - reference[i]));
    max_ref = std::max(max_ref, std::abs(reference[i]));
  }
  return max_diff / max_ref;
}

// With index_topk at least the number of compressed entries, the indexer keeps every closed window and score ties
// cannot matter, so the compressors' cache state, the sliding window and the mHC streams must make chunked
// prefill and decode equal to one pass.
TEST(DeepseekV4, ChunkedPrefillAndDecodeMatchOnePass) {
  const auto dir = edited_fixture("v4_topk", [](nlohmann::json& config) { config["index_topk"] = 64; });
  auto backend = make_cpu_backend();
  auto model = load_model(dir, *backend);
  const auto ids = read_json(fixture() / "golden.json")["prompts"][2].get<std::vector<int32_t>>();
  const int64_t n = static_cast<int64_t>(ids.size());
  SequenceRunner whole(*model, *backend, n);
  const auto expected = backend->to_host_f32(whole.append(ids, true));
  SequenceRunner pieces(*model, *backend, n, 8);
  std::vector<float> got;
  int64_t done = 0;
  for (int64_t chunk : {3, 10, 6}) {  // crossing blocks and CSA (4) / HCA (8) window ends at odd places
    const auto part = backend->to_host_f32(pieces.append({ids.data() + done, static_cast<size_t>(chunk)}, true));
    got.insert(got.end(), part.begin(), part.end());
    done += chunk;
  }
  for (; done < n; ++done) {
    const auto part = backend->to_host_f32(pieces.append({ids.data() + done, 1}, true));
    got.insert(got.end(), part.begin(), part.end());
  }
  std::filesystem::remove_all(dir);
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_LE(relative_error(got, expected), 1e-5);
}

TEST(DeepseekV4, KvBytesPerTokenAndShareablePrefixFollowFromLayerKinds) {
  auto backend = make_cpu_backend();
  auto model = load_model(fixture(), *backend);
  const auto layers = model->kv_layers();
  ASSERT_EQ(layers.size(), 4u);
  // head_dim 32, index_head_dim 16. Every layer: one shared K=V key. HCA (rate 8) adds kv, gate and entry of 32;
  // CSA (rate 4) adds kv and gate of 64 and an entry of 32, plus the indexer's kv and gate of 32 and entry of 16.
  const int64_t hca = 32 + 3 * 32, csa = 32 + (2 * 64 + 32) + (2 * 32 + 16);
  EXPECT_EQ(layers[0].kind, KvLayerKind::compressed);
  EXPECT_EQ(layers[0].compress_rate, 8);
  EXPECT_EQ(layers[1].compress_rate, 4);
  EXPECT_EQ(layers[1].sliding_window_tokens, 8);
  // CSA with index_topk 4 at rate 4: from position (4 + 1) * 4 - 1 on, a token's indexer ties depend on the prompt.
  EXPECT_EQ(layers[1].shareable_prefix_tokens, 19);
  EXPECT_EQ(layers[0].shareable_prefix_tokens, 0);
  EXPECT_EQ(shareable_prefix_tokens(layers), 19);
  EXPECT_EQ(kv_bytes_per_token(layers, 4), (2 * hca + 2 * csa) * 4);
}

}  // namespace
}  // namespace tern
