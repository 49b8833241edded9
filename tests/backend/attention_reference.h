#pragma once
// What the CPU backend's attention tests share: seeded random values, dense reference attention in double, and a
// paged two-sequence step (one sequence with a prefix cached by an earlier step, shuffled block tables).
#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <vector>

#include "backend/forward_batch.h"

namespace tern::testing {

inline std::vector<float> random_values(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Dense reference attention for one sequence: causal, GQA, scale 1 / sqrt(dim), optional sliding window and
// sinks. Outputs [tokens, heads, dim].
inline std::vector<double> naive_attention(const std::vector<float>& q, const std::vector<float>& k,
                                           const std::vector<float>& v, int num_tokens, int num_heads,
                                           int num_kv_heads, int dim, int first_query_pos, int window = 0,
                                           const std::vector<float>* sinks = nullptr) {
  std::vector<double> out;
  const int group = num_heads / num_kv_heads;
  for (int t = 0; t < num_tokens; ++t) {
    const int pos = first_query_pos + t;
    for (int h = 0; h < num_heads; ++h) {
      const int kvh = h / group;
      std::vector<double> scores;
      const int first = window ? std::max(0, pos - window + 1) : 0;
      for (int j = first; j <= pos; ++j) {
        double dot = 0;
        for (int d = 0; d < dim; ++d) dot += double(q[(t * num_heads + h) * dim + d]) * k[(j * num_kv_heads + kvh) * dim + d];
        scores.push_back(dot / std::sqrt(double(dim)));
      }
      double max_score = *std::max_element(scores.begin(), scores.end());
      if (sinks) max_score = std::max(max_score, double((*sinks)[h]));
      double denominator = sinks ? std::exp((*sinks)[h] - max_score) : 0.0;
      for (double& s : scores) denominator += (s = std::exp(s - max_score));
      for (int d = 0; d < dim; ++d) {
        double acc = 0;
        for (int j = first; j <= pos; ++j) acc += scores[j - first] / denominator * v[(j * num_kv_heads + kvh) * dim + d];
        out.push_back(acc);
      }
    }
  }
  return out;
}

// Two sequences of cached[s] + fresh[s] tokens under `tables`: sequence 0's cached prefix is written by the step
// `prefix` (keys and values prefix_k, prefix_v), then `step` brings both sequences' new tokens (k, v) and their
// queries q. full_k, full_v and queries hold each sequence's whole keys and values and its new tokens' queries.
struct TwoSequenceAttention {
  int num_heads, num_kv_heads, dim;
  std::array<int, 2> cached, fresh;
  std::vector<std::vector<float>> full_k, full_v, queries;
  ForwardBatch prefix, step;
  std::vector<float> prefix_k, prefix_v, k, v, q;
  int num_tokens() const { return fresh[0] + fresh[1]; }
};

inline TwoSequenceAttention two_sequence_attention(int num_heads, int num_kv_heads, int dim, std::array<int, 2> cached,
                                                   std::array<int, 2> fresh,
                                                   const std::vector<std::vector<int32_t>>& tables) {
  TwoSequenceAttention a{num_heads, num_kv_heads, dim, cached, fresh, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}};
  const int row = num_kv_heads * dim;
  for (int s = 0; s < 2; ++s) {
    a.full_k.push_back(random_values((cached[s] + fresh[s]) * row, 10 + s));
    a.full_v.push_back(random_values((cached[s] + fresh[s]) * row, 20 + s));
    a.queries.push_back(random_values(fresh[s] * num_heads * dim, 30 + s));
  }
  a.prefix.token_ids.assign(cached[0], 0);
  a.prefix.sequences.push_back({0, cached[0], {tables[0]}});
  a.prefix_k.assign(a.full_k[0].begin(), a.full_k[0].begin() + cached[0] * row);
  a.prefix_v.assign(a.full_v[0].begin(), a.full_v[0].begin() + cached[0] * row);
  for (int s = 0; s < 2; ++s) {
    a.step.token_ids.insert(a.step.token_ids.end(), fresh[s], 0);
    a.step.sequences.push_back({cached[s], fresh[s], {tables[s]}});
    a.k.insert(a.k.end(), a.full_k[s].begin() + cached[s] * row, a.full_k[s].end());
    a.v.insert(a.v.end(), a.full_v[s].begin() + cached[s] * row, a.full_v[s].end());
    a.q.insert(a.q.end(), a.queries[s].begin(), a.queries[s].end());
  }
  return a;
}

}  // namespace tern::testing
