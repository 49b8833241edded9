#include "model/arch/deepseek_v4/v4_config.h"

#include <optional>

#include "core/error.h"

namespace tern {

namespace {

template <typename T>
T value_or(const ModelConfig& config, const char* key, T fallback) {
  auto it = config.raw.find(key);
  if (it == config.raw.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    fail("{}: config.json field '{}' has the wrong type ({})", config.architecture, key, it->type_name());
  }
}

int64_t required_int(const ModelConfig& config, const char* key) {
  auto it = config.raw.find(key);
  if (it == config.raw.end() || !it->is_number_integer()) fail("{}: config.json lacks '{}'", config.architecture, key);
  return it->get<int64_t>();
}

V4AttentionKind attention_kind(const ModelConfig& config, const std::string& name) {
  if (name == "sliding_attention") return V4AttentionKind::sliding;
  if (name == "compressed_sparse_attention") return V4AttentionKind::compressed_sparse;
  if (name == "heavily_compressed_attention") return V4AttentionKind::heavily_compressed;
  fail("{}: unknown layer type '{}' (expected sliding_attention, compressed_sparse_attention or "
       "heavily_compressed_attention)", config.architecture, name);
}

// `hca_rate_given`: the HCA rate came from compress_rates or compress_rate_hca, not its default.
std::vector<V4AttentionKind> attention_kinds(const ModelConfig& config, DeepseekV4Config& v4, bool hca_rate_given) {
  const int64_t n = config.num_layers;
  std::vector<V4AttentionKind> kinds;
  if (auto it = config.raw.find("layer_types"); it != config.raw.end() && it->is_array()) {
    for (const auto& name : *it) kinds.push_back(attention_kind(config, name.get<std::string>()));
  } else if (auto ratios = config.raw.find("compress_ratios"); ratios != config.raw.end() && ratios->is_array()) {
    // DeepSeek's released config.json: one ratio per layer, then the MTP layers' (kept apart below). Its
    // inference/model.py gives ratio 4 the overlapping compressor and the indexer (CSA) and any other nonzero ratio
    // plain compression (HCA), so the HCA rate is the ratio those layers carry (128 in V4-Flash and V4-Pro).
    std::optional<int64_t> hca_rate;
    for (size_t i = 0; i < ratios->size() && static_cast<int64_t>(i) < n; ++i) {
      const int64_t r = (*ratios)[i].get<int64_t>();
      if (r < 0) fail("{}: compress_ratios[{}] is {}", config.architecture, i, r);
      if (r != 0 && r != v4.csa_compress_rate) {
        if (hca_rate && *hca_rate != r) {
          fail("{}: compress_ratios mix heavily compressed rates {} and {}; one is supported", config.architecture,
               *hca_rate, r);
        }
        hca_rate = r;
      }
    }
    if (hca_rate && !hca_rate_given) v4.hca_compress_rate = *hca_rate;
    for (const auto& ratio : *ratios) {
      const int64_t r = ratio.get<int64_t>();
      kinds.push_back(r == 0                        ? V4AttentionKind::sliding
                      : r == v4.csa_compress_rate ? V4AttentionKind::compressed_sparse
                                                  : V4AttentionKind::heavily_compressed);
    }
  } else {
    // transformers' default: two HCA layers, then CSA and HCA alternating.
    for (int64_t i = 0; i < n; ++i) {
      kinds.push_back(i >= 2 && (i - 2) % 2 == 1 ? V4AttentionKind::compressed_sparse
                                                 : V4AttentionKind::heavily_compressed);
    }
  }
  if (static_cast<int64_t>(kinds.size()) < n) {
    fail("{}: {} attention layer types for {} layers", config.architecture, kinds.size(), n);
  }
  return kinds;  // the decoder layers', then any MTP layers'
}

std::vector<bool> hash_moe_layers(const ModelConfig& config) {
  const int64_t n = config.num_layers;
  std::vector<bool> hash(n, false);
  if (auto it = config.raw.find("mlp_layer_types"); it != config.raw.end() && it->is_array()) {
    if (static_cast<int64_t>(it->size()) < n) fail("{}: {} mlp_layer_types for {} layers", config.architecture, it->size(), n);
    for (int64_t i = 0; i < n; ++i) {
      const std::string type = (*it)[i].get<std::string>();
      if (type != "hash_moe" && type != "moe") fail("{}: unknown mlp layer type '{}'", config.architecture, type);
      hash[i] = type == "hash_moe";
    }
  } else {
    const int64_t num_hash = value_or<int64_t>(config, "num_hash_layers", 3);
    for (int64_t i = 0; i < n && i < num_hash; ++i) hash[i] = true;
  }
  return hash;
}

// A RopeConfig from one set of rope parameters, keeping the checkpoint dtype (which rounds the frequencies).
RopeConfig rope_from(const ModelConfig& config, nlohmann::json params) {
  nlohmann::json wrapper = {{"rope_parameters", std::move(params)}};
  for (const char* key : {"dtype", "torch_dtype"}) {
    if (auto it = config.raw.find(key); it != config.raw.end()) wrapper[key] = *it;
  }
  return RopeConfig::from_config(wrapper);
}

}  // namespace

DeepseekV4Config read_deepseek_v4_config(const ModelConfig& config) {
  DeepseekV4Config v4;
  v4.q_lora_rank = required_int(config, "q_lora_rank");
  v4.o_groups = required_int(config, "o_groups");
  v4.o_lora_rank = required_int(config, "o_lora_rank");
  v4.sliding_window = required_int(config, "sliding_window");
  bool hca_rate_given = false;
  if (auto it = config.raw.find("compress_rates"); it != config.raw.end() && it->is_object()) {
    v4.csa_compress_rate = it->value("compressed_sparse_attention", v4.csa_compress_rate);
    v4.hca_compress_rate = it->value("heavily_compressed_attention", v4.hca_compress_rate);
    hca_rate_given = it->contains("heavily_compressed_attention");
  }
  v4.csa_compress_rate = value_or<int64_t>(config, "compress_rate_csa", v4.csa_compress_rate);
  v4.hca_compress_rate = value_or<int64_t>(config, "compress_rate_hca", v4.hca_compress_rate);
  hca_rate_given = hca_rate_given || config.raw.contains("compress_rate_hca");
  v4.index_num_heads = required_int(config, "index_n_heads");
  v4.index_head_dim = required_int(config, "index_head_dim");
  v4.index_topk = required_int(config, "index_topk");
  v4.hc_mult = value_or<int64_t>(config, "hc_mult", 4);
  v4.hc_sinkhorn_iters = value_or<int64_t>(config, "hc_sinkhorn_iters", 20);
  v4.hc_eps = static_cast<float>(value_or<double>(config, "hc_eps", 1e-6));
  v4.attention_kinds = attention_kinds(config, v4, hca_rate_given);
  v4.mtp_attention_kinds.assign(v4.attention_kinds.begin() + config.num_layers, v4.attention_kinds.end());
  v4.attention_kinds.resize(config.num_layers);
  v4.hash_moe = hash_moe_layers(config);
  v4.num_experts = required_int(config, "n_routed_experts");
  v4.num_experts_per_token = required_int(config, "num_experts_per_tok");
  v4.moe_intermediate_size = required_int(config, "moe_intermediate_size");
  v4.num_shared_experts = value_or<int64_t>(config, "n_shared_experts", 1);
  v4.routed_scaling = static_cast<float>(value_or<double>(config, "routed_scaling_factor", 1.0));
  v4.swiglu_limit = static_cast<float>(value_or<double>(config, "swiglu_limit", 10.0));
  const std::string scoring = value_or<std::string>(config, "scoring_func", "sqrtsoftplus");
  if (scoring != "sqrtsoftplus") fail("{}: unsupported scoring_func '{}'", config.architecture, scoring);
  if (v4.csa_compress_rate <= 0 || v4.hca_compress_rate <= 0 || v4.hc_mult <= 0 || v4.o_groups <= 0 ||
      (config.num_heads * config.head_dim) % v4.o_groups != 0) {
    fail("{}: compress rates, hc_mult and o_groups must be positive, and o_groups must divide the heads' width",
         config.architecture);
  }

  const auto& rope = config.raw.contains("rope_parameters") ? config.raw["rope_parameters"] : nlohmann::json();
  if (rope.is_object() && rope.contains("main") && rope["main"].is_object() && rope.contains("compress") &&
      rope["compress"].is_object()) {
    v4.main_rope = rope_from(config, rope["main"]);
    v4.compress_rope = rope_from(config, rope["compress"]);
  } else {
    // transformers' DeepseekV4Config: plain rope at rope_theta for `main`; any flat scaling settings (yarn) at
    // compress_rope_theta, without yarn's attention factor, for `compress`.
    const double partial = value_or<double>(
        config, "partial_rotary_factor",
        static_cast<double>(value_or<int64_t>(config, "qk_rope_head_dim", 64)) / static_cast<double>(config.head_dim));
    v4.main_rope = rope_from(config, {{"rope_type", "default"},
                                      {"rope_theta", value_or<double>(config, "rope_theta", 10000.0)},
                                      {"partial_rotary_factor", partial}});
    nlohmann::json compress = nlohmann::json::object();
    if (rope.is_object()) compress = rope;
    else if (auto it = config.raw.find("rope_scaling"); it != config.raw.end() && it->is_object()) compress = *it;
    compress["rope_theta"] = value_or<double>(config, "compress_rope_theta", 160000.0);
    compress["partial_rotary_factor"] = partial;
    if (!compress.contains("rope_type")) compress["rope_type"] = compress.value("type", std::string("default"));
    if (compress["rope_type"] == "yarn" && !compress.contains("attention_factor")) compress["attention_factor"] = 1.0;
    v4.compress_rope = rope_from(config, compress);
  }
  return v4;
}

}  // namespace tern
