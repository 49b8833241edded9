// Defaults of the Backend ops that only some architectures need: a backend that lacks one fails by name when a
// model calls it, instead of computing something else. And the host-bytes form of KV block transfer, and the row
// selection checks the backends share.
#include "backend/backend.h"

#include "backend/kv_block_transfer.h"
#include "core/error.h"
#include "core/tensor_info.h"

namespace tern {

std::vector<uint8_t> Backend::export_kv_blocks(const KvCache& cache, std::span<const int32_t> blocks) {
  std::vector<uint8_t> out = kv_export_header(cache, static_cast<int32_t>(blocks.size()));
  const size_t header = out.size();
  out.resize(header + kv_payload_bytes(cache, blocks.size()));
  export_kv_blocks_to(cache, blocks, out.data() + header);
  return out;
}

void Backend::import_kv_blocks(KvCache& cache, std::span<const int32_t> blocks, std::span<const uint8_t> bytes) {
  check_kv_export_fits(cache, bytes);
  if (static_cast<size_t>(kv_blocks_in_export(bytes)) != blocks.size()) {
    fail("KV block import: {} blocks sent, {} blocks to fill", kv_blocks_in_export(bytes), blocks.size());
  }
  import_kv_blocks_from(cache, blocks, {bytes.data() + kv_header_bytes(bytes), static_cast<int32_t>(blocks.size())});
}

namespace {

class ReadyIds final : public PendingIds {
 public:
  explicit ReadyIds(std::vector<int32_t> ids) : ids_(std::move(ids)) {}
  std::vector<int32_t> wait() override { return std::move(ids_); }

 private:
  std::vector<int32_t> ids_;
};

}  // namespace

std::unique_ptr<PendingIds> Backend::to_host_i32_async(const Tensor& tensor) {
  return std::make_unique<ReadyIds>(to_host_i32(tensor));
}

// A group of one needs no communication; backends that form larger groups override both.
void Backend::all_reduce_sum(Tensor&) {
  if (tensor_parallel_size() != 1) fail("backend {} has no all_reduce_sum op", name());
}

Tensor Backend::linear_all_reduce(const Tensor& x, const Tensor& weight, const Tensor* bias) {
  Tensor out = linear(x, weight, bias);
  all_reduce_sum(out);
  return out;
}

Tensor Backend::all_gather_columns(const Tensor& x, int64_t num_columns) {
  if (tensor_parallel_size() != 1) fail("backend {} has no all_gather_columns op", name());
  if (num_columns == x.size(-1)) return x;
  return slice_columns(x, 0, num_columns);
}

AttentionPartial Backend::partial_attention(const Tensor&, const KvCache&, int, const AttentionParams&,
                                           const StepContext&) {
  fail("backend {} has no partial_attention op (decode context parallelism)", name());
}

Tensor Backend::merge_attention_partials(const Tensor&, const Tensor&) {
  fail("backend {} has no merge_attention_partials op (decode context parallelism)", name());
}

Tensor Backend::all_to_all_rows(const Tensor&, std::span<const int64_t>, std::vector<int64_t>&) {
  fail("backend {} has no all_to_all_rows op (data-parallel attention)", name());
}

Tensor Backend::select_rows(const Tensor&, std::span<const int32_t>) {
  fail("backend {} has no select_rows op (data-parallel attention)", name());
}

std::vector<int64_t> selected_rows_shape(const Tensor& x, size_t num_rows) {
  if (x.shape.empty()) fail("select_rows: expects rows [T, ...], got a scalar");
  std::vector<int64_t> shape = x.shape;
  shape[0] = static_cast<int64_t>(num_rows);
  return shape;
}

void check_select_rows_into(const Tensor& x, std::span<const int32_t> rows, const Tensor& out) {
  if (x.shape.empty() || out.dtype != x.dtype || out.shape.empty() ||
      out.size(0) != static_cast<int64_t>(rows.size()) || out.row_numel() != x.row_numel()) {
    fail("select_rows_into: {} rows of {} {} into {} {}", rows.size(), shape_string(x.shape), dtype_name(x.dtype),
         shape_string(out.shape), dtype_name(out.dtype));
  }
  for (const int32_t row : rows) {
    if (row < 0 || row >= x.size(0)) fail("select_rows: row {} outside [0, {})", row, x.size(0));
  }
}

void Backend::select_rows_into(const Tensor&, std::span<const int32_t>, Tensor&) {
  fail("backend {} has no select_rows_into op (speculative decoding's recorded drafter steps)", name());
}

void Backend::add_rows(Tensor&, const Tensor&, std::span<const int32_t>) {
  fail("backend {} has no add_rows op (data-parallel attention)", name());
}

Tensor Backend::concat_columns(const Tensor&, const Tensor&) { fail("backend {} has no concat_columns op", name()); }

Tensor Backend::from_host_i32(std::span<const int32_t> values, std::vector<int64_t> shape) {
  TensorInfo info;
  info.name = "host int32 values";
  info.dtype = DType::I32;
  info.shape = std::move(shape);
  if (static_cast<size_t>(info.numel()) != values.size()) {
    fail("from_host_i32: {} values for shape {}", values.size(), shape_string(info.shape));
  }
  info.data = reinterpret_cast<const std::byte*>(values.data());
  info.size_bytes = values.size_bytes();
  const TensorInfo* part = &info;
  return load_weight({&part, 1});
}

Tensor Backend::gated_activation(const Tensor&, const GluActivation&) {
  fail("backend {} has no gated_activation op", name());
}

Tensor Backend::norm_linear(PreNorm& input, const Tensor& weight, const Tensor* bias) {
  const Tensor x = input.addend ? add_rms_norm(input.residual, *input.addend, input.norm_weight, input.eps)
                                : rms_norm(input.residual, input.norm_weight, input.eps);
  return linear(x, weight, bias);
}

Tensor Backend::rms_norm_linear_f32(const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& weight) {
  return linear_f32(rms_norm(x, norm_weight, eps), weight, nullptr);
}

Tensor Backend::norm_linear_silu_mul(PreNorm& input, const Tensor& gate_up_weight) {
  return silu_mul(norm_linear(input, gate_up_weight, nullptr));
}

Tensor Backend::norm_linear_rope_store_kv(PreNorm& input, const Tensor& qkv_weight, const Tensor* qkv_bias,
                                          const QkvHeads& heads, const RopeTable& table, KvCache& cache, int layer,
                                          const StepContext& step) {
  return rope_store_qkv(norm_linear(input, qkv_weight, qkv_bias), heads, table, cache, layer, step);
}

QkvColumns Backend::split_qkv(const Tensor& qkv, const QkvHeads& heads) {
  const int64_t num_tokens = qkv.size(0);
  const auto columns = [&](int64_t first_head, int64_t count) {
    return slice_columns(qkv, first_head * heads.head_dim, count * heads.head_dim)
        .reshape({num_tokens, count, heads.head_dim});
  };
  return {columns(0, heads.num_heads), columns(heads.num_heads, heads.num_kv_heads),
          columns(heads.num_heads + heads.num_kv_heads, heads.num_kv_heads)};
}

void Backend::rope_store_kv(Tensor& query, Tensor& key, const Tensor& value, const HeadNormWeights& norms,
                            const RopeTable& table, KvCache& cache, int layer, const StepContext& step) {
  if (norms.query) {
    query = rms_norm(query, *norms.query, norms.eps);
    key = rms_norm(key, *norms.key, norms.eps);
  }
  rope(query, table, step);
  rope(key, table, step);
  store_kv(cache, layer, key, value, step);
}

Tensor Backend::rope_store_qkv(const Tensor& qkv, const QkvHeads& heads, const RopeTable& table, KvCache& cache,
                               int layer, const StepContext& step) {
  QkvColumns columns = split_qkv(qkv, heads);
  rope_store_kv(columns.q, columns.k, columns.v, heads.norms, table, cache, layer, step);
  return columns.q;
}

Tensor Backend::grouped_linear(const Tensor&, const Tensor&) { fail("backend {} has no grouped_linear op", name()); }

ExpertRouting Backend::route_experts(const Tensor&, const RouterParams&, const StepContext&) {
  fail("backend {} has no route_experts op", name());
}

Tensor Backend::moe_experts(const Tensor&, const ExpertRouting&, const ExpertWeights&, const GluActivation&) {
  fail("backend {} has no moe_experts op", name());
}

void Backend::rope_at(Tensor&, const RopeTable&, std::span<const int32_t>, bool) {
  fail("backend {} has no rope_at op", name());
}

void Backend::rope_inverse(Tensor& x, const RopeTable& table, const StepContext& step) {
  rope_at(x, table, batch_positions(step.batch()), true);
}

Tensor Backend::hyper_mix(const Tensor&, const Tensor&, const Tensor&, const HyperMixParams&) {
  fail("backend {} has no hyper_mix op", name());
}

Tensor Backend::hyper_collapse(const Tensor&, const Tensor&) { fail("backend {} has no hyper_collapse op", name()); }

HyperMixed Backend::hyper_mix_collapse(const Tensor& streams, const Tensor& mixes, const Tensor& base,
                                       const Tensor& scale, const HyperMixParams& params) {
  check_hyper_mix_collapse(streams, mixes, base, scale, params);
  HyperMixed out{hyper_mix(mixes, base, scale, params), {}};
  out.collapsed = hyper_collapse(streams, out.mix);
  return out;
}

Tensor Backend::hyper_expand(const Tensor&, const Tensor&, const Tensor&) {
  fail("backend {} has no hyper_expand op", name());
}

void Backend::compress_kv(KvCache&, int, const Tensor&, const Tensor&, const CompressorParams&, const StepContext&) {
  fail("backend {} has no compress_kv op", name());
}

Tensor Backend::select_compressed(const Tensor&, const Tensor&, const KvCache&, int, const IndexerParams&,
                                  const StepContext&) {
  fail("backend {} has no select_compressed op", name());
}

Tensor Backend::compressed_attention(const Tensor&, const KvCache&, int, const CompressedAttentionParams&,
                                     const StepContext&) {
  fail("backend {} has no compressed_attention op", name());
}

}  // namespace tern
