#include "model/layers/sparse_moe.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace tern {

namespace {

// Loads `name` after moving its elements on the host: element i of the result is element source_index(i) of the
// checkpoint tensor. Used to bring gpt-oss's [E, in, out] expert layout to the [E, out, in] the backend expects
// (for this rank's experts only under expert parallelism).
template <typename SourceIndex>
Tensor load_relaid(WeightLoader& weights, const std::string& name, const std::vector<int64_t>& shape,
                   std::vector<int64_t> result_shape, SourceIndex source_index) {
  const TensorInfo& info = weights.info(name, shape);
  const size_t element = dtype_size(info.dtype);
  int64_t n = 1;
  for (int64_t d : result_shape) n *= d;
  std::vector<std::byte> bytes(static_cast<size_t>(n) * element);
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(bytes.data() + i * element, info.data + source_index(i) * element, element);
  }
  TensorInfo relaid = info;
  relaid.shape = std::move(result_shape);
  relaid.data = bytes.data();
  relaid.size_bytes = bytes.size();
  const TensorInfo* part = &relaid;
  return weights.load_parts({&part, 1});
}

// Loads the experts `experts` of `name`, stored [E, in, out] (gpt-oss's bf16 x @ W layout), as [count, out, in]
// (quantized per expert under online FP8, WeightLoader::load_experts): element (c, r, k) of the result is element
// (experts[c], k, source_column(r)) of the checkpoint tensor. A transpose read along columns: in tiles that stay in
// cache, experts on all cores (an element at a time and on one core it loaded gpt-oss-20b at 0.15 GB/s).
template <typename SourceColumn>
Tensor load_transposed_experts(WeightLoader& weights, const std::string& name, const std::vector<int64_t>& shape,
                               const std::vector<int32_t>& experts, SourceColumn source_column) {
  const TensorInfo& info = weights.info(name, shape);
  const size_t element = dtype_size(info.dtype);
  const int64_t in = shape[1], out = shape[2], count = static_cast<int64_t>(experts.size());
  const size_t size = static_cast<size_t>(count * out * in) * element;
  // Not zeroed first: its pages are first touched by the threads that write them.
  const std::unique_ptr<std::byte[]> bytes(new std::byte[size]);
  constexpr int64_t kTile = 64;
  const int64_t row_tiles = (out + kTile - 1) / kTile;
  const auto transpose = [&]<typename Element>(Element) {
#pragma omp parallel for schedule(dynamic)
    for (int64_t job = 0; job < count * row_tiles; ++job) {
      const int64_t c = job / row_tiles, r0 = job % row_tiles * kTile, r1 = std::min(out, r0 + kTile);
      const std::byte* expert = info.data + experts[c] * in * out * sizeof(Element);
      std::byte* result = bytes.get() + c * out * in * sizeof(Element);
      for (int64_t k0 = 0; k0 < in; k0 += kTile) {
        const int64_t k1 = std::min(in, k0 + kTile);
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t column = source_column(r);
          for (int64_t k = k0; k < k1; ++k) {  // copies of a fixed size: one load and store, at any alignment
            std::memcpy(result + (r * in + k) * sizeof(Element), expert + (k * out + column) * sizeof(Element),
                        sizeof(Element));
          }
        }
      }
    }
  };
  if (element == 2) {
    transpose(uint16_t{});
  } else if (element == 4) {
    transpose(uint32_t{});
  } else {
    fail("{}: tensor '{}' is {}; gpt-oss's bf16 experts load from 16- or 32-bit elements", info.file.string(), name,
         dtype_name(info.dtype));
  }
  TensorInfo relaid = info;
  relaid.shape = {count, out, in};
  relaid.data = bytes.get();
  relaid.size_bytes = size;
  return weights.load_experts(relaid);
}

// Loads the rows of the block-quantized weight `name` laid out anew on the host, codes and scales together: row r of
// the result (its leading dimensions flattened) is row source_row(r) of the checkpoint tensor. Rows hold whole
// 1 x 32 MXFP4 scale groups, so experts are picked and gate/up de-interleaved without dequantizing.
template <typename SourceRow>
Tensor load_quantized_rows(WeightLoader& quantized, const std::string& name, const std::vector<int64_t>& shape,
                           std::vector<int64_t> result_shape, SourceRow source_row) {
  const TensorInfo& info = quantized.info(name, shape);
  if (info.dtype != DType::F4_E2M1 || !info.block_scales || info.block_scales->block_rows != 1) {
    fail("{}: tensor '{}' is {}, not MXFP4 blocks with their scales", info.file.string(), name,
         dtype_name(info.dtype));
  }
  const TensorInfo& scales = *info.block_scales->scales;
  const int64_t rows = info.numel() / info.shape.back();
  const size_t code_bytes = info.size_bytes / rows, scale_bytes = scales.size_bytes / rows;
  int64_t result_rows = 1;
  for (size_t d = 0; d + 1 < result_shape.size(); ++d) result_rows *= result_shape[d];
  std::vector<std::byte> codes(result_rows * code_bytes), exponents(result_rows * scale_bytes);
  for (int64_t r = 0; r < result_rows; ++r) {
    const int64_t from = source_row(r);
    std::memcpy(codes.data() + r * code_bytes, info.data + from * code_bytes, code_bytes);
    std::memcpy(exponents.data() + r * scale_bytes, scales.data + from * scale_bytes, scale_bytes);
  }
  TensorInfo relaid_scales = scales;
  relaid_scales.shape = result_shape;
  relaid_scales.shape.back() = scales.shape.back();
  relaid_scales.data = exponents.data();
  relaid_scales.size_bytes = exponents.size();
  TensorInfo relaid = info;
  relaid.shape = std::move(result_shape);
  relaid.data = codes.data();
  relaid.size_bytes = codes.size();
  relaid.block_scales->scales = &relaid_scales;
  const TensorInfo* part = &relaid;
  return quantized.load_parts({&part, 1}).reshape(relaid.shape);  // a backend may keep the codes as [rows, K]
}

}  // namespace

SparseMoe::SparseMoe(WeightLoader& weights, const std::string& prefix, const SparseMoeConfig& config)
    : prefix_(prefix), config_(config) {
  router_.emplace(weights, prefix + "." + config.router_name, config.router);
  const int64_t num_experts = config.router.num_experts;
  Backend& backend = weights.backend();
  if (backend.expert_parallel()) {
    const int64_t num_slots = num_experts + backend.num_redundant_experts();
    check_expert_slots(num_experts, num_slots, backend.group_size(), prefix);
    balancing_.emplace();
    balancing_->load_counts = backend.from_host_i32(std::vector<int32_t>(num_experts, 0), {num_experts});
    balancing_->counted.assign(num_experts, 0);
    place_experts(weights, initial_expert_placement(num_experts, num_slots, backend.group_size()));
  } else {
    std::vector<int32_t> all(num_experts);
    for (int64_t e = 0; e < num_experts; ++e) all[e] = static_cast<int32_t>(e);
    load_experts(weights, all);
  }
  if (config.shared_intermediate_size > 0) {
    shared_experts_.emplace(weights, prefix + "." + config.shared_name, config.hidden_size,
                            config.shared_intermediate_size, config.expert_names, config.activation);
  }
}

void SparseMoe::load_experts(WeightLoader& weights, const std::vector<int32_t>& experts) {
  const int64_t hidden = config_.hidden_size;
  const int64_t inter = config_.intermediate_size;
  const int64_t num_experts = config_.router.num_experts;
  const auto count = static_cast<int64_t>(experts.size());
  // The old weights go first, so that a new placement does not need room for two copies.
  gate_up_ = down_ = Tensor{};
  gate_up_bias_.reset();
  down_bias_.reset();
  WeightLoader linear = weights.linear_weights();
  if (config_.layout == ExpertLayout::per_expert) {
    std::vector<std::vector<std::pair<std::string, std::vector<int64_t>>>> gate_up, down;
    for (int32_t e : experts) {
      const std::string expert = prefix_ + ".experts." + std::to_string(e) + ".";
      gate_up.push_back({{expert + config_.expert_names.gate + ".weight", {inter, hidden}},
                         {expert + config_.expert_names.up + ".weight", {inter, hidden}}});
      down.push_back({{expert + config_.expert_names.down + ".weight", {hidden, inter}}});
    }
    gate_up_ = linear.load_expert_concat(gate_up).reshape({count, 2 * inter, hidden});
    down_ = linear.load_expert_concat(down).reshape({count, hidden, inter});
    return;
  }
  const std::string names = prefix_ + ".experts.";
  // gate/up row `row` of an expert in the backend's layout (gate rows, then up rows) is gpt-oss's row or column
  // 2 x row (gate) or 2 x (row - I) + 1 (up): gpt-oss's swiglu takes x[..., ::2] and x[..., 1::2].
  const auto interleaved = [inter](int64_t row) { return row < inter ? 2 * row : 2 * (row - inter) + 1; };
  if (weights.has(names + "gate_up_proj_blocks")) {
    // MXFP4 experts are [E, out, in] with 32-element groups along `in`: gpt-oss's mlp1_weight [E, 2I, H] and
    // mlp2_weight [E, H, I] (gpt_oss/torch/model.py, MLPBlock), which transformers' convert_moe_packed_tensors
    // transposes into the bf16 checkpoints' [E, in, out] (integrations/mxfp4.py). So rows move here, none transposed.
    gate_up_ = load_quantized_rows(linear, names + "gate_up_proj_blocks", {num_experts, 2 * inter, hidden},
                                   {count, 2 * inter, hidden}, [&](int64_t r) {
                                     return experts[r / (2 * inter)] * 2 * inter + interleaved(r % (2 * inter));
                                   });
    down_ = load_quantized_rows(linear, names + "down_proj_blocks", {num_experts, hidden, inter},
                                {count, hidden, inter},
                                [&](int64_t r) { return experts[r / hidden] * hidden + r % hidden; });
  } else {
    // The bf16 checkpoints store x @ W ([E, H, 2I]) and x @ D ([E, I, H]).
    gate_up_ = load_transposed_experts(linear, names + "gate_up_proj", {num_experts, hidden, 2 * inter}, experts,
                                       interleaved);
    down_ = load_transposed_experts(linear, names + "down_proj", {num_experts, inter, hidden}, experts,
                                    [](int64_t h) { return h; });
  }
  gate_up_bias_ = load_relaid(weights, names + "gate_up_proj_bias", {num_experts, 2 * inter}, {count, 2 * inter},
                              [&](int64_t i) {
                                return experts[i / (2 * inter)] * 2 * inter + interleaved(i % (2 * inter));
                              });
  std::vector<RowRange> bias_rows;
  for (int32_t e : experts) bias_rows.push_back({names + "down_proj_bias", {num_experts, hidden}, e, 1});
  down_bias_ = weights.load_row_ranges(bias_rows);
}

void SparseMoe::place_experts(WeightLoader& weights, const ExpertPlacement& placement) {
  if (!balancing_) fail("{}: experts are placed only under expert parallelism", prefix_);
  const int64_t num_experts = config_.router.num_experts;
  // Experts split over the whole group, also under data parallelism (where nothing else is sharded).
  const int group_size = weights.backend().group_size();
  if (placement.num_experts != num_experts || placement.num_ranks != group_size ||
      placement.num_slots() != num_experts + weights.backend().num_redundant_experts()) {
    fail("{}: a placement of {} experts in {} slots over {} ranks does not fit this layer", prefix_,
         placement.num_experts, placement.num_slots(), placement.num_ranks);
  }
  const int64_t slots_per_rank = placement.slots_per_rank();
  first_slot_ = weights.backend().group_rank() * slots_per_rank;
  load_experts(weights, std::vector<int32_t>(placement.slot_experts.begin() + first_slot_,
                                             placement.slot_experts.begin() + first_slot_ + slots_per_rank));
  const auto replicas = placement.expert_slots();
  size_t max_replicas = 1;
  for (const auto& slots : replicas) max_replicas = std::max(max_replicas, slots.size());
  std::vector<int32_t> replica_slots(num_experts * max_replicas, -1), replica_counts(num_experts);
  for (int64_t e = 0; e < num_experts; ++e) {
    if (replicas[e].empty()) fail("{}: the placement leaves expert {} without a slot", prefix_, e);
    std::copy(replicas[e].begin(), replicas[e].end(), replica_slots.begin() + e * max_replicas);
    replica_counts[e] = static_cast<int32_t>(replicas[e].size());
  }
  Backend& backend = weights.backend();
  balancing_->replica_slots =
      backend.from_host_i32(replica_slots, {num_experts, static_cast<int64_t>(max_replicas)});
  balancing_->replica_counts = backend.from_host_i32(replica_counts, {num_experts});
  balancing_->placement = placement;
}

std::vector<int64_t> SparseMoe::take_expert_load(Backend& backend) {
  if (!balancing_) fail("{}: expert loads are counted only under expert parallelism", prefix_);
  const std::vector<int32_t> counts = backend.to_host_i32(balancing_->load_counts);
  std::vector<int64_t> load(counts.size());
  for (size_t e = 0; e < counts.size(); ++e) {
    // The counters wrap at 2^32; the difference is right while fewer tokens than that arrive between calls.
    const auto now = static_cast<uint32_t>(counts[e]);
    load[e] = static_cast<int64_t>(now - balancing_->counted[e]);
    balancing_->counted[e] = now;
  }
  return load;
}

Tensor SparseMoe::forward(Backend& backend, const BlockInput& input, const StepContext& step) const {
  const Tensor& x = input.normalized();  // read by the router, the experts and the shared experts
  ExpertLoadBalancing routing_balance;
  if (balancing_) routing_balance = {&balancing_->load_counts, &balancing_->replica_slots, &balancing_->replica_counts};
  const ExpertRouting routing = router_->route(backend, x, step, routing_balance);
  Tensor routed;
  if (backend.data_parallel()) {
    routed = exchange_tokens(backend, &x, &routing);
  } else {
    routed = backend.moe_experts(x, routing, local_experts(), config_.activation);
    // Each rank added its own slots' outputs; every rank needs every expert's.
    if (balancing_) backend.all_reduce_sum(routed);
  }
  if (!shared_experts_) return routed;
  // The routed sum as add_in_place's second operand: the exchange's sums are float32 on every backend, and the
  // CUDA backend adds into bf16 activations only.
  Tensor out = shared_experts_->forward(backend, x);
  backend.add_in_place(out, routed);
  return out;
}

void SparseMoe::serve_peers(Backend& backend) const { exchange_tokens(backend, nullptr, nullptr); }

void serve_expert_peers(Model& model, Backend& backend) {
  for (const SparseMoe* layer : model.expert_layers()) layer->serve_peers(backend);
}

ExpertWeights SparseMoe::local_experts() const {
  return {gate_up_, down_, gate_up_bias_ ? &*gate_up_bias_ : nullptr, down_bias_ ? &*down_bias_ : nullptr,
          first_slot_};
}

Tensor SparseMoe::exchange_tokens(Backend& backend, const Tensor* x, const ExpertRouting* routing) const {
  const int num_ranks = backend.group_size();
  const int64_t hidden = config_.hidden_size;
  const int64_t top_k = config_.router.params.top_k;
  const int64_t slots_per_rank = balancing_->placement.slots_per_rank();
  const int64_t num_tokens = x ? x->size(0) : 0;
  // Dispatch: one row per (token, rank holding any of its slots), in rank order, tokens ascending within a rank.
  std::vector<int32_t> sent_tokens;
  std::vector<int64_t> send_counts(static_cast<size_t>(num_ranks), 0);
  if (num_tokens > 0) {
    const std::vector<int32_t> slots = backend.to_host_i32(routing->expert_ids);
    for (int rank = 0; rank < num_ranks; ++rank) {
      for (int64_t t = 0; t < num_tokens; ++t) {
        const auto first = slots.begin() + t * top_k;
        if (std::any_of(first, first + top_k, [&](int32_t s) { return s / slots_per_rank == rank; })) {
          sent_tokens.push_back(static_cast<int32_t>(t));
          ++send_counts[rank];
        }
      }
    }
  }
  // A rank without tokens sends no rows, of the dtype and width the others send (the hidden states are in the
  // backend's activation dtype, the routing in int32 and float32 on every backend).
  const auto rows_of = [&](const Tensor* source, DType dtype, int64_t width) {
    if (source) return backend.select_rows(*source, sent_tokens);
    Tensor none;  // no rows: no storage
    none.dtype = dtype;
    none.shape = {0, width};
    return none;
  };
  std::vector<int64_t> received_counts;
  const Tensor received_x =
      backend.all_to_all_rows(rows_of(x, backend.activation_dtype(), hidden), send_counts, received_counts);
  const Tensor received_slots = backend.all_to_all_rows(
      rows_of(routing ? &routing->expert_ids : nullptr, DType::I32, top_k), send_counts, received_counts);
  const Tensor received_weights = backend.all_to_all_rows(
      rows_of(routing ? &routing->weights : nullptr, DType::F32, top_k), send_counts, received_counts);
  // Each received row carries all of its token's slots; slots of other ranks add nothing here, so a row comes back
  // as the weighted sum of this rank's experts for that token.
  const Tensor expert_out =
      backend.moe_experts(received_x, {received_slots, received_weights}, local_experts(), config_.activation);
  std::vector<int64_t> returned_counts;
  const Tensor returned = backend.all_to_all_rows(expert_out, received_counts, returned_counts);
  // Combine: the rows come back in the order they were sent; each token adds its ranks' parts in rank order.
  Tensor out = backend.from_host_f32(std::vector<float>(static_cast<size_t>(num_tokens * hidden), 0.0f),
                                     {num_tokens, hidden});
  backend.add_rows(out, returned, sent_tokens);
  return out;
}

}  // namespace tern
