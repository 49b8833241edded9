#include "model/arch/deepseek_v4/v4_released_checkpoint.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <fstream>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "model/arch/deepseek_v4/v4_checkpoint_names.h"
#include "model/arch/deepseek_v4/v4_config.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "model/ue8m0_quantization.h"

namespace tern {

namespace {

namespace fs = std::filesystem;

constexpr int64_t kBlock = 128;  // DeepSeek's weight_block_size
constexpr int64_t kFp4Group = 32;

enum class ReleasedFormat { fp8_blocks, fp4_experts, f32, i32, as_stored };

// How the released checkpoint stores the tensor named `released`: inference/model.py builds Linear layers in FP8
// unless given a dtype (the compressors' wkv and wgate in float32, "stored in bf16" in the checkpoint as its comment
// says; the indexer's weights_proj in bf16; wo_a in bf16, stored in FP8 and dequantized by its convert.py), the
// routed experts in expert_dtype, the gate's weight in bf16, and ape, attn_sink, the gate's bias and the mHC tensors
// in float32, tid2eid in int32.
ReleasedFormat released_format(const std::string& released, V4ExpertDtype experts) {
  static const std::set<std::string, std::less<>> fp8 = {
      "attn.wq_a.weight", "attn.wq_b.weight", "attn.wkv.weight", "attn.wo_a.weight", "attn.wo_b.weight",
      "attn.indexer.wq_b.weight", "ffn.shared_experts.w1.weight", "ffn.shared_experts.w2.weight",
      "ffn.shared_experts.w3.weight"};
  static const std::set<std::string, std::less<>> f32 = {
      "hc_attn_fn", "hc_attn_base", "hc_attn_scale", "hc_ffn_fn", "hc_ffn_base", "hc_ffn_scale", "attn.attn_sink",
      "attn.compressor.ape", "attn.indexer.compressor.ape", "ffn.gate.bias", "hc_head_fn", "hc_head_base",
      "hc_head_scale"};
  std::string_view leaf = released;
  if (leaf.starts_with("layers.")) leaf = leaf.substr(leaf.find('.', 7) + 1);  // past "layers.<i>."
  if (fp8.contains(leaf)) return ReleasedFormat::fp8_blocks;
  if (leaf.starts_with("ffn.experts.") &&
      (leaf.ends_with(".w1.weight") || leaf.ends_with(".w2.weight") || leaf.ends_with(".w3.weight"))) {
    return experts == V4ExpertDtype::fp4 ? ReleasedFormat::fp4_experts : ReleasedFormat::fp8_blocks;
  }
  if (f32.contains(leaf)) return ReleasedFormat::f32;
  if (leaf == "ffn.gate.tid2eid") return ReleasedFormat::i32;
  return ReleasedFormat::as_stored;
}

// `X.scale` beside `X.weight`.
std::string scale_name(const std::string& weight) {
  return weight.substr(0, weight.size() - std::string_view(".weight").size()) + ".scale";
}

template <typename T>
std::vector<std::byte> bytes_of(const std::vector<T>& values) {
  std::vector<std::byte> bytes(values.size() * sizeof(T));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// The tensors of one output shard, owning the bytes of those it made.
class ShardTensors {
 public:
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, std::vector<std::byte> bytes) {
    const std::vector<std::byte>& kept = buffers_.emplace_back(std::move(bytes));
    tensors_.push_back({name, {}, dtype, std::move(shape), kept.data(), kept.size(), {}});
  }
  // The source tensor's bytes as they are, under `name`.
  void add_as_stored(const TensorInfo& source, const std::string& name) {
    TensorInfo tensor = source;
    tensor.name = name;
    tensor.block_scales.reset();
    tensors_.push_back(std::move(tensor));
  }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }

 private:
  std::deque<std::vector<std::byte>> buffers_;
  std::vector<TensorInfo> tensors_;
};

// The dequantized values of `source` as bf16, which holds each exactly unless it is beyond bf16's range.
std::vector<std::byte> exact_bf16(const std::vector<float>& values, const TensorInfo& source) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    bits[i] = f32_to_bf16(values[i]);
    if (bf16_to_f32(bits[i]) != values[i]) {
      fail("{}: tensor '{}' dequantizes to {} at element {}, which bfloat16 does not hold (beyond its range)",
           source.file.string(), source.name, values[i], i);
    }
  }
  return bytes_of(bits);
}

void add_scales(ShardTensors& out, const std::string& name, const Ue8m0Weight& quantized, DType dtype) {
  if (dtype == DType::F8_E8M0) {
    out.add(name, DType::F8_E8M0, quantized.scale_shape, bytes_of(quantized.exponents));
    return;
  }
  std::vector<float> scales(quantized.exponents.size());
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = std::ldexp(1.0f, quantized.exponents[i] - 127);
  out.add(name, DType::F32, quantized.scale_shape, bytes_of(scales));
}

std::vector<float> float_values(const TensorInfo& source) {
  if (source.dtype != DType::BF16 && source.dtype != DType::F16 && source.dtype != DType::F32) {
    fail("{}: tensor '{}' is {}; the released layout stores it in float32, from BF16, F16 or F32",
         source.file.string(), source.name, dtype_name(source.dtype));
  }
  std::vector<float> values(static_cast<size_t>(source.numel()));
  convert_to_f32(source.dtype, source.data, values.data(), values.size());
  return values;
}

std::vector<int32_t> int32_values(const TensorInfo& source) {
  std::vector<int32_t> values(static_cast<size_t>(source.numel()));
  if (source.dtype == DType::I32) {
    std::memcpy(values.data(), source.data, source.size_bytes);
    return values;
  }
  if (source.dtype != DType::I64) {
    fail("{}: tensor '{}' is {}; the released layout stores it in int32, from I32 or I64", source.file.string(),
         source.name, dtype_name(source.dtype));
  }
  for (size_t i = 0; i < values.size(); ++i) {
    int64_t value;
    std::memcpy(&value, source.data + i * sizeof(int64_t), sizeof(value));
    if (value < INT32_MIN || value > INT32_MAX) {
      fail("{}: tensor '{}' holds {}, beyond int32", source.file.string(), source.name, value);
    }
    values[i] = static_cast<int32_t>(value);
  }
  return values;
}

// Converts the tensor `source` of one shard into `released` (and its bf16 twin into `twin`).
// `twin`: null where no dequantized twin is written.
void convert_tensor(const TensorInfo& source, V4ExpertDtype experts, ShardTensors& released, ShardTensors* twin) {
  const std::string name = v4_released_name(source.name);
  const DType scale_dtype = experts == V4ExpertDtype::fp4 ? DType::F8_E8M0 : DType::F32;
  switch (released_format(name, experts)) {
    case ReleasedFormat::fp8_blocks: {
      const Ue8m0Weight quantized = quantize_fp8_ue8m0(source, kBlock, kBlock);
      released.add(name, DType::F8_E4M3, source.shape, bytes_of(quantized.codes));
      add_scales(released, scale_name(name), quantized, scale_dtype);
      if (twin) twin->add(source.name, DType::BF16, source.shape, exact_bf16(quantized.dequantized, source));
      return;
    }
    case ReleasedFormat::fp4_experts: {
      const Ue8m0Weight quantized = quantize_fp4_ue8m0(source, kFp4Group);
      released.add(name, DType::I8, {source.shape[0], source.shape[1] / 2}, bytes_of(quantized.codes));
      add_scales(released, scale_name(name), quantized, DType::F8_E8M0);
      if (twin) twin->add(source.name, DType::BF16, source.shape, exact_bf16(quantized.dequantized, source));
      return;
    }
    case ReleasedFormat::f32:
      released.add(name, DType::F32, source.shape, bytes_of(float_values(source)));
      break;
    case ReleasedFormat::i32:
      released.add(name, DType::I32, source.shape, bytes_of(int32_values(source)));
      break;
    case ReleasedFormat::as_stored:
      released.add_as_stored(source, name);
      break;
  }
  if (twin) twin->add_as_stored(source, source.name);
}

nlohmann::json read_config(const fs::path& path) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot open", path.string());
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed JSON: {}", path.string(), e.what());
  }
}

void write_json(const fs::path& path, const nlohmann::json& json) {
  std::ofstream out(path);
  out << json.dump(2) << "\n";
  if (!out) fail("{}: cannot write", path.string());
}

// DeepSeek's released config.json for the model `source` describes (transformers' config.json), read as tern reads
// it, so that both give the same DeepseekV4Config.
nlohmann::json released_config(const nlohmann::json& source, V4ExpertDtype experts, const std::string& origin) {
  const ModelConfig model = ModelConfig::from_json(source, origin);
  if (model.architecture != "DeepseekV4ForCausalLM") {
    fail("{}: architecture '{}'; the released layout is DeepseekV4ForCausalLM's", origin, model.architecture);
  }
  if (const auto q = source.find("quantization_config"); q != source.end() && !q->is_null()) {
    fail("{}: the checkpoint is already quantized (quantization_config); convert an unquantized one", origin);
  }
  const DeepseekV4Config v4 = read_deepseek_v4_config(model);
  nlohmann::json out = source;
  for (const char* key : {"layer_types", "mlp_layer_types", "compress_rates", "compress_rate_csa", "compress_rate_hca",
                          "rope_parameters", "rope_scaling", "partial_rotary_factor", "dtype", "transformers_version",
                          "output_router_logits", "router_aux_loss_coef", "router_jitter_noise"}) {
    out.erase(key);
  }
  // inference/model.py: ratio 0 is the sliding window alone, 4 the overlapping compressor with the indexer, any other
  // ratio plain compression; the MTP layers' ratios follow the layers'.
  if (v4.csa_compress_rate != 4) {
    fail("{}: compressed sparse attention at rate {}; the released layout marks it by compress ratio 4", origin,
         v4.csa_compress_rate);
  }
  nlohmann::json ratios = nlohmann::json::array();
  for (const V4AttentionKind kind : v4.attention_kinds) ratios.push_back(v4.compress_rate(kind));
  const auto mtp = source.find("num_nextn_predict_layers");
  const int64_t num_mtp_layers = mtp != source.end() && mtp->is_number_integer() ? mtp->get<int64_t>() : 0;
  // An MTP layer's kind where the source's config.json lists it after the layers' (v4_config.h), else 0.
  for (int64_t k = 0; k < num_mtp_layers; ++k) {
    const auto index = static_cast<size_t>(k);
    ratios.push_back(index < v4.mtp_attention_kinds.size() ? v4.compress_rate(v4.mtp_attention_kinds[index]) : 0);
  }
  out["compress_ratios"] = ratios;
  // model.py's Gate: hash routing in the first n_hash_layers layers.
  int64_t num_hash_layers = 0;
  while (num_hash_layers < model.num_layers && v4.hash_moe[num_hash_layers]) ++num_hash_layers;
  for (int64_t i = num_hash_layers; i < model.num_layers; ++i) {
    if (v4.hash_moe[i]) {
      fail("{}: hash-routed layer {} after a scored one; the released layout has them first", origin, i);
    }
  }
  out["num_hash_layers"] = num_hash_layers;
  // Plain rope at rope_theta for sliding layers; the compressed layers' at compress_rope_theta with rope_scaling.
  const RopeConfig& main_rope = v4.main_rope;
  const RopeConfig& compress_rope = v4.compress_rope;
  if (main_rope.type != "default" || main_rope.partial_rotary_factor != compress_rope.partial_rotary_factor) {
    fail("{}: rope_parameters.main is not plain rope over the compressed layers' rotary dimensions", origin);
  }
  out["rope_theta"] = main_rope.theta;
  out["compress_rope_theta"] = compress_rope.theta;
  out["qk_rope_head_dim"] = std::llround(static_cast<double>(model.head_dim) * main_rope.partial_rotary_factor);
  if (compress_rope.type == "yarn") {
    if (compress_rope.attention_factor != 1.0) {
      fail("{}: yarn attention_factor {}; the released layout's compressed rope has 1", origin,
           compress_rope.attention_factor);
    }
    out["rope_scaling"] = {{"type", "yarn"},
                           {"factor", compress_rope.factor},
                           {"original_max_position_embeddings", compress_rope.original_max_position_embeddings},
                           {"beta_fast", compress_rope.beta_fast},
                           {"beta_slow", compress_rope.beta_slow}};
  } else if (compress_rope.type != "default") {
    fail("{}: compressed layers' rope_type '{}'; the released layout takes default or yarn", origin,
         compress_rope.type);
  }
  if (const auto dtype = source.find("dtype"); dtype != source.end() && !source.contains("torch_dtype")) {
    out["torch_dtype"] = *dtype;
  }
  out["topk_method"] = "noaux_tc";  // the scored routers' bias (vLLM builds e_score_correction_bias on it)
  out["expert_dtype"] = experts == V4ExpertDtype::fp4 ? "fp4" : "fp8";
  out["quantization_config"] = {{"activation_scheme", "dynamic"},
                                {"fmt", "e4m3"},
                                {"quant_method", "fp8"},
                                {"scale_fmt", "ue8m0"},
                                {"weight_block_size", {kBlock, kBlock}}};
  return out;
}

// The source's shards, by file name: model.safetensors, or those model.safetensors.index.json lists.
std::vector<std::string> shard_names(const fs::path& source) {
  const fs::path index = source / "model.safetensors.index.json";
  if (!fs::exists(index)) {
    if (!fs::exists(source / "model.safetensors")) {
      fail("{}: no model.safetensors or model.safetensors.index.json", source.string());
    }
    return {"model.safetensors"};
  }
  std::set<std::string> names;
  const nlohmann::json json = read_config(index);
  if (!json.contains("weight_map") || !json["weight_map"].is_object()) fail("{}: no weight_map", index.string());
  for (const auto& [tensor, file] : json["weight_map"].items()) {
    const std::string name = file.get<std::string>();
    if (name.find('/') != std::string::npos) {
      fail("{}: shard name '{}' leaves the model directory", index.string(), name);
    }
    names.insert(name);
  }
  return {names.begin(), names.end()};
}

void prepare_directory(const fs::path& dir) {
  if (fs::exists(dir) && !fs::is_empty(dir)) fail("{}: exists and is not empty", dir.string());
  fs::create_directories(dir);
}

}  // namespace

void write_v4_released_checkpoint(const fs::path& source, const fs::path& out, const V4ReleasedConversion& conversion) {
  const fs::path config_path = source / "config.json";
  const nlohmann::json source_config = read_config(config_path);
  const nlohmann::json config = released_config(source_config, conversion.expert_dtype, config_path.string());
  const std::vector<std::string> shards = shard_names(source);
  const fs::path* twin = conversion.dequantized_twin ? &*conversion.dequantized_twin : nullptr;
  if (twin && fs::weakly_canonical(*twin) == fs::weakly_canonical(out)) {
    fail("{}: the dequantized twin needs a directory of its own", twin->string());
  }
  prepare_directory(out);
  if (twin) prepare_directory(*twin);

  // Shards convert on threads of their own, each quantizing and writing its file (one thread took over five minutes
  // for the 29 GB of V4-Flash's first eight layers); the index is put together afterwards, in shard order.
  std::vector<std::vector<std::string>> released_names(shards.size()), twin_names(shards.size());
  std::atomic<size_t> next_shard{0};
  const auto convert_shards = [&] {
    for (size_t i = next_shard++; i < shards.size(); i = next_shard++) {
      const auto file = SafetensorsFile::open(source / shards[i]);
      ShardTensors released, twin_tensors;
      for (const auto& [name, tensor] : file->tensors()) {
        convert_tensor(tensor, conversion.expert_dtype, released, twin ? &twin_tensors : nullptr);
      }
      for (const TensorInfo& tensor : released.tensors()) released_names[i].push_back(tensor.name);
      for (const TensorInfo& tensor : twin_tensors.tensors()) twin_names[i].push_back(tensor.name);
      write_safetensors(out / shards[i], released.tensors());
      if (twin) write_safetensors(*twin / shards[i], twin_tensors.tensors());
    }
  };
  const size_t num_threads = std::min<size_t>(shards.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::future<void>> helpers;
  for (size_t t = 1; t < num_threads; ++t) helpers.push_back(std::async(std::launch::async, convert_shards));
  convert_shards();
  for (auto& helper : helpers) helper.get();  // rethrows a helper's error
  nlohmann::json released_map = nlohmann::json::object(), twin_map = nlohmann::json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    for (const std::string& name : released_names[i]) released_map[name] = shards[i];
    for (const std::string& name : twin_names[i]) twin_map[name] = shards[i];
  }
  write_json(out / "config.json", config);
  if (twin) write_json(*twin / "config.json", source_config);
  if (fs::exists(source / "model.safetensors.index.json")) {
    write_json(out / "model.safetensors.index.json", {{"weight_map", released_map}});
    if (twin) write_json(*twin / "model.safetensors.index.json", {{"weight_map", twin_map}});
  }
  // The tokenizer and generation files, as DeepSeek's convert.py copies the tokenizer's.
  const std::set<std::string> written(shards.begin(), shards.end());
  for (const auto& entry : fs::directory_iterator(source)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || written.contains(name) || name == "config.json" ||
        name == "model.safetensors.index.json") {
      continue;
    }
    fs::copy_file(entry.path(), out / name);
    if (twin) fs::copy_file(entry.path(), *twin / name);
  }
}

}  // namespace tern
