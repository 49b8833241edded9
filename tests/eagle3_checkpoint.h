#pragma once
// No EAGLE-3 weights can be downloaded here: this writes random EAGLE-3 heads for a fixture target into temporary
// directories, in the layout of the published checkpoints (model/arch/llama_eagle3.h): config.json with
// architectures ["LlamaForCausalLMEagle3"], num_hidden_layers 1 and draft_vocab_size 128 beside the target's
// vocab_size; fc.weight [H, 3H], midlayer.* (q/k/v_proj [., 2H]), norm.weight, lm_head.weight [128, H], d2t (int64: a
// random sorted subset of the target's ids, as offsets) and t2d (BOOL [vocab]). Its attention has heads of its own
// shape (8 of 8 dims over 2 key/value heads), not the target's. The fixtures have 2 layers, fewer than vLLM's
// default layers (2, L/2, L-3) need, so the head names the inputs of layers 0, 1 and 2 (the embedding, after layer
// 0, after layer 1) in eagle_config, as a checkpoint may. Its drafts are mostly rejected.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "fixtures.h"
#include "model/safetensors.h"
#include "mtp_checkpoint.h"

namespace tern::testing {

struct Eagle3HeadOptions {
  bool own_embedding = false;     // embed_tokens.weight of its own (else the target's is read)
  int64_t hidden_size = 0;        // 0: the target's
  int64_t num_d2t_entries = 128;  // d2t's length (draft_vocab_size is 128)
  bool names_layers = true;       // eagle_aux_hidden_state_layer_ids [0, 1, 2]; else vLLM's default applies
};

constexpr int64_t kEagle3DraftVocab = 128;

// Relabels tensor `name` of the safetensors file at `path` as `dtype` (same bytes per element): the writer knows
// no BOOL, which is how torch stores t2d.
inline void relabel_safetensors_dtype(const std::filesystem::path& path, const std::string& name,
                                      const std::string& dtype) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data(), 8);
  auto header = nlohmann::json::parse(bytes.substr(8, header_bytes));
  header[name]["dtype"] = dtype;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t new_header_bytes = text.size();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(&new_header_bytes), 8);
  out << text << bytes.substr(8 + header_bytes);
}

inline std::filesystem::path eagle3_head(const std::string& fixture, const Eagle3HeadOptions& options = {}) {
  const auto [out, fresh] = test_checkpoint_dir(
      "tern_eagle3_" + fixture + (options.own_embedding ? "_own_embedding" : "") + "_h" +
      std::to_string(options.hidden_size) + "_d2t" + std::to_string(options.num_d2t_entries) +
      (options.names_layers ? "" : "_default_layers"));
  if (!fresh) return out;
  const auto target = read_json(fixtures_dir() / "models" / fixture / "config.json");
  const int64_t hidden = options.hidden_size > 0 ? options.hidden_size : target["hidden_size"].get<int64_t>();
  const int64_t vocab = target["vocab_size"].get<int64_t>();
  constexpr int64_t kHeads = 8, kKvHeads = 2, kHeadDim = 8, kIntermediate = 96;
  // The published Llama-3.1-8B head's config.json style (transformers 4: rope_theta, rope_scaling null).
  nlohmann::json config = {{"architectures", {"LlamaForCausalLMEagle3"}},
                           {"model_type", "llama"},
                           {"hidden_act", "silu"},
                           {"hidden_size", hidden},
                           {"intermediate_size", kIntermediate},
                           {"num_attention_heads", kHeads},
                           {"num_key_value_heads", kKvHeads},
                           {"head_dim", kHeadDim},
                           {"num_hidden_layers", 1},
                           {"max_position_embeddings", 2048},
                           {"rms_norm_eps", 1e-5},
                           {"rope_theta", 500000.0},
                           {"rope_scaling", nullptr},
                           {"tie_word_embeddings", false},
                           {"torch_dtype", "float16"},
                           {"vocab_size", vocab},
                           {"draft_vocab_size", kEagle3DraftVocab}};
  if (options.names_layers) config["eagle_config"] = {{"eagle_aux_hidden_state_layer_ids", {0, 1, 2}}};
  std::ofstream(out / "config.json") << config.dump(2);

  std::mt19937 rng(options.own_embedding ? 31 : 32);
  std::normal_distribution<float> normal(0.0f, 0.08f);
  std::vector<NamedTensorF32> f32;
  const auto put = [&](const std::string& name, std::vector<int64_t> shape, float norm_scale = 0.0f) {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    std::vector<float> values(static_cast<size_t>(count));
    for (float& v : values) v = norm_scale > 0.0f ? norm_scale * (1.0f + 2.0f * normal(rng)) : normal(rng);
    f32.push_back({name, std::move(shape), std::move(values)});
  };
  put("fc.weight", {hidden, 3 * hidden});
  put("midlayer.input_layernorm.weight", {hidden}, 1.0f);
  // The hidden state weighs more than the token in the drafts, so that one read from the wrong row shows.
  put("midlayer.hidden_norm.weight", {hidden}, 4.0f);
  put("midlayer.post_attention_layernorm.weight", {hidden}, 1.0f);
  put("midlayer.self_attn.q_proj.weight", {kHeads * kHeadDim, 2 * hidden});
  put("midlayer.self_attn.k_proj.weight", {kKvHeads * kHeadDim, 2 * hidden});
  put("midlayer.self_attn.v_proj.weight", {kKvHeads * kHeadDim, 2 * hidden});
  put("midlayer.self_attn.o_proj.weight", {hidden, kHeads * kHeadDim});
  put("midlayer.mlp.gate_proj.weight", {kIntermediate, hidden});
  put("midlayer.mlp.up_proj.weight", {kIntermediate, hidden});
  put("midlayer.mlp.down_proj.weight", {hidden, kIntermediate});
  put("norm.weight", {hidden}, 1.0f);
  put("lm_head.weight", {kEagle3DraftVocab, hidden});
  if (options.own_embedding) put("embed_tokens.weight", {vocab, hidden});

  // The draft vocabulary: distinct target ids in ascending order, as EAGLE's training scripts pick the most
  // frequent ones and sort them.
  std::set<int64_t> chosen;
  std::uniform_int_distribution<int64_t> id(0, vocab - 1);
  while (static_cast<int64_t>(chosen.size()) < kEagle3DraftVocab) chosen.insert(id(rng));
  const std::vector<int64_t> draft_ids(chosen.begin(), chosen.end());
  std::vector<int64_t> d2t(static_cast<size_t>(options.num_d2t_entries), 0);
  for (size_t d = 0; d < d2t.size(); ++d) d2t[d] = draft_ids[d % draft_ids.size()] - static_cast<int64_t>(d);
  std::vector<uint8_t> t2d(static_cast<size_t>(vocab), 0);
  for (int64_t t : draft_ids) t2d[static_cast<size_t>(t)] = 1;

  std::vector<TensorInfo> tensors;
  for (const auto& t : f32) {
    tensors.push_back({t.name, out / "model.safetensors", DType::F32, t.shape,
                       reinterpret_cast<const std::byte*>(t.values.data()), t.values.size() * sizeof(float), {}});
  }
  tensors.push_back({"d2t", out / "model.safetensors", DType::I64, {options.num_d2t_entries},
                     reinterpret_cast<const std::byte*>(d2t.data()), d2t.size() * sizeof(int64_t), {}});
  tensors.push_back({"t2d", out / "model.safetensors", DType::U8, {vocab},
                     reinterpret_cast<const std::byte*>(t2d.data()), t2d.size(), {}});
  write_safetensors(out / "model.safetensors", tensors);
  relabel_safetensors_dtype(out / "model.safetensors", "t2d", "BOOL");
  return out;
}

// An oracle pair: a copy of the llama fixture made a bigram model and a head that drafts exactly its greedy tokens,
// so that every draft is accepted. The target's attention and MLP output projections are zeroed (its logits after
// token t are lm_head(norm(embed[t])): every layer input is the embedding) and its embedding rows are random vectors
// of norm 8 in dims [0, 56), zero in [56, 64). The head, whose draft vocabulary is all of the target's in another
// order (d2t a permutation), reads the token alone:
// - its own embedding is the target's plus a constant 1 in dims [56, 64), so every row's RMS is the same and the
//   normalized input's dims [56, 64) are constant; fc is zero, so the first depth's g is zero;
// - q and k of each of its 8 heads (8 dims, 8 key/value heads) are those constant dims times 33: the scores of
//   earlier positions fall short of the current one's by at least 40 (RoPE at theta 500000 over 8 dims, any of the
//   first 400 offsets), so each head attends to the current token only;
// - v of head h is the normalized embedding's dims [8h, 8h + 8) minus the normalized hidden state's (scaled to
//   cancel g, which for a draft after a draft is the previous output, of fixed RMS: 8 u / |u| after the norm), and
//   o_proj puts it back in place: the residual is embed[t]'s dims [0, 56) up to a scale;
// - the MLP's down_proj is zero; norm and lm_head are the target's final norm and lm_head rows (in draft order).
// Its logits are then the target's after the token, up to rounding.
struct Eagle3Oracle {
  std::filesystem::path target;
  std::filesystem::path head;
};

inline Eagle3Oracle eagle3_oracle() {
  const auto [target_dir, fresh_target] = test_checkpoint_dir("tern_eagle3_oracle_target");
  const auto [head_dir, fresh_head] = test_checkpoint_dir("tern_eagle3_oracle_head");
  if (!fresh_target && !fresh_head) return {target_dir, head_dir};
  const auto source = fixtures_dir() / "models" / "llama";
  const auto target_config = read_json(source / "config.json");
  const int64_t hidden = target_config["hidden_size"].get<int64_t>();
  const int64_t vocab = target_config["vocab_size"].get<int64_t>();
  constexpr int64_t kTokenDims = 56, kHeads = 8, kHeadDim = 8, kIntermediate = 96;
  constexpr double kTokenNorm = 8.0, kQk = 33.0;
  std::filesystem::copy_file(source / "config.json", target_dir / "config.json");
  const auto fixture = SafetensorsFile::open(source / "model.safetensors");
  const auto values_of = [&](const std::string& name) {
    const TensorInfo& info = *fixture->find(name);
    std::vector<float> values(static_cast<size_t>(info.numel()));
    dequantize_to_f32(info, values.data());
    return values;
  };
  std::mt19937 rng(41);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::map<std::string, NamedTensorF32> target;  // replaced tensors
  for (const auto& [name, info] : fixture->tensors()) {
    if (name.find("o_proj.weight") != std::string::npos || name.find("down_proj.weight") != std::string::npos) {
      target[name] = {name, info.shape, std::vector<float>(static_cast<size_t>(info.numel()), 0.0f)};
    }
  }
  std::vector<float> embed(static_cast<size_t>(vocab * hidden), 0.0f);
  for (int64_t t = 0; t < vocab; ++t) {
    float* row = &embed[static_cast<size_t>(t * hidden)];
    double sum = 0.0;
    for (int64_t i = 0; i < kTokenDims; ++i) {
      row[i] = normal(rng);
      sum += row[i] * row[i];
    }
    for (int64_t i = 0; i < kTokenDims; ++i) row[i] = static_cast<float>(row[i] * kTokenNorm / std::sqrt(sum));
  }
  target["model.embed_tokens.weight"] = {"model.embed_tokens.weight", {vocab, hidden}, embed};
  std::vector<TensorInfo> tensors;
  for (const auto& [name, info] : fixture->tensors()) {
    if (!target.count(name)) tensors.push_back(info);
  }
  for (const auto& [name, t] : target) {
    tensors.push_back({name, target_dir / "model.safetensors", DType::F32, t.shape,
                       reinterpret_cast<const std::byte*>(t.values.data()), t.values.size() * sizeof(float), {}});
  }
  write_safetensors(target_dir / "model.safetensors", tensors);

  nlohmann::json config = {{"architectures", {"LlamaForCausalLMEagle3"}}, {"model_type", "llama"},
                           {"hidden_act", "silu"}, {"hidden_size", hidden}, {"intermediate_size", kIntermediate},
                           {"num_attention_heads", kHeads}, {"num_key_value_heads", kHeads}, {"head_dim", kHeadDim},
                           {"num_hidden_layers", 1}, {"max_position_embeddings", 2048}, {"rms_norm_eps", 1e-5},
                           {"rope_theta", 500000.0}, {"rope_scaling", nullptr}, {"tie_word_embeddings", false},
                           {"torch_dtype", "float16"}, {"vocab_size", vocab}, {"draft_vocab_size", vocab},
                           {"eagle_aux_hidden_state_layer_ids", {0, 1, 2}}};
  std::ofstream(head_dir / "config.json") << config.dump(2);
  const auto zeros = [](int64_t count) { return std::vector<float>(static_cast<size_t>(count), 0.0f); };
  const auto ones = [](int64_t count) { return std::vector<float>(static_cast<size_t>(count), 1.0f); };
  std::vector<NamedTensorF32> head;
  std::vector<float> head_embed = embed;
  for (int64_t t = 0; t < vocab; ++t) {
    for (int64_t i = kTokenDims; i < hidden; ++i) head_embed[static_cast<size_t>(t * hidden + i)] = 1.0f;
  }
  head.push_back({"embed_tokens.weight", {vocab, hidden}, head_embed});
  head.push_back({"fc.weight", {hidden, 3 * hidden}, zeros(hidden * 3 * hidden)});
  head.push_back({"midlayer.input_layernorm.weight", {hidden}, ones(hidden)});
  head.push_back({"midlayer.hidden_norm.weight", {hidden}, ones(hidden)});
  head.push_back({"midlayer.post_attention_layernorm.weight", {hidden}, ones(hidden)});
  const int64_t qkv_rows = kHeads * kHeadDim, input = 2 * hidden;
  std::vector<float> qk = zeros(qkv_rows * input), v = zeros(qkv_rows * input), o = zeros(hidden * qkv_rows);
  // The normalized embedding's RMS is sqrt((|u|^2 + 8) / 64) for every token; the hidden state's weight cancels g.
  const double embedding_rms = std::sqrt((kTokenNorm * kTokenNorm + (hidden - kTokenDims)) / hidden);
  const double cancel = -kTokenNorm / (8.0 * embedding_rms);
  for (int64_t h = 0; h < kHeads; ++h) {
    for (int64_t m = 0; m < kHeadDim; ++m) {
      const int64_t row = h * kHeadDim + m;
      qk[static_cast<size_t>(row * input + kTokenDims + m)] = static_cast<float>(kQk);
      if (row < kTokenDims) {
        v[static_cast<size_t>(row * input + row)] = 1.0f;
        v[static_cast<size_t>(row * input + hidden + row)] = static_cast<float>(cancel);
        o[static_cast<size_t>(row * qkv_rows + row)] = 1.0f;
      }
    }
  }
  head.push_back({"midlayer.self_attn.q_proj.weight", {qkv_rows, input}, qk});
  head.push_back({"midlayer.self_attn.k_proj.weight", {qkv_rows, input}, qk});
  head.push_back({"midlayer.self_attn.v_proj.weight", {qkv_rows, input}, v});
  head.push_back({"midlayer.self_attn.o_proj.weight", {hidden, qkv_rows}, o});
  std::normal_distribution<float> small(0.0f, 0.08f);
  std::vector<float> gate_up(static_cast<size_t>(kIntermediate * hidden));
  for (float& x : gate_up) x = small(rng);
  head.push_back({"midlayer.mlp.gate_proj.weight", {kIntermediate, hidden}, gate_up});
  head.push_back({"midlayer.mlp.up_proj.weight", {kIntermediate, hidden}, gate_up});
  head.push_back({"midlayer.mlp.down_proj.weight", {hidden, kIntermediate}, zeros(hidden * kIntermediate)});
  head.push_back({"norm.weight", {hidden}, values_of("model.norm.weight")});
  // Draft id d is target id order[d].
  std::vector<int64_t> order(static_cast<size_t>(vocab));
  for (int64_t t = 0; t < vocab; ++t) order[static_cast<size_t>(t)] = t;
  std::shuffle(order.begin(), order.end(), rng);
  const std::vector<float> target_head = values_of("lm_head.weight");
  std::vector<float> lm_head(target_head.size());
  std::vector<int64_t> d2t(static_cast<size_t>(vocab));
  for (int64_t d = 0; d < vocab; ++d) {
    const int64_t t = order[static_cast<size_t>(d)];
    std::copy(target_head.begin() + t * hidden, target_head.begin() + (t + 1) * hidden, lm_head.begin() + d * hidden);
    d2t[static_cast<size_t>(d)] = t - d;
  }
  head.push_back({"lm_head.weight", {vocab, hidden}, lm_head});
  std::vector<TensorInfo> head_tensors;
  for (const auto& t : head) {
    head_tensors.push_back({t.name, head_dir / "model.safetensors", DType::F32, t.shape,
                            reinterpret_cast<const std::byte*>(t.values.data()), t.values.size() * sizeof(float), {}});
  }
  head_tensors.push_back({"d2t", head_dir / "model.safetensors", DType::I64, {vocab},
                          reinterpret_cast<const std::byte*>(d2t.data()), d2t.size() * sizeof(int64_t), {}});
  write_safetensors(head_dir / "model.safetensors", head_tensors);
  return {target_dir, head_dir};
}

}  // namespace tern::testing
