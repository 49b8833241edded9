#pragma once
// A Hugging Face model directory's weights: model.safetensors, or shards listed by model.safetensors.index.json.
// A block-quantized weight (config.json's quantization_config: block FP8, MXFP4 or DeepSeek-V4's FP4 experts) comes
// with its scales attached (TensorInfo's block_scales), checked when the checkpoint opens.
#include <filesystem>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/quantization_config.h"
#include "model/safetensors.h"

namespace tern {

class LoadProgress;

class Checkpoint {
 public:
  // `progress`, where given, learns the checkpoint's size here and the bytes loaded from the WeightLoader.
  // `online` fp8 fails for an MXFP4 checkpoint and leaves a block-FP8 one as it is (as vLLM does), but for
  // DeepSeek-V4's FP4 experts, which it repacks as block FP8.
  static Checkpoint open(const std::filesystem::path& dir, LoadProgress* progress = nullptr,
                         OnlineQuantization online = OnlineQuantization::none);

  bool has(const std::string& name) const { return index_.count(name) != 0; }
  // The tensor `name`; fails naming the file and tensor if it is missing or its shape differs from `shape`.
  const TensorInfo& get(const std::string& name, const std::vector<int64_t>& shape) const;
  const TensorInfo& get(const std::string& name) const;
  std::vector<std::string> names() const;
  LoadProgress* progress() const { return progress_; }
  const QuantizationConfig& quantization() const { return quantization_; }
  // Whether the linear weights it stores unquantized are quantized to block FP8 as they load (WeightLoader).
  bool quantizes_to_fp8() const { return quantizes_to_fp8_; }
  // Whether its FP4 experts (DeepSeek-V4's expert_dtype "fp4") reach the backend as block FP8 (WeightLoader).
  bool repacks_fp4_to_fp8() const { return repacks_fp4_to_fp8_; }

 private:
  // Points each F8_E4M3 weight's index entry at a copy with its `_scale_inv` (DeepSeek-V4's released naming:
  // `X.scale` for `X.weight`) attached, failing naming the file and tensor where the scale is missing, of another
  // dtype or of the wrong shape.
  void attach_block_scales(const std::filesystem::path& config_path);
  // Points each I8 `X.weight` entry (DeepSeek-V4's FP4 experts) at an F4_E2M1 weight of its logical shape [out, in]
  // with `X.scale` attached (1x32 blocks), failing naming the file and tensor where the config has no expert_dtype
  // "fp4" or the scale is missing or misshapen.
  void attach_fp4_expert_scales(const std::filesystem::path& config_path);
  // Points each MXFP4 `X_blocks` entry at an F4_E2M1 weight of its logical shape [..., K] with `X_scales` attached
  // (1x32 blocks), failing naming the file and tensor where blocks or scales are missing or misshapen.
  void attach_mxfp4_scales(const std::filesystem::path& config_path);

  std::filesystem::path dir_;
  std::vector<std::shared_ptr<const SafetensorsFile>> files_;
  std::unordered_map<std::string, const TensorInfo*> index_;
  // What index_ points to for quantized weights, and scales read in another shape than stored.
  std::vector<std::shared_ptr<const TensorInfo>> scaled_weights_;
  QuantizationConfig quantization_;
  bool quantizes_to_fp8_ = false;
  bool repacks_fp4_to_fp8_ = false;
  LoadProgress* progress_ = nullptr;
};

}  // namespace tern
