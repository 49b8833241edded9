// The reference backend: float32 compute over bf16 or float32 weights, multi-threaded with OpenMP.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "backend/backend.h"
#include "backend/cpu/host_collective.h"
#include "backend/cpu/host_tensor.h"
#include "backend/cpu/kv_rows.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/posix_shared_buffer.h"
#include "backend/cpu/v4_ops.h"
#include "backend/kv_block_transfer.h"
#include "backend/kv_cache_tensors.h"
#include "core/error.h"

namespace tern {

namespace {

using cpu::host_tensor;

void require_f32(const Tensor& t, const char* op) {
  if (t.dtype != DType::F32) fail("cpu backend: {} expects float32 activations, got {}", op, dtype_name(t.dtype));
}

// The batch a step reads when its deferred tokens had to be filled in (a base so it is made before StepContext).
struct ResolvedBatch {
  std::optional<ForwardBatch> resolved;
};

class CpuStepContext : private ResolvedBatch, public StepContext {
 public:
  // Host memory holds the previous step's ids: deferred tokens are filled in on a copy of the batch.
  explicit CpuStepContext(const ForwardBatch& batch)
      : ResolvedBatch{batch.deferred_tokens.empty()
                          ? std::nullopt
                          : std::optional<ForwardBatch>(with_deferred_tokens(
                                batch, std::span<const int32_t>(batch.previous_sampled_ids.ptr<int32_t>(),
                                                                batch.previous_sampled_ids.numel())))},
        StepContext(resolved ? *resolved : batch),
        positions(batch_positions(batch)) {
    int32_t start = 0;
    for (size_t s = 0; s < batch.sequences.size(); ++s) {
      for (int32_t i = 0; i < batch.sequences[s].num_new_tokens; ++i) token_sequence.push_back(static_cast<int32_t>(s));
      sequence_start.push_back(start);
      start += batch.sequences[s].num_new_tokens;
    }
  }
  std::vector<int32_t> positions;       // [T]
  std::vector<int32_t> token_sequence;  // [T]: which sequence each token belongs to
  std::vector<int32_t> sequence_start;  // first token row of each sequence
};

const CpuStepContext& cpu_step(const StepContext& step) { return static_cast<const CpuStepContext&>(step); }

float rms_scale(const float* x, int64_t n, float eps) {
  double sum = 0.0;  // a double accumulator keeps long rows close to the float64 reference
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return static_cast<float>(1.0 / std::sqrt(sum / n + eps));
}

class CpuBackend final : public Backend {
 public:
  // `collective`: the tensor-parallel group this backend is rank `rank` of; null for a group of one.
  CpuBackend(int num_threads, std::shared_ptr<HostCollective> collective = nullptr, int rank = 0)
      : isa_(cpu::cpu_isa()), collective_(std::move(collective)), rank_(rank) {
    if (num_threads > 0) omp_set_num_threads(num_threads);
  }

  std::string name() const override { return std::string("cpu-") + cpu::cpu_isa_name(isa_); }
  std::string description() const override {
    const int threads = omp_get_max_threads();
    return fmt::format("{}, {} thread{}", name(), threads, threads == 1 ? "" : "s");
  }
  bool kv_cache_in_host_memory() const override { return true; }
  DType activation_dtype() const override { return DType::F32; }

  Tensor load_weight(std::span<const TensorInfo* const> parts) override {
    if (parts.empty()) fail("load_weight: no tensors given");
    const TensorInfo& first = *parts[0];
    std::vector<int64_t> shape = first.shape;
    if (shape.empty()) shape = {1};
    int64_t rows = 0;
    for (const TensorInfo* part : parts) {
      std::vector<int64_t> part_shape = part->shape.empty() ? std::vector<int64_t>{1} : part->shape;
      if (part->dtype != first.dtype || !std::equal(part_shape.begin() + 1, part_shape.end(), shape.begin() + 1,
                                                    shape.end()) || part_shape.size() != shape.size()) {
        fail("{}: tensor '{}' cannot be concatenated with '{}' (dtype or trailing shape differs)",
             part->file.string(), part->name, first.name);
      }
      rows += part_shape[0];
    }
    shape[0] = rows;
    // bf16 and integer tensors keep their type; f16 and f32 become f32, and so do block-quantized weights (FP8,
    // MXFP4), dequantized exactly (the W8A16/W4A16 reference: rounding them to bf16 would lose the scales' low bits).
    const bool to_f32 = first.dtype == DType::F16 || first.block_scales.has_value();
    const DType stored = to_f32 ? DType::F32 : first.dtype;
    Tensor out = host_tensor(stored, shape);
    char* dst = out.ptr<char>();
    for (const TensorInfo* part : parts) {
      if (to_f32) {
        dequantize_to_f32(*part, reinterpret_cast<float*>(dst));
        dst += part->numel() * sizeof(float);
      } else {
        std::memcpy(dst, part->data, part->size_bytes);
        dst += part->size_bytes;
      }
    }
    return out;
  }

  Tensor from_host_f32(std::span<const float> values, std::vector<int64_t> shape) override {
    Tensor out = host_tensor(DType::F32, std::move(shape));
    if (static_cast<size_t>(out.numel()) != values.size()) fail("from_host_f32: shape does not match value count");
    std::memcpy(out.data, values.data(), values.size_bytes());
    return out;
  }

  std::vector<float> to_host_f32(const Tensor& t) override {
    std::vector<float> out(t.numel());
    convert_to_f32(t.dtype, t.data, out.data(), out.size());
    return out;
  }

  std::vector<int32_t> to_host_i32(const Tensor& t) override {
    if (t.dtype != DType::I32) fail("to_host_i32: tensor is {}", dtype_name(t.dtype));
    return std::vector<int32_t>(t.ptr<int32_t>(), t.ptr<int32_t>() + t.numel());
  }

  KvCache allocate_kv_cache(const std::vector<KvLayerSpec>& layers, int64_t num_blocks, int64_t block_size,
                            KvCacheDtype dtype) override {
    KvCache cache = allocate_kv_cache_tensors(layers, num_blocks, block_size,
                                              dtype == KvCacheDtype::fp8_e4m3 ? DType::F8_E4M3 : DType::F32,
                                              cpu::host_tensor);
    cache.dtype = dtype;
    cache.context_shard = kv_context_shard();
    return cache;
  }

  KvCache allocate_host_kv_cache(const std::vector<KvLayerSpec>& layers, int64_t num_blocks, int64_t block_size,
                                 KvCacheDtype dtype) override {
    return allocate_kv_cache(layers, num_blocks, block_size, dtype);
  }

  void copy_kv_blocks(const KvCache& from, std::span<const int32_t> from_blocks, KvCache& to,
                      std::span<const int32_t> to_blocks) override {
    const auto start = std::chrono::steady_clock::now();
    copy_kv_cache_blocks(from, from_blocks, to, to_blocks,
                         [](void* target, const void* source, size_t bytes) { std::memcpy(target, source, bytes); });
    kv_copy_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  double kv_copy_seconds() override { return kv_copy_seconds_; }

  void export_kv_blocks_to(const KvCache& cache, std::span<const int32_t> blocks, void* payload) override {
    copy_kv_blocks_out(cache, blocks, payload, [](const void* memory, void* out, size_t bytes) {
      std::memcpy(out, memory, bytes);
    });
  }

  void import_kv_blocks_from(KvCache& cache, std::span<const int32_t> blocks, const KvPayloadView& payload) override {
    copy_kv_blocks_in(cache, blocks, payload, [](void* memory, const void* in, size_t bytes) {
      std::memcpy(memory, in, bytes);
    });
  }

  std::unique_ptr<SharedBuffer> create_shared_buffer(size_t bytes) override { return create_posix_shared_buffer(bytes); }
  std::unique_ptr<SharedBuffer> open_shared_buffer(std::span<const uint8_t> handle) override {
    return open_posix_shared_buffer(handle);
  }

  std::unique_ptr<StepContext> begin_step(const ForwardBatch& batch) override {
    for (int32_t row : batch.logit_rows) {
      if (row < 0 || row >= batch.num_tokens()) fail("forward batch: logit row {} out of range", row);
    }
    check_deferred_tokens(batch);
    return std::make_unique<CpuStepContext>(batch);
  }

  Tensor embedding(const Tensor& table, const StepContext& step, const VocabShard& shard) override {
    const auto& ids = step.batch().token_ids;
    const int64_t table_rows = table.size(0);
    const int64_t vocab = shard.vocab_size > 0 ? shard.vocab_size : table_rows;
    const int64_t hidden = table.size(1);
    Tensor out = host_tensor(DType::F32, {static_cast<int64_t>(ids.size()), hidden});
    for (size_t t = 0; t < ids.size(); ++t) {
      if (ids[t] < 0 || ids[t] >= vocab) fail("token id {} is outside the vocabulary of {}", ids[t], vocab);
      float* out_row = out.ptr<float>() + t * hidden;
      const int64_t row = ids[t] - shard.first_id;
      if (row < 0 || row >= table_rows) {
        std::fill(out_row, out_row + hidden, 0.0f);
        continue;
      }
      convert_to_f32(table.dtype, static_cast<const char*>(table.data) + row * hidden * dtype_size(table.dtype),
                     out_row, hidden);
    }
    return out;
  }

  int group_rank() const override { return rank_; }
  int group_size() const override { return collective_ ? collective_->size() : 1; }
  bool implements_decode_context_parallel() const override { return true; }

  void all_reduce_sum(Tensor& x) override {
    if (tensor_parallel_size() == 1) return;
    require_f32(x, "all_reduce_sum");
    collective_->all_reduce_sum(rank_, x.ptr<float>(), x.numel());
  }

  Tensor all_gather_columns(const Tensor& x, int64_t num_columns) override {
    if (tensor_parallel_size() == 1) return Backend::all_gather_columns(x, num_columns);
    require_f32(x, "all_gather_columns");
    const int64_t columns = x.size(-1);
    const int64_t rows = x.numel() / columns;
    Tensor out = host_tensor(DType::F32, {rows, num_columns});
    collective_->all_gather_columns(rank_, x.ptr<float>(), rows, columns, out.ptr<float>(), num_columns);
    return out;
  }

  Tensor all_to_all_rows(const Tensor& x, std::span<const int64_t> send_counts,
                         std::vector<int64_t>& received_counts) override {
    if (!collective_) fail("all_to_all_rows: the cpu backend is not part of a group");
    if (x.shape.empty()) fail("all_to_all_rows: expects rows [S, ...]");
    const size_t row_bytes = static_cast<size_t>(x.row_numel()) * dtype_size(x.dtype);
    int64_t num_sent = 0;
    for (int64_t count : send_counts) num_sent += count;
    if (num_sent != x.size(0)) fail("all_to_all_rows: send counts add up to {} rows, x has {}", num_sent, x.size(0));
    const std::vector<std::byte> received =
        collective_->all_to_all(rank_, static_cast<const std::byte*>(x.data), row_bytes, send_counts, received_counts);
    std::vector<int64_t> shape = x.shape;
    shape[0] = static_cast<int64_t>(received.size() / std::max<size_t>(row_bytes, 1));
    Tensor out = host_tensor(x.dtype, std::move(shape));
    std::copy(received.begin(), received.end(), out.ptr<std::byte>());
    return out;
  }

  Tensor select_rows(const Tensor& x, std::span<const int32_t> rows) override {
    Tensor out = host_tensor(x.dtype, selected_rows_shape(x, rows.size()));
    select_rows_into(x, rows, out);
    return out;
  }

  void select_rows_into(const Tensor& x, std::span<const int32_t> rows, Tensor& out) override {
    check_select_rows_into(x, rows, out);
    const size_t row_bytes = static_cast<size_t>(x.row_numel()) * dtype_size(x.dtype);
    for (size_t i = 0; i < rows.size(); ++i) {
      std::memcpy(out.ptr<std::byte>() + i * row_bytes, x.ptr<std::byte>() + rows[i] * row_bytes, row_bytes);
    }
  }

  void add_rows(Tensor& out, const Tensor& x, std::span<const int32_t> targets) override {
    require_f32(out, "add_rows");
    require_f32(x, "add_rows");
    const int64_t width = out.row_numel();
    if (x.row_numel() != width || (x.shape.empty() ? 0 : x.size(0)) != static_cast<int64_t>(targets.size())) {
      fail("add_rows: {} target rows of width {} for rows {} of width {}", targets.size(), width,
           shape_string(x.shape), x.row_numel());
    }
    for (size_t i = 0; i < targets.size(); ++i) {
      if (targets[i] < 0 || targets[i] >= out.size(0)) {
        fail("add_rows: row {} outside [0, {})", targets[i], out.size(0));
      }
      float* target = out.ptr<float>() + targets[i] * width;
      const float* row = x.ptr<float>() + static_cast<int64_t>(i) * width;
      for (int64_t c = 0; c < width; ++c) target[c] += row[c];
    }
  }

  Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps) override {
    require_f32(x, "rms_norm");
    const int64_t n = weight.numel();
    const int64_t num_rows = x.numel() / n;
    Tensor out = host_tensor(DType::F32, x.shape);
    const std::vector<float> w = to_host_f32(weight);
#pragma omp parallel for schedule(static) if (num_rows > 16)
    for (int64_t r = 0; r < num_rows; ++r) {
      const float* in = x.ptr<float>() + r * n;
      float* o = out.ptr<float>() + r * n;
      const float scale = rms_scale(in, n, eps);
      for (int64_t i = 0; i < n; ++i) o[i] = in[i] * scale * w[i];
    }
    return out;
  }

  Tensor add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& weight, float eps) override {
    add_in_place(residual, x);
    return rms_norm(residual, weight, eps);
  }

  Tensor linear(const Tensor& x, const Tensor& weight, const Tensor* bias) override {
    require_f32(x, "linear");
    const int64_t k = weight.size(-1);
    const int64_t n = weight.size(0);
    if (x.size(-1) != k) fail("linear: input has {} features, weight expects {}", x.size(-1), k);
    const int64_t num_rows = x.numel() / k;
    Tensor out = host_tensor(DType::F32, {num_rows, n});
    std::vector<float> bias_f32;
    if (bias) bias_f32 = to_host_f32(*bias);
    const float* b = bias ? bias_f32.data() : nullptr;
    cpu::matmul_rows(x.ptr<float>(), num_rows, k, weight, 0, n, b, out.ptr<float>());
    return out;
  }

  void add_in_place(Tensor& x, const Tensor& y) override {
    require_f32(x, "add");
    if (x.numel() != y.numel()) fail("add: {} vs {} elements", x.numel(), y.numel());
    float* a = x.ptr<float>();
    const float* b = y.ptr<float>();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) a[i] += b[i];
  }

  Tensor copy(const Tensor& x) override {
    Tensor out = host_tensor(x.dtype, x.shape);
    std::memcpy(out.data, x.data, x.bytes());
    return out;
  }

  Tensor slice_columns(const Tensor& x, int64_t begin, int64_t count) override {
    const int64_t width = x.size(-1);
    if (begin < 0 || count < 0 || begin + count > width) fail("slice_columns: [{}, {}) outside {} columns", begin, begin + count, width);
    const int64_t num_rows = x.numel() / width;
    const size_t element = dtype_size(x.dtype);
    Tensor out = host_tensor(x.dtype, {num_rows, count});
    for (int64_t r = 0; r < num_rows; ++r) {
      std::memcpy(out.ptr<char>() + r * count * element, x.ptr<char>() + (r * width + begin) * element, count * element);
    }
    return out;
  }

  Tensor concat_columns(const Tensor& a, const Tensor& b) override {
    const int64_t num_rows = a.shape.empty() ? 1 : a.shape[0];
    if (a.dtype != b.dtype || (b.shape.empty() ? 1 : b.shape[0]) != num_rows) {
      fail("concat_columns: [{}] and [{}] do not share rows and dtype", shape_string(a.shape), shape_string(b.shape));
    }
    const size_t element = dtype_size(a.dtype);
    const int64_t width_a = a.row_numel(), width_b = b.row_numel();
    Tensor out = host_tensor(a.dtype, {num_rows, width_a + width_b});
    for (int64_t r = 0; r < num_rows; ++r) {
      char* o = out.ptr<char>() + r * (width_a + width_b) * element;
      std::memcpy(o, a.ptr<char>() + r * width_a * element, width_a * element);
      std::memcpy(o + width_a * element, b.ptr<char>() + r * width_b * element, width_b * element);
    }
    return out;
  }

  Tensor silu_mul(const Tensor& gate_up) override {
    require_f32(gate_up, "silu_mul");
    const int64_t width = gate_up.size(-1) / 2;
    const int64_t num_rows = gate_up.numel() / (2 * width);
    Tensor out = host_tensor(DType::F32, {num_rows, width});
    for (int64_t r = 0; r < num_rows; ++r) {
      const float* gate = gate_up.ptr<float>() + r * 2 * width;
      const float* up = gate + width;
      float* o = out.ptr<float>() + r * width;
      for (int64_t i = 0; i < width; ++i) o[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
    }
    return out;
  }

  void rope(Tensor& x, const RopeTable& table, const StepContext& step) override {
    cpu::rope_at(x, table, cpu_step(step).positions, false);
  }

  void rope_at(Tensor& x, const RopeTable& table, std::span<const int32_t> positions, bool inverse) override {
    cpu::rope_at(x, table, positions, inverse);
  }

  Tensor gated_activation(const Tensor& gate_up, const GluActivation& activation) override {
    return cpu::gated_activation(gate_up, activation);
  }

  Tensor grouped_linear(const Tensor& x, const Tensor& weight) override { return cpu::grouped_linear(x, weight); }

  ExpertRouting route_experts(const Tensor& logits, const RouterParams& params, const StepContext& step) override {
    return cpu::route_experts(logits, params, step.batch().token_ids);
  }

  Tensor moe_experts(const Tensor& x, const ExpertRouting& routing, const ExpertWeights& experts,
                     const GluActivation& activation) override {
    return cpu::moe_experts(x, routing, experts, activation);
  }

  Tensor hyper_mix(const Tensor& mixes, const Tensor& base, const Tensor& scale,
                   const HyperMixParams& params) override {
    return cpu::hyper_mix(mixes, base, scale, params);
  }

  Tensor hyper_collapse(const Tensor& streams, const Tensor& mix) override { return cpu::hyper_collapse(streams, mix); }

  Tensor hyper_expand(const Tensor& streams, const Tensor& block_out, const Tensor& mix) override {
    return cpu::hyper_expand(streams, block_out, mix);
  }

  void compress_kv(KvCache& cache, int layer, const Tensor& kv, const Tensor& gate, const CompressorParams& params,
                   const StepContext& step) override {
    cpu::compress_kv(cache, layer, kv, gate, params, step.batch());
  }

  Tensor select_compressed(const Tensor& query, const Tensor& head_weights, const KvCache& cache, int layer,
                           const IndexerParams& params, const StepContext& step) override {
    return cpu::select_compressed(query, head_weights, cache, layer, params, step.batch());
  }

  Tensor compressed_attention(const Tensor& query, const KvCache& cache, int layer,
                              const CompressedAttentionParams& params, const StepContext& step) override {
    return cpu::compressed_attention(query, cache, layer, params, step.batch());
  }

  void store_kv(KvCache& cache, int layer, const Tensor& key, const Tensor& value, const StepContext& step) override {
    const auto slots = batch_slots(step.batch(), cache.block_size, cache.layer_group[layer], cache.context_shard);
    const int64_t key_row = cache.keys[layer].row_numel();
    const int64_t value_row = cache.values[layer].row_numel();
    if (key.row_numel() != key_row || (value_row && value.row_numel() != value_row)) {
      fail("store_kv: layer {} caches {}+{} values per token, got {}+{}", layer, key_row, value_row,
           key.row_numel(), value_row ? value.row_numel() : 0);
    }
    const KvLayerSpec& spec = cache.layers[layer];
    for (size_t t = 0; t < slots.size(); ++t) {
      if (slots[t] < 0) continue;  // another context-parallel rank caches it
      cpu::store_kv_values(cache.keys[layer], slots[t] * key_row, key.ptr<float>() + t * key_row, key_row,
                           spec.key_scale);
      if (value_row) {
        cpu::store_kv_values(cache.values[layer], slots[t] * value_row, value.ptr<float>() + t * value_row, value_row,
                             spec.value_scale);
      }
    }
  }

  Tensor attention(const Tensor& query, const KvCache& cache, int layer, const AttentionParams& params,
                   const StepContext& step) override {
    if (cache.context_shard.size > 1) {
      fail("attention: layer {}'s cache holds rank {}'s share of {} (decode context parallelism); its attention is "
           "partial_attention merged over the ranks", layer, cache.context_shard.rank, cache.context_shard.size);
    }
    return attend(query, cache, layer, params, step, nullptr);
  }

  AttentionPartial partial_attention(const Tensor& query, const KvCache& cache, int layer,
                                     const AttentionParams& params, const StepContext& step) override {
    if (params.sinks) fail("partial_attention: layer {} has attention sinks, which no rank's share of tokens holds", layer);
    Tensor lse = host_tensor(DType::F32, {query.size(0), query.size(1)});
    Tensor out = attend(query, cache, layer, params, step, lse.ptr<float>());
    return {std::move(out), std::move(lse)};
  }

  Tensor merge_attention_partials(const Tensor& outs, const Tensor& lses) override {
    require_f32(outs, "merge_attention_partials");
    require_f32(lses, "merge_attention_partials");
    if (outs.shape.size() != 4 || lses.shape.size() != 3 || outs.size(0) != lses.size(0) ||
        outs.size(1) != lses.size(1) || outs.size(2) != lses.size(2)) {
      fail("merge_attention_partials: outputs {} and log-sum-exps {} are not [T, heads, ranks, dim] and "
           "[T, heads, ranks]", shape_string(outs.shape), shape_string(lses.shape));
    }
    const int64_t num_rows = outs.size(0) * outs.size(1);
    const int64_t num_ranks = outs.size(2);
    const int64_t dim = outs.size(3);
    Tensor merged = host_tensor(DType::F32, {outs.size(0), outs.size(1), dim});
#pragma omp parallel for
    for (int64_t row = 0; row < num_rows; ++row) {
      const float* lse = lses.ptr<float>() + row * num_ranks;
      const float max_lse = *std::max_element(lse, lse + num_ranks);
      std::vector<double> acc(static_cast<size_t>(dim), 0.0);
      double total = 0.0;
      for (int64_t r = 0; r < num_ranks; ++r) {
        if (lse[r] == -std::numeric_limits<float>::infinity()) continue;  // the rank holds none of the row's tokens
        const double weight = std::exp(static_cast<double>(lse[r]) - max_lse);
        total += weight;
        const float* out = outs.ptr<float>() + (row * num_ranks + r) * dim;
        for (int64_t d = 0; d < dim; ++d) acc[d] += weight * out[d];
      }
      float* dst = merged.ptr<float>() + row * dim;
      for (int64_t d = 0; d < dim; ++d) dst[d] = total > 0.0 ? static_cast<float>(acc[d] / total) : 0.0f;
    }
    return merged;
  }

  Tensor gather_logit_rows(const Tensor& x, const StepContext& step) override {
    const auto& rows = step.batch().logit_rows;
    const int64_t width = x.row_numel();
    Tensor out = host_tensor(x.dtype, {static_cast<int64_t>(rows.size()), width});
    for (size_t r = 0; r < rows.size(); ++r) {
      std::memcpy(out.ptr<char>() + r * width * dtype_size(x.dtype),
                  x.ptr<char>() + rows[r] * width * dtype_size(x.dtype), width * dtype_size(x.dtype));
    }
    return out;
  }

  Tensor argmax(const Tensor& logits) override {
    require_f32(logits, "argmax");
    const int64_t vocab = logits.size(-1);
    const int64_t num_rows = logits.numel() / vocab;
    Tensor out = host_tensor(DType::I32, {num_rows});
    for (int64_t r = 0; r < num_rows; ++r) {
      const float* row = logits.ptr<float>() + r * vocab;
      out.ptr<int32_t>()[r] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
    }
    return out;
  }

 private:
  // Causal attention of each query over the tokens of its sequence that `cache` holds (its context shard's); with
  // `lse` [T, heads], also each row's log-sum-exp of scores (-inf, and a zero output, where the shard holds none).
  Tensor attend(const Tensor& query, const KvCache& cache, int layer, const AttentionParams& params,
                const StepContext& step, float* lse) {
    require_f32(query, "attention");
    const auto& ctx = cpu_step(step);
    const auto& batch = step.batch();
    const int64_t num_tokens = query.size(0);
    const int64_t num_heads = query.size(1);
    const int64_t key_dim = query.size(2);
    const KvLayerSpec& spec = cache.layers[layer];
    const int64_t num_kv_heads = spec.num_kv_heads;
    // Keys-only layers (MLA latent, shared K=V) read each value from the leading dims of its key.
    const bool values_in_keys = spec.value_dim == 0;
    const int64_t value_dim = values_in_keys ? params.values_from_keys : spec.value_dim;
    if (values_in_keys && (value_dim <= 0 || value_dim > spec.key_dim)) {
      fail("attention: layer {} caches keys only; values_from_keys must be in (0, {}], got {}", layer, spec.key_dim,
           value_dim);
    }
    if (key_dim != spec.key_dim || num_heads % num_kv_heads != 0) {
      fail("attention: layer {} query of {} heads x {} does not fit the cache's {} heads x {}", layer, num_heads,
           key_dim, num_kv_heads, spec.key_dim);
    }
    const int64_t value_stride = values_in_keys ? spec.key_dim : value_dim;
    const int64_t group = num_heads / num_kv_heads;
    const int64_t block_size = cache.block_size;
    const int table = cache.layer_group[layer];
    const KvContextShard& shard = cache.context_shard;
    const int64_t tokens_per_block = shard.tokens_per_block(block_size);
    const Tensor& keys = cache.keys[layer];
    const Tensor& values = values_in_keys ? keys : cache.values[layer];
    const float value_scale = values_in_keys ? spec.key_scale : spec.value_scale;
    // Sinks may be checkpoint weights in bf16.
    const std::vector<float> sink_values = params.sinks ? to_host_f32(*params.sinks) : std::vector<float>{};
    if (params.sinks && static_cast<int64_t>(sink_values.size()) != num_heads) {
      fail("attention: {} sinks for {} heads", sink_values.size(), num_heads);
    }
    const float* sinks = params.sinks ? sink_values.data() : nullptr;
    Tensor out = host_tensor(DType::F32, {num_tokens, num_heads, value_dim});

#pragma omp parallel
    {
      std::vector<float> scores;
      std::vector<int64_t> slots;
      std::vector<double> acc(value_dim);
      std::vector<float> key_scratch(key_dim), value_scratch(value_dim);  // rows of an FP8 cache, decoded
#pragma omp for collapse(2) schedule(dynamic, 4)
      for (int64_t t = 0; t < num_tokens; ++t) {
        for (int64_t h = 0; h < num_heads; ++h) {
          const auto& seq = batch.sequences[ctx.token_sequence[t]];
          const int64_t pos = ctx.positions[t];
          const int64_t first = params.sliding_window > 0 ? std::max<int64_t>(0, pos - params.sliding_window + 1) : 0;
          const int64_t kv_head = h / group;
          const float* q = query.ptr<float>() + (t * num_heads + h) * key_dim;
          slots.clear();  // of the positions in the window that this cache holds
          for (int64_t j = first; j <= pos; ++j) {
            if (shard.holds(j)) slots.push_back(shard.slot(seq.block_tables[table][j / tokens_per_block], j, block_size));
          }
          // Scores and weighted sums accumulate in double; the softmax itself is float32, as in transformers'
          // eager attention, which keeps this reference within float32 rounding of transformers' float64 runs.
          scores.resize(slots.size());
          float max_score = sinks ? sinks[h] : -std::numeric_limits<float>::infinity();
          for (size_t i = 0; i < slots.size(); ++i) {
            const float* k = cpu::kv_values(keys, (slots[i] * num_kv_heads + kv_head) * key_dim, key_dim,
                                            spec.key_scale, key_scratch.data());
            double dot = 0.0;
            for (int64_t d = 0; d < key_dim; ++d) dot += static_cast<double>(q[d]) * k[d];
            scores[i] = static_cast<float>(dot * params.scale);
            max_score = std::max(max_score, scores[i]);
          }
          float denominator = sinks ? std::exp(sinks[h] - max_score) : 0.0f;
          for (float& score : scores) {
            score = std::exp(score - max_score);
            denominator += score;
          }
          std::fill(acc.begin(), acc.end(), 0.0);
          for (size_t i = 0; i < slots.size(); ++i) {
            const double p = scores[i] / denominator;
            const float* v = cpu::kv_values(values, (slots[i] * num_kv_heads + kv_head) * value_stride, value_dim,
                                            value_scale, value_scratch.data());
            for (int64_t d = 0; d < value_dim; ++d) acc[d] += p * v[d];
          }
          if (lse) {
            lse[t * num_heads + h] =
                slots.empty() ? -std::numeric_limits<float>::infinity() : max_score + std::log(denominator);
          }
          float* o = out.ptr<float>() + (t * num_heads + h) * value_dim;
          for (int64_t d = 0; d < value_dim; ++d) o[d] = static_cast<float>(acc[d]);
        }
      }
    }
    return out;
  }

  cpu::CpuIsa isa_;
  std::shared_ptr<HostCollective> collective_;
  int rank_ = 0;
  double kv_copy_seconds_ = 0.0;
};

class CpuBackendGroup final : public BackendGroup {
 public:
  CpuBackendGroup(int size, int num_threads)
      : collective_(size > 1 ? std::make_shared<HostCollective>(size) : nullptr),
        size_(size),
        threads_per_rank_(std::max(1, (num_threads > 0 ? num_threads : omp_get_num_procs()) / size)) {}
  int size() const override { return size_; }
  std::unique_ptr<Backend> make(int rank) override {
    if (rank < 0 || rank >= size_) fail("cpu backend group: rank {} outside a group of {}", rank, size_);
    return std::make_unique<CpuBackend>(threads_per_rank_, collective_, rank);
  }

 private:
  std::shared_ptr<HostCollective> collective_;
  int size_;
  int threads_per_rank_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int num_threads) { return std::make_unique<CpuBackend>(num_threads); }

std::unique_ptr<BackendGroup> make_cpu_backend_group(int size, int num_threads) {
  return std::make_unique<CpuBackendGroup>(size, num_threads);
}

}  // namespace tern
