#pragma once
// config.json's quantization_config: how a checkpoint's weights are stored. Block FP8 is what loads today: DeepSeek's
// {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
// (DeepSeek-V3's README_WEIGHTS.md; Qwen3-*-FP8 write the same), and what transformers' FineGrainedFP8Config writes
// (utils/quantization_config.py: no "fmt", plus "scale_fmt", "dequantize" and "modules_to_not_convert"). Which
// tensors are quantized the checkpoint's dtypes say, so modules_to_not_convert is not needed to load.
// MXFP4 is gpt-oss's {"quant_method": "mxfp4", "modules_to_not_convert": [...]} (transformers' Mxfp4Config, which
// also has a load-time "dequantize" flag): only the MoE experts are quantized (integrations/mxfp4.py replaces
// GptOssExperts alone; attention, routers, embeddings and lm_head are in modules_to_not_convert).
// DeepSeek-V4's released checkpoints add a top-level "expert_dtype" beside an fp8 quantization_config (scale_fmt
// "ue8m0"): "fp4" (V4-Flash, V4-Pro) stores the routed experts as packed e2m1 with e8m0 scales per 32 inputs, "fp8"
// (V4-Flash-Base) as the same block FP8 as the rest (vLLM's DeepseekV4FP8Config, models/deepseek_v4.py).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace tern {

struct QuantizationConfig {
  bool block_fp8 = false;  // e4m3 weights with `X.weight_scale_inv` per block_rows x block_columns block
  int64_t block_rows = 0;
  int64_t block_columns = 0;
  // scale_fmt "ue8m0" (DeepSeek-V3.1 and later): scales are powers of two, which may be stored as F8_E8M0.
  bool power_of_two_scales = false;
  // MXFP4 experts: `X_blocks` (U8 [..., K / 32, 16], e2m1 pairs) with `X_scales` (U8 e8m0 [..., K / 32]).
  bool mxfp4 = false;
  // DeepSeek-V4's expert_dtype "fp4": `X.weight` I8 [out, in / 2] (e2m1 pairs) with `X.scale` F8_E8M0 [out, in / 32].
  bool fp4_experts = false;

  // From a parsed config.json; fails naming `origin` and the field for a method, format, activation scheme, block
  // size or expert_dtype that tern cannot load.
  static QuantizationConfig from_config(const nlohmann::json& config, const std::string& origin);
};

// A quantization applied at load to the linear weights a checkpoint stores unquantized (vLLM's --quantization):
// fp8 is block FP8 (model/block_fp8_weight.h).
enum class OnlineQuantization { none, fp8 };

// "none" or "fp8"; fails naming `origin` and the value otherwise.
OnlineQuantization parse_online_quantization(const std::string& name, const std::string& origin);

}  // namespace tern
