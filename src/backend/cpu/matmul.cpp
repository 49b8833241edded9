#include "backend/cpu/matmul.h"

#include "backend/cpu/cpu_isa.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>
#include <cstring>

namespace tern::cpu {

namespace {

// Rows of x and of w handled by one micro-kernel call; sized so the accumulators fit the vector registers.
constexpr int kRowTile = 4;
constexpr int kColTileAvx2 = 2;
constexpr int kColTileAvx512 = 4;
// Weight rows per parallel task: large enough to amortize scheduling, small enough to stay in L2 with x.
constexpr int64_t kColBlock = 16;

float scalar_weight(const uint16_t* w, int64_t i) {
  uint32_t bits = static_cast<uint32_t>(w[i]) << 16;
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}
float scalar_weight(const float* w, int64_t i) { return w[i]; }

// ---- AVX2 ----
__attribute__((target("avx2,fma"))) inline __m256 load8(const uint16_t* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
__attribute__((target("avx2,fma"))) inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }

__attribute__((target("avx2,fma"))) inline float hsum8(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v);
  const __m128 hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <int R, int C, typename W>
__attribute__((target("avx2,fma"))) void tile_avx2(const float* x, int64_t k, const W* w, const float* bias, float* y,
                                                   int64_t y_stride) {
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  const int64_t k_vec = k & ~int64_t{7};
  for (int64_t i = 0; i < k_vec; i += 8) {
    __m256 wv[C];
    for (int c = 0; c < C; ++c) wv[c] = load8(w + c * k + i);
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_loadu_ps(x + r * k + i);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float sum = hsum8(acc[r][c]);
      for (int64_t i = k_vec; i < k; ++i) sum += x[r * k + i] * scalar_weight(w + c * k, i);
      y[r * y_stride + c] = sum + (bias ? bias[c] : 0.0f);
    }
  }
}

// ---- AVX-512 ----
__attribute__((target("avx512f,avx512bw"))) inline __m512 load16(const uint16_t* p) {
  const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}
__attribute__((target("avx512f,avx512bw"))) inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }

template <int R, int C, typename W>
__attribute__((target("avx512f,avx512bw"))) void tile_avx512(const float* x, int64_t k, const W* w,
                                                             const float* bias, float* y, int64_t y_stride) {
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  const int64_t k_vec = k & ~int64_t{15};
  for (int64_t i = 0; i < k_vec; i += 16) {
    __m512 wv[C];
    for (int c = 0; c < C; ++c) wv[c] = load16(w + c * k + i);
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_loadu_ps(x + r * k + i);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float sum = _mm512_reduce_add_ps(acc[r][c]);
      for (int64_t i = k_vec; i < k; ++i) sum += x[r * k + i] * scalar_weight(w + c * k, i);
      y[r * y_stride + c] = sum + (bias ? bias[c] : 0.0f);
    }
  }
}

// Dispatches a tile of `rows` x `cols` (each at most the tile size) to the instantiation of that size.
template <typename W, bool kAvx512>
void tile(int rows, int cols, const float* x, int64_t k, const W* w, const float* bias, float* y, int64_t y_stride) {
  constexpr int kCols = kAvx512 ? kColTileAvx512 : kColTileAvx2;
  using Fn = void (*)(const float*, int64_t, const W*, const float*, float*, int64_t);
  static constexpr auto table = []<int... I>(std::integer_sequence<int, I...>) {
    if constexpr (kAvx512) {
      return std::array<Fn, sizeof...(I)>{&tile_avx512<I / kCols + 1, I % kCols + 1, W>...};
    } else {
      return std::array<Fn, sizeof...(I)>{&tile_avx2<I / kCols + 1, I % kCols + 1, W>...};
    }
  }(std::make_integer_sequence<int, kRowTile * kCols>{});
  table[(rows - 1) * kCols + (cols - 1)](x, k, w, bias, y, y_stride);
}

template <typename W, bool kAvx512>
void matmul(const float* x, int64_t num_rows, int64_t k, const W* w, int64_t n, const float* bias, float* y) {
  constexpr int kCols = kAvx512 ? kColTileAvx512 : kColTileAvx2;
  const int64_t num_col_blocks = (n + kColBlock - 1) / kColBlock;
  const int64_t num_row_tiles = (num_rows + kRowTile - 1) / kRowTile;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t rt = 0; rt < num_row_tiles; ++rt) {
    for (int64_t cb = 0; cb < num_col_blocks; ++cb) {
      const int64_t r0 = rt * kRowTile;
      const int rows = static_cast<int>(std::min<int64_t>(kRowTile, num_rows - r0));
      const int64_t c_end = std::min(n, (cb + 1) * kColBlock);
      for (int64_t c0 = cb * kColBlock; c0 < c_end; c0 += kCols) {
        const int cols = static_cast<int>(std::min<int64_t>(kCols, c_end - c0));
        tile<W, kAvx512>(rows, cols, x + r0 * k, k, w + c0 * k, bias ? bias + c0 : nullptr, y + r0 * n + c0, n);
      }
    }
  }
}

bool use_avx512() { return cpu_isa() == CpuIsa::kAvx512; }

}  // namespace

void matmul_bf16(const float* x, int64_t num_rows, int64_t k, const uint16_t* w, int64_t n, const float* bias,
                 float* y) {
  if (use_avx512()) matmul<uint16_t, true>(x, num_rows, k, w, n, bias, y);
  else matmul<uint16_t, false>(x, num_rows, k, w, n, bias, y);
}

void matmul_f32(const float* x, int64_t num_rows, int64_t k, const float* w, int64_t n, const float* bias, float* y) {
  if (use_avx512()) matmul<float, true>(x, num_rows, k, w, n, bias, y);
  else matmul<float, false>(x, num_rows, k, w, n, bias, y);
}

}  // namespace tern::cpu
