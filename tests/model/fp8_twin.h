#pragma once
// FP8 twins of the bf16 fixture models (fp8_checkpoint_test, online_fp8_test): a block-FP8 checkpoint made from the
// fixture's weights, written to disk beside its exactly dequantized float32 twin. The e4m3 rounding here is an
// independent reference (a search of the code table), not the one the loader uses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "fixtures.h"
#include "model/safetensors.h"
#include "quantized_checkpoint.h"

namespace tern::testing {

namespace fs = std::filesystem;

constexpr int64_t kTwinBlock = 128;

// The nearest e4m3fn code to x, ties to the even code, saturating at +-448 as transformers' Fp8Quantize clamps
// before its cast.
inline uint8_t to_e4m3(float x) {
  static const std::vector<float> magnitudes = [] {
    std::vector<float> v;
    for (int code = 0; code < 0x7f; ++code) v.push_back(f8_e4m3_to_f32(static_cast<uint8_t>(code)));
    return v;
  }();
  const float a = std::min(std::abs(x), 448.0f);
  auto code = static_cast<int>(std::lower_bound(magnitudes.begin(), magnitudes.end(), a) - magnitudes.begin());
  if (magnitudes[code] != a) {
    const float below = a - magnitudes[code - 1], above = magnitudes[code] - a;
    if (below < above || (below == above && (code - 1) % 2 == 0)) --code;
  }
  return static_cast<uint8_t>(code | (std::signbit(x) ? 0x80 : 0));
}

// `scale` stored as `dtype` (appended to `bytes`); returns the value stored. f16 truncates: any value the format
// holds will do, since both twins use the stored one.
inline float store_scale(float scale, DType dtype, std::vector<std::byte>& bytes) {
  const auto append = [&](const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    bytes.insert(bytes.end(), b, b + n);
  };
  switch (dtype) {
    case DType::F32:
      append(&scale, 4);
      return scale;
    case DType::BF16: {
      const uint16_t bits = f32_to_bf16(scale);
      append(&bits, 2);
      return bf16_to_f32(bits);
    }
    case DType::F16: {
      uint32_t f;
      std::memcpy(&f, &scale, 4);
      const int exponent = static_cast<int>((f >> 23) & 0xff) - 127 + 15;
      if (exponent < 1 || exponent > 30) fail("scale {} is outside f16's normal range", scale);
      const auto bits = static_cast<uint16_t>((exponent << 10) | ((f >> 13) & 0x3ff));
      append(&bits, 2);
      return f16_to_f32(bits);
    }
    default:
      fail("no scale dtype {}", dtype_name(dtype));
  }
}

// gpt-oss's bf16 experts, [E, in, out] (x @ W): online FP8 quantizes each expert's [out, in], gate and up rows
// apart (SparseMoe), on a grid of its own.
inline bool is_gpt_oss_experts(const TensorInfo& t) {
  return t.shape.size() == 3 &&
         (t.name.ends_with(".mlp.experts.gate_up_proj") || t.name.ends_with(".mlp.experts.down_proj"));
}

// The linear layers' and experts' weights (what DeepSeek's and Qwen3's FP8 checkpoints quantize, and online FP8
// gpt-oss's experts); not the embeddings, lm_head, norms or routers.
inline bool is_linear_weight(const TensorInfo& t) {
  if (is_gpt_oss_experts(t)) return true;
  return t.shape.size() == 2 && t.name.ends_with(".weight") && t.name.find("_proj") != std::string::npos;
}

// values [rows, columns] quantized in 128x128 blocks: each block's scale (stored as `scale_dtype`, appended to
// `scales`) is its max |value| / 448, each value's code the e4m3 nearest value / scale; codes and code x scale in
// float32 written to `codes` and `dequantized` (either may be null).
inline void quantize_blocks(const float* values, int64_t rows, int64_t columns, DType scale_dtype, std::byte* codes,
                            float* dequantized, std::vector<std::byte>& scales) {
  const int64_t block_rows = (rows + kTwinBlock - 1) / kTwinBlock, block_columns = (columns + kTwinBlock - 1) / kTwinBlock;
  for (int64_t br = 0; br < block_rows; ++br) {
    for (int64_t bc = 0; bc < block_columns; ++bc) {
      const int64_t r_end = std::min(rows, (br + 1) * kTwinBlock), c_end = std::min(columns, (bc + 1) * kTwinBlock);
      float amax = 0.0f;
      for (int64_t r = br * kTwinBlock; r < r_end; ++r) {
        for (int64_t c = bc * kTwinBlock; c < c_end; ++c) amax = std::max(amax, std::abs(values[r * columns + c]));
      }
      const float scale = store_scale(amax > 0.0f ? amax / 448.0f : 1.0f, scale_dtype, scales);
      for (int64_t r = br * kTwinBlock; r < r_end; ++r) {
        for (int64_t c = bc * kTwinBlock; c < c_end; ++c) {
          const uint8_t code = to_e4m3(values[r * columns + c] / scale);
          if (codes) codes[r * columns + c] = static_cast<std::byte>(code);
          if (dequantized) dequantized[r * columns + c] = f8_e4m3_to_f32(code) * scale;
        }
      }
    }
  }
}

struct Twins {
  fs::path fp8;  // F8_E4M3 weights with `_scale_inv`, quantization_config in config.json (gpt-oss's experts bf16)
  fs::path f32;  // the same weights dequantized exactly (code x scale in float32), everything else as in bf16
};

inline nlohmann::json fp8_quantization_config() {
  return {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"}, {"weight_block_size", {128, 128}}};
}

// Quantizes the tensors `quantize` picks of the bf16 fixture `name` to 128x128-block FP8, each block scaled by its
// max |value| / 448 (transformers' Fp8Quantize, DeepSeek's scheme), scales stored as `scale_dtype`.
class TwinWriter {
 public:
  TwinWriter(const fs::path& fixture, DType scale_dtype,
             const std::function<bool(const TensorInfo&)>& quantize = is_linear_weight)
      : fixture_(fixture), file_(SafetensorsFile::open(fixture_ / "model.safetensors")) {
    for (const auto& [tensor, info] : file_->tensors()) {
      if (!quantize(info)) {
        fp8_.push_back(info);
        f32_.push_back(info);
        continue;
      }
      if (is_gpt_oss_experts(info)) {  // block FP8 has no layout for them: the FP8 twin keeps them as they are
        fp8_.push_back(info);
        f32_.push_back(gpt_oss_experts_dequantized(info, scale_dtype));
        continue;
      }
      const int64_t rows = info.shape[0], columns = info.numel() / rows;
      const int64_t block_rows = (rows + kTwinBlock - 1) / kTwinBlock, block_columns = (columns + kTwinBlock - 1) / kTwinBlock;
      std::vector<float> values(info.numel());
      convert_to_f32(info.dtype, info.data, values.data(), values.size());
      auto& codes = keep(std::vector<std::byte>(values.size()));
      auto& dequantized = keep(std::vector<std::byte>(values.size() * sizeof(float)));
      auto& scales = keep({});
      quantize_blocks(values.data(), rows, columns, scale_dtype, codes.data(),
                      reinterpret_cast<float*>(dequantized.data()), scales);
      fp8_.push_back({tensor, {}, DType::F8_E4M3, info.shape, codes.data(), codes.size(), {}});
      fp8_.push_back({tensor + "_scale_inv", {}, scale_dtype, {block_rows, block_columns}, scales.data(), scales.size(), {}});
      f32_.push_back({tensor, {}, DType::F32, info.shape, dequantized.data(), dequantized.size(), {}});
    }
  }

  const fs::path& fixture() const { return fixture_; }
  std::vector<TensorInfo>& fp8_tensors() { return fp8_; }

  Twins write(const std::string& tag, const nlohmann::json& quantization = fp8_quantization_config()) const {
    const fs::path base = fs::path(::testing::TempDir()) / ("tern_fp8_" + tag);
    nlohmann::json config = read_json(fixture_ / "config.json");
    write_model(base / "f32", fixture_, f32_, config);
    config["quantization_config"] = quantization;
    write_model(base / "fp8", fixture_, fp8_, config);
    return {base / "fp8", base / "f32"};
  }

 private:
  std::vector<std::byte>& keep(std::vector<std::byte> bytes) { return buffers_.emplace_back(std::move(bytes)); }

  // gpt-oss's experts [E, in, out] with each expert's [out, in] (gate_up's rows de-interleaved: gate columns 2j,
  // then up columns 2j + 1) quantized on its own grid, dequantized, in the stored layout, F32.
  TensorInfo gpt_oss_experts_dequantized(const TensorInfo& info, DType scale_dtype) {
    const int64_t experts = info.shape[0], in = info.shape[1], out = info.shape[2];
    const bool gate_up = info.name.ends_with("gate_up_proj");
    const auto source_column = [&](int64_t r) { return !gate_up ? r : r < out / 2 ? 2 * r : 2 * (r - out / 2) + 1; };
    std::vector<float> values(info.numel());
    convert_to_f32(info.dtype, info.data, values.data(), values.size());
    auto& bytes = keep(std::vector<std::byte>(values.size() * sizeof(float)));
    auto* result = reinterpret_cast<float*>(bytes.data());
    std::vector<float> weight(out * in), dequantized(out * in);
    std::vector<std::byte> scales;
    for (int64_t e = 0; e < experts; ++e) {
      const float* stored = values.data() + e * in * out;
      for (int64_t r = 0; r < out; ++r) {
        for (int64_t k = 0; k < in; ++k) weight[r * in + k] = stored[k * out + source_column(r)];
      }
      quantize_blocks(weight.data(), out, in, scale_dtype, nullptr, dequantized.data(), scales);
      for (int64_t r = 0; r < out; ++r) {
        for (int64_t k = 0; k < in; ++k) result[e * in * out + k * out + source_column(r)] = dequantized[r * in + k];
      }
    }
    return {info.name, {}, DType::F32, info.shape, bytes.data(), bytes.size(), {}};
  }

  fs::path fixture_;
  std::shared_ptr<const SafetensorsFile> file_;
  std::deque<std::vector<std::byte>> buffers_;  // what the written tensors point to
  std::vector<TensorInfo> fp8_, f32_;
};

}  // namespace tern::testing
