#include "model/quantization_config.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace tern {

namespace {

// The weight blocks the FP8 path takes: DeepSeek's and Qwen3's, and the tile of the Hopper FP8 GEMMs (DeepGEMM).
constexpr int64_t kBlockSize = 128;

std::string string_field(const nlohmann::json& q, const char* key, const std::string& fallback,
                         const std::string& origin) {
  const auto it = q.find(key);
  if (it == q.end() || it->is_null()) return fallback;
  if (!it->is_string()) fail("{}: quantization_config.{} is not a string", origin, key);
  return it->get<std::string>();
}

}  // namespace

QuantizationConfig QuantizationConfig::from_config(const nlohmann::json& config, const std::string& origin) {
  QuantizationConfig out;
  // A top-level field of DeepSeek-V4's config.json, which vLLM reads as hf_config.expert_dtype.
  if (const auto expert = config.find("expert_dtype"); expert != config.end() && !expert->is_null()) {
    if (!expert->is_string() || (*expert != "fp4" && *expert != "fp8")) {
      fail("{}: expert_dtype {} is not supported (supported: \"fp4\", \"fp8\")", origin, expert->dump());
    }
    out.fp4_experts = *expert == "fp4";
  }
  const auto it = config.find("quantization_config");
  if (it == config.end() || it->is_null()) return out;
  const nlohmann::json& q = *it;
  if (!q.is_object()) fail("{}: quantization_config is not an object", origin);
  const std::string method = string_field(q, "quant_method", "", origin);
  if (method == "mxfp4") {
    // modules_to_not_convert names what stays unquantized; the checkpoint's dtypes say the same, so it is not read.
    out.mxfp4 = true;
    return out;
  }
  if (method != "fp8") {
    fail("{}: quantization_config.quant_method '{}' is not supported (supported: fp8, block-scaled; mxfp4)", origin,
         method);
  }
  const std::string fmt = string_field(q, "fmt", "e4m3", origin);
  if (fmt != "e4m3") fail("{}: quantization_config.fmt '{}' is not supported (supported: e4m3)", origin, fmt);
  // transformers lower-cases it (FineGrainedFP8Config.post_init).
  std::string activation = string_field(q, "activation_scheme", "dynamic", origin);
  std::transform(activation.begin(), activation.end(), activation.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (activation != "dynamic") {
    fail("{}: quantization_config.activation_scheme '{}' is not supported (supported: dynamic)", origin, activation);
  }
  const std::string scale_fmt = string_field(q, "scale_fmt", "float", origin);
  if (scale_fmt != "float" && scale_fmt != "ue8m0") {
    fail("{}: quantization_config.scale_fmt '{}' is not supported (supported: float, ue8m0)", origin, scale_fmt);
  }
  out.power_of_two_scales = scale_fmt == "ue8m0";
  // Without a block size, vLLM reads fp8 as one scale per tensor (`weight_scale`), a different layout.
  const auto block = q.find("weight_block_size");
  if (block == q.end() || block->is_null()) {
    fail("{}: quantization_config has no weight_block_size: per-tensor FP8 is not supported (supported: [{}, {}] "
         "blocks)", origin, kBlockSize, kBlockSize);
  }
  if (!block->is_array() || block->size() != 2 || !(*block)[0].is_number_integer() ||
      !(*block)[1].is_number_integer() || (*block)[0].get<int64_t>() != kBlockSize ||
      (*block)[1].get<int64_t>() != kBlockSize) {
    fail("{}: quantization_config.weight_block_size {} is not supported (supported: [{}, {}])", origin, block->dump(),
         kBlockSize, kBlockSize);
  }
  out.block_fp8 = true;
  out.block_rows = out.block_columns = kBlockSize;
  return out;
}

OnlineQuantization parse_online_quantization(const std::string& name, const std::string& origin) {
  if (name == "none") return OnlineQuantization::none;
  if (name == "fp8") return OnlineQuantization::fp8;
  fail("{}: quantization '{}' is not supported (supported: none, fp8)", origin, name);
}

}  // namespace tern
