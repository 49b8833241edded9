#include "model/weight_loader.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "model/load_progress.h"

namespace tern {

namespace {

// Element types that are only the codes or scales of a quantized weight (MXFP4's U8 blocks and scales and
// DeepSeek-V4's I8 FP4 experts included).
bool needs_block_scales(DType dtype) {
  return dtype == DType::F8_E4M3 || dtype == DType::F8_E8M0 || dtype == DType::U8 || dtype == DType::I8 ||
         dtype == DType::F4_E2M1;
}

// Fails unless `info` is a plain tensor, or a block-quantized one where `takes_quantized`.
void check_format(const TensorInfo& info, bool takes_quantized) {
  if (info.block_scales && !takes_quantized) {
    fail("{}: tensor '{}' is block-quantized ({}), but the architecture takes an unquantized tensor here "
         "(embeddings, norms, routers, biases and the lm_head are not quantized)",
         info.file.string(), info.name, dtype_name(info.dtype));
  }
  if (!info.block_scales && needs_block_scales(info.dtype)) {
    fail("{}: tensor '{}' is {} without block scales", info.file.string(), info.name, dtype_name(info.dtype));
  }
}

// An unquantized weight matrix, what online FP8 quantizes (biases and other 1-D tensors stay as they are).
bool quantizes_online(const TensorInfo& info) {
  return !info.block_scales && info.shape.size() == 2 &&
         (info.dtype == DType::BF16 || info.dtype == DType::F16 || info.dtype == DType::F32);
}

}  // namespace

WeightLoader WeightLoader::linear_weights() const {
  WeightLoader linear = grouped_weights();
  linear.loads_linear_weights_ = true;
  return linear;
}

WeightLoader WeightLoader::grouped_weights() const {
  WeightLoader quantized(*this);
  quantized.takes_quantized_ = true;
  quantized.loads_linear_weights_ = false;
  if (checkpoint_.quantizes_to_fp8() || checkpoint_.repacks_fp4_to_fp8()) {
    quantized.fp8_weights_ = std::make_shared<Fp8Weights>();
  }
  return quantized;
}

const TensorInfo& WeightLoader::tensor(const std::string& name, const std::vector<int64_t>& shape) const {
  const TensorInfo& info = checkpoint_.get(name, shape);
  const bool to_fp8 = (checkpoint_.quantizes_to_fp8() && quantizes_online(info)) ||
                      (checkpoint_.repacks_fp4_to_fp8() && info.dtype == DType::F4_E2M1);
  if (!fp8_weights_ || !to_fp8) return info;
  std::unique_ptr<BlockFp8Weight>& quantized = (*fp8_weights_)[name];
  if (!quantized) quantized = std::make_unique<BlockFp8Weight>(info);
  return quantized->info();
}

int64_t WeightLoader::checkpoint_bytes(const TensorInfo& part) const {
  // Quantized here from what the checkpoint stores (online FP8, an FP4 expert's repacking).
  if (part.dtype == DType::F8_E4M3 && checkpoint_.has(part.name)) {
    const DType stored = checkpoint_.get(part.name).dtype;
    if (stored != DType::F8_E4M3) return static_cast<int64_t>(dtype_bytes(stored, part.numel()));
  }
  int64_t bytes = static_cast<int64_t>(part.size_bytes);
  if (part.block_scales) bytes += static_cast<int64_t>(part.block_scales->scales->size_bytes);
  return bytes;
}

std::optional<float> WeightLoader::scalar(const std::string& name) const {
  if (!checkpoint_.has(name)) return std::nullopt;
  const TensorInfo& t = checkpoint_.get(name);
  if (t.numel() != 1 || t.shape.size() > 1 ||
      (t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F16)) {
    fail("{}: expected a scalar of a float type, got {} of shape {}", name, dtype_name(t.dtype), shape_string(t.shape));
  }
  float value = 0.0f;
  convert_to_f32(t.dtype, t.data, &value, 1);
  return value;
}

const TensorInfo& WeightLoader::info(const std::string& name, const std::vector<int64_t>& shape) const {
  const TensorInfo& info = tensor(name, shape);
  check_format(info, takes_quantized_);
  return info;
}

TensorInfo WeightLoader::plain_info(const std::string& name, const std::vector<int64_t>& shape,
                                    std::vector<float>& storage) const {
  const TensorInfo& info = tensor(name, shape);
  check_format(info, takes_quantized_);
  if (!info.block_scales) return info;
  storage.resize(static_cast<size_t>(info.numel()));
  dequantize_to_f32(info, storage.data());
  TensorInfo plain = info;
  plain.dtype = DType::F32;
  plain.data = reinterpret_cast<const std::byte*>(storage.data());
  plain.size_bytes = storage.size() * sizeof(float);
  plain.block_scales.reset();
  return plain;
}

Tensor WeightLoader::load(const std::string& name, const std::vector<int64_t>& shape) {
  const TensorInfo* part = &tensor(name, shape);
  return load_parts({&part, 1});
}

Tensor WeightLoader::load_concat(const std::vector<std::pair<std::string, std::vector<int64_t>>>& parts) {
  std::vector<const TensorInfo*> infos;
  for (const auto& [name, shape] : parts) infos.push_back(&tensor(name, shape));
  return load_parts(infos);
}

std::optional<Tensor> WeightLoader::load_optional(const std::string& name, const std::vector<int64_t>& shape) {
  if (!checkpoint_.has(name)) return std::nullopt;
  return load(name, shape);
}

int64_t WeightLoader::shard_count(int64_t count, const std::string& what) const {
  if (count % shard_.size != 0) {
    fail("tensor parallelism: {} ({}) does not split evenly over {} ranks", what, count, shard_.size);
  }
  return count / shard_.size;
}

Tensor WeightLoader::load_row_shards(const std::vector<std::pair<std::string, std::vector<int64_t>>>& parts) {
  if (shard_.size == 1) return load_concat(parts);
  std::vector<RowRange> ranges;
  for (const auto& [name, shape] : parts) ranges.push_back(row_shard(name, shape));
  return load_row_ranges(ranges);
}

RowRange WeightLoader::row_shard(const std::string& name, const std::vector<int64_t>& shape) const {
  const int64_t rows = shard_count(shape.at(0), "dimension 0 of " + name);
  return {name, shape, shard_.rank * rows, rows};
}

Tensor WeightLoader::load_row_ranges(const std::vector<RowRange>& parts) {
  std::vector<TensorInfo> views;
  views.reserve(parts.size());
  for (const auto& part : parts) {
    const TensorInfo& info = tensor(part.name, part.shape);
    if (part.begin < 0 || part.count < 0 || part.begin + part.count > part.shape.at(0)) {
      fail("{}: rows [{}, {}) outside its {} rows", part.name, part.begin, part.begin + part.count, part.shape.at(0));
    }
    views.push_back(row_view(info, part.begin, part.count));
  }
  std::vector<const TensorInfo*> infos;
  for (const auto& view : views) infos.push_back(&view);
  return load_parts(infos);
}

Tensor WeightLoader::load_column_shard(const std::string& name, const std::vector<int64_t>& shape) {
  if (shard_.size == 1) return load(name, shape);
  const TensorInfo& info = tensor(name, shape);
  if (shape.size() != 2) fail("tensor parallelism: {} is not 2-D, its columns cannot be split", name);
  const int64_t columns = shard_count(shape[1], "dimension 1 of " + name);
  const size_t element = info.size_bytes / static_cast<size_t>(info.numel());
  const size_t shard_row = static_cast<size_t>(columns) * element;
  std::vector<std::byte> bytes(static_cast<size_t>(shape[0]) * shard_row);
  for (int64_t r = 0; r < shape[0]; ++r) {
    std::memcpy(bytes.data() + r * shard_row, info.data + r * row_bytes(info) + shard_.rank * shard_row, shard_row);
  }
  TensorInfo view = info;
  view.shape = {shape[0], columns};
  view.data = bytes.data();
  view.size_bytes = bytes.size();
  if (view.block_scales) view.block_scales->first_column += shard_.rank * columns;
  const TensorInfo* part = &view;
  return load_parts({&part, 1});
}

Tensor WeightLoader::load_vocab_shard(const std::string& name, const std::vector<int64_t>& shape) {
  if (shard_.size == 1) return load(name, shape);
  const TensorInfo& info = checkpoint_.get(name, shape);
  check_format(info, false);  // the padding rows below would have no block scales
  const int64_t rows = vocab_shard_rows(shape.at(0));
  const int64_t begin = shard_.rank * rows;
  const int64_t present = std::clamp<int64_t>(shape[0] - begin, 0, rows);
  if (present == rows) {
    const TensorInfo view = row_view(info, begin, rows);
    const TensorInfo* part = &view;
    return load_parts({&part, 1});
  }
  std::vector<std::byte> bytes(static_cast<size_t>(rows) * row_bytes(info));  // zero rows pad the last shard
  std::memcpy(bytes.data(), info.data + static_cast<size_t>(begin) * row_bytes(info), present * row_bytes(info));
  TensorInfo view = info;
  view.shape[0] = rows;
  view.data = bytes.data();
  view.size_bytes = bytes.size();
  const TensorInfo* part = &view;
  return load_parts({&part, 1});
}

Tensor WeightLoader::load_expert_concat(
    const std::vector<std::vector<std::pair<std::string, std::vector<int64_t>>>>& experts) {
  std::vector<const TensorInfo*> infos;
  for (const auto& parts : experts) {
    for (const auto& [name, shape] : parts) infos.push_back(&tensor(name, shape));
  }
  return load_parts(infos, static_cast<int64_t>(experts.size()));
}

Tensor WeightLoader::load_experts(const TensorInfo& experts) {
  if (experts.shape.size() != 3 || experts.shape[0] <= 0) {
    fail("{}: experts of '{}' laid out as {}, not [experts, out, in]", experts.file.string(), experts.name,
         shape_string(experts.shape));
  }
  const int64_t count = experts.shape[0];
  std::vector<TensorInfo> views(static_cast<size_t>(count), experts);
  for (int64_t e = 0; e < count; ++e) {
    views[e].shape = {experts.shape[1], experts.shape[2]};
    views[e].size_bytes = experts.size_bytes / static_cast<size_t>(count);
    views[e].data = experts.data + e * views[e].size_bytes;
  }
  std::vector<std::unique_ptr<BlockFp8Weight>> quantized;  // what the parts point to until the backend has them
  std::vector<const TensorInfo*> parts;
  for (const TensorInfo& view : views) {
    if (fp8_weights_ && checkpoint_.quantizes_to_fp8() && quantizes_online(view)) {
      parts.push_back(&quantized.emplace_back(std::make_unique<BlockFp8Weight>(view))->info());
    } else {
      parts.push_back(&view);
    }
  }
  return load_parts(parts, count).reshape(experts.shape);
}

Tensor WeightLoader::load_parts(std::span<const TensorInfo* const> parts) { return load_parts(parts, 0); }

Tensor WeightLoader::load_parts(std::span<const TensorInfo* const> parts, int64_t experts) {
  for (const TensorInfo* part : parts) check_format(*part, takes_quantized_);
  if (experts > 0 && !loads_linear_weights_) fail("experts' weights load through a linear_weights() loader");
  Tensor weight = experts > 0            ? backend_.load_expert_weight(parts, experts)
                  : loads_linear_weights_ ? backend_.load_linear_weight(parts)
                                          : backend_.load_weight(parts);
  if (LoadProgress* progress = checkpoint_.progress()) {
    int64_t bytes = 0;
    for (const TensorInfo* part : parts) bytes += checkpoint_bytes(*part);
    progress->add_loaded(bytes);
  }
  return weight;
}

}  // namespace tern
