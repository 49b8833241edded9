// The safetensors/checkpoint loader: dtypes, sharded indexes, and every malformed-file case, each reported with the
// file and tensor name.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "core/error.h"
#include "model/checkpoint.h"
#include "model/model.h"
#include "model/safetensors.h"

namespace tern {
namespace {

namespace fs = std::filesystem;

struct RawTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

// Writes a safetensors file; `header_override` replaces the generated header text when non-empty.
void write_file(const fs::path& path, const std::vector<RawTensor>& tensors, const std::string& header_override = "",
                size_t truncate_data_to = std::string::npos) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  const std::string text = header_override.empty() ? header.dump() : header_override;
  const uint64_t n = text.size();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << text << data.substr(0, std::min(truncate_data_to, data.size()));
}

std::string bytes_of(const std::vector<float>& v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4); }
std::string bytes_of(const std::vector<uint16_t>& v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 2); }

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::path(::testing::TempDir()) / ("ckpt_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  fs::path dir;
};

TEST_F(CheckpointTest, ReadsBf16F16F32AndConvertsToFloat) {
  const std::vector<uint16_t> bf16 = {f32_to_bf16(1.5f), f32_to_bf16(-2.0f)};
  const std::vector<uint16_t> f16 = {0x3c00, 0xc000, 0x0001};  // 1.0, -2.0, smallest subnormal
  const std::vector<float> f32 = {0.25f};
  write_file(dir / "model.safetensors", {{"a", "BF16", {2}, bytes_of(bf16)}, {"b", "F16", {3}, bytes_of(f16)},
                                          {"c", "F32", {1, 1}, bytes_of(f32)}});
  const Checkpoint ckpt = Checkpoint::open(dir);
  std::vector<float> out(3);
  convert_to_f32(DType::BF16, ckpt.get("a", {2}).data, out.data(), 2);
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -2.0f);
  convert_to_f32(DType::F16, ckpt.get("b", {3}).data, out.data(), 3);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_FLOAT_EQ(out[2], 5.9604645e-8f);
  EXPECT_EQ(ckpt.get("c", {1, 1}).dtype, DType::F32);

  // The CPU backend keeps bf16 as bf16 and widens f16 to f32.
  auto backend = make_cpu_backend(1);
  const TensorInfo* b_part[] = {&ckpt.get("b")};
  const Tensor widened = backend->load_weight(b_part);
  EXPECT_EQ(widened.dtype, DType::F32);
  EXPECT_EQ(backend->to_host_f32(widened)[1], -2.0f);
}

TEST_F(CheckpointTest, WrittenTensorsOfEveryDtypeReadBack) {
  const std::vector<uint16_t> bf16 = {f32_to_bf16(1.5f), f32_to_bf16(-2.0f), f32_to_bf16(3.0f)};
  const std::vector<int32_t> i32 = {7, -1};
  const std::vector<int64_t> i64 = {1LL << 40};
  const auto info = [&](std::string name, DType dtype, std::vector<int64_t> shape, const void* data, size_t bytes) {
    return TensorInfo{std::move(name), {}, dtype, std::move(shape), static_cast<const std::byte*>(data), bytes, {}};
  };
  write_safetensors(dir / "model.safetensors", {info("a", DType::BF16, {3}, bf16.data(), 6),
                                                info("b", DType::I32, {1, 2}, i32.data(), 8),
                                                info("c", DType::I64, {1}, i64.data(), 8)});
  const Checkpoint ckpt = Checkpoint::open(dir);
  std::vector<float> out(3);
  convert_to_f32(DType::BF16, ckpt.get("a", {3}).data, out.data(), 3);
  EXPECT_EQ(out, (std::vector<float>{1.5f, -2.0f, 3.0f}));
  EXPECT_EQ(ckpt.get("b", {1, 2}).dtype, DType::I32);
  int32_t b1 = 0;
  int64_t c0 = 0;
  std::memcpy(&b1, ckpt.get("b").data + 4, 4);
  std::memcpy(&c0, ckpt.get("c", {1}).data, 8);  // at byte 14 of the data: no alignment assumed
  EXPECT_EQ(b1, -1);
  EXPECT_EQ(c0, 1LL << 40);
  EXPECT_NE(error_of([&] { write_safetensors(dir / "bad.safetensors", {info("d", DType::I32, {3}, i32.data(), 8)}); }),
            "");
}

TEST_F(CheckpointTest, ReadsShardedIndex) {
  const std::vector<float> one = {1.0f}, two = {2.0f, 3.0f};
  write_file(dir / "model-00001-of-00002.safetensors", {{"x", "F32", {1}, bytes_of(one)}});
  write_file(dir / "model-00002-of-00002.safetensors", {{"y", "F32", {2}, bytes_of(two)}});
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"metadata": {}, "weight_map": {"x": "model-00001-of-00002.safetensors", "y": "model-00002-of-00002.safetensors"}})";
  const Checkpoint ckpt = Checkpoint::open(dir);
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(reinterpret_cast<const float*>(ckpt.get("y", {2}).data)[1], 3.0f);
}

TEST_F(CheckpointTest, IndexNamingAMissingShardFails) {
  std::ofstream(dir / "model.safetensors.index.json") << R"({"weight_map": {"x": "model-00001-of-00002.safetensors"}})";
  EXPECT_NE(error_of([&] { Checkpoint::open(dir); }).find("model-00001-of-00002.safetensors"), std::string::npos);
}

TEST_F(CheckpointTest, IndexNamingATensorAbsentFromItsShardFails) {
  write_file(dir / "shard.safetensors", {{"x", "F32", {1}, bytes_of(std::vector<float>{1})}});
  std::ofstream(dir / "model.safetensors.index.json") << R"({"weight_map": {"x": "shard.safetensors", "z": "shard.safetensors"}})";
  EXPECT_NE(error_of([&] { Checkpoint::open(dir); }).find("'z'"), std::string::npos);
}

TEST_F(CheckpointTest, MalformedFilesAreReportedWithFileAndTensor) {
  const std::vector<float> four = {1, 2, 3, 4};
  const auto path = dir / "model.safetensors";
  struct Case {
    std::function<void()> write;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[&] { std::ofstream(path) << "abc"; }, "truncated"},
      {[&] { write_file(path, {}, "{not json"); }, "corrupt safetensors header"},
      {[&] { write_file(path, {{"w", "F32", {4}, bytes_of(four)}}, "", 8); }, "'w'"},
      {[&] { write_file(path, {{"w", "F32", {5}, bytes_of(four)}}); }, "'w'"},
      {[&] { write_file(path, {{"w", "F64", {2}, bytes_of(four)}}); }, "unsupported dtype F64"},
      {[&] {
         const uint64_t n = 1ull << 40;
         std::ofstream out(path, std::ios::binary);
         out.write(reinterpret_cast<const char*>(&n), 8);
       }, "header length"},
      {[&] { write_file(path, {}, R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})"); }, "'w'"},
      {[&] { write_file(path, {}, R"({"w": {"dtype": "F32", "shape": "x", "data_offsets": [0, 4]}})"); }, "'w'"},
  };
  for (const auto& c : cases) {
    c.write();
    const std::string message = error_of([&] { SafetensorsFile::open(path); });
    EXPECT_NE(message.find(c.expected), std::string::npos) << "got: " << message;
    EXPECT_NE(message.find(path.string()), std::string::npos) << "got: " << message;
  }
}

TEST_F(CheckpointTest, MissingTensorAndWrongShapeNameTheTensor) {
  write_file(dir / "model.safetensors", {{"w", "F32", {2, 2}, bytes_of(std::vector<float>{1, 2, 3, 4})}});
  const Checkpoint ckpt = Checkpoint::open(dir);
  EXPECT_NE(error_of([&] { ckpt.get("missing"); }).find("missing tensor 'missing'"), std::string::npos);
  EXPECT_NE(error_of([&] { ckpt.get("w", {4}); }).find("'w' has shape [2, 2], expected [4]"), std::string::npos);
}

TEST_F(CheckpointTest, UnknownArchitectureAndBrokenConfigFail) {
  auto backend = make_cpu_backend(1);
  std::ofstream(dir / "config.json") << R"({"architectures": ["NopeForCausalLM"], "vocab_size": 8, "hidden_size": 4,
    "num_hidden_layers": 1, "num_attention_heads": 1})";
  EXPECT_NE(error_of([&] { load_model(dir, *backend); }).find("unknown architecture 'NopeForCausalLM'"), std::string::npos);
  std::ofstream(dir / "config.json") << "{";
  EXPECT_NE(error_of([&] { load_model(dir, *backend); }).find("config.json: malformed JSON"), std::string::npos);
  std::ofstream(dir / "config.json") << R"({"architectures": ["LlamaForCausalLM"], "vocab_size": "big"})";
  EXPECT_NE(error_of([&] { load_model(dir, *backend); }).find("'vocab_size' has the wrong type"), std::string::npos);
}

// Calibrated FP8 KV cache scales (vLLM's `self_attn.k_scale` / `v_scale`, scalars of any float type) reach the
// layers' KV specs; layers without them keep 1; one that is not a scalar fails naming it.
TEST_F(CheckpointTest, KvCacheScalesOfTheCheckpointReachTheLayersSpecs) {
  const auto fixture = fs::path(TERN_FIXTURES_DIR) / "models" / "llama";
  const auto file = SafetensorsFile::open(fixture / "model.safetensors");
  const auto write_with = [&](std::vector<RawTensor> scales) {
    for (const auto& [name, info] : file->tensors()) {
      scales.push_back({name, std::string(dtype_name(info.dtype)), info.shape,
                        std::string(reinterpret_cast<const char*>(info.data), info.size_bytes)});
    }
    write_file(dir / "model.safetensors", scales);
    fs::copy_file(fixture / "config.json", dir / "config.json", fs::copy_options::overwrite_existing);
  };
  auto backend = make_cpu_backend(1);
  write_with({{"model.layers.0.self_attn.k_scale", "F32", {}, bytes_of(std::vector<float>{0.5f})},
              {"model.layers.0.self_attn.v_scale", "BF16", {1}, bytes_of(std::vector<uint16_t>{0x4000})}});
  const auto layers = load_model(dir, *backend)->kv_layers();
  ASSERT_GE(layers.size(), 2u);
  EXPECT_EQ(layers[0].key_scale, 0.5f);
  EXPECT_EQ(layers[0].value_scale, 2.0f);
  EXPECT_EQ(layers[1].key_scale, 1.0f);
  EXPECT_EQ(layers[1].value_scale, 1.0f);
  write_with({{"model.layers.1.self_attn.k_scale", "F32", {2}, bytes_of(std::vector<float>{0.5f, 0.25f})}});
  EXPECT_NE(error_of([&] { load_model(dir, *backend); }).find("model.layers.1.self_attn.k_scale: expected a scalar"),
            std::string::npos);
  write_with({{"model.layers.1.self_attn.v_scale", "F32", {}, bytes_of(std::vector<float>{0.0f})}});
  EXPECT_NE(error_of([&] { load_model(dir, *backend); })
                .find("model.layers.1.self_attn.v_scale: a KV cache scale must be positive and finite"),
            std::string::npos);
}

TEST_F(CheckpointTest, FixtureWithATensorRemovedFailsNamingIt) {
  // A real fixture checkpoint rewritten without one weight.
  const auto fixture = fs::path(TERN_FIXTURES_DIR) / "models" / "llama";
  const auto file = SafetensorsFile::open(fixture / "model.safetensors");
  std::vector<RawTensor> kept;
  for (const auto& [name, info] : file->tensors()) {
    if (name == "model.layers.1.mlp.up_proj.weight") continue;
    kept.push_back({name, std::string(dtype_name(info.dtype)), info.shape,
                    std::string(reinterpret_cast<const char*>(info.data), info.size_bytes)});
  }
  write_file(dir / "model.safetensors", kept);
  fs::copy_file(fixture / "config.json", dir / "config.json");
  auto backend = make_cpu_backend(1);
  EXPECT_NE(error_of([&] { load_model(dir, *backend); }).find("missing tensor 'model.layers.1.mlp.up_proj.weight'"),
            std::string::npos);
}

}  // namespace
}  // namespace tern
