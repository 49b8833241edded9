#include "model/checkpoint.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>

#include "core/error.h"
#include "model/load_progress.h"

namespace tern {

Checkpoint Checkpoint::open(const std::filesystem::path& dir, LoadProgress* progress, OnlineQuantization online) {
  Checkpoint checkpoint;
  checkpoint.dir_ = dir;
  checkpoint.progress_ = progress;
  const auto single = dir / "model.safetensors";
  const auto index_path = dir / "model.safetensors.index.json";
  std::map<std::string, std::string> expected_file;  // tensor -> shard named by the index
  std::vector<std::filesystem::path> shard_paths;
  if (std::filesystem::exists(index_path)) {
    nlohmann::json index;
    try {
      std::ifstream in(index_path);
      index = nlohmann::json::parse(in);
      for (const auto& [tensor, file] : index.at("weight_map").items()) expected_file[tensor] = file.get<std::string>();
    } catch (const nlohmann::json::exception& e) {
      fail("{}: malformed index: {}", index_path.string(), e.what());
    }
    std::vector<std::string> shards;
    for (const auto& [tensor, file] : expected_file) shards.push_back(file);
    std::sort(shards.begin(), shards.end());
    shards.erase(std::unique(shards.begin(), shards.end()), shards.end());
    for (const auto& shard : shards) {
      if (shard.find('/') != std::string::npos) fail("{}: shard name '{}' leaves the model directory", index_path.string(), shard);
      shard_paths.push_back(dir / shard);
    }
  } else if (std::filesystem::exists(single)) {
    shard_paths.push_back(single);
  } else {
    fail("{}: no model.safetensors or model.safetensors.index.json", dir.string());
  }

  int64_t total_bytes = 0;
  for (const auto& path : shard_paths) {
    if (!std::filesystem::exists(path)) fail("{}: shard listed in the index is missing", path.string());
    checkpoint.files_.push_back(SafetensorsFile::open(path));
    for (const auto& [name, info] : checkpoint.files_.back()->tensors()) {
      if (checkpoint.index_.count(name)) fail("{}: tensor '{}' appears in two shards", path.string(), name);
      checkpoint.index_[name] = &info;
      total_bytes += static_cast<int64_t>(info.size_bytes);
    }
  }
  if (progress) progress->set_total(total_bytes);
  const auto config_path = dir / "config.json";
  if (std::filesystem::exists(config_path)) {
    nlohmann::json config;
    try {
      std::ifstream in(config_path);
      config = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      fail("{}: malformed JSON: {}", config_path.string(), e.what());
    }
    checkpoint.quantization_ = QuantizationConfig::from_config(config, config_path.string());
  }
  if (online == OnlineQuantization::fp8) {
    if (checkpoint.quantization_.mxfp4) {
      fail("{}: --quantization fp8: the checkpoint is already quantized, as MXFP4 (quantization_config.quant_method "
           "'mxfp4'); online FP8 takes an unquantized or a block-FP8 checkpoint", config_path.string());
    }
    checkpoint.quantizes_to_fp8_ = !checkpoint.quantization_.block_fp8;
    checkpoint.repacks_fp4_to_fp8_ = checkpoint.quantization_.fp4_experts;
  }
  checkpoint.attach_block_scales(config_path);
  checkpoint.attach_fp4_expert_scales(config_path);
  checkpoint.attach_mxfp4_scales(config_path);
  for (const auto& [tensor, file] : expected_file) {
    auto it = checkpoint.index_.find(tensor);
    if (it == checkpoint.index_.end()) {
      fail("{}: tensor '{}' listed in the index is not in the shard", (dir / file).string(), tensor);
    }
    if (it->second->file.filename() != file) {
      fail("{}: tensor '{}' is in {}, not in {} as the index says", index_path.string(), tensor,
           it->second->file.filename().string(), file);
    }
  }
  return checkpoint;
}

void Checkpoint::attach_block_scales(const std::filesystem::path& config_path) {
  for (auto& [name, entry] : index_) {
    const TensorInfo& weight = *entry;
    // A scale of the wrong dtype is reported as such with its weight, not as a weight without scales.
    if (weight.dtype != DType::F8_E4M3 || name.ends_with("_scale_inv") || name.ends_with(".scale")) continue;
    if (!quantization_.block_fp8) {
      fail("{}: tensor '{}' is F8_E4M3 but {} has no fp8 quantization_config", weight.file.string(), name,
           config_path.string());
    }
    if (weight.shape.size() != 2) {
      fail("{}: F8_E4M3 tensor '{}' has shape {}; block-quantized weights are 2-D [out, in] (embeddings, norms, "
           "routers and biases are not quantized)", weight.file.string(), name, shape_string(weight.shape));
    }
    // DeepSeek-V3's inference/fp8_cast_bf16.py finds a weight's scales under its name + "_scale_inv"; DeepSeek-V4's
    // released checkpoints name them after the module, `X.scale` beside `X.weight` (inference/model.py's Linear
    // keeps `self.scale`; vLLM's deepseek_v4.py maps `.scale` to `.weight_scale_inv`).
    const std::string scale_inv_name = name + "_scale_inv";
    const std::string module_scale_name =
        name.ends_with(".weight") ? name.substr(0, name.size() - std::string_view(".weight").size()) + ".scale" : "";
    auto scale = index_.find(scale_inv_name);
    if (scale == index_.end() && !module_scale_name.empty()) scale = index_.find(module_scale_name);
    if (scale == index_.end()) {
      fail("{}: FP8 weight '{}' has no scale tensor '{}'{}", weight.file.string(), name, scale_inv_name,
           module_scale_name.empty() ? "" : " (nor '" + module_scale_name + "', DeepSeek-V4's released naming)");
    }
    const std::string& scale_name = scale->first;
    const TensorInfo& scales = *scale->second;
    const bool float_scale = scales.dtype == DType::F32 || scales.dtype == DType::BF16 || scales.dtype == DType::F16;
    if (!float_scale && !(scales.dtype == DType::F8_E8M0 && quantization_.power_of_two_scales)) {
      fail("{}: scale tensor '{}' is {}; block scales are F32, BF16 or F16 (F8_E8M0 with scale_fmt ue8m0)",
           scales.file.string(), scale_name, dtype_name(scales.dtype));
    }
    const auto blocks = [](int64_t n, int64_t block) { return (n + block - 1) / block; };
    const std::vector<int64_t> expected = {blocks(weight.shape[0], quantization_.block_rows),
                                           blocks(weight.shape[1], quantization_.block_columns)};
    // transformers 5.17 saves the scales of MoE experts it quantized (FineGrainedFP8Config) without their dimension
    // of one block: [2] for a [256, 128] weight. The grid is the same, so such a scale is read as its 2-D shape.
    const bool squeezed = scales.shape.size() == 1 && (expected[0] == 1 || expected[1] == 1) &&
                          scales.shape[0] == expected[0] * expected[1];
    if (scales.shape != expected && !squeezed) {
      fail("{}: scale tensor '{}' has shape {}, expected {} for the {} weight in {}x{} blocks", scales.file.string(),
           scale_name, shape_string(scales.shape), shape_string(expected), shape_string(weight.shape),
           quantization_.block_rows, quantization_.block_columns);
    }
    const TensorInfo* grid = &scales;
    if (squeezed) {
      auto unsqueezed = std::make_shared<TensorInfo>(scales);
      unsqueezed->shape = expected;
      grid = unsqueezed.get();
      scaled_weights_.push_back(std::move(unsqueezed));
    }
    auto scaled = std::make_shared<TensorInfo>(weight);
    scaled->block_scales = BlockScales{grid, quantization_.block_rows, quantization_.block_columns, 0, 0};
    entry = scaled.get();
    scaled_weights_.push_back(std::move(scaled));
  }
}

void Checkpoint::attach_fp4_expert_scales(const std::filesystem::path& config_path) {
  // DeepSeek-V4's released routed experts (expert_dtype "fp4"; inference/model.py's Linear for
  // torch.float4_e2m1fn_x2, which safetensors stores as I8): `X.weight` [out, in / 2] holds two e2m1 values a byte
  // along `in`, element 2j in the low nibble of byte j (inference/convert.py's cast_e2m1fn_to_e4m3fn unpacks
  // `x & 0x0F` before `x >> 4`), and `X.scale` F8_E8M0 [out, in / 32] one scale per 32 of them. Dequantized, that is
  // OCP MX FP4: e2m1 value x 2^(scale - 127), as gpt-oss's MXFP4 (attach_mxfp4_scales).
  constexpr int64_t kGroup = 32;
  for (auto& [name, entry] : index_) {
    const TensorInfo& packed = *entry;
    if (packed.dtype != DType::I8) continue;
    if (!quantization_.fp4_experts) {
      fail("{}: tensor '{}' is I8 (DeepSeek-V4's packed FP4 experts) but {} has no expert_dtype \"fp4\"",
           packed.file.string(), name, config_path.string());
    }
    if (packed.shape.size() != 2 || !name.ends_with(".weight") || (packed.shape[1] * 2) % kGroup != 0) {
      fail("{}: FP4 expert tensor '{}' is I8 {}; expected `X.weight` I8 [out, in / 2] with `in` a multiple of {}",
           packed.file.string(), name, shape_string(packed.shape), kGroup);
    }
    const std::string scale_name = name.substr(0, name.size() - std::string_view(".weight").size()) + ".scale";
    const auto scale = index_.find(scale_name);
    if (scale == index_.end()) {
      fail("{}: FP4 expert weight '{}' has no scale tensor '{}'", packed.file.string(), name, scale_name);
    }
    const TensorInfo& scales = *scale->second;
    const std::vector<int64_t> shape = {packed.shape[0], packed.shape[1] * 2};
    const std::vector<int64_t> expected = {shape[0], shape[1] / kGroup};
    if (scales.dtype != DType::F8_E8M0) {
      fail("{}: scale tensor '{}' is {}; FP4 expert scales are F8_E8M0", scales.file.string(), scale_name,
           dtype_name(scales.dtype));
    }
    if (scales.shape != expected) {
      fail("{}: scale tensor '{}' has shape {}, expected {} for the FP4 expert weight '{}' of {} values",
           scales.file.string(), scale_name, shape_string(scales.shape), shape_string(expected), name,
           shape_string(shape));
    }
    auto weight = std::make_shared<TensorInfo>(packed);
    weight->dtype = DType::F4_E2M1;
    weight->shape = shape;
    weight->block_scales = BlockScales{&scales, 1, kGroup, 0, 0};
    entry = weight.get();
    scaled_weights_.push_back(std::move(weight));
  }
}

void Checkpoint::attach_mxfp4_scales(const std::filesystem::path& config_path) {
  // The layout is gpt-oss's (gpt_oss/torch/weights.py, _get_mxfp4_tensor) as transformers reads it
  // (integrations/mxfp4.py, convert_moe_packed_tensors and Mxfp4GptOssExperts): `X_blocks` U8 [..., G, 16] holds
  // 32 e2m1 values per row of 16 bytes, element 2j in the low nibble of byte j; `X_scales` U8 [..., G] their e8m0
  // exponents, value = e2m1 x 2^(scale - 127). The 32-element groups run along the last dimension, the input one.
  constexpr int64_t kGroup = 32, kGroupBytes = kGroup / 2;
  constexpr std::string_view kBlocks = "_blocks", kScales = "_scales";
  for (auto& [name, entry] : index_) {
    const TensorInfo& blocks = *entry;
    if (name.ends_with(kScales) && quantization_.mxfp4) {
      const std::string blocks_name = name.substr(0, name.size() - kScales.size()) + std::string(kBlocks);
      if (!index_.contains(blocks_name)) {
        fail("{}: MXFP4 scale tensor '{}' has no blocks tensor '{}'", blocks.file.string(), name, blocks_name);
      }
      continue;
    }
    if (!name.ends_with(kBlocks) || (blocks.dtype != DType::U8 && !quantization_.mxfp4)) continue;
    if (!quantization_.mxfp4) {
      fail("{}: tensor '{}' is U8 MXFP4 blocks but {} has no mxfp4 quantization_config", blocks.file.string(), name,
           config_path.string());
    }
    if (blocks.dtype != DType::U8 || blocks.shape.size() < 2 || blocks.shape.back() != kGroupBytes) {
      fail("{}: MXFP4 blocks tensor '{}' is {} {}; expected U8 [..., K / {}, {}] (two e2m1 values a byte)",
           blocks.file.string(), name, dtype_name(blocks.dtype), shape_string(blocks.shape), kGroup, kGroupBytes);
    }
    const std::string scale_name = name.substr(0, name.size() - kBlocks.size()) + std::string(kScales);
    const auto scale = index_.find(scale_name);
    if (scale == index_.end()) {
      fail("{}: MXFP4 blocks tensor '{}' has no scale tensor '{}'", blocks.file.string(), name, scale_name);
    }
    const TensorInfo& scales = *scale->second;
    const std::vector<int64_t> expected(blocks.shape.begin(), blocks.shape.end() - 1);
    if (scales.dtype != DType::U8 && scales.dtype != DType::F8_E8M0) {
      fail("{}: MXFP4 scale tensor '{}' is {}; expected U8 or F8_E8M0 (e8m0 exponents)", scales.file.string(),
           scale_name, dtype_name(scales.dtype));
    }
    if (scales.shape != expected) {
      fail("{}: MXFP4 scale tensor '{}' has shape {}, expected {} for the {} blocks", scales.file.string(), scale_name,
           shape_string(scales.shape), shape_string(expected), shape_string(blocks.shape));
    }
    auto exponents = std::make_shared<TensorInfo>(scales);
    exponents->dtype = DType::F8_E8M0;  // the same bytes: 2^(s - 127), 0xff NaN
    auto weight = std::make_shared<TensorInfo>(blocks);
    weight->dtype = DType::F4_E2M1;
    weight->shape = expected;
    weight->shape.back() *= kGroup;
    weight->block_scales = BlockScales{exponents.get(), 1, kGroup, 0, 0};
    entry = weight.get();
    scaled_weights_.push_back(std::move(exponents));
    scaled_weights_.push_back(std::move(weight));
  }
}

const TensorInfo& Checkpoint::get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) fail("{}: missing tensor '{}'", dir_.string(), name);
  return *it->second;
}

const TensorInfo& Checkpoint::get(const std::string& name, const std::vector<int64_t>& shape) const {
  const TensorInfo& info = get(name);
  if (info.shape != shape) {
    fail("{}: tensor '{}' has shape {}, expected {}", info.file.string(), name, shape_string(info.shape),
         shape_string(shape));
  }
  return info;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, info] : index_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace tern
