#pragma once
// What the EAGLE-3 tests share: float64 references, from the checkpoints' tensors, of a Llama decoder layer's blocks
// (grouped-query attention with rotate-half RoPE, as transformers' LlamaAttention, over a context that grows step by
// step; the SwiGLU MLP), and from them of a Llama target's layer inputs (Model::forward_with_layer_inputs) and of an
// EAGLE-3 head's steps (model/arch/llama_eagle3.h, as vLLM's llama_eagle3.py computes them).
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "model/model_config.h"
#include "model/rope.h"
#include "mtp_layer_reference.h"

namespace tern::testing {

// Self-attention of one sequence: q/k/v_proj over an input of `input` columns, RoPE at the token's position, causal
// softmax over every position so far (the keys and values of earlier steps kept), o_proj.
class ReferenceAttention {
 public:
  ReferenceAttention(const Checkpoint& checkpoint, const std::string& prefix, const ModelConfig& config, size_t input)
      : heads_(static_cast<size_t>(config.num_heads)),
        kv_heads_(static_cast<size_t>(config.num_kv_heads)),
        head_dim_(static_cast<size_t>(config.head_dim)),
        input_(input),
        q_(checkpoint_values(checkpoint, prefix + ".q_proj.weight")),
        k_(checkpoint_values(checkpoint, prefix + ".k_proj.weight")),
        v_(checkpoint_values(checkpoint, prefix + ".v_proj.weight")),
        o_(checkpoint_values(checkpoint, prefix + ".o_proj.weight")) {
    const RopeFrequencies frequencies =
        rope_frequencies(config.rope, static_cast<int>(head_dim_), config.max_position_embeddings);
    inv_freq_.assign(frequencies.inv_freq.begin(), frequencies.inv_freq.end());
    rope_scaling_ = frequencies.attention_scaling;
  }

  // x [T, input] at positions [first_position, first_position + T), every earlier position computed already (or
  // computed again: its keys and values are replaced) -> [T, o_proj rows].
  Matrix forward(const Matrix& x, size_t first_position) {
    const size_t num_tokens = x.size() / input_;
    Matrix q = linear(x, q_, input_), k = linear(x, k_, input_), v = linear(x, v_, input_);
    const size_t q_width = heads_ * head_dim_, kv_width = kv_heads_ * head_dim_;
    keys_.resize((first_position + num_tokens) * kv_width);
    values_.resize(keys_.size());
    for (size_t t = 0; t < num_tokens; ++t) {
      const size_t position = first_position + t;
      for (size_t h = 0; h < heads_; ++h) rotate(&q[t * q_width + h * head_dim_], position);
      for (size_t h = 0; h < kv_heads_; ++h) rotate(&k[t * kv_width + h * head_dim_], position);
      std::copy(k.begin() + t * kv_width, k.begin() + (t + 1) * kv_width, keys_.begin() + position * kv_width);
      std::copy(v.begin() + t * kv_width, v.begin() + (t + 1) * kv_width, values_.begin() + position * kv_width);
    }
    Matrix attended(num_tokens * q_width, 0.0);
    const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim_));
    for (size_t t = 0; t < num_tokens; ++t) {
      const size_t position = first_position + t;
      for (size_t h = 0; h < heads_; ++h) {
        const size_t kv = h / (heads_ / kv_heads_);
        const double* query = &q[t * q_width + h * head_dim_];
        std::vector<double> scores(position + 1);
        double top = -1e300;
        for (size_t p = 0; p <= position; ++p) {
          double dot = 0.0;
          for (size_t i = 0; i < head_dim_; ++i) dot += query[i] * keys_[p * kv_width + kv * head_dim_ + i];
          scores[p] = dot * scale;
          top = std::max(top, scores[p]);
        }
        double total = 0.0;
        for (double& s : scores) total += (s = std::exp(s - top));
        double* out = &attended[t * q_width + h * head_dim_];
        for (size_t p = 0; p <= position; ++p) {
          for (size_t i = 0; i < head_dim_; ++i) out[i] += scores[p] / total * values_[p * kv_width + kv * head_dim_ + i];
        }
      }
    }
    return linear(attended, o_, q_width);
  }

 private:
  // transformers' rotate_half: dims i and i + d/2 turn by position * inv_freq[i].
  void rotate(double* x, size_t position) const {
    const size_t half = head_dim_ / 2;
    for (size_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(position) * inv_freq_[i];
      const double c = std::cos(angle) * rope_scaling_, s = std::sin(angle) * rope_scaling_;
      const double a = x[i], b = x[i + half];
      x[i] = a * c - b * s;
      x[i + half] = b * c + a * s;
    }
  }

  size_t heads_, kv_heads_, head_dim_, input_;
  Matrix q_, k_, v_, o_;
  std::vector<double> inv_freq_;
  double rope_scaling_ = 1.0;
  Matrix keys_, values_;  // [positions, kv_heads * head_dim], rotated keys
};

// down(silu(gate(x)) * up(x)) of x [T, hidden].
inline Matrix reference_mlp(const Checkpoint& checkpoint, const std::string& prefix, const Matrix& x, size_t hidden) {
  const Matrix gate = linear(x, checkpoint_values(checkpoint, prefix + ".gate_proj.weight"), hidden);
  const Matrix up = linear(x, checkpoint_values(checkpoint, prefix + ".up_proj.weight"), hidden);
  Matrix activated(gate.size());
  for (size_t i = 0; i < gate.size(); ++i) activated[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
  return linear(activated, checkpoint_values(checkpoint, prefix + ".down_proj.weight"), gate.size() / (x.size() / hidden));
}

inline Matrix add(const Matrix& a, const Matrix& b) {
  Matrix sum(a.size());
  for (size_t i = 0; i < a.size(); ++i) sum[i] = a[i] + b[i];
  return sum;
}

// The rows of `table` [rows, width] at `ids`.
inline Matrix gather(const Matrix& table, const std::vector<int32_t>& ids, size_t width) {
  Matrix out;
  for (int32_t id : ids) out.insert(out.end(), table.begin() + id * width, table.begin() + (id + 1) * width);
  return out;
}

// The residual stream of the Llama target in `dir` over `tokens` (positions 0 on) entering each of its layers and
// after the last: [num_layers + 1] of [T, hidden].
inline std::vector<Matrix> reference_layer_inputs(const std::filesystem::path& dir, const std::vector<int32_t>& tokens) {
  const ModelConfig config = ModelConfig::load(dir);
  const Checkpoint checkpoint = Checkpoint::open(dir);
  const auto hidden = static_cast<size_t>(config.hidden_size);
  std::vector<Matrix> inputs = {gather(checkpoint_values(checkpoint, "model.embed_tokens.weight"), tokens, hidden)};
  for (int64_t l = 0; l < config.num_layers; ++l) {
    const std::string layer = "model.layers." + std::to_string(l);
    ReferenceAttention attention(checkpoint, layer + ".self_attn", config, hidden);
    const Matrix& h = inputs.back();
    const Matrix r = add(h, attention.forward(
                               rms_norm(h, checkpoint_values(checkpoint, layer + ".input_layernorm.weight"),
                                        config.rms_norm_eps), 0));
    inputs.push_back(add(r, reference_mlp(checkpoint, layer + ".mlp",
                                          rms_norm(r, checkpoint_values(checkpoint, layer + ".post_attention_layernorm.weight"),
                                                   config.rms_norm_eps),
                                          hidden)));
  }
  return inputs;
}

// An EAGLE-3 head's steps in float64 over one sequence: its embedding its own or the target's (`target_dir`).
class ReferenceEagle3Head {
 public:
  ReferenceEagle3Head(const std::filesystem::path& dir, const std::filesystem::path& target_dir)
      : config_(ModelConfig::load(dir)),
        checkpoint_(Checkpoint::open(dir)),
        hidden_(static_cast<size_t>(config_.hidden_size)),
        attention_(checkpoint_, "midlayer.self_attn", config_, 2 * hidden_) {
    if (checkpoint_.has("embed_tokens.weight")) {
      embed_ = checkpoint_values(checkpoint_, "embed_tokens.weight");
    } else {
      embed_ = checkpoint_values(Checkpoint::open(target_dir), "model.embed_tokens.weight");
    }
  }

  struct Step {
    Matrix logits;   // [T, draft vocab]
    Matrix outputs;  // [T, hidden]: out before the norm
  };
  // Entries of `tokens` at positions [first_position, ...) with `hidden` [T, 3H] (the target's layer inputs) or
  // [T, H] (the head's own outputs).
  Step step(const std::vector<int32_t>& tokens, size_t first_position, const Matrix& hidden) {
    const double eps = config_.rms_norm_eps;
    const Matrix g = hidden.size() == tokens.size() * 3 * hidden_
                         ? linear(hidden, value("fc.weight"), 3 * hidden_)
                         : hidden;
    const Matrix e = rms_norm(gather(embed_, tokens, hidden_), value("midlayer.input_layernorm.weight"), eps);
    const Matrix n = rms_norm(g, value("midlayer.hidden_norm.weight"), eps);
    Matrix x;
    for (size_t t = 0; t < tokens.size(); ++t) {
      x.insert(x.end(), e.begin() + t * hidden_, e.begin() + (t + 1) * hidden_);
      x.insert(x.end(), n.begin() + t * hidden_, n.begin() + (t + 1) * hidden_);
    }
    const Matrix r = add(g, attention_.forward(x, first_position));
    const Matrix out = add(r, reference_mlp(checkpoint_, "midlayer.mlp",
                                            rms_norm(r, value("midlayer.post_attention_layernorm.weight"), eps), hidden_));
    return {linear(rms_norm(out, value("norm.weight"), eps), value("lm_head.weight"), hidden_), out};
  }

 private:
  Matrix value(const std::string& name) const { return checkpoint_values(checkpoint_, name); }

  ModelConfig config_;
  Checkpoint checkpoint_;
  size_t hidden_;
  ReferenceAttention attention_;
  Matrix embed_;
};

}  // namespace tern::testing
