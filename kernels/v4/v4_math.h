#pragma once
// DeepSeek-V4's per-row arithmetic as the CUDA kernels run it, in plain host/device functions so that
// tests/kernels/v4/v4_math_test.cpp checks it on the CPU against the CPU backend: mHC weights (sigmoids and
// Sinkhorn-Knopp), the paged-slot and window-pooling index arithmetic of the compressors, the rotation of one
// float vector, and the order in which the Lightning Indexer ranks entries.
#include <cmath>
#include <cstdint>

#include "common/host_device.h"

namespace tern::kernels::v4 {

TERN_HOST_DEVICE inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// Softmax over n values in place, max-subtracted as torch does.
TERN_HOST_DEVICE inline void softmax_in_place(float* v, int n) {
  float max_v = v[0];
  for (int i = 1; i < n; ++i) max_v = v[i] > max_v ? v[i] : max_v;
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += v[i] = expf(v[i] - max_v);
  for (int i = 0; i < n; ++i) v[i] /= sum;
}

// Each row (column) of an n x n matrix divided by its sum plus eps.
TERN_HOST_DEVICE inline void normalize_rows(float* m, int n, float eps) {
  for (int r = 0; r < n; ++r) {
    float sum = 0.0f;
    for (int c = 0; c < n; ++c) sum += m[r * n + c];
    for (int c = 0; c < n; ++c) m[r * n + c] /= sum + eps;
  }
}
TERN_HOST_DEVICE inline void normalize_columns(float* m, int n, float eps) {
  for (int c = 0; c < n; ++c) {
    float sum = 0.0f;
    for (int r = 0; r < n; ++r) sum += m[r * n + c];
    for (int r = 0; r < n; ++r) m[r * n + c] /= sum + eps;
  }
}

// A collapse weight (streams -> block input) from its mix: hyper_mix_row's first n outputs, which collapse kernels
// also compute themselves.
TERN_HOST_DEVICE inline float hyper_collapse_weight(float mix, float scale, float base, float eps) {
  return sigmoid(mix * scale + base) + eps;
}

// One token's mHC weights from its mixes [width] (width = n: the final head's collapse weights; width = (2 + n) * n:
// collapse weights, expand weights and the n x n stream mix made doubly stochastic), in the CPU reference's order
// of operations: softmax rows plus eps, columns, then (iters - 1) rounds of rows and columns.
TERN_HOST_DEVICE inline void hyper_mix_row(const float* mixes, const float* base, const float* scale, int n,
                                           int width, int sinkhorn_iters, float eps, float* out) {
  for (int i = 0; i < n; ++i) out[i] = hyper_collapse_weight(mixes[i], scale[0], base[i], eps);
  if (width == n) return;
  for (int i = n; i < 2 * n; ++i) out[i] = 2.0f * sigmoid(mixes[i] * scale[1] + base[i]);
  for (int i = 2 * n; i < width; ++i) out[i] = mixes[i] * scale[2] + base[i];
  float* comb = out + 2 * n;
  for (int r = 0; r < n; ++r) {
    softmax_in_place(comb + r * n, n);
    for (int c = 0; c < n; ++c) comb[r * n + c] += eps;
  }
  normalize_columns(comb, n, eps);
  for (int i = 1; i < sinkhorn_iters; ++i) {
    normalize_rows(comb, n, eps);
    normalize_columns(comb, n, eps);
  }
}

// The cache slot of `position` in a sequence whose block table starts at block_tables + table_offset.
TERN_HOST_DEVICE inline int64_t paged_slot(const int32_t* block_tables, int table_offset, int position,
                                           int block_size) {
  const int block = block_tables[table_offset + position / block_size];
  return static_cast<int64_t>(block) * block_size + position % block_size;
}

// The slots pooled into the compressed entry of the window [start, start + rate): that window's slots (their
// second feature halves when overlapping) and, when overlapping and a window precedes it, the previous window's
// slots (their first halves) ahead of them.
struct PoolSource {
  int position;
  int feature_offset;  // into the slot's kv and gate features
};
TERN_HOST_DEVICE inline int num_pool_sources(int start, int rate, bool overlapping) {
  return overlapping && start >= rate ? 2 * rate : rate;
}
TERN_HOST_DEVICE inline PoolSource pool_source(int start, int source, int rate, int entry_dim, bool overlapping) {
  if (overlapping && start >= rate) {
    return source < rate ? PoolSource{start - rate + source, 0} : PoolSource{start + source - rate, entry_dim};
  }
  return {start + source, overlapping ? entry_dim : 0};
}

// Rotates pair `pair` (of rotary_dim / 2) of v, whose rotated dims start at v, at `position`; `inverse` rotates
// by the negative angle. The angle is a float32 product, as transformers computes it.
struct RotarySpec {
  const float* inv_freq = nullptr;  // [rotary_dim / 2]
  int rotary_dim = 0;
  float attention_scaling = 1.0f;
  bool interleaved = false;
  int first_dim = 0;  // first rotated dim of a head
};
TERN_HOST_DEVICE inline void rotate_pair(float* v, int pair, const RotarySpec& rope, float position, bool inverse) {
  const int half = rope.rotary_dim / 2;
  const float angle = position * rope.inv_freq[pair];
  const float cos_v = cosf(angle) * rope.attention_scaling;
  const float sin_v = (inverse ? -sinf(angle) : sinf(angle)) * rope.attention_scaling;
  const int ia = rope.interleaved ? 2 * pair : pair;
  const int ib = rope.interleaved ? 2 * pair + 1 : pair + half;
  const float a = v[ia], b = v[ib];
  v[ia] = a * cos_v - b * sin_v;
  v[ib] = b * cos_v + a * sin_v;
}

// Whether entry (score_a, index_a) ranks ahead of (score_b, index_b) in the indexer's top-k: the larger score
// (NaN largest, as the CPU reference orders them), equal scores to the lower index.
TERN_HOST_DEVICE inline bool ranks_ahead(float score_a, int index_a, float score_b, int index_b) {
  const bool nan_a = score_a != score_a, nan_b = score_b != score_b;
  if (nan_a != nan_b) return nan_a;
  if (!nan_a && score_a != score_b) return score_a > score_b;
  return index_a < index_b;
}

}  // namespace tern::kernels::v4
